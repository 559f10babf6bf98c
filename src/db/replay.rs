//! Replay: the WAL left by the previous process is read back into the
//! store when a database opens, then removed.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use super::{DbError, Result};
use crate::index::SeriesIndex;
use crate::model::Tsuid;
use crate::model::{Timestamp, Value};
use crate::store::rows::RowStore;
use crate::write::{Series, SeriesCache, wal};

/// Replays every WAL segment in `dir` into the row store, syncs it and
/// deletes the segments. Returns the next segment number and the points
/// replayed.
pub(super) fn replay(
    rows: &dyn RowStore,
    series: &SeriesCache,
    index: &SeriesIndex,
    dir: &Path,
) -> Result<(u64, u64)> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |cause| DbError::Wal { path, cause }
    };
    let segments = wal::list_segments(dir).map_err(io(dir))?;
    let Some(&last) = segments.last() else {
        return Ok((1, 0));
    };
    let mut total = 0u64;
    for seg in &segments {
        let path = wal::segment_path(dir, *seg);
        let contents = wal::read_segment(&path).map_err(io(&path))?;
        if contents.bad_tail > 0 {
            tracing::warn!(segment = %path.display(), bytes = contents.bad_tail, "WAL segment ends in a torn or corrupt frame; ignoring its tail");
        }
        let mut ids: HashMap<u32, Arc<Series>> = HashMap::new();
        let mut points: HashMap<u32, Vec<(Timestamp, Value)>> = HashMap::new();
        // Rows to delete, by hour range: nothing in this segment is written
        // before its last record is read, so deleting them all then (and
        // before its points are written) is what deleting each at its
        // record would do, in one row-store call per range.
        let mut deletes: BTreeMap<(u32, u32), Vec<Tsuid>> = BTreeMap::new();
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
                    let Ok(tsuid) = Tsuid::from_bytes(&tsuid, &rows.widths()) else {
                        continue;
                    };
                    // Points logged earlier in this segment go, and rows
                    // earlier segments' replay already stored are deleted
                    // (below).
                    for (id, s) in &ids {
                        if s.tsuid == tsuid
                            && let Some(pts) = points.get_mut(id)
                        {
                            pts.retain(|(ts, _)| {
                                !ts.base_time()
                                    .is_ok_and(|b| (first_hour..=last_hour).contains(&b))
                            });
                        }
                    }
                    deletes
                        .entry((first_hour, last_hour))
                        .or_default()
                        .push(tsuid);
                }
            }
        }
        for ((first_hour, last_hour), tsuids) in deletes {
            rows.delete_rows(&tsuids, first_hour, last_hour)?;
        }
        for (id, pts) in points {
            let s = &ids[&id];
            // Later writes win: put_points merges in order, so keep the
            // last value per timestamp before writing.
            let mut dedup: BTreeMap<u64, (Timestamp, Value)> = BTreeMap::new();
            for (ts, v) in pts {
                dedup.insert(ts.as_millis(), (ts, v));
            }
            let pts: Vec<_> = dedup.into_values().collect();
            total += pts.len() as u64;
            // The index write may not have survived what the WAL did.
            if let Some(latest) = pts.iter().filter_map(|(ts, _)| ts.base_time().ok()).max() {
                index.add_at(&s.tsuid, latest)?;
            }
            rows.put_points(&s.tsuid, &pts)?;
        }
    }
    rows.sync()?;
    for seg in &segments {
        let path = wal::segment_path(dir, *seg);
        std::fs::remove_file(&path).map_err(io(&path))?;
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
