//! The functions that map each element of an instant vector to a number
//! of its value alone: `abs`, `ceil`, `floor`, `exp`, `sqrt`, `ln`,
//! `log2`, `log10`, the trigonometric and hyperbolic functions, `deg`,
//! `rad`, `sgn`, `round`, `clamp`, `clamp_min`, `clamp_max`; and `pi()`.
//! Every one drops `__name__`, as 2.42 does.
//!
//! `clamp*` follow Go's `math.Min`/`math.Max`, which differ from Rust's
//! `f64::min`/`max`: a NaN wins (except against the infinity on the
//! chosen side), and -0 is below +0.

use super::{FnContext, at_step};
use crate::promql::value::VectorSample;

/// One of the functions of a single value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MathFn {
    Abs,
    Ceil,
    Floor,
    Exp,
    Sqrt,
    Ln,
    Log2,
    Log10,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Tanh,
    Asinh,
    Acosh,
    Atanh,
    Deg,
    Rad,
    Sgn,
}

impl MathFn {
    /// The function PromQL calls `name`, if it is one of these.
    pub fn from_name(name: &str) -> Option<MathFn> {
        use MathFn::*;
        Some(match name {
            "abs" => Abs,
            "ceil" => Ceil,
            "floor" => Floor,
            "exp" => Exp,
            "sqrt" => Sqrt,
            "ln" => Ln,
            "log2" => Log2,
            "log10" => Log10,
            "sin" => Sin,
            "cos" => Cos,
            "tan" => Tan,
            "asin" => Asin,
            "acos" => Acos,
            "atan" => Atan,
            "sinh" => Sinh,
            "cosh" => Cosh,
            "tanh" => Tanh,
            "asinh" => Asinh,
            "acosh" => Acosh,
            "atanh" => Atanh,
            "deg" => Deg,
            "rad" => Rad,
            "sgn" => Sgn,
            _ => return None,
        })
    }

    /// The function's value at `v`.
    pub fn apply(self, v: f64) -> f64 {
        use MathFn::*;
        match self {
            Abs => v.abs(),
            Ceil => v.ceil(),
            Floor => v.floor(),
            Exp => v.exp(),
            Sqrt => v.sqrt(),
            Ln => v.ln(),
            Log2 => v.log2(),
            Log10 => v.log10(),
            Sin => v.sin(),
            Cos => v.cos(),
            Tan => v.tan(),
            Asin => v.asin(),
            Acos => v.acos(),
            Atan => v.atan(),
            Sinh => v.sinh(),
            Cosh => v.cosh(),
            Tanh => v.tanh(),
            Asinh => v.asinh(),
            Acosh => v.acosh(),
            Atanh => v.atanh(),
            // 2.42's order of operations: multiply first.
            Deg => v * 180.0 / std::f64::consts::PI,
            Rad => v * std::f64::consts::PI / 180.0,
            // ±0 and NaN are their own sign.
            Sgn if v < 0.0 => -1.0,
            Sgn if v > 0.0 => 1.0,
            Sgn => v,
        }
    }
}

/// Applies `f` to every element, dropping `__name__`.
pub fn map_values(
    input: Vec<VectorSample>,
    ctx: &FnContext,
    f: impl Fn(f64) -> f64,
) -> Vec<VectorSample> {
    input
        .into_iter()
        .map(|s| at_step(s.labels.without_name(), f(s.v), ctx))
        .collect()
}

/// `round(v, to_nearest)`: to the nearest multiple of `to_nearest`, ties
/// up (towards +Inf), computed as 2.42 does through the inverse of
/// `to_nearest` (`round(-2.5)` is -2).
pub fn round(input: Vec<VectorSample>, to_nearest: f64, ctx: &FnContext) -> Vec<VectorSample> {
    let inverse = 1.0 / to_nearest;
    map_values(input, ctx, |v| (v * inverse + 0.5).floor() / inverse)
}

/// `clamp(v, min, max)`: nothing at all when max < min.
pub fn clamp(input: Vec<VectorSample>, min: f64, max: f64, ctx: &FnContext) -> Vec<VectorSample> {
    if max < min {
        return Vec::new();
    }
    map_values(input, ctx, |v| go_max(min, go_min(max, v)))
}

/// `clamp_min(v, min)`.
pub fn clamp_min(input: Vec<VectorSample>, min: f64, ctx: &FnContext) -> Vec<VectorSample> {
    map_values(input, ctx, |v| go_max(min, v))
}

/// `clamp_max(v, max)`.
pub fn clamp_max(input: Vec<VectorSample>, max: f64, ctx: &FnContext) -> Vec<VectorSample> {
    map_values(input, ctx, |v| go_min(max, v))
}

/// Go's `math.Min`: -Inf if either is, else NaN if either is, -0 below +0.
fn go_min(x: f64, y: f64) -> f64 {
    if x == f64::NEG_INFINITY || y == f64::NEG_INFINITY {
        f64::NEG_INFINITY
    } else if x.is_nan() || y.is_nan() {
        f64::NAN
    } else if x == 0.0 && x == y {
        if x.is_sign_negative() { x } else { y }
    } else if x < y {
        x
    } else {
        y
    }
}

/// Go's `math.Max`: +Inf if either is, else NaN if either is, +0 above -0.
fn go_max(x: f64, y: f64) -> f64 {
    if x == f64::INFINITY || y == f64::INFINITY {
        f64::INFINITY
    } else if x.is_nan() || y.is_nan() {
        f64::NAN
    } else if x == 0.0 && x == y {
        if x.is_sign_negative() { y } else { x }
    } else if x > y {
        x
    } else {
        y
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promql::value::Labels;

    const CTX: FnContext = FnContext { eval_ms: 1_000 };

    fn input(values: &[f64]) -> Vec<VectorSample> {
        values
            .iter()
            .enumerate()
            .map(|(i, &v)| VectorSample {
                labels: Labels::from_pairs([("__name__", "m".to_string()), ("i", i.to_string())]),
                t: 0,
                v,
            })
            .collect()
    }

    fn values(out: &[VectorSample]) -> Vec<f64> {
        out.iter().map(|s| s.v).collect()
    }

    #[test]
    fn round_is_half_up_including_negatives() {
        let out = round(
            input(&[0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4, -2.6]),
            1.0,
            &CTX,
        );
        assert_eq!(values(&out), [1.0, 2.0, 3.0, 0.0, -1.0, -2.0, 2.0, -3.0]);
        assert_eq!(out[0].labels, Labels::from_pairs([("i", "0")]));
        assert_eq!(out[0].t, 1_000);
    }

    #[test]
    fn round_to_nearest() {
        let out = round(input(&[7.0, 12.5, -7.5, 0.126]), 5.0, &CTX);
        assert_eq!(values(&out)[..3], [5.0, 15.0, -5.0]);
        // Through the inverse: 0.126·100 + 0.5 floors to 13 → 0.13.
        let out = round(input(&[0.126]), 0.01, &CTX);
        assert_eq!(values(&out), [0.13]);
    }

    #[test]
    fn clamp_follows_go_min_max() {
        let out = clamp(input(&[-5.0, 5.0, 50.0, f64::NAN]), 0.0, 10.0, &CTX);
        let v = values(&out);
        assert_eq!(v[..3], [0.0, 5.0, 10.0]);
        assert!(v[3].is_nan());
        assert!(clamp(input(&[1.0]), 10.0, 0.0, &CTX).is_empty());
        assert_eq!(
            values(&clamp_min(input(&[-1.0, 3.0]), 0.0, &CTX)),
            [0.0, 3.0]
        );
        assert_eq!(
            values(&clamp_max(input(&[-1.0, 3.0]), 0.0, &CTX)),
            [-1.0, 0.0]
        );
        // A NaN bound gives NaN; an infinite bound beats NaN.
        assert!(values(&clamp_max(input(&[1.0]), f64::NAN, &CTX))[0].is_nan());
        assert_eq!(
            values(&clamp_max(input(&[f64::NAN]), f64::NEG_INFINITY, &CTX)),
            [f64::NEG_INFINITY]
        );
        assert!(go_min(0.0, -0.0).is_sign_negative());
        assert!(go_max(-0.0, 0.0).is_sign_positive());
    }

    #[test]
    fn single_value_functions() {
        let f = |name: &str, v: f64| MathFn::from_name(name).unwrap().apply(v);
        assert_eq!(f("abs", -2.0), 2.0);
        assert_eq!(f("ceil", 1.2), 2.0);
        assert_eq!(f("floor", -1.2), -2.0);
        assert_eq!(f("sqrt", 16.0), 4.0);
        assert!(f("sqrt", -1.0).is_nan());
        assert_eq!(f("ln", 0.0), f64::NEG_INFINITY);
        assert_eq!(f("log2", 8.0), 3.0);
        assert_eq!(f("log10", 1000.0), 3.0);
        assert_eq!(f("exp", 0.0), 1.0);
        assert_eq!(f("deg", std::f64::consts::PI), 180.0);
        assert_eq!(f("rad", 180.0), std::f64::consts::PI);
        assert_eq!(f("sgn", -3.0), -1.0);
        assert_eq!(f("sgn", 3.0), 1.0);
        assert!(f("sgn", -0.0).is_sign_negative());
        assert!(f("sgn", f64::NAN).is_nan());
        assert!(f("acosh", 0.5).is_nan());
        assert_eq!(f("atanh", 1.0), f64::INFINITY);
        assert_eq!(f("sin", 0.0), 0.0);
        assert_eq!(f("cos", 0.0), 1.0);
        assert!(MathFn::from_name("cbrt").is_none());
        let out = map_values(input(&[1.0]), &CTX, |v| MathFn::Exp.apply(v));
        assert_eq!(out[0].labels.metric_name(), "");
    }
}
