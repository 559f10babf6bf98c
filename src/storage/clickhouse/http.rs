//! ClickHouse's HTTP interface through `ureq`: one POST per statement,
//! the statement in the URL or the body, with failover over the
//! configured endpoints. Blocking because the storage seams are
//! synchronous.
//!
//! Connections are kept open between statements (HTTP keep-alive, the
//! agent's pool): a new connection cost ~0.4 ms of a ~0.7 ms `SELECT 1`
//! on loopback (docs/scale-out.md "Measured"), and a one-series query is a
//! single statement. The pool probes a kept connection before using it,
//! so one the server closed meanwhile is replaced by a new one. Each
//! statement's duration is logged at `debug`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::storage::{Result, StorageError};

/// How long a connection attempt to one endpoint may take before the next
/// endpoint is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one read or write of a statement may wait (a large scan page
/// or insert).
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
    /// As configured (no trailing `/`): how errors name the endpoint.
    pub(crate) url: String,
    /// Where requests go: `http://host:port/`, the port defaulting to
    /// ClickHouse's 8123.
    target: String,
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
        let port = if rest.contains(':') { "" } else { ":8123" };
        Ok(Endpoint {
            url: url.to_string(),
            target: format!("http://{rest}{port}/"),
        })
    }
}

/// The endpoints of one ClickHouse cluster, tried in order from the last
/// one that answered.
pub(crate) struct Http {
    endpoints: Vec<Endpoint>,
    preferred: AtomicUsize,
    /// Sends every statement; holds the kept-alive connections.
    agent: ureq::Agent,
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

/// One answer of the server: its status and body.
struct Answer {
    status: u16,
    body: Vec<u8>,
}

impl Http {
    pub(crate) fn new(endpoints: Vec<Endpoint>) -> Http {
        let agent = ureq::Agent::config_builder()
            // A 4xx/5xx carries ClickHouse's exception text: read it.
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_per_read(Some(IO_TIMEOUT))
            .timeout_per_write(Some(IO_TIMEOUT))
            .max_idle_age(KEEP_IDLE)
            .max_idle_connections_per_host(KEEP_PER_ENDPOINT)
            .max_idle_connections(KEEP_PER_ENDPOINT * endpoints.len().max(1))
            .build()
            .new_agent();
        Http {
            endpoints,
            preferred: AtomicUsize::new(0),
            agent,
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
            match self.send_timed(ep, query, params, body) {
                Ok(Answer { status: 200, body }) => return Ok((idx, body)),
                Ok(Answer { status, body }) => {
                    let message = String::from_utf8_lossy(&body).trim().to_string();
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
        match self.send_timed(ep, query, &[], &[]) {
            Ok(Answer { status: 200, body }) => Ok(body),
            Ok(Answer { status, body }) => Err(StorageError::Engine(format!(
                "ClickHouse at {}: HTTP {status}: {}",
                ep.url,
                String::from_utf8_lossy(&body).trim()
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
        ep: &Endpoint,
        query: &str,
        params: &[(&str, &str)],
        body: &[u8],
    ) -> std::result::Result<Answer, String> {
        let started = Instant::now();
        let sent = self.send(ep, query, params, body);
        if tracing::enabled!(tracing::Level::DEBUG) {
            // The statement is in the URL (inserts) or the body (the rest).
            let text = if query.is_empty() {
                String::from_utf8_lossy(&body[..body.len().min(120)]).into_owned()
            } else {
                query.chars().take(120).collect()
            };
            tracing::debug!(
                endpoint = %ep.url,
                micros = started.elapsed().as_micros() as u64,
                status = sent.as_ref().map(|a| a.status).unwrap_or(0),
                statement = %text,
                "ClickHouse statement"
            );
        }
        sent
    }

    /// One request to `ep`; a failure to exchange it is described the way
    /// the OS names it ("Connection refused"), which operators and the
    /// cluster tests read. A kept connection the server closed between the
    /// pool's probe and the request fails with a closed connection: the
    /// request is then sent once more (on a new or another kept
    /// connection), as a failover would send it to another replica.
    fn send(
        &self,
        ep: &Endpoint,
        query: &str,
        params: &[(&str, &str)],
        body: &[u8],
    ) -> std::result::Result<Answer, String> {
        let attempt = || {
            let statement = std::iter::once(("query", query)).filter(|(_, v)| !v.is_empty());
            let request = self
                .agent
                .post(&ep.target)
                .query_pairs(statement.chain(params.iter().copied()));
            request.send(body).and_then(|mut answer| {
                let status = answer.status().as_u16();
                // A scan page or a parts list has no size bound worth
                // imposing here: the statement's LIMIT bounds it.
                let body = answer
                    .body_mut()
                    .with_config()
                    .limit(u64::MAX)
                    .read_to_vec()?;
                Ok(Answer { status, body })
            })
        };
        let sent = match attempt() {
            Err(ureq::Error::Io(e)) if closed_connection(&e) => attempt(),
            sent => sent,
        };
        sent.map_err(|e| match e {
            ureq::Error::Io(e) => e.to_string(),
            e => e.to_string(),
        })
    }
}

/// Whether `e` says the connection was closed under the request (what a
/// kept connection the server dropped gives), not that nothing listens.
fn closed_connection(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::sync::Arc;

    #[test]
    fn parses_endpoints() {
        assert_eq!(
            Endpoint::parse("http://127.0.0.1:9000/").unwrap().target,
            "http://127.0.0.1:9000/"
        );
        assert_eq!(
            Endpoint::parse("http://ch").unwrap().target,
            "http://ch:8123/"
        );
        assert!(Endpoint::parse("ch:8123").is_err());
        assert!(Endpoint::parse("http://ch:1/x").is_err());
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
                        if let Some((name, v)) = line.split_once(':')
                            && name.eq_ignore_ascii_case("content-length")
                        {
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
