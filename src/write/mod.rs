//! The write path: points from the wire to the store.
//!
//! - [`line`]: the put-line parser shared by telnet and `tsdb import`.
//! - [`series`]: a point's names checked and resolved to its TSUID, once
//!   per series.
//! - [`wal`]: every point is logged before it is acknowledged.
//! - [`buffer`]: points wait in memory per series and hour; whole rows are
//!   written to the store when the hour is sealed.
//!
//! [`Writer`] ties them together, runs the flusher thread, replays the WAL
//! on start, and implements [`SeriesSource`] over stored rows merged with
//! buffered points. What is durable when:
//! - a `sync` write is acknowledged after its WAL records are fdatasynced;
//! - other writes are fdatasynced within `flush_interval` (they survive a
//!   process crash as soon as the WAL thread has written them);
//! - a WAL segment is deleted only after the store holds (and has synced)
//!   every point logged in it.

pub mod buffer;
pub mod hash;
pub mod line;
pub mod series;
pub mod wal;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex, RwLock};

use crate::codec::row_key::Tsuid;
use crate::index::SeriesIndex;
use crate::model::Uid;
use crate::storage::Durability;
use crate::store::read::{Point, PointSink, ReadStats, SeriesData, SeriesSource};
use crate::store::{self, Store};
use crate::uid::UidTable;

use buffer::{Buffer, SealPolicy, SealedHour};
pub use series::{PointError, Series, SeriesCache, parse_value};
pub use wal::{Appended, PendingPoint, Wal, WalOptions};

/// Directory of the WAL inside the data directory.
pub const WAL_DIR: &str = "wal";

#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// `tsd.storage.flush_interval`: the WAL fsync period and flusher tick.
    pub flush_interval: Duration,
    /// Buffered points above which hours are sealed early.
    pub max_buffered_points: usize,
    /// How long after an hour ends an idle series' row stays open.
    pub seal_grace: Duration,
    /// WAL bytes on disk above which everything is flushed (checkpoint).
    pub wal_max_bytes: u64,
    pub wal: WalOptions,
    /// `tsd.storage.max_tags`.
    pub max_tags: usize,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            flush_interval: Duration::from_millis(1000),
            max_buffered_points: 2_000_000,
            seal_grace: Duration::from_secs(600),
            wal_max_bytes: 512 << 20,
            wal: WalOptions::default(),
            max_tags: 8,
        }
    }
}

/// Write-path counters for `/api/stats`.
#[derive(Debug, Default)]
pub struct WriteStats {
    /// Points accepted (logged and buffered).
    pub points_added: AtomicU64,
    /// Points written to the store.
    pub points_stored: AtomicU64,
    /// Rows written to the store.
    pub rows_written: AtomicU64,
    /// Failed row writes (points kept and retried).
    pub flush_errors: AtomicU64,
    /// Points recovered from the WAL at start.
    pub points_replayed: AtomicU64,
}

pub struct Writer {
    store: Arc<Store>,
    index: Arc<SeriesIndex>,
    series: SeriesCache,
    buffer: Buffer,
    wal: Wal,
    /// Held shared by appenders (log + buffer as one step), exclusively
    /// while the flusher decides which WAL segments are still needed.
    gate: RwLock<()>,
    opts: WriterOptions,
    stats: WriteStats,
    closed: AtomicBool,
    flusher: Mutex<Option<std::thread::JoinHandle<()>>>,
    flusher_wake: (Mutex<bool>, Condvar),
    /// Serialises flushes (flusher thread, shutdown).
    flush_lock: Mutex<()>,
    /// Serialises counter persistence; holds when it last ran.
    counters: Mutex<std::time::Instant>,
}

/// How often the per-series point counters are added to `tsdb-meta`.
const COUNTER_PERSIST_INTERVAL: Duration = Duration::from_secs(10);

impl Writer {
    /// Opens the write path over `store`: replays and removes the WAL left
    /// in `<data_dir>/wal`, then starts the WAL and flusher threads.
    pub fn open(
        store: Arc<Store>,
        uids: Arc<UidTable>,
        data_dir: &Path,
        opts: WriterOptions,
    ) -> anyhow::Result<Arc<Writer>> {
        let wal_dir = data_dir.join(WAL_DIR);
        let series = SeriesCache::new(uids, opts.max_tags);
        let index = Arc::new(SeriesIndex::open(&store)?);
        let (next_segment, replayed) = replay(&store, &series, &index, &wal_dir)?;
        let wal = Wal::start(&wal_dir, next_segment, opts.wal.clone())?;
        let w = Arc::new(Writer {
            store,
            index,
            series,
            buffer: Buffer::new(),
            wal,
            gate: RwLock::new(()),
            opts,
            stats: WriteStats::default(),
            closed: AtomicBool::new(false),
            flusher: Mutex::new(None),
            flusher_wake: (Mutex::new(false), Condvar::new()),
            flush_lock: Mutex::new(()),
            counters: Mutex::new(std::time::Instant::now()),
        });
        w.stats.points_replayed.store(replayed, Ordering::Relaxed);
        let weak = Arc::downgrade(&w);
        let t = std::thread::Builder::new()
            .name("flusher".into())
            .spawn(move || flusher_loop(weak))?;
        *w.flusher.lock() = Some(t);
        Ok(w)
    }

    pub fn series(&self) -> &SeriesCache {
        &self.series
    }

    /// The series index this writer keeps up to date (queries use it to
    /// find series without scanning).
    pub fn index(&self) -> &Arc<SeriesIndex> {
        &self.index
    }

    pub fn uids(&self) -> &Arc<UidTable> {
        self.series.uids()
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
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

    /// Registers a callback run once for each series first seen by this
    /// process (the query side's series index).
    pub fn on_new_series(&self, f: Box<dyn Fn(&Tsuid) + Send + Sync>) {
        self.series.on_new_series(f);
    }

    /// Logs and buffers resolved points. The caller acknowledges them
    /// (after [`Writer::wait_durable`] for `sync` writers).
    pub fn append(&self, points: &[PendingPoint]) -> Result<Appended, PointError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(PointError::Storage("the TSD is shutting down".into()));
        }
        if points.is_empty() {
            return Ok(Appended {
                seq: 0,
                segment: 0,
                backlog: false,
            });
        }
        // Record each series' hours in the index before the points become
        // visible, so a query never finds buffered points it cannot name.
        let now = buffer::now_s() as u64;
        for p in points {
            p.series.unsaved_points.fetch_add(1, Ordering::Relaxed);
            if p.series.last_received.load(Ordering::Relaxed) != now {
                p.series.last_received.store(now, Ordering::Relaxed);
            }
            let hour = p.ts.base_time() as u64 + 1;
            if p.series.indexed_hour.load(Ordering::Relaxed) < hour {
                self.index
                    .add_at(&p.series.tsuid, p.ts.base_time())
                    .map_err(|e| PointError::Storage(e.to_string()))?;
                p.series.indexed_hour.fetch_max(hour, Ordering::Relaxed);
            }
        }
        let g = self.gate.read();
        let a = self.wal.append(points);
        for p in points {
            self.buffer.insert(&p.series, p.ts, p.value, a.segment);
        }
        drop(g);
        self.stats
            .points_added
            .fetch_add(points.len() as u64, Ordering::Relaxed);
        if self.buffer.points() > self.opts.max_buffered_points {
            self.wake_flusher();
        }
        Ok(a)
    }

    /// Waits until `a`'s points are on stable storage.
    pub async fn wait_durable(&self, a: Appended) {
        if a.seq > 0 {
            self.wal.wait_durable(a.seq).await;
        }
    }

    /// Waits while the WAL has a backlog (back-pressure for fast writers).
    pub async fn throttle(&self, a: Appended) {
        if a.backlog {
            self.wal.wait_written(a.seq).await;
        }
    }

    fn wake_flusher(&self) {
        *self.flusher_wake.0.lock() = true;
        self.flusher_wake.1.notify_one();
    }

    /// One flush round: seals what `policy` says and writes it.
    fn flush(&self, policy: SealPolicy) -> usize {
        let _f = self.flush_lock.lock();
        let (id, sealed) = self.buffer.seal(policy);
        let mut stored = 0;
        // One store call per series: rows of several hours together.
        let mut by_series: HashMap<u32, Vec<&SealedHour>> = HashMap::new();
        for h in sealed.iter() {
            by_series.entry(h.series.id).or_default().push(h);
        }
        for hours in by_series.values() {
            let points: Vec<_> = hours
                .iter()
                .flat_map(|h| h.points.iter().copied())
                .collect();
            match self
                .store
                .put_points(&hours[0].series.tsuid, &points, Durability::Process)
            {
                Ok(()) => {
                    stored += points.len();
                    self.stats
                        .rows_written
                        .fetch_add(hours.len() as u64, Ordering::Relaxed);
                }
                Err(e) => {
                    tracing::error!(series = %hours[0].series.describe(), error = %e, "writing rows failed; points kept in memory");
                    self.stats.flush_errors.fetch_add(1, Ordering::Relaxed);
                    for h in hours {
                        self.buffer.put_back(h);
                    }
                }
            }
        }
        self.buffer.finish(id);
        self.stats
            .points_stored
            .fetch_add(stored as u64, Ordering::Relaxed);
        stored
    }

    /// Adds the points counted in memory since the last call to each
    /// series' counters in `tsdb-meta` (TSMeta `totalDatapoints` and
    /// `lastReceived`): one batch for all series, never a write per point.
    pub fn persist_counters(&self) -> anyhow::Result<()> {
        let mut last = self.counters.lock();
        let mut taken: Vec<(Arc<Series>, u64)> = Vec::new();
        let mut deltas = Vec::new();
        let widths = self.store.layout().widths;
        self.series.for_each(|s| {
            let n = s.unsaved_points.swap(0, Ordering::Relaxed);
            if n > 0 {
                deltas.push((
                    s.tsuid.to_bytes(&widths),
                    n,
                    s.last_received.load(Ordering::Relaxed),
                ));
                taken.push((s.clone(), n));
            }
        });
        *last = std::time::Instant::now();
        if let Err(e) = crate::meta::add_counters(&**self.store.kv(), &deltas) {
            // Keep the counts for the next attempt.
            for (s, n) in taken {
                s.unsaved_points.fetch_add(n, Ordering::Relaxed);
            }
            return Err(e.into());
        }
        Ok(())
    }

    /// Forgets cached name→series mappings (`dropcaches`, UID renames),
    /// saving the series' point counters first so they are not lost with
    /// the forgotten entries.
    pub fn forget_series_names(&self) {
        if let Err(e) = self.persist_counters() {
            tracing::error!(error = %e, "saving series counters failed before forgetting names");
        }
        self.series.forget_names();
    }

    fn persist_counters_if_due(&self) {
        if self.counters.lock().elapsed() < COUNTER_PERSIST_INTERVAL {
            return;
        }
        if let Err(e) = self.persist_counters() {
            tracing::error!(error = %e, "saving series counters failed; will retry");
        }
    }

    /// Deletes WAL segments whose points are all in the store.
    fn truncate_wal(&self) {
        let (min_pinned, closed_below) = {
            let _g = self.gate.write();
            (self.buffer.min_segment(), self.wal.closed_below())
        };
        let below = min_pinned.unwrap_or(u64::MAX).min(closed_below);
        let oldest = wal::list_segments(self.wal.dir())
            .ok()
            .and_then(|s| s.first().copied());
        if oldest.is_some_and(|o| o < below) {
            if let Err(e) = self.store.sync() {
                tracing::error!(error = %e, "store sync failed; WAL kept");
                return;
            }
            if let Err(e) = self.wal.delete_below(below) {
                tracing::error!(error = %e, "deleting WAL segments failed");
            }
        }
    }

    fn tick(&self, everything: bool) {
        let now = buffer::now_s();
        self.buffer.tick(now);
        let policy = SealPolicy {
            now_s: now,
            grace_s: self.opts.seal_grace.as_secs() as u32,
            idle_s: 5,
            pressure: false,
            everything: everything || self.wal.disk_bytes() > self.opts.wal_max_bytes,
        };
        self.flush(policy);
        if self.buffer.points() > self.opts.max_buffered_points {
            self.flush(SealPolicy {
                pressure: true,
                ..policy
            });
            if self.buffer.points() > self.opts.max_buffered_points / 2 {
                self.flush(SealPolicy {
                    everything: true,
                    ..policy
                });
            }
        }
        self.truncate_wal();
        self.persist_counters_if_due();
    }

    /// Writes every buffered point to the store and syncs it (tests,
    /// `dropcaches`-style maintenance). Ingest may continue meanwhile.
    pub fn flush_all(&self) -> anyhow::Result<()> {
        self.tick(true);
        self.store.sync()?;
        Ok(())
    }

    /// Stops accepting points, flushes everything to the store, syncs it
    /// and removes the WAL. Idempotent.
    pub fn shutdown(&self) -> anyhow::Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.wake_flusher();
        if let Some(t) = self.flusher.lock().take() {
            let _ = t.join();
        }
        // Appenders that passed the closed check finish under the gate.
        drop(self.gate.write());
        self.wal.close();
        self.flush(SealPolicy {
            now_s: buffer::now_s(),
            grace_s: 0,
            idle_s: 0,
            pressure: false,
            everything: true,
        });
        if let Err(e) = self.persist_counters() {
            tracing::error!(error = %e, "saving series counters at shutdown failed");
        }
        self.store.sync()?;
        if self.buffer.points() == 0 {
            self.wal.delete_below(u64::MAX)?;
            // The active segment is closed too now.
            for s in wal::list_segments(self.wal.dir())? {
                std::fs::remove_file(wal::segment_path(self.wal.dir(), s))?;
            }
        }
        tracing::info!(
            stored = self.stats.points_stored.load(Ordering::Relaxed),
            "write path flushed and closed"
        );
        Ok(())
    }
}

fn flusher_loop(w: std::sync::Weak<Writer>) {
    loop {
        let Some(writer) = w.upgrade() else { return };
        if writer.closed.load(Ordering::Acquire) {
            return;
        }
        {
            let mut woken = writer.flusher_wake.0.lock();
            if !*woken {
                let wait = (writer.opts.flush_interval / 2).max(Duration::from_millis(10));
                writer.flusher_wake.1.wait_for(&mut woken, wait);
            }
            *woken = false;
        }
        if writer.closed.load(Ordering::Acquire) {
            return;
        }
        writer.tick(false);
    }
}

/// Replays every WAL segment into the store, syncs it and deletes the
/// segments. Returns the next segment number and the points replayed.
fn replay(
    store: &Arc<Store>,
    series: &SeriesCache,
    index: &SeriesIndex,
    dir: &Path,
) -> anyhow::Result<(u64, u64)> {
    let segments = wal::list_segments(dir)?;
    let Some(&last) = segments.last() else {
        return Ok((1, 0));
    };
    let mut total = 0u64;
    for seg in &segments {
        let path: PathBuf = wal::segment_path(dir, *seg);
        let contents = wal::read_segment(&path)?;
        if contents.bad_tail > 0 {
            tracing::warn!(segment = %path.display(), bytes = contents.bad_tail, "WAL segment ends in a torn or corrupt frame; ignoring its tail");
        }
        let mut ids: HashMap<u32, Arc<Series>> = HashMap::new();
        let mut points: HashMap<u32, Vec<(crate::model::Timestamp, crate::model::Value)>> =
            HashMap::new();
        for rec in contents.records {
            match rec {
                wal::Record::Series { id, metric, tags } => {
                    let t: Vec<(&str, &str)> =
                        tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                    match series.resolve_replayed(&metric, &t) {
                        Ok(s) => {
                            ids.insert(id, s);
                        }
                        Err(e) => {
                            tracing::error!(metric, error = ?e, "WAL series cannot be resolved; its points are skipped")
                        }
                    }
                }
                wal::Record::Point { id, ts, value } => {
                    if ids.contains_key(&id) {
                        points.entry(id).or_default().push((ts, value));
                    }
                }
                wal::Record::Delete {
                    tsuid,
                    first_hour,
                    last_hour,
                } => {
                    let Ok(tsuid) = Tsuid::from_bytes(&tsuid, &store.layout().widths) else {
                        continue;
                    };
                    // Points logged earlier in this segment go, and rows
                    // earlier segments' replay already stored are deleted.
                    for (id, s) in &ids {
                        if s.tsuid == tsuid
                            && let Some(pts) = points.get_mut(id)
                        {
                            pts.retain(|(ts, _)| {
                                !(first_hour..=last_hour).contains(&ts.base_time())
                            });
                        }
                    }
                    let mut base = first_hour;
                    while base <= last_hour {
                        store.delete_row(
                            &store.layout().row_key(&tsuid, base),
                            Durability::Process,
                        )?;
                        base = match base.checked_add(3600) {
                            Some(b) => b,
                            None => break,
                        };
                    }
                }
            }
        }
        for (id, pts) in points {
            let s = &ids[&id];
            // Later writes win: put_points merges in order, so keep the
            // last value per timestamp before writing.
            let mut dedup: std::collections::BTreeMap<
                u64,
                (crate::model::Timestamp, crate::model::Value),
            > = Default::default();
            for (ts, v) in pts {
                dedup.insert(ts.as_millis(), (ts, v));
            }
            let pts: Vec<_> = dedup.into_values().collect();
            total += pts.len() as u64;
            // The index write may not have survived what the WAL did.
            if let Some(latest) = pts.iter().map(|(ts, _)| ts.base_time()).max() {
                index.add_at(&s.tsuid, latest)?;
            }
            store.put_points(&s.tsuid, &pts, Durability::Process)?;
        }
    }
    store.sync()?;
    for seg in &segments {
        std::fs::remove_file(wal::segment_path(dir, *seg))?;
    }
    if total > 0 {
        tracing::info!(
            points = total,
            segments = segments.len(),
            "replayed the write-ahead log"
        );
    }
    Ok((last + 1, total))
}

impl Writer {
    /// Reads `tsuids` from the store through `read`, merging in the points
    /// still buffered here. Series with nothing buffered stream straight
    /// through; the others are collected, merged last-write-wins and then
    /// handed over whole.
    fn read_merged(
        &self,
        tsuids: &[Tsuid],
        start_ms: u64,
        end_ms: u64,
        sink: &mut PointSink<'_>,
        read: impl FnOnce(&mut PointSink<'_>) -> store::Result<ReadStats>,
    ) -> store::Result<ReadStats> {
        // Buffer first: a point sealed meanwhile is then found in the store.
        let mut buffered: HashMap<Tsuid, Vec<Point>> = HashMap::new();
        let mut metrics: Vec<Uid> = tsuids.iter().map(|t| t.metric).collect();
        metrics.sort_unstable();
        metrics.dedup();
        let asked: std::collections::HashSet<&Tsuid> = tsuids.iter().collect();
        for m in metrics {
            buffered.extend(
                self.buffer
                    .read(m, start_ms, end_ms, &mut |t| asked.contains(t)),
            );
        }
        let pending: HashMap<usize, Vec<Point>> = tsuids
            .iter()
            .enumerate()
            .filter_map(|(i, t)| buffered.remove(t).map(|p| (i, p)))
            .collect();
        let mut stored: HashMap<usize, Vec<Point>> = HashMap::new();
        let mut stopped = false;
        let mut stats = read(&mut |i, points: &[Point]| {
            if pending.contains_key(&i) {
                stored.entry(i).or_default().extend_from_slice(points);
                true
            } else {
                let go_on = sink(i, points);
                stopped |= !go_on;
                go_on
            }
        })?;
        if stopped {
            return Ok(stats);
        }
        for (i, newer) in pending {
            let merged = match stored.remove(&i) {
                Some(older) if !older.is_empty() => merge_last_wins(older, newer),
                _ => newer,
            };
            stats.points += merged.len() as u64;
            if !merged.is_empty() && !sink(i, &merged) {
                break;
            }
        }
        Ok(stats)
    }
}

impl Writer {
    /// Deletes whole hour rows of `tsuids`: every row whose hour overlaps
    /// `[start_ms, end_ms]`, in the store and still buffered in memory
    /// (OpenTSDB's `/api/query` delete removes each row its scan met).
    /// Returns the stored rows and buffered points removed.
    ///
    /// The series stay in the index. Points already logged in a WAL
    /// segment that is still on disk come back if the TSD crashes before
    /// the segment is removed: the WAL has no delete record.
    pub fn delete_rows(
        &self,
        tsuids: &[Tsuid],
        start_ms: u64,
        end_ms: u64,
    ) -> store::Result<(u64, usize)> {
        if tsuids.is_empty() || end_ms < start_ms {
            return Ok((0, 0));
        }
        let hour = |ms: u64| {
            let s = (ms / 1000).min(u32::MAX as u64) as u32;
            s - s % 3600
        };
        let (first, last) = (hour(start_ms), hour(end_ms));
        let doomed: std::collections::HashSet<&Tsuid> = tsuids.iter().collect();
        // Logged first and made durable: a replay after a crash must not
        // resurrect points the log holds from before the delete.
        let widths = self.store.layout().widths;
        let logged: Vec<Vec<u8>> = tsuids.iter().map(|t| t.to_bytes(&widths)).collect();
        let a = self.wal.append_deletes(&logged, first, last);
        self.wal.wait_durable_blocking(a.seq);
        // No sealed hour is in flight while this is held, so none can land
        // in the store after its row was deleted.
        let _f = self.flush_lock.lock();
        let points = self
            .buffer
            .remove_hours(&|t| doomed.contains(t), first, last);
        let mut metrics: Vec<Uid> = tsuids.iter().map(|t| t.metric).collect();
        metrics.sort_unstable();
        metrics.dedup();
        let layout = self.store.layout();
        let mut keys = Vec::new();
        for m in metrics {
            for row in self.store.scan_metric_rows(m, first, last) {
                let (key, _) = row?;
                if let Ok(k) = layout.parse_row_key(&key)
                    && doomed.contains(&k.tsuid)
                {
                    keys.push(key);
                }
            }
        }
        for k in &keys {
            self.store.delete_row(k, Durability::Process)?;
        }
        Ok((keys.len() as u64, points))
    }
}

impl crate::query::RowDeleter for Writer {
    fn delete_rows(&self, tsuids: &[Tsuid], start_ms: u64, end_ms: u64) -> Result<u64, String> {
        Writer::delete_rows(self, tsuids, start_ms, end_ms)
            .map(|(rows, _)| rows)
            .map_err(|e| e.to_string())
    }
}

impl SeriesSource for Writer {
    fn global_annotations(
        &self,
        start_ms: u64,
        end_ms: u64,
    ) -> store::Result<Vec<crate::model::Annotation>> {
        self.store.global_annotations(start_ms, end_ms)
    }

    fn read_tsuids(
        &self,
        tsuids: &[Tsuid],
        start_ms: u64,
        end_ms: u64,
        sink: &mut PointSink<'_>,
    ) -> store::Result<ReadStats> {
        self.read_merged(tsuids, start_ms, end_ms, sink, |s| {
            self.store.read_tsuids(tsuids, start_ms, end_ms, s)
        })
    }

    fn scan_tsuids(
        &self,
        metric: Uid,
        tsuids: &[Tsuid],
        start_ms: u64,
        end_ms: u64,
        sink: &mut PointSink<'_>,
    ) -> store::Result<ReadStats> {
        self.read_merged(tsuids, start_ms, end_ms, sink, |s| {
            self.store.scan_tsuids(metric, tsuids, start_ms, end_ms, s)
        })
    }

    fn read_series(
        &self,
        metric: Uid,
        start_ms: u64,
        end_ms: u64,
        want: &mut dyn FnMut(&Tsuid) -> bool,
    ) -> store::Result<Vec<SeriesData>> {
        // Buffer first: a point sealed meanwhile is then found in the store.
        let mut buffered = self.buffer.read(metric, start_ms, end_ms, &mut |_| true);
        let stored = self.store.read_series(metric, start_ms, end_ms, want)?;
        let mut out = Vec::with_capacity(stored.len() + buffered.len());
        for mut s in stored {
            if let Some(b) = buffered.remove(&s.tsuid) {
                s.points = merge_last_wins(s.points, b);
            }
            out.push(s);
        }
        for (tsuid, points) in buffered {
            if want(&tsuid) {
                out.push(SeriesData { tsuid, points });
            }
        }
        out.sort_by(|a, b| a.tsuid.cmp(&b.tsuid));
        Ok(out)
    }
}

/// Merges two sorted point lists; on equal timestamps `newer` wins.
fn merge_last_wins(older: Vec<Point>, newer: Vec<Point>) -> Vec<Point> {
    let mut out = Vec::with_capacity(older.len() + newer.len());
    let (mut a, mut b) = (older.into_iter().peekable(), newer.into_iter().peekable());
    loop {
        match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => {
                if x.timestamp_ms < y.timestamp_ms {
                    out.push(a.next().expect("peeked"));
                } else if x.timestamp_ms > y.timestamp_ms {
                    out.push(b.next().expect("peeked"));
                } else {
                    a.next();
                    out.push(b.next().expect("peeked"));
                }
            }
            (Some(_), None) => out.push(a.next().expect("peeked")),
            (None, Some(_)) => out.push(b.next().expect("peeked")),
            (None, None) => return out,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NameRules, Timestamp, Value};
    use crate::store::StoreOptions;
    use crate::uid::AutoCreate;

    fn open(dir: &Path) -> Arc<Writer> {
        let store = Arc::new(Store::open(dir, &StoreOptions::default()).unwrap());
        let uids = Arc::new(UidTable::new(
            &store,
            AutoCreate {
                metrics: true,
                ..Default::default()
            },
            NameRules::default(),
        ));
        Writer::open(store, uids, dir, WriterOptions::default()).unwrap()
    }

    fn put(w: &Writer, ts: i64, v: Value, host: &str) -> Appended {
        let mut key = String::new();
        let (series, ts) = w
            .series()
            .resolve("sys.cpu", ts, v, &[("host", host)], &mut key)
            .unwrap();
        w.append(&[PendingPoint {
            series,
            ts,
            value: v,
        }])
        .unwrap()
    }

    fn read_all(w: &Writer) -> Vec<SeriesData> {
        let m = w
            .uids()
            .get_id(crate::model::UidKind::Metric, "sys.cpu")
            .unwrap();
        w.read_series(m, 0, u64::MAX, &mut |_| true).unwrap()
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
            .map(|p| (p.timestamp_ms, p.value))
            .collect();
        assert_eq!(
            a,
            vec![
                (1356998400000, Value::Float(9.5)),
                (1356998401000, Value::Int(2)),
                (1356998402000, Value::Int(3)),
            ]
        );
        w.wait_durable(last).await;
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
        w.shutdown().unwrap();
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
        assert_eq!(got[0].points[0].value, Value::Float(9.5));
        w.shutdown().unwrap();
        assert!(wal::list_segments(&wal_dir).unwrap().is_empty());
        let _ = Timestamp::Seconds(0);
    }
}
