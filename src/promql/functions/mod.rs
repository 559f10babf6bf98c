//! PromQL's function library as Prometheus 2.42 has it, evaluated at one
//! step: the engine evaluates a call's arguments at that step and hands
//! them here.
//!
//! The engine itself answers the calls that need more than their
//! arguments' values: `absent` and `absent_over_time` (labels from the
//! argument's matchers), and the argument of `timestamp` (a vector
//! selector's samples keep their stored times).

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
pub fn call(name: &str, args: Vec<FnArg>, ctx: &FnContext) -> Result<FnValue, PromError> {
    let _ = (args, ctx);
    Err(PromError::bad_data(format!(
        "function {name:?} is not implemented yet"
    )))
}
