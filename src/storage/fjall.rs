//! The default embedded engine: fjall, an LSM-tree in pure Rust.
//! One fjall keyspace per logical table. Why fjall: docs/storage-engine.md.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use super::StripedLocks;
use ::fjall::compaction::filter::{CompactionFilter, Context, Factory, ItemAccessor, Verdict};
use ::fjall::config::{BlockSizePolicy, CompressionPolicy};
use ::fjall::{CompressionType, Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable};

use super::{
    Compaction, Durability, Health, Journal, KvSnapshot, KvStore, Mutation, Result, ScanIter,
    ScanRange, StorageError, Table, WriteBatch, counter_value,
};

/// Read-modify-write operations (increment, compare-and-set) take one of
/// these locks, picked by key hash; fjall has no native counters or CAS.
/// The store directory is locked by one process, so in-process locks are
/// enough for atomicity.
const RMW_STRIPES: usize = 64;

/// fjall's bound on its journals (its smallest allowed).
const JOURNAL_MAX_BYTES: u64 = 64 << 20;

/// Data blocks of the scanned tables (rows, rollups, the series index):
/// four times fjall's 4 KiB default, so a block's compression and its
/// index entry are shared by four times the rows. Measured on the devops
/// load (docs/durability.md, "The engine's tables"): 16 KiB blocks take
/// 4.5 % fewer bytes than 4 KiB ones, 64 KiB only 1.4 % fewer again, at
/// four times the bytes a point read decompresses.
const SCANNED_BLOCK_BYTES: u32 = 16 << 10;

/// Tables on level 0 of the row tables that start a compaction into
/// level 1 (see [`table_options`]).
const L0_TABLES_MERGED: u8 = 1;

/// How a table's keyspace is created. Only a new keyspace takes these:
/// fjall records them in the database when it creates the keyspace and
/// reads them back from there at every later open, so a store keeps the
/// settings it was created with (older stores: uncompressed blocks on
/// the first two levels), and every build reads either.
fn table_options(t: Table) -> KeyspaceCreateOptions {
    // fjall compresses only levels 2 and deeper by default; a flushed
    // memtable (level 0) and level 1 stay raw, and with a store of a few
    // GiB that is where every row sits. Row values are compact already
    // (docs/format/compressed-column.md), but keys repeat their metric,
    // hour and tag UIDs: LZ4 on every level takes the rows at rest from
    // 1.035 to 0.92 bytes a point and the series index to less than half.
    let options = KeyspaceCreateOptions::default()
        .data_block_compression_policy(CompressionPolicy::all(CompressionType::Lz4));
    let scanned = options
        .clone()
        .data_block_size_policy(BlockSizePolicy::all(SCANNED_BLOCK_BYTES));
    match t {
        // Rows are written again (an hour flushed under memory pressure,
        // then whole; late points): a table on level 0 is merged into
        // the next level at once, so the older version of a row goes
        // then, not after three more flushes (fjall's default of four).
        // A lone level-0 table whose rows overlap nothing is only moved.
        Table::Data | Table::Rollup => scanned.compaction_strategy(Arc::new(
            ::fjall::compaction::Leveled::default().with_l0_threshold(L0_TABLES_MERGED),
        )),
        Table::Index => scanned,
        // Point reads (UID lookups, meta counters, tree rules): the
        // default block keeps each read small.
        Table::Uid | Table::Meta | Table::Tree => options,
    }
}

/// Bytes the probe writes and syncs before a failed engine is reopened:
/// enough that the disk plainly takes writes again.
const PROBE_BYTES: usize = 256 << 10;

/// One open fjall database and its keyspaces.
struct Engine {
    db: Database,
    tables: [Keyspace; 6],
}

impl Engine {
    /// Opens the engine, making sure its next write is numbered above
    /// every write its tables hold.
    ///
    /// fjall takes its next sequence number from what it replays of its
    /// journal, and from the tables only when it found a journal to
    /// replay: opened without one (after [`Journal::checkpoint`] removed
    /// them, or a clean stop), it starts again from 0. A key written then
    /// carries a lower number than its older version in a table, and the
    /// next compaction keeps the older one: a row written again with late
    /// points, a UID counter or a meta counter would go back to what it
    /// was. The first open leaves an (empty) journal behind, so opening
    /// once more numbers on from the tables.
    fn open(path: &Path, opts: &FjallOptions) -> std::result::Result<Engine, ::fjall::Error> {
        let engine = Engine::open_once(path, opts)?;
        if engine.numbers_behind_tables() {
            drop(engine);
            let engine = Engine::open_once(path, opts)?;
            if engine.numbers_behind_tables() {
                tracing::error!(engine = %path.display(), "the storage engine numbers new writes below its tables' even after a second open; overwritten keys may read back their older values");
            }
            return Ok(engine);
        }
        Ok(engine)
    }

    /// The next write's sequence number is not above every one the
    /// tables hold (see [`Engine::open`]).
    fn numbers_behind_tables(&self) -> bool {
        use ::fjall::AbstractTree;
        let highest = self
            .tables
            .iter()
            .filter_map(|ks| ks.tree.get_highest_seqno())
            .max();
        highest.is_some_and(|h| self.db.seqno() <= h)
    }

    fn open_once(path: &Path, opts: &FjallOptions) -> std::result::Result<Engine, ::fjall::Error> {
        // fjall keeps up to 512 MiB of journal by default before it forces
        // memtables into tables; everything in it is also in rtsdb's own
        // WAL or already in rows, so the smallest bound it allows is kept.
        let mut builder = Database::builder(path)
            .cache_size(opts.cache_bytes.saturating_add(opts.rollup_cache_bytes))
            .max_journaling_size(JOURNAL_MAX_BYTES);
        let factory = |expiry: &Option<ExpiryFilter>| {
            expiry.as_ref().map(|e| {
                Arc::new(ExpiryFactory(std::panic::AssertUnwindSafe(e.clone()))) as Arc<dyn Factory>
            })
        };
        let (data, rollup) = (factory(&opts.data_expiry), factory(&opts.rollup_expiry));
        if data.is_some() || rollup.is_some() {
            builder = builder.with_compaction_filter_factories(Arc::new(move |keyspace: &str| {
                if keyspace == Table::Data.name() {
                    data.clone()
                } else if keyspace == Table::Rollup.name() {
                    rollup.clone()
                } else {
                    None
                }
            }));
        }
        let db = builder.open()?;
        let open = |t: Table| db.keyspace(t.name(), || table_options(t));
        let tables = [
            open(Table::Data)?,
            open(Table::Uid)?,
            open(Table::Meta)?,
            open(Table::Index)?,
            open(Table::Tree)?,
            open(Table::Rollup)?,
        ];
        Ok(Engine { db, tables })
    }

    fn ks(&self, t: Table) -> &Keyspace {
        match t {
            Table::Data => &self.tables[0],
            Table::Uid => &self.tables[1],
            Table::Meta => &self.tables[2],
            Table::Index => &self.tables[3],
            Table::Tree => &self.tables[4],
            Table::Rollup => &self.tables[5],
        }
    }
}

/// The fjall store. fjall refuses every write for good once one journal
/// write or sync failed ("poisoned": after a failed fsync nothing it holds
/// in memory can be trusted to match the disk). So the engine sits behind
/// a lock: a failed write marks the store failed (writes are then refused
/// at once, naming the first cause), and [`Health::recover`] reopens the
/// engine from its files once a probe shows the disk takes writes again.
/// Reopening replays fjall's own journal, cutting off a torn tail; every
/// write that reported success was in it, and every failed one reported
/// its failure to its caller (who still holds the data: rtsdb's WAL
/// segments are only deleted after the store synced their points).
pub(crate) struct FjallStore {
    path: PathBuf,
    opts: FjallOptions,
    /// `None` only while a reopen failed.
    engine: RwLock<Option<Arc<Engine>>>,
    /// Set while `failure` holds why the engine cannot take writes.
    failing: AtomicBool,
    failure: Mutex<Option<String>>,
    reopens: AtomicU64,
    rmw: StripedLocks,
}

/// The entries of `range` in `ks`, from its start to its stop (an empty
/// stop: the end of the table), for scans and visits alike.
fn range_of(ks: &Keyspace, range: &ScanRange) -> ::fjall::Iter {
    if range.stop.is_empty() {
        ks.range(range.start.clone()..)
    } else {
        ks.range(range.start.clone()..range.stop.clone())
    }
}

/// [`KvStore::visit`] on fjall: each entry's key and value are the
/// engine's own slices (a cached block's bytes), lent to `visit` without a
/// copy into a `Vec` each, which [`KvStore::scan`] makes.
fn visit_range(
    engine: &Engine,
    table: Table,
    range: &ScanRange,
    visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<()> {
    for g in range_of(engine.ks(table), range).take(range.limit.unwrap_or(usize::MAX)) {
        let (k, v) = g.into_inner().map_err(err)?;
        if !visit(&k, &v) {
            break;
        }
    }
    Ok(())
}

fn err(e: ::fjall::Error) -> StorageError {
    use ::fjall::LsmError as L;
    match e {
        // What the engine found in its files does not check out: the
        // store is damaged, and the error names the way back.
        ::fjall::Error::Storage(
            L::ChecksumMismatch { .. }
            | L::Decompress(_)
            | L::InvalidTag(_)
            | L::InvalidTrailer
            | L::InvalidHeader(_)
            | L::InvalidVersion(_)
            | L::Unrecoverable,
        )
        | ::fjall::Error::JournalRecovery(_) => StorageError::Damaged(e.to_string()),
        other => StorageError::Engine(other.to_string()),
    }
}

/// What an engine error says about the disk, readably (fjall prints its
/// errors as Rust debug output).
fn cause_text(e: &::fjall::Error) -> String {
    match e {
        ::fjall::Error::Io(io) => io.to_string(),
        ::fjall::Error::Storage(::fjall::LsmError::Io(io)) => io.to_string(),
        other => other.to_string(),
    }
}

/// Decides, during the engine's compaction, that a data-table entry is
/// expired and can be dropped (retention).
pub(crate) type ExpiryFilter = Arc<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// Engine tuning. Defaults suit a single TSD on a small machine.
#[derive(Clone)]
pub struct FjallOptions {
    /// Block cache shared by all tables, bytes.
    pub cache_bytes: u64,
    /// Block cache added for the rollup tables, bytes
    /// (`tsd.rollups.cache_mb` when rollups are on). fjall keeps one cache
    /// for every keyspace, so this enlarges it: a long raw read then
    /// leaves room for the rollup blocks dashboards read again and again.
    pub rollup_cache_bytes: u64,
    /// Drops expired data rows in the engine's compactions.
    pub data_expiry: Option<ExpiryFilter>,
    /// The same for rollup rows (`tsdb-rollup`).
    pub rollup_expiry: Option<ExpiryFilter>,
}

impl std::fmt::Debug for FjallOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FjallOptions")
            .field("cache_bytes", &self.cache_bytes)
            .field("rollup_cache_bytes", &self.rollup_cache_bytes)
            .field("data_expiry", &self.data_expiry.is_some())
            .field("rollup_expiry", &self.rollup_expiry.is_some())
            .finish()
    }
}

struct ExpiryFactory(std::panic::AssertUnwindSafe<ExpiryFilter>);

struct ExpiryCompaction(ExpiryFilter);

impl Factory for ExpiryFactory {
    fn name(&self) -> &str {
        "rtsdb-retention"
    }

    fn make_filter(&self, _: &Context) -> Box<dyn CompactionFilter> {
        Box::new(ExpiryCompaction(self.0.0.clone()))
    }
}

impl CompactionFilter for ExpiryCompaction {
    fn filter_item(
        &mut self,
        item: ItemAccessor<'_>,
        _: &Context,
    ) -> ::fjall::compaction::filter::CompactionFilterResult {
        Ok(if (self.0)(item.key()) {
            Verdict::Remove
        } else {
            Verdict::Keep
        })
    }
}

impl Default for FjallOptions {
    fn default() -> Self {
        FjallOptions {
            cache_bytes: 64 << 20,
            rollup_cache_bytes: 0,
            data_expiry: None,
            rollup_expiry: None,
        }
    }
}

impl FjallStore {
    /// Opens the engine in `path`. An I/O failure is [`StorageError::Io`];
    /// any other failure is the engine refusing what it found
    /// ([`StorageError::Engine`]): damage.
    pub(crate) fn open(path: &Path, opts: &FjallOptions) -> Result<FjallStore> {
        let engine = Engine::open(path, opts).map_err(|e| match e {
            ::fjall::Error::Io(io) | ::fjall::Error::Storage(::fjall::LsmError::Io(io)) => {
                StorageError::Io(io)
            }
            other => err(other),
        })?;
        Ok(FjallStore {
            path: path.to_path_buf(),
            opts: opts.clone(),
            engine: RwLock::new(Some(Arc::new(engine))),
            failing: AtomicBool::new(false),
            failure: Mutex::new(None),
            reopens: AtomicU64::new(0),
            rmw: StripedLocks::new(RMW_STRIPES),
        })
    }

    /// Whether the journal holds at least `min_bytes` (an error while
    /// the engine refuses writes).
    fn journal_holds(&self, min_bytes: u64) -> Result<bool> {
        if self.failing.load(Ordering::Acquire) {
            return Err(self.unavailable_error());
        }
        Ok(journal_bytes(&self.path)? >= min_bytes)
    }

    /// Writes every table's memtable into a table, with reads and writes
    /// flowing: what the journal holds is then in the tables too.
    fn flush_memtables(&self) -> Result<()> {
        for ks in &self.engine()?.tables {
            ks.rotate_memtable_and_wait()
                .map_err(|e| self.write_error(e))?;
        }
        Ok(())
    }

    /// The open engine, or why there is none.
    fn engine(&self) -> Result<Arc<Engine>> {
        match &*self.engine.read() {
            Some(e) => Ok(e.clone()),
            None => Err(self.unavailable_error()),
        }
    }

    fn unavailable_error(&self) -> StorageError {
        StorageError::Unavailable {
            path: self.path.clone(),
            cause: self
                .failure
                .lock()
                .clone()
                .unwrap_or_else(|| "the engine is not open".into()),
        }
    }

    /// Turns a write's error into the store's: an I/O failure (or the
    /// poisoning one left) marks the engine failed, keeping the first
    /// cause, so later writes are refused at once and name it.
    fn write_error(&self, e: ::fjall::Error) -> StorageError {
        let io = matches!(
            e,
            ::fjall::Error::Io(_)
                | ::fjall::Error::Storage(::fjall::LsmError::Io(_))
                | ::fjall::Error::Poisoned
        );
        if !io {
            return err(e);
        }
        {
            let mut failure = self.failure.lock();
            if failure.is_none() {
                let cause = cause_text(&e);
                tracing::error!(engine = %self.path.display(), cause, "the storage engine failed a write; refusing writes until it can be reopened");
                *failure = Some(cause);
            }
        }
        self.failing.store(true, Ordering::Release);
        self.unavailable_error()
    }

    /// Writes, syncs and removes a scratch file beside the engine's
    /// directory: whether the disk takes writes again.
    fn probe(&self) -> std::io::Result<()> {
        let path = self.path.with_extension("probe");
        let r = (|| {
            let mut f = std::fs::File::create(&path)?;
            std::io::Write::write_all(&mut f, &vec![0u8; PROBE_BYTES])?;
            f.sync_all()
        })();
        let _ = std::fs::remove_file(&path);
        r
    }

    /// Reopens a failed engine: waits for every user of the old one to let
    /// go (fjall's directory lock is held until then), opens it again and
    /// syncs what its journal replay recovered.
    fn reopen(&self) -> std::result::Result<(), String> {
        let mut slot = self.engine.write();
        if let Some(old) = slot.take() {
            match sole_owner(old, Duration::from_secs(10)) {
                Ok(engine) => drop(engine),
                Err(still) => {
                    *slot = Some(still);
                    return Err("the failed engine is still in use".into());
                }
            }
        }
        let engine = Engine::open(&self.path, &self.opts).map_err(|e| cause_text(&e))?;
        engine
            .db
            .persist(PersistMode::SyncAll)
            .map_err(|e| cause_text(&e))?;
        // What the reopen recovered from fjall's journal was read back
        // from the page cache: make sure it is on the disk too, since the
        // sync that failed may have left it unwritten.
        sync_tree(&self.path).map_err(|e| e.to_string())?;
        *slot = Some(Arc::new(engine));
        Ok(())
    }

    fn put_one(&self, table: Table, key: &[u8], value: Vec<u8>, d: Durability) -> Result<()> {
        let mut b = WriteBatch::new();
        b.durability = d;
        b.put(table, key.to_vec(), value);
        self.write(b)
    }

    /// Loads `entries`, in ascending key order, into `table` of a store
    /// nothing else writes to (a backup being made) as table files, by
    /// fjall's bulk ingestion: no journal, no memtable. Returns how many
    /// entries it loaded; [`sync_all_files`](Self::sync_all_files) makes
    /// them durable.
    pub(crate) fn ingest(
        &self,
        table: Table,
        entries: impl Iterator<Item = Result<super::KeyValue>>,
    ) -> Result<u64> {
        let engine = self.engine()?;
        let mut ingestion = engine.ks(table).start_ingestion().map_err(err)?;
        let mut n = 0;
        for entry in entries {
            let (k, v) = entry?;
            ingestion.write(k, v).map_err(err)?;
            n += 1;
        }
        ingestion.finish().map_err(err)?;
        Ok(n)
    }

    /// Syncs the engine and then every file and directory it has.
    pub(crate) fn sync_all_files(&self) -> Result<()> {
        self.sync()?;
        Ok(sync_tree(&self.path)?)
    }

    /// Forces the engine's own compaction on every table (benchmarks,
    /// size measurements).
    pub(crate) fn major_compact(&self) -> Result<()> {
        let engine = self.engine()?;
        for ks in &engine.tables {
            ks.rotate_memtable_and_wait().map_err(err)?;
            ks.major_compact().map_err(err)?;
        }
        Ok(())
    }
}

/// fjall's cross-keyspace snapshot, with the engine it reads kept open
/// (a reopen waits for it).
struct FjallSnapshot {
    engine: Arc<Engine>,
    snapshot: ::fjall::Snapshot,
}

impl KvSnapshot for FjallSnapshot {
    fn scan_all(&self, table: Table) -> ScanIter<'_> {
        Box::new(self.snapshot.iter(self.engine.ks(table)).map(|g| {
            g.into_inner()
                .map(|(k, v)| (k.to_vec(), v.to_vec()))
                .map_err(err)
        }))
    }
}

/// The engine itself once every other user let go of it (within
/// `patience`), or the shared handle back.
fn sole_owner(
    mut shared: Arc<Engine>,
    patience: Duration,
) -> std::result::Result<Engine, Arc<Engine>> {
    let deadline = Instant::now() + patience;
    loop {
        match Arc::try_unwrap(shared) {
            Ok(engine) => return Ok(engine),
            Err(still) if Instant::now() < deadline => {
                shared = still;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(still) => return Err(still),
        }
    }
}

/// Bytes the engine's journal files in `dir` take on disk. Not their
/// length: fjall allocates each journal file at its full size up front,
/// as a sparse file.
pub(crate) fn journal_bytes(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut bytes = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.path().extension().is_some_and(|e| e == "jnl") {
            bytes += entry.metadata()?.blocks() * 512;
        }
    }
    Ok(bytes)
}

/// Deletes the engine's journal files in `dir` (the engine closed, with
/// everything they held in its tables); returns the bytes freed.
fn remove_journals(dir: &Path) -> std::io::Result<u64> {
    let mut freed = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.path().extension().is_some_and(|e| e == "jnl") {
            freed += entry.metadata()?.len();
            std::fs::remove_file(entry.path())?;
        }
    }
    std::fs::File::open(dir)?.sync_all()?;
    Ok(freed)
}

/// fsyncs every file and directory under `dir`. A file the engine's
/// background work removed since it was listed needs no sync.
fn sync_tree(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let synced = if entry.file_type()?.is_dir() {
            sync_tree(&entry.path())
        } else {
            std::fs::File::open(entry.path()).and_then(|f| f.sync_all())
        };
        match synced {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    std::fs::File::open(dir)?.sync_all()
}

/// Flushes everything into table files, compacts, closes, then deletes the
/// engine's journal: after a clean flush it only repeats what the tables
/// hold, and fjall keeps up to 64 MB of it otherwise. Run only with the
/// store closed everywhere else (the caller holds the store's lock); fjall
/// starts a fresh journal on the next open. Returns the bytes freed.
pub(crate) fn flush_and_trim_journal(path: &Path) -> Result<u64> {
    {
        let store = FjallStore::open(path, &FjallOptions::default())?;
        store.major_compact()?;
        store.sync()?;
        if store
            .engine()?
            .tables
            .iter()
            .any(|ks| ks.sealed_memtable_count() > 0)
        {
            return Ok(0);
        }
    }
    Ok(remove_journals(path)?)
}

fn persist_mode(d: Durability) -> PersistMode {
    match d {
        Durability::Process => PersistMode::Buffer,
        Durability::Sync => PersistMode::SyncData,
    }
}

impl KvStore for FjallStore {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self
            .engine()?
            .ks(table)
            .get(key)
            .map_err(err)?
            .map(|v| v.to_vec()))
    }

    fn write(&self, batch: WriteBatch) -> Result<()> {
        // Always set a persist mode: without one fjall keeps the batch in
        // a userspace buffer that a crash loses.
        if self.failing.load(Ordering::Acquire) {
            return Err(self.unavailable_error());
        }
        let engine = self.engine()?;
        let mut b = engine
            .db
            .batch()
            .durability(Some(persist_mode(batch.durability)));
        for m in batch.mutations {
            match m {
                Mutation::Put { table, key, value } => b.insert(engine.ks(table), key, value),
                Mutation::Delete { table, key } => b.remove(engine.ks(table), key),
            }
        }
        b.commit().map_err(|e| self.write_error(e))
    }

    fn scan<'a>(&'a self, table: Table, range: &ScanRange) -> ScanIter<'a> {
        let engine = match self.engine() {
            Ok(e) => e,
            Err(e) => return Box::new(std::iter::once(Err(e))),
        };
        let iter = range_of(engine.ks(table), range);
        // The iterator keeps the engine it reads open (a reopen waits).
        let it = iter.map(move |g| {
            let _engine = &engine;
            g.into_inner()
                .map(|(k, v)| (k.to_vec(), v.to_vec()))
                .map_err(err)
        });
        match range.limit {
            Some(n) => Box::new(it.take(n)),
            None => Box::new(it),
        }
    }

    fn visit(
        &self,
        table: Table,
        range: &ScanRange,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        // The engine stays open while it is read (a reopen waits).
        visit_range(&*self.engine()?, table, range, visit)
    }

    fn increment(&self, table: Table, key: &[u8], delta: i64, d: Durability) -> Result<i64> {
        let _g = self.rmw.lock(table as u64, key);
        let cur = self.get(table, key)?;
        let v = counter_value(table, key, cur.as_deref())?.wrapping_add(delta);
        self.put_one(table, key, v.to_be_bytes().to_vec(), d)?;
        Ok(v)
    }

    fn compare_and_set(
        &self,
        table: Table,
        key: &[u8],
        expected: Option<&[u8]>,
        new: &[u8],
        d: Durability,
    ) -> Result<bool> {
        let _g = self.rmw.lock(table as u64, key);
        if self.get(table, key)?.as_deref() != expected {
            return Ok(false);
        }
        self.put_one(table, key, new.to_vec(), d)?;
        Ok(true)
    }

    fn sync(&self) -> Result<()> {
        if self.failing.load(Ordering::Acquire) {
            return Err(self.unavailable_error());
        }
        self.engine()?
            .db
            .persist(PersistMode::SyncAll)
            .map_err(|e| self.write_error(e))
    }

    fn snapshot(&self) -> Result<Box<dyn KvSnapshot>> {
        let engine = self.engine()?;
        let snapshot = engine.db.snapshot();
        Ok(Box::new(FjallSnapshot { engine, snapshot }))
    }

    fn journal(&self) -> Option<&dyn Journal> {
        Some(self)
    }

    fn compaction(&self) -> Option<&dyn Compaction> {
        Some(self)
    }

    fn health(&self) -> Option<&dyn Health> {
        Some(self)
    }
}

impl Compaction for FjallStore {
    fn compact(&self) -> Result<()> {
        self.major_compact()
    }
}

impl Health for FjallStore {
    fn unavailable(&self) -> Option<String> {
        if !self.failing.load(Ordering::Acquire) {
            return None;
        }
        Some(self.unavailable_error().to_string())
    }

    fn recover(&self) -> Result<()> {
        if !self.failing.load(Ordering::Acquire) {
            return Ok(());
        }
        if let Err(e) = self.probe() {
            tracing::debug!(error = %e, "the disk still refuses writes");
            return Err(self.unavailable_error());
        }
        if let Err(cause) = self.reopen() {
            tracing::warn!(engine = %self.path.display(), cause, "reopening the storage engine failed; will retry");
            return Err(self.unavailable_error());
        }
        *self.failure.lock() = None;
        self.failing.store(false, Ordering::Release);
        self.reopens.fetch_add(1, Ordering::Relaxed);
        tracing::info!(engine = %self.path.display(), "the storage engine was reopened and takes writes again");
        Ok(())
    }

    fn reopens(&self) -> u64 {
        self.reopens.load(Ordering::Relaxed)
    }
}

impl Journal for FjallStore {
    fn disk_space(&self) -> u64 {
        self.engine()
            .ok()
            .and_then(|e| e.db.disk_space().ok())
            .unwrap_or(0)
    }

    fn bytes(&self) -> u64 {
        journal_bytes(&self.path).unwrap_or(0)
    }

    fn flush(&self, min_journal_bytes: u64) -> Result<()> {
        if self.journal_holds(min_journal_bytes)? {
            self.flush_memtables()?;
        }
        Ok(())
    }

    fn checkpoint(&self, min_journal_bytes: u64) -> Result<bool> {
        if !self.journal_holds(min_journal_bytes)? {
            return Ok(false);
        }
        // Most of the flushing, with reads and writes still flowing.
        self.flush_memtables()?;
        let mut slot = self.engine.write();
        let Some(shared) = slot.take() else {
            return Err(self.unavailable_error());
        };
        // A long scan or a backup's snapshot holds the engine: try again
        // at the next checkpoint rather than wait for it.
        let engine = match sole_owner(shared, Duration::from_secs(1)) {
            Ok(engine) => engine,
            Err(still) => {
                *slot = Some(still);
                return Ok(false);
            }
        };
        // Nothing can write now: what came in since the first round is
        // flushed too, and then the tables hold everything the journal
        // does.
        let flushed = engine
            .tables
            .iter()
            .try_for_each(|ks| ks.rotate_memtable_and_wait())
            .and_then(|()| engine.db.persist(PersistMode::SyncAll));
        if let Err(e) = flushed {
            *slot = Some(Arc::new(engine));
            return Err(self.write_error(e));
        }
        if engine
            .tables
            .iter()
            .any(|ks| ks.sealed_memtable_count() > 0)
        {
            *slot = Some(Arc::new(engine));
            return Ok(false);
        }
        drop(engine);
        let reopened = remove_journals(&self.path)
            .map_err(|e| e.to_string())
            .and_then(|_| Engine::open(&self.path, &self.opts).map_err(|e| cause_text(&e)));
        match reopened {
            Ok(engine) => {
                *slot = Some(Arc::new(engine));
                Ok(true)
            }
            Err(cause) => {
                // `recover` reopens it once it can.
                tracing::error!(engine = %self.path.display(), cause, "reopening the storage engine after moving its journal into tables failed");
                *self.failure.lock() = Some(cause);
                self.failing.store(true, Ordering::Release);
                Err(self.unavailable_error())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::storage::{Compaction, Journal};

    #[test]
    fn conformance() {
        let dir = tempfile::tempdir().unwrap();
        let store = super::FjallStore::open(dir.path(), &Default::default()).unwrap();
        super::super::conformance::run(Arc::new(store));
    }

    /// fjall numbers writes from 0 again when it opens without a journal;
    /// a key written after a checkpoint must still win over its older
    /// version once both are in tables and compacted.
    #[test]
    fn a_key_written_again_after_a_checkpoint_keeps_its_new_value_through_compaction() {
        use super::super::{KvStore, Table, WriteBatch};
        let dir = tempfile::tempdir().unwrap();
        let store = super::FjallStore::open(dir.path(), &Default::default()).unwrap();
        let write = |store: &super::FjallStore, value: &[u8]| {
            let mut b = WriteBatch::new();
            for i in 0u32..200 {
                b.put(Table::Data, i.to_be_bytes().to_vec(), b"other".to_vec());
            }
            b.put(Table::Data, b"row".to_vec(), value.to_vec());
            store.write(b).unwrap();
        };
        write(&store, b"old");
        assert!(store.checkpoint(0).unwrap());
        write(&store, b"new");
        assert!(store.checkpoint(0).unwrap());
        store.compact().unwrap();
        assert_eq!(
            store.get(Table::Data, b"row").unwrap(),
            Some(b"new".to_vec())
        );
        // And after the store is opened again from its tables alone.
        drop(store);
        let store = super::FjallStore::open(dir.path(), &Default::default()).unwrap();
        write(&store, b"newest");
        assert!(store.checkpoint(0).unwrap());
        store.compact().unwrap();
        assert_eq!(
            store.get(Table::Data, b"row").unwrap(),
            Some(b"newest".to_vec())
        );
    }

    #[test]
    fn a_flushed_journal_stays_until_a_checkpoint_and_nothing_is_lost() {
        use super::super::{KvStore, Table, WriteBatch};
        let dir = tempfile::tempdir().unwrap();
        let store = super::FjallStore::open(dir.path(), &Default::default()).unwrap();
        let row = |i: u32, round: u8| (i.to_be_bytes().to_vec(), vec![round; 100]);
        let write = |store: &super::FjallStore, round: u8| {
            let mut b = WriteBatch::new();
            for i in 0..2000 {
                let (k, v) = row(i, round);
                b.put(Table::Data, k, v);
            }
            store.write(b).unwrap();
            store.sync().unwrap();
        };
        write(&store, 1);
        let before = super::journal_bytes(dir.path()).unwrap();
        // Below the threshold: nothing moves.
        Journal::flush(&store, before * 2).unwrap();
        Journal::flush(&store, 1).unwrap();
        // Flushed into tables, the journal still there.
        assert!(super::journal_bytes(dir.path()).unwrap() >= before);
        // Written again after the flush: the newer values win, through
        // a checkpoint and through a reopen from the files.
        write(&store, 2);
        assert!(store.checkpoint(1).unwrap());
        assert!(super::journal_bytes(dir.path()).unwrap() < before);
        for i in [0, 1999] {
            assert_eq!(
                store.get(Table::Data, &row(i, 2).0).unwrap(),
                Some(row(i, 2).1)
            );
        }
        drop(store);
        let store = super::FjallStore::open(dir.path(), &Default::default()).unwrap();
        for i in [0, 1000, 1999] {
            assert_eq!(
                store.get(Table::Data, &row(i, 2).0).unwrap(),
                Some(row(i, 2).1)
            );
        }
    }

    #[test]
    fn a_checkpoint_moves_the_journal_into_tables_and_keeps_every_write() {
        use super::super::{KvStore, Table, WriteBatch};
        let dir = tempfile::tempdir().unwrap();
        let store = super::FjallStore::open(dir.path(), &Default::default()).unwrap();
        let row = |i: u32| (i.to_be_bytes().to_vec(), vec![(i % 251) as u8; 300]);
        // Every row written twice: the journal holds both versions.
        for _ in 0..2 {
            let mut b = WriteBatch::new();
            for i in 0..5000 {
                let (k, v) = row(i);
                b.put(Table::Data, k, v);
            }
            b.put(Table::Uid, b"name".to_vec(), b"uid".to_vec());
            store.write(b).unwrap();
        }
        store.sync().unwrap();
        let before = super::journal_bytes(dir.path()).unwrap();
        assert!(before > 2 * 5000 * 300, "{before}");
        // Below the threshold nothing happens.
        assert!(!store.checkpoint(before * 2).unwrap());
        assert!(store.checkpoint(1).unwrap());
        let after = super::journal_bytes(dir.path()).unwrap();
        assert!(after < before / 10, "journal {before} -> {after} bytes");
        for i in [0, 2500, 4999] {
            let (k, v) = row(i);
            assert_eq!(store.get(Table::Data, &k).unwrap(), Some(v));
        }
        assert_eq!(
            store.get(Table::Uid, b"name").unwrap(),
            Some(b"uid".to_vec())
        );
        // The reopened engine takes writes, and everything survives a
        // reopen from the files.
        store
            .write({
                let mut b = WriteBatch::new();
                b.put(Table::Meta, b"late".to_vec(), b"1".to_vec());
                b
            })
            .unwrap();
        store.sync().unwrap();
        drop(store);
        let store = super::FjallStore::open(dir.path(), &Default::default()).unwrap();
        assert_eq!(
            store
                .scan(Table::Data, &super::super::ScanRange::new(vec![], vec![]))
                .count(),
            5000
        );
        assert_eq!(
            store.get(Table::Meta, b"late").unwrap(),
            Some(b"1".to_vec())
        );
    }
}
