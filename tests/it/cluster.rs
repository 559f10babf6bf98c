//! rtsdb on a ClickHouse cluster (docs/scale-out.md): two TSD processes
//! on one cluster, the command line on it. Needs `RTSDB_TEST_CLUSTER`
//! (the conf file `scripts/cluster up` prints); without it each test says
//! it was skipped and passes. Each test uses a database of its own.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::child::{ChildOptions, ChildTsd};
use crate::common::server::{json_http, post_put, telnet};

/// A cluster conf with a database of its own for `test`, written into
/// `dir`; `None` (after saying so) without a cluster.
struct ClusterConf {
    path: PathBuf,
    endpoint: String,
    cluster: String,
    database: String,
}

impl ClusterConf {
    fn new(test: &str, dir: &Path) -> Option<ClusterConf> {
        let Ok(shared) = std::env::var("RTSDB_TEST_CLUSTER") else {
            println!("skipped: RTSDB_TEST_CLUSTER not set (run scripts/with-cluster cargo test)");
            return None;
        };
        let text = std::fs::read_to_string(&shared).expect("the RTSDB_TEST_CLUSTER file reads");
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let database = format!("it_{test}_{}_{nanos}", std::process::id());
        let value = |key: &str| {
            text.lines()
                .filter_map(|l| l.split_once('='))
                .find(|(k, _)| k.trim() == key)
                .map(|(_, v)| v.trim().to_string())
                .unwrap_or_default()
        };
        let endpoint = value("tsd.storage.clickhouse.endpoints")
            .split(',')
            .next()
            .unwrap()
            .trim()
            .trim_start_matches("http://")
            .to_string();
        let cluster = value("tsd.storage.clickhouse.cluster");
        let mut conf: String = text
            .lines()
            .filter(|l| {
                let l = l.trim_start();
                !l.starts_with("tsd.storage.clickhouse.database")
                    && !l.starts_with("tsd.storage.zk_basedir")
            })
            .map(|l| format!("{l}\n"))
            .collect();
        // A database and a ZooKeeper base path of its own (UIDs, locks and
        // the layout record live there). UIDs in blocks of one: each
        // `tsdb` command is a process of its own, and with the default
        // blocks each would start a new block, so the stored UIDs (which
        // `scan` prints) would differ from the embedded store's.
        conf.push_str(&format!(
            "tsd.storage.clickhouse.database = {database}\n\
             tsd.storage.zk_basedir = /rtsdb-test/{database}\n\
             tsd.storage.zk_uid_block = 1\n\
             tsd.core.auto_create_metrics = true\n"
        ));
        let path = dir.join("cluster.conf");
        std::fs::write(&path, conf).unwrap();
        Some(ClusterConf {
            path,
            endpoint,
            cluster,
            database,
        })
    }
}

impl ClusterConf {
    /// Lets the TSDs started on this conf delete by query
    /// (`tsd.http.query.allow_delete`).
    fn allow_deletes(&self) {
        let mut text = std::fs::read_to_string(&self.path).unwrap();
        text.push_str("tsd.http.query.allow_delete = true\n");
        std::fs::write(&self.path, text).unwrap();
    }
}

impl Drop for ClusterConf {
    fn drop(&mut self) {
        crate::common::cluster::drop_test_database(&self.endpoint, &self.cluster, &self.database);
    }
}

fn tsd(conf: &ClusterConf, data: &Path) -> ChildTsd {
    ChildTsd::start(
        data,
        ChildOptions {
            config: Some(&conf.path),
            ..Default::default()
        },
    )
}

fn query(tsd: &ChildTsd, q: &str) -> serde_json::Value {
    let r = json_http(tsd.addr, "GET", &format!("/api/query?{q}"), "");
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

/// The `dps` of the first series answering `q`, as (timestamp, value).
fn dps(tsd: &ChildTsd, q: &str) -> Vec<(String, f64)> {
    let v = query(tsd, q);
    v.as_array()
        .and_then(|a| a.first())
        .and_then(|s| s["dps"].as_object())
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_f64().unwrap()))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_point_put_on_one_tsd_is_read_on_another() {
    let dir = tempfile::tempdir().unwrap();
    let Some(conf) = ClusterConf::new("two_tsds", dir.path()) else {
        return;
    };
    let a = tsd(&conf, &dir.path().join("a"));
    let b = tsd(&conf, &dir.path().join("b"));

    // A sync put is in ClickHouse when acknowledged: B reads it at once.
    let r = post_put(
        a.addr,
        "?sync",
        r#"{"metric":"sys.cpu","timestamp":1356998400,"value":1,"tags":{"host":"a"}}"#,
    );
    assert_eq!(r.status, 204, "{}", r.text());
    let q = "start=1356998000&end=1357002000&m=sum:sys.cpu%7Bhost=a%7D";
    assert_eq!(dps(&b, q), vec![("1356998400".to_string(), 1.0)]);

    // A telnet put is written out by A's flusher within a tick: B sees it
    // within the 5 s the cluster promises (polled; the bound is a
    // deadline, not a measurement).
    let out = telnet(a.addr, b"put sys.cpu 1356998460 2 host=a\n");
    assert_eq!(out, "");
    let deadline = Instant::now() + Duration::from_secs(5);
    let want = vec![
        ("1356998400".to_string(), 1.0),
        ("1356998460".to_string(), 2.0),
    ];
    loop {
        let got = dps(&b, q);
        if got == want {
            break;
        }
        assert!(Instant::now() < deadline, "B still reads {got:?}");
        std::thread::sleep(Duration::from_millis(100));
    }

    // The names resolve to the same UIDs on both.
    let tsuids = |t: &ChildTsd| query(t, &format!("{q}&show_tsuids=true"))[0]["tsuids"].clone();
    assert_eq!(tsuids(&a), tsuids(&b));
    let uid = |t: &ChildTsd| {
        let r = json_http(t.addr, "GET", "/api/uid/uidmeta?uid=000001&type=metric", "");
        (r.status, r.json()["name"].clone())
    };
    assert_eq!(uid(&a), (200, serde_json::json!("sys.cpu")));
    assert_eq!(uid(&a), uid(&b));

    // B writes into the same hour: both TSDs' points stay.
    let r = post_put(
        b.addr,
        "?sync",
        r#"{"metric":"sys.cpu","timestamp":1356998520,"value":3,"tags":{"host":"a"}}"#,
    );
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(dps(&a, q).len(), 3);
    a.terminate();
    b.terminate();
}

fn tsdb(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tsdb {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_command_line_prints_the_same_lines_as_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let Some(conf) = ClusterConf::new("cli", dir.path()) else {
        return;
    };
    let input = dir.path().join("points.txt");
    let mut lines = String::new();
    for i in 0..50u32 {
        let host = ["web01", "web02", "db01"][i as usize % 3];
        lines.push_str(&format!(
            "sys.cpu.user {} {} host={host} dc=lga\n",
            1356998400 + i * 97,
            i * 3
        ));
        lines.push_str(&format!(
            "sys.mem {} {}.5 host={host}\n",
            1356998400 + i * 61,
            i
        ));
    }
    std::fs::write(&input, lines).unwrap();
    let input = input.to_str().unwrap();
    let embedded = dir.path().join("embedded");
    let embedded = embedded.to_str().unwrap();
    let cluster_dir = dir.path().join("cluster");
    let conf_path = conf.path.to_str().unwrap();
    let on_cluster = |args: &[&str]| {
        let mut all = vec![
            "--config",
            conf_path,
            "--data-dir",
            cluster_dir.to_str().unwrap(),
        ];
        all.extend_from_slice(args);
        tsdb(&all)
    };
    let on_embedded = |args: &[&str]| {
        let mut all = vec!["--data-dir", embedded];
        all.extend_from_slice(args);
        tsdb(&all)
    };
    on_embedded(&["import", "--auto-metric", input]);
    on_cluster(&["import", "--auto-metric", input]);
    // `tsd`: a point put through a running TSD (then stopped) is one more
    // line of the scans below, on both.
    for (config, data) in [
        (None, Path::new(embedded)),
        (Some(conf.path.as_path()), cluster_dir.as_path()),
    ] {
        let t = ChildTsd::start(
            data,
            ChildOptions {
                config,
                ..Default::default()
            },
        );
        assert_eq!(telnet(t.addr, b"put sys.mem 1356998401 7 host=web09\n"), "");
        assert!(t.terminate().success());
    }
    for args in [
        &["scan", "--import", "1356990000", "sum", "sys.cpu.user"][..],
        &["scan", "1356990000", "sum", "sys.mem"][..],
        &["query", "1356990000", "sum", "sys.cpu.user", "host=*"][..],
        &["uid", "grep", "sys"][..],
        &["search", "lookup", "sys.cpu.user", "host=web01"][..],
        &["fsck", "--full-scan"][..],
    ] {
        // fsck's WAL lines are about each process's local log (its
        // segments' names and count depend on when it rotated): the
        // stored data is what must agree.
        let local = |out: String| -> String {
            out.lines()
                .filter(|l| !l.starts_with("WAL "))
                .map(|l| format!("{l}\n"))
                .collect()
        };
        let (e, c) = (local(on_embedded(args)), local(on_cluster(args)));
        assert!(
            !e.trim().is_empty() || args[0] == "fsck",
            "{args:?} printed nothing"
        );
        assert_eq!(c, e, "tsdb {args:?}");
    }
    on_cluster(&["mkmetric", "new.metric"]);
    assert!(on_cluster(&["uid", "metrics", "new.metric"]).contains("new.metric"));
}

/// B keeps the rows of hours long past it read (its read cache,
/// docs/scale-out.md "The read cache"); whatever A acknowledged since is
/// in B's very next answer all the same, as on a B without the cache: a
/// late point into an hour B holds, one into an hour B knows empty, a
/// delete of an hour B holds. No polling: the order is strict.
#[test]
fn writes_acknowledged_by_one_tsd_reach_hours_another_one_cached_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let Some(conf) = ClusterConf::new("read_cache", dir.path()) else {
        return;
    };
    conf.allow_deletes();
    let a = tsd(&conf, &dir.path().join("a"));
    let b = tsd(&conf, &dir.path().join("b"));
    let put = |ts: u32, v: u32| {
        let body =
            format!(r#"{{"metric":"sys.mem","timestamp":{ts},"value":{v},"tags":{{"host":"h"}}}}"#);
        let r = post_put(a.addr, "?sync", &body);
        assert_eq!(r.status, 204, "{}", r.text());
    };
    let point = |ts: &str, v: f64| (ts.to_string(), v);
    let q = "start=1356998000&end=1357005600&m=sum:sys.mem%7Bhost=h%7D";
    put(1356998400, 1);
    // B reads the hour (and the next, empty one) twice: the second time
    // from what it kept.
    assert_eq!(dps(&b, q), vec![point("1356998400", 1.0)]);
    assert_eq!(dps(&b, q), vec![point("1356998400", 1.0)]);

    // Late points, each read by B's next query: into the hour B holds,
    // then into the hour B knows empty.
    put(1356999000, 2);
    assert_eq!(
        dps(&b, q),
        vec![point("1356998400", 1.0), point("1356999000", 2.0)]
    );
    put(1357002000, 3);
    assert_eq!(
        dps(&b, q),
        vec![
            point("1356998400", 1.0),
            point("1356999000", 2.0),
            point("1357002000", 3.0),
        ]
    );

    // A deletes the first hour's points.
    let r = json_http(
        a.addr,
        "DELETE",
        "/api/query?start=1356998000&end=1357000000&m=sum:sys.mem%7Bhost=h%7D",
        "",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(dps(&b, q), vec![point("1357002000", 3.0)]);

    // A series A creates in an hour B holds is found by B's next query.
    let r = post_put(
        a.addr,
        "?sync",
        r#"{"metric":"sys.mem","timestamp":1357002060,"value":4,"tags":{"host":"new"}}"#,
    );
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(
        dps(
            &b,
            "start=1356998000&end=1357005600&m=sum:sys.mem%7Bhost=new%7D"
        ),
        vec![point("1357002060", 4.0)]
    );
    a.terminate();
    b.terminate();
}

/// B keeps the whole hours long past that a scan read (a query over
/// every series of a metric, docs/scale-out.md "The read cache");
/// whatever A acknowledged since is in B's very next scan all the same:
/// a late point into an hour B holds, one into an hour B knows empty, a
/// new series in an hour B holds, a delete. No polling: the order is
/// strict.
#[test]
fn writes_acknowledged_by_one_tsd_reach_hours_another_one_scanned_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let Some(conf) = ClusterConf::new("scan_cache", dir.path()) else {
        return;
    };
    conf.allow_deletes();
    let a = tsd(&conf, &dir.path().join("a"));
    let b = tsd(&conf, &dir.path().join("b"));
    let put = |ts: u32, v: u32, host: &str| {
        let body = format!(
            r#"{{"metric":"sys.net","timestamp":{ts},"value":{v},"tags":{{"host":"{host}"}}}}"#
        );
        let r = post_put(a.addr, "?sync", &body);
        assert_eq!(r.status, 204, "{}", r.text());
    };
    let point = |ts: &str, v: f64| (ts.to_string(), v);
    // Every series of the metric: read by scanning its rows.
    let q = "start=1356998000&end=1357005600&m=sum:sys.net";
    put(1356998400, 1, "h1");
    put(1356998400, 10, "h2");
    // B scans the hour (and the next, empty one) twice: the second time
    // from the whole hours it kept.
    for _ in 0..2 {
        assert_eq!(dps(&b, q), vec![point("1356998400", 11.0)]);
    }

    // A late point into the hour B holds, then one into the hour B knows
    // empty: each in B's next scan.
    put(1356999000, 2, "h1");
    put(1356999000, 20, "h2");
    assert_eq!(
        dps(&b, q),
        vec![point("1356998400", 11.0), point("1356999000", 22.0)]
    );
    put(1357002000, 3, "h1");
    put(1357002000, 30, "h2");
    let before_new = vec![
        point("1356998400", 11.0),
        point("1356999000", 22.0),
        point("1357002000", 33.0),
    ];
    assert_eq!(dps(&b, q), before_new);
    assert_eq!(dps(&b, q), before_new);

    // A series A creates in an hour B holds.
    put(1357002000, 100, "h3");
    assert_eq!(
        dps(&b, q),
        vec![
            point("1356998400", 11.0),
            point("1356999000", 22.0),
            point("1357002000", 133.0),
        ]
    );

    // A deletes the first hour's points of h1 and h2.
    for host in ["h1", "h2"] {
        let r = json_http(
            a.addr,
            "DELETE",
            &format!("/api/query?start=1356998000&end=1357000000&m=sum:sys.net%7Bhost={host}%7D"),
            "",
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert_eq!(dps(&b, q), vec![point("1357002000", 133.0)]);
    a.terminate();
    b.terminate();
}
