//! The one seam the evaluator reads through: series chosen by label
//! matchers, with their samples in a time range.

use promql_parser::label::Matcher;

use super::error::PromError;
use super::value::{Labels, Sample};

/// A stored series as the evaluator reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredSeries {
    pub labels: Labels,
    /// Samples in `[start_ms, end_ms]`, in time order, one per
    /// timestamp, stale markers ([`super::value::STALE_NAN_BITS`])
    /// included as stored.
    pub samples: Vec<Sample>,
}

/// Where PromQL's series come from. Matchers follow Prometheus: every one
/// must match, a label a series does not have matches as "" (so
/// `{l=""}` selects series without `l`), regexps are anchored, and
/// `__name__` is the metric name.
pub trait Storage: Sync {
    /// The series matching every matcher that have a sample in
    /// `[start_ms, end_ms]` (both ends included), with those samples.
    fn select(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<StoredSeries>, PromError>;

    /// The label sets of the series matching any one of `sets` (each a
    /// list of matchers that must all match) with data in the range,
    /// sorted, each once (`/api/v1/series`).
    fn series(
        &self,
        sets: &[Vec<Matcher>],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<Labels>, PromError>;

    /// The label names of those series, or of every series when `sets`
    /// is empty, sorted (`/api/v1/labels`).
    fn label_names(
        &self,
        sets: &[Vec<Matcher>],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<String>, PromError>;

    /// The values `name` has in those series, or in every series when
    /// `sets` is empty, sorted (`/api/v1/label/<name>/values`).
    fn label_values(
        &self,
        name: &str,
        sets: &[Vec<Matcher>],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<String>, PromError>;
}
