//! Function calls at one step: arguments evaluated here and handed to
//! [`functions::call`], except what needs the expression itself rather
//! than its value: `absent` and `absent_over_time` (labels from the
//! argument's matchers), and `timestamp` of a plain selector (the
//! samples' stored times).

use promql_parser::label::MatchOp;
use promql_parser::parser::{Call, Expr};

use super::step::{Eval, StepValue, check_unique};
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
            if let Expr::VectorSelector(vs) = unwrap_parens(first(args)?) {
                let v = ev.selected().instant(vs, t, true);
                ev.hold(v.len())?;
                return finish(ev, name, vec![FnArg::Vector(v)], t);
            }
        }
        _ => {}
    }
    let mut evaluated = Vec::with_capacity(args.len());
    for a in args {
        let inner = unwrap_parens(a);
        let arg = match inner {
            Expr::MatrixSelector(_) | Expr::Subquery(_) => FnArg::Range(range_arg(ev, inner, t)?),
            _ => match ev.eval(inner, t)? {
                StepValue::Scalar(v) => FnArg::Scalar(v),
                StepValue::String(s) => FnArg::String(s),
                StepValue::Vector(v) => FnArg::Vector(v),
                StepValue::Matrix(m) => FnArg::Range(RangeArg {
                    series: m
                        .into_iter()
                        .map(|s| RangeSeries {
                            labels: s.labels,
                            samples: s.samples,
                        })
                        .collect(),
                    start_ms: t,
                    end_ms: t,
                }),
            },
        };
        evaluated.push(arg);
    }
    finish(ev, name, evaluated, t)
}

fn finish(
    ev: &mut impl Eval,
    name: &str,
    args: Vec<FnArg>,
    t: i64,
) -> Result<StepValue, PromError> {
    match functions::call(name, args, &FnContext { eval_ms: t })? {
        FnValue::Scalar(v) => Ok(StepValue::Scalar(v)),
        FnValue::Vector(v) => {
            check_unique(&v)?;
            ev.hold(v.len())?;
            Ok(StepValue::Vector(v))
        }
    }
}

fn first(args: &[Box<Expr>]) -> Result<&Expr, PromError> {
    args.first()
        .map(|a| a.as_ref())
        .ok_or_else(|| PromError::bad_data("function called without its argument"))
}

/// `e` without the parentheses around it.
fn unwrap_parens(mut e: &Expr) -> &Expr {
    while let Expr::Paren(p) = e {
        e = &p.expr;
    }
    e
}

/// A range-vector argument at `t`: a range selector's or a subquery's
/// window.
fn range_arg(ev: &mut impl Eval, e: &Expr, t: i64) -> Result<RangeArg, PromError> {
    match unwrap_parens(e) {
        Expr::MatrixSelector(ms) => {
            let w = ev.selected().window(ms, t);
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
    let vs = match unwrap_parens(arg) {
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
