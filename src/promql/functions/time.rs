//! The functions of time: `time()`, `timestamp(v)`, and the date
//! functions (`year`, `month`, `day_of_month`, `day_of_year`,
//! `day_of_week`, `days_in_month`, `hour`, `minute`), in UTC.
//!
//! A date function reads each element's value as Unix seconds (cut to a
//! whole second towards zero, as Go's `int64(v)` does), or with no
//! argument the evaluation time, and answers by Go's civil calendar
//! arithmetic. That arithmetic is reproduced here step for step (with
//! its 64-bit wrap-around) so that every input, even a NaN or a time
//! billions of years away, gives 2.42's answer: Go on x86-64 turns a NaN
//! or out-of-range float into the lowest 64-bit integer.

use super::{FnContext, at_step};
use crate::promql::value::{Labels, VectorSample};

/// `time()`: the evaluation time in seconds.
pub fn time(ctx: &FnContext) -> f64 {
    ctx.eval_ms as f64 / 1000.0
}

/// `timestamp(v)`: each element's time in seconds (the engine hands in
/// the stored sample's time as `t`), without `__name__`.
pub fn timestamp(input: Vec<VectorSample>, ctx: &FnContext) -> Vec<VectorSample> {
    input
        .into_iter()
        .map(|s| at_step(s.labels.without_name(), s.t as f64 / 1000.0, ctx))
        .collect()
}

/// One of the date functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DateFn {
    Year,
    Month,
    DayOfMonth,
    DayOfYear,
    DayOfWeek,
    DaysInMonth,
    Hour,
    Minute,
}

impl DateFn {
    /// The date function PromQL calls `name`, if it is one.
    pub fn from_name(name: &str) -> Option<DateFn> {
        Some(match name {
            "year" => DateFn::Year,
            "month" => DateFn::Month,
            "day_of_month" => DateFn::DayOfMonth,
            "day_of_year" => DateFn::DayOfYear,
            "day_of_week" => DateFn::DayOfWeek,
            "days_in_month" => DateFn::DaysInMonth,
            "hour" => DateFn::Hour,
            "minute" => DateFn::Minute,
            _ => return None,
        })
    }

    /// The function's answer for the instant `unix_seconds`.
    fn of(self, unix_seconds: i64) -> f64 {
        let t = GoTime::from_unix(unix_seconds);
        let v = match self {
            DateFn::Year => t.date().year,
            DateFn::Month => t.date().month,
            DateFn::DayOfMonth => t.date().day,
            DateFn::DayOfYear => t.date().year_day,
            DateFn::DayOfWeek => t.weekday(),
            DateFn::DaysInMonth => {
                let d = t.date();
                days_in_month(d.month, d.year)
            }
            DateFn::Hour => t.seconds_of_day() / SECONDS_PER_HOUR as i64,
            DateFn::Minute => (t.seconds_of_day() % SECONDS_PER_HOUR as i64) / 60,
        };
        v as f64
    }
}

/// A date function with no argument: one element, no labels, for the
/// evaluation time.
pub fn date_of_eval_time(f: DateFn, ctx: &FnContext) -> Vec<VectorSample> {
    // Go's integer division truncates towards zero, as Rust's does.
    let seconds = ctx.eval_ms / 1000;
    vec![at_step(Labels::default(), f.of(seconds), ctx)]
}

/// A date function of each element's value, without `__name__`.
pub fn date_of_values(f: DateFn, input: Vec<VectorSample>, ctx: &FnContext) -> Vec<VectorSample> {
    input
        .into_iter()
        .map(|s| at_step(s.labels.without_name(), f.of(go_float_to_int(s.v)), ctx))
        .collect()
}

/// Go's `int64(v)` on x86-64: truncation towards zero, and the lowest
/// integer for NaN and anything out of range (the CPU's "integer
/// indefinite").
fn go_float_to_int(v: f64) -> i64 {
    // 2^63 is exact as a float; every float in [-2^63, 2^63) fits.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if (-LIMIT..LIMIT).contains(&v) {
        v.trunc() as i64
    } else {
        i64::MIN
    }
}

const SECONDS_PER_HOUR: u64 = 3600;
const SECONDS_PER_DAY: u64 = 24 * SECONDS_PER_HOUR;
const SECONDS_PER_WEEK: u64 = 7 * SECONDS_PER_DAY;
const DAYS_PER_400_YEARS: u64 = 365 * 400 + 97;
const DAYS_PER_100_YEARS: u64 = 365 * 100 + 24;
const DAYS_PER_4_YEARS: u64 = 365 * 4 + 1;

/// Go's calendar epoch: the year its absolute day count starts at.
const ABSOLUTE_ZERO_YEAR: i64 = -292_277_022_399;
/// Seconds from Go's absolute epoch to its internal one (year 1), i.e.
/// (ABSOLUTE_ZERO_YEAR − 1) · 365.2425 days, negated.
const INTERNAL_TO_ABSOLUTE: i64 = 9_223_371_966_579_724_800;
/// Seconds from year 1 to 1970-01-01.
const UNIX_TO_INTERNAL: i64 = (1969 * 365 + 1969 / 4 - 1969 / 100 + 1969 / 400) * 86_400;

/// A UTC instant as Go's `time` package counts it: unsigned seconds
/// since its absolute epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct GoTime {
    abs: u64,
}

/// A civil date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Date {
    year: i64,
    /// 1–12.
    month: i64,
    /// 1–31.
    day: i64,
    /// 1–366.
    year_day: i64,
}

/// Days before each month of a non-leap year (index 12 is the year).
const DAYS_BEFORE: [i64; 13] = [
    0,
    31,
    31 + 28,
    31 + 28 + 31,
    31 + 28 + 31 + 30,
    31 + 28 + 31 + 30 + 31,
    31 + 28 + 31 + 30 + 31 + 30,
    31 + 28 + 31 + 30 + 31 + 30 + 31,
    31 + 28 + 31 + 30 + 31 + 30 + 31 + 31,
    31 + 28 + 31 + 30 + 31 + 30 + 31 + 31 + 30,
    31 + 28 + 31 + 30 + 31 + 30 + 31 + 31 + 30 + 31,
    31 + 28 + 31 + 30 + 31 + 30 + 31 + 31 + 30 + 31 + 30,
    365,
];

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

/// 2.42's `days_in_month`: February has 29 days in a leap year.
fn days_in_month(month: i64, year: i64) -> i64 {
    if month == 2 && is_leap(year) {
        return 29;
    }
    let m = month.clamp(1, 12) as usize;
    DAYS_BEFORE[m] - DAYS_BEFORE[m - 1]
}

impl GoTime {
    /// `time.Unix(seconds, 0).UTC()`, with Go's wrapping arithmetic.
    fn from_unix(seconds: i64) -> GoTime {
        GoTime {
            abs: seconds.wrapping_add(UNIX_TO_INTERNAL.wrapping_add(INTERNAL_TO_ABSOLUTE)) as u64,
        }
    }

    fn seconds_of_day(self) -> i64 {
        (self.abs % SECONDS_PER_DAY) as i64
    }

    /// 0 = Sunday … 6 = Saturday (January 1 of the absolute year was a
    /// Monday).
    fn weekday(self) -> i64 {
        let sec = (self.abs.wrapping_add(SECONDS_PER_DAY)) % SECONDS_PER_WEEK;
        (sec / SECONDS_PER_DAY) as i64
    }

    /// Go's `absDate`: 400-, 100-, 4- and 1-year cycles, then the month.
    fn date(self) -> Date {
        let mut d = self.abs / SECONDS_PER_DAY;
        let mut n = d / DAYS_PER_400_YEARS;
        let mut y = 400 * n;
        d -= DAYS_PER_400_YEARS * n;

        // The last 100-year cycle has one extra leap day: on its last day
        // the quotient is 4, cut back to 3.
        n = d / DAYS_PER_100_YEARS;
        n -= n >> 2;
        y += 100 * n;
        d -= DAYS_PER_100_YEARS * n;

        n = d / DAYS_PER_4_YEARS;
        y += 4 * n;
        d -= DAYS_PER_4_YEARS * n;

        n = d / 365;
        n -= n >> 2;
        y += n;
        d -= 365 * n;

        let year = (y as i64).wrapping_add(ABSOLUTE_ZERO_YEAR);
        let year_day = d as i64;
        let mut day = year_day;
        if is_leap(year) {
            if day > 31 + 29 - 1 {
                // After the leap day: count as if it were not there.
                day -= 1;
            } else if day == 31 + 29 - 1 {
                return Date {
                    year,
                    month: 2,
                    day: 29,
                    year_day: year_day + 1,
                };
            }
        }
        // Guess the month as if every month had 31 days; the guess is at
        // most one short.
        let mut month = (day / 31) as usize;
        let end = DAYS_BEFORE[month + 1];
        let begin = if day >= end {
            month += 1;
            end
        } else {
            DAYS_BEFORE[month]
        };
        Date {
            year,
            month: month as i64 + 1,
            day: day - begin + 1,
            year_day: year_day + 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(f: DateFn, unix_seconds: f64) -> f64 {
        let input = vec![VectorSample {
            labels: Labels::from_pairs([("__name__", "t"), ("k", "v")]),
            t: 0,
            v: unix_seconds,
        }];
        let out = date_of_values(f, input, &FnContext { eval_ms: 0 });
        assert_eq!(out[0].labels, Labels::from_pairs([("k", "v")]));
        out[0].v
    }

    #[test]
    fn epoch_and_known_dates() {
        // 1970-01-01 00:00 was a Thursday.
        assert_eq!(at(DateFn::Year, 0.0), 1970.0);
        assert_eq!(at(DateFn::Month, 0.0), 1.0);
        assert_eq!(at(DateFn::DayOfMonth, 0.0), 1.0);
        assert_eq!(at(DateFn::DayOfWeek, 0.0), 4.0);
        assert_eq!(at(DateFn::DayOfYear, 0.0), 1.0);
        // 2024-02-29 13:45:30 UTC = 1709214330, a Thursday, day 60.
        let t = 1_709_214_330.0;
        assert_eq!(at(DateFn::Year, t), 2024.0);
        assert_eq!(at(DateFn::Month, t), 2.0);
        assert_eq!(at(DateFn::DayOfMonth, t), 29.0);
        assert_eq!(at(DateFn::DayOfYear, t), 60.0);
        assert_eq!(at(DateFn::DayOfWeek, t), 4.0);
        assert_eq!(at(DateFn::DaysInMonth, t), 29.0);
        assert_eq!(at(DateFn::Hour, t), 13.0);
        assert_eq!(at(DateFn::Minute, t), 45.0);
        // 2023-12-31 23:59:59 = 1704067199: day 365 of a common year.
        assert_eq!(at(DateFn::DayOfYear, 1_704_067_199.0), 365.0);
        assert_eq!(at(DateFn::DaysInMonth, 1_704_067_199.0), 31.0);
        assert_eq!(at(DateFn::DayOfWeek, 1_704_067_199.0), 0.0);
        // 2100-02-15 (not a leap year) = 4106304000.
        assert_eq!(at(DateFn::DaysInMonth, 4_106_304_000.0), 28.0);
        // 2000-03-01 = 951868800: day 61 of a leap year.
        assert_eq!(at(DateFn::DayOfYear, 951_868_800.0), 61.0);
        assert_eq!(at(DateFn::Month, 951_868_800.0), 3.0);
    }

    #[test]
    fn before_the_epoch_and_fractions() {
        // 1969-12-31 23:00 = -3600.
        assert_eq!(at(DateFn::Year, -3600.0), 1969.0);
        assert_eq!(at(DateFn::Hour, -3600.0), 23.0);
        assert_eq!(at(DateFn::DayOfWeek, -3600.0), 3.0);
        // -0.5 truncates to 0 (towards zero), not to -1.
        assert_eq!(at(DateFn::Year, -0.5), 1970.0);
        assert_eq!(at(DateFn::Minute, 59.9), 0.0);
    }

    #[test]
    fn every_day_of_four_centuries_agrees_with_a_plain_calendar() {
        // Walk day by day from 1900-01-01 to 2300-12-31 and compare with
        // a straightforward month-by-month count.
        let (mut y, mut m, mut d, mut yd) = (1900i64, 1i64, 1i64, 1i64);
        let mut wd = 1i64; // 1900-01-01 was a Monday.
        let mut unix = -2_208_988_800i64;
        while y <= 2300 {
            let date = GoTime::from_unix(unix).date();
            assert_eq!(
                (date.year, date.month, date.day, date.year_day),
                (y, m, d, yd),
                "{unix}"
            );
            assert_eq!(GoTime::from_unix(unix).weekday(), wd);
            unix += 86_400;
            wd = (wd + 1) % 7;
            d += 1;
            yd += 1;
            if d > days_in_month(m, y) {
                d = 1;
                m += 1;
                if m > 12 {
                    m = 1;
                    y += 1;
                    yd = 1;
                }
            }
        }
    }

    #[test]
    fn nan_and_huge_values_do_not_panic() {
        // NaN becomes the lowest int64, as Go on x86-64; the answers are
        // whatever Go's wrapping calendar gives, but they are numbers.
        for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e300, -1e300] {
            for f in [
                DateFn::Year,
                DateFn::Month,
                DateFn::DaysInMonth,
                DateFn::DayOfWeek,
            ] {
                assert!(at(f, v).is_finite());
            }
        }
        assert_eq!(go_float_to_int(f64::NAN), i64::MIN);
        assert_eq!(go_float_to_int(-2.9), -2);
    }

    #[test]
    fn no_argument_reads_the_evaluation_time() {
        // 2024-02-29 13:45:30.999 UTC.
        let ctx = FnContext {
            eval_ms: 1_709_214_330_999,
        };
        let out = date_of_eval_time(DateFn::Minute, &ctx);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].v, 45.0);
        assert!(out[0].labels.is_empty());
        assert_eq!(time(&ctx), 1_709_214_330.999);
    }

    #[test]
    fn timestamp_reports_the_samples_time() {
        let input = vec![VectorSample {
            labels: Labels::from_pairs([("__name__", "m")]),
            t: 1_500,
            v: 9.0,
        }];
        let out = timestamp(input, &FnContext { eval_ms: 60_000 });
        assert_eq!(out[0].v, 1.5);
        assert_eq!(out[0].t, 60_000);
        assert!(out[0].labels.is_empty());
    }
}
