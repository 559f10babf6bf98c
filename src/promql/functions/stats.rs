//! The arithmetic several parts of PromQL share, computed as Prometheus
//! 2.42 computes it so that answers agree to the last bits: the
//! interpolated `quantile` (used by the `quantile` aggregation and
//! `quantile_over_time`) and Kahan–Neumaier compensated summation (used by
//! `sum_over_time`, `avg_over_time`, the variance functions and the
//! linear regression of `deriv`/`predict_linear`).

use std::cmp::Ordering;

/// The `q`-quantile of `values` (sorted in place): NaN for no value or
/// q = NaN, -Inf for q < 0, +Inf for q > 1; otherwise linear
/// interpolation between the two values around rank `q·(n−1)`, as
/// Prometheus 2.42's `quantile`. NaN values sort below every number.
pub fn quantile(q: f64, values: &mut [f64]) -> f64 {
    if values.is_empty() || q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    values.sort_by(nan_first);
    let n = values.len() as f64;
    let rank = q * (n - 1.0);
    let lower = rank.floor().max(0.0);
    let upper = (n - 1.0).min(lower + 1.0);
    let weight = rank - rank.floor();
    values[lower as usize] * (1.0 - weight) + values[upper as usize] * weight
}

/// Ascending order with NaN below every number (the order Prometheus'
/// value heap sorts by).
fn nan_first(a: &f64, b: &f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => a.partial_cmp(b).unwrap_or(Ordering::Equal),
    }
}

/// One step of Kahan–Neumaier summation: adds `inc` to the running `sum`
/// whose lost low-order part is `c`; returns the new `(sum, c)`. The
/// total is `sum + c` (or `sum` alone when it is infinite).
pub fn kahan_sum_inc(inc: f64, sum: f64, c: f64) -> (f64, f64) {
    let t = sum + inc;
    // Neumaier's variant: the smaller of the two loses its low bits.
    let c = if sum.abs() >= inc.abs() {
        c + ((sum - t) + inc)
    } else {
        c + ((inc - t) + sum)
    };
    (t, c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_interpolates_between_neighbours() {
        // Sorted: 1 2 3 4; q=0.5 → rank 1.5 → halfway between 2 and 3.
        assert_eq!(quantile(0.5, &mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        // q=0.25 → rank 0.75 → 1·0.25 + 2·0.75.
        assert_eq!(quantile(0.25, &mut [4.0, 1.0, 3.0, 2.0]), 1.75);
        assert_eq!(quantile(0.0, &mut [4.0, 1.0]), 1.0);
        assert_eq!(quantile(1.0, &mut [4.0, 1.0]), 4.0);
        assert_eq!(quantile(0.9, &mut [7.0]), 7.0);
    }

    #[test]
    fn quantile_edges() {
        assert!(quantile(0.5, &mut []).is_nan());
        assert!(quantile(f64::NAN, &mut [1.0]).is_nan());
        assert_eq!(quantile(-0.1, &mut [1.0]), f64::NEG_INFINITY);
        assert_eq!(quantile(1.1, &mut [1.0]), f64::INFINITY);
        // NaN sorts first: the minimum is NaN, the maximum a number.
        assert!(quantile(0.0, &mut [2.0, f64::NAN, 1.0]).is_nan());
        assert_eq!(quantile(1.0, &mut [2.0, f64::NAN, 1.0]), 2.0);
    }

    #[test]
    fn kahan_keeps_what_plain_addition_loses() {
        let (mut sum, mut c) = (0.0, 0.0);
        for v in [1.0, 1e100, 1.0, -1e100] {
            (sum, c) = kahan_sum_inc(v, sum, c);
        }
        assert_eq!(sum + c, 2.0);
        assert_eq!(1.0 + 1e100 + 1.0 - 1e100, 0.0);
    }
}
