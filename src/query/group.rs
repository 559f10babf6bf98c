//! The group-by merge (`AggregationIterator`): series of one group are
//! walked together over the union of their timestamps; a series takes part
//! at a timestamp only inside its own first..last range, with the missing
//! value interpolated as the aggregator asks.

use super::aggregator::{Aggregator, Interpolation};
use crate::model::Value;

/// A series after downsampling and rate: sorted, one point per timestamp.
pub(crate) type Points = [(i64, Value)];

/// Reusable buffers for [`aggregate`], and how many threads it may use.
#[derive(Default)]
pub(crate) struct Scratch {
    times: Vec<i64>,
    cursors: Vec<usize>,
    longs: Vec<i64>,
    doubles: Vec<f64>,
    sort: Vec<f64>,
    cells: Vec<GridCell>,
    /// Threads a large same-grid fold is split over (0 or 1: none).
    threads: usize,
}

impl Scratch {
    /// Buffers for an aggregation that may split a large same-grid fold
    /// over `threads` threads.
    pub(crate) fn with_threads(threads: usize) -> Scratch {
        Scratch {
            threads,
            ..Scratch::default()
        }
    }
}

/// Fewest values a same-grid fold splits over threads: below this a
/// thread costs more to start than it saves.
const PARALLEL_FOLD_VALUES: usize = 32 * 1024;

/// Merges `series` and appends the aggregated points with timestamps in
/// `[from, to]` to `out`.
///
/// Integer arithmetic is used at a timestamp only when no series' current
/// or next point is a float and `rate` is off (`isInteger`); with `rate`
/// a missing value is the series' previous rate, never interpolated.
pub(crate) fn aggregate(
    series: &[&Points],
    agg: &Aggregator,
    rate: bool,
    from: i64,
    to: i64,
    scratch: &mut Scratch,
    out: &mut Vec<(i64, Value)>,
) {
    let series: Vec<&Points> = series.iter().copied().filter(|s| !s.is_empty()).collect();
    if series.is_empty() {
        return;
    }
    if accumulate(&series, agg, rate, from, to, scratch, out) {
        return;
    }
    union_times(&series, &mut scratch.times);
    let interp = if rate {
        Interpolation::Prev
    } else {
        agg.interpolation
    };
    let mut sort = std::mem::take(&mut scratch.sort);
    merge_at_times(&series, interp, rate, from, to, scratch, |t, values| {
        out.push(match values {
            Merged::Longs(v) => (t, Value::Int(agg.run_long(v, &mut sort))),
            Merged::Doubles(v) => (t, Value::Float(agg.run_double(v))),
        })
    });
    scratch.sort = sort;
}

/// The values the merge hands over at one timestamp: one per series
/// taking part there (inside its own first..last range), in series order,
/// interpolated where the series has no point of its own.
pub(crate) enum Merged<'a> {
    /// Every series' current and next point is an integer (`isInteger`).
    Longs(&'a [i64]),
    Doubles(&'a mut [f64]),
}

/// Walks `series` as `AggregationIterator` does and calls `f` at every
/// timestamp of their union in `[from, to]`, without aggregating: for
/// callers that consume the per-series values themselves (the gexp
/// top-n functions). Empty series never take part.
pub(crate) fn walk(
    series: &[&Points],
    interp: Interpolation,
    from: i64,
    to: i64,
    scratch: &mut Scratch,
    f: impl FnMut(i64, Merged<'_>),
) {
    let series: Vec<&Points> = series.iter().copied().filter(|s| !s.is_empty()).collect();
    if series.is_empty() {
        return;
    }
    union_times(&series, &mut scratch.times);
    merge_at_times(&series, interp, false, from, to, scratch, f);
}

/// The merge proper over `scratch.times` (already the union of the
/// non-empty `series`' timestamps).
fn merge_at_times(
    series: &[&Points],
    interp: Interpolation,
    rate: bool,
    from: i64,
    to: i64,
    scratch: &mut Scratch,
    mut f: impl FnMut(i64, Merged<'_>),
) {
    scratch.cursors.clear();
    scratch.cursors.resize(series.len(), 0);
    for &t in &scratch.times {
        // Advance cursors to the first point at or after t, and decide
        // long or double math from every series' current and next point.
        let mut any_float = rate;
        for (s, c) in series.iter().zip(scratch.cursors.iter_mut()) {
            while *c < s.len() && s[*c].0 < t {
                *c += 1;
            }
            if any_float {
                continue;
            }
            let exact = *c < s.len() && s[*c].0 == t;
            let next = if exact { *c + 1 } else { *c };
            let in_range = t >= s[0].0 && t <= s[s.len() - 1].0;
            let cur = if exact { Some(*c) } else { c.checked_sub(1) };
            if in_range && cur.is_some_and(|i| s[i].1.is_float()) {
                any_float = true;
            }
            if next < s.len() && s[next].1.is_float() {
                any_float = true;
            }
        }
        if t < from || t > to {
            continue;
        }
        if any_float {
            scratch.doubles.clear();
            for (s, &c) in series.iter().zip(&scratch.cursors) {
                if t < s[0].0 || t > s[s.len() - 1].0 {
                    continue;
                }
                let (x1, y1) = s[c];
                if x1 == t {
                    scratch.doubles.push(y1.as_f64());
                    continue;
                }
                let (x0, y0) = s[c - 1];
                let (y0, y1) = (y0.as_f64(), y1.as_f64());
                scratch.doubles.push(match interp {
                    Interpolation::Lerp => y0 + (t - x0) as f64 * (y1 - y0) / (x1 - x0) as f64,
                    Interpolation::Zim => 0.0,
                    Interpolation::Max => f64::MAX,
                    Interpolation::Min => -f64::MAX,
                    Interpolation::Prev => y0,
                });
            }
            f(t, Merged::Doubles(&mut scratch.doubles));
        } else {
            scratch.longs.clear();
            for (s, &c) in series.iter().zip(&scratch.cursors) {
                if t < s[0].0 || t > s[s.len() - 1].0 {
                    continue;
                }
                let as_long = |v: Value| match v {
                    Value::Int(i) => i,
                    Value::Float(f) => f as i64,
                };
                let (x1, y1) = s[c];
                if x1 == t {
                    scratch.longs.push(as_long(y1));
                    continue;
                }
                let (x0, y0) = s[c - 1];
                let (y0, y1) = (as_long(y0), as_long(y1));
                scratch.longs.push(match interp {
                    Interpolation::Lerp => y0.wrapping_add(
                        (t - x0)
                            .wrapping_mul(y1.wrapping_sub(y0))
                            .wrapping_div(x1 - x0),
                    ),
                    Interpolation::Zim => 0,
                    Interpolation::Max => i64::MAX,
                    Interpolation::Min => i64::MIN,
                    Interpolation::Prev => y0,
                });
            }
            f(t, Merged::Longs(&scratch.longs));
        }
    }
}

/// The fast path for series that share one timestamp grid and hold only
/// doubles (downsampled or rate series, float metrics): every series has
/// an exact point at every timestamp, so no interpolation happens, and
/// sum/avg/min/max/count are accumulated series by series in sequential
/// memory order. Additions happen in the same order as the general path,
/// so results are bit-identical. Whether the series share the first one's
/// grid (and hold doubles) is checked in the same pass, not in one of its
/// own. Returns false, having appended nothing, if not applicable.
fn accumulate(
    series: &[&Points],
    agg: &Aggregator,
    rate: bool,
    from: i64,
    to: i64,
    scratch: &mut Scratch,
    out: &mut Vec<(i64, Value)>,
) -> bool {
    if !folds(agg) {
        return false;
    }
    let grid = series[0];
    if series.iter().any(|s| s.len() != grid.len()) {
        return false;
    }
    let cells = &mut scratch.cells;
    cells.clear();
    cells.resize(grid.len(), GridCell::default());
    // The function is picked once, not per point: each rule is its own
    // loop.
    let by = FoldBy::of(agg);
    let fold = |at: usize, cells: &mut [GridCell]| fold_by(by, grid, series, at, rate, cells);
    // Each timestamp is folded on its own, in series order: a large fold
    // is split by timestamp over threads and makes the same additions,
    // in the same order, as one thread.
    let threads = if series.len() * grid.len() >= PARALLEL_FOLD_VALUES {
        scratch.threads.clamp(1, grid.len())
    } else {
        1
    };
    let folded = if threads == 1 {
        fold(0, cells)
    } else {
        let per = grid.len().div_ceil(threads);
        let fold = &fold;
        let parts = cells.chunks_mut(per).enumerate();
        crate::parallel::run_all(parts.map(|(n, part)| move || fold(n * per, part)))
            .into_iter()
            .all(|folded| folded)
    };
    if !folded {
        return false;
    }
    emit_cells(grid, cells, agg, from, to, out);
    true
}

/// Appends the folded cells of `grid`'s timestamps in `[from, to]`.
fn emit_cells(
    grid: &Points,
    cells: &[GridCell],
    agg: &Aggregator,
    from: i64,
    to: i64,
    out: &mut Vec<(i64, Value)>,
) {
    for (&(t, _), c) in grid.iter().zip(cells) {
        if t < from || t > to {
            continue;
        }
        out.push((t, Value::Float(c.value(agg))));
    }
}

/// Folds `series` into `cells` (the grid's positions from `at`) with
/// `by`'s rule: the function is picked once, not per point, each rule
/// being its own loop.
#[inline(always)]
fn fold_by(
    by: FoldBy,
    grid: &Points,
    series: &[&Points],
    at: usize,
    rate: bool,
    cells: &mut [GridCell],
) -> bool {
    match by {
        FoldBy::Sum => fold_sums(grid, series, at, rate, cells),
        FoldBy::Min => fold_series::<MinRule>(grid, series, at, rate, cells),
        FoldBy::Max => fold_series::<MaxRule>(grid, series, at, rate, cells),
    }
}

/// The same-grid fold of [`aggregate`]'s fast path, fed a group's series
/// a few at a time, in series order: a reader folds each run of series
/// it has read while the run's outputs are still in cache, rather than
/// keeping every series' outputs for one fold at the end. Answers what
/// [`aggregate`] answers, bit for bit, whenever it answers at all.
pub(crate) struct GridFold {
    by: FoldBy,
    rate: bool,
    /// The group's first non-empty series: every other must share its
    /// timestamps.
    grid: Vec<(i64, Value)>,
    cells: Vec<GridCell>,
}

impl GridFold {
    /// A fold for `agg` (`None` unless it [`folds`]).
    pub(crate) fn new(agg: &Aggregator, rate: bool) -> Option<GridFold> {
        folds(agg).then(|| GridFold {
            by: FoldBy::of(agg),
            rate,
            grid: Vec::new(),
            cells: Vec::new(),
        })
    }

    /// Folds in the group's next `series` (empty ones take no part, as in
    /// [`aggregate`]). False if one leaves the grid, or holds an integer
    /// outside a rate: the fold is then not the group's answer (the
    /// general merge is).
    pub(crate) fn add(&mut self, series: &[&Points]) -> bool {
        let mut series = series.iter().copied().filter(|s| !s.is_empty()).peekable();
        if self.grid.is_empty() {
            let Some(first) = series.peek() else {
                return true;
            };
            self.grid.extend_from_slice(first);
            self.cells.resize(first.len(), GridCell::default());
        }
        let series: Vec<&Points> = series.collect();
        if series.iter().any(|s| s.len() != self.grid.len()) {
            return false;
        }
        fold_by(self.by, &self.grid, &series, 0, self.rate, &mut self.cells)
    }

    /// Appends the group's points with timestamps in `[from, to]`.
    pub(crate) fn finish(&self, agg: &Aggregator, from: i64, to: i64, out: &mut Vec<(i64, Value)>) {
        emit_cells(&self.grid, &self.cells, agg, from, to, out);
    }
}

/// Folds every series' values, position by position from `at`, into
/// `cells` with rule `R`. False as soon as a series' timestamp is not the
/// grid's at the same position, or (unless `rate`, whose values are all
/// doubles) a value is an integer.
#[inline(always)]
fn fold_series<R: FoldRule>(
    grid: &Points,
    series: &[&Points],
    at: usize,
    rate: bool,
    cells: &mut [GridCell],
) -> bool {
    let grid = &grid[at..at + cells.len()];
    for s in series {
        for ((c, p), g) in cells.iter_mut().zip(&s[at..]).zip(grid) {
            if p.0 != g.0 || (!rate && !p.1.is_float()) {
                return false;
            }
            c.add_by::<R>(p.1.as_f64());
        }
    }
    true
}

/// [`fold_series`] with [`SumRule`], without a branch per value: a cell
/// starts at +0.0, so its first value is added as `SumRule::first` adds it
/// (`0.0 + v`), and a sum that starts at +0.0 never becomes -0.0, so
/// adding +0.0 for a NaN leaves it as skipping the NaN does.
///
/// Series are taken four at a time: a cell is loaded and stored once for
/// the four, which add in series order, as one at a time would. Whether a
/// series is off the grid (or holds an integer where that is not allowed)
/// is gathered over the block and looked at once it is done: the cells
/// are thrown away then anyway.
#[inline(always)]
fn fold_sums(
    grid: &Points,
    series: &[&Points],
    at: usize,
    rate: bool,
    cells: &mut [GridCell],
) -> bool {
    let n = cells.len();
    let grid = &grid[at..at + n];
    let mut blocks = series.chunks_exact(4);
    for b in &mut blocks {
        let (s0, s1, s2, s3) = (
            &b[0][at..at + n],
            &b[1][at..at + n],
            &b[2][at..at + n],
            &b[3][at..at + n],
        );
        let mut bad = false;
        for k in 0..n {
            let g = grid[k].0;
            let (v0, n0, b0) = sum_term(s0[k], g, rate);
            let (v1, n1, b1) = sum_term(s1[k], g, rate);
            let (v2, n2, b2) = sum_term(s2[k], g, rate);
            let (v3, n3, b3) = sum_term(s3[k], g, rate);
            bad |= b0 | b1 | b2 | b3;
            let c = &mut cells[k];
            c.acc = c.acc + v0 + v1 + v2 + v3;
            c.n += n0 + n1 + n2 + n3;
        }
        if bad {
            return false;
        }
    }
    for s in blocks.remainder() {
        let s = &s[at..at + n];
        let mut bad = false;
        for k in 0..n {
            let (v, count, off) = sum_term(s[k], grid[k].0, rate);
            bad |= off;
            let c = &mut cells[k];
            c.acc += v;
            c.n += count;
        }
        if bad {
            return false;
        }
    }
    true
}

/// What a point adds to a sum at grid time `g`: its value (+0.0 for a
/// NaN), whether it counts, and whether it breaks the fold (off the grid,
/// or an integer outside a rate).
#[inline(always)]
fn sum_term((t, v): (i64, Value), g: i64, rate: bool) -> (f64, u32, bool) {
    let (v, int) = match v {
        Value::Float(f) => (f, false),
        Value::Int(i) => (i as f64, true),
    };
    let number = !v.is_nan();
    (
        if number { v } else { 0.0 },
        number as u32,
        (t != g) | (int & !rate),
    )
}

/// The aggregators [`GridCell`] folds: those whose value at a timestamp
/// is a running fold of the series' values there.
pub(crate) fn folds(agg: &Aggregator) -> bool {
    use super::aggregator::Function as F;
    matches!(agg.function, F::Sum | F::Avg | F::Min | F::Max | F::Count)
}

/// Which [`FoldRule`] an aggregator that [`folds`] folds by: the one home
/// of that choice (each caller compiles a loop per rule and picks it once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FoldBy {
    Sum,
    Min,
    Max,
}

impl FoldBy {
    pub(crate) fn of(agg: &Aggregator) -> FoldBy {
        use super::aggregator::Function as F;
        match agg.function {
            F::Sum | F::Avg | F::Count => FoldBy::Sum,
            F::Min => FoldBy::Min,
            _ => FoldBy::Max,
        }
    }
}

/// How a [`GridCell`] takes a timestamp's first value and each one after.
pub(crate) trait FoldRule {
    fn first(v: f64) -> f64;
    fn then(acc: f64, v: f64) -> f64;
}

/// sum, avg and count add; a sum starts at `0.0 + v` (+0.0, never -0.0).
pub(crate) struct SumRule;
pub(crate) struct MinRule;
pub(crate) struct MaxRule;

impl FoldRule for SumRule {
    #[inline(always)]
    fn first(v: f64) -> f64 {
        0.0 + v
    }
    #[inline(always)]
    fn then(acc: f64, v: f64) -> f64 {
        acc + v
    }
}

impl FoldRule for MinRule {
    #[inline(always)]
    fn first(v: f64) -> f64 {
        v
    }
    #[inline(always)]
    fn then(acc: f64, v: f64) -> f64 {
        if v < acc { v } else { acc }
    }
}

impl FoldRule for MaxRule {
    #[inline(always)]
    fn first(v: f64) -> f64 {
        v
    }
    #[inline(always)]
    fn then(acc: f64, v: f64) -> f64 {
        if v > acc { v } else { acc }
    }
}

/// One timestamp of the same-grid fast path: the series' values there
/// folded one by one (in series order for the general path's exact
/// additions). NaN values are left out; the timestamp still has a point
/// (NaN, or 0 for `count`). Rollup reads fold combined buckets into these
/// in their read threads (`query::rollup`), so both follow this rule.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct GridCell {
    acc: f64,
    n: u32,
}

impl GridCell {
    /// Folds in one series' value with `agg` (one that [`folds`]).
    #[inline]
    pub(crate) fn add(&mut self, agg: &Aggregator, v: f64) {
        match FoldBy::of(agg) {
            FoldBy::Sum => self.add_by::<SumRule>(v),
            FoldBy::Min => self.add_by::<MinRule>(v),
            FoldBy::Max => self.add_by::<MaxRule>(v),
        }
    }

    /// [`add`](Self::add) with the rule of its aggregator chosen by the
    /// caller, once for many values.
    #[inline(always)]
    pub(crate) fn add_by<R: FoldRule>(&mut self, v: f64) {
        if v.is_nan() {
            return;
        }
        self.acc = if self.n == 0 {
            R::first(v)
        } else {
            R::then(self.acc, v)
        };
        self.n += 1;
    }

    /// The aggregated value of the timestamp.
    pub(crate) fn value(&self, agg: &Aggregator) -> f64 {
        use super::aggregator::Function as F;
        match agg.function {
            F::Count => self.n as f64,
            _ if self.n == 0 => f64::NAN,
            F::Avg => self.acc / self.n as f64,
            _ => self.acc,
        }
    }
}

/// The sorted union of the series' timestamps; true if every series has
/// exactly these timestamps. Downsampled series usually share one grid:
/// that case costs one comparison pass. Series whose timestamps all lie on
/// the first one's (a series missing a few points, a rate without its
/// first point) cost one pass each too; only the others are sorted in.
fn union_times(series: &[&Points], out: &mut Vec<i64>) -> bool {
    out.clear();
    let first = series[0];
    let mut same = true;
    let mut others: Vec<&Points> = Vec::new();
    for s in &series[1..] {
        if s.len() == first.len() && s.iter().zip(first.iter()).all(|(a, b)| a.0 == b.0) {
            continue;
        }
        same = false;
        if !within(s, first) {
            others.push(s);
        }
    }
    out.extend(first.iter().map(|p| p.0));
    if !others.is_empty() {
        out.extend(others.iter().flat_map(|s| s.iter().map(|p| p.0)));
        out.sort_unstable();
        out.dedup();
    }
    same
}

/// Whether every timestamp of sorted `s` is one of sorted `grid`'s.
fn within(s: &Points, grid: &Points) -> bool {
    let mut g = grid.iter().map(|p| p.0);
    s.iter().all(|p| g.any(|t| t == p.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy;

    fn run(name: &str, series: &[Vec<(i64, Value)>]) -> Vec<(i64, Value)> {
        let refs: Vec<&Points> = series.iter().map(|s| s.as_slice()).collect();
        let mut out = Vec::new();
        aggregate(
            &refs,
            &Aggregator::by_name(name).unwrap(),
            false,
            i64::MIN,
            i64::MAX,
            &mut Scratch::default(),
            &mut out,
        );
        out
    }

    fn ints(p: &[(i64, i64)]) -> Vec<(i64, Value)> {
        p.iter().map(|&(t, v)| (t * 1000, Value::Int(v))).collect()
    }

    #[test]
    fn union_of_timestamps_whatever_the_overlap() {
        let pts = |ts: &[i64]| ts.iter().map(|&t| (t, Value::Int(1))).collect::<Vec<_>>();
        let union = |series: &[Vec<(i64, Value)>]| {
            let refs: Vec<&Points> = series.iter().map(|s| s.as_slice()).collect();
            let mut out = Vec::new();
            let same = union_times(&refs, &mut out);
            (out, same)
        };
        let grid = pts(&[1, 2, 3, 4]);
        assert_eq!(
            union(&[grid.clone(), grid.clone()]),
            (vec![1, 2, 3, 4], true)
        );
        // A series missing points of the first: the first's grid.
        assert_eq!(
            union(&[grid.clone(), pts(&[2, 4]), pts(&[1])]),
            (vec![1, 2, 3, 4], false)
        );
        // Points off the first's grid, before, between and after it.
        assert_eq!(
            union(&[grid.clone(), pts(&[0, 2, 5]), pts(&[3]), pts(&[2, 6])]),
            (vec![0, 1, 2, 3, 4, 5, 6], false)
        );
        assert_eq!(union(&[pts(&[3]), grid]), (vec![1, 2, 3, 4], false));
    }

    #[test]
    fn documented_interpolation_example() {
        let a = ints(&[(10, 5), (30, 15), (50, 5)]);
        let b = ints(&[(0, 10), (20, 20), (40, 10), (60, 20)]);
        // Section 4.3 of the spec lists 25 at 30 s, but its own LERP formula
        // gives B(30) = 20 + 10 * (10 - 20) / 20 = 15, so A + B = 30: the
        // code's behaviour, which we follow.
        assert_eq!(
            run("sum", &[a.clone(), b.clone()]),
            ints(&[
                (0, 10),
                (10, 20),
                (20, 30),
                (30, 30),
                (40, 20),
                (50, 20),
                (60, 20)
            ])
        );
        // ZIM: zero inside a series' range, absent outside it. The series
        // never share a timestamp, so zimsum and mimmin both return the one
        // real point at each.
        let alone = ints(&[
            (0, 10),
            (10, 5),
            (20, 20),
            (30, 15),
            (40, 10),
            (50, 5),
            (60, 20),
        ]);
        for name in ["zimsum", "mimmin"] {
            assert_eq!(run(name, &[a.clone(), b.clone()]), alone, "{name}");
        }
        assert_eq!(
            run("pfsum", &[a, b]),
            ints(&[
                (0, 10),
                (10, 15),
                (20, 25),
                (30, 35),
                (40, 25),
                (50, 15),
                (60, 20)
            ])
        );
    }

    #[test]
    fn a_float_anywhere_switches_to_double_math() {
        let a = ints(&[(0, 1), (20, 2)]);
        let b = vec![(10_000, Value::Float(1.5))];
        let out = run("sum", &[a, b]);
        // B has not started at 0 s, but its next point is a float already.
        assert_eq!(out[0], (0, Value::Float(1.0)));
        assert_eq!(out[1], (10_000, Value::Float(3.0)));
        assert_eq!(out[2], (20_000, Value::Int(2)));
        // Integer LERP truncates.
        let a = ints(&[(0, 0), (30, 1)]);
        let b = ints(&[(10, 0)]);
        assert_eq!(run("sum", &[a, b])[1], (10_000, Value::Int(0)));
    }

    /// The general merge alone, as `aggregate` runs it past its fast path.
    fn merged(series: &[&Points], agg: &Aggregator, rate: bool) -> Vec<(i64, Value)> {
        let mut scratch = Scratch::default();
        let series: Vec<&Points> = series.iter().copied().filter(|s| !s.is_empty()).collect();
        let mut out = Vec::new();
        if series.is_empty() {
            return out;
        }
        union_times(&series, &mut scratch.times);
        let interp = if rate {
            Interpolation::Prev
        } else {
            agg.interpolation
        };
        merge_at_times(
            &series,
            interp,
            rate,
            i64::MIN,
            i64::MAX,
            &mut scratch,
            |t, values| {
                out.push(match values {
                    Merged::Longs(v) => (t, Value::Int(agg.run_long(v, &mut Vec::new()))),
                    Merged::Doubles(v) => (t, Value::Float(agg.run_double(v))),
                })
            },
        );
        out
    }

    /// A same-grid fold large enough to be split over threads answers
    /// what the general merge answers, bit for bit; and when a series
    /// leaves the grid only in a later thread's part, the whole answer
    /// still comes from the merge.
    #[test]
    fn a_fold_split_over_threads_agrees_with_the_merge() {
        let (n_series, n_points) = (64, 600);
        assert!(n_series * n_points >= PARALLEL_FOLD_VALUES);
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut series: Vec<Vec<(i64, Value)>> = (0..n_series)
            .map(|_| {
                (0..n_points)
                    .map(|k| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let v = (x % 2_000_000) as f64 / 7.0 - 1e5;
                        (k as i64 * 10_000, Value::Float(v))
                    })
                    .collect()
            })
            .collect();
        let bits = |o: &[(i64, Value)]| -> Vec<(i64, u64)> {
            o.iter().map(|(t, v)| (*t, v.as_f64().to_bits())).collect()
        };
        for off_grid in [false, true] {
            if off_grid {
                series[40][550].0 += 1;
            }
            let refs: Vec<&Points> = series.iter().map(|s| s.as_slice()).collect();
            for name in ["sum", "avg", "min", "max", "count"] {
                let agg = Aggregator::by_name(name).unwrap();
                for rate in [false, true] {
                    let mut split = Vec::new();
                    let mut scratch = Scratch::with_threads(3);
                    aggregate(
                        &refs,
                        &agg,
                        rate,
                        i64::MIN,
                        i64::MAX,
                        &mut scratch,
                        &mut split,
                    );
                    let slow = merged(&refs, &agg, rate);
                    assert_eq!(
                        bits(&split),
                        bits(&slow),
                        "{name} rate={rate} off_grid={off_grid}"
                    );
                }
            }
        }
    }

    proptest::proptest! {
        /// The fast path answers what the general merge answers, bit for
        /// bit, whether or not the series share a grid or hold integers.
        #[test]
        fn the_grid_fast_path_agrees_with_the_merge(
            rows in proptest::collection::vec(
                proptest::collection::vec(
                    proptest::prop_oneof![
                        (-1e6f64..1e6).prop_map(Value::Float),
                        proptest::strategy::Just(Value::Float(f64::NAN)),
                        proptest::strategy::Just(Value::Float(-0.0)),
                        proptest::strategy::Just(Value::Float(f64::INFINITY)),
                        (-100i64..100).prop_map(Value::Int),
                    ],
                    0..12,
                ),
                1..6,
            ),
            shift in 0usize..3,
            name in proptest::sample::select(vec!["sum", "avg", "min", "max", "count", "zimsum"]),
            rate in proptest::bool::ANY,
        ) {
            // Most series on one grid; with `shift`, one series is moved.
            let series: Vec<Vec<(i64, Value)>> = rows
                .iter()
                .enumerate()
                .map(|(i, vals)| {
                    let off = if shift > 0 && i == 1 { shift as i64 * 1000 } else { 0 };
                    vals.iter()
                        .enumerate()
                        .map(|(k, v)| (k as i64 * 60_000 + off, if rate { Value::Float(v.as_f64()) } else { *v }))
                        .collect()
                })
                .collect();
            let refs: Vec<&Points> = series.iter().map(|s| s.as_slice()).collect();
            let agg = Aggregator::by_name(name).unwrap();
            let mut fast = Vec::new();
            aggregate(&refs, &agg, rate, i64::MIN, i64::MAX, &mut Scratch::default(), &mut fast);
            let slow = merged(&refs, &agg, rate);
            let bits = |o: &[(i64, Value)]| -> Vec<(i64, bool, u64)> {
                o.iter().map(|(t, v)| (*t, v.is_float(), v.as_f64().to_bits())).collect()
            };
            proptest::prop_assert_eq!(bits(&fast), bits(&slow));
        }
    }
}
