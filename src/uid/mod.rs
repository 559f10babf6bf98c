//! UID assignment and lookup (OpenTSDB's `UniqueId`), with an in-process
//! cache in both directions, over a [`UidStore`] that keeps the mappings.
//!
//! Assignment differs from OpenTSDB's on purpose when the engine allows:
//! OpenTSDB increments the MAXID counter, then CASes the reverse and
//! forward mappings one by one, so a crash or a lost race leaves a leaked
//! reverse mapping that `uid fsck` later reports. The embedded engine is
//! owned by one process, so it writes counter, reverse and forward mapping
//! in one atomic batch: a reader sees all of it or none of it. (An engine
//! shared by several processes follows OpenTSDB's order; see
//! [`UidStore::allocate`].)

pub mod backend;
pub mod keys;

use std::collections::HashMap;

use crate::model::hash::FastMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};
use thiserror::Error;

use crate::model::uid::{java_byte_array, parse_hex};
use crate::model::{InvalidName, NameRules, Uid, UidKind, UidWidth};
use crate::storage::StorageError;

pub use backend::{ForwardScan, UidStore};

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
    /// Keyed by UIDs this table handed out, never by client input: the
    /// crate's fast hash (a query names thousands of series' tags here).
    by_id: FastMap<Uid, Arc<str>>,
    /// Bumped by every rename, delete and drop. A reader that fetched a
    /// mapping from storage only caches it if the generation did not move
    /// meanwhile, so a lookup racing a rename cannot re-insert the old name.
    generation: u64,
    /// Mappings dropped because another process may have changed names
    /// ([`UidStore::remote_changes`] moved), kept until storage confirms
    /// or contradicts each one. A lookup whose storage read fails falls
    /// back to them: the engine moves that counter on every reconnect to
    /// ZooKeeper (watch events are lost while disconnected), and without
    /// this a TSD that reconnected once during a quorum loss could no
    /// longer write even the series it knew. A name can only have changed
    /// through ZooKeeper, so the fallback is wrong only for a rename or
    /// delete made in the moments the TSD was disconnected.
    unverified: Unverified,
}

/// Cached mappings awaiting confirmation from storage (see
/// [`KindCache::unverified`]).
#[derive(Default)]
struct Unverified {
    by_name: HashMap<Arc<str>, Uid>,
    by_id: FastMap<Uid, Arc<str>>,
}

impl KindCache {
    /// Forgets every mapping, verified or not (`dropcaches`).
    fn clear(&mut self) {
        self.by_name.clear();
        self.by_id.clear();
        self.unverified.by_name.clear();
        self.unverified.by_id.clear();
        self.generation += 1;
    }

    /// Moves every cached mapping to [`KindCache::unverified`].
    fn unverify(&mut self) {
        self.unverified.by_name.extend(self.by_name.drain());
        self.unverified.by_id.extend(self.by_id.drain());
        self.generation += 1;
    }

    /// Forgets `name` and `uid` after this process renamed or deleted them.
    fn forget(&mut self, name: &str, uid: Uid) {
        self.by_name.remove(name);
        self.by_id.remove(&uid);
        self.unverified.by_name.remove(name);
        self.unverified.by_id.remove(&uid);
        self.generation += 1;
    }
}

struct Kind {
    width: UidWidth,
    cache: RwLock<KindCache>,
    /// Serialises assignment, rename and delete of this kind in this
    /// process (the engine orders them across processes).
    write_lock: Mutex<()>,
    stats: CacheStats,
    /// The engine's [`UidStore::remote_changes`] when the cache was last
    /// found current (an atomic beside the cache, so the check on every
    /// lookup takes no lock).
    remote_seen: AtomicU64,
}

/// Called with each name given a new UID, after the assignment is stored.
pub type NewUidHook = Box<dyn Fn(UidKind, &str, Uid) + Send + Sync>;

pub struct UidTable {
    backend: Arc<dyn UidStore>,
    /// Told of every new UID: the store's per-metric TTLs (configured by
    /// name, they apply once the name has a UID) and real-time UIDMeta.
    on_new: Vec<NewUidHook>,
    kinds: [Kind; 3],
    auto_create: AutoCreate,
    rules: NameRules,
}

impl UidTable {
    pub fn new(backend: Arc<dyn UidStore>, auto_create: AutoCreate, rules: NameRules) -> UidTable {
        let widths = backend.widths();
        let kind = |k: UidKind| Kind {
            width: widths.of(k),
            cache: RwLock::new(KindCache::default()),
            write_lock: Mutex::new(()),
            stats: CacheStats::default(),
            remote_seen: AtomicU64::new(0),
        };
        UidTable {
            backend,
            on_new: Vec::new(),
            kinds: [
                kind(UidKind::Metric),
                kind(UidKind::TagKey),
                kind(UidKind::TagValue),
            ],
            auto_create,
            rules,
        }
    }

    /// Calls `hook` with every name this table gives a new UID.
    pub fn on_new_uid(mut self, hook: NewUidHook) -> UidTable {
        self.on_new.push(hook);
        self
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
            k.cache.write().clear();
        }
    }

    /// Drops the kind's cached mappings if another process renamed or
    /// deleted one since they were cached (one atomic load when not).
    fn check_remote(&self, kind: UidKind, k: &Kind) {
        let now = self.backend.remote_changes(kind);
        if k.remote_seen.load(Ordering::Acquire) == now {
            return;
        }
        let mut c = k.cache.write();
        // Under the cache lock: one thread drops the cache per change.
        if k.remote_seen.swap(now, Ordering::AcqRel) != now {
            c.unverify();
            tracing::debug!(%kind, "UID cache unverified: names may have changed on another TSD");
        }
    }

    /// Sum of the engine's [`UidStore::remote_changes`] over the kinds:
    /// moves when another process renamed or deleted a name, so caches
    /// holding names above this table (the write path's series cache)
    /// know to drop them.
    pub fn remote_changes(&self) -> u64 {
        [UidKind::Metric, UidKind::TagKey, UidKind::TagValue]
            .iter()
            .map(|k| self.backend.remote_changes(*k))
            .fold(0u64, u64::wrapping_add)
    }

    fn cache_insert(&self, k: &Kind, generation: u64, name: &str, uid: Uid) {
        let mut c = k.cache.write();
        if c.generation == generation {
            let name: Arc<str> = name.into();
            if let Some(old) = c.unverified.by_name.remove(&name) {
                c.unverified.by_id.remove(&old);
            }
            if let Some(old) = c.unverified.by_id.remove(&uid) {
                c.unverified.by_name.remove(&old);
            }
            c.by_name.insert(name.clone(), uid);
            c.by_id.insert(uid, name);
        }
    }

    /// Storage answered that `name` has no UID: an unverified mapping of
    /// it is wrong.
    fn cache_absent_name(&self, k: &Kind, name: &str) {
        let mut c = k.cache.write();
        if let Some(uid) = c.unverified.by_name.remove(name) {
            c.unverified.by_id.remove(&uid);
        }
    }

    /// Storage answered that `uid` has no name.
    fn cache_absent_id(&self, k: &Kind, uid: Uid) {
        let mut c = k.cache.write();
        if let Some(name) = c.unverified.by_id.remove(&uid) {
            c.unverified.by_name.remove(&name);
        }
    }

    /// Storage could not be read: the unverified mapping of `name` if
    /// there is one (see [`KindCache::unverified`]), else the error.
    fn unverified_id(&self, kind: UidKind, k: &Kind, name: &str, e: UidTableError) -> Result<Uid> {
        match k.cache.read().unverified.by_name.get(name) {
            Some(uid) if matches!(e, UidTableError::Storage(_)) => {
                tracing::debug!(%kind, name, error = %e, "storage unreadable: an unverified UID used");
                Ok(*uid)
            }
            _ => Err(e),
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
        self.check_remote(kind, k);
        let (generation, changed) = {
            let c = k.cache.read();
            if let Some(uid) = c.by_name.get(name) {
                k.stats.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(Some(*uid));
            }
            (c.generation, c.unverified.by_name.contains_key(name))
        };
        k.stats.misses.fetch_add(1, Ordering::Relaxed);
        let read = if changed {
            self.backend.forward_latest(kind, name)
        } else {
            self.backend.forward(kind, name)
        };
        let found = match read {
            Ok(found) => found,
            Err(e) => return self.unverified_id(kind, k, name, e).map(Some),
        };
        match found {
            Some(uid) => self.cache_insert(k, generation, name, uid),
            None => self.cache_absent_name(k, name),
        }
        Ok(found)
    }

    /// The name of `uid`, or `NoSuchId`.
    pub fn get_name(&self, kind: UidKind, uid: Uid) -> Result<Arc<str>> {
        let k = self.k(kind);
        self.check_remote(kind, k);
        let (generation, changed) = {
            let c = k.cache.read();
            if let Some(name) = c.by_id.get(&uid) {
                k.stats.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(name.clone());
            }
            (c.generation, c.unverified.by_id.contains_key(&uid))
        };
        k.stats.misses.fetch_add(1, Ordering::Relaxed);
        let read = if changed {
            self.backend.reverse_latest(kind, uid)
        } else {
            self.backend.reverse(kind, uid)
        };
        let name = match read {
            Ok(Some(name)) => name,
            Ok(None) => {
                self.cache_absent_id(k, uid);
                return Err(UidTableError::NoSuchId {
                    kind,
                    bytes: uid.to_bytes(k.width),
                });
            }
            Err(e) => {
                let c = k.cache.read();
                return match c.unverified.by_id.get(&uid) {
                    Some(name) if matches!(e, UidTableError::Storage(_)) => Ok(name.clone()),
                    _ => Err(e),
                };
            }
        };
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
        self.assign_checked(kind, name)
    }

    /// The UID of a name its caller checked by other rules than
    /// OpenTSDB's character set (a remote-written series' `job:rate5m`,
    /// UTF-8 label values; see `write::rules`), created on first use
    /// whatever `tsd.core.auto_create_*` says: those settings are
    /// OpenTSDB's put paths' (telnet, `/api/put`), and a Prometheus sender
    /// has no way to assign names first — every scrape may bring new ones,
    /// and Prometheus itself takes them all.
    pub fn get_or_create_checked_id(&self, kind: UidKind, name: &str) -> Result<Uid> {
        if let Some(uid) = self.lookup_id(kind, name)? {
            return Ok(uid);
        }
        Ok(self.assign_checked(kind, name)?.uid())
    }

    /// [`assign`](Self::assign) for a name checked by its caller's rules
    /// (see [`get_or_create_checked_id`](Self::get_or_create_checked_id);
    /// replay: names in the WAL passed the rules they were written by).
    pub fn assign_checked(&self, kind: UidKind, name: &str) -> Result<Assigned> {
        let k = self.k(kind);
        let _w = k.write_lock.lock();
        let generation = k.cache.read().generation;
        // Storage, not the cache, decides: another task may have just won.
        let assigned = self.backend.allocate(kind, name)?;
        self.cache_insert(k, generation, name, assigned.uid());
        if let Assigned::New(uid) = assigned {
            for hook in &self.on_new {
                hook(kind, name, uid);
            }
            tracing::debug!(%kind, name, id = uid.id(), "assigned UID");
        }
        Ok(assigned)
    }

    /// Highest UID handed out so far for `kind` (the MAXID counter).
    pub fn max_id(&self, kind: UidKind) -> Result<u64> {
        self.backend.max_id(kind)
    }

    /// Renames a UID's name; data rows are untouched since they hold UIDs.
    pub fn rename(&self, kind: UidKind, old: &str, new: &str) -> Result<Uid> {
        self.validate(kind, new)?;
        let k = self.k(kind);
        let _w = k.write_lock.lock();
        // Holding the cache lock across the write: no reader can cache
        // the old mapping between the write and the purge.
        let mut c = k.cache.write();
        let uid = self.backend.rename(kind, old, new)?;
        c.forget(old, uid);
        Ok(uid)
    }

    /// Deletes a name's forward and reverse mappings. Data rows stay; the
    /// name's UIDMeta is deleted by `Db::delete_uid`, which calls this.
    pub fn delete(&self, kind: UidKind, name: &str) -> Result<Uid> {
        let k = self.k(kind);
        let _w = k.write_lock.lock();
        let mut c = k.cache.write();
        let uid = self.backend.delete(kind, name)?;
        c.forget(name, uid);
        Ok(uid)
    }

    /// Names of `kind` starting with `prefix`, in byte order, at most `max`
    /// (`/api/suggest`: a prefix scan over the forward rows).
    pub fn suggest(&self, kind: UidKind, prefix: &str, max: usize) -> Result<Vec<String>> {
        // Stops scanning at `max`: an empty prefix must not read every name.
        self.backend
            .scan_forward(kind, prefix.as_bytes())
            .take(max)
            .map(|r| r.map(|(name, _)| name))
            .collect()
    }

    /// Every (name, UID) of `kind` whose name starts with `prefix`, in name
    /// byte order.
    pub fn scan_forward(&self, kind: UidKind, prefix: &[u8]) -> Result<Vec<(String, Uid)>> {
        self.backend.scan_forward(kind, prefix).collect()
    }

    /// Every reverse mapping of `kind`: (UID, name). For fsck.
    pub fn scan_reverse(&self, kind: UidKind) -> Result<Vec<(Uid, String)>> {
        self.backend.scan_reverse(kind)
    }

    /// Raw bytes of a hex TSUID component, checked against `kind`'s width.
    pub fn parse_hex_uid(&self, kind: UidKind, s: &str) -> Option<Uid> {
        Uid::from_bytes(&parse_hex(s)?, self.width(kind)).ok()
    }

    /// Writes pending UID changes to stable storage.
    pub fn sync(&self) -> Result<()> {
        self.backend.sync()
    }
}
