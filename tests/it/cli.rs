//! The `tsdb` binary as users run it: uid, mkmetric and scan output must be
//! OpenTSDB's, byte for byte.

use crate::common;

use common::{Backend, Cli, on_both_backends, tsdb};
use std::path::Path;

use rtsdb::model::Tsuid;
use rtsdb::model::{NameRules, Timestamp, UidKind, Value};
use rtsdb::store::Durability;
use rtsdb::store::{Store, StoreOptions};
use rtsdb::uid::{AutoCreate, UidTable};

on_both_backends!(uid_commands_print_opentsdb_lines);

/// On the cluster the names live in ZooKeeper; the lines are the same.
fn uid_commands_print_opentsdb_lines(backend: Backend) {
    let Some(cli) = Cli::new(backend) else {
        return;
    };
    let r = cli.tsdb(&["mkmetric", "sys.cpu.0", "sys.cpu.user"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stdout,
        "metrics sys.cpu.0: [0, 0, 1]\nmetrics sys.cpu.user: [0, 0, 2]\n"
    );
    assert_eq!(
        cli.tsdb(&["uid", "assign", "tagk", "host"]).stdout,
        "tagk host: [0, 0, 1]\n"
    );
    assert_eq!(
        cli.tsdb(&["uid", "assign", "tagv", "web01"]).stdout,
        "tagv web01: [0, 0, 1]\n"
    );
    // Existing names print their UID again.
    assert_eq!(
        cli.tsdb(&["mkmetric", "sys.cpu.0"]).stdout,
        "metrics sys.cpu.0: [0, 0, 1]\n"
    );

    assert_eq!(
        cli.tsdb(&["uid", "metrics", "sys.cpu.user"]).stdout,
        "metrics sys.cpu.user: [0, 0, 2]\n"
    );
    assert_eq!(
        cli.tsdb(&["uid", "metrics", "2"]).stdout,
        "metrics sys.cpu.user: [0, 0, 2]\n"
    );
    // Without a kind every kind's cell of the row is printed.
    assert_eq!(
        cli.tsdb(&["uid", "1"]).stdout,
        "metrics sys.cpu.0: [0, 0, 1]\ntagk host: [0, 0, 1]\ntagv web01: [0, 0, 1]\n"
    );
    assert_eq!(
        cli.tsdb(&["uid", "grep", "cpu"]).stdout,
        "metrics sys.cpu.0: [0, 0, 1]\nmetrics sys.cpu.user: [0, 0, 2]\n"
    );
    assert_eq!(
        cli.tsdb(&["uid", "grep", "metrics", "USER$", "-i"]).stdout,
        "metrics sys.cpu.user: [0, 0, 2]\n"
    );
    assert_eq!(cli.tsdb(&["uid", "grep", "nothing"]).code, 1);

    let r = cli.tsdb(&["uid", "rename", "metrics", "sys.cpu.0", "sys.cpu.idle"]);
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "metrics sys.cpu.0 -> sys.cpu.idle\n")
    );
    let r = cli.tsdb(&["uid", "metrics", "sys.cpu.0"]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("No such name for 'metrics': 'sys.cpu.0'"),
        "{}",
        r.stderr
    );
    let r = cli.tsdb(&["uid", "rename", "metrics", "sys.cpu.idle", "sys.cpu.user"]);
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("new name already assigned ID=[0, 0, 2]"),
        "{}",
        r.stderr
    );

    let r = cli.tsdb(&["uid", "delete", "tagv", "web01"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(cli.tsdb(&["uid", "tagv", "web01"]).code, 1);
    // Deleted ids are not reused.
    assert_eq!(
        cli.tsdb(&["uid", "assign", "tagv", "web02"]).stdout,
        "tagv web02: [0, 0, 2]\n"
    );
}

#[test]
fn uid_bad_input_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for args in [
        vec!["uid"],
        vec!["uid", "assign", "metrics"],
        vec!["uid", "assign", "nokind", "x"],
        vec!["uid", "rename", "metrics", "a"],
        vec!["uid", "grep", "metrics", "("],
        vec!["uid", "metrics", "99999999999"],
        vec!["uid", "metrics", "-1"],
        vec!["uid", "a", "b", "c"],
    ] {
        let r = tsdb(d, &args);
        assert_ne!(r.code, 0, "{args:?} should fail");
        assert!(!r.stderr.contains("panicked"), "{args:?}: {}", r.stderr);
        assert!(!r.stderr.is_empty(), "{args:?} gave no message");
    }
    let r = tsdb(d, &["uid", "assign", "metrics", "bad name"]);
    assert_eq!(r.code, 3);
    assert!(
        r.stderr
            .contains("Invalid metric (\"bad name\"): illegal character:  "),
        "{}",
        r.stderr
    );
    // The store's widths are fixed: asking for others is refused by name.
    let r = tsdb(d, &["uid", "--idwidth", "4", "metrics", "x"]);
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("tsd.storage.uid.width.metric = 3") && r.stderr.contains("asks for 4"),
        "{}",
        r.stderr
    );
}

fn write_sample(dir: &Path) {
    let store = Store::open(dir, &StoreOptions::default()).unwrap();
    let auto = AutoCreate {
        metrics: true,
        ..Default::default()
    };
    let t = UidTable::new(store.uid_store(), auto, NameRules::default());
    let m = t.get_or_create_id(UidKind::Metric, "sys.cpu.user").unwrap();
    let k = t.get_or_create_id(UidKind::TagKey, "host").unwrap();
    let v = t.get_or_create_id(UidKind::TagValue, "web01").unwrap();
    let v2 = t.get_or_create_id(UidKind::TagValue, "web02").unwrap();
    let a = Tsuid::new(m, vec![(k, v)]).unwrap();
    let b = Tsuid::new(m, vec![(k, v2)]).unwrap();
    store
        .put_points(
            &a,
            &[
                (Timestamp::Seconds(1356998400), Value::Int(42)),
                (Timestamp::Seconds(1356998460), Value::Float(1.5)),
            ],
            Durability::Sync,
        )
        .unwrap();
    store
        .put_points(
            &b,
            &[(Timestamp::Millis(1356998400500), Value::Int(-7))],
            Durability::Sync,
        )
        .unwrap();
}

#[test]
fn scan_prints_rows_as_dumpseries() {
    let dir = tempfile::tempdir().unwrap();
    write_sample(dir.path());
    let r = tsdb(
        dir.path(),
        &[
            "scan",
            "2013/01/01",
            "2013/01/01-01:00",
            "sum",
            "sys.cpu.user",
            "host=web01",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stdout,
        "[0, 0, 1, 80, -30, 39, 0, 0, 0, 1, 0, 0, 1] sys.cpu.user 1356998400 (Tue Jan 01 00:00:00 UTC 2013) {host=web01}\n\
         \x20 [0, 0, 3, -53]\t[42, 63, -64, 0, 0, 0] = 2 values:\n\
         \x20   [0, 0]\t[42]\t0\tl\t1356998400\t(Tue Jan 01 00:00:00 UTC 2013)\n\
         \x20   [3, -53]\t[63, -64, 0, 0]\t60\tf\t1356998460\t(Tue Jan 01 00:01:00 UTC 2013)\n"
    );
    let r = tsdb(
        dir.path(),
        &[
            "scan",
            "--import",
            "1356998400",
            "1356999999",
            "sum",
            "sys.cpu.user",
        ],
    );
    assert_eq!(
        r.stdout,
        "sys.cpu.user 1356998400 42 host=web01\nsys.cpu.user 1356998460 1.5 host=web01\nsys.cpu.user 1356998400500 -7 host=web02\n"
    );
    // A single millisecond cell is printed as one line with its ms offset.
    let r = tsdb(
        dir.path(),
        &["scan", "1356998400", "sum", "sys.cpu.user", "host=web02"],
    );
    assert!(
        r.stdout.ends_with(
            "  [-16, 0, 125, 0]\t[-7]\t500\tl\t1356998400500\t(Tue Jan 01 00:00:00 UTC 2013)\n"
        ),
        "{}",
        r.stdout
    );
    // Unknown names are errors.
    let r = tsdb(dir.path(), &["scan", "1356998400", "sum", "nope"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("No such name for 'metrics': 'nope'"));
    let r = tsdb(dir.path(), &["scan", "1356998400", "bogus", "sys.cpu.user"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("No such aggregation function: bogus"));
}

#[test]
fn scan_delete_removes_the_rows() {
    let dir = tempfile::tempdir().unwrap();
    write_sample(dir.path());
    let r = tsdb(
        dir.path(),
        &[
            "scan",
            "--delete",
            "1356998400",
            "sum",
            "sys.cpu.user",
            "host=web02",
        ],
    );
    assert_eq!(r.stdout, "sys.cpu.user 1356998400500 -7 host=web02\n");
    let r = tsdb(
        dir.path(),
        &["scan", "--import", "1356998400", "sum", "sys.cpu.user"],
    );
    assert_eq!(
        r.stdout,
        "sys.cpu.user 1356998400 42 host=web01\nsys.cpu.user 1356998460 1.5 host=web01\n"
    );
}

#[test]
fn query_prints_opentsdb_lines_after_metasync() {
    let dir = tempfile::tempdir().unwrap();
    write_sample(dir.path());
    // Rows written without the series index: metasync rebuilds it.
    let r = tsdb(dir.path(), &["uid", "metasync"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = tsdb(
        dir.path(),
        &[
            "query",
            "1356998400",
            "1356999999",
            "sum",
            "sys.cpu.user",
            "host=web01",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    // The next value is a float, so OpenTSDB's aggregation runs in double
    // math at the first timestamp too and prints it with %f.
    assert_eq!(
        r.stdout,
        "sys.cpu.user 1356998400000 42.000000 {host=web01}\nsys.cpu.user 1356998460000 1.500000 {host=web01}\n"
    );
    let r = tsdb(
        dir.path(),
        &[
            "query",
            "1356998400",
            "1356999999",
            "sum",
            "sys.cpu.user",
            "host=web02",
        ],
    );
    assert_eq!(r.stdout, "sys.cpu.user 1356998400500 -7 {host=web02}\n");
    let r = tsdb(
        dir.path(),
        &["query", "1356998400", "1356999999", "sum", "nope"],
    );
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("No such name for 'metrics': 'nope'"),
        "{}",
        r.stderr
    );
}

#[test]
fn search_lookup_metasync_and_metapurge() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_sample(d);
    let r = tsdb(d, &["uid", "metasync"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Two series; their metric, tag key and two tag values get the time of
    // their oldest data as `created`.
    assert!(
        r.stdout.contains(
            "Created 2 TSMeta objects, set the created time of 0 TSMeta and 4 UIDMeta objects\n"
        ),
        "{}",
        r.stdout
    );
    // Running it again changes nothing.
    let r = tsdb(d, &["uid", "metasync"]);
    assert!(
        r.stdout.contains(
            "Created 0 TSMeta objects, set the created time of 0 TSMeta and 0 UIDMeta objects\n"
        ),
        "{}",
        r.stdout
    );
    let all = "000001000001000001 sys.cpu.user {host=web01}\n000001000001000002 sys.cpu.user {host=web02}\n";
    assert_eq!(tsdb(d, &["search", "lookup", "sys.cpu.user"]).stdout, all);
    assert_eq!(tsdb(d, &["search", "sys.cpu.user{host=*}"]).stdout, all);
    assert_eq!(
        tsdb(d, &["search", "lookup", "sys.cpu.user", "host=web02"]).stdout,
        "000001000001000002 sys.cpu.user {host=web02}\n"
    );
    let r = tsdb(d, &["search", "lookup", "*=web01"]);
    assert_eq!(
        r.stdout, "000001000001000001 sys.cpu.user {host=web01}\n",
        "{}",
        r.stderr
    );
    assert_eq!(
        tsdb(d, &["search", "lookup", "--limit", "1", "sys.cpu.user"]).stdout,
        "000001000001000001 sys.cpu.user {host=web01}\n"
    );
    let r = tsdb(d, &["search", "lookup", "nope"]);
    assert_eq!(
        (r.code, r.stderr.as_str()),
        (1, "No such name for 'metrics': 'nope'\n")
    );
    let r = tsdb(d, &["search", "lookup", "sys.cpu.user", "host"]);
    assert_eq!((r.code, r.stderr.as_str()), (2, "Invalid tag: host\n"));
    assert_eq!(tsdb(d, &["search", "lookup", "m{host"]).code, 2);
    // A UIDMeta cell, then purge everything meta.
    {
        let store = Store::open(d, &StoreOptions::default()).unwrap();
        let t = UidTable::new(
            store.uid_store(),
            AutoCreate::default(),
            NameRules::default(),
        );
        let uid = t.get_id(UidKind::Metric, "sys.cpu.user").unwrap();
        let f = rtsdb::meta::UidMetaFields {
            description: "cpu".into(),
            ..Default::default()
        };
        store
            .meta_store()
            .put_uid_meta(UidKind::Metric, uid, &f)
            .unwrap();
    }
    let r = tsdb(d, &["uid", "metapurge"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            // The four metasync stored (one rewritten above).
            .starts_with("Deleted 4 UIDMeta cells and 2 TSMeta rows\n"),
        "{}",
        r.stdout
    );
    let r = tsdb(d, &["uid", "metapurge"]);
    assert!(
        r.stdout
            .starts_with("Deleted 0 UIDMeta cells and 0 TSMeta rows\n")
    );
    // Names and data are untouched.
    assert_eq!(tsdb(d, &["search", "lookup", "sys.cpu.user"]).stdout, all);
}

/// An error prints its cause once: messages that carry their cause do not
/// also hand it on as a source, which the binary would print again.
#[test]
fn errors_print_their_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(["--config", "/nonexistent/opentsdb.conf", "version"])
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        err.trim_end(),
        "error: cannot read config file /nonexistent/opentsdb.conf: No such file or directory (os error 2)"
    );
    // A store held by another process, named once with its directory.
    let store = dir.path().join("db");
    let held = Store::open(&store, &StoreOptions::default()).unwrap();
    let r = tsdb(&store, &["uid", "grep", "x"]);
    assert_ne!(r.code, 0);
    let line = r.stderr.lines().last().unwrap();
    assert!(line.starts_with("error: opening store at "), "{line}");
    assert_eq!(
        line.matches("is in use by another process").count(),
        1,
        "{line}"
    );
    drop(held);
}

/// Logs written to a pipe (a file, journald, a collector) are plain text:
/// no terminal colour codes.
#[test]
fn logs_to_a_pipe_carry_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .arg("--data-dir")
        .arg(dir.path().join("store"))
        .args(["mkmetric", "sys.cpu.user"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("created new store"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "colour codes in {stderr:?}");
}

/// OpenTSDB's tool options as its scripts pass them: the common ones
/// (`--zkquorum`, `--table`, ...) on any command, and the TSD's switches
/// that take a value there (`--read-only=true`, `--disable-ui true`).
#[test]
fn opentsdb_tool_options_are_taken() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let r = tsdb(
        d,
        &[
            "--zkquorum",
            "zk1:2181",
            "--zkbasedir",
            "/hbase",
            "--table",
            "tsdb",
            "--uidtable",
            "tsdb-uid",
            "mkmetric",
            "sys.x",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = tsdb(d, &["uid", "--zkquorum", "zk1", "metrics", "sys.x"]);
    assert_eq!(r.stdout, "metrics sys.x: [0, 0, 1]\n", "{}", r.stderr);
    let tsd = common::ChildTsd::start(
        &d.join("tsd"),
        common::ChildOptions {
            args: &[
                "--read-only=true",
                "--disable-ui",
                "true",
                "--statswport",
                "--async-io",
                "true",
            ],
            ..Default::default()
        },
    );
    // Read-only: no /api/put; no legacy UI; stats tagged with the port.
    assert_eq!(
        common::http(tsd.addr, "POST", "/api/put", &[], b"[]").status,
        404
    );
    assert_eq!(
        common::http(tsd.addr, "GET", "/aggregators", &[], b"").status,
        404
    );
    let stats = common::http(tsd.addr, "GET", "/api/stats", &[], b"").text();
    assert!(
        stats.contains(&format!("\"port\":\"{}\"", tsd.addr.port())),
        "{stats}"
    );
    assert!(tsd.terminate().success());
}
