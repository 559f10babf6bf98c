//! A full disk and a removed data directory under a running `tsdb tsd`:
//! puts fail at once with a clear error (nothing is acknowledged that is
//! not on disk), the TSD recovers by itself when space returns, stops
//! cleanly, and every acknowledged point is there after a restart. A TSD
//! killed on a full disk starts again read-only, serves every
//! acknowledged point, and takes writes once space returns; the
//! read-only commands work on that disk; `tsd.storage.min_free_bytes`
//! refuses writes before the disk is full.
//!
//! The disk is a small tmpfs mounted for the test; where mounting is not
//! permitted the full-disk test says so and returns (the WAL writer's
//! fault-injecting unit tests cover the same paths without a mount).

use crate::common::{self, ChildOptions, ChildTsd};

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use rtsdb::model::UidKind;
use rtsdb::store::read::SeriesSource;
use rtsdb::store::{Store, StoreOptions};
use rtsdb::uid::{AutoCreate, UidTable};

/// A tmpfs of a few MiB, unmounted when dropped (even when the test
/// fails).
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// `None` where this machine does not let the test mount one.
    fn mount(bytes: u64) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Tmpfs {
    /// Resizes the file system: space returns without touching a file.
    fn resize(&self, bytes: u64) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,size={bytes}")])
            .arg(self.dir.path())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "resizing the tmpfs to {bytes} bytes");
    }
}

/// Where mounting a tmpfs is not permitted the test returns, saying so;
/// under CI (`CI=true`) it must be, and the test fails.
fn mount_or_skip(bytes: u64) -> Option<Tmpfs> {
    let disk = Tmpfs::mount(bytes);
    if disk.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but this machine does not permit mounting a tmpfs"
        );
        eprintln!("skipped: this machine does not permit mounting a tmpfs");
    }
    disk
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// A child TSD whose stderr goes to `log`.
fn spawn(data: &Path, log: &Path) -> ChildTsd {
    spawn_with(data, log, None)
}

/// [`spawn`] with a config file.
fn spawn_with(data: &Path, log: &Path, config: Option<&Path>) -> ChildTsd {
    ChildTsd::start(
        data,
        ChildOptions {
            flush_interval_ms: Some(200),
            log: Some(log),
            config,
            ..Default::default()
        },
    )
}

/// A config file in `dir` setting `tsd.storage.min_free_bytes`.
fn floor_config(dir: &Path, min_free_bytes: u64) -> PathBuf {
    let path = dir.join("opentsdb.conf");
    std::fs::write(
        &path,
        format!("tsd.storage.min_free_bytes = {min_free_bytes}\n"),
    )
    .unwrap();
    path
}

/// `POST /api/put?sync&details` with a read timeout far below any
/// blocking retry: a put that hangs fails the test.
fn sync_put(addr: SocketAddr, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let req = format!(
        "POST /api/put?sync&details HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    assert!(!raw.is_empty(), "the sync put got no answer within 20 s");
    let r = common::parse_response(&raw);
    (r.status, r.text())
}

/// The value of point `t`: scattered, so that a batch of points does not
/// compress (the WAL lays regular series out in a fraction of a byte a
/// point), and a put's frame cannot fit in what a partly written page of
/// the full disk has left.
fn value_of(t: u64) -> i64 {
    let mut x = t.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 29;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (x >> 33) as i64
}

/// Points `first..first+n` of `metric` (timestamp 1356998400 + t, value
/// [`value_of`] t).
fn body(metric: &str, first: u64, n: u64) -> String {
    let points: Vec<String> = (first..first + n)
        .map(|t| {
            format!(
                r#"{{"metric":"{metric}","timestamp":{},"value":{},"tags":{{"host":"h{}"}}}}"#,
                1356998400 + t,
                value_of(t),
                t % 3
            )
        })
        .collect();
    format!("[{}]", points.join(","))
}

/// One point under each of 300 metric names never seen before.
fn new_names(round: u32) -> String {
    let points: Vec<String> = (0..300)
        .map(|i| {
            format!(
                r#"{{"metric":"full.new.{round}.{i}","timestamp":1356998400,"value":1,"tags":{{"host":"h"}}}}"#
            )
        })
        .collect();
    format!("[{}]", points.join(","))
}

/// The value of `tsd.<name>` in `/api/stats`.
fn stat(addr: SocketAddr, name: &str) -> String {
    let r = common::http(addr, "GET", "/api/stats", &[], b"");
    let stats = r.json();
    stats
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["metric"] == format!("tsd.{name}"))
        .unwrap_or_else(|| panic!("no tsd.{name} in {stats}"))["value"]
        .as_str()
        .unwrap()
        .to_string()
}

fn stored_values(data: &Path, metric: &str) -> BTreeSet<u64> {
    let store = Store::open(data, &StoreOptions::default()).unwrap();
    let uids = UidTable::new(store.uid_store(), AutoCreate::default(), Default::default());
    let Ok(m) = uids.get_id(UidKind::Metric, metric) else {
        return BTreeSet::new();
    };
    let mut out = BTreeSet::new();
    for s in store.read_series(m, 0, u64::MAX, &mut |_| true).unwrap() {
        for p in s.points {
            let t = p.timestamp_ms() / 1000 - 1356998400;
            assert_eq!(p.value(), rtsdb::model::Value::Int(value_of(t)));
            out.insert(t);
        }
    }
    out
}

/// Fills the file system holding `path` (returns once a write is refused).
fn fill(path: &Path) {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0xA5u8; 64 << 10];
    while f.write_all(&chunk).is_ok() {}
    // Whatever is left is smaller than a chunk: take it too.
    while f.write_all(&[0xA5]).is_ok() {}
}

fn terminate(tsd: ChildTsd, log: &Path) {
    let status = tsd.terminate();
    assert!(
        status.success(),
        "graceful stop: {status:?}\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

#[test]
fn a_full_disk_refuses_puts_then_recovers_without_losing_acknowledged_points() {
    let Some(disk) = Tmpfs::mount(24 << 20) else {
        eprintln!("skipped: this machine does not permit mounting a tmpfs");
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("tsd.log");
    // The engine and the WAL meeting ENOSPC is what this test is about:
    // no floor refuses puts before.
    let conf = floor_config(logs.path(), 0);
    let data = disk.path().join("data");
    let child = spawn_with(&data, &log, Some(&conf));
    let addr = child.addr;
    let mut acked = BTreeSet::new();
    let mut next = 0u64;
    let mut put = |n: u64, acked: &mut BTreeSet<u64>| {
        let (status, text) = sync_put(addr, &body("full.test", next, n));
        if status == 200 {
            acked.extend(next..next + n);
        }
        next += n;
        (status, text)
    };
    let (status, text) = put(300, &mut acked);
    assert_eq!(status, 200, "{text}");

    let filler = disk.path().join("filler");
    fill(&filler);
    // Big enough never to fit in what a partly written page has left.
    for _ in 0..3 {
        let (status, text) = put(3000, &mut acked);
        assert_eq!(status, 400, "a put on a full disk: {text}");
        assert!(
            text.contains("No space left on device"),
            "the error names the cause: {text}"
        );
        assert!(text.contains(r#""success":0"#), "{text}");
    }
    // New names need UIDs, which cannot be stored either: the engine's
    // journal write fails, which poisons fjall.
    let (status, text) = sync_put(addr, &new_names(0));
    assert_eq!(status, 400, "{text}");
    assert!(!text.contains("Unexpected exception"), "{text}");
    assert!(text.contains("No space left on device"), "{text}");
    assert_eq!(stat(addr, "wal.healthy"), "0");
    assert_eq!(stat(addr, "storage.healthy"), "0");
    assert_ne!(stat(addr, "wal.write_errors"), "0");

    std::fs::remove_file(&filler).unwrap();
    // Space is back: the TSD resumes by itself (bounded wait).
    let mut recovered = false;
    for _ in 0..100 {
        let (status, _) = put(500, &mut acked);
        if status == 200 {
            recovered = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        recovered,
        "no put was acknowledged after space returned\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    for _ in 0..5 {
        let (status, text) = put(500, &mut acked);
        assert_eq!(status, 200, "{text}");
    }
    for _ in 0..50 {
        if stat(addr, "storage.healthy") == "1" && stat(addr, "wal.healthy") == "1" {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(stat(addr, "wal.healthy"), "1");
    assert_eq!(stat(addr, "storage.healthy"), "1");
    assert_ne!(stat(addr, "storage.reopens"), "0");
    // The reopened engine assigns UIDs again.
    let (status, text) = sync_put(addr, &new_names(1));
    assert_eq!(status, 200, "{text}");
    terminate(child, &log);

    // Restart on the same directory: every acknowledged point is there.
    let child = spawn_with(&data, &log, Some(&conf));
    terminate(child, &log);
    let stored = stored_values(&data, "full.test");
    let missing: Vec<_> = acked.difference(&stored).take(10).collect();
    assert!(
        missing.is_empty(),
        "acknowledged but lost: {missing:?} ({} acked, {} stored)",
        acked.len(),
        stored.len()
    );
}

#[test]
fn a_removed_data_directory_refuses_puts() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("tsd.log");
    let data: PathBuf = dir.path().join("data");
    let tsd = spawn(&data, &log);
    let addr = tsd.addr;
    let (status, text) = sync_put(addr, &body("gone.test", 0, 10));
    assert_eq!(status, 200, "{text}");

    std::fs::remove_dir_all(&data).unwrap();
    let (status, text) = sync_put(addr, &body("gone.test", 10, 10));
    assert_eq!(status, 400, "a put into a removed directory: {text}");
    assert!(text.contains("was deleted"), "the error says why: {text}");
    assert!(text.contains(r#""success":0"#), "{text}");
    // Telnet is told too.
    let out = common::telnet(addr, b"put gone.test 1356998500 1 host=h0\n");
    assert!(out.contains("put: HBase error:"), "{out}");
    assert!(out.contains("was deleted"), "{out}");
    assert_eq!(stat(addr, "wal.healthy"), "0");
    assert!(
        !data.exists(),
        "the directory is not recreated behind the operator's back"
    );
    drop(tsd);
}

/// The number of points of `metric` in the TSD at `addr` (one count over
/// every series and the whole range).
fn count(addr: SocketAddr, metric: &str) -> u64 {
    let r = common::http(
        addr,
        "GET",
        &format!("/api/query?start=1356998400&end=1400000000&m=sum:0all-count:{metric}"),
        &[],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    match v.as_array().unwrap().first() {
        None => 0,
        Some(s) => s["dps"]
            .as_object()
            .unwrap()
            .values()
            .next()
            .unwrap()
            .as_f64()
            .unwrap() as u64,
    }
}

/// Sync puts of 3000 points each from `next` on, until one is refused;
/// returns the points acknowledged and the next point.
fn put_until_refused(addr: SocketAddr, mut next: u64, acked: &mut BTreeSet<u64>) -> u64 {
    for _ in 0..2000 {
        let (status, text) = sync_put(addr, &body("ro.test", next, 3000));
        if status != 200 {
            assert!(text.contains("No space left on device"), "{text}");
            return next + 3000;
        }
        acked.extend(next..next + 3000);
        next += 3000;
    }
    panic!("the disk never filled up");
}

/// The issue's reproduction (issue 37): a 32 MB tmpfs as data directory,
/// `sync` writers until ENOSPC, a little freed, written until full again,
/// `kill -9`, start. The TSD starts read-only (before: it exited with
/// "cannot take writes"), answers every acknowledged point, refuses puts
/// with the full-disk error, and takes writes again by itself once the
/// disk has room; the read-only commands work on the full disk meanwhile.
#[test]
fn a_tsd_killed_on_a_full_disk_starts_read_only_and_takes_writes_once_space_returns() {
    let Some(disk) = mount_or_skip(32 << 20) else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("tsd.log");
    // The floor would refuse puts before the disk is full: this test is
    // about a disk that is.
    let conf = floor_config(logs.path(), 0);
    let data = disk.path().join("data");
    let spare = disk.path().join("spare");
    std::fs::write(&spare, vec![0u8; 1 << 20]).unwrap();
    let child = spawn_with(&data, &log, Some(&conf));
    let addr = child.addr;
    let mut acked = BTreeSet::new();
    let next = put_until_refused(addr, 0, &mut acked);
    // Free a little, and fill it again.
    std::fs::remove_file(&spare).unwrap();
    let next = put_until_refused(addr, next, &mut acked);
    child.kill();
    fill(&disk.path().join("filler"));
    assert!(acked.len() > 100_000, "{} points acknowledged", acked.len());

    // The read-only commands, on the full disk, with the log unreplayed.
    let fsck = common::tsdb(&data, &["fsck", "--full-scan"]);
    assert_eq!(fsck.code, 0, "fsck: {}{}", fsck.stdout, fsck.stderr);
    let query = common::tsdb(
        &data,
        &[
            "query",
            "1356998400",
            "1400000000",
            "sum",
            "ro.test",
            "host=h1",
        ],
    );
    assert_eq!(query.code, 0, "query: {}", query.stderr);
    let want = format!(
        "ro.test {} {} {{host=h1}}",
        (1356998400u64 + 1) * 1000,
        value_of(1)
    );
    assert!(
        query.stdout.contains(&want),
        "{want} in {}",
        &query.stdout[..query.stdout.len().min(500)]
    );
    let uid = common::tsdb(&data, &["uid", "grep", "metrics", "ro"]);
    assert_eq!(uid.code, 0, "uid grep: {}", uid.stderr);
    assert!(uid.stdout.contains("ro.test"), "{}", uid.stdout);
    let scan = common::tsdb(&data, &["scan", "1356998400", "sum", "ro.test"]);
    assert_eq!(scan.code, 0, "scan: {}", scan.stderr);
    let elsewhere = tempfile::tempdir().unwrap();
    let to = elsewhere.path().join("backup");
    let backup = common::tsdb(&data, &["backup", to.to_str().unwrap()]);
    assert_eq!(backup.code, 0, "backup: {}{}", backup.stdout, backup.stderr);
    let acked_at_backup = acked.clone();

    let child = spawn_with(&data, &log, Some(&conf));
    let addr = child.addr;
    let served = count(addr, "ro.test");
    assert!(
        served >= acked.len() as u64,
        "{served} points served of {} acknowledged\n{}",
        acked.len(),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let (status, text) = sync_put(addr, &body("ro.test", next, 10));
    assert_eq!(status, 400, "a put on the full disk: {text}");
    assert!(text.contains("No space left on device"), "{text}");
    assert_eq!(stat(addr, "storage.healthy"), "0");
    assert_ne!(stat(addr, "storage.held_points"), "0");
    let metrics = common::http(addr, "GET", "/metrics", &[], b"").text();
    let gauge = metrics
        .lines()
        .find(|l| l.starts_with("tsd_storage_healthy"))
        .unwrap_or_else(|| panic!("no tsd_storage_healthy in {metrics}"));
    assert!(gauge.ends_with(" 0"), "{gauge}");

    // Space returns: the TSD replays what it held and takes writes.
    disk.resize(96 << 20);
    let mut recovered = false;
    for _ in 0..600 {
        let (status, _) = sync_put(addr, &body("ro.test", next, 10));
        if status == 200 {
            acked.extend(next..next + 10);
            recovered = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        recovered,
        "no put was acknowledged after space returned\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_eq!(stat(addr, "storage.healthy"), "1");
    assert_eq!(stat(addr, "storage.held_points"), "0");
    assert!(count(addr, "ro.test") >= acked.len() as u64);
    terminate(child, &log);
    let stored = stored_values(&data, "ro.test");
    let missing: Vec<_> = acked.difference(&stored).take(10).collect();
    assert!(
        missing.is_empty(),
        "acknowledged but lost: {missing:?} ({} acked, {} stored)",
        acked.len(),
        stored.len()
    );
    // The backup taken on the full disk holds what was acknowledged then.
    let restored = tempfile::tempdir().unwrap();
    let r = common::tsdb(
        &restored.path().join("data"),
        &["restore", to.to_str().unwrap()],
    );
    assert_eq!(r.code, 0, "restore: {}{}", r.stdout, r.stderr);
    let restored = stored_values(&restored.path().join("data"), "ro.test");
    assert!(
        acked_at_backup.is_subset(&restored),
        "{} of {} acknowledged points in the backup",
        acked_at_backup.intersection(&restored).count(),
        acked_at_backup.len()
    );
}

/// The same on a cluster, where a TSD's local disk holds only its WAL:
/// killed on a full one, it starts, answers from the shared tables and
/// its log, refuses puts with the full-disk error, and takes them again
/// once the disk has room.
#[test]
#[ignore = "known defect, open: the restarted cluster TSD's WAL writer keeps failing with \
            ENOSPC after the filler is removed (the disk then empty, the segment 0 bytes), so \
            puts stay refused; run with `scripts/with-cluster cargo test --test it -- --ignored \
            a_cluster_tsd_killed`"]
fn a_cluster_tsd_killed_on_a_full_wal_disk_starts_and_takes_writes_once_space_returns() {
    let Some(settings) = common::cluster_settings("ro_cluster_wal") else {
        return;
    };
    let Some(disk) = mount_or_skip(16 << 20) else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("tsd.log");
    let conf = logs.path().join("cluster.conf");
    let mut text: String = settings
        .iter()
        .map(|(k, v)| format!("{k} = {v}\n"))
        .collect();
    text.push_str("tsd.storage.min_free_bytes = 0\n");
    std::fs::write(&conf, text).unwrap();
    let data = disk.path().join("data");
    let child = spawn_with(&data, &log, Some(&conf));
    let addr = child.addr;
    let (status, text) = sync_put(addr, &body("ro.cluster", 0, 300));
    assert_eq!(status, 200, "{text}");
    let filler = disk.path().join("filler");
    fill(&filler);
    let (status, text) = sync_put(addr, &body("ro.cluster", 300, 3000));
    assert_eq!(status, 400, "a put on the full WAL disk: {text}");
    assert!(text.contains("No space left on device"), "{text}");
    child.kill();

    let child = spawn_with(&data, &log, Some(&conf));
    let addr = child.addr;
    assert_eq!(count(addr, "ro.cluster"), 300);
    let (status, text) = sync_put(addr, &body("ro.cluster", 300, 3000));
    assert_eq!(status, 400, "a put on the full WAL disk: {text}");
    assert!(text.contains("No space left on device"), "{text}");
    std::fs::remove_file(&filler).unwrap();
    let mut taken = false;
    for _ in 0..600 {
        let (status, _) = sync_put(addr, &body("ro.cluster", 300, 10));
        if status == 200 {
            taken = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        taken,
        "puts are taken again once the disk has room\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    // A refused put promised nothing; its points may still have been
    // logged and stored once the writer got through (docs/durability.md).
    assert!(count(addr, "ro.cluster") >= 310);
    terminate(child, &log);
}

/// `tsd.storage.min_free_bytes`: below it puts are refused with the
/// full-disk error before the disk is full, and taken again above it.
#[test]
fn below_min_free_bytes_puts_are_refused_until_the_disk_has_room() {
    let Some(disk) = mount_or_skip(24 << 20) else {
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("tsd.log");
    let conf = floor_config(logs.path(), 8 << 20);
    let data = disk.path().join("data");
    let child = spawn_with(&data, &log, Some(&conf));
    let addr = child.addr;
    let (status, text) = sync_put(addr, &body("floor.test", 0, 300));
    assert_eq!(status, 200, "{text}");
    // Leave 4 MiB free: below the floor, far from ENOSPC.
    let filler = disk.path().join("filler");
    let free = rtsdb::db::free_bytes(disk.path()).unwrap();
    std::fs::write(&filler, vec![0u8; (free - (4 << 20)) as usize]).unwrap();
    let mut refused = None;
    for _ in 0..100 {
        let (status, text) = sync_put(addr, &body("floor.test", 300, 10));
        if status == 400 {
            refused = Some(text);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = refused.expect("a put below the floor is refused");
    assert!(text.contains("No space left on device"), "{text}");
    assert!(text.contains("tsd.storage.min_free_bytes"), "{text}");
    assert_eq!(stat(addr, "storage.healthy"), "0");
    // The WAL never met ENOSPC.
    assert_eq!(stat(addr, "wal.write_errors"), "0");
    // The puts of the loop taken before the floor was seen are there.
    assert!(count(addr, "floor.test") >= 300);
    std::fs::remove_file(&filler).unwrap();
    let mut taken = false;
    for _ in 0..100 {
        let (status, _) = sync_put(addr, &body("floor.test", 300, 10));
        if status == 200 {
            taken = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(taken, "puts are taken again above the floor");
    assert_eq!(stat(addr, "storage.healthy"), "1");
    assert_eq!(count(addr, "floor.test"), 310);
    terminate(child, &log);
}
