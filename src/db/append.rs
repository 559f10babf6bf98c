//! Appending: points resolved to their series, logged in the WAL and
//! buffered, then acknowledged by the caller.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Db;
use crate::model::row_span::LAST_ROW_BASE;
use crate::model::{Timestamp, Value};
use crate::protocol::PointError;
use crate::storage::Durability;
use crate::write::series::CellValue;
use crate::write::{Series, SeriesMemo, SeriesRules, TagsKey};

pub use crate::write::wal::{Appended, PendingHistogram, PendingPoint};

/// A histogram cell to write: its time and stored value.
type HistogramCell = (Timestamp, Vec<u8>);

impl Db {
    /// Checks one point and finds (or creates) its series, as OpenTSDB's
    /// `TSDB.addPoint` does; `key_buf` is scratch space kept by the caller.
    pub fn resolve(
        &self,
        metric: &str,
        raw_ts: i64,
        value: Value,
        tags: &[(&str, &str)],
        key_buf: &mut String,
    ) -> Result<(Arc<Series>, Timestamp), PointError> {
        self.resolve_keyed(metric, raw_ts, value, tags, None, key_buf)
    }

    /// [`Db::resolve`] with the tags' part of the series key built once
    /// for points that share their tags ([`TagsKey`] of these `tags`).
    pub fn resolve_keyed(
        &self,
        metric: &str,
        raw_ts: i64,
        value: Value,
        tags: &[(&str, &str)],
        tags_key: Option<&TagsKey>,
        key_buf: &mut String,
    ) -> Result<(Arc<Series>, Timestamp), PointError> {
        self.forget_names_renamed_elsewhere();
        self.series
            .resolve_keyed(
                metric,
                raw_ts,
                CellValue::Point(value),
                tags,
                tags_key,
                key_buf,
            )
            .map_err(|e| match e {
                // A UID that could not be created because the store is
                // down says why, not just that storage failed.
                PointError::Storage(_) => self.writable().err().unwrap_or(e),
                e => e,
            })
    }

    /// [`Db::resolve`] with the names checked by `rules` rather than
    /// OpenTSDB's put rules: remote write resolves its series with
    /// [`SeriesRules::Prometheus`] (no tag needed, up to
    /// `tsd.prometheus.max_labels` labels, UTF-8 label values, `:` in
    /// metric names). The timestamp is read as [`Db::resolve`] reads it.
    pub fn resolve_as(
        &self,
        rules: SeriesRules,
        metric: &str,
        raw_ts: i64,
        value: Value,
        tags: &[(&str, &str)],
        key_buf: &mut String,
    ) -> Result<(Arc<Series>, Timestamp), PointError> {
        self.forget_names_renamed_elsewhere();
        self.series
            .resolve_as(rules, metric, raw_ts, value, tags, key_buf)
            .map_err(|e| match e {
                PointError::Storage(_) => self.writable().err().unwrap_or(e),
                e => e,
            })
    }

    /// The series a connection's memo holds for a line's metric and tag
    /// words as written ([`SeriesMemo`]); `None` sends the line through
    /// [`resolve`](Self::resolve).
    pub(crate) fn recall(
        &self,
        memo: &mut SeriesMemo,
        metric: &str,
        tags_text: &str,
    ) -> Option<Arc<Series>> {
        self.forget_names_renamed_elsewhere();
        self.series.recall(memo, metric, tags_text)
    }

    /// Forgets the cached names (series cache and connections' memos) when
    /// another TSD renamed or deleted a UID name: a name cached here may
    /// now mean another UID, or none. A few atomic loads when nothing moved.
    fn forget_names_renamed_elsewhere(&self) {
        if self.series.names_changed_elsewhere() {
            self.forget_series_names();
        }
    }

    /// [`Db::resolve`] for a histogram point (`TSDB.addHistogramPoint`'s
    /// checks): `value` is the stored cell value, shown if the timestamp
    /// is refused.
    pub fn resolve_histogram(
        &self,
        metric: &str,
        raw_ts: i64,
        value: &[u8],
        tags: &[(&str, &str)],
        key_buf: &mut String,
    ) -> Result<(Arc<Series>, Timestamp), PointError> {
        self.forget_names_renamed_elsewhere();
        self.series
            .resolve_cell(metric, raw_ts, CellValue::Histogram(value), tags, key_buf)
            .map_err(|e| match e {
                PointError::Storage(_) => self.writable().err().unwrap_or(e),
                e => e,
            })
    }

    /// The histogram codecs (`tsd.core.histograms.config`); `None` when
    /// histograms are off.
    pub fn histogram_codecs(&self) -> Option<&crate::histogram::Codecs> {
        self.opts.histograms.as_ref()
    }

    /// Whether points can be logged and stored now: refused with the
    /// cause while the WAL cannot be written (a full disk, a removed data
    /// directory) or the store's engine failed. Both recover by
    /// themselves (the WAL writer retries, the flusher reopens the
    /// engine), so this only reports.
    pub fn writable(&self) -> Result<(), PointError> {
        if let Some(e) = self.wal.failure() {
            return Err(PointError::Unavailable(e.to_string()));
        }
        if let Some(cause) = self.storage_health().unavailable {
            return Err(PointError::Unavailable(cause));
        }
        Ok(())
    }

    /// Logs and buffers resolved points. The caller acknowledges them
    /// (after [`Db::wait_durable`] for `sync` writers).
    pub fn append(&self, points: &[PendingPoint]) -> Result<Appended, PointError> {
        if !self.admit(points.iter().map(|p| (&p.series, p.ts)))? {
            return Ok(Appended::NOTHING);
        }
        let g = self.gate.read();
        let a = self
            .wal
            .append(points)
            .map_err(|e| PointError::Unavailable(e.to_string()))?;
        self.buffer.insert_batch(points, a.segment);
        drop(g);
        self.note_visible(
            points
                .iter()
                .map(|p| (p.series.tsuid.metric, p.ts.as_millis() as i64)),
            points.len(),
        );
        if self.buffer.points() > self.opts.max_buffered_points {
            self.wake_flusher();
        }
        Ok(a)
    }

    /// What every append checks and records before it logs: the TSD is
    /// open and can write, every point's time has a row, and each series'
    /// hours are in the index (and its TSMeta stored if asked) before the
    /// points become visible, so a query never finds points it cannot
    /// name. False when there is nothing to log.
    fn admit<'p>(
        &self,
        points: impl Iterator<Item = (&'p Arc<Series>, Timestamp)> + Clone,
    ) -> Result<bool, PointError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(PointError::Storage("the TSD is shutting down".into()));
        }
        self.writable()?;
        // Points from the parsers cannot lie past the last row
        // (Timestamp::from_raw refuses them); these could be built by hand.
        // Checked before anything is counted, so a refused batch leaves no
        // trace.
        let mut any = false;
        for (_, ts) in points.clone() {
            ts.base_time()
                .map_err(|e| PointError::IllegalArgument(e.to_string()))?;
            any = true;
        }
        let now = crate::model::time::now_s() as u64;
        let mut unindexed = Vec::new();
        for (series, ts) in points {
            if let Some(base) = self.note_point(series, ts, now)? {
                unindexed.push((series, base));
            }
        }
        self.index_hours(&unindexed)?;
        Ok(any)
    }

    /// Counts a point of `series` at `ts` (and stores its TSMeta if
    /// asked); returns the base hour of its row when the series index does
    /// not know that hour yet.
    fn note_point(
        &self,
        series: &Arc<Series>,
        ts: Timestamp,
        now: u64,
    ) -> Result<Option<u32>, PointError> {
        series.unsaved_points.fetch_add(1, Ordering::Relaxed);
        if series.last_received.load(Ordering::Relaxed) != now {
            series.last_received.store(now, Ordering::Relaxed);
        }
        let base = ts.base_time().unwrap_or(LAST_ROW_BASE);
        let indexed = series.indexed_hour.load(Ordering::Relaxed);
        if indexed == 0 && self.opts.meta.creates_ts_meta() {
            self.store_ts_meta_if_absent(series, now)?;
        }
        Ok((indexed < base as u64 + 1).then_some(base))
    }

    /// Records the hours of an append's series in the series index, in
    /// one write for all of them, before the points become visible, so a
    /// query never finds points it cannot name.
    fn index_hours(&self, hours: &[(&Arc<Series>, u32)]) -> Result<(), PointError> {
        if hours.is_empty() {
            return Ok(());
        }
        let entries: Vec<_> = hours.iter().map(|(s, base)| (&s.tsuid, *base)).collect();
        self.index
            .add_all(&entries)
            .map_err(|e| PointError::Storage(e.to_string()))?;
        for (series, base) in hours {
            let indexed = series
                .indexed_hour
                .fetch_max(*base as u64 + 1, Ordering::Relaxed);
            if indexed == 0 {
                // A series new to this process may be new to the
                // index: cached answers chose their series without it.
                self.epochs.bump_metric(series.tsuid.metric);
            }
        }
        Ok(())
    }

    /// Logs histogram points in the WAL and writes their cells to the
    /// store at once (they are not buffered: a histogram is one cell,
    /// merged into its row under the row's lock). Both happen under the
    /// gate the flusher takes before it decides which WAL segments the
    /// store covers, so a segment is never deleted before the cells it
    /// logged are in the store and synced. A failure after logging is
    /// reported (the points are not acknowledged); replaying the log
    /// after a crash may still store them.
    pub fn append_histograms(&self, points: &[PendingHistogram]) -> Result<Appended, PointError> {
        if !self.admit(points.iter().map(|p| (&p.series, p.ts)))? {
            return Ok(Appended::NOTHING);
        }
        // One row-store call per series (its rows of several hours).
        let mut by_series: HashMap<u32, (&Arc<Series>, Vec<HistogramCell>)> = HashMap::new();
        for p in points {
            by_series
                .entry(p.series.id)
                .or_insert_with(|| (&p.series, Vec::new()))
                .1
                .push((p.ts, p.value.clone()));
        }
        let g = self.gate.read();
        let a = self
            .wal
            .append_histograms(points)
            .map_err(|e| PointError::Unavailable(e.to_string()))?;
        for (series, cells) in by_series.values() {
            self.store
                .put_histograms(&series.tsuid, cells, Durability::Process)
                .map_err(|e| PointError::Storage(e.to_string()))?;
        }
        drop(g);
        self.stats
            .histogram_points_stored
            .fetch_add(points.len() as u64, Ordering::Relaxed);
        self.note_visible(
            points
                .iter()
                .map(|p| (p.series.tsuid.metric, p.ts.as_millis() as i64)),
            points.len(),
        );
        Ok(a)
    }

    /// Once appended points are visible to readers (see db/epochs.rs for
    /// why only then): the query cache's epochs learn of them (metric,
    /// milliseconds), and they are counted.
    fn note_visible(&self, written: impl Iterator<Item = (crate::model::Uid, i64)>, count: usize) {
        self.epochs.note_written(written);
        self.stats
            .points_added
            .fetch_add(count as u64, Ordering::Relaxed);
    }

    /// `TSMeta.storeIfNecessary`, once per series and process: the first
    /// point of a series this process has not seen stores its TSMeta
    /// (`created` now) unless one is stored already.
    fn store_ts_meta_if_absent(&self, series: &Series, now: u64) -> Result<(), PointError> {
        let tsuid = series.tsuid.to_bytes(&self.store.widths());
        let storage = |e: crate::meta::MetaError| PointError::Storage(e.to_string());
        if self.meta.ts_fields(&tsuid).map_err(storage)?.is_none() {
            let fields = crate::meta::TsMetaFields::new(crate::model::uid::hex_upper(&tsuid), now);
            self.meta.put_ts_fields(&tsuid, &fields).map_err(storage)?;
            self.queue_for_trees(&series.tsuid);
        }
        Ok(())
    }

    /// Waits until `a`'s points are on stable storage; fails at once if
    /// the WAL cannot be written (they must not be acknowledged then).
    /// On a cluster they must also be in ClickHouse, where any TSD reads
    /// them: everything buffered is written out before this returns, and
    /// if that fails the points stay logged and buffered for the flusher
    /// to retry ([`PointError::StorageDown`]).
    pub async fn wait_durable(&self, a: Appended) -> Result<(), PointError> {
        if a.seq > 0 {
            self.wal
                .wait_durable(a.seq)
                .await
                .map_err(|e| PointError::Unavailable(e.to_string()))?;
            if self.store.shared() {
                // The write blocks on HTTP: off the async workers where the
                // runtime allows it.
                let multi = tokio::runtime::Handle::try_current().is_ok_and(|h| {
                    h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
                });
                let flushed = if multi {
                    tokio::task::block_in_place(|| self.flush_all_now())
                } else {
                    self.flush_all_now()
                };
                flushed.map_err(PointError::StorageDown)?;
            }
        }
        Ok(())
    }

    /// [`Db::wait_durable`] for callers outside an async runtime.
    pub fn wait_durable_blocking(&self, a: Appended) -> Result<(), PointError> {
        if a.seq > 0 {
            self.wal
                .wait_durable_blocking(a.seq)
                .map_err(|e| PointError::Unavailable(e.to_string()))?;
            if self.store.shared() {
                self.flush_all_now().map_err(PointError::StorageDown)?;
            }
        }
        Ok(())
    }

    /// Waits while the WAL has a backlog (back-pressure for fast writers).
    pub async fn throttle(&self, a: Appended) {
        if a.backlog {
            self.wal.wait_written(a.seq).await;
        }
    }

    /// [`Db::throttle`] for callers outside an async runtime.
    pub fn throttle_blocking(&self, a: Appended) {
        if a.backlog {
            self.wal.wait_written_blocking(a.seq);
        }
    }
}
