//! Between scalars and instant vectors: `scalar(v)` and `vector(s)`.

use super::{FnContext, at_step};
use crate::promql::value::{Labels, VectorSample};

/// `scalar(v)`: the value of a vector's only element, NaN when it has
/// none or several.
pub fn scalar(input: &[VectorSample]) -> f64 {
    match input {
        [only] => only.v,
        _ => f64::NAN,
    }
}

/// `vector(s)`: one element without labels.
pub fn vector(v: f64, ctx: &FnContext) -> Vec<VectorSample> {
    vec![at_step(Labels::default(), v, ctx)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn element(v: f64) -> VectorSample {
        VectorSample {
            labels: Labels::from_pairs([("a", "b")]),
            t: 0,
            v,
        }
    }

    #[test]
    fn scalar_needs_exactly_one_element() {
        assert_eq!(scalar(&[element(4.0)]), 4.0);
        assert!(scalar(&[]).is_nan());
        assert!(scalar(&[element(1.0), element(2.0)]).is_nan());
    }

    #[test]
    fn vector_has_no_labels() {
        let out = vector(2.5, &FnContext { eval_ms: 9 });
        assert_eq!(
            out,
            [VectorSample {
                labels: Labels::default(),
                t: 9,
                v: 2.5
            }]
        );
    }
}
