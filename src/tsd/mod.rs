//! The TSD: one TCP port serving OpenTSDB's telnet-style line protocol and
//! its HTTP API, over the write path.
//!
//! - [`options`]: the typed options, built once from the configuration.
//! - [`server`]: the listener, protocol detection by first byte,
//!   connection limit, idle timeout, graceful shutdown.
//! - [`telnet`]: line framing and the line commands.
//! - [`telnet_auth`]: `auth` and each command's role, when
//!   authentication is on.
//! - [`tls`]: TLS on the same port, certificates reloaded on SIGHUP.
//! - [`rpc`]: the commands both protocols serve, one implementation each.
//! - [`http`]: the HTTP API (hyper on the accepted connection): a route
//!   table, one file per endpoint.
//! - [`stats`]: counters shared by both protocols, `stats` output.

mod graphite;
pub(crate) mod http;
pub mod logs;
pub(crate) mod options;
pub(crate) mod rpc;
pub(crate) mod server;
pub(crate) mod stats;
pub(crate) mod telnet;
pub(crate) mod telnet_auth;
pub(crate) mod tls;

use std::sync::Arc;
use tokio::sync::watch;

use thiserror::Error;

use crate::config::{Config, ConfigError};
use crate::db::{Db, DbError, DbOptions};

pub use graphite::GraphiteOptions;
pub use http::{GraphOptions, InfluxOptions};
pub use options::{Mode, TsdOptions};
pub use server::{Server, ServerHandle};
pub use tls::{TlsError, TlsOptions};

/// Why a TSD could not start or stop cleanly.
#[derive(Debug, Error)]
pub enum TsdError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot listen on {addr}: {cause}")]
    Bind { addr: String, cause: std::io::Error },
    #[error(transparent)]
    Db(#[from] DbError),
    #[error("closing the database: {0}")]
    Close(String),
    #[error(transparent)]
    Auth(#[from] crate::auth::AuthError),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
}

/// What every connection shares: the options, the database, the counters.
pub struct TsdState {
    /// Built once at start; requests read these, not `settings`.
    pub(crate) options: TsdOptions,
    /// The configuration as read, only to echo it (`/api/config`).
    pub(crate) settings: Config,
    pub(crate) db: Arc<Db>,
    pub(crate) stats: stats::ServerStats,
    /// The memory request bodies in flight may hold.
    pub(crate) bodies: http::BodyBudget,
    /// Running and recent queries (`/api/stats/query`).
    pub(crate) queries: stats::QueryLog,
    /// The last count of `/api/stats/cardinality`, kept a few seconds.
    pub(crate) cardinality: http::cardinality::CardinalityCache,
    /// `/q` results kept for reuse.
    pub(crate) graphs: Arc<http::GraphCache>,
    /// `/api/query`'s result cache (docs/query-cache.md).
    pub(crate) query_cache: crate::query::QueryCache,
    /// Metric metadata sent by remote write (`/prometheus/api/v1/metadata`).
    pub(crate) metadata: http::prometheus::metadata::MetadataStore,
    /// Running totals of OTLP delta series (`POST /v1/metrics`).
    pub(crate) otlp_deltas: crate::protocol::otlp::DeltaState,
    pub(crate) hostname: String,
    /// The port actually bound.
    pub(crate) port: std::sync::atomic::AtomicU16,
    /// The Graphite port actually bound; 0 when it is off.
    pub(crate) graphite_port: std::sync::atomic::AtomicU16,
    /// Checks credentials when `tsd.core.authentication.enable` is on.
    pub(crate) auth: Option<Arc<crate::auth::Authenticator>>,
    /// TLS on the port, when `tsd.network.tls.*` name a certificate.
    pub(crate) tls: Option<Arc<tls::Tls>>,
    shutdown: watch::Sender<bool>,
}

impl TsdState {
    /// Everything a server needs from a configuration: the options built
    /// (and checked) once, and the database it names opened.
    pub fn open(config: Config) -> Result<Arc<TsdState>, TsdError> {
        let options = TsdOptions::from_config(&config)?;
        Self::open_with(options, config)
    }

    /// [`TsdState::open`] with options already built from `config`.
    pub fn open_with(options: TsdOptions, config: Config) -> Result<Arc<TsdState>, TsdError> {
        let db_options = DbOptions::from_config(&config)?;
        let db = Db::open(&db_options)?;
        Ok(Arc::new(TsdState::new(options, config, db)?))
    }

    /// The database this server serves.
    pub fn db(&self) -> &Arc<Db> {
        &self.db
    }

    /// The state over an open database; fails only when authentication is
    /// on and its users file cannot be read.
    pub fn new(options: TsdOptions, settings: Config, db: Arc<Db>) -> Result<TsdState, TsdError> {
        let graphs = http::new_graph_cache(&options.graph);
        let auth = match options.auth.enabled {
            true => Some(Arc::new(crate::auth::Authenticator::open(
                options.auth.users_file.clone(),
            )?)),
            false => None,
        };
        Ok(TsdState {
            auth,
            tls: tls::Tls::open(&options.tls)?.map(Arc::new),
            otlp_deltas: crate::protocol::otlp::DeltaState::new(options.otlp.delta_max_series),
            query_cache: crate::query::QueryCache::new(options.query.cache),
            bodies: http::BodyBudget::new(options.max_inflight_bytes, options.inflight_wait),
            options,
            settings,
            db,
            stats: stats::ServerStats::default(),
            queries: stats::QueryLog::default(),
            cardinality: Default::default(),
            graphs,
            metadata: Default::default(),
            hostname: stats::hostname(),
            port: std::sync::atomic::AtomicU16::new(0),
            graphite_port: std::sync::atomic::AtomicU16::new(0),
            shutdown: watch::channel(false).0,
        })
    }

    /// Reads the TLS certificate and key again (what SIGHUP does); false
    /// when TLS is off. New handshakes use them; open connections stay.
    pub fn reload_tls(&self) -> Result<bool, TsdError> {
        match &self.tls {
            Some(t) => t.reload().map(|()| true).map_err(TsdError::from),
            None => Ok(false),
        }
    }

    /// Asks the server to stop (SIGTERM, `diediedie`).
    pub fn request_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// The Graphite plaintext port the server listens on, if it does
    /// (`tsd.network.graphite.port`; 0 there picks a free one).
    pub fn graphite_port(&self) -> Option<u16> {
        match self
            .graphite_port
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            0 => None,
            p => Some(p),
        }
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
            stats: {
                let mut s = stats::collect(&self.stats, &self.db);
                s.extend(stats::cache(&self.query_cache.stats()));
                s
            },
            host_tags: stats::host_tags(&self.hostname, port),
            now_s: chrono::Utc::now().timestamp().max(0) as u64,
        }
    }
}

/// Resolves once shutdown has been requested.
pub async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}
