//! `sort` and `sort_desc`: an instant vector ordered by value, labels
//! kept (`__name__` too). NaN goes last in both orders, as in 2.42.
//! Equal values keep the order they came in and NaNs end in the reverse
//! of theirs: what 2.42's insertion sort does to the vectors of up to 12
//! elements it sorts that way (longer ones it sorts unstably, in an
//! order no client can rely on).

use std::cmp::Ordering;

use crate::promql::value::VectorSample;

/// Which way [`sort_by_value`] orders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Ascending,
    Descending,
}

/// `sort(v)` (ascending) or `sort_desc(v)` (descending).
pub fn sort_by_value(input: Vec<VectorSample>, direction: Direction) -> Vec<VectorSample> {
    let mut indexed: Vec<(usize, VectorSample)> = input.into_iter().enumerate().collect();
    indexed.sort_by(|(ia, a), (ib, b)| match (a.v.is_nan(), b.v.is_nan()) {
        (true, true) => ib.cmp(ia),
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => {
            let o = a.v.partial_cmp(&b.v).unwrap_or(Ordering::Equal);
            match direction {
                Direction::Ascending => o,
                Direction::Descending => o.reverse(),
            }
        }
    });
    indexed.into_iter().map(|(_, s)| s).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promql::value::Labels;

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

    fn order(out: &[VectorSample]) -> Vec<&str> {
        out.iter().map(|s| s.labels.get("i")).collect()
    }

    #[test]
    fn ascending_and_descending_with_nan_last() {
        let v = [3.0, f64::NAN, 1.0, 2.0, f64::NEG_INFINITY];
        let up = sort_by_value(input(&v), Direction::Ascending);
        assert_eq!(order(&up), ["4", "2", "3", "0", "1"]);
        assert_eq!(up[0].labels.metric_name(), "m");
        let down = sort_by_value(input(&v), Direction::Descending);
        assert_eq!(order(&down), ["0", "3", "2", "4", "1"]);
    }

    #[test]
    fn equal_values_keep_their_order() {
        let up = sort_by_value(input(&[1.0, 0.0, 1.0, 0.0]), Direction::Ascending);
        assert_eq!(order(&up), ["1", "3", "0", "2"]);
        let nans = sort_by_value(input(&[f64::NAN, 1.0, f64::NAN]), Direction::Descending);
        assert_eq!(order(&nans), ["1", "2", "0"]);
    }
}
