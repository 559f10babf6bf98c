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

impl StoredSeries {
    /// The samples in time order: the stores promise it, and every
    /// lookup of the evaluator is a binary search, so a store that broke
    /// the promise is mended here rather than answered wrongly.
    pub fn samples_in_order(mut samples: Vec<Sample>) -> Vec<Sample> {
        if !samples.is_sorted_by_key(|x| x.t) {
            samples.sort_by_key(|x| x.t);
        }
        samples
    }
}

/// A series' value at one step of a range query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepSample {
    /// The step's index (0 is the query's start).
    pub step: u32,
    pub v: f64,
}

/// What [`Storage::select_mapped`] keeps of a series: its labels and
/// what the map made of its samples.
#[derive(Debug, Clone, PartialEq)]
pub struct SteppedSeries {
    pub labels: Labels,
    pub steps: Vec<StepSample>,
}

/// The evaluator's walk of one series over a range query's steps, given
/// the series' samples in time order: run where the samples are read, so
/// that a store that reads on several threads walks on them too.
pub type SeriesMap<'m> = dyn Fn(&[Sample]) -> Vec<StepSample> + Sync + 'm;

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

    /// [`select`](Self::select), keeping of each series only what `map`
    /// makes of its samples (in time order), in the same order.
    fn select_mapped(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        map: &SeriesMap<'_>,
    ) -> Result<Vec<SteppedSeries>, PromError> {
        Ok(self
            .select(matchers, start_ms, end_ms)?
            .into_iter()
            .map(|s| SteppedSeries {
                steps: map(&StoredSeries::samples_in_order(s.samples)),
                labels: s.labels,
            })
            .collect())
    }

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
