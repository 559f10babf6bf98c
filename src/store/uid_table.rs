//! The embedded [`UidStore`]: UID mappings and MAXID counters as cells of
//! the store's `tsdb-uid` table (docs/format/uid-table.md), in the same
//! engine as the data rows.
//!
//! The store belongs to one process, so each mutation is one atomic
//! batch taken under a per-kind lock: counter, reverse and forward mapping
//! of an assignment become visible together, and a rename or delete
//! cannot interleave with an assignment of the same kind.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::model::uid::java_byte_array;
use crate::model::{Uid, UidKind, UidWidth, UidWidths};
use crate::storage::{KvStore, ScanRange, Table, WriteBatch};
use crate::uid::keys;
use crate::uid::{Assigned, ForwardScan, Result, UidStore, UidTableError};

pub(crate) struct KvUidStore {
    kv: Arc<dyn KvStore>,
    widths: UidWidths,
    /// Serialises the read-then-write of assignment, rename and delete,
    /// per kind.
    locks: [Mutex<()>; 3],
}

impl KvUidStore {
    pub(crate) fn new(kv: Arc<dyn KvStore>, widths: UidWidths) -> KvUidStore {
        KvUidStore {
            kv,
            widths,
            locks: Default::default(),
        }
    }

    fn no_such_name(kind: UidKind, name: &str) -> UidTableError {
        UidTableError::NoSuchName {
            kind,
            name: name.to_string(),
        }
    }
}

/// What the UID table says about the widths it was written with, when it
/// contradicts `widths` (the store header's): checked at every open
/// (docs/format/store-header.md, "Opening a store"). Per kind, the MAXID
/// counter must fit the width, and the reverse mapping of the highest UID
/// (or of UID 1, when the highest was deleted) must be found on that width
/// if it is found on another. A few point reads per kind; a kind with no
/// mapping left proves nothing and passes.
pub(crate) fn widths_contradiction(
    kv: &Arc<dyn KvStore>,
    widths: UidWidths,
) -> Result<Option<String>> {
    let table = KvUidStore::new(kv.clone(), widths);
    for kind in UidKind::ALL {
        let width = widths.of(kind);
        let max = table.max_id(kind)?;
        if max > width.max_id() {
            return Ok(Some(format!(
                "its {kind} UIDs are {} bytes, but the UID table has assigned {kind} UIDs up to {max}, more than {} bytes hold",
                width.bytes(),
                width.bytes()
            )));
        }
        if max == 0 {
            continue;
        }
        // The header's width first: the common case costs one read.
        let candidates = std::iter::once(width.bytes() as u8)
            .chain((1..=8u8).filter(|w| *w as usize != width.bytes()));
        for w in candidates {
            let on = UidWidth::new(w).expect("1 to 8 bytes");
            let mut found = None;
            for id in [max, 1] {
                let Ok(uid) = Uid::new(id, on) else { continue };
                let key = keys::reverse(kind, &uid.to_bytes(on));
                if has_cell(kv, &key)? {
                    found = Some(id);
                    break;
                }
            }
            match found {
                Some(_) if on == width => break,
                Some(id) => {
                    return Ok(Some(format!(
                        "its {kind} UIDs are {} bytes, but the UID table holds {w}-byte {kind} UIDs (UID {id} is mapped on {w} bytes)",
                        width.bytes()
                    )));
                }
                None => {}
            }
        }
    }
    Ok(None)
}

fn has_cell(kv: &Arc<dyn KvStore>, key: &[u8]) -> Result<bool> {
    Ok(kv.get(Table::Uid, key)?.is_some())
}

impl UidStore for KvUidStore {
    fn widths(&self) -> UidWidths {
        self.widths
    }

    fn forward(&self, kind: UidKind, name: &str) -> Result<Option<Uid>> {
        match self.kv.get(Table::Uid, &keys::forward(kind, name))? {
            None => Ok(None),
            Some(bytes) => Uid::from_bytes(&bytes, self.widths.of(kind))
                .map(Some)
                .map_err(|e| UidTableError::Corrupt {
                    kind,
                    what: name.to_string(),
                    reason: e.to_string(),
                }),
        }
    }

    fn reverse(&self, kind: UidKind, uid: Uid) -> Result<Option<String>> {
        let bytes = uid.to_bytes(self.widths.of(kind));
        let Some(name) = self.kv.get(Table::Uid, &keys::reverse(kind, &bytes))? else {
            return Ok(None);
        };
        String::from_utf8(name)
            .map(Some)
            .map_err(|_| UidTableError::Corrupt {
                kind,
                what: java_byte_array(&bytes),
                reason: "name is not UTF-8".into(),
            })
    }

    fn max_id(&self, kind: UidKind) -> Result<u64> {
        match self.kv.get(Table::Uid, &keys::max_id(kind))? {
            None => Ok(0),
            Some(v) => {
                let arr: [u8; 8] = v
                    .as_slice()
                    .try_into()
                    .map_err(|_| UidTableError::Corrupt {
                        kind,
                        what: "MAXID".into(),
                        reason: format!("Invalid maximum ID for {kind}: should be on 8 bytes"),
                    })?;
                Ok(i64::from_be_bytes(arr) as u64)
            }
        }
    }

    fn allocate(&self, kind: UidKind, name: &str) -> Result<Assigned> {
        let _l = self.locks[kind.index()].lock();
        if let Some(uid) = self.forward(kind, name)? {
            return Ok(Assigned::Existing(uid));
        }
        let width = self.widths.of(kind);
        let exhausted = || UidTableError::Exhausted {
            kind,
            width: width.bytes(),
        };
        let next = self.max_id(kind)?.checked_add(1).ok_or_else(exhausted)?;
        let uid = Uid::new(next, width).map_err(|_| exhausted())?;
        let bytes = uid.to_bytes(width);
        let mut b = WriteBatch::new();
        b.put(
            Table::Uid,
            keys::max_id(kind),
            (next as i64).to_be_bytes().to_vec(),
        );
        b.put(
            Table::Uid,
            keys::reverse(kind, &bytes),
            name.as_bytes().to_vec(),
        );
        b.put(Table::Uid, keys::forward(kind, name), bytes);
        self.kv.write(b)?;
        Ok(Assigned::New(uid))
    }

    fn rename(&self, kind: UidKind, old: &str, new: &str) -> Result<Uid> {
        let _l = self.locks[kind.index()].lock();
        let width = self.widths.of(kind);
        let uid = self
            .forward(kind, old)?
            .ok_or_else(|| Self::no_such_name(kind, old))?;
        if let Some(existing) = self.forward(kind, new)? {
            return Err(UidTableError::RenameTargetExists {
                kind,
                width: width.bytes(),
                old: old.into(),
                new: new.into(),
                existing: existing.to_bytes(width),
            });
        }
        let bytes = uid.to_bytes(width);
        let mut b = WriteBatch::new();
        b.put(
            Table::Uid,
            keys::reverse(kind, &bytes),
            new.as_bytes().to_vec(),
        );
        b.put(Table::Uid, keys::forward(kind, new), bytes);
        b.delete(Table::Uid, keys::forward(kind, old));
        self.kv.write(b)?;
        Ok(uid)
    }

    fn delete(&self, kind: UidKind, name: &str) -> Result<Uid> {
        let _l = self.locks[kind.index()].lock();
        let uid = self
            .forward(kind, name)?
            .ok_or_else(|| Self::no_such_name(kind, name))?;
        let bytes = uid.to_bytes(self.widths.of(kind));
        let mut b = WriteBatch::new();
        b.delete(Table::Uid, keys::forward(kind, name));
        b.delete(Table::Uid, keys::reverse(kind, &bytes));
        // The UIDMeta is the meta store's, deleted by `Db::delete_uid`.
        self.kv.write(b)?;
        Ok(uid)
    }

    fn scan_forward<'a>(&'a self, kind: UidKind, prefix: &[u8]) -> ForwardScan<'a> {
        let width = self.widths.of(kind);
        Box::new(
            self.kv
                .scan(Table::Uid, &ScanRange::prefix(prefix))
                .filter_map(move |item| {
                    let (key, value) = match item {
                        Ok(kv) => kv,
                        Err(e) => return Some(Err(e.into())),
                    };
                    let (row, family, qualifier) = keys::split_cell_key(&key)?;
                    if family != keys::FAMILY_ID
                        || qualifier != kind.qualifier().as_bytes()
                        || row == keys::MAXID_ROW
                    {
                        return None;
                    }
                    let name = std::str::from_utf8(row).ok()?.to_string();
                    Some(Ok((name, Uid::from_bytes(&value, width).ok()?)))
                }),
        )
    }

    fn scan_reverse(&self, kind: UidKind) -> Result<Vec<(Uid, String)>> {
        let width = self.widths.of(kind);
        let mut out = Vec::new();
        for item in self.kv.scan(Table::Uid, &ScanRange::default()) {
            let (key, value) = item?;
            let Some((row, family, qualifier)) = keys::split_cell_key(&key) else {
                continue;
            };
            if family != keys::FAMILY_NAME || qualifier != kind.qualifier().as_bytes() {
                continue;
            }
            if let (Ok(uid), Ok(name)) = (Uid::from_bytes(row, width), String::from_utf8(value)) {
                out.push((uid, name));
            }
        }
        Ok(out)
    }

    fn sync(&self) -> Result<()> {
        Ok(self.kv.sync()?)
    }
}

#[cfg(test)]
mod tests {
    //! A [`UidTable`] over the embedded engine.
    use crate::codec::row::DuplicatePolicy;
    use crate::codec::row_key::{KeyLayout, Salt};
    use crate::model::Tsuid;
    use crate::model::{NameRules, Uid, UidKind, UidWidth, UidWidths};
    use crate::store::Store;
    use crate::uid::{Assigned, AutoCreate, UidTable, UidTableError};

    fn table_with(layout: KeyLayout) -> UidTable {
        let store = Store::in_memory(layout, DuplicatePolicy::LastWriteWins);
        UidTable::new(
            store.uid_store(),
            AutoCreate::default(),
            NameRules::default(),
        )
    }

    fn table() -> UidTable {
        table_with(KeyLayout::default())
    }

    #[test]
    fn embedded_engine_conforms() {
        let store = Store::in_memory(KeyLayout::default(), DuplicatePolicy::LastWriteWins);
        crate::uid::backend::conformance::run(store.uid_store());
    }

    #[test]
    fn fresh_store_assigns_one_in_each_kind() {
        let t = table();
        let m = t.assign(UidKind::Metric, "sys.cpu.0").unwrap();
        let k = t.assign(UidKind::TagKey, "host").unwrap();
        let v = t.assign(UidKind::TagValue, "web01").unwrap();
        assert_eq!((m.uid().id(), k.uid().id(), v.uid().id()), (1, 1, 1));
        assert!(matches!(m, Assigned::New(_)));
        let tsuid = Tsuid::new(m.uid(), vec![(k.uid(), v.uid())]).unwrap();
        assert_eq!(tsuid.to_hex(&UidWidths::default()), "000001000001000001");
        assert_eq!(
            t.assign(UidKind::Metric, "sys.cpu.0").unwrap(),
            Assigned::Existing(m.uid())
        );
        assert_eq!(
            t.assign(UidKind::Metric, "sys.cpu.1").unwrap().uid().id(),
            2
        );
        assert_eq!(t.max_id(UidKind::Metric).unwrap(), 2);
        assert_eq!(t.max_id(UidKind::TagKey).unwrap(), 1);
        assert_eq!(&*t.get_name(UidKind::TagValue, v.uid()).unwrap(), "web01");
    }

    #[test]
    fn auto_create_switches() {
        let t = table();
        let err = t
            .get_or_create_id(UidKind::Metric, "new.metric")
            .unwrap_err();
        assert_eq!(err.to_string(), "No such name for 'metrics': 'new.metric'");
        assert_eq!(t.get_or_create_id(UidKind::TagKey, "host").unwrap().id(), 1);
        let err = t
            .get_name(UidKind::Metric, Uid::new(1, UidWidth::DEFAULT).unwrap())
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "No such unique ID for 'metrics': [0, 0, 1]"
        );
    }

    #[test]
    fn exhaustion_gives_opentsdbs_error() {
        let layout = KeyLayout {
            widths: UidWidths {
                metric: UidWidth::new(1).unwrap(),
                ..Default::default()
            },
            salt: Salt::default(),
        };
        let t = table_with(layout);
        for i in 0..255 {
            t.assign(UidKind::Metric, &format!("m{i}")).unwrap();
        }
        let err = t.assign(UidKind::Metric, "one.too.many").unwrap_err();
        assert_eq!(
            err.to_string(),
            "All Unique IDs for metrics on 1 bytes are already assigned!"
        );
        assert!(
            t.lookup_id(UidKind::Metric, "one.too.many")
                .unwrap()
                .is_none()
        );
        assert_eq!(t.max_id(UidKind::Metric).unwrap(), 255);
    }

    #[test]
    fn names_are_validated_and_utf8() {
        let t = table();
        assert_eq!(
            t.assign(UidKind::Metric, "bad name")
                .unwrap_err()
                .to_string(),
            "Invalid metric (\"bad name\"): illegal character:  "
        );
        assert!(t.assign(UidKind::TagValue, "").is_err());
        // Distinct non-Latin names stay distinct (OpenTSDB's Latin-1 would
        // turn both into "??").
        let a = t.assign(UidKind::TagValue, "美国").unwrap().uid();
        let b = t.assign(UidKind::TagValue, "中国").unwrap().uid();
        assert_ne!(a, b);
        t.drop_caches();
        assert_eq!(&*t.get_name(UidKind::TagValue, a).unwrap(), "美国");
        assert_eq!(t.get_id(UidKind::TagValue, "中国").unwrap(), b);
    }

    #[test]
    fn rename_and_delete_never_serve_stale_cache() {
        let t = table();
        let uid = t.assign(UidKind::TagValue, "web01").unwrap().uid();
        t.assign(UidKind::TagValue, "web02").unwrap();
        assert_eq!(t.get_id(UidKind::TagValue, "web01").unwrap(), uid);
        assert_eq!(&*t.get_name(UidKind::TagValue, uid).unwrap(), "web01");
        let err = t.rename(UidKind::TagValue, "web01", "web02").unwrap_err();
        assert_eq!(
            err.to_string(),
            "When trying rename(\"web01\", \"web02\") on UniqueId(tsdb-uid, tagv, 3): new name already assigned ID=[0, 0, 2]"
        );
        t.rename(UidKind::TagValue, "web01", "web01.mysite.org")
            .unwrap();
        assert!(t.lookup_id(UidKind::TagValue, "web01").unwrap().is_none());
        assert_eq!(
            &*t.get_name(UidKind::TagValue, uid).unwrap(),
            "web01.mysite.org"
        );
        assert_eq!(
            t.get_id(UidKind::TagValue, "web01.mysite.org").unwrap(),
            uid
        );
        assert!(t.rename(UidKind::TagValue, "nope", "x").is_err());
        // The old name is free again and gets a new UID.
        assert_eq!(t.assign(UidKind::TagValue, "web01").unwrap().uid().id(), 3);

        t.delete(UidKind::TagValue, "web01.mysite.org").unwrap();
        assert!(
            t.lookup_id(UidKind::TagValue, "web01.mysite.org")
                .unwrap()
                .is_none()
        );
        assert!(matches!(
            t.get_name(UidKind::TagValue, uid),
            Err(UidTableError::NoSuchId { .. })
        ));
        assert!(t.delete(UidKind::TagValue, "web01.mysite.org").is_err());
        // Deleted ids are not reused.
        assert_eq!(t.assign(UidKind::TagValue, "web04").unwrap().uid().id(), 4);
    }

    #[test]
    fn suggest_is_a_byte_ordered_prefix_scan() {
        let t = table();
        for n in ["sys.cpu.user", "sys.cpu.sys", "sys.mem", "app.x", "sys"] {
            t.assign(UidKind::Metric, n).unwrap();
        }
        t.assign(UidKind::TagValue, "sys.tagv").unwrap();
        assert_eq!(
            t.suggest(UidKind::Metric, "sys.", 25).unwrap(),
            vec!["sys.cpu.sys", "sys.cpu.user", "sys.mem"]
        );
        assert_eq!(
            t.suggest(UidKind::Metric, "", 2).unwrap(),
            vec!["app.x", "sys"]
        );
        assert_eq!(
            t.suggest(UidKind::TagValue, "sys", 25).unwrap(),
            vec!["sys.tagv"]
        );
        assert_eq!(t.scan_reverse(UidKind::Metric).unwrap().len(), 5);
    }

    /// A shared engine's UID store: `moved` stands for its change counter
    /// (a reconnect to ZooKeeper moves it), `down` for a lost quorum.
    struct Flaky {
        inner: std::sync::Arc<dyn crate::uid::UidStore>,
        moved: std::sync::atomic::AtomicU64,
        down: std::sync::atomic::AtomicBool,
    }

    impl Flaky {
        fn check(&self) -> crate::uid::Result<()> {
            if self.down.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(crate::storage::StorageError::Engine("quorum lost".into()).into());
            }
            Ok(())
        }
    }

    impl crate::uid::UidStore for Flaky {
        fn widths(&self) -> UidWidths {
            self.inner.widths()
        }
        fn forward(&self, kind: UidKind, name: &str) -> crate::uid::Result<Option<Uid>> {
            self.check()?;
            self.inner.forward(kind, name)
        }
        fn reverse(&self, kind: UidKind, uid: Uid) -> crate::uid::Result<Option<String>> {
            self.check()?;
            self.inner.reverse(kind, uid)
        }
        fn max_id(&self, kind: UidKind) -> crate::uid::Result<u64> {
            self.check()?;
            self.inner.max_id(kind)
        }
        fn allocate(&self, kind: UidKind, name: &str) -> crate::uid::Result<Assigned> {
            self.check()?;
            self.inner.allocate(kind, name)
        }
        fn rename(&self, kind: UidKind, old: &str, new: &str) -> crate::uid::Result<Uid> {
            self.check()?;
            self.inner.rename(kind, old, new)
        }
        fn delete(&self, kind: UidKind, name: &str) -> crate::uid::Result<Uid> {
            self.check()?;
            self.inner.delete(kind, name)
        }
        fn scan_forward<'a>(&'a self, kind: UidKind, prefix: &[u8]) -> crate::uid::ForwardScan<'a> {
            self.inner.scan_forward(kind, prefix)
        }
        fn scan_reverse(&self, kind: UidKind) -> crate::uid::Result<Vec<(Uid, String)>> {
            self.inner.scan_reverse(kind)
        }
        fn sync(&self) -> crate::uid::Result<()> {
            self.inner.sync()
        }
        fn remote_changes(&self, _kind: UidKind) -> u64 {
            self.moved.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    #[test]
    fn known_names_are_served_while_storage_is_away_after_a_possible_change() {
        use std::sync::atomic::Ordering::SeqCst;
        let store = Store::in_memory(KeyLayout::default(), DuplicatePolicy::LastWriteWins);
        let flaky = std::sync::Arc::new(Flaky {
            inner: store.uid_store(),
            moved: 0.into(),
            down: false.into(),
        });
        let t = UidTable::new(flaky.clone(), AutoCreate::default(), NameRules::default());
        let k = UidKind::TagKey;
        let host = t.assign(k, "host").unwrap().uid();
        let dc = t.assign(k, "dc").unwrap().uid();
        assert_eq!(t.get_id(k, "host").unwrap(), host);

        // A reconnect (the counter moves), then the quorum goes: the
        // names known before are still answered, both ways; new ones fail.
        flaky.moved.fetch_add(1, SeqCst);
        flaky.down.store(true, SeqCst);
        assert_eq!(t.get_id(k, "host").unwrap(), host);
        assert_eq!(&*t.get_name(k, dc).unwrap(), "dc");
        assert!(matches!(
            t.get_or_create_id(k, "rack"),
            Err(UidTableError::Storage(_))
        ));
        assert_eq!(
            t.cache_size(k),
            0,
            "nothing unverified is cached as verified"
        );

        // Storage back: it decides. A name deleted meanwhile is gone,
        // the others are confirmed.
        flaky.down.store(false, SeqCst);
        store.uid_store().delete(k, "dc").unwrap();
        assert_eq!(t.lookup_id(k, "dc").unwrap(), None);
        assert_eq!(t.get_id(k, "host").unwrap(), host);
        flaky.down.store(true, SeqCst);
        assert_eq!(t.get_id(k, "host").unwrap(), host);
        assert!(matches!(t.get_id(k, "dc"), Err(UidTableError::Storage(_))));
        assert!(matches!(t.get_name(k, dc), Err(UidTableError::Storage(_))));

        // `dropcaches` forgets the unverified mappings too.
        t.drop_caches();
        assert!(matches!(
            t.get_id(k, "host"),
            Err(UidTableError::Storage(_))
        ));
    }
}
