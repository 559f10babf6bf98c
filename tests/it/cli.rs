//! The `tsdb` binary as users run it: uid, mkmetric and scan output must be
//! OpenTSDB's, byte for byte. The commands over stored data (scan, query,
//! search, uid) run on both backends and print the same lines.

use crate::common;

use common::{Backend, Cli, on_both_backends, tsdb};

use rtsdb::model::Tsuid;
use rtsdb::model::{Timestamp, UidKind, Value};
use rtsdb::store::Durability;
use rtsdb::store::{Store, StoreOptions};

on_both_backends!(
    uid_commands_print_opentsdb_lines,
    scan_prints_rows_as_dumpseries,
    scan_delete_removes_the_rows,
    query_prints_opentsdb_lines_after_metasync,
    search_lookup_metasync_and_metapurge,
);

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

/// Two series of sys.cpu.user (web01: an integer and a float; web02: a
/// millisecond point) written as rows only, without the series index (as
/// OpenTSDB's rows written by another tool), through the database the
/// commands open: on the cluster, the names go to ZooKeeper and the rows
/// to ClickHouse.
/// A CLI on `backend` whose store holds the sample ([`write_sample`]).
fn cli_with_sample(backend: Backend) -> Option<Cli> {
    let cli = Cli::new(backend)?;
    write_sample(&cli);
    Some(cli)
}

fn write_sample(cli: &Cli) {
    let db = cli.open_db();
    let uid = |kind, name| db.uids().assign(kind, name).unwrap().uid();
    let m = uid(UidKind::Metric, "sys.cpu.user");
    let k = uid(UidKind::TagKey, "host");
    let v = uid(UidKind::TagValue, "web01");
    let v2 = uid(UidKind::TagValue, "web02");
    let a = Tsuid::new(m, vec![(k, v)]).unwrap();
    let b = Tsuid::new(m, vec![(k, v2)]).unwrap();
    let store = db.store();
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
    db.close().unwrap();
}

fn scan_prints_rows_as_dumpseries(backend: Backend) {
    let Some(cli) = cli_with_sample(backend) else {
        return;
    };
    let r = cli.tsdb(&[
        "scan",
        "2013/01/01",
        "2013/01/01-01:00",
        "sum",
        "sys.cpu.user",
        "host=web01",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stdout,
        "[0, 0, 1, 80, -30, 39, 0, 0, 0, 1, 0, 0, 1] sys.cpu.user 1356998400 (Tue Jan 01 00:00:00 UTC 2013) {host=web01}\n\
         \x20 [0, 0, 3, -53]\t[42, 63, -64, 0, 0, 0] = 2 values:\n\
         \x20   [0, 0]\t[42]\t0\tl\t1356998400\t(Tue Jan 01 00:00:00 UTC 2013)\n\
         \x20   [3, -53]\t[63, -64, 0, 0]\t60\tf\t1356998460\t(Tue Jan 01 00:01:00 UTC 2013)\n"
    );
    let r = cli.tsdb(&[
        "scan",
        "--import",
        "1356998400",
        "1356999999",
        "sum",
        "sys.cpu.user",
    ]);
    assert_eq!(
        r.stdout,
        "sys.cpu.user 1356998400 42 host=web01\nsys.cpu.user 1356998460 1.5 host=web01\nsys.cpu.user 1356998400500 -7 host=web02\n"
    );
    // A single millisecond cell is printed as one line with its ms offset.
    let r = cli.tsdb(&["scan", "1356998400", "sum", "sys.cpu.user", "host=web02"]);
    assert!(
        r.stdout.ends_with(
            "  [-16, 0, 125, 0]\t[-7]\t500\tl\t1356998400500\t(Tue Jan 01 00:00:00 UTC 2013)\n"
        ),
        "{}",
        r.stdout
    );
    // Unknown names are errors.
    let r = cli.tsdb(&["scan", "1356998400", "sum", "nope"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("No such name for 'metrics': 'nope'"));
    let r = cli.tsdb(&["scan", "1356998400", "bogus", "sys.cpu.user"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("No such aggregation function: bogus"));
}

fn scan_delete_removes_the_rows(backend: Backend) {
    let Some(cli) = cli_with_sample(backend) else {
        return;
    };
    let r = cli.tsdb(&[
        "scan",
        "--delete",
        "1356998400",
        "sum",
        "sys.cpu.user",
        "host=web02",
    ]);
    assert_eq!(r.stdout, "sys.cpu.user 1356998400500 -7 host=web02\n");
    let r = cli.tsdb(&["scan", "--import", "1356998400", "sum", "sys.cpu.user"]);
    assert_eq!(
        r.stdout,
        "sys.cpu.user 1356998400 42 host=web01\nsys.cpu.user 1356998460 1.5 host=web01\n"
    );
}

fn query_prints_opentsdb_lines_after_metasync(backend: Backend) {
    let Some(cli) = cli_with_sample(backend) else {
        return;
    };
    // Rows written without the series index: metasync rebuilds it.
    let r = cli.tsdb(&["uid", "metasync"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = cli.tsdb(&[
        "query",
        "1356998400",
        "1356999999",
        "sum",
        "sys.cpu.user",
        "host=web01",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // The next value is a float, so OpenTSDB's aggregation runs in double
    // math at the first timestamp too and prints it with %f.
    assert_eq!(
        r.stdout,
        "sys.cpu.user 1356998400000 42.000000 {host=web01}\nsys.cpu.user 1356998460000 1.500000 {host=web01}\n"
    );
    let r = cli.tsdb(&[
        "query",
        "1356998400",
        "1356999999",
        "sum",
        "sys.cpu.user",
        "host=web02",
    ]);
    assert_eq!(r.stdout, "sys.cpu.user 1356998400500 -7 {host=web02}\n");
    let r = cli.tsdb(&["query", "1356998400", "1356999999", "sum", "nope"]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("No such name for 'metrics': 'nope'"),
        "{}",
        r.stderr
    );
}

fn search_lookup_metasync_and_metapurge(backend: Backend) {
    let Some(cli) = cli_with_sample(backend) else {
        return;
    };
    let r = cli.tsdb(&["uid", "metasync"]);
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
    let r = cli.tsdb(&["uid", "metasync"]);
    assert!(
        r.stdout.contains(
            "Created 0 TSMeta objects, set the created time of 0 TSMeta and 0 UIDMeta objects\n"
        ),
        "{}",
        r.stdout
    );
    let all = "000001000001000001 sys.cpu.user {host=web01}\n000001000001000002 sys.cpu.user {host=web02}\n";
    assert_eq!(cli.tsdb(&["search", "lookup", "sys.cpu.user"]).stdout, all);
    assert_eq!(cli.tsdb(&["search", "sys.cpu.user{host=*}"]).stdout, all);
    assert_eq!(
        cli.tsdb(&["search", "lookup", "sys.cpu.user", "host=web02"])
            .stdout,
        "000001000001000002 sys.cpu.user {host=web02}\n"
    );
    let r = cli.tsdb(&["search", "lookup", "*=web01"]);
    assert_eq!(
        r.stdout, "000001000001000001 sys.cpu.user {host=web01}\n",
        "{}",
        r.stderr
    );
    assert_eq!(
        cli.tsdb(&["search", "lookup", "--limit", "1", "sys.cpu.user"])
            .stdout,
        "000001000001000001 sys.cpu.user {host=web01}\n"
    );
    let r = cli.tsdb(&["search", "lookup", "nope"]);
    assert_eq!(
        (r.code, r.stderr.as_str()),
        (1, "No such name for 'metrics': 'nope'\n")
    );
    let r = cli.tsdb(&["search", "lookup", "sys.cpu.user", "host"]);
    assert_eq!((r.code, r.stderr.as_str()), (2, "Invalid tag: host\n"));
    assert_eq!(cli.tsdb(&["search", "lookup", "m{host"]).code, 2);
    // A UIDMeta cell, then purge everything meta.
    {
        let db = cli.open_db();
        let uid = db.uids().get_id(UidKind::Metric, "sys.cpu.user").unwrap();
        let f = rtsdb::meta::UidMetaFields {
            description: "cpu".into(),
            ..Default::default()
        };
        db.store()
            .meta_store()
            .put_uid_meta(UidKind::Metric, uid, &f)
            .unwrap();
        db.close().unwrap();
    }
    let r = cli.tsdb(&["uid", "metapurge"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            // The four metasync stored (one rewritten above).
            .starts_with("Deleted 4 UIDMeta cells and 2 TSMeta rows\n"),
        "{}",
        r.stdout
    );
    let r = cli.tsdb(&["uid", "metapurge"]);
    assert!(
        r.stdout
            .starts_with("Deleted 0 UIDMeta cells and 0 TSMeta rows\n")
    );
    // Names and data are untouched.
    assert_eq!(cli.tsdb(&["search", "lookup", "sys.cpu.user"]).stdout, all);
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
