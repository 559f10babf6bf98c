//! How rollup values combine: the one rule both the rollups rtsdb computes
//! (`tsd.rollups.auto`, in `db`) and queries reading rollup cells into
//! coarser buckets (in `query`) follow, so a rollup of rollups gives the
//! numbers the raw points would.

use crate::model::Value;

/// Adds two values, as integers while both are (and the sum fits), else
/// as doubles.
pub fn add(a: Value, b: Value) -> Value {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => x
            .checked_add(y)
            .map(Value::Int)
            .unwrap_or(Value::Float(x as f64 + y as f64)),
        (x, y) => Value::Float(x.as_f64() + y.as_f64()),
    }
}

/// The smaller of two values, or the larger with `max`; the first on a
/// tie (or a NaN), so the earliest extreme stays.
pub fn pick(a: Value, b: Value, max: bool) -> Value {
    let (x, y) = (a.as_f64(), b.as_f64());
    if (max && y > x) || (!max && y < x) {
        b
    } else {
        a
    }
}

/// The aggregate columns rtsdb computes for each interval
/// (`tsd.rollups.auto`), by their configured names.
pub const AUTO_AGGREGATES: [&str; 4] = ["sum", "count", "min", "max"];

/// sum, count, min and max of the points of one interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Aggregates {
    pub sum: Value,
    pub count: i64,
    pub min: Value,
    pub max: Value,
}

impl Aggregates {
    /// The aggregates of one point.
    pub fn new(v: Value) -> Aggregates {
        Aggregates {
            sum: v,
            count: 1,
            min: v,
            max: v,
        }
    }

    /// Adds a point.
    pub fn add(&mut self, v: Value) {
        self.sum = add(self.sum, v);
        self.count += 1;
        self.min = pick(self.min, v, false);
        self.max = pick(self.max, v, true);
    }

    /// The column named `name` (one of [`AUTO_AGGREGATES`]).
    pub fn value(&self, name: &str) -> Value {
        match name {
            "sum" => self.sum,
            "count" => Value::Int(self.count),
            "min" => self.min,
            _ => self.max,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_stay_integers_until_they_overflow_or_meet_a_double() {
        assert_eq!(add(Value::Int(2), Value::Int(3)), Value::Int(5));
        assert_eq!(
            add(Value::Int(i64::MAX), Value::Int(1)),
            Value::Float(i64::MAX as f64 + 1.0)
        );
        assert_eq!(add(Value::Int(2), Value::Float(0.5)), Value::Float(2.5));
        let mut a = Aggregates::new(Value::Int(4));
        for v in [Value::Int(-1), Value::Float(9.5), Value::Int(-1)] {
            a.add(v);
        }
        assert_eq!(a.sum, Value::Float(11.5));
        assert_eq!(a.value("count"), Value::Int(4));
        assert_eq!(a.value("min"), Value::Int(-1));
        assert_eq!(a.value("max"), Value::Float(9.5));
    }
}
