//! The gexp functions over [`Series`], each as 2.4.1's class computes it
//! (`src/query/expression/*.java`), with its argument checks and messages.
//!
//! Every function returns nothing when it was given no series argument,
//! before looking at its other parameters (each class checks that first).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::{Series, TagPair, failed};
use crate::model::java::hashmap_order;
use crate::model::{Uid, Value};
use crate::query::aggregator::Interpolation;
use crate::query::error::QueryError;
use crate::query::group::{self, Merged, Scratch};

/// The query range, in ms (`TSQuery.startTime()`/`endTime()`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Range {
    pub start_ms: i64,
    pub end_ms: i64,
}

fn all_series(args: Vec<Vec<Series>>) -> impl Iterator<Item = Series> {
    args.into_iter().flatten()
}

/// `scale(<series>, factor)`: each value times the factor; integers stay
/// integers when the factor is integral (Java `long` arithmetic).
pub(crate) fn scale(args: Vec<Vec<Series>>, params: &[String]) -> Result<Vec<Series>, QueryError> {
    if args.is_empty() {
        return Ok(Vec::new());
    }
    let factor = params
        .first()
        .ok_or_else(|| failed("Missing scaling factor"))?;
    if factor.is_empty()
        || !factor
            .chars()
            .all(|c| c.is_ascii_digit() || c == '-' || c == '.')
    {
        // 2.4.1 prints the factor variable, still at its initial 0.
        return Err(failed("Unparseable scale factor value: 0.0"));
    }
    let f: f64 = factor
        .parse()
        .map_err(|_| failed("Invalid parameter, must be an integer or floating point"))?;
    let integral = f == f.floor() && !f.is_infinite();
    Ok(all_series(args)
        .map(|mut s| {
            for p in &mut s.dps {
                p.1 = match p.1 {
                    Value::Int(i) if integral => Value::Int((f as i64).wrapping_mul(i)),
                    v => Value::Float(f * v.as_f64()),
                };
            }
            s
        })
        .collect())
}

fn abs(v: Value) -> Value {
    match v {
        Value::Int(i) => Value::Int(i.wrapping_abs()),
        Value::Float(f) => Value::Float(f.abs()),
    }
}

/// `absolute(<series>)`.
pub(crate) fn absolute(args: Vec<Vec<Series>>) -> Vec<Series> {
    all_series(args)
        .map(|mut s| {
            for p in &mut s.dps {
                p.1 = abs(p.1);
            }
            s
        })
        .collect()
}

/// `alias(<series>, name[, more...])`: the parameters joined with commas
/// name every series; `@tagk` is replaced by the series' value of that
/// tag. The aliased series has no tags, no aggregated tags and no metric
/// UID.
///
/// 2.4.1's `Alias` also takes the absolute value of every point (a copy
/// of `Absolute`'s loop), and its own test asserts that negative input
/// comes out positive: we do the same.
pub(crate) fn alias(args: Vec<Vec<Series>>, params: &[String]) -> Result<Vec<Series>, QueryError> {
    if args.is_empty() {
        return Ok(Vec::new());
    }
    if params.is_empty() {
        return Err(failed("Missing the alias"));
    }
    let template = params.join(",");
    Ok(all_series(args)
        .map(|mut s| {
            let mut name = template.clone();
            if name.contains('@') && !s.join_tags.is_empty() {
                // The replacements run in the iteration order of the
                // series' tag HashMap, which matters when one tag key is
                // a prefix of another.
                let keys: Vec<&str> = s.tags.iter().map(|(k, _)| k.as_str()).collect();
                for k in hashmap_order(&keys, s.tags_map_size) {
                    if let Some((_, v)) = s.tags.iter().find(|(n, _)| n == k) {
                        name = name.replace(&format!("@{k}"), v);
                    }
                }
            }
            for p in &mut s.dps {
                p.1 = abs(p.1);
            }
            s.metric = Some(name);
            s.metric_uid = None;
            s.tags.clear();
            s.aggregate_tags.clear();
            s.aggregate_tag_uids.clear();
            s
        })
        .collect())
}

/// A moving-average window: a number of points or a span of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Window {
    Points(u64),
    Millis(i64),
}

fn time_unit_ms(unit: &str) -> Option<i64> {
    Some(match unit {
        "day" | "d" => 86_400_000,
        "hr" | "hour" | "h" => 3_600_000,
        "min" | "m" => 60_000,
        "sec" | "s" => 1000,
        _ => return None,
    })
}

/// The leading digits after the first character of `param` (a quote):
/// `'15min'` → (`15`, `min'`).
fn split_quoted_number(param: &str) -> (&str, &str) {
    let body = &param[1..];
    let digits = body
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(body.len());
    body.split_at(digits)
}

fn moving_window(params: &[String]) -> Result<Window, QueryError> {
    let missing = || failed("Missing moving average window size");
    let param = params
        .first()
        .filter(|p| !p.is_empty())
        .ok_or_else(missing)?;
    let param = param.trim();
    let window = if !param.is_empty() && param.chars().all(|c| c.is_ascii_digit()) {
        let n: i32 = param
            .parse()
            .map_err(|_| failed("Invalid parameter, must be an integer"))?;
        Window::Points(n.max(0) as u64)
    } else if param.starts_with('\'') && param.ends_with('\'') {
        let (digits, rest) = split_quoted_number(param);
        if digits.is_empty() {
            return Err(failed(format!("Invalid moving window parameter: {param}")));
        }
        let n: i32 = digits
            .parse()
            .map_err(|_| failed(format!("Unable to parse moving window parameter: {param}")))?;
        // The unit stops before the closing quote.
        let unit = rest.strip_suffix('\'').unwrap_or("");
        let per = time_unit_ms(unit)
            .ok_or_else(|| failed(format!("Unknown time unit={unit} in window={param}")))?;
        Window::Millis(n as i64 * per)
    } else {
        return Err(failed(format!("Unparseable window size: {param}")));
    };
    if matches!(window, Window::Points(0) | Window::Millis(..=0)) {
        return Err(failed(
            "Moving average window must be an integer greater than zero",
        ));
    }
    Ok(window)
}

/// `MovingAverageAggregator.runDouble` over one series' points in the
/// query range: the newest point goes to the front of the window, then
/// points are summed from the newest back until the window is full (a
/// count of non-NaN points, or a span of time reached by the gaps between
/// them, the point that reaches it left out). Until the window first
/// fills the answer is 0, and with a time window the first point is
/// always 0.
fn moving_average(dps: &[(i64, Value)], window: Window, range: Range) -> Vec<(i64, Value)> {
    let mut acc: VecDeque<(i64, f64)> = VecDeque::new();
    let mut started = false;
    let mut out = Vec::with_capacity(dps.len());
    for &(t, v) in dps
        .iter()
        .filter(|p| p.0 >= range.start_ms && p.0 <= range.end_ms)
    {
        acc.push_front((t, v.as_f64()));
        if matches!(window, Window::Millis(_)) && !started {
            started = true;
            out.push((t, Value::Float(0.0)));
            continue;
        }
        let (mut sum, mut count, mut met) = (0.0, 0u64, false);
        let (mut spanned, mut last_ts) = (0i64, -1i64);
        let mut keep = acc.len();
        for (j, &(ts, val)) in acc.iter().enumerate() {
            if let Window::Millis(span) = window {
                if last_ts < 0 {
                    last_ts = ts;
                } else {
                    spanned += last_ts - ts;
                    last_ts = ts;
                    if spanned >= span {
                        met = true;
                        keep = j + 1;
                        break;
                    }
                }
            }
            if !val.is_nan() {
                sum += val;
                count += 1;
            }
            if let Window::Points(n) = window
                && count >= n
            {
                met = true;
                keep = j + 1;
                break;
            }
        }
        acc.truncate(keep);
        let avg = if !met || count == 0 {
            0.0
        } else {
            sum / count as f64
        };
        out.push((t, Value::Float(avg)));
    }
    out
}

/// `movingAverage(<series>, window)`: `5` points or `'5min'` (units
/// `s`/`sec`, `m`/`min`, `h`/`hr`/`hour`, `d`/`day`); always doubles.
pub(crate) fn moving_average_fn(
    args: Vec<Vec<Series>>,
    params: &[String],
    range: Range,
) -> Result<Vec<Series>, QueryError> {
    if args.is_empty() {
        return Ok(Vec::new());
    }
    let window = moving_window(params)?;
    Ok(all_series(args)
        .map(|mut s| {
            s.dps = moving_average(&s.dps, window, range);
            s
        })
        .collect())
}

/// `timeShift(<series>, '1day')` (also `shift`): every timestamp of the
/// first argument's series moved forward. The other arguments are
/// ignored; points shifted past the query's end are not printed.
///
/// 2.4.1 accepts only a quoted amount but keeps the closing quote in the
/// unit (`unknown time unit=day'`), so every call fails; and it reads
/// every value as a long, which fails on floating point series. Both are
/// plain bugs that leave the function unusable: here the unit stops at
/// the quote and values keep their type.
pub(crate) fn time_shift(
    args: Vec<Vec<Series>>,
    params: &[String],
) -> Result<Vec<Series>, QueryError> {
    if args.is_empty() {
        return Ok(Vec::new());
    }
    let param = params
        .first()
        .ok_or_else(|| failed("Need amount of timeshift to perform timeshift"))?;
    if param.is_empty() {
        return Err(failed(format!("Invalid timeshift='{param}'")));
    }
    let param = param.trim();
    if !(param.starts_with('\'') && param.ends_with('\'')) {
        return Err(failed("Invalid timeshift parameter: eg '10min'"));
    }
    let (digits, rest) = split_quoted_number(param);
    if digits.is_empty() {
        return Err(failed(format!("Invalid Parameter: {param}")));
    }
    let n: i32 = digits
        .parse()
        .map_err(|_| failed(format!("For input string: \"{digits}\"")))?;
    let unit = rest.strip_suffix('\'').unwrap_or(rest).trim();
    let ms: i64 = match unit {
        "sec" => n as i64 * 1000,
        "min" => n as i64 * 60_000,
        "hr" => n as i64 * 3_600_000,
        "day" | "days" => n as i64 * 86_400_000,
        // `time * 7` is an int product in 2.4.1.
        "week" | "weeks" => n.wrapping_mul(7) as i64 * 86_400_000,
        _ => return Err(failed(format!("unknown time unit={unit}"))),
    };
    if ms <= 0 {
        return Err(failed("timeshift <= 0"));
    }
    let first = args.into_iter().next().unwrap_or_default();
    Ok(first
        .into_iter()
        .map(|mut s| {
            for p in &mut s.dps {
                p.0 = p.0.saturating_add(ms);
            }
            s
        })
        .collect())
}

/// `firstDiff(<series>)`: each value minus the previous one, the first 0;
/// doubles. Registered from 2.5 on (2.4.1 answers `Function firstDiff has
/// not been implemented`); the issue asks for it, so it follows 2.5's
/// `FirstDifference`.
pub(crate) fn first_diff(args: Vec<Vec<Series>>) -> Vec<Series> {
    all_series(args)
        .map(|mut s| {
            let mut prev: Option<f64> = None;
            for p in &mut s.dps {
                let v = p.1.as_f64();
                p.1 = Value::Float(prev.map_or(0.0, |q| v - q));
                prev = Some(v);
            }
            s
        })
        .collect()
}

/// Java's `Math.max(double, double)`: NaN wins, and 0.0 beats -0.0.
fn java_max(a: f64, b: f64) -> f64 {
    if a.is_nan() {
        return a;
    }
    if a == 0.0 && b == 0.0 && a.is_sign_negative() {
        return b;
    }
    if a >= b { a } else { b }
}

/// Java's `Double.compare`: NaN above everything, -0.0 below 0.0.
fn java_compare(a: f64, b: f64) -> std::cmp::Ordering {
    use std::cmp::Ordering::*;
    if a < b {
        return Less;
    }
    if a > b {
        return Greater;
    }
    let bits = |d: f64| {
        if d.is_nan() {
            0x7ff8_0000_0000_0000u64 as i64
        } else {
            d.to_bits() as i64
        }
    };
    bits(a).cmp(&bits(b))
}

/// Which value of a series the top-n functions rank it by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rank {
    /// `highestMax`: the largest value in the range.
    Max,
    /// `highestCurrent`: the latest value.
    Current,
}

/// `highestCurrent(<series>, n)` / `highestMax(<series>, n)`: the `n`
/// series with the largest latest / largest value, highest first (ties
/// keep their order).
///
/// As in 2.4.1, the series are walked together the way a group-by is
/// (`AggregationIterator`, linear interpolation), and at each timestamp
/// the values of the series taking part are stored by their position in
/// that list, not by series: where series start or end at different times
/// a value lands on another series' slot (and missing slots read 0).
/// `highestCurrent` keeps the last list of integer values and the last
/// list of doubles seen, and ranks by the larger of the two; series that
/// saw no doubles rank by 4.9E-324 (Java's `Double.MIN_VALUE`), and NaN
/// ranks highest. `highestCurrent` leaves series without points out.
pub(crate) fn highest(
    args: Vec<Vec<Series>>,
    params: &[String],
    rank: Rank,
    range: Range,
    scratch: &mut Scratch,
) -> Result<Vec<Series>, QueryError> {
    if args.is_empty() {
        return Ok(Vec::new());
    }
    let param = params
        .first()
        .ok_or_else(|| failed("Need aggregation window for moving average"))?;
    if param.is_empty() {
        return Err(failed("Missing top n value (number of series to return)"));
    }
    if !param.chars().all(|c| c.is_ascii_digit()) {
        return Err(failed(format!("Unparseable top n value: {param}")));
    }
    let top: i32 = param
        .parse()
        .map_err(|_| failed("Invalid parameter, must be an integer"))?;
    if top < 1 {
        return Err(failed(format!(
            "Top n value must be greater than zero: {top}"
        )));
    }
    let series: Vec<Series> = all_series(args)
        .filter(|s| rank == Rank::Max || !s.dps.is_empty())
        .collect();
    let n = series.len();
    // AggregationIterator seeks every series to the start first.
    let views: Vec<&[(i64, Value)]> = series
        .iter()
        .map(|s| {
            let from = s.dps.partition_point(|p| p.0 < range.start_ms);
            &s.dps[from..]
        })
        .collect();
    let mut longs = vec![i64::MIN; n];
    let mut doubles = vec![f64::from_bits(1); n];
    let (mut has_longs, mut has_doubles) = (false, false);
    group::walk(
        &views,
        Interpolation::Lerp,
        range.start_ms,
        range.end_ms,
        scratch,
        |_, merged| match merged {
            Merged::Longs(v) => {
                has_longs = true;
                for (i, slot) in longs.iter_mut().enumerate() {
                    let x = v.get(i).copied().unwrap_or(0);
                    *slot = match rank {
                        Rank::Max => (*slot).max(x),
                        Rank::Current => x,
                    };
                }
            }
            Merged::Doubles(v) => {
                has_doubles = true;
                for (i, slot) in doubles.iter_mut().enumerate() {
                    let x = v.get(i).copied().unwrap_or(0.0);
                    *slot = match rank {
                        Rank::Max => java_max(*slot, x),
                        Rank::Current => x,
                    };
                }
            }
        },
    );
    let mut order: Vec<(f64, usize)> = (0..n)
        .map(|i| {
            let v = match (has_longs, has_doubles) {
                (true, true) => java_max(longs[i] as f64, doubles[i]),
                (true, false) => longs[i] as f64,
                (false, true) => doubles[i],
                // No point in range at all: 2.4.1 fails on a null entry
                // (a NullPointerException); every series ranks equal.
                (false, false) => 0.0,
            };
            (v, i)
        })
        .collect();
    // Stable, highest first.
    order.sort_by(|a, b| java_compare(b.0, a.0));
    let mut picked: Vec<Option<Series>> = series.into_iter().map(Some).collect();
    Ok(order
        .iter()
        .take(top as usize)
        .filter_map(|&(_, i)| picked[i].take())
        .collect())
}

/// The arithmetic of the cross-series functions, as JEXL evaluates
/// `a + b + c` (left to right, over doubles).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Sum,
    Diff,
    Multiply,
    Divide,
}

impl Op {
    fn apply(self, a: f64, b: f64) -> f64 {
        match self {
            Op::Sum => a + b,
            Op::Diff => a - b,
            Op::Multiply => a * b,
            // JEXL's lenient arithmetic (the default engine) answers a
            // division by zero with 0.
            Op::Divide => {
                if b == 0.0 {
                    0.0
                } else {
                    a / b
                }
            }
        }
    }
}

/// `sumSeries`, `diffSeries`, `multiplySeries`, `divideSeries` (2 to 26
/// arguments): 2.4.1 joins the arguments' series by their tags (a union:
/// a series missing from an argument counts as 0) and computes
/// `a + b + ...` per joined series, a NaN value counting as 0.
///
/// The joined series are ordered by their tag UIDs. Each takes its tags
/// from the first argument's series (none if that one is missing), the
/// metric whose UID is smallest, the union of the aggregated tags, no
/// TSUIDs, an empty annotation list and the first sub-query's settings;
/// its values are doubles.
///
/// 2.4.1 walks the joined series point by point without looking at the
/// timestamps (the n-th points are added and stamped with the smallest
/// of their times), and fails with `No more elements` when one has more
/// points than another. That leaves the functions unusable for series
/// with gaps, so here the points are matched by timestamp: at each
/// timestamp of any joined series, the ones without a point there count
/// as 0. Where the series share their timestamps (the usual downsampled
/// case) both give the same answer.
pub(crate) fn combine(
    args: Vec<Vec<Series>>,
    op: Op,
    uid_name: &mut dyn FnMut(Uid) -> Result<String, QueryError>,
) -> Result<Vec<Series>, QueryError> {
    if args.is_empty() {
        return Ok(Vec::new());
    }
    if args.len() < 2 || args.len() > 26 {
        return Err(failed(format!(
            "Must have 2 to 26 series, got {} instead",
            args.len()
        )));
    }
    let width = args.len();
    let mut joined: BTreeMap<Vec<(Uid, Uid)>, Vec<Option<&Series>>> = BTreeMap::new();
    for (j, arg) in args.iter().enumerate() {
        // A group without points cannot take part (2.4.1 trips over it).
        for s in arg.iter().filter(|s| !s.dps.is_empty()) {
            let key = s.join_tags.iter().map(|t| (t.k, t.v)).collect();
            joined.entry(key).or_insert_with(|| vec![None; width])[j] = Some(s);
        }
    }
    let mut out = Vec::with_capacity(joined.len());
    for members in joined.values() {
        let present = || members.iter().flatten();
        let join_tags: Vec<TagPair> = members[0].map(|s| s.join_tags.clone()).unwrap_or_default();
        let metric_uid = present().map(|s| s.metric_uid).min().flatten();
        let agg_uids: BTreeSet<Uid> = present()
            .flat_map(|s| s.aggregate_tag_uids.iter().copied())
            .collect();
        let mut aggregate_tags = Vec::with_capacity(agg_uids.len());
        for &u in &agg_uids {
            aggregate_tags.push(uid_name(u)?);
        }
        let mut times: Vec<i64> = present().flat_map(|s| s.dps.iter().map(|p| p.0)).collect();
        times.sort_unstable();
        times.dedup();
        let mut cursors = vec![0usize; width];
        let mut dps = Vec::with_capacity(times.len());
        for &t in &times {
            let mut acc = 0.0;
            for (j, m) in members.iter().enumerate() {
                let mut v = 0.0;
                if let Some(s) = m {
                    let c = &mut cursors[j];
                    while *c < s.dps.len() && s.dps[*c].0 < t {
                        *c += 1;
                    }
                    if *c < s.dps.len() && s.dps[*c].0 == t {
                        let x = s.dps[*c].1.as_f64();
                        if !x.is_nan() {
                            v = x;
                        }
                    }
                }
                acc = if j == 0 { v } else { op.apply(acc, v) };
            }
            dps.push((t, Value::Float(acc)));
        }
        out.push(Series {
            metric: None,
            metric_uid,
            tags: join_tags
                .iter()
                .map(|t| (t.k_name.clone(), t.v_name.clone()))
                .collect(),
            tags_map_size: super::DEFAULT_MAP_SIZE,
            join_tags,
            aggregate_tags,
            aggregate_tag_uids: agg_uids.into_iter().collect(),
            tsuids: Vec::new(),
            annotations: Some(Vec::new()),
            query_index: 0,
            dps,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_number_helpers() {
        assert!(java_max(f64::NAN, 1.0).is_nan());
        assert!(java_max(1.0, f64::NAN).is_nan());
        assert!(java_max(-0.0, 0.0).is_sign_positive());
        assert_eq!(
            java_compare(f64::NAN, f64::INFINITY),
            std::cmp::Ordering::Greater
        );
        assert_eq!(java_compare(-0.0, 0.0), std::cmp::Ordering::Less);
        // Java's Double.MIN_VALUE.
        assert_eq!(f64::from_bits(1), 4.9e-324);
    }
}
