//! `histogram_quantile` over classic histograms (one series per bucket,
//! its upper bound in the `le` label, counts cumulative), as Prometheus
//! 2.42 computes it; and the native-histogram functions of 2.42
//! (`histogram_count`, `histogram_sum`, `histogram_fraction`), which skip
//! every float sample: rtsdb stores no native histogram (remote write
//! refuses them), so they always answer an empty vector, as 2.42 does
//! for float series.

use std::collections::HashMap;

use super::{FnContext, at_step};
use crate::promql::value::{Labels, METRIC_NAME, VectorSample};

/// The label that holds a classic histogram bucket's upper bound.
pub const BUCKET_LABEL: &str = "le";

/// One bucket: its upper bound and the cumulative count up to it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Bucket {
    upper_bound: f64,
    count: f64,
}

/// The buckets of one histogram (series equal but for `le`).
#[derive(Debug)]
struct BucketGroup {
    /// The answer's labels: the first bucket's, without `__name__` and `le`.
    labels: Labels,
    buckets: Vec<Bucket>,
}

/// `histogram_quantile(q, buckets)`: groups the input by every label but
/// `le` (the metric name included, so two histograms that differ only by
/// name stay apart), and gives each group's `q`-quantile. Samples whose
/// `le` is missing or not a number are skipped. The answers drop
/// `__name__` and `le`; they come in the order each group first appears.
pub fn histogram_quantile(q: f64, input: Vec<VectorSample>, ctx: &FnContext) -> Vec<VectorSample> {
    let mut index: HashMap<Labels, usize> = HashMap::new();
    let mut groups: Vec<BucketGroup> = Vec::new();
    for sample in input {
        let Some(upper_bound) = parse_go_float(sample.labels.get(BUCKET_LABEL)) else {
            continue;
        };
        let mut key = sample.labels;
        key.remove(BUCKET_LABEL);
        let bucket = Bucket {
            upper_bound,
            count: sample.v,
        };
        match index.get(&key) {
            Some(&i) => groups[i].buckets.push(bucket),
            None => {
                let mut labels = key.clone();
                labels.remove(METRIC_NAME);
                index.insert(key, groups.len());
                groups.push(BucketGroup {
                    labels,
                    buckets: vec![bucket],
                });
            }
        }
    }
    groups
        .into_iter()
        .map(|mut g| {
            let v = bucket_quantile(q, &mut g.buckets);
            at_step(g.labels, v, ctx)
        })
        .collect()
}

/// 2.42's `bucketQuantile`: NaN for q = NaN, no `+Inf` bucket, fewer than
/// two buckets or no observation; -Inf/+Inf for q below 0/above 1.
/// Buckets are sorted by bound, equal bounds merged, counts made
/// monotonic; the quantile is interpolated linearly inside its bucket
/// (from 0 in the first one when its bound is positive; the first bound
/// itself when it is not), and the highest finite bound answers for the
/// `+Inf` bucket.
fn bucket_quantile(q: f64, buckets: &mut Vec<Bucket>) -> f64 {
    if q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    buckets.sort_by(|a, b| {
        a.upper_bound
            .partial_cmp(&b.upper_bound)
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    match buckets.last() {
        Some(b) if b.upper_bound == f64::INFINITY => {}
        _ => return f64::NAN,
    }
    coalesce(buckets);
    ensure_monotonic(buckets);
    if buckets.len() < 2 {
        return f64::NAN;
    }
    let observations = buckets[buckets.len() - 1].count;
    if observations == 0.0 {
        return f64::NAN;
    }
    let mut rank = q * observations;
    // The first bucket (the +Inf one excluded) whose count reaches the
    // rank, else the +Inf bucket.
    let last = buckets.len() - 1;
    let b = buckets[..last].partition_point(|bucket| bucket.count < rank);
    if b == last {
        return buckets[last - 1].upper_bound;
    }
    if b == 0 && buckets[0].upper_bound <= 0.0 {
        return buckets[0].upper_bound;
    }
    let bucket_end = buckets[b].upper_bound;
    let mut count = buckets[b].count;
    let mut bucket_start = 0.0;
    if b > 0 {
        bucket_start = buckets[b - 1].upper_bound;
        count -= buckets[b - 1].count;
        rank -= buckets[b - 1].count;
    }
    bucket_start + (bucket_end - bucket_start) * (rank / count)
}

/// Merges adjacent buckets of equal bound (summing their counts).
fn coalesce(buckets: &mut Vec<Bucket>) {
    let mut merged: Vec<Bucket> = Vec::with_capacity(buckets.len());
    for b in buckets.iter() {
        match merged.last_mut() {
            Some(last) if last.upper_bound == b.upper_bound => last.count += b.count,
            _ => merged.push(*b),
        }
    }
    *buckets = merged;
}

/// Raises any count below an earlier one to it (scrapes are not atomic, so
/// a higher bucket can lag a lower one).
fn ensure_monotonic(buckets: &mut [Bucket]) {
    let mut max = buckets[0].count;
    for b in buckets.iter_mut().skip(1) {
        if b.count > max {
            max = b.count;
        } else if b.count < max {
            b.count = max;
        }
    }
}

/// A bucket bound as Go's `strconv.ParseFloat` reads it: decimal (with
/// optional sign and exponent), `Inf`/`+Inf`/`-Inf`/`Infinity` and an
/// unsigned `NaN` in any case; None for anything else and for a finite number too large
/// for a float (Go's range error). Hexadecimal floats are not read.
fn parse_go_float(text: &str) -> Option<f64> {
    let v: f64 = text.parse().ok()?;
    if v.is_nan() && text.starts_with(['+', '-']) {
        // Go takes a sign before "Inf" only.
        return None;
    }
    if v.is_infinite() {
        let unsigned = text.trim_start_matches(['+', '-']).to_ascii_lowercase();
        if unsigned != "inf" && unsigned != "infinity" {
            return None;
        }
    }
    Some(v)
}

/// `histogram_count(v)`, `histogram_sum(v)`, `histogram_fraction(lo, hi,
/// v)`: the native-histogram samples of `v`, of which there are none
/// (every sample rtsdb holds is a float, and 2.42 skips float samples).
pub fn native_histogram_function(_input: &[VectorSample]) -> Vec<VectorSample> {
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CTX: FnContext = FnContext { eval_ms: 5_000 };

    fn bucket(name: &str, job: &str, le: &str, v: f64) -> VectorSample {
        VectorSample {
            labels: Labels::from_pairs([("__name__", name), ("job", job), ("le", le)]),
            t: 5_000,
            v,
        }
    }

    fn hq(q: f64, input: Vec<VectorSample>) -> Vec<VectorSample> {
        histogram_quantile(q, input, &CTX)
    }

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() <= 1e-12 * b.abs().max(1.0), "{a} != {b}");
    }

    fn standard(job: &str) -> Vec<VectorSample> {
        // 10 under 0.1, 30 under 0.5, 40 under 1, 40 in all.
        vec![
            bucket("h", job, "+Inf", 40.0),
            bucket("h", job, "0.1", 10.0),
            bucket("h", job, "1", 40.0),
            bucket("h", job, "0.5", 30.0),
        ]
    }

    #[test]
    fn interpolates_inside_the_bucket() {
        // q=0.5: rank 20, in (0.1, 0.5] holding 20 → 0.1 + 0.4·10/20.
        let out = hq(0.5, standard("a"));
        assert_eq!(out.len(), 1);
        close(out[0].v, 0.3);
        assert_eq!(out[0].labels, Labels::from_pairs([("job", "a")]));
        assert_eq!(out[0].t, 5_000);
        // q=0.1: rank 4 in the first bucket, from 0: 0.1·4/10.
        close(hq(0.1, standard("a"))[0].v, 0.04);
        // q=1: rank 40, reached by bucket 1.
        close(hq(1.0, standard("a"))[0].v, 1.0);
    }

    #[test]
    fn rank_in_the_inf_bucket_gives_the_highest_finite_bound() {
        let input = vec![
            bucket("h", "a", "1", 10.0),
            bucket("h", "a", "2", 20.0),
            bucket("h", "a", "+Inf", 100.0),
        ];
        assert_eq!(hq(0.9, input)[0].v, 2.0);
    }

    #[test]
    fn groups_by_labels_but_le() {
        let mut input = standard("a");
        input.extend(standard("b"));
        input.push(bucket("h", "c", "not-a-number", 5.0));
        let out = hq(0.5, input);
        let jobs: Vec<&str> = out.iter().map(|s| s.labels.get("job")).collect();
        assert_eq!(jobs, ["a", "b"]);
    }

    #[test]
    fn nan_and_out_of_range_cases() {
        assert!(hq(f64::NAN, standard("a"))[0].v.is_nan());
        assert_eq!(hq(-1.0, standard("a"))[0].v, f64::NEG_INFINITY);
        assert_eq!(hq(1.5, standard("a"))[0].v, f64::INFINITY);
        // No +Inf bucket.
        let no_inf = vec![bucket("h", "a", "1", 1.0), bucket("h", "a", "2", 2.0)];
        assert!(hq(0.5, no_inf)[0].v.is_nan());
        // Only the +Inf bucket.
        assert!(hq(0.5, vec![bucket("h", "a", "+Inf", 3.0)])[0].v.is_nan());
        // No observation.
        let empty = vec![bucket("h", "a", "1", 0.0), bucket("h", "a", "+Inf", 0.0)];
        assert!(hq(0.5, empty)[0].v.is_nan());
    }

    #[test]
    fn non_positive_first_bound_is_returned_as_is() {
        let input = vec![
            bucket("h", "a", "-1", 10.0),
            bucket("h", "a", "1", 20.0),
            bucket("h", "a", "+Inf", 20.0),
        ];
        assert_eq!(hq(0.25, input)[0].v, -1.0);
    }

    #[test]
    fn counts_are_made_monotonic_and_equal_bounds_merged() {
        // The 1 bucket lags (5 < 10): raised to 10, so q=0.5 (rank 10)
        // lands in the first bucket: 0.5·10/10.
        let lagging = vec![
            bucket("h", "a", "0.5", 10.0),
            bucket("h", "a", "1", 5.0),
            bucket("h", "a", "+Inf", 20.0),
        ];
        close(hq(0.5, lagging)[0].v, 0.5);
        // "1.0" and "1" are the same bound: counts add (4+4 = 8).
        let dup = vec![
            bucket("h", "a", "1.0", 4.0),
            bucket("h", "a", "1", 4.0),
            bucket("h", "a", "2", 8.0),
            bucket("h", "a", "+Inf", 8.0),
        ];
        // rank 4 of 8 in the first bucket [0, 1] holding 8 → 0.5.
        close(hq(0.5, dup)[0].v, 0.5);
    }

    #[test]
    fn bounds_parse_as_go_does() {
        assert_eq!(parse_go_float("+Inf"), Some(f64::INFINITY));
        assert_eq!(parse_go_float("-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_go_float("Infinity"), Some(f64::INFINITY));
        assert_eq!(parse_go_float("0.25"), Some(0.25));
        assert_eq!(parse_go_float("1e3"), Some(1000.0));
        assert!(parse_go_float("NaN").unwrap().is_nan());
        assert_eq!(parse_go_float("+NaN"), None);
        assert_eq!(parse_go_float("1e400"), None);
        assert_eq!(parse_go_float(""), None);
        assert_eq!(parse_go_float(" 1"), None);
    }

    #[test]
    fn native_histogram_functions_skip_floats() {
        assert!(native_histogram_function(&standard("a")).is_empty());
    }
}
