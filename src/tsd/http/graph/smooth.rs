//! gnuplot's `smooth` options, which `/q` passes on (`&smooth=`): the
//! points of a series are replaced by the smoothed curve before drawing.
//! Curves are sampled at gnuplot's default 100 samples.
//!
//! Not done: `acsplines` (needs per-point weights), `bins` and `zsort`
//! (made for other data shapes); those draw the points as they are.

/// gnuplot's `set samples` default.
const SAMPLES: usize = 100;

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
        "mcsplines" => monotone_spline(&unique(&pts)),
        "bezier" => bezier(&pts),
        "sbezier" => bezier(&unique(&pts)),
        "unwrap" => unwrap(pts),
        _ => pts,
    }
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
    fn unwraps_phases() {
        let u = apply("unwrap", vec![(0.0, 3.0), (1.0, -3.0)]);
        assert!((u[1].1 - (-3.0 + 2.0 * std::f64::consts::PI)).abs() < 1e-12);
    }
}
