//! The evaluator: one expression tree evaluated at one step at a time,
//! over series read once for the whole query range. Instant queries are
//! one step; range queries gather each step's vector into a matrix.

use std::collections::{BTreeMap, HashMap};

use promql_parser::parser::{Expr, SubqueryExpr, UnaryExpr};

use super::EngineOptions;
use super::selectors::{self, QueryRange, Selected};
use super::step::{Eval, LabelMap, StepValue, Stop, check_unique};
use super::walk::SeriesWalk;
use super::{aggregate, binary, calls};
use crate::promql::error::PromError;
use crate::promql::storage::Storage;
use crate::promql::value::{Labels, QueryValue, Sample, Series, VectorSample};

/// The state of one query's evaluation.
pub(super) struct Evaluator<'a> {
    pub(super) opts: &'a EngineOptions,
    pub(super) range: QueryRange,
    stop: Stop<'a>,
    /// Each selector's series over the whole query.
    selected: Selected,
    /// Label sets derived from input labels (grouping keys, matching
    /// signatures), by node and input, so that a series' key is built
    /// once per query rather than once per step.
    derived: LabelMap<(usize, Labels), Labels>,
    /// A subquery's inner vectors by node and inner time: the inner steps
    /// are absolute multiples of the subquery step, so consecutive outer
    /// steps share most of them.
    subquery_steps: HashMap<usize, BTreeMap<i64, Vec<VectorSample>>>,
    /// Which input series made each output label set of a call of a
    /// range-vector function, by node.
    outputs: LabelMap<(usize, Labels), Labels>,
    /// Results computed for every step at once, by node (see
    /// [`Eval::step_rows`]).
    step_rows: HashMap<usize, Option<Vec<Vec<VectorSample>>>>,
    /// Samples held by the answer so far (range queries).
    held: usize,
    /// Samples held now: the answer so far and this step's values.
    current: usize,
}

impl<'a> Evaluator<'a> {
    /// Reads every selector's series for the whole query from `storage`.
    pub(super) fn new(
        storage: &dyn Storage,
        opts: &'a EngineOptions,
        range: QueryRange,
        stop: Stop<'a>,
        expr: &Expr,
    ) -> Result<Evaluator<'a>, PromError> {
        let mut ev = Evaluator {
            opts,
            range,
            stop,
            selected: Selected::new(opts.lookback_ms, range, opts.max_samples),
            derived: LabelMap::default(),
            subquery_steps: HashMap::new(),
            outputs: LabelMap::default(),
            step_rows: HashMap::new(),
            held: 0,
            current: 0,
        };
        if range.end_ms > range.start_ms {
            plan_walks(expr, &mut ev.selected);
        }
        ev.selected
            .prefetch(storage, expr, range.start_ms, range.end_ms)?;
        if ev.selected.loaded() > opts.max_samples {
            return Err(PromError::too_many_samples());
        }
        ev.check_deadline()?;
        Ok(ev)
    }

    /// Evaluates at the one time of an instant query.
    pub(super) fn instant(&mut self, expr: &Expr) -> Result<QueryValue, PromError> {
        let t = self.range.start_ms;
        Ok(match self.eval(expr, t)? {
            StepValue::Scalar(v) => QueryValue::Scalar(Sample { t, v }),
            StepValue::String(value) => QueryValue::String { t, value },
            StepValue::Vector(v) => QueryValue::Vector(v),
            StepValue::Matrix(m) => QueryValue::Matrix(m),
        })
    }

    /// Evaluates at every step of a range query: a matrix sorted by
    /// labels, each series with a point at the steps it had a value at.
    pub(super) fn range(&mut self, expr: &Expr) -> Result<QueryValue, PromError> {
        let QueryRange {
            start_ms,
            end_ms,
            step_ms,
        } = self.range;
        let mut out: Vec<Series> = Vec::new();
        let mut gather = Gather::default();
        let mut t = start_ms;
        while t <= end_ms {
            self.check_deadline()?;
            self.current = self.held;
            match self.eval(expr, t)? {
                StepValue::Scalar(v) => {
                    if out.is_empty() {
                        out.push(Series {
                            labels: Labels::default(),
                            samples: Vec::new(),
                        });
                    }
                    out[0].samples.push(Sample { t, v });
                    self.held += 1;
                }
                StepValue::Vector(vec) => {
                    self.held += vec.len();
                    gather.add(&mut out, vec, t);
                }
                other => {
                    return Err(PromError::bad_data(format!(
                        "invalid expression type \"{}\" for range query, must be Scalar or instant Vector",
                        other.kind()
                    )));
                }
            }
            if self.held > self.opts.max_samples {
                return Err(PromError::too_many_samples());
            }
            t = match t.checked_add(step_ms) {
                Some(n) => n,
                None => break,
            };
        }
        out.sort_by(|a, b| a.labels.cmp(&b.labels));
        Ok(QueryValue::Matrix(out))
    }

    /// A `canceled` error once an operator cancelled the query, a
    /// `timeout` error once it has run past its time.
    pub(super) fn check_deadline(&self) -> Result<(), PromError> {
        self.stop.check()
    }
}

impl Eval for Evaluator<'_> {
    /// Evaluates `expr` at time `t`.
    fn eval(&mut self, expr: &Expr, t: i64) -> Result<StepValue, PromError> {
        match expr {
            Expr::Aggregate(a) => aggregate::eval(self, a, t),
            Expr::Unary(u) => match self.eval(&u.expr, t)? {
                StepValue::Scalar(v) => Ok(StepValue::Scalar(-v)),
                StepValue::Vector(vec) => {
                    let node = u as *const UnaryExpr as usize;
                    let out: Vec<VectorSample> = vec
                        .into_iter()
                        .map(|s| VectorSample {
                            labels: self.derive(node, &s.labels, Labels::without_name),
                            t: s.t,
                            v: -s.v,
                        })
                        .collect();
                    check_unique(&out)?;
                    Ok(StepValue::Vector(out))
                }
                other => Err(PromError::bad_data(format!(
                    "unary expression only allowed on expressions of type scalar or instant vector, got \"{}\"",
                    other.kind()
                ))),
            },
            Expr::Binary(b) => binary::eval(self, b, t),
            Expr::Paren(p) => self.eval(&p.expr, t),
            Expr::Subquery(s) => Ok(StepValue::Matrix(self.subquery(s, t)?.0)),
            Expr::NumberLiteral(n) => Ok(StepValue::Scalar(n.val)),
            Expr::StringLiteral(s) => Ok(StepValue::String(s.val.clone())),
            Expr::VectorSelector(vs) => {
                let v = self.selected.instant(vs, t, false)?;
                self.hold(v.len())?;
                Ok(StepValue::Vector(v))
            }
            Expr::MatrixSelector(ms) => {
                let w = self.selected.window(ms, t)?;
                self.hold(w.series.iter().map(|s| s.samples.len()).sum())?;
                Ok(StepValue::Matrix(w.series))
            }
            Expr::Call(c) => calls::eval(self, c, t),
            Expr::Extension(_) => Err(PromError::internal(
                "the parser produced an extension expression",
            )),
        }
    }

    /// Counts `n` more samples held at this step; an `execution` error
    /// past `max_samples`.
    fn hold(&mut self, n: usize) -> Result<(), PromError> {
        self.current += n;
        if self.current > self.opts.max_samples {
            return Err(PromError::too_many_samples());
        }
        Ok(())
    }

    /// The label set `f` derives from `labels` for the tree node at
    /// `node`, built once per query for each input label set.
    fn derive(
        &mut self,
        node: usize,
        labels: &Labels,
        f: impl FnOnce(&Labels) -> Labels,
    ) -> Labels {
        if let Some(d) = self.derived.get(&(node, labels.clone())) {
            return d.clone();
        }
        let d = f(labels);
        self.derived.insert((node, labels.clone()), d.clone());
        d
    }

    /// A subquery at `t`: the inner expression evaluated at every
    /// multiple of the subquery's step in `[ref − offset − range, ref −
    /// offset]` (`ref` is `t` or the `@` time), as series of those
    /// points; and the window's ends.
    fn subquery(
        &mut self,
        sq: &SubqueryExpr,
        t: i64,
    ) -> Result<(Vec<Series>, i64, i64), PromError> {
        let reference = match &sq.at {
            Some(at) => selectors::at_ms(at, &self.range),
            None => t,
        };
        let end = reference - selectors::offset_ms(&sq.offset);
        let range = sq.range.as_millis() as i64;
        let start = end - range;
        let step = match sq.step {
            Some(s) if s.as_millis() > 0 => s.as_millis() as i64,
            _ => self.opts.default_subquery_step_ms,
        };
        let mut first = start.div_euclid(step) * step;
        if first < start {
            first += step;
        }
        let node = sq as *const SubqueryExpr as usize;
        // Inner steps before this window will not be asked for again by
        // later (later or equal) outer steps.
        if let Some(cache) = self.subquery_steps.get_mut(&node) {
            *cache = cache.split_off(&first);
        }
        let mut out: Vec<Series> = Vec::new();
        let mut gather = Gather::default();
        let mut ti = first;
        while ti <= end {
            self.check_deadline()?;
            let cached = self
                .subquery_steps
                .get(&node)
                .and_then(|c| c.get(&ti))
                .cloned();
            let vec = match cached {
                Some(v) => v,
                None => {
                    let v = self.eval_vector(&sq.expr, ti)?;
                    self.subquery_steps
                        .entry(node)
                        .or_default()
                        .insert(ti, v.clone());
                    v
                }
            };
            self.hold(vec.len())?;
            gather.add(&mut out, vec, ti);
            ti += step;
        }
        Ok((out, start, end))
    }

    fn claim(&mut self, node: usize, output: &Labels, input: &Labels) -> Result<(), PromError> {
        match self.outputs.get(&(node, output.clone())) {
            Some(first) if first != input => Err(PromError::execution(
                "vector cannot contain metrics with the same labelset",
            )),
            Some(_) => Ok(()),
            None => {
                self.outputs.insert((node, output.clone()), input.clone());
                Ok(())
            }
        }
    }

    fn step_rows(&mut self) -> &mut HashMap<usize, Option<Vec<Vec<VectorSample>>>> {
        &mut self.step_rows
    }

    fn max_samples(&self) -> usize {
        self.opts.max_samples
    }

    fn selected(&self) -> &Selected {
        &self.selected
    }

    fn stop(&self) -> Stop<'_> {
        self.stop
    }
}

/// Marks the selectors of a range query that only a series walk uses, at
/// the query's own steps, to be read as that walk's values (computed
/// where the samples are read, on the store's read threads): a range
/// function of one range selector (`rate(x[1m])`), and a plain selector or
/// such a call under a parameterless aggregation (`sum(x)`,
/// `avg(avg_over_time(x[1m]))`). Nothing under a subquery, whose inner
/// steps are not the query's.
fn plan_walks(expr: &Expr, selected: &mut Selected) {
    match expr {
        Expr::Aggregate(a) => {
            let walk = SeriesWalk::of(&a.expr)
                .filter(|_| a.param.is_none() && aggregate::folds_walks(a.op.id()));
            match walk {
                Some(w) => {
                    let (vs, how) = w.reads();
                    selected.pre_walk(vs, how);
                }
                None => {
                    if let Some(p) = &a.param {
                        plan_walks(p, selected);
                    }
                    plan_walks(&a.expr, selected);
                }
            }
        }
        Expr::Call(c) => match SeriesWalk::of_call(c) {
            Some(w) => {
                let (vs, how) = w.reads();
                selected.pre_walk(vs, how);
            }
            None => c.args.args.iter().for_each(|a| plan_walks(a, selected)),
        },
        Expr::Unary(u) => plan_walks(&u.expr, selected),
        Expr::Binary(b) => {
            plan_walks(&b.lhs, selected);
            plan_walks(&b.rhs, selected);
        }
        Expr::Paren(p) => plan_walks(&p.expr, selected),
        Expr::Subquery(_)
        | Expr::VectorSelector(_)
        | Expr::MatrixSelector(_)
        | Expr::NumberLiteral(_)
        | Expr::StringLiteral(_)
        | Expr::Extension(_) => {}
    }
}

/// Gathers the vectors of successive steps into series by labels.
#[derive(Default)]
struct Gather {
    index: LabelMap<Labels, usize>,
    /// The series each position of the last step's vector went to: most
    /// steps list the same series in the same order, and a shared label
    /// set compares equal by pointer, so most elements skip the map.
    last: Vec<usize>,
}

impl Gather {
    fn add(&mut self, out: &mut Vec<Series>, vec: Vec<VectorSample>, t: i64) {
        for (pos, s) in vec.into_iter().enumerate() {
            let hinted = self
                .last
                .get(pos)
                .copied()
                .filter(|&i| out[i].labels == s.labels);
            let i = match hinted {
                Some(i) => i,
                None => *self.index.entry(s.labels.clone()).or_insert_with(|| {
                    out.push(Series {
                        labels: s.labels,
                        samples: Vec::new(),
                    });
                    out.len() - 1
                }),
            };
            match self.last.get_mut(pos) {
                Some(slot) => *slot = i,
                None => self.last.push(i),
            }
            out[i].samples.push(Sample { t, v: s.v });
        }
    }
}
