//! rtsdb: an OpenTSDB 2.4-compatible time series database.
//!
//! The crate is layered; each module uses only the ones listed below it,
//! and only [`db`] and [`store`] reach the key-value engine
//! (`docs/architecture.md` has the picture and a put and a query traced
//! through it):
//!
//! - [`cli`]: the `tsdb` command line; every command opens a [`db::Db`].
//! - [`tsd`]: the server: one port for telnet and HTTP.
//! - [`query`]: `/api/query` and `/api/query/last` semantics as a library,
//!   reading through [`store::read::SeriesSource`].
//! - [`db`]: the database handle: opens a store and owns its parts; the
//!   only door for appends, reads, deletes, UID and meta operations.
//! - [`mod@write`] (crate-internal): the write path's parts: series cache, write-ahead log,
//!   in-memory hour buffers.
//! - [`store`]: the data rows ([`store::Store`], read
//!   through [`store::read::SeriesSource`]) and a store on disk: its
//!   recorded layout, tables and rows, and the embedded implementations
//!   of that seam and the three below.
//! - [`uid`], [`index`], [`meta`]: UID assignment with caches, the series
//!   index, UIDMeta/TSMeta and the per-series counters, each persisting
//!   through its own trait ([`uid::UidStore`], [`index::IndexStore`],
//!   [`meta::MetaStore`]), so another engine can serve it.
//! - [`tree`]: OpenTSDB's trees: rules and the TreeBuilder that turns a
//!   TSMeta into branches and a leaf, persisting through
//!   [`tree::TreeStore`].
//! - [`coord`]: cluster coordination through ZooKeeper for the cluster
//!   backend: UIDs shared by every TSD ([`coord::ZkUidStore`]), the
//!   storage layer's cluster-wide locks and layout record
//!   ([`coord::ZkCoordinator`]).
//! - [`storage`] (crate-internal): the narrow key-value trait and its engines (fjall, memory).
//! - [`codec`]: OpenTSDB's byte formats (row keys, qualifiers, values,
//!   compacted/append/annotation columns) and rtsdb's compressed column,
//!   documented in `docs/format/`.
//! - [`protocol`]: client protocols as text: telnet framing, words and
//!   `put` lines, value text; shared by the server and `tsdb import`.
//! - [`search`]: the `/api/search` query language over documents
//!   (answered from rtsdb's own data by `Db::search`).
//! - [`rollup`]: `tsd.rollups.*`: the rollup configuration and the
//!   rollup row keys and qualifiers (docs/format/rollup.md).
//! - [`model`]: UIDs, names and their rules, TSUIDs, data points, time,
//!   the one-hour row span.
//! - [`config`]: `opentsdb.conf` as read; typed options are built from it.
//! - [`version`] (crate-internal): build facts reported by `version` and `/api/version`.
//!
//! Errors are `thiserror` types whose message names their cause; such an
//! error does not also hand the cause on as its `source()`, or the binary,
//! which prints the whole chain, would print the cause twice.

// The public surface is curated: what is not reachable from here is
// `pub(crate)`, and the lint keeps it so.
#![warn(unreachable_pub)]
// Module maps name the crate-internal modules too (they are the
// architecture); those links resolve in `cargo doc --document-private-items`.
#![allow(rustdoc::private_intra_doc_links)]

pub mod cli;
pub mod codec;
pub mod config;
pub mod coord;
pub mod db;
pub mod histogram;
pub mod index;
pub mod meta;
pub mod model;
pub(crate) mod parallel;
pub mod protocol;
pub mod query;
pub(crate) mod render;
pub mod rollup;
pub mod search;
pub(crate) mod storage;
pub mod store;
pub mod tree;
pub mod tsd;
pub mod uid;
pub(crate) mod version;
pub(crate) mod write;
