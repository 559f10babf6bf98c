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
use crate::promql::functions::range::{RangeFn, Span};
use crate::promql::functions::{RangeArg, RangeSeries};
use crate::promql::storage::{StepSample, SteppedSeries, Storage, StoredSeries};
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
    /// The selectors a series walk alone uses at the steps of a range
    /// query (see [`Selected::pre_walk`]), by key: read as that walk's
    /// values at each step, computed where the samples are read.
    walked: HashMap<usize, Vec<SteppedSeries>>,
    /// Which selectors to read that way, and how.
    pre_walks: HashMap<usize, PreWalk>,
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
            walked: HashMap::new(),
            pre_walks: HashMap::new(),
            cursors: RefCell::new(HashMap::new()),
            grids: RefCell::new(HashMap::new()),
            max_samples,
            lookback_ms,
            range,
        }
    }

    /// How many samples (or walked values) are held.
    pub(super) fn loaded(&self) -> usize {
        let samples: usize = self.data.values().flatten().map(|s| s.samples.len()).sum();
        let walked: usize = self.walked.values().flatten().map(|s| s.steps.len()).sum();
        samples + walked
    }

    /// Reads `vs` as `walk`'s values at each step of the range query, not
    /// as samples: the caller promises that only that walk uses the
    /// selector, and only at the query's steps. Before [`prefetch`].
    ///
    /// [`prefetch`]: Selected::prefetch
    pub(super) fn pre_walk(&mut self, vs: &VectorSelector, walk: PreWalk) {
        self.pre_walks.insert(key(vs), walk);
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
        let (from, to) = (lo - off - reach, hi - off);
        if let Some(&walk) = self.pre_walks.get(&key(vs)) {
            let (range, lookback) = (self.range, self.lookback_ms);
            let steps = self.steps();
            let map = |samples: &[Sample]| {
                // At most one value a step, and rarely more than a sample.
                let mut out = Vec::with_capacity(steps.min(samples.len() + 1));
                let mut keep = |k: usize, v: f64| {
                    out.push(StepSample { step: k as u32, v });
                    Ok(())
                };
                // The closures below never fail.
                let _ = match walk {
                    PreWalk::Instant => instant_steps(vs, &range, lookback, samples, &mut keep),
                    PreWalk::Range(f) => {
                        window_steps(vs, &range, reach, samples, &mut Vec::new(), |k, w, span| {
                            match f.apply(w, span) {
                                Some(v) => keep(k, v),
                                None => Ok(()),
                            }
                        })
                    }
                };
                out
            };
            let series = storage.select_mapped(&matchers(vs), from, to, &map)?;
            self.walked.insert(key(vs), series);
            return Ok(());
        }
        let mut series = storage.select(&matchers(vs), from, to)?;
        for s in &mut series {
            s.samples = StoredSeries::samples_in_order(std::mem::take(&mut s.samples));
        }
        self.data.insert(key(vs), series);
        Ok(())
    }

    /// An `internal` error where a selector read as walked values is asked
    /// for samples (the walk plan promised it would not be).
    fn not_walked(&self, vs: &VectorSelector) -> Result<(), PromError> {
        if self.walked.contains_key(&key(vs)) {
            return Err(PromError::internal(
                "a selector read as a walk's values was asked for samples",
            ));
        }
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
        if let Some(step) = self.grid_step(t).filter(|_| !stored_time) {
            let (data, walked) = (self.data.get(&key(vs)), self.walked.get(&key(vs)));
            let label = |i: usize| match (data, walked) {
                (Some(d), _) => d[i].labels.clone(),
                (_, Some(w)) => w[i].labels.clone(),
                (None, None) => Labels::default(),
            };
            let row = self.grid_row(vs, step)?;
            return Ok(row
                .iter()
                .map(|&(i, v)| VectorSample {
                    labels: label(i as usize),
                    t,
                    v,
                })
                .collect());
        }
        self.not_walked(vs)?;
        let Some(series) = self.data.get(&key(vs)) else {
            return Ok(Vec::new());
        };
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
        if let Some(walked) = self.walked.get(&key(vs)) {
            return walked.iter().map(|s| s.labels.clone()).collect();
        }
        self.data
            .get(&key(vs))
            .map(|series| series.iter().map(|s| s.labels.clone()).collect())
            .unwrap_or_default()
    }

    /// How many series `vs` selected.
    pub(super) fn series_count(&self, vs: &VectorSelector) -> usize {
        match self.walked.get(&key(vs)) {
            Some(walked) => walked.len(),
            None => self.data.get(&key(vs)).map_or(0, Vec::len),
        }
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
        step_count(&self.range)
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
        if let Some(walked) = self.walked.get(&key(vs)) {
            return walk_stepped(walked, f);
        }
        let Some(series) = self.data.get(&key(vs)) else {
            return Ok(());
        };
        for (i, s) in series.iter().enumerate() {
            let index = series_index(i)?;
            instant_steps(vs, &self.range, self.lookback_ms, &s.samples, |k, v| {
                f(index, k, v)
            })?;
        }
        Ok(())
    }

    /// The samples `ms` selects at `t`: each series' samples in `[ref −
    /// range, ref]`, stale markers dropped; series with none left out.
    pub(super) fn window(&self, ms: &MatrixSelector, t: i64) -> Result<Window, PromError> {
        self.not_walked(&ms.vs)?;
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
        Ok(Window {
            series: out,
            start_ms: start,
            end_ms: end,
        })
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
        self.not_walked(&ms.vs)?;
        let Some(series) = self.data.get(&key(&ms.vs)) else {
            return Ok(());
        };
        let width = duration_ms(ms.range);
        let mut buf: Vec<Sample> = Vec::new();
        for (i, s) in series.iter().enumerate() {
            let index = series_index(i)?;
            window_steps(
                &ms.vs,
                &self.range,
                width,
                &s.samples,
                &mut buf,
                |k, w, span| f(index, k, w, span),
            )?;
        }
        Ok(())
    }

    /// Walks `func` of `ms`'s window at every step of the range query,
    /// series by series: `f(series, step, value)` for every value.
    pub(super) fn walk_range(
        &self,
        func: RangeFn,
        ms: &MatrixSelector,
        mut f: impl FnMut(u32, usize, f64) -> Result<(), PromError>,
    ) -> Result<(), PromError> {
        // Read already walked: the plan gave this selector to this call.
        if let Some(walked) = self.walked.get(&key(&ms.vs)) {
            return walk_stepped(walked, f);
        }
        self.walk_windows(ms, |i, k, samples, span| match func.apply(samples, span) {
            Some(v) => f(i, k, v),
            None => Ok(()),
        })
    }
}

/// How a selector that only a series walk uses is read (see
/// [`Selected::pre_walk`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PreWalk {
    /// As its value at each step (a plain instant selector).
    Instant,
    /// As a range function of its window at each step.
    Range(RangeFn),
}

/// The steps of a range query.
fn step_count(r: &QueryRange) -> usize {
    usize::try_from((r.end_ms - r.start_ms) / r.step_ms + 1).unwrap_or(0)
}

/// A series' position as walks index it.
fn series_index(i: usize) -> Result<u32, PromError> {
    u32::try_from(i).map_err(|_| PromError::execution(TOO_MANY_SERIES))
}

/// Hands on walked values, series by series.
fn walk_stepped(
    walked: &[SteppedSeries],
    mut f: impl FnMut(u32, usize, f64) -> Result<(), PromError>,
) -> Result<(), PromError> {
    for (i, s) in walked.iter().enumerate() {
        let index = series_index(i)?;
        for st in &s.steps {
            f(index, st.step as usize, st.v)?;
        }
    }
    Ok(())
}

/// One series' value at every step of `range` as instant selector `vs`
/// sees it: its latest sample in `[ref − lookback, ref]` unless that is a
/// stale marker; `f(step, value)` for each step with one.
fn instant_steps(
    vs: &VectorSelector,
    range: &QueryRange,
    lookback_ms: i64,
    samples: &[Sample],
    mut f: impl FnMut(usize, f64) -> Result<(), PromError>,
) -> Result<(), PromError> {
    let mut n = 0;
    for k in 0..step_count(range) {
        let refer = reference(vs, range.start_ms + k as i64 * range.step_ms, range);
        n = count_until(samples, refer, n);
        if n == 0 {
            continue;
        }
        let last = samples[n - 1];
        if last.t < refer - lookback_ms || is_stale_nan(last.v) {
            continue;
        }
        f(k, last.v)?;
    }
    Ok(())
}

/// One series' window of `width` ms at every step of `range` as `vs`'s
/// range selector sees it, stale markers dropped (`buf` holds the rest
/// where there were any): `f(step, samples, window)` for each step with a
/// sample left.
fn window_steps(
    vs: &VectorSelector,
    range: &QueryRange,
    width: i64,
    samples: &[Sample],
    buf: &mut Vec<Sample>,
    mut f: impl FnMut(usize, &[Sample], Span) -> Result<(), PromError>,
) -> Result<(), PromError> {
    let (mut from, mut to) = (0, 0);
    for k in 0..step_count(range) {
        let end_ms = reference(vs, range.start_ms + k as i64 * range.step_ms, range);
        let start_ms = end_ms - width;
        from = count_before(samples, start_ms, from);
        to = count_until(samples, end_ms, to);
        if from >= to {
            continue;
        }
        let window = &samples[from..to];
        let span = Span { start_ms, end_ms };
        // Most windows hold no stale marker: passed as they are.
        if !window.iter().any(|x| is_stale_nan(x.v)) {
            f(k, window, span)?;
            continue;
        }
        buf.clear();
        buf.extend(window.iter().filter(|x| !is_stale_nan(x.v)));
        if !buf.is_empty() {
            f(k, buf, span)?;
        }
    }
    Ok(())
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
