//! The functions of a range vector that look at one series' window at a
//! time: `rate`, `increase`, `delta` (Prometheus 2.42's extrapolated
//! rate), `irate`, `idelta`, `resets`, `changes`, and every
//! `*_over_time`.
//!
//! Those of one argument are [`RangeFn`]s: a function of one series'
//! samples and its window, which the engine also calls directly while it
//! walks a series' windows step by step (no per-step argument built).
//! As in 2.42, a series with no sample in the window gives no element,
//! and every function but `last_over_time` drops `__name__` (which acts
//! like `offset` and keeps it).

use super::stats::{kahan_sum_inc, quantile};
use super::{FnContext, RangeArg, at_step};
use crate::promql::value::{Sample, VectorSample};

/// A range selector's window at one step, both ends included (2.42).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start_ms: i64,
    pub end_ms: i64,
}

/// The range-vector functions of one argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeFn {
    Rate,
    Increase,
    Delta,
    Irate,
    Idelta,
    Resets,
    Changes,
    AvgOverTime,
    SumOverTime,
    CountOverTime,
    MinOverTime,
    MaxOverTime,
    LastOverTime,
    PresentOverTime,
    StddevOverTime,
    StdvarOverTime,
}

impl RangeFn {
    /// The function called `name`, if it is one of these.
    pub fn from_name(name: &str) -> Option<RangeFn> {
        Some(match name {
            "rate" => RangeFn::Rate,
            "increase" => RangeFn::Increase,
            "delta" => RangeFn::Delta,
            "irate" => RangeFn::Irate,
            "idelta" => RangeFn::Idelta,
            "resets" => RangeFn::Resets,
            "changes" => RangeFn::Changes,
            "avg_over_time" => RangeFn::AvgOverTime,
            "sum_over_time" => RangeFn::SumOverTime,
            "count_over_time" => RangeFn::CountOverTime,
            "min_over_time" => RangeFn::MinOverTime,
            "max_over_time" => RangeFn::MaxOverTime,
            "last_over_time" => RangeFn::LastOverTime,
            "present_over_time" => RangeFn::PresentOverTime,
            "stddev_over_time" => RangeFn::StddevOverTime,
            "stdvar_over_time" => RangeFn::StdvarOverTime,
            _ => return None,
        })
    }

    /// Whether the answer keeps the series' `__name__` (only
    /// `last_over_time`, which acts like `offset`).
    pub fn keeps_name(self) -> bool {
        self == RangeFn::LastOverTime
    }

    /// The function of one series' samples in `window` (stale markers
    /// already removed); None where 2.42 gives no element (no sample, or
    /// fewer than the function needs).
    pub fn apply(self, samples: &[Sample], window: Span) -> Option<f64> {
        if samples.is_empty() {
            return None;
        }
        let rate = |counter, per_second| {
            extrapolated_rate(
                samples,
                window,
                RateKind {
                    counter,
                    per_second,
                },
            )
        };
        match self {
            RangeFn::Rate => rate(true, true),
            RangeFn::Increase => rate(true, false),
            RangeFn::Delta => rate(false, false),
            RangeFn::Irate => instant_value(samples, true),
            RangeFn::Idelta => instant_value(samples, false),
            RangeFn::Resets => Some(samples.windows(2).filter(|w| w[1].v < w[0].v).count() as f64),
            RangeFn::Changes => {
                // NaN to NaN is no change.
                let changed =
                    |w: &[Sample]| w[1].v != w[0].v && !(w[1].v.is_nan() && w[0].v.is_nan());
                Some(samples.windows(2).filter(|w| changed(w)).count() as f64)
            }
            RangeFn::AvgOverTime => Some(average(samples)),
            RangeFn::SumOverTime => {
                let (mut sum, mut c) = (0.0f64, 0.0f64);
                for p in samples {
                    (sum, c) = kahan_sum_inc(p.v, sum, c);
                }
                Some(if sum.is_infinite() { sum } else { sum + c })
            }
            RangeFn::CountOverTime => Some(samples.len() as f64),
            // NaN only when every value is NaN.
            RangeFn::MinOverTime => Some(samples.iter().fold(samples[0].v, |min, p| {
                if p.v < min || min.is_nan() { p.v } else { min }
            })),
            RangeFn::MaxOverTime => Some(samples.iter().fold(samples[0].v, |max, p| {
                if p.v > max || max.is_nan() { p.v } else { max }
            })),
            RangeFn::LastOverTime => samples.last().map(|p| p.v),
            RangeFn::PresentOverTime => Some(1.0),
            RangeFn::StddevOverTime => Some(variance(samples).sqrt()),
            RangeFn::StdvarOverTime => Some(variance(samples)),
        }
    }

    /// The function at one step: one element per series of `arg` that
    /// gives a value.
    pub fn call(self, arg: &RangeArg, ctx: &FnContext) -> Vec<VectorSample> {
        let window = Span {
            start_ms: arg.start_ms,
            end_ms: arg.end_ms,
        };
        per_series(arg, ctx, self.keeps_name(), |s| self.apply(s, window))
    }
}

/// Applies `f` to each series' samples (skipping series with none) and
/// collects the values it gives, with `__name__` unless `keep_name` is
/// false.
fn per_series(
    arg: &RangeArg,
    ctx: &FnContext,
    keep_name: bool,
    f: impl Fn(&[Sample]) -> Option<f64>,
) -> Vec<VectorSample> {
    arg.series
        .iter()
        .filter(|s| !s.samples.is_empty())
        .filter_map(|s| {
            let v = f(&s.samples)?;
            let labels = if keep_name {
                s.labels.clone()
            } else {
                s.labels.without_name()
            };
            Some(at_step(labels, v, ctx))
        })
        .collect()
}

/// How [`extrapolated_rate`] treats the samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RateKind {
    /// A counter: a drop is a reset, and the extrapolation stops at zero.
    counter: bool,
    /// Per second (divided by the window's length) rather than over the
    /// window.
    per_second: bool,
}

/// Prometheus 2.42's `extrapolatedRate` for one series: the change from
/// the first to the last sample (resets added back for a counter),
/// stretched towards the window's edges: all the way to an edge closer
/// than 1.1 average sample intervals, else by half an interval; a
/// counter's start is not stretched past the point where it would have
/// been zero. None below two samples.
fn extrapolated_rate(samples: &[Sample], window: Span, kind: RateKind) -> Option<f64> {
    let (first, last) = match samples {
        [first, .., last] => (*first, *last),
        _ => return None,
    };
    let mut result = last.v - first.v;
    if kind.counter {
        let mut prev = first.v;
        for s in &samples[1..] {
            if s.v < prev {
                result += prev;
            }
            prev = s.v;
        }
    }

    // Durations in milliseconds rather than 2.42's seconds: every use
    // below is a ratio or a comparison of two of them, so the scale
    // cancels, and three divisions per window go (a range query divides
    // for each of its thousands of windows); the answer differs from
    // 2.42's by rounding in the last place at most.
    let mut to_start = (first.t - window.start_ms) as f64;
    let to_end = (window.end_ms - last.t) as f64;
    let sampled = (last.t - first.t) as f64;
    let average_interval = sampled / (samples.len() - 1) as f64;

    if kind.counter && result > 0.0 && first.v >= 0.0 {
        // A counter cannot have been below zero: when the slope reaches
        // zero before the window starts, the series starts there.
        let to_zero = sampled * (first.v / result);
        if to_zero < to_start {
            to_start = to_zero;
        }
    }

    let threshold = average_interval * 1.1;
    let mut interval = sampled;
    interval += if to_start < threshold {
        to_start
    } else {
        average_interval / 2.0
    };
    interval += if to_end < threshold {
        to_end
    } else {
        average_interval / 2.0
    };
    let factor = if kind.per_second {
        // Per second of the window: interval / sampled / (range / 1000).
        interval * 1000.0 / (sampled * (window.end_ms - window.start_ms) as f64)
    } else {
        interval / sampled
    };
    Some(result * factor)
}

/// 2.42's `instantValue`: None below two samples.
fn instant_value(samples: &[Sample], is_rate: bool) -> Option<f64> {
    let (prev, last) = match samples {
        [.., prev, last] => (*prev, *last),
        _ => return None,
    };
    let mut value = if is_rate && last.v < prev.v {
        last.v
    } else {
        last.v - prev.v
    };
    let interval_ms = last.t - prev.t;
    if interval_ms == 0 {
        return None;
    }
    if is_rate {
        value /= interval_ms as f64 / 1000.0;
    }
    Some(value)
}

/// The mean of a window (`avg_over_time`). 2.42 computes it
/// incrementally, dividing twice per sample, with compensated summation;
/// where every value and their compensated sum are finite, the
/// compensated sum over the count is the same mean to within rounding in
/// the last place, without a division per sample (a range query averages
/// thousands of windows). Otherwise (infinities, NaN, a sum past the
/// largest float) 2.42's way, step for step.
fn average(samples: &[Sample]) -> f64 {
    let (mut sum, mut c) = (0.0f64, 0.0f64);
    let mut finite = true;
    for p in samples {
        finite &= p.v.is_finite();
        (sum, c) = kahan_sum_inc(p.v, sum, c);
    }
    if finite && sum.is_finite() {
        return (sum + c) / samples.len() as f64;
    }
    incremental_mean(samples)
}

/// 2.42's `avg_over_time`: the mean updated sample by sample with
/// compensated summation (an infinite mean stays as it is unless a NaN or
/// an infinity of the other sign arrives).
fn incremental_mean(samples: &[Sample]) -> f64 {
    let (mut mean, mut count, mut c) = (0.0f64, 0.0f64, 0.0f64);
    for p in samples {
        count += 1.0;
        if mean.is_infinite() {
            if p.v.is_infinite() && (mean > 0.0) == (p.v > 0.0) {
                continue;
            }
            if !p.v.is_infinite() && !p.v.is_nan() {
                continue;
            }
        }
        (mean, c) = kahan_sum_inc(p.v / count - mean / count, mean, c);
    }
    if mean.is_infinite() { mean } else { mean + c }
}

/// `quantile_over_time(q, v[d])`.
pub fn quantile_over_time(q: f64, arg: &RangeArg, ctx: &FnContext) -> Vec<VectorSample> {
    per_series(arg, ctx, false, |s| {
        let mut values: Vec<f64> = s.iter().map(|p| p.v).collect();
        Some(quantile(q, &mut values))
    })
}

/// The population variance by Welford's method with compensated sums,
/// step for step as 2.42's `stdvar_over_time`.
fn variance(samples: &[Sample]) -> f64 {
    let (mut count, mut mean, mut c_mean, mut aux, mut c_aux) = (0.0f64, 0.0, 0.0, 0.0, 0.0);
    for p in samples {
        count += 1.0;
        let delta = p.v - (mean + c_mean);
        (mean, c_mean) = kahan_sum_inc(delta / count, mean, c_mean);
        (aux, c_aux) = kahan_sum_inc(delta * (p.v - (mean + c_mean)), aux, c_aux);
    }
    (aux + c_aux) / count
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::promql::functions::RangeSeries;
    use crate::promql::value::Labels;

    pub(in crate::promql::functions) fn series(name: &str, points: &[(i64, f64)]) -> RangeSeries {
        RangeSeries {
            labels: Labels::from_pairs([("__name__", name), ("job", "a")]),
            samples: points.iter().map(|&(t, v)| Sample { t, v }).collect(),
        }
    }

    pub(in crate::promql::functions) fn window(
        start_ms: i64,
        end_ms: i64,
        series: Vec<RangeSeries>,
    ) -> RangeArg {
        RangeArg {
            series,
            start_ms,
            end_ms,
        }
    }

    const CTX: FnContext = FnContext { eval_ms: 60_000 };

    fn one(v: Vec<VectorSample>) -> f64 {
        assert_eq!(v.len(), 1, "{v:?}");
        v[0].v
    }

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() <= 1e-12 * b.abs().max(1.0), "{a} != {b}");
    }

    #[test]
    fn rate_extrapolates_to_both_edges_when_close() {
        // Window [0, 60s]; samples every 10s from 5s to 55s, 100 then
        // +10 each. Sampled 50s, increase 50; both edges 5s away
        // (< 1.1·10s), so the increase covers 60s: 60 over 60s → 1/s.
        // (The zero point, 50·100/50 = 100s back, is farther.)
        let pts: Vec<(i64, f64)> = (0..6)
            .map(|i| (5_000 + i * 10_000, 100.0 + 10.0 * i as f64))
            .collect();
        let w = window(0, 60_000, vec![series("c", &pts)]);
        close(one(RangeFn::Rate.call(&w, &CTX)), 1.0);
        close(one(RangeFn::Increase.call(&w, &CTX)), 60.0);
        let out = RangeFn::Rate.call(&w, &CTX);
        assert_eq!(out[0].labels, Labels::from_pairs([("job", "a")]));
        assert_eq!(out[0].t, 60_000);
    }

    #[test]
    fn a_counter_starting_at_zero_is_not_extrapolated_before_its_start() {
        // As above but from 0: the zero point is the first sample, so
        // only the end is stretched: 50·55/50 = 55.
        let pts: Vec<(i64, f64)> = (0..6)
            .map(|i| (5_000 + i * 10_000, 10.0 * i as f64))
            .collect();
        let w = window(0, 60_000, vec![series("c", &pts)]);
        close(one(RangeFn::Increase.call(&w, &CTX)), 55.0);
    }

    #[test]
    fn rate_extrapolates_half_an_interval_at_a_far_edge() {
        // Samples 30s..60s every 10s, values 100,110,120,130: the start
        // is 30s away (> 11s): only 5s added there; the end is the edge.
        // The zero point (sampled·100/30 = 100s back) is farther than
        // 30s, so it does not cut. increase = 30 · 35/30 = 35.
        let w = window(
            0,
            60_000,
            vec![series(
                "c",
                &[
                    (30_000, 100.0),
                    (40_000, 110.0),
                    (50_000, 120.0),
                    (60_000, 130.0),
                ],
            )],
        );
        close(one(RangeFn::Increase.call(&w, &CTX)), 35.0);
        close(one(RangeFn::Rate.call(&w, &CTX)), 35.0 / 60.0);
    }

    #[test]
    fn rate_adds_back_counter_resets() {
        // 0,10,20 then a reset to 5, then 15: increase 20 + 5 + 10 = 35
        // over 40s sampled; edges at 0 and 0 → factor 1.
        let w = window(
            0,
            40_000,
            vec![series(
                "c",
                &[
                    (0, 0.0),
                    (10_000, 10.0),
                    (20_000, 20.0),
                    (30_000, 5.0),
                    (40_000, 15.0),
                ],
            )],
        );
        close(one(RangeFn::Increase.call(&w, &CTX)), 35.0);
        assert_eq!(one(RangeFn::Resets.call(&w, &CTX)), 1.0);
        // delta is not a counter: last − first.
        close(one(RangeFn::Delta.call(&w, &CTX)), 15.0);
    }

    #[test]
    fn rate_stops_extrapolating_at_the_counters_zero() {
        // Window [0, 60s], samples at 10s..60s every 10s from 1 by +2:
        // 1,3,5,7,9,11. result 10 over 50s; to start 10s < 11s, but the
        // zero point is 50·1/10 = 5s back, so 5s is used: (50+5+0)/50.
        let pts: Vec<(i64, f64)> = (0..6)
            .map(|i| (10_000 + i * 10_000, 1.0 + 2.0 * i as f64))
            .collect();
        let w = window(0, 60_000, vec![series("c", &pts)]);
        close(one(RangeFn::Increase.call(&w, &CTX)), 10.0 * 55.0 / 50.0);
        // delta has no zero clamp: (50+10)/50.
        close(one(RangeFn::Delta.call(&w, &CTX)), 10.0 * 60.0 / 50.0);
    }

    #[test]
    fn rate_needs_two_samples_and_skips_empty_series() {
        let w = window(
            0,
            60_000,
            vec![series("c", &[(10_000, 1.0)]), series("d", &[])],
        );
        assert!(RangeFn::Rate.call(&w, &CTX).is_empty());
        assert!(RangeFn::Irate.call(&w, &CTX).is_empty());
        assert!(
            RangeFn::CountOverTime
                .call(&window(0, 1, vec![series("d", &[])]), &CTX)
                .is_empty()
        );
        assert_eq!(one(RangeFn::CountOverTime.call(&w, &CTX)), 1.0);
    }

    #[test]
    fn irate_and_idelta_use_the_last_two_samples() {
        let w = window(
            0,
            60_000,
            vec![series("c", &[(0, 1.0), (20_000, 50.0), (30_000, 10.0)])],
        );
        // A drop is a reset: the last value over 10s.
        close(one(RangeFn::Irate.call(&w, &CTX)), 1.0);
        close(one(RangeFn::Idelta.call(&w, &CTX)), -40.0);
    }

    #[test]
    fn changes_counts_nan_to_nan_as_no_change() {
        let w = window(
            0,
            60_000,
            vec![series(
                "g",
                &[(0, 1.0), (1, 1.0), (2, f64::NAN), (3, f64::NAN), (4, 2.0)],
            )],
        );
        assert_eq!(one(RangeFn::Changes.call(&w, &CTX)), 2.0);
    }

    #[test]
    fn over_time_aggregates() {
        let w = window(
            0,
            60_000,
            vec![series(
                "g",
                &[
                    (0, 2.0),
                    (1, 4.0),
                    (2, 4.0),
                    (3, 4.0),
                    (4, 5.0),
                    (5, 5.0),
                    (6, 7.0),
                    (7, 9.0),
                ],
            )],
        );
        close(one(RangeFn::AvgOverTime.call(&w, &CTX)), 5.0);
        close(one(RangeFn::SumOverTime.call(&w, &CTX)), 40.0);
        close(one(RangeFn::StdvarOverTime.call(&w, &CTX)), 4.0);
        close(one(RangeFn::StddevOverTime.call(&w, &CTX)), 2.0);
        assert_eq!(one(RangeFn::MinOverTime.call(&w, &CTX)), 2.0);
        assert_eq!(one(RangeFn::MaxOverTime.call(&w, &CTX)), 9.0);
        assert_eq!(one(RangeFn::PresentOverTime.call(&w, &CTX)), 1.0);
        // 8 values, q=0.5: rank 3.5 between 4 and 5.
        close(one(quantile_over_time(0.5, &w, &CTX)), 4.5);
        let last = RangeFn::LastOverTime.call(&w, &CTX);
        assert_eq!(last[0].v, 9.0);
        assert_eq!(last[0].labels.metric_name(), "g");
        assert_eq!(
            RangeFn::AvgOverTime.call(&w, &CTX)[0].labels.metric_name(),
            ""
        );
    }

    #[test]
    fn min_and_max_skip_nan_unless_all_nan() {
        let w = window(
            0,
            10,
            vec![series(
                "g",
                &[(0, f64::NAN), (1, 3.0), (2, f64::NAN), (3, 1.0)],
            )],
        );
        assert_eq!(one(RangeFn::MinOverTime.call(&w, &CTX)), 1.0);
        assert_eq!(one(RangeFn::MaxOverTime.call(&w, &CTX)), 3.0);
        let all_nan = window(0, 10, vec![series("g", &[(0, f64::NAN), (1, f64::NAN)])]);
        assert!(one(RangeFn::MaxOverTime.call(&all_nan, &CTX)).is_nan());
    }

    #[test]
    fn the_fast_mean_is_2_42s_mean_to_the_last_places() {
        // Random-walk gauges with 1-2 decimals and large offsets, windows
        // of 1 to 400 samples.
        let mut x = 1_000_003.25f64;
        let mut seed = 7u64;
        for n in 1..400usize {
            let samples: Vec<Sample> = (0..n)
                .map(|i| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    x += ((seed >> 33) % 200) as f64 / 100.0 - 1.0;
                    Sample { t: i as i64, v: x }
                })
                .collect();
            let (fast, exact) = (average(&samples), incremental_mean(&samples));
            assert!(
                (fast - exact).abs() <= 1e-14 * exact.abs(),
                "{n}: {fast} vs {exact}"
            );
        }
        // Past the largest float the sum overflows: 2.42's way.
        let big = [Sample { t: 0, v: f64::MAX }, Sample { t: 1, v: f64::MAX }];
        assert_eq!(average(&big), f64::MAX);
    }

    #[test]
    fn avg_over_time_keeps_an_infinite_mean() {
        let w = window(
            0,
            10,
            vec![series(
                "g",
                &[(0, 1.0), (1, f64::INFINITY), (2, 5.0), (3, f64::INFINITY)],
            )],
        );
        assert_eq!(one(RangeFn::AvgOverTime.call(&w, &CTX)), f64::INFINITY);
        let mixed = window(
            0,
            10,
            vec![series("g", &[(0, f64::INFINITY), (1, f64::NEG_INFINITY)])],
        );
        assert!(one(RangeFn::AvgOverTime.call(&mixed, &CTX)).is_nan());
        // Large values whose plain sum would overflow still average.
        let big = window(0, 10, vec![series("g", &[(0, f64::MAX), (1, f64::MAX)])]);
        close(one(RangeFn::AvgOverTime.call(&big, &CTX)), f64::MAX);
    }
}
