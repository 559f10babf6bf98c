//! PromQL's function library as Prometheus 2.42 has it, evaluated at one
//! step: the engine evaluates a call's arguments at that step and hands
//! them here.
//!
//! The engine itself answers the calls that need more than their
//! arguments' values: `absent` and `absent_over_time` (labels from the
//! argument's matchers), and the argument of `timestamp` (a vector
//! selector's samples keep their stored times).
//!
//! The functions live by family:
//! - [`range`]: the range-vector functions (`rate`, `irate`, `increase`,
//!   `delta`, `idelta`, `resets`, `changes` and every `*_over_time`);
//! - [`smoothing`]: `deriv`, `predict_linear`, `holt_winters`;
//! - [`stats`]: `quantile` (shared with the `quantile` aggregation) and
//!   Prometheus' compensated summation.

pub mod range;
pub mod smoothing;
pub mod stats;

pub use stats::{kahan_sum_inc, quantile};

use super::error::PromError;
use super::value::{Labels, Sample, VectorSample};

/// A range vector argument at one step: each series' samples in the
/// window (stale markers removed), and the window itself.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeArg {
    pub series: Vec<RangeSeries>,
    /// The selector's window at this step, after `offset` and `@`: both
    /// ends included (Prometheus 2.42). `rate` extrapolates to these.
    pub start_ms: i64,
    pub end_ms: i64,
}

/// One series of a [`RangeArg`].
#[derive(Debug, Clone, PartialEq)]
pub struct RangeSeries {
    pub labels: Labels,
    pub samples: Vec<Sample>,
}

/// One argument of a call, evaluated.
#[derive(Debug, Clone, PartialEq)]
pub enum FnArg {
    Scalar(f64),
    String(String),
    Vector(Vec<VectorSample>),
    Range(RangeArg),
}

impl FnArg {
    /// The argument's type as Prometheus names it in its messages.
    fn type_name(&self) -> &'static str {
        match self {
            FnArg::Scalar(_) => "scalar",
            FnArg::String(_) => "string",
            FnArg::Vector(_) => "instant vector",
            FnArg::Range(_) => "range vector",
        }
    }
}

/// The step a call is evaluated at.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FnContext {
    /// The evaluation time of this step, epoch ms (what `time()` and the
    /// date functions' default argument read).
    pub eval_ms: i64,
}

/// What a call returns: most functions give an instant vector; `time()`,
/// `pi()` and `scalar()` give a scalar.
#[derive(Debug, Clone, PartialEq)]
pub enum FnValue {
    Scalar(f64),
    Vector(Vec<VectorSample>),
}

/// Calls function `name` (already known to the parser, so its argument
/// count and types were checked) with its arguments evaluated at one
/// step. The vector it returns carries the labels Prometheus 2.42 gives
/// (most functions drop `__name__`; `last_over_time`, `sort`, the
/// `label_*` functions and a few more keep it) and `t` = the step.
///
/// Errors: `bad_data` for a name 2.42 does not have or arguments of the
/// wrong number or type (the parser stops those first); `execution` for
/// what 2.42 refuses while evaluating (`holt_winters`' factors,
/// `label_replace`'s regular expression and label names); `internal` for
/// `absent`/`absent_over_time`, which only the engine can answer.
pub fn call(name: &str, args: Vec<FnArg>, ctx: &FnContext) -> Result<FnValue, PromError> {
    let mut args = Args { name, args };
    let vector = FnValue::Vector;
    let value = match name {
        "rate" => vector(range::rate(&args.exactly(1)?.range(0)?, ctx)),
        "increase" => vector(range::increase(&args.exactly(1)?.range(0)?, ctx)),
        "delta" => vector(range::delta(&args.exactly(1)?.range(0)?, ctx)),
        "irate" => vector(range::irate(&args.exactly(1)?.range(0)?, ctx)),
        "idelta" => vector(range::idelta(&args.exactly(1)?.range(0)?, ctx)),
        "resets" => vector(range::resets(&args.exactly(1)?.range(0)?, ctx)),
        "changes" => vector(range::changes(&args.exactly(1)?.range(0)?, ctx)),
        "avg_over_time" => vector(range::avg_over_time(&args.exactly(1)?.range(0)?, ctx)),
        "sum_over_time" => vector(range::sum_over_time(&args.exactly(1)?.range(0)?, ctx)),
        "count_over_time" => vector(range::count_over_time(&args.exactly(1)?.range(0)?, ctx)),
        "min_over_time" => vector(range::min_over_time(&args.exactly(1)?.range(0)?, ctx)),
        "max_over_time" => vector(range::max_over_time(&args.exactly(1)?.range(0)?, ctx)),
        "last_over_time" => vector(range::last_over_time(&args.exactly(1)?.range(0)?, ctx)),
        "present_over_time" => vector(range::present_over_time(&args.exactly(1)?.range(0)?, ctx)),
        "stddev_over_time" => vector(range::stddev_over_time(&args.exactly(1)?.range(0)?, ctx)),
        "stdvar_over_time" => vector(range::stdvar_over_time(&args.exactly(1)?.range(0)?, ctx)),
        "quantile_over_time" => {
            let q = args.exactly(2)?.scalar(0)?;
            vector(range::quantile_over_time(q, &args.range(1)?, ctx))
        }
        "deriv" => vector(smoothing::deriv(&args.exactly(1)?.range(0)?, ctx)),
        "predict_linear" => {
            let seconds = args.exactly(2)?.scalar(1)?;
            vector(smoothing::predict_linear(&args.range(0)?, seconds, ctx))
        }
        "holt_winters" => {
            let sf = args.exactly(3)?.scalar(1)?;
            let tf = args.scalar(2)?;
            vector(smoothing::holt_winters(&args.range(0)?, sf, tf, ctx)?)
        }
        "absent" | "absent_over_time" => {
            return Err(PromError::internal(format!(
                "{name}() takes its labels from its argument's matchers: the engine answers it"
            )));
        }
        _ => return Err(unknown(name)),
    };
    Ok(value)
}

/// The error for a name that is no function of Prometheus 2.42 (the
/// parser knows 3.x's too).
fn unknown(name: &str) -> PromError {
    PromError::bad_data(format!("unknown function with name {name:?}"))
}

/// A call's evaluated arguments, with accessors that check each one's
/// type and say which function and argument was wrong.
struct Args<'a> {
    name: &'a str,
    args: Vec<FnArg>,
}

impl Args<'_> {
    /// Checks that the call has `n` arguments.
    fn exactly(&mut self, n: usize) -> Result<&mut Self, PromError> {
        self.between(n, n)
    }

    /// Checks that the call has `min..=max` arguments.
    fn between(&mut self, min: usize, max: usize) -> Result<&mut Self, PromError> {
        let got = self.args.len();
        if got < min || got > max {
            let expected = if min == max {
                min.to_string()
            } else {
                format!("{min} to {max}")
            };
            return Err(PromError::bad_data(format!(
                "expected {expected} argument(s) in call to {:?}, got {got}",
                self.name
            )));
        }
        Ok(self)
    }

    fn wrong_type(&self, i: usize, expected: &str) -> PromError {
        let got = self.args.get(i).map_or("nothing", FnArg::type_name);
        PromError::bad_data(format!(
            "expected type {expected} in call to function {:?}, got {got}",
            self.name
        ))
    }

    fn scalar(&self, i: usize) -> Result<f64, PromError> {
        match self.args.get(i) {
            Some(FnArg::Scalar(v)) => Ok(*v),
            _ => Err(self.wrong_type(i, "scalar")),
        }
    }

    /// Takes range vector argument `i` out of the call.
    fn range(&mut self, i: usize) -> Result<RangeArg, PromError> {
        match self.args.get_mut(i) {
            Some(FnArg::Range(r)) => Ok(std::mem::replace(
                r,
                RangeArg {
                    series: Vec::new(),
                    start_ms: r.start_ms,
                    end_ms: r.end_ms,
                },
            )),
            _ => Err(self.wrong_type(i, "range vector")),
        }
    }
}

/// One element of a function's answer at step `ctx`.
fn at_step(labels: Labels, v: f64, ctx: &FnContext) -> VectorSample {
    VectorSample {
        labels,
        t: ctx.eval_ms,
        v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CTX: FnContext = FnContext {
        eval_ms: 1_709_214_330_000,
    };

    fn vector_of(value: FnValue) -> Vec<VectorSample> {
        match value {
            FnValue::Vector(v) => v,
            FnValue::Scalar(s) => panic!("scalar {s}"),
        }
    }

    #[test]
    fn range_functions_through_call() {
        let range = FnArg::Range(RangeArg {
            series: vec![RangeSeries {
                labels: Labels::from_pairs([("__name__", "c")]),
                samples: vec![Sample { t: 0, v: 1.0 }, Sample { t: 10_000, v: 3.0 }],
            }],
            start_ms: 0,
            end_ms: 10_000,
        });
        let v = vector_of(call("delta", vec![range.clone()], &CTX).unwrap());
        assert_eq!(v[0].v, 2.0);
        let v = vector_of(
            call(
                "quantile_over_time",
                vec![FnArg::Scalar(0.5), range.clone()],
                &CTX,
            )
            .unwrap(),
        );
        assert_eq!(v[0].v, 2.0);
        let v = vector_of(call("last_over_time", vec![range], &CTX).unwrap());
        assert_eq!(v[0].labels.metric_name(), "c");
    }

    #[test]
    fn errors() {
        let err = call("rate", vec![FnArg::Vector(vec![])], &CTX).unwrap_err();
        assert_eq!(err.kind, crate::promql::ErrorKind::BadData);
        assert_eq!(
            err.message,
            "expected type range vector in call to function \"rate\", got instant vector"
        );
        let err = call("rate", vec![], &CTX).unwrap_err();
        assert_eq!(
            err.message,
            "expected 1 argument(s) in call to \"rate\", got 0"
        );
        let err = call("holt_winters", vec![FnArg::Scalar(1.0)], &CTX).unwrap_err();
        assert_eq!(
            err.message,
            "expected 3 argument(s) in call to \"holt_winters\", got 1"
        );
        let err = call("sort_by_label", vec![], &CTX).unwrap_err();
        assert_eq!(err.kind, crate::promql::ErrorKind::BadData);
        let err = call("absent", vec![FnArg::Vector(vec![])], &CTX).unwrap_err();
        assert_eq!(err.kind, crate::promql::ErrorKind::Internal);
    }
}
