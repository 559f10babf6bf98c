//! A TSD started in-process on a free loopback port, and plain-socket
//! clients for its two protocols.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use rtsdb::config::{Config, DATA_DIR_KEY};
use rtsdb::store::read::{SeriesData, SeriesSource};
use rtsdb::tsd::{Server, ServerHandle, TsdState};

pub struct TestServer {
    pub addr: SocketAddr,
    pub state: Arc<TsdState>,
    pub dir: tempfile::TempDir,
    handle: Option<ServerHandle>,
    rt: Option<tokio::runtime::Runtime>,
}

impl TestServer {
    /// Starts a TSD on 127.0.0.1:0 with `settings` over a fresh directory.
    pub fn start(settings: &[(&str, &str)]) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(dir, settings)
    }

    pub fn start_in(dir: tempfile::TempDir, settings: &[(&str, &str)]) -> TestServer {
        let mut config = Config::default();
        config.set(DATA_DIR_KEY, &dir.path().display().to_string());
        config.set("tsd.network.port", "0");
        for (k, v) in settings {
            config.set(k, v);
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let state = TsdState::open(config).unwrap();
        let handle = rt.block_on(Server::start(state.clone())).unwrap();
        TestServer {
            addr: handle.addr,
            state,
            dir,
            handle: Some(handle),
            rt: Some(rt),
        }
    }

    /// Stops the server and flushes the write path.
    pub fn stop(&mut self) {
        if let (Some(h), Some(rt)) = (self.handle.take(), self.rt.as_ref()) {
            h.shutdown();
            rt.block_on(h.wait()).unwrap();
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(5));
        }
    }

    /// Every series of `metric` as the query side would read it.
    pub fn read(&self, metric: &str) -> Vec<SeriesData> {
        let w = self.state.db();
        let Ok(m) = w.uids().get_id(rtsdb::model::UidKind::Metric, metric) else {
            return Vec::new();
        };
        w.read_series(m, 0, u64::MAX, &mut |_| true).unwrap()
    }

    pub fn point_count(&self, metric: &str) -> usize {
        self.read(metric).iter().map(|s| s.points.len()).sum()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Sends `input` on a fresh telnet connection, half-closes, and returns
/// everything the server wrote before closing.
pub fn telnet(addr: SocketAddr, input: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(input).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request on a fresh connection (`Connection: close`).
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> HttpResponse {
    let mut s = TcpStream::connect(addr).unwrap();
    // A bound on a hang, not a speed check: a 50 MB put in a debug build
    // on a busy 2-core machine took over a minute.
    s.set_read_timeout(Some(Duration::from_secs(600))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    s.write_all(req.as_bytes()).unwrap();
    // The server may answer (413) before reading all of a big body.
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    parse_response(&raw)
}

pub fn parse_response(raw: &[u8]) -> HttpResponse {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = raw[end + 4..].to_vec();
    if let Some((_, n)) = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
    {
        body.truncate(n.parse().unwrap());
    }
    HttpResponse {
        status,
        headers,
        body,
    }
}

/// One request with a JSON body (`Content-Type: application/json`).
pub fn json_http(addr: SocketAddr, method: &str, path: &str, body: &str) -> HttpResponse {
    http(
        addr,
        method,
        path,
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    )
}

pub fn post_put(addr: SocketAddr, query: &str, body: &str) -> HttpResponse {
    json_http(addr, "POST", &format!("/api/put{query}"), body)
}

/// Status and body text of a request with a JSON body.
pub fn req(srv: &TestServer, method: &str, path: &str, body: &str) -> (u16, String) {
    let r = json_http(srv.addr, method, path, body);
    (r.status, r.text())
}

/// Status and body text of a `GET` without a body.
pub fn get(srv: &TestServer, path: &str) -> (u16, String) {
    let r = http(srv.addr, "GET", path, &[], b"");
    (r.status, r.text())
}

/// OpenTSDB's JSON error body.
pub fn err(code: u16, message: &str) -> String {
    serde_json::json!({"error":{"code":code,"message":message}}).to_string()
}

/// Raises the soft open-files limit as far as the hard limit allows.
pub fn raise_fd_limit(want: u64) {
    unsafe {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < want {
            r.rlim_cur = want.min(r.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}
