//! Rollups and pre-aggregates (OpenTSDB 2.4's `net.opentsdb.rollup`):
//! the `tsd.rollups.*` settings, the parsed `tsd.rollups.config`, and the
//! byte layout of rollup rows (docs/format/rollup.md), and how rollup
//! values combine. Writing them is `Db::write_rollup` (a
//! `db::RollupPoint`), reading them `db::RollupSource`; rtsdb's own
//! computed rollups (`tsd.rollups.auto`) are described in docs/rollups.md.

pub mod aggregates;
pub mod codec;
pub mod columns;
pub mod config;
pub mod qualifier;

use std::path::Path;

pub use config::{RollupConfig, RollupConfigError, RollupInterval, SpanUnit};

use crate::config::{Config, ConfigError};

pub const ENABLE_KEY: &str = "tsd.rollups.enable";
pub const CONFIG_KEY: &str = "tsd.rollups.config";
pub const AUTO_KEY: &str = "tsd.rollups.auto";
/// rtsdb's own: MiB of block cache added for the rollup tables when
/// rollups are on (docs/rollups.md).
pub const CACHE_KEY: &str = "tsd.rollups.cache_mb";

/// Everything `tsd.rollups.*` sets, when rollups are enabled.
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

impl RollupSettings {
    /// The settings of `c`, or None when `tsd.rollups.enable` is off.
    /// `is_aggregator` says whether a lower-case name is an aggregator.
    /// A bad configuration is refused with OpenTSDB's message.
    pub fn from_config(
        c: &Config,
        is_aggregator: impl Fn(&str) -> bool,
    ) -> Result<Option<RollupSettings>, ConfigError> {
        if !c.get_bool(ENABLE_KEY) {
            return Ok(None);
        }
        let mut text = c.get_string(CONFIG_KEY).to_string();
        if text.trim().is_empty() {
            return Err(ConfigError::bad_value(
                CONFIG_KEY,
                "",
                "Rollups were enabled but 'tsd.rollups.config' is null or empty.",
            ));
        }
        // OpenTSDB reads a value ending in `.json` as a file path.
        if text.ends_with(".json") {
            text = std::fs::read_to_string(Path::new(&text)).map_err(|e| {
                ConfigError::bad_value(
                    CONFIG_KEY,
                    &text,
                    format!("Failed to open conf file: {text}: {e}"),
                )
            })?;
        }
        let config = RollupConfig::parse(&text, is_aggregator).map_err(|e| {
            ConfigError::bad_value(CONFIG_KEY, c.get_string(CONFIG_KEY), e.to_string())
        })?;
        Ok(Some(RollupSettings {
            config,
            tag_raw: c.get_bool("tsd.rollups.tag_raw"),
            agg_tag_key: c.get_string("tsd.rollups.agg_tag_key").to_string(),
            raw_agg_tag_value: c.get_string("tsd.rollups.raw_agg_tag_value").to_string(),
            block_derived: c.get_bool("tsd.rollups.block_derived"),
            auto: c.get_bool(AUTO_KEY),
        }))
    }
}
