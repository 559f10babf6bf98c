//! Cluster coordination through ZooKeeper (the `clickhouse` backend;
//! docs/cluster.md has the znode layout and what each fault does):
//!
//! - [`client`]: one session per process, usable from blocking code,
//!   every request bounded in time; its options (`tsd.storage.zk_*`).
//! - [`uid`]: [`ZkUidStore`], UID mappings shared by every TSD, counters
//!   reserved in blocks, renames and deletes seen through watches.
//! - [`lock`]: [`ZkCoordinator`], the storage layer's cluster-wide locks
//!   and the write-once layout record.
//! - [`names`]: where each of these lives, under `tsd.storage.zk_basedir`.

pub mod client;
pub mod lock;
pub mod names;
pub mod uid;

pub use client::{CoordError, ZkClient, ZkOptions};
pub use lock::ZkCoordinator;
pub use uid::ZkUidStore;

/// The storage layer's seam [`ZkCoordinator`] implements, named here so
/// the cluster's coordination is found in one place.
pub use crate::storage::coordinator::{Coordinator, LocalCoordinator};

#[cfg(test)]
mod tests;
