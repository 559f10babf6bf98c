//! Crash test: a child process assigns UIDs and writes cells, printing an
//! acknowledgement after each write returns; the parent SIGKILLs it
//! mid-stream, reopens the store and checks that everything acknowledged is
//! there and that no UID mapping is half-written.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rtsdb::model::Tsuid;
use rtsdb::model::{NameRules, Timestamp, UidKind, Value};
use rtsdb::store::Durability;
use rtsdb::store::read::SeriesSource;
use rtsdb::store::{Store, StoreOptions};
use rtsdb::uid::{AutoCreate, UidTable};

const CHILD_ENV: &str = "RTSDB_CRASH_CHILD_DIR";
const BASE: u32 = 1_356_998_400;

fn tables(dir: &std::path::Path) -> (Store, UidTable) {
    let store = Store::open(dir, &StoreOptions::default()).unwrap();
    let auto = AutoCreate {
        metrics: true,
        ..AutoCreate::default()
    };
    let table = UidTable::new(store.uid_store(), auto, NameRules::default());
    (store, table)
}

/// The writer. Only runs when the parent test starts it.
#[test]
#[ignore]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (store, table) = tables(std::path::Path::new(&dir));
    let host = table.get_or_create_id(UidKind::TagKey, "host").unwrap();
    for i in 0u64.. {
        let metric = table
            .get_or_create_id(UidKind::Metric, &format!("crash.m{i}"))
            .unwrap();
        let value = table
            .get_or_create_id(UidKind::TagValue, &format!("h{i}"))
            .unwrap();
        let tsuid = Tsuid::new(metric, vec![(host, value)]).unwrap();
        let ts = Timestamp::Seconds(BASE + (i % 7200) as u32);
        store
            .put_points(&tsuid, &[(ts, Value::Int(i as i64))], Durability::Process)
            .unwrap();
        println!("ack {i}");
    }
}

#[test]
fn sigkill_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "crash::crash_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (first_ack, writing) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut acked = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(n) = line.strip_prefix("ack ") {
                acked.push(n.parse::<u64>().unwrap());
                let _ = first_ack.send(());
            }
        }
        acked
    });
    // Once it writes (a loaded machine may take seconds to start it: a
    // kill while it still creates the store tests nothing acknowledged),
    // let it write for a while, then kill it without warning.
    let _ = writing.recv_timeout(Duration::from_secs(120));
    let start = Instant::now();
    std::thread::sleep(Duration::from_millis(1500));
    child.kill().unwrap();
    child.wait().unwrap();
    let acked = reader.join().unwrap();
    assert!(
        acked.len() > 50,
        "child acknowledged only {} writes in {:?}",
        acked.len(),
        start.elapsed()
    );

    let (store, table) = tables(dir.path());
    for &i in &acked {
        let name = format!("crash.m{i}");
        let metric = table.get_id(UidKind::Metric, &name).unwrap();
        assert_eq!(&*table.get_name(UidKind::Metric, metric).unwrap(), name);
        let series = store
            .read_series(metric, 0, u64::MAX, &mut |_| true)
            .unwrap();
        assert_eq!(series.len(), 1, "series of acknowledged write {i} missing");
        assert_eq!(series[0].points[0].value(), Value::Int(i as i64));
    }
    // Whatever the kill interrupted: mappings are whole in both directions
    // and the counter covers every id.
    for kind in UidKind::ALL {
        let forward = table.scan_forward(kind, b"").unwrap();
        let reverse = table.scan_reverse(kind).unwrap();
        assert_eq!(forward.len(), reverse.len(), "{kind}: half-written mapping");
        let max = table.max_id(kind).unwrap();
        for (name, uid) in &forward {
            assert_eq!(&*table.get_name(kind, *uid).unwrap(), name);
            assert!(uid.id() <= max);
        }
    }
    println!(
        "acknowledged {} writes before SIGKILL; all present after reopen",
        acked.len()
    );
}
