//! rtsdb: an OpenTSDB 2.4-compatible time series database.
//!
//! The crate is layered; each module only uses the ones listed above it:
//!
//! - [`model`]: UIDs, names and their rules, data points.
//! - [`codec`]: OpenTSDB's byte formats (row keys, qualifiers, values,
//!   compacted/append/annotation columns), documented in `docs/format/`.
//! - [`storage`]: the narrow key-value trait and its engines (fjall, memory).
//! - [`uid`]: UID assignment, lookup with caches, rename and delete, over
//!   the [`uid::UidStore`] trait.
//! - [`index`]: the series index (metric and tag pairs → series), over
//!   the [`index::IndexStore`] trait.
//! - [`meta`]: UIDMeta and TSMeta objects and the per-series counters,
//!   over the [`meta::MetaStore`] trait.
//! - [`store`]: a store on disk: its recorded layout, tables and rows, and
//!   the embedded implementations of the three traits above. Only `store`
//!   and `db` reach a [`storage::KvStore`].
//! - [`config`]: `opentsdb.conf` properties and OpenTSDB's defaults.
//! - [`write`]: the write path: series cache, write-ahead log, in-memory
//!   hour buffers.
//! - [`db`]: the database handle: owns the store, UIDs, index, meta and
//!   the write path; flushes buffers as whole rows, merges reads with them.
//! - [`query`]: `/api/query` and `/api/query/last` semantics as a library.
//! - [`tsd`]: the server: one port for telnet and HTTP.
//! - [`version`]: build facts reported by `version` and `/api/version`.
//! - [`cli`]: the `tsdb` command line.

pub mod cli;
pub mod codec;
pub mod config;
pub mod db;
pub mod index;
pub mod meta;
pub mod model;
pub mod query;
pub mod storage;
pub mod store;
pub mod tsd;
pub mod uid;
pub mod version;
pub mod write;
