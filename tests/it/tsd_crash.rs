//! Crash safety: a child `tsdb tsd` takes `sync` puts over HTTP and is
//! killed with SIGKILL mid-stream; after a restart every acknowledged
//! point is in the store, and store and WAL reopen clean.

use crate::common::{self, ChildOptions, ChildTsd};

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rtsdb::model::UidKind;
use rtsdb::store::read::SeriesSource;
use rtsdb::store::{Store, StoreOptions};
use rtsdb::uid::{AutoCreate, UidTable};

/// A TSD that flushes every 200 ms, so rows and WAL both hold points.
fn spawn(dir: &Path) -> ChildTsd {
    ChildTsd::start(
        dir,
        ChildOptions {
            flush_interval_ms: Some(200),
            ..Default::default()
        },
    )
}

fn terminate(tsd: ChildTsd) {
    let status = tsd.terminate();
    assert!(status.success(), "graceful stop: {status:?}");
}

/// Writers that record which timestamps were acknowledged.
fn ingest(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    next: Arc<AtomicU64>,
    acked: Arc<Mutex<BTreeSet<u64>>>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..4)
        .map(|_| {
            let (stop, next, acked) = (stop.clone(), next.clone(), acked.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let first = next.fetch_add(50, Ordering::Relaxed);
                    let body: Vec<String> = (first..first + 50)
                        .map(|t| {
                            format!(
                                r#"{{"metric":"crash.test","timestamp":{},"value":{t},"tags":{{"host":"h{}"}}}}"#,
                                1356998400 + t,
                                t % 7
                            )
                        })
                        .collect();
                    let body = format!("[{}]", body.join(","));
                    let r = std::panic::catch_unwind(|| common::post_put(addr, "?sync", &body));
                    match r {
                        Ok(r) if r.status == 204 => {
                            acked.lock().unwrap().extend(first..first + 50);
                        }
                        _ => return, // the server died mid-request
                    }
                }
            })
        })
        .collect()
}

fn stored_timestamps(dir: &Path) -> BTreeSet<u64> {
    let store = Store::open(dir, &StoreOptions::default()).unwrap();
    let uids = UidTable::new(store.uid_store(), AutoCreate::default(), Default::default());
    let m = uids.get_id(UidKind::Metric, "crash.test").unwrap();
    let mut out = BTreeSet::new();
    for s in store.read_series(m, 0, u64::MAX, &mut |_| true).unwrap() {
        for p in s.points {
            let t = p.timestamp_ms() / 1000 - 1356998400;
            assert_eq!(p.value(), rtsdb::model::Value::Int(t as i64));
            out.insert(t);
        }
    }
    out
}

#[test]
fn acknowledged_sync_puts_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let next = Arc::new(AtomicU64::new(0));
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    for round in 0..2 {
        let tsd = spawn(dir.path());
        let stop = Arc::new(AtomicBool::new(false));
        let workers = ingest(tsd.addr, stop.clone(), next.clone(), acked.clone());
        std::thread::sleep(Duration::from_millis(1500 + 300 * round));
        tsd.kill(); // SIGKILL, mid-stream
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            w.join().unwrap();
        }
    }
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() > 500,
        "too few acknowledged points: {}",
        acked.len()
    );
    // Restart: the WAL is replayed; stop cleanly.
    terminate(spawn(dir.path()));
    assert_eq!(
        std::fs::read_dir(dir.path().join("wal")).unwrap().count(),
        0,
        "a clean stop leaves no WAL"
    );
    let stored = stored_timestamps(dir.path());
    let missing: Vec<_> = acked.difference(&stored).take(10).collect();
    assert!(
        missing.is_empty(),
        "acknowledged but lost: {missing:?} ({} acked, {} stored)",
        acked.len(),
        stored.len()
    );
    // Starts clean once more.
    terminate(spawn(dir.path()));
}

/// Puts without `sync` (telnet, plain `/api/put`) are answered before they
/// reach the disk, but the WAL writer writes and syncs them by itself
/// within a flush interval: a SIGKILL once it has (`tsd.wal.unsynced_bytes`
/// back to 0; no timing is assumed) loses none of them.
#[test]
fn unsynced_puts_older_than_a_flush_interval_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let tsd = ChildTsd::start(
        dir.path(),
        ChildOptions {
            flush_interval_ms: Some(100),
            ..Default::default()
        },
    );
    let unsynced = |addr| -> u64 {
        let v = common::http(addr, "GET", "/api/stats", &[], b"").json();
        v.as_array()
            .unwrap()
            .iter()
            .find(|s| s["metric"] == "tsd.wal.unsynced_bytes")
            .and_then(|s| s["value"].as_str()?.parse().ok())
            .expect("tsd.wal.unsynced_bytes")
    };
    let lines: String = (0..500u64)
        .map(|t| format!("put crash.test {} {t} host=telnet\n", 1356998400 + t))
        .collect();
    assert_eq!(common::telnet(tsd.addr, lines.as_bytes()), "");
    let body: Vec<String> = (500..1000u64)
        .map(|t| {
            format!(
                r#"{{"metric":"crash.test","timestamp":{},"value":{t},"tags":{{"host":"http"}}}}"#,
                1356998400 + t
            )
        })
        .collect();
    let r = common::post_put(tsd.addr, "", &format!("[{}]", body.join(",")));
    assert_eq!(r.status, 204, "{}", r.text());
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while unsynced(tsd.addr) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the WAL writer never caught up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    tsd.kill();
    terminate(spawn(dir.path()));
    let stored = stored_timestamps(dir.path());
    let missing: Vec<_> = (0..1000u64)
        .filter(|t| !stored.contains(t))
        .take(10)
        .collect();
    assert!(missing.is_empty(), "lost after SIGKILL: {missing:?}");
}

/// A query DELETE is logged: after SIGKILL, replaying the write-ahead log
/// does not bring back the deleted points, and later writes survive.
#[test]
fn deleted_points_stay_deleted_after_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("opentsdb.conf"),
        "tsd.http.query.allow_delete = true\n",
    )
    .unwrap();
    let conf = dir.path().join("opentsdb.conf");
    let data = dir.path().join("data");
    let spawn_with_conf = || {
        ChildTsd::start(
            &data,
            ChildOptions {
                config: Some(&conf),
                ..Default::default()
            },
        )
    };
    let tsd = spawn_with_conf();
    let addr = tsd.addr;
    let put = |ts: u64, v: i64| {
        let body = format!(
            r#"{{"metric":"del.test","timestamp":{ts},"value":{v},"tags":{{"host":"a"}}}}"#
        );
        let r = common::http(addr, "POST", "/api/put?sync", &[], body.as_bytes());
        assert_eq!(r.status, 204, "{}", r.text());
    };
    put(1356998400, 1);
    put(1356998460, 2);
    let r = common::http(
        addr,
        "DELETE",
        "/api/query?start=1356998400&end=1356998460&m=sum:del.test",
        &[],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // Written after the delete, to the same hour: must survive.
    put(1356998520, 3);
    tsd.kill();

    let tsd = spawn_with_conf();
    let addr = tsd.addr;
    let r = common::http(
        addr,
        "GET",
        "/api/query?start=1356998400&end=1356999999&m=sum:del.test",
        &[],
        b"",
    );
    assert_eq!(
        r.text(),
        r#"[{"metric":"del.test","tags":{"host":"a"},"aggregateTags":[],"dps":{"1356998520":3}}]"#
    );
    terminate(tsd);
}
