//! gnuplot's `smooth` options, which `/q` passes on (`&smooth=`): the
//! points of a series are replaced by the smoothed curve before drawing.
//! Curves are sampled at gnuplot's default 100 samples.
//!
//! OpenTSDB writes two columns (`using 1:2`), so `acsplines` gets
//! gnuplot's default weight of 1 for every point, and `zsort` (which
//! sorts points by a third column) is refused by gnuplot: see [`refusal`].

/// gnuplot's `set samples` default.
const SAMPLES: usize = 100;

/// gnuplot's weight for `acsplines` when the data has no third column
/// (`help smooth acsplines`: the default is `using 1:2:(1.0)`).
const DEFAULT_WEIGHT: f64 = 1.0;

/// gnuplot's error for a smoothing it will not do on OpenTSDB's two
/// columns: `zsort` needs a third (z) column to sort by, and gnuplot
/// stops the whole plot with this message (so OpenTSDB answers 400 with
/// gnuplot's stderr).
pub(crate) fn refusal(name: &str) -> Option<&'static str> {
    (name == "zsort").then_some("Not enough columns for this style")
}

/// Applies smoothing `name` (one of `GraphHandler`'s accepted words).
pub(crate) fn apply(name: &str, pts: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    match name {
        "unique" => unique(&pts),
        "frequency" => frequency(&pts),
        "fnormal" => normalize_sum(frequency(&pts)),
        "cumulative" => cumulative(&pts),
        "cnormal" => {
            let c = cumulative(&pts);
            let last = c.last().map(|p| p.1).unwrap_or(1.0);
            if last == 0.0 {
                c
            } else {
                c.into_iter().map(|(x, y)| (x, y / last)).collect()
            }
        }
        "csplines" => natural_spline(&unique(&pts)),
        // Sums and spline terms of extreme values can overflow; like
        // gnuplot's undefined points, those are left out of the curve.
        "acsplines" => {
            let u = unique(&pts);
            let weights = vec![DEFAULT_WEIGHT; u.len()];
            finite(approximation_spline(&u, &weights))
        }
        "bins" => finite(bins(&pts, SAMPLES)),
        "mcsplines" => monotone_spline(&unique(&pts)),
        "bezier" => bezier(&pts),
        "sbezier" => bezier(&unique(&pts)),
        "unwrap" => unwrap(pts),
        _ => pts,
    }
}

fn finite(pts: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    pts.into_iter()
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .collect()
}

/// Points by x, in order, each x with its y values.
fn by_x(pts: &[(f64, f64)]) -> Vec<(f64, Vec<f64>)> {
    let mut sorted = pts.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<(f64, Vec<f64>)> = Vec::new();
    for (x, y) in sorted {
        match out.last_mut() {
            Some((lx, ys)) if *lx == x => ys.push(y),
            _ => out.push((x, vec![y])),
        }
    }
    out
}

/// Sorted by x, one point per x with the mean y.
fn unique(pts: &[(f64, f64)]) -> Vec<(f64, f64)> {
    by_x(pts)
        .into_iter()
        .map(|(x, ys)| (x, ys.iter().sum::<f64>() / ys.len() as f64))
        .collect()
}

/// Sorted by x, one point per x with the sum of y.
fn frequency(pts: &[(f64, f64)]) -> Vec<(f64, f64)> {
    by_x(pts)
        .into_iter()
        .map(|(x, ys)| (x, ys.iter().sum()))
        .collect()
}

fn normalize_sum(pts: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    let total: f64 = pts.iter().map(|p| p.1).sum();
    if total == 0.0 {
        return pts;
    }
    pts.into_iter().map(|(x, y)| (x, y / total)).collect()
}

/// The running sum of [`frequency`].
fn cumulative(pts: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut sum = 0.0;
    frequency(pts)
        .into_iter()
        .map(|(x, y)| {
            sum += y;
            (x, sum)
        })
        .collect()
}

fn samples(pts: &[(f64, f64)], f: impl Fn(usize, f64) -> f64) -> Vec<(f64, f64)> {
    let (x0, x1) = (pts[0].0, pts[pts.len() - 1].0);
    let mut out = Vec::with_capacity(SAMPLES);
    let mut seg = 0;
    for i in 0..SAMPLES {
        let x = x0 + (x1 - x0) * i as f64 / (SAMPLES - 1) as f64;
        while seg + 2 < pts.len() && x > pts[seg + 1].0 {
            seg += 1;
        }
        out.push((x, f(seg, x)));
    }
    out
}

/// A natural cubic spline through the points.
fn natural_spline(pts: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let n = pts.len();
    if n < 3 {
        return pts.to_vec();
    }
    let h: Vec<f64> = (0..n - 1).map(|i| pts[i + 1].0 - pts[i].0).collect();
    // Second derivatives by the tridiagonal system (Thomas algorithm).
    let mut m = vec![0.0; n];
    let mut c = vec![0.0; n];
    let mut d = vec![0.0; n];
    for i in 1..n - 1 {
        let a = h[i - 1];
        let b = 2.0 * (h[i - 1] + h[i]);
        let cc = h[i];
        let r = 6.0 * ((pts[i + 1].1 - pts[i].1) / h[i] - (pts[i].1 - pts[i - 1].1) / h[i - 1]);
        let denom = b - a * c[i - 1];
        c[i] = cc / denom;
        d[i] = (r - a * d[i - 1]) / denom;
    }
    for i in (1..n - 1).rev() {
        m[i] = d[i] - c[i] * m[i + 1];
    }
    samples(pts, |i, x| {
        let (x0, y0, x1, y1, hi) = (pts[i].0, pts[i].1, pts[i + 1].0, pts[i + 1].1, h[i]);
        let (a, b) = (x1 - x, x - x0);
        m[i] * a.powi(3) / (6.0 * hi)
            + m[i + 1] * b.powi(3) / (6.0 * hi)
            + (y0 / hi - m[i] * hi / 6.0) * a
            + (y1 / hi - m[i + 1] * hi / 6.0) * b
    })
}

/// gnuplot's `acsplines`: the natural smoothing spline (Reinsch) that
/// trades closeness to each point, by its weight, against curvature.
/// Large weights give the interpolating [`natural_spline`]; small ones
/// tend to the weighted least-squares line. Like gnuplot it needs four
/// points; with fewer the points are drawn as they are, as `csplines`
/// does below three.
///
/// With `c` the halved second derivatives at the inner knots, `Q` the
/// second-difference operator of the knots and `T` the usual spline
/// tridiagonal, the spline solves `(T + 6 Qᵀ W⁻¹ Q) c = 3 Qᵀ y`; the
/// values at the knots are then `y − 2 W⁻¹ Q c`.
fn approximation_spline(pts: &[(f64, f64)], weights: &[f64]) -> Vec<(f64, f64)> {
    let n = pts.len();
    // gnuplot refuses weights that are not positive (NaN included).
    if n < 4 || weights.iter().any(|w| w.is_nan() || *w <= 0.0) {
        return pts.to_vec();
    }
    let h: Vec<f64> = (0..n - 1).map(|i| pts[i + 1].0 - pts[i].0).collect();
    // Row r of Qᵀ (inner knot r + 1) touches knots r, r + 1, r + 2.
    let q = |r: usize| -> [f64; 3] { [1.0 / h[r], -(1.0 / h[r] + 1.0 / h[r + 1]), 1.0 / h[r + 1]] };
    let m = n - 2;
    // The symmetric five-band matrix, row r holding columns r-2..=r+2.
    let mut band = vec![[0.0f64; 5]; m];
    let mut rhs = vec![0.0f64; m];
    for r in 0..m {
        let qr = q(r);
        rhs[r] = 3.0 * (qr[0] * pts[r].1 + qr[1] * pts[r + 1].1 + qr[2] * pts[r + 2].1);
        band[r][2] = 2.0 * (h[r] + h[r + 1]);
        if r + 1 < m {
            band[r][3] = h[r + 1];
        }
        if r > 0 {
            band[r][1] = h[r];
        }
        // 6 Qᵀ W⁻¹ Q: rows r and s share knots where their stencils overlap.
        for s in r.saturating_sub(2)..=(r + 2).min(m - 1) {
            let qs = q(s);
            let mut sum = 0.0;
            for (k, qk) in qr.iter().enumerate() {
                let knot = r + k;
                if knot >= s && knot < s + 3 {
                    sum += qk * qs[knot - s] / weights[knot];
                }
            }
            band[r][s + 2 - r] += 6.0 * sum;
        }
    }
    let Some(inner) = solve_five_band(band, rhs) else {
        return pts.to_vec();
    };
    let mut c = vec![0.0f64; n];
    c[1..n - 1].copy_from_slice(&inner);
    // Knot values: y − 2 W⁻¹ Q c, Q c at a knot summing the rows that touch it.
    let mut a: Vec<f64> = pts.iter().map(|p| p.1).collect();
    for r in 0..m {
        for (k, qk) in q(r).iter().enumerate() {
            a[r + k] -= 2.0 * qk * c[r + 1] / weights[r + k];
        }
    }
    let b: Vec<f64> = (0..n - 1)
        .map(|i| (a[i + 1] - a[i]) / h[i] - h[i] / 3.0 * (c[i + 1] + 2.0 * c[i]))
        .collect();
    let d: Vec<f64> = (0..n - 1)
        .map(|i| (c[i + 1] - c[i]) / (3.0 * h[i]))
        .collect();
    samples(pts, |i, x| {
        let t = x - pts[i].0;
        ((d[i] * t + c[i]) * t + b[i]) * t + a[i]
    })
}

/// Solves a five-band system by elimination without pivoting (the
/// smoothing-spline matrix is symmetric positive definite). `None` when a
/// pivot vanishes, as for data gnuplot cannot fit either.
fn solve_five_band(mut band: Vec<[f64; 5]>, mut rhs: Vec<f64>) -> Option<Vec<f64>> {
    let m = rhs.len();
    // band[r][2 + j] is the entry at column r + j.
    for p in 0..m {
        let pivot = band[p][2];
        if pivot == 0.0 || !pivot.is_finite() {
            return None;
        }
        for r in p + 1..(p + 3).min(m) {
            let f = band[r][2 + p - r] / pivot;
            if f == 0.0 {
                continue;
            }
            for j in 0..=2 {
                let col = p + j;
                if col < r.saturating_sub(2) || col > r + 2 {
                    continue;
                }
                band[r][2 + col - r] -= f * band[p][2 + j];
            }
            rhs[r] -= f * rhs[p];
        }
    }
    let mut x = vec![0.0f64; m];
    for r in (0..m).rev() {
        let mut v = rhs[r];
        for j in 1..=2 {
            if r + j < m {
                v -= band[r][2 + j] * x[r + j];
            }
        }
        x[r] = v / band[r][2];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

/// gnuplot's `bins`: `count` equal bins whose centres run from the least
/// to the greatest x, each y the sum of the points' y in it (a point on a
/// boundary goes up). When all x are equal the bin width is zero and
/// gnuplot puts nothing in any bin; so do we.
fn bins(pts: &[(f64, f64)], count: usize) -> Vec<(f64, f64)> {
    if pts.is_empty() || count == 0 {
        return pts.to_vec();
    }
    let (lo, hi) = pts
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| {
            (lo.min(p.0), hi.max(p.0))
        });
    let width = if count > 1 {
        (hi - lo) / (count - 1) as f64
    } else {
        0.0
    };
    let bottom = lo - width / 2.0;
    let range = width * count as f64;
    let mut sums = vec![0.0f64; count];
    if range > 0.0 {
        for &(x, y) in pts {
            let bin = (count as f64 * (x - bottom) / range).floor();
            if bin >= 0.0 && bin < count as f64 {
                sums[bin as usize] += y;
            }
        }
    }
    sums.into_iter()
        .enumerate()
        .map(|(i, y)| (bottom + (i as f64 + 0.5) * width, y))
        .collect()
}

/// A monotone cubic (Fritsch–Carlson): no overshoot between points.
fn monotone_spline(pts: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let n = pts.len();
    if n < 3 {
        return pts.to_vec();
    }
    let delta: Vec<f64> = (0..n - 1)
        .map(|i| (pts[i + 1].1 - pts[i].1) / (pts[i + 1].0 - pts[i].0))
        .collect();
    let mut t = vec![0.0; n];
    t[0] = delta[0];
    t[n - 1] = delta[n - 2];
    for i in 1..n - 1 {
        t[i] = if delta[i - 1] * delta[i] <= 0.0 {
            0.0
        } else {
            (delta[i - 1] + delta[i]) / 2.0
        };
    }
    for i in 0..n - 1 {
        if delta[i] == 0.0 {
            t[i] = 0.0;
            t[i + 1] = 0.0;
            continue;
        }
        let (a, b) = (t[i] / delta[i], t[i + 1] / delta[i]);
        let s = a * a + b * b;
        if s > 9.0 {
            let k = 3.0 / s.sqrt();
            t[i] = k * a * delta[i];
            t[i + 1] = k * b * delta[i];
        }
    }
    samples(pts, |i, x| {
        let hi = pts[i + 1].0 - pts[i].0;
        let u = (x - pts[i].0) / hi;
        let (h00, h10) = (
            2.0 * u.powi(3) - 3.0 * u * u + 1.0,
            u.powi(3) - 2.0 * u * u + u,
        );
        let (h01, h11) = (-2.0 * u.powi(3) + 3.0 * u * u, u.powi(3) - u * u);
        h00 * pts[i].1 + h10 * hi * t[i] + h01 * pts[i + 1].1 + h11 * hi * t[i + 1]
    })
}

/// The Bézier curve whose control points are all the points, evaluated
/// with Bernstein weights in log space so thousands of points stay finite.
fn bezier(pts: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let n = pts.len();
    if n < 3 {
        return pts.to_vec();
    }
    let deg = n - 1;
    // ln C(deg, k).
    let mut ln_fact = vec![0.0f64; n];
    for k in 1..n {
        ln_fact[k] = ln_fact[k - 1] + (k as f64).ln();
    }
    let ln_binom = |k: usize| ln_fact[deg] - ln_fact[k] - ln_fact[deg - k];
    (0..SAMPLES)
        .map(|s| {
            let t = s as f64 / (SAMPLES - 1) as f64;
            if s == 0 {
                return pts[0];
            }
            if s == SAMPLES - 1 {
                return pts[deg];
            }
            let (lt, lu) = (t.ln(), (1.0 - t).ln());
            let (mut x, mut y) = (0.0, 0.0);
            for (k, p) in pts.iter().enumerate() {
                let w = (ln_binom(k) + k as f64 * lt + (deg - k) as f64 * lu).exp();
                x += w * p.0;
                y += w * p.1;
            }
            (x, y)
        })
        .collect()
}

/// Steps of more than π between neighbours are taken as wrapped phases.
fn unwrap(mut pts: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    use std::f64::consts::PI;
    for i in 1..pts.len() {
        let d = pts[i].1 - pts[i - 1].1;
        // As many whole turns as bring the step into [-π, π], computed
        // at once: subtracting 2π in a loop never ends once the step is
        // so large that 2π no longer changes it.
        let turns = if !d.is_finite() {
            0.0
        } else if d > PI {
            -((d - PI) / (2.0 * PI)).ceil()
        } else if d < -PI {
            ((-d - PI) / (2.0 * PI)).ceil()
        } else {
            0.0
        };
        pts[i].1 += turns * 2.0 * PI;
    }
    pts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwrap_takes_whole_turns_even_for_huge_steps() {
        use std::f64::consts::PI;
        let got = unwrap(vec![(0.0, 0.0), (1.0, 3.0 * PI), (2.0, 3.0 * PI - 0.5)]);
        assert!((got[1].1 - PI).abs() < 1e-9, "{got:?}");
        assert!((got[2].1 - (PI - 0.5)).abs() < 1e-9, "{got:?}");
        let got = unwrap(vec![(0.0, 0.0), (1.0, -2.5 * PI)]);
        assert!((got[1].1 + 0.5 * PI).abs() < 1e-9, "{got:?}");
        // Steps 2π cannot change, and non-finite ones, end at once.
        let got = unwrap(vec![
            (0.0, 0.0),
            (1.0, 1e300),
            (2.0, f64::INFINITY),
            (3.0, -1e300),
        ]);
        assert_eq!(got.len(), 4);
    }

    #[test]
    fn sums_and_means() {
        let pts = vec![(2.0, 4.0), (1.0, 1.0), (2.0, 2.0)];
        assert_eq!(unique(&pts), vec![(1.0, 1.0), (2.0, 3.0)]);
        assert_eq!(frequency(&pts), vec![(1.0, 1.0), (2.0, 6.0)]);
        assert_eq!(cumulative(&pts), vec![(1.0, 1.0), (2.0, 7.0)]);
        assert_eq!(apply("cnormal", pts.clone()).last().unwrap().1, 1.0);
        assert_eq!(apply("fnormal", pts).iter().map(|p| p.1).sum::<f64>(), 1.0);
    }

    #[test]
    fn splines_pass_through_the_points() {
        let pts: Vec<(f64, f64)> = (0..=10)
            .map(|i| (i as f64 * 10.0, (i * i) as f64))
            .collect();
        for name in ["csplines", "mcsplines"] {
            let s = apply(name, pts.clone());
            assert_eq!(s.len(), SAMPLES);
            assert!((s[0].1 - 0.0).abs() < 1e-9, "{name}");
            assert!((s[SAMPLES - 1].1 - 100.0).abs() < 1e-9, "{name}");
            // Monotone data stays monotone.
            assert!(s.windows(2).all(|w| w[1].1 >= w[0].1 - 1e-9), "{name}");
        }
        let b = apply("bezier", pts.clone());
        assert_eq!(b[0], pts[0]);
        assert_eq!(b[SAMPLES - 1], pts[10]);
        let many: Vec<(f64, f64)> = (0..5000).map(|i| (i as f64, 1.0)).collect();
        assert!(
            apply("bezier", many)
                .iter()
                .all(|p| (p.1 - 1.0).abs() < 1e-6)
        );
    }

    #[test]
    fn acsplines_follow_the_weights() {
        // Points on a line: no curvature to trade, so the line itself.
        let line: Vec<(f64, f64)> = (0..8)
            .map(|i| (i as f64 * 60.0, 2.0 * i as f64 + 1.0))
            .collect();
        let s = apply("acsplines", line);
        assert_eq!(s.len(), SAMPLES);
        for (x, y) in &s {
            assert!((y - (2.0 * x / 60.0 + 1.0)).abs() < 1e-9, "{x} {y}");
        }

        let pts: Vec<(f64, f64)> = [0.0, 3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0]
            .iter()
            .enumerate()
            .map(|(i, y)| (i as f64, *y))
            .collect();
        // Huge weights: the natural interpolating spline.
        let stiff = approximation_spline(&pts, &[1e12; 8]);
        let natural = natural_spline(&pts);
        for (p, q) in stiff.iter().zip(&natural) {
            assert!((p.1 - q.1).abs() < 1e-6, "{p:?} {q:?}");
        }
        // Tiny weights: the least-squares line through the points.
        let loose = approximation_spline(&pts, &[1e-12; 8]);
        let n = pts.len() as f64;
        let (mx, my) = (
            pts.iter().map(|p| p.0).sum::<f64>() / n,
            pts.iter().map(|p| p.1).sum::<f64>() / n,
        );
        let slope = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>()
            / pts.iter().map(|p| (p.0 - mx).powi(2)).sum::<f64>();
        for (x, y) in &loose {
            assert!((y - (my + slope * (x - mx))).abs() < 1e-4, "{x} {y}");
        }
        // Weight 1 on unit spacing: in between, smoother than the data.
        let mid = apply("acsplines", pts.clone());
        let at = |c: &[(f64, f64)], x: f64| c.iter().find(|p| (p.0 - x).abs() < 1e-9).unwrap().1;
        let (y, through, line) = (at(&mid, 7.0), at(&natural, 7.0), at(&loose, 7.0));
        assert!(
            y > through.min(line) && y < through.max(line) && (y - through).abs() > 0.5,
            "{y} between {through} and {line}"
        );
        // Too few points: drawn as they are.
        assert_eq!(apply("acsplines", pts[..3].to_vec()), pts[..3].to_vec());
    }

    #[test]
    fn bins_sum_into_equal_bins() {
        // Five bins with centres 0, 10, .., 40 (width 10, edges at ±5).
        let pts = vec![
            (0.0, 1.0),
            (4.0, 2.0),
            (5.0, 4.0),
            (14.9, 8.0),
            (40.0, 16.0),
        ];
        assert_eq!(
            bins(&pts, 5),
            vec![
                (0.0, 3.0),
                (10.0, 12.0),
                (20.0, 0.0),
                (30.0, 0.0),
                (40.0, 16.0)
            ]
        );
        let b = apply("bins", pts);
        assert_eq!(b.len(), SAMPLES);
        assert_eq!(b.iter().map(|p| p.1).sum::<f64>(), 31.0);
        assert!((b[0].0 - 0.0).abs() < 1e-12 && (b[SAMPLES - 1].0 - 40.0).abs() < 1e-9);
        // One x: a zero-width range, nothing binned (as gnuplot).
        let one = bins(&[(7.0, 2.0), (7.0, 3.0)], 3);
        assert_eq!(one, vec![(7.0, 0.0), (7.0, 0.0), (7.0, 0.0)]);
    }

    #[test]
    fn unwraps_phases() {
        let u = apply("unwrap", vec![(0.0, 3.0), (1.0, -3.0)]);
        assert!((u[1].1 - (-3.0 + 2.0 * std::f64::consts::PI)).abs() < 1e-12);
    }
}
