//! Downsampling (`DownsamplingSpecification`, `Downsampler`,
//! `FillingDownsampler`): spec parsing, bucket alignment (epoch-aligned,
//! `all`, or calendar boundaries in a time zone) and the per-series
//! streaming downsampler with fill policies.

use chrono::{Datelike, Duration, LocalResult, NaiveDate, NaiveDateTime, TimeZone, Timelike};
use chrono_tz::Tz;

use super::aggregator::Aggregator;
use crate::model::Value;
use crate::model::aggregator::Fold;
use crate::model::time::parse_duration;
use crate::store::read::Point;

/// What to emit for an empty bucket between the query's start and end.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FillPolicy {
    /// Emit nothing (the default); the group-by merge interpolates.
    None,
    /// Emit NaN, serialized as `"NaN"`.
    Nan,
    /// Emit NaN, serialized as `null`.
    Null,
    /// Emit 0.
    Zero,
    /// Emit a fixed value (only `/api/query/exp` can set one; 0 here).
    Scalar(f64),
}

impl FillPolicy {
    pub fn name(&self) -> &'static str {
        match self {
            FillPolicy::None => "none",
            FillPolicy::Nan => "nan",
            FillPolicy::Null => "null",
            FillPolicy::Zero => "zero",
            FillPolicy::Scalar(_) => "scalar",
        }
    }

    fn parse(s: &str) -> Option<FillPolicy> {
        Some(match s.to_ascii_lowercase().as_str() {
            "none" => FillPolicy::None,
            "nan" => FillPolicy::Nan,
            "null" => FillPolicy::Null,
            "zero" => FillPolicy::Zero,
            "scalar" => FillPolicy::Scalar(0.0),
            _ => return None,
        })
    }

    fn value(&self) -> Option<f64> {
        match self {
            FillPolicy::None => None,
            FillPolicy::Nan | FillPolicy::Null => Some(f64::NAN),
            FillPolicy::Zero => Some(0.0),
            FillPolicy::Scalar(v) => Some(*v),
        }
    }
}

/// Calendar units for `c` intervals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CalendarUnit {
    Millis,
    Seconds,
    Minutes,
    Hours,
    Days,
    Weeks,
    Months,
    Years,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Interval {
    /// Epoch-aligned buckets of this many milliseconds.
    Fixed(u64),
    /// Calendar buckets of `n` units in the query's time zone.
    Calendar { n: u32, unit: CalendarUnit },
    /// One bucket for the whole query (`0all`).
    All,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DownsampleSpec {
    pub text: String,
    pub interval: Interval,
    pub function: Aggregator,
    pub fill: FillPolicy,
}

impl DownsampleSpec {
    /// Parses `<interval><unit>[c]-<aggregator>[-<fill>]` with OpenTSDB's
    /// error messages. `use_calendar` is the query's `useCalendar` flag.
    pub fn parse(spec: &str, use_calendar: bool) -> Result<DownsampleSpec, String> {
        let parts: Vec<&str> = java_split(spec, '-');
        if parts.len() < 2 {
            return Err(format!(
                "Invalid downsampling specifier '{spec}': must provide at least interval and function"
            ));
        }
        if parts.len() > 3 {
            return Err(format!(
                "Invalid downsampling specifier '{spec}': must consist of interval, function, and optional fill policy"
            ));
        }
        let interval = if parts[0].contains("all") {
            Interval::All
        } else {
            let (text, calendar) = match parts[0].strip_suffix('c') {
                Some(t) => (t, true),
                None => (parts[0], use_calendar),
            };
            let ms = parse_duration(text).map_err(|e| e.to_string())?;
            if calendar {
                let digits = text.bytes().take_while(|b| b.is_ascii_digit()).count();
                let n: u32 = text[..digits]
                    .parse()
                    .map_err(|_| format!("Invalid duration (number): {text}"))?;
                let unit = match text[digits..].to_ascii_lowercase().as_str() {
                    "ms" => CalendarUnit::Millis,
                    "s" => CalendarUnit::Seconds,
                    "m" => CalendarUnit::Minutes,
                    "h" => CalendarUnit::Hours,
                    "d" => CalendarUnit::Days,
                    "w" => CalendarUnit::Weeks,
                    "n" => CalendarUnit::Months,
                    _ => CalendarUnit::Years,
                };
                Interval::Calendar { n, unit }
            } else {
                Interval::Fixed(ms)
            }
        };
        if parts[1] == "none" {
            return Err("cannot use the NONE aggregator for downsampling".into());
        }
        let function = Aggregator::by_name(parts[1])
            .ok_or_else(|| format!("No such downsampling function: {}", parts[1]))?;
        let fill = match parts.get(2) {
            None => FillPolicy::None,
            Some(p) => FillPolicy::parse(p).ok_or_else(|| {
                format!("No such fill policy: '{p}': must be one of: none zero nan null scalar")
            })?,
        };
        Ok(DownsampleSpec {
            text: spec.to_string(),
            interval,
            function,
            fill,
        })
    }

    /// The interval in ms for scan-range alignment (0 for `all`; the
    /// nominal length for calendar units).
    pub fn interval_ms(&self) -> u64 {
        match self.interval {
            Interval::Fixed(ms) => ms,
            Interval::All => 0,
            Interval::Calendar { n, unit } => {
                n as u64
                    * match unit {
                        CalendarUnit::Millis => 1,
                        CalendarUnit::Seconds => 1000,
                        CalendarUnit::Minutes => 60_000,
                        CalendarUnit::Hours => 3_600_000,
                        CalendarUnit::Days => 86_400_000,
                        CalendarUnit::Weeks => 7 * 86_400_000,
                        CalendarUnit::Months => 30 * 86_400_000,
                        CalendarUnit::Years => 365 * 86_400_000,
                    }
            }
        }
    }
}

/// Java's `String.split(regex)` for a single literal char: trailing empty
/// strings are removed.
pub(crate) fn java_split(s: &str, sep: char) -> Vec<&str> {
    let mut parts: Vec<&str> = s.split(sep).collect();
    while parts.len() > 1 && parts.last() == Some(&"") {
        parts.pop();
    }
    if parts == [""] && !s.is_empty() {
        parts.clear();
    }
    parts
}

/// Maps timestamps to bucket starts for one query.
#[derive(Debug, Clone)]
pub(crate) struct Bucketer {
    interval: Interval,
    tz: Tz,
    query_start: i64,
    query_end: i64,
    /// Calendar anchor: the query start truncated to the unit.
    anchor: NaiveDateTime,
}

impl Bucketer {
    pub(crate) fn new(spec: &DownsampleSpec, tz: Tz, query_start: i64, query_end: i64) -> Bucketer {
        let mut b = Bucketer {
            interval: spec.interval,
            tz,
            query_start,
            query_end,
            anchor: NaiveDateTime::default(),
        };
        if let Interval::Calendar { unit, .. } = spec.interval {
            b.anchor = truncate(b.local(query_start), unit);
        }
        b
    }

    fn local(&self, ms: i64) -> NaiveDateTime {
        self.tz
            .timestamp_millis_opt(ms)
            .single()
            .map(|t| t.naive_local())
            .unwrap_or_default()
    }

    fn to_utc(&self, local: NaiveDateTime) -> i64 {
        match self.tz.from_local_datetime(&local) {
            LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => t.timestamp_millis(),
            // A local time skipped by a DST jump: take the instant an hour later.
            LocalResult::None => self
                .tz
                .from_local_datetime(&(local + Duration::hours(1)))
                .earliest()
                .map(|t| t.timestamp_millis())
                .unwrap_or(0),
        }
    }

    /// Start of the bucket holding `ts`; `None` if it is outside the single
    /// `all` bucket `[query_start, query_end)`.
    pub(crate) fn bucket(&self, ts: i64) -> Option<i64> {
        match self.interval {
            Interval::Fixed(iv) => {
                let iv = iv as i64;
                Some(ts - ts.rem_euclid(iv))
            }
            Interval::All => {
                (ts >= self.query_start && ts < self.query_end).then_some(self.query_start)
            }
            Interval::Calendar { n, unit } => {
                let t = truncate(self.local(ts), unit);
                let k = units_between(self.anchor, t, unit).div_euclid(n as i64);
                Some(self.to_utc(add_units(self.anchor, k * n as i64, unit)))
            }
        }
    }

    /// Where the bucket starting at `bucket` ends (exclusive): the next
    /// bucket's start, or the query's end for the single `all` bucket.
    fn end_of(&self, bucket: i64) -> i64 {
        match self.interval {
            Interval::All => self.query_end,
            _ => self.next(bucket),
        }
    }

    /// The bucket after `bucket`.
    #[inline]
    pub(crate) fn next(&self, bucket: i64) -> i64 {
        match self.interval {
            Interval::Fixed(iv) => bucket + iv as i64,
            Interval::All => i64::MAX,
            Interval::Calendar { n, unit } => {
                let t = truncate(self.local(bucket), unit);
                let k = units_between(self.anchor, t, unit).div_euclid(n as i64);
                self.to_utc(add_units(self.anchor, (k + 1) * n as i64, unit))
            }
        }
    }
}

impl Bucketer {
    /// Where 2.4.1's `HistogramDownsampler.seekInterval(query start)`
    /// seeks: the query start rounded up to the next bucket boundary
    /// (epoch-aligned for a fixed interval, on [`previous_interval`]'s
    /// grid for a calendar one); histograms before it are not read.
    pub(crate) fn histogram_seek(&self) -> i64 {
        let start = self.query_start;
        match self.interval {
            Interval::Fixed(iv) => {
                let iv = iv as i64;
                let t = start + iv - 1;
                t - t.rem_euclid(iv)
            }
            Interval::All => start,
            Interval::Calendar { n, unit } => {
                let local = self.local(start);
                let prev = previous_interval(local, n, unit);
                let seek = if local > prev {
                    add_units(prev, n as i64, unit)
                } else {
                    prev
                };
                self.to_utc(seek)
            }
        }
    }

    /// This bucketer with its calendar buckets anchored as 2.4.1's
    /// `HistogramDownsampler` anchors them: on the interval holding the
    /// series' first histogram (`first`, ms) by [`previous_interval`],
    /// stepping `n` units from there. Fixed and `all` buckets are as they
    /// were.
    pub(crate) fn anchored_on(&self, first: i64) -> Bucketer {
        let mut b = self.clone();
        if let Interval::Calendar { n, unit } = self.interval {
            b.anchor = previous_interval(self.local(first), n, unit);
        }
        b
    }
}

/// 2.4.1's `DateTime.previousInterval`: the start of the `n`-`unit`
/// interval holding `t` (local time) on a grid of `n`-unit steps from the
/// top of the next larger period when `n` divides it (`15m` from the top
/// of the hour) and of the one above otherwise (`7m` from the top of the
/// day, `2d` from the first of January). Weeks start on Sunday and step a
/// week at a time whatever `n` (Java's lenient calendar resolves its
/// "top of year" for weeks to a Sunday too).
pub(crate) fn previous_interval(t: NaiveDateTime, n: u32, unit: CalendarUnit) -> NaiveDateTime {
    use CalendarUnit::*;
    let n = n.max(1);
    let top = match unit {
        Millis if 1000 % n == 0 => truncate(t, Seconds),
        Millis => truncate(t, Minutes),
        Seconds if 60 % n == 0 => truncate(t, Minutes),
        Seconds => truncate(t, Hours),
        Minutes if 60 % n == 0 => truncate(t, Hours),
        Minutes => truncate(t, Days),
        Hours if 24 % n == 0 => truncate(t, Days),
        Hours => truncate(t, Months),
        Days if n == 1 => truncate(t, Months),
        Days => truncate(t, Years),
        Weeks => return truncate(t, Weeks),
        Months | Years => truncate(t, Years),
    };
    let k = units_between(top, t, unit).div_euclid(n as i64);
    add_units(top, k * n as i64, unit)
}

fn truncate(t: NaiveDateTime, unit: CalendarUnit) -> NaiveDateTime {
    let d = t.date();
    let midnight = |d: NaiveDate| d.and_hms_opt(0, 0, 0).unwrap_or_default();
    match unit {
        CalendarUnit::Millis => t,
        CalendarUnit::Seconds => t.with_nanosecond(0).unwrap_or(t),
        CalendarUnit::Minutes => d.and_hms_opt(t.hour(), t.minute(), 0).unwrap_or(t),
        CalendarUnit::Hours => d.and_hms_opt(t.hour(), 0, 0).unwrap_or(t),
        CalendarUnit::Days => midnight(d),
        // Weeks start on Sunday (Java's default US locale).
        CalendarUnit::Weeks => {
            midnight(d - Duration::days(d.weekday().num_days_from_sunday() as i64))
        }
        CalendarUnit::Months => midnight(d.with_day(1).unwrap_or(d)),
        CalendarUnit::Years => midnight(NaiveDate::from_ymd_opt(d.year(), 1, 1).unwrap_or(d)),
    }
}

fn units_between(a: NaiveDateTime, b: NaiveDateTime, unit: CalendarUnit) -> i64 {
    let ms = (b - a).num_milliseconds();
    match unit {
        CalendarUnit::Millis => ms,
        CalendarUnit::Seconds => ms.div_euclid(1000),
        CalendarUnit::Minutes => ms.div_euclid(60_000),
        CalendarUnit::Hours => ms.div_euclid(3_600_000),
        CalendarUnit::Days => (b.date() - a.date()).num_days(),
        CalendarUnit::Weeks => (b.date() - a.date()).num_days().div_euclid(7),
        CalendarUnit::Months => {
            (b.year() as i64 * 12 + b.month0() as i64) - (a.year() as i64 * 12 + a.month0() as i64)
        }
        CalendarUnit::Years => (b.year() - a.year()) as i64,
    }
}

fn add_units(a: NaiveDateTime, k: i64, unit: CalendarUnit) -> NaiveDateTime {
    match unit {
        CalendarUnit::Millis => a + Duration::milliseconds(k),
        CalendarUnit::Seconds => a + Duration::seconds(k),
        CalendarUnit::Minutes => a + Duration::minutes(k),
        CalendarUnit::Hours => a + Duration::hours(k),
        CalendarUnit::Days => a + Duration::days(k),
        CalendarUnit::Weeks => a + Duration::days(7 * k),
        CalendarUnit::Months | CalendarUnit::Years => {
            let months = if unit == CalendarUnit::Years {
                12 * k
            } else {
                k
            };
            let total = a.year() as i64 * 12 + a.month0() as i64 + months;
            let (y, m) = (total.div_euclid(12) as i32, total.rem_euclid(12) as u32 + 1);
            NaiveDate::from_ymd_opt(y, m, 1)
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .unwrap_or(a)
        }
    }
}

/// One series' downsampler: feed points in time order, get buckets out.
/// Values are always doubles, as OpenTSDB's downsampler reports.
pub(crate) struct Downsampler<'a> {
    spec: &'a DownsampleSpec,
    bucketer: &'a Bucketer,
    current: Option<i64>,
    /// Where `current` ends (exclusive): a point before it, in time order,
    /// joins the current bucket without the bucketer's division.
    current_end: i64,
    /// The fixed interval, ms: a point in the bucket right after the
    /// current one (the usual case, in time order) needs no division.
    step: Option<i64>,
    /// The current bucket's values, for functions that need them all
    /// (median, percentiles, dev...).
    values: Vec<f64>,
    /// The current bucket folded so far, for functions that need only a
    /// running value ([`Fold`]): then `values` stays empty.
    fold: Option<Fold>,
    /// Fill range (inclusive bucket starts), when the policy fills.
    fill: Option<(i64, i64)>,
    /// Next bucket start still owed a fill value.
    next_fill: i64,
    /// Points the last bucket of a fixed-interval fold took from a row
    /// (the next one likely takes as many).
    last_taken: usize,
}

impl<'a> Downsampler<'a> {
    /// `fill_range`: first and last bucket starts to fill (from the query
    /// range); ignored for the `none` policy.
    pub(crate) fn new(
        spec: &'a DownsampleSpec,
        bucketer: &'a Bucketer,
        fill_range: (i64, i64),
    ) -> Downsampler<'a> {
        let fill = spec.fill.value().map(|_| fill_range);
        let fold = Fold::new(spec.function.function);
        Downsampler {
            spec,
            bucketer,
            current: None,
            current_end: i64::MIN,
            step: match spec.interval {
                Interval::Fixed(iv) if iv > 0 => Some(iv as i64),
                _ => None,
            },
            values: if fold.is_some() {
                Vec::new()
            } else {
                Vec::with_capacity(16)
            },
            fold,
            fill,
            next_fill: fill_range.0,
            last_taken: 0,
        }
    }

    #[inline]
    fn add(&mut self, v: Value) {
        match &mut self.fold {
            Some(f) => f.add(v.as_f64()),
            None => self.values.push(v.as_f64()),
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, ts: i64, v: Value, out: &mut Vec<(i64, Value)>) {
        if let Some(b) = self.current
            && ts >= b
            && ts < self.current_end
        {
            self.add(v);
            return;
        }
        let b = match self.step {
            // The next bucket: no division (the bucketer's own rule,
            // epoch-aligned steps of the interval).
            Some(step)
                if self.current.is_some()
                    && ts >= self.current_end
                    && ts - self.current_end < step =>
            {
                self.current_end
            }
            _ => match self.bucketer.bucket(ts) {
                Some(b) => b,
                None => return,
            },
        };
        if self.current != Some(b) {
            self.flush(out);
            self.current = Some(b);
            self.current_end = self.bucketer.end_of(b);
        }
        self.add(v);
    }

    /// Feeds a row's points, in time order: the same as [`push`](Self::push)
    /// point by point, but a run of points inside the current bucket of a
    /// folding function is added in one tight loop, the fold kept in a
    /// local and its function picked once per run, not once per point.
    pub(crate) fn push_points(&mut self, pts: &[Point], out: &mut Vec<(i64, Value)>) {
        if let (Some(step), Some(_)) = (self.step, self.fold) {
            self.fold_fixed(step, pts, out);
            return;
        }
        let mut rest = pts;
        while let Some((first, tail)) = rest.split_first() {
            self.push(first.timestamp_ms() as i64, first.value(), out);
            rest = tail;
            let (Some(b), Some(fold)) = (self.current, self.fold.as_mut()) else {
                continue;
            };
            // Points in time order: those before the bucket's end (and not
            // before its start, which a sorted row cannot hold once one of
            // its points is in the bucket) join it.
            let end = self.current_end;
            let run = rest
                .iter()
                .take_while(|p| (p.timestamp_ms() as i64) < end && (p.timestamp_ms() as i64) >= b)
                .count();
            fold.add_all(rest[..run].iter().map(|p| p.value().as_f64()));
            rest = &rest[run..];
        }
    }

    /// [`push_points`](Self::push_points) for a folding function over
    /// fixed buckets of `step` ms (the usual dashboard downsampler): a
    /// bucket's points are found and folded in one pass, and the next
    /// bucket is computed as [`push`](Self::push) computes it.
    #[inline]
    fn fold_fixed(&mut self, step: i64, pts: &[Point], out: &mut Vec<(i64, Value)>) {
        let mut rest = pts;
        while let Some(p) = rest.first() {
            let ts = p.timestamp_ms() as i64;
            let inside = matches!(self.current, Some(b) if ts >= b && ts < self.current_end);
            if !inside {
                // `push`'s rule: the bucket right after the current one
                // without a division, else the epoch-aligned one.
                let b = match self.current {
                    Some(_) if ts >= self.current_end && ts - self.current_end < step => {
                        self.current_end
                    }
                    _ => ts - ts.rem_euclid(step),
                };
                match (self.current, self.fill, self.fold.as_mut()) {
                    // Without fill values the closed bucket is its value
                    // alone: what `flush` writes then, without its
                    // general steps.
                    (Some(closed), None, Some(fold)) => {
                        out.push((closed, Value::Float(fold.take())));
                    }
                    _ => self.flush(out),
                }
                self.current = Some(b);
                self.current_end = b + step;
            }
            let (end, Some(fold)) = (self.current_end, self.fold.as_mut()) else {
                return;
            };
            // The bucket's points: the first is in it, and the row is in
            // time order, so they run up to the first at or past its end.
            // Regular points put as many in each bucket: the last
            // bucket's count is tried first, two comparisons instead of
            // one per point, and the fold is a loop over a known slice.
            let before_end = |p: &Point| (p.timestamp_ms() as i64) < end;
            let guess = self.last_taken;
            let taken = if guess > 0
                && guess <= rest.len()
                && before_end(&rest[guess - 1])
                && rest.get(guess).is_none_or(|p| !before_end(p))
            {
                guess
            } else {
                rest.iter().take_while(|p| before_end(p)).count()
            };
            self.last_taken = taken;
            fold.add_all(rest[..taken].iter().map(|p| p.value().as_f64()));
            rest = &rest[taken..];
        }
    }

    fn flush(&mut self, out: &mut Vec<(i64, Value)>) {
        let Some(b) = self.current.take() else {
            return;
        };
        self.fill_until(b, out);
        let v = match &mut self.fold {
            Some(f) => f.take(),
            None => {
                let v = self.spec.function.run_double(&mut self.values);
                self.values.clear();
                v
            }
        };
        out.push((b, Value::Float(v)));
        if self.fill.is_some() && b >= self.next_fill {
            self.next_fill = self.bucketer.next(b);
        }
    }

    /// Emits fill values for empty buckets before `limit` (exclusive).
    fn fill_until(&mut self, limit: i64, out: &mut Vec<(i64, Value)>) {
        let (Some((_, last)), Some(v)) = (self.fill, self.spec.fill.value()) else {
            return;
        };
        while self.next_fill < limit && self.next_fill <= last {
            out.push((self.next_fill, Value::Float(v)));
            self.next_fill = self.bucketer.next(self.next_fill);
        }
    }

    pub(crate) fn finish(mut self, out: &mut Vec<(i64, Value)>) {
        self.flush(out);
        self.fill_until(i64::MAX, out);
    }

    /// Where this downsampler stands, detached from the query it runs
    /// in, for [`Downsampler::resume`].
    pub(crate) fn state(&self) -> DownsamplerState {
        DownsamplerState {
            current: self.current,
            values: self.values.clone(),
            fold: self.fold,
            next_fill: self.next_fill,
        }
    }

    /// A downsampler that goes on from `state` (taken from one with the
    /// same spec, bucketing and first fill bucket); `fill_range` may end
    /// later than the one `state` was taken under.
    pub(crate) fn resume(
        spec: &'a DownsampleSpec,
        bucketer: &'a Bucketer,
        fill_range: (i64, i64),
        state: &DownsamplerState,
    ) -> Downsampler<'a> {
        let mut d = Downsampler::new(spec, bucketer, fill_range);
        d.current = state.current;
        d.current_end = state.current.map_or(i64::MIN, |b| bucketer.end_of(b));
        d.values.clone_from(&state.values);
        d.fold = state.fold;
        d.next_fill = state.next_fill;
        d
    }
}

/// A [`Downsampler`]'s position: the open bucket and its values, and the
/// next bucket owed a fill value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DownsamplerState {
    current: Option<i64>,
    values: Vec<f64>,
    fold: Option<Fold>,
    next_fill: i64,
}

impl DownsamplerState {
    /// Heap bytes held (for the cache's memory bound).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.values.capacity() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(spec: &str, start: i64, end: i64, pts: &[(i64, Value)]) -> Vec<(i64, Value)> {
        let spec = DownsampleSpec::parse(spec, false).unwrap();
        let b = Bucketer::new(&spec, Tz::UTC, start, end);
        let range = (
            b.bucket(start).unwrap_or(start),
            b.bucket(end).unwrap_or(end),
        );
        let mut d = Downsampler::new(&spec, &b, range);
        let mut out = Vec::new();
        for &(t, v) in pts {
            d.push(t, v, &mut out);
        }
        d.finish(&mut out);
        out
    }

    #[test]
    fn parse_errors_like_opentsdb() {
        let e = |s| DownsampleSpec::parse(s, false).unwrap_err();
        assert_eq!(
            e("1m"),
            "Invalid downsampling specifier '1m': must provide at least interval and function"
        );
        assert_eq!(e("1m-foo"), "No such downsampling function: foo");
        assert_eq!(
            e("1m-none"),
            "cannot use the NONE aggregator for downsampling"
        );
        assert_eq!(
            e("1m-avg-bad"),
            "No such fill policy: 'bad': must be one of: none zero nan null scalar"
        );
        assert_eq!(e("1x-avg"), "Invalid duration (suffix): 1x");
        let s = DownsampleSpec::parse("1dc-sum", false).unwrap();
        assert_eq!(
            s.interval,
            Interval::Calendar {
                n: 1,
                unit: CalendarUnit::Days
            }
        );
        assert_eq!(
            DownsampleSpec::parse("0all-sum", false).unwrap().interval,
            Interval::All
        );
    }

    #[test]
    fn epoch_aligned_buckets_and_fill() {
        let i = Value::Int;
        let pts = [(0, i(1)), (30_000, i(3)), (130_000, i(5))];
        assert_eq!(
            run("1m-avg", 0, 180_000, &pts),
            vec![(0, Value::Float(2.0)), (120_000, Value::Float(5.0))]
        );
        let z = run("1m-sum-zero", 0, 180_000, &pts);
        assert_eq!(
            z,
            vec![
                (0, Value::Float(4.0)),
                (60_000, Value::Float(0.0)),
                (120_000, Value::Float(5.0)),
                (180_000, Value::Float(0.0))
            ]
        );
        let n = run("1m-sum-nan", 0, 180_000, &[]);
        assert_eq!(n.len(), 4);
        // `all`: one bucket at the query start, end exclusive.
        assert_eq!(
            run("0all-sum", 10_000, 130_000, &pts),
            vec![(10_000, Value::Float(3.0))]
        );
    }

    #[test]
    fn calendar_buckets_in_a_zone() {
        let spec = DownsampleSpec::parse("1dc-sum", false).unwrap();
        let tz: Tz = "America/New_York".parse().unwrap();
        // 2013-01-01T12:00Z = 07:00 New York: its day starts at 05:00Z.
        let b = Bucketer::new(&spec, tz, 1357041600000, 1357041600000 + 86_400_000);
        assert_eq!(b.bucket(1357041600000), Some(1357016400000));
        assert_eq!(b.next(1357016400000), 1357016400000 + 86_400_000);
        let spec = DownsampleSpec::parse("1nc-sum", false).unwrap();
        let b = Bucketer::new(&spec, Tz::UTC, 1357041600000, 1360000000000);
        // Feb 1 2013 00:00Z
        assert_eq!(b.bucket(1359800000000), Some(1359676800000));
    }

    proptest::proptest! {
        /// Rows fed at once give what feeding them point by point gives,
        /// bit for bit, for every function, interval kind and fill.
        #[test]
        fn rows_fed_at_once_downsample_as_points_do(
            rows in proptest::collection::vec(crate::query::rate::tests::arb_row(), 1..4),
            function in proptest::sample::select(vec!["avg", "sum", "min", "max", "count", "zimsum", "squareSum", "dev", "last", "p95"]),
            interval in proptest::sample::select(vec!["1m", "10s", "7s", "1h", "0all", "1mc"]),
            fill in proptest::sample::select(vec!["", "-nan", "-zero"]),
        ) {
            let spec = DownsampleSpec::parse(&format!("{interval}-{function}{fill}"), false).unwrap();
            let (start, end) = (1_356_998_400_000i64 + 5_000, 1_356_998_400_000 + 3 * 3_600_000);
            let b = Bucketer::new(&spec, Tz::UTC, start, end);
            let range = (b.bucket(start).unwrap_or(start), b.bucket(end).unwrap_or(end));
            let (mut one, mut all) = (Downsampler::new(&spec, &b, range), Downsampler::new(&spec, &b, range));
            let (mut out_one, mut out_all) = (Vec::new(), Vec::new());
            for row in &crate::query::rate::tests::one_series(&rows) {
                for p in row {
                    one.push(p.timestamp_ms() as i64, p.value(), &mut out_one);
                }
                all.push_points(row, &mut out_all);
            }
            one.finish(&mut out_one);
            all.finish(&mut out_all);
            let bits = |o: &[(i64, Value)]| -> Vec<(i64, u64)> {
                o.iter().map(|(t, v)| (*t, v.as_f64().to_bits())).collect()
            };
            proptest::prop_assert_eq!(bits(&out_one), bits(&out_all));
        }
    }
}
