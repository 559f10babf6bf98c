//! rtsdb: an OpenTSDB 2.4-compatible time series database.
//!
//! The crate is layered; each module only uses the ones listed above it:
//!
//! - [`model`]: UIDs, names and their rules, data points.
//! - [`protocol`]: client protocols as text: telnet framing, words and
//!   `put` lines, value text; shared by the server and `tsdb import`.
//! - [`codec`]: OpenTSDB's byte formats (row keys, qualifiers, values,
//!   compacted/append/annotation columns), documented in `docs/format/`.
//! - [`storage`]: the narrow key-value trait and its engines (fjall, memory).
//! - [`store`]: a store on disk: its recorded layout, tables and rows.
//! - [`uid`]: UID assignment, lookup with caches, rename and delete.
//! - [`index`]: the series index (metric and tag pairs → series).
//! - [`meta`]: UIDMeta and TSMeta objects and the per-series counters.
//! - [`query`]: `/api/query` and `/api/query/last` semantics as a library.
//! - [`config`]: `opentsdb.conf` properties and OpenTSDB's defaults.
//! - [`write`]: the write path: series cache, write-ahead log, in-memory
//!   hour buffers flushed as whole rows, reads merged with the buffers.
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
pub mod protocol;
pub mod query;
pub mod storage;
pub mod store;
pub mod tsd;
pub mod uid;
pub mod version;
pub mod write;
