//! rtsdb: an OpenTSDB 2.4-compatible time series database.
//!
//! The crate is layered: each module uses only the ones listed below it
//! (`scripts/check-layers` checks this and that no two files use each
//! other in a loop), and only [`store`] calls the storage engine, through
//! [`storage`]'s seam (the layers above name only its value types: errors,
//! durability, the ClickHouse settings). `docs/architecture.md` has the
//! picture and a put and a query traced through it. Top to bottom:
//!
//! - [`cli`]: the `tsdb` command line; every command opens a [`db::Db`].
//! - [`tsd`]: the server: one port for telnet and HTTP.
//! - [`promql`]: PromQL as Prometheus 2.42 evaluates it (the Prometheus
//!   HTTP API's language), on the same select-and-read layer.
//! - [`query`]: OpenTSDB's query language (`/api/query`, `/last`, `/exp`,
//!   `/gexp`) as a library: the engine over a select-and-read layer
//!   ([`query::QueryContext`]) that another query language calls too.
//! - [`db`]: the database handle: opens a store and owns its parts; the
//!   only door for appends, reads, deletes, UID and meta operations.
//! - [`auth`]: users, tokens and roles (docs/security.md): the users
//!   file, credentials read from each protocol, the cached check.
//! - [`mod@write`] (crate-internal): the write path's parts: series cache,
//!   write-ahead log, in-memory hour buffers.
//! - [`coord`]: cluster coordination through ZooKeeper for the cluster
//!   backend: UIDs shared by every TSD ([`coord::ZkUidStore`]), the
//!   storage layer's cluster-wide locks and layout record
//!   ([`coord::ZkCoordinator`]).
//! - [`store`]: a store: the tables of one deployment laid out on one
//!   engine ([`store::Store`]: recorded layout, data rows, retention,
//!   snapshots, salvage), the read side a query reads through
//!   ([`store::read`]), and the implementations of the persistence traits
//!   of the modules below.
//! - [`tree`]: OpenTSDB's trees: rules and the TreeBuilder that turns a
//!   TSMeta into branches and a leaf, persisting through
//!   [`tree::TreeStore`].
//! - [`search`]: the `/api/search` query language over documents
//!   (answered from rtsdb's own data by `Db::search`).
//! - [`meta`], [`index`], [`uid`]: UIDMeta/TSMeta and the per-series
//!   counters, the series index, UID assignment with caches, each
//!   persisting through its own trait ([`meta::MetaStore`],
//!   [`index::IndexStore`], [`uid::UidStore`]), so another engine can
//!   serve it.
//! - [`storage`] (crate-internal): the engine seam: `KvStore`, a core
//!   sorted key-value trait plus optional capability traits, and its
//!   engines (fjall, ClickHouse, memory).
//! - [`render`] (crate-internal): the PNG plotter `/q` draws with.
//! - [`rollup`]: `tsd.rollups.*`: the rollup configuration and the
//!   rollup row keys, qualifiers and columns (docs/format/rollup.md).
//! - [`protocol`]: each client protocol's parser, testable without a
//!   server: telnet framing, words and `put` lines, the `/api/put` JSON
//!   reader, values as OpenTSDB's Jackson reads them.
//! - [`histogram`]: OpenTSDB 2.4 histograms: codecs and SimpleHistogram.
//! - [`codec`]: OpenTSDB's byte formats (row keys, qualifiers, values,
//!   compacted/append/annotation columns) and rtsdb's compressed column,
//!   documented in `docs/format/`.
//! - [`model`]: UIDs, names and their rules, TSUIDs, data points, time,
//!   the one-hour row span.
//! - [`config`]: `opentsdb.conf` as read; typed options are built from it.
//! - [`parallel`] (crate-internal): jobs run at once on scoped threads.
//! - [`version`] (crate-internal): build facts reported by `version` and
//!   `/api/version`.
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

pub mod auth;
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
pub mod promql;
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
