//! Fault tests of the ClickHouse + ZooKeeper backend (docs/scale-out.md,
//! "What happens on each fault"): members of the cluster and TSDs are
//! killed with SIGKILL mid-ingest, and nothing acknowledged may be lost.
//!
//! Each test that kills members starts a private cluster of its own
//! (`scripts/cluster up` with `RTSDB_CLUSTER_DIR` in a tempdir) and stops
//! it by PID (`scripts/cluster down`) however it ends; the shared test
//! cluster is never touched. They run one at a time, across test
//! processes too (a cluster is four ClickHouse servers and three JVMs on a
//! small machine), and only under
//! `scripts/with-cluster` (`RTSDB_TEST_CLUSTER` set), so that plain `cargo
//! test` stays fast; otherwise, or without the cluster's packages, each
//! says it was skipped and passes.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::common::child::{ChildOptions, ChildTsd, tsd_refuses_with};
use crate::common::cluster::CLUSTER_ENV;
use crate::common::server::{HttpResponse, http, parse_response, post_put};

/// Where `scripts/cluster` finds the packages it would otherwise install.
const CLICKHOUSE_BIN: &str = "/usr/sbin/clickhouse-server";
const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";
/// The first hour the tests write into (2013-01-01T00:00:00Z).
const BASE: u64 = 1_356_998_400;
/// A generous bound on what a fault test polls for (a replica catching
/// up, the TSD taking writes again): a deadline, not a measurement.
const DEADLINE: Duration = Duration::from_secs(60);

/// Says on stderr (past the test harness's capture, so it is seen) why a
/// test checked nothing.
fn skipped(test: &str, why: &str) {
    // One write: tests run in parallel, and their lines must not mix.
    let line = format!("cluster fault test {test}: skipped: {why}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// The right to run a private cluster: one at a time on the machine.
struct OneAtATime {
    _thread: MutexGuard<'static, ()>,
    /// Holds an exclusive lock on a file every test process locks (two
    /// runs of the suite, or of two checkouts, on one machine), released
    /// when dropped or when the process dies.
    _process: std::fs::File,
}

/// Waits for [`OneAtATime`]: first among this binary's tests, then among
/// processes.
fn one_at_a_time() -> OneAtATime {
    static LOCK: Mutex<()> = Mutex::new(());
    let thread = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let path = std::env::temp_dir().join("rtsdb-private-cluster.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    file.lock()
        .unwrap_or_else(|e| panic!("locking {}: {e}", path.display()));
    OneAtATime {
        _thread: thread,
        _process: file,
    }
}

/// Whether the fault tests run at all; says why not when they do not.
fn fault_tests_run(test: &str) -> bool {
    if std::env::var_os(CLUSTER_ENV).is_none() {
        skipped(
            test,
            &format!("{CLUSTER_ENV} not set (run scripts/with-cluster cargo test)"),
        );
        return false;
    }
    if !Path::new(CLICKHOUSE_BIN).exists() || !Path::new(ZOOKEEPER_JAR).exists() {
        skipped(
            test,
            &format!(
                "clickhouse-server ({CLICKHOUSE_BIN}) or ZooKeeper ({ZOOKEEPER_JAR}) is not installed"
            ),
        );
        return false;
    }
    true
}

/// A cluster of this test's own, in a tempdir; `down` when dropped.
struct PrivateCluster {
    dir: tempfile::TempDir,
    conf: PathBuf,
    /// Whether a failure message showed the members' logs already.
    logs_shown: std::cell::Cell<bool>,
    _one: OneAtATime,
}

impl PrivateCluster {
    /// Starts it (`None`, after saying why, when fault tests do not run).
    fn up(test: &str) -> Option<PrivateCluster> {
        if !fault_tests_run(test) {
            return None;
        }
        let one = one_at_a_time();
        let dir = tempfile::tempdir().unwrap();
        let mut cluster = PrivateCluster {
            conf: PathBuf::new(),
            logs_shown: std::cell::Cell::new(false),
            dir,
            _one: one,
        };
        let out = cluster.script(&["up"]);
        let last = out.lines().last().unwrap_or_default().trim().to_string();
        cluster.conf = PathBuf::from(last);
        assert!(cluster.conf.is_file(), "scripts/cluster up printed {out:?}");
        Some(cluster)
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("cluster")
    }

    /// Runs `scripts/cluster ARGS` on this cluster; its stdout.
    fn script(&self, args: &[&str]) -> String {
        let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/cluster"))
            .args(args)
            .env("RTSDB_CLUSTER_DIR", self.state())
            .output()
            .unwrap();
        if !out.status.success() {
            self.logs_shown.set(true);
            panic!(
                "scripts/cluster {args:?}: {:?}: {}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr),
                self.member_logs()
            );
        }
        String::from_utf8(out.stdout).unwrap()
    }

    /// The last lines of each member's log (ZooKeeper's log, ClickHouse's
    /// error log): the state dir goes with the test, so a failure message
    /// must carry what is left to read.
    fn member_logs(&self) -> String {
        let logs = ["zk1", "zk2", "zk3"]
            .map(|m| self.state().join(m).join("zookeeper.log"))
            .into_iter()
            .chain(
                ["ch-s1-r1", "ch-s1-r2", "ch-s2-r1", "ch-s2-r2"]
                    .map(|m| self.state().join(m).join("log").join("error.log")),
            );
        let mut out = String::new();
        for log in logs {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out.push_str(&format!("\n--- {}:\n", log.display()));
            out.push_str(&lines[lines.len().saturating_sub(20)..].join("\n"));
        }
        out
    }

    /// SIGKILL one member (`zk1`, `ch-s1-r1`, …) by its recorded PID.
    fn kill(&self, member: &str) {
        self.script(&["kill", member]);
    }

    /// Starts one member again and waits until it is ready.
    fn start(&self, member: &str) {
        self.script(&["start", member]);
    }

    /// The loopback port of a member (its ClickHouse HTTP port, or its
    /// ZooKeeper client port).
    fn port(&self, member: &str) -> u16 {
        std::fs::read_to_string(self.state().join(member).join("port"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// A TSD conf: the cluster's, with `extra` lines appended.
    fn tsd_conf(&self, extra: &str) -> PathBuf {
        let mut text = std::fs::read_to_string(&self.conf).unwrap();
        text.push_str("tsd.core.auto_create_metrics = true\n");
        text.push_str(extra);
        let path = self.dir.path().join(format!("tsd-{}.conf", now_nanos()));
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A TSD on this cluster with the data dir `data` (its WAL), logging
    /// to a new `data.N.log` each start.
    fn tsd(&self, conf: &Path, data: &str) -> ChildTsd {
        ChildTsd::start(
            &self.dir.path().join(data),
            ChildOptions {
                config: Some(conf),
                log: Some(&self.dir.path().join(format!("{data}.{}.log", now_nanos()))),
                ..Default::default()
            },
        )
    }

    /// One statement on one ClickHouse member, over its HTTP port.
    fn clickhouse(&self, member: &str, sql: &str) -> Result<String, String> {
        let addr: SocketAddr = ([127, 0, 0, 1], self.port(member)).into();
        let mut s =
            TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            s,
            // HTTP/1.0: the answer comes whole, not chunked.
            "POST / HTTP/1.0\r\nHost: ch\r\nContent-Length: {}\r\n\r\n{sql}",
            sql.len()
        )
        .map_err(|e| e.to_string())?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).map_err(|e| e.to_string())?;
        let r = parse_response(&raw);
        if r.status == 200 {
            Ok(r.text())
        } else {
            Err(r.text())
        }
    }

    /// What member holds of the TSD's database: per local table, the
    /// newest version of each (key, writer) counted and hashed, so two
    /// replicas compare equal once they hold the same rows, whatever
    /// their merges did.
    fn contents(&self, member: &str) -> Result<String, String> {
        let mut out = String::new();
        for table in ["data", "uid", "meta", "idx", "tree"] {
            out.push_str(&self.clickhouse(
                member,
                &format!(
                    "SELECT '{table}', count(), sum(h) FROM (SELECT cityHash64(key, writer, max(ver)) AS h \
                     FROM rtsdb.{table}_local GROUP BY key, writer)"
                ),
            )?);
        }
        Ok(out)
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        // A failing test's message is printed before the logs go with
        // the state dir: they follow it.
        if std::thread::panicking() && !self.logs_shown.get() {
            let logs = format!("cluster member logs:{}\n", self.member_logs());
            let _ = std::io::stderr().write_all(logs.as_bytes());
        }
        // Stops every member by PID, even when the test failed.
        let _ = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/cluster"))
            .arg("down")
            .env("RTSDB_CLUSTER_DIR", self.state())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// One request that may meet a dying server: `None` when the connection
/// failed or the answer was cut.
fn try_http(addr: SocketAddr, method: &str, path: &str, body: &str) -> Option<HttpResponse> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    raw.windows(4)
        .any(|w| w == b"\r\n\r\n")
        .then(|| parse_response(&raw))
}

/// Series per metric of the ingests: enough that both shards hold some
/// (all 16 on one shard by chance: 1 in 65536).
const SERIES: u64 = 16;

/// Point `t` of the ingests: series `metric{host=h<t % SERIES>}`, at
/// `BASE + t` seconds, value `t`.
fn point_json(metric: &str, t: u64) -> String {
    format!(
        r#"{{"metric":"{metric}","timestamp":{},"value":{t},"tags":{{"host":"h{}"}}}}"#,
        BASE + t,
        t % SERIES
    )
}

fn body_of(metric: &str, ts: impl Iterator<Item = u64>) -> String {
    let points: Vec<String> = ts.map(|t| point_json(metric, t)).collect();
    format!("[{}]", points.join(","))
}

/// Whether a `sync&details` put answer acknowledges all `n` points.
fn acknowledged(r: &HttpResponse, n: u64) -> bool {
    r.status == 200 && r.json()["success"] == n && r.json()["failed"] == 0
}

/// Every `t` of `metric` the TSD at `addr` returns (values checked).
fn stored(addr: SocketAddr, metric: &str) -> BTreeSet<u64> {
    let r = http(
        addr,
        "GET",
        &format!(
            "/api/query?start={}&end={}&m=sum:{metric}%7Bhost=*%7D",
            BASE - 1,
            BASE + 100_000
        ),
        &[],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let mut out = BTreeSet::new();
    for series in r.json().as_array().unwrap() {
        for (ts, v) in series["dps"].as_object().unwrap() {
            let t = ts.parse::<u64>().unwrap() - BASE;
            assert_eq!(v.as_f64(), Some(t as f64), "{metric} at {ts}");
            out.insert(t);
        }
    }
    out
}

/// Asserts every acknowledged `t` is stored.
fn assert_all_there(acked: &BTreeSet<u64>, stored: &BTreeSet<u64>, what: &str) {
    let missing: Vec<_> = acked.difference(stored).take(10).collect();
    assert!(
        missing.is_empty(),
        "{what}: acknowledged but not returned: {missing:?}… ({} acknowledged, {} returned)",
        acked.len(),
        stored.len()
    );
}

/// Sync-put writers: each request carries 20 points of `metric` (new
/// `t`s from `next`); those answered as all stored go into `acked`.
/// They stop when `stop` is set or the server goes away.
struct Ingest {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<BTreeSet<u64>>>,
    refused: Arc<AtomicU64>,
    workers: Vec<std::thread::JoinHandle<()>>,
}

impl Ingest {
    fn start(
        addr: SocketAddr,
        metric: &'static str,
        next: Arc<AtomicU64>,
        threads: usize,
    ) -> Ingest {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(BTreeSet::new()));
        let refused = Arc::new(AtomicU64::new(0));
        let workers = (0..threads)
            .map(|_| {
                let (stop, next, acked, refused) =
                    (stop.clone(), next.clone(), acked.clone(), refused.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let first = next.fetch_add(20, Ordering::Relaxed);
                        let body = body_of(metric, first..first + 20);
                        match try_http(addr, "POST", "/api/put?sync&details", &body) {
                            Some(r) if acknowledged(&r, 20) => {
                                acked.lock().unwrap().extend(first..first + 20);
                            }
                            Some(r) => {
                                // Not acknowledged: a fault answered with
                                // an error (checked by the tests that
                                // cause one on purpose).
                                refused.fetch_add(1, Ordering::Relaxed);
                                assert!(r.status >= 400, "{}: {}", r.status, r.text());
                                std::thread::sleep(Duration::from_millis(20));
                            }
                            None => return, // the TSD died mid-request
                        }
                    }
                })
            })
            .collect();
        Ingest {
            stop,
            acked,
            refused,
            workers,
        }
    }

    fn acked_count(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// Waits (up to [`DEADLINE`]) until `more` points beyond what is
    /// acknowledged now are acknowledged.
    fn wait_for_more(&self, more: usize, what: &str) {
        let want = self.acked_count() + more;
        let deadline = Instant::now() + DEADLINE;
        while self.acked_count() < want {
            assert!(
                Instant::now() < deadline,
                "{what}: writes did not go on ({} acknowledged, {} requests refused)",
                self.acked_count(),
                self.refused.load(Ordering::Relaxed)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn finish(self) -> BTreeSet<u64> {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.workers {
            w.join().unwrap();
        }
        Arc::try_unwrap(self.acked).unwrap().into_inner().unwrap()
    }
}

/// A figure of `/api/stats` (the first with that name and tag value).
fn stat(addr: SocketAddr, metric: &str, tag: Option<(&str, &str)>) -> u64 {
    let v = http(addr, "GET", "/api/stats", &[], b"").json();
    v.as_array()
        .unwrap()
        .iter()
        .find(|s| s["metric"] == metric && tag.is_none_or(|(k, t)| s["tags"][k] == t))
        .and_then(|s| s["value"].as_str()?.parse().ok())
        .unwrap_or_else(|| panic!("no {metric} {tag:?} in /api/stats"))
}

/// Polls `f` until it is true, failing after [`DEADLINE`] with `what`.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !f() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The UID `/api/uid/assign` gives a new metric name, as a number.
fn assign_metric(addr: SocketAddr, name: &str) -> HttpResponse {
    post_json(
        addr,
        "/api/uid/assign",
        &format!(r#"{{"metric":["{name}"]}}"#),
    )
}

fn post_json(addr: SocketAddr, path: &str, body: &str) -> HttpResponse {
    http(
        addr,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    )
}

fn uid_of(r: &HttpResponse, name: &str) -> u64 {
    assert_eq!(r.status, 200, "{}", r.text());
    u64::from_str_radix(r.json()["metric"][name].as_str().unwrap(), 16).unwrap()
}

/// The UID of metric `name`, assigning it if it has none: `/api/uid/assign`
/// answers OpenTSDB's "Name already exists with UID: …" for a name that
/// has one.
fn metric_uid(addr: SocketAddr, name: &str) -> u64 {
    let r = assign_metric(addr, name);
    if r.status == 200 {
        return uid_of(&r, name);
    }
    let error = r.json()["metric_errors"][name]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let hex = error
        .strip_prefix("Name already exists with UID: ")
        .unwrap_or_else(|| panic!("{name}: {}: {}", r.status, r.text()));
    u64::from_str_radix(hex, 16).unwrap()
}

/// The ZooKeeper member (`zk1`..`zk3`) a TSD's session is on, from the
/// last session line of its log.
fn zk_member_of(cluster: &PrivateCluster, log_dir: &Path, data: &str) -> &'static str {
    let mut port = None;
    for entry in std::fs::read_dir(log_dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with(&format!("{data}.")) || !name.ends_with(".log") {
            continue;
        }
        for line in BufReader::new(std::fs::File::open(&path).unwrap()).lines() {
            let line = line.unwrap();
            // Not "fails to establish session to …": the last session made.
            if let Some((_, rest)) =
                line.split_once("succeeds to establish session to tcp://127.0.0.1:")
            {
                port = rest.trim().parse::<u16>().ok();
            }
        }
    }
    let port = port.expect("the TSD's log names the ZooKeeper member it is connected to");
    ["zk1", "zk2", "zk3"]
        .into_iter()
        .find(|m| cluster.port(m) == port)
        .expect("a member of the ensemble")
}

/// kill -9 one ClickHouse replica of `shard` (`s1`) during an ingest of
/// `sync` puts: writes go on, every acknowledged point is queryable
/// afterwards, and the restarted replica catches up with its peer.
fn replica_killed_mid_ingest(test: &str, killed: &str, peer: &str) {
    let Some(cluster) = PrivateCluster::up(test) else {
        return;
    };
    let conf = cluster.tsd_conf("");
    let tsd = cluster.tsd(&conf, "a");
    let ingest = Ingest::start(tsd.addr, "fault.ch", Arc::new(AtomicU64::new(0)), 3);
    ingest.wait_for_more(200, "before the kill");
    cluster.kill(killed);
    ingest.wait_for_more(400, &format!("with {killed} down"));
    cluster.start(killed);
    ingest.wait_for_more(200, &format!("after {killed} came back"));
    let acked = ingest.finish();
    assert_all_there(
        &acked,
        &stored(tsd.addr, "fault.ch"),
        "the TSD that wrote them",
    );
    // A second TSD reads only what ClickHouse holds.
    let other = cluster.tsd(&conf, "b");
    assert_all_there(&acked, &stored(other.addr, "fault.ch"), "another TSD");
    // The restarted replica catches up from the replication log.
    let mut last = (String::new(), String::new());
    eventually(&format!("{killed} did not catch up with {peer}"), || {
        last = (
            cluster.contents(killed).unwrap_or_default(),
            cluster.contents(peer).unwrap_or_default(),
        );
        !last.0.is_empty() && last.0 == last.1
    });
    assert!(!last.0.starts_with("data\t0\t"), "{}", last.0);
    let line = format!(
        "{test}: {} points acknowledged, {killed} caught up:\n{}",
        acked.len(),
        last.0
    );
    let _ = std::io::stderr().write_all(line.as_bytes());
    other.terminate();
    tsd.terminate();
}

/// The second replica of shard 1 killed: it only receives what the first
/// replicates, so nothing acknowledged lives on it alone.
#[test]
fn a_clickhouse_replica_killed_mid_ingest() {
    replica_killed_mid_ingest(
        "a_clickhouse_replica_killed_mid_ingest",
        "ch-s1-r2",
        "ch-s1-r1",
    );
}

/// The first replica of shard 1 killed: the one every TSD reads and
/// writes first (`load_balancing = in_order`), and the TSD's first
/// endpoint. A `sync` put is acknowledged once one replica has its rows,
/// so rows the killed replica took just before dying are on it alone
/// until it returns (the WAL segment is gone by then). This lost
/// acknowledged points (2 runs of 9) while the flusher rebuilt a row from
/// the other replica's older copy and wrote it as a newer version; rows
/// are now written only from what the TSD itself wrote
/// (src/storage/clickhouse/own_rows.rs).
#[test]
fn the_first_replica_killed_mid_ingest() {
    replica_killed_mid_ingest(
        "the_first_replica_killed_mid_ingest",
        "ch-s1-r1",
        "ch-s1-r2",
    );
}

/// Telnet puts that a later `sync` put on another connection covers: the
/// lines are processed in order (the `version` answer proves it), so the
/// sync put's WAL frame follows theirs and its acknowledgement covers
/// them (the definition of tests/it/tsd_crash.rs).
fn telnet_ingest(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    next: Arc<AtomicU64>,
    acked: Arc<Mutex<BTreeSet<u64>>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let Ok(mut s) = TcpStream::connect(addr) else {
                return;
            };
            let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
            let first = next.fetch_add(50, Ordering::Relaxed);
            let mut lines = String::new();
            for t in first..first + 50 {
                lines.push_str(&format!(
                    "put fault.tsd {} {t} host=h{}\n",
                    BASE + t,
                    t % SERIES
                ));
            }
            lines.push_str("version\n");
            if s.write_all(lines.as_bytes()).is_err() {
                return;
            }
            let mut answer = String::new();
            if BufReader::new(&s).read_line(&mut answer).is_err() || answer.is_empty() {
                return;
            }
            assert!(!answer.starts_with("put:"), "a put was refused: {answer}");
            let marker = next.fetch_add(1, Ordering::Relaxed);
            match try_http(
                addr,
                "POST",
                "/api/put?sync&details",
                &body_of("fault.tsd", [marker].into_iter()),
            ) {
                Some(r) if acknowledged(&r, 1) => {
                    acked
                        .lock()
                        .unwrap()
                        .extend((first..first + 50).chain([marker]));
                }
                Some(r) => panic!("a sync put was refused: {}: {}", r.status, r.text()),
                None => return,
            }
        }
    })
}

/// kill -9 a TSD mid-ingest (HTTP sync puts and telnet puts), restart it
/// on the same data dir: every acknowledged point is there, on it and on
/// another TSD.
#[test]
fn a_tsd_killed_mid_ingest() {
    let Some(cluster) = PrivateCluster::up("a_tsd_killed_mid_ingest") else {
        return;
    };
    let conf = cluster.tsd_conf("");
    let next = Arc::new(AtomicU64::new(0));
    let mut acked = BTreeSet::new();
    for round in 0..2 {
        let tsd = cluster.tsd(&conf, "a");
        let ingest = Ingest::start(tsd.addr, "fault.tsd", next.clone(), 2);
        let telnet_acked = Arc::new(Mutex::new(BTreeSet::new()));
        let telnet = telnet_ingest(
            tsd.addr,
            ingest.stop.clone(),
            next.clone(),
            telnet_acked.clone(),
        );
        ingest.wait_for_more(300 + 100 * round, "before the kill");
        while telnet_acked.lock().unwrap().is_empty() {
            std::thread::sleep(Duration::from_millis(20));
        }
        tsd.kill(); // SIGKILL, mid-stream
        telnet.join().unwrap();
        acked.extend(ingest.finish());
        acked.extend(telnet_acked.lock().unwrap().iter());
    }
    // Restarted on the same data dir: its WAL is replayed into ClickHouse.
    let tsd = cluster.tsd(&conf, "a");
    assert_all_there(&acked, &stored(tsd.addr, "fault.tsd"), "the restarted TSD");
    assert!(tsd.terminate().success());
    let other = cluster.tsd(&conf, "b");
    assert_all_there(&acked, &stored(other.addr, "fault.tsd"), "another TSD");
    let _ = writeln!(
        std::io::stderr(),
        "a_tsd_killed_mid_ingest: {} acknowledged points all there after two SIGKILLs",
        acked.len()
    );
    other.terminate();
}

/// One ZooKeeper member killed (the one the TSD's session is on): UID
/// assignment goes on through the TSD, new blocks of UIDs included.
#[test]
fn uid_assignment_goes_on_with_one_zookeeper_member_down() {
    let Some(cluster) = PrivateCluster::up("uid_assignment_goes_on_with_one_zookeeper_member_down")
    else {
        return;
    };
    let conf = cluster.tsd_conf("");
    let tsd = cluster.tsd(&conf, "a");
    let before = uid_of(&assign_metric(tsd.addr, "zk.before"), "zk.before");
    let member = zk_member_of(&cluster, cluster.dir.path(), "a");
    cluster.kill(member);
    let killed = Instant::now();
    // More new names than one block of UIDs (64): the counter is moved
    // with a member down too.
    let points: Vec<String> = (0..100u64)
        .map(|i| {
            format!(
                r#"{{"metric":"zk.new.{i}","timestamp":{},"value":{i},"tags":{{"host":"h{i}"}}}}"#,
                BASE + i
            )
        })
        .collect();
    let body = format!("[{}]", points.join(","));
    // The names are assigned at once; the points may meet ClickHouse's
    // tables read-only for a moment (its servers lost that member too,
    // and the ensemble may be electing a leader): a 503, retried.
    eventually("the points of new names were never acknowledged", || {
        let r = post_put(tsd.addr, "?sync&details", &body);
        assert!(matches!(r.status, 200 | 503), "{}: {}", r.status, r.text());
        acknowledged(&r, 100)
    });
    let after = uid_of(&assign_metric(tsd.addr, "zk.after"), "zk.after");
    assert!(after > before, "UIDs went back: {before} then {after}");
    let _ = writeln!(
        std::io::stderr(),
        "uid_assignment_goes_on_with_one_zookeeper_member_down: {member} killed; 101 new names assigned and their points acknowledged {:?} later",
        killed.elapsed()
    );
    let q = http(
        tsd.addr,
        "GET",
        &format!(
            "/api/query?start={BASE}&end={}&m=sum:zk.new.99",
            BASE + 3600
        ),
        &[],
        b"",
    );
    assert_eq!(q.status, 200, "{}", q.text());
    assert_eq!(q.json()[0]["dps"][(BASE + 99).to_string()], 99);
    assert!(tsd.terminate().success());
    // The member rejoins (and `down` then stops a whole ensemble, which
    // is quicker than ClickHouse giving up on a dead member).
    cluster.start(member);
}

/// The ZooKeeper quorum lost (two of three members killed): puts of known
/// series are held or fail with a clear error, new names fail with an
/// OpenTSDB-shaped error naming ZooKeeper; once the members are back every
/// acknowledged point is readable, new names are assigned again, and UID
/// counters never went back.
#[test]
fn losing_the_zookeeper_quorum() {
    let Some(cluster) = PrivateCluster::up("losing_the_zookeeper_quorum") else {
        return;
    };
    // A short request timeout: a name that needs ZooKeeper fails in 2 s.
    let conf = cluster.tsd_conf("tsd.storage.zk_timeout = 2000\n");
    let tsd = cluster.tsd(&conf, "a");
    let before = uid_of(&assign_metric(tsd.addr, "q.before"), "q.before");
    let mut acked = BTreeSet::new();
    // One point of each series: every name the puts below use is known.
    let r = post_put(tsd.addr, "?sync&details", &body_of("q.known", 0..SERIES));
    assert!(acknowledged(&r, SERIES), "{}: {}", r.status, r.text());
    acked.extend(0..SERIES);

    // The member the TSD is connected to first, then the one it moves to:
    // a reconnect makes the TSD distrust its cached UIDs (ZooKeeper does
    // not replay the watch events of the gap), and known series must still
    // be written with them while the quorum is away.
    let member = zk_member_of(&cluster, cluster.dir.path(), "a");
    cluster.kill(member);
    let mut other = member;
    eventually("the TSD never reconnected to another member", || {
        other = zk_member_of(&cluster, cluster.dir.path(), "a");
        other != member
    });
    cluster.kill(other);

    // Known series: their UIDs are cached. A sync put is acknowledged or
    // refused with a 503 (ClickHouse's tables go read-only without
    // ZooKeeper); a plain put is held in the WAL.
    let r = post_put(tsd.addr, "?sync&details", &body_of("q.known", 16..32));
    match r.status {
        200 => {
            assert!(acknowledged(&r, 16), "{}", r.text());
            acked.extend(16..32);
        }
        503 => {
            assert_eq!(r.json()["error"]["code"], 503, "{}", r.text());
            assert!(
                r.json()["error"]["message"]
                    .as_str()
                    .unwrap()
                    .starts_with("Storage exception: ")
            );
        }
        s => panic!(
            "a sync put of known series without a quorum: {s}: {}",
            r.text()
        ),
    }
    let r = post_put(tsd.addr, "", &body_of("q.known", 32..48));
    assert_eq!(r.status, 204, "{}", r.text());
    acked.extend(32..48);

    // New names: a clear error, OpenTSDB's shapes.
    let r = post_put(
        tsd.addr,
        "?details",
        &format!(r#"{{"metric":"q.new","timestamp":{BASE},"value":1,"tags":{{"host":"h0"}}}}"#),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    let error = r.json()["errors"][0]["error"].as_str().unwrap().to_string();
    assert!(
        error.starts_with("Storage exception: ") && error.contains("ZooKeeper"),
        "{error}"
    );
    let r = assign_metric(tsd.addr, "q.new");
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.json()["metric_errors"]["q.new"]
            .as_str()
            .unwrap()
            .contains("ZooKeeper"),
        "{}",
        r.text()
    );

    cluster.start(member);
    cluster.start(other);
    // A request that timed out may still have been applied once the
    // quorum was back ("did not answer", not "failed"): q.new may have
    // its UID already; either way it is above every UID given before.
    // The TSD recovers by itself: sync puts are acknowledged again once
    // ClickHouse has its ZooKeeper session back.
    let mut t = 48;
    eventually("sync puts were never acknowledged again", || {
        let r = post_put(tsd.addr, "?sync&details", &body_of("q.known", t..t + 6));
        let ok = acknowledged(&r, 6);
        if ok {
            acked.extend(t..t + 6);
        } else {
            assert!(matches!(r.status, 400 | 503), "{}: {}", r.status, r.text());
        }
        t += 6;
        ok
    });
    assert_all_there(
        &acked,
        &stored(tsd.addr, "q.known"),
        "after the quorum returned",
    );
    let after = metric_uid(tsd.addr, "q.new");
    assert!(after > before, "UIDs went back: {before} then {after}");
    let newest = uid_of(&assign_metric(tsd.addr, "q.newest"), "q.newest");
    assert!(newest > after, "UIDs went back: {after} then {newest}");
    // Nothing corrupt: a TSD that starts now (a new ZooKeeper session,
    // nothing cached) reads the same and resolves the same names.
    assert!(tsd.terminate().success());
    let fresh = cluster.tsd(&conf, "b");
    assert_all_there(&acked, &stored(fresh.addr, "q.known"), "a new TSD");
    assert_eq!(metric_uid(fresh.addr, "q.new"), after);
    assert_eq!(metric_uid(fresh.addr, "q.newest"), newest);
    // A new name is written as well. Each ClickHouse replica gets its own
    // ZooKeeper session back in its own time and answers "Table is in
    // readonly mode" (a 503 here) until then: the loop above proved one
    // shard writable, not this series' shard.
    eventually("a new series was never acknowledged", || {
        let r = post_put(fresh.addr, "?sync&details", &body_of("q.new2", 0..6));
        assert!(
            matches!(r.status, 200 | 400 | 503),
            "{}: {}",
            r.status,
            r.text()
        );
        acknowledged(&r, 6)
    });
    assert_all_there(
        &(0..6).collect(),
        &stored(fresh.addr, "q.new2"),
        "a new series after the quorum returned",
    );
    fresh.terminate();
}

/// Every replica of a shard down: a `sync` put fails fast with an
/// OpenTSDB-shaped 503, `storage_errors` moves; plain puts are held in
/// the WAL. When the shard returns the TSD recovers by itself: the held
/// points land and sync puts are acknowledged again.
#[test]
fn every_replica_of_a_shard_down() {
    let Some(cluster) = PrivateCluster::up("every_replica_of_a_shard_down") else {
        return;
    };
    let conf = cluster.tsd_conf("");
    let tsd = cluster.tsd(&conf, "a");
    let mut acked = BTreeSet::new();
    let r = post_put(tsd.addr, "?sync&details", &body_of("fault.shard", 0..12));
    assert!(acknowledged(&r, 12), "{}: {}", r.status, r.text());
    acked.extend(0..12);
    let errors_before = stat(tsd.addr, "tsd.rpc.errors", Some(("type", "storage_errors")));

    cluster.kill("ch-s2-r1");
    cluster.kill("ch-s2-r2");
    for flags in ["?sync&details", "?sync", "?sync&summary"] {
        let started = Instant::now();
        let r = post_put(tsd.addr, flags, &body_of("fault.shard", 12..24));
        assert_eq!(r.status, 503, "{flags}: {}", r.text());
        let error = &r.json()["error"];
        assert_eq!(error["code"], 503, "{}", r.text());
        let message = error["message"].as_str().unwrap();
        assert!(
            message.starts_with("Storage exception: ") && message.contains("ClickHouse"),
            "{message}"
        );
        assert!(!error["details"].as_str().unwrap().is_empty());
        let _ = writeln!(
            std::io::stderr(),
            "every_replica_of_a_shard_down: sync put {flags} answered 503 in {:?}",
            started.elapsed()
        );
    }
    // Held: logged and buffered, written once the shard is back.
    let r = post_put(tsd.addr, "", &body_of("fault.shard", 24..36));
    assert_eq!(r.status, 204, "{}", r.text());
    acked.extend(24..36);
    let errors = stat(tsd.addr, "tsd.rpc.errors", Some(("type", "storage_errors")));
    assert_eq!(errors, errors_before + 3, "storage_errors in /api/stats");
    let metrics = http(tsd.addr, "GET", "/metrics", &[], b"").text();
    assert!(
        metrics
            .lines()
            .any(|l| l.contains("storage_errors") && l.trim_end().ends_with(&format!(" {errors}"))),
        "storage_errors in /metrics:\n{metrics}"
    );
    assert!(stat(tsd.addr, "tsd.datapoints.buffered", None) > 0);

    cluster.start("ch-s2-r1");
    cluster.start("ch-s2-r2");
    let mut t = 36;
    eventually("sync puts were never acknowledged again", || {
        let r = post_put(tsd.addr, "?sync&details", &body_of("fault.shard", t..t + 6));
        let ok = acknowledged(&r, 6);
        if ok {
            acked.extend(t..t + 6);
        } else {
            assert_eq!(r.status, 503, "{}", r.text());
        }
        t += 6;
        ok
    });
    // A sync put writes out everything buffered: the held points too.
    assert_eq!(stat(tsd.addr, "tsd.datapoints.buffered", None), 0);
    let other = cluster.tsd(&conf, "b");
    assert_all_there(&acked, &stored(other.addr, "fault.shard"), "another TSD");
    other.terminate();
    tsd.terminate();
}

/// A loopback port nothing listens on (connections are refused).
fn dead_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// ClickHouse or ZooKeeper unreachable at start: the TSD does not start,
/// and its error names what it could not reach. Kills nothing: the
/// shared test cluster's ZooKeeper serves the ClickHouse case.
#[test]
fn unreachable_engines_at_start_are_named() {
    if !fault_tests_run("unreachable_engines_at_start_are_named") {
        return;
    }
    let Some(settings) = crate::common::cluster_settings("unreachable") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let write_conf = |name: &str, replace: (&str, String)| {
        let text: String = settings
            .iter()
            .map(|(k, v)| {
                let v = if k == replace.0 {
                    replace.1.clone()
                } else {
                    v.clone()
                };
                format!("{k} = {v}\n")
            })
            .collect();
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let (p1, p2) = (dead_port(), dead_port());
    let zk = format!("127.0.0.1:{p1},127.0.0.1:{p2}");
    let conf = write_conf("no-zk.conf", ("tsd.storage.zk_quorum", zk.clone()));
    let err = tsd_refuses_with(Some(&conf), &dir.path().join("d1"), DEADLINE);
    assert!(
        err.contains(&format!(
            "cannot reach ZooKeeper at {zk} (tsd.storage.zk_quorum)"
        )),
        "{err}"
    );
    let endpoints = [
        format!("http://127.0.0.1:{p1}"),
        format!("http://127.0.0.1:{p2}"),
    ];
    let conf = write_conf(
        "no-ch.conf",
        ("tsd.storage.clickhouse.endpoints", endpoints.join(",")),
    );
    let err = tsd_refuses_with(Some(&conf), &dir.path().join("d2"), DEADLINE);
    assert!(
        err.contains("no ClickHouse endpoint could be reached"),
        "{err}"
    );
    for e in &endpoints {
        assert!(err.contains(&format!("{e}: Connection refused")), "{err}");
    }
}
