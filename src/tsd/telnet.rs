//! OpenTSDB's telnet-style line protocol: framing (lines up to
//! `max_line_length` bytes, `\n` or `\r\n`, ISO-8859-1), word splitting on
//! single spaces, the `put` parser with OpenTSDB's exact error lines
//! (`PutDataPointRpc.importDataPoint`), and the other line commands.
//!
//! Parsing is pure (`crate::protocol::telnet`); [`serve`] does the
//! I/O: it reads a chunk, handles every complete line in it, logs the
//! chunk's points in one WAL append, then writes the chunk's replies.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::protocol::PointError;
use crate::protocol::telnet::{Words, decode_line, parse_put, split_lines};
use crate::write::PendingPoint;

use super::TsdState;
use super::stats::inc;

const READ_CHUNK: usize = 64 * 1024;

/// What a line asks of the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum After {
    Continue,
    Close,
    Shutdown,
}

/// The commands this TSD answers, in OpenTSDB's `help` order.
pub fn commands(state: &TsdState) -> Vec<&'static str> {
    let mut c = Vec::new();
    if state.config.mode.writes() {
        c.push("put");
    }
    c.extend(["stats", "dropcaches", "version", "exit", "help"]);
    if !state.config.no_diediedie {
        c.push("diediedie");
    }
    c
}

struct Conn<'s> {
    state: &'s TsdState,
    batch: Vec<PendingPoint>,
    out: Vec<u8>,
    key: String,
}

impl Conn<'_> {
    fn error_line(&mut self, e: &PointError) {
        self.state.stats.count_error(e);
        if matches!(e, PointError::Storage(_)) && !self.state.config.return_errors {
            return;
        }
        self.out.extend_from_slice(e.telnet_line().as_bytes());
        self.out.push(b'\n');
    }

    fn put(&mut self, words: &[&str]) {
        inc(&self.state.stats.telnet_puts);
        let r = parse_put(words).and_then(|p| {
            let (series, ts) =
                self.state
                    .db
                    .resolve(p.metric, p.timestamp, p.value, &p.tags, &mut self.key)?;
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
        inc(&self.state.stats.rpc_telnet);
        let words = Words::split(line);
        let words = words.as_slice();
        let cmd = words[0];
        if cmd == "put" && self.state.config.mode.writes() {
            self.put(words);
            return After::Continue;
        }
        // Other commands see the points before them.
        self.flush_batch();
        match cmd {
            "version" => {
                self.out
                    .extend_from_slice(crate::version::version_lines().as_bytes());
                self.out.push(b'\n');
            }
            "help" => {
                let mut s = String::from("available commands: ");
                for c in commands(self.state) {
                    s.push_str(c);
                    s.push(' ');
                }
                s.push('\n');
                self.out.extend_from_slice(s.as_bytes());
            }
            "stats" => {
                let now = chrono::Utc::now().timestamp().max(0) as u64;
                for l in super::stats::lines(self.state, now) {
                    self.out.extend_from_slice(l.as_bytes());
                    self.out.push(b'\n');
                }
            }
            "dropcaches" => {
                self.state.db.drop_caches();
                self.out.extend_from_slice(b"Caches dropped.\n");
            }
            "exit" => return After::Close,
            "diediedie" if !self.state.config.no_diediedie => {
                self.out
                    .extend_from_slice(b"Cleaning up and exiting now.\n");
                return After::Shutdown;
            }
            _ => {
                self.out.extend_from_slice(
                    format!("unknown command: {cmd}.  Try `help'.\n").as_bytes(),
                );
            }
        }
        After::Continue
    }
}

/// Serves one telnet connection. `first` is the detection read's data.
pub async fn serve(state: Arc<TsdState>, mut stream: TcpStream) {
    let max = state.config.max_line_length;
    let timeout = state.config.socket_timeout;
    let mut shutdown = state.shutdown_signal();
    let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut conn = Conn {
        state: &state,
        batch: Vec::with_capacity(1024),
        out: Vec::new(),
        key: String::new(),
    };
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
                for raw in lines {
                    let line = decode_line(raw);
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
