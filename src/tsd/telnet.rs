//! OpenTSDB's telnet-style line protocol: framing (lines up to
//! `max_line_length` bytes, `\n` or `\r\n`, ISO-8859-1), word splitting on
//! single spaces, the `put` parser with OpenTSDB's exact error lines
//! (`PutDataPointRpc.importDataPoint`), and the other line commands.
//!
//! Parsing is pure ([`parse_put`], [`split_lines`]); [`serve`] does the
//! I/O: it reads a chunk, handles every complete line in it, logs the
//! chunk's points in one WAL append, then writes the chunk's replies.
//! Commands other than `put`, `exit` and `help` are the shared ones of
//! `super::rpc`, which HTTP serves too.

use std::borrow::Cow;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::write::{PendingPoint, PointError};

pub use crate::write::line::{PutLine, check_finite, parse_put};

use super::rpc::{self, After, Serve};
use super::stats::inc;
use super::{TsdOptions, TsdState};

const READ_CHUNK: usize = 64 * 1024;

/// Decodes a line as ISO-8859-1, as OpenTSDB does.
pub fn decode_line(bytes: &[u8]) -> Cow<'_, str> {
    if bytes.is_ascii() {
        Cow::Borrowed(std::str::from_utf8(bytes).expect("ASCII is UTF-8"))
    } else {
        Cow::Owned(bytes.iter().map(|&b| b as char).collect())
    }
}

/// Complete lines of `buf` (without `\n` / `\r\n`) and how many bytes
/// they used. `Err(len)` if a line (or the unterminated rest) is longer
/// than `max`.
pub fn split_lines(buf: &[u8], max: usize) -> Result<(Vec<&[u8]>, usize), usize> {
    let mut lines = Vec::new();
    let mut start = 0;
    while let Some(pos) = memchr(b'\n', &buf[start..]) {
        let mut line = &buf[start..start + pos];
        if let Some(l) = line.strip_suffix(b"\r") {
            line = l;
        }
        if line.len() > max {
            return Err(line.len());
        }
        lines.push(line);
        start += pos + 1;
    }
    if buf.len() - start > max {
        return Err(buf.len() - start);
    }
    Ok((lines, start))
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&b| b == needle)
}

/// How a command is run.
#[derive(Clone, Copy)]
enum Run {
    /// Batched by the connection, logged once per chunk read.
    Put,
    /// Sees the points of the lines before it; writes its reply.
    Command(fn(&TsdState, &mut Vec<u8>) -> After),
}

/// The telnet commands, in `help` order, and when each is served. (OpenTSDB
/// registers `put` after `help`, so lists it there; rtsdb's clients and
/// tests have always seen it first.)
const COMMANDS: &[(&str, Serve, Run)] = &[
    ("put", Serve::Writes, Run::Put),
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
pub fn commands(options: &TsdOptions) -> impl Iterator<Item = &'static str> + '_ {
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
    batch: Vec<PendingPoint>,
    out: Vec<u8>,
    key: String,
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
        // Words on the stack for ordinary lines; a Vec only for long ones.
        let mut stack: [&str; 24] = [""; 24];
        let mut n = 0;
        let mut heap: Vec<&str> = Vec::new();
        for w in line.split(' ') {
            if n < stack.len() {
                stack[n] = w;
            } else {
                if heap.is_empty() {
                    heap.extend_from_slice(&stack);
                }
                heap.push(w);
            }
            n += 1;
        }
        let words: &[&str] = if heap.is_empty() { &stack[..n] } else { &heap };
        let cmd = words[0];
        let run = COMMANDS
            .iter()
            .find(|(name, serve, _)| *name == cmd && serve.on(&self.state.options))
            .map(|(_, _, run)| *run);
        if let Some(Run::Put) = run {
            self.put(words);
            return After::Continue;
        }
        // Other commands see the points before them.
        self.flush_batch();
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

/// Serves one telnet connection. The first byte, which chose this
/// protocol, was only peeked at, so it is read again here.
pub async fn serve(state: Arc<TsdState>, mut stream: TcpStream) {
    let max = state.options.max_line_length;
    let timeout = state.options.socket_timeout;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Value;

    fn put(line: &str) -> Result<PutLine<'_>, String> {
        let words: Vec<&str> = line.split(' ').collect();
        parse_put(&words).map_err(|e| e.telnet_line())
    }

    #[test]
    fn put_errors_verbatim() {
        assert_eq!(
            put("put").unwrap_err(),
            "put: illegal argument: not enough arguments (need least 4, got 0)"
        );
        assert_eq!(
            put("put m 1 1").unwrap_err(),
            "put: illegal argument: not enough arguments (need least 4, got 3)"
        );
        assert_eq!(
            put("put  1356998400 1 host=a").unwrap_err(),
            "put: illegal argument: empty metric name"
        );
        assert_eq!(
            put("put m notatime 1 host=a").unwrap_err(),
            "put: invalid value: Invalid character 'n' in notatime"
        );
        assert_eq!(
            put("put m 0 1 host=a").unwrap_err(),
            "put: illegal argument: invalid timestamp: 0"
        );
        assert_eq!(
            put("put m -5 1 host=a").unwrap_err(),
            "put: illegal argument: invalid timestamp: -5"
        );
        assert_eq!(
            put("put m 1356998400  host=a").unwrap_err(),
            "put: illegal argument: empty value"
        );
        assert_eq!(
            put("put m 1356998400 1 host").unwrap_err(),
            "put: illegal argument: invalid tag: host"
        );
        assert_eq!(
            put("put m 1356998400 1 host=a=b").unwrap_err(),
            "put: illegal argument: invalid tag: host=a=b"
        );
        assert_eq!(
            put("put m 1356998400 1 host=a host=b").unwrap_err(),
            "put: illegal argument: duplicate tag: host=b, tags={host=a}"
        );
        assert!(put("put m 1356998400 1 host=a host=a").is_ok());
        assert_eq!(
            put("put m 1356998400 NaN host=a").unwrap_err(),
            "put: invalid value: Invalid character 'N' in NaN"
        );
        assert_eq!(
            put("put m 1356998400 1e999 host=a").unwrap_err(),
            "put: illegal argument: value is NaN or Infinite: Infinity for metric=m timestamp=1356998400"
        );
        assert_eq!(
            put("put m 1356998400 1.2.3 host=a").unwrap_err(),
            "put: invalid value: For input string: \"1.2.3\""
        );
        let p = put("put m 1356998400.500 1.5 host=a  dc=x").unwrap();
        assert_eq!(p.timestamp, 1356998400500);
        assert_eq!(p.value, Value::Float(1.5));
        assert_eq!(p.tags, vec![("host", "a"), ("dc", "x")]);
    }

    #[test]
    fn framing() {
        let (lines, used) = split_lines(b"a\r\nb\npartial", 10).unwrap();
        assert_eq!(lines, vec![&b"a"[..], &b"b"[..]]);
        assert_eq!(used, 5);
        assert_eq!(split_lines(b"0123456789AB\n", 10), Err(12));
        assert_eq!(split_lines(b"0123456789AB", 10), Err(12));
        assert_eq!(decode_line(&[0x63, 0xE9]), "c\u{e9}");
    }
}
