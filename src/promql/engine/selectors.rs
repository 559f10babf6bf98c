//! Selectors: which series and samples each one reads, fetched once for
//! the whole query, then looked up at each step. An instant selector
//! takes a series' latest sample in `[t − lookback, t]`, none if that is
//! a stale marker; a range selector takes the samples in `[t − range,
//! t]` without stale markers (both ends closed, as in 2.42); both after
//! `offset` and `@`.

use std::time::{Duration, SystemTime};

use promql_parser::label::{MatchOp, Matcher};
use std::cell::RefCell;
use std::collections::HashMap;
use std::collections::hash_map::Entry;

use promql_parser::parser::{AtModifier, Expr, MatrixSelector, Offset, VectorSelector};

use crate::promql::error::PromError;
use crate::promql::functions::range::Span;
use crate::promql::functions::{RangeArg, RangeSeries};
use crate::promql::storage::{Storage, StoredSeries};
use crate::promql::value::{Labels, METRIC_NAME, Sample, Series, VectorSample, is_stale_nan};

/// The times a query is evaluated at: `start_ms`, `start_ms + step_ms`,
/// … up to `end_ms` (one step for an instant query).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct QueryRange {
    pub(super) start_ms: i64,
    pub(super) end_ms: i64,
    pub(super) step_ms: i64,
}

/// The key a selector's series are kept under: its node's address.
pub(super) fn key(vs: &VectorSelector) -> usize {
    vs as *const VectorSelector as usize
}

/// An `@` modifier's time in epoch ms (`start()`/`end()` are the query's).
pub(super) fn at_ms(at: &AtModifier, range: &QueryRange) -> i64 {
    match at {
        AtModifier::Start => range.start_ms,
        AtModifier::End => range.end_ms,
        AtModifier::At(time) => system_time_ms(*time),
    }
}

fn system_time_ms(time: SystemTime) -> i64 {
    match time.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => duration_ms(d),
        Err(e) => -duration_ms(e.duration()),
    }
}

fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// An `offset` in ms, negative for `offset -5m`.
pub(super) fn offset_ms(offset: &Option<Offset>) -> i64 {
    match offset {
        None => 0,
        Some(Offset::Pos(d)) => duration_ms(*d),
        Some(Offset::Neg(d)) => -duration_ms(*d),
    }
}

/// The selector's matchers, with its metric name as a `__name__`
/// matcher when it was written as `name{...}`.
pub(super) fn matchers(vs: &VectorSelector) -> Vec<Matcher> {
    let mut m = vs.matchers.matchers.clone();
    if let Some(name) = &vs.name {
        let present = m
            .iter()
            .any(|x| x.name == METRIC_NAME && x.op == MatchOp::Equal && &x.value == name);
        if !present {
            m.push(Matcher::new(MatchOp::Equal, METRIC_NAME, name));
        }
    }
    m
}

/// The time a selector reads at when the query evaluates at `t`.
fn reference(vs: &VectorSelector, t: i64, range: &QueryRange) -> i64 {
    let base = match &vs.at {
        Some(at) => at_ms(at, range),
        None => t,
    };
    base - offset_ms(&vs.offset)
}

/// Every selector's series over the whole query, by the address of its
/// `VectorSelector` node (the tree outlives the evaluation).
pub(super) struct Selected {
    data: HashMap<usize, Vec<StoredSeries>>,
    /// Per instant selector and series, how many samples the last step
    /// had at or before its time: the next step starts looking there.
    cursors: RefCell<HashMap<usize, Vec<usize>>>,
    /// Per instant selector of a range query, its vector at every step,
    /// computed series by series on first use (reading one series' samples
    /// in order is far kinder to the cache than visiting every series at
    /// every step).
    grids: RefCell<HashMap<usize, Grid>>,
    max_samples: usize,
    lookback_ms: i64,
    range: QueryRange,
}

impl Selected {
    pub(super) fn new(lookback_ms: i64, range: QueryRange, max_samples: usize) -> Selected {
        Selected {
            data: HashMap::new(),
            cursors: RefCell::new(HashMap::new()),
            grids: RefCell::new(HashMap::new()),
            max_samples,
            lookback_ms,
            range,
        }
    }

    /// How many samples were read.
    pub(super) fn loaded(&self) -> usize {
        self.data
            .values()
            .flat_map(|s| s.iter())
            .map(|s| s.samples.len())
            .sum()
    }

    /// Reads every selector's series once: `lo..=hi` is the span of times
    /// `expr` is evaluated at (subqueries widen it for what they contain).
    pub(super) fn prefetch(
        &mut self,
        storage: &dyn Storage,
        expr: &Expr,
        lo: i64,
        hi: i64,
    ) -> Result<(), PromError> {
        match expr {
            Expr::VectorSelector(vs) => self.fetch(storage, vs, self.lookback_ms, lo, hi),
            Expr::MatrixSelector(ms) => {
                let range = duration_ms(ms.range);
                self.fetch(storage, &ms.vs, range, lo, hi)
            }
            Expr::Subquery(sq) => {
                let (lo, hi) = match &sq.at {
                    Some(at) => {
                        let a = at_ms(at, &self.range);
                        (a, a)
                    }
                    None => (lo, hi),
                };
                let off = offset_ms(&sq.offset);
                let range = duration_ms(sq.range);
                self.prefetch(storage, &sq.expr, lo - off - range, hi - off)
            }
            Expr::Aggregate(a) => {
                if let Some(p) = &a.param {
                    self.prefetch(storage, p, lo, hi)?;
                }
                self.prefetch(storage, &a.expr, lo, hi)
            }
            Expr::Unary(u) => self.prefetch(storage, &u.expr, lo, hi),
            Expr::Binary(b) => {
                self.prefetch(storage, &b.lhs, lo, hi)?;
                self.prefetch(storage, &b.rhs, lo, hi)
            }
            Expr::Paren(p) => self.prefetch(storage, &p.expr, lo, hi),
            Expr::Call(c) => c
                .args
                .args
                .iter()
                .try_for_each(|a| self.prefetch(storage, a, lo, hi)),
            Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => Ok(()),
        }
    }

    fn fetch(
        &mut self,
        storage: &dyn Storage,
        vs: &VectorSelector,
        reach: i64,
        lo: i64,
        hi: i64,
    ) -> Result<(), PromError> {
        let (lo, hi) = match &vs.at {
            Some(at) => {
                let a = at_ms(at, &self.range);
                (a, a)
            }
            None => (lo, hi),
        };
        let off = offset_ms(&vs.offset);
        let mut series = storage.select(&matchers(vs), lo - off - reach, hi - off)?;
        // The store promises time order; sort anyway where it did not, since
        // every lookup below is a binary search.
        for s in &mut series {
            if !s.samples.is_sorted_by_key(|x| x.t) {
                s.samples.sort_by_key(|x| x.t);
            }
        }
        self.data.insert(key(vs), series);
        Ok(())
    }

    /// The instant vector `vs` selects at `t`: each series' latest sample in
    /// `[ref − lookback, ref]` unless it is a stale marker. `t` of each
    /// element is the step, or the sample's own time when `stored_time`
    /// (what `timestamp()` reads).
    pub(super) fn instant(
        &self,
        vs: &VectorSelector,
        t: i64,
        stored_time: bool,
    ) -> Result<Vec<VectorSample>, PromError> {
        let Some(series) = self.data.get(&key(vs)) else {
            return Ok(Vec::new());
        };
        if let Some(step) = self.grid_step(t).filter(|_| !stored_time) {
            let row = self.grid_row(vs, step)?;
            return Ok(row
                .iter()
                .map(|&(i, v)| VectorSample {
                    labels: series[i as usize].labels.clone(),
                    t,
                    v,
                })
                .collect());
        }
        let refer = reference(vs, t, &self.range);
        let oldest = refer - self.lookback_ms;
        let mut cursors = self.cursors.borrow_mut();
        let cursors = cursors
            .entry(key(vs))
            .or_insert_with(|| vec![0; series.len()]);
        let mut out = Vec::with_capacity(series.len());
        for (s, cursor) in series.iter().zip(cursors.iter_mut()) {
            let n = count_until(&s.samples, refer, *cursor);
            *cursor = n;
            if n == 0 {
                continue;
            }
            let last = s.samples[n - 1];
            if last.t < oldest || is_stale_nan(last.v) {
                continue;
            }
            out.push(VectorSample {
                labels: s.labels.clone(),
                t: if stored_time { last.t } else { t },
                v: last.v,
            });
        }
        Ok(out)
    }

    /// `vs`'s values at step `step` of the range query: the series (by
    /// index into [`Selected::series_labels`]) that have one, and the value.
    pub(super) fn grid_row(
        &self,
        vs: &VectorSelector,
        step: usize,
    ) -> Result<Vec<(u32, f64)>, PromError> {
        let mut grids = self.grids.borrow_mut();
        let grid = match grids.entry(key(vs)) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(self.grid(vs)?),
        };
        Ok(grid.rows.get(step).cloned().unwrap_or_default())
    }

    /// The labels of `vs`'s series, in the order grid rows index them.
    pub(super) fn series_labels(&self, vs: &VectorSelector) -> Vec<Labels> {
        self.data
            .get(&key(vs))
            .map(|series| series.iter().map(|s| s.labels.clone()).collect())
            .unwrap_or_default()
    }

    /// How many series `vs` selected.
    pub(super) fn series_count(&self, vs: &VectorSelector) -> usize {
        self.data.get(&key(vs)).map_or(0, Vec::len)
    }

    /// Which step of a range query `t` is, if it is one.
    pub(super) fn grid_step(&self, t: i64) -> Option<usize> {
        let r = &self.range;
        let on_grid = r.end_ms > r.start_ms
            && (r.start_ms..=r.end_ms).contains(&t)
            && (t - r.start_ms) % r.step_ms == 0;
        on_grid.then(|| ((t - r.start_ms) / r.step_ms) as usize)
    }

    /// `vs`'s vector at every step of the range query, one series at a
    /// time; an `execution` error past `max_samples` points, where
    /// Prometheus (which holds a selector's whole matrix too) stops.
    fn grid(&self, vs: &VectorSelector) -> Result<Grid, PromError> {
        let mut rows: Vec<Vec<(u32, f64)>> = vec![Vec::new(); self.steps()];
        let mut points = 0usize;
        self.walk_instant(vs, |i, k, v| {
            rows[k].push((i, v));
            points += 1;
            if points > self.max_samples {
                return Err(PromError::too_many_samples());
            }
            Ok(())
        })?;
        Ok(Grid { rows })
    }

    /// How many steps the range query has.
    pub(super) fn steps(&self) -> usize {
        let r = &self.range;
        usize::try_from((r.end_ms - r.start_ms) / r.step_ms + 1).unwrap_or(0)
    }

    /// Walks `vs`'s value at every step of the range query, series by
    /// series (each series' samples read once, in order): `f(series,
    /// step, value)` for each step where the series has a sample in the
    /// lookback window that is not a stale marker.
    pub(super) fn walk_instant(
        &self,
        vs: &VectorSelector,
        mut f: impl FnMut(u32, usize, f64) -> Result<(), PromError>,
    ) -> Result<(), PromError> {
        let Some(series) = self.data.get(&key(vs)) else {
            return Ok(());
        };
        let r = self.range;
        let steps = self.steps();
        for (i, s) in series.iter().enumerate() {
            let index = u32::try_from(i).map_err(|_| PromError::execution(TOO_MANY_SERIES))?;
            let mut n = 0;
            for k in 0..steps {
                let refer = reference(vs, r.start_ms + k as i64 * r.step_ms, &r);
                n = count_until(&s.samples, refer, n);
                if n == 0 {
                    continue;
                }
                let last = s.samples[n - 1];
                if last.t < refer - self.lookback_ms || is_stale_nan(last.v) {
                    continue;
                }
                f(index, k, last.v)?;
            }
        }
        Ok(())
    }

    /// The samples `ms` selects at `t`: each series' samples in `[ref −
    /// range, ref]`, stale markers dropped; series with none left out.
    pub(super) fn window(&self, ms: &MatrixSelector, t: i64) -> Window {
        let end = reference(&ms.vs, t, &self.range);
        let start = end - duration_ms(ms.range);
        let mut out = Vec::new();
        if let Some(series) = self.data.get(&key(&ms.vs)) {
            for s in series {
                let from = s.samples.partition_point(|x| x.t < start);
                let to = s.samples.partition_point(|x| x.t <= end);
                if from >= to {
                    continue;
                }
                let samples: Vec<Sample> = s.samples[from..to]
                    .iter()
                    .filter(|x| !is_stale_nan(x.v))
                    .copied()
                    .collect();
                if samples.is_empty() {
                    continue;
                }
                out.push(Series {
                    labels: s.labels.clone(),
                    samples,
                });
            }
        }
        Window {
            series: out,
            start_ms: start,
            end_ms: end,
        }
    }
}

impl Selected {
    /// The query's steps.
    pub(super) fn range(&self) -> QueryRange {
        self.range
    }

    /// Walks `ms`'s window at every step of the range query, series by
    /// series (each series' samples read once, in order): `f(series,
    /// step, samples, window)` for every window with a sample left after
    /// dropping stale markers.
    pub(super) fn walk_windows(
        &self,
        ms: &MatrixSelector,
        mut f: impl FnMut(u32, usize, &[Sample], Span) -> Result<(), PromError>,
    ) -> Result<(), PromError> {
        let Some(series) = self.data.get(&key(&ms.vs)) else {
            return Ok(());
        };
        let r = self.range;
        let steps = self.steps();
        let width = duration_ms(ms.range);
        let mut buf: Vec<Sample> = Vec::new();
        for (i, s) in series.iter().enumerate() {
            let index = u32::try_from(i).map_err(|_| PromError::execution(TOO_MANY_SERIES))?;
            let (mut from, mut to) = (0, 0);
            for k in 0..steps {
                let end_ms = reference(&ms.vs, r.start_ms + k as i64 * r.step_ms, &r);
                let start_ms = end_ms - width;
                from = count_before(&s.samples, start_ms, from);
                to = count_until(&s.samples, end_ms, to);
                if from >= to {
                    continue;
                }
                let window = &s.samples[from..to];
                let span = Span { start_ms, end_ms };
                // Most windows hold no stale marker: passed as they are.
                if !window.iter().any(|x| is_stale_nan(x.v)) {
                    f(index, k, window, span)?;
                    continue;
                }
                buf.clear();
                buf.extend(window.iter().filter(|x| !is_stale_nan(x.v)));
                if !buf.is_empty() {
                    f(index, k, &buf, span)?;
                }
            }
        }
        Ok(())
    }

    /// The labels of `ms`'s series, in the order walks index them.
    pub(super) fn window_labels(&self, ms: &MatrixSelector) -> Vec<Labels> {
        self.series_labels(&ms.vs)
    }
}

/// How many of `samples` are before `t`, starting from `from`, the
/// answer for an earlier time.
fn count_before(samples: &[Sample], t: i64, from: usize) -> usize {
    let from = from.min(samples.len());
    if from > 0 && samples[from - 1].t >= t {
        return samples[..from].partition_point(|x| x.t < t);
    }
    let mut n = from;
    for _ in 0..8 {
        if n < samples.len() && samples[n].t < t {
            n += 1;
        } else {
            return n;
        }
    }
    n + samples[n..].partition_point(|x| x.t < t)
}

/// One selector's values at each step: per step, the series (by index)
/// that have one and the value.
struct Grid {
    rows: Vec<Vec<(u32, f64)>>,
}

/// More series than a grid indexes (4 billion): far past any sample limit.
const TOO_MANY_SERIES: &str = "too many series for one selector";

/// A range selector's samples at one step, with the window they came
/// from.
pub(super) struct Window {
    pub(super) series: Vec<Series>,
    pub(super) start_ms: i64,
    pub(super) end_ms: i64,
}

impl Window {
    /// The window as a function's range argument.
    pub(super) fn into_arg(self) -> RangeArg {
        RangeArg {
            series: self
                .series
                .into_iter()
                .map(|s| RangeSeries {
                    labels: s.labels,
                    samples: s.samples,
                })
                .collect(),
            start_ms: self.start_ms,
            end_ms: self.end_ms,
        }
    }
}

/// How many of `samples` are at or before `t`, starting from `from`, the
/// answer for an earlier time: a few steps forward, else a binary search
/// (a range query's steps move forward by a few samples each; a
/// subquery may go back).
fn count_until(samples: &[Sample], t: i64, from: usize) -> usize {
    let from = from.min(samples.len());
    if from > 0 && samples[from - 1].t > t {
        return samples[..from].partition_point(|x| x.t <= t);
    }
    let mut n = from;
    for _ in 0..8 {
        if n < samples.len() && samples[n].t <= t {
            n += 1;
        } else {
            return n;
        }
    }
    n + samples[n..].partition_point(|x| x.t <= t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_until_from_any_start() {
        let samples: Vec<Sample> = (0..40).map(|i| Sample { t: i * 10, v: 0.0 }).collect();
        for from in [0, 1, 5, 20, 39, 40, 100] {
            for t in [-5, 0, 5, 10, 95, 200, 389, 390, 1000] {
                let want = samples.partition_point(|x| x.t <= t);
                assert_eq!(count_until(&samples, t, from), want, "from {from} t {t}");
            }
        }
    }
}
