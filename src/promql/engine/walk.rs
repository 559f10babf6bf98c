//! Instant-vector expressions that a range query computes series by
//! series over all its steps at once, rather than step by step: a plain
//! selector, and a range function of one argument over a range selector
//! (`rate(x[5m])`, `avg_over_time(x[1m])`). Each series' samples are read
//! once, in order, and no per-step vector of labelled samples is built;
//! calls and aggregations over these expressions use the walk
//! (`calls::call_grid`, `aggregate::over_walk`).

use promql_parser::parser::{Call, Expr, MatrixSelector, VectorSelector};

use super::selectors::{PreWalk, Selected};
use super::step::{LabelSet, unparen};
use crate::promql::error::PromError;
use crate::promql::functions::range::RangeFn;
use crate::promql::value::Labels;

/// An expression a range query can walk series by series.
#[derive(Clone, Copy)]
pub(super) enum SeriesWalk<'e> {
    /// A plain instant selector.
    Selector(&'e VectorSelector),
    /// A one-argument range function of a range selector.
    Range(RangeFn, &'e MatrixSelector),
}

impl<'e> SeriesWalk<'e> {
    /// The walk `expr` is, if it is one.
    pub(super) fn of(expr: &'e Expr) -> Option<SeriesWalk<'e>> {
        match unparen(expr) {
            Expr::VectorSelector(vs) => Some(SeriesWalk::Selector(vs)),
            Expr::Call(c) => Self::of_call(c),
            _ => None,
        }
    }

    /// The walk call `c` is, if it is one.
    pub(super) fn of_call(c: &'e Call) -> Option<SeriesWalk<'e>> {
        let f = RangeFn::from_name(c.func.name)?;
        match c.args.args.as_slice() {
            [arg] => match unparen(arg) {
                Expr::MatrixSelector(ms) => Some(SeriesWalk::Range(f, ms)),
                _ => None,
            },
            _ => None,
        }
    }

    /// The labels of each series' values, in the order the walk indexes
    /// the series (a range function drops `__name__` unless it keeps it).
    pub(super) fn labels(&self, selected: &Selected) -> Vec<Labels> {
        let labels = selected.series_labels(self.reads().0);
        match self {
            SeriesWalk::Range(f, _) if !f.keeps_name() => {
                labels.iter().map(Labels::without_name).collect()
            }
            _ => labels,
        }
    }

    /// The selector the walk reads, and how it would read it alone.
    pub(super) fn reads(&self) -> (&'e VectorSelector, PreWalk) {
        match *self {
            SeriesWalk::Selector(vs) => (vs, PreWalk::Instant),
            SeriesWalk::Range(f, ms) => (&ms.vs, PreWalk::Range(f)),
        }
    }

    /// How many series the walk indexes.
    pub(super) fn series_count(&self, selected: &Selected) -> usize {
        selected.series_count(self.reads().0)
    }

    /// Calls `f(series, step, value)` for every value, series by series,
    /// steps in order within a series.
    pub(super) fn walk(
        &self,
        selected: &Selected,
        f: impl FnMut(u32, usize, f64) -> Result<(), PromError>,
    ) -> Result<(), PromError> {
        match self {
            SeriesWalk::Selector(vs) => selected.walk_instant(vs, f),
            SeriesWalk::Range(func, ms) => selected.walk_range(*func, ms, f),
        }
    }
}

/// 2.42's check of a range function's whole result matrix: two series
/// that gave values (at any steps) may not carry the same labels, as
/// they can once the name is dropped. `gave[i]` says whether series `i`
/// gave any.
pub(super) fn check_distinct(labels: &[Labels], gave: &[bool]) -> Result<(), PromError> {
    let mut seen: LabelSet<&Labels> = LabelSet::default();
    for (l, _) in labels.iter().zip(gave).filter(|(_, g)| **g) {
        if !seen.insert(l) {
            return Err(PromError::execution(
                "vector cannot contain metrics with the same labelset",
            ));
        }
    }
    Ok(())
}
