//! Aggregations at one step, as Prometheus 2.42 computes them: `sum`,
//! `avg`, `min`, `max`, `count`, `group`, `stddev`, `stdvar`,
//! `count_values`, `topk`, `bottomk`, `quantile`, grouped `by` or
//! `without` labels (`without` also drops the name).

use promql_parser::parser::token::{
    T_AVG, T_BOTTOMK, T_COUNT, T_COUNT_VALUES, T_GROUP, T_MAX, T_MIN, T_QUANTILE, T_STDDEV,
    T_STDVAR, T_SUM, T_TOPK, TokenId,
};
use promql_parser::parser::{AggregateExpr, LabelModifier};

use super::step::{Eval, LabelMap, StepValue};
use super::walk::{SeriesWalk, check_distinct};
use crate::model::name::is_prometheus_label_name;
use crate::promql::error::PromError;
use crate::promql::functions::quantile;
use crate::promql::value::{Labels, METRIC_NAME, VectorSample, format_float};

/// Evaluates `a` at `t`.
pub(super) fn eval(ev: &mut impl Eval, a: &AggregateExpr, t: i64) -> Result<StepValue, PromError> {
    let op = a.op.id();
    let param = match &a.param {
        Some(p) => Some(ev.eval(p, t)?),
        None => None,
    };
    let (without, mut grouping) = match &a.modifier {
        Some(LabelModifier::Include(l)) => (false, l.labels.clone()),
        Some(LabelModifier::Exclude(l)) => (true, l.labels.clone()),
        None => (false, Vec::new()),
    };
    grouping.sort();
    let node = a as *const AggregateExpr as usize;
    if param.is_none()
        && let Some(out) = over_walk(ev, a, node, &grouping, without, t)?
    {
        ev.hold(out.len())?;
        return Ok(StepValue::Vector(out));
    }
    let input = ev.eval_vector(&a.expr, t)?;
    let out = match (op, param) {
        (T_COUNT_VALUES, Some(StepValue::String(label))) => {
            count_values(&label, &grouping, without, input, t)?
        }
        (T_TOPK | T_BOTTOMK, Some(StepValue::Scalar(k))) => {
            let groups = group(ev, node, &grouping, without, input);
            top_bottom(op == T_TOPK, k, groups)?
        }
        (T_QUANTILE, Some(StepValue::Scalar(q))) => {
            let groups = group(ev, node, &grouping, without, input);
            groups
                .into_iter()
                .map(|(labels, members)| {
                    let mut values: Vec<f64> = members.iter().map(|s| s.v).collect();
                    VectorSample {
                        labels,
                        t,
                        v: quantile(q, &mut values),
                    }
                })
                .collect()
        }
        (_, None) => {
            let groups = group(ev, node, &grouping, without, input);
            groups
                .into_iter()
                .map(|(labels, members)| {
                    let values: Vec<f64> = members.iter().map(|s| s.v).collect();
                    Ok(VectorSample {
                        labels,
                        t,
                        v: simple(op, &values)?,
                    })
                })
                .collect::<Result<Vec<_>, PromError>>()?
        }
        (op, p) => {
            return Err(PromError::internal(format!(
                "aggregation {op} with parameter {p:?} passed the parser"
            )));
        }
    };
    ev.hold(out.len())?;
    Ok(StepValue::Vector(out))
}

/// A parameterless aggregation of a series walk (a plain selector, or a
/// range function of a range selector: see `walk`) at a step of a range
/// query: every step's groups are computed on the first step asked, the
/// walk's values folded into each (group, step) as they come, series by
/// series, so that each group adds its values in the same (series) order
/// as the general path does. `None` where that does not apply, or where
/// the walk's steps × series pass `max_samples` (then 2.42, which holds
/// the inner matrix, may refuse: the general path decides).
fn over_walk(
    ev: &mut impl Eval,
    a: &AggregateExpr,
    node: usize,
    grouping: &[String],
    without: bool,
    t: i64,
) -> Result<Option<Vec<VectorSample>>, PromError> {
    let Some(step) = ev.selected().grid_step(t) else {
        return Ok(None);
    };
    if !ev.step_rows().contains_key(&node) {
        let rows = match SeriesWalk::of(&a.expr) {
            Some(walk) if Acc::folds(a.op.id()) => {
                fold_walk(ev, walk, a.op.id(), grouping, without)?
            }
            _ => None,
        };
        ev.step_rows().insert(node, rows);
    }
    Ok(ev.step_rows()[&node]
        .as_ref()
        .map(|rows| rows.get(step).cloned().unwrap_or_default()))
}

/// Whether aggregation `op` without a parameter folds a series walk at
/// every step of a range query (see [`over_walk`]).
pub(super) fn folds_walks(op: TokenId) -> bool {
    Acc::folds(op)
}

/// The rows of [`over_walk`]: per step, each group with values.
fn fold_walk(
    ev: &mut impl Eval,
    walk: SeriesWalk,
    op: TokenId,
    grouping: &[String],
    without: bool,
) -> Result<Option<Vec<Vec<VectorSample>>>, PromError> {
    let selected = ev.selected();
    let steps = selected.steps();
    if steps.saturating_mul(walk.series_count(selected)) > ev.max_samples() {
        return Ok(None);
    }
    let labels = walk.labels(selected);
    let mut index: LabelMap<Labels, u32> = LabelMap::default();
    let mut groups: Vec<Labels> = Vec::new();
    let of_series: Vec<u32> = labels
        .iter()
        .map(|l| {
            let key = group_labels(l, grouping, without);
            let next = groups.len() as u32;
            *index.entry(key.clone()).or_insert_with(|| {
                groups.push(key);
                next
            })
        })
        .collect();
    let width = groups.len();
    let mut accs = vec![Acc::default(); steps * width];
    let mut gave = vec![false; labels.len()];
    let stop = ev.stop();
    walk.walk(selected, |i, k, v| {
        // The query's cancel and timeout, once a series.
        if !gave[i as usize] {
            stop.check()?;
        }
        gave[i as usize] = true;
        accs[k * width + of_series[i as usize] as usize].push(op, v);
        Ok(())
    })?;
    if let SeriesWalk::Range(..) = walk {
        check_distinct(&labels, &gave)?;
    }
    let r = selected.range();
    let rows = (0..steps)
        .map(|k| {
            accs[k * width..(k + 1) * width]
                .iter()
                .zip(&groups)
                .filter(|(acc, _)| acc.count > 0.0)
                .map(|(acc, labels)| VectorSample {
                    labels: labels.clone(),
                    t: r.start_ms + k as i64 * r.step_ms,
                    v: acc.value(op),
                })
                .collect()
        })
        .collect();
    Ok(Some(rows))
}

/// The labels a sample's group is known by (and the group's result
/// carries): the `by` labels, or all but the `without` ones and the name.
fn group_labels(l: &Labels, grouping: &[String], without: bool) -> Labels {
    if without {
        l.filter(|n| n != METRIC_NAME && !grouping.iter().any(|g| g == n))
    } else {
        l.keep(grouping)
    }
}

/// The input split into groups, in the order each group first appears.
fn group(
    ev: &mut impl Eval,
    node: usize,
    grouping: &[String],
    without: bool,
    input: Vec<VectorSample>,
) -> Vec<(Labels, Vec<VectorSample>)> {
    let mut index: LabelMap<Labels, usize> = LabelMap::default();
    let mut groups: Vec<(Labels, Vec<VectorSample>)> = Vec::new();
    for s in input {
        let key = ev.derive(node, &s.labels, |l| group_labels(l, grouping, without));
        let i = *index.entry(key.clone()).or_insert_with(|| {
            groups.push((key, Vec::new()));
            groups.len() - 1
        });
        groups[i].1.push(s);
    }
    groups
}

/// The aggregations that reduce a group's values to one number, in the
/// order 2.42 adds them up (so that rounding matches).
fn simple(op: TokenId, values: &[f64]) -> Result<f64, PromError> {
    if !Acc::folds(op) {
        return Err(PromError::internal(format!(
            "aggregation {op} without its parameter"
        )));
    }
    let mut acc = Acc::default();
    for &v in values {
        acc.push(op, v);
    }
    Ok(acc.value(op))
}

/// One group's running aggregate for the aggregations without a
/// parameter, fed its values one at a time in input order, folded
/// exactly as 2.42 folds them: the sum; the mean, updated incrementally;
/// min and max (NaN replaced by any number); Welford's mean and variance
/// for `stddev`/`stdvar`.
#[derive(Debug, Clone, Copy, Default)]
struct Acc {
    /// Values folded in.
    count: f64,
    /// The sum, mean, min or max.
    value: f64,
    /// The running variance (`stddev`, `stdvar`).
    var: f64,
}

impl Acc {
    /// Whether `op` is one of the aggregations an `Acc` folds.
    fn folds(op: TokenId) -> bool {
        matches!(
            op,
            T_SUM | T_AVG | T_MAX | T_MIN | T_COUNT | T_GROUP | T_STDDEV | T_STDVAR
        )
    }

    fn push(&mut self, op: TokenId, v: f64) {
        self.count += 1.0;
        if self.count == 1.0 {
            self.value = v;
            return;
        }
        let count = self.count;
        match op {
            T_SUM => self.value += v,
            T_AVG => {
                let mean = self.value;
                if mean.is_infinite() {
                    // An infinite mean stays as it is unless a NaN or an
                    // infinity of the other sign comes (Inf − Inf would
                    // make NaN of a mean that is still right).
                    if v.is_infinite() && (mean > 0.0) == (v > 0.0) {
                        return;
                    }
                    if !v.is_infinite() && !v.is_nan() {
                        return;
                    }
                }
                self.value += v / count - mean / count;
            }
            T_MAX if self.value < v || self.value.is_nan() => self.value = v,
            T_MIN if self.value > v || self.value.is_nan() => self.value = v,
            T_STDDEV | T_STDVAR => {
                let delta = v - self.value;
                self.value += delta / count;
                self.var += delta * (v - self.value);
            }
            _ => {}
        }
    }

    /// The aggregate of what was folded in (NaN for nothing).
    fn value(&self, op: TokenId) -> f64 {
        if self.count == 0.0 {
            return f64::NAN;
        }
        match op {
            T_COUNT => self.count,
            T_GROUP => 1.0,
            T_STDDEV => (self.var / self.count).sqrt(),
            T_STDVAR => self.var / self.count,
            _ => self.value,
        }
    }
}

/// `topk`/`bottomk`: each group's `k` largest (smallest) elements with
/// their own labels, largest (smallest) first, NaN last. Kept in a heap
/// built and sorted exactly as 2.42 does (Go's `container/heap`, then an
/// insertion sort), so that equal values come out in 2.42's order.
fn top_bottom(
    top: bool,
    k: f64,
    groups: Vec<(Labels, Vec<VectorSample>)>,
) -> Result<Vec<VectorSample>, PromError> {
    if !(-9.223_372_036_854_776e18..=9.223_372_036_854_776e18).contains(&k) || k.is_nan() {
        return Err(PromError::execution(format!(
            "Scalar value {} overflows int64",
            format_float(k)
        )));
    }
    let k = k as i64;
    if k < 1 {
        return Ok(Vec::new());
    }
    let k = usize::try_from(k).unwrap_or(usize::MAX);
    let mut out = Vec::new();
    for (_, members) in groups {
        let mut heap = GoHeap {
            items: Vec::new(),
            top,
        };
        for s in members {
            if heap.items.is_empty() {
                heap.items.push(s);
                continue;
            }
            let root = heap.items[0].v;
            let better = if top { root < s.v } else { root > s.v };
            if heap.items.len() < k || better || root.is_nan() {
                if heap.items.len() == k {
                    if k == 1 {
                        heap.items[0] = s;
                        continue;
                    }
                    heap.pop();
                }
                heap.push(s);
            }
        }
        heap.sort_reversed();
        out.extend(heap.items);
    }
    Ok(out)
}

/// The heap 2.42 keeps for `topk` (smallest on top, NaN smaller than
/// anything) and `bottomk` (largest on top, NaN likewise on top), with Go's
/// `container/heap` moves.
struct GoHeap {
    items: Vec<VectorSample>,
    top: bool,
}

impl GoHeap {
    fn less(&self, i: usize, j: usize) -> bool {
        let (a, b) = (self.items[i].v, self.items[j].v);
        if a.is_nan() {
            return true;
        }
        if self.top { a < b } else { a > b }
    }

    fn up(&mut self, mut j: usize) {
        while j > 0 {
            let i = (j - 1) / 2;
            if !self.less(j, i) {
                break;
            }
            self.items.swap(i, j);
            j = i;
        }
    }

    fn down(&mut self, mut i: usize, n: usize) {
        loop {
            let j1 = 2 * i + 1;
            if j1 >= n {
                break;
            }
            let mut j = j1;
            if j1 + 1 < n && self.less(j1 + 1, j1) {
                j = j1 + 1;
            }
            if !self.less(j, i) {
                break;
            }
            self.items.swap(i, j);
            i = j;
        }
    }

    fn push(&mut self, s: VectorSample) {
        self.items.push(s);
        self.up(self.items.len() - 1);
    }

    fn pop(&mut self) {
        let n = self.items.len() - 1;
        self.items.swap(0, n);
        self.down(0, n);
        self.items.pop();
    }

    /// `sort.Sort(sort.Reverse(heap))`: Go sorts up to 12 elements by
    /// insertion, done here the same way; longer lists (where Go's
    /// pattern-defeating quicksort may order equal values differently)
    /// by a stable sort with NaN last.
    fn sort_reversed(&mut self) {
        let n = self.items.len();
        if n <= 12 {
            for i in 1..n {
                let mut j = i;
                while j > 0 && self.less(j - 1, j) {
                    self.items.swap(j, j - 1);
                    j -= 1;
                }
            }
            return;
        }
        let top = self.top;
        self.items.sort_by(|x, y| {
            x.v.is_nan().cmp(&y.v.is_nan()).then_with(|| {
                let o = x.v.partial_cmp(&y.v).unwrap_or(std::cmp::Ordering::Equal);
                if top { o.reverse() } else { o }
            })
        });
    }
}

/// `count_values("label", v)`: how many elements have each value, the
/// value written as Go's `FormatFloat(v, 'f', -1, 64)` into `label`.
fn count_values(
    label: &str,
    grouping: &[String],
    without: bool,
    input: Vec<VectorSample>,
    t: i64,
) -> Result<Vec<VectorSample>, PromError> {
    if !is_prometheus_label_name(label) {
        return Err(PromError::execution(format!(
            "invalid label name {label:?}"
        )));
    }
    let mut grouping = grouping.to_vec();
    if !without {
        grouping.push(label.to_string());
        grouping.sort();
    }
    let mut index: LabelMap<Labels, usize> = LabelMap::default();
    let mut out: Vec<VectorSample> = Vec::new();
    for s in input {
        let mut l = s.labels.clone();
        l.set(label, &format_float(s.v));
        let key = group_labels(&l, &grouping, without);
        match index.get(&key) {
            Some(&i) => out[i].v += 1.0,
            None => {
                index.insert(key.clone(), out.len());
                out.push(VectorSample {
                    labels: key,
                    t,
                    v: 1.0,
                });
            }
        }
    }
    Ok(out)
}
