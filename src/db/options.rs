//! The database's typed options, built once from the configuration.
//!
//! Every default is stated here, once; the server and the command line
//! hand these structs down instead of reading configuration strings.

use std::num::NonZeroU64;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::codec::row::{DuplicatePolicy, RowEncoding};
use crate::config::{Config, ConfigError};
use crate::coord::ZkOptions;
use crate::coord::client::QUORUM_KEY;
use crate::histogram::{CONFIG_KEY, Codecs};
use crate::meta::MetaTracking;
use crate::model::NameRules;
use crate::rollup::{RollupConfig, RollupSettings};
use crate::store::StoreOptions;
use crate::store::retention::{Retention, TTL_KEY};
use crate::uid::AutoCreate;
use crate::write::limits::{MAX_NEW_PER_HOUR_KEY, MAX_TOTAL_KEY, SeriesLimits};
use crate::write::wal::WalOptions;

/// Everything [`super::Db::open`] needs.
#[derive(Debug, Clone)]
pub struct DbOptions {
    /// `tsd.storage.data_dir`.
    pub data_dir: PathBuf,
    pub store: StoreOptions,
    /// `tsd.core.auto_create_*`.
    pub auto_create: AutoCreate,
    /// `tsd.core.tag.allow_specialchars`.
    pub name_rules: NameRules,
    pub write: WriteOptions,
    /// `tsd.storage.backend`: where rows, meta, index and trees live.
    pub backend: Backend,
}

/// `tsd.storage.backend`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Backend {
    /// The embedded engine in `tsd.storage.data_dir` (the default).
    #[default]
    Embedded,
    /// A ClickHouse cluster coordinated by ZooKeeper (docs/scale-out.md);
    /// the data directory keeps only this TSD's write-ahead log.
    ClickHouse(ClusterOptions),
}

/// `tsd.storage.clickhouse.*` and `tsd.storage.zk_*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterOptions {
    pub clickhouse: crate::storage::clickhouse::ClickHouseConfig,
    /// ZooKeeper (`tsd.storage.zk_quorum`, `zk_basedir` and the rest):
    /// UIDs, cluster-wide locks and the layout record.
    pub zk: crate::coord::ZkOptions,
}

impl Backend {
    pub fn from_config(c: &Config) -> Result<Backend, ConfigError> {
        match c.get_string("tsd.storage.backend").trim() {
            "" | "embedded" => Ok(Backend::Embedded),
            "clickhouse" => {
                let required = |key: &str| {
                    let v = c.get_string(key).trim().to_string();
                    if v.is_empty() {
                        Err(ConfigError::bad_value(
                            key,
                            "",
                            "must be set when tsd.storage.backend = clickhouse",
                        ))
                    } else {
                        Ok(v)
                    }
                };
                let endpoints: Vec<String> = required("tsd.storage.clickhouse.endpoints")?
                    .split(',')
                    .map(|e| e.trim().to_string())
                    .filter(|e| !e.is_empty())
                    .collect();
                for e in &endpoints {
                    crate::storage::clickhouse::Endpoint::parse(e).map_err(|reason| {
                        ConfigError::bad_value("tsd.storage.clickhouse.endpoints", e, reason)
                    })?;
                }
                let database = match c.get_string("tsd.storage.clickhouse.database").trim() {
                    "" => "rtsdb".to_string(),
                    d => d.to_string(),
                };
                let read_cache_mb = c
                    .get_int::<usize>("tsd.storage.clickhouse.read_cache_mb")?
                    .unwrap_or(128);
                Ok(Backend::ClickHouse(ClusterOptions {
                    clickhouse: crate::storage::clickhouse::ClickHouseConfig {
                        endpoints,
                        cluster: required("tsd.storage.clickhouse.cluster")?,
                        database,
                        read_cache_bytes: read_cache_mb.saturating_mul(1 << 20),
                    },
                    zk: match zk_options(c)? {
                        Some(zk) => zk,
                        None => {
                            required("tsd.storage.zk_quorum")?;
                            unreachable!("an empty quorum is refused above")
                        }
                    },
                }))
            }
            other => Err(ConfigError::bad_value(
                "tsd.storage.backend",
                other,
                "must be 'embedded' or 'clickhouse'",
            )),
        }
    }
}

/// The write path's settings.
#[derive(Debug, Clone)]
pub struct WriteOptions {
    /// `tsd.storage.flush_interval`: the WAL fsync period and flusher tick.
    pub flush_interval: Duration,
    /// Buffered points above which hours are sealed early
    /// (`tsd.storage.buffer.max_points`).
    pub max_buffered_points: usize,
    /// How long after an hour ends an idle series' row stays open.
    pub seal_grace: Duration,
    /// WAL bytes on disk above which everything is flushed (checkpoint;
    /// `tsd.storage.wal.max_bytes`).
    pub wal_max_bytes: u64,
    /// `tsd.storage.min_free_bytes` (16 MiB; 0 turns it off): below this
    /// much free space on the data directory's disk writes are refused,
    /// before the WAL or the engine meet ENOSPC (db/read_only.rs). 16 MiB
    /// is what the TSD itself may still need to get out of the state: a
    /// WAL batch of 4 MiB being written when the floor is crossed, and
    /// the engine's journal and tables for the points it accepted before
    /// (docs/durability.md). VictoriaMetrics' default is 10 MB.
    pub min_free_bytes: u64,
    pub wal: WalOptions,
    /// `tsd.storage.max_tags`.
    pub max_tags: usize,
    /// `tsd.prometheus.max_labels`: labels besides `__name__` a
    /// remote-written series may have (`max_tags` is the put path's).
    pub prometheus_max_labels: usize,
    /// `tsd.storage.series.max_new_per_hour` and `…max_total`.
    pub series_limits: SeriesLimits,
    /// `tsd.core.meta.*`: meta objects and counters kept as points arrive.
    pub meta: MetaTracking,
    /// `tsd.core.tree.enable_processing` (default false): new series
    /// (a TSMeta created as points arrive) go through every enabled tree.
    pub tree_processing: bool,
    /// `tsd.core.histograms.config`: the histogram codecs; `None` (the
    /// key absent, 2.4.1's default) turns histogram writes and queries
    /// off.
    pub histograms: Option<Codecs>,
    /// `tsd.rollups.*` when `tsd.rollups.enable` is on.
    pub rollups: Option<Arc<RollupSettings>>,
    /// On a store other TSDs write too (a cluster,
    /// `tsd.storage.clickhouse.flush_ms`, default 1000 ms): every
    /// buffered point is written out at least this often, open hours
    /// included, so other TSDs see it; rows of many series go out in one
    /// batch, and a `sync` put returns only once its points are written.
    /// Unused on a store only this process writes.
    pub shared_flush: Duration,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            flush_interval: Duration::from_millis(1000),
            max_buffered_points: 2_000_000,
            seal_grace: Duration::from_secs(600),
            wal_max_bytes: 512 << 20,
            min_free_bytes: 16 << 20,
            wal: WalOptions::default(),
            max_tags: 8,
            prometheus_max_labels: crate::write::rules::DEFAULT_MAX_LABELS,
            series_limits: SeriesLimits::default(),
            meta: MetaTracking::default(),
            tree_processing: false,
            histograms: None,
            rollups: None,
            shared_flush: Duration::from_millis(1000),
        }
    }
}

impl DbOptions {
    /// Defaults for a database in `data_dir` (tests, tools).
    pub fn new(data_dir: impl Into<PathBuf>) -> DbOptions {
        DbOptions {
            data_dir: data_dir.into(),
            store: StoreOptions::default(),
            auto_create: AutoCreate::default(),
            name_rules: NameRules::default(),
            write: WriteOptions::default(),
            backend: Backend::Embedded,
        }
    }

    pub fn from_config(c: &Config) -> Result<DbOptions, ConfigError> {
        // The aggregator names are the model's (the query engine's
        // functions); the configuration only names them.
        let rollups =
            rollup_settings(c, |n| crate::model::Aggregator::by_name(n).is_some())?.map(Arc::new);
        let mut store = store_options(c)?;
        if let Some(r) = &rollups {
            let mb = c.get_int::<u64>(ROLLUP_CACHE_KEY)?.unwrap_or(0);
            store.engine.rollup_cache_bytes = mb.saturating_mul(1 << 20);
            // Retention drops a rollup row once its whole span is past.
            let spans = r.config.intervals.iter().flat_map(|i| {
                let span = i.max_row_span_s();
                [(i.table.clone(), span), (i.pre_agg_table.clone(), span)]
            });
            let retention = Arc::try_unwrap(store.retention)
                .unwrap_or_else(|_| unreachable!("just built"))
                .with_rollup_spans(spans);
            store.retention = Arc::new(retention);
        }
        let mut write = write_options(c)?;
        write.rollups = rollups;
        let backend = Backend::from_config(c)?;
        if let Backend::ClickHouse(_) = &backend {
            // Read only for a cluster, the one store others write too.
            if let Some(ms) = c.get_int::<u64>("tsd.storage.clickhouse.flush_ms")? {
                write.shared_flush = Duration::from_millis(ms.max(10));
            }
            // A cluster's flush writes every TSD's buffered points each
            // tick, and several TSDs may write one series: recomputing
            // rollups there would cost a ClickHouse read and write per
            // series per tick and race between TSDs. Refused rather than
            // silently not done (docs/rollups.md).
            if write.rollups.as_deref().is_some_and(|r| r.auto) {
                return Err(ConfigError::bad_value(
                    ROLLUP_AUTO_KEY,
                    "true",
                    "tsd.rollups.auto is not supported with tsd.storage.backend = clickhouse; write rollups through /api/rollup instead",
                ));
            }
        }
        Ok(DbOptions {
            data_dir: c.data_dir(),
            store,
            auto_create: AutoCreate {
                metrics: c.get_bool("tsd.core.auto_create_metrics"),
                tagks: c.get_bool("tsd.core.auto_create_tagks"),
                tagvs: c.get_bool("tsd.core.auto_create_tagvs"),
            },
            name_rules: NameRules::with_special_chars(
                c.get_string("tsd.core.tag.allow_specialchars"),
            ),
            write,
            backend,
        })
    }
}

const ROLLUP_ENABLE_KEY: &str = "tsd.rollups.enable";
const ROLLUP_CONFIG_KEY: &str = "tsd.rollups.config";
const ROLLUP_AUTO_KEY: &str = "tsd.rollups.auto";
/// rtsdb's own: MiB of block cache added for the rollup tables when
/// rollups are on (docs/rollups.md).
const ROLLUP_CACHE_KEY: &str = "tsd.rollups.cache_mb";

/// The `tsd.rollups.*` settings of `c`, or None when `tsd.rollups.enable`
/// is off. `is_aggregator` says whether a lower-case name is an
/// aggregator. A bad configuration is refused with OpenTSDB's message.
fn rollup_settings(
    c: &Config,
    is_aggregator: impl Fn(&str) -> bool,
) -> Result<Option<RollupSettings>, ConfigError> {
    if !c.get_bool(ROLLUP_ENABLE_KEY) {
        return Ok(None);
    }
    let mut text = c.get_string(ROLLUP_CONFIG_KEY).to_string();
    if text.trim().is_empty() {
        return Err(ConfigError::bad_value(
            ROLLUP_CONFIG_KEY,
            "",
            "Rollups were enabled but 'tsd.rollups.config' is null or empty.",
        ));
    }
    // OpenTSDB reads a value ending in `.json` as a file path.
    if text.ends_with(".json") {
        text = std::fs::read_to_string(std::path::Path::new(&text)).map_err(|e| {
            ConfigError::bad_value(
                ROLLUP_CONFIG_KEY,
                &text,
                format!("Failed to open conf file: {text}: {e}"),
            )
        })?;
    }
    let config = RollupConfig::parse(&text, is_aggregator).map_err(|e| {
        ConfigError::bad_value(
            ROLLUP_CONFIG_KEY,
            c.get_string(ROLLUP_CONFIG_KEY),
            e.to_string(),
        )
    })?;
    Ok(Some(RollupSettings {
        config,
        tag_raw: c.get_bool("tsd.rollups.tag_raw"),
        agg_tag_key: c.get_string("tsd.rollups.agg_tag_key").to_string(),
        raw_agg_tag_value: c.get_string("tsd.rollups.raw_agg_tag_value").to_string(),
        block_derived: c.get_bool("tsd.rollups.block_derived"),
        auto: c.get_bool(ROLLUP_AUTO_KEY),
    }))
}

const ZK_BASEDIR_KEY: &str = "tsd.storage.zk_basedir";
const ZK_SESSION_TIMEOUT_KEY: &str = "tsd.storage.zk_session_timeout";
const ZK_TIMEOUT_KEY: &str = "tsd.storage.zk_timeout";
const ZK_LOCK_TIMEOUT_KEY: &str = "tsd.storage.zk_lock_timeout";
const ZK_UID_BLOCK_KEY: &str = "tsd.storage.zk_uid_block";

/// The ZooKeeper options `c` sets (`tsd.storage.zk_*`, each default
/// [`ZkOptions::new`]'s); `None` when no quorum is configured.
pub fn zk_options(c: &Config) -> Result<Option<ZkOptions>, ConfigError> {
    let quorum = c.get_string(QUORUM_KEY).trim();
    if quorum.is_empty() {
        return Ok(None);
    }
    let mut o = ZkOptions::new(quorum);
    let basedir = c.get_string(ZK_BASEDIR_KEY).trim();
    if !basedir.is_empty() {
        if !basedir.starts_with('/') {
            return Err(ConfigError::bad_value(
                ZK_BASEDIR_KEY,
                basedir,
                "must be an absolute znode path",
            ));
        }
        o.basedir = basedir.to_string();
    }
    let ms = |key: &str, default: Duration| -> Result<Duration, ConfigError> {
        match c.get_int::<u64>(key)? {
            Some(0) => Err(ConfigError::bad_value(key, "0", "must be at least 1 ms")),
            Some(v) => Ok(Duration::from_millis(v)),
            None => Ok(default),
        }
    };
    o.session_timeout = ms(ZK_SESSION_TIMEOUT_KEY, o.session_timeout)?;
    o.request_timeout = ms(ZK_TIMEOUT_KEY, o.request_timeout)?;
    o.lock_timeout = ms(ZK_LOCK_TIMEOUT_KEY, o.lock_timeout)?;
    match c.get_int::<u64>(ZK_UID_BLOCK_KEY)? {
        Some(0) => {
            return Err(ConfigError::bad_value(
                ZK_UID_BLOCK_KEY,
                "0",
                "must be at least 1",
            ));
        }
        Some(n) => o.uid_block = n,
        None => {}
    }
    Ok(Some(o))
}

/// `TSDB`'s constructor loads the codecs when the key is present at all:
/// present but empty fails the start (`HistogramCodecManager`), absent
/// leaves histograms off.
fn histogram_codecs(c: &Config) -> Result<Option<Codecs>, ConfigError> {
    let Some(value) = c.get(CONFIG_KEY) else {
        return Ok(None);
    };
    let bad = |reason: String| ConfigError::bad_value(CONFIG_KEY, value, reason);
    if value.trim().is_empty() {
        return Err(bad(format!("Missing configuration '{CONFIG_KEY}'")));
    }
    Codecs::from_config(Some(value.trim())).map_err(|e| bad(e.to_string()))
}

/// Store settings: layout keys count only when set explicitly, so a store
/// created with other widths opens without repeating them.
fn store_options(c: &Config) -> Result<StoreOptions, ConfigError> {
    let explicit_encoding = match c.get_string("tsd.storage.row_encoding").trim() {
        "" => None,
        "compressed" => Some(RowEncoding::Compressed),
        "classic" => Some(RowEncoding::Classic),
        other => {
            return Err(ConfigError::bad_value(
                "tsd.storage.row_encoding",
                other,
                "must be 'compressed' or 'classic'",
            ));
        }
    };
    Ok(StoreOptions {
        metric_width: c.explicit_int("tsd.storage.uid.width.metric")?,
        tagk_width: c.explicit_int("tsd.storage.uid.width.tagk")?,
        tagv_width: c.explicit_int("tsd.storage.uid.width.tagv")?,
        salt_width: c.explicit_int("tsd.storage.salt.width")?,
        salt_buckets: c.explicit_int("tsd.storage.salt.buckets")?,
        // rtsdb resolves duplicates last-write-wins unless the user asks
        // for OpenTSDB's strict behaviour explicitly.
        duplicates: if c.get_bool("tsd.storage.fix_duplicates") {
            DuplicatePolicy::LastWriteWins
        } else {
            DuplicatePolicy::Strict
        },
        encoding: explicit_encoding.unwrap_or_default(),
        explicit_encoding,
        retention: Arc::new(
            Retention::from_entries(c.entries())
                .map_err(|reason| ConfigError::bad_value(TTL_KEY, "", reason))?,
        ),
        engine: Default::default(),
    })
}

fn write_options(c: &Config) -> Result<WriteOptions, ConfigError> {
    let mut o = WriteOptions {
        meta: MetaTracking {
            realtime_uid: c.get_bool("tsd.core.meta.enable_realtime_uid"),
            realtime_ts: c.get_bool("tsd.core.meta.enable_realtime_ts"),
            tsuid_tracking: c.get_bool("tsd.core.meta.enable_tsuid_tracking"),
            tsuid_incrementing: c.get_bool("tsd.core.meta.enable_tsuid_incrementing"),
        },
        tree_processing: c.get_bool("tsd.core.tree.enable_processing"),
        histograms: histogram_codecs(c)?,
        ..WriteOptions::default()
    };
    if let Some(ms) = c.get_int::<u64>("tsd.storage.flush_interval")? {
        o.flush_interval = Duration::from_millis(ms.max(1));
        o.wal.flush_interval = o.flush_interval;
    }
    if let Some(n) = c.get_int::<usize>("tsd.storage.buffer.max_points")? {
        o.max_buffered_points = n.max(1000);
    }
    if let Some(n) = c.get_int::<u64>("tsd.storage.wal.max_bytes")? {
        o.wal_max_bytes = n;
    }
    if let Some(n) = c.get_int::<u64>("tsd.storage.min_free_bytes")? {
        o.min_free_bytes = n;
    }
    if let Some(n) = c.get_int::<usize>("tsd.storage.max_tags")? {
        if n < 1 {
            return Err(ConfigError::bad_value(
                "tsd.storage.max_tags",
                n.to_string(),
                "must be at least 1",
            ));
        }
        o.max_tags = n;
    }
    if let Some(n) = c.get_int::<usize>(crate::write::rules::MAX_LABELS_KEY)? {
        o.prometheus_max_labels = n;
    }
    // 0, like an unset key, is no limit.
    o.series_limits = SeriesLimits {
        max_new_per_hour: c
            .get_int::<u64>(MAX_NEW_PER_HOUR_KEY)?
            .and_then(NonZeroU64::new),
        max_total: c.get_int::<u64>(MAX_TOTAL_KEY)?.and_then(NonZeroU64::new),
    };
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_config_defaults_and_overrides() {
        let mut cfg = Config::default();
        cfg.set("tsd.core.auto_create_metrics", "true");
        cfg.set("tsd.storage.uid.width.tagv", "4");
        let opts = DbOptions::from_config(&cfg).unwrap();
        assert!(opts.auto_create.metrics);
        assert!(opts.auto_create.tagks);
        assert_eq!(opts.store.tagv_width, Some(4));
        assert_eq!(opts.store.metric_width, None);
        assert_eq!(opts.store.duplicates, DuplicatePolicy::LastWriteWins);
        let mut strict = Config::default();
        strict.set("tsd.storage.fix_duplicates", "false");
        assert_eq!(
            DbOptions::from_config(&strict).unwrap().store.duplicates,
            DuplicatePolicy::Strict
        );
        let mut bad = Config::default();
        bad.set("tsd.storage.uid.width.metric", "x");
        assert!(DbOptions::from_config(&bad).is_err());
        let mut tags = Config::default();
        tags.set("tsd.storage.max_tags", "0");
        assert!(DbOptions::from_config(&tags).is_err());
        assert_eq!(
            DbOptions::from_config(&cfg).unwrap().backend,
            Backend::Embedded
        );
    }

    #[test]
    fn cluster_backend_keys() {
        let mut c = Config::default();
        c.set("tsd.storage.backend", "clickhouse");
        let err = DbOptions::from_config(&c).unwrap_err().to_string();
        assert!(err.contains("tsd.storage.clickhouse.endpoints"), "{err}");
        c.set("tsd.storage.clickhouse.endpoints", "http://a:1, http://b:2");
        c.set("tsd.storage.clickhouse.cluster", "rtsdb");
        c.set("tsd.storage.zk_quorum", "a:2181");
        let opts = DbOptions::from_config(&c).unwrap();
        let Backend::ClickHouse(o) = opts.backend else {
            panic!("not the cluster backend");
        };
        assert_eq!(o.clickhouse.endpoints, vec!["http://a:1", "http://b:2"]);
        assert_eq!(o.clickhouse.database, "rtsdb");
        assert_eq!(o.zk.basedir, "/rtsdb");
        assert_eq!(o.zk.quorum, "a:2181");
        assert_eq!(opts.write.shared_flush, Duration::from_millis(1000));
        // Rollups through /api/rollup, yes; computed ones are refused
        // (docs/rollups.md).
        c.set("tsd.rollups.enable", "true");
        c.set(
            "tsd.rollups.config",
            r#"{"aggregationIds":{"sum":0,"count":1},"intervals":[
            {"table":"tsdb","preAggregationTable":"tsdb-agg","interval":"1m","rowSpan":"1h","defaultInterval":true},
            {"table":"r","preAggregationTable":"ra","interval":"1h","rowSpan":"1d"}]}"#,
        );
        assert!(DbOptions::from_config(&c).unwrap().write.rollups.is_some());
        c.set("tsd.rollups.auto", "true");
        let err = DbOptions::from_config(&c).unwrap_err().to_string();
        assert!(
            err.contains("tsd.rollups.auto is not supported with tsd.storage.backend = clickhouse"),
            "{err}"
        );
        c.set("tsd.rollups.enable", "false");
        c.set("tsd.storage.clickhouse.endpoints", "a:1");
        assert!(DbOptions::from_config(&c).is_err());
        c.set("tsd.storage.backend", "hbase");
        assert!(DbOptions::from_config(&c).is_err());
    }

    #[test]
    fn zk_options_come_from_the_config() {
        let mut c = Config::default();
        assert_eq!(zk_options(&c).unwrap(), None);
        c.set("tsd.storage.zk_quorum", "h1:2181,h2:2181");
        let o = zk_options(&c).unwrap().unwrap();
        assert_eq!(o, ZkOptions::new("h1:2181,h2:2181"));
        assert_eq!(o.basedir, "/rtsdb");
        c.set("tsd.storage.zk_basedir", "/prod/tsdb");
        c.set("tsd.storage.zk_uid_block", "1000");
        c.set("tsd.storage.zk_timeout", "2500");
        let o = zk_options(&c).unwrap().unwrap();
        assert_eq!((o.basedir.as_str(), o.uid_block), ("/prod/tsdb", 1000));
        assert_eq!(o.request_timeout, Duration::from_millis(2500));
        c.set("tsd.storage.zk_basedir", "relative");
        assert!(zk_options(&c).is_err());
        c.set("tsd.storage.zk_basedir", "/x");
        c.set("tsd.storage.zk_uid_block", "0");
        assert!(zk_options(&c).is_err());
    }

    #[test]
    fn histogram_codecs_from_config() {
        assert_eq!(
            DbOptions::from_config(&Config::default())
                .unwrap()
                .write
                .histograms,
            None
        );
        let mut on = Config::default();
        on.set(
            CONFIG_KEY,
            r#"{"net.opentsdb.core.SimpleHistogramDecoder": 42}"#,
        );
        let codecs = DbOptions::from_config(&on)
            .unwrap()
            .write
            .histograms
            .unwrap();
        assert_eq!(codecs.simple_id().unwrap(), 42);
        let mut empty = Config::default();
        empty.set(CONFIG_KEY, "");
        let e = DbOptions::from_config(&empty).unwrap_err().to_string();
        assert!(
            e.contains("Missing configuration 'tsd.core.histograms.config'"),
            "{e}"
        );
        let mut bad = Config::default();
        bad.set(
            CONFIG_KEY,
            r#"{"net.opentsdb.core.SimpleHistogramDecoder": 300}"#,
        );
        let e = DbOptions::from_config(&bad).unwrap_err().to_string();
        assert!(e.contains("must be from 0 to 255."), "{e}");
    }
}
