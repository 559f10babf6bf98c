//! Time strings as OpenTSDB's `DateTime.parseDateTimeString` reads them:
//! `now`, `<n><unit>-ago`, seconds, milliseconds, `sss.mmm`, and absolute
//! `yyyy/MM/dd[-HH:mm[:ss]]` dates.

use chrono::{NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc};
use thiserror::Error;

/// Seconds since the epoch by this machine's clock, as the `u32` a row
/// key's base hour is (clamped; 0 for a clock before 1970).
pub fn now_s() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs().min(u64::from(u32::MAX)) as u32)
        .unwrap_or(0)
}

#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum TimeError {
    #[error("Invalid time: {0}")]
    Invalid(String),
    #[error(
        "Invalid time: {0}. Millisecond timestamps must be in the format <seconds>.<ms> where the milliseconds are limited to 3 digits"
    )]
    BadMillis(String),
    #[error("Invalid absolute date: {0}")]
    BadAbsolute(String),
    #[error("Invalid duration (suffix): {0}")]
    BadDuration(String),
    #[error("Invalid duration (number): {0}")]
    BadDurationNumber(String),
}

/// Milliseconds in one unit of `DateTime.parseDuration`'s suffixes.
pub fn unit_millis(unit: &str) -> Option<u64> {
    Some(match unit.to_ascii_lowercase().as_str() {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 7 * 86_400_000,
        "n" => 30 * 86_400_000,
        "y" => 365 * 86_400_000,
        _ => return None,
    })
}

/// Parses a duration like `1h`, `30s`, `500ms` into milliseconds.
pub fn parse_duration(s: &str) -> Result<u64, TimeError> {
    let digits = s.bytes().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return Err(TimeError::BadDurationNumber(s.to_string()));
    }
    let n: u64 = s[..digits]
        .parse()
        .map_err(|_| TimeError::BadDurationNumber(s.to_string()))?;
    if n == 0 {
        return Err(TimeError::BadDurationNumber(s.to_string()));
    }
    let unit = unit_millis(&s[digits..]).ok_or_else(|| TimeError::BadDuration(s.to_string()))?;
    n.checked_mul(unit)
        .ok_or_else(|| TimeError::BadDurationNumber(s.to_string()))
}

/// Parses a query time into epoch milliseconds. `now_ms` is "now";
/// absolute dates are read in UTC (OpenTSDB uses the query's timezone or
/// the JVM default, which is UTC in most deployments).
pub fn parse_datetime(s: &str, now_ms: u64) -> Result<u64, TimeError> {
    let invalid = || TimeError::Invalid(s.to_string());
    if s.is_empty() {
        return Err(invalid());
    }
    if s.eq_ignore_ascii_case("now") {
        return Ok(now_ms);
    }
    if let Some(d) = s.strip_suffix("-ago") {
        let ms = parse_duration(d)?;
        return now_ms.checked_sub(ms).ok_or_else(invalid);
    }
    if s.contains('/') || s.contains(':') {
        return parse_absolute(s);
    }
    if let Some((secs, frac)) = s.split_once('.') {
        if secs.len() != 10
            || frac.is_empty()
            || frac.len() > 3
            || !secs.bytes().all(|b| b.is_ascii_digit())
            || !frac.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(TimeError::BadMillis(s.to_string()));
        }
        let ms: u64 = format!("{frac:0<3}").parse().map_err(|_| invalid())?;
        return Ok(secs.parse::<u64>().map_err(|_| invalid())? * 1000 + ms);
    }
    if let Some(ms) = s.strip_suffix("ms")
        && !ms.is_empty()
        && ms.bytes().all(|b| b.is_ascii_digit())
    {
        return ms.parse().map_err(|_| invalid());
    }
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    let n: u64 = s.parse().map_err(|_| invalid())?;
    // Ten digits or fewer are seconds, as OpenTSDB decides by length.
    Ok(if s.len() <= 10 { n * 1000 } else { n })
}

fn parse_absolute(s: &str) -> Result<u64, TimeError> {
    let bad = || TimeError::BadAbsolute(s.to_string());
    let (date, time) = match s.len() {
        10 => (s, None),
        16 | 19 => {
            let (d, t) = s.split_at(10);
            let sep = t.as_bytes()[0];
            if sep != b'-' && sep != b' ' {
                return Err(bad());
            }
            (d, Some(&t[1..]))
        }
        _ => return Err(bad()),
    };
    let date = NaiveDate::parse_from_str(date, "%Y/%m/%d").map_err(|_| bad())?;
    let time = match time {
        None => NaiveTime::MIN,
        Some(t) if t.len() == 5 => NaiveTime::parse_from_str(t, "%H:%M").map_err(|_| bad())?,
        Some(t) => NaiveTime::parse_from_str(t, "%H:%M:%S").map_err(|_| bad())?,
    };
    let ts = Utc
        .from_utc_datetime(&NaiveDateTime::new(date, time))
        .timestamp_millis();
    u64::try_from(ts).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000_000;

    #[test]
    fn forms() {
        assert_eq!(parse_datetime("now", NOW), Ok(NOW));
        assert_eq!(parse_datetime("1h-ago", NOW), Ok(NOW - 3_600_000));
        assert_eq!(parse_datetime("30s-ago", NOW), Ok(NOW - 30_000));
        assert_eq!(parse_datetime("1356998400", NOW), Ok(1356998400000));
        assert_eq!(parse_datetime("1356998400000", NOW), Ok(1356998400000));
        assert_eq!(parse_datetime("1389740544.690", NOW), Ok(1389740544690));
        assert_eq!(parse_datetime("1389740544.5", NOW), Ok(1389740544500));
        assert!(matches!(
            parse_datetime("1389740544.6901", NOW),
            Err(TimeError::BadMillis(_))
        ));
        assert_eq!(parse_datetime("2013/01/01", NOW), Ok(1356998400000));
        assert_eq!(parse_datetime("2013/01/01-01:00", NOW), Ok(1357002000000));
        assert_eq!(
            parse_datetime("2013/01/01 01:00:05", NOW),
            Ok(1357002005000)
        );
        assert!(parse_datetime("2013/1/1", NOW).is_err());
        assert!(parse_datetime("-5", NOW).is_err());
        assert!(parse_datetime("1x-ago", NOW).is_err());
        assert!(parse_datetime("", NOW).is_err());
        assert!(parse_datetime("abc", NOW).is_err());
        assert_eq!(parse_duration("1m"), Ok(60_000));
        assert_eq!(parse_duration("500ms"), Ok(500));
        assert!(parse_duration("0m").is_err());
        assert!(parse_duration("99999999999999999999y").is_err());
    }
}
