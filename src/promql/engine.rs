//! Parsing and evaluation of PromQL queries over a [`Storage`].

use std::time::Duration;

use super::error::PromError;
use super::storage::Storage;
use super::value::QueryValue;

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
}

impl Engine {
    pub fn new(options: EngineOptions) -> Engine {
        Engine { options }
    }

    /// Evaluates `query` at `time_ms` (`/api/v1/query`).
    pub fn instant(
        &self,
        _storage: &dyn Storage,
        _query: &str,
        _time_ms: i64,
    ) -> Result<QueryValue, PromError> {
        Err(PromError::internal("the PromQL evaluator is being built"))
    }

    /// Evaluates `query` at every step from `start_ms` to `end_ms`
    /// (`/api/v1/query_range`): a matrix, or a bad_data error for a query
    /// whose type is not a scalar or an instant vector.
    pub fn range(
        &self,
        _storage: &dyn Storage,
        _query: &str,
        _start_ms: i64,
        _end_ms: i64,
        _step_ms: i64,
    ) -> Result<QueryValue, PromError> {
        Err(PromError::internal("the PromQL evaluator is being built"))
    }
}
