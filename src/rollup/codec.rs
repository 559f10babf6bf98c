//! Rollup row keys and qualifiers (`RollupUtils`): the row's base time
//! snapped to the interval's row span, and the 3-byte qualifier
//! `[aggregator id][u16 offset << 4 | flags]`. Format:
//! docs/format/rollup.md.

use chrono::{Datelike, TimeZone, Utc};

use super::columns::{ColumnRow, Doubles, range_bits};
use super::config::{RollupInterval, SpanUnit};
use crate::codec::qualifier::{FLAGS_MASK, decode_value};
use crate::codec::row::RowError;
use crate::model::Value;

// Kept reachable here, where the rest of the qualifier is, for callers
// that split a qualifier with the codec's functions.
pub use super::qualifier::{AGGREGATOR_MASK, COMPACTED_MASK};

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

/// Seconds every row of `interval` starts on a multiple of and spans a
/// whole number of ([`base_time`]): its span for hourly spans; a day for
/// days, months and years, which start at 00:00 UTC.
pub fn row_grain_seconds(interval: &RollupInterval) -> u64 {
    match interval.span_unit {
        SpanUnit::Hour => 3600 * interval.span_multiplier as u64,
        _ => 86_400,
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

/// Which aggregators' cells a query reads from rollup rows: the column
/// it answers from, and (for an average) the count column beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RollupColumns {
    pub value: Option<u8>,
    pub count: Option<u8>,
}

/// The cells a query reads at one rollup timestamp of one series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RollupSlot {
    /// Seconds.
    pub timestamp: u32,
    /// The cell of [`RollupColumns::value`], if the row holds one.
    pub value: Option<Value>,
    /// The cell of [`RollupColumns::count`], if the row holds one.
    pub count: Option<Value>,
}

/// Reads rollup rows into [`RollupSlot`]s in time order, straight from
/// their encoded cells. A row's cells are in write order, not time order
/// (docs/format/data-row.md), so each row is first laid out by interval
/// offset in a scratch reused from row to row ([`lay_out`](Self::lay_out)):
/// no sort, and of two cells for one offset and aggregator (an old one
/// with other value flags left by an external writer) the later written
/// wins, as HBase's newest cell does. The laid-out row is then handed
/// over slot by slot ([`drain`](Self::drain)), which leaves the scratch
/// clean for the next row.
pub struct SlotReader {
    columns: RollupColumns,
    interval_seconds: u32,
    /// By offset: the value and count cells of the row being read.
    value: Vec<Option<Value>>,
    count: Vec<Option<Value>>,
    /// The row laid out: its base time and the offsets it filled
    /// (`lo > hi` when none).
    base: u32,
    lo: usize,
    hi: usize,
}

impl SlotReader {
    pub fn new(columns: RollupColumns, interval: &RollupInterval) -> SlotReader {
        SlotReader {
            columns,
            interval_seconds: interval.interval_seconds,
            value: vec![None; OFFSETS],
            count: vec![None; OFFSETS],
            base: 0,
            lo: usize::MAX,
            hi: 0,
        }
    }

    /// Appends to `out` the slots of the row starting at `base` (its
    /// encoded value `row`) with timestamps in `[start_s, end_s]`, and
    /// returns how many cells of the two columns it read there
    /// ([`lay_out`](Self::lay_out) then [`drain`](Self::drain)).
    pub fn read_row(
        &mut self,
        row: &[u8],
        base: u32,
        start_s: u32,
        end_s: u32,
        out: &mut Vec<RollupSlot>,
    ) -> Result<u64, RowError> {
        let cells = self.lay_out(row, base, start_s, end_s)?;
        self.drain(|_, s| out.push(s));
        Ok(cells)
    }

    /// Lays out by offset the cells of the two columns that the row
    /// starting at `base` (its encoded value `row`) holds with timestamps
    /// in `[start_s, end_s]`, replacing any row laid out before, and
    /// returns how many it read ([`walk_row`]).
    pub fn lay_out(
        &mut self,
        row: &[u8],
        base: u32,
        start_s: u32,
        end_s: u32,
    ) -> Result<u64, RowError> {
        self.clear();
        self.base = base;
        let walk = Walk::new(self.columns, self.interval_seconds, base, start_s, end_s);
        let mut place = SlotPlace {
            value: &mut self.value,
            count: &mut self.count,
            cells: 0,
            lo: usize::MAX,
            hi: 0,
        };
        let walked = walk_row(&walk, row, &mut place);
        // What was placed, even before an error: the next row clears it.
        let (cells, lo, hi) = (place.cells, place.lo, place.hi);
        self.lo = lo;
        self.hi = hi;
        walked.map(|()| cells)
    }

    /// The base time of the row laid out.
    pub fn base(&self) -> u32 {
        self.base
    }

    /// Hands over the slots of the row laid out, in time order, each with
    /// its offset in the row, and clears them.
    pub fn drain(&mut self, mut f: impl FnMut(u32, RollupSlot)) {
        if self.lo > self.hi {
            return;
        }
        let (b, step) = (self.base as u64, self.interval_seconds.max(1) as u64);
        let (value, count) = (
            &mut self.value[self.lo..=self.hi],
            &mut self.count[self.lo..=self.hi],
        );
        for (k, (v, c)) in value.iter_mut().zip(count.iter_mut()).enumerate() {
            let (v, c) = (v.take(), c.take());
            if v.is_some() || c.is_some() {
                let at = self.lo + k;
                f(
                    at as u32,
                    RollupSlot {
                        // In range: checked as the row was laid out.
                        timestamp: (b + at as u64 * step) as u32,
                        value: v,
                        count: c,
                    },
                );
            }
        }
        self.lo = usize::MAX;
        self.hi = 0;
    }

    /// Drops the row laid out.
    fn clear(&mut self) {
        SlotPlace {
            value: &mut self.value,
            count: &mut self.count,
            cells: 0,
            lo: self.lo,
            hi: self.hi,
        }
        .reset();
        self.lo = usize::MAX;
        self.hi = 0;
    }
}

/// Reads rollup rows as [`SlotReader`] does, each cell's value as a
/// double: for readers that need nothing else of a cell (one downsampling
/// bucket per rollup interval, whose value is the cell's as a double, or
/// the sum's over the count's), so a row is laid out in two arrays of
/// doubles and a bitmap of the offsets each column holds, and handed over
/// by walking the bitmap.
pub struct DenseReader {
    columns: RollupColumns,
    interval_seconds: u32,
    value: Vec<f64>,
    count: Vec<f64>,
    /// Bit `at % 64` of word `at / 64`: the column holds offset `at`.
    has_value: Vec<u64>,
    has_count: Vec<u64>,
    /// Words of the bitmaps the row laid out may have set.
    words: usize,
}

impl DenseReader {
    pub fn new(columns: RollupColumns, interval: &RollupInterval) -> DenseReader {
        DenseReader {
            columns,
            interval_seconds: interval.interval_seconds,
            value: vec![0.0; OFFSETS],
            count: vec![0.0; OFFSETS],
            has_value: vec![0; OFFSETS / 64],
            has_count: vec![0; OFFSETS / 64],
            words: 0,
        }
    }

    /// [`SlotReader::lay_out`], values as doubles.
    pub fn lay_out(
        &mut self,
        row: &[u8],
        base: u32,
        start_s: u32,
        end_s: u32,
    ) -> Result<u64, RowError> {
        self.clear();
        let walk = Walk::new(self.columns, self.interval_seconds, base, start_s, end_s);
        let mut place = DensePlace {
            value: &mut self.value,
            count: &mut self.count,
            has_value: &mut self.has_value,
            has_count: &mut self.has_count,
            cells: 0,
            words: 0,
        };
        let walked = walk_row(&walk, row, &mut place);
        let (cells, words) = (place.cells, place.words);
        self.words = words;
        walked.map(|()| cells)
    }

    /// [`lay_out`](Self::lay_out) into `out`, for a row whose every cell
    /// has the usual shape ([`usual_row`]) and whose cells read lie at
    /// offsets below [`SHORT_OFFSETS`]: false (`out` then holds nothing
    /// to read) for any other row, which [`lay_out`](Self::lay_out) reads
    /// (and reports if it cannot). Rows laid out either way hand over the
    /// same offsets, values and counts, and count the same cells.
    #[inline]
    pub fn lay_out_short(
        &self,
        row: &[u8],
        base: u32,
        start_s: u32,
        end_s: u32,
        out: &mut ShortRow,
    ) -> bool {
        let walk = Walk::new(self.columns, self.interval_seconds, base, start_s, end_s);
        let mut place = ShortPlace {
            value: &mut out.value,
            count: &mut out.count,
            has_value: 0,
            has_count: 0,
            cells: 0,
            too_far: false,
        };
        let read = match ColumnRow::of(row) {
            Some(Ok(view)) => short_columns(&walk, view, &mut place).is_ok() && !place.too_far,
            Some(Err(_)) => false,
            None => usual_row(&walk, row, &mut place) && !place.too_far,
        };
        let (has_value, has_count, cells) = if read {
            (place.has_value, place.has_count, place.cells)
        } else {
            (0, 0, 0)
        };
        out.has_value = has_value;
        out.has_count = has_count;
        out.cells = cells;
        read
    }

    /// The row as a [`ShortView`] when it has that view's shape (a row
    /// in columns rtsdb computed), else None: the row is then read with
    /// [`lay_out_short`](Self::lay_out_short) or
    /// [`lay_out`](Self::lay_out), which hand over the same offsets,
    /// values and counts, and count the same cells.
    #[inline]
    pub fn short_view<'a>(
        &self,
        row: &'a [u8],
        base: u32,
        start_s: u32,
        end_s: u32,
    ) -> Option<ShortView<'a>> {
        let walk = Walk::new(self.columns, self.interval_seconds, base, start_s, end_s);
        if walk.value_id == walk.count_id {
            return None;
        }
        let mut view = ColumnRow::of(row)?.ok()?;
        let (mut value, mut count) = (None, None);
        while let Some(c) = view.next_column().ok()? {
            let slot = if c.id == walk.value_id {
                &mut value
            } else if c.id == walk.count_id {
                &mut count
            } else {
                continue;
            };
            // A second column of one id (never written) replaces cells
            // of the first: the general walk's.
            if slot.is_some() || c.words() != 1 {
                return None;
            }
            *slot = Some(c);
            // A row without a tail whose columns are written once each,
            // in increasing id (`03`): the columns after those read are
            // not looked at, nor their bytes fetched.
            if view.tail_free()
                && value.is_some()
                && (count.is_some() || self.columns.count.is_none())
            {
                break;
            }
        }
        // Tail cells of a column read would replace its cells.
        if !view.tail_free() && view.tail() != row.len() {
            return None;
        }
        let value = value?;
        let word = value.word(0);
        // With the count column, its cells must lie at the value
        // column's offsets to share their ranks.
        let counts = match count {
            Some(c) if self.columns.count.is_some() && c.word(0) == word => Some(c.doubles()),
            None if self.columns.count.is_none() => None,
            _ => return None,
        };
        let range = range_bits(walk.first, walk.last, 0);
        let bits = word & range;
        // The cells read are those ranked from the first in range (the
        // bits below it are cells skipped) for as many as are read.
        let skipped = if range == 0 {
            0
        } else {
            (word & !(u64::MAX << range.trailing_zeros())).count_ones() as usize
        };
        let read = (skipped, skipped + bits.count_ones() as usize);
        Some(ShortView {
            bits,
            values: value.doubles().range(read.0, read.1)?,
            counts: match counts {
                Some(c) => Some(c.range(read.0, read.1)?),
                None => None,
            },
        })
    }

    /// Hands over, in offset order, each offset of the row laid out where
    /// a column has a cell: `f(offset, value, count)`; and clears them.
    pub fn drain(&mut self, mut f: impl FnMut(u32, Option<f64>, Option<f64>)) {
        for w in 0..self.words {
            let (hv, hc) = (self.has_value[w], self.has_count[w]);
            let mut bits = hv | hc;
            while bits != 0 {
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                let at = w * 64 + b as usize;
                let v = (hv >> b & 1 != 0).then(|| self.value[at]);
                let c = (hc >> b & 1 != 0).then(|| self.count[at]);
                f(at as u32, v, c);
            }
            self.has_value[w] = 0;
            self.has_count[w] = 0;
        }
        self.words = 0;
    }

    fn clear(&mut self) {
        self.has_value[..self.words].fill(0);
        self.has_count[..self.words].fill(0);
        self.words = 0;
    }
}

/// Offsets a [`ShortRow`] holds.
pub const SHORT_OFFSETS: usize = 64;

/// A row laid out as [`DenseReader`] lays it out, for rows whose cells
/// read all lie at offsets below [`SHORT_OFFSETS`] (a day of hours, an hour
/// of minutes): the doubles of each column by offset, and which offsets
/// each holds as one word. The reader's own arrays span every offset a
/// qualifier can hold, their bitmaps in memory; a short row's words stay
/// in registers while its cells are walked, and nothing is cleared
/// between rows (the words say what is set).
#[derive(Debug, Clone)]
pub struct ShortRow {
    value: [f64; SHORT_OFFSETS],
    count: [f64; SHORT_OFFSETS],
    has_value: u64,
    has_count: u64,
    cells: u64,
}

impl Default for ShortRow {
    fn default() -> ShortRow {
        ShortRow {
            value: [0.0; SHORT_OFFSETS],
            count: [0.0; SHORT_OFFSETS],
            has_value: 0,
            has_count: 0,
            cells: 0,
        }
    }
}

impl ShortRow {
    /// How many cells of the two columns the row laid out read.
    pub fn cells(&self) -> u64 {
        self.cells
    }

    /// The row laid out: which offsets the value column holds and which
    /// the count column holds (bit `at`), and their doubles by offset.
    #[inline(always)]
    pub fn parts(&self) -> (u64, u64, &[f64; SHORT_OFFSETS], &[f64; SHORT_OFFSETS]) {
        (self.has_value, self.has_count, &self.value, &self.count)
    }

    /// [`DenseReader::drain`] of the row laid out (the row stays laid out
    /// until the next [`DenseReader::lay_out_short`]).
    #[inline(always)]
    pub fn drain(&self, mut f: impl FnMut(u32, Option<f64>, Option<f64>)) {
        let (hv, hc) = (self.has_value, self.has_count);
        let mut bits = hv | hc;
        while bits != 0 {
            let b = bits.trailing_zeros();
            bits &= bits - 1;
            let at = b as usize;
            let v = (hv >> b & 1 != 0).then(|| self.value[at]);
            let c = (hc >> b & 1 != 0).then(|| self.count[at]);
            f(b, v, c);
        }
    }
}

/// A short row in columns read where it lies, for the common shape of
/// the rows rtsdb computes: the value column (and the count column, when
/// read) of one bitmap word each, both holding the same offsets, and no
/// tail. Its cells read are the value column's cells in range, ranked
/// alike in both columns, so they are handed over straight from the
/// row's bytes: nothing laid out by offset first
/// ([`DenseReader::short_view`]).
#[derive(Debug, Clone, Copy)]
pub struct ShortView<'a> {
    /// The offsets read (bit `at`): those of the value column in range.
    bits: u64,
    /// The values of the cells read, in offset order: the value
    /// column's, and the count column's when read.
    values: Doubles<'a>,
    counts: Option<Doubles<'a>>,
}

impl<'a> ShortView<'a> {
    /// The offsets read (bit `at`).
    #[inline(always)]
    pub fn offsets(&self) -> u64 {
        self.bits
    }

    /// How many cells of the two columns the row laid out read (as
    /// [`ShortRow::cells`] counts them).
    pub fn cells(&self) -> u64 {
        let n = self.bits.count_ones() as u64;
        if self.counts.is_some() { 2 * n } else { n }
    }

    /// The row's parts: the offsets read (bit `at`), their values and,
    /// when the count column is read, their counts: the `k`th offset set
    /// holds the `k`th value of each.
    #[inline(always)]
    pub fn parts(&self) -> (u64, Doubles<'a>, Option<Doubles<'a>>) {
        (self.bits, self.values, self.counts)
    }
}

/// [`ShortRow`]'s scratch: its words in locals while the row is walked.
struct ShortPlace<'a> {
    value: &'a mut [f64; SHORT_OFFSETS],
    count: &'a mut [f64; SHORT_OFFSETS],
    has_value: u64,
    has_count: u64,
    cells: u64,
    /// A cell read lies at an offset a short row cannot hold.
    too_far: bool,
}

impl Place for ShortPlace<'_> {
    #[inline(always)]
    fn put(&mut self, count: bool, at: usize, flags: u8, v: &[u8]) {
        if at >= SHORT_OFFSETS {
            self.too_far = true;
            return;
        }
        let Ok(v) = decode_value(flags, v) else {
            return;
        };
        let (column, has) = if count {
            (&mut *self.count, &mut self.has_count)
        } else {
            (&mut *self.value, &mut self.has_value)
        };
        column[at] = v.as_f64();
        *has |= 1 << at;
        self.cells += 1;
    }

    #[inline(always)]
    fn put_double(&mut self, count: bool, at: usize, _flags: u8, v: f64) {
        if at >= SHORT_OFFSETS {
            self.too_far = true;
            return;
        }
        let (column, has) = if count {
            (&mut *self.count, &mut self.has_count)
        } else {
            (&mut *self.value, &mut self.has_value)
        };
        column[at] = v;
        *has |= 1 << at;
        self.cells += 1;
    }

    fn reset(&mut self) {
        self.has_value = 0;
        self.has_count = 0;
        self.cells = 0;
    }
}

/// Offsets a qualifier's 12 bits can hold: no cell needs a scratch to
/// grow.
const OFFSETS: usize = (u16::MAX >> 4) as usize + 1;

/// What a row walk reads: the ids of the two columns, and the offsets in
/// the query's range.
struct Walk {
    /// The aggregator id of each column, compared with each cell's masked
    /// first byte (at most 0x7F: no column is 0x80 and up).
    value_id: u8,
    count_id: u8,
    first: u64,
    last: u64,
}

impl Walk {
    fn new(
        columns: RollupColumns,
        interval_seconds: u32,
        base: u32,
        start_s: u32,
        end_s: u32,
    ) -> Walk {
        let step = interval_seconds.max(1) as u64;
        let b = base as u64;
        // The offsets whose timestamps `base + offset * step` lie in the
        // range. A row starting after the range has none (its cells are
        // still walked).
        let (first, last) = match (end_s as u64).checked_sub(b) {
            Some(d) => ((start_s as u64).saturating_sub(b).div_ceil(step), d / step),
            None => (1, 0),
        };
        Walk {
            value_id: columns.value.unwrap_or(COMPACTED_MASK),
            count_id: columns.count.unwrap_or(COMPACTED_MASK),
            first,
            last,
        }
    }

    /// One cell with a 3-byte qualifier `agg`, `packed`: placed when it
    /// is of a column read and in range.
    #[inline(always)]
    fn cell(&self, agg: u8, packed: u16, v: &[u8], place: &mut impl Place) {
        let id = agg & AGGREGATOR_MASK;
        let count = if id == self.value_id {
            false
        } else if id == self.count_id {
            true
        } else {
            return;
        };
        let at = (packed >> 4) as usize;
        if (at as u64) < self.first || (at as u64) > self.last {
            return;
        }
        place.put(count, at, packed as u8 & FLAGS_MASK, v);
    }
}

/// A scratch a row walk lays cells out in.
trait Place {
    /// The cell of the value column (or the count column) at offset `at`
    /// (below [`OFFSETS`]), its flags and value bytes; a value without a
    /// valid length is skipped.
    fn put(&mut self, count: bool, at: usize, flags: u8, v: &[u8]);
    /// [`put`](Self::put) of a cell of a row in columns: its flags and
    /// its value as a double ([`columns`](super::columns)).
    fn put_double(&mut self, count: bool, at: usize, flags: u8, v: f64);
    /// Empties what was placed.
    fn reset(&mut self);
}

/// A cell's value from its flags and its value as a double, as
/// [`decode_value`] reads its bytes (a column holds only cells whose
/// double gives their bytes back).
#[inline(always)]
fn value_of(flags: u8, v: f64) -> Value {
    if flags & crate::codec::qualifier::FLAG_FLOAT != 0 {
        Value::Float(v)
    } else {
        Value::Int(v as i64)
    }
}

/// Walks a rollup row's cells into `place`: those of the columns read
/// with offsets in range. Cells of other aggregators, raw-qualified cells
/// (pre-aggregates) and cells whose value has no valid length are
/// skipped; a row that cannot be walked is an error wherever it lies
/// (what was placed before stays, for the caller to clear).
fn walk_row(walk: &Walk, row: &[u8], place: &mut impl Place) -> Result<(), RowError> {
    if let Some(view) = ColumnRow::of(row) {
        return walk_columns(walk, view?, place);
    }
    if usual_row(walk, row, place) {
        return Ok(());
    }
    // A cell of another shape (or a row that does not read): the general
    // walk, from a clean scratch, reports what is wrong.
    place.reset();
    crate::codec::row::RowCells::for_each_borrowed(row, |q, v| {
        if let &[agg, q1, q2] = q {
            walk.cell(agg, u16::from_be_bytes([q1, q2]), v, place);
        }
    })
}

/// Walks a row laid out in columns ([`columns`](super::columns)): the
/// columns read, their cells in range, each other column stepped over
/// whole; then the cells of its tail as [`walk_row`] walks cells.
#[inline(always)]
fn walk_columns(walk: &Walk, mut view: ColumnRow, place: &mut impl Place) -> Result<(), RowError> {
    while let Some(c) = view.next_column()? {
        let count = if c.id == walk.value_id {
            false
        } else if c.id == walk.count_id {
            true
        } else {
            continue;
        };
        c.for_each_in(walk.first, walk.last, |at, flags, v| {
            place.put_double(count, at, flags & FLAGS_MASK, v)
        });
    }
    crate::codec::row::for_each_cell_from(view.row(), view.tail(), |q, v| {
        if let &[agg, q1, q2] = q {
            walk.cell(agg, u16::from_be_bytes([q1, q2]), v, place);
        }
    })
}

/// [`walk_columns`] into a short row: each column read taken a word at a
/// time (the offsets in range of its first word, their values copied by
/// rank), none of its cells looked at one by one.
#[inline(always)]
fn short_columns(walk: &Walk, mut view: ColumnRow, place: &mut ShortPlace) -> Result<(), RowError> {
    let range = range_bits(walk.first, walk.last, 0);
    while let Some(c) = view.next_column()? {
        let count = if c.id == walk.value_id {
            false
        } else if c.id == walk.count_id {
            true
        } else {
            continue;
        };
        if (1..c.words()).any(|w| c.word(w) & range_bits(walk.first, walk.last, w) != 0) {
            place.too_far = true;
            return Ok(());
        }
        let word = c.word(0);
        let read = word & range;
        let (column, has) = if count {
            (&mut *place.count, &mut place.has_count)
        } else {
            (&mut *place.value, &mut place.has_value)
        };
        // A later column of the same id (never written) replaces cells as
        // a later cell does.
        place.cells += read.count_ones() as u64;
        *has |= read;
        let mut bits = word;
        let mut k = 0;
        while bits != 0 {
            let b = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if read >> b & 1 != 0 {
                column[b] = c.value(k);
            }
            k += 1;
        }
    }
    crate::codec::row::for_each_cell_from(view.row(), view.tail(), |q, v| {
        if let &[agg, q1, q2] = q {
            walk.cell(agg, u16::from_be_bytes([q1, q2]), v, place);
        }
    })
}

/// Walks a row whose every cell has the usual shape (a 3-byte qualifier
/// and a value shorter than 128 bytes, each length one byte,
/// docs/format/data-row.md) without the general walk's length decoding;
/// false, leaving `place` partly filled, when it meets anything else.
#[inline(always)]
fn usual_row(walk: &Walk, row: &[u8], place: &mut impl Place) -> bool {
    if row.first() != Some(&crate::codec::row::ROW_FORMAT_V1) {
        return false;
    }
    let mut pos = 1;
    while pos < row.len() {
        let Some(&[3, agg, q1, q2, vlen]) = row.get(pos..pos + 5) else {
            return false;
        };
        let (from, to) = (pos + 5, pos + 5 + vlen as usize);
        if vlen >= 0x80 || to > row.len() {
            return false;
        }
        walk.cell(agg, u16::from_be_bytes([q1, q2]), &row[from..to], place);
        pos = to;
    }
    true
}

/// [`SlotReader`]'s scratch.
struct SlotPlace<'a> {
    value: &'a mut [Option<Value>],
    count: &'a mut [Option<Value>],
    cells: u64,
    /// The offsets filled (`lo > hi` when none).
    lo: usize,
    hi: usize,
}

impl Place for SlotPlace<'_> {
    #[inline(always)]
    fn put(&mut self, count: bool, at: usize, flags: u8, v: &[u8]) {
        let Ok(v) = decode_value(flags, v) else {
            return;
        };
        let column = if count {
            &mut *self.count
        } else {
            &mut *self.value
        };
        column[at] = Some(v);
        self.cells += 1;
        self.lo = self.lo.min(at);
        self.hi = self.hi.max(at);
    }

    #[inline(always)]
    fn put_double(&mut self, count: bool, at: usize, flags: u8, v: f64) {
        let column = if count {
            &mut *self.count
        } else {
            &mut *self.value
        };
        column[at] = Some(value_of(flags, v));
        self.cells += 1;
        self.lo = self.lo.min(at);
        self.hi = self.hi.max(at);
    }

    fn reset(&mut self) {
        if self.lo <= self.hi {
            self.value[self.lo..=self.hi].fill(None);
            self.count[self.lo..=self.hi].fill(None);
        }
        self.cells = 0;
        self.lo = usize::MAX;
        self.hi = 0;
    }
}

/// [`DenseReader`]'s scratch.
struct DensePlace<'a> {
    value: &'a mut [f64],
    count: &'a mut [f64],
    has_value: &'a mut [u64],
    has_count: &'a mut [u64],
    cells: u64,
    /// Words of the bitmaps set so far: every one below.
    words: usize,
}

impl Place for DensePlace<'_> {
    #[inline(always)]
    fn put(&mut self, count: bool, at: usize, flags: u8, v: &[u8]) {
        let Ok(v) = decode_value(flags, v) else {
            return;
        };
        let (column, has) = if count {
            (&mut *self.count, &mut *self.has_count)
        } else {
            (&mut *self.value, &mut *self.has_value)
        };
        column[at] = v.as_f64();
        has[at / 64] |= 1 << (at % 64);
        self.cells += 1;
        self.words = self.words.max(at / 64 + 1);
    }

    #[inline(always)]
    fn put_double(&mut self, count: bool, at: usize, _flags: u8, v: f64) {
        let (column, has) = if count {
            (&mut *self.count, &mut *self.has_count)
        } else {
            (&mut *self.value, &mut *self.has_value)
        };
        column[at] = v;
        has[at / 64] |= 1 << (at % 64);
        self.cells += 1;
        self.words = self.words.max(at / 64 + 1);
    }

    fn reset(&mut self) {
        self.has_value[..self.words].fill(0);
        self.has_count[..self.words].fill(0);
        self.cells = 0;
        self.words = 0;
    }
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

    /// A drained cell with its doubles as bits, so that readers' outputs
    /// compare exactly (NaN included).
    fn bits_of(at: u32, v: Option<f64>, c: Option<f64>) -> (u32, Option<u64>, Option<u64>) {
        (at, v.map(f64::to_bits), c.map(f64::to_bits))
    }

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

    #[test]
    fn slots_come_in_time_order_with_the_later_cell_winning() {
        use crate::codec::row::{Cell, RowCells};
        let c = config();
        let h = c.interval("1h").unwrap();
        let base = 1356998400;
        let cell = |ts: u32, id: u8, flags: u8, v: &[u8]| {
            Cell::new(
                qualifier(ts, base, flags, id, h).unwrap().to_vec(),
                v.to_vec(),
            )
        };
        // Written out of time order, as recomputed intervals leave them:
        // sum (0) and count (1) of 02:00, then of 00:00; max (3) is not
        // read; 01:00 has its sum twice (an old 1-byte cell then a float,
        // the later wins) and no count; 03:00 a count alone; a 04:00 cell
        // whose value has no valid length (3 bytes) is skipped.
        let row = RowCells {
            cells: vec![
                cell(base + 7200, 0, 0, &[5]),
                cell(base + 7200, 1, 0, &[2]),
                cell(base, 3, 0, &[9]),
                cell(base, 1, 0, &[1]),
                cell(base, 0, 0, &[4]),
                cell(base + 3600, 0, 0, &[7]),
                cell(base + 3600, 0, 0xB, &1.5f32.to_bits().to_be_bytes()),
                cell(base + 10800, 1, 0, &[3]),
                cell(base + 14400, 0, 1, &[0, 0, 3]),
                Cell::new(vec![0, 0], vec![1]),
            ],
        }
        .encode();
        let columns = RollupColumns {
            value: Some(0),
            count: Some(1),
        };
        let mut r = SlotReader::new(columns, h);
        let mut out = Vec::new();
        let cells = r
            .read_row(&row, base, base, base + 86_399, &mut out)
            .unwrap();
        assert_eq!(cells, 7);
        let slot = |h: u32, v: Option<Value>, c: Option<Value>| RollupSlot {
            timestamp: base + h * 3600,
            value: v,
            count: c,
        };
        use Value::{Float, Int};
        assert_eq!(
            out,
            vec![
                slot(0, Some(Int(4)), Some(Int(1))),
                slot(1, Some(Float(1.5)), None),
                slot(2, Some(Int(5)), Some(Int(2))),
                slot(3, None, Some(Int(3))),
            ]
        );
        // The scratch is clean for the next row; the range cuts slots.
        out.clear();
        let cells = r
            .read_row(&row, base, base + 3600, base + 7200, &mut out)
            .unwrap();
        assert_eq!(cells, 4);
        assert_eq!(
            out,
            vec![
                slot(1, Some(Float(1.5)), None),
                slot(2, Some(Int(5)), Some(Int(2))),
            ]
        );
    }

    #[test]
    fn usual_rows_read_as_the_general_walk_reads_them() {
        use crate::codec::row::{Cell, RowCells, RowError};
        let c = config();
        let h = c.interval("1h").unwrap();
        let base = 1356998400;
        let cell = |ts: u32, id: u8, flags: u8, v: &[u8]| {
            Cell::new(
                qualifier(ts, base, flags, id, h).unwrap().to_vec(),
                v.to_vec(),
            )
        };
        let f = |x: f64| x.to_bits().to_be_bytes();
        // Every cell 3-byte qualified with a short value: the walk
        // without length decoding. A compacted column's id (0x80 | id)
        // reads as its id; later cells win (each one read is counted);
        // max (3) is not read.
        let usual = vec![
            cell(base + 3600, 0, 0xF, &f(2.5)),
            cell(base + 3600, 1, 0, &[4]),
            cell(base, 3, 0, &[9]),
            cell(base, 0, 0, &[1, 0]),
            Cell::new(vec![0x81, 0x00, 0x00], vec![2]),
            cell(base, 0, 0, &[7]),
        ];
        let columns = RollupColumns {
            value: Some(0),
            count: Some(1),
        };
        let read = |cells: &[Cell]| {
            let mut r = SlotReader::new(columns, h);
            let mut out = Vec::new();
            let n = r.read_row(
                &RowCells {
                    cells: cells.to_vec(),
                }
                .encode(),
                base,
                base,
                base + 86_399,
                &mut out,
            );
            (n, out)
        };
        let (n, out) = read(&usual);
        assert_eq!(n, Ok(5));
        use Value::{Float, Int};
        let slot = |h: u32, v: Option<Value>, c: Option<Value>| RollupSlot {
            timestamp: base + h * 3600,
            value: v,
            count: c,
        };
        let expected = vec![
            slot(0, Some(Int(7)), Some(Int(2))),
            slot(1, Some(Float(2.5)), Some(Int(4))),
        ];
        assert_eq!(out, expected);
        // The same row with a raw-qualified cell ahead: the general walk,
        // from a clean scratch, reads the same.
        let mut mixed = vec![Cell::new(vec![0, 0], vec![1])];
        mixed.extend(usual.iter().cloned());
        assert_eq!(read(&mixed), (Ok(5), expected.clone()));
        // A value of 128 bytes or more (a 2-byte length) is walked too.
        let mut long = usual.clone();
        long.push(cell(base + 7200, 3, 0, &[0; 200]));
        assert_eq!(read(&long), (Ok(5), expected));
        // A truncated row is the general walk's error, and leaves the
        // scratch clean for the next row.
        let mut r = SlotReader::new(columns, h);
        let row = RowCells {
            cells: usual.clone(),
        }
        .encode();
        assert!(matches!(
            r.lay_out(&row[..row.len() - 3], base, base, base + 86_399),
            Err(RowError::Truncated(_))
        ));
        assert_eq!(r.lay_out(&[], base, base, base), Err(RowError::Empty));
        let mut out = Vec::new();
        r.read_row(&[1], base, base, base + 86_399, &mut out)
            .unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn dense_rows_read_as_slot_rows_as_doubles() {
        use crate::codec::row::{Cell, RowCells};
        let c = config();
        let h = c.interval("1h").unwrap();
        let base = 1356998400;
        let cell = |ts: u32, id: u8, flags: u8, v: &[u8]| {
            Cell::new(
                qualifier(ts, base, flags, id, h).unwrap().to_vec(),
                v.to_vec(),
            )
        };
        let columns = RollupColumns {
            value: Some(0),
            count: Some(1),
        };
        // An offset past the first bitmap word (a 1h interval in a month
        // row).
        let far = |id: u8, flags: u8, v: &[u8]| {
            let packed = (100u16 << 4) | flags as u16;
            let [a, b] = packed.to_be_bytes();
            Cell::new(vec![id, a, b], v.to_vec())
        };
        // Out of time order, a value or a count alone, a rewritten cell, a
        // far offset, and (second row) a raw-qualified cell: the general
        // walk.
        let cells = vec![
            far(0, 0xB, &2.5f32.to_bits().to_be_bytes()),
            far(1, 0, &[2]),
            cell(base + 3600, 0, 0, &[7]),
            cell(base, 1, 1, &[1, 0]),
            cell(base, 0, 0, &[9]),
            cell(base, 0, 0, &[0xFE]),
            cell(base + 2 * 3600, 3, 0, &[1]),
        ];
        let mut odd = vec![Cell::new(vec![0, 0], vec![1])];
        odd.extend(cells.iter().cloned());
        let mut slots = SlotReader::new(columns, h);
        let mut dense = DenseReader::new(columns, h);
        for row in [cells, odd] {
            let row = RowCells { cells: row }.encode();
            for (from, to) in [(base, base + 200 * 3600), (base + 3600, base + 3600)] {
                let mut want = Vec::new();
                let n = slots.read_row(&row, base, from, to, &mut want).unwrap();
                let want: Vec<(u32, Option<f64>, Option<f64>)> = want
                    .iter()
                    .map(|s| {
                        (
                            (s.timestamp - base) / 3600,
                            s.value.map(|v| v.as_f64()),
                            s.count.map(|v| v.as_f64()),
                        )
                    })
                    .collect();
                assert_eq!(dense.lay_out(&row, base, from, to), Ok(n));
                let mut got = Vec::new();
                dense.drain(|at, v, c| got.push((at, v, c)));
                assert_eq!(got, want);
            }
        }
        let mut got = Vec::new();
        dense.drain(|at, v, c| got.push((at, v, c)));
        assert!(got.is_empty(), "drained");
        assert_eq!(
            dense.lay_out(&[1, 3, 0], base, base, base + 3600),
            Err(crate::codec::row::RowError::Truncated(1))
        );
    }

    /// One random rollup cell: an aggregator id (a few of them read), an
    /// offset mostly in a day's hours, sometimes past a short row's word,
    /// flags and a value whose length may not match them.
    /// Whether `cells` hold a cell of a column the query reads (sum, and
    /// count when asked), in hours `from_h..=from_h + hours`, past the
    /// short row's word (whatever its value): such a row is not short.
    fn has_far_cell(
        cells: &[crate::codec::row::Cell],
        count: bool,
        from_h: u32,
        hours: u32,
    ) -> bool {
        cells.iter().any(|c| {
            let &[id, q1, q2] = c.qualifier.as_slice() else {
                return false;
            };
            let id = id & AGGREGATOR_MASK;
            let at = (u16::from_be_bytes([q1, q2]) >> 4) as u32;
            (id == 0 || (count && id == 1))
                && (from_h..=from_h + hours).contains(&at)
                && at >= SHORT_OFFSETS as u32
        })
    }

    fn any_cell() -> impl proptest::strategy::Strategy<Value = crate::codec::row::Cell> {
        use proptest::prelude::*;
        (
            0u8..5,
            prop_oneof![8 => 0u16..24, 1 => 24u16..64, 1 => 64u16..200],
            any::<bool>(),
            prop::sample::select(vec![1usize, 2, 3, 4, 8]),
            prop::collection::vec(any::<u8>(), 8),
            any::<bool>(),
        )
            .prop_map(|(id, at, float, len, bytes, compacted)| {
                let flags = if float {
                    0x8 | (len as u8 - 1)
                } else {
                    len as u8 - 1
                };
                let [a, b] = ((at << 4) | flags as u16).to_be_bytes();
                let id = if compacted { id | COMPACTED_MASK } else { id };
                crate::codec::row::Cell::new(vec![id, a, b], bytes[..len].to_vec())
            })
    }

    proptest::proptest! {
        /// A short row hands over exactly what the dense reader hands over
        /// (same offsets, same bits of each double, same cell count)
        /// whenever it takes the row, and takes every usual row whose
        /// cells read lie below its word; odd rows (a raw-qualified cell
        /// or a long value) go to the dense reader.
        #[test]
        fn short_rows_read_as_dense_rows(
            cells in proptest::collection::vec(any_cell(), 0..120),
            odd in proptest::prop_oneof![4 => proptest::strategy::Just(0u8), 1 => 1u8..3],
            from_h in 0u32..30,
            hours in 0u32..30,
            count in proptest::prelude::any::<bool>(),
        ) {
            use crate::codec::row::{Cell, RowCells};
            let c = config();
            let h = c.interval("1h").unwrap();
            let base = 1356998400;
            let mut cells = cells;
            match odd {
                1 => cells.insert(cells.len() / 2, Cell::new(vec![0, 0], vec![1])),
                2 => cells.push(Cell::new(vec![0, 0, 0x30], vec![0; 130])),
                _ => {}
            }
            let columns = RollupColumns {
                value: Some(0),
                count: count.then_some(1),
            };
            let row = RowCells { cells: cells.clone() }.encode();
            let (from, to) = (base + from_h * 3600, base + (from_h + hours) * 3600);
            let mut dense = DenseReader::new(columns, h);
            let n = dense.lay_out(&row, base, from, to).unwrap();
            let mut want = Vec::new();
            dense.drain(|at, v, c| want.push(bits_of(at, v, c)));
            let mut short = ShortRow::default();
            let took = dense.lay_out_short(&row, base, from, to, &mut short);
            // A cell of a column read, in range, past the short row's word
            // (whatever its value).
            let far = has_far_cell(&cells, count, from_h, hours);
            proptest::prop_assert_eq!(took, odd == 0 && !far);
            if took {
                let mut got = Vec::new();
                short.drain(|at, v, c| got.push(bits_of(at, v, c)));
                proptest::prop_assert_eq!(got, want);
                proptest::prop_assert_eq!(short.cells(), n);
            }
        }

        /// A row laid out in columns (computed rollups) reads as the same
        /// cells laid out as OpenTSDB lays them out, through every reader:
        /// the same slots (values of the same type and bits), the same
        /// doubles, the same cell counts.
        #[test]
        fn rows_in_columns_read_as_rows_of_cells(
            cells in proptest::collection::vec(any_cell(), 0..120),
            raw in proptest::prelude::any::<bool>(),
            from_h in 0u32..30,
            hours in 0u32..30,
            count in proptest::prelude::any::<bool>(),
        ) {
            use crate::codec::row::{Cell, RowCells};
            use crate::rollup::columns::RollupRowLayout;
            let c = config();
            let h = c.interval("1h").unwrap();
            let base = 1356998400;
            let mut cells = cells;
            if raw {
                cells.insert(cells.len() / 2, Cell::new(vec![0, 0], vec![1]));
            }
            let columns = RollupColumns {
                value: Some(0),
                count: count.then_some(1),
            };
            let row = RowCells { cells };
            let plain = RollupRowLayout::Cells.encode(&row);
            let packed = RollupRowLayout::Columns.encode(&row);
            let (from, to) = (base + from_h * 3600, base + (from_h + hours) * 3600);
            let bits = |v: Option<Value>| v.map(|v| match v {
                Value::Int(i) => (false, i as u64),
                Value::Float(f) => (true, f.to_bits()),
            });
            let slots = |row: &[u8]| {
                let mut r = SlotReader::new(columns, h);
                let mut out = Vec::new();
                let n = r.read_row(row, base, from, to, &mut out).unwrap();
                let out: Vec<_> = out.iter().map(|s| (s.timestamp, bits(s.value), bits(s.count))).collect();
                (n, out)
            };
            proptest::prop_assert_eq!(slots(&packed), slots(&plain));
            // Rows as format 7 wrote them read alike.
            let packed_v1 = crate::rollup::columns::encode_as(&row.cells, crate::rollup::columns::ROLLUP_COLUMNS_V1);
            proptest::prop_assert_eq!(slots(&packed_v1), slots(&plain));
            let mut dense = DenseReader::new(columns, h);
            let mut laid = |row: &[u8]| {
                let n = dense.lay_out(row, base, from, to).unwrap();
                let mut out = Vec::new();
                dense.drain(|at, v, c| out.push(bits_of(at, v, c)));
                (n, out)
            };
            let (n, want) = laid(&plain);
            proptest::prop_assert_eq!(laid(&packed), (n, want.clone()));
            proptest::prop_assert_eq!(laid(&packed_v1), (n, want.clone()));
            let mut short = ShortRow::default();
            // A cell of a column read, in range, past the short row's word.
            let far = has_far_cell(&row.cells, count, from_h, hours);
            let took = dense.lay_out_short(&packed, base, from, to, &mut short);
            proptest::prop_assert_eq!(took, !far);
            if took {
                let mut got = Vec::new();
                short.drain(|at, v, c| got.push(bits_of(at, v, c)));
                proptest::prop_assert_eq!(got, want);
                proptest::prop_assert_eq!(short.cells(), n);
            }
        }

        /// A row of the shape rtsdb computes (a `sum` and a `count` cell
        /// at each offset written, `min` and `max` beside them) is read
        /// where it lies ([`DenseReader::short_view`]) as it is laid out:
        /// the same offsets, the same bits of each double, the same cell
        /// count; rows of any other shape (a count missing, a cell in the
        /// tail, an offset past the first word) are left to the readers
        /// that lay them out.
        #[test]
        fn computed_rows_read_where_they_lie_as_laid_out(
            offsets in proptest::collection::btree_set(
                proptest::prop_oneof![9 => 0u16..24, 1 => 24u16..100], 0..30),
            sums in proptest::collection::vec(proptest::prelude::any::<f64>(), 30),
            counts in proptest::collection::vec(-2i64..100, 30),
            odd in proptest::prop_oneof![6 => proptest::strategy::Just(0u8), 1 => 1u8..4],
            from_h in 0u32..30,
            hours in 0u32..30,
            count in proptest::prelude::any::<bool>(),
            narrow in proptest::prelude::any::<bool>(),
        ) {
            use crate::codec::qualifier::encode_value;
            use crate::codec::row::{Cell, RowCells};
            use crate::rollup::columns::RollupRowLayout;
            let cell = |id: u8, at: u16, v: Value| {
                let e = encode_value(v);
                let [a, b] = ((at << 4) | e.flags as u16).to_be_bytes();
                Cell::new(vec![id, a, b], e.as_bytes().to_vec())
            };
            let c = config();
            let h = c.interval("1h").unwrap();
            let base = 1356998400;
            // Sums that are all floats: their column narrows (`03`).
            let sums: Vec<f64> = sums.iter().map(|&s| if narrow { s as f32 as f64 } else { s }).collect();
            let mut cells = Vec::new();
            for (k, &at) in offsets.iter().enumerate() {
                // A count left out (odd 1) at the last offset.
                let last = k + 1 == offsets.len();
                cells.push(cell(0, at, Value::Float(sums[k])));
                if !(odd == 1 && last) {
                    cells.push(cell(1, at, Value::Int(counts[k])));
                }
                cells.push(cell(2, at, Value::Float(-sums[k])));
                cells.push(cell(3, at, Value::Int(k as i64)));
            }
            match odd {
                // A cell in the tail: a raw qualifier, or a second `sum`
                // of an offset (both go there).
                2 => cells.push(Cell::new(vec![0, 0], vec![1])),
                3 => {
                    if let Some(&at) = offsets.first() {
                        cells.push(cell(0, at, Value::Int(7)));
                    }
                }
                _ => {}
            }
            let columns = RollupColumns {
                value: Some(0),
                count: count.then_some(1),
            };
            // As this build writes them (`03`) and as format 7 did (`02`).
            let old = crate::rollup::columns::encode_as(&cells, crate::rollup::columns::ROLLUP_COLUMNS_V1);
            let new = RollupRowLayout::Columns.encode(&RowCells { cells });
            for row in [new, old] {
                let (from, to) = (base + from_h * 3600, base + (from_h + hours) * 3600);
                let mut dense = DenseReader::new(columns, h);
                let n = dense.lay_out(&row, base, from, to).unwrap();
                let mut want = Vec::new();
                dense.drain(|at, v, c| want.push((at as usize, v.map(f64::to_bits), c.map(f64::to_bits))));
                let view = dense.short_view(&row, base, from, to);
                let one_word = offsets.iter().all(|&at| at < 64);
                let shaped = one_word
                    && !offsets.is_empty()
                    && match odd {
                        0 => true,
                        1 => !count,
                        _ => false,
                    };
                proptest::prop_assert_eq!(view.is_some(), shaped);
                if let Some(view) = view {
                    let (mut bits, values, counts) = view.parts();
                    let mut got = Vec::new();
                    for k in 0..values.len() {
                        let at = bits.trailing_zeros() as usize;
                        bits &= bits - 1;
                        got.push((at, Some(values.get(k).to_bits()), counts.map(|c| c.get(k).to_bits())));
                    }
                    proptest::prop_assert_eq!(bits, 0);
                    proptest::prop_assert_eq!(counts.map_or(values.len(), |c| c.len()), values.len());
                    proptest::prop_assert_eq!(got, want);
                    proptest::prop_assert_eq!(view.cells(), n);
                }
            }
        }
    }
}
