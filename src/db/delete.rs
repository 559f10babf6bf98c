//! Deleting: whole hour rows of chosen series, stored or still buffered
//! (what OpenTSDB's `/api/query` with `delete` removes).

use std::collections::HashSet;

use super::{Db, Result};
use crate::model::Tsuid;
use crate::model::row_span::row_base_clamped;

/// What [`Db::delete_rows`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Deleted {
    /// Stored rows removed.
    pub rows: u64,
    /// Buffered points removed.
    pub buffered_points: usize,
}

impl Db {
    /// Deletes whole hour rows of `tsuids`: every row whose hour overlaps
    /// `[start_ms, end_ms]`, in the store and still buffered in memory
    /// (OpenTSDB's `/api/query` delete removes each row its scan met).
    ///
    /// The delete is logged in the WAL and synced first, so a replay after
    /// a crash cannot resurrect points logged before it. The series stay
    /// in the index. With `tsd.rollups.auto`, their computed rollups are
    /// recomputed without the deleted points (docs/rollups.md).
    pub fn delete_rows(&self, tsuids: &[Tsuid], start_ms: u64, end_ms: u64) -> Result<Deleted> {
        if tsuids.is_empty() || end_ms < start_ms {
            return Ok(Deleted::default());
        }
        // A log held since a start on a full disk is replayed whole once
        // the disk takes writes: a delete now would be undone by it.
        if let Some(why) = self.storage_health().unavailable {
            return Err(super::DbError::ReadOnly(why));
        }
        // A range reaching past 2106 deletes through the last row.
        let (first, last) = (
            row_base_clamped(start_ms / 1000),
            row_base_clamped(end_ms / 1000),
        );
        let doomed: HashSet<&Tsuid> = tsuids.iter().collect();
        let widths = self.store.widths();
        let logged: Vec<Vec<u8>> = tsuids.iter().map(|t| t.to_bytes(&widths)).collect();
        // Held from before the record is logged: no sealed hour is in
        // flight while it is held, so none can land in the store after its
        // row was deleted, and the WAL is not truncated (`truncate_wal`)
        // between the record and the rows' deletion, which would let a
        // crash there bring the deleted points back.
        let _f = self.flush_lock.lock();
        let a = self.wal.append_deletes(&logged, first, last)?;
        self.wal.wait_durable_blocking(a.seq)?;
        let buffered_points = self
            .buffer
            .remove_hours(&|t| doomed.contains(t), first, last);
        // `tsd.rollups.auto`: the rollups lose the deleted points before
        // the rows go, so no sync can make the delete durable while they
        // still count them; a crash in between leaves the delete in the
        // WAL, whose replay deletes the rows and recomputes these again.
        self.roll_up_deleted(tsuids, first, last)?;
        let rows = self.store.delete_rows(tsuids, first, last)?;
        // After the rows are gone: an answer cached meanwhile from the
        // old rows then carries an outdated epoch.
        let mut metrics: Vec<_> = tsuids.iter().map(|t| t.metric).collect();
        metrics.sort_unstable();
        metrics.dedup();
        for m in metrics {
            self.epochs.bump_metric(m);
        }
        Ok(Deleted {
            rows,
            buffered_points,
        })
    }

    /// With `tsd.rollups.auto`, recomputes the rollups of `tsuids` as
    /// they are without their raw rows of the hours
    /// `first_hour..=last_hour` (docs/rollups.md): called before those
    /// rows are deleted, by [`delete_rows`](Self::delete_rows) and by
    /// `tsdb scan --delete`. Does nothing with auto rollups off.
    pub fn roll_up_deleted(&self, tsuids: &[Tsuid], first_hour: u32, last_hour: u32) -> Result<()> {
        if let Some(auto) = self.auto_rollups() {
            let cells = auto.roll_up_deleted(tsuids, first_hour, last_hour)?;
            self.stats
                .rollup_cells_computed
                .fetch_add(cells, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }
}
