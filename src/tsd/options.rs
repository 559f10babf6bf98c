//! The server's typed options, built once at start from the configuration
//! (as `DbOptions` is for the database): every default is stated here
//! once, every value is checked here, and a bad one stops the start with
//! an error naming its key. Requests read these structs, never strings.

use std::path::PathBuf;
use std::time::Duration;

use chrono_tz::Tz;

use crate::config::{Config, ConfigError};
use crate::query::{CacheOptions, QueryLimits, QueryOptions};

/// `tsd.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    ReadWrite,
    ReadOnly,
    WriteOnly,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "rw" => Some(Mode::ReadWrite),
            "ro" => Some(Mode::ReadOnly),
            "wo" => Some(Mode::WriteOnly),
            _ => None,
        }
    }

    pub fn writes(self) -> bool {
        self != Mode::ReadOnly
    }

    pub fn reads(self) -> bool {
        self != Mode::WriteOnly
    }
}

/// Everything the server takes from the configuration.
#[derive(Debug, Clone)]
pub struct TsdOptions {
    pub port: u16,
    pub bind: String,
    pub mode: Mode,
    pub enable_api: bool,
    pub enable_ui: bool,
    pub no_diediedie: bool,
    /// `tsd.core.socket.timeout`; zero = never close idle connections.
    pub socket_timeout: Duration,
    /// `tsd.core.connections.limit`; zero = unlimited.
    pub connections_limit: usize,
    pub max_line_length: usize,
    /// Largest HTTP request body, after decompression.
    pub max_body_bytes: usize,
    /// `tsd.http.request.max_inflight_bytes`: the bytes of request bodies
    /// held at once (sent or inflated text); 0 = no limit. Default: four
    /// bodies of the largest size.
    pub max_inflight_bytes: usize,
    /// `tsd.http.request.max_inflight_wait` (ms): how long a request waits
    /// for that budget before a 503.
    pub inflight_wait: Duration,
    pub enable_chunked: bool,
    pub cors_domains: Vec<String>,
    pub cors_headers: String,
    pub header_tag: String,
    pub return_errors: bool,
    pub stats_with_port: bool,
    pub worker_threads: Option<usize>,
    /// What `/api/query` and `/api/query/last` run with.
    pub query: QueryOptions,
    pub backup: BackupOptions,
    /// `/q`: its cache and `o=` allow-list.
    pub graph: crate::tsd::GraphOptions,
    /// `tsd.http.staticroot`: the files `/s/<file>` serves; none when empty.
    pub staticroot: Option<std::path::PathBuf>,
    /// `tsd.influx.*`: InfluxDB line protocol's mapping onto series.
    pub influx: crate::tsd::InfluxOptions,
    /// `tsd.network.graphite.port`, `tsd.graphite.templates`.
    pub graphite: crate::tsd::GraphiteOptions,
    /// `tsd.core.authentication.*` (docs/security.md).
    pub auth: crate::auth::AuthOptions,
    /// `tsd.network.tls.*` (docs/security.md).
    pub tls: crate::tsd::tls::TlsOptions,
    /// `tsd.otlp.*`: OpenTelemetry metrics (docs/otlp.md).
    pub otlp: OtlpOptions,
}

/// `POST /v1/metrics` (OTLP/HTTP): `tsd.otlp.*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpOptions {
    /// `tsd.otlp.prometheus_names` (off), `tsd.otlp.resource_attributes`
    /// and `tsd.otlp.scope_attributes` (`*` all, else a comma list; empty
    /// by default: `job` and `instance` only).
    pub mapping: crate::protocol::otlp::MappingOptions,
    /// `tsd.otlp.delta.max_series` (100000): delta series made cumulative
    /// at once; each holds its key and running total in memory.
    pub delta_max_series: usize,
}

impl OtlpOptions {
    pub fn from_config(c: &Config) -> Result<OtlpOptions, ConfigError> {
        use crate::protocol::otlp::{MappingOptions, Selection};
        Ok(OtlpOptions {
            mapping: MappingOptions {
                prometheus_names: c.get_bool("tsd.otlp.prometheus_names"),
                resource_attributes: Selection::parse(c.get_string("tsd.otlp.resource_attributes")),
                scope_attributes: Selection::parse(c.get_string("tsd.otlp.scope_attributes")),
            },
            delta_max_series: c.get_int("tsd.otlp.delta.max_series")?.unwrap_or(100_000),
        })
    }
}

/// `POST /api/backup` (rtsdb's own endpoint).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupOptions {
    /// `tsd.backup.enable`: off by default, since a backup writes files
    /// on the server; while off the endpoint does not exist (404, as
    /// OpenTSDB answers for an RPC its configuration leaves out).
    pub enabled: bool,
    /// `tsd.backup.dir` (default DATA_DIR/backups): backups asked for
    /// over the network are written only inside it.
    pub root: PathBuf,
}

impl BackupOptions {
    pub fn from_config(c: &Config) -> BackupOptions {
        BackupOptions {
            enabled: c.get_bool("tsd.backup.enable"),
            root: match c.get_string("tsd.backup.dir").trim() {
                "" => c.data_dir().join("backups"),
                dir => PathBuf::from(dir),
            },
        }
    }
}

impl TsdOptions {
    pub fn from_config(c: &Config) -> Result<TsdOptions, ConfigError> {
        let mode_s = c.get_string("tsd.mode");
        let mode = Mode::parse(mode_s)
            .ok_or_else(|| ConfigError::bad_value("tsd.mode", mode_s, "must be rw, ro or wo"))?;
        let cors_domains: Vec<String> = c
            .get_string("tsd.http.request.cors_domains")
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if cors_domains.len() > 1 && cors_domains.iter().any(|d| d == "*") {
            return Err(ConfigError::bad_value(
                "tsd.http.request.cors_domains",
                c.get_string("tsd.http.request.cors_domains"),
                "the wildcard * cannot be combined with other domains",
            ));
        }
        let max_body_bytes = c.get_int("tsd.http.request.max_chunk")?.unwrap_or(64 << 20);
        Ok(TsdOptions {
            port: c.get_int("tsd.network.port")?.unwrap_or(4242),
            bind: match c.get_string("tsd.network.bind").trim() {
                "" => "127.0.0.1".into(),
                b => b.into(),
            },
            mode,
            enable_api: c.get_bool("tsd.core.enable_api"),
            enable_ui: c.get_bool("tsd.core.enable_ui"),
            no_diediedie: c.get_bool("tsd.no_diediedie"),
            socket_timeout: Duration::from_secs(c.get_int("tsd.core.socket.timeout")?.unwrap_or(0)),
            connections_limit: c.get_int("tsd.core.connections.limit")?.unwrap_or(0),
            max_line_length: c
                .get_int("tsd.network.max_line_length")?
                .unwrap_or(1024)
                .max(16),
            max_body_bytes,
            max_inflight_bytes: c
                .get_int("tsd.http.request.max_inflight_bytes")?
                .unwrap_or(max_body_bytes.saturating_mul(4)),
            inflight_wait: Duration::from_millis(
                c.get_int("tsd.http.request.max_inflight_wait")?
                    .unwrap_or(10_000),
            ),
            enable_chunked: c.get_bool("tsd.http.request.enable_chunked"),
            cors_domains,
            cors_headers: c.get_string("tsd.http.request.cors_headers").to_string(),
            header_tag: c.get_string("tsd.http.header_tag").trim().to_string(),
            return_errors: c.get_bool("tsd.rpc.telnet.return_errors"),
            stats_with_port: c.get_bool("tsd.core.stats_with_port"),
            worker_threads: c.get_int("tsd.network.worker_threads")?,
            query: query_options(c)?,
            backup: BackupOptions::from_config(c),
            graph: crate::tsd::GraphOptions::from_config(c),
            staticroot: match c.get_string("tsd.http.staticroot").trim() {
                "" => None,
                d => Some(d.into()),
            },
            influx: crate::tsd::InfluxOptions::from_config(c)?,
            graphite: crate::tsd::GraphiteOptions::from_config(c)?,
            auth: crate::auth::AuthOptions::from_config(c),
            tls: crate::tsd::tls::TlsOptions::from_config(c)?,
            otlp: OtlpOptions::from_config(c)?,
        })
    }
}

fn query_options(c: &Config) -> Result<QueryOptions, ConfigError> {
    let defaults = QueryOptions::default();
    let limit = |key: &str, default: u64| Ok::<_, ConfigError>(c.get_int(key)?.unwrap_or(default));
    Ok(QueryOptions {
        limits: QueryLimits {
            timeout_ms: limit("tsd.query.timeout", defaults.limits.timeout_ms)?,
            max_bytes: limit("tsd.query.limits.bytes.default", defaults.limits.max_bytes)?,
            max_data_points: limit(
                "tsd.query.limits.data_points.default",
                defaults.limits.max_data_points,
            )?,
            ..defaults.limits
        },
        default_tz: timezone(c)?.unwrap_or(defaults.default_tz),
        skip_unresolved_tagvs: c.get_bool("tsd.query.skip_unresolved_tagvs"),
        allow_delete: c.get_bool("tsd.http.query.allow_delete"),
        cache: CacheOptions {
            // On a cluster other TSDs write too, and their late points do
            // not bump this TSD's change epochs: a cached answer could
            // miss them, so the cache is off there (docs/scale-out.md).
            max_bytes: if c.get_string("tsd.storage.backend").trim() == "clickhouse" {
                0
            } else {
                limit("tsd.query.cache.max_bytes", defaults.cache.max_bytes)?
            },
            settle_ms: limit("tsd.query.cache.settle_ms", defaults.cache.settle_ms)?,
        },
    })
}

/// `tsd.core.timezone`. OpenTSDB 2.4.1 (`DateTime.setDefaultTimezone`,
/// called by the `TSDB` constructor) refuses to start on a zone name it
/// does not know, rather than quietly using another zone; so do we. An
/// empty value counts as unset there (`Config.hasProperty`), and here.
fn timezone(c: &Config) -> Result<Option<Tz>, ConfigError> {
    let name = c.get_string("tsd.core.timezone");
    if name.trim().is_empty() {
        return Ok(None);
    }
    name.trim()
        .parse::<Tz>()
        .map(Some)
        .map_err(|_| ConfigError::bad_value("tsd.core.timezone", name, "Invalid timezone name"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(key: &str, value: &str) -> Result<TsdOptions, ConfigError> {
        let mut c = Config::default();
        c.set(key, value);
        TsdOptions::from_config(&c)
    }

    #[test]
    fn defaults() {
        let o = TsdOptions::from_config(&Config::default()).unwrap();
        assert_eq!(o.port, 4242);
        assert_eq!(o.mode, Mode::ReadWrite);
        assert_eq!(o.query, QueryOptions::default());
        assert!(!o.backup.enabled, "backups over HTTP are off by default");
        assert_eq!(o.backup.root, Config::default().data_dir().join("backups"));
        assert_eq!(
            with("tsd.backup.dir", "/b").unwrap().backup.root,
            PathBuf::from("/b")
        );
    }

    #[test]
    fn query_options_are_typed_once() {
        let o = with("tsd.core.timezone", "America/New_York").unwrap();
        assert_eq!(o.query.default_tz, chrono_tz::America::New_York);
        let o = with("tsd.query.limits.data_points.default", "7").unwrap();
        assert_eq!(o.query.limits.max_data_points, 7);
        assert!(
            with("tsd.http.query.allow_delete", "yes")
                .unwrap()
                .query
                .allow_delete
        );
        assert_eq!(
            with("tsd.core.timezone", "").unwrap().query.default_tz,
            Tz::UTC
        );
    }

    #[test]
    fn bad_values_name_their_key() {
        for (key, value) in [
            ("tsd.core.timezone", "Mars/Olympus_Mons"),
            ("tsd.query.timeout", "soon"),
            ("tsd.mode", "rx"),
        ] {
            let e = with(key, value).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("config key {key} = '{value}'")),
                "{e}"
            );
        }
    }
}
