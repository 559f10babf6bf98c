//! Maintenance verbs: rebuilding the series index, dropping caches
//! (`dropcaches`, UID renames).

use super::Db;
use crate::index::RebuildStats;

impl Db {
    /// Recreates the series index from the data rows (`tsdb uid
    /// metasync`): drops every entry, then records each series found.
    pub fn rebuild_index(&self) -> super::Result<RebuildStats> {
        let (found, stats) = self.rows.scan_series()?;
        self.index.replace_all(found)?;
        Ok(stats)
    }

    /// `dropcaches`: forgets cached UID mappings and cached series names,
    /// saving the series' point counters first so they are not lost with
    /// the forgotten entries.
    pub fn drop_caches(&self) {
        self.uids().drop_caches();
        self.forget_series_names();
    }

    /// Forgets cached name→series mappings (after a UID rename, so the
    /// new name resolves afresh), saving the point counters first.
    pub fn forget_series_names(&self) {
        if let Err(e) = self.persist_counters() {
            tracing::error!(error = %e, "saving series counters failed before forgetting names");
        }
        self.series.forget_names();
    }
}
