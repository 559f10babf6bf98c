//! UID assignment and lookup (OpenTSDB's `UniqueId`), over the `tsdb-uid`
//! table, with an in-process cache in both directions.
//!
//! Assignment differs from OpenTSDB's on purpose: OpenTSDB increments the
//! MAXID counter, then CASes the reverse and forward mappings one by one,
//! so a crash or a lost race leaves a leaked reverse mapping that `uid fsck`
//! later reports. Here the store is owned by one process, so assignment
//! takes a per-kind lock and writes counter, reverse and forward mapping in
//! one atomic batch: a reader sees all of it or none of it.

pub mod keys;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};
use thiserror::Error;

use crate::model::uid::{java_byte_array, parse_hex};
use crate::model::{InvalidName, NameRules, Uid, UidKind, UidWidth};
use crate::storage::{KvStore, ScanRange, StorageError, Table, WriteBatch};
use crate::store::Store;

#[derive(Debug, Error)]
pub enum UidTableError {
    /// OpenTSDB's `NoSuchUniqueName`.
    #[error("No such name for '{kind}': '{name}'")]
    NoSuchName { kind: UidKind, name: String },
    /// OpenTSDB's `NoSuchUniqueId`; the id printed as Java bytes.
    #[error("No such unique ID for '{kind}': {}", java_byte_array(.bytes))]
    NoSuchId { kind: UidKind, bytes: Vec<u8> },
    #[error("All Unique IDs for {kind} on {width} bytes are already assigned!")]
    Exhausted { kind: UidKind, width: usize },
    #[error(
        "When trying rename(\"{old}\", \"{new}\") on UniqueId(tsdb-uid, {kind}, {width}): new name already assigned ID={}",
        java_byte_array(.existing)
    )]
    RenameTargetExists {
        kind: UidKind,
        width: usize,
        old: String,
        new: String,
        existing: Vec<u8>,
    },
    #[error(transparent)]
    InvalidName(#[from] InvalidName),
    #[error("corrupt UID table entry for {kind} '{what}': {reason}")]
    Corrupt {
        kind: UidKind,
        what: String,
        reason: String,
    },
    #[error(transparent)]
    Storage(#[from] StorageError),
}

pub type Result<T> = std::result::Result<T, UidTableError>;

/// Which kinds get new UIDs on first write (`tsd.core.auto_create_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoCreate {
    pub metrics: bool,
    pub tagks: bool,
    pub tagvs: bool,
}

impl Default for AutoCreate {
    /// OpenTSDB's defaults: metrics must be created explicitly.
    fn default() -> Self {
        AutoCreate {
            metrics: false,
            tagks: true,
            tagvs: true,
        }
    }
}

impl AutoCreate {
    pub fn allows(&self, kind: UidKind) -> bool {
        match kind {
            UidKind::Metric => self.metrics,
            UidKind::TagKey => self.tagks,
            UidKind::TagValue => self.tagvs,
        }
    }
}

/// Result of an explicit assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assigned {
    New(Uid),
    Existing(Uid),
}

impl Assigned {
    pub fn uid(self) -> Uid {
        match self {
            Assigned::New(u) | Assigned::Existing(u) => u,
        }
    }
}

/// Cache counters per kind, for `/api/stats` (`tsd.uid.cache-*`).
#[derive(Debug, Default)]
pub struct CacheStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

#[derive(Default)]
struct KindCache {
    by_name: HashMap<Arc<str>, Uid>,
    by_id: HashMap<Uid, Arc<str>>,
    /// Bumped by every rename, delete and drop. A reader that fetched a
    /// mapping from storage only caches it if the generation did not move
    /// meanwhile, so a lookup racing a rename cannot re-insert the old name.
    generation: u64,
}

struct Kind {
    kind: UidKind,
    width: UidWidth,
    cache: RwLock<KindCache>,
    /// Serialises assignment, rename and delete of this kind.
    write_lock: Mutex<()>,
    stats: CacheStats,
}

pub struct UidTable {
    kv: Arc<dyn KvStore>,
    /// Per-metric TTLs are configured by name; they apply once the name
    /// has a UID.
    retention: Arc<crate::store::retention::Retention>,
    kinds: [Kind; 3],
    auto_create: AutoCreate,
    rules: NameRules,
}

impl UidTable {
    pub fn new(store: &Store, auto_create: AutoCreate, rules: NameRules) -> UidTable {
        let widths = store.layout().widths;
        let kind = |k: UidKind| Kind {
            kind: k,
            width: widths.of(k),
            cache: RwLock::new(KindCache::default()),
            write_lock: Mutex::new(()),
            stats: CacheStats::default(),
        };
        let table = UidTable {
            retention: store.retention().clone(),
            kv: store.kv().clone(),
            kinds: [
                kind(UidKind::Metric),
                kind(UidKind::TagKey),
                kind(UidKind::TagValue),
            ],
            auto_create,
            rules,
        };
        let names: Vec<String> = table.retention.metric_names().map(String::from).collect();
        for name in names {
            if let Ok(Some(uid)) = table.lookup_id(UidKind::Metric, &name) {
                table.retention.set_metric_uid(&name, uid);
            }
        }
        table
    }

    fn k(&self, kind: UidKind) -> &Kind {
        &self.kinds[kind.index()]
    }

    pub fn width(&self, kind: UidKind) -> UidWidth {
        self.k(kind).width
    }

    pub fn auto_create(&self) -> AutoCreate {
        self.auto_create
    }

    pub fn rules(&self) -> &NameRules {
        &self.rules
    }

    pub fn stats(&self, kind: UidKind) -> &CacheStats {
        &self.k(kind).stats
    }

    /// Number of cached names of a kind.
    pub fn cache_size(&self, kind: UidKind) -> usize {
        self.k(kind).cache.read().by_name.len()
    }

    /// Forgets every cached mapping (`dropcaches`).
    pub fn drop_caches(&self) {
        for k in &self.kinds {
            let mut c = k.cache.write();
            c.by_name.clear();
            c.by_id.clear();
            c.generation += 1;
        }
    }

    fn cache_insert(&self, k: &Kind, generation: u64, name: &str, uid: Uid) {
        let mut c = k.cache.write();
        if c.generation == generation {
            let name: Arc<str> = name.into();
            c.by_name.insert(name.clone(), uid);
            c.by_id.insert(uid, name);
        }
    }

    /// The UID of `name`, or `NoSuchName`.
    pub fn get_id(&self, kind: UidKind, name: &str) -> Result<Uid> {
        self.lookup_id(kind, name)?
            .ok_or_else(|| UidTableError::NoSuchName {
                kind,
                name: name.to_string(),
            })
    }

    /// The UID of `name` if it has one.
    pub fn lookup_id(&self, kind: UidKind, name: &str) -> Result<Option<Uid>> {
        let k = self.k(kind);
        let generation = {
            let c = k.cache.read();
            if let Some(uid) = c.by_name.get(name) {
                k.stats.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(Some(*uid));
            }
            c.generation
        };
        k.stats.misses.fetch_add(1, Ordering::Relaxed);
        let found = self.read_forward(k, name)?;
        if let Some(uid) = found {
            self.cache_insert(k, generation, name, uid);
        }
        Ok(found)
    }

    fn read_forward(&self, k: &Kind, name: &str) -> Result<Option<Uid>> {
        match self.kv.get(Table::Uid, &keys::forward(k.kind, name))? {
            None => Ok(None),
            Some(bytes) => {
                Uid::from_bytes(&bytes, k.width)
                    .map(Some)
                    .map_err(|e| UidTableError::Corrupt {
                        kind: k.kind,
                        what: name.to_string(),
                        reason: e.to_string(),
                    })
            }
        }
    }

    /// The name of `uid`, or `NoSuchId`.
    pub fn get_name(&self, kind: UidKind, uid: Uid) -> Result<Arc<str>> {
        let k = self.k(kind);
        let generation = {
            let c = k.cache.read();
            if let Some(name) = c.by_id.get(&uid) {
                k.stats.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(name.clone());
            }
            c.generation
        };
        k.stats.misses.fetch_add(1, Ordering::Relaxed);
        let bytes = uid.to_bytes(k.width);
        let name = self
            .kv
            .get(Table::Uid, &keys::reverse(kind, &bytes))?
            .ok_or(UidTableError::NoSuchId {
                kind,
                bytes: bytes.clone(),
            })?;
        let name = String::from_utf8(name).map_err(|_| UidTableError::Corrupt {
            kind,
            what: java_byte_array(&bytes),
            reason: "name is not UTF-8".into(),
        })?;
        self.cache_insert(k, generation, &name, uid);
        Ok(name.into())
    }

    /// Resolves raw UID bytes (from a row key) to a name.
    pub fn get_name_bytes(&self, kind: UidKind, bytes: &[u8]) -> Result<Arc<str>> {
        let uid =
            Uid::from_bytes(bytes, self.width(kind)).map_err(|_| UidTableError::NoSuchId {
                kind,
                bytes: bytes.to_vec(),
            })?;
        self.get_name(kind, uid)
    }

    /// The write path's lookup: the existing UID, or a new one if this
    /// kind auto-creates (else `NoSuchName`, as OpenTSDB).
    pub fn get_or_create_id(&self, kind: UidKind, name: &str) -> Result<Uid> {
        if let Some(uid) = self.lookup_id(kind, name)? {
            return Ok(uid);
        }
        if !self.auto_create.allows(kind) {
            return Err(UidTableError::NoSuchName {
                kind,
                name: name.to_string(),
            });
        }
        Ok(self.assign(kind, name)?.uid())
    }

    fn validate(&self, kind: UidKind, name: &str) -> Result<()> {
        // `TSDB.assignUid` validates with the type word as the subject:
        // `Invalid metric ("a b"): illegal character:  `.
        let what = match kind {
            UidKind::Metric => "metric",
            UidKind::TagKey => "tagk",
            UidKind::TagValue => "tagv",
        };
        Ok(self.rules.validate(what, name)?)
    }

    /// Assigns a UID to `name` unless it has one (explicit assignment:
    /// `tsdb uid assign`, `/api/uid/assign`, ignores auto-create).
    pub fn assign(&self, kind: UidKind, name: &str) -> Result<Assigned> {
        self.validate(kind, name)?;
        let k = self.k(kind);
        let _w = k.write_lock.lock();
        let generation = k.cache.read().generation;
        // Storage, not the cache, decides: another task may have just won.
        if let Some(uid) = self.read_forward(k, name)? {
            self.cache_insert(k, generation, name, uid);
            return Ok(Assigned::Existing(uid));
        }
        let max = self.max_id(kind)?;
        let exhausted = || UidTableError::Exhausted {
            kind,
            width: k.width.bytes(),
        };
        let next = max.checked_add(1).ok_or_else(exhausted)?;
        let uid = Uid::new(next, k.width).map_err(|_| exhausted())?;
        let bytes = uid.to_bytes(k.width);
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
        self.cache_insert(k, generation, name, uid);
        if kind == UidKind::Metric {
            self.retention.set_metric_uid(name, uid);
        }
        tracing::debug!(%kind, name, id = uid.id(), "assigned UID");
        Ok(Assigned::New(uid))
    }

    /// Highest UID handed out so far for `kind` (the MAXID counter).
    pub fn max_id(&self, kind: UidKind) -> Result<u64> {
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

    /// Renames a UID's name; data rows are untouched since they hold UIDs.
    pub fn rename(&self, kind: UidKind, old: &str, new: &str) -> Result<Uid> {
        self.validate(kind, new)?;
        let k = self.k(kind);
        let _w = k.write_lock.lock();
        let uid = self
            .read_forward(k, old)?
            .ok_or_else(|| UidTableError::NoSuchName {
                kind,
                name: old.to_string(),
            })?;
        if let Some(existing) = self.read_forward(k, new)? {
            return Err(UidTableError::RenameTargetExists {
                kind,
                width: k.width.bytes(),
                old: old.into(),
                new: new.into(),
                existing: existing.to_bytes(k.width),
            });
        }
        let bytes = uid.to_bytes(k.width);
        let mut b = WriteBatch::new();
        b.put(
            Table::Uid,
            keys::reverse(kind, &bytes),
            new.as_bytes().to_vec(),
        );
        b.put(Table::Uid, keys::forward(kind, new), bytes);
        b.delete(Table::Uid, keys::forward(kind, old));
        {
            // Holding the cache lock across the write: no reader can cache
            // the old mapping between the write and the purge.
            let mut c = k.cache.write();
            self.kv.write(b)?;
            c.by_name.remove(old);
            c.by_id.remove(&uid);
            c.generation += 1;
        }
        Ok(uid)
    }

    /// Deletes a name's forward, reverse and meta cells. Data rows stay.
    pub fn delete(&self, kind: UidKind, name: &str) -> Result<Uid> {
        let k = self.k(kind);
        let _w = k.write_lock.lock();
        let uid = self
            .read_forward(k, name)?
            .ok_or_else(|| UidTableError::NoSuchName {
                kind,
                name: name.to_string(),
            })?;
        let bytes = uid.to_bytes(k.width);
        let mut b = WriteBatch::new();
        b.delete(Table::Uid, keys::forward(kind, name));
        b.delete(Table::Uid, keys::reverse(kind, &bytes));
        b.delete(Table::Uid, keys::uid_meta(kind, &bytes));
        let mut c = k.cache.write();
        self.kv.write(b)?;
        c.by_name.remove(name);
        c.by_id.remove(&uid);
        c.generation += 1;
        Ok(uid)
    }

    /// Names of `kind` starting with `prefix`, in byte order, at most `max`
    /// (`/api/suggest`: a prefix scan over the forward rows).
    pub fn suggest(&self, kind: UidKind, prefix: &str, max: usize) -> Result<Vec<String>> {
        // Stops scanning at `max`: an empty prefix must not read every name.
        self.forward(kind, prefix.as_bytes())
            .take(max)
            .map(|r| r.map(|(name, _)| name))
            .collect()
    }

    /// Every (name, UID) of `kind` whose name starts with `prefix`, in name
    /// byte order.
    pub fn scan_forward(&self, kind: UidKind, prefix: &[u8]) -> Result<Vec<(String, Uid)>> {
        self.forward(kind, prefix).collect()
    }

    /// The forward mappings of `kind` under `prefix`, read lazily.
    fn forward<'a>(
        &'a self,
        kind: UidKind,
        prefix: &[u8],
    ) -> impl Iterator<Item = Result<(String, Uid)>> + 'a {
        let width = self.width(kind);
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
            })
    }

    /// Every reverse mapping of `kind`: (UID, name). For fsck.
    pub fn scan_reverse(&self, kind: UidKind) -> Result<Vec<(Uid, String)>> {
        let width = self.width(kind);
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

    /// Raw bytes of a hex TSUID component, checked against `kind`'s width.
    pub fn parse_hex_uid(&self, kind: UidKind, s: &str) -> Option<Uid> {
        Uid::from_bytes(&parse_hex(s)?, self.width(kind)).ok()
    }

    /// Writes pending UID changes to stable storage.
    pub fn sync(&self) -> Result<()> {
        Ok(self.kv.sync()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::row::DuplicatePolicy;
    use crate::codec::row_key::{KeyLayout, Salt};
    use crate::model::Tsuid;
    use crate::model::UidWidths;

    fn table_with(layout: KeyLayout) -> UidTable {
        let store = Store::in_memory(layout, DuplicatePolicy::LastWriteWins);
        UidTable::new(&store, AutoCreate::default(), NameRules::default())
    }

    fn table() -> UidTable {
        table_with(KeyLayout::default())
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
}
