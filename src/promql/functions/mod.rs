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
//! - [`math`]: functions of one value (`abs`, `round`, `clamp`, the
//!   trigonometric ones…) and `pi()`;
//! - [`histogram`]: `histogram_quantile` over `le` buckets, and the
//!   native-histogram functions (always empty: none is stored);
//! - [`labels`]: `label_replace`, `label_join`;
//! - [`time`]: `time()`, `timestamp()` and the date functions (UTC);
//! - [`sort`]: `sort`, `sort_desc`;
//! - [`convert`]: `scalar()`, `vector()`;
//! - [`stats`]: `quantile` (shared with the `quantile` aggregation) and
//!   Prometheus' compensated summation;
//! - [`goregex`]: Go's regular expressions on Rust's `regex` (for
//!   `label_replace`, and for the engine's `=~`/`!~` matchers).

pub mod convert;
pub mod goregex;
pub mod histogram;
pub mod labels;
pub mod math;
pub mod range;
pub mod smoothing;
pub mod sort;
pub mod stats;
pub mod time;

pub use stats::{kahan_sum_inc, quantile};

#[cfg(test)]
mod reference_tests;

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
    if let Some(f) = range::RangeFn::from_name(name) {
        return Ok(vector(f.call(&args.exactly(1)?.range(0)?, ctx)));
    }
    let value = match name {
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
        "abs" | "ceil" | "floor" | "exp" | "sqrt" | "ln" | "log2" | "log10" | "sin" | "cos"
        | "tan" | "asin" | "acos" | "atan" | "sinh" | "cosh" | "tanh" | "asinh" | "acosh"
        | "atanh" | "deg" | "rad" | "sgn" => {
            let f = math::MathFn::from_name(name).ok_or_else(|| unknown(name))?;
            let input = args.exactly(1)?.vector(0)?;
            vector(math::map_values(input, ctx, |v| f.apply(v)))
        }
        "round" => {
            let to_nearest = if args.between(1, 2)?.len() == 2 {
                args.scalar(1)?
            } else {
                1.0
            };
            vector(math::round(args.vector(0)?, to_nearest, ctx))
        }
        "clamp" => {
            let (min, max) = (args.exactly(3)?.scalar(1)?, args.scalar(2)?);
            vector(math::clamp(args.vector(0)?, min, max, ctx))
        }
        "clamp_min" => {
            let min = args.exactly(2)?.scalar(1)?;
            vector(math::clamp_min(args.vector(0)?, min, ctx))
        }
        "clamp_max" => {
            let max = args.exactly(2)?.scalar(1)?;
            vector(math::clamp_max(args.vector(0)?, max, ctx))
        }
        "pi" => {
            args.exactly(0)?;
            FnValue::Scalar(std::f64::consts::PI)
        }
        "histogram_quantile" => {
            let q = args.exactly(2)?.scalar(0)?;
            vector(histogram::histogram_quantile(q, args.vector(1)?, ctx))
        }
        "histogram_count" | "histogram_sum" => {
            let input = args.exactly(1)?.vector(0)?;
            vector(histogram::native_histogram_function(&input))
        }
        "histogram_fraction" => {
            args.exactly(3)?.scalar(0)?;
            args.scalar(1)?;
            vector(histogram::native_histogram_function(&args.vector(2)?))
        }
        "label_replace" => {
            args.exactly(5)?;
            let (dst, replacement) = (args.string(1)?, args.string(2)?);
            let (src, regex) = (args.string(3)?, args.string(4)?);
            let replace = labels::Replace {
                dst: &dst,
                replacement: &replacement,
                src: &src,
                regex: &regex,
            };
            vector(labels::label_replace(args.vector(0)?, replace, ctx)?)
        }
        "label_join" => {
            let n = args.between(3, usize::MAX)?.len();
            let (dst, separator) = (args.string(1)?, args.string(2)?);
            let sources = (3..n)
                .map(|i| args.string(i))
                .collect::<Result<Vec<_>, _>>()?;
            vector(labels::label_join(
                args.vector(0)?,
                &dst,
                &separator,
                &sources,
                ctx,
            )?)
        }
        "time" => {
            args.exactly(0)?;
            FnValue::Scalar(time::time(ctx))
        }
        "timestamp" => vector(time::timestamp(args.exactly(1)?.vector(0)?, ctx)),
        "year" | "month" | "day_of_month" | "day_of_year" | "day_of_week" | "days_in_month"
        | "hour" | "minute" => {
            let f = time::DateFn::from_name(name).ok_or_else(|| unknown(name))?;
            if args.between(0, 1)?.len() == 0 {
                vector(time::date_of_eval_time(f, ctx))
            } else {
                vector(time::date_of_values(f, args.vector(0)?, ctx))
            }
        }
        "sort" => vector(sort::sort_by_value(
            args.exactly(1)?.vector(0)?,
            sort::Direction::Ascending,
        )),
        "sort_desc" => vector(sort::sort_by_value(
            args.exactly(1)?.vector(0)?,
            sort::Direction::Descending,
        )),
        "scalar" => FnValue::Scalar(convert::scalar(&args.exactly(1)?.vector(0)?)),
        "vector" => vector(convert::vector(args.exactly(1)?.scalar(0)?, ctx)),
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

    fn len(&self) -> usize {
        self.args.len()
    }

    fn string(&self, i: usize) -> Result<String, PromError> {
        match self.args.get(i) {
            Some(FnArg::String(v)) => Ok(v.clone()),
            _ => Err(self.wrong_type(i, "string")),
        }
    }

    /// Takes instant vector argument `i` out of the call (each argument
    /// is read once).
    fn vector(&mut self, i: usize) -> Result<Vec<VectorSample>, PromError> {
        match self.args.get_mut(i) {
            Some(FnArg::Vector(v)) => Ok(std::mem::take(v)),
            _ => Err(self.wrong_type(i, "instant vector")),
        }
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

    fn element(name: &str, v: f64) -> VectorSample {
        VectorSample {
            labels: Labels::from_pairs([("__name__", name), ("job", "a")]),
            t: 0,
            v,
        }
    }

    fn vector_of(value: FnValue) -> Vec<VectorSample> {
        match value {
            FnValue::Vector(v) => v,
            FnValue::Scalar(s) => panic!("scalar {s}"),
        }
    }

    fn scalar_of(value: FnValue) -> f64 {
        match value {
            FnValue::Scalar(s) => s,
            FnValue::Vector(v) => panic!("vector {v:?}"),
        }
    }

    #[test]
    fn dispatches_by_name() {
        let v =
            vector_of(call("abs", vec![FnArg::Vector(vec![element("m", -2.0)])], &CTX).unwrap());
        assert_eq!(v[0].v, 2.0);
        assert_eq!(v[0].labels, Labels::from_pairs([("job", "a")]));
        assert_eq!(
            scalar_of(call("pi", vec![], &CTX).unwrap()),
            std::f64::consts::PI
        );
        assert_eq!(
            scalar_of(call("time", vec![], &CTX).unwrap()),
            1_709_214_330.0
        );
        let s = call("scalar", vec![FnArg::Vector(vec![element("m", 3.0)])], &CTX).unwrap();
        assert_eq!(scalar_of(s), 3.0);
        let v = vector_of(call("vector", vec![FnArg::Scalar(1.5)], &CTX).unwrap());
        assert_eq!(v[0].v, 1.5);
        assert!(v[0].labels.is_empty());
    }

    #[test]
    fn optional_and_variadic_arguments() {
        let input = || FnArg::Vector(vec![element("m", 2.5)]);
        let v = vector_of(call("round", vec![input()], &CTX).unwrap());
        assert_eq!(v[0].v, 3.0);
        let v = vector_of(call("round", vec![input(), FnArg::Scalar(2.0)], &CTX).unwrap());
        assert_eq!(v[0].v, 2.0);
        // No argument: the evaluation time, 2024-02-29 13:45:30 UTC.
        let v = vector_of(call("hour", vec![], &CTX).unwrap());
        assert_eq!(v[0].v, 13.0);
        let v =
            vector_of(call("month", vec![FnArg::Vector(vec![element("m", 0.0)])], &CTX).unwrap());
        assert_eq!(v[0].v, 1.0);
        let s = |x: &str| FnArg::String(x.to_string());
        let v = vector_of(
            call(
                "label_join",
                vec![input(), s("d"), s("+"), s("job"), s("__name__")],
                &CTX,
            )
            .unwrap(),
        );
        assert_eq!(v[0].labels.get("d"), "a+m");
        let v = vector_of(call("label_join", vec![input(), s("job"), s("+")], &CTX).unwrap());
        assert_eq!(v[0].labels, Labels::from_pairs([("__name__", "m")]));
        let v = vector_of(
            call(
                "label_replace",
                vec![input(), s("x"), s("<$1>"), s("job"), s("(.)")],
                &CTX,
            )
            .unwrap(),
        );
        assert_eq!(v[0].labels.get("x"), "<a>");
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
    fn native_histogram_functions_answer_nothing_for_floats() {
        for name in ["histogram_count", "histogram_sum"] {
            let out = call(name, vec![FnArg::Vector(vec![element("m", 1.0)])], &CTX).unwrap();
            assert!(vector_of(out).is_empty());
        }
        let args = vec![
            FnArg::Scalar(0.0),
            FnArg::Scalar(1.0),
            FnArg::Vector(vec![element("m", 1.0)]),
        ];
        assert!(vector_of(call("histogram_fraction", args, &CTX).unwrap()).is_empty());
    }

    #[test]
    fn errors() {
        let err = call("rate", vec![FnArg::Vector(vec![])], &CTX).unwrap_err();
        assert_eq!(err.kind, crate::promql::ErrorKind::BadData);
        assert_eq!(
            err.message,
            "expected type range vector in call to function \"rate\", got instant vector"
        );
        let err = call("abs", vec![], &CTX).unwrap_err();
        assert_eq!(
            err.message,
            "expected 1 argument(s) in call to \"abs\", got 0"
        );
        let err = call("round", vec![], &CTX).unwrap_err();
        assert_eq!(
            err.message,
            "expected 1 to 2 argument(s) in call to \"round\", got 0"
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
