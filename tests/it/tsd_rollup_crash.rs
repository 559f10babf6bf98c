//! `tsd.rollups.auto` across a SIGKILL: the rollups a restarted TSD
//! answers with are those of the raw points it stored, whether the kill
//! came before the flusher wrote an hour, between its raw row and its
//! rollups, or after both, or in the middle of a delete query
//! (docs/rollups.md, "Crashes" and "Deletes").

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::common::{self, ChildOptions, ChildTsd};

const START: i64 = 1356998400;

const CONFIG: &str = r#"{"aggregationIds":{"sum":0,"count":1,"max":2,"min":3},"intervals":[{"table":"tsdb","preAggregationTable":"tsdb-agg","interval":"1m","rowSpan":"1h","defaultInterval":true},{"table":"tsdb-rollup-10m","preAggregationTable":"tsdb-rollup-agg-10m","interval":"10m","rowSpan":"6h"},{"table":"tsdb-rollup-1h","preAggregationTable":"tsdb-rollup-agg-1h","interval":"1h","rowSpan":"1d"}]}"#;

fn conf(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("opentsdb.conf");
    std::fs::write(
        &path,
        format!(
            "tsd.rollups.enable = true\ntsd.rollups.auto = true\ntsd.rollups.config = {CONFIG}\n\
             tsd.http.query.allow_delete = true\n"
        ),
    )
    .unwrap();
    path
}

fn spawn(data: &Path, conf: &Path, flush_ms: u64) -> ChildTsd {
    ChildTsd::start(
        data,
        ChildOptions {
            flush_interval_ms: Some(flush_ms),
            config: Some(conf),
            ..Default::default()
        },
    )
}

/// `(host, timestamp) -> value` of every result of `m`, over ten hours
/// ending a second before an interval boundary: a rollup cell at the end
/// would hold points after it, which the raw points' last bucket stops
/// short of (as in OpenTSDB).
fn query(addr: SocketAddr, m: &str) -> BTreeMap<(String, String), f64> {
    let r = common::http(
        addr,
        "GET",
        &format!(
            "/api/query?start={START}&end={}&m={m}",
            START + 10 * 3600 - 1
        ),
        &[],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v: serde_json::Value = serde_json::from_str(&r.text()).unwrap();
    let mut out = BTreeMap::new();
    for s in v.as_array().unwrap() {
        let host = s["tags"]["host"].as_str().unwrap().to_string();
        for (ts, x) in s["dps"].as_object().unwrap() {
            out.insert((host.clone(), ts.clone()), x.as_f64().unwrap());
        }
    }
    out
}

/// Every downsampler the rollups answer gives the raw points' numbers.
fn assert_rollups_match_raw(addr: SocketAddr) {
    for ds in [
        "1h-avg", "1h-sum", "10m-max", "10m-min", "1h-count", "2h-avg",
    ] {
        let m = format!("sum:{ds}:rollup.crash%7Bhost=*%7D");
        let rolled = query(addr, &m);
        let raw = query(
            addr,
            &m.replace(&format!("{ds}:"), &format!("{ds}:rollup_raw:")),
        );
        assert!(!raw.is_empty(), "{ds}: no raw points");
        assert_eq!(
            rolled.keys().collect::<Vec<_>>(),
            raw.keys().collect::<Vec<_>>(),
            "{ds}: rollups and raw points differ in their timestamps"
        );
        for (k, r) in &raw {
            let x = rolled[k];
            assert!(
                (x - r).abs() <= 1e-9 * r.abs().max(1.0),
                "{ds} {k:?}: rollup {x}, raw {r}"
            );
        }
    }
}

fn stat(addr: SocketAddr, name: &str, tag: &str) -> u64 {
    let r = common::http(addr, "GET", "/api/stats", &[], b"");
    let v: serde_json::Value = serde_json::from_str(&r.text()).unwrap();
    let (k, val) = tag.split_once('=').unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .find(|s| s["metric"] == name && s["tags"][k] == val)
        .unwrap_or_else(|| panic!("no {name} {tag} in {v}"))["value"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn put(addr: SocketAddr, first: u64, n: u64) -> bool {
    let body: Vec<String> = (first..first + n)
        .map(|t| {
            // Two hosts, a point every 7 s, values that are not sorted.
            format!(
                r#"{{"metric":"rollup.crash","timestamp":{},"value":{},"tags":{{"host":"h{}"}}}}"#,
                START + (t / 2 * 7) as i64,
                (t * 37) % 101,
                t % 2
            )
        })
        .collect();
    let body = format!("[{}]", body.join(","));
    matches!(
        std::panic::catch_unwind(|| common::post_put(addr, "?sync", &body)),
        Ok(r) if r.status == 204
    )
}

/// Killed before any flush: the WAL holds every point and no rollup
/// exists. Replay at the next start writes the rows and their rollups.
#[test]
fn replayed_hours_get_their_rollups() {
    let dir = tempfile::tempdir().unwrap();
    let conf = conf(dir.path());
    let data = dir.path().join("data");
    // A flush interval far longer than the test: nothing is flushed.
    let tsd = spawn(&data, &conf, 600_000);
    for k in 0..10 {
        assert!(put(tsd.addr, k * 500, 500));
    }
    tsd.kill();
    let tsd = spawn(&data, &conf, 200);
    assert!(stat(tsd.addr, "tsd.rollup.stored", "type=computed") > 0);
    assert_rollups_match_raw(tsd.addr);
    let status = tsd.terminate();
    assert!(status.success(), "{status:?}");
}

/// Killed mid-stream while the flusher writes hours (and writes them
/// again as late points arrive): wherever the kill lands, the restarted
/// TSD's rollups match its raw points.
#[test]
fn rollups_match_raw_points_after_sigkill_mid_stream() {
    let dir = tempfile::tempdir().unwrap();
    let conf = conf(dir.path());
    let data = dir.path().join("data");
    let next = Arc::new(AtomicU64::new(0));
    for round in 0..2u64 {
        let tsd = spawn(&data, &conf, 100);
        let stop = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let (stop, next, addr) = (stop.clone(), next.clone(), tsd.addr);
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        // Half the time a late point, back in an hour
                        // already flushed.
                        let first = next.fetch_add(200, Ordering::Relaxed);
                        let first = if first % 400 == 0 { first / 3 } else { first };
                        if !put(addr, first, 200) {
                            return;
                        }
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(1200 + 300 * round));
        tsd.kill();
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            w.join().unwrap();
        }
    }
    let tsd = spawn(&data, &conf, 200);
    assert_rollups_match_raw(tsd.addr);
    let status = tsd.terminate();
    assert!(status.success(), "{status:?}");
}

/// Killed while delete queries remove hours of stored series (and points
/// come back into them): wherever the kill lands in a delete (before its
/// rollups were recomputed, between them and the rows going, after), the
/// restarted TSD's rollups match its raw points.
#[test]
fn rollups_match_raw_points_after_sigkill_during_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let conf = conf(dir.path());
    let data = dir.path().join("data");
    let tsd = spawn(&data, &conf, 100);
    for k in 0..10 {
        assert!(put(tsd.addr, k * 500, 500));
    }
    // Until the first hours are stored with their rollups (at most 30 s).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while stat(tsd.addr, "tsd.rollup.stored", "type=computed") == 0 {
        assert!(std::time::Instant::now() < deadline, "nothing stored");
        std::thread::sleep(Duration::from_millis(50));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let addr = tsd.addr;
    let deleter = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // One hour of one host (of the first four), then some of
                // its points again.
                let hour = START + (n % 4) as i64 * 3600;
                let path = format!(
                    "/api/query?start={hour}&end={}&m=sum:rollup.crash%7Bhost=h{}%7D&method_override=delete",
                    hour + 1,
                    n % 2
                );
                let ok = std::panic::catch_unwind(|| common::http(addr, "GET", &path, &[], b""))
                    .is_ok_and(|r| r.status == 200);
                if !ok || !put(addr, n * 97 % 4000, 100) {
                    return;
                }
                n += 1;
            }
        })
    };
    std::thread::sleep(Duration::from_millis(900));
    tsd.kill();
    stop.store(true, Ordering::Relaxed);
    deleter.join().unwrap();
    let tsd = spawn(&data, &conf, 200);
    assert_rollups_match_raw(tsd.addr);
    let status = tsd.terminate();
    assert!(status.success(), "{status:?}");
}
