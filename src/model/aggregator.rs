//! OpenTSDB 2.4's aggregators (`Aggregators.java`): the registry of names,
//! their integer and floating point functions, and the interpolation each
//! one asks of the group-by merge.
//!
//! Integer functions follow Java `long` arithmetic (wrapping, truncating
//! division); float functions skip NaN where 2.4 does (sum, min, max, avg,
//! dev, count, squareSum, median, percentiles) and return NaN when nothing
//! is left.

/// What the group-by merge substitutes for a series that has no point at a
/// timestamp inside its own first..last range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interpolation {
    /// Linear interpolation between the surrounding points.
    Lerp,
    /// Zero if missing.
    Zim,
    /// The type's maximum (so `min` ignores the series).
    Max,
    /// The type's minimum (so `max` ignores the series).
    Min,
    /// The previous value.
    Prev,
}

/// commons-math `Percentile` estimation types OpenTSDB uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Estimation {
    Legacy,
    R3,
    R7,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Function {
    Sum,
    Min,
    Max,
    Avg,
    Dev,
    Count,
    First,
    Last,
    Mult,
    Median,
    Diff,
    SquareSum,
    Percentile(f64, Estimation),
    /// `none`: no aggregation; every series is returned on its own.
    None,
}

/// A registered aggregator: name, function and interpolation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Aggregator {
    pub name: &'static str,
    pub function: Function,
    pub interpolation: Interpolation,
}

use Estimation::*;
use Function as F;
use Interpolation as I;

const fn agg(name: &'static str, function: Function, interpolation: Interpolation) -> Aggregator {
    Aggregator {
        name,
        function,
        interpolation,
    }
}

/// Every aggregator of OpenTSDB 2.4.1, as `/api/aggregators` lists them.
pub const AGGREGATORS: &[Aggregator] = &[
    agg("sum", F::Sum, I::Lerp),
    agg("min", F::Min, I::Lerp),
    agg("max", F::Max, I::Lerp),
    agg("avg", F::Avg, I::Lerp),
    agg("none", F::None, I::Zim),
    agg("median", F::Median, I::Lerp),
    agg("mult", F::Mult, I::Lerp),
    agg("dev", F::Dev, I::Lerp),
    agg("diff", F::Diff, I::Lerp),
    agg("count", F::Count, I::Zim),
    agg("zimsum", F::Sum, I::Zim),
    agg("mimmin", F::Min, I::Max),
    agg("mimmax", F::Max, I::Min),
    agg("first", F::First, I::Zim),
    agg("last", F::Last, I::Zim),
    agg("pfsum", F::Sum, I::Prev),
    agg("squareSum", F::SquareSum, I::Zim),
    agg("p999", F::Percentile(99.9, Legacy), I::Lerp),
    agg("p99", F::Percentile(99.0, Legacy), I::Lerp),
    agg("p95", F::Percentile(95.0, Legacy), I::Lerp),
    agg("p90", F::Percentile(90.0, Legacy), I::Lerp),
    agg("p75", F::Percentile(75.0, Legacy), I::Lerp),
    agg("p50", F::Percentile(50.0, Legacy), I::Lerp),
    agg("ep999r3", F::Percentile(99.9, R3), I::Lerp),
    agg("ep99r3", F::Percentile(99.0, R3), I::Lerp),
    agg("ep95r3", F::Percentile(95.0, R3), I::Lerp),
    agg("ep90r3", F::Percentile(90.0, R3), I::Lerp),
    agg("ep75r3", F::Percentile(75.0, R3), I::Lerp),
    agg("ep50r3", F::Percentile(50.0, R3), I::Lerp),
    agg("ep999r7", F::Percentile(99.9, R7), I::Lerp),
    agg("ep99r7", F::Percentile(99.0, R7), I::Lerp),
    agg("ep95r7", F::Percentile(95.0, R7), I::Lerp),
    agg("ep90r7", F::Percentile(90.0, R7), I::Lerp),
    agg("ep75r7", F::Percentile(75.0, R7), I::Lerp),
    agg("ep50r7", F::Percentile(50.0, R7), I::Lerp),
];

impl Aggregator {
    /// Looks a name up, case-sensitively as OpenTSDB does (`Sum` is unknown).
    pub fn by_name(name: &str) -> Option<Aggregator> {
        AGGREGATORS.iter().find(|a| a.name == name).copied()
    }

    pub fn names() -> impl Iterator<Item = &'static str> {
        AGGREGATORS.iter().map(|a| a.name)
    }

    pub fn is_none(&self) -> bool {
        self.function == F::None
    }

    /// `runLong`: the function over integers, in Java `long` arithmetic.
    /// `values` must not be empty; `scratch` is reused for sorting.
    pub fn run_long(&self, values: &[i64], scratch: &mut Vec<f64>) -> i64 {
        let Some(&first) = values.first() else {
            return 0;
        };
        match self.function {
            F::Sum | F::None => values.iter().fold(0i64, |a, &v| a.wrapping_add(v)),
            F::Min => values.iter().copied().min().unwrap_or(first),
            F::Max => values.iter().copied().max().unwrap_or(first),
            F::Avg => {
                let sum = values.iter().fold(0i64, |a, &v| a.wrapping_add(v));
                // Java: long / int, truncating toward zero.
                sum.wrapping_div(values.len() as i64)
            }
            F::Dev => {
                let it = values.iter().map(|&v| v as f64);
                dev(it) as i64
            }
            F::Count => values.len() as i64,
            F::First => first,
            F::Last => *values.last().unwrap_or(&first),
            F::Mult => values.iter().skip(1).fold(first, |a, &v| a.wrapping_mul(v)),
            F::Median => {
                let mut v = values.to_vec();
                v.sort_unstable();
                v[v.len() / 2]
            }
            F::Diff => values.last().unwrap_or(&first).wrapping_sub(first),
            F::SquareSum => values
                .iter()
                .fold(0i64, |a, &v| a.wrapping_add(v.wrapping_mul(v))),
            F::Percentile(p, est) => {
                scratch.clear();
                scratch.extend(values.iter().map(|&v| v as f64));
                percentile(scratch, p, est) as i64
            }
        }
    }

    /// `runDouble`: the function over doubles. `values` is used as scratch
    /// space (it may be reordered).
    pub fn run_double(&self, values: &mut [f64]) -> f64 {
        if values.is_empty() {
            return f64::NAN;
        }
        let non_nan = || values.iter().copied().filter(|v| !v.is_nan());
        match self.function {
            F::Dev => {
                if non_nan().next().is_none() {
                    f64::NAN
                } else {
                    dev(non_nan())
                }
            }
            F::First => values[0],
            F::Last => values[values.len() - 1],
            F::Mult => values[1..].iter().fold(values[0], |a, &v| a * v),
            F::Median => {
                let n = partition_nan(values);
                let v = &mut values[..n];
                if v.is_empty() {
                    return f64::NAN;
                }
                v.sort_unstable_by(f64::total_cmp);
                v[v.len() / 2]
            }
            F::Diff => values[values.len() - 1] - values[0],
            // 2.4.1 ignores the estimation type for doubles (a bug we keep).
            F::Percentile(p, _) => {
                let n = partition_nan(values);
                percentile(&mut values[..n], p, Legacy)
            }
            F::Sum | F::None | F::Min | F::Max | F::Avg | F::Count | F::SquareSum => {
                let mut fold = Fold::start(self.function);
                for &v in values.iter() {
                    fold.add(v);
                }
                fold.result()
            }
        }
    }
}

/// A float function that needs no more than a running value and a count
/// (sum, min, max, avg, count, squareSum): folded one value at a time, so
/// a downsampler keeps no bucket of values for it. [`Aggregator::run_double`]
/// computes these through it too: one definition of each.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fold {
    function: Function,
    /// Non-NaN values added.
    n: u64,
    /// The sum (of squares for squareSum), or the min or max so far (NaN
    /// before the first value).
    acc: f64,
}

impl Fold {
    /// A fold for `function`, if it is one of those it computes.
    pub fn new(function: Function) -> Option<Fold> {
        match function {
            F::Sum | F::None | F::Avg | F::Count | F::SquareSum | F::Min | F::Max => {
                Some(Fold::start(function))
            }
            _ => None,
        }
    }

    /// An empty fold (for one of the functions [`Fold::new`] takes).
    fn start(function: Function) -> Fold {
        let acc = match function {
            F::Min | F::Max => f64::NAN,
            _ => 0.0,
        };
        Fold {
            function,
            n: 0,
            acc,
        }
    }

    /// Adds a value; NaN is skipped, as 2.4 skips it.
    #[inline]
    pub fn add(&mut self, v: f64) {
        if v.is_nan() {
            return;
        }
        self.n += 1;
        match self.function {
            F::SquareSum => self.acc += v * v,
            F::Min => {
                if self.acc.is_nan() || v < self.acc {
                    self.acc = v
                }
            }
            F::Max => {
                if self.acc.is_nan() || v > self.acc {
                    self.acc = v
                }
            }
            _ => self.acc += v,
        }
    }

    /// Adds values one after another, as [`add`](Self::add) each: the
    /// function is matched once for them all.
    #[inline]
    pub fn add_all(&mut self, values: impl Iterator<Item = f64>) {
        let (mut n, mut acc) = (self.n, self.acc);
        match self.function {
            F::SquareSum => {
                for v in values.filter(|v| !v.is_nan()) {
                    n += 1;
                    acc += v * v;
                }
            }
            F::Min => {
                for v in values.filter(|v| !v.is_nan()) {
                    n += 1;
                    if acc.is_nan() || v < acc {
                        acc = v
                    }
                }
            }
            F::Max => {
                for v in values.filter(|v| !v.is_nan()) {
                    n += 1;
                    if acc.is_nan() || v > acc {
                        acc = v
                    }
                }
            }
            _ => {
                for v in values.filter(|v| !v.is_nan()) {
                    n += 1;
                    acc += v;
                }
            }
        }
        (self.n, self.acc) = (n, acc);
    }

    /// The function's value over the values added (NaN when none was a
    /// number, except count: 0); the fold starts over.
    pub fn take(&mut self) -> f64 {
        let v = self.result();
        *self = Fold::start(self.function);
        v
    }

    fn result(&self) -> f64 {
        match self.function {
            F::Count => self.n as f64,
            F::Min | F::Max => self.acc,
            _ if self.n == 0 => f64::NAN,
            F::Avg => self.acc / self.n as f64,
            _ => self.acc,
        }
    }
}

/// What a function gives for a single value `v`
/// ([`Aggregator::one_value`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OneValue {
    /// `0.0 + v` (sum, avg, none).
    PlusZero,
    /// `v` itself (min, max, first, last, mult).
    Same,
    /// Any other (count, dev, median, ...): the function's own rule.
    Other,
}

impl Aggregator {
    /// [`run_double`](Self::run_double) over the single value `v`,
    /// without the slice walk: a downsampler bucket holding one value (a
    /// rollup cell standing for its whole bucket) is reduced by it.
    pub fn run_double_one(&self, v: f64) -> f64 {
        self.run_one_as(self.one_value(), v)
    }

    /// [`run_double_one`](Self::run_double_one) with the function's
    /// [`one_value`](Self::one_value) told by the caller: a loop calling
    /// it with a constant `one` has no match left per value.
    #[inline(always)]
    pub fn run_one_as(&self, one: OneValue, v: f64) -> f64 {
        match one {
            // `0.0 + v`: the sum starts at +0.0, so -0.0 comes out +0.0
            // (and NaN stays NaN).
            OneValue::PlusZero => 0.0 + v,
            OneValue::Same => v,
            OneValue::Other => self.run_other_one(v),
        }
    }

    /// How [`run_double_one`](Self::run_double_one) reduces one value,
    /// told once for many values (a rollup read folds a day's cells of a
    /// series with one answer, not one match per cell).
    #[inline]
    pub fn one_value(&self) -> OneValue {
        match self.function {
            F::Sum | F::None | F::Avg => OneValue::PlusZero,
            F::Min | F::Max | F::First | F::Last | F::Mult => OneValue::Same,
            _ => OneValue::Other,
        }
    }

    /// [`run_double_one`](Self::run_double_one) of the functions
    /// [`OneValue::Other`] stands for.
    fn run_other_one(&self, v: f64) -> f64 {
        match self.function {
            F::Dev if v.is_nan() => f64::NAN,
            F::Count => {
                if v.is_nan() {
                    0.0
                } else {
                    1.0
                }
            }
            _ => self.run_double(&mut [v]),
        }
    }
}

/// Moves the non-NaN values to the front; returns how many there are.
fn partition_nan(values: &mut [f64]) -> usize {
    let mut n = 0;
    for i in 0..values.len() {
        if !values[i].is_nan() {
            values.swap(n, i);
            n += 1;
        }
    }
    n
}

/// OpenTSDB's `StdDev`: Welford's loop whose counter ends at count + 1 and
/// divides by (counter − 1), i.e. the population standard deviation.
fn dev(mut values: impl Iterator<Item = f64>) -> f64 {
    let Some(mut old_mean) = values.next() else {
        return 0.0;
    };
    let mut n: u64 = 2;
    let mut variance = 0.0;
    let mut any = false;
    for x in values {
        any = true;
        let new_mean = old_mean + (x - old_mean) / n as f64;
        variance += (x - old_mean) * (x - new_mean);
        old_mean = new_mean;
        n += 1;
    }
    if !any {
        return 0.0;
    }
    (variance / (n - 1) as f64).sqrt()
}

/// commons-math `Percentile.evaluate` with the given estimation type.
/// `quantile` is in (0, 100]. Sorts `values`.
pub(crate) fn percentile(values: &mut [f64], quantile: f64, est: Estimation) -> f64 {
    let len = values.len();
    if len == 0 {
        return f64::NAN;
    }
    if len == 1 {
        return values[0];
    }
    values.sort_unstable_by(f64::total_cmp);
    let p = quantile / 100.0;
    let n = len as f64;
    let pos = match est {
        Legacy => {
            if p == 0.0 {
                0.0
            } else if p == 1.0 {
                n
            } else {
                p * (n + 1.0)
            }
        }
        R7 => {
            if p == 0.0 {
                0.0
            } else if p == 1.0 {
                n
            } else {
                1.0 + (n - 1.0) * p
            }
        }
        R3 => {
            let min_limit = 0.5 / n;
            let idx = if p <= min_limit {
                0.0
            } else {
                (n * p).round_ties_even()
            };
            // R_3 estimates with ceil(pos - 0.5) (no interpolation).
            (idx - 0.5).ceil()
        }
    };
    let fpos = pos.floor();
    let int_pos = fpos as usize;
    let dif = pos - fpos;
    if pos < 1.0 {
        return values[0];
    }
    if pos >= n {
        return values[len - 1];
    }
    let lower = values[int_pos - 1];
    let upper = values[int_pos];
    lower + dif * (upper - lower)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(name: &str) -> Aggregator {
        Aggregator::by_name(name).unwrap()
    }

    #[test]
    fn registry_is_case_sensitive_and_complete() {
        assert_eq!(AGGREGATORS.len(), 35);
        assert!(Aggregator::by_name("Sum").is_none());
        assert!(Aggregator::by_name("squareSum").is_some());
        assert_eq!(a("mimmax").interpolation, Interpolation::Min);
        assert_eq!(a("pfsum").interpolation, Interpolation::Prev);
    }

    #[test]
    fn one_value_is_reduced_as_a_slice_of_it_is() {
        for agg in AGGREGATORS {
            for v in [
                0.0,
                -0.0,
                1.5,
                -3.25,
                f64::NAN,
                f64::INFINITY,
                f64::NEG_INFINITY,
                1e300,
            ] {
                let (one, slice) = (agg.run_double_one(v), agg.run_double(&mut [v]));
                assert!(
                    one.to_bits() == slice.to_bits() || (one.is_nan() && slice.is_nan()),
                    "{} of {v}: {one} vs {slice}",
                    agg.name
                );
            }
        }
    }

    #[test]
    fn integer_functions() {
        let s = &mut Vec::new();
        assert_eq!(a("sum").run_long(&[1, 2, 4], s), 7);
        assert_eq!(a("avg").run_long(&[1, 2], s), 1, "integer division");
        assert_eq!(a("avg").run_long(&[-3, 0], s), -1, "truncates toward zero");
        assert_eq!(a("dev").run_long(&[1, 3], s), 1);
        assert_eq!(a("dev").run_long(&[5], s), 0);
        assert_eq!(a("count").run_long(&[5, 6, 7], s), 3);
        assert_eq!(a("median").run_long(&[4, 1, 3, 2], s), 3, "upper median");
        assert_eq!(a("mult").run_long(&[2, 3, 4], s), 24);
        assert_eq!(a("diff").run_long(&[2, 3, 9], s), 7);
        assert_eq!(a("squareSum").run_long(&[2, 3], s), 13);
        assert_eq!(a("first").run_long(&[2, 3], s), 2);
        assert_eq!(a("last").run_long(&[2, 3], s), 3);
        assert_eq!(a("p50").run_long(&[1, 2, 3, 4], s), 2);
    }

    #[test]
    fn double_functions() {
        let r = |n: &str, v: &[f64]| a(n).run_double(&mut v.to_vec());
        assert_eq!(r("dev", &[1.0, 2.0]), 0.5, "population stddev");
        assert_eq!(r("sum", &[1.0, f64::NAN, 2.0]), 3.0);
        assert!(r("sum", &[f64::NAN]).is_nan());
        assert_eq!(r("avg", &[1.0, f64::NAN, 2.0]), 1.5);
        assert_eq!(r("count", &[1.0, f64::NAN, 2.0]), 2.0);
        assert_eq!(r("min", &[f64::NAN, 3.0, 2.0]), 2.0);
        assert_eq!(r("max", &[f64::NAN, 3.0, 2.0]), 3.0);
        assert_eq!(r("median", &[3.0, 1.0, 2.0]), 2.0);
    }

    #[test]
    fn percentiles_like_commons_math() {
        let data: Vec<f64> = (1..=10).map(f64::from).collect();
        let p = |q, e| percentile(&mut data.clone(), q, e);
        // LEGACY: pos = p (n + 1)
        assert_eq!(p(50.0, Legacy), 5.5);
        assert_eq!(p(90.0, Legacy), 9.9);
        assert_eq!(p(99.0, Legacy), 10.0);
        // R_7: pos = 1 + (n - 1) p
        assert_eq!(p(50.0, R7), 5.5);
        assert!((p(90.0, R7) - 9.1).abs() < 1e-12);
        // R_3: nearest even rank, no interpolation.
        assert_eq!(p(50.0, R3), 5.0);
        assert_eq!(p(95.0, R3), 10.0);
        // Integer inputs use the estimation type; doubles ignore it.
        let s = &mut Vec::new();
        assert_eq!(a("ep90r7").run_long(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], s), 9);
        assert_eq!(a("ep90r7").run_double(&mut data.clone()), 9.9);
    }
}
