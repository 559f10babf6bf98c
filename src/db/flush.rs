//! Flushing: the flusher thread seals buffered hours and writes them as
//! whole rows, removes WAL segments the store now covers, and adds the
//! in-memory series counters to the meta table.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Db;
use crate::meta::Counting;
use crate::storage::Durability;
use crate::write::buffer::{SealPolicy, SealedHour};
use crate::write::{Series, wal};

/// Once nothing is buffered, or a flush round let WAL segments go, the
/// engine's journal is moved into its tables when it holds this much
/// (`Journal::checkpoint`): by then that WAL is gone and the journal is
/// most of what is on disk, at about 1.3 times the bytes the same rows
/// take in tables (LZ4-compressed blocks), and more when rows were
/// written again with late points or after a flush under memory
/// pressure.
pub(super) const JOURNAL_CHECKPOINT_BYTES: u64 = 1 << 20;

/// How long reads must have paused before the flusher moves the engine's
/// journal for its bytes alone (see [`Db::truncate_wal`]): a dashboard's
/// queries come in bursts; a checkpoint between two of a burst holds the
/// next one up.
const READS_QUIET: Duration = Duration::from_millis(250);

/// The longest a move of the journal waits for reads to pause: a server
/// queried without a break still gets its journal's bytes back within
/// this (the disk figures of README are taken 60 s after a load).
pub(super) const CHECKPOINT_PATIENCE: Duration = Duration::from_secs(20);

/// A journal that takes at least 1/`HEAVY_JOURNAL_SHARE` of the engine's
/// bytes on disk is moved without waiting for reads to pause: right after
/// a first load, the seal of its rows left a journal about as large as
/// the tables (2 B/pt on disk instead of 1 while the bench's count query
/// polled without a break, in 1 of 14 runs), and a user sizing disks
/// looks at the running process. A store of any size holds far more in
/// its tables than the journal's bound, so there the move still waits.
const HEAVY_JOURNAL_SHARE: u64 = 5;

/// The most the engine's journal may hold at any moment, whatever is
/// buffered: past it the journal is moved into the tables at the next
/// flush round, and between the batches of a seal. fjall moves its
/// active journal only once it passed 64 MB and keeps up to 64 MiB of
/// sealed ones besides; a million new series (an index entry each, a
/// journal batch of about 50 bytes) and the seal of their hour (every row
/// written whole) filled both, 24 bytes a point of a 3-point-per-series
/// load, on top of the WAL and the rows. Each move reopens the engine and
/// merges what it flushed with the row table (a million series' rows,
/// about 15 MB, rewritten each time): with 8 MiB the server spent 15-25 %
/// more CPU on that load, so the bound is not lower.
pub(super) const JOURNAL_BOUND_BYTES: u64 = 16 << 20;

/// Hours sealed and written per batch of a flush: large enough that a
/// batch's write is one efficient pass, small enough that sealing a
/// million series does not hold a second copy of every buffered point
/// (about 200 bytes per hour in flight, so ~3 MiB a batch).
pub(super) const FLUSH_BATCH_HOURS: usize = 16 * 1024;

/// How often the per-series point counters are added to `tsdb-meta`.
const COUNTER_PERSIST_INTERVAL: Duration = Duration::from_secs(10);
/// How often the flusher drops data partitions past retention (a
/// cluster's weeks; a no-op on the embedded engine, whose compaction
/// filter expires rows). Partitions are weeks: an hour late is nothing.
const PARTITION_EXPIRY_INTERVAL: Duration = Duration::from_secs(3600);

/// Most rows of a seal that go to the engine in one write (one journal
/// batch). Fewer, larger writes make a seal cheaper (a write per row was
/// a sixth of a million series' seal), but a journal batch is also what
/// one damaged stretch of the journal costs: `fsck --salvage` cuts out
/// whole batches, so a batch stays a few dozen rows (the salvage tests in
/// tests/it/salvage.rs keep more than 95 % of a small import).
const ROWS_PER_ENGINE_WRITE: usize = 32;

/// Each series' sealed points (its hours' together), in the order of
/// `by_series.values()`: what one engine write of a batch stores.
fn points_by_series(
    by_series: &HashMap<u32, Vec<&SealedHour>>,
) -> Vec<(
    crate::model::Tsuid,
    Vec<(crate::model::point::Timestamp, crate::model::point::Value)>,
)> {
    by_series
        .values()
        .map(|hours| {
            let points = hours
                .iter()
                .flat_map(|h| h.points.iter().copied())
                .collect();
            (hours[0].series.tsuid.clone(), points)
        })
        .collect()
}

pub(super) fn flusher_loop(db: std::sync::Weak<Db>) {
    loop {
        let Some(db) = db.upgrade() else { return };
        if db.closed.load(Ordering::Acquire) {
            return;
        }
        {
            let mut woken = db.flusher_wake.0.lock();
            if !*woken {
                // On a shared store every tick writes everything buffered
                // (see `tick`), so the tick period bounds how stale other
                // TSDs' reads of this one's points are.
                let period = if db.store.shared() {
                    db.opts.shared_flush.min(db.opts.flush_interval)
                } else {
                    db.opts.flush_interval
                };
                let wait = (period / 2).max(Duration::from_millis(10));
                db.flusher_wake.1.wait_for(&mut woken, wait);
            }
            *woken = false;
        }
        if db.closed.load(Ordering::Acquire) {
            return;
        }
        db.tick(false);
    }
}

impl Db {
    pub(super) fn wake_flusher(&self) {
        *self.flusher_wake.0.lock() = true;
        self.flusher_wake.1.notify_one();
    }

    /// One flush round: seals what `policy` says and writes it, a batch
    /// of at most [`FLUSH_BATCH_HOURS`] hours at a time.
    pub(super) fn flush(&self, policy: SealPolicy) -> usize {
        let _f = self.flush_lock.lock();
        let mut stored = 0;
        loop {
            let (id, sealed) = self.buffer.seal(policy, FLUSH_BATCH_HOURS);
            let (written, failed) = self.write_sealed(&sealed);
            self.buffer.finish(id);
            stored += written;
            // A failed write put its hours back: sealing again now would
            // only take them again.
            if failed || sealed.len() < FLUSH_BATCH_HOURS {
                break;
            }
            // Every batch writes its rows whole into the engine's journal,
            // beside the WAL and the part-rows they replace: a seal of many
            // batches moves it along instead of holding them all.
            self.checkpoint_engine(JOURNAL_BOUND_BYTES);
        }
        self.stats
            .points_stored
            .fetch_add(stored as u64, Ordering::Relaxed);
        stored
    }

    /// Writes sealed hours, one store call per series (rows of several
    /// hours together); hours whose write fails go back to the buffer.
    /// Returns the points stored and whether any write failed.
    fn write_sealed(&self, sealed: &[SealedHour]) -> (usize, bool) {
        let mut stored = 0;
        let mut failed = false;
        let mut by_series: HashMap<u32, Vec<&SealedHour>> = HashMap::new();
        for h in sealed {
            by_series.entry(h.series.id).or_default().push(h);
        }
        if self.store.shared() {
            return match self.flush_batched(&by_series) {
                Ok(n) => (n, false),
                Err(_) => (0, true),
            };
        }
        // `tsd.rollups.auto`: looked up once per round, so the default
        // (off) costs nothing per row.
        let auto = self.auto_rollups();
        let batch = points_by_series(&by_series);
        let hours: Vec<usize> = by_series.values().map(Vec::len).collect();
        // The batch's rows go to the engine ROWS_PER_ENGINE_WRITE at a
        // time: written one series at a time, each row was a journal write
        // (a write(2) each) of its own, a sixth of a million series' seal.
        // Should a write fail (a full disk, a damaged stored row), its
        // series are written one at a time, so that one bad row keeps only
        // its own hours back.
        let mut in_written_chunk = vec![false; batch.len()];
        let mut first = 0;
        while first < batch.len() {
            let mut end = first + 1;
            let mut rows = hours[first];
            while end < batch.len() && rows + hours[end] <= ROWS_PER_ENGINE_WRITE {
                rows += hours[end];
                end += 1;
            }
            match self
                .store
                .put_points_many(&batch[first..end], Durability::Process)
            {
                Ok(()) => in_written_chunk[first..end].fill(true),
                Err(e) => {
                    tracing::warn!(series = end - first, error = %e, "writing rows of several series failed; writing them one series at a time");
                }
            }
            first = end;
        }
        for ((hours, (_, points)), chunk_written) in
            by_series.values().zip(&batch).zip(in_written_chunk)
        {
            let series = &hours[0].series;
            let written = if chunk_written {
                Ok(())
            } else {
                self.store
                    .put_points(&series.tsuid, points, Durability::Process)
            };
            let written = written.map_err(|e| {
                tracing::error!(series = %series.describe(), error = %e, "writing rows failed; points kept in memory");
            });
            // The hours' rollups are written before the hours count as
            // stored: until then their points stay buffered, pinning the
            // WAL segments holding them, so a crash (or a failed rollup
            // write) never leaves a stale rollup behind: the hours are
            // written again, with their rollups, by the next round or by
            // the replay at the next start (docs/rollups.md).
            let rolled = written.and_then(|()| match &auto {
                None => Ok(()),
                Some(auto) => {
                    let bases: Vec<u32> = hours.iter().map(|h| h.base).collect();
                    match auto.roll_up_hours(&series.tsuid, &bases) {
                        Ok(cells) => {
                            self.stats
                                .rollup_cells_computed
                                .fetch_add(cells, Ordering::Relaxed);
                            Ok(())
                        }
                        Err(e) => {
                            tracing::error!(series = %series.describe(), error = %e, "computing rollups failed; points kept in memory to write again");
                            self.stats.rollup_errors.fetch_add(1, Ordering::Relaxed);
                            Err(())
                        }
                    }
                }
            });
            match rolled {
                Ok(()) => {
                    stored += points.len();
                    self.stats
                        .rows_written
                        .fetch_add(hours.len() as u64, Ordering::Relaxed);
                }
                Err(()) => {
                    self.stats.flush_errors.fetch_add(1, Ordering::Relaxed);
                    failed = true;
                    for h in hours {
                        self.buffer.put_back(h);
                    }
                }
            }
        }
        (stored, failed)
    }

    /// The rest of [`flush`](Self::flush) on a cluster: every sealed row in
    /// one [`Store::put_points_many`](crate::store::Store::put_points_many)
    /// (a read and an insert per table, not per row: ClickHouse wants few,
    /// large inserts). On failure everything goes back to the buffer.
    fn flush_batched(&self, by_series: &HashMap<u32, Vec<&SealedHour>>) -> Result<usize, String> {
        let batch = points_by_series(by_series);
        let stored: usize = batch.iter().map(|(_, p)| p.len()).sum();
        let rows: u64 = by_series.values().map(|h| h.len() as u64).sum();
        // Index entries first: a series whose rows another TSD can read
        // is one its queries can find.
        let result = match self.index.flush() {
            Err(e) => Err(e.to_string()),
            Ok(()) if batch.is_empty() => Ok(()),
            Ok(()) => self
                .store
                .put_points_many(&batch, Durability::Process)
                .map_err(|e| e.to_string()),
        };
        match result {
            Ok(()) => {
                self.stats.rows_written.fetch_add(rows, Ordering::Relaxed);
                Ok(stored)
            }
            Err(e) => {
                tracing::error!(series = batch.len(), error = %e, "writing rows failed; points kept in memory");
                self.stats.flush_errors.fetch_add(1, Ordering::Relaxed);
                for hours in by_series.values() {
                    for h in hours {
                        self.buffer.put_back(h);
                    }
                }
                Err(e)
            }
        }
    }

    /// Writes every buffered point now (a `sync` put on a cluster): `Err`
    /// names why a point buffered before the call is not written.
    pub(super) fn flush_all_now(&self) -> Result<(), String> {
        let policy = SealPolicy {
            now_s: crate::model::time::now_s(),
            grace_s: self.opts.seal_grace.as_secs() as u32,
            idle_s: 5,
            pressure: false,
            everything: true,
        };
        let _f = self.flush_lock.lock();
        loop {
            let (id, sealed) = self.buffer.seal(policy, FLUSH_BATCH_HOURS);
            let mut by_series: HashMap<u32, Vec<&SealedHour>> = HashMap::new();
            for h in sealed.iter() {
                by_series.entry(h.series.id).or_default().push(h);
            }
            let written = self.flush_batched(&by_series);
            self.buffer.finish(id);
            let n = written?;
            self.stats
                .points_stored
                .fetch_add(n as u64, Ordering::Relaxed);
            if sealed.len() < FLUSH_BATCH_HOURS {
                return Ok(());
            }
        }
    }

    /// Adds the points counted in memory since the last call to each
    /// series' counters in `tsdb-meta` (TSMeta `totalDatapoints` and
    /// `lastReceived`): one batch for all series, never a write per point.
    pub fn persist_counters(&self) -> super::Result<()> {
        let how = self.opts.meta.counting();
        let mut last = self.counters.lock();
        let mut taken: Vec<(Arc<Series>, u64)> = Vec::new();
        let mut deltas = Vec::new();
        let widths = self.store.widths();
        self.series.for_each(|s| {
            let n = s.unsaved_points.swap(0, Ordering::Relaxed);
            // Without tracking nothing is stored; the counts are dropped.
            if n > 0 && how != Counting::Off {
                deltas.push((
                    s.tsuid.to_bytes(&widths),
                    n,
                    s.last_received.load(Ordering::Relaxed),
                ));
                taken.push((s.clone(), n));
            }
        });
        *last = std::time::Instant::now();
        if let Err(e) = self.meta.add_counters(&deltas, how) {
            // Keep the counts for the next attempt.
            for (s, n) in taken {
                s.unsaved_points.fetch_add(n, Ordering::Relaxed);
            }
            return Err(e.into());
        }
        Ok(())
    }

    fn persist_counters_if_due(&self) {
        if self.counters.lock().elapsed() < COUNTER_PERSIST_INTERVAL {
            return;
        }
        if let Err(e) = self.persist_counters() {
            tracing::error!(error = %e, "saving series counters failed; will retry");
        }
    }

    /// Deletes WAL segments whose points are all in the store. When
    /// nothing buffered pins any segment, the one being written is closed
    /// first, so that it can go too: otherwise a log that stopped growing
    /// (a bulk load that ended, a TSD gone quiet) would keep every point
    /// it ever logged on disk until the segment filled up, at ten times
    /// what the same points cost as rows.
    fn truncate_wal(&self) {
        // Under the flush lock: a delete holds it from before its WAL
        // record is appended until its rows are deleted, so the segment
        // holding the record cannot go (below) before the deletion is in
        // the store, which is synced before any segment goes.
        let _f = self.flush_lock.lock();
        // Read under the gate, so no append lands between the buffer's
        // pins and the log's position; walking the buffer is not cheap, so
        // it is read again only when the segment was closed meanwhile.
        let pins = || {
            let _g = self.gate.write();
            (
                self.buffer.min_segment(),
                self.wal.active_segment(),
                self.wal.closed_below(),
            )
        };
        let (mut min_pinned, active, mut closed_below) = pins();
        if min_pinned.is_none() && active.logged {
            match self.wal.rotate() {
                Ok(_) => (min_pinned, _, closed_below) = pins(),
                Err(e) => {
                    tracing::error!(error = %e, "closing the WAL segment failed; it is kept")
                }
            }
        }
        let below = min_pinned.unwrap_or(u64::MAX).min(closed_below);
        let oldest = wal::list_segments(self.wal.dir())
            .ok()
            .and_then(|s| s.first().copied());
        let mut deleted = false;
        if oldest.is_some_and(|o| o < below) {
            if let Err(e) = self.store.sync() {
                tracing::error!(error = %e, "store sync failed; WAL kept");
                return;
            }
            match self.wal.delete_below(below) {
                Ok(n) => deleted = n > 0,
                Err(e) => tracing::error!(error = %e, "deleting WAL segments failed"),
            }
        }
        // While a load goes on, the journal is moved when the log it
        // stands for went (after a full flush, above), or past its bound:
        // not at every round, as the move holds the engine briefly.
        let wanted = min_pinned.is_none() || deleted;
        let quiet = self.reads.quiet_for(READS_QUIET);
        let mut due = self.checkpoint_due.lock();
        if wanted && due.is_none() {
            *due = Some(std::time::Instant::now());
            // What the journal holds goes into the tables now, with reads
            // flowing, and only dropping the journal waits for them to
            // pause: reads of rows left in memtables were slower (the
            // one-series query of bench/million-series.sh, single runs at
            // load 3: 1.03 ms with them there, 0.64 ms in tables).
            if !quiet
                && let Some(journal) = self.store.journal()
                && let Err(e) = journal.flush(JOURNAL_CHECKPOINT_BYTES)
            {
                tracing::error!(error = %e, "moving the engine journal into its tables failed");
            }
        }
        match *due {
            // A move closes the engine and opens it again, and every read
            // waits meanwhile (12-26 ms after a 1,000-series load, a
            // dashboard's query several times over): the one bytes on
            // disk ask for waits for a pause in the reads, though never
            // past CHECKPOINT_PATIENCE, nor when the journal is a heavy
            // share of the engine's bytes. The bound does not wait.
            Some(since)
                if quiet || since.elapsed() >= CHECKPOINT_PATIENCE || self.journal_is_heavy() =>
            {
                *due = None;
                drop(due);
                self.checkpoint_engine(JOURNAL_CHECKPOINT_BYTES);
            }
            _ => {
                drop(due);
                self.checkpoint_engine(JOURNAL_BOUND_BYTES);
            }
        }
    }

    /// Whether the engine's journal is a share of its bytes on disk worth
    /// a move now, reads or not (see [`HEAVY_JOURNAL_SHARE`]).
    fn journal_is_heavy(&self) -> bool {
        self.store.journal().is_some_and(|journal| {
            let bytes = journal.bytes();
            bytes >= JOURNAL_CHECKPOINT_BYTES
                && bytes.saturating_mul(HEAVY_JOURNAL_SHARE) >= journal.disk_space()
        })
    }

    /// [`Journal::checkpoint`](crate::storage::Journal::checkpoint), for
    /// an engine with a journal: a failure costs only bytes on disk, so it
    /// is logged, not returned.
    pub(super) fn checkpoint_engine(&self, min_journal_bytes: u64) {
        let Some(journal) = self.store.journal() else {
            return;
        };
        let started = std::time::Instant::now();
        match journal.checkpoint(min_journal_bytes) {
            Ok(true) => {
                self.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(took = ?started.elapsed(), "engine journal moved into its tables");
            }
            Ok(false) => {}
            Err(e) => {
                tracing::error!(error = %e, "moving the engine journal into its tables failed")
            }
        }
    }

    /// A flush of everything buffered (memory pressure, a WAL past
    /// `tsd.storage.wal.max_bytes`) writes every point logged so far as
    /// rows, so it is also a checkpoint of the WAL: the segment being
    /// written is closed first, and once the flush stored what was
    /// buffered, [`truncate_wal`](Self::truncate_wal) lets every segment
    /// before it go. Without the rotation the points of the open hours
    /// would stay on disk twice (log and rows) until that segment filled
    /// up to 64 MiB. A failed rotation only keeps the log longer.
    pub(super) fn flush_everything(&self, policy: SealPolicy) {
        if let Err(e) = self.wal.rotate() {
            tracing::warn!(error = %e, "closing the WAL segment before a full flush failed; it is kept");
        }
        self.flush(SealPolicy {
            everything: true,
            ..policy
        });
    }

    pub(super) fn tick(&self, everything: bool) {
        // An engine that failed (a full disk) is reopened once the disk
        // takes writes again; until then nothing can be flushed, and the
        // points wait in the buffer (and the WAL).
        let below_floor = self.read_only.check_floor();
        if self.store.recover().is_err() {
            return;
        }
        // A log held in memory since a start on a full disk is replayed
        // before anything else is written (db/read_only.rs).
        if !self.leave_read_only(below_floor) {
            return;
        }
        let now = crate::model::time::now_s();
        self.buffer.tick(now);
        let policy = SealPolicy {
            now_s: now,
            grace_s: self.opts.seal_grace.as_secs() as u32,
            idle_s: 5,
            pressure: false,
            // On a cluster every tick writes everything, and the WAL goes
            // by the usual rule (its segments are closed as they fill).
            everything: everything || self.store.shared(),
        };
        if !self.store.shared() && self.wal.disk_bytes() > self.opts.wal_max_bytes {
            self.flush_everything(policy);
        } else {
            self.flush(policy);
        }
        if self.buffer.points() > self.opts.max_buffered_points {
            self.flush(SealPolicy {
                pressure: true,
                ..policy
            });
            if self.buffer.points() > self.opts.max_buffered_points / 2 {
                self.flush_everything(policy);
            }
        }
        self.truncate_wal();
        self.persist_counters_if_due();
        self.drop_expired_partitions_if_due();
        self.process_tree_queue();
    }

    /// Drops expired partitions at the first tick and then every
    /// [`PARTITION_EXPIRY_INTERVAL`] (every TSD of a cluster does; the
    /// drops are idempotent).
    fn drop_expired_partitions_if_due(&self) {
        {
            let mut last = self.partitions_expired.lock();
            if last.is_some_and(|t| t.elapsed() < PARTITION_EXPIRY_INTERVAL) {
                return;
            }
            *last = Some(std::time::Instant::now());
        }
        match self.store.drop_expired_partitions() {
            Ok(0) => {}
            Ok(n) => tracing::info!(partitions = n, "dropped data partitions past retention"),
            Err(e) => {
                tracing::warn!(error = %e, "dropping data partitions past retention failed; will retry")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use crate::db::Db;
    use crate::model::Value;
    use crate::storage::Durability;
    use crate::write::wal::PendingPoint;

    const BASE: u32 = 1_356_998_400;

    fn put(db: &Db, host: &str, offset: u32, value: i64) {
        let mut key = String::new();
        let (series, ts) = db
            .resolve(
                "m",
                (BASE + offset) as i64,
                Value::Int(value),
                &[("host", host)],
                &mut key,
            )
            .unwrap();
        db.append(&[PendingPoint {
            series,
            ts,
            value: Value::Int(value),
        }])
        .unwrap();
    }

    /// A sealed batch is written in one engine write; when that fails
    /// because one stored row is damaged, the other series are written
    /// one at a time and only the damaged row's series stays buffered.
    #[test]
    fn a_damaged_row_holds_back_only_its_own_series() {
        let (_dir, db) = Db::open_temp();
        let hosts = ["a", "b", "c"];
        for h in hosts {
            put(&db, h, 0, 1);
        }
        db.flush_all().unwrap();
        // Host b's stored row gets a value its qualifier does not fit.
        let tsuid = |h: &str| {
            let mut key = String::new();
            db.resolve("m", BASE as i64, Value::Int(0), &[("host", h)], &mut key)
                .unwrap()
                .0
                .tsuid
                .clone()
        };
        let store = db.store();
        let key_b = store.layout().row_key(&tsuid("b"), BASE);
        let mut row = store.get_row(&key_b).unwrap().unwrap();
        row.cells[0].value = vec![1, 2, 3];
        store.write_row(&key_b, &row, Durability::Sync).unwrap();
        // Closed hour: every series moves on, so the first one seals.
        for h in hosts {
            put(&db, h, 10, 2);
            put(&db, h, 3600, 3);
        }
        let errors = db.stats().flush_errors.load(Ordering::Relaxed);
        db.flush_all().unwrap();
        assert_eq!(db.stats().flush_errors.load(Ordering::Relaxed), errors + 1);
        for h in ["a", "c"] {
            let row = store
                .get_row(&store.layout().row_key(&tsuid(h), BASE))
                .unwrap()
                .unwrap();
            let points = store
                .decode(&store.layout().row_key(&tsuid(h), BASE), &row)
                .unwrap();
            assert_eq!(points.points.len(), 2, "host {h}: both points stored");
        }
        // Host b's new points (its hours are written together, and the
        // damaged one fails first) wait in memory; all else is stored.
        assert_eq!(db.buffer.points(), 2);
    }
}
