//! OpenTSDB configuration: an `opentsdb.conf` Java properties file read
//! as-is, OpenTSDB's defaults, and command-line overrides.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use thiserror::Error;

/// Where OpenTSDB looks for a config file when none is given.
pub const SEARCH_PATHS: [&str; 4] = [
    "./opentsdb.conf",
    "/etc/opentsdb.conf",
    "/etc/opentsdb/opentsdb.conf",
    "/opt/opentsdb/opentsdb.conf",
];

/// rtsdb's own key for the embedded store's directory.
pub const DATA_DIR_KEY: &str = "tsd.storage.data_dir";
pub const DEFAULT_DATA_DIR: &str = "./rtsdb-data";

/// OpenTSDB's defaults (`Config.setDefaults`) for the keys rtsdb reads,
/// except where rtsdb is deliberately safer: bind to loopback.
const DEFAULTS: &[(&str, &str)] = &[
    ("tsd.network.port", "4242"),
    ("tsd.network.bind", "127.0.0.1"),
    ("tsd.network.worker_threads", ""),
    ("tsd.network.tcp_no_delay", "true"),
    ("tsd.network.keep_alive", "true"),
    ("tsd.network.reuse_address", "true"),
    ("tsd.network.backlog", ""),
    // rtsdb: longest telnet line accepted (OpenTSDB's fixed 1024).
    ("tsd.network.max_line_length", "1024"),
    ("tsd.core.socket.timeout", "0"),
    ("tsd.core.connections.limit", "0"),
    ("tsd.mode", "rw"),
    ("tsd.core.enable_api", "true"),
    ("tsd.core.enable_ui", "true"),
    ("tsd.no_diediedie", "false"),
    ("tsd.core.auto_create_metrics", "false"),
    ("tsd.core.auto_create_tagks", "true"),
    ("tsd.core.auto_create_tagvs", "true"),
    ("tsd.core.tag.allow_specialchars", ""),
    ("tsd.core.timezone", "UTC"),
    ("tsd.core.meta.enable_realtime_ts", "false"),
    ("tsd.core.meta.enable_realtime_uid", "false"),
    ("tsd.core.meta.enable_tsuid_incrementing", "false"),
    ("tsd.core.meta.enable_tsuid_tracking", "false"),
    ("tsd.core.preload_uid_cache", "false"),
    ("tsd.core.preload_uid_cache.max_entries", "300000"),
    ("tsd.core.stats_with_port", "false"),
    ("tsd.core.tree.enable_processing", "false"),
    ("tsd.core.bulk.allow_out_of_order_timestamps", "false"),
    ("tsd.storage.flush_interval", "1000"),
    // rtsdb: points held in memory before hours are flushed early.
    ("tsd.storage.buffer.max_points", "2000000"),
    // rtsdb: WAL bytes on disk that trigger a full flush (checkpoint).
    ("tsd.storage.wal.max_bytes", "536870912"),
    // rtsdb: free bytes on the data directory's disk below which writes
    // are refused (0: no floor); 16 MiB leaves room for a WAL batch and
    // the engine's journal to get out of it (docs/durability.md).
    ("tsd.storage.min_free_bytes", "16777216"),
    ("tsd.storage.enable_compaction", "true"),
    ("tsd.storage.fix_duplicates", "true"),
    ("tsd.storage.enable_appends", "false"),
    ("tsd.storage.max_tags", "8"),
    // rtsdb: labels a remote-written series may carry (telnet and
    // /api/put keep tsd.storage.max_tags).
    ("tsd.prometheus.max_labels", "64"),
    // rtsdb: InfluxDB line protocol (docs/ingest.md): the separator of
    // measurement and field in a metric name, and the tag the database or
    // bucket is kept as (empty: not kept).
    ("tsd.influx.separator", "."),
    ("tsd.influx.db_tag", ""),
    // rtsdb: the Graphite plaintext port (empty: off) and its path
    // templates (docs/ingest.md).
    ("tsd.network.graphite.port", ""),
    ("tsd.network.graphite.user", ""),
    ("tsd.graphite.templates", ""),
    // rtsdb: OpenTelemetry metrics (OTLP/HTTP, docs/otlp.md).
    ("tsd.otlp.prometheus_names", "false"),
    ("tsd.otlp.resource_attributes", ""),
    ("tsd.otlp.scope_attributes", ""),
    ("tsd.otlp.delta.max_series", "100000"),
    // rtsdb: cardinality limits on new series (0: none).
    ("tsd.storage.series.max_new_per_hour", "0"),
    ("tsd.storage.series.max_total", "0"),
    ("tsd.storage.salt.width", "0"),
    ("tsd.storage.salt.buckets", "20"),
    ("tsd.storage.uid.width.metric", "3"),
    ("tsd.storage.uid.width.tagk", "3"),
    ("tsd.storage.uid.width.tagv", "3"),
    ("tsd.storage.hbase.data_table", "tsdb"),
    ("tsd.storage.hbase.uid_table", "tsdb-uid"),
    ("tsd.storage.hbase.meta_table", "tsdb-meta"),
    ("tsd.storage.hbase.tree_table", "tsdb-tree"),
    ("tsd.http.show_stack_trace", "true"),
    ("tsd.http.request.enable_chunked", "true"),
    ("tsd.http.request.max_chunk", "67108864"),
    // rtsdb: bytes of request bodies held at once (0: no limit); empty:
    // four times tsd.http.request.max_chunk.
    ("tsd.http.request.max_inflight_bytes", ""),
    // rtsdb: milliseconds a request waits for that budget before a 503.
    ("tsd.http.request.max_inflight_wait", "10000"),
    ("tsd.http.request.cors_domains", ""),
    (
        "tsd.http.request.cors_headers",
        "Authorization, Content-Type, Accept, Origin, User-Agent, DNT, Cache-Control, X-Mx-ReqToken, Keep-Alive, X-Requested-With, If-Modified-Since",
    ),
    ("tsd.http.query.allow_delete", "false"),
    ("tsd.http.header_tag", ""),
    ("tsd.query.timeout", "0"),
    ("tsd.query.filter.expansion_limit", "4096"),
    ("tsd.query.skip_unresolved_tagvs", "false"),
    ("tsd.query.allow_simultaneous_duplicates", "true"),
    ("tsd.query.limits.bytes.default", "0"),
    ("tsd.query.limits.data_points.default", "0"),
    ("tsd.rpc.telnet.return_errors", "true"),
    ("tsd.stats.canonical", "false"),
    ("tsd.http.staticroot", ""),
    ("tsd.http.cachedir", ""),
    (DATA_DIR_KEY, DEFAULT_DATA_DIR),
    ("tsd.storage.row_encoding", "compressed"),
    ("tsd.rollups.enable", "false"),
    ("tsd.rollups.config", ""),
    ("tsd.rollups.tag_raw", "false"),
    ("tsd.rollups.agg_tag_key", "_aggregate"),
    ("tsd.rollups.raw_agg_tag_value", "RAW"),
    ("tsd.rollups.block_derived", "true"),
    ("tsd.rollups.split_query.enable", "false"),
    // rtsdb: rollups computed from raw points as hours are sealed
    // (docs/rollups.md).
    ("tsd.rollups.auto", "false"),
    // rtsdb: block cache added for the rollup tables, MiB (docs/rollups.md).
    ("tsd.rollups.cache_mb", "64"),
    // rtsdb: where rows live: `embedded` or `clickhouse` (a ClickHouse
    // cluster coordinated by ZooKeeper; docs/scale-out.md).
    ("tsd.storage.backend", "embedded"),
    ("tsd.storage.clickhouse.endpoints", ""),
    ("tsd.storage.clickhouse.cluster", ""),
    ("tsd.storage.clickhouse.database", "rtsdb"),
    ("tsd.storage.clickhouse.flush_ms", "1000"),
    // rtsdb: MB of data rows a cluster TSD keeps after reading them, kept
    // coherent through ZooKeeper (docs/scale-out.md "The read cache").
    ("tsd.storage.clickhouse.read_cache_mb", "128"),
    ("tsd.storage.zk_quorum", ""),
    ("tsd.storage.zk_basedir", "/rtsdb"),
    // rtsdb: ZooKeeper timeouts (ms) and UIDs reserved per counter update
    // on a cluster (src/coord/client.rs, docs/cluster.md).
    ("tsd.storage.zk_session_timeout", "10000"),
    ("tsd.storage.zk_timeout", "8000"),
    ("tsd.storage.zk_lock_timeout", "30000"),
    ("tsd.storage.zk_uid_block", "64"),
    // rtsdb: `POST /api/backup` (off: it writes files on the server), and
    // the only directory it writes in ("": DATA_DIR/backups).
    ("tsd.backup.enable", "false"),
    ("tsd.backup.dir", ""),
    // Authentication (OpenTSDB's enable key; the rest rtsdb's, docs/security.md).
    ("tsd.core.authentication.enable", "false"),
    ("tsd.core.authentication.users_file", ""),
    ("tsd.core.authentication.open_version", "false"),
    // TLS on the one port (docs/security.md).
    ("tsd.network.tls.cert_file", ""),
    ("tsd.network.tls.key_file", ""),
    ("tsd.network.tls.required", "false"),
];

/// Keys that only mean something with HBase/ZooKeeper; accepted and
/// reported once as ignored.
const HBASE_ONLY_PREFIXES: &[&str] = &[
    "tsd.storage.hbase.zk_",
    "hbase.",
    "tsd.storage.hbase.scanner",
    "tsd.network.async_io",
];

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {cause}")]
    Read { path: String, cause: std::io::Error },
    #[error("config key {key} = '{value}': {reason}")]
    BadValue {
        key: String,
        value: String,
        reason: String,
    },
}

impl ConfigError {
    /// A key whose value cannot be used, and why.
    pub fn bad_value(
        key: &str,
        value: impl Into<String>,
        reason: impl Into<String>,
    ) -> ConfigError {
        ConfigError::BadValue {
            key: key.into(),
            value: value.into(),
            reason: reason.into(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    values: BTreeMap<String, String>,
    /// Keys set by a file or flag rather than defaulted.
    explicit: BTreeSet<String>,
    /// The file read, if any.
    pub file: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            values: DEFAULTS
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            explicit: BTreeSet::new(),
            file: None,
        }
    }
}

impl Config {
    /// Loads `path`, or the first file of OpenTSDB's search path that
    /// exists, or just the defaults.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let mut cfg = Config::default();
        let found = match path {
            Some(p) => Some(p.to_path_buf()),
            None => SEARCH_PATHS.iter().map(PathBuf::from).find(|p| p.is_file()),
        };
        if let Some(p) = found {
            let text = std::fs::read_to_string(&p).map_err(|cause| ConfigError::Read {
                path: p.display().to_string(),
                cause,
            })?;
            for (k, v) in parse_properties(&text) {
                cfg.set(&k, &v);
            }
            cfg.report_ignored();
            cfg.file = Some(p);
        }
        Ok(cfg)
    }

    fn report_ignored(&self) {
        let ignored: Vec<&String> = self
            .explicit
            .iter()
            .filter(|k| HBASE_ONLY_PREFIXES.iter().any(|p| k.starts_with(p)))
            .collect();
        if !ignored.is_empty() {
            tracing::info!(keys = ?ignored, "config keys for HBase/ZooKeeper have no effect with embedded storage");
        }
        let unknown: Vec<&String> = self
            .explicit
            .iter()
            .filter(|k| !DEFAULTS.iter().any(|(d, _)| d == k))
            .filter(|k| !HBASE_ONLY_PREFIXES.iter().any(|p| k.starts_with(p)))
            .collect();
        if !unknown.is_empty() {
            tracing::info!(keys = ?unknown, "config keys not used by rtsdb (accepted, no effect)");
        }
    }

    /// Sets a key as a command-line flag or file would.
    pub fn set(&mut self, key: &str, value: &str) {
        self.values.insert(key.to_string(), value.to_string());
        self.explicit.insert(key.to_string());
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(|s| s.as_str())
    }

    pub fn get_string(&self, key: &str) -> &str {
        self.get(key).unwrap_or("")
    }

    pub fn is_set(&self, key: &str) -> bool {
        self.explicit.contains(key)
    }

    /// OpenTSDB's `getBoolean`: `true`, `1` and `yes` are true.
    pub fn get_bool(&self, key: &str) -> bool {
        matches!(
            self.get(key)
                .map(|v| v.trim().to_ascii_lowercase())
                .as_deref(),
            Some("true" | "1" | "yes")
        )
    }

    pub fn get_int<T: std::str::FromStr>(&self, key: &str) -> Result<Option<T>, ConfigError>
    where
        T::Err: std::fmt::Display,
    {
        match self.get(key).map(str::trim) {
            None | Some("") => Ok(None),
            Some(v) => v
                .parse()
                .map(Some)
                .map_err(|e: T::Err| ConfigError::bad_value(key, v, e.to_string())),
        }
    }

    /// Every key and value (`/api/config`).
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn data_dir(&self) -> PathBuf {
        PathBuf::from(self.get(DATA_DIR_KEY).unwrap_or(DEFAULT_DATA_DIR))
    }

    /// A number only if the key was set (file or flag), not defaulted:
    /// layout keys count only when set explicitly.
    pub fn explicit_int<T: std::str::FromStr>(&self, key: &str) -> Result<Option<T>, ConfigError>
    where
        T::Err: std::fmt::Display,
    {
        if self.is_set(key) {
            self.get_int(key)
        } else {
            Ok(None)
        }
    }
}

/// Parses Java properties text: `key=value`, `key: value` or `key value`,
/// `#`/`!` comments, backslash line continuations and escapes.
pub fn parse_properties(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let mut logical = line.trim_start().to_string();
        if logical.is_empty() || logical.starts_with('#') || logical.starts_with('!') {
            continue;
        }
        while ends_with_odd_backslashes(&logical) {
            logical.pop();
            match lines.next() {
                Some(next) => logical.push_str(next.trim_start()),
                None => break,
            }
        }
        let (key, value) = split_key_value(&logical);
        out.push((unescape(&key), unescape(value.trim_start())));
    }
    out
}

fn ends_with_odd_backslashes(s: &str) -> bool {
    s.chars().rev().take_while(|&c| c == '\\').count() % 2 == 1
}

fn split_key_value(line: &str) -> (String, &str) {
    let mut key = String::new();
    let mut chars = line.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                key.push(c);
                if let Some((_, n)) = chars.next() {
                    key.push(n);
                }
            }
            '=' | ':' => return (key, &line[i + 1..]),
            ' ' | '\t' => {
                let rest = line[i..].trim_start();
                let rest = rest
                    .strip_prefix('=')
                    .or_else(|| rest.strip_prefix(':'))
                    .unwrap_or(rest);
                return (key, rest);
            }
            _ => key.push(c),
        }
    }
    (key, "")
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\u{c}'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                if let Some(ch) = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    out.push(ch);
                }
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_syntax() {
        let text = "# comment\n! also\ntsd.network.port = 4243\ntsd.core.auto_create_metrics:true\nkey value with spaces\nmulti = a\\\n    b\nesc = tab\\there\n\n";
        let p = parse_properties(text);
        assert_eq!(
            p,
            vec![
                ("tsd.network.port".into(), "4243".into()),
                ("tsd.core.auto_create_metrics".into(), "true".into()),
                ("key".into(), "value with spaces".into()),
                ("multi".into(), "ab".into()),
                ("esc".into(), "tab\there".into()),
            ]
        );
    }

    #[test]
    fn defaults_and_overrides() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("opentsdb.conf");
        std::fs::write(
            &file,
            "tsd.core.auto_create_metrics = true\ntsd.storage.uid.width.tagv=4\ntsd.storage.hbase.zk_quorum=zk1\n",
        )
        .unwrap();
        let cfg = Config::load(Some(&file)).unwrap();
        assert_eq!(cfg.get("tsd.core.auto_create_metrics"), Some("true"));
        assert_eq!(
            cfg.explicit_int::<u8>("tsd.storage.uid.width.tagv")
                .unwrap(),
            Some(4)
        );
        assert_eq!(
            cfg.explicit_int::<u8>("tsd.storage.uid.width.metric")
                .unwrap(),
            None
        );
        assert_eq!(cfg.get("tsd.network.port"), Some("4242"));
        assert!(Config::load(Some(Path::new("/nonexistent/opentsdb.conf"))).is_err());
    }
}
