//! Trends over a range vector's window: `deriv` and `predict_linear`
//! (least-squares regression, as 2.42's `linearRegression` computes it)
//! and `holt_winters` (double exponential smoothing). Each drops
//! `__name__`; a series with fewer than two samples gives no element.

use super::stats::kahan_sum_inc;
use super::{FnContext, RangeArg, at_step};
use crate::promql::error::PromError;
use crate::promql::value::{Sample, VectorSample};

/// A fitted line: value change per second, and the value at the time the
/// regression was centred on.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Line {
    slope: f64,
    intercept: f64,
}

/// Least squares over `samples` with x = seconds from `intercept_ms`
/// (compensated sums, as 2.42). Constant values give a flat line (NaN
/// for a constant infinity) without dividing by a zero variance.
fn linear_regression(samples: &[Sample], intercept_ms: i64) -> Line {
    let (mut n, mut sum_x, mut c_x, mut sum_y, mut c_y) = (0.0f64, 0.0, 0.0, 0.0, 0.0);
    let (mut sum_xy, mut c_xy, mut sum_x2, mut c_x2) = (0.0f64, 0.0, 0.0, 0.0);
    let init_y = samples[0].v;
    let mut const_y = true;
    for (i, s) in samples.iter().enumerate() {
        if const_y && i > 0 && s.v != init_y {
            const_y = false;
        }
        n += 1.0;
        let x = (s.t - intercept_ms) as f64 / 1e3;
        (sum_x, c_x) = kahan_sum_inc(x, sum_x, c_x);
        (sum_y, c_y) = kahan_sum_inc(s.v, sum_y, c_y);
        (sum_xy, c_xy) = kahan_sum_inc(x * s.v, sum_xy, c_xy);
        (sum_x2, c_x2) = kahan_sum_inc(x * x, sum_x2, c_x2);
    }
    if const_y {
        if init_y.is_infinite() {
            return Line {
                slope: f64::NAN,
                intercept: f64::NAN,
            };
        }
        return Line {
            slope: 0.0,
            intercept: init_y,
        };
    }
    let (sum_x, sum_y, sum_xy, sum_x2) = (sum_x + c_x, sum_y + c_y, sum_xy + c_xy, sum_x2 + c_x2);
    let cov_xy = sum_xy - sum_x * sum_y / n;
    let var_x = sum_x2 - sum_x * sum_x / n;
    let slope = cov_xy / var_x;
    Line {
        slope,
        intercept: sum_y / n - slope * sum_x / n,
    }
}

/// `deriv(v[d])`: the per-second slope of the least-squares line
/// (centred on the first sample, which keeps the sums small).
pub fn deriv(arg: &RangeArg, ctx: &FnContext) -> Vec<VectorSample> {
    arg.series
        .iter()
        .filter(|s| s.samples.len() >= 2)
        .map(|s| {
            let line = linear_regression(&s.samples, s.samples[0].t);
            at_step(s.labels.without_name(), line.slope, ctx)
        })
        .collect()
}

/// `predict_linear(v[d], seconds)`: the least-squares line's value
/// `seconds` after the evaluation time.
pub fn predict_linear(arg: &RangeArg, seconds: f64, ctx: &FnContext) -> Vec<VectorSample> {
    arg.series
        .iter()
        .filter(|s| s.samples.len() >= 2)
        .map(|s| {
            let line = linear_regression(&s.samples, ctx.eval_ms);
            at_step(
                s.labels.without_name(),
                line.slope * seconds + line.intercept,
                ctx,
            )
        })
        .collect()
}

/// `holt_winters(v[d], sf, tf)`: the last smoothed value of double
/// exponential smoothing with smoothing factor `sf` and trend factor
/// `tf`, each strictly between 0 and 1. As in 2.42, the factors are
/// checked only when some series has a sample in the window (a NaN factor
/// passes the check, as in 2.42, and smooths to NaN).
pub fn holt_winters(
    arg: &RangeArg,
    sf: f64,
    tf: f64,
    ctx: &FnContext,
) -> Result<Vec<VectorSample>, PromError> {
    if arg.series.iter().all(|s| s.samples.is_empty()) {
        return Ok(Vec::new());
    }
    if sf <= 0.0 || sf >= 1.0 {
        return Err(PromError::execution(format!(
            "invalid smoothing factor. Expected: 0 < sf < 1, got: {}",
            go_fixed6(sf)
        )));
    }
    if tf <= 0.0 || tf >= 1.0 {
        return Err(PromError::execution(format!(
            "invalid trend factor. Expected: 0 < tf < 1, got: {}",
            go_fixed6(tf)
        )));
    }
    Ok(arg
        .series
        .iter()
        .filter(|s| s.samples.len() >= 2)
        .map(|s| at_step(s.labels.without_name(), smooth(&s.samples, sf, tf), ctx))
        .collect())
}

/// Double exponential smoothing over at least two samples, in 2.42's
/// order of operations.
fn smooth(samples: &[Sample], sf: f64, tf: f64) -> f64 {
    let (mut s0, mut s1) = (0.0f64, samples[0].v);
    let mut trend = samples[1].v - samples[0].v;
    for (i, p) in samples.iter().enumerate().skip(1) {
        let x = sf * p.v;
        // The trend before this sample; the first step keeps the initial
        // difference.
        if i > 1 {
            trend = tf * (s1 - s0) + (1.0 - tf) * trend;
        }
        let y = (1.0 - sf) * (s1 + trend);
        (s0, s1) = (s1, x + y);
    }
    s1
}

/// A float as Go's `%f` prints it (six decimals; `NaN`, `+Inf`, `-Inf`).
fn go_fixed6(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        format!("{v:.6}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promql::functions::range::tests::{series, window};

    const CTX: FnContext = FnContext { eval_ms: 100_000 };

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "{a} != {b}");
    }

    #[test]
    fn deriv_and_predict_linear_on_a_straight_line() {
        // v = 2·t_seconds + 1 at t = 40..100 s.
        let pts: Vec<(i64, f64)> = (4..=10)
            .map(|i| (i * 10_000, 2.0 * (i * 10) as f64 + 1.0))
            .collect();
        let w = window(40_000, 100_000, vec![series("g", &pts)]);
        let d = deriv(&w, &CTX);
        close(d[0].v, 2.0);
        assert_eq!(d[0].labels.metric_name(), "");
        // At eval time 100 s the line is at 201; 30 s later 261.
        close(predict_linear(&w, 30.0, &CTX)[0].v, 261.0);
    }

    #[test]
    fn regression_of_constant_values() {
        let w = window(0, 100_000, vec![series("g", &[(0, 5.0), (10_000, 5.0)])]);
        assert_eq!(deriv(&w, &CTX)[0].v, 0.0);
        assert_eq!(predict_linear(&w, 100.0, &CTX)[0].v, 5.0);
        let inf = window(
            0,
            100_000,
            vec![series("g", &[(0, f64::INFINITY), (1, f64::INFINITY)])],
        );
        assert!(deriv(&inf, &CTX)[0].v.is_nan());
        let one = window(0, 100_000, vec![series("g", &[(0, 5.0)])]);
        assert!(deriv(&one, &CTX).is_empty());
    }

    #[test]
    fn holt_winters_by_hand() {
        // Values 1, 3, 7 with sf = tf = 0.5:
        // start s1 = 1, b = 2.
        // i=1: s1 = 0.5·3 + 0.5·(1 + 2) = 3; s0 = 1.
        // i=2: b = 0.5·(3 − 1) + 0.5·2 = 2; s1 = 0.5·7 + 0.5·(3 + 2) = 6.
        let w = window(
            0,
            100_000,
            vec![series("g", &[(0, 1.0), (1, 3.0), (2, 7.0)])],
        );
        close(holt_winters(&w, 0.5, 0.5, &CTX).unwrap()[0].v, 6.0);
    }

    #[test]
    fn holt_winters_checks_its_factors_only_with_samples() {
        let w = window(0, 100_000, vec![series("g", &[(0, 1.0)])]);
        let err = holt_winters(&w, 1.0, 0.5, &CTX).unwrap_err();
        assert_eq!(err.kind, crate::promql::ErrorKind::Execution);
        assert_eq!(
            err.message,
            "invalid smoothing factor. Expected: 0 < sf < 1, got: 1.000000"
        );
        let err = holt_winters(&w, 0.5, 0.0, &CTX).unwrap_err();
        assert_eq!(
            err.message,
            "invalid trend factor. Expected: 0 < tf < 1, got: 0.000000"
        );
        let empty = window(0, 100_000, vec![series("g", &[])]);
        assert!(holt_winters(&empty, 7.0, 0.5, &CTX).unwrap().is_empty());
        // One sample: valid factors, but nothing to smooth.
        assert!(holt_winters(&w, 0.5, 0.5, &CTX).unwrap().is_empty());
    }
}
