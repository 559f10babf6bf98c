//! A minimal blocking HTTP/1.1 client for ClickHouse's HTTP interface:
//! one POST per statement, the statement in the URL or the body, with
//! failover over the configured endpoints. Blocking because the storage
//! seams are synchronous, and small because ClickHouse needs nothing of
//! HTTP beyond a POST and a (possibly chunked) answer.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::storage::{Result, StorageError};

/// How long a connection attempt to one endpoint may take before the next
/// endpoint is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one statement may take (a large scan page or insert).
const IO_TIMEOUT: Duration = Duration::from_secs(120);

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
}

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
            endpoints,
            preferred: AtomicUsize::new(0),
        }
    }

    pub(crate) fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
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
        let first = self.preferred.load(Ordering::Relaxed) % n.max(1);
        let mut errors = Vec::new();
        for i in 0..n {
            let idx = (first + i) % n;
            let ep = &self.endpoints[idx];
            match send(ep, query, params, body) {
                Ok((200, answer)) => {
                    self.preferred.store(idx, Ordering::Relaxed);
                    return Ok(answer);
                }
                Ok((status, answer)) => {
                    let message = String::from_utf8_lossy(&answer).trim().to_string();
                    // 5xx without a ClickHouse exception text is a server
                    // going down: try the next one.
                    if status >= 500 && !message.starts_with("Code:") {
                        errors.push(format!("{}: HTTP {status}", ep.url));
                        continue;
                    }
                    self.preferred.store(idx, Ordering::Relaxed);
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
        match send(ep, query, &[], &[]) {
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

/// One request on a fresh connection (`Connection: close`): loopback and
/// LAN connects are cheap next to a ClickHouse statement.
fn send(
    ep: &Endpoint,
    query: &str,
    params: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
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
    let addr = ep
        .host_port
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other("the host name resolves to no address"))?;
    let mut stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    stream.set_nodelay(true)?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        ep.host_port,
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()?;
    read_response(BufReader::new(stream))
}

fn bad(msg: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg.to_string())
}

fn read_response(mut r: impl BufRead) -> std::io::Result<(u16, Vec<u8>)> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("not an HTTP answer"))?;
    let mut chunked = false;
    let mut length: Option<usize> = None;
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
    }
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert_eq!(
            read_response(&chunked[..]).unwrap(),
            (200, b"abcde".to_vec())
        );
        let sized = b"HTTP/1.1 500 Err\r\nContent-Length: 4\r\n\r\nCode";
        assert_eq!(read_response(&sized[..]).unwrap(), (500, b"Code".to_vec()));
        assert!(read_response(&b"garbage"[..]).is_err());
    }

    #[test]
    fn unreachable_endpoints_are_named() {
        // Port 1 on loopback refuses connections.
        let http = Http::new(vec![Endpoint::parse("http://127.0.0.1:1").unwrap()]);
        let err = http.post("SELECT 1", &[], &[]).unwrap_err().to_string();
        assert!(err.contains("http://127.0.0.1:1"), "{err}");
    }
}
