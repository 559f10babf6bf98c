//! OpenTSDB's telnet-style line protocol: framing (lines up to
//! `max_line_length` bytes, `\n` or `\r\n`, ISO-8859-1), word splitting on
//! single spaces, the `put` parser with OpenTSDB's exact error lines
//! (`PutDataPointRpc.importDataPoint`), and the other line commands.
//!
//! Parsing is pure (`crate::protocol::telnet`); [`serve`] does the
//! I/O: it reads a chunk, handles every complete line in it, logs the
//! chunk's points in one WAL append, then writes the chunk's replies.
//! Commands other than `put`, `exit` and `help` are the shared ones of
//! `super::rpc`, which HTTP serves too.

use std::sync::Arc;

use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::db::RollupPoint;
use crate::model::Timestamp;
use crate::protocol::PointError;
use crate::protocol::telnet::{
    PutHead, Words, decode_lines, parse_known_point, parse_put, parse_rollup, split_lines,
};
use crate::storage::Durability;
use crate::write::{PendingPoint, SeriesMemo};

use super::rpc::{self, After, Serve};
use super::stats::inc;
use super::telnet_auth::{Gate, TelnetAuth};
use super::{TsdOptions, TsdState};

const READ_CHUNK: usize = 64 * 1024;

/// How a command is run.
#[derive(Clone, Copy)]
enum Run {
    /// Batched by the connection, logged once per chunk read.
    Put,
    /// Written to the rollup tables at once.
    Rollup,
    /// A histogram point (OpenTSDB 2.4), logged and stored at once.
    Histogram,
    /// Sees the points of the lines before it; writes its reply.
    Command(fn(&TsdState, &mut Vec<u8>) -> After),
}

/// The telnet commands, in `help` order, and when each is served. (OpenTSDB
/// registers `put` after `help`, so lists it there; rtsdb's clients and
/// tests have always seen it first.)
const COMMANDS: &[(&str, Serve, Run)] = &[
    ("put", Serve::Writes, Run::Put),
    ("rollup", Serve::Writes, Run::Rollup),
    ("histogram", Serve::Writes, Run::Histogram),
    ("stats", Serve::Always, Run::Command(rpc::stats::telnet)),
    (
        "dropcaches",
        Serve::Always,
        Run::Command(rpc::dropcaches::telnet),
    ),
    ("version", Serve::Always, Run::Command(rpc::version::telnet)),
    ("exit", Serve::Always, Run::Command(|_, _| After::Close)),
    ("help", Serve::Always, Run::Command(help)),
    (
        "diediedie",
        Serve::DieDieDie,
        Run::Command(rpc::diediedie::telnet),
    ),
];

/// The commands this TSD answers, in `help` order.
pub(crate) fn commands(options: &TsdOptions) -> impl Iterator<Item = &'static str> + '_ {
    COMMANDS
        .iter()
        .filter(|(_, serve, _)| serve.on(options))
        .map(|(name, _, _)| *name)
}

fn help(state: &TsdState, out: &mut Vec<u8>) -> After {
    let mut s = String::from("available commands: ");
    for c in commands(&state.options) {
        s.push_str(c);
        s.push(' ');
    }
    s.push('\n');
    out.extend_from_slice(s.as_bytes());
    After::Continue
}

struct Conn<'s> {
    state: &'s TsdState,
    /// Whether this TSD serves `put` (it does unless it is read-only).
    puts_served: bool,
    batch: Vec<PendingPoint>,
    out: Vec<u8>,
    key: String,
    memo: SeriesMemo,
}

impl Conn<'_> {
    fn error_line(&mut self, e: &PointError) {
        self.state.stats.count_error(e);
        if matches!(e, PointError::Storage(_)) && !self.state.options.return_errors {
            return;
        }
        self.out.extend_from_slice(e.telnet_line().as_bytes());
        self.out.push(b'\n');
    }

    /// A `put` line naming a series the connection's memo knows, by its
    /// metric and tag words as written: only its timestamp and value are
    /// parsed, and the line is not split into words. False (nothing done)
    /// for any other line, which then goes through [`Conn::line`]'s
    /// dispatch and [`Conn::put`]'s full parse.
    fn put_known(&mut self, line: &str) -> bool {
        if !self.puts_served {
            return false;
        }
        let Some(head) = PutHead::of(line) else {
            return false;
        };
        if let Some(series) = self
            .state
            .db
            .recall(&mut self.memo, head.metric, head.tags_text)
            && let Some((raw_ts, value)) =
                parse_known_point(&[head.metric, head.timestamp, head.value])
            && let Ok(ts) = Timestamp::from_raw(raw_ts)
        {
            inc(&self.state.stats.rpc_telnet);
            inc(&self.state.stats.telnet_puts);
            self.batch.push(PendingPoint { series, ts, value });
            return true;
        }
        false
    }

    fn put(&mut self, line: &str, words: &[&str]) {
        inc(&self.state.stats.telnet_puts);
        // The tag words as written, from the first to the line's end: with
        // the metric, what the connection's memo knows series by.
        let tags_text = words.get(4).map(|first| {
            let at = first.as_ptr() as usize - line.as_ptr() as usize;
            &line[at..]
        });
        let r = parse_put(words).and_then(|p| {
            let (series, ts) =
                self.state
                    .db
                    .resolve(p.metric, p.timestamp, p.value, &p.tags, &mut self.key)?;
            if let Some(tags_text) = tags_text {
                self.memo.remember(p.metric, tags_text, series.clone());
            }
            Ok(PendingPoint {
                series,
                ts,
                value: p.value,
            })
        });
        match r {
            Ok(p) => self.batch.push(p),
            Err(e) => self.error_line(&e),
        }
    }

    /// `histogram …`: logged and stored by itself, after the points
    /// before it, with 2.4.1's error lines.
    fn histogram(&mut self, words: &[&str]) {
        use rpc::histogram::TelnetHistogram;
        inc(&self.state.stats.telnet_puts);
        inc(&self.state.stats.histogram_points);
        let line = match rpc::histogram::telnet(self.state, words, &mut self.key) {
            TelnetHistogram::Point(p) => match self.state.db.append_histograms(&[p]) {
                Ok(_) => None,
                Err(e) => {
                    self.state.stats.count_error(&e);
                    (!matches!(e, PointError::Storage(_)) || self.state.options.return_errors)
                        .then(|| format!("histogram: HBase error: {}", e.message()))
                }
            },
            TelnetHistogram::Refused(e) => {
                self.state.stats.count_error(&e);
                Some(e.telnet_line_of("histogram"))
            }
            TelnetHistogram::Failed(m) => {
                inc(&self.state.stats.illegal_arguments);
                self.state
                    .options
                    .return_errors
                    .then(|| format!("histogram: HBase error: {m}"))
            }
            TelnetHistogram::Dropped(e) => {
                inc(&self.state.stats.illegal_arguments);
                tracing::warn!(
                    error = e.message(),
                    "histogram line with a malformed bucket list dropped without an answer, as OpenTSDB 2.4.1 does"
                );
                None
            }
        };
        if let Some(l) = line {
            self.out.extend_from_slice(l.as_bytes());
            self.out.push(b'\n');
        }
    }

    /// A `rollup` line: checked, then written to its table at once.
    fn rollup(&mut self, words: &[&str]) {
        inc(&self.state.stats.telnet_puts);
        inc(&self.state.stats.rollup_points);
        let r = parse_rollup(words).and_then(|l| {
            let point = RollupPoint::from(l);
            self.state.db.write_rollup(&point, Durability::Process)
        });
        if let Err(e) = r {
            self.state.stats.count_error(&e);
            if matches!(e, PointError::Storage(_)) && !self.state.options.return_errors {
                return;
            }
            self.out
                .extend_from_slice(e.telnet_line_of("rollup").as_bytes());
            self.out.push(b'\n');
        }
    }

    /// Logs the pending points; returns what to wait for.
    fn flush_batch(&mut self) -> Option<crate::write::Appended> {
        if self.batch.is_empty() {
            return None;
        }
        let r = self.state.db.append(&self.batch);
        self.batch.clear();
        match r {
            Ok(a) => Some(a),
            Err(e) => {
                self.error_line(&e);
                None
            }
        }
    }

    fn line(&mut self, line: &str) -> After {
        if self.put_known(line) {
            return After::Continue;
        }
        inc(&self.state.stats.rpc_telnet);
        let words = Words::split(line);
        let words = words.as_slice();
        let cmd = words[0];
        let run = COMMANDS
            .iter()
            .find(|(name, serve, _)| *name == cmd && serve.on(&self.state.options))
            .map(|(_, _, run)| *run);
        if let Some(Run::Put) = run {
            self.put(line, words);
            return After::Continue;
        }
        if let Some(Run::Rollup) = run {
            self.rollup(words);
            return After::Continue;
        }
        // Other commands see the points before them.
        self.flush_batch();
        if let Some(Run::Histogram) = run {
            self.histogram(words);
            return After::Continue;
        }
        match run {
            Some(Run::Command(f)) => f(self.state, &mut self.out),
            _ => {
                self.out.extend_from_slice(
                    format!("unknown command: {cmd}.  Try `help'.\n").as_bytes(),
                );
                After::Continue
            }
        }
    }
}

/// Serves one telnet connection (over TCP or TLS). The first byte, which
/// chose this protocol, was only peeked at, so it is read again here.
pub(crate) async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    state: Arc<TsdState>,
    mut stream: S,
    peer: SocketAddr,
) {
    let max = state.options.max_line_length;
    let timeout = state.options.socket_timeout;
    let mut shutdown = state.shutdown_signal();
    let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut conn = Conn {
        state: &state,
        puts_served: COMMANDS
            .iter()
            .any(|(name, serve, _)| *name == "put" && serve.on(&state.options)),
        batch: Vec::with_capacity(1024),
        out: Vec::new(),
        key: String::new(),
        memo: SeriesMemo::default(),
    };
    let mut gate = TelnetAuth::default();
    loop {
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        let read = async {
            if timeout.is_zero() {
                Some(stream.read_buf(&mut buf).await)
            } else {
                tokio::time::timeout(timeout, stream.read_buf(&mut buf))
                    .await
                    .ok()
            }
        };
        let n = tokio::select! {
            r = read => match r {
                None => {
                    inc(&state.stats.connections_idle_closed);
                    return;
                }
                Some(Ok(0)) | Some(Err(_)) => return,
                Some(Ok(n)) => n,
            },
            _ = super::stopped(&mut shutdown) => return,
        };
        let _ = n;
        let mut after = After::Continue;
        let consumed = match split_lines(&buf, max) {
            Err(len) => {
                inc(&state.stats.exceptions);
                let msg = format!(
                    "error: line too long ({len} bytes; at most {max} are accepted); closing the connection\n"
                );
                let _ = stream.write_all(&conn.out).await;
                let _ = stream.write_all(msg.as_bytes()).await;
                return;
            }
            Ok((lines, consumed)) => {
                for line in decode_lines(&buf[..consumed], &lines) {
                    if state.auth.is_some() {
                        match gate.check(&state, &line, peer, &mut conn.out).await {
                            Gate::Run => {}
                            Gate::Answered => continue,
                            Gate::Close => {
                                after = After::Close;
                                break;
                            }
                        }
                    }
                    after = conn.line(&line);
                    if after != After::Continue {
                        break;
                    }
                }
                consumed
            }
        };
        buf.drain(..consumed);
        let appended = conn.flush_batch();
        if !conn.out.is_empty() {
            if stream.write_all(&conn.out).await.is_err() {
                return;
            }
            conn.out.clear();
        }
        if let Some(a) = appended {
            state.db.throttle(a).await;
        }
        match after {
            After::Continue => {}
            After::Close => return,
            After::Shutdown => {
                let _ = stream.flush().await;
                state.request_shutdown();
                return;
            }
        }
        if state.shutting_down() {
            return;
        }
    }
}
