//! The TSD: one TCP port serving OpenTSDB's telnet-style line protocol and
//! its HTTP API, over the write path.
//!
//! - [`server`]: the listener, protocol detection by first byte,
//!   connection limit, idle timeout, graceful shutdown.
//! - [`telnet`]: line framing and the line commands.
//! - [`http`]: the HTTP API (hyper on the accepted connection).
//! - [`stats`]: counters shared by both protocols, `stats` output.

pub mod http;
pub mod server;
pub mod stats;
pub mod telnet;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::config::{Config, ConfigError};
use crate::db::Db;

pub use server::{Server, ServerHandle};

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
}

/// The server's settings, read once from the configuration.
#[derive(Debug, Clone)]
pub struct TsdConfig {
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
    pub enable_chunked: bool,
    pub cors_domains: Vec<String>,
    pub cors_headers: String,
    pub header_tag: String,
    pub return_errors: bool,
    pub stats_with_port: bool,
    pub worker_threads: Option<usize>,
}

fn bad(key: &str, value: &str, reason: &str) -> ConfigError {
    ConfigError::BadValue {
        key: key.into(),
        value: value.into(),
        reason: reason.into(),
    }
}

impl TsdConfig {
    pub fn from_config(c: &Config) -> Result<TsdConfig, ConfigError> {
        let mode_s = c.get_string("tsd.mode");
        let mode =
            Mode::parse(mode_s).ok_or_else(|| bad("tsd.mode", mode_s, "must be rw, ro or wo"))?;
        let cors_domains: Vec<String> = c
            .get_string("tsd.http.request.cors_domains")
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if cors_domains.len() > 1 && cors_domains.iter().any(|d| d == "*") {
            return Err(bad(
                "tsd.http.request.cors_domains",
                c.get_string("tsd.http.request.cors_domains"),
                "the wildcard * cannot be combined with other domains",
            ));
        }
        Ok(TsdConfig {
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
            max_body_bytes: c.get_int("tsd.http.request.max_chunk")?.unwrap_or(64 << 20),
            enable_chunked: c.get_bool("tsd.http.request.enable_chunked"),
            cors_domains,
            cors_headers: c.get_string("tsd.http.request.cors_headers").to_string(),
            header_tag: c.get_string("tsd.http.header_tag").trim().to_string(),
            return_errors: c.get_bool("tsd.rpc.telnet.return_errors"),
            stats_with_port: c.get_bool("tsd.core.stats_with_port"),
            worker_threads: c.get_int("tsd.network.worker_threads")?,
        })
    }
}

/// What every connection shares.
pub struct TsdState {
    pub config: TsdConfig,
    /// The full configuration (`/api/config`).
    pub settings: Config,
    pub db: Arc<Db>,
    pub stats: stats::ServerStats,
    /// Running and recent queries (`/api/stats/query`).
    pub queries: stats::QueryLog,
    pub hostname: String,
    /// The port actually bound.
    pub port: std::sync::atomic::AtomicU16,
    shutdown: watch::Sender<bool>,
}

impl TsdState {
    pub fn new(config: TsdConfig, settings: Config, db: Arc<Db>) -> TsdState {
        TsdState {
            config,
            settings,
            db,
            stats: stats::ServerStats::default(),
            queries: stats::QueryLog::default(),
            hostname: stats::hostname(),
            port: std::sync::atomic::AtomicU16::new(0),
            shutdown: watch::channel(false).0,
        }
    }

    /// Asks the server to stop (SIGTERM, `diediedie`).
    pub fn request_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    pub fn shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }
}

/// Resolves once shutdown has been requested.
pub async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}
