//! Data points as clients send them: timestamps, values, tags.

use std::collections::BTreeMap;
use std::fmt;

use thiserror::Error;

use super::row_span::{BeyondLastRow, row_base};

/// A point's time as given by the client. OpenTSDB decides precision by
/// magnitude alone: anything above `u32::MAX` is milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Timestamp {
    Seconds(u32),
    Millis(u64),
}

/// Largest millisecond timestamp OpenTSDB accepts (13 digits).
pub const MAX_MILLIS: u64 = 9_999_999_999_999;

#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum TimestampError {
    #[error("invalid timestamp: {0}")]
    NotPositive(i64),
    #[error("timestamp {0} is beyond the 13-digit millisecond range")]
    TooLarge(i64),
    #[error("timestamp {0}: {reason}", reason = beyond_last_row(*.0))]
    BeyondLastRow(i64),
}

/// Why a millisecond timestamp past 2106 cannot be stored: its second does
/// not fit the row key's 4-byte base time.
pub(crate) fn beyond_last_row(raw_ms: i64) -> String {
    format!(
        "its second {} is past {}, the last a row key can hold (2106-02-07T06:28:15Z)",
        raw_ms / 1000,
        u32::MAX
    )
}

impl Timestamp {
    /// Classifies a raw client timestamp the way `TSDB.addPoint` does.
    pub fn from_raw(raw: i64) -> Result<Timestamp, TimestampError> {
        if raw <= 0 {
            return Err(TimestampError::NotPositive(raw));
        }
        let raw = raw as u64;
        if raw <= u32::MAX as u64 {
            Ok(Timestamp::Seconds(raw as u32))
        } else if raw <= MAX_MILLIS {
            let ts = Timestamp::Millis(raw);
            // OpenTSDB casts the base time to 4 bytes, wrapping it; a
            // point filed in 1970 is worse than a refused one.
            ts.base_time()
                .map_err(|_| TimestampError::BeyondLastRow(raw as i64))?;
            Ok(ts)
        } else {
            Err(TimestampError::TooLarge(raw as i64))
        }
    }

    pub fn is_millis(self) -> bool {
        matches!(self, Timestamp::Millis(_))
    }

    pub fn as_millis(self) -> u64 {
        match self {
            Timestamp::Seconds(s) => s as u64 * 1000,
            Timestamp::Millis(ms) => ms,
        }
    }

    pub fn as_seconds(self) -> u64 {
        self.as_millis() / 1000
    }

    /// The value as the client wrote it (seconds or milliseconds).
    pub fn raw(self) -> u64 {
        match self {
            Timestamp::Seconds(s) => s as u64,
            Timestamp::Millis(ms) => ms,
        }
    }

    /// Base time of the hour row holding this point; an error for a
    /// millisecond time past the last row a key can name.
    pub fn base_time(self) -> Result<u32, BeyondLastRow> {
        row_base(self.as_seconds())
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.raw())
    }
}

/// A numeric value. OpenTSDB keeps the integer/float distinction all the way
/// from the wire to the query output (`42` and `42.0` are different).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Int(i64),
    Float(f64),
}

impl Value {
    pub fn as_f64(self) -> f64 {
        match self {
            Value::Int(i) => i as f64,
            Value::Float(f) => f,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, Value::Float(_))
    }

    /// Whether this is Prometheus' stale marker (a float with exactly
    /// [`STALE_MARKER_BITS`]). The one rule every reader asks: the store
    /// keeps markers bit for bit (PromQL ends a series at one), and
    /// OpenTSDB's reads skip them as if the point were absent. Every other
    /// NaN is an ordinary value.
    #[inline(always)]
    pub fn is_stale_marker(self) -> bool {
        matches!(self, Value::Float(f) if f.to_bits() == STALE_MARKER_BITS)
    }
}

/// The bits of Prometheus' stale marker, a NaN meaning "this series ended
/// here" (remote write sends it when a scrape target or a rule's output
/// goes away). Equal to `promql::value::STALE_NAN_BITS`, which the layers
/// below the PromQL engine cannot name.
pub const STALE_MARKER_BITS: u64 = 0x7ff0_0000_0000_0002;

/// Tag pairs sorted by name; the map enforces one value per key.
pub type Tags = BTreeMap<String, String>;

/// One point as it arrives: names, not UIDs.
#[derive(Debug, Clone, PartialEq)]
pub struct DataPoint {
    pub metric: String,
    pub timestamp: Timestamp,
    pub value: Value,
    pub tags: Tags,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_marker_bits_are_a_stale_marker() {
        assert!(Value::Float(f64::from_bits(STALE_MARKER_BITS)).is_stale_marker());
        assert!(!Value::Float(f64::NAN).is_stale_marker());
        assert!(!Value::Float(f64::from_bits(STALE_MARKER_BITS | 1)).is_stale_marker());
        // The same bits as an integer are an ordinary integer.
        assert!(!Value::Int(STALE_MARKER_BITS as i64).is_stale_marker());
    }

    #[test]
    fn precision_by_magnitude() {
        assert_eq!(Timestamp::from_raw(1), Ok(Timestamp::Seconds(1)));
        assert_eq!(
            Timestamp::from_raw(4_294_967_295),
            Ok(Timestamp::Seconds(u32::MAX))
        );
        assert_eq!(
            Timestamp::from_raw(4_294_967_296),
            Ok(Timestamp::Millis(4_294_967_296))
        );
        assert!(Timestamp::from_raw(0).is_err());
        assert!(Timestamp::from_raw(-5).is_err());
        assert!(Timestamp::from_raw(10_000_000_000_000).is_err());
        assert_eq!(Timestamp::Seconds(1356998523).base_time(), Ok(1356998400));
        assert_eq!(Timestamp::Millis(1356998400500).base_time(), Ok(1356998400));
    }

    #[test]
    fn millis_past_the_last_row_are_refused_not_wrapped() {
        assert_eq!(
            Timestamp::from_raw(4_294_967_295_999),
            Ok(Timestamp::Millis(4_294_967_295_999))
        );
        assert_eq!(
            Timestamp::from_raw(4_294_967_296_000),
            Err(TimestampError::BeyondLastRow(4_294_967_296_000))
        );
        assert!(Timestamp::Millis(5_000_000_000_000).base_time().is_err());
    }
}
