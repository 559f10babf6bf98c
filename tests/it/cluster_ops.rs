//! Operating rtsdb on a ClickHouse cluster (docs/scale-out.md): retention
//! by whole partitions, `tsdb fsck` and `tsdb uid fsck` finding and
//! repairing what breaks the cluster's invariants, and UIDMeta following
//! UID deletes. Needs `RTSDB_TEST_CLUSTER` (`scripts/with-cluster cargo
//! test`); without it each test says it was skipped and passes. Each test
//! has a ClickHouse database and a ZooKeeper base path of its own.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rtsdb::model::UidKind;

use crate::common::cli::{Run, tsdb};
use crate::common::cluster::{as_pairs, cluster_settings};
use crate::common::server::{TestServer, get, post_put, req};

/// One test's place on the shared cluster, a conf file for the `tsdb`
/// command line, and plain SQL over ClickHouse's HTTP interface (to look
/// at what is stored, and to break it).
struct OnCluster {
    settings: Vec<(String, String)>,
    endpoints: Vec<String>,
    database: String,
    dir: tempfile::TempDir,
    conf: PathBuf,
}

impl OnCluster {
    fn new(test: &str, extra: &[(&str, &str)]) -> Option<OnCluster> {
        let mut settings = cluster_settings(test)?;
        settings.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let value = |key: &str| {
            settings
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let endpoints = value("tsd.storage.clickhouse.endpoints")
            .split(',')
            .map(|e| e.trim().trim_start_matches("http://").to_string())
            .filter(|e| !e.is_empty())
            .collect();
        let database = value("tsd.storage.clickhouse.database");
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("cluster.conf");
        let text: String = settings
            .iter()
            .map(|(k, v)| format!("{k} = {v}\n"))
            .collect();
        std::fs::write(&conf, text).unwrap();
        Some(OnCluster {
            settings,
            endpoints,
            database,
            dir,
            conf,
        })
    }

    fn value(&self, key: &str) -> &str {
        self.settings
            .iter()
            .find(|(k, _)| k == key)
            .map_or("", |(_, v)| v.as_str())
    }

    fn server(&self) -> TestServer {
        TestServer::start(&as_pairs(&self.settings))
    }

    /// A TSD that keeps 30 days (`tsd.storage.ttl`): its flusher drops
    /// the weeks past them at its first tick. The tests write old rows
    /// through a TSD without a TTL first, so that no drop can run before
    /// they are seen stored.
    fn server_keeping_30_days(&self) -> TestServer {
        let mut settings = as_pairs(&self.settings);
        settings.push(("tsd.storage.ttl", "30d"));
        TestServer::start(&settings)
    }

    /// `tsdb --config CONF --data-dir DIR/cli ARGS...`
    fn tsdb(&self, args: &[&str]) -> Run {
        let mut all = vec!["--config", self.conf.to_str().unwrap()];
        all.extend_from_slice(args);
        tsdb(&self.dir.path().join("cli"), &all)
    }

    /// Runs `sql` on one server; its answer (panics on an error).
    fn sql_on(endpoint: &str, sql: &str) -> String {
        let mut s = TcpStream::connect(endpoint).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        // HTTP/1.0: the answer is the rest of the stream, never chunked.
        // Inserts wait until every shard has their rows.
        write!(
            s,
            "POST /?insert_distributed_sync=1 HTTP/1.0\r\nContent-Length: {}\r\n\r\n{sql}",
            sql.len()
        )
        .unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).unwrap();
        let raw = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
        assert!(
            head.starts_with("HTTP/1.") && head.contains(" 200 "),
            "{sql}: {raw}"
        );
        body.to_string()
    }

    fn sql(&self, sql: &str) -> String {
        Self::sql_on(&self.endpoints[0], sql)
    }

    /// The partitions of the data table on any server.
    fn data_partitions(&self) -> BTreeSet<u64> {
        self.partitions("data_local")
    }

    /// The partitions of one local table on any server.
    fn partitions(&self, local: &str) -> BTreeSet<u64> {
        self.endpoints
            .iter()
            .flat_map(|e| {
                Self::sql_on(
                    e,
                    &format!(
                        "SELECT DISTINCT partition FROM system.parts \
                         WHERE active AND database = '{}' AND table = '{local}'",
                        self.database
                    ),
                )
                .lines()
                .filter_map(|l| l.trim().trim_matches('\'').parse().ok())
                .collect::<Vec<u64>>()
            })
            .collect()
    }
}

impl Drop for OnCluster {
    fn drop(&mut self) {
        let sql = format!(
            "DROP DATABASE IF EXISTS {} ON CLUSTER {}",
            self.database,
            self.value("tsd.storage.clickhouse.cluster")
        );
        if let Ok(mut s) = TcpStream::connect(&self.endpoints[0]) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
            let _ = write!(
                s,
                "POST / HTTP/1.0\r\nContent-Length: {}\r\n\r\n{sql}",
                sql.len()
            );
            let _ = s.read_to_end(&mut Vec::new());
        }
    }
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn put_sync(srv: &TestServer, metric: &str, ts: u64, value: i64, host: &str) {
    let r = post_put(
        srv.addr,
        "?sync",
        &format!(
            r#"{{"metric":"{metric}","timestamp":{ts},"value":{value},"tags":{{"host":"{host}"}}}}"#
        ),
    );
    assert_eq!(r.status, 204, "{}", r.text());
}

/// Polls `done` for at most 30 s (replicas apply a replicated drop from
/// their log, a moment after the replica asked).
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within 30 s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn retention_drops_whole_expired_weeks_and_keeps_the_current_one() {
    let Some(c) = OnCluster::new("retention", &[("tsd.core.auto_create_metrics", "true")]) else {
        return;
    };
    let now = now_s();
    let (old, current) = (now - 60 * 86_400, now - 60);
    {
        let writer = c.server();
        put_sync(&writer, "old.m", old, 1, "a");
        put_sync(&writer, "cur.m", current, 2, "a");
    }
    // A partition is a week of base hours.
    let week = |ts: u64| ts / 3600 * 3600 / 604_800;
    let before = c.data_partitions();
    assert!(
        before.contains(&week(old)) && before.contains(&week(current)),
        "{before:?}"
    );

    // The flusher drops what is past retention at its first tick (and
    // then every hour).
    let srv = c.server_keeping_30_days();
    eventually("the expired week dropped on every replica", || {
        !c.data_partitions().contains(&week(old))
    });
    assert!(c.data_partitions().contains(&week(current)));
    let (status, body) = get(
        &srv,
        &format!("/api/query?start={}&m=sum:cur.m", current - 10),
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(&format!(r#""{current}":2"#)), "{body}");
    // Nothing in retention is ever dropped: another run finds nothing.
    assert_eq!(srv.state.db().store().drop_expired_partitions().unwrap(), 0);
}

/// Rollups of one interval (an hour, in rows of a day) beside the default
/// one, for the rollup retention tests.
const ROLLUPS: &str = r#"{"aggregationIds":{"sum":0},"intervals":[
 {"table":"tsdb","preAggregationTable":"tsdb-agg","interval":"1m","rowSpan":"1h","defaultInterval":true},
 {"table":"tsdb-rollup-1h","preAggregationTable":"tsdb-rollup-agg-1h","interval":"1h","rowSpan":"1d"}]}"#;

/// An hourly `sum` rollup of `r.m{host=a}` through `/api/rollup`.
fn put_rollup(srv: &TestServer, ts: u64, value: i64) {
    let (status, body) = req(
        srv,
        "POST",
        "/api/rollup?sync",
        &format!(
            r#"{{"metric":"r.m","timestamp":{ts},"value":{value},"interval":"1h","aggregator":"sum","tags":{{"host":"a"}}}}"#
        ),
    );
    assert_eq!(status, 204, "{body}");
}

/// The hourly sums a query reads from the rollup table, from `start` on.
fn rollup_sums(srv: &TestServer, start: u64) -> String {
    let (status, body) = get(srv, &format!("/api/query?start={start}&m=sum:1h-sum:r.m"));
    assert_eq!(status, 200, "{body}");
    body
}

#[test]
fn retention_drops_expired_weeks_of_rollups_too() {
    let Some(c) = OnCluster::new(
        "rollup_retention",
        &[
            ("tsd.core.auto_create_metrics", "true"),
            ("tsd.rollups.enable", "true"),
            ("tsd.rollups.config", ROLLUPS),
        ],
    ) else {
        return;
    };
    let now = now_s();
    let (old, current) = (now - 60 * 86_400, now - 3600);
    {
        let writer = c.server();
        put_rollup(&writer, old, 5);
        put_rollup(&writer, current, 7);
    }
    // A rollup row starts at its day (its row span); a partition is a
    // week of row starts, as in the data table.
    let week = |ts: u64| ts / 86_400 * 86_400 / 604_800;
    let before = c.partitions("rollup_local");
    assert!(
        before.contains(&week(old)) && before.contains(&week(current)),
        "{before:?}"
    );

    // The flusher's first tick: no data rows, one expired rollup week.
    let srv = c.server_keeping_30_days();
    eventually("the expired rollup week dropped on every replica", || {
        !c.partitions("rollup_local").contains(&week(old))
    });
    assert!(c.partitions("rollup_local").contains(&week(current)));
    let hour = current / 3600 * 3600;
    let body = rollup_sums(&srv, current - 7200);
    assert!(body.contains(&format!(r#""{hour}":7"#)), "{body}");
    assert_eq!(srv.state.db().store().drop_expired_partitions().unwrap(), 0);
}

/// A database whose tables an rtsdb before partitioned rollups created
/// (the rollup table without `base`, one partition; the statements that
/// version ran) still opens: rollups are written and read as before, and
/// retention drops data weeks while leaving that rollup table alone.
#[test]
fn a_database_made_before_rollups_were_partitioned_still_opens() {
    let Some(c) = OnCluster::new(
        "rollup_schema_1",
        &[
            ("tsd.core.auto_create_metrics", "true"),
            ("tsd.rollups.enable", "true"),
            ("tsd.rollups.config", ROLLUPS),
        ],
    ) else {
        return;
    };
    let (db, cluster) = (&c.database, c.value("tsd.storage.clickhouse.cluster"));
    c.sql(&format!(
        "CREATE DATABASE IF NOT EXISTS {db} ON CLUSTER {cluster}"
    ));
    for name in ["data", "uid", "meta", "idx", "tree", "rollup"] {
        let (base, partition) = if name == "data" {
            ("base UInt32, ", "PARTITION BY intDiv(base, 604800) ")
        } else {
            ("", "")
        };
        c.sql(&format!(
            "CREATE TABLE IF NOT EXISTS {db}.{name}_local ON CLUSTER {cluster} \
             (key String, series String, {base}writer String, ver UInt64, deleted UInt8, value String) \
             ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{{shard}}/{db}/{name}', '{{replica}}', ver) \
             {partition}ORDER BY (key, writer)"
        ));
        c.sql(&format!(
            "CREATE TABLE IF NOT EXISTS {db}.{name} ON CLUSTER {cluster} AS {db}.{name}_local \
             ENGINE = Distributed({cluster}, {db}, {name}_local, sipHash64(series))"
        ));
    }
    let now = now_s();
    let (old, current) = (now - 60 * 86_400, now - 3600);
    {
        let writer = c.server();
        put_rollup(&writer, old, 5);
        put_rollup(&writer, current, 7);
        put_sync(&writer, "old.m", old, 1, "a");
    }
    let week = |ts: u64| ts / 3600 * 3600 / 604_800;
    assert!(c.data_partitions().contains(&week(old)));
    let srv = c.server_keeping_30_days();
    let hour = current / 3600 * 3600;
    let body = rollup_sums(&srv, current - 7200);
    assert!(body.contains(&format!(r#""{hour}":7"#)), "{body}");
    // The old data week goes; the unpartitioned rollup table stays whole.
    eventually("the expired data week dropped on every replica", || {
        !c.data_partitions().contains(&week(old))
    });
    assert_eq!(srv.state.db().store().drop_expired_partitions().unwrap(), 0);
    assert_eq!(
        c.sql(&format!("SELECT uniqExact(key) FROM {db}.rollup"))
            .trim(),
        "2"
    );
}

#[test]
fn fsck_finds_and_repairs_rows_that_break_the_cluster_invariants() {
    let Some(c) = OnCluster::new("fsck", &[("tsd.core.auto_create_metrics", "true")]) else {
        return;
    };
    let mut srv = c.server();
    let ts = 1_356_998_400;
    put_sync(&srv, "sys.cpu", ts, 2, "a");
    put_sync(&srv, "sys.cpu", ts, 1, "b");
    srv.stop();
    let db = &c.database;
    let row_of = |host_uid: &str| {
        let line = c.sql(&format!(
            "SELECT hex(key), any(base), hex(argMax(value, ver)) FROM {db}.data \
             WHERE endsWith(hex(key), '{host_uid}') GROUP BY key FORMAT TabSeparated"
        ));
        let f: Vec<String> = line.trim().split('\t').map(str::to_string).collect();
        assert_eq!(f.len(), 3, "{line}");
        (f[0].clone(), f[1].clone(), f[2].clone())
    };
    // host=a is tag value 1, host=b 2 (UIDs in the order first seen).
    let (key_a, base, _) = row_of("000001");
    let (_, _, value_b) = row_of("000002");
    // What a row key is without its base hour: the series, its shard.
    let series = |key: &str| format!("{}{}", &key[..6], &key[14..]);
    let insert = |key: &str, writer: &str, value: &str| {
        c.sql(&format!(
            "INSERT INTO {db}.data (key, series, base, writer, ver, deleted, value) VALUES \
             (unhex('{key}'), unhex('{}'), {base}, '{writer}', {}, 0, unhex('{value}'))",
            series(key),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
    };
    // 1. A second TSD's version of host=a's row holding another value at
    //    the same timestamp (b's row value: 1 at the same offset).
    insert(&key_a, "other-tsd", &value_b);
    // 2. A row whose metric UID no name has.
    insert(&format!("FFFFFF{}", &key_a[6..]), "other-tsd", &value_b);
    // 3. A row whose key does not fit the layout record (a tag UID cut).
    insert(&format!("{key_a}00"), "other-tsd", &value_b);

    let found = c.tsdb(&["fsck", "--full-scan"]);
    assert_eq!(found.code, 1, "{}{}", found.stdout, found.stderr);
    for want in [
        "More than one version had a value for the same timestamp: (1356998400000)",
        "(written by ",
        "Orphaned row",
        "Invalid row key",
        "Duplicate Datapoints: 1",
        "Orphaned UID Rows: 1",
        "Invalid Row Keys Found: 1",
    ] {
        assert!(found.stdout.contains(want), "{want}: {}", found.stdout);
    }

    let fixed = c.tsdb(&["fsck", "--full-scan", "--fix-all"]);
    assert!(
        fixed.stdout.contains("Duplicate Datapoints Resolved: 1"),
        "{}{}",
        fixed.stdout,
        fixed.stderr
    );
    let clean = c.tsdb(&["fsck", "--full-scan"]);
    assert_eq!(clean.code, 0, "{}{}", clean.stdout, clean.stderr);
    assert!(clean.stdout.contains("Total Errors: 0"), "{}", clean.stdout);
    // One live version of host=a's row is left.
    let live = c.sql(&format!(
        "SELECT count() FROM (SELECT writer, argMax(deleted, ver) AS d FROM {db}.data \
         WHERE hex(key) = '{key_a}' GROUP BY writer) WHERE d = 0"
    ));
    assert_eq!(live.trim(), "1");
}

#[test]
fn uid_fsck_checks_and_repairs_the_mappings_in_zookeeper() {
    let Some(c) = OnCluster::new("uid_fsck", &[]) else {
        return;
    };
    let made = c.tsdb(&["mkmetric", "sys.a", "sys.b"]);
    assert_eq!(made.code, 0, "{}", made.stderr);
    let clean = c.tsdb(&["uid", "fsck"]);
    assert_eq!(clean.code, 0, "{}{}", clean.stdout, clean.stderr);
    assert!(
        clean.stdout.contains("No errors found."),
        "{}",
        clean.stdout
    );

    // Break ZooKeeper's UID store as no assignment ever does.
    let mut config = rtsdb::config::Config::default();
    for (k, v) in &c.settings {
        config.set(k, v);
    }
    let options = rtsdb::db::zk_options(&config).unwrap().unwrap();
    let zk = rtsdb::coord::ZkClient::connect(&options).unwrap();
    let widths = rtsdb::model::UidWidths::default();
    let uids = rtsdb::coord::ZkUidStore::open(zk.clone(), widths).unwrap();
    use rtsdb::uid::UidStore as _;
    let a = uids.forward(UidKind::Metric, "sys.a").unwrap().unwrap();
    let a_bytes = a.to_bytes(widths.metric);
    // sys.a's reverse mapping lost; a reverse mapping for no name (UID
    // 80); the counter below the UIDs in use.
    uids.repair_reverse(UidKind::Metric, &a_bytes, None)
        .unwrap();
    uids.repair_reverse(UidKind::Metric, &[0, 0, 80], Some("ghost"))
        .unwrap();
    let counter = format!("{}/uid/metrics/maxid", c.value("tsd.storage.zk_basedir"));
    zk.run("lower the counter", |client| {
        let counter = counter.clone();
        async move { client.set_data(&counter, b"0", None).await.map(|_| ()) }
    })
    .unwrap();

    let found = c.tsdb(&["uid", "fsck"]);
    assert_ne!(found.code, 0, "{}{}", found.stdout, found.stderr);
    for want in [
        "Forward metrics mapping is missing reverse mapping: sys.a",
        "Reverse metrics mapping is missing forward mapping: ghost",
        "We found an ID of 80 for metrics but the max ID is only 0",
    ] {
        assert!(found.stdout.contains(want), "{want}: {}", found.stdout);
    }
    let fixed = c.tsdb(&["uid", "fsck", "fix"]);
    assert!(
        fixed
            .stdout
            .contains("FIX: Restoring metrics reverse mapping"),
        "{}{}",
        fixed.stdout,
        fixed.stderr
    );
    let again = c.tsdb(&["uid", "fsck"]);
    assert_eq!(again.code, 0, "{}{}", again.stdout, again.stderr);
    assert!(
        again.stdout.contains("No errors found.") && !again.stdout.contains("ghost"),
        "{}",
        again.stdout
    );
    assert_eq!(
        uids.reverse(UidKind::Metric, a).unwrap().as_deref(),
        Some("sys.a")
    );
    assert!(uids.max_id(UidKind::Metric).unwrap() >= 80);
}

#[test]
fn uid_deletes_take_the_uidmeta_with_them_on_the_cluster() {
    let Some(c) = OnCluster::new("uid_meta", &[]) else {
        return;
    };
    let srv = c.server();
    let (status, body) = get(&srv, "/api/uid/assign?metric=gone.m,kept.m");
    assert_eq!(status, 200, "{body}");
    let assigned: serde_json::Value = serde_json::from_str(&body).unwrap();
    let db = srv.state.db();
    let uid_of = |name: &str| {
        let hex = assigned["metric"][name].as_str().unwrap().to_string();
        let uid = db.uids().parse_hex_uid(UidKind::Metric, &hex).unwrap();
        (hex, uid)
    };
    let (gone_hex, gone) = uid_of("gone.m");
    let (kept_hex, kept) = uid_of("kept.m");
    for hex in [&gone_hex, &kept_hex] {
        let (status, body) = req(
            &srv,
            "POST",
            "/api/uid/uidmeta",
            &format!(r#"{{"uid":"{hex}","type":"metric","displayName":"shown"}}"#),
        );
        assert_eq!(status, 200, "{body}");
    }
    assert!(db.meta().uid_meta(UidKind::Metric, gone).unwrap().is_some());

    // DELETE /api/uid/uidmeta on the cluster: the UID stays, its meta goes.
    let (status, body) = req(
        &srv,
        "DELETE",
        &format!("/api/uid/uidmeta?uid={kept_hex}&type=metric"),
        "",
    );
    assert_eq!(status, 204, "{body}");
    assert!(db.meta().uid_meta(UidKind::Metric, kept).unwrap().is_none());
    let (status, body) = get(
        &srv,
        &format!("/api/uid/uidmeta?uid={kept_hex}&type=metric"),
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""displayName":"""#), "{body}");

    // `tsdb uid delete` on another process: mappings and UIDMeta go.
    let deleted = c.tsdb(&["uid", "delete", "metrics", "gone.m"]);
    assert_eq!(deleted.code, 0, "{}", deleted.stderr);
    assert!(db.meta().uid_meta(UidKind::Metric, gone).unwrap().is_none());
}

/// The `dps` of `m{host=HOST}` in the two hours from the one of `ts`
/// on (read by key: what the read cache keeps), as `srv` answers them.
fn dps_of(srv: &TestServer, ts: u64, m: &str, host: &str) -> String {
    let start = ts / 3600 * 3600;
    let (status, body) = get(
        srv,
        &format!(
            "/api/query?start={start}&end={}&m=sum:{m}%7Bhost={host}%7D",
            start + 7199
        ),
    );
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v.get(0).map_or("{}".to_string(), |s| s["dps"].to_string())
}

/// The `dps` of `sum:m` over every series, in the two hours from the
/// one of `ts` on (read by a scan of the metric's rows: the read cache
/// keeps the whole hours), as `srv` answers them.
fn scanned_dps_of(srv: &TestServer, ts: u64, m: &str) -> String {
    let start = ts / 3600 * 3600;
    let (status, body) = get(
        srv,
        &format!("/api/query?start={start}&end={}&m=sum:{m}", start + 7199),
    );
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v.get(0).map_or("{}".to_string(), |s| s["dps"].to_string())
}

/// A TSD keeps the rows of hours long past it read (docs/scale-out.md
/// "The read cache"); an fsck repair made by another process is in its
/// next answer. The row is broken behind every TSD's back (SQL), so the
/// TSD's cached answer is the one before the break; the repair writes
/// what reads of the broken row return (the later version wins), and
/// tells every TSD.
#[test]
fn an_fsck_repair_reaches_rows_a_tsd_cached() {
    let Some(c) = OnCluster::new("fsck_cached", &[("tsd.core.auto_create_metrics", "true")]) else {
        return;
    };
    let srv = c.server();
    let ts = 1_356_998_400;
    put_sync(&srv, "sys.cpu", ts, 2, "a");
    put_sync(&srv, "sys.cpu", ts, 5, "b");
    assert_eq!(dps_of(&srv, ts, "sys.cpu", "a"), r#"{"1356998400":2}"#);
    // Twice: the second answer comes from the hours the scan kept.
    for _ in 0..2 {
        assert_eq!(scanned_dps_of(&srv, ts, "sys.cpu"), r#"{"1356998400":7}"#);
    }
    let db = &c.database;
    let row_of = |host_uid: &str| {
        let line = c.sql(&format!(
            "SELECT hex(key), hex(series), any(base), hex(argMax(value, ver)) FROM {db}.data \
             WHERE endsWith(hex(key), '{host_uid}') GROUP BY key, series FORMAT TabSeparated"
        ));
        let f: Vec<String> = line.trim().split('\t').map(str::to_string).collect();
        assert_eq!(f.len(), 4, "{line}");
        f
    };
    // host=a is tag value 1, host=b 2: another writer's version of a's
    // row holding b's value (5) at the same timestamp, newer.
    let (a, b) = (row_of("000001"), row_of("000002"));
    c.sql(&format!(
        "INSERT INTO {db}.data (key, series, base, writer, ver, deleted, value) VALUES \
         (unhex('{}'), unhex('{}'), {}, 'other-tsd', {}, 0, unhex('{}'))",
        a[0],
        a[1],
        a[2],
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
        b[3]
    ));
    let fixed = c.tsdb(&["fsck", "--full-scan", "--fix-all"]);
    assert!(
        fixed.stdout.contains("Duplicate Datapoints Resolved: 1"),
        "{}{}",
        fixed.stdout,
        fixed.stderr
    );
    assert_eq!(dps_of(&srv, ts, "sys.cpu", "a"), r#"{"1356998400":5}"#);
    assert_eq!(scanned_dps_of(&srv, ts, "sys.cpu"), r#"{"1356998400":10}"#);
}

/// A TSD keeps the rows of hours long past it read; once another TSD's
/// retention run dropped their week, it answers without them. The run is
/// no acknowledged write (the flusher makes it on its own): polled.
#[test]
fn a_retention_drop_reaches_rows_a_tsd_cached() {
    let Some(c) = OnCluster::new(
        "retention_cached",
        &[("tsd.core.auto_create_metrics", "true")],
    ) else {
        return;
    };
    let old = now_s() - 60 * 86_400;
    let reader = c.server();
    put_sync(&reader, "old.m", old, 1, "a");
    put_sync(&reader, "old.m", old, 2, "b");
    let kept = dps_of(&reader, old, "old.m", "a");
    assert_eq!(kept, format!(r#"{{"{old}":1}}"#));
    assert_eq!(dps_of(&reader, old, "old.m", "a"), kept);
    // The whole hours a scan read, kept too.
    let scanned = scanned_dps_of(&reader, old, "old.m");
    assert_eq!(scanned, format!(r#"{{"{old}":3}}"#));
    assert_eq!(scanned_dps_of(&reader, old, "old.m"), scanned);

    let _dropping = c.server_keeping_30_days();
    eventually("the reader answers without the dropped week", || {
        dps_of(&reader, old, "old.m", "a") == "{}" && scanned_dps_of(&reader, old, "old.m") == "{}"
    });
}
