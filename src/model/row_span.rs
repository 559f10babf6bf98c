//! The one-hour row span: a data row holds one series' points of one hour,
//! and its key carries the hour's first second (the base time) on 4 bytes
//! (OpenTSDB's `Const.MAX_TIMESPAN`). Every row base is computed here.
//!
//! Two ways to map a second beyond the last representable hour (after
//! 2106-02-07):
//! - [`row_base`] refuses it: a point there has no row, and a wrapped
//!   base would file it in 1970. Writers use it (through
//!   [`super::Timestamp::base_time`]).
//! - [`row_base_clamped`] maps it to the last row: readers of time ranges
//!   use it (query and scan ends, fsck and delete ranges, retention
//!   cutoffs), for which "until the end of time" means "through the last
//!   row", and no row lies beyond it to miss.

use thiserror::Error;

/// Seconds in one data row.
pub const ROW_SPAN_SECS: u32 = 3600;
/// Milliseconds in one data row.
pub const ROW_SPAN_MS: u64 = ROW_SPAN_SECS as u64 * 1000;
/// The base time of the last row a 4-byte base time can name.
pub const LAST_ROW_BASE: u32 = u32::MAX - u32::MAX % ROW_SPAN_SECS;

#[derive(Debug, Clone, Copy, Error, PartialEq, Eq)]
#[error("second {0} is beyond the last hour a row key can hold (base time {LAST_ROW_BASE})")]
pub struct BeyondLastRow(pub u64);

/// Base time of the row holding second `s`; an error past `u32::MAX`.
#[inline]
pub fn row_base(s: u64) -> Result<u32, BeyondLastRow> {
    u32::try_from(s)
        .map(|s| s - s % ROW_SPAN_SECS)
        .map_err(|_| BeyondLastRow(s))
}

/// Base time of the row holding second `s`, or the last row past it.
#[inline]
pub fn row_base_clamped(s: u64) -> u32 {
    row_base(s).unwrap_or(LAST_ROW_BASE)
}

/// Start of the hour holding second `s`, in plain seconds: for aligning
/// time ranges before they become row bases.
#[inline]
pub fn hour_floor(s: u64) -> u64 {
    s - s % ROW_SPAN_SECS as u64
}

/// Row bases from `first` through `last`, hour by hour, ending at the last
/// row without overflowing.
#[inline]
pub fn row_bases(first: u32, last: u32) -> impl Iterator<Item = u32> {
    std::iter::successors(Some(first), |b| b.checked_add(ROW_SPAN_SECS))
        .take_while(move |b| *b <= last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bases_errors_and_clamping() {
        assert_eq!(row_base(1356998523), Ok(1356998400));
        assert_eq!(row_base(u32::MAX as u64), Ok(LAST_ROW_BASE));
        assert_eq!(
            row_base(u32::MAX as u64 + 1),
            Err(BeyondLastRow(4294967296))
        );
        assert_eq!(row_base_clamped(u64::MAX), LAST_ROW_BASE);
        assert_eq!(row_base_clamped(3599), 0);
        assert_eq!(hour_floor(u64::MAX), u64::MAX - u64::MAX % 3600);
        let tail: Vec<u32> = row_bases(LAST_ROW_BASE - ROW_SPAN_SECS, u32::MAX).collect();
        assert_eq!(tail, vec![LAST_ROW_BASE - ROW_SPAN_SECS, LAST_ROW_BASE]);
        assert_eq!(row_bases(7200, 3600).count(), 0);
    }
}
