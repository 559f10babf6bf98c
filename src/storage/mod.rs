//! The one narrow interface between rtsdb and a sorted key-value engine:
//! the operations OpenTSDB needs from HBase, nothing more.
//!
//! Engines: [`fjall::FjallStore`] (embedded, the default; see
//! docs/storage-engine.md for why) and [`memory::MemoryStore`] (tests).

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
    /// it is reopened ([`KvStore::recover`]).
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

/// One writer's live version of a key ([`KvStore::read_versions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyVersion {
    /// Who wrote it (a cluster's TSD; empty where keys have one writer).
    pub writer: String,
    pub value: Vec<u8>,
}

/// One key as [`KvStore::read_versions`] reads it: every writer's live
/// version, and the value a read returns (their merge).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRead {
    /// Oldest first; empty when the key is absent or deleted.
    pub versions: Vec<KeyVersion>,
    /// What [`KvStore::get`] returns for the key.
    pub value: Option<Vec<u8>>,
}

/// The storage engine interface. Implementations must be safe to share
/// between threads; `increment` and `compare_and_set` must be atomic
/// against every other operation on the same store.
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

    /// Whether data rows are written with
    /// [`append_rows`](Self::append_rows) rather than read, merged and put:
    /// true for an engine whose reads may lag its writes (replicas), where
    /// a row rebuilt from a read could hide cells only a lost replica had.
    fn appends_rows(&self) -> bool {
        false
    }

    /// Adds to each data row the cells of `value` (an encoded row holding
    /// only new cells), later cells winning per timestamp as in a read's
    /// merge, without reading the row. Only engines that
    /// [`appends_rows`](Self::appends_rows) implement it.
    fn append_rows(&self, rows: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
        let _ = rows;
        Err(StorageError::Engine(
            "this engine does not append rows; read, merge and write them".into(),
        ))
    }

    /// Runs the engine's own full compaction, which also applies expiry
    /// filters (retention). A no-op for engines without one.
    fn compact(&self) -> Result<()> {
        Ok(())
    }

    /// For each of `keys`, in the order asked: the versions a read merges
    /// into its value, oldest first, and that value ([`KeyRead`]). More
    /// than one version only where several writers keep a version each (a
    /// cluster's data table, docs/scale-out.md "The merge rule"). The
    /// default reads each key's one value; a remote engine answers many
    /// keys per round trip (fsck reads every row this way).
    fn read_versions(&self, table: Table, keys: &[&[u8]]) -> Result<Vec<KeyRead>> {
        Ok(self
            .get_many(table, keys)?
            .into_iter()
            .map(|value| KeyRead {
                versions: value
                    .iter()
                    .map(|v| KeyVersion {
                        writer: String::new(),
                        value: v.clone(),
                    })
                    .collect(),
                value,
            })
            .collect())
    }

    /// Makes `value` the only version of `key`, or removes every version
    /// (`None`): where several writers keep versions, the others' are
    /// hidden rather than merged with it (fsck's repairs). The default is
    /// a put or a delete.
    fn replace(&self, table: Table, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        match value {
            Some(v) => b.put(table, key.to_vec(), v.to_vec()),
            None => b.delete(table, key.to_vec()),
        }
        self.write(b)
    }

    /// Drops, whole, the stretches of `table` (partitions) whose rows all
    /// have a base time below `floor`, and returns how many went. Only for
    /// engines partitioned by row time (a cluster's weekly partitions of
    /// the data and rollup tables, docs/scale-out.md "Retention"); the
    /// default drops nothing, as the embedded engine expires rows one by
    /// one in its compaction filter.
    fn drop_partitions_before(&self, table: Table, floor: u32) -> Result<u64> {
        let _ = (table, floor);
        Ok(0)
    }

    /// Moves what the engine's own journal holds into its tables and drops
    /// the journal, when it holds at least `min_journal_bytes`: a journal
    /// keeps every version of a key written since the last one, and keys
    /// uncompressed, the tables only the newest version, compactly. Waits
    /// briefly for other users of the engine; returns whether it did it.
    /// A no-op for engines without a journal.
    fn checkpoint(&self, min_journal_bytes: u64) -> Result<bool> {
        let _ = min_journal_bytes;
        Ok(false)
    }

    /// The first half of [`checkpoint`](KvStore::checkpoint), with reads
    /// and writes going on: what the journal holds is written into the
    /// tables (so reads find it there, not in memory), when the journal
    /// holds at least `min_journal_bytes`; the journal itself stays until
    /// a checkpoint drops it. A no-op for engines without a journal.
    fn flush_journal(&self, min_journal_bytes: u64) -> Result<()> {
        let _ = min_journal_bytes;
        Ok(())
    }

    /// Bytes used on disk (0 for memory stores).
    fn disk_space(&self) -> u64 {
        0
    }

    /// Bytes of [`disk_space`](KvStore::disk_space) the engine's own
    /// journal takes (0 for engines without one).
    fn journal_bytes(&self) -> u64 {
        0
    }

    /// Why the engine refuses writes now, if it does (a write failed and
    /// it has not been [recovered](KvStore::recover) yet).
    fn unavailable(&self) -> Option<String> {
        None
    }

    /// Brings a failed engine back once the disk takes writes again (at
    /// most one attempt per short interval; callers may call it often).
    /// `Ok` when the engine takes writes.
    fn recover(&self) -> Result<()> {
        Ok(())
    }

    /// Times a failed engine was brought back.
    fn reopens(&self) -> u64 {
        0
    }
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
