//! The seam between rtsdb and a storage engine: a sorted key-value store
//! of the [`Table`]s of an OpenTSDB deployment.
//!
//! # The seam
//!
//! [`KvStore`] is the core every engine implements: `get`, `get_many`,
//! `write` (atomic [`WriteBatch`]es), `scan` and `visit` (forward range
//! scans), `increment` and `compare_and_set` (atomic read-modify-write),
//! `sync` and `snapshot` (a consistent view, the source of a backup),
//! plus one read-plan hint (`seeks_are_cheap`). What only some engines
//! have is a capability trait of its own, which an engine implements
//! only when it has the thing, and hands out through an
//! `Option`-returning method of [`KvStore`] (`None` by default):
//!
//! | capability | reached by | implemented by |
//! |---|---|---|
//! | [`Journal`]: the engine's own write journal, moved into its tables | [`KvStore::journal`] | fjall |
//! | [`Compaction`]: a full compaction on demand (applies retention) | [`KvStore::compaction`] | fjall, ClickHouse |
//! | [`RowAppends`]: data rows appended, never read back and merged | [`KvStore::row_appends`] | ClickHouse |
//! | [`Partitions`]: rows kept in weeks, retention drops whole weeks | [`KvStore::partitions`] | ClickHouse |
//! | [`Health`]: an engine that stops taking writes (a full disk) and is reopened | [`KvStore::health`] | fjall |
//! | [`Versions`]: several writers' versions of a key, read and replaced (fsck) | [`KvStore::versions`] | ClickHouse |
//!
//! Nothing above [`crate::store`] names an engine: [`crate::store::Store`]
//! holds one `Arc<dyn KvStore>`, lays the data, rollup, UID, meta, index
//! and tree tables out on it (row keys, row encoding, retention) and asks
//! for a capability where it needs one (`Store::health`,
//! `Store::journal`, `Store::compact`, `Store::drop_expired_partitions`,
//! fsck's `Store::read_row_versions`/`replace_row`); the database handle
//! holds that one store.
//!
//! # Engines
//!
//! - [`fjall::FjallStore`]: embedded, the default (docs/storage-engine.md
//!   says why); [`fjall_journal`] checks its journal before it replays.
//! - [`clickhouse::ClickHouseStore`]: a cluster's shared tables, one row
//!   version per writer merged on read, over ClickHouse's HTTP interface;
//!   its `increment` and `compare_and_set` take a [`coordinator`] lock
//!   (ZooKeeper between TSDs).
//! - [`memory::MemoryStore`], for tests.
//!
//! A third engine (FoundationDB, S3) is a new folder here with a type
//! implementing [`KvStore`] and whichever capabilities it has, and a test
//! that runs `conformance::run` (this file, for tests) against it, as
//! each engine above does; `store::rows::conformance` then checks the
//! data rows above it. Opening it is one more arm where
//! `Store::open`/`Store::open_cluster` pick an engine.
//!
//! # What the next changes will ask of it
//!
//! - **Opening read-only** (a TSD starting on a full disk) needs nothing
//!   of the engine: fjall opens on a full disk, and the first write that
//!   fails sets [`Health::unavailable`]; the database then holds its log
//!   in memory and serves reads (`db/read_only.rs`).
//! - **Rewriting every key** (wider UIDs): the core is enough, a
//!   [`KvSnapshot`] of the old store read table by table and written in
//!   batches into a new one, as a backup copies a store.
//! - **Retention per table and per tenant**: [`Partitions::drop_before`]
//!   already takes the table; the embedded engine's expiry is
//!   [`Compaction`]'s filter, fed by the store's retention rules.
//! - **A tenant's own key space**: every call names its [`Table`]; a
//!   tenant's store is a [`KvStore`] that prefixes keys with the tenant
//!   (or an engine opened on the tenant's keyspaces), the layers above
//!   unchanged.

pub(crate) mod clickhouse;
pub(crate) mod coordinator;
pub(crate) mod fjall;
pub(crate) mod fjall_journal;
pub(crate) mod memory;

use thiserror::Error;

/// The logical tables of an OpenTSDB deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Table {
    /// `tsdb`: data rows.
    Data,
    /// `tsdb-uid`: name ↔ UID mappings and the MAXID counters.
    Uid,
    /// `tsdb-meta`: per-series metadata and counters.
    Meta,
    /// `rtsdb-index`: the series index (metric and tag pairs → series);
    /// rtsdb's own, OpenTSDB has no equivalent.
    Index,
    /// `tsdb-tree`: tree definitions, rules, branches and leaves.
    Tree,
    /// `tsdb-rollup`: every configured rollup and pre-aggregate table
    /// (`tsd.rollups.config`), each row key prefixed by its table's name
    /// (docs/format/rollup.md). One keyspace rather than one per name: the
    /// set of names is configuration and may change between runs, while
    /// the engine's keyspaces are fixed when it opens.
    Rollup,
}

impl Table {
    pub const ALL: [Table; 6] = [
        Table::Data,
        Table::Uid,
        Table::Meta,
        Table::Index,
        Table::Tree,
        Table::Rollup,
    ];

    /// OpenTSDB's default table name.
    pub fn name(self) -> &'static str {
        match self {
            Table::Data => "tsdb",
            Table::Uid => "tsdb-uid",
            Table::Meta => "tsdb-meta",
            Table::Index => "rtsdb-index",
            Table::Tree => "tsdb-tree",
            Table::Rollup => "tsdb-rollup",
        }
    }
}

#[derive(Debug, Error)]
pub enum StorageError {
    #[error("storage engine error: {0}")]
    Engine(String),
    /// The engine's files do not check out (a checksum, a tag, a header).
    #[error(
        "the store's files are damaged: {0}; `tsdb fsck --data-dir DATA_DIR --salvage NEW_DIR` copies every readable entry into a new store (docs/durability.md)"
    )]
    Damaged(String),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// A write failed (a full disk) and the engine refuses writes until
    /// it is reopened ([`Health::recover`]).
    #[error(
        "the storage engine at {} cannot take writes: {cause}; it is reopened once the disk takes writes again",
        path.display()
    )]
    Unavailable {
        path: std::path::PathBuf,
        cause: String,
    },
    #[error("counter at key {key:?} in {table} holds {len} bytes, not an 8-byte integer")]
    NotACounter {
        table: &'static str,
        key: Vec<u8>,
        len: usize,
    },
}

pub(crate) type Result<T> = std::result::Result<T, StorageError>;

/// How far a write must get before it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Handed to the OS: survives a process crash, not a power loss.
    #[default]
    Process,
    /// On stable storage (fdatasync) before returning.
    Sync,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mutation {
    Put {
        table: Table,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Delete {
        table: Table,
        key: Vec<u8>,
    },
}

/// Puts and deletes applied atomically: after a crash either all or none
/// are visible.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    pub mutations: Vec<Mutation>,
    pub durability: Durability,
}

impl WriteBatch {
    pub fn new() -> WriteBatch {
        WriteBatch::default()
    }

    pub fn put(&mut self, table: Table, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.mutations.push(Mutation::Put {
            table,
            key: key.into(),
            value: value.into(),
        });
    }

    pub fn delete(&mut self, table: Table, key: impl Into<Vec<u8>>) {
        self.mutations.push(Mutation::Delete {
            table,
            key: key.into(),
        });
    }

    pub fn len(&self) -> usize {
        self.mutations.len()
    }

    pub fn is_empty(&self) -> bool {
        self.mutations.is_empty()
    }
}

/// A forward range scan: keys in `[start, stop)`, at most `limit` of them.
/// An empty `stop` means "to the end of the table".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanRange {
    pub start: Vec<u8>,
    pub stop: Vec<u8>,
    pub limit: Option<usize>,
}

impl ScanRange {
    pub fn new(start: impl Into<Vec<u8>>, stop: impl Into<Vec<u8>>) -> ScanRange {
        ScanRange {
            start: start.into(),
            stop: stop.into(),
            limit: None,
        }
    }

    /// Every key starting with `prefix`.
    pub fn prefix(prefix: &[u8]) -> ScanRange {
        ScanRange::new(prefix.to_vec(), prefix_end(prefix))
    }

    pub fn limit(mut self, limit: usize) -> ScanRange {
        self.limit = Some(limit);
        self
    }
}

/// The smallest key greater than every key starting with `prefix`
/// (empty if there is none, i.e. the prefix is all 0xFF).
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return end;
        }
    }
    Vec::new()
}

pub(crate) type KeyValue = (Vec<u8>, Vec<u8>);

/// A fixed set of locks, one picked per key by hash: serialises
/// read-modify-write of one key without a lock per key.
pub(crate) struct StripedLocks {
    locks: Vec<parking_lot::Mutex<()>>,
}

impl StripedLocks {
    pub(crate) fn new(stripes: usize) -> StripedLocks {
        StripedLocks {
            locks: (0..stripes.max(1))
                .map(|_| parking_lot::Mutex::new(()))
                .collect(),
        }
    }

    /// Locks the stripe of `key` (the crate's hash of `seed` and the key: cheap and
    /// spreads keys well enough).
    pub(crate) fn lock(&self, seed: u64, key: &[u8]) -> parking_lot::MutexGuard<'_, ()> {
        self.locks[self.stripe(seed, key)].lock()
    }

    fn stripe(&self, seed: u64, key: &[u8]) -> usize {
        let h = crate::model::hash::hash_bytes(seed, key);
        (h % self.locks.len() as u64) as usize
    }

    /// Locks the stripes of all `keys`, in stripe order (so two callers
    /// never wait on each other crosswise; single-key holders take one).
    pub(crate) fn lock_all<'k>(
        &self,
        seed: u64,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> Vec<parking_lot::MutexGuard<'_, ()>> {
        let mut stripes: Vec<usize> = keys.into_iter().map(|k| self.stripe(seed, k)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        stripes.into_iter().map(|i| self.locks[i].lock()).collect()
    }
}

/// A scan's results, in key order, produced lazily.
pub(crate) type ScanIter<'a> = Box<dyn Iterator<Item = Result<KeyValue>> + 'a>;

/// A consistent read view of every table as it was at one moment (the
/// source of a backup): writes after it was taken are not seen, and a
/// batch is seen whole or not at all. Holding one keeps the engine from
/// dropping the versions it sees, so it should not live long.
pub trait KvSnapshot: Send {
    /// Every entry of `table`, in key order.
    fn scan_all(&self, table: Table) -> ScanIter<'_>;
}

/// One writer's live version of a key ([`Versions::read_versions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyVersion {
    /// Who wrote it (a cluster's TSD; empty where keys have one writer).
    pub writer: String,
    pub value: Vec<u8>,
}

/// One key as [`Versions::read_versions`] reads it: every writer's live
/// version, and the value a read returns (their merge).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRead {
    /// Oldest first; empty when the key is absent or deleted.
    pub versions: Vec<KeyVersion>,
    /// What [`KvStore::get`] returns for the key.
    pub value: Option<Vec<u8>>,
}

/// The core every engine implements: a sorted key-value store of the
/// [`Table`]s. Implementations must be safe to share between threads;
/// `increment` and `compare_and_set` must be atomic against every other
/// operation on the same store.
///
/// What only some engines have is a capability trait of its own, reached
/// through the `Option`-returning methods at the end ([`journal`],
/// [`compaction`], [`row_appends`], [`partitions`], [`health`],
/// [`versions`]): `None` (the default) says the engine has no such thing,
/// and the caller does without it.
///
/// [`journal`]: KvStore::journal
/// [`compaction`]: KvStore::compaction
/// [`row_appends`]: KvStore::row_appends
/// [`partitions`]: KvStore::partitions
/// [`health`]: KvStore::health
/// [`versions`]: KvStore::versions
pub trait KvStore: Send + Sync {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// The values of several keys of one table, in the order asked. The
    /// default asks one at a time; a remote engine answers in one round trip.
    fn get_many(&self, table: Table, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        keys.iter().map(|k| self.get(table, k)).collect()
    }

    fn write(&self, batch: WriteBatch) -> Result<()>;

    fn scan<'a>(&'a self, table: Table, range: &ScanRange) -> ScanIter<'a>;

    /// Hands each entry of `range` to `visit` in key order, as [`scan`](Self::scan)
    /// yields them, until `visit` returns false. The key and value are
    /// borrowed for the call only: an engine holding them in memory need
    /// not copy each into a `Vec` (rollup queries read each row once).
    fn visit(
        &self,
        table: Table,
        range: &ScanRange,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        for r in self.scan(table, range) {
            let (k, v) = r?;
            if !visit(&k, &v) {
                break;
            }
        }
        Ok(())
    }

    /// Adds `delta` to the 8-byte big-endian signed counter at `key`
    /// (absent = 0) and returns the new value.
    fn increment(
        &self,
        table: Table,
        key: &[u8],
        delta: i64,
        durability: Durability,
    ) -> Result<i64>;

    /// Writes `new` only if the current value equals `expected` (`None` =
    /// the key must be absent). Returns whether it wrote.
    fn compare_and_set(
        &self,
        table: Table,
        key: &[u8],
        expected: Option<&[u8]>,
        new: &[u8],
        durability: Durability,
    ) -> Result<bool>;

    /// Makes everything written so far durable on stable storage.
    fn sync(&self) -> Result<()>;

    /// A consistent view of every table as of now ([`KvSnapshot`]).
    fn snapshot(&self) -> Result<Box<dyn KvSnapshot>>;

    /// Whether starting a scan costs about as little as reading a key
    /// (an engine in this process), so that a reader may start one per
    /// short range rather than read past keys it does not want. False for
    /// an engine a round trip away.
    fn seeks_are_cheap(&self) -> bool {
        true
    }

    /// The engine's own journal, if it keeps one ([`Journal`]).
    fn journal(&self) -> Option<&dyn Journal> {
        None
    }

    /// The engine's own full compaction, if it has one ([`Compaction`]).
    fn compaction(&self) -> Option<&dyn Compaction> {
        None
    }

    /// Whether data rows are appended rather than read, merged and put
    /// ([`RowAppends`]).
    fn row_appends(&self) -> Option<&dyn RowAppends> {
        None
    }

    /// Whole stretches of rows by time, if the engine keeps them so
    /// ([`Partitions`]).
    fn partitions(&self) -> Option<&dyn Partitions> {
        None
    }

    /// Whether the engine takes writes, if it can stop taking them
    /// ([`Health`]).
    fn health(&self) -> Option<&dyn Health> {
        None
    }

    /// Several writers' versions of one key, if the engine keeps them
    /// apart ([`Versions`]).
    fn versions(&self) -> Option<&dyn Versions> {
        None
    }
}

/// An engine's own write journal, apart from rtsdb's WAL (fjall's): it
/// keeps every version of a key written since it was last dropped, and
/// keys uncompressed, the tables only the newest version, compactly.
pub trait Journal {
    /// Moves what the journal holds into the tables and drops the
    /// journal, when it holds at least `min_journal_bytes`. Waits briefly
    /// for other users of the engine; returns whether it did it.
    fn checkpoint(&self, min_journal_bytes: u64) -> Result<bool>;

    /// The first half of [`checkpoint`](Self::checkpoint), with reads and
    /// writes going on: what the journal holds is written into the tables
    /// (so reads find it there, not in memory), when the journal holds at
    /// least `min_journal_bytes`; the journal itself stays until a
    /// checkpoint drops it.
    fn flush(&self, min_journal_bytes: u64) -> Result<()>;

    /// Bytes the journal takes on disk.
    fn bytes(&self) -> u64;

    /// Bytes the engine's files take on disk, the journal's included (what
    /// the journal's share is measured against).
    fn disk_space(&self) -> u64;
}

/// An engine's own full compaction.
pub trait Compaction {
    /// Merges the engine's files now rather than when it gets round to
    /// it, applying its expiry (retention) as it goes.
    fn compact(&self) -> Result<()>;
}

/// Data rows written without reading them: for an engine whose reads may
/// lag its writes (replicas), where a row rebuilt from a read could hide
/// cells only a lost replica had.
pub trait RowAppends {
    /// Adds to each data row the cells of `value` (an encoded row holding
    /// only new cells), later cells winning per timestamp as in a read's
    /// merge, without reading the row.
    fn append_rows(&self, rows: &[(Vec<u8>, Vec<u8>)]) -> Result<()>;
}

/// Rows kept in stretches by their base time (a cluster's weekly
/// partitions of the data and rollup tables, docs/scale-out.md
/// "Retention"), which retention drops whole. An engine without them
/// expires rows one by one (fjall's compaction filter).
pub trait Partitions {
    /// Drops, whole, the stretches of `table` whose rows all have a base
    /// time below `floor`, and returns how many went.
    fn drop_before(&self, table: Table, floor: u32) -> Result<u64>;
}

/// An engine that stops taking writes when one fails (a full disk) and is
/// brought back once the disk takes them again.
pub trait Health {
    /// Why the engine refuses writes now, if it does (a write failed and
    /// it has not been [recovered](Self::recover) yet).
    fn unavailable(&self) -> Option<String>;

    /// Brings a failed engine back once the disk takes writes again (at
    /// most one attempt per short interval; callers may call it often).
    /// `Ok` when the engine takes writes.
    fn recover(&self) -> Result<()>;

    /// Times a failed engine was brought back.
    fn reopens(&self) -> u64;
}

/// Several writers' versions of one key kept apart and merged on read (a
/// cluster's data table, docs/scale-out.md "The merge rule"): what fsck
/// reads and repairs. An engine without it has one version per key,
/// which [`KvStore::get_many`] and [`KvStore::write`] read and replace.
pub trait Versions {
    /// For each of `keys`, in the order asked: the versions a read merges
    /// into its value, oldest first, and that value ([`KeyRead`]). Many
    /// keys per round trip (fsck reads every row this way).
    fn read_versions(&self, table: Table, keys: &[&[u8]]) -> Result<Vec<KeyRead>>;

    /// Makes `value` the only version of `key`, or removes every version
    /// (`None`): the others' are hidden rather than merged with it
    /// (fsck's repairs).
    fn replace(&self, table: Table, key: &[u8], value: Option<&[u8]>) -> Result<()>;
}

/// Decodes an 8-byte counter value.
pub(crate) fn counter_value(table: Table, key: &[u8], v: Option<&[u8]>) -> Result<i64> {
    match v {
        None => Ok(0),
        Some(b) => {
            let arr: [u8; 8] = b.try_into().map_err(|_| StorageError::NotACounter {
                table: table.name(),
                key: key.to_vec(),
                len: b.len(),
            })?;
            Ok(i64::from_be_bytes(arr))
        }
    }
}

#[cfg(test)]
pub(crate) mod conformance {
    //! Behaviour every engine must show; run against each backend.
    use super::*;
    use std::sync::Arc;

    pub(crate) fn run(store: Arc<dyn KvStore>) {
        let mut b = WriteBatch::new();
        for i in 0u8..10 {
            b.put(Table::Data, vec![1, i], vec![i]);
        }
        b.put(Table::Uid, vec![1, 0], b"uid".to_vec());
        store.write(b).unwrap();
        assert_eq!(store.get(Table::Data, &[1, 3]).unwrap(), Some(vec![3]));
        assert_eq!(
            store.get(Table::Uid, &[1, 0]).unwrap(),
            Some(b"uid".to_vec())
        );
        assert_eq!(store.get(Table::Meta, &[1, 0]).unwrap(), None);
        let many = store
            .get_many(Table::Data, &[&[1, 2][..], &[9, 9][..], &[1, 5][..]])
            .unwrap();
        assert_eq!(many, vec![Some(vec![2]), None, Some(vec![5])]);

        let keys: Vec<Vec<u8>> = store
            .scan(Table::Data, &ScanRange::new(vec![1, 2], vec![1, 5]))
            .map(|r| r.unwrap().0)
            .collect();
        assert_eq!(keys, vec![vec![1, 2], vec![1, 3], vec![1, 4]]);
        let limited: Vec<_> = store
            .scan(Table::Data, &ScanRange::prefix(&[1]).limit(4))
            .collect();
        assert_eq!(limited.len(), 4);
        let all: Vec<_> = store
            .scan(Table::Data, &ScanRange::new(vec![], vec![]))
            .collect();
        assert_eq!(all.len(), 10);
        // A visit lends what a scan yields, in order, up to the limit or
        // until the visitor stops.
        let visited = |range: &ScanRange, stop_after: usize| {
            let mut seen: Vec<KeyValue> = Vec::new();
            store
                .visit(Table::Data, range, &mut |k, v| {
                    seen.push((k.to_vec(), v.to_vec()));
                    seen.len() < stop_after
                })
                .unwrap();
            seen
        };
        for range in [
            ScanRange::new(vec![1, 2], vec![1, 5]),
            ScanRange::prefix(&[1]).limit(4),
            ScanRange::new(vec![], vec![]),
            ScanRange::new(vec![1, 4], vec![]),
        ] {
            let scanned: Vec<KeyValue> = store
                .scan(Table::Data, &range)
                .map(|r| r.unwrap())
                .collect();
            assert_eq!(visited(&range, usize::MAX), scanned);
            assert_eq!(visited(&range, 2), scanned[..2]);
        }

        let mut d = WriteBatch::new();
        d.delete(Table::Data, vec![1, 3]);
        store.write(d).unwrap();
        assert_eq!(store.get(Table::Data, &[1, 3]).unwrap(), None);

        assert_eq!(
            store
                .increment(Table::Uid, b"ctr", 1, Durability::Process)
                .unwrap(),
            1
        );
        assert_eq!(
            store
                .increment(Table::Uid, b"ctr", 5, Durability::Process)
                .unwrap(),
            6
        );
        assert!(
            store
                .increment(Table::Uid, &[1, 0], 1, Durability::Process)
                .is_err()
        );

        assert!(
            store
                .compare_and_set(Table::Meta, b"k", None, b"a", Durability::Process)
                .unwrap()
        );
        assert!(
            !store
                .compare_and_set(Table::Meta, b"k", None, b"b", Durability::Process)
                .unwrap()
        );
        assert!(
            !store
                .compare_and_set(Table::Meta, b"k", Some(b"x"), b"b", Durability::Process)
                .unwrap()
        );
        assert!(
            store
                .compare_and_set(Table::Meta, b"k", Some(b"a"), b"b", Durability::Process)
                .unwrap()
        );
        assert_eq!(store.get(Table::Meta, b"k").unwrap(), Some(b"b".to_vec()));
        store.sync().unwrap();

        // Concurrent increments never lose an update.
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let s = store.clone();
                std::thread::spawn(move || {
                    for _ in 0..500 {
                        s.increment(Table::Meta, b"c", 1, Durability::Process)
                            .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(
            store
                .increment(Table::Meta, b"c", 0, Durability::Process)
                .unwrap(),
            2000
        );

        // A snapshot sees what was written before it, in key order, and
        // nothing written after.
        let snap = store.snapshot().unwrap();
        let mut later = WriteBatch::new();
        later.put(Table::Data, vec![0], vec![0]);
        later.delete(Table::Data, vec![1, 4]);
        store.write(later).unwrap();
        let keys: Vec<Vec<u8>> = snap.scan_all(Table::Data).map(|r| r.unwrap().0).collect();
        let mut want: Vec<Vec<u8>> = (0u8..10).filter(|i| *i != 3).map(|i| vec![1, i]).collect();
        want.sort();
        assert_eq!(keys, want);
        assert_eq!(snap.scan_all(Table::Index).count(), 0);
    }

    #[test]
    fn prefix_end_edges() {
        assert_eq!(prefix_end(&[1, 2]), vec![1, 3]);
        assert_eq!(prefix_end(&[1, 0xFF]), vec![2]);
        assert_eq!(prefix_end(&[0xFF, 0xFF]), Vec::<u8>::new());
    }
}
