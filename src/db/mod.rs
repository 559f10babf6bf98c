//! The database handle: the one door to a store.
//!
//! [`Db`] owns everything a running database is made of and is the only
//! way the server, the command line, the benchmarks and the tests reach
//! it: the data rows (a [`Store`]), UID assignment ([`UidTable`]), the
//! series index ([`SeriesIndex`]), the per-series meta counters, and the
//! write path (series cache, write-ahead log, hour buffers, flusher).
//!
//! Its verbs live in one file each, as Prometheus splits its head block:
//! - [`open`](Db::open) and the lifecycle (flush, close): here;
//! - [`append`]: resolving points to series, logging and buffering them;
//! - [`flush`]: the flusher thread, sealed hours written as rows, WAL
//!   truncation and the meta counters;
//! - [`read`]: reads of stored rows merged with buffered points
//!   (the [`SeriesSource`](crate::store::read::SeriesSource) queries use);
//! - [`replay`]: the WAL read back into the store at open;
//! - [`delete`]: whole-row deletes (`/api/query` with `delete`);
//! - [`admin`]: index rebuilds, cache drops.
//! - [`backup`]: a consistent copy of the running database.
//! - [`tree`]: trees (`/api/tree`, `uid treesync`/`treepurge`) and the
//!   processing of new series through them.
//!
//! What is durable when, and what each fault costs at most, is stated
//! once, in `docs/durability.md`; the WAL's recovery rules are in
//! `docs/format/wal.md`.
//!
//! The seams for other engines: `Db` holds one [`Store`], opened on the
//! embedded engine or a cluster's (`tsd.storage.backend`), which reaches
//! its engine through [`crate::storage::KvStore`] and the capabilities
//! the engine has; names go through [`UidTable`] over a
//! [`crate::uid::UidStore`] (the store's, or ZooKeeper's on a cluster),
//! series through [`SeriesIndex`] over a [`crate::index::IndexStore`],
//! meta objects and counters through a [`MetaStore`]. `Db` itself only
//! orchestrates them and never touches a key-value engine.
//! `docs/architecture.md` draws the layers and follows a put and a query
//! through them.

pub(crate) mod admin;
pub(crate) mod append;
pub(crate) mod backup;
pub(crate) mod cardinality;
pub(crate) mod delete;
pub(crate) mod epochs;
pub(crate) mod flush;
pub(crate) mod options;
pub(crate) mod read;
pub(crate) mod read_only;
pub(crate) mod replay;
pub(crate) mod rollup;
pub(crate) mod search;
pub(crate) mod tree;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex, RwLock};
use thiserror::Error;

use crate::coord::{ZkClient, ZkCoordinator, ZkUidStore};
use crate::index::SeriesIndex;
use crate::meta::MetaStore;
use crate::storage::StorageError;
use crate::storage::coordinator::Coordinator;
use crate::store::{Store, StoreError, WAL_DIR};
use crate::uid::UidTable;
use crate::write::SeriesCache;
use crate::write::buffer::{Buffer, SealPolicy};
use crate::write::limits::SeriesLimiter;
use crate::write::wal::{self, Wal};

pub use crate::write::Series;
pub use crate::write::limits::SeriesLimits;
pub use crate::write::rules::SeriesRules;
pub use admin::MetaSynced;
pub use append::{Appended, PendingHistogram, PendingPoint};
pub use backup::{Backup, BackupError, Restored, backup_destination, restore};
pub use delete::Deleted;
pub use epochs::CacheEpochs;
pub use options::{Backend, ClusterOptions, DbOptions, WriteOptions, zk_options};
pub use read_only::free_bytes;
pub use rollup::{AutoRollupError, RollupPoint};
pub use search::{SearchHits, SearchRequest, SearchResults, SeriesSummary};
pub use tree::{TreeTest, TreesSynced};
pub use wal::WalError;

#[derive(Debug, Error)]
pub enum DbError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Uid(#[from] crate::uid::UidTableError),
    #[error(transparent)]
    Meta(#[from] crate::meta::MetaError),
    #[error(transparent)]
    Index(#[from] crate::index::IndexError),
    #[error(transparent)]
    Tree(#[from] crate::tree::TreeError),
    #[error("write-ahead log {path}: {cause}")]
    Wal {
        path: PathBuf,
        cause: std::io::Error,
    },
    /// The WAL cannot take writes now (a full disk, a removed directory).
    #[error(transparent)]
    WalUnavailable(#[from] wal::WalError),
    /// Anything that stopped [`Db::open`], with the directory it opened.
    #[error("opening store at {}: {cause}", dir.display())]
    Open { dir: PathBuf, cause: Box<DbError> },
    #[error("starting the flusher thread: {0}")]
    Thread(std::io::Error),
    /// The database takes no writes now (`db/read_only.rs`: a start on a
    /// full disk, free space below `tsd.storage.min_free_bytes`).
    #[error("Storage exception: {0}")]
    ReadOnly(String),
    /// Computing the rollups of replayed hours (`tsd.rollups.auto`).
    #[error("computing rollups: {0}")]
    Rollup(#[from] rollup::AutoRollupError),
}

pub type Result<T> = std::result::Result<T, DbError>;

/// Write-path counters for `/api/stats`.
#[derive(Debug, Default)]
pub struct WriteStats {
    /// Points accepted (logged and buffered).
    pub points_added: AtomicU64,
    /// Points written to the store.
    pub points_stored: AtomicU64,
    /// Rows written to the store.
    pub rows_written: AtomicU64,
    /// Times the engine's journal was moved into its tables.
    pub checkpoints: AtomicU64,
    /// Failed row writes (points kept and retried).
    pub flush_errors: AtomicU64,
    /// Points recovered from the WAL at start.
    pub points_replayed: AtomicU64,
    /// Damaged stretches of WAL frames skipped at start (replay goes on
    /// after each; a torn last frame is not counted).
    pub replay_damaged_frames: AtomicU64,
    /// WAL points skipped at start because their series was declared in a
    /// damaged frame.
    pub replay_orphaned: AtomicU64,
    /// WAL records skipped at start because they cannot be stored.
    pub replay_unstorable: AtomicU64,
    /// Rollup and pre-aggregate points written (`/api/rollup`, telnet
    /// `rollup`): 2.4.1's `rollup_stored`.
    pub rollup_points_stored: AtomicU64,
    /// Rollup cells computed by `tsd.rollups.auto` (flushes and replay).
    pub rollup_cells_computed: AtomicU64,
    /// Failed computations of `tsd.rollups.auto` (their hours are kept
    /// buffered and written again).
    pub rollup_errors: AtomicU64,
    /// Histogram points logged and stored: 2.4.1's
    /// `raw_histograms_stored`.
    pub histogram_points_stored: AtomicU64,
}

/// The parts of a [`Db`] that persist through their own seams besides the
/// rows, the UIDs and the index.
struct Parts {
    meta: Arc<dyn MetaStore>,
    trees: Arc<dyn crate::tree::TreeStore>,
    /// The UID store in ZooKeeper, on a cluster.
    zk_uids: Option<Arc<ZkUidStore>>,
}

/// An open database. Shared behind an `Arc`; [`Db::close`] flushes it.
pub struct Db {
    /// The one store `open` opened, on whichever engine: every read,
    /// write and delete of data rows goes here, and it serves the UID,
    /// index, meta, tree and rollup tables' persistence.
    store: Arc<Store>,
    index: Arc<SeriesIndex>,
    meta: Arc<dyn MetaStore>,
    trees: Arc<dyn crate::tree::TreeStore>,
    /// A cluster's UIDs as ZooKeeper holds them (`tsdb uid fsck`).
    zk_uids: Option<Arc<ZkUidStore>>,
    /// The rollup and pre-aggregate tables (`db/rollup.rs`).
    rollup_table: Arc<crate::store::rollup_table::RollupTable>,
    /// The default interval's pre-aggregate table read as data rows, when
    /// rollups are configured (`db/rollup.rs`, `RollupSource`).
    pre_aggregates: Option<crate::store::read::pre_aggregates::PreAggregates>,
    /// New series waiting for tree processing (`db/tree.rs`).
    tree_queue: Mutex<Vec<crate::model::Tsuid>>,
    series: SeriesCache,
    buffer: Buffer,
    /// Why writes are refused besides the WAL and the engine, and the log
    /// a start on a full disk holds in memory (`db/read_only.rs`).
    read_only: read_only::ReadOnly,
    wal: Wal,
    /// Held shared by appenders (log + buffer as one step), exclusively
    /// while the flusher decides which WAL segments are still needed.
    gate: RwLock<()>,
    opts: WriteOptions,
    stats: WriteStats,
    closed: AtomicBool,
    flusher: Mutex<Option<std::thread::JoinHandle<()>>>,
    flusher_wake: (Mutex<bool>, Condvar),
    /// Serialises flushes (flusher thread, deletes, close).
    flush_lock: Mutex<()>,
    /// Serialises counter persistence; holds when it last ran.
    counters: Mutex<std::time::Instant>,
    /// When the flusher last dropped partitions past retention.
    partitions_expired: Mutex<Option<std::time::Instant>>,
    /// What the query result cache checks its answers against.
    epochs: CacheEpochs,
    /// When reads last began or ended (see `truncate_wal`).
    reads: read::ReadActivity,
    /// Since when a move of the engine's journal waits for reads to pause.
    checkpoint_due: Mutex<Option<std::time::Instant>>,
}

impl Db {
    /// A fresh database in a temporary directory that creates UIDs of
    /// every kind on first write: what most unit tests start from.
    #[cfg(test)]
    pub(crate) fn open_temp() -> (tempfile::TempDir, Arc<Db>) {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = DbOptions::new(dir.path());
        opts.auto_create = crate::uid::AutoCreate {
            metrics: true,
            tagks: true,
            tagvs: true,
        };
        let db = Db::open(&opts).unwrap();
        (dir, db)
    }

    /// Opens (or creates) the store in `opts.data_dir`, replays and removes
    /// the WAL left there, then starts the WAL and flusher threads.
    /// Errors name the directory ([`DbError::Open`]).
    pub fn open(opts: &DbOptions) -> Result<Arc<Db>> {
        let opened = match &opts.backend {
            Backend::Embedded => Self::open_store(opts, None),
            Backend::ClickHouse(cluster) => ZkClient::connect(&cluster.zk)
                .map_err(|e| DbError::Store(StoreError::from(StorageError::from(e))))
                .and_then(|zk| {
                    let coordinator: Arc<dyn Coordinator> =
                        Arc::new(ZkCoordinator::new(zk.clone()));
                    Self::open_store(
                        opts,
                        Some(Cluster {
                            coordinator,
                            zk: Some(zk),
                        }),
                    )
                }),
        };
        opened.map_err(|e| DbError::Open {
            dir: opts.data_dir.clone(),
            cause: Box::new(e),
        })
    }

    /// [`open`](Self::open) on a cluster with the given coordinator and
    /// without ZooKeeper: UIDs go through the store's UID table under the
    /// coordinator's locks (tests share one in-process coordinator between
    /// several databases).
    pub fn open_with(
        opts: &DbOptions,
        coordinator: Option<Arc<dyn Coordinator>>,
    ) -> Result<Arc<Db>> {
        let cluster = coordinator.map(|coordinator| Cluster {
            coordinator,
            zk: None,
        });
        Self::open_store(opts, cluster).map_err(|e| DbError::Open {
            dir: opts.data_dir.clone(),
            cause: Box::new(e),
        })
    }

    fn open_store(opts: &DbOptions, cluster: Option<Cluster>) -> Result<Arc<Db>> {
        let (store, zk) = match (&opts.backend, cluster) {
            (Backend::ClickHouse(options), Some(cluster)) => (
                Arc::new(Store::open_cluster(
                    &opts.data_dir,
                    &opts.store,
                    &options.clickhouse,
                    cluster.coordinator,
                )?),
                cluster.zk,
            ),
            _ => (Arc::new(Store::open(&opts.data_dir, &opts.store)?), None),
        };
        let meta = store.meta_store();
        // On a cluster, names get their UIDs through ZooKeeper, so that
        // every TSD agrees on them (docs/cluster.md).
        let zk_uids = zk
            .map(|zk| ZkUidStore::open(zk, store.layout().widths).map(Arc::new))
            .transpose()?;
        let uid_store: Arc<dyn crate::uid::UidStore> = match &zk_uids {
            Some(zk_uids) => zk_uids.clone(),
            None => store.uid_store(),
        };
        let mut uids = UidTable::new(uid_store, opts.auto_create, opts.name_rules.clone());
        if opts.write.meta.realtime_uid {
            uids = uids.on_new_uid(realtime_uid_meta(meta.clone()));
        }
        let uids = Arc::new(store.retention().attach(uids));
        let mut index = SeriesIndex::open(store.index_store(), store.layout().widths)?;
        if store.shared() {
            index = index.shared();
        }
        Self::assemble(
            store.clone(),
            uids,
            Arc::new(index),
            Parts {
                meta,
                trees: store.tree_store(),
                zk_uids,
            },
            &opts.data_dir,
            opts.write.clone(),
        )
    }

    fn assemble(
        store: Arc<Store>,
        uids: Arc<UidTable>,
        index: Arc<SeriesIndex>,
        Parts {
            meta,
            trees,
            zk_uids,
        }: Parts,
        data_dir: &Path,
        opts: WriteOptions,
    ) -> Result<Arc<Db>> {
        let wal_dir = data_dir.join(WAL_DIR);
        let series = SeriesCache::new(uids, opts.max_tags)
            .with_max_labels(opts.prometheus_max_labels)
            .with_limiter(SeriesLimiter::new(opts.series_limits, index.clone()));
        let rollup_table = store.rollup_table();
        // On a store other TSDs write the flusher computes no rollups
        // (docs/rollups.md): neither does replay.
        let auto = opts
            .rollups
            .as_deref()
            .filter(|r| r.auto && !store.shared())
            .map(|settings| rollup::AutoRollups {
                settings,
                rows: &store,
                table: &rollup_table,
                layout: store.layout(),
            });
        let buffer = Buffer::new();
        let (next_segment, replayed, held) = match replay::replay(
            &store,
            &series,
            &index,
            &wal_dir,
            auto.as_ref(),
        ) {
            Ok((next, report)) => (next, report, None),
            // The engine cannot take writes (a full disk): open
            // read-only, the log held in memory (db/read_only.rs).
            Err(e) => match store.health().unavailable {
                Some(cause) => {
                    tracing::warn!(error = %e, "replaying the write-ahead log into the store failed");
                    let (next, held) = replay::hold_in_memory(
                        &store,
                        &series,
                        &index,
                        &buffer,
                        &wal_dir,
                        opts.max_buffered_points
                            .saturating_mul(read_only::HELD_POINTS_PER_BUFFERED),
                        cause,
                    )?;
                    (next, replay::ReplayReport::default(), Some(held))
                }
                None => return Err(e),
            },
        };
        let read_only = read_only::ReadOnly::new(data_dir, opts.min_free_bytes, held);
        // Entries replay recorded in a batching index backend (a cluster)
        // are written before the WAL they came from can go.
        index.flush()?;
        let wal = Wal::start(&wal_dir, next_segment, opts.wal.clone())?;
        let pre_aggregates = opts.rollups.as_deref().map(|r| {
            crate::store::read::pre_aggregates::PreAggregates::new(
                store.clone(),
                rollup_table.clone(),
                &r.config.default_interval().pre_agg_table,
            )
        });
        let db = Arc::new(Db {
            store,
            index,
            meta,
            trees,
            zk_uids,
            rollup_table,
            pre_aggregates,
            tree_queue: Mutex::new(Vec::new()),
            series,
            buffer,
            read_only,
            wal,
            gate: RwLock::new(()),
            opts,
            stats: WriteStats::default(),
            closed: AtomicBool::new(false),
            flusher: Mutex::new(None),
            flusher_wake: (Mutex::new(false), Condvar::new()),
            flush_lock: Mutex::new(()),
            counters: Mutex::new(std::time::Instant::now()),
            partitions_expired: Mutex::new(None),
            epochs: CacheEpochs::default(),
            reads: read::ReadActivity::default(),
            checkpoint_due: Mutex::new(None),
        });
        if replayed.points > 0 {
            // Replay wrote the log's points as rows into the engine's
            // journal, on top of whatever rows the previous process had
            // written there before it died.
            db.checkpoint_engine(flush::JOURNAL_CHECKPOINT_BYTES);
        }
        let st = &db.stats;
        st.points_replayed.store(replayed.points, Ordering::Relaxed);
        (st.rollup_cells_computed).store(replayed.rollup_cells, Ordering::Relaxed);
        (st.replay_damaged_frames).store(replayed.damaged_frames, Ordering::Relaxed);
        (st.replay_orphaned).store(replayed.orphaned_points, Ordering::Relaxed);
        (st.replay_unstorable).store(replayed.unstorable, Ordering::Relaxed);
        let weak = Arc::downgrade(&db);
        let t = std::thread::Builder::new()
            .name("flusher".into())
            .spawn(move || flush::flusher_loop(weak))
            .map_err(DbError::Thread)?;
        *db.flusher.lock() = Some(t);
        Ok(db)
    }

    /// The store, on whichever engine it was opened (embedded or a
    /// cluster's): the data rows as stored (reads without the buffered
    /// points, annotations for `/api/annotation`), the UID widths, and
    /// what the tools that work on it as stored use (`fsck`,
    /// `scan --delete`/`--import`, `uid` grep/fsck/assign, compaction).
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Whether the storage engine takes writes, and how often it was
    /// brought back after it stopped (`/api/stats`' `storage.healthy` and
    /// `storage.reopens`).
    pub fn storage_health(&self) -> crate::store::StorageHealth {
        let mut health = self.store.health();
        if health.unavailable.is_none() {
            health.unavailable = self.read_only.reason();
        }
        health
    }

    /// Free bytes on the disk of the data directory at the flusher's last
    /// check (`/api/stats`' `storage.free_bytes`), and points of the log a
    /// start on a full disk holds in memory (`storage.held_points`).
    pub fn disk_state(&self) -> (u64, u64) {
        (self.read_only.free_bytes(), self.read_only.held_points())
    }

    /// The UID store in ZooKeeper when the database is on a cluster (the
    /// one `uids` works over), for the tools that check and repair it as
    /// stored (`tsdb uid fsck`); `None` on the embedded store.
    pub fn cluster_uids(&self) -> Option<&Arc<ZkUidStore>> {
        self.zk_uids.as_ref()
    }

    /// The rollup and pre-aggregate tables (`tsdb scan`, `fsck`, tests).
    pub fn rollup_table(&self) -> &crate::store::rollup_table::RollupTable {
        &self.rollup_table
    }

    /// The series index queries select series from.
    pub fn index(&self) -> &Arc<SeriesIndex> {
        &self.index
    }

    pub fn uids(&self) -> &Arc<UidTable> {
        self.series.uids()
    }

    /// The change epochs the query result cache relies on.
    pub fn cache_epochs(&self) -> &CacheEpochs {
        &self.epochs
    }

    /// The epoch a cached answer over `metric` is valid under (see
    /// [`CacheEpochs`]); includes the metric's retention floor.
    pub fn cache_epoch(&self, metric: crate::model::Uid) -> crate::store::read::epoch::Epoch {
        self.epochs
            .epoch(metric, self.store.retention_floor(metric))
    }

    /// UIDMeta, TSMeta and the stored per-series counters.
    pub fn meta(&self) -> &dyn MetaStore {
        &*self.meta
    }

    /// The write path's cache of known series.
    pub fn series(&self) -> &SeriesCache {
        &self.series
    }

    pub fn stats(&self) -> &WriteStats {
        &self.stats
    }

    pub fn wal(&self) -> &Wal {
        &self.wal
    }

    pub fn buffered_points(&self) -> usize {
        self.buffer.points()
    }

    /// Writes every buffered point to the store and syncs it (tests,
    /// tools). Ingest may continue meanwhile.
    pub fn flush_all(&self) -> Result<()> {
        self.tick(true);
        self.store.sync()?;
        Ok(())
    }

    /// Stops accepting points, flushes everything to the store, syncs it
    /// and removes the WAL. Idempotent.
    pub fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.wake_flusher();
        if let Some(t) = self.flusher.lock().take()
            && t.thread().id() != std::thread::current().id()
        {
            // (The flusher itself closes the database when it held the
            // last reference; it cannot wait for itself.)
            let _ = t.join();
        }
        // Appenders that passed the closed check finish under the gate.
        drop(self.gate.write());
        let wal_closed = self.wal.close();
        // A last chance for an engine that failed while the disk was full.
        let _ = self.store.recover();
        if self.read_only.is_holding() {
            let below_floor = self.read_only.check_floor();
            if self.store.health().unavailable.is_some() || !self.leave_read_only(below_floor) {
                // The log a start on a full disk held in memory is still
                // only in the log: it stays for the next start.
                tracing::warn!(
                    "the store still cannot take the write-ahead log held since the start on a full disk; it is kept for the next start"
                );
                return wal_closed.map_err(DbError::from);
            }
        }
        self.flush(SealPolicy {
            now_s: crate::model::time::now_s(),
            grace_s: 0,
            idle_s: 0,
            pressure: false,
            everything: true,
        });
        self.process_tree_queue();
        if let Err(e) = self.persist_counters() {
            tracing::error!(error = %e, "saving series counters at shutdown failed");
        }
        if let Err(e) = self.store.sync() {
            // Everything the WAL holds is replayed at the next start.
            tracing::error!(error = %e, buffered = self.buffer.points(), "the store could not be flushed at shutdown; the write-ahead log is kept for the next start");
            return wal_closed.map_err(DbError::from);
        }
        if let Err(e) = &wal_closed {
            if matches!(e, WalError::Unlinked { .. }) {
                return Err(e.clone().into());
            }
            // The store took every point the WAL could not write.
            tracing::warn!(error = %e, "the write-ahead log failed, but the store holds every point");
        }
        if self.buffer.points() == 0 {
            // A stopped store is left as compact as it gets without a
            // compaction: rows only in tables, no journal worth the name.
            self.checkpoint_engine(flush::JOURNAL_CHECKPOINT_BYTES);
            let wal_err = |path: &Path| {
                let path = path.to_path_buf();
                move |cause| DbError::Wal { path, cause }
            };
            self.wal.delete_below(u64::MAX)?;
            // The active segment is closed too now.
            for s in wal::list_segments(self.wal.dir()).map_err(wal_err(self.wal.dir()))? {
                let path = wal::segment_path(self.wal.dir(), s);
                std::fs::remove_file(&path).map_err(wal_err(&path))?;
            }
        }
        tracing::info!(
            stored = self.stats.points_stored.load(Ordering::Relaxed),
            "database flushed and closed"
        );
        Ok(())
    }
}

impl Drop for Db {
    /// A database dropped without [`Db::close`] (a command that stopped
    /// early) is closed here, so nothing buffered is left to the WAL.
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::error!(error = %e, "closing the database failed");
        }
    }
}

/// `tsd.core.meta.enable_realtime_uid`: OpenTSDB's `UIDMeta.storeNew` for
/// each new UID, with `created` the time of assignment. A failure is
/// logged, not returned: the UID itself is assigned (as in OpenTSDB, whose
/// meta write is not waited on).
/// What a database on a cluster shares with the other TSDs: the
/// coordinator of locks and the layout record, and ZooKeeper for UIDs
/// (absent only in tests that open several databases over one
/// in-process coordinator, [`Db::open_with`]).
struct Cluster {
    coordinator: Arc<dyn Coordinator>,
    zk: Option<Arc<ZkClient>>,
}

fn realtime_uid_meta(meta: Arc<dyn MetaStore>) -> crate::uid::NewUidHook {
    Box::new(move |kind, name, uid| {
        let fields = crate::meta::UidMetaFields {
            created: chrono::Utc::now().timestamp().max(0) as u64,
            ..Default::default()
        };
        if let Err(e) = meta.put_uid_meta(kind, uid, &fields) {
            tracing::warn!(%kind, name, error = %e, "storing the new UID's UIDMeta failed");
        }
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::model::Value;
    use crate::store::read::{SeriesData, SeriesSource};
    use crate::uid::AutoCreate;
    use crate::write::wal::{self, PendingPoint};

    fn open(dir: &Path) -> Arc<Db> {
        let mut opts = DbOptions::new(dir);
        opts.auto_create = AutoCreate {
            metrics: true,
            ..Default::default()
        };
        Db::open(&opts).unwrap()
    }

    fn put(w: &Db, ts: i64, v: Value, host: &str) -> Appended {
        let mut key = String::new();
        let (series, ts) = w
            .resolve("sys.cpu", ts, v, &[("host", host)], &mut key)
            .unwrap();
        w.append(&[PendingPoint {
            series,
            ts,
            value: v,
        }])
        .unwrap()
    }

    fn read_all(w: &Db) -> Vec<SeriesData> {
        let m = w
            .uids()
            .get_id(crate::model::UidKind::Metric, "sys.cpu")
            .unwrap();
        w.read_series(m, 0, u64::MAX, &mut |_| true).unwrap()
    }

    /// Bytes of WAL segment files in `dir`.
    fn wal_bytes(dir: &Path) -> u64 {
        let wal_dir = dir.join(WAL_DIR);
        wal::list_segments(&wal_dir)
            .unwrap()
            .into_iter()
            .map(|s| {
                std::fs::metadata(wal::segment_path(&wal_dir, s))
                    .unwrap()
                    .len()
            })
            .sum()
    }

    #[test]
    fn once_everything_is_stored_the_wal_segment_being_written_goes_too() {
        let dir = tempfile::tempdir().unwrap();
        let w = open(dir.path());
        for i in 0..1000 {
            put(&w, 1356998400 + i, Value::Int(i), "a");
        }
        assert!(wal_bytes(dir.path()) > 0 || w.wal.active_segment().logged);
        w.flush_all().unwrap();
        // Nothing buffered pins the segment: it was closed and deleted,
        // and the new one holds nothing.
        assert_eq!(wal_bytes(dir.path()), 0);
        assert!(!w.wal.active_segment().logged);
        assert_eq!(read_all(&w)[0].points.len(), 1000);
        // A later point pins the new segment, which then stays.
        put(&w, 1356998400 + 5000, Value::Int(1), "a");
        w.tick(false);
        assert!(w.wal.active_segment().logged);
        w.close().unwrap();
        drop(w);
        let w = open(dir.path());
        assert_eq!(read_all(&w)[0].points.len(), 1001);
    }

    #[test]
    fn a_full_flush_lets_the_wal_before_it_go_while_the_hour_stays_open() {
        let dir = tempfile::tempdir().unwrap();
        let w = open(dir.path());
        for i in 0..1500 {
            put(&w, 1356998400 + i, Value::Int(i), "a");
        }
        let first = w.wal.active_segment().number;
        w.flush_everything(crate::write::buffer::SealPolicy {
            now_s: crate::model::time::now_s(),
            grace_s: 600,
            idle_s: 5,
            pressure: false,
            everything: false,
        });
        assert_eq!(w.buffered_points(), 0);
        // The same hour goes on in the new segment, which it pins.
        for i in 1500..1510 {
            put(&w, 1356998400 + i, Value::Int(i), "a");
        }
        assert!(w.wal.active_segment().number > first);
        w.tick(false);
        let wal_dir = dir.path().join(WAL_DIR);
        let left = wal::list_segments(&wal_dir).unwrap();
        assert!(left.iter().all(|&s| s > first), "{left:?}");
        assert_eq!(left, vec![w.wal.active_segment().number]);
        assert_eq!(w.buffered_points(), 10);
        assert_eq!(read_all(&w)[0].points.len(), 1510);
        // Stored rows and the new segment's points survive a restart.
        w.close().unwrap();
        drop(w);
        let w = open(dir.path());
        let got = read_all(&w);
        assert_eq!(got[0].points.len(), 1510);
        assert_eq!(got[0].points[1509].value(), Value::Int(1509));
    }

    /// A Db the flusher thread leaves alone (it would wake only after
    /// half an hour): the test runs each flush round itself.
    fn open_quiet(dir: &Path) -> Arc<Db> {
        let mut opts = DbOptions::new(dir);
        opts.auto_create.metrics = true;
        opts.write.flush_interval = std::time::Duration::from_secs(3600);
        Db::open(&opts).unwrap()
    }

    /// Bytes the engine's journal files take on disk.
    fn journal_bytes(dir: &Path) -> u64 {
        crate::storage::fjall::journal_bytes(&dir.join(crate::store::ENGINE_DIR)).unwrap()
    }

    /// `n` incompressible bytes from the xorshift state `x`.
    fn noise(x: &mut u64, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| {
                *x ^= *x << 13;
                *x ^= *x >> 7;
                *x ^= *x << 17;
                *x as u8
            })
            .collect()
    }

    /// Writes `bytes` of distinct, incompressible rows and moves them
    /// into the engine's tables.
    fn fill_tables(w: &Db, dir: &Path, bytes: usize) {
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        for n in 0..bytes.div_ceil(2048) {
            let value = noise(&mut x, 2048);
            let mut b = crate::storage::WriteBatch::new();
            b.put(
                crate::storage::Table::Tree,
                format!("table-filler-{n:08}"),
                value,
            );
            w.store().kv().write(b).unwrap();
        }
        w.checkpoint_engine(0);
        assert!(journal_bytes(dir) < flush::JOURNAL_CHECKPOINT_BYTES);
    }

    /// A journal that is a heavy share of the engine's bytes (a store
    /// right after its first load) is moved at once, reads or not.
    #[test]
    fn a_heavy_journal_moves_while_reads_go_on() {
        let dir = tempfile::tempdir().unwrap();
        let w = open_quiet(dir.path());
        let checkpoints = || w.stats().checkpoints.load(Ordering::Relaxed);
        fill_journal(&w, 2 * flush::JOURNAL_CHECKPOINT_BYTES as usize);
        w.reads.note();
        w.tick(false);
        assert_eq!(checkpoints(), 1, "kept while reads ran");
        assert!(journal_bytes(dir.path()) < flush::JOURNAL_CHECKPOINT_BYTES);
        w.close().unwrap();
    }

    /// Writes `bytes` of incompressible values to one key of the engine,
    /// again and again: its journal then holds them all, its tables one.
    /// The key is deleted afterwards, so no reader ever sees it.
    fn fill_journal(w: &Db, bytes: usize) {
        const KEY: &[u8] = b"journal-filler";
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..bytes.div_ceil(2048) {
            let value = noise(&mut x, 2048);
            let mut b = crate::storage::WriteBatch::new();
            b.put(crate::storage::Table::Tree, KEY, value);
            w.store().kv().write(b).unwrap();
        }
        let mut b = crate::storage::WriteBatch::new();
        b.delete(crate::storage::Table::Tree, KEY);
        w.store().kv().write(b).unwrap();
    }

    /// While points stay buffered (a live hour pins its WAL segment), the
    /// engine's journal is still moved into the tables once past its
    /// bound; the buffered point and its WAL segment stay.
    #[test]
    fn a_journal_past_its_bound_is_moved_while_points_stay_buffered() {
        let dir = tempfile::tempdir().unwrap();
        let w = open_quiet(dir.path());
        let now = crate::model::time::now_s() as i64;
        put(&w, now, Value::Int(7), "a");
        fill_journal(&w, flush::JOURNAL_BOUND_BYTES as usize + (1 << 20));
        assert!(journal_bytes(dir.path()) > flush::JOURNAL_BOUND_BYTES);
        w.tick(false);
        assert_eq!(w.stats().checkpoints.load(Ordering::Relaxed), 1);
        assert!(journal_bytes(dir.path()) < flush::JOURNAL_CHECKPOINT_BYTES);
        assert_eq!(w.buffered_points(), 1);
        assert!(w.wal.active_segment().logged);
        // Below the bound, with the point still buffered: not moved again.
        w.tick(false);
        assert_eq!(w.stats().checkpoints.load(Ordering::Relaxed), 1);
        w.close().unwrap();
        drop(w);
        let w = open_quiet(dir.path());
        assert_eq!(read_all(&w)[0].points.len(), 1);
    }

    /// A move of the engine's journal for its bytes alone waits for the
    /// reads to pause (it holds every read up while the engine reopens),
    /// though not past its patience; the journal's bound never waits.
    #[test]
    fn a_journal_move_waits_for_reads_to_pause() {
        let dir = tempfile::tempdir().unwrap();
        let w = open_quiet(dir.path());
        // Tables that hold far more than the journal will: a journal that
        // is a heavy share of the engine's bytes does not wait (below).
        fill_tables(&w, dir.path(), 16 << 20);
        let moved_before = w.stats().checkpoints.load(Ordering::Relaxed);
        let checkpoints = || w.stats().checkpoints.load(Ordering::Relaxed) - moved_before;
        fill_journal(&w, 2 * flush::JOURNAL_CHECKPOINT_BYTES as usize);
        w.reads.note();
        w.tick(false);
        assert_eq!(checkpoints(), 0, "moved while reads ran");
        assert!(journal_bytes(dir.path()) > flush::JOURNAL_CHECKPOINT_BYTES);
        // The reads paused: the next round moves it.
        w.reads.forget();
        w.tick(false);
        assert_eq!(checkpoints(), 1);
        assert!(journal_bytes(dir.path()) < flush::JOURNAL_CHECKPOINT_BYTES);
        // Reads without a pause: moved once the patience ran out.
        fill_journal(&w, 2 * flush::JOURNAL_CHECKPOINT_BYTES as usize);
        w.reads.note();
        w.tick(false);
        assert_eq!(checkpoints(), 1);
        *w.checkpoint_due.lock() =
            std::time::Instant::now().checked_sub(flush::CHECKPOINT_PATIENCE);
        w.reads.note();
        w.tick(false);
        assert_eq!(checkpoints(), 2);
        // Past the bound, reads or not: moved at once.
        fill_journal(&w, flush::JOURNAL_BOUND_BYTES as usize + (1 << 20));
        put(&w, crate::model::time::now_s() as i64, Value::Int(7), "a");
        w.reads.note();
        w.tick(false);
        assert_eq!(checkpoints(), 3);
        w.close().unwrap();
    }

    /// A seal of more hours than one batch moves the engine's journal
    /// between its batches once it passed its bound, so the journal never
    /// holds every row of a big seal.
    #[test]
    fn a_seal_of_several_batches_moves_the_journal_between_them() {
        let dir = tempfile::tempdir().unwrap();
        let w = open_quiet(dir.path());
        let hours = flush::FLUSH_BATCH_HOURS + 1;
        for h in 0..hours {
            put(&w, 1356998400 + 3600 * h as i64, Value::Int(h as i64), "a");
        }
        fill_journal(&w, flush::JOURNAL_BOUND_BYTES as usize + (1 << 20));
        let stored = w.flush(SealPolicy {
            now_s: crate::model::time::now_s(),
            grace_s: 600,
            idle_s: 5,
            pressure: false,
            everything: true,
        });
        assert_eq!(stored, hours);
        assert_eq!(w.stats().checkpoints.load(Ordering::Relaxed), 1);
        // The last batch's row went through the new journal.
        assert!(journal_bytes(dir.path()) < flush::JOURNAL_CHECKPOINT_BYTES);
        w.close().unwrap();
        drop(w);
        let w = open_quiet(dir.path());
        let got = read_all(&w);
        assert_eq!(got[0].points.len(), hours);
        assert_eq!(
            got[0].points[hours - 1].value(),
            Value::Int(hours as i64 - 1)
        );
    }

    #[tokio::test]
    async fn reads_merge_buffer_and_store_and_wal_replays() {
        let dir = tempfile::tempdir().unwrap();
        let w = open(dir.path());
        put(&w, 1356998400, Value::Int(1), "a");
        put(&w, 1356998401, Value::Int(2), "a");
        w.flush_all().unwrap();
        assert_eq!(w.buffered_points(), 0);
        // Late point for the stored hour, and an overwrite.
        put(&w, 1356998402, Value::Int(3), "a");
        let last = put(&w, 1356998400, Value::Float(9.5), "a");
        put(&w, 1356998400, Value::Int(7), "b");
        let got = read_all(&w);
        assert_eq!(got.len(), 2);
        let a: Vec<_> = got[0]
            .points
            .iter()
            .map(|p| (p.timestamp_ms(), p.value()))
            .collect();
        assert_eq!(
            a,
            vec![
                (1356998400000, Value::Float(9.5)),
                (1356998401000, Value::Int(2)),
                (1356998402000, Value::Int(3)),
            ]
        );
        w.wait_durable(last).await.unwrap();
        // Simulate a crash: no shutdown, WAL left behind.
        let wal_dir = dir.path().join(WAL_DIR);
        let copy = tempfile::tempdir().unwrap();
        for s in wal::list_segments(&wal_dir).unwrap() {
            std::fs::copy(
                wal::segment_path(&wal_dir, s),
                wal::segment_path(copy.path(), s),
            )
            .unwrap();
        }
        w.close().unwrap();
        drop(w);
        for s in wal::list_segments(copy.path()).unwrap() {
            std::fs::copy(
                wal::segment_path(copy.path(), s),
                wal::segment_path(&wal_dir, s),
            )
            .unwrap();
        }
        let w = open(dir.path());
        assert!(w.stats().points_replayed.load(Ordering::Relaxed) >= 3);
        let got = read_all(&w);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].points.len(), 3);
        assert_eq!(got[0].points[0].value(), Value::Float(9.5));
        w.close().unwrap();
        assert!(wal::list_segments(&wal_dir).unwrap().is_empty());
    }

    /// Histogram points are in the WAL: a store that never saw them (the
    /// log copied into a fresh directory) gets their cells at replay.
    #[tokio::test]
    async fn histogram_points_are_logged_and_replayed() {
        let dir = tempfile::tempdir().unwrap();
        // No flusher tick during the test: it would find nothing buffered
        // and delete the segment (the store has the cells).
        let mut opts = DbOptions::new(dir.path());
        opts.auto_create.metrics = true;
        opts.write.flush_interval = std::time::Duration::from_secs(3600);
        let w = Db::open(&opts).unwrap();
        let mut key = String::new();
        let value = vec![42u8, 0, 1, 0, 0, 0, 0, 0x3F, 0x80, 0, 0, 5, 0, 0];
        let (series, ts) = w
            .resolve_histogram("sys.cpu", 1356998460, &value, &[("host", "a")], &mut key)
            .unwrap();
        let a = w
            .append_histograms(&[PendingHistogram {
                series: series.clone(),
                ts,
                value: value.clone(),
            }])
            .unwrap();
        w.wait_durable(a).await.unwrap();
        let got = w
            .read_histograms(std::slice::from_ref(&series.tsuid), 0, u64::MAX)
            .unwrap()
            .series;
        assert_eq!(got, vec![vec![(1356998460000, value.clone())]]);
        let wal_dir = dir.path().join(WAL_DIR);
        let fresh = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(fresh.path().join(WAL_DIR)).unwrap();
        for s in wal::list_segments(&wal_dir).unwrap() {
            std::fs::copy(
                wal::segment_path(&wal_dir, s),
                wal::segment_path(&fresh.path().join(WAL_DIR), s),
            )
            .unwrap();
        }
        w.close().unwrap();
        drop(w);
        let w = open(fresh.path());
        assert_eq!(w.stats().points_replayed.load(Ordering::Relaxed), 1);
        let m = w
            .uids()
            .get_id(crate::model::UidKind::Metric, "sys.cpu")
            .unwrap();
        let tsuids = w.index().series_of(m);
        assert_eq!(tsuids.len(), 1);
        let got = w.read_histograms(&tsuids, 0, u64::MAX).unwrap().series;
        assert_eq!(got, vec![vec![(1356998460000, value)]]);
        w.close().unwrap();
    }
}
