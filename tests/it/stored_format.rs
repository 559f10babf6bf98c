//! Stored bytes are a promise: a store written by the previous release
//! opens, reads back exactly and takes new writes.
//!
//! `tests/fixtures/store-c85e33d` was made by main at c85e33d (the last
//! commit before the database handle) with `tsdb import` of
//! `store-c85e33d.points.txt`, then `tsdb fsck --full-scan --compact`, so
//! its rows are compressed columns in engine tables, with no journal.
//! Its header is version 1.
//!
//! `tests/fixtures/store-6a4fbc1` was made the same way by main at 6a4fbc1
//! (store format 2, the last before trees) from
//! `store-6a4fbc1.points.txt` (`tsdb import --auto-metric`): seconds and
//! milliseconds, three tags, the largest long.
//!
//! `tests/fixtures/store-ee2d2b4` was made the same way by main at ee2d2b4
//! (store format 3, the last before the rollup table) from
//! `store-ee2d2b4.points.txt`, with `tsdb import --auto-metric` then
//! `tsdb fsck --full-scan --compact`; the `LOCK` file and the emptied WAL
//! directory the process left were removed.
//!
//! `tests/fixtures/store-96ac99d` is a store with a write-ahead log left
//! behind, made by main at 96ac99d (store format 4, the last whose log
//! has no frames laid out by series): a TSD took the telnet `put`s of
//! `store-96ac99d.points.txt`'s first 300 lines (one compressed `05`
//! frame), then its last 3 as one `/api/put?sync` (a plain frame), and
//! was killed with SIGKILL before it wrote any row; its `LOCK` file was
//! removed.
//!
//! `tests/fixtures/store-870cb41` was made the same way, from the same
//! points (`store-870cb41.points.txt`), by main at 870cb41 (store format
//! 5, the last whose log keeps values as varints): its log holds one
//! `07` frame (the first 300 lines) and one plain frame.
//!
//! `tests/fixtures/store-807bf8c` was made the same way, from the same
//! points (`store-807bf8c.points.txt`), by main at 807bf8c (store format
//! 8, the last before stale markers were stored on 8 bytes): its log
//! holds one `08` frame (the first 300 lines) and one plain frame.

use std::path::{Path, PathBuf};

use crate::common::tsdb;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn header_of(store: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(store.join("rtsdb-store.json")).unwrap()).unwrap()
}

/// A copy to work on: opening a store takes its lock and may write.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn a_store_from_the_previous_release_reads_back_and_takes_writes() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    copy_dir(&fixture("store-c85e33d"), &store);
    let scan = |metric: &str| {
        let r = tsdb(&store, &["scan", "--import", "1356998400", "sum", metric]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.stdout
    };
    assert_eq!(
        scan("sys.cpu.user"),
        "sys.cpu.user 1356998400 42 host=web01 dc=lga\n\
         sys.cpu.user 1356998410 43.5 host=web01 dc=lga\n\
         sys.cpu.user 1356998400500 -7 host=web02 dc=lga\n\
         sys.cpu.user 1357002000 1.0E300 host=web01 dc=lga\n"
    );
    assert_eq!(
        scan("sys.mem.free"),
        "sys.mem.free 1356998400 1024 host=web01\nsys.mem.free 1357002001 2048 host=web01\n"
    );
    // The first open upgraded its version 1 header in place (format 2 adds
    // a checksum, format 3 the tree table and compressed WAL frames, format
    // 4 the rollup table, 5 to 7 nothing a version 1 store holds), after
    // checking it against the UID table.
    let header = header_of(&store);
    assert_eq!(header["format_version"], 9, "{header}");
    assert!(header["checksum"].is_string(), "{header}");
    assert_eq!(header["uid_width"]["metric"], 3, "{header}");
    let r = tsdb(&store, &["fsck", "--full-scan"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("\nTotal Errors: 0\n"), "{}", r.stdout);
    // New points land beside the old ones, under the old UIDs.
    let more = dir.path().join("more.txt");
    std::fs::write(&more, "sys.mem.free 1357002011 4096 host=web01\n").unwrap();
    let r = tsdb(&store, &["import", more.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        scan("sys.mem.free"),
        "sys.mem.free 1356998400 1024 host=web01\n\
         sys.mem.free 1357002001 2048 host=web01\n\
         sys.mem.free 1357002011 4096 host=web01\n"
    );
    let r = tsdb(&store, &["uid", "metrics", "sys.mem.free"]);
    assert_eq!(r.stdout, "metrics sys.mem.free: [0, 0, 2]\n");
}

#[test]
fn a_format_2_store_reads_back_exactly_and_is_upgraded_to_9() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    copy_dir(&fixture("store-6a4fbc1"), &store);
    assert_eq!(header_of(&store)["format_version"], 2);
    let scan = |metric: &str| {
        let r = tsdb(&store, &["scan", "--import", "1356998400", "sum", metric]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.stdout
    };
    let all = || {
        ["sys.cpu.user", "sys.mem.free", "net.bytes.in"]
            .iter()
            .map(|m| scan(m))
            .collect::<String>()
    };
    let expected = "sys.cpu.user 1356998400 42 host=web01 cpu=0 dc=lga\n\
         sys.cpu.user 1356998410 43.5 host=web01 cpu=0 dc=lga\n\
         sys.cpu.user 1356998400250 -7 host=web02 cpu=1 dc=lga\n\
         sys.cpu.user 1356998400750 8 host=web02 cpu=1 dc=lga\n\
         sys.cpu.user 1357002000 1.0E300 host=web01 cpu=0 dc=lga\n\
         sys.mem.free 1356998400 1024 host=web01 dc=sjc\n\
         sys.mem.free 1357002001123 2048 host=web01 dc=sjc\n\
         net.bytes.in 1356998460 9223372036854775807 host=web02 iface=eth0 dc=lga\n";
    assert_eq!(all(), expected);
    let header = header_of(&store);
    assert_eq!(header["format_version"], 9, "{header}");
    assert!(header["checksum"].is_string(), "{header}");
    let r = tsdb(&store, &["fsck", "--full-scan"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("\nTotal Errors: 0\n"), "{}", r.stdout);
    // Writes land beside the old points, under the old UIDs.
    let more = dir.path().join("more.txt");
    std::fs::write(&more, "sys.mem.free 1357002011500 4096 host=web01 dc=sjc\n").unwrap();
    let r = tsdb(&store, &["import", more.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        scan("sys.mem.free"),
        "sys.mem.free 1356998400 1024 host=web01 dc=sjc\n\
         sys.mem.free 1357002001123 2048 host=web01 dc=sjc\n\
         sys.mem.free 1357002011500 4096 host=web01 dc=sjc\n"
    );
    let r = tsdb(&store, &["uid", "metrics", "sys.mem.free"]);
    assert_eq!(r.stdout, "metrics sys.mem.free: [0, 0, 2]\n");
    let r = tsdb(&store, &["fsck", "--full-scan"]);
    assert!(r.stdout.contains("\nTotal Errors: 0\n"), "{}", r.stdout);
    // The table format 3 added works on the upgraded store.
    let tsd_dir = tempfile::tempdir().unwrap();
    std::fs::remove_dir(tsd_dir.path()).unwrap();
    std::fs::rename(&store, tsd_dir.path()).unwrap();
    let srv = crate::common::TestServer::start_in(tsd_dir, &[]);
    let (s, t) = crate::common::req(&srv, "POST", "/api/tree", r#"{"name":"after upgrade"}"#);
    assert_eq!(s, 200, "{t}");
    assert_eq!(crate::common::get(&srv, "/api/tree?treeid=1").0, 200);
}

#[test]
fn a_format_3_store_reads_back_exactly_and_is_upgraded_to_9() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    copy_dir(&fixture("store-ee2d2b4"), &store);
    assert_eq!(header_of(&store)["format_version"], 3);
    let scan = |metric: &str| {
        let r = tsdb(&store, &["scan", "--import", "1356998400", "sum", metric]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.stdout
    };
    let all = || {
        ["sys.cpu.user", "sys.mem.free", "net.bytes.in"]
            .iter()
            .map(|m| scan(m))
            .collect::<String>()
    };
    assert_eq!(
        all(),
        "sys.cpu.user 1356998400 42 host=web01 cpu=0 dc=lga\n\
         sys.cpu.user 1356998410 43.5 host=web01 cpu=0 dc=lga\n\
         sys.cpu.user 1356998400250 -7 host=web02 cpu=1 dc=lga\n\
         sys.cpu.user 1356998400750 8 host=web02 cpu=1 dc=lga\n\
         sys.cpu.user 1357002000 1.0E300 host=web01 cpu=0 dc=lga\n\
         sys.mem.free 1356998400 1024 host=web01 dc=sjc\n\
         sys.mem.free 1357002001123 2048 host=web01 dc=sjc\n\
         net.bytes.in 1356998460 9223372036854775807 host=web02 iface=eth0 dc=lga\n"
    );
    let header = header_of(&store);
    assert_eq!(header["format_version"], 9, "{header}");
    assert!(header["checksum"].is_string(), "{header}");
    let r = tsdb(&store, &["fsck", "--full-scan"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("\nTotal Errors: 0\n"), "{}", r.stdout);
    // The table format 4 added takes rollups on the upgraded store, and
    // the old points still answer queries beside them.
    let tsd_dir = tempfile::tempdir().unwrap();
    std::fs::remove_dir(tsd_dir.path()).unwrap();
    std::fs::rename(&store, tsd_dir.path()).unwrap();
    let srv = crate::common::TestServer::start_in(
        tsd_dir,
        &[
            ("tsd.rollups.enable", "true"),
            ("tsd.rollups.config", crate::tsd_rollup::CONFIG),
        ],
    );
    let (s, t) = crate::common::req(
        &srv,
        "POST",
        "/api/rollup",
        r#"{"metric":"sys.mem.free","timestamp":1356998400,"value":7,"interval":"1h","aggregator":"sum","tags":{"host":"web01","dc":"sjc"}}"#,
    );
    assert_eq!(s, 204, "{t}");
    let (s, t) = crate::common::get(
        &srv,
        "/api/query?start=1356998400&end=1357005600&m=sum:1h-sum:sys.mem.free",
    );
    assert_eq!(s, 200, "{t}");
    assert!(t.contains(r#""dps":{"1356998400":7.0}"#), "{t}");
    let (s, t) = crate::common::get(
        &srv,
        "/api/query?start=1356998400&end=1357005600&m=sum:sys.mem.free",
    );
    assert_eq!(s, 200, "{t}");
    assert!(
        t.contains(r#""dps":{"1356998400":1024,"1357002001":2048}"#),
        "{t}"
    );
}

#[test]
fn a_format_4_store_replays_its_wal_exactly_and_is_upgraded_to_9() {
    replays_its_wal_exactly("store-96ac99d", 4, 0x05);
}

#[test]
fn a_format_5_store_replays_its_wal_exactly_and_is_upgraded_to_9() {
    replays_its_wal_exactly("store-870cb41", 5, 0x07);
}

#[test]
fn a_format_8_store_replays_its_wal_exactly_and_is_upgraded_to_9() {
    replays_its_wal_exactly("store-807bf8c", 8, 0x08);
}

/// A fixture store of format `version` whose one WAL segment starts with
/// a frame holding one record of `first_record` kind (docs/format/wal.md)
/// replays every point it logged, and nothing else.
fn replays_its_wal_exactly(name: &str, version: u32, first_record: u8) {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    copy_dir(&fixture(name), &store);
    assert_eq!(header_of(&store)["format_version"], version);
    let segments: Vec<_> = std::fs::read_dir(store.join("wal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(segments.len(), 1, "the fixture holds one WAL segment");
    // The frame header is 8 bytes (length, CRC), then the record's tag.
    assert_eq!(std::fs::read(&segments[0]).unwrap()[8], first_record);
    let scanned: Vec<String> = ["sys.cpu.user", "net.bytes.in", "sys.mem.free"]
        .iter()
        .flat_map(|m| {
            let r = tsdb(&store, &["scan", "--import", "1356998400", "sum", m]);
            assert_eq!(r.code, 0, "{}", r.stderr);
            r.stdout.lines().map(str::to_owned).collect::<Vec<_>>()
        })
        .collect();
    // Every point the log held, and nothing else (the tags of these
    // points print in the order they were sent).
    let mut want: Vec<String> = std::fs::read_to_string(fixture(&format!("{name}.points.txt")))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let mut got = scanned;
    want.sort();
    got.sort();
    assert_eq!(got.len(), 303);
    assert_eq!(got, want);
    let header = header_of(&store);
    assert_eq!(header["format_version"], 9, "{header}");
    // Replayed into rows: the log is gone, nothing was counted as damage.
    let r = tsdb(&store, &["fsck", "--full-scan"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("\nTotal Errors: 0\n"), "{}", r.stdout);
    // (Each command leaves the empty segment it would have written next.)
    let left: Vec<_> = std::fs::read_dir(store.join("wal"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.metadata().unwrap().len() > 0)
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A copy of a rollup fixture store, read back and upgraded: its scan
/// printed what the fixture's `.scan.txt` holds, which upgraded it to
/// this build's format, and fsck found its rollup rows and no error.
struct RollupFixture {
    _dir: tempfile::TempDir,
    store: std::path::PathBuf,
    conf: std::path::PathBuf,
    /// The fixture's `.scan.txt`.
    printed: String,
    /// Rollup rows the store holds.
    rows: usize,
}

impl RollupFixture {
    /// Fixture `name`, of store format `version`, holding `rows` rollup
    /// rows.
    fn open(name: &str, version: u32, rows: usize) -> RollupFixture {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        copy_dir(&fixture(name), &store);
        assert_eq!(header_of(&store)["format_version"], version);
        let fx = RollupFixture {
            conf: rollup_conf(dir.path()),
            printed: std::fs::read_to_string(fixture(&format!("{name}.scan.txt"))).unwrap(),
            _dir: dir,
            store,
            rows,
        };
        assert_eq!(fx.scan(&fx.store), fx.printed);
        assert_eq!(header_of(&fx.store)["format_version"], 9);
        fx.fsck(&fx.store);
        fx
    }

    /// What `tsdb scan --rollup-table` prints of both rollup tables of
    /// `store`, metric by metric (the fixtures' `.scan.txt`).
    fn scan(&self, store: &Path) -> String {
        let mut out = String::new();
        let conf = self.conf.to_str().unwrap();
        for table in ["tsdb-rollup-1h", "tsdb-rollup-1d"] {
            for metric in ["sys.cpu.user", "net.bytes.in", "sys.cpu.nice"] {
                let args = ["--config", conf, "scan", "--rollup-table", table];
                let mut args = args.to_vec();
                args.extend_from_slice(&["1356998400", "sum", metric]);
                let r = tsdb(store, &args);
                assert_eq!(r.code, 0, "{}", r.stderr);
                out.push_str(&r.stdout);
            }
        }
        out
    }

    /// `tsdb fsck --full-scan` of `store` finds the fixture's rollup rows
    /// and no error.
    fn fsck(&self, store: &Path) {
        let conf = self.conf.to_str().unwrap();
        let r = tsdb(store, &["--config", conf, "fsck", "--full-scan"]);
        assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
        assert!(
            r.stdout
                .contains(&format!("\nRollup Rows Processed: {}\n", self.rows)),
            "{}",
            r.stdout
        );
        assert!(r.stdout.contains("\nTotal Errors: 0\n"), "{}", r.stdout);
    }
}

/// A config file naming `tsd_rollup::CONFIG`'s rollups, for `tsdb` runs
/// on the rollup fixture stores.
fn rollup_conf(dir: &Path) -> std::path::PathBuf {
    let conf = dir.join("rollups.conf");
    let rollup_config = crate::tsd_rollup::CONFIG.replace('\n', "");
    std::fs::write(
        &conf,
        format!("tsd.rollups.enable = true\ntsd.rollups.config = {rollup_config}\n"),
    )
    .unwrap();
    conf
}

/// A TSD computing rollups (`tsd_rollup::CONFIG`) on `store`, moved into
/// the server's own directory.
fn auto_rollup_tsd(store: &Path) -> crate::common::TestServer {
    let tsd_dir = tempfile::tempdir().unwrap();
    std::fs::remove_dir(tsd_dir.path()).unwrap();
    std::fs::rename(store, tsd_dir.path()).unwrap();
    crate::common::TestServer::start_in(
        tsd_dir,
        &[
            ("tsd.rollups.enable", "true"),
            ("tsd.rollups.auto", "true"),
            ("tsd.rollups.config", crate::tsd_rollup::CONFIG),
        ],
    )
}

/// Stops `srv` and keeps its store, which the server would remove.
fn stop_keeping_store(mut srv: crate::common::TestServer) -> tempfile::TempDir {
    srv.stop();
    std::mem::replace(&mut srv.dir, tempfile::tempdir().unwrap())
}

/// `tests/fixtures/store-d8666ad` was made by main's `tsdb` (store format
/// 6, the last whose computed rollup rows are laid out as OpenTSDB's
/// cells; the build reports revision 35b040d with local changes, main's
/// tree as of d8666ad, whose three commits since change no stored bytes):
/// a TSD with `tsd.rollups.auto = true` and `tsd_rollup::CONFIG` took the
/// telnet lines of `store-d8666ad.lines.txt` (puts of three hours of
/// three series, one with a sum no double holds, so it computed `1h` and
/// `1d` rollups; then two `rollup` lines, a row as OpenTSDB writes it),
/// and stopped on SIGTERM; its `LOCK` file and empty `wal` directory were
/// removed. `store-d8666ad.scan.txt` is what that build's `tsdb scan
/// --rollup-table` printed of both tables, per metric as below.
#[test]
fn a_format_6_store_with_computed_rollups_reads_back_exactly_and_is_upgraded_to_9() {
    let fx = RollupFixture::open("store-d8666ad", 6, 7);
    // A TSD computing rollups answers from the old rows as from raw
    // points, and a late point rewrites its interval's row in columns.
    let srv = auto_rollup_tsd(&fx.store);
    let query = |usage: &str| {
        let q = format!(
            "/api/query?start=1356998400&end=1357009199&m=sum:1h-avg:{usage}sys.cpu.user%7Bhost=*%7D"
        );
        let (s, t) = crate::common::get(&srv, &q);
        assert_eq!(s, 200, "{t}");
        t
    };
    let before = query("");
    assert!(before.contains(r#""dps":{"1356998400":3.5,"1357002000":3.6666666666666665,"1357005600":3.8333333333333335}"#), "{before}");
    assert!(
        before.contains(r#""1356998400":10.916666666666666"#),
        "{before}"
    );
    let (s, t) = crate::common::req(
        &srv,
        "POST",
        "/api/put?sync",
        r#"{"metric":"sys.cpu.user","timestamp":1357002300,"value":100,"tags":{"host":"web01","dc":"lga"}}"#,
    );
    assert_eq!(s, 204, "{t}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !query("").contains(r#""1357002000":17.428571428571427"#) {
        assert!(std::time::Instant::now() < deadline, "{}", query(""));
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let rows: Vec<(Vec<u8>, Vec<u8>)> = srv
        .state
        .db()
        .rollup_table()
        .scan_all()
        .map(|r| r.unwrap())
        .collect();
    let first_bytes = |name: &str| -> Vec<u8> {
        let prefix = rtsdb::store::rollup_table::table_prefix(name);
        rows.iter()
            .filter(|(k, _)| k.starts_with(&prefix))
            .map(|(_, v)| v[0])
            .collect()
    };
    // The rewritten rows of web01 (its month of hours, its day) are in
    // columns; the others as the previous build left them, and the rollup
    // written through telnet stays OpenTSDB's.
    let h = first_bytes("tsdb-rollup-1h");
    assert_eq!(h.iter().filter(|&&b| b == 3).count(), 1, "{h:?}");
    assert_eq!(h.len(), 4, "{h:?}");
    assert_eq!(
        first_bytes("tsdb-rollup-1d")
            .iter()
            .filter(|&&b| b == 3)
            .count(),
        1
    );
    assert_eq!(query(""), query("rollup_raw:"));
    let kept = stop_keeping_store(srv);
    let store = kept.path().to_path_buf();
    // Read back in OpenTSDB's form: the late point's hour and day
    // changed, nothing else.
    // (web01's cells come first in each table: each change is the first
    // match.)
    let want = fx
        .printed
        .replacen(
            "[0, 0, 16]\t[22]\tsum\t22\t",
            "[0, 0, 16]\t[122]\tsum\t122\t",
            1,
        )
        .replacen(
            "[1, 0, 16]\t[6]\tcount\t6\t",
            "[1, 0, 16]\t[7]\tcount\t7\t",
            1,
        )
        .replacen(
            "[2, 0, 16]\t[7]\tmax\t7\t",
            "[2, 0, 16]\t[100]\tmax\t100\t",
            1,
        )
        .replacen(
            "[0, 0, 0]\t[66]\tsum\t66\t",
            "[0, 0, 1]\t[0, -90]\tsum\t166\t",
            1,
        )
        .replacen(
            "[1, 0, 0]\t[18]\tcount\t18\t",
            "[1, 0, 0]\t[19]\tcount\t19\t",
            1,
        )
        .replacen(
            "[2, 0, 0]\t[7]\tmax\t7\t",
            "[2, 0, 0]\t[100]\tmax\t100\t",
            1,
        );
    assert_eq!(fx.scan(&store), want);
    fx.fsck(&store);
}

/// `tests/fixtures/store-4c2670a` was made by main's `tsdb` at 4c2670a
/// (store format 7, the last whose computed rollup rows are laid out in
/// `02` columns of doubles with a flags byte per cell): a TSD with
/// `tsd.rollups.auto = true`, `tsd.core.auto_create_metrics = true` and
/// `tsd_rollup::CONFIG` took the telnet lines of
/// `store-4c2670a.lines.txt` (three days of a point every 30 minutes of
/// three series: integers whose sums take one or two bytes, floats that
/// are exactly `f32`s, doubles that are not; a sum no double holds; two
/// `rollup` lines, a row as OpenTSDB writes it), so it computed `1h`
/// rows of 72 hours (two bitmap words) and `1d` rows; it stopped on
/// SIGTERM, and its `LOCK` file and empty `wal` directory were removed.
/// `store-4c2670a.scan.txt` is what that build's `tsdb scan
/// --rollup-table` printed of both tables, per metric as below.
#[test]
fn a_format_7_store_with_computed_rollups_reads_back_exactly_and_is_upgraded_to_9() {
    let fx = RollupFixture::open("store-4c2670a", 7, 9);
    // A TSD computing rollups answers from the old rows as from raw
    // points; then each series takes one of its points again, the same
    // value, which recomputes its rows and writes them in `03` columns.
    let srv = auto_rollup_tsd(&fx.store);
    let queries = [
        "sum:1h-avg:{usage}sys.cpu.user%7Bhost=*%7D",
        "sum:1h-sum:{usage}sys.cpu.user",
        "max:1h-max:{usage}sys.cpu.user%7Bhost=*%7D",
        "min:1h-min:{usage}sys.cpu.user%7Bhost=*%7D",
        "sum:1h-count:{usage}sys.cpu.user%7Bhost=*%7D",
        "sum:1d-avg:{usage}sys.cpu.user%7Bhost=*%7D",
        "sum:1h-sum:{usage}net.bytes.in",
    ];
    let answers = |usage: &str| -> Vec<String> {
        queries
            .iter()
            .map(|m| {
                let q = format!(
                    "/api/query?start=1356998400&end=1357257599&m={}",
                    m.replace("{usage}", usage)
                );
                let (s, t) = crate::common::get(&srv, &q);
                assert_eq!(s, 200, "{q}: {t}");
                t
            })
            .collect()
    };
    let raw = answers("rollup_raw:");
    assert_eq!(answers(""), raw);
    let lines = std::fs::read_to_string(fixture("store-4c2670a.lines.txt")).unwrap();
    let again: Vec<&str> = [
        "host=web01 dc=lga",
        "host=web02 dc=lga",
        "host=web03 dc=lga",
    ]
    .iter()
    .filter_map(|tags| lines.lines().find(|l| l.ends_with(tags)))
    .chain(lines.lines().filter(|l| l.starts_with("put net.bytes.in")))
    .collect();
    assert_eq!(again.len(), 6);
    // The very lines again (telnet parses their values as before).
    let input: String = again.iter().map(|l| format!("{l}\n")).collect();
    let out = crate::common::telnet(srv.addr, input.as_bytes());
    assert_eq!(out, "");
    let first_bytes = || -> Vec<(String, u8)> {
        srv.state
            .db()
            .rollup_table()
            .scan_all()
            .map(|r| {
                let (k, v) = r.unwrap();
                let (table, _) = rtsdb::store::rollup_table::split_key(&k).unwrap();
                (table.to_string(), v[0])
            })
            .collect()
    };
    // Every computed row rewritten (in `03`), the rollup written through
    // telnet still OpenTSDB's (`01`).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let rows = first_bytes();
        let layouts: Vec<u8> = rows.iter().map(|r| r.1).collect();
        if layouts.iter().filter(|&&b| b == 3).count() == 8 {
            assert_eq!(layouts.iter().filter(|&&b| b == 1).count(), 1, "{rows:?}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{rows:?}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(answers(""), raw);
    assert_eq!(answers("rollup_raw:"), raw);
    let kept = stop_keeping_store(srv);
    let store = kept.path().to_path_buf();
    // The same cells as the previous build wrote, in OpenTSDB's form.
    assert_eq!(fx.scan(&store), fx.printed);
    fx.fsck(&store);
}

/// Where the child of [`stale_markers_survive_a_kill_a_replay_and_a_flush`]
/// keeps its database.
const MARKER_CHILD_ENV: &str = "RTSDB_STALE_MARKER_CHILD_DIR";
const MARKER_T: u64 = 1_356_998_400;

fn stale_marker() -> rtsdb::model::Value {
    rtsdb::model::Value::Float(f64::from_bits(rtsdb::promql::value::STALE_NAN_BITS))
}

fn open_marker_db(dir: &Path) -> std::sync::Arc<rtsdb::db::Db> {
    let mut opts = rtsdb::db::DbOptions::new(dir);
    opts.auto_create = rtsdb::uid::AutoCreate {
        metrics: true,
        tagks: true,
        tagvs: true,
    };
    rtsdb::db::Db::open(&opts).unwrap()
}

/// Writes a series with a stale marker between two values and a series
/// holding only a marker, through the write path, and waits until the
/// WAL holds them.
fn write_markers(db: &rtsdb::db::Db) {
    use rtsdb::model::Value;
    /// Metric, host, and points at seconds from [`MARKER_T`].
    type Written<'a> = (&'a str, &'a str, Vec<(u64, Value)>);
    let series: [Written; 2] = [
        (
            "prom.up",
            "a",
            vec![
                (0, Value::Float(1.5)),
                (10, stale_marker()),
                (20, Value::Float(2.5)),
                (30, stale_marker()),
            ],
        ),
        ("prom.gone", "b", vec![(5, stale_marker())]),
    ];
    let mut key = String::new();
    let mut batch = Vec::new();
    for (metric, host, points) in &series {
        for &(s, value) in points {
            let (series, ts) = db
                .resolve(
                    metric,
                    (MARKER_T + s) as i64,
                    value,
                    &[("host", host)],
                    &mut key,
                )
                .unwrap();
            batch.push(rtsdb::db::PendingPoint { series, ts, value });
        }
    }
    let appended = db.append(&batch).unwrap();
    db.wait_durable_blocking(appended).unwrap();
}

/// Each point of `metric` as (ms, "bits" of a float or the integer).
fn stored_bits(db: &rtsdb::db::Db, metric: &str) -> Vec<(u64, String)> {
    use rtsdb::model::{UidKind, Value};
    use rtsdb::store::read::SeriesSource;
    let uid = db.uids().get_id(UidKind::Metric, metric).unwrap();
    let series = db.read_series(uid, 0, u64::MAX / 4, &mut |_| true).unwrap();
    let mut out = Vec::new();
    let tsuids: Vec<_> = series.iter().map(|s| s.tsuid.clone()).collect();
    db.read_tsuids(&tsuids, 0, u64::MAX / 4, &mut |_, pts| {
        out.extend(pts.iter().map(|p| {
            let v = match p.value() {
                Value::Float(f) => format!("{:016x}", f.to_bits()),
                Value::Int(i) => i.to_string(),
            };
            (p.timestamp_ms(), v)
        }));
        true
    })
    .unwrap();
    out
}

/// What `/api/query` answers for `m=sum:{metric}` over the markers' hour.
fn opentsdb_answer(db: &rtsdb::db::Db, metric: &str) -> String {
    let mut ctx = rtsdb::query::QueryContext::new(db, &Default::default());
    ctx.now_ms = (MARKER_T + 86_400) * 1000;
    let qs = format!(
        "start={MARKER_T}&end={}&m=sum:{metric}&show_summary",
        MARKER_T + 3599
    );
    let q = rtsdb::query::parse_get(&qs).unwrap();
    rtsdb::query::execute(&ctx, &q, None).unwrap().to_json()
}

/// Checks what a database holding [`write_markers`]' points gives back:
/// the markers bit for bit to a series read (PromQL's), nothing of them
/// to an OpenTSDB query.
fn check_markers(db: &rtsdb::db::Db, when: &str) {
    let t = MARKER_T * 1000;
    assert_eq!(
        stored_bits(db, "prom.up"),
        vec![
            (t, format!("{:016x}", 1.5f64.to_bits())),
            (t + 10_000, "7ff0000000000002".to_string()),
            (t + 20_000, format!("{:016x}", 2.5f64.to_bits())),
            (t + 30_000, "7ff0000000000002".to_string()),
        ],
        "{when}"
    );
    assert_eq!(
        stored_bits(db, "prom.gone"),
        vec![(t + 5_000, "7ff0000000000002".to_string())],
        "{when}"
    );
    let up = opentsdb_answer(db, "prom.up");
    assert!(
        up.contains(r#""dps":{"1356998400":1.5,"1356998420":2.5}"#),
        "{when}: {up}"
    );
    // The summary counts points read without the marker.
    assert!(up.contains(r#""rawDatapoints":2"#), "{when}: {up}");
    // A series holding only a marker has no point to OpenTSDB.
    let gone = opentsdb_answer(db, "prom.gone");
    assert!(!gone.contains(r#""metric":"prom.gone""#), "{when}: {gone}");
    assert!(gone.contains(r#""rawDatapoints":0"#), "{when}: {gone}");
    // `/api/query/last`: the newest value, not the newer marker; nothing
    // for a series of markers.
    let last = |ts: &str| {
        let mut ctx = rtsdb::query::QueryContext::new(db, &Default::default());
        ctx.now_ms = (MARKER_T + 1800) * 1000;
        let q = rtsdb::query::parse_last_get(&format!("timeseries={ts}")).unwrap();
        rtsdb::query::execute_last(&ctx, &q).unwrap()
    };
    let up = last("prom.up{host=a}");
    assert_eq!(up[0]["timestamp"], MARKER_T * 1000 + 20_000, "{when}: {up}");
    assert_eq!(up[0]["value"], "2.5", "{when}: {up}");
    assert_eq!(last("prom.gone{host=b}"), serde_json::json!([]), "{when}");
}

/// The writer of the kill test. Only runs when the parent test starts it.
#[test]
#[ignore]
fn stale_marker_child() {
    let Ok(dir) = std::env::var(MARKER_CHILD_ENV) else {
        return;
    };
    let db = open_marker_db(Path::new(&dir));
    write_markers(&db);
    // libtest prints this after the test's name, on its line.
    println!("durable");
    // Wait to be killed, holding everything in the WAL and the buffer.
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// Prometheus' stale marker (store format 9) survives every path a point
/// takes: the write buffer, the WAL replayed after SIGKILL, the rows a
/// flush writes, a reopen from those rows, a backup and its restore;
/// OpenTSDB's queries never see it, and `tsdb scan` shows it as stored
/// (8 bytes, `NaN` with `--import`).
#[test]
fn stale_markers_survive_a_kill_a_replay_and_a_flush() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    assert_eq!(
        rtsdb::promql::value::STALE_NAN_BITS,
        rtsdb::model::point::STALE_MARKER_BITS
    );
    // In the write buffer of a running database.
    let live = tempfile::tempdir().unwrap();
    let db = open_marker_db(live.path().join("db").as_path());
    write_markers(&db);
    check_markers(&db, "buffered");
    // A backup of the running database (its WAL holds the markers)
    // restores them.
    let backup = live.path().join("backup");
    db.backup(&backup).unwrap();
    db.close().unwrap();
    drop(db);
    let restored = live.path().join("restored");
    let mut opts = rtsdb::db::DbOptions::new(&restored);
    opts.auto_create = rtsdb::uid::AutoCreate {
        metrics: true,
        tagks: true,
        tagvs: true,
    };
    rtsdb::db::restore(&backup, &opts).unwrap();
    let db = open_marker_db(&restored);
    check_markers(&db, "restored");
    db.close().unwrap();
    drop(db);

    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "stored_format::stale_marker_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(MARKER_CHILD_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let durable = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|l| l.ends_with("durable"));
        let _ = tx.send(durable);
    });
    // A loaded machine may take a while to start the child.
    let durable = rx
        .recv_timeout(std::time::Duration::from_secs(120))
        .unwrap_or(false);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(durable, "the child never wrote its points");

    // Replayed from the WAL the killed process left.
    let db = open_marker_db(dir.path());
    check_markers(&db, "replayed");
    // Flushed to rows, then read from them alone after a reopen.
    db.flush_all().unwrap();
    check_markers(&db, "flushed");
    db.close().unwrap();
    drop(db);
    let db = open_marker_db(dir.path());
    assert_eq!(db.buffered_points(), 0);
    check_markers(&db, "reopened");
    db.close().unwrap();
    drop(db);

    // `tsdb scan` prints rows as stored: the marker's 8 bytes.
    let r = tsdb(dir.path(), &["scan", "1356998400", "sum", "prom.gone"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("[127, -16, 0, 0, 0, 0, 0, 2]"),
        "{}",
        r.stdout
    );
    let r = tsdb(dir.path(), &["fsck", "--full-scan"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("\nTotal Errors: 0\n"), "{}", r.stdout);
}

/// The rollups rtsdb computes (`tsd.rollups.auto`) skip a stale marker
/// as every OpenTSDB read does: an hour of 3, a marker and 5 rolls up to
/// a sum of 8 over 2 points, not NaN over 3.
#[test]
fn computed_rollups_skip_stale_markers() {
    use rtsdb::model::Value;
    let dir = tempfile::tempdir().unwrap();
    let mut c = rtsdb::config::Config::default();
    c.set(
        rtsdb::config::DATA_DIR_KEY,
        &dir.path().display().to_string(),
    );
    c.set("tsd.core.auto_create_metrics", "true");
    c.set("tsd.rollups.enable", "true");
    c.set("tsd.rollups.auto", "true");
    c.set(
        "tsd.rollups.config",
        r#"{"aggregationIds":{"sum":0,"count":1,"max":2,"min":3},
 "intervals":[
  {"table":"tsdb","preAggregationTable":"tsdb-agg","interval":"1m","rowSpan":"1h","defaultInterval":true},
  {"table":"tsdb-rollup-1h","preAggregationTable":"tsdb-rollup-agg-1h","interval":"1h","rowSpan":"1d"}]}"#,
    );
    let db = rtsdb::db::Db::open(&rtsdb::db::DbOptions::from_config(&c).unwrap()).unwrap();
    let t = MARKER_T as i64;
    let mut key = String::new();
    let batch: Vec<rtsdb::db::PendingPoint> = [
        (t + 10, Value::Int(3)),
        (t + 20, stale_marker()),
        (t + 30, Value::Int(5)),
    ]
    .into_iter()
    .map(|(ts, value)| {
        let (series, ts) = db
            .resolve("m", ts, value, &[("host", "web01")], &mut key)
            .unwrap();
        rtsdb::db::PendingPoint { series, ts, value }
    })
    .collect();
    db.append(&batch).unwrap();
    db.flush_all().unwrap();
    let ctx = rtsdb::query::QueryContext::new(&db, &Default::default());
    let answer = |m: &str| {
        let qs = format!("start={t}&end={}&m=sum:{m}", t + 3599);
        let q = rtsdb::query::parse_get(&qs).unwrap();
        rtsdb::query::execute(&ctx, &q, None).unwrap().to_json()
    };
    // Each point as (time, value), a value that is no number as NaN.
    let dps = |json: String| -> Vec<(String, f64)> {
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        v[0]["dps"]
            .as_object()
            .unwrap_or_else(|| panic!("{json}"))
            .iter()
            .map(|(k, v)| (k.clone(), v.as_f64().unwrap_or(f64::NAN)))
            .collect()
    };
    let hour = |v: f64| vec![("1356998400".to_string(), v)];
    assert_eq!(dps(answer("1h-sum:m")), hour(8.0));
    assert_eq!(dps(answer("1h-count:m")), hour(2.0));
    assert_eq!(dps(answer("1h-max:m")), hour(5.0));
    // The raw read agrees.
    assert_eq!(dps(answer("1h-sum:rollup_raw:m")), hour(8.0));
    db.close().unwrap();
}
