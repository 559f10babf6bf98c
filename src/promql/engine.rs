//! Parsing and evaluation of PromQL queries over a [`Storage`], with
//! Prometheus 2.42's semantics.
//!
//! A query is parsed once ([`parse`]), its selectors read from storage
//! once for the whole query range ([`selectors`]), then evaluated step by
//! step ([`eval`]): an instant query is one step, a range query one
//! evaluation per step whose vectors are gathered into a matrix.
//! Binary operators live in [`binary`], aggregations in [`aggregate`],
//! function calls (and the calls the engine answers itself: `absent`,
//! `absent_over_time`, `timestamp` of a selector) in [`calls`].

mod aggregate;
mod binary;
mod calls;
mod eval;
mod nesting;
mod parse;
mod regexes;
mod selectors;
mod step;
mod walk;

use std::sync::Arc;
use std::time::{Duration, Instant};

use promql_parser::parser::value::ValueType;

use super::error::PromError;
use super::storage::Storage;
use super::value::QueryValue;
use crate::query::QueryProgress;
use eval::Evaluator;
use selectors::QueryRange;
use step::Stop;

pub use parse::parse_query;

/// How the engine evaluates: Prometheus 2.42's defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineOptions {
    /// How far back an instant selector looks for a sample (5 minutes).
    pub lookback_ms: i64,
    /// At most this many samples held at once by one query
    /// (`--query.max-samples`, 50 million).
    pub max_samples: usize,
    /// A query running longer is stopped with a `timeout` error
    /// (`--query.timeout`, 2 minutes).
    pub timeout: Duration,
    /// The step of a subquery that names none (the evaluation interval,
    /// 1 minute).
    pub default_subquery_step_ms: i64,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            lookback_ms: 5 * 60 * 1000,
            max_samples: 50_000_000,
            timeout: Duration::from_secs(120),
            default_subquery_step_ms: 60 * 1000,
        }
    }
}

/// The PromQL engine.
#[derive(Debug, Clone, Default)]
pub struct Engine {
    pub options: EngineOptions,
    /// The watched query's progress: a cancel stops the evaluation at its
    /// next step with a `canceled` error.
    progress: Option<Arc<QueryProgress>>,
}

impl Engine {
    pub fn new(options: EngineOptions) -> Engine {
        Engine {
            options,
            progress: None,
        }
    }

    /// The engine stopping when `progress` is cancelled (the server's
    /// `DELETE /api/stats/query`).
    pub fn watching(mut self, progress: Arc<QueryProgress>) -> Engine {
        self.progress = Some(progress);
        self
    }

    fn stop(&self) -> Stop<'_> {
        Stop {
            deadline: Instant::now() + self.options.timeout,
            progress: self.progress.as_deref(),
        }
    }

    /// Evaluates `query` at `time_ms` (`/api/v1/query`).
    pub fn instant(
        &self,
        storage: &dyn Storage,
        query: &str,
        time_ms: i64,
    ) -> Result<QueryValue, PromError> {
        let expr = parse_query(query)?;
        let range = QueryRange {
            start_ms: time_ms,
            end_ms: time_ms,
            step_ms: 1,
        };
        let mut ev = Evaluator::new(storage, &self.options, range, self.stop(), &expr)?;
        ev.instant(&expr)
    }

    /// Evaluates `query` at every step from `start_ms` to `end_ms`
    /// (`/api/v1/query_range`): a matrix, or a bad_data error for a query
    /// whose type is not a scalar or an instant vector.
    pub fn range(
        &self,
        storage: &dyn Storage,
        query: &str,
        start_ms: i64,
        end_ms: i64,
        step_ms: i64,
    ) -> Result<QueryValue, PromError> {
        let expr = parse_query(query)?;
        match expr.value_type() {
            ValueType::Scalar | ValueType::Vector => {}
            ValueType::Matrix => return Err(range_type_error("range vector")),
            ValueType::String => return Err(range_type_error("string")),
        }
        if step_ms <= 0 {
            return Err(PromError::bad_data(
                "zero or negative query resolution step widths are not accepted. Try a positive integer",
            ));
        }
        if end_ms < start_ms {
            return Err(PromError::bad_data(
                "end timestamp must not be before start time",
            ));
        }
        let range = QueryRange {
            start_ms,
            end_ms,
            step_ms,
        };
        let mut ev = Evaluator::new(storage, &self.options, range, self.stop(), &expr)?;
        ev.range(&expr)
    }
}

fn range_type_error(kind: &str) -> PromError {
    PromError::bad_data(format!(
        "invalid expression type \"{kind}\" for range query, must be Scalar or instant Vector"
    ))
}

#[cfg(test)]
mod tests;
