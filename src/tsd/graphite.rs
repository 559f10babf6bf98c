//! The Graphite plaintext listener: its own TCP port
//! (`tsd.network.graphite.port`, off unless set), `path value timestamp`
//! lines as collectd's `write_graphite`, statsd and carbon relays send
//! them (parsed by `protocol::graphite`).
//!
//! Each line is a point of the metric its path names, with its Graphite
//! 1.1 tags; `tsd.graphite.templates` may map the path into a shorter
//! metric and tags first. Series are checked by
//! [`SeriesRules::LineProtocol`] (no tag needed, any UTF-8), and the
//! points of what one read brought are logged and buffered together as
//! a telnet connection's puts are (acknowledged by nothing: the protocol
//! has no answers). A bad line is counted (`tsd.rpc.errors`) and logged
//! (the first few of each connection at `warn`, the rest at `debug`) and
//! the connection stays open; a line longer than 16 KiB is one bad line.
//! On shutdown the listener stops accepting and every connection stops
//! after the lines it holds.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use super::stats::inc;
use super::{TsdError, TsdState};
use crate::config::{Config, ConfigError};
use crate::db::{Appended, PendingPoint, SeriesRules};
use crate::model::Value;
use crate::protocol::PointError;
use crate::protocol::graphite::{GraphitePoint, Templates, parse_line};

/// The longest line taken; longer ones are refused whole.
const MAX_LINE: usize = 16 * 1024;
/// Bytes a connection's buffer has room for before each read.
const READ_CHUNK: usize = 64 * 1024;
/// Bad lines of a connection logged at `warn`; the rest at `debug`.
const WARNED_LINES: u64 = 10;

/// `tsd.network.graphite.port` and `tsd.graphite.templates`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GraphiteOptions {
    /// The port to listen on (on `tsd.network.bind`); `None`: off. 0
    /// picks a free one.
    pub port: Option<u16>,
    pub templates: Templates,
    /// `tsd.network.graphite.user`: with authentication on, the user the
    /// port writes as (Graphite lines carry no credentials, so the port
    /// is off with authentication unless an operator names one, for a
    /// trusted network); it must exist and have the `write` role.
    pub user: String,
}

impl GraphiteOptions {
    pub fn from_config(c: &Config) -> Result<GraphiteOptions, ConfigError> {
        let key = "tsd.graphite.templates";
        let spec = c.get_string(key);
        let templates =
            Templates::parse(spec).map_err(|e| ConfigError::bad_value(key, spec, e.to_string()))?;
        Ok(GraphiteOptions {
            port: c.get_int("tsd.network.graphite.port")?,
            templates,
            user: c.get_string("tsd.network.graphite.user").trim().to_string(),
        })
    }
}

/// Binds the Graphite port if one is configured and serves it until
/// shutdown; the task ends once its connections have.
pub(crate) async fn start(state: &Arc<TsdState>) -> Result<Option<JoinHandle<()>>, TsdError> {
    let Some(port) = state.options.graphite.port else {
        return Ok(None);
    };
    if let Some(auth) = &state.auth
        && !writes_as_a_user(auth, &state.options.graphite.user)
    {
        return Ok(None);
    }
    let addr = format!("{}:{port}", state.options.bind);
    let bind_error = |cause| TsdError::Bind {
        addr: addr.clone(),
        cause,
    };
    let listener = TcpListener::bind(&addr).await.map_err(bind_error)?;
    let bound: SocketAddr = listener.local_addr().map_err(bind_error)?;
    state.graphite_port.store(bound.port(), Ordering::Relaxed);
    tracing::info!(addr = %bound, "Graphite plaintext listening");
    Ok(Some(tokio::spawn(accept_loop(state.clone(), listener))))
}

/// Whether the Graphite port may run with authentication on: only as
/// `user`, a user of the users file with the `write` role. Says why not
/// in the log (and the audit log) otherwise.
fn writes_as_a_user(auth: &crate::auth::Authenticator, user: &str) -> bool {
    use crate::auth::{AUDIT_TARGET, Role, Users};
    if user.is_empty() {
        tracing::warn!(
            "Graphite port off: authentication is on and Graphite lines carry no credentials; set tsd.network.graphite.user to a user with the write role to open it on a trusted network"
        );
        return false;
    }
    match Users::load(auth.path()) {
        Ok(users) => match users.get(user) {
            Some(u) if u.roles.has(Role::Write) => {
                tracing::info!(target: AUDIT_TARGET, user, "Graphite port writes as this user");
                true
            }
            _ => {
                tracing::error!(
                    target: AUDIT_TARGET,
                    user,
                    "Graphite port off: tsd.network.graphite.user is no user with the write role"
                );
                false
            }
        },
        Err(e) => {
            tracing::error!(error = %e, "Graphite port off: the users file cannot be read");
            false
        }
    }
}

async fn accept_loop(state: Arc<TsdState>, listener: TcpListener) {
    let mut shutdown = state.shutdown_signal();
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    connections.spawn(serve(state.clone(), stream, peer));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "graphite accept failed");
                    inc(&state.stats.exceptions);
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            // Finished connections are reaped as they end.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = super::stopped(&mut shutdown) => break,
        }
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

/// A connection's peer and its bad lines so far, for the log's rate.
struct Connection {
    peer: SocketAddr,
    bad_lines: u64,
}

impl Connection {
    /// Logs a bad line (the caller counts it in the stats).
    fn bad_line(&mut self, line: &[u8], why: &dyn std::fmt::Display) {
        self.bad_lines += 1;
        let text = String::from_utf8_lossy(&line[..line.len().min(256)]);
        let peer = self.peer;
        if self.bad_lines <= WARNED_LINES {
            tracing::warn!(%peer, line = %text, "graphite: bad line: {why}");
        } else {
            tracing::debug!(%peer, line = %text, "graphite: bad line: {why}");
        }
    }
}

/// Reads a connection's lines until it closes or the server stops.
async fn serve(state: Arc<TsdState>, mut stream: TcpStream, peer: SocketAddr) {
    let mut shutdown = state.shutdown_signal();
    let mut conn = Connection { peer, bad_lines: 0 };
    let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    // Skipping the rest of a line too long to take.
    let mut skipping = false;
    loop {
        buf.reserve(READ_CHUNK);
        let (n, stopping) = tokio::select! {
            r = stream.read_buf(&mut buf) => (r.unwrap_or(0), false),
            _ = super::stopped(&mut shutdown) => (0, true),
        };
        let eof = n == 0;
        // The complete lines; at the connection's end, the last one too
        // (but not a line cut short by shutdown).
        let end = if eof && !stopping {
            buf.len()
        } else {
            match memchr::memrchr(b'\n', &buf) {
                Some(i) => i + 1,
                None if eof => 0,
                None => {
                    if buf.len() > MAX_LINE {
                        if !skipping {
                            inc(&state.stats.illegal_arguments);
                            conn.bad_line(&buf, &format!("longer than {MAX_LINE} bytes"));
                        }
                        skipping = true;
                        buf.clear();
                    }
                    continue;
                }
            }
        };
        let mut lines = &buf[..end];
        if skipping {
            // The tail of the long line, up to its newline.
            let cut = memchr::memchr(b'\n', lines).map_or(lines.len(), |i| i + 1);
            lines = &lines[cut..];
            skipping = false;
        }
        let last = log_lines(&state, &mut conn, lines);
        buf.drain(..end);
        if let Some(a) = last {
            state.db.throttle(a).await;
        }
        if eof {
            return;
        }
    }
}

/// Checks and appends the points of whole lines; the append to wait on.
fn log_lines(state: &TsdState, conn: &mut Connection, lines: &[u8]) -> Option<Appended> {
    let db = &state.db;
    let templates = &state.options.graphite.templates;
    let now_ms = chrono::Utc::now().timestamp_millis();
    let mut batch = Vec::new();
    let mut key = String::new();
    for line in lines.split(|&b| b == b'\n') {
        let trimmed = line.trim_ascii();
        if trimmed.is_empty() {
            continue;
        }
        inc(&state.stats.graphite_points);
        if trimmed.len() > MAX_LINE {
            inc(&state.stats.illegal_arguments);
            conn.bad_line(trimmed, &format!("longer than {MAX_LINE} bytes"));
            continue;
        }
        let point = match parse_line(trimmed) {
            Ok(p) => p,
            Err(e) => {
                inc(&state.stats.illegal_arguments);
                conn.bad_line(trimmed, &e);
                continue;
            }
        };
        match resolve(state, templates, &point, now_ms, &mut key) {
            Ok(p) => batch.push(p),
            Err(e) => {
                state.stats.count_error(&e);
                conn.bad_line(trimmed, &e.message());
            }
        }
    }
    if batch.is_empty() {
        return None;
    }
    match db.append(&batch) {
        Ok(a) => Some(a),
        Err(e) => {
            state.stats.count_error(&e);
            tracing::warn!(points = batch.len(), error = %e.message(), "graphite: points not stored");
            None
        }
    }
}

/// A line's point on its series.
fn resolve(
    state: &TsdState,
    templates: &Templates,
    point: &GraphitePoint<'_>,
    now_ms: i64,
    key: &mut String,
) -> Result<PendingPoint, PointError> {
    let mapped = templates.apply(point.path);
    let metric = mapped.as_ref().map_or(point.path, |m| m.metric.as_str());
    let mut tags: Vec<(&str, &str)> = Vec::with_capacity(point.tags.len() + 4);
    if let Some(m) = &mapped {
        tags.extend(
            m.tags
                .iter()
                .filter(|(k, _)| !point.tags.iter().any(|(own, _)| own == k))
                .map(|(k, v)| (k.as_ref(), v.as_ref())),
        );
    }
    tags.extend_from_slice(&point.tags);
    let ms = point.timestamp_ms.unwrap_or(now_ms);
    super::http::prometheus::timestamp_of(ms).map_err(PointError::IllegalArgument)?;
    let value = Value::Float(point.value);
    let (series, ts) =
        state
            .db
            .resolve_as(SeriesRules::LineProtocol, metric, ms, value, &tags, key)?;
    Ok(PendingPoint { series, ts, value })
}
