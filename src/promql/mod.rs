//! PromQL, as Prometheus 2.42 evaluates it, over rtsdb's series.
//!
//! - [`value`]: what PromQL computes with: label sets, samples, instant
//!   vectors, range vectors, and the stale marker.
//! - [`storage`]: the one thing the evaluator reads through
//!   ([`Storage`]): series chosen by label matchers, with their samples
//!   in a time range; tests implement it in memory.
//! - [`source`]: the database's implementation of [`Storage`], on the
//!   select-and-read layer the OpenTSDB query engine uses
//!   ([`crate::query::QueryContext`]).
//! - [`memory`]: an in-memory [`Storage`] for tests.
//! - [`engine`]: parses a query (promql-parser) and evaluates it, instant
//!   or over a range of steps.
//! - [`functions`]: the function library, called by the engine with its
//!   arguments evaluated at one step.
//! - [`error`]: errors in Prometheus' terms (`bad_data`, `execution`,
//!   `timeout`, `canceled`, `internal`).

pub mod engine;
pub mod error;
pub mod functions;
pub mod memory;
pub mod source;
pub mod storage;
pub mod value;

pub use engine::{Engine, EngineOptions};
pub use error::{ErrorKind, PromError};
pub use storage::{Storage, StoredSeries};
pub use value::{Labels, QueryValue, Sample};
