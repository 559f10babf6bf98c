//! Function calls at one step: arguments evaluated here and handed to
//! [`functions::call`], except what needs the expression itself rather
//! than its value: `absent` and `absent_over_time` (labels from the
//! argument's matchers), and `timestamp` of a plain selector (the
//! samples' stored times).

use promql_parser::label::MatchOp;
use promql_parser::parser::{Call, Expr, MatrixSelector};

use super::step::{Eval, StepValue, check_unique, unparen};
use super::walk::{SeriesWalk, check_distinct};
use crate::promql::error::PromError;
use crate::promql::functions::{self, FnArg, FnContext, FnValue, RangeArg, RangeSeries};
use crate::promql::value::{Labels, METRIC_NAME, VectorSample};

/// Evaluates call `c` at `t`.
pub(super) fn eval(ev: &mut impl Eval, c: &Call, t: i64) -> Result<StepValue, PromError> {
    let name = c.func.name;
    let args = &c.args.args;
    match name {
        "absent" => {
            let arg = first(args)?;
            let v = ev.eval_vector(arg, t)?;
            return Ok(StepValue::Vector(absent(v.is_empty(), arg, t)));
        }
        "absent_over_time" => {
            let arg = first(args)?;
            let r = range_arg(ev, arg, t)?;
            let empty = r.series.iter().all(|s| s.samples.is_empty());
            return Ok(StepValue::Vector(absent(empty, arg, t)));
        }
        "timestamp" => {
            if let Expr::VectorSelector(vs) = unparen(first(args)?) {
                let v = ev.selected().instant(vs, t, true)?;
                ev.hold(v.len())?;
                return match functions::call(name, vec![FnArg::Vector(v)], &ctx(t))? {
                    FnValue::Vector(v) => Ok(StepValue::Vector(v)),
                    FnValue::Scalar(v) => Ok(StepValue::Scalar(v)),
                };
            }
        }
        _ => {}
    }
    if let Some(at) = args
        .iter()
        .position(|a| matches!(unparen(a), Expr::MatrixSelector(_) | Expr::Subquery(_)))
    {
        return per_series(ev, c, at, t);
    }
    let mut evaluated = Vec::with_capacity(args.len());
    for a in args {
        evaluated.push(value_arg(ev, a, t)?);
    }
    match functions::call(name, evaluated, &ctx(t))? {
        FnValue::Scalar(v) => Ok(StepValue::Scalar(v)),
        FnValue::Vector(v) => {
            check_unique(&v)?;
            ev.hold(v.len())?;
            Ok(StepValue::Vector(v))
        }
    }
}

/// A function of a range vector, called once per series as 2.42 calls
/// it, so that two series whose results have the same labels are caught
/// even at different steps (2.42 checks the whole result matrix).
fn per_series(ev: &mut impl Eval, c: &Call, at: usize, t: i64) -> Result<StepValue, PromError> {
    let args = &c.args.args;
    let node = c as *const Call as usize;
    if let (Expr::MatrixSelector(ms), Some(step)) = (unparen(&args[at]), ev.selected().grid_step(t))
    {
        if !ev.step_rows().contains_key(&node) {
            let rows = match SeriesWalk::of_call(c) {
                Some(walk) => walk_grid(ev, walk)?,
                None => call_grid(ev, c, at, ms)?,
            };
            ev.step_rows().insert(node, Some(rows));
        }
        let v = match &ev.step_rows()[&node] {
            Some(rows) => rows[step].clone(),
            None => return Err(PromError::internal("a call's rows were not computed")),
        };
        ev.hold(v.len())?;
        return Ok(StepValue::Vector(v));
    }
    let range = range_arg(ev, &args[at], t)?;
    let mut others = Vec::with_capacity(args.len());
    for (i, a) in args.iter().enumerate() {
        if i != at {
            others.push(value_arg(ev, a, t)?);
        }
    }
    let mut out = Vec::new();
    for series in range.series {
        let input = series.labels.clone();
        let mut call_args = others.clone();
        call_args.insert(
            at,
            FnArg::Range(RangeArg {
                series: vec![series],
                start_ms: range.start_ms,
                end_ms: range.end_ms,
            }),
        );
        match functions::call(c.func.name, call_args, &ctx(t))? {
            FnValue::Vector(v) => {
                for s in v {
                    ev.claim(node, &s.labels, &input)?;
                    out.push(s);
                }
            }
            FnValue::Scalar(_) => {
                return Err(PromError::internal(format!(
                    "{} of a range vector gave a scalar",
                    c.func.name
                )));
            }
        }
    }
    ev.hold(out.len())?;
    Ok(StepValue::Vector(out))
}

/// A function of a range selector at every step of a range query, series
/// by series as 2.42 computes it (each series' samples read once, in
/// order): per step, the results.
fn call_grid(
    ev: &mut impl Eval,
    c: &Call,
    at: usize,
    ms: &MatrixSelector,
) -> Result<Vec<Vec<VectorSample>>, PromError> {
    let args = &c.args.args;
    let r = ev.selected().range();
    let steps = usize::try_from((r.end_ms - r.start_ms) / r.step_ms + 1).unwrap_or(0);
    let mut others: Vec<Vec<FnArg>> = Vec::with_capacity(steps);
    for k in 0..steps {
        let tk = r.start_ms + k as i64 * r.step_ms;
        let mut step_args = Vec::with_capacity(args.len());
        for (i, a) in args.iter().enumerate() {
            if i != at {
                step_args.push(value_arg(ev, a, tk)?);
            }
        }
        others.push(step_args);
    }
    let max = ev.max_samples();
    let mut rows: Vec<Vec<VectorSample>> = vec![Vec::new(); steps];
    // Each series' output labels with its input labels, once per change,
    // for the duplicate check after the walk.
    let mut made: Vec<(Labels, Labels)> = Vec::new();
    let mut points = 0usize;
    let inputs = ev.selected().series_labels(&ms.vs);
    let stop = ev.stop();
    ev.selected().walk_windows(ms, |i, k, samples, span| {
        // Every step is computed here at once, and a function of this
        // general path may cost much a window: the query's cancel and
        // timeout are looked at for each.
        stop.check()?;
        let labels = &inputs[i as usize];
        let mut call_args = others[k].clone();
        call_args.insert(
            at,
            FnArg::Range(RangeArg {
                series: vec![RangeSeries {
                    labels: labels.clone(),
                    samples: samples.to_vec(),
                }],
                start_ms: span.start_ms,
                end_ms: span.end_ms,
            }),
        );
        let tk = r.start_ms + k as i64 * r.step_ms;
        match functions::call(c.func.name, call_args, &ctx(tk))? {
            FnValue::Vector(v) => {
                for mut s in v {
                    match made.last() {
                        // The same labels as this series' last result:
                        // share them, so later steps compare by pointer.
                        Some((out, input)) if input == labels && *out == s.labels => {
                            s.labels = out.clone();
                        }
                        _ => made.push((s.labels.clone(), labels.clone())),
                    }
                    points += 1;
                    rows[k].push(s);
                }
            }
            FnValue::Scalar(_) => {
                return Err(PromError::internal(format!(
                    "{} of a range vector gave a scalar",
                    c.func.name
                )));
            }
        }
        if points > max {
            return Err(PromError::too_many_samples());
        }
        Ok(())
    })?;
    let node = c as *const Call as usize;
    for (out, input) in &made {
        ev.claim(node, out, input)?;
    }
    Ok(rows)
}

/// A one-argument range function of a range selector at every step of a
/// range query, from its series walk: per step, the results.
fn walk_grid(ev: &mut impl Eval, walk: SeriesWalk) -> Result<Vec<Vec<VectorSample>>, PromError> {
    let labels = walk.labels(ev.selected());
    let r = ev.selected().range();
    let mut rows: Vec<Vec<VectorSample>> = vec![Vec::new(); ev.selected().steps()];
    let mut gave = vec![false; labels.len()];
    let (max, mut points) = (ev.max_samples(), 0usize);
    let stop = ev.stop();
    walk.walk(ev.selected(), |i, k, v| {
        // The query's cancel and timeout, once a series.
        if !gave[i as usize] {
            stop.check()?;
        }
        gave[i as usize] = true;
        rows[k].push(VectorSample {
            labels: labels[i as usize].clone(),
            t: r.start_ms + k as i64 * r.step_ms,
            v,
        });
        points += 1;
        if points > max {
            return Err(PromError::too_many_samples());
        }
        Ok(())
    })?;
    check_distinct(&labels, &gave)?;
    Ok(rows)
}

/// An argument that is not a range vector, evaluated at `t`.
fn value_arg(ev: &mut impl Eval, a: &Expr, t: i64) -> Result<FnArg, PromError> {
    Ok(match ev.eval(unparen(a), t)? {
        StepValue::Scalar(v) => FnArg::Scalar(v),
        StepValue::String(s) => FnArg::String(s),
        StepValue::Vector(v) => FnArg::Vector(v),
        StepValue::Matrix(_) => {
            return Err(PromError::internal(
                "a range vector where a value was expected",
            ));
        }
    })
}

fn ctx(t: i64) -> FnContext {
    FnContext { eval_ms: t }
}

fn first(args: &[Box<Expr>]) -> Result<&Expr, PromError> {
    args.first()
        .map(|a| a.as_ref())
        .ok_or_else(|| PromError::bad_data("function called without its argument"))
}

/// A range-vector argument at `t`: a range selector's or a subquery's
/// window.
fn range_arg(ev: &mut impl Eval, e: &Expr, t: i64) -> Result<RangeArg, PromError> {
    match unparen(e) {
        Expr::MatrixSelector(ms) => {
            let w = ev.selected().window(ms, t)?;
            ev.hold(w.series.iter().map(|s| s.samples.len()).sum())?;
            Ok(w.into_arg())
        }
        Expr::Subquery(sq) => {
            let (series, start_ms, end_ms) = ev.subquery(sq, t)?;
            Ok(RangeArg {
                series: series
                    .into_iter()
                    .map(|s| RangeSeries {
                        labels: s.labels,
                        samples: s.samples,
                    })
                    .collect(),
                start_ms,
                end_ms,
            })
        }
        other => Err(PromError::internal(format!(
            "expected a range vector argument, got {other}"
        ))),
    }
}

/// `absent`/`absent_over_time`: nothing when the argument had data,
/// else one element of value 1 whose labels are the argument's equality
/// matchers (a label matched more than once, or not by `=`, left out;
/// none for anything but a selector), as 2.42 builds them.
fn absent(has_none: bool, arg: &Expr, t: i64) -> Vec<VectorSample> {
    if !has_none {
        return Vec::new();
    }
    let vs = match unparen(arg) {
        Expr::VectorSelector(vs) => Some(vs),
        Expr::MatrixSelector(ms) => Some(&ms.vs),
        _ => None,
    };
    let mut labels = Labels::default();
    if let Some(vs) = vs {
        let mut seen: Vec<&str> = Vec::new();
        for m in &vs.matchers.matchers {
            if m.name == METRIC_NAME {
                continue;
            }
            if m.op == MatchOp::Equal && !seen.contains(&m.name.as_str()) {
                labels.set(&m.name, &m.value);
                seen.push(&m.name);
            } else {
                labels.remove(&m.name);
            }
        }
    }
    vec![VectorSample { labels, t, v: 1.0 }]
}
