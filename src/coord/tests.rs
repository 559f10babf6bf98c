//! Against a real ZooKeeper: the cluster `scripts/cluster up` starts,
//! found through `RTSDB_TEST_CLUSTER` (the conf file it printed; set by
//! `scripts/with-cluster cargo test`). Without it these tests say they were skipped and
//! pass. Each test works under its own base path.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::*;
use crate::config::Config;
use crate::model::{NameRules, Uid, UidKind, UidWidth, UidWidths};
use crate::uid::backend::conformance;
use crate::uid::{Assigned, AutoCreate, UidStore, UidTable, UidTableError};

/// ZooKeeper options for one test, under a base path no other test or
/// run uses; `None` (after saying so) when no cluster is configured.
fn cluster(test: &str) -> Option<ZkOptions> {
    let Ok(path) = std::env::var("RTSDB_TEST_CLUSTER") else {
        // Straight to stderr, once: the test harness would hide a
        // passing test's own output, and the skip must be seen.
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            let _ = writeln!(
                std::io::stderr(),
                "coord::tests ({test} and the other cluster tests): skipped: RTSDB_TEST_CLUSTER not set (run scripts/with-cluster cargo test)"
            );
        });
        return None;
    };
    let config = Config::load(Some(std::path::Path::new(&path))).expect("the cluster conf reads");
    // The cluster's conf (scripts/cluster) names the quorum and the base
    // path; every other option keeps its default.
    let quorum = config.get_string("tsd.storage.zk_quorum").trim();
    assert!(!quorum.is_empty(), "the cluster conf names a quorum");
    let mut o = ZkOptions::new(quorum);
    let basedir = config.get_string("tsd.storage.zk_basedir").trim();
    if !basedir.is_empty() {
        o.basedir = basedir.to_string();
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    o.basedir = format!("{}-test/{test}-{}-{nanos}", o.basedir, std::process::id());
    Some(o)
}

fn widths() -> UidWidths {
    UidWidths::default()
}

fn store(o: &ZkOptions) -> Arc<ZkUidStore> {
    Arc::new(ZkUidStore::open(ZkClient::connect(o).unwrap(), widths()).unwrap())
}

fn table(store: Arc<ZkUidStore>) -> UidTable {
    UidTable::new(store, AutoCreate::default(), NameRules::default())
}

/// Waits (bounded) for a watch to be delivered; the bound is a failure
/// cut-off, not a speed assertion.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn zk_uid_store_passes_the_conformance_suite() {
    let Some(mut o) = cluster("conformance") else {
        return;
    };
    // Blocks of one: the suite checks the counter name by name.
    o.uid_block = 1;
    conformance::run(store(&o));
}

#[test]
fn zk_uid_store_passes_the_conformance_suite_through_the_table_with_blocks() {
    let Some(o) = cluster("blocks") else { return };
    assert_eq!(o.uid_block, 64, "the default block");
    let s = store(&o);
    let k = UidKind::TagValue;
    for i in 0..100 {
        let a = s.allocate(k, &format!("v{i}")).unwrap();
        // One TSD alone hands out its blocks in order.
        assert_eq!(
            a,
            Assigned::New(Uid::new(i + 1, UidWidth::DEFAULT).unwrap())
        );
    }
    // Two counter updates for 100 names: the counter sits at the end of
    // the second block, and its znode was written twice.
    assert_eq!(s.max_id(k).unwrap(), 128);
    let layout = names::Layout::new(&o.basedir);
    let path = layout.max_id(k);
    let zk = ZkClient::connect(&o).unwrap();
    let version = zk
        .run("stat", |c| {
            let path = path.clone();
            async move { c.get_data(&path).await.map(|(_, stat)| stat.version) }
        })
        .unwrap();
    assert_eq!(version, 2);
    // A second TSD starts after the reserved range: no UID twice.
    let other = store(&o);
    assert_eq!(other.allocate(k, "w").unwrap().uid().id(), 129);
    assert_eq!(s.max_id(k).unwrap(), 192);
    assert_eq!(other.scan_reverse(k).unwrap().len(), 101);
}

#[test]
fn two_stores_racing_for_the_same_new_names_agree() {
    let Some(o) = cluster("race") else { return };
    let stores = [store(&o), store(&o)];
    let names: Vec<String> = (0..60).map(|i| format!("host{i:03}")).collect();
    let highest = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let s = stores[t % 2].clone();
            let names = names.clone();
            let highest = highest.clone();
            std::thread::spawn(move || {
                names
                    .iter()
                    .map(|n| {
                        let a = s.allocate(UidKind::TagValue, n).unwrap();
                        // Counters never go back, whoever reads them.
                        let m = s.max_id(UidKind::TagValue).unwrap();
                        assert!(
                            m >= highest.fetch_max(m, Ordering::SeqCst),
                            "counter went back"
                        );
                        a
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let results: Vec<Vec<Assigned>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let mut seen = std::collections::HashSet::new();
    for (i, name) in names.iter().enumerate() {
        let uid = results[0][i].uid();
        assert!(
            results.iter().all(|r| r[i].uid() == uid),
            "{name}: {results:?}"
        );
        let new = results
            .iter()
            .filter(|r| matches!(r[i], Assigned::New(_)))
            .count();
        assert_eq!(new, 1, "{name} assigned once");
        assert!(seen.insert(uid), "{uid:?} given to two names");
        for s in &stores {
            assert_eq!(s.forward(UidKind::TagValue, name).unwrap(), Some(uid));
            assert_eq!(
                s.reverse(UidKind::TagValue, uid).unwrap().as_deref(),
                Some(name.as_str())
            );
        }
    }
    // No reverse mapping leaked from a lost race.
    assert_eq!(
        stores[1].scan_reverse(UidKind::TagValue).unwrap().len(),
        names.len()
    );
    let scanned: Vec<String> = stores[0]
        .scan_forward(UidKind::TagValue, b"host0")
        .map(|r| r.unwrap().0)
        .collect();
    assert_eq!(
        scanned,
        names[..60]
            .iter()
            .filter(|n| n.starts_with("host0"))
            .cloned()
            .collect::<Vec<_>>()
    );
}

#[test]
fn renames_and_deletes_on_one_tsd_reach_the_others_caches() {
    let Some(o) = cluster("watch") else { return };
    let (a, b) = (table(store(&o)), table(store(&o)));
    let k = UidKind::TagKey;
    let uid = a.assign(k, "dc").unwrap().uid();
    a.assign(k, "rack").unwrap();
    // B caches both directions.
    assert_eq!(b.get_id(k, "dc").unwrap(), uid);
    assert_eq!(&*b.get_name(k, uid).unwrap(), "dc");
    let hits = b.stats(k).hits.load(Ordering::Relaxed);
    assert_eq!(b.get_id(k, "dc").unwrap(), uid);
    assert_eq!(
        b.stats(k).hits.load(Ordering::Relaxed),
        hits + 1,
        "served from the cache"
    );

    let before = b.remote_changes();
    a.rename(k, "dc", "datacenter").unwrap();
    eventually("B sees the rename", || {
        b.lookup_id(k, "dc").unwrap().is_none()
    });
    assert_eq!(&*b.get_name(k, uid).unwrap(), "datacenter");
    assert_ne!(
        b.remote_changes(),
        before,
        "caches above the table can tell"
    );

    // The write path's series cache, above the table, is told once.
    let c = Arc::new(table(store(&o)));
    // Each kind's watch counts once when set (missed events before it).
    eventually("the watches are set", || c.remote_changes() == 3);
    let series = crate::write::SeriesCache::new(c, 8);
    assert!(series.names_changed_elsewhere());
    assert!(!series.names_changed_elsewhere());
    a.rename(k, "datacenter", "dc").unwrap();
    eventually("the series cache hears of the rename", || {
        series.names_changed_elsewhere()
    });
    assert!(!series.names_changed_elsewhere());

    let rack = b.get_id(k, "rack").unwrap();
    a.delete(k, "rack").unwrap();
    eventually("B sees the delete", || {
        b.lookup_id(k, "rack").unwrap().is_none()
    });
    assert!(matches!(
        b.get_name(k, rack),
        Err(UidTableError::NoSuchId { .. })
    ));
}

#[test]
fn exhausted_kinds_say_so() {
    let Some(o) = cluster("exhausted") else {
        return;
    };
    let client = ZkClient::connect(&o).unwrap();
    let w = UidWidth::new(1).unwrap();
    let one = UidWidths {
        metric: w,
        tagk: w,
        tagv: w,
    };
    let s = ZkUidStore::open(client, one).unwrap();
    for i in 0..255 {
        s.allocate(UidKind::Metric, &format!("m{i}")).unwrap();
    }
    let e = s.allocate(UidKind::Metric, "one.too.many").unwrap_err();
    assert!(
        matches!(e, UidTableError::Exhausted { width: 1, .. }),
        "{e}"
    );
    assert_eq!(s.max_id(UidKind::Metric).unwrap(), 255);
}

#[test]
fn cluster_locks_exclude_other_sessions() {
    let Some(o) = cluster("locks") else { return };
    let coords: Vec<Arc<ZkCoordinator>> = (0..2)
        .map(|_| Arc::new(ZkCoordinator::new(ZkClient::connect(&o).unwrap())))
        .collect();
    let inside = Arc::new(AtomicUsize::new(0));
    let total = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (c, inside, total) = (coords[t % 2].clone(), inside.clone(), total.clone());
            std::thread::spawn(move || {
                for _ in 0..10 {
                    let _g = c.lock("counter/tsdb-uid").unwrap();
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders at once"
                    );
                    std::thread::sleep(Duration::from_millis(2));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    total.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(total.load(Ordering::SeqCst), 40);
    // Other names do not wait for a held one.
    let _held = coords[0].lock("a").unwrap();
    let _other = coords[1].lock("b").unwrap();
}

#[test]
fn a_lock_held_by_a_tsd_that_dies_is_released() {
    let Some(mut o) = cluster("lock-expiry") else {
        return;
    };
    // The dying TSD reaches ZooKeeper through a relay that is cut, as a
    // kill -9 or a lost machine would: its session is never closed, the
    // ensemble expires it.
    let relay = Relay::start(o.quorum.split(',').next().unwrap().to_string());
    let direct = o.clone();
    o.quorum = format!("127.0.0.1:{}", relay.port);
    o.session_timeout = Duration::from_secs(2);
    let dying = ZkCoordinator::new(ZkClient::connect(&o).unwrap());
    let guard = dying.lock("x").unwrap();
    relay.cut();
    let survivor = ZkCoordinator::new(ZkClient::connect(&direct).unwrap());
    drop(survivor.lock("x").unwrap());
    drop(guard);
}

#[test]
fn the_layout_record_keeps_the_first_value_across_sessions() {
    let Some(o) = cluster("record") else { return };
    let a = ZkCoordinator::new(ZkClient::connect(&o).unwrap());
    let b = ZkCoordinator::new(ZkClient::connect(&o).unwrap());
    assert_eq!(a.get_or_create("layout", b"v1 w3").unwrap(), b"v1 w3");
    assert_eq!(b.get_or_create("layout", b"v2 w4").unwrap(), b"v1 w3");
    assert_eq!(a.get_or_create("other", b"x").unwrap(), b"x");
}

#[test]
fn an_unreachable_quorum_is_named_at_start() {
    // A port nothing listens on (no cluster needed).
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut o = ZkOptions::new(&format!("127.0.0.1:{port}"));
    o.request_timeout = Duration::from_secs(3);
    let e = ZkClient::connect(&o).err().expect("no ZooKeeper there");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("127.0.0.1:{port}")) && msg.contains("tsd.storage.zk_quorum"),
        "{msg}"
    );
}

/// A TCP relay to one ZooKeeper member that can be cut: the quorum as
/// this process sees it, lost and regained without touching the shared
/// cluster.
struct Relay {
    port: u16,
    up: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl Relay {
    fn start(target: String) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (u, cs) = (up.clone(), conns.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let server = match u
                    .load(Ordering::SeqCst)
                    .then(|| TcpStream::connect(&target))
                {
                    Some(Ok(s)) => s,
                    _ => {
                        let _ = client.shutdown(Shutdown::Both);
                        continue;
                    }
                };
                cs.lock()
                    .unwrap()
                    .extend([client.try_clone().unwrap(), server.try_clone().unwrap()]);
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16 * 1024];
                        while let Ok(n) = from.read(&mut buf) {
                            if n == 0 || to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(Shutdown::Both);
                    });
                }
            }
        });
        Relay { port, up, conns }
    }

    fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

#[test]
fn a_lost_quorum_fails_new_names_clearly_and_keeps_known_ones() {
    let Some(mut o) = cluster("quorum-lost") else {
        return;
    };
    let member = o.quorum.split(',').next().unwrap().to_string();
    let relay = Relay::start(member);
    o.quorum = format!("127.0.0.1:{}", relay.port);
    o.request_timeout = Duration::from_secs(2);
    let t = table(store(&o));
    let k = UidKind::TagValue;
    let known = t.assign(k, "known").unwrap().uid();
    assert_eq!(t.get_id(k, "known").unwrap(), known);

    relay.cut();
    // Known names: from the cache, no ZooKeeper needed.
    assert_eq!(t.get_or_create_id(k, "known").unwrap(), known);
    assert_eq!(&*t.get_name(k, known).unwrap(), "known");
    // New names: a clear error naming the quorum.
    let e = t.get_or_create_id(k, "new").unwrap_err().to_string();
    assert!(e.contains(&o.quorum) && e.contains("majority"), "{e}");

    relay.restore();
    // Back by itself: the session reconnects (or a new one is opened).
    let mut got = None;
    eventually("new names work again", || {
        got = t.get_or_create_id(k, "new").ok();
        got.is_some()
    });
    assert_ne!(got, Some(known));
    assert_eq!(t.get_id(k, "known").unwrap(), known);
}

/// Another TSD's bumps reach this one's watched counters, each counter
/// on its own, and a fence after the writer settled counts them at once
/// (no waiting for the notification); while disconnected nothing vouches
/// for any counter and a fence says so, and a reconnection changes them
/// all: events missed meanwhile are not all redelivered, so what was read
/// under the old values must be read again.
#[test]
fn watched_counters_follow_bumps_fences_and_reconnections() {
    let Some(mut o) = cluster("watched") else {
        return;
    };
    let writer = ZkCoordinator::new(ZkClient::connect(&o).unwrap());
    o.request_timeout = Duration::from_secs(2);
    // Through a relay to a member that is up (another test may have
    // killed one for a moment).
    let (relay, client) = o
        .quorum
        .clone()
        .split(',')
        .find_map(|member| {
            let relay = Relay::start(member.to_string());
            o.quorum = format!("127.0.0.1:{}", relay.port);
            ZkClient::connect(&o).ok().map(|c| (relay, c))
        })
        .expect("a member of the ensemble answers");
    let reader = ZkCoordinator::new(client);
    eventually("the watch is set", || reader.fence());
    let (a0, b0) = (reader.watched("a"), reader.watched("b"));
    assert!(a0.is_some());
    assert_eq!(reader.watched("a"), a0, "nothing moved");

    // The first bump of a counter creates it. Acknowledged (settled) by
    // the writer, it is counted by the reader's next fence.
    for round in 0..20 {
        let before = (reader.watched("a"), reader.watched("b"));
        writer.bump_all(&["a".to_string()]).unwrap();
        writer.settle();
        assert!(reader.fence());
        assert_ne!(reader.watched("a"), before.0, "round {round}");
        assert_eq!(reader.watched("b"), before.1, "round {round}");
    }
    let a1 = reader.watched("a");
    writer
        .bump_all(&["a".to_string(), "b".to_string()])
        .unwrap();
    writer.settle();
    assert!(reader.fence());
    assert!(reader.watched("a") != a1 && reader.watched("b") != b0);

    let before = (reader.watched("a"), reader.watched("b"));
    relay.cut();
    eventually("the disconnection is seen", || {
        reader.watched("a").is_none()
    });
    assert!(!reader.fence(), "no fence while disconnected");
    relay.restore();
    eventually("the watch is set again", || {
        // A session the ensemble expired meanwhile is replaced by the
        // next request, and the watch follows it.
        let _ = reader.generation("a");
        reader.fence()
    });
    assert_ne!(reader.watched("a"), before.0);
    assert_ne!(reader.watched("b"), before.1);
}

/// A ZooKeeper member of the test cluster, from the state directory
/// `scripts/cluster` keeps beside the conf.
struct Member {
    dir: std::path::PathBuf,
    addr: String,
}

impl Member {
    fn all() -> Vec<Member> {
        let conf = std::path::PathBuf::from(std::env::var("RTSDB_TEST_CLUSTER").unwrap());
        let state = conf.parent().unwrap().to_path_buf();
        (1..=3)
            .map(|i| {
                let dir = state.join(format!("zk{i}"));
                let port = std::fs::read_to_string(dir.join("port")).unwrap();
                Member {
                    addr: format!("127.0.0.1:{}", port.trim()),
                    dir,
                }
            })
            .collect()
    }

    /// A four-letter word's answer ("" if the member does not answer).
    fn ask(&self, word: &str) -> String {
        let Ok(mut s) = TcpStream::connect(&self.addr) else {
            return String::new();
        };
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut out = String::new();
        if s.write_all(word.as_bytes()).is_ok() {
            let _ = s.read_to_string(&mut out);
        }
        out
    }

    /// `scripts/cluster up` on the test cluster: starts what is stopped.
    fn cluster_up(member_dir: &std::path::Path) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/cluster");
        let up = std::process::Command::new(script)
            .arg("up")
            .env("RTSDB_CLUSTER_DIR", member_dir.parent().unwrap())
            .output()
            .unwrap();
        assert!(
            up.status.success(),
            "{}",
            String::from_utf8_lossy(&up.stderr)
        );
    }

    fn kill(&self) {
        let pid = std::fs::read_to_string(self.dir.join("pid")).unwrap();
        let status = std::process::Command::new("kill")
            .args(["-9", pid.trim()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

#[test]
fn one_zookeeper_member_killed_assignment_goes_on() {
    let Some(o) = cluster("member-killed") else {
        return;
    };
    let members = Member::all();
    // Whole before one member goes, whatever an earlier run left.
    Member::cluster_up(&members[0].dir);
    // The member this TSD is connected to dies, and it is a follower: the
    // client must move to another member, while the other tests sharing
    // the ensemble see no leader election.
    let (client, victim) = (0..30)
        .find_map(|_| {
            let client = ZkClient::connect(&o).unwrap();
            let sid = format!("sid={}", client.session_hex());
            let m = members.iter().find(|m| m.ask("cons").contains(&sid))?;
            m.ask("srvr")
                .contains("Mode: follower")
                .then_some((client, m))
        })
        .expect("a session on a follower within 30 tries");
    let s = ZkUidStore::open(client, widths()).unwrap();
    let k = UidKind::TagValue;
    let before: Vec<Uid> = (0..20)
        .map(|i| s.allocate(k, &format!("a{i}")).unwrap().uid())
        .collect();
    victim.kill();
    let after: Vec<Uid> = (0..80)
        .map(|i| s.allocate(k, &format!("b{i}")).unwrap().uid())
        .collect();
    let all: std::collections::HashSet<Uid> = before.iter().chain(&after).copied().collect();
    assert_eq!(all.len(), 100, "every name its own UID");
    assert_eq!(s.forward(k, "a3").unwrap(), Some(before[3]));
    // Back as it was for the tests after this one.
    Member::cluster_up(&victim.dir);
    assert_eq!(victim.ask("ruok"), "imok");
}

/// UIDs per second for new names, one store and two (run by hand:
/// `RTSDB_TEST_CLUSTER=... cargo test --lib coord::tests::bench -- --ignored --nocapture`).
#[test]
#[ignore]
fn bench_new_names_per_second() {
    let Some(o) = cluster("bench") else { return };
    let n = 2000;
    for stores in [1usize, 2] {
        let o = ZkOptions {
            basedir: format!("{}-{stores}", o.basedir),
            ..o.clone()
        };
        let tables: Vec<Arc<UidTable>> = (0..stores).map(|_| Arc::new(table(store(&o)))).collect();
        let start = Instant::now();
        let threads: Vec<_> = tables
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for j in 0..n / stores {
                        t.assign(UidKind::TagValue, &format!("n{i}-{j}")).unwrap();
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{stores} store(s): {n} new names in {secs:.2} s = {:.0} UIDs/s (block {})",
            n as f64 / secs,
            o.uid_block
        );
    }
}
