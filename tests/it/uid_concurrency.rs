//! Eight writers assign 10,000 overlapping names at once: every name must
//! end up with exactly one UID, both mappings must agree and the MAXID
//! counter must equal the number of names.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use rtsdb::model::{NameRules, UidKind};
use rtsdb::store::{Store, StoreOptions};
use rtsdb::uid::{AutoCreate, UidTable};

#[test]
fn eight_tasks_assign_overlapping_names() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
    let table = Arc::new(UidTable::new(
        store.uid_store(),
        AutoCreate::default(),
        NameRules::default(),
    ));
    const NAMES: usize = 10_000;
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let table = table.clone();
            std::thread::spawn(move || {
                // Each task walks the names from a different starting point,
                // so every name is contended by several tasks at different times.
                let mut seen = HashMap::new();
                for i in 0..NAMES {
                    let n = (i + t * 1_250) % NAMES;
                    let name = format!("host{n:05}");
                    let uid = table.get_or_create_id(UidKind::TagValue, &name).unwrap();
                    seen.insert(name, uid);
                }
                seen
            })
        })
        .collect();
    let results: Vec<HashMap<_, _>> = tasks.into_iter().map(|t| t.join().unwrap()).collect();

    // Every task saw the same UID for every name.
    for r in &results[1..] {
        assert_eq!(r, &results[0]);
    }
    let by_name = &results[0];
    assert_eq!(by_name.len(), NAMES);
    let ids: HashSet<u64> = by_name.values().map(|u| u.id()).collect();
    assert_eq!(ids.len(), NAMES, "two names share a UID");
    assert_eq!(table.max_id(UidKind::TagValue).unwrap(), NAMES as u64);
    assert_eq!(*ids.iter().max().unwrap(), NAMES as u64);

    // Storage agrees with what the tasks were told, in both directions,
    // with caches dropped so every answer comes from disk.
    table.drop_caches();
    let forward = table.scan_forward(UidKind::TagValue, b"").unwrap();
    let reverse = table.scan_reverse(UidKind::TagValue).unwrap();
    assert_eq!(forward.len(), NAMES);
    assert_eq!(reverse.len(), NAMES, "a reverse mapping leaked");
    for (name, uid) in &forward {
        assert_eq!(by_name[name], *uid);
        assert_eq!(&*table.get_name(UidKind::TagValue, *uid).unwrap(), name);
    }
    for (uid, name) in &reverse {
        assert_eq!(by_name[name], *uid);
    }
    // The other kinds' counters were not touched.
    assert_eq!(table.max_id(UidKind::Metric).unwrap(), 0);
    assert_eq!(table.max_id(UidKind::TagKey).unwrap(), 0);
}
