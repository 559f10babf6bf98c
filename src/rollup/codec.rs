//! Rollup row keys and qualifiers (`RollupUtils`): the row's base time
//! snapped to the interval's row span, and the 3-byte qualifier
//! `[aggregator id][u16 offset << 4 | flags]`. Format:
//! docs/format/rollup.md.

use chrono::{Datelike, TimeZone, Utc};

use super::config::{RollupInterval, SpanUnit};
use crate::codec::qualifier::{FLAGS_MASK, decode_value};
use crate::model::Value;

/// Bit of the aggregator byte marking a compacted rollup column (OpenTSDB
/// reads it, never writes it; neither does rtsdb).
pub const COMPACTED_MASK: u8 = 0x80;
/// The aggregator id bits of the first qualifier byte.
pub const AGGREGATOR_MASK: u8 = 0x7F;

/// `getRollupBasetime` for a timestamp in seconds: the start of its row.
pub fn base_time(ts_s: u32, interval: &RollupInterval) -> u32 {
    match interval.span_unit {
        SpanUnit::Hour => {
            let modulo = 3600 * interval.span_multiplier;
            ts_s - ts_s % modulo
        }
        unit => {
            let t = Utc
                .timestamp_opt(ts_s as i64, 0)
                .single()
                .expect("u32 seconds are a valid time");
            let (y, m, d) = match unit {
                SpanUnit::Day => (t.year(), t.month(), t.day()),
                SpanUnit::Month => (t.year(), t.month(), 1),
                _ => (t.year(), 1, 1),
            };
            Utc.with_ymd_and_hms(y, m, d, 0, 0, 0)
                .single()
                .expect("a day of a valid time")
                .timestamp() as u32
        }
    }
}

/// The start of the row after the one starting at `base`.
pub fn next_base_time(base: u32, interval: &RollupInterval) -> u64 {
    match interval.span_unit {
        SpanUnit::Hour => base as u64 + 3600 * interval.span_multiplier as u64,
        SpanUnit::Day => base as u64 + 86_400,
        SpanUnit::Month | SpanUnit::Year => {
            let t = Utc.timestamp_opt(base as i64, 0).single().expect("valid");
            let (y, m) = match interval.span_unit {
                SpanUnit::Month if t.month() == 12 => (t.year() + 1, 1),
                SpanUnit::Month => (t.year(), t.month() + 1),
                _ => (t.year() + 1, 1),
            };
            Utc.with_ymd_and_hms(y, m, 1, 0, 0, 0)
                .single()
                .expect("first of a month")
                .timestamp() as u64
        }
    }
}

/// Why a rollup qualifier cannot be made or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RollupCodecError {
    /// OpenTSDB's `buildRollupQualifier` message.
    #[error("Offset of {offset} was greater than the configured intervals {intervals}")]
    OffsetTooLarge { offset: u32, intervals: u32 },
    #[error("rollup qualifier of {0} bytes, expected 3")]
    BadQualifier(usize),
    #[error("rollup value of {len} bytes does not match its flags {flags:#x}")]
    BadValue { flags: u8, len: usize },
}

/// `buildRollupQualifier`: the cell qualifier for a value at `ts_s` in the
/// row starting at `base`.
pub fn qualifier(
    ts_s: u32,
    base: u32,
    flags: u8,
    aggregator_id: u8,
    interval: &RollupInterval,
) -> Result<[u8; 3], RollupCodecError> {
    let offset = (ts_s - base) / interval.interval_seconds;
    if offset >= interval.intervals {
        return Err(RollupCodecError::OffsetTooLarge {
            offset,
            intervals: interval.intervals,
        });
    }
    let packed = (((offset << 4) | flags as u32) as u16).to_be_bytes();
    Ok([aggregator_id, packed[0], packed[1]])
}

/// One rollup cell read back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RollupCell {
    pub aggregator_id: u8,
    /// Seconds.
    pub timestamp: u32,
    pub value: Value,
}

/// Reads a rollup cell of the row starting at `base`.
pub fn decode_cell(
    q: &[u8],
    v: &[u8],
    base: u32,
    interval: &RollupInterval,
) -> Result<RollupCell, RollupCodecError> {
    let Some(parts) = QualifierParts::of(q) else {
        return Err(RollupCodecError::BadQualifier(q.len()));
    };
    let value = decode_value(parts.flags, v).map_err(|_| RollupCodecError::BadValue {
        flags: parts.flags,
        len: v.len(),
    })?;
    Ok(RollupCell {
        aggregator_id: parts.aggregator_id,
        timestamp: base + parts.offset * interval.interval_seconds,
        value,
    })
}

/// The fields of a 3-byte rollup qualifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QualifierParts {
    pub aggregator_id: u8,
    /// Intervals from the row's base time.
    pub offset: u32,
    pub flags: u8,
}

impl QualifierParts {
    /// None unless `q` is 3 bytes long.
    pub fn of(q: &[u8]) -> Option<QualifierParts> {
        let &[agg, hi, lo] = q else {
            return None;
        };
        let packed = u16::from_be_bytes([hi, lo]);
        Some(QualifierParts {
            aggregator_id: agg & AGGREGATOR_MASK,
            offset: (packed >> 4) as u32,
            flags: (packed as u8) & FLAGS_MASK,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollup::config::RollupConfig;

    fn config() -> RollupConfig {
        RollupConfig::parse(
            r#"{"aggregationIds":{"sum":0,"count":1,"min":2,"max":3},"intervals":[
            {"table":"tsdb","preAggregationTable":"tsdb-agg","interval":"1m","rowSpan":"1h","defaultInterval":true},
            {"table":"h","preAggregationTable":"ha","interval":"1h","rowSpan":"1d"},
            {"table":"d","preAggregationTable":"da","interval":"1d","rowSpan":"1y"},
            {"table":"m","preAggregationTable":"ma","interval":"10m","rowSpan":"4h"},
            {"table":"n","preAggregationTable":"na","interval":"1h","rowSpan":"1n"}]}"#.replace(r#""1h","rowSpan":"1n""#, r#""30m","rowSpan":"1n""#).as_str(),
            |_| true,
        )
        .unwrap()
    }

    #[test]
    fn base_times_snap_to_the_row_span() {
        // TestRollupUtils: 1356998400 is 2013-01-01T00:00:00Z.
        let c = config();
        let ts = 1357007400; // 02:30
        assert_eq!(base_time(ts, c.interval("1m").unwrap()), 1357005600);
        assert_eq!(base_time(ts, c.interval("1h").unwrap()), 1356998400);
        assert_eq!(base_time(ts, c.interval("10m").unwrap()), 1356998400);
        assert_eq!(
            base_time(1357021800, c.interval("10m").unwrap()),
            1357012800
        );
        assert_eq!(
            base_time(1359680400, c.interval("30m").unwrap()),
            1359676800
        );
        assert_eq!(base_time(1359680400, c.interval("1d").unwrap()), 1356998400);
        let m = c.interval("30m").unwrap();
        assert_eq!(next_base_time(1356998400, m), 1359676800);
        assert_eq!(next_base_time(1354320000, m), 1356998400);
        assert_eq!(
            next_base_time(1356998400, c.interval("1d").unwrap()),
            1388534400
        );
    }

    #[test]
    fn qualifiers_hold_the_aggregator_and_the_interval_offset() {
        let c = config();
        let h = c.interval("1h").unwrap();
        assert_eq!(
            qualifier(1356998400, 1356998400, 0, 0, h).unwrap(),
            [0, 0, 0]
        );
        // 01:00, sum id 0, a 2-byte integer.
        assert_eq!(
            qualifier(1357002000, 1356998400, 1, 0, h).unwrap(),
            [0, 0, 0x11]
        );
        // 23:59:59 in the 23rd interval, count id 1, a float.
        assert_eq!(
            qualifier(1357084799, 1356998400, 0xB, 1, h).unwrap(),
            [1, 0x01, 0x7B]
        );
        assert_eq!(
            qualifier(1357084800, 1356998400, 0, 0, h)
                .unwrap_err()
                .to_string(),
            "Offset of 24 was greater than the configured intervals 24"
        );
        let cell = decode_cell(
            &[0x81, 0x01, 0x7B],
            &1.5f32.to_bits().to_be_bytes(),
            1356998400,
            h,
        )
        .unwrap();
        assert_eq!(cell.aggregator_id, 1);
        assert_eq!(cell.timestamp, 1357081200);
        assert_eq!(cell.value, Value::Float(1.5));
    }
}
