//! The query engine's options, built once at start (by the server from
//! `opentsdb.conf`) and handed to every [`QueryContext`](super::QueryContext).

use chrono_tz::Tz;

use super::cache::CacheOptions;
use super::limits::QueryLimits;

/// What a query run takes from the server's configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QueryOptions {
    /// `tsd.query.timeout`, `tsd.query.limits.*.default`.
    pub limits: QueryLimits,
    /// Zone for absolute dates and calendar downsampling when the query
    /// names none (`tsd.core.timezone`).
    pub default_tz: Tz,
    /// `tsd.query.skip_unresolved_tagvs`.
    pub skip_unresolved_tagvs: bool,
    /// `tsd.http.query.allow_delete`.
    pub allow_delete: bool,
    /// `tsd.query.cache.max_bytes`, `tsd.query.cache.settle_ms`.
    pub cache: CacheOptions,
}

impl Default for QueryOptions {
    /// OpenTSDB's defaults: no limits, UTC, strict tag values, no deletes;
    /// rtsdb's result cache with its defaults.
    fn default() -> Self {
        QueryOptions {
            limits: QueryLimits::default(),
            default_tz: Tz::UTC,
            skip_unresolved_tagvs: false,
            allow_delete: false,
            cache: CacheOptions::default(),
        }
    }
}
