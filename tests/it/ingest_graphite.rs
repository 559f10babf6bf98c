//! Graphite plaintext into a TSD's Graphite port
//! (`tsd.network.graphite.port`), on both backends: lines written here
//! (tags, templates, bad lines on a connection that stays open), then
//! collectd's `write_graphite` plugin (Debian `collectd-core`), each read
//! back through `/api/query` and PromQL.

use std::io::Write as _;
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::ingest_influx::available;
use super::prom_common::Process;
use crate::common::{Backend, Tsds, on_both_backends};

const T: i64 = 1_700_000_000;
const COLLECTD: &str = "/usr/sbin/collectd";

/// The reader's `/api/query` answer for `m` over the hour from `start`.
fn query(tsds: &Tsds, start: i64, m: &str) -> Value {
    let (status, body) = tsds.req(
        "GET",
        &format!("/api/query?start={start}&end={}&m={m}", start + 3600),
        "",
    );
    if status != 200 {
        return Value::Null;
    }
    serde_json::from_str(&body).unwrap()
}

/// Polls `check` until it holds: Graphite has no acknowledgement.
fn eventually<T>(what: &str, within: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn graphite_port(tsds: &Tsds) -> u16 {
    tsds.writer()
        .state
        .graphite_port()
        .expect("the Graphite port is open")
}

fn lines_and_templates(backend: Backend) {
    let settings = [
        ("tsd.network.graphite.port", "0"),
        (
            "tsd.graphite.templates",
            "servers.* .host.measurement.field* dc=eu",
        ),
    ];
    let Some(tsds) = Tsds::start(backend, &settings) else {
        return;
    };
    let mut s = TcpStream::connect(("127.0.0.1", graphite_port(&tsds))).unwrap();
    let lines = format!(
        "plain.path.value 1.5 {T}\n\
         this is not a line\n\
         tagged.metric;host=web01;dc=us 42 {T}\r\n\
         nan.value nan {T}\n\
         servers.web02.cpu.load.1m 0.75 {T}\n"
    );
    s.write_all(lines.as_bytes()).unwrap();
    // The connection stays open after bad lines.
    std::thread::sleep(Duration::from_millis(300));
    s.write_all(format!("after.bad 7 {T}\n").as_bytes())
        .unwrap();
    let got = eventually("after.bad", Duration::from_secs(10), || {
        let v = query(&tsds, T, "sum:after.bad");
        v[0]["dps"][T.to_string()].as_f64()
    });
    assert_eq!(got, 7.0);
    // A line too long to take is refused whole, in whatever pieces it
    // comes; the next line is read.
    let long = format!("{} 1 {T}\n", "x".repeat(40_000));
    s.write_all(&long.as_bytes()[..20_000]).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    s.write_all(&long.as_bytes()[20_000..]).unwrap();
    s.write_all(format!("after.long 8 {T}\n").as_bytes())
        .unwrap();
    let got = eventually("after.long", Duration::from_secs(10), || {
        let v = query(&tsds, T, "sum:after.long");
        v[0]["dps"][T.to_string()].as_f64()
    });
    assert_eq!(got, 8.0);
    // The whole path is the metric; no tags needed.
    assert_eq!(
        query(&tsds, T, "sum:plain.path.value")[0]["dps"][T.to_string()],
        1.5
    );
    // Graphite 1.1 tags are tags.
    let v = query(&tsds, T, "sum:tagged.metric{host=web01}");
    assert_eq!(v[0]["dps"][T.to_string()], 42.0);
    assert_eq!(v[0]["tags"]["dc"], "us");
    // The template lifted the host, kept the rest, added dc.
    let v = query(&tsds, T, "sum:cpu.load.1m");
    assert_eq!(v[0]["dps"][T.to_string()], 0.75, "{v}");
    assert_eq!(v[0]["tags"]["host"], "web02", "{v}");
    assert_eq!(v[0]["tags"]["dc"], "eu", "{v}");
    // PromQL reads the same series.
    let (status, body) = tsds.req(
        "GET",
        &format!("/prometheus/api/v1/query?query=%7B__name__%3D%22plain.path.value%22%7D&time={T}"),
        "",
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""value":[1700000000,"1.5"]"#), "{body}");
    // Bad lines are counted.
    let (_, stats) = crate::common::get(tsds.writer(), "/api/stats");
    let stats: Value = serde_json::from_str(&stats).unwrap();
    let received = stats
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["metric"] == "tsd.rpc.received" && s["tags"]["type"] == "graphite")
        .expect("the graphite counter");
    // Six lines, then the one after the long line (which never became a
    // line: it is counted as an error only).
    assert_eq!(received["value"], "7", "{received}");
    let errors = stats
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["metric"] == "tsd.rpc.errors" && s["tags"]["type"] == "illegal_arguments")
        .expect("the error counter");
    assert_eq!(errors["value"], "3", "{errors}");
    drop(s);
}

/// A collectd configuration: the load plugin every second, written to
/// `port` by `write_graphite` as `collectd.<host>.load.load.<term>`.
fn collectd_config(dir: &Path, port: u16) -> String {
    format!(
        r#"Hostname "rtsdbtest"
FQDNLookup false
BaseDir "{dir}"
PIDFile "{dir}/collectd.pid"
PluginDir "/usr/lib/collectd"
TypesDB "/usr/share/collectd/types.db"
Interval 1
LoadPlugin load
LoadPlugin write_graphite
<Plugin write_graphite>
  <Node "rtsdb">
    Host "127.0.0.1"
    Port "{port}"
    Protocol "tcp"
    Prefix "collectd."
    StoreRates true
    AlwaysAppendDS false
  </Node>
</Plugin>
"#,
        dir = dir.display()
    )
}

fn collectd_write_graphite(backend: Backend) {
    let test = "ingest_graphite::collectd_write_graphite";
    if !available(
        test,
        Path::new(COLLECTD).is_file(),
        COLLECTD,
        "apt-get install collectd-core",
    ) {
        return;
    }
    let Some(tsds) = Tsds::start(backend, &[("tsd.network.graphite.port", "0")]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("collectd.conf");
    std::fs::write(&conf, collectd_config(dir.path(), graphite_port(&tsds))).unwrap();
    let mut cmd = Command::new(COLLECTD);
    cmd.arg("-f").arg("-C").arg(&conf);
    let collectd = Process::spawn("collectd", cmd, &dir.path().join("collectd.log"));
    let start = chrono_now() - 600;
    let metric = "collectd.rtsdbtest.load.load.shortterm";
    let v = eventually("collectd's load", Duration::from_secs(60), || {
        let v = query(&tsds, start, &format!("sum:{metric}"));
        let n = v[0]["dps"].as_object().map_or(0, |d| d.len());
        (n >= 2).then_some(v)
    });
    let dps = v[0]["dps"].as_object().unwrap();
    assert!(
        dps.values().all(|x| x.as_f64().is_some_and(|x| x >= 0.0)),
        "{v}\n{}",
        collectd.log_tail()
    );
    // PromQL sees the series collectd wrote.
    let (status, body) = tsds.req(
        "GET",
        &format!(
            "/prometheus/api/v1/query?query=%7B__name__%3D%22{metric}%22%7D&time={}",
            chrono_now()
        ),
        "",
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(metric), "{body}");
    drop(collectd);
}

fn chrono_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

on_both_backends!(lines_and_templates, collectd_write_graphite);
