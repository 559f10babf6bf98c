//! The TSD: one TCP port serving OpenTSDB's telnet-style line protocol and
//! its HTTP API, over the write path.
//!
//! - [`options`]: the typed options, built once from the configuration.
//! - [`server`]: the listener, protocol detection by first byte,
//!   connection limit, idle timeout, graceful shutdown.
//! - [`telnet`]: line framing and the line commands.
//! - [`rpc`]: the commands both protocols serve, one implementation each.
//! - [`http`]: the HTTP API (hyper on the accepted connection): a route
//!   table, one file per endpoint.
//! - [`stats`]: counters shared by both protocols, `stats` output.

pub mod http;
pub mod options;
pub(crate) mod rpc;
pub mod server;
pub mod stats;
pub mod telnet;

use std::sync::Arc;
use tokio::sync::watch;

use crate::config::Config;
use crate::db::Db;

pub use options::{Mode, TsdOptions};
pub use server::{Server, ServerHandle};

/// What every connection shares.
pub struct TsdState {
    /// Built once at start; requests read these, not `settings`.
    pub options: TsdOptions,
    /// The configuration as read, only to echo it (`/api/config`).
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
    pub fn new(options: TsdOptions, settings: Config, db: Arc<Db>) -> TsdState {
        TsdState {
            options,
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

    /// A snapshot of this server's figures and its database's.
    pub fn stats_report(&self) -> stats::Report {
        let port = self
            .options
            .stats_with_port
            .then(|| self.port.load(std::sync::atomic::Ordering::Relaxed));
        stats::Report {
            stats: stats::collect(&self.stats, &self.db),
            host_tags: stats::host_tags(&self.hostname, port),
            now_s: chrono::Utc::now().timestamp().max(0) as u64,
        }
    }
}

/// Resolves once shutdown has been requested.
pub async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}
