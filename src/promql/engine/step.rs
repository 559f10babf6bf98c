//! What the parts of the evaluator share: the step grid, the value of an
//! expression at one step, and [`Eval`], the evaluator as the operator
//! files see it (they evaluate their operands through it, so that none
//! of them depends on the file that dispatches to them).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use promql_parser::parser::{Expr, SubqueryExpr};

use super::selectors::Selected;
use std::time::Instant;

use crate::promql::error::{ErrorKind, PromError};
use crate::promql::value::{Labels, Series, VectorSample};
use crate::query::QueryProgress;

/// What an expression evaluates to at one step.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum StepValue {
    Scalar(f64),
    String(String),
    Vector(Vec<VectorSample>),
    Matrix(Vec<Series>),
}

impl StepValue {
    /// The type's name as Prometheus' messages write it.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            StepValue::Scalar(_) => "scalar",
            StepValue::String(_) => "string",
            StepValue::Vector(_) => "instant vector",
            StepValue::Matrix(_) => "range vector",
        }
    }
}

/// A hasher for keys that are label sets (which carry their own 64-bit
/// hash) and node addresses: mixes the few integers it is given instead
/// of running SipHash over them, since these maps are looked up for every
/// sample at every step.
#[derive(Default)]
pub(super) struct MixHasher(u64);

impl Hasher for MixHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// A map keyed by label sets (and node addresses) with [`MixHasher`].
pub(super) type LabelMap<K, V> = HashMap<K, V, BuildHasherDefault<MixHasher>>;

/// A set of label sets with [`MixHasher`].
pub(super) type LabelSet<K> = HashSet<K, BuildHasherDefault<MixHasher>>;

/// What stops an evaluation before its end: the deadline of the
/// engine's timeout, and an operator's cancel when the query is watched.
#[derive(Debug, Clone, Copy)]
pub(super) struct Stop<'a> {
    pub(super) deadline: Instant,
    pub(super) progress: Option<&'a QueryProgress>,
}

impl Stop<'_> {
    /// A `canceled` error once an operator cancelled the query, a
    /// `timeout` error once it ran past its time. Cheap enough to ask
    /// once per series of a walk, or per window of a costly function.
    pub(super) fn check(&self) -> Result<(), PromError> {
        if self.progress.is_some_and(QueryProgress::is_cancelled) {
            return Err(PromError::new(
                ErrorKind::Canceled,
                "query was canceled in expression evaluation",
            ));
        }
        if Instant::now() > self.deadline {
            return Err(PromError::new(
                ErrorKind::Timeout,
                "query timed out in expression evaluation",
            ));
        }
        Ok(())
    }
}

/// The evaluator, as operators and function calls use it.
pub(super) trait Eval {
    /// Evaluates `expr` at time `t`.
    fn eval(&mut self, expr: &Expr, t: i64) -> Result<StepValue, PromError>;

    /// Counts `n` more samples held at this step; an `execution` error
    /// past `max_samples`.
    fn hold(&mut self, n: usize) -> Result<(), PromError>;

    /// The label set `f` derives from `labels` for the tree node at
    /// `node` (a grouping key, a matching signature), built once per
    /// query for each input label set rather than once per step.
    fn derive(&mut self, node: usize, labels: &Labels, f: impl FnOnce(&Labels) -> Labels)
    -> Labels;

    /// A subquery at `t`: its series, and its window's ends.
    fn subquery(&mut self, sq: &SubqueryExpr, t: i64)
    -> Result<(Vec<Series>, i64, i64), PromError>;

    /// Records that the call at `node` made `output` from the series
    /// `input`; an `execution` error when another series already made
    /// the same labels.
    fn claim(&mut self, node: usize, output: &Labels, input: &Labels) -> Result<(), PromError>;

    /// Results computed for every step of a range query at once (calls
    /// and aggregations over a series walk), by node; `None` for a node
    /// that does not take that way.
    fn step_rows(&mut self) -> &mut HashMap<usize, Option<Vec<Vec<VectorSample>>>>;

    /// The query's `max_samples`.
    fn max_samples(&self) -> usize;

    /// The selectors' series.
    fn selected(&self) -> &Selected;

    /// What stops the query: checked inside the loops that compute every
    /// step at once.
    fn stop(&self) -> Stop<'_>;

    /// Evaluates an instant-vector expression at `t`; anything else here
    /// is a bug in the parser's type checks, reported as such.
    fn eval_vector(&mut self, expr: &Expr, t: i64) -> Result<Vec<VectorSample>, PromError> {
        match self.eval(expr, t)? {
            StepValue::Vector(v) => Ok(v),
            other => Err(PromError::internal(format!(
                "expected an instant vector, got {}",
                other.kind()
            ))),
        }
    }
}

/// `expr` without the parentheses around it.
pub(super) fn unparen(mut expr: &Expr) -> &Expr {
    while let Expr::Paren(p) = expr {
        expr = &p.expr;
    }
    expr
}

/// Prometheus' check after an operation that changes labels: two
/// elements of one vector may not have the same label set.
pub(super) fn check_unique(v: &[VectorSample]) -> Result<(), PromError> {
    if v.len() < 2 {
        return Ok(());
    }
    let mut seen: LabelSet<&Labels> =
        LabelSet::with_capacity_and_hasher(v.len(), Default::default());
    for s in v {
        if !seen.insert(&s.labels) {
            return Err(PromError::execution(
                "vector cannot contain metrics with the same labelset",
            ));
        }
    }
    Ok(())
}
