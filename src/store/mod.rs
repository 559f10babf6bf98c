//! A store: the tables of one deployment laid out on one storage engine
//! (the embedded one in a data directory with its header, or a
//! cluster's, `cluster.rs`), opened with its recorded layout enforced,
//! plus the data-row operations everything above builds on (read,
//! merge-write and scan hourly rows; `rows.rs` states what they
//! guarantee on every engine). The database handle holds one `Store`
//! and reaches rows only through its methods; the engine below is
//! reached only from here, through [`crate::storage::KvStore`] and the
//! capabilities the engine has.
//!
//! The same engine keeps the other tables; the store hands out their
//! implementations of the upper layers' persistence traits
//! ([`uid_store`](Store::uid_store), [`index_store`](Store::index_store),
//! [`meta_store`](Store::meta_store)).

pub(crate) mod annotations;
pub mod cluster;
pub mod header;
pub mod histograms;
pub(crate) mod index_table;
pub(crate) mod meta_table;
pub mod read;
pub(crate) mod retention;
pub mod rollup_table;
pub mod rows;
pub mod salvage;
pub mod snapshot;
pub(crate) mod tree_table;
pub(crate) mod uid_table;

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use thiserror::Error;

use crate::codec::column::ColumnError;
use crate::codec::qualifier::StoredPoint;
use crate::codec::row::{self, Cell, DecodedRow, DuplicatePolicy, RowCells, RowEncoding, RowError};
use crate::codec::row_key::{KeyError, KeyLayout, Salt};
use crate::index::IndexStore;
use crate::meta::MetaStore;
use crate::model::Tsuid;
use crate::model::point::{Timestamp, Value};
use crate::model::row_span::BeyondLastRow;
use crate::model::uid::UidWidths;
pub use crate::storage::Durability;
use crate::storage::fjall::{FjallOptions, FjallStore};
use crate::storage::memory::MemoryStore;
use crate::storage::{
    Journal, KeyRead, KeyVersion, KvStore, ScanRange, StorageError, StripedLocks, Table,
    WriteBatch, prefix_end,
};
use crate::uid::UidStore;

pub use header::StoreHeader;

pub(crate) const ENGINE_DIR: &str = "fjall";
/// Directory of the write-ahead log inside the data directory: the store
/// names it because salvage and backup copy it with the engine's files.
pub const WAL_DIR: &str = "wal";
pub(crate) const LOCK_FILE: &str = "LOCK";
const ROW_LOCK_STRIPES: usize = 256;

#[derive(Debug, Error)]
pub enum StoreError {
    #[error(
        "store at {dir} was created with {setting} = {stored}, but this configuration asks for {requested}; the layout of a store cannot change (export with `tsdb scan --import` and re-import into a new store)"
    )]
    LayoutMismatch {
        dir: String,
        setting: &'static str,
        stored: String,
        requested: String,
    },
    #[error("invalid store header: {0}")]
    BadHeader(String),
    #[error(
        "store at {dir} has format version {found}, {}; this build reads versions {} to {supported}",
        if found > supported { "newer than this build" } else { "older than any this build reads" },
        header::OLDEST_READABLE_VERSION
    )]
    UnsupportedVersion {
        dir: String,
        found: u32,
        supported: u32,
    },
    /// The header and the UID table disagree: the header was edited, or
    /// belongs to another store.
    #[error(
        "store header {header} does not describe this store: {contradiction}; the header was edited or copied from another store: put back the values the store was created with"
    )]
    HeaderContradicted {
        header: String,
        contradiction: String,
    },
    /// The engine's files are damaged: the store is not served, and the
    /// way back is named.
    #[error(
        "store at {dir} is damaged: {cause}; refusing to serve from it. `tsdb fsck --data-dir {dir} --salvage NEW_DIR` copies every readable entry into a new store at NEW_DIR and reports what was lost (docs/durability.md)"
    )]
    Damaged { dir: String, cause: String },
    /// Salvage found the engine unopenable even without its damaged
    /// journal stretches.
    #[error(
        "nothing can be salvaged from the store at {dir}: the engine cannot be opened even with the damaged journal batches cut out (the damage is in a table file's index, filter or trailer, or in the engine's version files): {cause}; restore the latest backup (docs/backup.md)"
    )]
    CannotSalvage { dir: String, cause: String },
    #[error(
        "{0} holds engine files but no store header ({file}); refusing to guess its layout",
        file = header::HEADER_FILE
    )]
    MissingHeader(String),
    #[error(
        "store at {0} is in use by another process (a running TSD?); stop it or point --data-dir elsewhere"
    )]
    Locked(String),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error(transparent)]
    Column(#[from] ColumnError),
    /// A point or annotation past the last row a key can name.
    #[error(transparent)]
    BeyondLastRow(#[from] BeyondLastRow),
    #[error("row {key}: {cause}")]
    Row { key: String, cause: RowError },
    #[error("row {key}: {cause}")]
    BadRow { key: String, cause: ColumnError },
    #[error("annotation in row {key}: {message}")]
    BadAnnotation { key: String, message: String },
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// What the caller asks for when opening a store. Layout settings left at
/// `None` take whatever the store recorded; settings given must match it.
#[derive(Debug, Clone, Default)]
pub struct StoreOptions {
    pub metric_width: Option<u8>,
    pub tagk_width: Option<u8>,
    pub tagv_width: Option<u8>,
    pub salt_width: Option<u8>,
    pub salt_buckets: Option<u32>,
    pub duplicates: DuplicatePolicy,
    pub encoding: RowEncoding,
    /// `tsd.storage.row_encoding` when set: a cluster created with another
    /// encoding refuses it (an embedded store takes any, per row).
    pub explicit_encoding: Option<RowEncoding>,
    pub retention: Arc<retention::Retention>,
    pub engine: FjallOptions,
}

impl StoreOptions {
    fn layout_for_new_store(&self) -> Result<KeyLayout> {
        let w = |v: Option<u8>| {
            crate::model::UidWidth::new(v.unwrap_or(3))
                .map_err(|e| StoreError::BadHeader(e.to_string()))
        };
        let defaults = Salt::default();
        let layout = KeyLayout {
            widths: UidWidths {
                metric: w(self.metric_width)?,
                tagk: w(self.tagk_width)?,
                tagv: w(self.tagv_width)?,
            },
            salt: Salt {
                width: self.salt_width.unwrap_or(defaults.width),
                buckets: self.salt_buckets.unwrap_or(defaults.buckets),
            },
        };
        header::validate_salt(&layout.salt)?;
        Ok(layout)
    }

    fn check(&self, dir: &Path, stored: &KeyLayout) -> Result<()> {
        let checks: [(&'static str, Option<u64>, u64); 5] = [
            (
                "tsd.storage.uid.width.metric",
                self.metric_width.map(u64::from),
                stored.widths.metric.bytes() as u64,
            ),
            (
                "tsd.storage.uid.width.tagk",
                self.tagk_width.map(u64::from),
                stored.widths.tagk.bytes() as u64,
            ),
            (
                "tsd.storage.uid.width.tagv",
                self.tagv_width.map(u64::from),
                stored.widths.tagv.bytes() as u64,
            ),
            (
                "tsd.storage.salt.width",
                self.salt_width.map(u64::from),
                stored.salt.width as u64,
            ),
            (
                "tsd.storage.salt.buckets",
                self.salt_buckets.map(u64::from),
                stored.salt.buckets as u64,
            ),
        ];
        for (setting, requested, stored) in checks {
            if let Some(r) = requested
                && r != stored
            {
                return Err(StoreError::LayoutMismatch {
                    dir: dir.display().to_string(),
                    setting,
                    stored: stored.to_string(),
                    requested: r.to_string(),
                });
            }
        }
        Ok(())
    }
}

/// Whether the engine takes writes ([`Store::health`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StorageHealth {
    /// Why the engine refuses writes now (a write failed, a full disk),
    /// if it does.
    pub unavailable: Option<String>,
    /// Times the engine was brought back after refusing writes.
    pub reopens: u64,
}

/// Hourly rows a query reads key by key, on an engine a round trip away,
/// before a scan of the metric's rows is the cheaper read: keys are asked
/// for a few hundred per round trip (to ClickHouse), so a one-series
/// query from 2013 to now (120,000 hours, most of them empty) would take
/// hundreds of round trips, where a scan pages through only the rows that
/// exist.
const REMOTE_POINT_READS: u64 = 16 * 1024;

/// How queries read a store, which follows from where its engine is
/// ([`Store::read_plan`]): in this process, where a read is a local probe
/// and threads help, or a round trip away, where they only queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadPlan {
    /// Threads a query over many series may read them with: every core
    /// (up to 8) of an engine in this process; one for an engine a round
    /// trip away (a cluster's ClickHouse spreads each read over its
    /// servers, and more concurrent statements would only queue).
    pub threads: usize,
    /// Whether a read of a few rows is a short job on this machine (the
    /// engine is in this process), not a wait on other servers.
    pub local: bool,
}

impl ReadPlan {
    fn for_engine(kv: &dyn KvStore) -> ReadPlan {
        if kv.seeks_are_cheap() {
            ReadPlan {
                threads: std::thread::available_parallelism().map_or(1, |n| n.get().min(8)),
                local: true,
            }
        } else {
            ReadPlan {
                threads: 1,
                local: false,
            }
        }
    }

    /// Whether reading `series` series' rows over `[start_ms, end_ms]`
    /// key by key is the right read: always on a local engine (a lookup
    /// is a local B-tree probe), on a remote one only up to
    /// [`REMOTE_POINT_READS`] rows.
    pub fn point_reads_pay(&self, series: usize, start_ms: u64, end_ms: u64) -> bool {
        let hours = end_ms.saturating_sub(start_ms) / crate::model::row_span::ROW_SPAN_MS + 1;
        self.local || hours.saturating_mul(series as u64) <= REMOTE_POINT_READS
    }
}

/// An open store. Cheap to share behind an `Arc`.
pub struct Store {
    kv: Arc<dyn KvStore>,
    /// Whether other processes write these tables too (a cluster's TSDs):
    /// see [`Store::shared`].
    shared: bool,
    read_plan: ReadPlan,
    uids: Arc<uid_table::KvUidStore>,
    index: Arc<index_table::KvIndexStore>,
    meta: Arc<meta_table::KvMetaStore>,
    layout: KeyLayout,
    duplicates: DuplicatePolicy,
    encoding: RowEncoding,
    retention: Arc<retention::Retention>,
    dir: Option<PathBuf>,
    /// Serialises read-modify-write of one data row (by key hash).
    row_locks: StripedLocks,
    _lock: Option<File>,
}

impl Store {
    /// Opens the store in `dir`, creating it (and recording its layout) if
    /// the directory is empty or missing.
    pub fn open(dir: &Path, opts: &StoreOptions) -> Result<Store> {
        fs::create_dir_all(dir)?;
        // A lock held for a moment (a process exiting, or a child process
        // that inherited the descriptor between fork and exec) is waited
        // out briefly; a lock that stays held is a running TSD.
        let lock = lock_dir(dir, std::time::Duration::from_secs(2))?;
        let engine_dir = dir.join(ENGINE_DIR);
        let mut upgrade_from = None;
        let layout = match StoreHeader::read(dir)? {
            Some(h) => {
                if h.format_version < header::FORMAT_VERSION {
                    upgrade_from = Some(h.format_version);
                }
                if h.engine != "fjall" {
                    return Err(StoreError::BadHeader(format!(
                        "store at {} uses engine '{}', this build opens 'fjall' stores",
                        dir.display(),
                        h.engine
                    )));
                }
                let layout = h.layout()?;
                opts.check(dir, &layout)?;
                layout
            }
            None => {
                if engine_dir.exists() && fs::read_dir(&engine_dir)?.next().is_some() {
                    return Err(StoreError::MissingHeader(dir.display().to_string()));
                }
                let layout = opts.layout_for_new_store()?;
                StoreHeader::new(&layout, "fjall").write_new(dir)?;
                tracing::info!(dir = %dir.display(), ?layout, "created new store");
                layout
            }
        };
        let mut engine = opts.engine.clone();
        if opts.retention.is_enabled() {
            let (retention, layout) = (opts.retention.clone(), layout);
            engine.data_expiry = Some(Arc::new(move |key: &[u8]| {
                retention.expired(&layout, key, retention::now_s())
            }));
            let retention = opts.retention.clone();
            engine.rollup_expiry = Some(Arc::new(move |key: &[u8]| {
                retention.rollup_expired(&layout, key, retention::now_s())
            }));
        }
        create_engine_whole(&engine_dir, &engine)?;
        let damaged = crate::storage::fjall_journal::check_dir(&engine_dir)?;
        if let Some(j) = damaged.first() {
            return Err(StoreError::Damaged {
                dir: dir.display().to_string(),
                cause: j.describe_damage(),
            });
        }
        let kv: Arc<dyn KvStore> = match FjallStore::open(&engine_dir, &engine) {
            Ok(kv) => Arc::new(kv),
            Err(StorageError::Damaged(cause)) => {
                return Err(StoreError::Damaged {
                    dir: dir.display().to_string(),
                    cause,
                });
            }
            // A length or offset read from a damaged file that the OS
            // refuses (EINVAL) or that runs past the file's end.
            Err(StorageError::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::InvalidInput
                        | std::io::ErrorKind::InvalidData
                        | std::io::ErrorKind::UnexpectedEof
                ) =>
            {
                return Err(StoreError::Damaged {
                    dir: dir.display().to_string(),
                    cause: format!("reading the engine's files: {e}"),
                });
            }
            Err(e) => return Err(e.into()),
        };
        let contradiction = uid_table::widths_contradiction(&kv, layout.widths).map_err(|e| {
            StoreError::BadHeader(format!("checking it against the UID table: {e}"))
        })?;
        if let Some(contradiction) = contradiction {
            return Err(StoreError::HeaderContradicted {
                header: dir.join(header::HEADER_FILE).display().to_string(),
                contradiction,
            });
        }
        if let Some(from) = upgrade_from {
            // Checked against the UID table above, so the values written
            // with a checksum now are the ones the store was created with.
            StoreHeader::new(&layout, "fjall").write_new(dir)?;
            tracing::info!(dir = %dir.display(), from, to = header::FORMAT_VERSION, "upgraded the store header in place");
        }
        let mut store = Store::assemble(
            kv,
            layout,
            opts.duplicates,
            Some(dir.to_path_buf()),
            Some(lock),
        );
        store.encoding = opts.encoding;
        store.retention = opts.retention.clone();
        Ok(store)
    }

    /// Compacts a closed store as small as it gets: every table merged and
    /// the engine's journal dropped once its contents are in tables. Takes
    /// the store's lock, so it refuses while a TSD runs.
    pub fn compact_offline(dir: &Path) -> Result<u64> {
        let _lock = lock_dir(dir, std::time::Duration::ZERO)?;
        if StoreHeader::read(dir)?.is_none() {
            return Err(StoreError::MissingHeader(dir.display().to_string()));
        }
        Ok(crate::storage::fjall::flush_and_trim_journal(
            &dir.join(ENGINE_DIR),
        )?)
    }

    /// A store in memory (tests, tools); nothing is written to disk.
    pub fn in_memory(layout: KeyLayout, duplicates: DuplicatePolicy) -> Store {
        Store::assemble(Arc::new(MemoryStore::new()), layout, duplicates, None, None)
    }

    fn assemble(
        kv: Arc<dyn KvStore>,
        layout: KeyLayout,
        duplicates: DuplicatePolicy,
        dir: Option<PathBuf>,
        lock: Option<File>,
    ) -> Store {
        Store {
            shared: false,
            read_plan: ReadPlan::for_engine(&*kv),
            uids: Arc::new(uid_table::KvUidStore::new(kv.clone(), layout.widths)),
            index: Arc::new(index_table::KvIndexStore::new(kv.clone())),
            meta: Arc::new(meta_table::KvMetaStore::new(kv.clone(), layout.widths)),
            kv,
            layout,
            duplicates,
            encoding: RowEncoding::default(),
            retention: Default::default(),
            dir,
            row_locks: StripedLocks::new(ROW_LOCK_STRIPES),
            _lock: lock,
        }
    }

    /// The key-value engine itself: for the store's own modules, the
    /// database handle and tests that fabricate raw rows. Everything else
    /// goes through the store's methods and the traits below.
    pub fn kv(&self) -> &Arc<dyn KvStore> {
        &self.kv
    }

    /// UID mappings in this store's `tsdb-uid` table. One instance per
    /// store: its per-kind locks must be shared by every `UidTable`.
    pub fn uid_store(&self) -> Arc<dyn UidStore> {
        self.uids.clone()
    }

    /// The series index in this store's `rtsdb-index` table.
    pub fn index_store(&self) -> Arc<dyn IndexStore> {
        self.index.clone()
    }

    /// Meta objects and counters in this store's `tsdb-uid` and
    /// `tsdb-meta` tables.
    pub fn meta_store(&self) -> Arc<dyn MetaStore> {
        self.meta.clone()
    }

    /// The rollup and pre-aggregate tables (`tsdb-rollup`).
    pub fn rollup_table(&self) -> Arc<rollup_table::RollupTable> {
        Arc::new(rollup_table::RollupTable::new(self.kv.clone()))
    }

    /// Trees in this store's `tsdb-tree` table.
    pub fn tree_store(&self) -> Arc<dyn crate::tree::TreeStore> {
        Arc::new(tree_table::KvTreeStore::new(self.kv.clone()))
    }

    pub fn layout(&self) -> &KeyLayout {
        &self.layout
    }

    pub fn duplicates(&self) -> DuplicatePolicy {
        self.duplicates
    }

    pub fn retention(&self) -> &Arc<retention::Retention> {
        &self.retention
    }

    /// First hour of `metric` still inside its retention period.
    pub fn retention_floor(&self, metric: crate::model::Uid) -> u32 {
        self.retention.floor(metric, retention::now_s())
    }

    pub fn encoding(&self) -> RowEncoding {
        self.encoding
    }

    /// Changes how rows are written from now on (rows already written keep
    /// their encoding; both are always readable).
    pub fn set_encoding(&mut self, encoding: RowEncoding) {
        self.encoding = encoding;
    }

    /// Whether the engine takes writes now, and how often it was brought
    /// back after it stopped (`storage.healthy`, `storage.reopens`). An
    /// engine that cannot stop taking writes is always healthy.
    pub fn health(&self) -> StorageHealth {
        match self.kv.health() {
            Some(h) => StorageHealth {
                unavailable: h.unavailable(),
                reopens: h.reopens(),
            },
            None => StorageHealth::default(),
        }
    }

    /// Brings an engine that stopped taking writes back, when the disk
    /// takes them again (at most one attempt per short interval); `Ok`
    /// when the engine takes writes.
    pub fn recover(&self) -> Result<()> {
        match self.kv.health() {
            Some(h) if h.unavailable().is_some() => Ok(h.recover()?),
            _ => Ok(()),
        }
    }

    /// How queries read this store ([`ReadPlan`]), decided once at open
    /// from where the engine is.
    pub fn read_plan(&self) -> ReadPlan {
        self.read_plan
    }

    /// Whether other processes write this store's tables too (the TSDs of
    /// a cluster): then a writer publishes what it buffers often and in
    /// batches (every tick writes everything, a `sync` put waits for its
    /// rows), its series index is re-read when another writer moved it,
    /// and nothing is computed from rows this process alone has read
    /// (`tsd.rollups.auto`). False for a store only this process opens.
    pub fn shared(&self) -> bool {
        self.shared
    }

    /// The engine's own journal, if it keeps one (the flusher moves it
    /// into the engine's tables).
    pub fn journal(&self) -> Option<&dyn Journal> {
        self.kv.journal()
    }

    /// Asks the engine to merge its files now (and drop rows past their
    /// retention) instead of when it gets round to it.
    pub fn compact(&self) -> Result<()> {
        match self.kv.compaction() {
            Some(engine) => Ok(engine.compact()?),
            None => Ok(()),
        }
    }

    /// Drops the stretches of data and rollup rows that every metric's
    /// retention has passed (`tsd.storage.ttl`; a rollup row once its
    /// whole span has), where the engine keeps rows by time (a cluster's
    /// weekly partitions); returns how many went. The embedded engine
    /// drops nothing here: its compaction filter expires rows.
    pub fn drop_expired_partitions(&self) -> Result<u64> {
        let Some(partitions) = self.kv.partitions() else {
            return Ok(0);
        };
        let now = retention::now_s();
        let mut dropped = 0;
        if let Some(floor) = self.retention.floor_for_all(now) {
            dropped += partitions.drop_before(Table::Data, floor)?;
        }
        if let Some(floor) = self.retention.rollup_floor_for_all(now) {
            dropped += partitions.drop_before(Table::Rollup, floor)?;
        }
        Ok(dropped)
    }

    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The cells of one data row, if it exists.
    pub fn get_row(&self, key: &[u8]) -> Result<Option<RowCells>> {
        match self.kv.get(Table::Data, key)? {
            None => Ok(None),
            Some(v) => Ok(Some(decode_cells(key, &v)?)),
        }
    }

    /// Writes cells into a row as HBase puts would: a cell with the same
    /// qualifier is replaced, others are kept.
    pub fn put_cells(&self, key: &[u8], cells: Vec<Cell>, durability: Durability) -> Result<()> {
        self.update_row(key, durability, |row| {
            for c in cells {
                row.put(c);
            }
            Ok(true)
        })
    }

    /// Read-modify-write of one row under its lock. `f` returns whether it
    /// changed anything; an emptied row is deleted.
    pub fn update_row(
        &self,
        key: &[u8],
        durability: Durability,
        f: impl FnOnce(&mut RowCells) -> Result<bool>,
    ) -> Result<()> {
        let _g = self.row_locks.lock(0, key);
        let mut row = self.get_row(key)?.unwrap_or_default();
        if !f(&mut row)? {
            return Ok(());
        }
        self.write_row_locked(key, &row, durability)
    }

    /// Replaces a data row with `row` (deletes it if `row` has no cells),
    /// whatever it held (`fsck --fix`).
    pub fn write_row(&self, key: &[u8], row: &RowCells, durability: Durability) -> Result<()> {
        let _g = self.row_locks.lock(0, key);
        self.write_row_locked(key, row, durability)
    }

    /// [`write_row`](Self::write_row) with the row's lock already held.
    fn write_row_locked(&self, key: &[u8], row: &RowCells, durability: Durability) -> Result<()> {
        let mut b = WriteBatch::new();
        b.durability = durability;
        if row.cells.is_empty() {
            b.delete(Table::Data, key.to_vec());
        } else {
            b.put(Table::Data, key.to_vec(), row.encode());
        }
        Ok(self.kv.write(b)?)
    }

    /// Data rows as fsck reads them, in the order asked: each row's
    /// versions (oldest first, with who wrote each: more than one only on
    /// a cluster, where several TSDs wrote the row) and the undecoded
    /// value reads return. A cluster answers many rows per statement.
    pub(crate) fn read_row_versions(&self, keys: &[&[u8]]) -> Result<Vec<KeyRead>> {
        if let Some(versions) = self.kv.versions() {
            return Ok(versions.read_versions(Table::Data, keys)?);
        }
        // One version per key: the value itself, by no writer in particular.
        let values = self.kv.get_many(Table::Data, keys)?;
        Ok(values
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

    /// Makes `row` the only version of a data row (no cells: removes it),
    /// as fsck's repairs need: on a cluster the other writers' versions
    /// are hidden, not merged back in on the next read. Elsewhere the
    /// same as [`write_row`](Self::write_row).
    pub fn replace_row(&self, key: &[u8], row: &RowCells) -> Result<()> {
        let Some(versions) = self.kv.versions() else {
            return self.write_row(key, row, Durability::Process);
        };
        let _g = self.row_locks.lock(0, key);
        let value = (!row.cells.is_empty()).then(|| row.encode());
        Ok(versions.replace(Table::Data, key, value.as_deref())?)
    }

    /// The raw cells of the embedded `tsdb-uid` table whose engine key
    /// starts with `prefix` (keys as `crate::uid::keys` builds them), in
    /// key order: for `tsdb uid` lookups, `grep` and `uid fsck`, which
    /// show and repair the table as it is stored.
    pub fn scan_uid_cells(
        &self,
        prefix: &[u8],
    ) -> impl Iterator<Item = Result<(Vec<u8>, Vec<u8>)>> + '_ {
        self.kv
            .scan(Table::Uid, &ScanRange::prefix(prefix))
            .map(|r| r.map_err(StoreError::from))
    }

    /// Applies repairs to raw `tsdb-uid` cells in one atomic batch
    /// (`uid fsck fix`): `Some(value)` puts, `None` deletes.
    pub fn edit_uid_cells(&self, edits: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Result<()> {
        let mut b = WriteBatch::new();
        for (key, value) in edits {
            match value {
                Some(v) => b.put(Table::Uid, key, v),
                None => b.delete(Table::Uid, key),
            }
        }
        Ok(self.kv.write(b)?)
    }

    /// Stores points of one series, grouped into their hourly rows.
    ///
    /// With last-write-wins, each touched row is merged and rewritten as one
    /// compacted column, so a row never holds two values for a timestamp.
    /// With the strict policy points are written as single cells, as
    /// OpenTSDB does, and conflicting duplicates fail on read.
    pub fn put_points(
        &self,
        tsuid: &Tsuid,
        points: &[(Timestamp, Value)],
        durability: Durability,
    ) -> Result<()> {
        if self.kv.row_appends().is_some() {
            return self.put_points_many(&[(tsuid.clone(), points.to_vec())], durability);
        }
        let mut by_hour: std::collections::BTreeMap<u32, Vec<StoredPoint>> = Default::default();
        for &(ts, v) in points {
            let base = ts.base_time()?;
            let (p, _) = StoredPoint::new(ts, base, v).map_err(ColumnError::from)?;
            by_hour.entry(base).or_default().push(p);
        }
        for (base, new_points) in by_hour {
            let key = self.layout.row_key(tsuid, base);
            match self.duplicates {
                // (On error nothing is written, so `row` may be changed.)
                DuplicatePolicy::LastWriteWins => self.update_row(&key, durability, |row| {
                    self.merge_last_wins(&key, row, new_points)?;
                    Ok(true)
                })?,
                DuplicatePolicy::Strict => {
                    let cells = new_points
                        .iter()
                        .map(|p| Cell::new(p.qualifier(), p.value_bytes()))
                        .collect();
                    self.put_cells(&key, cells, durability)?
                }
            }
        }
        Ok(())
    }

    /// `row` (as stored, or empty) with `new_points` of its hour merged
    /// in, last write winning, as one compacted column.
    fn merge_last_wins(
        &self,
        key: &[u8],
        row: &mut RowCells,
        new_points: Vec<StoredPoint>,
    ) -> Result<()> {
        // A new row of sorted, unique points (a sealed hour: the usual
        // write) is its points: encoding them as an append column to
        // decode that again cost a sealed hour's write a second encoding
        // and a decoding.
        if row.cells.is_empty() && row::sorted_unique(&new_points) {
            let decoded = row::DecodedRow {
                points: new_points,
                ..Default::default()
            };
            *row = row::compact(&decoded, self.encoding);
            return Ok(());
        }
        // The new points go in as one more append cell after all existing
        // cells (pushed, not put: a stored append column must not be
        // replaced), so decoding ranks them latest.
        let (q, v) = crate::codec::column::encode_append_column(&new_points);
        row.cells.push(Cell::new(q, v));
        let decoded = row::decode_row(key, row, DuplicatePolicy::LastWriteWins)
            .map_err(|source| bad_row(key, source))?;
        *row = row::compact(&decoded, self.encoding);
        Ok(())
    }

    /// [`put_points`](Self::put_points) for many series at once, in one
    /// read of every touched row ([`KvStore::get_many`]) and one write: a
    /// remote engine pays two round trips, not two per row. Rows are
    /// merged as `put_points` merges them (last write wins; the strict
    /// policy writes single cells). An engine that
    /// [appends rows](crate::storage::RowAppends) gets rows of the new points
    /// alone, in one round trip.
    pub fn put_points_many(
        &self,
        series: &[(Tsuid, Vec<(Timestamp, Value)>)],
        durability: Durability,
    ) -> Result<()> {
        let mut rows: std::collections::BTreeMap<Vec<u8>, Vec<StoredPoint>> = Default::default();
        for (tsuid, points) in series {
            // Grouped by hour first: a row key built (and looked up) per
            // point cost more than the rest of a sealed hour's write.
            let mut by_hour: std::collections::BTreeMap<u32, Vec<StoredPoint>> = Default::default();
            for &(ts, v) in points {
                let base = ts.base_time()?;
                let (p, _) = StoredPoint::new(ts, base, v).map_err(ColumnError::from)?;
                by_hour.entry(base).or_default().push(p);
            }
            for (base, points) in by_hour {
                rows.entry(self.layout.row_key(tsuid, base))
                    .or_default()
                    .extend(points);
            }
        }
        if rows.is_empty() {
            return Ok(());
        }
        let _g = self
            .row_locks
            .lock_all(0, rows.keys().map(|k| k.as_slice()));
        // An engine that appends rows folds the new points into the row
        // itself: the row is built from them alone, never from a read.
        let appends = self.kv.row_appends();
        let current = if appends.is_some() {
            vec![None; rows.len()]
        } else {
            let keys: Vec<&[u8]> = rows.keys().map(|k| k.as_slice()).collect();
            self.kv.get_many(Table::Data, &keys)?
        };
        let mut written = Vec::with_capacity(rows.len());
        for ((key, new_points), stored) in rows.into_iter().zip(current) {
            let mut row = match stored {
                Some(v) => decode_cells(&key, &v)?,
                None => RowCells::default(),
            };
            match self.duplicates {
                DuplicatePolicy::LastWriteWins => {
                    self.merge_last_wins(&key, &mut row, new_points)?
                }
                DuplicatePolicy::Strict => {
                    for p in &new_points {
                        row.put(Cell::new(p.qualifier(), p.value_bytes()));
                    }
                }
            }
            written.push((key, row.encode()));
        }
        if let Some(appends) = appends {
            return Ok(appends.append_rows(&written)?);
        }
        let mut b = WriteBatch::new();
        b.durability = durability;
        for (key, value) in written {
            b.put(Table::Data, key, value);
        }
        Ok(self.kv.write(b)?)
    }

    /// Decodes a row with the store's duplicate policy.
    pub fn decode(&self, key: &[u8], cells: &RowCells) -> Result<DecodedRow> {
        row::decode_row(key, cells, self.duplicates).map_err(|source| bad_row(key, source))
    }

    pub fn delete_row(&self, key: &[u8], durability: Durability) -> Result<()> {
        let _g = self.row_locks.lock(0, key);
        let mut b = WriteBatch::new();
        b.durability = durability;
        b.delete(Table::Data, key.to_vec());
        Ok(self.kv.write(b)?)
    }

    /// Rows of `metric` whose base hour lies in `[start_base, end_base]`,
    /// across every salt bucket, in key order within each bucket.
    pub fn scan_metric_rows<'a>(
        &'a self,
        metric: crate::model::Uid,
        start_base: u32,
        end_base: u32,
    ) -> impl Iterator<Item = Result<(Vec<u8>, RowCells)>> + 'a {
        let buckets: Vec<Option<u32>> = if self.layout.salt.enabled() {
            (0..self.layout.salt.buckets).map(Some).collect()
        } else {
            vec![None]
        };
        // Expired hours are never read, compacted away or not.
        let start_base = start_base.max(self.retention_floor(metric));
        buckets.into_iter().flat_map(move |bucket| {
            let start = self.layout.scan_prefix(bucket, metric, start_base);
            let stop = prefix_end(&self.layout.scan_prefix(bucket, metric, end_base));
            self.kv
                .scan(Table::Data, &ScanRange::new(start, stop))
                .map(|r| {
                    let (k, v) = r?;
                    let cells = decode_cells(&k, &v)?;
                    Ok((k, cells))
                })
        })
    }

    /// Every data row (fsck, full scans).
    pub fn scan_all_rows(&self) -> impl Iterator<Item = Result<(Vec<u8>, Vec<u8>)>> + '_ {
        self.kv
            .scan(Table::Data, &ScanRange::default())
            .map(|r| r.map_err(StoreError::from))
    }

    pub fn sync(&self) -> Result<()> {
        Ok(self.kv.sync()?)
    }
}

/// Takes the store directory's lock, retrying for up to `wait`; the lock
/// lasts as long as the returned file is open.
/// The marker fjall writes once its directory is created: without it,
/// nothing was ever written to the engine.
const ENGINE_CREATED_MARKER: &str = "version";

/// Creates the engine at `engine_dir` if it is not there whole: in a
/// sibling directory first, renamed into place once every table exists.
/// fjall's own creation, cut by a crash, leaves a directory it cannot
/// open ("File exists" for a journal without the version marker, "No such
/// file or directory" for a keyspace without its manifest), and nothing
/// was written to such an engine, so a cut creation is started again. An
/// engine with its marker is left as it is.
fn create_engine_whole(engine_dir: &Path, opts: &FjallOptions) -> Result<()> {
    if engine_dir.join(ENGINE_CREATED_MARKER).exists() {
        return Ok(());
    }
    if engine_dir.exists() {
        if !engine_holds_nothing(engine_dir)? {
            // A lost marker beside written data is damage, not a cut
            // creation: fjall's own error says so below.
            return Ok(());
        }
        tracing::warn!(dir = %engine_dir.display(), "the engine's creation was cut short (no version marker, nothing written); creating it again");
        fs::remove_dir_all(engine_dir)?;
    }
    let new = engine_dir.with_extension("new");
    if new.exists() {
        fs::remove_dir_all(&new)?;
    }
    drop(FjallStore::open(&new, opts)?);
    fs::rename(&new, engine_dir)?;
    if let Some(parent) = engine_dir.parent() {
        File::open(parent)?.sync_all()?;
    }
    Ok(())
}

/// Whether an engine directory holds no journal batch and no table file.
fn engine_holds_nothing(engine_dir: &Path) -> Result<bool> {
    let journals = crate::storage::fjall_journal::read_dir(engine_dir)?;
    if journals
        .iter()
        .any(|j| !j.batches.is_empty() || j.is_damaged())
    {
        return Ok(false);
    }
    let keyspaces = engine_dir.join("keyspaces");
    let Ok(entries) = fs::read_dir(&keyspaces) else {
        return Ok(true);
    };
    for ks in entries {
        let tables = ks?.path().join("tables");
        if tables.is_dir() && fs::read_dir(&tables)?.next().is_some() {
            return Ok(false);
        }
    }
    Ok(true)
}

fn lock_dir(dir: &Path, wait: std::time::Duration) -> Result<File> {
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(LOCK_FILE))?;
    let deadline = std::time::Instant::now() + wait;
    while lock.try_lock().is_err() {
        if std::time::Instant::now() >= deadline {
            return Err(StoreError::Locked(dir.display().to_string()));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(lock)
}

fn bad_row(key: &[u8], cause: ColumnError) -> StoreError {
    StoreError::BadRow {
        key: crate::model::uid::hex_upper(key),
        cause,
    }
}

fn decode_cells(key: &[u8], value: &[u8]) -> Result<RowCells> {
    RowCells::decode(value).map_err(|cause| StoreError::Row {
        key: crate::model::uid::hex_upper(key),
        cause,
    })
}

#[cfg(test)]
mod tests {
    /// A creation cut by a crash (fjall's directory without its version
    /// marker, an unfinished sibling) is started again; an engine that
    /// lost its marker but holds data is not wiped.
    #[test]
    fn a_cut_engine_creation_is_started_again_but_data_is_never_wiped() {
        use crate::storage::{Table, WriteBatch};
        let dir = tempfile::tempdir().unwrap();
        let store = super::Store::open(dir.path(), &super::StoreOptions::default()).unwrap();
        drop(store);
        // As fjall leaves it when killed before its marker: a lock file,
        // the keyspaces folder and a preallocated, empty journal.
        let engine = dir.path().join(super::ENGINE_DIR);
        std::fs::remove_dir_all(&engine).unwrap();
        std::fs::create_dir_all(engine.join("keyspaces")).unwrap();
        std::fs::write(engine.join("lock"), b"").unwrap();
        std::fs::write(engine.join("0.jnl"), vec![0u8; 4096]).unwrap();
        std::fs::create_dir_all(engine.with_extension("new").join("keyspaces")).unwrap();
        let store = super::Store::open(dir.path(), &super::StoreOptions::default()).unwrap();
        let mut b = WriteBatch::new();
        b.put(Table::Meta, b"k".to_vec(), b"v".to_vec());
        b.durability = crate::storage::Durability::Sync;
        store.kv().write(b).unwrap();
        drop(store);
        assert!(!engine.with_extension("new").exists());

        std::fs::remove_file(engine.join(super::ENGINE_CREATED_MARKER)).unwrap();
        assert!(!super::engine_holds_nothing(&engine).unwrap());
        // Not wiped: fjall's own error stands.
        assert!(super::Store::open(dir.path(), &super::StoreOptions::default()).is_err());
        assert!(std::fs::read_dir(&engine).unwrap().count() > 1);
    }

    use super::*;
    use crate::model::row_span::{ROW_SPAN_SECS, row_base};
    use crate::model::{Uid, UidWidth};

    fn tsuid() -> Tsuid {
        let u = |i| Uid::new(i, UidWidth::DEFAULT).unwrap();
        Tsuid::new(u(1), vec![(u(1), u(1))]).unwrap()
    }

    #[test]
    fn layout_is_recorded_and_enforced() {
        let dir = tempfile::tempdir().unwrap();
        let opts = StoreOptions {
            tagv_width: Some(4),
            ..Default::default()
        };
        let store = Store::open(dir.path(), &opts).unwrap();
        assert_eq!(store.layout().widths.tagv.bytes(), 4);
        // A second open while the first holds the lock is refused.
        assert!(matches!(
            Store::open(dir.path(), &StoreOptions::default()),
            Err(StoreError::Locked(_))
        ));
        drop(store);
        // Unspecified settings take the recorded ones.
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        assert_eq!(store.layout().widths.tagv.bytes(), 4);
        drop(store);
        let err = Store::open(
            dir.path(),
            &StoreOptions {
                tagv_width: Some(3),
                ..Default::default()
            },
        )
        .err()
        .unwrap()
        .to_string();
        assert!(err.contains("tsd.storage.uid.width.tagv = 4"), "{err}");
        assert!(err.contains("asks for 3"), "{err}");
        let err = Store::open(
            dir.path(),
            &StoreOptions {
                salt_width: Some(1),
                ..Default::default()
            },
        )
        .err()
        .unwrap()
        .to_string();
        assert!(err.contains("tsd.storage.salt.width = 0"), "{err}");
        // Engine files without a header are never silently re-created.
        fs::remove_file(dir.path().join(header::HEADER_FILE)).unwrap();
        assert!(matches!(
            Store::open(dir.path(), &StoreOptions::default()),
            Err(StoreError::MissingHeader(_))
        ));
    }

    #[test]
    fn bad_settings_for_a_new_store() {
        let dir = tempfile::tempdir().unwrap();
        for opts in [
            StoreOptions {
                metric_width: Some(0),
                ..Default::default()
            },
            StoreOptions {
                tagk_width: Some(9),
                ..Default::default()
            },
            StoreOptions {
                salt_width: Some(9),
                ..Default::default()
            },
            StoreOptions {
                salt_width: Some(1),
                salt_buckets: Some(300),
                ..Default::default()
            },
            StoreOptions {
                salt_buckets: Some(0),
                ..Default::default()
            },
        ] {
            assert!(Store::open(&dir.path().join("x"), &opts).is_err());
            assert!(!dir.path().join("x").join(header::HEADER_FILE).exists());
        }
    }

    #[test]
    fn points_merge_last_write_wins() {
        let store = Store::in_memory(KeyLayout::default(), DuplicatePolicy::LastWriteWins);
        let t = tsuid();
        store
            .put_points(
                &t,
                &[
                    (Timestamp::Seconds(1356998403), Value::Int(1)),
                    (Timestamp::Seconds(1356998405), Value::Int(2)),
                ],
                Durability::Process,
            )
            .unwrap();
        store
            .put_points(
                &t,
                &[
                    (Timestamp::Seconds(1356998403), Value::Float(1.5)),
                    (Timestamp::Seconds(1357002000), Value::Int(3)),
                ],
                Durability::Process,
            )
            .unwrap();
        let rows: Vec<_> = store
            .scan_metric_rows(t.metric, 0, u32::MAX)
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(rows.len(), 2);
        let first = store.decode(&rows[0].0, &rows[0].1).unwrap();
        assert_eq!(rows[0].1.cells.len(), 1, "one column");
        assert_eq!(first.points.len(), 2);
        assert_eq!(first.points[0].value, Value::Float(1.5));
        assert_eq!(first.points[1].value, Value::Int(2));
    }

    #[test]
    fn stored_append_columns_survive_new_writes() {
        let store = Store::in_memory(KeyLayout::default(), DuplicatePolicy::LastWriteWins);
        let t = tsuid();
        let base = 1356998400;
        let old = [
            StoredPoint::new(Timestamp::Seconds(base + 1), base, Value::Int(1))
                .unwrap()
                .0,
            StoredPoint::new(Timestamp::Seconds(base + 2), base, Value::Int(2))
                .unwrap()
                .0,
        ];
        let (q, v) = crate::codec::column::encode_append_column(&old);
        let key = store.layout().row_key(&t, base);
        store
            .put_cells(&key, vec![Cell::new(q, v)], Durability::Process)
            .unwrap();
        store
            .put_points(
                &t,
                &[(Timestamp::Seconds(base + 3), Value::Int(3))],
                Durability::Process,
            )
            .unwrap();
        let row = store.get_row(&key).unwrap().unwrap();
        let d = store.decode(&key, &row).unwrap();
        assert_eq!(
            d.points.iter().map(|p| p.value).collect::<Vec<_>>(),
            vec![Value::Int(1), Value::Int(2), Value::Int(3)]
        );
    }

    #[test]
    fn rows_are_compressed_and_corruption_names_the_row() {
        let store = Store::in_memory(KeyLayout::default(), DuplicatePolicy::LastWriteWins);
        let t = tsuid();
        let base = 1356998400u32;
        let points: Vec<_> = (0..360)
            .map(|i| {
                (
                    Timestamp::Seconds(base + i * 10),
                    Value::Float(i as f64 / 10.0),
                )
            })
            .collect();
        store.put_points(&t, &points, Durability::Process).unwrap();
        let key = store.layout().row_key(&t, base);
        let row = store.get_row(&key).unwrap().unwrap();
        assert_eq!(
            row.cells[0].qualifier,
            crate::codec::compressed::COMPRESSED_QUALIFIER.to_vec()
        );
        assert!(
            row.cells[0].value.len() < 100,
            "{} bytes",
            row.cells[0].value.len()
        );
        assert_eq!(store.decode(&key, &row).unwrap().points.len(), 360);
        // Flip one bit of the stored block: reading names the row.
        let mut bad = row.clone();
        bad.cells[0].value[10] ^= 1;
        store
            .put_cells(&key, bad.cells, Durability::Process)
            .unwrap();
        let row = store.get_row(&key).unwrap().unwrap();
        let err = store.decode(&key, &row).unwrap_err().to_string();
        assert!(
            err.starts_with("row 00000150E22700000001000001: compressed column checksum mismatch"),
            "{err}"
        );
        // Classic stores keep OpenTSDB's compacted column.
        let mut classic = Store::in_memory(KeyLayout::default(), DuplicatePolicy::LastWriteWins);
        classic.set_encoding(RowEncoding::Classic);
        classic
            .put_points(&t, &points, Durability::Process)
            .unwrap();
        let row = classic.get_row(&key).unwrap().unwrap();
        assert_eq!(row.cells[0].qualifier.len(), 720);
    }

    #[test]
    fn retention_hides_and_compaction_drops_expired_hours() {
        use crate::storage::{ScanRange, Table};
        let dir = tempfile::tempdir().unwrap();
        let opts = StoreOptions {
            retention: Arc::new(
                retention::Retention::from_entries([("tsd.storage.ttl", "2h")].into_iter())
                    .unwrap(),
            ),
            ..Default::default()
        };
        let store = Store::open(dir.path(), &opts).unwrap();
        let t = tsuid();
        let now = retention::now_s() as u32;
        let hour = row_base(now as u64).unwrap();
        for h in 0..6u32 {
            let ts = Timestamp::Seconds(hour - h * ROW_SPAN_SECS + 1);
            store
                .put_points(&t, &[(ts, Value::Int(h as i64))], Durability::Process)
                .unwrap();
        }
        // Rows of this hour and the two before it overlap the last 2 hours.
        let visible = store.scan_metric_rows(t.metric, 0, u32::MAX).count();
        assert_eq!(visible, 3);
        let in_engine = || store.kv().scan(Table::Data, &ScanRange::default()).count();
        assert_eq!(in_engine(), 6);
        store.compact().unwrap();
        assert_eq!(in_engine(), 3, "compaction did not drop the expired rows");
    }

    #[test]
    fn open_applies_the_row_encoding() {
        let dir = tempfile::tempdir().unwrap();
        let opts = StoreOptions {
            encoding: RowEncoding::Classic,
            ..Default::default()
        };
        let store = Store::open(dir.path(), &opts).unwrap();
        assert_eq!(store.encoding(), RowEncoding::Classic);
        let t = tsuid();
        let points: Vec<_> = (0..10)
            .map(|i| (Timestamp::Seconds(1356998400 + i), Value::Int(i as i64)))
            .collect();
        store.put_points(&t, &points, Durability::Process).unwrap();
        let row = store
            .get_row(&store.layout().row_key(&t, 1356998400))
            .unwrap()
            .unwrap();
        assert_eq!(row.cells[0].qualifier.len(), 20);
    }

    #[test]
    fn strict_mode_keeps_cells_and_fails_on_conflict() {
        let store = Store::in_memory(KeyLayout::default(), DuplicatePolicy::Strict);
        let t = tsuid();
        store
            .put_points(
                &t,
                &[(Timestamp::Seconds(1356998403), Value::Int(1))],
                Durability::Process,
            )
            .unwrap();
        store
            .put_points(
                &t,
                &[(Timestamp::Seconds(1356998403), Value::Float(1.5))],
                Durability::Process,
            )
            .unwrap();
        let (k, cells) = store
            .scan_metric_rows(t.metric, 0, u32::MAX)
            .next()
            .unwrap()
            .unwrap();
        assert_eq!(cells.cells.len(), 2);
        assert!(store.decode(&k, &cells).is_err());
    }

    #[test]
    fn salted_scans_cover_every_bucket() {
        let layout = KeyLayout {
            widths: UidWidths::default(),
            salt: Salt {
                width: 1,
                buckets: 4,
            },
        };
        let store = Store::in_memory(layout, DuplicatePolicy::LastWriteWins);
        let u = |i| Uid::new(i, UidWidth::DEFAULT).unwrap();
        for v in 1..=20 {
            let t = Tsuid::new(u(1), vec![(u(1), u(v))]).unwrap();
            store
                .put_points(
                    &t,
                    &[(Timestamp::Seconds(1356998403), Value::Int(v as i64))],
                    Durability::Process,
                )
                .unwrap();
        }
        let other = Tsuid::new(u(2), vec![(u(1), u(1))]).unwrap();
        store
            .put_points(
                &other,
                &[(Timestamp::Seconds(1356998403), Value::Int(0))],
                Durability::Process,
            )
            .unwrap();
        assert_eq!(store.scan_metric_rows(u(1), 0, u32::MAX).count(), 20);
        assert_eq!(
            store.scan_metric_rows(u(1), 1356998400, 1356998400).count(),
            20
        );
        assert_eq!(
            store.scan_metric_rows(u(1), 1357002000, u32::MAX).count(),
            0
        );
    }
}
