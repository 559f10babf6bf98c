//! Points held in memory, per series and per hour row, until the hour is
//! sealed and written to the store as one row.
//!
//! An hour of a series is sealed when:
//! - the series has received a point for a later hour (its hour closed);
//! - the wall clock is past the hour's end plus a grace period and the
//!   series has been idle for a while;
//! - memory is short (every hour but each series' newest, then everything);
//! - the WAL asks for a checkpoint, or the TSD shuts down (everything).
//!
//! Points for an hour that was already written are buffered again and
//! merged into the stored row when they are sealed: never lost.
//!
//! Sealed hours stay visible to readers ("in flight") until the store has
//! them. A seal only moves hours from the shards into the in-flight set,
//! one shard at a time: sorting them and converting them into the
//! points rows are written from happens afterwards, while queries run.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use parking_lot::{Mutex, RwLock};

use crate::model::Tsuid;
use crate::model::Uid;
use crate::model::point::{Timestamp, Value};
use crate::model::row_span::ROW_SPAN_SECS;
use crate::store::read::Point;

use super::series::Series;
use crate::model::hash::{FastBuild, FastMap};

const SHARDS: usize = 64;

struct HourBuf {
    base: u32,
    /// Oldest WAL segment holding one of these points.
    min_segment: u64,
    points: Vec<Point>,
}

struct SeriesBuf {
    series: Arc<Series>,
    hours: Vec<HourBuf>,
    newest_base: u32,
    /// Coarse wall-clock second of the last insert.
    last_insert_s: u32,
}

/// An hour moved out of its shard by a seal, its points as they were
/// buffered (arrival order, a timestamp possibly more than once), until
/// the store has it.
struct InFlightHour {
    series: Arc<Series>,
    base: u32,
    min_segment: u64,
    points: Vec<Point>,
}

/// Sealed hours not yet in the store, by metric: a read visits its
/// metric's hours only. Each metric's parts are in the order they left
/// their shards, so a later part of a series' hour holds later writes.
#[derive(Default)]
struct InFlight {
    by_metric: FastMap<Uid, Vec<InFlightPart>>,
}

/// One metric's hours of one shard, moved by the seal `batch`.
struct InFlightPart {
    batch: u64,
    hours: Arc<Vec<InFlightHour>>,
}

impl InFlight {
    fn hours(&self) -> impl Iterator<Item = &InFlightHour> {
        self.by_metric
            .values()
            .flat_map(|parts| parts.iter().flat_map(|part| part.hours.iter()))
    }
}

/// An hour row taken out of the buffer to be written.
pub(crate) struct SealedHour {
    pub series: Arc<Series>,
    pub base: u32,
    pub min_segment: u64,
    /// Sorted, one per timestamp (the last written wins).
    pub points: Vec<(Timestamp, Value)>,
}

/// Which hours to seal.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SealPolicy {
    pub now_s: u32,
    pub grace_s: u32,
    pub idle_s: u32,
    /// Memory is short: seal all but each series' newest hour.
    pub pressure: bool,
    /// Seal everything.
    pub everything: bool,
}

pub(crate) struct Buffer {
    shards: Vec<Mutex<FastMap<u32, SeriesBuf>>>,
    /// Every series ever buffered, by metric and id: a read visits its
    /// metric's series, not every buffered one (a query of one series of
    /// a million would otherwise walk them all). Entries are only added,
    /// before the series' first point is readable, so a reader never
    /// misses a buffered series; one no longer buffered is skipped.
    by_metric: RwLock<FastMap<Uid, MetricSeries>>,
    points: AtomicUsize,
    clock_s: AtomicU32,
    /// Taken by readers before the shards and held while they read them,
    /// and by a seal (to write) before each shard it empties: a reader
    /// sees every point either in a shard or in flight, never in neither.
    in_flight: RwLock<InFlight>,
    next_batch: AtomicU64,
    /// The shard the last seal stopped at, full: the next one starts
    /// there rather than walking again every series of the shards the
    /// last one emptied (a million series' flush seals ~60 batches).
    seal_cursor: AtomicUsize,
}

impl Default for Buffer {
    fn default() -> Self {
        Buffer::new()
    }
}

/// Sorts by time and keeps the last written point of each timestamp.
fn dedup_last_wins<P: Copy>(mut pts: Vec<P>, ms: impl Fn(&P) -> u64) -> Vec<P> {
    let kept = dedup_last_wins_in_place(&mut pts, ms);
    pts.truncate(kept);
    pts
}

/// [`dedup_last_wins`] within a slice: the kept points move to its front;
/// returns how many there are.
fn dedup_last_wins_in_place<P: Copy>(pts: &mut [P], ms: impl Fn(&P) -> u64) -> usize {
    // Points usually arrive in time order: nothing to do then.
    if pts.windows(2).all(|w| ms(&w[0]) < ms(&w[1])) {
        return pts.len();
    }
    pts.sort_by_key(&ms); // stable: arrival order kept per timestamp
    let mut kept = 0;
    for i in 0..pts.len() {
        if kept > 0 && ms(&pts[kept - 1]) == ms(&pts[i]) {
            pts[kept - 1] = pts[i];
        } else {
            pts[kept] = pts[i];
            kept += 1;
        }
    }
    kept
}

/// Buffered and in-flight points copied out for one read, all series in
/// one arena: a query of the current hour copies every point of its
/// series once, and hands each series' points on as they are.
pub(crate) struct BufferedPoints<K> {
    points: Vec<Point>,
    /// Each key's series and its points in `points` (sorted, one per
    /// timestamp, the newest write winning), in key order.
    spans: Vec<(K, Arc<Series>, std::ops::Range<usize>)>,
}

impl<K> Default for BufferedPoints<K> {
    fn default() -> Self {
        BufferedPoints {
            points: Vec::new(),
            spans: Vec::new(),
        }
    }
}

/// One series' points in a [`BufferedPoints`].
#[derive(Clone, Copy)]
pub(crate) struct BufferedSeries<'a> {
    points: &'a [Point],
}

/// Most points a read's arena makes room for on the guess that every
/// listed series holds as many as the first (16 MiB).
const ARENA_GUESS_POINTS: usize = 1 << 20;

impl<'a> BufferedSeries<'a> {
    pub(crate) fn len(&self) -> usize {
        self.points.len()
    }

    pub(crate) fn first_ms(&self) -> Option<u64> {
        self.points.first().map(|p| p.timestamp_ms())
    }

    /// The series' points, sorted, one per timestamp.
    pub(crate) fn points(self) -> &'a [Point] {
        self.points
    }
}

impl<K: Ord + Copy> BufferedPoints<K> {
    /// How many series have points (tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.spans.len()
    }

    /// The points of `key`, if any are buffered.
    pub(crate) fn get(&self, key: K) -> Option<BufferedSeries<'_>> {
        let at = self.spans.binary_search_by_key(&key, |s| s.0).ok()?;
        Some(self.series_at(at))
    }

    /// Every key's series and points, in key order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (K, &Arc<Series>, BufferedSeries<'_>)> {
        (0..self.spans.len()).map(|i| (self.spans[i].0, &self.spans[i].1, self.series_at(i)))
    }

    fn series_at(&self, i: usize) -> BufferedSeries<'_> {
        BufferedSeries {
            points: &self.points[self.spans[i].2.clone()],
        }
    }
}

/// A metric's series ever buffered, found by TSUID: a query of a few of a
/// metric's many series looks each up rather than walking them all.
#[derive(Default)]
struct MetricSeries(hashbrown::HashTable<Arc<Series>>);

impl MetricSeries {
    fn hash(tsuid: &Tsuid) -> u64 {
        FastBuild::default().hash_one(tsuid)
    }

    fn contains(&self, series: &Series) -> bool {
        self.0
            .find(Self::hash(&series.tsuid), |s| s.id == series.id)
            .is_some()
    }

    fn insert(&mut self, series: Arc<Series>) {
        self.0
            .insert_unique(Self::hash(&series.tsuid), series, |s| Self::hash(&s.tsuid));
    }

    /// The series with this TSUID: usually one, but a series forgotten by
    /// the series cache (`dropcaches`) and seen again comes back under a
    /// new id while the old one may still hold points.
    fn with_tsuid<'a>(&'a self, tsuid: &'a Tsuid) -> impl Iterator<Item = &'a Arc<Series>> + 'a {
        self.0
            .iter_hash(Self::hash(tsuid))
            .filter(move |s| s.tsuid == *tsuid)
    }
}

/// One point into its series' hour in a locked shard; a series new to
/// the shard is first entered in `by_metric`.
fn insert_into(
    shard: &mut FastMap<u32, SeriesBuf>,
    by_metric: &RwLock<FastMap<Uid, MetricSeries>>,
    series: &Arc<Series>,
    ts: Timestamp,
    value: Value,
    segment: u64,
    now: u32,
) {
    let base = ts
        .base_time()
        .expect("Db::append refuses points past the last row");
    let sb = shard.entry(series.id).or_insert_with(|| {
        let known = by_metric
            .read()
            .get(&series.tsuid.metric)
            .is_some_and(|m| m.contains(series));
        if !known {
            let mut by_metric = by_metric.write();
            let m = by_metric.entry(series.tsuid.metric).or_default();
            // Checked again under the write lock: another shard's writer
            // cannot add this series (it lives in this locked shard), but
            // the check costs nothing and keeps entries unique.
            if !m.contains(series) {
                m.insert(series.clone());
            }
        }
        SeriesBuf {
            series: series.clone(),
            hours: Vec::with_capacity(2),
            newest_base: base,
            last_insert_s: now,
        }
    });
    sb.last_insert_s = now;
    sb.newest_base = sb.newest_base.max(base);
    let point = Point::written(ts, value);
    match sb.hours.iter_mut().rev().find(|h| h.base == base) {
        Some(h) => {
            h.min_segment = h.min_segment.min(segment);
            h.points.push(point);
        }
        None => sb.hours.push(HourBuf {
            base,
            min_segment: segment,
            points: vec![point],
        }),
    }
}

impl Buffer {
    pub(crate) fn new() -> Buffer {
        Buffer {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(FastMap::default()))
                .collect(),
            by_metric: RwLock::new(FastMap::default()),
            points: AtomicUsize::new(0),
            clock_s: AtomicU32::new(crate::model::time::now_s()),
            in_flight: RwLock::new(InFlight::default()),
            next_batch: AtomicU64::new(1),
            seal_cursor: AtomicUsize::new(0),
        }
    }

    /// Points buffered, in flight excluded.
    pub(crate) fn points(&self) -> usize {
        self.points.load(Ordering::Relaxed)
    }

    /// Advances the coarse clock used for idleness (called by the flusher).
    pub(crate) fn tick(&self, now_s: u32) {
        self.clock_s.store(now_s, Ordering::Relaxed);
    }

    /// One point (appends go through [`Buffer::insert_batch`]).
    #[cfg(test)]
    pub(crate) fn insert(&self, series: &Arc<Series>, ts: Timestamp, value: Value, segment: u64) {
        let now = self.clock_s.load(Ordering::Relaxed);
        let mut shard = self.shards[series.id as usize % SHARDS].lock();
        insert_into(&mut shard, &self.by_metric, series, ts, value, segment, now);
        drop(shard);
        self.points.fetch_add(1, Ordering::Relaxed);
    }

    /// Inserts a batch logged in WAL segment `segment`, taking each shard's
    /// lock once for all its points and counting them once: per point, a
    /// lock round trip and an increment of a counter every writer shares
    /// cost more than the insert itself.
    pub(crate) fn insert_batch(&self, points: &[super::wal::PendingPoint], segment: u64) {
        let now = self.clock_s.load(Ordering::Relaxed);
        // The points by shard, counted out (one pass each way, no sort):
        // in each shard in the order given, so a series' points keep
        // their order (the last write of a timestamp wins).
        let shard_of = |p: &super::wal::PendingPoint| p.series.id as usize % SHARDS;
        let mut ends = [0u32; SHARDS];
        for p in points {
            ends[shard_of(p)] += 1;
        }
        let mut at = 0;
        for end in ends.iter_mut() {
            at += *end;
            *end = at;
        }
        let mut order = vec![0u32; points.len()];
        let mut next = ends;
        for (i, p) in points.iter().enumerate().rev() {
            let slot = &mut next[shard_of(p)];
            *slot -= 1;
            order[*slot as usize] = i as u32;
        }
        let mut from = 0;
        for (shard, &end) in ends.iter().enumerate() {
            let run = &order[from as usize..end as usize];
            from = end;
            if run.is_empty() {
                continue;
            }
            let mut shard = self.shards[shard].lock();
            for &i in run {
                let p = &points[i as usize];
                insert_into(
                    &mut shard,
                    &self.by_metric,
                    &p.series,
                    p.ts,
                    p.value,
                    segment,
                    now,
                );
            }
        }
        self.points.fetch_add(points.len(), Ordering::Relaxed);
    }

    /// Takes the hours `policy` seals, at most `max_hours` of them (the
    /// caller seals again while a batch comes back full, so a flush of a
    /// million series never holds them all in a second copy at once);
    /// they stay readable until [`Buffer::finish`] is called with the
    /// returned id. The returned hours are sorted and de-duplicated
    /// (the last write of a timestamp wins) after they left the shards,
    /// outside every lock readers take.
    pub(crate) fn seal(&self, policy: SealPolicy, max_hours: usize) -> (u64, Vec<SealedHour>) {
        let id = self.next_batch.fetch_add(1, Ordering::Relaxed);
        let mut parts: Vec<Arc<Vec<InFlightHour>>> = Vec::new();
        let mut hours = 0;
        let first = self.seal_cursor.load(Ordering::Relaxed);
        for k in 0..SHARDS {
            if hours >= max_hours {
                break;
            }
            let at = (first + k) % SHARDS;
            // Held until this shard's hours are registered as in flight:
            // readers take it before the shards (see the field). Only the
            // points' Vecs move meanwhile; no point is copied or sorted.
            let mut in_flight = self.in_flight.write();
            let mut shard = self.shards[at].lock();
            let mut by_metric: FastMap<Uid, Vec<InFlightHour>> = FastMap::default();
            let mut taken = 0;
            shard.retain(|_, sb| {
                if hours >= max_hours {
                    return true;
                }
                let idle = policy.now_s.saturating_sub(sb.last_insert_s) >= policy.idle_s;
                let newest = sb.newest_base;
                let mut i = 0;
                while i < sb.hours.len() && hours < max_hours {
                    let h = &sb.hours[i];
                    let closed = h.base < newest;
                    let old = (h.base as u64 + ROW_SPAN_SECS as u64 + policy.grace_s as u64)
                        <= policy.now_s as u64
                        && idle;
                    if policy.everything || closed || old || (policy.pressure && h.base < newest) {
                        let h = sb.hours.swap_remove(i);
                        taken += h.points.len();
                        hours += 1;
                        by_metric
                            .entry(sb.series.tsuid.metric)
                            .or_default()
                            .push(InFlightHour {
                                series: sb.series.clone(),
                                base: h.base,
                                min_segment: h.min_segment,
                                points: h.points,
                            });
                    } else {
                        i += 1;
                    }
                }
                !sb.hours.is_empty()
            });
            drop(shard);
            for (metric, part) in by_metric {
                let part = Arc::new(part);
                in_flight
                    .by_metric
                    .entry(metric)
                    .or_default()
                    .push(InFlightPart {
                        batch: id,
                        hours: part.clone(),
                    });
                parts.push(part);
            }
            drop(in_flight);
            self.points.fetch_sub(taken, Ordering::Relaxed);
            if hours >= max_hours {
                // This shard may hold more: the next seal starts here.
                self.seal_cursor.store(at, Ordering::Relaxed);
            }
        }
        let sealed = parts
            .iter()
            .flat_map(|part| part.iter())
            .map(|h| SealedHour {
                series: h.series.clone(),
                base: h.base,
                min_segment: h.min_segment,
                // Converted first, then de-duplicated in that one Vec: the
                // in-flight copy stays as it is for readers.
                points: dedup_last_wins(
                    h.points
                        .iter()
                        .map(|p| (p.timestamp(), p.value()))
                        .collect(),
                    |(t, _)| t.as_millis(),
                ),
            })
            .collect();
        (id, sealed)
    }

    /// The sealed batch `id` is in the store (or was put back).
    pub(crate) fn finish(&self, id: u64) {
        self.in_flight.write().by_metric.retain(|_, parts| {
            parts.retain(|part| part.batch != id);
            !parts.is_empty()
        });
    }

    /// Puts a sealed hour back (its write failed), before any point of
    /// that hour buffered since the seal: those were written later, and
    /// the last write of a timestamp wins.
    pub(crate) fn put_back(&self, hour: &SealedHour) {
        if hour.points.is_empty() {
            return;
        }
        let now = self.clock_s.load(Ordering::Relaxed);
        let mut shard = self.shards[hour.series.id as usize % SHARDS].lock();
        for (ts, v) in &hour.points {
            insert_into(
                &mut shard,
                &self.by_metric,
                &hour.series,
                *ts,
                *v,
                hour.min_segment,
                now,
            );
        }
        if let Some(h) = shard
            .get_mut(&hour.series.id)
            .and_then(|sb| sb.hours.iter_mut().find(|h| h.base == hour.base))
        {
            h.points.rotate_right(hour.points.len());
        }
        drop(shard);
        self.points.fetch_add(hour.points.len(), Ordering::Relaxed);
    }

    /// Drops the buffered hours `[first_base, last_base]` of the series
    /// `doomed` selects; returns the points dropped. In-flight hours are
    /// not touched: the caller holds the flush lock, so there are none.
    pub(crate) fn remove_hours(
        &self,
        doomed: &dyn Fn(&Tsuid) -> bool,
        first_base: u32,
        last_base: u32,
    ) -> usize {
        let mut dropped = 0;
        for shard in &self.shards {
            shard.lock().retain(|_, sb| {
                if !doomed(&sb.series.tsuid) {
                    return true;
                }
                sb.hours.retain(|h| {
                    let gone = (first_base..=last_base).contains(&h.base);
                    if gone {
                        dropped += h.points.len();
                    }
                    !gone
                });
                !sb.hours.is_empty()
            });
        }
        self.points.fetch_sub(dropped, Ordering::Relaxed);
        dropped
    }

    /// Oldest WAL segment that still holds points not in the store.
    pub(crate) fn min_segment(&self) -> Option<u64> {
        let mut min: Option<u64> = None;
        let mut see = |s: u64| min = Some(min.map_or(s, |m: u64| m.min(s)));
        for shard in &self.shards {
            for sb in shard.lock().values() {
                for h in &sb.hours {
                    see(h.min_segment);
                }
            }
        }
        for h in self.in_flight.read().hours() {
            see(h.min_segment);
        }
        min
    }

    /// Buffered and in-flight points of those of `metric`'s series that
    /// `want` selects, in `[start_ms, end_ms]`, sorted, one per timestamp
    /// (newest write wins). Only selected series are copied.
    pub(crate) fn read(
        &self,
        metric: Uid,
        start_ms: u64,
        end_ms: u64,
        want: &mut dyn FnMut(&Tsuid) -> bool,
    ) -> HashMap<Tsuid, Vec<Point>> {
        let mut wanted: FastMap<u32, bool> = FastMap::default();
        let mut is_wanted = |s: &Series| {
            wanted
                .entry(s.id)
                .or_insert_with(|| want(&s.tsuid))
                .then_some(s.id)
        };
        let members = |m: &MetricSeries, keep: &mut dyn FnMut(&Series) -> Option<u32>| {
            m.0.iter()
                .filter_map(|s| keep(s).map(|k| (s.clone(), k)))
                .collect()
        };
        self.collect(metric, start_ms, end_ms, &mut is_wanted, members)
            .iter()
            .map(|(_, series, pts)| (series.tsuid.clone(), pts.points().to_vec()))
            .collect()
    }

    /// Buffered and in-flight points of the listed series (of any
    /// metrics) in `[start_ms, end_ms]`, by position in `tsuids`, sorted,
    /// one per timestamp (newest write wins). Each listed series is looked
    /// up, so the cost follows the list, not how many series its metrics
    /// have.
    pub(crate) fn read_listed(
        &self,
        tsuids: &[Tsuid],
        start_ms: u64,
        end_ms: u64,
    ) -> BufferedPoints<usize> {
        let mut metrics: Vec<Uid> = tsuids.iter().map(|t| t.metric).collect();
        metrics.sort_unstable();
        metrics.dedup();
        let mut out: Option<BufferedPoints<usize>> = None;
        for metric in metrics {
            // Built only if an in-flight hour of the metric is in range.
            let mut positions: Option<FastMap<&Tsuid, usize>> = None;
            let mut is_listed = |s: &Series| {
                positions
                    .get_or_insert_with(|| {
                        tsuids
                            .iter()
                            .enumerate()
                            .filter(|(_, t)| t.metric == metric)
                            .map(|(i, t)| (t, i))
                            .collect()
                    })
                    .get(&s.tsuid)
                    .copied()
            };
            let members = |m: &MetricSeries, _: &mut dyn FnMut(&Series) -> Option<usize>| {
                tsuids
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| t.metric == metric)
                    .flat_map(|(i, t)| m.with_tsuid(t).map(move |s| (s.clone(), i)))
                    .collect()
            };
            let got = self.collect(metric, start_ms, end_ms, &mut is_listed, members);
            out = Some(match out {
                None => got,
                Some(mut all) => {
                    // Several metrics (rare): their positions interleave.
                    let shift = all.points.len();
                    all.points.extend_from_slice(&got.points);
                    all.spans.extend(
                        got.spans
                            .into_iter()
                            .map(|(k, s, r)| (k, s, r.start + shift..r.end + shift)),
                    );
                    all.spans.sort_by_key(|s| s.0);
                    all
                }
            });
        }
        out.unwrap_or_default()
    }

    /// The points of `metric`'s series in `[start_ms, end_ms]`, buffered
    /// or in flight, under the key `key` gives a series (`None`: not
    /// read); `members` picks, with the same keys, the buffered series to
    /// visit. Series with no point in range are left out.
    fn collect<K: Ord + Copy>(
        &self,
        metric: Uid,
        start_ms: u64,
        end_ms: u64,
        key: &mut dyn FnMut(&Series) -> Option<K>,
        members: impl FnOnce(
            &MetricSeries,
            &mut dyn FnMut(&Series) -> Option<K>,
        ) -> Vec<(Arc<Series>, K)>,
    ) -> BufferedPoints<K> {
        let mut points: Vec<Point> = Vec::new();
        // What each series contributed to `points`, in the order written.
        let mut parts: Vec<(K, Arc<Series>, std::ops::Range<usize>)> = Vec::new();
        // An hour wholly in range (the usual case) is copied as it is, in
        // one pass of known length.
        let copy_hour = |dst: &mut Vec<Point>, base: u32, hour: &[Point]| {
            let hour_ms = base as u64 * 1000;
            if hour_ms >= start_ms && hour_ms + ROW_SPAN_SECS as u64 * 1000 - 1 <= end_ms {
                dst.extend_from_slice(hour);
            } else {
                dst.extend(
                    hour.iter()
                        .filter(|p| (start_ms..=end_ms).contains(&p.timestamp_ms())),
                );
            }
        };
        // Rows whose hour overlaps the range: bases from one span before
        // the start.
        let (first_hour, last_hour) = (
            (start_ms / 1000).saturating_sub(ROW_SPAN_SECS as u64 - 1),
            end_ms / 1000,
        );
        let hour_in_range = |base: u32| (first_hour..=last_hour).contains(&(base as u64));
        // In-flight points are older than buffered ones: collect them first
        // so the stable sort lets later writes win.
        // Kept locked while the shards are read: see the field.
        let in_flight = self.in_flight.read();
        for part in in_flight.by_metric.get(&metric).into_iter().flatten() {
            for h in part.hours.iter() {
                if !hour_in_range(h.base) {
                    continue;
                }
                let Some(k) = key(&h.series) else { continue };
                let from = points.len();
                copy_hour(&mut points, h.base, &h.points);
                parts.push((k, h.series.clone(), from..points.len()));
            }
        }
        // The metric's series that are wanted, then each in its shard.
        let members: Vec<(Arc<Series>, K)> = match self.by_metric.read().get(&metric) {
            Some(m) => members(m, key),
            None => Vec::new(),
        };
        // A series' hours in range, by position, oldest first.
        let mut order: Vec<usize> = Vec::new();
        let listed = members.len();
        for (n, (series, k)) in members.into_iter().enumerate() {
            let shard = self.shards[series.id as usize % SHARDS].lock();
            let Some(sb) = shard.get(&series.id) else {
                continue;
            };
            order.clear();
            order.extend((0..sb.hours.len()).filter(|&j| hour_in_range(sb.hours[j].base)));
            if order.is_empty() {
                continue;
            }
            order.sort_by_key(|&j| sb.hours[j].base);
            let len: usize = order.iter().map(|&j| sb.hours[j].points.len()).sum();
            if points.capacity() == 0 {
                // Series of a metric tend to hold alike counts: room for
                // all of them as this one, up to a bound, rather than
                // copying the arena at each doubling.
                points.reserve((len * (listed - n)).min(ARENA_GUESS_POINTS));
            }
            points.reserve(len);
            let from = points.len();
            for &j in &order {
                copy_hour(&mut points, sb.hours[j].base, &sb.hours[j].points);
            }
            parts.push((k, sb.series.clone(), from..points.len()));
        }
        drop(in_flight);
        // One span per key, sorted and one point per timestamp. A key's
        // several parts (in flight and buffered, or one TSUID under two
        // series ids) are joined at the end of the arena, in the order
        // written, so the newest write still wins.
        parts.retain(|p| !p.2.is_empty());
        parts.sort_by_key(|p| p.0); // stable: write order kept per key
        let mut spans = Vec::with_capacity(parts.len());
        let mut parts = parts.into_iter().peekable();
        while let Some((k, series, mut range)) = parts.next() {
            if parts.peek().is_some_and(|p| p.0 == k) {
                let from = points.len();
                points.extend_from_within(range);
                while let Some(p) = parts.next_if(|p| p.0 == k) {
                    points.extend_from_within(p.2);
                }
                range = from..points.len();
            }
            let kept = dedup_last_wins_in_place(&mut points[range.clone()], |p| p.timestamp_ms());
            spans.push((k, series, range.start..range.start + kept));
        }
        BufferedPoints { points, spans }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(id: u32) -> Arc<Series> {
        Series::for_test(id, "m")
    }

    fn policy() -> SealPolicy {
        SealPolicy {
            now_s: 1356998400 + 1800,
            grace_s: 600,
            idle_s: 5,
            pressure: false,
            everything: false,
        }
    }

    /// A batch lands as point-by-point inserts would: each series' points
    /// in order, so the last write of a timestamp wins.
    #[test]
    fn a_batch_keeps_each_series_order() {
        use crate::write::wal::PendingPoint;
        let b = Buffer::new();
        let all: Vec<_> = (1..=100).map(series).collect();
        let mut batch = Vec::new();
        for round in 0..3i64 {
            for s in &all {
                batch.push(PendingPoint {
                    series: s.clone(),
                    ts: Timestamp::Seconds(1356998400),
                    value: Value::Int(round),
                });
            }
        }
        b.insert_batch(&batch, 7);
        assert_eq!(b.points(), 300);
        let (_, sealed) = b.seal(
            SealPolicy {
                everything: true,
                ..policy()
            },
            usize::MAX,
        );
        assert_eq!(sealed.len(), 100);
        for h in sealed.iter() {
            assert_eq!(
                h.points,
                vec![(Timestamp::Seconds(1356998400), Value::Int(2))]
            );
            assert_eq!(h.min_segment, 7);
        }
    }

    /// A seal takes at most the hours asked for; the rest stay buffered
    /// and readable for the next seal.
    #[test]
    fn a_seal_takes_at_most_the_batch_asked_for() {
        let b = Buffer::new();
        let all: Vec<_> = (1..=10).map(series).collect();
        for s in &all {
            b.insert(s, Timestamp::Seconds(1356998400), Value::Int(1), 1);
        }
        let everything = SealPolicy {
            everything: true,
            ..policy()
        };
        let (first, batch) = b.seal(everything, 4);
        assert_eq!(batch.len(), 4);
        assert_eq!(b.points(), 6);
        let read = b.read(all[0].tsuid.metric, 0, u64::MAX, &mut |_| true);
        assert_eq!(read.len(), 10, "sealed hours in flight stay readable");
        b.finish(first);
        let (_, rest) = b.seal(everything, 100);
        assert_eq!(rest.len(), 6);
        let mut ids: Vec<u32> = batch
            .iter()
            .chain(rest.iter())
            .map(|h| h.series.id)
            .collect();
        ids.sort_unstable();
        assert_eq!(ids, (1..=10).collect::<Vec<_>>());
    }

    /// A read visits its metric's series only, and finds a series again
    /// once it is buffered anew after all its hours were written.
    #[test]
    fn reads_find_their_metrics_series_buffered_again_after_a_seal() {
        let b = Buffer::new();
        let s = series(1);
        let other_metric = Series::for_test_of_metric(2, 2, "n");
        let everything = SealPolicy {
            everything: true,
            ..policy()
        };
        b.insert(&s, Timestamp::Seconds(1356998400), Value::Int(1), 1);
        b.insert(
            &other_metric,
            Timestamp::Seconds(1356998400),
            Value::Int(9),
            1,
        );
        let (id, _) = b.seal(everything, usize::MAX);
        b.finish(id);
        assert!(
            b.read(s.tsuid.metric, 0, u64::MAX, &mut |_| true)
                .is_empty()
        );
        b.insert(&s, Timestamp::Seconds(1356998410), Value::Int(2), 2);
        let mut asked = Vec::new();
        let read = b.read(s.tsuid.metric, 0, u64::MAX, &mut |t| {
            asked.push(t.clone());
            true
        });
        assert_eq!(read[&s.tsuid].len(), 1);
        assert_eq!(read.len(), 1);
        assert_eq!(asked, vec![s.tsuid.clone()], "only the metric's series");
    }

    /// A listed read finds each listed series, in flight or buffered, by
    /// its position in the list, and nothing else of its metric; a series
    /// buffered under two ids (forgotten by the series cache, then seen
    /// again) is read under both.
    #[test]
    fn listed_reads_find_exactly_the_listed_series() {
        let b = Buffer::new();
        let all: Vec<_> = (1..=50).map(series).collect();
        for s in &all {
            b.insert(
                s,
                Timestamp::Seconds(1356998400),
                Value::Int(s.id as i64),
                1,
            );
        }
        // Series 7's hour goes in flight; then it gets a newer point.
        let (_, sealed) = b.seal(
            SealPolicy {
                everything: true,
                ..policy()
            },
            usize::MAX,
        );
        assert_eq!(sealed.len(), 50);
        b.insert(&all[6], Timestamp::Seconds(1356998410), Value::Int(70), 2);
        // Series 9 under a second id.
        let again = Series::for_test_as(900, all[8].tsuid.clone());
        b.insert(&again, Timestamp::Seconds(1356998420), Value::Int(90), 2);
        let other = Series::for_test_of_metric(3, 2, "n");
        b.insert(&other, Timestamp::Seconds(1356998400), Value::Int(3), 2);
        let missing = Series::for_test(77, "m").tsuid.clone();
        let asked = [
            all[8].tsuid.clone(),
            missing,
            all[6].tsuid.clone(),
            other.tsuid.clone(),
        ];
        let got = b.read_listed(&asked, 0, u64::MAX);
        let ts = |i: usize| -> Vec<(u64, Value)> {
            got.get(i)
                .expect("buffered")
                .points()
                .to_vec()
                .iter()
                .map(|p| (p.timestamp_ms(), p.value()))
                .collect()
        };
        assert_eq!(got.len(), 3);
        assert_eq!(
            ts(0),
            vec![
                (1356998400000, Value::Int(9)),
                (1356998420000, Value::Int(90))
            ]
        );
        assert_eq!(
            ts(2),
            vec![
                (1356998400000, Value::Int(7)),
                (1356998410000, Value::Int(70))
            ]
        );
        assert_eq!(ts(3), vec![(1356998400000, Value::Int(3))]);
        // The range applies.
        let got = b.read_listed(&asked, 1356998405000, 1356998415000);
        assert_eq!(got.len(), 1);
        assert_eq!(got.get(2).map(|s| s.len()), Some(1));
    }

    /// A long series written out of order, with rewrites, is read back
    /// sorted with its last writes.
    #[test]
    fn a_long_unordered_series_reads_back_sorted() {
        let b = Buffer::new();
        let s = series(1);
        let n = 1300u32;
        // Odd seconds first, then even ones, then every tenth again.
        let order = (0..n)
            .filter(|i| i % 2 == 1)
            .chain((0..n).filter(|i| i % 2 == 0));
        for i in order {
            b.insert(
                &s,
                Timestamp::Seconds(1356998400 + i),
                Value::Int(i as i64),
                1,
            );
        }
        for i in (0..n).step_by(10) {
            b.insert(
                &s,
                Timestamp::Seconds(1356998400 + i),
                Value::Int(-(i as i64)),
                2,
            );
        }
        let got = b.read_listed(std::slice::from_ref(&s.tsuid), 0, u64::MAX);
        let one = got.get(0).expect("buffered");
        assert_eq!(one.len(), n as usize);
        for (i, p) in one.points().iter().enumerate() {
            let want = if i % 10 == 0 { -(i as i64) } else { i as i64 };
            assert_eq!(
                (p.timestamp_ms(), p.value()),
                (1356998400000 + i as u64 * 1000, Value::Int(want))
            );
        }
    }

    /// A reader racing seals sees every point written before it began,
    /// exactly once, with its latest value: each point is in a shard or in
    /// flight, never in neither, and an in-flight copy never outranks a
    /// later write buffered since. Writes go round after round over the
    /// same timestamps (round r writes value r), so a point read with a
    /// value older than the last round written before the read began was
    /// either missed or read from a stale copy.
    #[test]
    fn a_reader_racing_seals_sees_every_point_once_with_its_latest_value() {
        use std::sync::atomic::AtomicBool;
        const SERIES: u32 = 16;
        const STAMPS: u64 = 8;
        const ROUNDS: u64 = 300;
        let b = Buffer::new();
        let all: Vec<_> = (1..=SERIES).map(series).collect();
        let metric = all[0].tsuid.metric;
        // Two hours, so that seals by policy (closed hours) happen too.
        let ts = |i: u64| 1356998400 + (i % 2) * 3600 + i;
        // Rounds completely written: the writer stores it after a round.
        let rounds_done = AtomicU64::new(0);
        let writing = AtomicBool::new(true);
        let sealed_hours = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for round in 0..ROUNDS {
                    for s in &all {
                        for i in 0..STAMPS {
                            b.insert(
                                s,
                                Timestamp::Seconds(ts(i) as u32),
                                Value::Int(round as i64),
                                round,
                            );
                        }
                    }
                    rounds_done.store(round + 1, Ordering::SeqCst);
                }
                writing.store(false, Ordering::SeqCst);
            });
            scope.spawn(|| {
                // Small batches, everything or closed hours by turns; the
                // hours stay in flight (nothing is written anywhere else).
                let mut turn = 0u32;
                // Until something was sealed, too: on a busy machine the
                // writer may be done before this thread first runs.
                while writing.load(Ordering::SeqCst) || sealed_hours.load(Ordering::Relaxed) == 0 {
                    turn += 1;
                    let (_, sealed) = b.seal(
                        SealPolicy {
                            everything: turn.is_multiple_of(2),
                            ..policy()
                        },
                        (turn % 7 + 1) as usize,
                    );
                    sealed_hours.fetch_add(sealed.len(), Ordering::Relaxed);
                }
            });
            scope.spawn(|| {
                let mut reads = 0;
                while writing.load(Ordering::SeqCst) || reads == 0 {
                    reads += 1;
                    let before = rounds_done.load(Ordering::SeqCst);
                    let got = b.read(metric, 0, u64::MAX, &mut |_| true);
                    let after = rounds_done.load(Ordering::SeqCst);
                    if before == 0 {
                        continue;
                    }
                    assert_eq!(got.len(), SERIES as usize);
                    for s in &all {
                        let pts = &got[&s.tsuid];
                        let mut want: Vec<u64> = (0..STAMPS).map(|i| ts(i) * 1000).collect();
                        want.sort_unstable();
                        let have: Vec<u64> = pts.iter().map(|p| p.timestamp_ms()).collect();
                        assert_eq!(have, want, "every point exactly once");
                        for p in pts {
                            let Value::Int(v) = p.value() else {
                                panic!("{:?}", p.value())
                            };
                            // Written before the read began: at least the
                            // last complete round; at most the one being
                            // written when it ended.
                            assert!(
                                (before as i64 - 1..=after as i64).contains(&v),
                                "read round {v}, rounds done {before}..{after}"
                            );
                        }
                    }
                }
            });
        });
        assert!(sealed_hours.load(Ordering::Relaxed) > 0, "seals happened");
        // Finally every point is there once with the last round's value.
        let got = b.read(metric, 0, u64::MAX, &mut |_| true);
        for s in &all {
            assert_eq!(got[&s.tsuid].len(), STAMPS as usize);
            assert!(
                got[&s.tsuid]
                    .iter()
                    .all(|p| p.value() == Value::Int(ROUNDS as i64 - 1))
            );
        }
    }

    /// A sealed hour put back after a failed write ranks before the
    /// points of its hour written since: the later write still wins.
    #[test]
    fn a_put_back_hour_does_not_outrank_later_writes() {
        let b = Buffer::new();
        let s = series(1);
        let t = Timestamp::Seconds(1356998400);
        b.insert(&s, t, Value::Int(1), 1);
        b.insert(&s, Timestamp::Seconds(1356998410), Value::Int(1), 1);
        let everything = SealPolicy {
            everything: true,
            ..policy()
        };
        let (id, sealed) = b.seal(everything, usize::MAX);
        b.insert(&s, t, Value::Int(2), 2);
        for h in &sealed {
            b.put_back(h);
        }
        b.finish(id);
        assert_eq!(b.points(), 3);
        let read = b.read(s.tsuid.metric, 0, u64::MAX, &mut |_| true);
        let values: Vec<Value> = read[&s.tsuid].iter().map(|p| p.value()).collect();
        assert_eq!(values, vec![Value::Int(2), Value::Int(1)]);
        let (_, again) = b.seal(everything, usize::MAX);
        assert_eq!(
            again[0].points,
            vec![
                (t, Value::Int(2)),
                (Timestamp::Seconds(1356998410), Value::Int(1))
            ]
        );
    }

    #[test]
    fn hours_seal_when_the_next_starts_and_reads_see_all() {
        let b = Buffer::new();
        let s = series(1);
        b.insert(&s, Timestamp::Seconds(1356998400), Value::Int(1), 3);
        b.insert(&s, Timestamp::Seconds(1356998400), Value::Int(2), 4);
        b.insert(&s, Timestamp::Millis(1356998400500), Value::Float(0.5), 4);
        assert_eq!(b.seal(policy(), usize::MAX).1.len(), 0, "open hour stays");
        b.insert(&s, Timestamp::Seconds(1357002000), Value::Int(3), 5);
        let (id, sealed) = b.seal(policy(), usize::MAX);
        assert_eq!(sealed.len(), 1);
        assert_eq!(sealed[0].base, 1356998400);
        assert_eq!(sealed[0].min_segment, 3);
        assert_eq!(
            sealed[0].points,
            vec![
                (Timestamp::Seconds(1356998400), Value::Int(2)),
                (Timestamp::Millis(1356998400500), Value::Float(0.5)),
            ]
        );
        assert_eq!(b.min_segment(), Some(3));
        let read = b.read(s.tsuid.metric, 0, u64::MAX, &mut |_| true);
        assert_eq!(read[&s.tsuid].len(), 3);
        b.finish(id);
        assert_eq!(b.min_segment(), Some(5));
        assert_eq!(
            b.read(s.tsuid.metric, 0, u64::MAX, &mut |_| true)[&s.tsuid].len(),
            1
        );
        let (_, all) = b.seal(
            SealPolicy {
                everything: true,
                ..policy()
            },
            usize::MAX,
        );
        assert_eq!(all.len(), 1);
        assert_eq!(b.points(), 0);
    }
}
