//! Backups of a running TSD (`POST /api/backup`, `tsdb backup`,
//! `tsdb restore`): a backup taken while sync puts keep coming holds
//! every point acknowledged before it was asked for, restores into a
//! store that opens and passes fsck, and never writes where it should
//! not.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::{self, TestServer};
use rtsdb::db::{Db, DbOptions};
use rtsdb::model::{UidKind, Value};
use rtsdb::store::read::SeriesSource;

const METRIC: &str = "backup.points";
const BASE: u32 = 1356998400;
/// Points per put request.
const BATCH: u32 = 20;
const HOSTS: u32 = 4;

/// The points of batch `i`: four series, each point at its own second,
/// one batch a minute, so the flusher seals (and the WAL drops) whole
/// hours while the test runs.
fn batch(i: u32) -> Vec<(String, u32, i64)> {
    (0..BATCH)
        .map(|j| {
            (
                format!("h{}", j % HOSTS),
                BASE + i * 60 + j / HOSTS,
                i64::from(i) * 1000 + i64::from(j),
            )
        })
        .collect()
}

fn body(i: u32) -> String {
    let points: Vec<serde_json::Value> = batch(i)
        .into_iter()
        .map(|(host, ts, v)| {
            serde_json::json!({"metric": METRIC, "timestamp": ts, "value": v, "tags": {"host": host}})
        })
        .collect();
    serde_json::Value::Array(points).to_string()
}

/// Every point of `METRIC` in the store in `dir`, by (host, seconds).
fn stored_points(dir: &Path) -> HashMap<(String, u32), Value> {
    let db = Db::open(&DbOptions::new(dir)).unwrap();
    let mut out = HashMap::new();
    let metric = db.uids().get_id(UidKind::Metric, METRIC).unwrap();
    for s in db.read_series(metric, 0, u64::MAX, &mut |_| true).unwrap() {
        let (_, host) = s.tsuid.tags[0];
        let host = db
            .uids()
            .get_name(UidKind::TagValue, host)
            .unwrap()
            .to_string();
        for p in &s.points {
            let at = (host.clone(), (p.timestamp_ms() / 1000) as u32);
            assert!(out.insert(at, p.value()).is_none(), "one point per second");
        }
    }
    db.close().unwrap();
    out
}

fn backup_server(root: &Path) -> TestServer {
    TestServer::start(&[
        ("tsd.backup.enable", "true"),
        ("tsd.backup.dir", &root.display().to_string()),
        ("tsd.core.auto_create_metrics", "true"),
        // Frequent flushes of everything buffered: rows are written and
        // closed WAL segments removed while the test runs.
        ("tsd.storage.flush_interval", "20"),
        ("tsd.storage.wal.max_bytes", "1"),
    ])
}

#[test]
fn a_backup_under_writes_restores_every_point_acknowledged_before_it() {
    let root = tempfile::tempdir().unwrap();
    let srv = backup_server(root.path());
    let addr = srv.addr;
    // Batches acknowledged so far: the writer is sequential, so batches
    // 0..acked all were.
    let acked = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (acked, stop) = (acked.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::Acquire) {
                let r = common::post_put(addr, "?sync", &body(i));
                assert_eq!(r.status, 204, "put {i}: {}", r.text());
                i += 1;
                acked.store(i as usize, Ordering::Release);
            }
            i
        })
    };
    let wait_for = |n: usize| {
        while acked.load(Ordering::Acquire) < n {
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    // A first backup closes the WAL segment everything so far went to;
    // once the flusher stored its points it removes it, so those points
    // are then only in the store (and the next backup needs both halves).
    wait_for(50);
    let wal_dir = srv.dir.path().join("wal");
    let first_segment = std::fs::read_dir(&wal_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .min()
        .unwrap();
    let r = common::http(addr, "POST", "/api/backup?dir=b0", &[], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    while wal_dir.join(&first_segment).exists() {
        std::thread::sleep(Duration::from_millis(5));
    }
    wait_for(150);
    let before = acked.load(Ordering::Acquire) as u32;
    let r = common::http(addr, "POST", "/api/backup?dir=b1", &[], b"");
    let during = acked.load(Ordering::Acquire) as u32;
    assert_eq!(r.status, 200, "{}", r.text());
    let made = r.json();
    let backup_dir = root.path().join("b1");
    assert_eq!(made["path"], backup_dir.display().to_string());
    assert!(made["bytes"].as_u64().unwrap() > 0, "{made}");
    assert!(made["tables"]["tsdb-uid"].as_u64().unwrap() > 0, "{made}");
    assert!(made["tables"]["tsdb"].as_u64().unwrap() > 0, "{made}");
    assert!(made["walBytes"].as_u64().unwrap() > 0, "{made}");
    // Writes go on after the backup.
    while acked.load(Ordering::Acquire) < during as usize + 20 {
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Release);
    let sent = writer.join().unwrap();

    // Restored while the TSD keeps running: the backup is a store of its own.
    let target = tempfile::tempdir().unwrap();
    let restored = target.path().join("data");
    let run = common::cli::tsdb(&restored, &["restore", &backup_dir.display().to_string()]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("restored"), "{}", run.stdout);
    let fsck = common::cli::tsdb(&restored, &["fsck", "--full-scan"]);
    assert_eq!(fsck.code, 0, "{}{}", fsck.stdout, fsck.stderr);
    assert!(fsck.stdout.contains("Total Errors: 0"), "{}", fsck.stdout);

    let got = stored_points(&restored);
    let mut missing = Vec::new();
    for i in 0..before {
        for (host, ts, v) in batch(i) {
            match got.get(&(host.clone(), ts)) {
                Some(Value::Int(x)) if *x == v => {}
                other => missing.push((i, host, ts, v, other.copied())),
            }
        }
    }
    assert!(
        missing.is_empty(),
        "{} of {} points acknowledged before the backup are missing or wrong, e.g. {:?}",
        missing.len(),
        before * BATCH,
        &missing[..missing.len().min(5)]
    );
    // Nothing in it that was never written (later batches may be in it:
    // writes went on while the backup was cut).
    for ((host, ts), value) in &got {
        let i = (ts - BASE) / 60;
        assert!(i < sent, "point of unsent batch {i}");
        let want = batch(i).into_iter().find(|(h, t, _)| h == host && t == ts);
        assert_eq!(
            want.map(|(_, _, v)| Value::Int(v)),
            Some(*value),
            "{host} {ts}"
        );
    }
    // The running TSD lost nothing either.
    assert_eq!(srv.point_count(METRIC), (sent * BATCH) as usize);
}

#[test]
fn backups_over_http_are_off_unless_enabled() {
    let srv = TestServer::start(&[]);
    let r = common::http(srv.addr, "POST", "/api/backup", &[], b"");
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.text(), common::err(404, "Endpoint not found"));
    assert!(!srv.dir.path().join("backups").exists());

    // And `tsdb backup` through that TSD says how to turn them on.
    let other = tempfile::tempdir().unwrap();
    let run = common::cli::tsdb(other.path(), &["backup", "--tsd", &srv.addr.to_string()]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("tsd.backup.enable"), "{}", run.stderr);
}

#[test]
fn a_destination_that_is_not_empty_or_outside_the_backup_dir_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let srv = backup_server(root.path());
    let r = common::post_put(srv.addr, "?sync", &body(0));
    assert_eq!(r.status, 204, "{}", r.text());

    let taken = root.path().join("taken");
    std::fs::create_dir(&taken).unwrap();
    std::fs::write(taken.join("keep.txt"), "mine").unwrap();
    let r = common::http(srv.addr, "POST", "/api/backup?dir=taken", &[], b"");
    assert_eq!(r.status, 400, "{}", r.text());
    let message = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        message.contains(&taken.display().to_string()) && message.contains("is not empty"),
        "{message}"
    );
    assert_eq!(
        std::fs::read_dir(&taken).unwrap().count(),
        1,
        "left as it was"
    );
    assert_eq!(
        std::fs::read_to_string(taken.join("keep.txt")).unwrap(),
        "mine"
    );

    for outside in ["../escape", "/tmp/elsewhere"] {
        let r = common::http(
            srv.addr,
            "POST",
            &format!("/api/backup?dir={outside}"),
            &[],
            b"",
        );
        assert_eq!(r.status, 400, "{outside}: {}", r.text());
        assert!(r.text().contains("tsd.backup.dir"), "{}", r.text());
    }
    // Only a real POST starts a backup.
    let r = common::http(
        srv.addr,
        "GET",
        "/api/backup?method_override=post",
        &[],
        b"",
    );
    assert_eq!(r.status, 405, "{}", r.text());

    // The command line through the TSD: the same refusal, then a backup
    // named after the time, then one at a path of the caller's choosing.
    let cli_dir = tempfile::tempdir().unwrap();
    let tsd = srv.addr.to_string();
    let run = common::cli::tsdb(
        cli_dir.path(),
        &[
            "backup",
            "--tsd",
            &tsd,
            "--to",
            &taken.display().to_string(),
        ],
    );
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("is not empty"), "{}", run.stderr);
    let run = common::cli::tsdb(cli_dir.path(), &["backup", "--tsd", &tsd]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout.starts_with("backup written to "),
        "{}",
        run.stdout
    );
    let named = root.path().join("nightly");
    let run = common::cli::tsdb(
        cli_dir.path(),
        &["backup", "--tsd", &tsd, &named.display().to_string()],
    );
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let got = stored_points(&named);
    assert_eq!(got.len(), BATCH as usize);
}

#[test]
fn a_stopped_store_is_backed_up_directly_and_restore_refuses_what_is_not_a_backup() {
    let data = tempfile::tempdir().unwrap();
    let store = data.path().join("store");
    let lines: String = batch(3)
        .into_iter()
        .map(|(host, ts, v)| format!("{METRIC} {ts} {v} host={host}\n"))
        .collect();
    let file = data.path().join("points.txt");
    std::fs::write(&file, lines).unwrap();
    let run = common::cli::tsdb(
        &store,
        &["import", "--auto-metric", &file.display().to_string()],
    );
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("copy");
    let run = common::cli::tsdb(&store, &["backup", "--to", &dest.display().to_string()]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let run = common::cli::tsdb(&store, &["backup", "--to", &dest.display().to_string()]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("is not empty"), "{}", run.stderr);

    // A directory that is not a backup, and a target that is in use.
    let run = common::cli::tsdb(
        &out.path().join("r1"),
        &["restore", &out.path().display().to_string()],
    );
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("is not a backup"), "{}", run.stderr);
    let run = common::cli::tsdb(&store, &["restore", &dest.display().to_string()]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("is not empty"), "{}", run.stderr);

    // The backup itself opens as a data directory too.
    let got = stored_points(&dest);
    assert_eq!(got.len(), BATCH as usize);
    assert_eq!(
        got.get(&("h1".to_string(), BASE + 3 * 60)),
        Some(&Value::Int(3001))
    );
}
