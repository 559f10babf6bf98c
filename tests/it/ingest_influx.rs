//! InfluxDB line protocol into a TSD (`/write`, `/api/v2/write`,
//! `/ping`), on both backends: requests written here, then InfluxDB's
//! own Python clients (`influxdb` for 1.x, `influxdb-client` for 2.x),
//! each read back through `/api/query` and PromQL.
//!
//! A missing Python package skips a client test with a printed reason,
//! and fails it in CI (`scripts/with-cluster` installs them).

use std::io::Write as _;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{Backend, ChildOptions, ChildTsd, TestServer, Tsds, http, on_both_backends};

/// Whether `CI` says this is a CI run, where a missing tool is a failure.
pub(crate) fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// `false` after saying why `test` is skipped when `what` is missing; a
/// failure in CI, which installs it.
pub(crate) fn available(test: &str, present: bool, what: &str, install: &str) -> bool {
    if present {
        return true;
    }
    assert!(
        !in_ci(),
        "{test}: {what} is missing in CI (scripts/with-cluster installs it)"
    );
    let _ = writeln!(
        std::io::stderr(),
        "{test}: skipped: {what} is not installed ({install})"
    );
    false
}

/// A line-protocol body POSTed to `path` on the writer.
fn post(tsds: &Tsds, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Value) {
    let r = http(tsds.writer().addr, "POST", path, headers, body);
    let json = if r.body.is_empty() {
        Value::Null
    } else {
        r.json()
    };
    (r.status, json)
}

/// The `dps` of `/api/query` for `m` (a sub-query) from `start` (seconds),
/// asked of the reader; `null` when nothing answers.
fn dps(tsds: &Tsds, start: i64, m: &str) -> Value {
    let (status, body) = tsds.req(
        "GET",
        &format!("/api/query?start={start}&end={}&m={m}", start + 7200),
        "",
    );
    if status != 200 {
        return Value::Null;
    }
    let v: Value = serde_json::from_str(&body).unwrap();
    v[0]["dps"].clone()
}

/// The value PromQL gives `query` at `t` (seconds) on the reader.
fn promql(tsds: &Tsds, query: &str, t: i64) -> Option<String> {
    let q: String = query
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let (status, body) = tsds.req(
        "GET",
        &format!("/prometheus/api/v1/query?query={q}&time={t}"),
        "",
    );
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["data"]["result"][0]["value"][1]
        .as_str()
        .map(str::to_string)
}

/// Retries `check` until it holds, for what arrives asynchronously.
fn eventually(what: &str, within: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

const T: i64 = 1_700_000_000;

fn lines_map_to_series(backend: Backend) {
    let Some(tsds) = Tsds::start(backend, &[]) else {
        return;
    };
    let body = format!(
        "# a comment\n\
         cpu,host=web01,region=eu usage_idle=92.5,usage_user=3i,up=t,total=7u {T}000000000\n\
         \n\
         mem free=1024i {T}000000000\n\
         my\\ disk,path=/var\\,log used=0.5 {T}000000000\n"
    );
    let (status, answer) = post(&tsds, "/write?db=telegraf", &[], body.as_bytes());
    assert_eq!(status, 204, "{answer}");
    assert_eq!(
        dps(&tsds, T, "sum:cpu.usage_idle{host=web01}"),
        serde_json::json!({ T.to_string(): 92.5 })
    );
    assert_eq!(
        dps(&tsds, T, "sum:cpu.usage_user"),
        serde_json::json!({ T.to_string(): 3 })
    );
    assert_eq!(dps(&tsds, T, "sum:cpu.up")[T.to_string()], 1);
    assert_eq!(dps(&tsds, T, "sum:cpu.total")[T.to_string()], 7);
    // A line without tags is a series without tags.
    assert_eq!(dps(&tsds, T, "sum:mem.free")[T.to_string()], 1024);
    // The same series in PromQL, by name.
    assert_eq!(
        promql(&tsds, r#"{__name__="cpu.usage_idle",region="eu"}"#, T).as_deref(),
        Some("92.5")
    );
    assert_eq!(
        promql(&tsds, r#"{__name__="mem.free"}"#, T).as_deref(),
        Some("1024")
    );
    // Escaped names, through PromQL (OpenTSDB's query syntax has no
    // spaces in names).
    assert_eq!(
        promql(&tsds, r#"{__name__="my disk.used",path="/var,log"}"#, T).as_deref(),
        Some("0.5")
    );
}

fn answers_as_influxdb(backend: Backend) {
    let Some(tsds) = Tsds::start(backend, &[]) else {
        return;
    };
    let addr = tsds.writer().addr;
    // /ping, as clients probe it.
    for method in ["GET", "HEAD"] {
        let r = http(addr, method, "/ping", &[], b"");
        assert_eq!(r.status, 204, "{method}");
        assert!(r.header("X-Influxdb-Version").is_some(), "{method}");
    }
    // Precisions.
    for (precision, t) in [
        ("s", T.to_string()),
        ("ms", format!("{T}000")),
        ("u", format!("{T}000000")),
        ("ns", format!("{T}000000123")),
        ("m", (T / 60).to_string()),
        ("h", (T / 3600).to_string()),
    ] {
        let (status, answer) = post(
            &tsds,
            &format!("/write?precision={precision}"),
            &[],
            format!("prec,p={precision} v=1 {t}").as_bytes(),
        );
        assert_eq!(status, 204, "{precision}: {answer}");
    }
    // s, ms, u and ns at T (ns rounded down to the millisecond); m and h
    // at the minute and hour before.
    let got = dps(&tsds, T - 7200, "sum:prec.v");
    let times: Vec<&String> = got.as_object().unwrap().keys().collect();
    assert_eq!(times.len(), 3, "{got}");
    assert_eq!(got[T.to_string()], 4.0, "{got}");
    // A bad precision.
    let (status, answer) = post(&tsds, "/write?precision=d", &[], b"x v=1");
    assert_eq!(status, 400);
    assert!(answer["error"].as_str().unwrap().contains("precision"));
    // Partial failures: the good lines are stored, the bad ones named.
    let body = format!(
        "good,host=a v=1 {T}\nbad line\nstr,host=a s=\"text\",n=2 {T}\nlate v=1 -5\ngood,host=b v=2 {T}\n"
    );
    let (status, answer) = post(&tsds, "/write?precision=s", &[], body.as_bytes());
    assert_eq!(status, 400, "{answer}");
    let error = answer["error"].as_str().expect("1.x error body");
    assert!(error.starts_with("partial write: "), "{error}");
    assert!(
        error.contains("line 2: unable to parse 'bad line': invalid field format"),
        "{error}"
    );
    assert!(
        error.contains("line 3: string field \"s\" of \"str\" is not stored"),
        "{error}"
    );
    assert!(error.contains("line 4: timestamp -5000 ms"), "{error}");
    assert!(error.ends_with("dropped=3"), "{error}");
    assert_eq!(dps(&tsds, T, "sum:good.v")[T.to_string()], 3.0);
    assert_eq!(dps(&tsds, T, "sum:str.n")[T.to_string()], 2.0);
    // 2.x: the same in its error shape.
    let (status, answer) = post(
        &tsds,
        "/api/v2/write?org=o&bucket=b&precision=s",
        &[("Authorization", "Token x")],
        b"v2 v=\n",
    );
    assert_eq!(status, 400);
    assert_eq!(answer["code"], "invalid");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("line 1: unable to parse 'v2 v=': missing field value"),
        "{answer}"
    );
    let (status, answer) = post(
        &tsds,
        "/api/v2/write?org=o&bucket=b&precision=s",
        &[],
        format!("v2 v=4 {T}").as_bytes(),
    );
    assert_eq!(status, 204, "{answer}");
    assert_eq!(dps(&tsds, T, "sum:v2.v")[T.to_string()], 4.0);
    // gzip bodies, and ?sync.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(format!("zipped v=5 {T}\n").as_bytes())
        .unwrap();
    let (status, answer) = post(
        &tsds,
        "/api/v2/write?bucket=b&precision=s&sync",
        &[("Content-Encoding", "gzip")],
        &gz.finish().unwrap(),
    );
    assert_eq!(status, 204, "{answer}");
    assert_eq!(dps(&tsds, T, "sum:zipped.v")[T.to_string()], 5.0);
    let (status, answer) = post(
        &tsds,
        "/write",
        &[("Content-Encoding", "gzip")],
        b"not gzip",
    );
    assert_eq!(status, 400, "{answer}");
    assert!(answer["error"].is_string(), "{answer}");
    // Only POST writes.
    let r = http(addr, "GET", "/write", &[], b"");
    assert_eq!(r.status, 405);
    // OpenTSDB's versioned paths keep their answers.
    let r = http(addr, "POST", "/api/v2/put", &[], b"{}");
    assert_eq!(r.status, 501, "{}", r.text());
    assert!(r.text().contains("greater than the max"), "{}", r.text());
    // The points are counted.
    let (_, stats) = crate::common::get(tsds.writer(), "/api/stats");
    assert!(stats.contains("\"type\":\"influx\""), "{stats}");
}

fn mapping_options(backend: Backend) {
    let settings = [("tsd.influx.separator", "_"), ("tsd.influx.db_tag", "db")];
    let Some(tsds) = Tsds::start(backend, &settings) else {
        return;
    };
    let (status, answer) = post(
        &tsds,
        "/write?db=telegraf&precision=s",
        &[],
        format!("cpu,host=a usage_idle=50 {T}\n").as_bytes(),
    );
    assert_eq!(status, 204, "{answer}");
    let (status, answer) = post(
        &tsds,
        "/api/v2/write?bucket=metrics&precision=s",
        &[],
        format!("cpu,host=b usage_idle=60 {T}\n").as_bytes(),
    );
    assert_eq!(status, 204, "{answer}");
    assert_eq!(
        dps(&tsds, T, "sum:cpu_usage_idle{db=telegraf}")[T.to_string()],
        50.0
    );
    // A PromQL-friendly name: no __name__ matcher needed.
    assert_eq!(
        promql(&tsds, r#"cpu_usage_idle{db="metrics"}"#, T).as_deref(),
        Some("60")
    );
}

/// Limits and modes, on one embedded TSD each.
#[test]
fn limits_and_modes() {
    let srv = TestServer::start(&[("tsd.http.request.max_chunk", "1000")]);
    let body = "x v=1\n".repeat(400);
    let r = http(srv.addr, "POST", "/write", &[], body.as_bytes());
    assert_eq!(r.status, 413, "{}", r.text());
    assert!(r.json()["error"].is_string(), "{}", r.text());
    let r = http(
        srv.addr,
        "POST",
        "/api/v2/write?bucket=b",
        &[],
        body.as_bytes(),
    );
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(r.json()["code"], "request too large", "{}", r.text());
    let ro = TestServer::start(&[("tsd.mode", "ro")]);
    let r = http(ro.addr, "POST", "/write", &[], b"x v=1");
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(ro.point_count("x.v"), 0);
}

/// What a retry can fix is a 503 (senders retry it): the WAL cannot be
/// written here, its data directory removed under a running TSD.
#[test]
fn an_unwritable_wal_is_a_503() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let tsd = ChildTsd::start(&data, ChildOptions::default());
    let r = http(
        tsd.addr,
        "POST",
        "/write?sync&precision=s",
        &[],
        b"w v=1 1700000000",
    );
    assert_eq!(r.status, 204, "{}", r.text());
    std::fs::remove_dir_all(&data).unwrap();
    let r = http(
        tsd.addr,
        "POST",
        "/write?sync&precision=s",
        &[],
        b"w v=2 1700000010",
    );
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(
        r.json()["error"].as_str().unwrap().contains("was deleted"),
        "{}",
        r.text()
    );
    let r = http(
        tsd.addr,
        "POST",
        "/api/v2/write?bucket=b&precision=s",
        &[],
        b"w v=3 1700000020",
    );
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["code"], "unavailable", "{}", r.text());
    drop(tsd);
}

/// Runs a Python script with `args`; its output, or the failure.
fn python(script: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(text)
    }
}

fn has_module(module: &str) -> bool {
    python(&format!("import {module}"), &[]).is_ok()
}

/// The 1.x client (`pip install influxdb`): `write_points` with tags,
/// several field types and second precision, and its `ping`.
const INFLUXDB_V1: &str = r#"
import sys
from influxdb import InfluxDBClient
port, t = int(sys.argv[1]), int(sys.argv[2])
c = InfluxDBClient(host="127.0.0.1", port=port, database="telegraf", username="u", password="p")
print("version", c.ping())
points = [
    {"measurement": "py1_cpu", "tags": {"host": "web01", "dc": "eu west"},
     "time": t + i * 10, "fields": {"usage_idle": 90.0 + i, "procs": i, "ok": True}}
    for i in range(5)
]
assert c.write_points(points, time_precision="s")
assert c.write_points([{"measurement": "py1_gz", "time": t, "fields": {"v": 1.5}}],
                      time_precision="s", batch_size=1)
print("written")
"#;

/// The 2.x client (`pip install influxdb-client`): the synchronous write
/// API with `Point`s, records in line protocol, and gzip.
const INFLUXDB_V2: &str = r#"
import sys
from influxdb_client import InfluxDBClient, Point, WritePrecision
from influxdb_client.client.write_api import SYNCHRONOUS
port, t = int(sys.argv[1]), int(sys.argv[2])
for gzip in (False, True):
    with InfluxDBClient(url=f"http://127.0.0.1:{port}", token="t", org="o", enable_gzip=gzip) as c:
        w = c.write_api(write_options=SYNCHRONOUS)
        name = "py2_gz" if gzip else "py2_mem"
        w.write(bucket="b", record=[
            Point(name).tag("host", "web02").field("used", 100 + i).field("ratio", 0.25 * i)
                .time(t + i * 10, WritePrecision.S)
            for i in range(5)
        ])
        w.write(bucket="b", record=f"{name}_line,host=web02 v=7i {t}", write_precision=WritePrecision.S)
print("written")
"#;

fn python_clients(backend: Backend) {
    let test = "ingest_influx::python_clients";
    let v1 = has_module("influxdb");
    let v2 = has_module("influxdb_client");
    let install = "pip install influxdb influxdb-client";
    if !available(test, v1, "the Python package influxdb", install)
        || !available(test, v2, "the Python package influxdb-client", install)
    {
        return;
    }
    let Some(tsds) = Tsds::start(backend, &[]) else {
        return;
    };
    let port = tsds.writer().addr.port().to_string();
    let t = T.to_string();
    let out = python(INFLUXDB_V1, &[&port, &t]).unwrap_or_else(|e| panic!("influxdb: {e}"));
    assert!(out.contains("written"), "{out}");
    let out = python(INFLUXDB_V2, &[&port, &t]).unwrap_or_else(|e| panic!("influxdb-client: {e}"));
    assert!(out.contains("written"), "{out}");
    eventually("the clients' points", Duration::from_secs(10), || {
        dps(&tsds, T, "sum:py2_gz_line.v").get(&t).is_some()
    });
    // 1.x: every point, every field type.
    let idle = dps(&tsds, T, "sum:py1_cpu.usage_idle{host=web01}");
    let want: serde_json::Map<String, Value> = (0..5)
        .map(|i| ((T + i * 10).to_string(), serde_json::json!(90.0 + i as f64)))
        .collect();
    assert_eq!(idle, Value::Object(want));
    assert_eq!(dps(&tsds, T, "sum:py1_cpu.procs")[(T + 40).to_string()], 4);
    assert_eq!(dps(&tsds, T, "sum:py1_cpu.ok")[&t], 1);
    assert_eq!(dps(&tsds, T, "sum:py1_gz.v")[&t], 1.5);
    // A tag value with a space, through PromQL.
    assert_eq!(
        promql(
            &tsds,
            r#"{__name__="py1_cpu.usage_idle",dc="eu west"}"#,
            T + 20
        )
        .as_deref(),
        Some("92")
    );
    // 2.x, plain and gzipped.
    for name in ["py2_mem", "py2_gz"] {
        assert_eq!(
            dps(&tsds, T, &format!("sum:{name}.used{{host=web02}}"))[(T + 30).to_string()],
            103,
            "{name}"
        );
        assert_eq!(
            promql(&tsds, &format!(r#"{{__name__="{name}.ratio"}}"#), T + 40).as_deref(),
            Some("1"),
            "{name}"
        );
        assert_eq!(
            dps(&tsds, T, &format!("sum:{name}_line.v"))[&t],
            7,
            "{name}"
        );
    }
}

on_both_backends!(
    lines_map_to_series,
    answers_as_influxdb,
    mapping_options,
    python_clients
);
