//! Replay: the WAL left by the previous process is read back into the
//! store when a database opens, then removed.
//!
//! No record can stop a store from opening: a damaged frame costs only
//! itself (the segment reader finds the next frame), and a record that
//! cannot be stored (its series cannot be resolved, its time is beyond
//! the last row, the row store refuses it, a delete names a bad TSUID) is
//! skipped, counted and logged once per kind. A segment that lost
//! anything is moved to `wal/damaged/` instead of being deleted, so what
//! it held can still be looked at. Only a failing disk or engine stops
//! replay, leaving every segment where it was for the next start.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use super::rollup::AutoRollups;
use super::{DbError, Result};
use crate::index::SeriesIndex;
use crate::model::Tsuid;
use crate::model::{Timestamp, Value};
use crate::storage::Durability;
use crate::store::{Store, StoreError};
use crate::write::{Series, SeriesCache, wal};

/// What a replay stored, and what it had to leave out.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplayReport {
    /// Points written to the store.
    pub points: u64,
    /// Stretches of damaged bytes skipped (each at least one frame), and
    /// their bytes. A torn last frame of the newest segment is not damage.
    pub damaged_frames: u64,
    pub damaged_bytes: u64,
    /// Points whose series was declared in a damaged frame: series ids
    /// are local to the writing process, so their names are lost.
    pub orphaned_points: u64,
    /// Records that could not be stored: see [`Skip`].
    pub unstorable: u64,
    /// Segments moved to `wal/damaged/` because they lost something.
    pub segments_kept: u64,
    /// Rollup cells computed for the hours replayed (`tsd.rollups.auto`).
    pub rollup_cells: u64,
}

/// Why a record was skipped: one log line per kind, with a count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Skip {
    Orphaned,
    UnresolvableSeries,
    BeyondLastRow,
    RowRefused,
    BadDeleteTsuid,
}

impl Skip {
    fn describe(self) -> &'static str {
        match self {
            Skip::Orphaned => {
                "WAL points skipped: their series was declared in a damaged frame, so their names are lost"
            }
            Skip::UnresolvableSeries => "WAL points skipped: their series cannot be resolved",
            Skip::BeyondLastRow => {
                "WAL points skipped: their timestamp is past the last row a key can hold (second > 4294967295)"
            }
            Skip::RowRefused => "WAL points skipped: the row store refused them",
            Skip::BadDeleteTsuid => "WAL deletes skipped: their TSUID does not fit this store",
        }
    }
}

/// Skipped records by kind: how many, and the first one's details.
#[derive(Default)]
struct Skips(BTreeMap<Skip, (u64, String)>);

impl Skips {
    fn add(&mut self, kind: Skip, n: u64, detail: impl FnOnce() -> String) {
        if n == 0 {
            return;
        }
        let e = self.0.entry(kind).or_insert_with(|| (0, detail()));
        e.0 += n;
    }

    fn total(&self) -> u64 {
        self.0.values().map(|(n, _)| n).sum()
    }

    fn count(&self, kind: Skip) -> u64 {
        self.0.get(&kind).map_or(0, |(n, _)| *n)
    }

    fn log(&self) {
        for (kind, (count, first)) in &self.0 {
            tracing::warn!(count, first = %first, "{}", kind.describe());
        }
    }
}

/// Whether a row-store error is the disk or engine failing (replay stops
/// and keeps the WAL for the next start) rather than these points being
/// refused.
fn is_environmental(e: &StoreError) -> bool {
    matches!(e, StoreError::Storage(_) | StoreError::Io(_))
}

/// Replays every WAL segment in `dir` into the row store, syncs it, and
/// deletes the segments (or moves those that lost anything aside).
/// Returns the next segment number and what was replayed and skipped.
///
/// With `auto` (`tsd.rollups.auto`), the rollups of every hour a point
/// is replayed into are computed again from the stored rows before the
/// sync, so the log goes only once they are durable: a crash between a
/// flush's raw rows and their rollups (the flusher lets the log go only
/// after both) leaves no stale rollup once the store has opened again
/// (docs/rollups.md).
pub(super) fn replay(
    rows: &Store,
    series: &SeriesCache,
    index: &SeriesIndex,
    dir: &Path,
    auto: Option<&AutoRollups>,
) -> Result<(u64, ReplayReport)> {
    let segments = wal::list_segments(dir).map_err(|cause| DbError::Wal {
        path: dir.to_path_buf(),
        cause,
    })?;
    let Some(&last) = segments.last() else {
        return Ok((1, ReplayReport::default()));
    };
    let report = replay_segments(rows, series, index, dir, &segments, auto)?;
    Ok((last + 1, report))
}

/// [`replay`] of the listed segments of `dir` (in log order): stores
/// their records, syncs the store, deletes them (or moves aside those
/// that lost anything).
fn replay_segments(
    rows: &Store,
    series: &SeriesCache,
    index: &SeriesIndex,
    dir: &Path,
    segments: &[u64],
    auto: Option<&AutoRollups>,
) -> Result<ReplayReport> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |cause| DbError::Wal { path, cause }
    };
    let mut report = ReplayReport::default();
    let Some(&last) = segments.last() else {
        return Ok(report);
    };
    let mut skips = Skips::default();
    let mut lossy = Vec::new();
    for &seg in segments {
        let path = wal::segment_path(dir, seg);
        let contents = wal::read_segment(&path).map_err(io(&path))?;
        let scan = contents.scan;
        let skipped_before = skips.total();
        // Only the segment being written when the process died can end
        // in a torn write; anywhere else a cut frame is damage.
        let (mut damaged_frames, mut damaged_bytes) = (scan.damaged_frames, scan.damaged_bytes);
        if scan.torn_tail > 0 {
            if seg == last {
                tracing::info!(segment = %path.display(), bytes = scan.torn_tail, "WAL segment ends in a torn write (normal after a crash); ignoring it");
            } else {
                damaged_frames += 1;
                damaged_bytes += scan.torn_tail;
            }
        }
        if damaged_frames > 0 {
            tracing::warn!(segment = %path.display(), damaged_frames, damaged_bytes, frames_read = scan.frames, "WAL segment has damaged frames; skipping them and replaying every frame found after them");
        }
        report.damaged_frames += damaged_frames;
        report.damaged_bytes += damaged_bytes;
        let (points, cells) =
            replay_segment(rows, series, index, contents.records, auto, &mut skips)?;
        report.points += points;
        report.rollup_cells += cells;
        if damaged_frames > 0 || skips.total() > skipped_before {
            lossy.push(seg);
        }
    }
    rows.sync()?;
    for &seg in segments {
        let path = wal::segment_path(dir, seg);
        if lossy.contains(&seg) {
            let to = wal::move_aside(dir, seg).map_err(io(&path))?;
            tracing::warn!(segment = %path.display(), moved_to = %to.display(), "WAL segment lost frames or records at replay; kept for inspection instead of deleted (remove it once inspected)");
        } else {
            std::fs::remove_file(&path).map_err(io(&path))?;
        }
    }
    skips.log();
    report.orphaned_points = skips.count(Skip::Orphaned);
    report.unstorable = skips.total() - report.orphaned_points;
    report.segments_kept = lossy.len() as u64;
    if report.points > 0 || skips.total() > 0 || report.damaged_frames > 0 {
        tracing::info!(
            points = report.points,
            segments = segments.len(),
            damaged_frames = report.damaged_frames,
            orphaned_points = report.orphaned_points,
            unstorable = report.unstorable,
            "replayed the write-ahead log"
        );
    }
    Ok(report)
}

/// Stores one segment's records; returns the points stored and the
/// rollup cells computed for their hours.
fn replay_segment(
    rows: &Store,
    series: &SeriesCache,
    index: &SeriesIndex,
    records: Vec<wal::Record>,
    auto: Option<&AutoRollups>,
    skips: &mut Skips,
) -> Result<(u64, u64)> {
    let mut ids: HashMap<u32, Arc<Series>> = HashMap::new();
    // Declared, but the names could not be resolved: not orphans.
    let mut unresolved: HashMap<u32, String> = HashMap::new();
    let mut points: HashMap<u32, Vec<(Timestamp, Value)>> = HashMap::new();
    let mut histograms: HashMap<u32, Vec<(Timestamp, Vec<u8>)>> = HashMap::new();
    // Rows to delete, by hour range: nothing in this segment is written
    // before its last record is read, so deleting them all then (and
    // before its points are written) is what deleting each at its
    // record would do, in one row-store call per range.
    let mut deletes: BTreeMap<(u32, u32), Vec<Tsuid>> = BTreeMap::new();
    for rec in records {
        match rec {
            wal::Record::Series { id, metric, tags } => {
                let t: Vec<(&str, &str)> =
                    tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                match series.resolve_replayed(&metric, &t) {
                    Ok(s) => {
                        unresolved.remove(&id);
                        ids.insert(id, s);
                    }
                    Err(e) => {
                        // Its points are counted as they come.
                        ids.remove(&id);
                        unresolved.insert(id, format!("metric {metric}: {}", e.telnet_line()));
                    }
                }
            }
            wal::Record::Point { id, ts, value } => {
                if ids.contains_key(&id) {
                    points.entry(id).or_default().push((ts, value));
                } else if let Some(why) = unresolved.get(&id) {
                    skips.add(Skip::UnresolvableSeries, 1, || why.clone());
                } else {
                    skips.add(Skip::Orphaned, 1, || {
                        format!("series id {id}, timestamp {ts}")
                    });
                }
            }
            wal::Record::Histogram { id, raw_ts, value } => {
                let ts = match i64::try_from(raw_ts).map(Timestamp::from_raw) {
                    Ok(Ok(ts)) => ts,
                    _ => {
                        skips.add(Skip::BeyondLastRow, 1, || {
                            format!("histogram of series id {id}, timestamp {raw_ts}")
                        });
                        continue;
                    }
                };
                if ids.contains_key(&id) {
                    histograms.entry(id).or_default().push((ts, value));
                } else if let Some(why) = unresolved.get(&id) {
                    skips.add(Skip::UnresolvableSeries, 1, || why.clone());
                } else {
                    skips.add(Skip::Orphaned, 1, || {
                        format!("series id {id}, histogram at {ts}")
                    });
                }
            }
            wal::Record::UnstorablePoint { id, raw_ts, .. } => {
                skips.add(Skip::BeyondLastRow, 1, || {
                    let name = ids
                        .get(&id)
                        .map_or_else(|| format!("series id {id}"), |s| s.describe().to_string());
                    format!("{name}, timestamp {raw_ts}")
                });
            }
            wal::Record::Delete {
                tsuid,
                first_hour,
                last_hour,
            } => {
                let tsuid = match Tsuid::from_bytes(&tsuid, &rows.widths()) {
                    Ok(t) => t,
                    Err(e) => {
                        skips.add(Skip::BadDeleteTsuid, 1, || e.to_string());
                        continue;
                    }
                };
                // Points logged earlier in this segment go, and rows
                // earlier segments' replay already stored are deleted
                // (below).
                let deleted = |ts: &Timestamp| {
                    ts.base_time()
                        .is_ok_and(|b| (first_hour..=last_hour).contains(&b))
                };
                for (id, s) in &ids {
                    if s.tsuid != tsuid {
                        continue;
                    }
                    if let Some(pts) = points.get_mut(id) {
                        pts.retain(|(ts, _)| !deleted(ts));
                    }
                    if let Some(hs) = histograms.get_mut(id) {
                        hs.retain(|(ts, _)| !deleted(ts));
                    }
                }
                deletes
                    .entry((first_hour, last_hour))
                    .or_default()
                    .push(tsuid);
            }
        }
    }
    let mut cells = 0;
    for ((first_hour, last_hour), tsuids) in deletes {
        rows.delete_rows(&tsuids, first_hour, last_hour)?;
        // A crash may have come before the delete's rollups were
        // recomputed (`Db::delete_rows`); points logged after the delete
        // are rolled up again below.
        if let Some(auto) = auto {
            cells += auto.roll_up_deleted(&tsuids, first_hour, last_hour)?;
        }
    }
    let mut stored = 0;
    for (id, pts) in points {
        let s = &ids[&id];
        // Later writes win: put_points merges in order, so keep the
        // last value per timestamp before writing.
        let mut dedup: BTreeMap<u64, (Timestamp, Value)> = BTreeMap::new();
        for (ts, v) in pts {
            dedup.insert(ts.as_millis(), (ts, v));
        }
        let pts: Vec<_> = dedup.into_values().collect();
        // The index write may not have survived what the WAL did.
        if let Some(latest) = pts.iter().filter_map(|(ts, _)| ts.base_time().ok()).max() {
            index.add_at(&s.tsuid, latest)?;
        }
        stored += store_points(rows, s, &pts, skips)?;
        if let Some(auto) = auto {
            // Every hour the log held points of, stored or refused: its
            // rollups follow what its row now holds.
            let mut hours: Vec<u32> = pts
                .iter()
                .filter_map(|(ts, _)| ts.base_time().ok())
                .collect();
            hours.dedup();
            cells += auto.roll_up_hours(&s.tsuid, &hours)?;
        }
    }
    for (id, hs) in histograms {
        let s = &ids[&id];
        if let Some(latest) = hs.iter().filter_map(|(ts, _)| ts.base_time().ok()).max() {
            index.add_at(&s.tsuid, latest)?;
        }
        // Logged in order: putting them in order leaves the last write of
        // a cell in place.
        match rows.put_histograms(&s.tsuid, &hs, Durability::Process) {
            Ok(()) => stored += hs.len() as u64,
            Err(e) if is_environmental(&e) => return Err(e.into()),
            Err(e) => skips.add(Skip::RowRefused, hs.len() as u64, || {
                format!("{}, histograms: {e}", s.describe())
            }),
        }
    }
    Ok((stored, cells))
}

/// Writes a series' points; if the row store refuses them (rather than
/// failing), writes them one by one so only the refused ones are skipped.
fn store_points(
    rows: &Store,
    s: &Series,
    pts: &[(Timestamp, Value)],
    skips: &mut Skips,
) -> Result<u64> {
    match rows.put_points(&s.tsuid, pts, Durability::Process) {
        Ok(()) => return Ok(pts.len() as u64),
        Err(e) if is_environmental(&e) => return Err(e.into()),
        Err(_) => {}
    }
    let mut stored = 0;
    for p in pts {
        match rows.put_points(&s.tsuid, std::slice::from_ref(p), Durability::Process) {
            Ok(()) => stored += 1,
            Err(e) if is_environmental(&e) => return Err(e.into()),
            Err(e) => skips.add(Skip::RowRefused, 1, || {
                format!("{}, timestamp {}: {e}", s.describe(), p.0)
            }),
        }
    }
    Ok(stored)
}

/// The log of the previous process, held in memory by a start on a full
/// disk ([`hold_in_memory`]) until the store can take it
/// ([`replay_held`], from `db/read_only.rs`).
pub(super) struct HeldReplay {
    /// Every segment the previous process left, oldest first: all stay
    /// on disk until they are replayed into the store.
    pub segments: Vec<u64>,
    /// Points read into the write buffer, which queries read.
    pub points: u64,
    /// Why the store could not take them: what writes are refused with.
    pub cause: String,
}

/// Points [`hold_in_memory`] puts into the buffer at once.
const HOLD_BATCH_POINTS: usize = 64 * 1024;

/// What [`hold_in_memory`] could not put in memory.
#[derive(Default)]
struct NotHeld {
    /// Points of series whose names need UIDs the store cannot record.
    unresolved: u64,
    /// Histogram points: their cells go to the store, never the buffer.
    histograms: u64,
    /// Deletes: applied to held points, not yet to stored rows.
    deletes: u64,
    /// Segments left unread past the memory bound.
    unread: Vec<u64>,
}

/// Reads every WAL segment in `dir` into the write buffer (each point
/// pinned to its segment), without writing anything: what a database
/// opening on a disk its engine cannot write to serves queries from
/// (`db/read_only.rs`). A delete removes the held points it covers; the
/// rows it covers go only when the log is replayed into the store.
/// Segments past `max_points` held points are not read; every segment
/// stays on disk. Logs, as an error, what queries will not see until the
/// disk takes writes. Returns the next segment number and the held log.
pub(super) fn hold_in_memory(
    rows: &Store,
    series: &SeriesCache,
    index: &SeriesIndex,
    buffer: &crate::write::buffer::Buffer,
    dir: &Path,
    max_points: usize,
    cause: String,
) -> Result<(u64, HeldReplay)> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |cause| DbError::Wal { path, cause }
    };
    let segments = wal::list_segments(dir).map_err(io(dir))?;
    let next = segments.last().map_or(1, |last| last + 1);
    let widths = rows.widths();
    let mut held = 0u64;
    let mut not = NotHeld::default();
    for &seg in &segments {
        if buffer.points() >= max_points {
            not.unread.push(seg);
            continue;
        }
        let path = wal::segment_path(dir, seg);
        let contents = wal::read_segment(&path).map_err(io(&path))?;
        let mut ids: HashMap<u32, Arc<Series>> = HashMap::new();
        // Points go into the buffer a batch at a time, and before each
        // delete, which must not remove the points logged after it.
        let mut batch: Vec<wal::PendingPoint> = Vec::new();
        let put = |batch: &mut Vec<wal::PendingPoint>| {
            buffer.insert_batch(batch, seg);
            batch.clear();
        };
        for rec in contents.records {
            match rec {
                wal::Record::Series { id, metric, tags } => {
                    let t: Vec<(&str, &str)> =
                        tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                    match series.resolve_replayed(&metric, &t) {
                        Ok(s) => ids.insert(id, s),
                        Err(_) => ids.remove(&id),
                    };
                }
                wal::Record::Point { id, ts, value } => match (ids.get(&id), ts.base_time()) {
                    (Some(s), Ok(base)) => {
                        // The index is only read here: an entry it lacks
                        // is recorded when the log is replayed.
                        index.add_unrecorded(&s.tsuid, base);
                        batch.push(wal::PendingPoint {
                            series: s.clone(),
                            ts,
                            value,
                        });
                        if batch.len() >= HOLD_BATCH_POINTS {
                            put(&mut batch);
                        }
                        held += 1;
                    }
                    _ => not.unresolved += 1,
                },
                wal::Record::Histogram { .. } => not.histograms += 1,
                wal::Record::UnstorablePoint { .. } => {}
                wal::Record::Delete {
                    tsuid,
                    first_hour,
                    last_hour,
                } => {
                    put(&mut batch);
                    if let Ok(tsuid) = Tsuid::from_bytes(&tsuid, &widths) {
                        buffer.remove_hours(&|t| *t == tsuid, first_hour, last_hour);
                    }
                    not.deletes += 1;
                }
            }
        }
        put(&mut batch);
    }
    tracing::error!(
        cause = %cause,
        segments = segments.len(),
        points_held = held,
        "the store cannot take writes: opened read-only, the write-ahead log held in memory (queries see its points) and kept on disk; writes are refused until the disk takes them again"
    );
    if not.unresolved + not.histograms > 0 || !not.unread.is_empty() {
        tracing::error!(
            unresolved_points = not.unresolved,
            histogram_points = not.histograms,
            unread_segments = ?not.unread,
            "logged points queries do not see until the disk takes writes: points of series whose names need new UIDs, histogram points, and every point of segments past the memory bound"
        );
    }
    if not.deletes > 0 {
        tracing::warn!(
            deletes = not.deletes,
            "logged deletes are applied to the points held in memory; the stored rows they cover go when the disk takes writes"
        );
    }
    Ok((
        next,
        HeldReplay {
            segments,
            // What deletes left of the points read.
            points: buffer.points() as u64,
            cause,
        },
    ))
}

/// Replays a held log into the store, as an open would have.
pub(super) fn replay_held(
    db: &super::Db,
    held: &HeldReplay,
    auto: Option<&AutoRollups>,
) -> Result<ReplayReport> {
    let dir = db.wal.dir().to_path_buf();
    let report = replay_segments(&db.store, &db.series, &db.index, &dir, &held.segments, auto)?;
    db.index.flush()?;
    Ok(report)
}
