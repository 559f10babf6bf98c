//! A minimal blocking HTTP/1.1 client for ClickHouse's HTTP interface:
//! one POST per statement, the statement in the URL or the body, with
//! failover over the configured endpoints. Blocking because the storage
//! seams are synchronous, and small because ClickHouse needs nothing of
//! HTTP beyond a POST and a (possibly chunked) answer.
//!
//! Connections are kept open between statements (HTTP keep-alive): a new
//! connection cost ~0.4 ms of a ~0.7 ms `SELECT 1` on loopback
//! (docs/scale-out.md "Measured"), and a one-series query is a single
//! statement. Each statement's duration is logged at `debug`.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::storage::{Result, StorageError};

/// How long a connection attempt to one endpoint may take before the next
/// endpoint is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one statement may take (a large scan page or insert).
const IO_TIMEOUT: Duration = Duration::from_secs(120);
/// How long an idle connection is kept for the next statement: below
/// ClickHouse's `keep_alive_timeout` (3 s by default), so the server has
/// not closed it yet when it is used again.
const KEEP_IDLE: Duration = Duration::from_secs(2);
/// Idle connections kept per endpoint (one per thread that asks at once).
const KEEP_PER_ENDPOINT: usize = 8;

/// One ClickHouse endpoint, parsed from `http://host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) url: String,
    host_port: String,
}

impl Endpoint {
    pub(crate) fn parse(url: &str) -> std::result::Result<Endpoint, String> {
        let url = url.trim().trim_end_matches('/');
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            format!("ClickHouse endpoint '{url}' must look like http://host:port")
        })?;
        if rest.is_empty() || rest.contains('/') {
            return Err(format!(
                "ClickHouse endpoint '{url}' must look like http://host:port"
            ));
        }
        let host_port = if rest.contains(':') {
            rest.to_string()
        } else {
            format!("{rest}:8123")
        };
        Ok(Endpoint {
            url: url.to_string(),
            host_port,
        })
    }
}

/// The endpoints of one ClickHouse cluster, tried in order from the last
/// one that answered.
pub(crate) struct Http {
    endpoints: Vec<Endpoint>,
    preferred: AtomicUsize,
    /// Idle open connections per endpoint (same order as `endpoints`),
    /// with the moment each was last used.
    idle: Vec<Mutex<Vec<(Conn, Instant)>>>,
}

type Conn = BufReader<TcpStream>;

/// Why a statement failed: the server said no (the statement is wrong or
/// the data is), or no endpoint could be reached.
#[derive(Debug)]
pub(crate) enum Failure {
    Server { endpoint: String, message: String },
    Unreachable(String),
}

impl From<Failure> for StorageError {
    fn from(f: Failure) -> StorageError {
        match f {
            Failure::Server { endpoint, message } => {
                StorageError::Engine(format!("ClickHouse at {endpoint}: {message}"))
            }
            Failure::Unreachable(m) => StorageError::Engine(m),
        }
    }
}

impl Http {
    pub(crate) fn new(endpoints: Vec<Endpoint>) -> Http {
        Http {
            idle: endpoints.iter().map(|_| Mutex::new(Vec::new())).collect(),
            endpoints,
            preferred: AtomicUsize::new(0),
        }
    }

    pub(crate) fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    /// The endpoint statements go to first: the last one that answered.
    pub(crate) fn preferred(&self) -> usize {
        self.preferred.load(Ordering::Relaxed) % self.endpoints.len().max(1)
    }

    /// Runs `query` (URL parameters `params` added), sending `body` as the
    /// request body, on the first endpoint that answers; returns the body
    /// of the answer. A server error is not retried elsewhere (another
    /// replica would refuse the same statement); a connection failure is.
    pub(crate) fn post(
        &self,
        query: &str,
        params: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Vec<u8>> {
        Ok(self.post_inner(query, params, body)?)
    }

    fn post_inner(
        &self,
        query: &str,
        params: &[(&str, &str)],
        body: &[u8],
    ) -> std::result::Result<Vec<u8>, Failure> {
        let n = self.endpoints.len();
        let order: Vec<usize> = (0..n).map(|i| (self.preferred() + i) % n).collect();
        let (idx, answer) = self.post_first(&order, query, params, body)?;
        self.preferred.store(idx, Ordering::Relaxed);
        Ok(answer)
    }

    /// Runs `query` on the first of the endpoints `order` names (indexes
    /// into [`endpoints`](Self::endpoints)) that answers; returns which
    /// one did and its answer. A server error is not retried elsewhere; a
    /// connection failure, or a 5xx without ClickHouse's exception text
    /// (a server going down), is.
    pub(crate) fn post_first(
        &self,
        order: &[usize],
        query: &str,
        params: &[(&str, &str)],
        body: &[u8],
    ) -> std::result::Result<(usize, Vec<u8>), Failure> {
        let mut errors = Vec::new();
        for &idx in order {
            let ep = &self.endpoints[idx];
            match self.send_timed(idx, query, params, body) {
                Ok((200, answer)) => return Ok((idx, answer)),
                Ok((status, answer)) => {
                    let message = String::from_utf8_lossy(&answer).trim().to_string();
                    if status >= 500 && !message.starts_with("Code:") {
                        errors.push(format!("{}: HTTP {status}", ep.url));
                        continue;
                    }
                    return Err(Failure::Server {
                        endpoint: ep.url.clone(),
                        message: format!("HTTP {status}: {message}"),
                    });
                }
                Err(e) => errors.push(format!("{}: {e}", ep.url)),
            }
        }
        Err(Failure::Unreachable(format!(
            "no ClickHouse endpoint could be reached ({})",
            errors.join("; ")
        )))
    }

    /// Runs `query` on one named endpoint only (per-server statements:
    /// `system.parts`, `OPTIMIZE`).
    pub(crate) fn post_to(&self, ep: &Endpoint, query: &str) -> Result<Vec<u8>> {
        let idx = self.endpoints.iter().position(|e| e == ep);
        let sent = match idx {
            Some(idx) => self.send_timed(idx, query, &[], &[]),
            None => send_fresh(ep, &request(ep, query, &[], &[])).map(|a| (a.status, a.body)),
        };
        match sent {
            Ok((200, answer)) => Ok(answer),
            Ok((status, answer)) => Err(StorageError::Engine(format!(
                "ClickHouse at {}: HTTP {status}: {}",
                ep.url,
                String::from_utf8_lossy(&answer).trim()
            ))),
            Err(e) => Err(StorageError::Engine(format!(
                "ClickHouse at {}: {e}",
                ep.url
            ))),
        }
    }

    /// [`send`](Self::send), logging the statement's duration (`debug`):
    /// where a query's time goes.
    fn send_timed(
        &self,
        idx: usize,
        query: &str,
        params: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<(u16, Vec<u8>)> {
        let started = Instant::now();
        let sent = self.send(idx, query, params, body);
        if tracing::enabled!(tracing::Level::DEBUG) {
            // The statement is in the URL (inserts) or the body (the rest).
            let text = if query.is_empty() {
                String::from_utf8_lossy(&body[..body.len().min(120)]).into_owned()
            } else {
                query.chars().take(120).collect()
            };
            tracing::debug!(
                endpoint = %self.endpoints[idx].url,
                micros = started.elapsed().as_micros() as u64,
                status = sent.as_ref().map(|(s, _)| *s).unwrap_or(0),
                statement = %text,
                "ClickHouse statement"
            );
        }
        sent
    }

    /// One request to endpoint `idx`, on an idle kept-alive connection
    /// when there is one, else on a new one. A kept connection the server
    /// closed meanwhile fails before any answer arrives: the request is
    /// then sent once more on a new connection (the server never read it).
    fn send(
        &self,
        idx: usize,
        query: &str,
        params: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<(u16, Vec<u8>)> {
        let ep = &self.endpoints[idx];
        let req = request(ep, query, params, body);
        let kept = {
            let mut idle = self.idle[idx].lock();
            idle.retain(|(_, since)| since.elapsed() < KEEP_IDLE);
            idle.pop()
        };
        let answered = match kept {
            Some((mut conn, _)) => match exchange(&mut conn, &req) {
                Ok(answer) => Ok((conn, answer)),
                Err(Exchange::BeforeAnswer(_)) => send_fresh_conn(ep, &req),
                Err(Exchange::DuringAnswer(e)) => Err(e),
            },
            None => send_fresh_conn(ep, &req),
        };
        let (conn, answer) = answered?;
        if answer.reusable {
            let mut idle = self.idle[idx].lock();
            if idle.len() < KEEP_PER_ENDPOINT {
                idle.push((conn, Instant::now()));
            }
        }
        Ok((answer.status, answer.body))
    }
}

/// One answer of the server.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    status: u16,
    body: Vec<u8>,
    /// Whether the connection can carry another request.
    reusable: bool,
}

/// A request's bytes: head and body.
struct Request<'a> {
    head: String,
    body: &'a [u8],
}

fn request<'a>(ep: &Endpoint, query: &str, params: &[(&str, &str)], body: &'a [u8]) -> Request<'a> {
    let mut path = String::from("/?");
    let mut first = true;
    let all = std::iter::once(("query", query)).filter(|(_, v)| !v.is_empty());
    for (k, v) in all.chain(params.iter().copied()) {
        if !first {
            path.push('&');
        }
        first = false;
        encode_component(k, &mut path);
        path.push('=');
        encode_component(v, &mut path);
    }
    Request {
        head: format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n\r\n",
            ep.host_port,
            body.len()
        ),
        body,
    }
}

/// How an exchange on a connection failed: before any byte of the answer
/// (a kept connection the server had closed: safe to send again), or
/// after.
enum Exchange {
    BeforeAnswer(std::io::Error),
    DuringAnswer(std::io::Error),
}

/// Sends `req` on `conn` and reads the answer: status, body, and whether
/// the connection can carry another request.
fn exchange(conn: &mut Conn, req: &Request<'_>) -> Result2<Answer> {
    let stream = conn.get_mut();
    let sent = stream
        .write_all(req.head.as_bytes())
        .and_then(|()| stream.write_all(req.body))
        .and_then(|()| stream.flush());
    sent.map_err(Exchange::BeforeAnswer)?;
    match conn.fill_buf() {
        Ok([]) => {
            return Err(Exchange::BeforeAnswer(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the connection was closed",
            )));
        }
        Ok(_) => {}
        Err(e) => return Err(Exchange::BeforeAnswer(e)),
    }
    read_response(conn).map_err(Exchange::DuringAnswer)
}

type Result2<T> = std::result::Result<T, Exchange>;

/// Sends `req` on a new connection to `ep`.
fn send_fresh_conn(ep: &Endpoint, req: &Request<'_>) -> std::io::Result<(Conn, Answer)> {
    let addr = ep
        .host_port
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other("the host name resolves to no address"))?;
    let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    stream.set_nodelay(true)?;
    let mut conn = BufReader::new(stream);
    let answer = exchange(&mut conn, req).map_err(|e| match e {
        Exchange::BeforeAnswer(e) | Exchange::DuringAnswer(e) => e,
    })?;
    Ok((conn, answer))
}

fn send_fresh(ep: &Endpoint, req: &Request<'_>) -> std::io::Result<Answer> {
    Ok(send_fresh_conn(ep, req)?.1)
}

/// Percent-encodes a URL query component.
fn encode_component(s: &str, out: &mut String) {
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

fn bad(msg: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg.to_string())
}

/// Reads one answer: its status, its body, and whether the connection
/// can carry another request (the body had a length, and the server did
/// not say it closes).
fn read_response(mut r: impl BufRead) -> std::io::Result<Answer> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("not an HTTP answer"))?;
    let mut chunked = false;
    let mut length: Option<usize> = None;
    let mut closes = line.starts_with("HTTP/1.0");
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Err(bad("the answer ended inside its headers"));
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((name, value)) = l.split_once(':') {
            let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
            if name == "transfer-encoding" && value.eq_ignore_ascii_case("chunked") {
                chunked = true;
            } else if name == "content-length" {
                length = value.parse().ok();
            } else if name == "connection" {
                closes = value.eq_ignore_ascii_case("close");
            }
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            r.read_line(&mut line)?;
            let size_text = line.trim().split(';').next().unwrap_or("");
            let size = usize::from_str_radix(size_text, 16).map_err(|_| bad("bad chunk size"))?;
            if size == 0 {
                // Trailer lines up to an empty one end the answer: read
                // them, or the next answer on a kept connection starts
                // with them.
                loop {
                    line.clear();
                    if r.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
                        break;
                    }
                }
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            r.read_exact(&mut body[start..])?;
            let mut crlf = [0u8; 2];
            r.read_exact(&mut crlf)?;
        }
    } else if let Some(n) = length {
        body.resize(n, 0);
        r.read_exact(&mut body)?;
    } else {
        r.read_to_end(&mut body)?;
        closes = true;
    }
    Ok(Answer {
        status,
        body,
        reusable: !closes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::sync::Arc;

    #[test]
    fn parses_endpoints() {
        assert_eq!(
            Endpoint::parse("http://127.0.0.1:9000/").unwrap().host_port,
            "127.0.0.1:9000"
        );
        assert_eq!(Endpoint::parse("http://ch").unwrap().host_port, "ch:8123");
        assert!(Endpoint::parse("ch:8123").is_err());
        assert!(Endpoint::parse("http://ch:1/x").is_err());
    }

    #[test]
    fn reads_chunked_and_sized_answers() {
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\nnext";
        let mut r = &chunked[..];
        assert_eq!(
            read_response(&mut r).unwrap(),
            Answer {
                status: 200,
                body: b"abcde".to_vec(),
                reusable: true
            }
        );
        // The answer ends after the chunks' closing empty line.
        assert_eq!(r, b"next");
        let sized = b"HTTP/1.1 500 Err\r\nContent-Length: 4\r\n\r\nCode";
        assert_eq!(
            read_response(&sized[..]).unwrap(),
            Answer {
                status: 500,
                body: b"Code".to_vec(),
                reusable: true
            }
        );
        let closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n1";
        assert_eq!(
            read_response(&closing[..]).unwrap(),
            Answer {
                status: 200,
                body: b"1".to_vec(),
                reusable: false
            }
        );
        let to_end = b"HTTP/1.1 200 OK\r\n\r\nto the end";
        assert_eq!(
            read_response(&to_end[..]).unwrap(),
            Answer {
                status: 200,
                body: b"to the end".to_vec(),
                reusable: false
            }
        );
        assert!(read_response(&b"garbage"[..]).is_err());
    }

    /// A server that answers `per_connection` requests on each connection
    /// it accepts, then closes it; returns its port and how many
    /// connections it accepted.
    fn closing_server(per_connection: usize) -> (u16, Arc<AtomicUsize>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                counter.fetch_add(1, Ordering::SeqCst);
                let mut r = BufReader::new(stream);
                for _ in 0..per_connection {
                    let mut length = 0;
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if let Some(v) = line.strip_prefix("Content-Length: ") {
                            length = v.trim().parse().unwrap();
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0; length];
                    r.read_exact(&mut body).unwrap();
                    let answer =
                        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                    let s = r.get_mut();
                    s.write_all(answer.as_bytes()).unwrap();
                    s.write_all(&body).unwrap();
                }
            }
        });
        (port, accepted)
    }

    #[test]
    fn connections_are_kept_and_a_closed_one_is_replaced() {
        let (port, accepted) = closing_server(2);
        let http = Http::new(vec![
            Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap(),
        ]);
        for i in 0..5 {
            let body = format!("statement {i}");
            assert_eq!(
                http.post("", &[], body.as_bytes()).unwrap(),
                body.as_bytes()
            );
        }
        // Two statements per connection: the third and fifth found their
        // kept connection closed by the server and were sent again.
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn unreachable_endpoints_are_named() {
        // Port 1 on loopback refuses connections.
        let http = Http::new(vec![Endpoint::parse("http://127.0.0.1:1").unwrap()]);
        let err = http.post("SELECT 1", &[], &[]).unwrap_err().to_string();
        assert!(err.contains("http://127.0.0.1:1"), "{err}");
    }
}
