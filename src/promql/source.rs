//! The database as PromQL's [`Storage`]: label matchers resolved on the
//! series index through the select-and-read layer of
//! [`crate::query::QueryContext`], samples read through its
//! `SeriesSource`.
//!
//! How names travel: a series' metric is its `__name__`, each tag (key,
//! value) one label, names and values as stored (no escaping either way),
//! so `put sys.cpu.user … host=web01` is `sys.cpu.user{host="web01"}`
//! (`{__name__="sys.cpu.user"}` in a query: a dot is not valid in a
//! PromQL 2.42 metric identifier).
//!
//! Which series a selector picks: an equality on `__name__` names one
//! metric; any other matcher on it, or none (`{job="x"}`), walks the
//! metrics the index knows by name (a metric's name is tested once, never
//! its rows). Within a metric the label matchers run against the distinct
//! values the index holds for each key ([`select::match_tag_tests`]).
//!
//! Time ranges are exact: `series`, `labels` and label values count a
//! series only if it has a sample in the range, as [`Storage::select`]
//! returns only series with samples. The index remembers, per series,
//! the hour of its newest row: a series whose newest row ends before the
//! range is dropped unread, one whose newest hour lies within the range
//! is counted unread; the others are read (that hour's part of the range
//! first, where a series written up to now has its samples), and only
//! where they could add a name or value not found yet.
//!
//! A selector's samples are read as the OpenTSDB engine reads its
//! series: in key order, in runs that the store's read threads take
//! from a queue, a run scanning its metric's rows where the selection
//! covers most of the metric.
//!
//! Memory is bounded by [`SourceLimits`]: a selector that would hold more
//! series or samples than it allows is refused with Prometheus' error,
//! before or while reading, not after.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use promql_parser::label::{MatchOp, Matcher};

use super::error::{ErrorKind, PromError};
use super::storage::{SeriesMap, SteppedSeries, Storage, StoredSeries};
use super::value::{Labels, METRIC_NAME, Sample};
use crate::model::hash::FastMap;
use crate::model::point::Value;
use crate::model::row_span::ROW_SPAN_MS;
use crate::model::{Tsuid, Uid, UidKind};
use crate::query::QueryContext;
use crate::query::select::{self, TagTest, ValueTest};
use crate::store::read::Point;
use crate::uid::UidTableError;

/// How much one call may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceLimits {
    /// Samples one [`Storage::select`] may read (Prometheus'
    /// `--query.max-samples`, 50 million by default).
    pub max_samples: usize,
    /// Series one call may select: the labels of each are held whether or
    /// not it has samples. The same figure as `max_samples` by default:
    /// a series costs at least what a sample does.
    pub max_series: usize,
}

impl SourceLimits {
    /// Limits from the engine's `max_samples`, tightened by OpenTSDB's
    /// `tsd.query.limits.data_points.default` when that is set (non-zero),
    /// so one setting bounds both query languages.
    pub fn new(max_samples: usize, opentsdb_max_points: u64) -> SourceLimits {
        let max = match usize::try_from(opentsdb_max_points) {
            Ok(0) | Err(_) => max_samples,
            Ok(p) => max_samples.min(p),
        };
        SourceLimits {
            max_samples: max,
            max_series: max,
        }
    }
}

/// Points a reading thread counts by itself before reporting them to the
/// query's progress and looking for a cancel.
const REPORT_EVERY_POINTS: u64 = 4096;

/// Receives one metric's selected series, with the metric's name.
type MetricSink<'s> = dyn FnMut(&Arc<str>, Vec<Tsuid>) -> Result<(), PromError> + 's;

/// The database, read through a [`QueryContext`], as PromQL's storage.
pub struct DbStorage<'a> {
    ctx: &'a QueryContext<'a>,
    limits: SourceLimits,
}

impl<'a> DbStorage<'a> {
    pub fn new(ctx: &'a QueryContext<'a>, limits: SourceLimits) -> DbStorage<'a> {
        DbStorage { ctx, limits }
    }

    /// The metrics a selector's `__name__` matchers allow, with their
    /// names: one lookup for an equality, else every metric of the index
    /// tested by name.
    fn metrics(&self, name_matchers: &[&Matcher]) -> Result<Vec<(Uid, Arc<str>)>, PromError> {
        let uids = self.ctx.uids;
        let equal = name_matchers
            .iter()
            .find(|m| matches!(m.op, MatchOp::Equal) && !m.value.is_empty());
        let candidates: Vec<Uid> = match equal {
            Some(m) => uids
                .lookup_id(UidKind::Metric, &m.value)
                .map_err(storage_error)?
                .into_iter()
                .collect(),
            None => self.ctx.index.metrics(),
        };
        let mut out = Vec::with_capacity(candidates.len());
        for uid in candidates {
            let name = match uids.get_name(UidKind::Metric, uid) {
                Ok(n) => n,
                // A metric renamed away or deleted: no series by any name.
                Err(UidTableError::NoSuchId { .. }) => continue,
                Err(e) => return Err(storage_error(e)),
            };
            if name_matchers.iter().all(|m| m.is_match(&name)) {
                out.push((uid, name));
            }
        }
        Ok(out)
    }

    /// Calls `f` with each metric's series that `matchers` (all of them)
    /// select and whose newest row is not older than `start_ms`'s hour,
    /// metric by metric; empty `matchers` select every series.
    fn visit(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        f: &mut MetricSink<'_>,
    ) -> Result<(), PromError> {
        let (names, labels): (Vec<&Matcher>, Vec<&Matcher>) =
            matchers.iter().partition(|m| m.name == METRIC_NAME);
        let accept: Vec<_> = labels
            .iter()
            .map(|m| move |v: &str| m.is_match(v))
            .collect();
        let tests: Vec<TagTest> = labels
            .iter()
            .zip(&accept)
            .map(|(m, accepts)| TagTest {
                key: &m.name,
                values: match m.op {
                    // Looked up by name rather than tested on every value.
                    MatchOp::Equal if !m.value.is_empty() => ValueTest::Is(&m.value),
                    // A missing label reads as "": it passes when "" does.
                    _ => ValueTest::Accepts {
                        accepts,
                        absent: m.is_match(""),
                    },
                },
            })
            .collect();
        for (metric, name) in self.metrics(&names)? {
            let found = select::match_tag_tests(self.ctx, metric, &tests).map_err(query_error)?;
            let (found, _) = select::resolvable(self.ctx, found).map_err(query_error)?;
            let found = self.recent(found, start_ms);
            if !found.is_empty() {
                f(&name, found)?;
            }
        }
        Ok(())
    }

    /// `series` without those whose newest row ends before `start_ms`
    /// (the index's hour is all it knows of a series' time).
    fn recent(&self, mut series: Vec<Tsuid>, start_ms: i64) -> Vec<Tsuid> {
        if start_ms <= 0 {
            return series;
        }
        series.retain(|t| match self.ctx.index.last_hour(t) {
            // Hour 0: recorded without a time; kept, as nothing is known.
            None | Some(0) => true,
            Some(h) => i64::from(h) * 1000 + ROW_SPAN_MS as i64 > start_ms,
        });
        series
    }

    /// Of `series` (candidates [`recent`](Self::recent) kept), those with
    /// a sample in `[start_ms, end_ms]`. The index settles most: a series
    /// whose newest row's hour lies within the range has one. The others
    /// are read: first that hour's part of the range (where a series
    /// written up to now has its samples), then, for those still without
    /// one, the whole range. A sink that only marks what it sees: no
    /// sample is kept.
    fn with_samples(
        &self,
        series: Vec<Tsuid>,
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<Tsuid>, PromError> {
        if end_ms < 0 || end_ms < start_ms {
            return Ok(Vec::new());
        }
        let hour_ms = ROW_SPAN_MS as i64;
        let mut keep = vec![false; series.len()];
        let mut probes: BTreeMap<(i64, i64), Vec<usize>> = BTreeMap::new();
        let mut rest: Vec<usize> = Vec::new();
        for (i, t) in series.iter().enumerate() {
            let Some(h) = self.ctx.index.last_hour(t).filter(|&h| h > 0) else {
                rest.push(i);
                continue;
            };
            let (first, last) = (i64::from(h) * 1000, i64::from(h) * 1000 + hour_ms - 1);
            if first >= start_ms && last <= end_ms {
                keep[i] = true;
            } else if first <= end_ms && last >= start_ms {
                let window = (first.max(start_ms), last.min(end_ms));
                probes.entry(window).or_default().push(i);
            } else {
                rest.push(i);
            }
        }
        for ((a, b), idx) in probes {
            for (i, seen) in idx.iter().zip(self.seen(&series, &idx, a, b)?) {
                if seen {
                    keep[*i] = true;
                } else {
                    rest.push(*i);
                }
            }
        }
        if !rest.is_empty() {
            for (i, seen) in rest
                .iter()
                .zip(self.seen(&series, &rest, start_ms, end_ms)?)
            {
                keep[*i] |= seen;
            }
        }
        Ok(series
            .into_iter()
            .zip(keep)
            .filter_map(|(t, k)| k.then_some(t))
            .collect())
    }

    /// Whether each of `series[idx]` has a sample in `[start_ms, end_ms]`.
    fn seen(
        &self,
        series: &[Tsuid],
        idx: &[usize],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<bool>, PromError> {
        let list: Vec<Tsuid> = idx.iter().map(|&i| series[i].clone()).collect();
        let mut seen = vec![false; list.len()];
        self.ctx
            .source
            .read_tsuids(
                &list,
                start_ms.max(0) as u64,
                end_ms.max(0) as u64,
                &mut |i, points| {
                    seen[i] |= !points.is_empty();
                    true
                },
            )
            .map_err(|e| PromError::internal(e.to_string()))?;
        Ok(seen)
    }

    /// The series `matchers` select from `start_ms` on, with their labels,
    /// sorted by labels; refused past `max_series`.
    fn choose(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
    ) -> Result<Vec<(Tsuid, Labels)>, PromError> {
        let mut names = NameCache::new(self.ctx);
        let mut out: Vec<(Tsuid, Labels)> = Vec::new();
        self.visit(matchers, start_ms, &mut |metric, series| {
            if out.len() + series.len() > self.limits.max_series {
                return Err(PromError::too_many_samples());
            }
            for t in series {
                if let Some(labels) = names.labels(metric, &t)? {
                    out.push((t, labels));
                }
            }
            Ok(())
        })?;
        out.sort_by(|a, b| a.1.cmp(&b.1));
        Ok(out)
    }

    /// The samples of each of `tsuids` in `[start_ms, end_ms]`, in the
    /// order given, read as the OpenTSDB engine reads
    /// (`query::read`): each metric's series in key order, split into
    /// runs that the store's read threads take from a queue, a run read
    /// by scanning the metric's rows where the selection covers most of
    /// the metric. Refused past `max_samples`, counted while reading.
    ///
    /// Each series' samples are handed, in time order, to `finish` on the
    /// thread that read them (a series without samples too); its answers
    /// come back in the order given.
    fn read_samples<T: Send + Default>(
        &self,
        tsuids: &[Tsuid],
        start_ms: u64,
        end_ms: u64,
        finish: &(dyn Fn(Vec<Sample>) -> T + Sync),
    ) -> Result<Vec<T>, PromError> {
        let plan = ReadRuns::plan(self.ctx, tsuids, start_ms, end_ms);
        let threads = self
            .ctx
            .source
            .read_threads()
            .min(tsuids.len() / MIN_SERIES_PER_THREAD)
            .max(1);
        let queue = Mutex::new(plan.runs.iter().rev().collect::<Vec<&ReadRun>>());
        let total = AtomicUsize::new(0);
        let max = self.limits.max_samples;
        let work = || -> Result<Vec<(&ReadRun, Vec<T>)>, PromError> {
            let mut done = Vec::new();
            while let Some(run) = queue.lock().pop() {
                let Some(got) = self.read_run(&plan.order, run, start_ms, end_ms, &total, max)?
                else {
                    return Err(PromError::too_many_samples());
                };
                let got = got
                    .into_iter()
                    .map(|s| finish(StoredSeries::samples_in_order(s)))
                    .collect();
                done.push((run, got));
            }
            Ok(done)
        };
        let mut samples: Vec<T> = std::iter::repeat_with(T::default)
            .take(tsuids.len())
            .collect();
        for done in crate::parallel::run_all((0..threads).map(|_| work)) {
            for (run, got) in done? {
                for ((_, slot), s) in plan.order[run.from..run.to].iter().zip(got) {
                    let slot = *slot;
                    samples[slot] = s;
                }
            }
        }
        Ok(samples)
    }

    /// Reads one run; `None` once the call's samples passed `max`.
    fn read_run(
        &self,
        order: &[(Tsuid, usize)],
        run: &ReadRun,
        start_ms: u64,
        end_ms: u64,
        total: &AtomicUsize,
        max: usize,
    ) -> Result<Option<Vec<Vec<Sample>>>, PromError> {
        let list: Vec<Tsuid> = order[run.from..run.to]
            .iter()
            .map(|(t, _)| t.clone())
            .collect();
        let mut got: Vec<Vec<Sample>> = vec![Vec::new(); list.len()];
        let mut over = false;
        let progress = &self.ctx.progress;
        // Points are reported to the query's progress a batch at a time,
        // and a cancel is seen there, as the OpenTSDB engine's reads do.
        let mut unreported = 0u64;
        let mut cancelled = false;
        let mut sink = |i: usize, points: &[Point]| {
            let before = total.fetch_add(points.len(), Ordering::Relaxed);
            if before + points.len() > max {
                over = true;
                return false;
            }
            unreported += points.len() as u64;
            if unreported >= REPORT_EVERY_POINTS {
                progress.add_points(unreported);
                unreported = 0;
                if progress.is_cancelled() {
                    cancelled = true;
                    return false;
                }
            }
            got[i].extend(points.iter().map(|p| Sample {
                t: p.timestamp_ms() as i64,
                v: match p.value() {
                    Value::Int(v) => v as f64,
                    // Bits kept: a stale marker is a NaN payload.
                    Value::Float(v) => v,
                },
            }));
            true
        };
        let read = if run.scan {
            self.ctx
                .source
                .scan_tsuids(run.metric, &list, start_ms, end_ms, &mut sink)
        } else {
            self.ctx
                .source
                .read_tsuids(&list, start_ms, end_ms, &mut sink)
        };
        read.map_err(|e| PromError::internal(e.to_string()))?;
        progress.add_points(unreported);
        if cancelled || progress.is_cancelled() {
            return Err(PromError::new(
                ErrorKind::Canceled,
                "query was canceled in query preparation",
            ));
        }
        Ok((!over).then_some(got))
    }

    /// The matcher sets to visit: `sets`, or one empty set (every series)
    /// when there is none.
    fn sets_or_all(sets: &[Vec<Matcher>]) -> Vec<&[Matcher]> {
        if sets.is_empty() {
            vec![&[] as &[Matcher]]
        } else {
            sets.iter().map(Vec::as_slice).collect()
        }
    }
}

impl Storage for DbStorage<'_> {
    fn select(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<StoredSeries>, PromError> {
        if end_ms < 0 || end_ms < start_ms {
            return Ok(Vec::new());
        }
        let chosen = self.choose(matchers, start_ms)?;
        let tsuids: Vec<Tsuid> = chosen.iter().map(|(t, _)| t.clone()).collect();
        let samples = self.read_samples(&tsuids, start_ms.max(0) as u64, end_ms as u64, &|s| s)?;
        Ok(chosen
            .into_iter()
            .zip(samples)
            .filter(|(_, s)| !s.is_empty())
            .map(|((_, labels), samples)| StoredSeries { labels, samples })
            .collect())
    }

    fn select_mapped(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        map: &SeriesMap<'_>,
    ) -> Result<Vec<SteppedSeries>, PromError> {
        if end_ms < 0 || end_ms < start_ms {
            return Ok(Vec::new());
        }
        let chosen = self.choose(matchers, start_ms)?;
        let tsuids: Vec<Tsuid> = chosen.iter().map(|(t, _)| t.clone()).collect();
        // A series without samples is left out, as `select` leaves it.
        let mapped = self.read_samples(&tsuids, start_ms.max(0) as u64, end_ms as u64, &|s| {
            (!s.is_empty()).then(|| map(&s))
        })?;
        Ok(chosen
            .into_iter()
            .zip(mapped)
            .filter_map(|((_, labels), steps)| {
                Some(SteppedSeries {
                    labels,
                    steps: steps?,
                })
            })
            .collect())
    }

    fn series(
        &self,
        sets: &[Vec<Matcher>],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<Labels>, PromError> {
        let mut seen: HashSet<Tsuid> = HashSet::new();
        let mut names = NameCache::new(self.ctx);
        let mut out: Vec<Labels> = Vec::new();
        for set in sets {
            self.visit(set, start_ms, &mut |metric, series| {
                let fresh: Vec<Tsuid> = series.into_iter().filter(|t| !seen.contains(t)).collect();
                for t in self.with_samples(fresh, start_ms, end_ms)? {
                    if out.len() >= self.limits.max_series {
                        return Err(PromError::too_many_samples());
                    }
                    if let Some(labels) = names.labels(metric, &t)? {
                        out.push(labels);
                    }
                    seen.insert(t);
                }
                Ok(())
            })?;
        }
        out.sort();
        Ok(out)
    }

    fn label_names(
        &self,
        sets: &[Vec<Matcher>],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<String>, PromError> {
        let mut keys: HashSet<Uid> = HashSet::new();
        let mut any = false;
        for set in Self::sets_or_all(sets) {
            self.visit(set, start_ms, &mut |_, series| {
                // Only a series that would add a name needs its samples
                // checked; most series share their keys.
                let adding: Vec<Tsuid> = series
                    .into_iter()
                    .filter(|t| !any || t.tags.iter().any(|(k, _)| !keys.contains(k)))
                    .collect();
                for t in self.with_samples(adding, start_ms, end_ms)? {
                    any = true;
                    keys.extend(t.tags.iter().map(|(k, _)| *k));
                }
                Ok(())
            })?;
        }
        let mut names = NameCache::new(self.ctx);
        let mut out: BTreeSet<String> = BTreeSet::new();
        if any {
            out.insert(METRIC_NAME.to_string());
        }
        for k in keys {
            if let Some(n) = names.name(UidKind::TagKey, k)? {
                out.insert(n.to_string());
            }
        }
        Ok(out.into_iter().collect())
    }

    fn label_values(
        &self,
        name: &str,
        sets: &[Vec<Matcher>],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<String>, PromError> {
        let mut out: BTreeSet<String> = BTreeSet::new();
        if name == METRIC_NAME {
            for set in Self::sets_or_all(sets) {
                self.visit(set, start_ms, &mut |metric, series| {
                    if !out.contains(&**metric)
                        && !self.with_samples(series, start_ms, end_ms)?.is_empty()
                    {
                        out.insert(metric.to_string());
                    }
                    Ok(())
                })?;
            }
            return Ok(out.into_iter().collect());
        }
        let Some(key) = self
            .ctx
            .uids
            .lookup_id(UidKind::TagKey, name)
            .map_err(storage_error)?
        else {
            return Ok(Vec::new());
        };
        let mut values: HashSet<Uid> = HashSet::new();
        for set in Self::sets_or_all(sets) {
            self.visit(set, start_ms, &mut |_, series| {
                let value_of = |t: &Tsuid| t.tags.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
                // Only series with a value not found yet are checked.
                let adding: Vec<Tsuid> = series
                    .into_iter()
                    .filter(|t| value_of(t).is_some_and(|v| !values.contains(&v)))
                    .collect();
                for t in self.with_samples(adding, start_ms, end_ms)? {
                    values.extend(value_of(&t));
                }
                Ok(())
            })?;
        }
        let mut names = NameCache::new(self.ctx);
        for v in values {
            if let Some(n) = names.name(UidKind::TagValue, v)? {
                out.insert(n.to_string());
            }
        }
        Ok(out.into_iter().collect())
    }
}

/// Below this many series a read thread costs more than it saves (the
/// OpenTSDB engine's figure).
const MIN_SERIES_PER_THREAD: usize = 64;

/// Runs per read thread: a thread that draws cheap runs, or more of the
/// core, takes more of them.
const RUNS_PER_THREAD: usize = 4;

/// The fewest series a run is cut to: a selector's series are walked
/// where they are read (`Storage::select_mapped`), which costs far more
/// than reading them, so runs are cut finer than the threads' minimum
/// for the threads to finish together.
const MIN_SERIES_PER_RUN: usize = 16;

/// A selection's series in read order, cut into runs.
struct ReadRuns {
    /// Each series with its place in the caller's list, sorted by key
    /// (metric first), the order the store's rows are in.
    order: Vec<(Tsuid, usize)>,
    runs: Vec<ReadRun>,
}

/// `order[from..to]`: series of one metric, read by one thread.
struct ReadRun {
    metric: Uid,
    from: usize,
    to: usize,
    /// Read by scanning the metric's rows of the range rather than a
    /// lookup per series and hour.
    scan: bool,
}

impl ReadRuns {
    fn plan(ctx: &QueryContext, tsuids: &[Tsuid], start_ms: u64, end_ms: u64) -> ReadRuns {
        let mut order: Vec<(Tsuid, usize)> = tsuids.iter().cloned().zip(0..).collect();
        order.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let hours = end_ms.saturating_sub(start_ms) / ROW_SPAN_MS + 1;
        let threads = ctx.source.read_threads().max(1);
        let mut runs = Vec::new();
        let mut from = 0;
        while from < order.len() {
            let metric = order[from].0.metric;
            let n = order[from..].partition_point(|(t, _)| t.metric == metric);
            let in_index = ctx.index.with_metric(metric, |m| m.map_or(0, |m| m.len()));
            // The OpenTSDB engine's rule: scan when most of the metric is
            // asked for, or when lookups would be too many.
            let scan = n > 1 && (n * 2 >= in_index || hours.saturating_mul(n as u64) > 200_000);
            let count = (threads * RUNS_PER_THREAD)
                .min(n / MIN_SERIES_PER_RUN)
                .max(1);
            let per = n.div_ceil(count);
            let mut at = from;
            while at < from + n {
                let to = (at + per).min(from + n);
                runs.push(ReadRun {
                    metric,
                    from: at,
                    to,
                    scan,
                });
                at = to;
            }
            from += n;
        }
        ReadRuns { order, runs }
    }
}

/// UID names looked up once per call: a call's series share most of
/// their tag keys and values.
struct NameCache<'c> {
    ctx: &'c QueryContext<'c>,
    known: FastMap<(UidKind, Uid), Option<Arc<str>>>,
}

impl<'c> NameCache<'c> {
    fn new(ctx: &'c QueryContext<'c>) -> Self {
        NameCache {
            ctx,
            known: FastMap::default(),
        }
    }

    /// The name of `uid`; `None` when it has none any more (deleted).
    fn name(&mut self, kind: UidKind, uid: Uid) -> Result<Option<Arc<str>>, PromError> {
        if let Some(n) = self.known.get(&(kind, uid)) {
            return Ok(n.clone());
        }
        let n = match self.ctx.uids.get_name(kind, uid) {
            Ok(n) => Some(n),
            Err(UidTableError::NoSuchId { .. }) => None,
            Err(e) => return Err(storage_error(e)),
        };
        self.known.insert((kind, uid), n.clone());
        Ok(n)
    }

    /// A series' labels: `__name__` = the metric, one label per tag;
    /// `None` when a tag's name no longer resolves.
    fn labels(&mut self, metric: &str, t: &Tsuid) -> Result<Option<Labels>, PromError> {
        let mut pairs: Vec<(String, String)> = Vec::with_capacity(t.tags.len() + 1);
        pairs.push((METRIC_NAME.to_string(), metric.to_string()));
        for &(k, v) in &t.tags {
            let (Some(k), Some(v)) = (
                self.name(UidKind::TagKey, k)?,
                self.name(UidKind::TagValue, v)?,
            ) else {
                return Ok(None);
            };
            pairs.push((k.to_string(), v.to_string()));
        }
        Ok(Some(Labels::from_pairs(pairs)))
    }
}

fn storage_error(e: UidTableError) -> PromError {
    PromError::internal(e.to_string())
}

fn query_error(e: crate::query::QueryError) -> PromError {
    PromError::internal(e.to_string())
}

#[cfg(test)]
mod tests {
    use promql_parser::parser::{self, Expr};

    use super::*;
    use crate::db::{Db, PendingPoint};
    use crate::promql::storage::StepSample;
    use crate::query::QueryOptions;

    const T0: i64 = 1_420_070_400; // 2015-01-01T00:00:00Z

    /// `sys.cpu.user` on two hosts (one with `dc`), `up` with a job, and
    /// `old` written only in the first hour: ints every 10 s over two
    /// hours, `up` as floats.
    fn db() -> (tempfile::TempDir, Arc<Db>) {
        let (dir, db) = Db::open_temp();
        let mut key = String::new();
        let mut batch = Vec::new();
        type Written<'a> = (&'a str, &'a [(&'a str, &'a str)], i64);
        let series: [Written; 4] = [
            ("sys.cpu.user", &[("host", "web01"), ("dc", "a")], 7200),
            ("sys.cpu.user", &[("host", "web02")], 7200),
            ("up", &[("job", "prom"), ("instance", "h-9090")], 7200),
            ("old", &[("host", "web01")], 3600),
        ];
        for (metric, tags, span) in series {
            for t in (T0..T0 + span).step_by(10) {
                let value = if metric == "up" {
                    Value::Float(0.5)
                } else {
                    Value::Int(t % 100)
                };
                let (series, ts) = db.resolve(metric, t, value, tags, &mut key).unwrap();
                batch.push(PendingPoint { series, ts, value });
            }
        }
        db.append(&batch).unwrap();
        (dir, db)
    }

    /// The matchers of a selector, its name as a `__name__` matcher.
    fn sel(s: &str) -> Vec<Matcher> {
        let Expr::VectorSelector(vs) = parser::parse(s).unwrap() else {
            panic!("{s} is not a selector")
        };
        let mut m = vs.matchers.matchers;
        if let Some(n) = vs.name {
            m.push(Matcher::new(MatchOp::Equal, METRIC_NAME, &n));
        }
        m
    }

    fn names(series: &[StoredSeries]) -> Vec<String> {
        series.iter().map(|s| s.labels.to_string()).collect()
    }

    fn storage_test(f: impl FnOnce(&DbStorage)) {
        let (_dir, db) = db();
        let ctx = QueryContext::new(&db, &QueryOptions::default());
        let s = DbStorage::new(&ctx, SourceLimits::new(1_000_000, 0));
        f(&s);
    }

    const ALL: (i64, i64) = (0, i64::MAX / 2);

    #[test]
    fn selects_by_name_and_labels() {
        storage_test(|s| {
            let got = s
                .select(
                    &sel(r#"{__name__="sys.cpu.user",host="web01"}"#),
                    T0 * 1000,
                    (T0 + 30) * 1000,
                )
                .unwrap();
            assert_eq!(
                names(&got),
                vec![r#"{__name__="sys.cpu.user", dc="a", host="web01"}"#]
            );
            // Both ends included; ints as floats.
            let expect: Vec<Sample> = (0..4)
                .map(|i| Sample {
                    t: (T0 + 10 * i) * 1000,
                    v: ((T0 + 10 * i) % 100) as f64,
                })
                .collect();
            assert_eq!(got[0].samples, expect);
            let up = s.select(&sel("up"), T0 * 1000, T0 * 1000).unwrap();
            assert_eq!(
                up[0].samples,
                vec![Sample {
                    t: T0 * 1000,
                    v: 0.5
                }]
            );
        });
    }

    #[test]
    fn select_mapped_maps_each_series_as_select_reads_it() {
        storage_test(|s| {
            let m = sel("{__name__=~\"sys.cpu.user|up\"}");
            let (a, b) = (T0 * 1000, (T0 + 3600) * 1000);
            // A map that keeps each sample's value at its index.
            let map = |samples: &[Sample]| {
                samples
                    .iter()
                    .enumerate()
                    .map(|(i, x)| StepSample {
                        step: i as u32,
                        v: x.v,
                    })
                    .collect()
            };
            let mapped = s.select_mapped(&m, a, b, &map).unwrap();
            let read = s.select(&m, a, b).unwrap();
            assert_eq!(mapped.len(), 3);
            assert_eq!(mapped.len(), read.len());
            for (m, r) in mapped.iter().zip(&read) {
                assert_eq!(m.labels, r.labels);
                assert_eq!(m.steps, map(&r.samples));
            }
            // Nothing in the range: nothing, as select answers.
            assert!(s.select_mapped(&m, 0, 1000, &map).unwrap().is_empty());
        });
    }

    #[test]
    fn matchers_follow_prometheus_rules() {
        storage_test(|s| {
            let (a, b) = ALL;
            let n = |q: &str| names(&s.select(&sel(q), a, b).unwrap());
            // No name: every metric, by label.
            assert_eq!(
                n(r#"{host="web01"}"#),
                vec![
                    r#"{__name__="old", host="web01"}"#,
                    r#"{__name__="sys.cpu.user", dc="a", host="web01"}"#
                ]
            );
            // Regexps on the name are anchored.
            assert_eq!(n(r#"{__name__=~"sys.*"}"#).len(), 2);
            assert_eq!(n(r#"{__name__=~"cpu"}"#).len(), 0);
            assert_eq!(n(r#"{__name__!~"sys.*|old", __name__=~".+"}"#).len(), 1);
            // l="" selects series without l; l!="" those with it.
            assert_eq!(
                n(r#"{__name__="sys.cpu.user", dc=""}"#),
                vec![r#"{__name__="sys.cpu.user", host="web02"}"#]
            );
            assert_eq!(
                n(r#"{__name__="sys.cpu.user", dc!=""}"#),
                vec![r#"{__name__="sys.cpu.user", dc="a", host="web01"}"#]
            );
            // A regexp that matches "" also takes series without the label.
            assert_eq!(n(r#"{__name__="sys.cpu.user", dc=~"b|"}"#).len(), 1);
            assert_eq!(n(r#"{__name__="sys.cpu.user", dc=~"a|"}"#).len(), 2);
            assert_eq!(n(r#"{__name__="sys.cpu.user", host!="web01"}"#).len(), 1);
            assert_eq!(n(r#"{__name__="sys.cpu.user", host!~"web0[12]"}"#).len(), 0);
            // Unknown names select nothing, or all where absence passes.
            assert_eq!(n(r#"nope"#).len(), 0);
            assert_eq!(n(r#"up{zone="x"}"#).len(), 0);
            assert_eq!(n(r#"up{zone!="x"}"#).len(), 1);
            assert_eq!(n(r#"up{job="nope"}"#).len(), 0);
        });
    }

    #[test]
    fn names_and_values() {
        storage_test(|s| {
            let (a, b) = ALL;
            assert_eq!(
                s.label_names(&[], a, b).unwrap(),
                vec!["__name__", "dc", "host", "instance", "job"]
            );
            assert_eq!(
                s.label_names(&[sel("up")], a, b).unwrap(),
                vec!["__name__", "instance", "job"]
            );
            assert_eq!(
                s.label_values(METRIC_NAME, &[], a, b).unwrap(),
                vec!["old", "sys.cpu.user", "up"]
            );
            assert_eq!(
                s.label_values("host", &[], a, b).unwrap(),
                vec!["web01", "web02"]
            );
            assert_eq!(
                s.label_values("host", &[sel(r#"{dc="a"}"#)], a, b).unwrap(),
                vec!["web01"]
            );
            assert!(s.label_values("zone", &[], a, b).unwrap().is_empty());
            let series = s
                .series(&[sel("up"), sel(r#"{host="web02"}"#), sel("up")], a, b)
                .unwrap();
            assert_eq!(series.len(), 2);
        });
    }

    #[test]
    fn names_and_values_count_series_with_samples_in_the_range() {
        storage_test(|s| {
            let names = |a: i64, b: i64| s.label_values(METRIC_NAME, &[], a * 1000, b * 1000);
            let far = i64::MAX / 2000;
            // `old` has samples up to T0 + 3590 only: left out from its
            // last hour on (by the index), and after its last sample
            // (read).
            assert_eq!(names(T0 + 3600, far).unwrap(), vec!["sys.cpu.user", "up"]);
            assert_eq!(names(T0 + 3595, far).unwrap(), vec!["sys.cpu.user", "up"]);
            assert_eq!(
                names(T0 + 3590, far).unwrap(),
                vec!["old", "sys.cpu.user", "up"]
            );
            // Nothing before the first sample, nor between samples.
            assert!(names(T0 - 100, T0 - 1).unwrap().is_empty());
            assert!(names(T0 + 1, T0 + 9).unwrap().is_empty());
            assert_eq!(names(T0 + 1, T0 + 10).unwrap().len(), 3);
            let old = [sel("old")];
            let series = |a: i64, b: i64| s.series(&old, a * 1000, b * 1000).unwrap().len();
            assert_eq!(series(T0 + 3591, T0 + 3599), 0);
            assert_eq!(series(T0 + 3580, T0 + 3599), 1);
            let hosts = |a: i64, b: i64| s.label_names(&old, a * 1000, b * 1000).unwrap().len();
            assert_eq!(hosts(T0 + 3591, far), 0);
            assert_eq!(hosts(T0, T0), 2);
        });
    }

    #[test]
    fn too_many_samples_or_series_are_refused() {
        let (_dir, db) = db();
        let ctx = QueryContext::new(&db, &QueryOptions::default());
        let s = DbStorage::new(&ctx, SourceLimits::new(100, 0));
        let e = s.select(&sel("up"), ALL.0, ALL.1).unwrap_err();
        assert_eq!(e, PromError::too_many_samples());
        // OpenTSDB's data point limit tightens the engine's.
        let s = DbStorage::new(&ctx, SourceLimits::new(1_000_000, 1));
        let e = s
            .select(&sel(r#"{__name__="sys.cpu.user"}"#), ALL.0, ALL.1)
            .unwrap_err();
        assert_eq!(e, PromError::too_many_samples());
        assert!(s.select(&sel("up"), T0 * 1000, T0 * 1000).is_ok());
    }
}
