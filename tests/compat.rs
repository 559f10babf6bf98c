//! Runs the compatibility cases under `tests/compat/` (format in
//! `tests/compat/README.md`): each file against a fresh in-process TSD, or
//! against the server at `RTSDB_COMPAT_TARGET=host:port`. With a test
//! cluster (`RTSDB_TEST_CLUSTER`, as `scripts/with-cluster` sets it) each
//! file also runs on the cluster backend, named `cluster:FILE`: two TSDs
//! on one database, the puts and the requests that change data sent to
//! one, the other requests to the other, with the same expectations.
//!
//! `cargo test --test compat [-- FILTER...]` runs the files whose path
//! (relative to `tests/compat/`, with `cluster:` in front for the cluster
//! runs) contains one of the filters.

#[path = "common/server.rs"]
#[allow(dead_code)]
mod server;

#[path = "common/cluster.rs"]
#[allow(dead_code)]
mod cluster;

#[path = "common/backend.rs"]
#[allow(dead_code, unused_macros, unused_imports)]
mod backend;

use backend::{Backend, Tsds};

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// One step of a case file, in file order.
enum Step {
    /// Telnet `put` lines, sent on one connection; no reply is expected.
    Put {
        line: usize,
        lines: Vec<String>,
    },
    Request(Request),
}

struct Request {
    line: usize,
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Option<String>,
    status: u16,
    expect_headers: Vec<(String, String)>,
    expect: Expect,
}

enum Expect {
    /// Status (and headers) only.
    Any,
    /// The exact body bytes.
    Exact(String),
    /// Equal once both are parsed as JSON (object key order ignored).
    Json(String),
    /// Every one of these holds.
    Partial(Vec<Partial>),
}

enum Partial {
    /// The body contains the text.
    Contains(String),
    /// The regex finds a match in the body (anchor it with `^`/`$`).
    Matches(regex::Regex),
}

struct CaseFile {
    config: Vec<(String, String)>,
    steps: Vec<Step>,
}

const METHODS: &[&str] = &["GET", "POST", "PUT", "DELETE", "OPTIONS", "HEAD", "PATCH"];

/// `keyword rest` → `rest`; a bare `keyword` → `""`.
fn arg<'a>(line: &'a str, keyword: &str) -> Option<&'a str> {
    let rest = line.strip_prefix(keyword)?;
    if rest.is_empty() {
        Some("")
    } else {
        rest.strip_prefix(' ')
    }
}

fn parse(text: &str) -> Result<CaseFile, String> {
    let mut file = CaseFile {
        config: Vec::new(),
        steps: Vec::new(),
    };
    // The request being read, and whether its `expect` line was seen.
    let mut cur: Option<(Request, bool)> = None;
    let finish = |cur: &mut Option<(Request, bool)>, steps: &mut Vec<Step>| {
        if let Some((r, seen)) = cur.take() {
            if !seen {
                return Err(format!("line {}: request without `expect`", r.line));
            }
            steps.push(Step::Request(r));
        }
        Ok(())
    };
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim_start();
        let err = |m: &str| Err(format!("line {n}: {m}: {raw}"));
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let word = line.split(' ').next().unwrap_or("");
        if let Some(kv) = arg(line, "config") {
            if !file.steps.is_empty() || cur.is_some() {
                return err("`config` after a put or request");
            }
            let Some((k, v)) = kv.split_once('=') else {
                return err("`config` needs key=value");
            };
            file.config.push((k.trim().into(), v.trim().into()));
        } else if word == "put" {
            finish(&mut cur, &mut file.steps)?;
            match file.steps.last_mut() {
                Some(Step::Put { lines, .. }) => lines.push(line.into()),
                _ => file.steps.push(Step::Put {
                    line: n,
                    lines: vec![line.into()],
                }),
            }
        } else if METHODS.contains(&word) {
            finish(&mut cur, &mut file.steps)?;
            let Some(path) = arg(line, word).filter(|p| p.starts_with('/')) else {
                return err("a request needs a path starting with /");
            };
            cur = Some((
                Request {
                    line: n,
                    method: word.into(),
                    path: path.into(),
                    headers: Vec::new(),
                    body: None,
                    status: 0,
                    expect_headers: Vec::new(),
                    expect: Expect::Any,
                },
                false,
            ));
        } else {
            let Some((r, seen)) = cur.as_mut() else {
                return err("expected `config`, `put` or a request line");
            };
            if let Some(s) = arg(line, "expect") {
                if *seen {
                    return err("second `expect` for one request");
                }
                let Ok(status) = s.trim().parse() else {
                    return err("`expect` needs a status code");
                };
                r.status = status;
                *seen = true;
            } else if let Some(h) = arg(line, "header") {
                let Some((k, v)) = h.split_once(':') else {
                    return err("`header` needs Name: value");
                };
                let h = (k.trim().to_string(), v.trim().to_string());
                if *seen {
                    r.expect_headers.push(h);
                } else {
                    r.headers.push(h);
                }
            } else if let Some(b) = arg(line, "body") {
                if !*seen {
                    append(&mut r.body, b);
                    continue;
                }
                match &mut r.expect {
                    Expect::Any => r.expect = Expect::Exact(b.into()),
                    Expect::Exact(s) => {
                        s.push('\n');
                        s.push_str(b);
                    }
                    _ => return err("`body` mixed with another expectation"),
                }
            } else if let Some(j) = arg(line, "json").filter(|_| *seen) {
                match &mut r.expect {
                    Expect::Any => r.expect = Expect::Json(j.into()),
                    Expect::Json(s) => {
                        s.push('\n');
                        s.push_str(j);
                    }
                    _ => return err("`json` mixed with another expectation"),
                }
            } else if let Some(p) = partial(line).filter(|_| *seen) {
                let p = p.map_err(|e| format!("line {n}: {e}"))?;
                match &mut r.expect {
                    Expect::Any => r.expect = Expect::Partial(vec![p]),
                    Expect::Partial(v) => v.push(p),
                    _ => return err("`contains`/`matches` mixed with `body` or `json`"),
                }
            } else {
                return err("unknown line");
            }
        }
    }
    finish(&mut cur, &mut file.steps)?;
    for s in &file.steps {
        if let Step::Request(Request {
            expect: Expect::Json(j),
            line,
            ..
        }) = s
        {
            serde_json::from_str::<serde_json::Value>(j)
                .map_err(|e| format!("line {line}: expected `json` is not JSON: {e}"))?;
        }
    }
    Ok(file)
}

fn partial(line: &str) -> Option<Result<Partial, String>> {
    if let Some(c) = arg(line, "contains") {
        return Some(Ok(Partial::Contains(c.into())));
    }
    let m = arg(line, "matches")?;
    Some(
        regex::Regex::new(m)
            .map(Partial::Matches)
            .map_err(|e| format!("bad regex: {e}")),
    )
}

fn append(body: &mut Option<String>, line: &str) {
    match body {
        Some(b) => {
            b.push('\n');
            b.push_str(line);
        }
        None => *body = Some(line.into()),
    }
}

struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// One HTTP/1.1 request on a fresh connection (`Connection: close`).
fn http(addr: SocketAddr, r: &Request) -> Result<Response, String> {
    let io = |e: std::io::Error| format!("{} {}: {e}", r.method, r.path);
    let mut s = TcpStream::connect(addr).map_err(io)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(io)?;
    let body = r.body.as_deref().unwrap_or("").as_bytes();
    let mut req = format!(
        "{} {} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n",
        r.method, r.path
    );
    for (k, v) in &r.headers {
        let _ = write!(req, "{k}: {v}\r\n");
    }
    let _ = write!(req, "Content-Length: {}\r\n\r\n", body.len());
    s.write_all(req.as_bytes()).map_err(io)?;
    s.write_all(body).map_err(io)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(io)?;
    parse_response(&raw, r.method == "HEAD")
}

fn parse_response(raw: &[u8], head: bool) -> Result<Response, String> {
    let text = || String::from_utf8_lossy(raw).into_owned();
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("no end of headers in the response: {:?}", text()))?;
    let head_text = String::from_utf8_lossy(&raw[..end]);
    let mut lines = head_text.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line in {:?}", text()))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let mut rest = &raw[end + 4..];
    let body = if head {
        Vec::new()
    } else if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        let mut body = Vec::new();
        loop {
            let eol = rest
                .windows(2)
                .position(|w| w == b"\r\n")
                .ok_or("truncated chunk")?;
            let size = std::str::from_utf8(&rest[..eol])
                .ok()
                .and_then(|s| usize::from_str_radix(s.split(';').next()?.trim(), 16).ok())
                .ok_or("bad chunk size")?;
            rest = &rest[eol + 2..];
            if size == 0 || rest.len() < size {
                break;
            }
            body.extend_from_slice(&rest[..size]);
            rest = &rest[(size + 2).min(rest.len())..];
        }
        body
    } else if let Some(n) = header("content-length").and_then(|n| n.parse::<usize>().ok()) {
        rest[..n.min(rest.len())].to_vec()
    } else {
        rest.to_vec()
    };
    Ok(Response {
        status,
        headers,
        body,
    })
}

/// Sends telnet lines on one connection, half-closes, and returns what the
/// server wrote before closing.
fn telnet(addr: SocketAddr, lines: &[String]) -> Result<String, String> {
    let io = |e: std::io::Error| format!("telnet: {e}");
    let mut s = TcpStream::connect(addr).map_err(io)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(io)?;
    let mut input = lines.join("\n");
    input.push('\n');
    s.write_all(input.as_bytes()).map_err(io)?;
    s.shutdown(Shutdown::Write).map_err(io)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).map_err(io)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Checks one response; `Err` is the report of the difference.
fn check(r: &Request, got: &Response) -> Result<(), String> {
    let text = String::from_utf8_lossy(&got.body);
    let mut out = String::new();
    if got.status != r.status {
        let _ = writeln!(out, "  status: expected {}, got {}", r.status, got.status);
    }
    for (k, v) in &r.expect_headers {
        let have = got
            .headers
            .iter()
            .find(|(h, _)| h.eq_ignore_ascii_case(k))
            .map(|(_, v)| v.as_str());
        if have != Some(v.as_str()) {
            let _ = writeln!(out, "  header {k}: expected {v:?}, got {have:?}");
        }
    }
    match &r.expect {
        Expect::Any => {}
        Expect::Exact(want) => {
            if *want != text {
                out.push_str(&diff(want, &text));
            }
        }
        Expect::Json(want) => {
            let w: serde_json::Value = serde_json::from_str(want).expect("checked at parse");
            match serde_json::from_str::<serde_json::Value>(&text) {
                Ok(g) if g == w => {}
                Ok(g) => out.push_str(&diff(&pretty(&w), &pretty(&g))),
                Err(e) => {
                    let _ = writeln!(out, "  body is not JSON ({e}):\n  got:      {text}");
                }
            }
        }
        Expect::Partial(parts) => {
            for p in parts {
                match p {
                    Partial::Contains(c) if !text.contains(c.as_str()) => {
                        let _ = writeln!(out, "  body lacks:   {c}");
                    }
                    Partial::Matches(re) if !re.is_match(&text) => {
                        let _ = writeln!(out, "  not matched:  {re}");
                    }
                    _ => {}
                }
            }
        }
    }
    if out.is_empty() {
        Ok(())
    } else {
        if !matches!(r.expect, Expect::Exact(_) | Expect::Json(_)) || got.status != r.status {
            let _ = writeln!(out, "  body:     {text}");
        }
        Err(out)
    }
}

fn pretty(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).expect("json")
}

/// Expected and got, with the first differing byte (one-line bodies) or
/// the differing lines (multi-line bodies) pointed out.
fn diff(want: &str, got: &str) -> String {
    let mut out = String::new();
    if !want.contains('\n') && !got.contains('\n') {
        let at = want
            .char_indices()
            .zip(got.chars())
            .find(|((_, a), b)| a != b)
            .map(|((i, _), _)| i)
            .unwrap_or(want.len().min(got.len()));
        let _ = writeln!(out, "  expected: {want}\n  got:      {got}");
        let _ = writeln!(out, "            {}^ first difference", " ".repeat(at));
        return out;
    }
    let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    for i in 0..w.len().max(g.len()) {
        match (w.get(i), g.get(i)) {
            (Some(a), Some(b)) if a == b => {
                let _ = writeln!(out, "    {a}");
            }
            (a, b) => {
                if let Some(a) = a {
                    let _ = writeln!(out, "  - {a}");
                }
                if let Some(b) = b {
                    let _ = writeln!(out, "  + {b}");
                }
            }
        }
    }
    format!("  (- expected, + got)\n{out}")
}

struct Outcome {
    passed: usize,
    failures: Vec<String>,
}

/// Where a file's steps go.
enum Target {
    /// The server at `RTSDB_COMPAT_TARGET`.
    External(SocketAddr),
    /// Fresh in-process TSDs on this backend.
    Fresh(Backend),
}

fn run_file(path: &Path, rel: &str, target: &Target) -> Outcome {
    let mut o = Outcome {
        passed: 0,
        failures: Vec::new(),
    };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            o.failures.push(format!("{rel}: {e}"));
            return o;
        }
    };
    let file = match parse(&text) {
        Ok(f) => f,
        Err(e) => {
            o.failures.push(format!("{rel}: {e}"));
            return o;
        }
    };
    let local = match target {
        Target::External(_) => None,
        Target::Fresh(backend) => {
            let settings: Vec<(&str, &str)> = file
                .config
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            match Tsds::start(*backend, &settings) {
                Some(t) => Some(t),
                None => return o,
            }
        }
    };
    // Puts and requests that change data go to the writer; the others to
    // the reader, which sees everything the writer acknowledged (one TSD
    // plays both roles but on the cluster).
    let addr = |write: bool| match (target, &local) {
        (Target::External(a), _) => *a,
        (_, Some(t)) if write => t.writer().addr,
        (_, Some(t)) => t.reader().addr,
        (_, None) => unreachable!("a fresh target has its TSDs"),
    };
    for step in &file.steps {
        match step {
            Step::Put { line, lines } => match telnet(addr(true), lines) {
                Ok(out) if out.is_empty() => {}
                Ok(out) => {
                    o.failures
                        .push(format!("{rel}:{line}: put answered:\n  {}", out.trim_end()));
                    // Later requests depend on this data.
                    return o;
                }
                Err(e) => {
                    o.failures.push(format!("{rel}:{line}: {e}"));
                    return o;
                }
            },
            Step::Request(r) => {
                let write =
                    backend::changes_data(&r.method, &r.path, r.body.as_deref().unwrap_or(""));
                let res = http(addr(write), r).and_then(|got| check(r, &got));
                match res {
                    Ok(()) => o.passed += 1,
                    Err(e) => o.failures.push(format!(
                        "{rel}:{}: {} {}\n{}",
                        r.line,
                        r.method,
                        r.path,
                        e.trim_end()
                    )),
                }
            }
        }
    }
    o
}

fn case_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            case_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "case") {
            out.push(p);
        }
    }
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/compat");
    // Options the test harness would take (`--nocapture`, ...) are ignored.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let target = std::env::var("RTSDB_COMPAT_TARGET").ok().map(|t| {
        t.to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .unwrap_or_else(|| panic!("RTSDB_COMPAT_TARGET={t}: not host:port"))
    });
    let mut targets = match target {
        Some(t) => vec![("", Target::External(t))],
        None => vec![("", Target::Fresh(Backend::Embedded))],
    };
    if target.is_none() {
        if std::env::var(cluster::CLUSTER_ENV).is_ok() {
            targets.push(("cluster:", Target::Fresh(Backend::Cluster)));
        } else {
            println!(
                "compat on the cluster backend: skipped: {} not set (run scripts/with-cluster cargo test)",
                cluster::CLUSTER_ENV
            );
        }
    }
    let mut paths = Vec::new();
    case_files(&root, &mut paths);
    let mut files: Vec<(PathBuf, String, &Target)> = Vec::new();
    for (prefix, target) in &targets {
        for p in &paths {
            let rel = format!("{prefix}{}", p.strip_prefix(&root).unwrap().display());
            if filters.is_empty() || filters.iter().any(|f| rel.contains(f.as_str())) {
                files.push((p.clone(), rel, target));
            }
        }
    }
    if let Some(t) = target {
        // Every file assumes an empty database (fresh UIDs included).
        println!("compat: against {t}; each file expects an empty server with its `config`");
    }
    // Against one external server the files run one after another.
    let workers = if target.is_some() { 1 } else { 3 };
    let next = Mutex::new(files.iter());
    let results = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let Some((path, rel, target)) = next.lock().unwrap().next() else {
                        break;
                    };
                    let o = run_file(path, rel, target);
                    results.lock().unwrap().push((rel.clone(), o));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by(|a, b| a.0.cmp(&b.0));
    let (mut passed, mut failed) = (0, 0);
    for (rel, o) in &results {
        passed += o.passed;
        failed += o.failures.len();
        for f in &o.failures {
            println!("FAIL {f}\n");
        }
        if o.failures.is_empty() {
            println!("ok   {rel} ({} requests)", o.passed);
        }
    }
    // The closing line in the plain form test summaries use.
    println!("\n{} files of cases", results.len());
    println!("compat: {passed} passed, {failed} failed");
    if failed > 0 || results.is_empty() {
        std::process::exit(1);
    }
}
