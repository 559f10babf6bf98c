//! Rollups and pre-aggregates (OpenTSDB 2.4's `net.opentsdb.rollup`):
//! the typed `tsd.rollups.*` settings, the parsed `tsd.rollups.config`, and the
//! byte layout of rollup rows (docs/format/rollup.md), and how rollup
//! values combine. Writing them is `Db::write_rollup` (a
//! `db::RollupPoint`), reading them `db::RollupSource`; rtsdb's own
//! computed rollups (`tsd.rollups.auto`) are described in docs/rollups.md.

pub mod aggregates;
pub mod codec;
pub mod columns;
pub mod config;
pub mod qualifier;

pub use config::{RollupConfig, RollupConfigError, RollupInterval, SpanUnit};

/// Everything `tsd.rollups.*` sets, when rollups are enabled (read from
/// the configuration by `db::DbOptions::from_config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollupSettings {
    pub config: RollupConfig,
    /// `tsd.rollups.tag_raw` (false): tag rollups of raw data with
    /// `agg_tag_key=raw_agg_tag_value`.
    pub tag_raw: bool,
    /// `tsd.rollups.agg_tag_key` (`_aggregate`).
    pub agg_tag_key: String,
    /// `tsd.rollups.raw_agg_tag_value` (`RAW`).
    pub raw_agg_tag_value: String,
    /// `tsd.rollups.block_derived` (true): refuse `avg` and `dev` rollups
    /// and pre-aggregates, which cannot be combined again.
    pub block_derived: bool,
    /// `tsd.rollups.auto` (rtsdb's own, false): compute sum, count, min and
    /// max of every non-default interval from raw points as hours are
    /// sealed (docs/rollups.md).
    pub auto: bool,
}
