//! A full disk and a removed data directory under a running `tsdb tsd`:
//! puts fail at once with a clear error (nothing is acknowledged that is
//! not on disk), the TSD recovers by itself when space returns, stops
//! cleanly, and every acknowledged point is there after a restart.
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
    ChildTsd::start(
        data,
        ChildOptions {
            flush_interval_ms: Some(200),
            log: Some(log),
            ..Default::default()
        },
    )
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
    let data = disk.path().join("data");
    let child = spawn(&data, &log);
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
    let child = spawn(&data, &log);
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
