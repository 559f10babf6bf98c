//! The query engine's options, built once at start (by the server from
//! `opentsdb.conf`) and handed to every [`QueryContext`](super::QueryContext),
//! the result cache's among them.

use chrono_tz::Tz;

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

/// `tsd.query.cache.max_bytes` unset: 64 MiB, room for about fifty
/// 1,000-series one-hour dashboards.
pub(crate) const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// `tsd.query.cache.settle_ms` unset: points up to a minute late (a
/// client's batching, clock skew) land in the recomputed tail instead of
/// invalidating what is cached.
pub(crate) const DEFAULT_SETTLE_MS: u64 = 60_000;

/// The cache's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheOptions {
    /// Most bytes the entries may hold; 0 turns the cache off.
    pub max_bytes: u64,
    /// How far behind "now" the settled boundary stays, ms.
    pub settle_ms: u64,
}

impl Default for CacheOptions {
    fn default() -> Self {
        CacheOptions {
            max_bytes: DEFAULT_MAX_BYTES,
            settle_ms: DEFAULT_SETTLE_MS,
        }
    }
}
