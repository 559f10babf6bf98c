//! What a query reads from and the options it runs with: the
//! [`QueryContext`] every query language's run takes, built once per
//! request from a [`Db`] and the server's [`QueryOptions`].
//!
//! The context names what to read through traits (points, rollups, the
//! epochs a cached answer depends on), so that the files below the engine
//! (selection, pipeline, read, results) and the engine's helpers
//! (rollups, histograms, the result cache) need no `Db`. The result cache
//! is not part of it: it is the server's, and a caller that has one hands
//! it to the engine's run beside the context.

use std::sync::Arc;

use chrono_tz::Tz;

use super::limits::QueryLimits;
use super::options::QueryOptions;
use super::progress::QueryProgress;
use crate::db::Db;
use crate::index::SeriesIndex;
use crate::model::{UidKind, UidWidths};
use crate::store::read::SeriesSource;
use crate::store::read::epoch::EpochSource;
use crate::store::read::rollup::RollupSource;
use crate::uid::UidTable;

/// Everything a query needs from the server: what it reads from and the
/// options it runs with.
pub struct QueryContext<'a> {
    /// The points: stored rows merged with the write buffer.
    pub source: &'a dyn SeriesSource,
    pub uids: &'a UidTable,
    pub index: &'a SeriesIndex,
    /// The rollup tables (used only when the database has rollups
    /// configured).
    pub rollups: Option<&'a dyn RollupSource>,
    /// The epochs a cached answer is checked against.
    pub epochs: &'a dyn EpochSource,
    pub limits: QueryLimits,
    /// "now" in epoch ms (relative times, missing end).
    pub now_ms: u64,
    /// Zone for absolute dates and calendar downsampling when the query
    /// names none ([`QueryOptions::default_tz`]).
    pub default_tz: Tz,
    /// `tsd.query.skip_unresolved_tagvs`.
    pub skip_unresolved_tagvs: bool,
    /// `tsd.http.query.allow_delete`.
    pub allow_delete: bool,
    /// Points read so far and whether the query was cancelled: a fresh
    /// one unless the caller watches the query
    /// ([`with_progress`](Self::with_progress)).
    pub progress: Arc<QueryProgress>,
}

impl<'a> QueryContext<'a> {
    /// A context reading everything from `db` (its points, its rollups,
    /// its cache epochs) with the options the server built at start (or
    /// [`QueryOptions::default`]); "now" is the clock's.
    pub fn new(db: &'a Db, o: &QueryOptions) -> Self {
        QueryContext {
            source: db,
            uids: db.uids(),
            index: db.index(),
            rollups: Some(db),
            epochs: db,
            limits: o.limits,
            now_ms: chrono::Utc::now().timestamp_millis().max(0) as u64,
            default_tz: o.default_tz,
            skip_unresolved_tagvs: o.skip_unresolved_tagvs,
            allow_delete: o.allow_delete,
            progress: Arc::default(),
        }
    }

    /// This context with its points read from `source` instead (the
    /// pre-aggregate table a sub-query asks for, `query/rollup.rs`).
    pub(crate) fn reading(&self, source: &'a dyn SeriesSource) -> QueryContext<'a> {
        QueryContext {
            source,
            uids: self.uids,
            index: self.index,
            rollups: self.rollups,
            epochs: self.epochs,
            limits: self.limits,
            now_ms: self.now_ms,
            default_tz: self.default_tz,
            skip_unresolved_tagvs: self.skip_unresolved_tagvs,
            allow_delete: self.allow_delete,
            progress: self.progress.clone(),
        }
    }

    /// The same context reporting to `progress`, which the caller lists
    /// and may cancel.
    pub fn with_progress(mut self, progress: Arc<QueryProgress>) -> Self {
        self.progress = progress;
        self
    }

    pub(crate) fn widths(&self) -> UidWidths {
        UidWidths {
            metric: self.uids.width(UidKind::Metric),
            tagk: self.uids.width(UidKind::TagKey),
            tagv: self.uids.width(UidKind::TagValue),
        }
    }
}
