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
//! - [`engine`]: selecting series from the index and running a query.
//! - [`output`]: the JSON response, byte for byte.
//! - [`cache`]: the result cache for repeated, sliding-window queries.
//! - [`last`]: the `/api/query/last` endpoint.
//! - [`gexp`]: `/api/query/gexp`, functions over sub-queries' results.
//! - [`exp`]: the `/api/query/exp` endpoint (expressions over metrics).
//! - [`rollup`]: sub-queries answered from the rollup tables.
//! - [`limits`]: query limits and timeouts.
//! - [`pool`]: series' output buffers kept from one query for the next.
//! - [`options`]: the options a server builds once and every query uses.
//! - [`error`]: errors carrying OpenTSDB's status and message.
//!
//! The HTTP layer calls [`parse_get`] or [`parse_post`], then [`execute`]
//! with a [`QueryContext`], and writes [`QueryResponse::to_json`] (200) or
//! an error with [`QueryError::status`], [`QueryError::message`] and
//! [`QueryError::details`] in OpenTSDB's error shape.

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
pub use request::{TsQuery, TsSubQuery, parse_get, parse_post};
