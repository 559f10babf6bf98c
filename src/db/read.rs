//! Reading: stored rows merged with the points still buffered in memory,
//! served to queries as a [`SeriesSource`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::Db;
use crate::model::Tsuid;
use crate::model::Uid;
use crate::store::read::{Point, PointSink, ReadStats, SeriesData, SeriesSource};
use crate::store::{self};

/// When reads last began or ended: the flusher holds back what would
/// make them wait (moving the engine's journal) until they pause.
pub(super) struct ReadActivity {
    epoch: Instant,
    /// Milliseconds since `epoch` of the last read's start or end, or
    /// [`ReadActivity::NEVER`].
    last_ms: AtomicU64,
}

impl Default for ReadActivity {
    fn default() -> Self {
        ReadActivity {
            epoch: Instant::now(),
            last_ms: AtomicU64::new(Self::NEVER),
        }
    }
}

impl ReadActivity {
    const NEVER: u64 = u64::MAX;

    /// A read begins; its end is noted when the guard drops, however it
    /// ends. Once per series slice, not per point.
    pub(super) fn begin(&self) -> ReadGuard<'_> {
        self.note();
        ReadGuard(self)
    }

    /// A read begins or ends.
    pub(super) fn note(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// No read began or ended for `quiet` (a read still running after
    /// its start counts as quiet too once that long has passed: the
    /// waits this guards against are short next to such a read).
    pub(super) fn quiet_for(&self, quiet: Duration) -> bool {
        match self.last_ms.load(Ordering::Relaxed) {
            Self::NEVER => true,
            last => self.epoch.elapsed().as_millis() as u64 >= last + quiet.as_millis() as u64,
        }
    }

    /// As if no read ever ran (tests).
    #[cfg(test)]
    pub(super) fn forget(&self) {
        self.last_ms.store(Self::NEVER, Ordering::Relaxed);
    }
}

impl Db {
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
        let _read = self.reads.begin();
        // Buffer first: a point sealed meanwhile is then found in the store.
        // Each listed series is looked up in the buffer: settled data (the
        // common case for dashboards over past hours) and a query of a few
        // series of a large metric cost no walk of the metric's series.
        let pending = self.buffer.read_listed(tsuids, start_ms, end_ms);
        // A series' stored rows come in time order. Those wholly before its
        // first buffered point (the usual case: the hour's start was
        // written as rows, its tail is still buffered) stream straight
        // through; from the first row that reaches it on, they are held
        // and merged with the buffered points.
        let mut stored: HashMap<usize, Vec<Point>> = HashMap::new();
        let mut stopped = false;
        let mut stats = read(&mut |i, points: &[Point]| {
            if let Some(newer) = pending.get(i) {
                let held = stored.get_mut(&i);
                let ahead =
                    held.is_none() && points.last().map(|p| p.timestamp_ms()) < newer.first_ms();
                if !ahead {
                    match held {
                        Some(h) => h.extend_from_slice(points),
                        None => {
                            stored.insert(i, points.to_vec());
                        }
                    }
                    return true;
                }
            }
            let go_on = sink(i, points);
            stopped |= !go_on;
            go_on
        })?;
        if stopped {
            return Ok(stats);
        }
        // Points read are the points handed over, one per series and
        // timestamp, as in a stored row. The store counted its rows'
        // points, held ones too; a held series counts its merge instead.
        // Counting the rows' and the buffer's points apart would count a
        // point twice when a flush wrote it to the rows after the buffer
        // was read, so the count would depend on when the flusher ran.
        for (i, _, newer) in pending.iter() {
            let go_on = match stored.remove(&i) {
                Some(older) if !older.is_empty() => {
                    let held = older.len() as u64;
                    let merged = merge_last_wins(older, newer.points());
                    stats.points = stats.points - held + merged.len() as u64;
                    sink(i, &merged)
                }
                _ => {
                    stats.points += newer.len() as u64;
                    sink(i, newer.points())
                }
            };
            if !go_on {
                break;
            }
        }
        Ok(stats)
    }
}

/// A read under way (see [`ReadActivity::begin`]).
pub(super) struct ReadGuard<'a>(&'a ReadActivity);

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        self.0.note();
    }
}

impl Db {
    /// Whether reading `series` series' rows over `[start_ms, end_ms]`
    /// key by key is the right read ([`ReadPlan::point_reads_pay`](crate::store::ReadPlan::point_reads_pay)).
    fn point_reads_pay(&self, series: usize, start_ms: u64, end_ms: u64) -> bool {
        self.store
            .read_plan()
            .point_reads_pay(series, start_ms, end_ms)
    }
}

impl SeriesSource for Db {
    fn read_threads(&self) -> usize {
        self.store.read_plan().threads
    }

    fn reads_locally(&self) -> bool {
        self.store.read_plan().local
    }

    /// Histogram points are written to the store as they arrive (never
    /// buffered), so the store has them all.
    fn read_histograms(
        &self,
        tsuids: &[Tsuid],
        start_ms: u64,
        end_ms: u64,
    ) -> store::Result<crate::store::histograms::HistogramRead> {
        self.store.read_histograms(tsuids, start_ms, end_ms)
    }

    fn histogram_codecs(&self) -> Option<&crate::histogram::Codecs> {
        Db::histogram_codecs(self)
    }

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
        if !self.point_reads_pay(tsuids.len(), start_ms, end_ms) {
            // Same contract, by scanning each metric's rows of the range
            // (each scan skips the listed series of other metrics).
            let mut metrics: Vec<Uid> = tsuids.iter().map(|t| t.metric).collect();
            metrics.sort_unstable();
            metrics.dedup();
            return self.read_merged(tsuids, start_ms, end_ms, sink, |s| {
                let mut stats = ReadStats::default();
                for m in metrics {
                    let mut stopped = false;
                    let got =
                        self.store
                            .scan_tsuids(m, tsuids, start_ms, end_ms, &mut |i, p| {
                                let go_on = s(i, p);
                                stopped |= !go_on;
                                go_on
                            })?;
                    stats.add(got, 0);
                    if stopped {
                        break;
                    }
                }
                Ok(stats)
            });
        }
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
        let _read = self.reads.begin();
        // Buffer first: a point sealed meanwhile is then found in the store.
        let mut buffered = self.buffer.read(metric, start_ms, end_ms, &mut |_| true);
        let stored = self.store.read_series(metric, start_ms, end_ms, want)?;
        let mut out = Vec::with_capacity(stored.len() + buffered.len());
        for mut s in stored {
            if let Some(b) = buffered.remove(&s.tsuid) {
                s.points = merge_last_wins(s.points, &b);
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
fn merge_last_wins(mut older: Vec<Point>, newer: &[Point]) -> Vec<Point> {
    // Wholly apart (the older points all before the newer ones): one copy.
    if older.last().map(|p| p.timestamp_ms()) < newer.first().map(|p| p.timestamp_ms()) {
        older.extend_from_slice(newer);
        return older;
    }
    let mut out = Vec::with_capacity(older.len() + newer.len());
    let (mut a, mut b) = (
        older.into_iter().peekable(),
        newer.iter().copied().peekable(),
    );
    loop {
        match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => {
                if x.timestamp_ms() < y.timestamp_ms() {
                    out.push(a.next().expect("peeked"));
                } else if x.timestamp_ms() > y.timestamp_ms() {
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
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, OnceLock};

    use proptest::prelude::*;

    use super::*;
    use crate::db::{Db, DbOptions};
    use crate::model::{UidKind, Value};
    use crate::uid::AutoCreate;
    use crate::write::wal::PendingPoint;

    const BASE: i64 = 1_356_998_400;

    /// One database for every case (opening one per case is slow); each
    /// case writes its own metric.
    fn db() -> &'static (tempfile::TempDir, Arc<Db>) {
        static DB: OnceLock<(tempfile::TempDir, Arc<Db>)> = OnceLock::new();
        DB.get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let mut opts = DbOptions::new(dir.path());
            opts.auto_create = AutoCreate {
                metrics: true,
                ..Default::default()
            };
            let db = Db::open(&opts).unwrap();
            (dir, db)
        })
    }

    /// Writes `(host, second offset, value)` points of `metric`, in order.
    fn put(db: &Db, metric: &str, pts: &[(u8, i64, i64)]) {
        let mut key = String::new();
        let batch: Vec<PendingPoint> = pts
            .iter()
            .map(|&(h, off, v)| {
                let host = format!("h{h}");
                let (series, ts) = db
                    .resolve(
                        metric,
                        BASE + off,
                        Value::Int(v),
                        &[("host", &host)],
                        &mut key,
                    )
                    .unwrap();
                PendingPoint {
                    series,
                    ts,
                    value: Value::Int(v),
                }
            })
            .collect();
        if !batch.is_empty() {
            db.append(&batch).unwrap();
        }
    }

    /// Every series of `metric`, in the index's order.
    fn tsuids_of(db: &Db, metric: &str) -> Vec<Tsuid> {
        let m = db.uids().get_id(UidKind::Metric, metric).unwrap();
        db.read_series(m, 0, u64::MAX, &mut |_| true)
            .unwrap()
            .into_iter()
            .map(|s| s.tsuid)
            .collect()
    }

    /// A flush that writes buffered points to the store while a read is
    /// under way (after the read took the buffer's points, before it read
    /// the rows) hands each point over once and counts it once: the
    /// points read do not depend on when the flusher ran.
    #[test]
    fn a_flush_during_a_read_counts_each_point_once() {
        let db = &*db().1;
        let metric = "flushed_mid_read";
        put(db, metric, &[(0, 0, 1), (0, 10, 2)]);
        db.flush_all().unwrap();
        // One overwrite of a stored point, one new point.
        put(db, metric, &[(0, 10, 3), (0, 20, 4)]);
        let all = tsuids_of(db, metric);
        let (start_ms, end_ms) = ((BASE * 1000) as u64, ((BASE + 3600) * 1000) as u64);
        let want: Vec<(u64, Value)> = [(0, 1), (10, 3), (20, 4)]
            .iter()
            .map(|&(t, v)| (((BASE + t) * 1000) as u64, Value::Int(v)))
            .collect();
        let mut got = Vec::new();
        let stats = db
            .read_merged(
                &all,
                start_ms,
                end_ms,
                &mut |_, pts: &[Point]| {
                    got.extend(pts.iter().map(|p| (p.timestamp_ms(), p.value())));
                    true
                },
                |s| {
                    // The flusher's turn: the buffered points reach the rows.
                    db.flush_all().unwrap();
                    db.store.read_tsuids(&all, start_ms, end_ms, s)
                },
            )
            .unwrap();
        assert_eq!(got, want);
        assert_eq!(stats.points, 3);
        // The same read with nothing left in the buffer counts the same.
        let mut again = Vec::new();
        let stats = db
            .read_tsuids(&all, start_ms, end_ms, &mut |_, pts: &[Point]| {
                again.extend(pts.iter().map(|p| (p.timestamp_ms(), p.value())));
                true
            })
            .unwrap();
        assert_eq!(again, want);
        assert_eq!(stats.points, 3);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        /// Stored rows merged with buffered points, whether the stored ones
        /// come wholly before the buffered ones (streamed straight through)
        /// or overlap them (merged): every series' points in time order,
        /// the last write of a timestamp winning, through both reads.
        #[test]
        fn stored_and_buffered_points_merge_as_written(
            stored in proptest::collection::vec((0u8..3, 0i64..3 * 3600, -50i64..50), 1..60),
            later in proptest::collection::vec((0u8..3, 0i64..3 * 3600, -50i64..50), 0..60),
            tail_only in proptest::bool::ANY,
            from in 0i64..3 * 3600,
        ) {
            static CASE: AtomicU32 = AtomicU32::new(0);
            let metric = format!("m{}", CASE.fetch_add(1, Ordering::Relaxed));
            let db = &*db().1;
            put(db, &metric, &stored);
            db.flush_all().unwrap();
            // Buffered points after every stored one, or anywhere.
            let shift = if tail_only { 3 * 3600 } else { 0 };
            let later: Vec<_> = later.iter().map(|&(h, t, v)| (h, t + shift, v)).collect();
            put(db, &metric, &later);
            let start_ms = ((BASE + from) * 1000) as u64;
            let mut want: BTreeMap<u8, BTreeMap<u64, Value>> = BTreeMap::new();
            for &(h, t, v) in stored.iter().chain(&later) {
                let ms = ((BASE + t) * 1000) as u64;
                if ms >= start_ms {
                    want.entry(h).or_default().insert(ms, Value::Int(v));
                }
            }
            let want: BTreeMap<u8, Vec<(u64, Value)>> = want
                .into_iter()
                .map(|(h, pts)| (h, pts.into_iter().collect()))
                .collect();
            let m = db.uids().get_id(UidKind::Metric, &metric).unwrap();
            let all = tsuids_of(db, &metric);
            let host = |t: &Tsuid| -> u8 {
                let v = db.uids().get_name(UidKind::TagValue, t.tags[0].1).unwrap();
                v[1..].parse().unwrap()
            };
            // Points read: those handed over, one per series and timestamp
            // in range, however much of `later` the flusher has written
            // meanwhile.
            let read = want.values().map(|pts| pts.len() as u64).sum::<u64>();
            for scan in [false, true] {
                let mut got: BTreeMap<u8, Vec<(u64, Value)>> = BTreeMap::new();
                let mut sink = |i: usize, pts: &[Point]| {
                    got.entry(host(&all[i]))
                        .or_default()
                        .extend(pts.iter().map(|p| (p.timestamp_ms(), p.value())));
                    true
                };
                let end_ms = ((BASE + 7 * 3600) * 1000) as u64;
                let stats = if scan {
                    db.scan_tsuids(m, &all, start_ms, end_ms, &mut sink).unwrap()
                } else {
                    db.read_tsuids(&all, start_ms, end_ms, &mut sink).unwrap()
                };
                prop_assert_eq!(&got, &want);
                prop_assert_eq!(stats.points, read);
            }
        }
    }
}
