//! The query engine: `/api/query` and `/api/query/last` with OpenTSDB
//! 2.4.1's semantics, as a library the HTTP layer wires up.
//!
//! - [`request`]: the `TSQuery` model, POST JSON and GET `m=`/`tsuid=`.
//! - [`aggregator`]: every 2.4 aggregator and its interpolation (kept in
//!   the model, `crate::model::aggregator`, for the layers below).
//! - [`downsample`]: downsampling specs, buckets and fill policies.
//! - [`rate`]: rate of change with counter options.
//! - [`filter`]: tag value filters and the legacy tag syntax.
//! - [`group`]: the group-by merge with interpolation.
//! - [`engine`]: the public API: validating a query, running its
//!   sub-queries (raw, rollup, histogram or cached).
//! - [`context`]: [`QueryContext`], what a query reads from and its
//!   options, built from a `Db`.
//! - [`select`]: resolving a metric and tag filters to series through the
//!   index, and grouping them.
//! - [`pipeline`]: each series' downsample → rate pipeline and a run's
//!   time frame.
//! - [`read`]: the parallel read of selected series into their pipelines.
//! - [`results`]: per-group result assembly (tags, annotations, TSUIDs).
//! - [`stats`]: a sub-query's counters (`showStats`).
//! - [`output`]: the JSON response, byte for byte.
//! - [`cache`]: the result cache for repeated, sliding-window queries.
//! - [`last`]: the `/api/query/last` endpoint.
//! - [`gexp`]: `/api/query/gexp`, functions over sub-queries' results.
//! - [`exp`]: the `/api/query/exp` endpoint (expressions over metrics).
//! - [`rollup`]: sub-queries answered from the rollup tables.
//! - [`limits`]: query limits and timeouts.
//! - [`progress`]: a running query's points read and its cancellation.
//! - [`pool`]: series' output buffers kept from one query for the next.
//! - [`options`]: the options a server builds once and every query uses.
//! - [`error`]: errors carrying OpenTSDB's status and message.
//!
//! The HTTP layer calls [`parse_get`] or [`parse_post`], then [`execute`]
//! with a [`QueryContext`], and writes [`QueryResponse::to_json`] (200) or
//! an error with [`QueryError::status`], [`QueryError::message`] and
//! [`QueryError::details`] in OpenTSDB's error shape.
//!
//! # The select-and-read layer, for any query language
//!
//! The OpenTSDB engine reaches its data through two calls that another
//! query language (PromQL next) calls the same way, with no change to the
//! OpenTSDB engine's files:
//!
//! - [`select::match_series`]: a metric and tag filters (`literal_or`,
//!   `wildcard`, `regexp`, `not_*`: [`filter::TagFilter`]) resolved to the
//!   metric's series through the index; [`select::resolvable`] then drops
//!   series whose tag UIDs were deleted.
//! - [`QueryContext::source`]'s
//!   [`read_tsuids`](crate::store::read::SeriesSource::read_tsuids): those
//!   series' points in a time range, row by row and in time order, stored
//!   rows merged with the write buffer (rollup rows through
//!   [`QueryContext::rollups`], a cached answer's epoch through
//!   [`QueryContext::epochs`]).
//!
//! A PromQL evaluator's vector selector would then be, in outline:
//!
//! ```text
//! let ctx = QueryContext::new(&db, &options);
//! let m = select::match_series(&ctx, metric, &filters, false)?;
//! let (series, _) = select::resolvable(&ctx, m.series)?;
//! ctx.source.read_tsuids(&series, start_ms, end_ms, &mut |i, points| {
//!     // points of series[i], in time order: keep them per series
//!     true
//! })?;
//! ```
//!
//! What PromQL adds there (its own issue): matchers on any label including
//! the name (`__name__=~"…"`, selectors with no metric), `l=""` matching
//! series without `l`, anchored RE2-style regexps, label names and values
//! across metrics in a time range, and skipping stale markers as points
//! are read.

// The aggregators live in the model: rollups (below the query layer)
// validate aggregator names and combine values with them too.
pub(crate) use crate::model::aggregator;
pub mod cache;
pub(crate) mod context;
pub(crate) mod downsample;
pub(crate) mod engine;
pub(crate) mod error;
pub mod exp;
pub(crate) mod filter;
pub(crate) mod gexp;
pub(crate) mod group;
pub(crate) mod histogram;
pub(crate) mod last;
pub(crate) mod limits;
pub(crate) mod options;
pub(crate) mod output;
pub(crate) mod pipeline;
pub(crate) mod pool;
pub(crate) mod progress;
pub(crate) mod rate;
pub(crate) mod read;
pub(crate) mod request;
pub(crate) mod results;
pub(crate) mod rollup;
pub(crate) mod select;
pub(crate) mod stats;

pub use aggregator::{AGGREGATORS, Aggregator};
pub use cache::{CacheStats, QueryCache};
pub use context::QueryContext;
pub use engine::{Prepared, SMALL_QUERY_ROWS, execute, prepare};
pub use error::QueryError;
pub use gexp::{GexpQuery, execute_gexp, parse_gexp};
pub use last::{LastQuery, execute_last, parse_last_get, parse_last_post};
pub use limits::QueryLimits;
pub use options::{CacheOptions, QueryOptions};
pub use output::{QueryResponse, QueryResult};
pub use progress::QueryProgress;
pub use request::{TsQuery, TsSubQuery, parse_get, parse_post};
