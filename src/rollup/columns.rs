//! The layout of the rollup rows rtsdb computes itself
//! (`tsd.rollups.auto`): a row's cells grouped by aggregator, each
//! aggregator's cells one column (a bitmap of the offsets it holds, their
//! value flags, their values as doubles), so that a query reads the one
//! or two columns it needs and steps over the others whole, instead of
//! walking every cell's lengths and flags. Any cell a column cannot hold
//! exactly stays in the row's tail in the data-row layout. Rows read back
//! as the same OpenTSDB cells (qualifiers and value bytes) they were
//! written from: `tsdb scan`, `fsck` and deletes see OpenTSDB's form.
//! Format: docs/format/rollup.md.

use std::collections::BTreeMap;

use super::qualifier::AGGREGATOR_MASK;
use crate::codec::qualifier::{FLAG_FLOAT, FLAGS_MASK, decode_value};
use crate::codec::row::{self, Cell, ROW_FORMAT_V1, RowCells, RowError};

/// First byte of a row value laid out in columns as store format 7 wrote
/// them (data-row values start with [`ROW_FORMAT_V1`]): still read.
pub const ROLLUP_COLUMNS_V1: u8 = 0x02;

/// First byte of a row value laid out in columns as written since store
/// format 8: each column says whether its cells share one flags byte and
/// whether its values are 4-byte floats (when every one of them is
/// exactly a float), and the header whether a tail follows the columns.
/// A row's bytes are what a long query streams from memory, so fewer
/// bytes read faster (docs/format/rollup.md).
pub const ROLLUP_COLUMNS_V2: u8 = 0x03;

/// A `03` column's form bit: one flags byte stands for every cell's.
const FORM_ONE_FLAGS: u8 = 0x01;
/// A `03` column's form bit: values are little-endian `f32`s.
const FORM_NARROW: u8 = 0x02;

/// Offsets a qualifier's 12 bits can hold, and so bitmap words a column
/// may have.
const MAX_WORDS: usize = 4096 / 64;

/// How a rollup row is laid out when written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RollupRowLayout {
    /// Cells in the data-row layout, as OpenTSDB writes them
    /// (`/api/rollup`, telnet `rollup`).
    Cells,
    /// Cells grouped in columns ([`ROLLUP_COLUMNS_V1`]): computed rollups.
    Columns,
}

impl RollupRowLayout {
    /// The layout of a stored row value.
    pub fn of(value: &[u8]) -> RollupRowLayout {
        match value.first() {
            Some(&(ROLLUP_COLUMNS_V1 | ROLLUP_COLUMNS_V2)) => RollupRowLayout::Columns,
            _ => RollupRowLayout::Cells,
        }
    }

    /// Encodes `cells` (in write order) in this layout.
    pub fn encode(self, cells: &RowCells) -> Vec<u8> {
        match self {
            RollupRowLayout::Cells => cells.encode(),
            RollupRowLayout::Columns => encode(&cells.cells),
        }
    }
}

/// A cell a column can hold: a 3-byte rollup qualifier without the
/// compacted bit, and a value whose bytes its flags and its double give
/// back exactly.
fn column_cell(c: &Cell) -> Option<(u8, u16, u8, f64)> {
    let &[agg, q1, q2] = c.qualifier.as_slice() else {
        return None;
    };
    if agg & !AGGREGATOR_MASK != 0 {
        return None;
    }
    let packed = u16::from_be_bytes([q1, q2]);
    let flags = packed as u8 & FLAGS_MASK;
    let v = decode_value(flags, &c.value).ok()?.as_f64();
    let mut buf = [0u8; 8];
    (value_bytes(flags, v, &mut buf)? == c.value.as_slice()).then_some((agg, packed >> 4, flags, v))
}

/// The value bytes of a cell with `flags` holding `v`: as many bytes as
/// the flags say (docs/format/qualifier-and-value.md), big-endian; None
/// for a float of another length than 4 or 8.
fn value_bytes(flags: u8, v: f64, buf: &mut [u8; 8]) -> Option<&[u8]> {
    let len = (flags & 0x7) as usize + 1;
    if flags & FLAG_FLOAT != 0 {
        match len {
            4 => buf[..4].copy_from_slice(&(v as f32).to_bits().to_be_bytes()),
            8 => *buf = v.to_bits().to_be_bytes(),
            _ => return None,
        }
        Some(&buf[..len])
    } else {
        *buf = (v as i64).to_be_bytes();
        Some(&buf[8 - len..])
    }
}

/// Lays `cells` (in write order) out in columns ([`ROLLUP_COLUMNS_V2`]):
/// each aggregator's cells that a column holds exactly, by offset; every
/// other cell (another qualifier shape, a value a double does not give
/// back, or one of several cells of one aggregator and offset, whose
/// write order decides which is read) in the tail, in write order.
pub fn encode(cells: &[Cell]) -> Vec<u8> {
    encode_as(cells, ROLLUP_COLUMNS_V2)
}

/// [`encode`] in the layout `version` ([`ROLLUP_COLUMNS_V1`] only for
/// tests of what older builds wrote).
pub(crate) fn encode_as(cells: &[Cell], version: u8) -> Vec<u8> {
    let mut times: BTreeMap<(u8, u16), u32> = BTreeMap::new();
    let parsed: Vec<Option<(u8, u16, u8, f64)>> = cells.iter().map(column_cell).collect();
    for c in cells {
        if let &[agg, q1, q2] = c.qualifier.as_slice() {
            let key = (agg & AGGREGATOR_MASK, u16::from_be_bytes([q1, q2]) >> 4);
            *times.entry(key).or_default() += 1;
        }
    }
    let mut columns: BTreeMap<u8, BTreeMap<u16, (u8, f64)>> = BTreeMap::new();
    let mut tail = Vec::new();
    for (c, p) in cells.iter().zip(&parsed) {
        match p {
            Some((agg, offset, flags, v)) if times[&(*agg, *offset)] == 1 => {
                columns
                    .entry(*agg)
                    .or_default()
                    .insert(*offset, (*flags, *v));
            }
            _ => row::put_cell(&c.qualifier, &c.value, &mut tail),
        }
    }
    let v2 = version == ROLLUP_COLUMNS_V2;
    let mut out = Vec::with_capacity(3 + cells.len() * 9 + columns.len() * 11 + tail.len());
    out.push(version);
    out.push(columns.len() as u8);
    if v2 {
        out.push(u8::from(!tail.is_empty()));
    }
    for (id, cells) in &columns {
        let last = *cells.keys().next_back().expect("a column holds a cell") as usize;
        let words = last / 64 + 1;
        let mut bitmap = vec![0u64; words];
        for &at in cells.keys() {
            bitmap[at as usize / 64] |= 1 << (at % 64);
        }
        let mut flags = cells.values().map(|(flags, _)| *flags);
        let first = flags.next().expect("a column holds a cell");
        let one_flags = v2 && flags.all(|f| f == first);
        // Bit for bit: a NaN's payload and -0.0 come back too.
        let narrow = v2
            && cells
                .values()
                .all(|(_, v)| ((*v as f32) as f64).to_bits() == v.to_bits());
        out.push(*id);
        out.push(words as u8);
        if v2 {
            out.push(
                if one_flags { FORM_ONE_FLAGS } else { 0 } | if narrow { FORM_NARROW } else { 0 },
            );
        }
        for w in bitmap {
            out.extend_from_slice(&w.to_le_bytes());
        }
        if one_flags {
            out.push(first);
        } else {
            out.extend(cells.values().map(|(flags, _)| *flags));
        }
        for (_, v) in cells.values() {
            if narrow {
                out.extend_from_slice(&(*v as f32).to_le_bytes());
            } else {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
    }
    out.extend_from_slice(&tail);
    out
}

/// A column's values: little-endian doubles, or (`narrow`) floats that
/// each stand exactly for a double, by rank.
#[derive(Debug, Clone, Copy)]
pub struct Doubles<'a> {
    bytes: &'a [u8],
    narrow: bool,
}

impl<'a> Doubles<'a> {
    /// How many values.
    #[inline(always)]
    pub fn len(&self) -> usize {
        if self.narrow {
            self.bytes.len() / 4
        } else {
            self.bytes.len() / 8
        }
    }

    /// Whether there is none.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The `k`th value (below [`len`](Self::len)).
    #[inline(always)]
    pub fn get(&self, k: usize) -> f64 {
        if self.narrow {
            let b = &self.bytes[k * 4..k * 4 + 4];
            f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64
        } else {
            let b = &self.bytes[k * 8..k * 8 + 8];
            f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
        }
    }

    /// The values ranked `from..to`, None past the end.
    #[inline(always)]
    pub fn range(&self, from: usize, to: usize) -> Option<Doubles<'a>> {
        let w = if self.narrow { 4 } else { 8 };
        Some(Doubles {
            bytes: self.bytes.get(from * w..to * w)?,
            narrow: self.narrow,
        })
    }

    /// Whether the values are floats (4 bytes each).
    #[inline(always)]
    pub fn is_narrow(&self) -> bool {
        self.narrow
    }
}

/// One column of a row laid out in columns, borrowed.
#[derive(Debug, Clone, Copy)]
pub struct Column<'a> {
    /// The aggregator id.
    pub id: u8,
    /// Little-endian `u64` words: bit `at % 64` of word `at / 64` is set
    /// when the column holds offset `at`.
    bitmap: &'a [u8],
    /// Each cell's value flags, by offset, or one byte for every cell's.
    flags: &'a [u8],
    /// Each cell's value, by offset.
    values: Doubles<'a>,
}

/// The bits of bitmap word `w` whose offsets lie in `[first, last]`.
#[inline(always)]
pub fn range_bits(first: u64, last: u64, w: usize) -> u64 {
    let lo = (w as u64) * 64;
    let hi = lo + 63;
    if last < lo || first > hi || first > last {
        return 0;
    }
    let from = first.saturating_sub(lo);
    let to = last.min(hi) - lo;
    (u64::MAX >> (63 - to)) & (u64::MAX << from)
}

impl<'a> Column<'a> {
    /// Bitmap word `w`.
    #[inline(always)]
    pub fn word(&self, w: usize) -> u64 {
        u64::from_le_bytes(self.bitmap[w * 8..w * 8 + 8].try_into().expect("8 bytes"))
    }

    /// How many bitmap words the column has.
    #[inline(always)]
    pub fn words(&self) -> usize {
        self.bitmap.len() / 8
    }

    /// Every cell's value, in offset order.
    #[inline(always)]
    pub fn doubles(&self) -> Doubles<'a> {
        self.values
    }

    /// The value of the column's `k`th cell (in offset order).
    #[inline(always)]
    pub fn value(&self, k: usize) -> f64 {
        self.values.get(k)
    }

    /// The value flags of the column's `k`th cell (in offset order).
    #[inline(always)]
    pub fn flags(&self, k: usize) -> u8 {
        if self.flags.len() == 1 {
            self.flags[0]
        } else {
            self.flags[k]
        }
    }

    /// Calls `f(offset, flags, value)` for each cell at an offset in
    /// `[first, last]`, in offset order.
    #[inline(always)]
    pub fn for_each_in(&self, first: u64, last: u64, mut f: impl FnMut(usize, u8, f64)) {
        let mut k = 0;
        for w in 0..self.words() {
            let mut bits = self.word(w);
            while bits != 0 {
                let at = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if (at as u64) >= first && (at as u64) <= last {
                    f(at, self.flags(k), self.value(k));
                }
                k += 1;
            }
        }
    }
}

/// A row laid out in columns, its header read: the columns in aggregator
/// order, and where its tail starts.
pub struct ColumnRow<'a> {
    row: &'a [u8],
    /// Where the next column starts, and how many are left.
    pos: usize,
    left: u8,
    /// Columns have a form byte ([`ROLLUP_COLUMNS_V2`]).
    v2: bool,
    /// The row says no tail follows its columns ([`ROLLUP_COLUMNS_V2`]).
    tail_free: bool,
}

impl<'a> ColumnRow<'a> {
    /// None unless `row` starts with [`ROLLUP_COLUMNS_V1`] or
    /// [`ROLLUP_COLUMNS_V2`].
    #[inline(always)]
    pub fn of(row: &'a [u8]) -> Option<Result<ColumnRow<'a>, RowError>> {
        match row {
            [ROLLUP_COLUMNS_V1, n, ..] => Some(Ok(ColumnRow {
                row,
                pos: 2,
                left: *n,
                v2: false,
                tail_free: false,
            })),
            [ROLLUP_COLUMNS_V2, n, tail, ..] => match tail {
                0 | 1 => Some(Ok(ColumnRow {
                    row,
                    pos: 3,
                    left: *n,
                    v2: true,
                    tail_free: *tail == 0,
                })),
                _ => Some(Err(RowError::Malformed(2))),
            },
            [ROLLUP_COLUMNS_V1] | [ROLLUP_COLUMNS_V2] => Some(Err(RowError::Truncated(1))),
            [ROLLUP_COLUMNS_V2, _] => Some(Err(RowError::Truncated(2))),
            _ => None,
        }
    }

    /// Whether the row says no cell follows its columns: a reader of some
    /// of its columns may stop once it has them.
    #[inline(always)]
    pub fn tail_free(&self) -> bool {
        self.tail_free
    }

    /// The next column, or None when the columns are read ([`tail`]
    /// then starts the cells left).
    ///
    /// [`tail`]: ColumnRow::tail
    #[inline(always)]
    pub fn next_column(&mut self) -> Result<Option<Column<'a>>, RowError> {
        if self.left == 0 {
            return Ok(None);
        }
        let at = self.pos;
        let truncated = RowError::Truncated;
        let (Some(&id), Some(&words)) = (self.row.get(at), self.row.get(at + 1)) else {
            return Err(truncated(at));
        };
        let words = words as usize;
        if words == 0 || words > MAX_WORDS {
            return Err(RowError::Malformed(at + 1));
        }
        let form = if self.v2 {
            match self.row.get(at + 2) {
                Some(&f) if f & !(FORM_ONE_FLAGS | FORM_NARROW) == 0 => f,
                Some(_) => return Err(RowError::Malformed(at + 2)),
                None => return Err(truncated(at)),
            }
        } else {
            0
        };
        let bitmap_at = at + 2 + usize::from(self.v2);
        let bitmap = self
            .row
            .get(bitmap_at..bitmap_at + words * 8)
            .ok_or(truncated(at))?;
        // Word by word: a byte-wise count is vectorized into a loop
        // costlier than a bitmap of a few words.
        let n: usize = bitmap
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")).count_ones() as usize)
            .sum();
        let flags_at = bitmap_at + words * 8;
        let values_at = flags_at + if form & FORM_ONE_FLAGS != 0 { 1 } else { n };
        let narrow = form & FORM_NARROW != 0;
        let end = values_at + n * if narrow { 4 } else { 8 };
        let (Some(flags), Some(values)) = (
            self.row.get(flags_at..values_at),
            self.row.get(values_at..end),
        ) else {
            return Err(truncated(at));
        };
        self.pos = end;
        self.left -= 1;
        Ok(Some(Column {
            id,
            bitmap,
            flags,
            values: Doubles {
                bytes: values,
                narrow,
            },
        }))
    }

    /// Where the tail's cells start: only once every column was read.
    pub fn tail(&self) -> usize {
        self.pos
    }

    /// The row.
    pub fn row(&self) -> &'a [u8] {
        self.row
    }
}

/// Calls `f(qualifier, value)` for each cell of a rollup row value in
/// either layout, borrowed: a row in columns gives each column's cells in
/// offset order (their qualifiers and value bytes rebuilt), then its tail.
pub fn for_each_cell(row: &[u8], mut f: impl FnMut(&[u8], &[u8])) -> Result<(), RowError> {
    let Some(view) = ColumnRow::of(row) else {
        return RowCells::for_each_borrowed(row, f);
    };
    let mut view = view?;
    while let Some(c) = view.next_column()? {
        let mut bad = None;
        c.for_each_in(0, u64::MAX, |at, flags, v| {
            let mut buf = [0u8; 8];
            let packed = ((at as u16) << 4 | (flags & FLAGS_MASK) as u16).to_be_bytes();
            match value_bytes(flags, v, &mut buf) {
                Some(bytes) => f(&[c.id, packed[0], packed[1]], bytes),
                None => bad = Some(()),
            }
        });
        if bad.is_some() {
            return Err(RowError::Malformed(view.tail()));
        }
    }
    if view.tail_free() && view.tail() != row.len() {
        return Err(RowError::Malformed(view.tail()));
    }
    row::for_each_cell_from(row, view.tail(), f)
}

/// The cells of a rollup row value in either layout
/// ([`for_each_cell`]'s order).
pub fn decode(row: &[u8]) -> Result<RowCells, RowError> {
    if row.first() == Some(&ROW_FORMAT_V1) {
        return RowCells::decode(row);
    }
    let mut cells = Vec::new();
    for_each_cell(row, |q, v| cells.push(Cell::new(q.to_vec(), v.to_vec())))?;
    Ok(RowCells { cells })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::qualifier::encode_value;
    use crate::model::Value;
    use proptest::prelude::*;

    fn cell(agg: u8, offset: u16, v: Value) -> Cell {
        let e = encode_value(v);
        let packed = (offset << 4 | e.flags as u16).to_be_bytes();
        Cell::new(vec![agg, packed[0], packed[1]], e.as_bytes().to_vec())
    }

    /// What reading a row gives: each cell's qualifier and value, the
    /// later of two with one aggregator and offset winning.
    fn read(cells: &[Cell]) -> BTreeMap<(u8, u16), (Vec<u8>, Vec<u8>)> {
        let mut out = BTreeMap::new();
        for c in cells {
            if let &[agg, q1, q2] = c.qualifier.as_slice() {
                let key = (agg & AGGREGATOR_MASK, u16::from_be_bytes([q1, q2]) >> 4);
                out.insert(key, (c.qualifier.clone(), c.value.clone()));
            }
        }
        out
    }

    #[test]
    fn range_bits_are_the_offsets_of_a_word_in_range() {
        assert_eq!(range_bits(0, u64::MAX, 0), u64::MAX);
        assert_eq!(range_bits(0, 23, 0), (1 << 24) - 1);
        assert_eq!(range_bits(3, 5, 0), 0b111000);
        assert_eq!(range_bits(3, 5, 1), 0);
        assert_eq!(range_bits(60, 70, 1), 0b1111111);
        assert_eq!(range_bits(60, 70, 0), 0xF << 60);
        assert_eq!(range_bits(1, 0, 0), 0);
        for (first, last, w) in [(0u64, 200u64, 2usize), (130, 140, 2), (5, 5, 0)] {
            let want: u64 = (0..64)
                .filter(|b| (first..=last).contains(&(w as u64 * 64 + b)))
                .map(|b| 1u64 << b)
                .sum();
            assert_eq!(range_bits(first, last, w), want);
        }
    }

    #[test]
    fn computed_cells_lie_in_columns_by_aggregator_then_offset() {
        let cells = vec![
            cell(0, 2, Value::Float(1.5)),
            cell(1, 2, Value::Int(3)),
            cell(0, 0, Value::Float(0.25)),
            cell(1, 0, Value::Int(300)),
        ];
        let old = encode_as(&cells, ROLLUP_COLUMNS_V1);
        // Marker, 2 columns; sum: id 0, 1 word, offsets 0 and 2, flags,
        // values.
        assert_eq!(&old[..4], &[ROLLUP_COLUMNS_V1, 2, 0, 1]);
        assert_eq!(&old[4..12], &5u64.to_le_bytes());
        assert_eq!(&old[12..14], &[0x0B, 0x0B]);
        assert_eq!(&old[14..22], &0.25f64.to_le_bytes());
        assert_eq!(old.len(), 2 + 2 * (2 + 8 + 2 + 16));
        let bytes = encode(&cells);
        // Marker, 2 columns, no tail; sum: id 0, 1 word, one flags byte
        // and floats; count: its own flags (300 takes two bytes), floats.
        assert_eq!(&bytes[..6], &[ROLLUP_COLUMNS_V2, 2, 0, 0, 1, 3]);
        assert_eq!(&bytes[6..14], &5u64.to_le_bytes());
        assert_eq!(bytes[14], 0x0B);
        assert_eq!(&bytes[15..19], &0.25f32.to_le_bytes());
        assert_eq!(&bytes[19..23], &1.5f32.to_le_bytes());
        assert_eq!(&bytes[23..26], &[1, 1, 2]);
        assert_eq!(&bytes[34..36], &[0x01, 0x00]);
        assert_eq!(bytes.len(), 3 + (3 + 8 + 1 + 8) + (3 + 8 + 2 + 8));
        for bytes in [old, bytes] {
            let back = decode(&bytes).unwrap();
            // HBase's order: by qualifier.
            assert_eq!(
                back.cells,
                vec![
                    cells[2].clone(),
                    cells[0].clone(),
                    cells[3].clone(),
                    cells[1].clone()
                ]
            );
        }
    }

    #[test]
    fn values_no_float_holds_stay_doubles_and_a_tail_is_announced() {
        let cells = vec![
            cell(0, 0, Value::Float(0.1)),
            cell(0, 1, Value::Float(0.5)),
            cell(1, 0, Value::Float(f64::NAN)),
            Cell::new(vec![0, 0x00, 0x27], (i64::MAX - 1).to_be_bytes().to_vec()),
        ];
        let bytes = encode(&cells);
        // A tail follows; 0.1 is no float: both sum cells are doubles,
        // each with its flags (8 and 4 bytes).
        assert_eq!(&bytes[..6], &[ROLLUP_COLUMNS_V2, 2, 1, 0, 1, 0]);
        assert_eq!(&bytes[14..16], &[0x0F, 0x0B]);
        assert_eq!(&bytes[16..24], &0.1f64.to_le_bytes());
        // The NaN count, a float's: one flags byte, a float.
        assert_eq!(&bytes[32..35], &[1, 1, 3]);
        let back = decode(&bytes).unwrap();
        assert_eq!(read(&back.cells), read(&cells));
        // A row without a tail that has bytes after its columns is
        // damaged.
        let mut short = encode(&cells[..2]);
        assert_eq!(short[2], 0);
        short.push(0);
        assert!(decode(&short).is_err());
    }

    /// docs/format/rollup.md's example, byte for byte.
    #[test]
    fn the_documented_example() {
        let cells = vec![
            cell(0, 0, Value::Float(21.5)),
            cell(1, 0, Value::Int(6)),
            cell(0, 2, Value::Float(22.0)),
            cell(1, 2, Value::Int(6)),
        ];
        let hex: Vec<u8> = "02 02 \
            00 01 05 00 00 00 00 00 00 00 0B 0B 00 00 00 00 00 80 35 40 00 00 00 00 00 00 36 40 \
            01 01 05 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 18 40 00 00 00 00 00 00 18 40"
            .split_whitespace()
            .map(|b| u8::from_str_radix(b, 16).unwrap())
            .collect();
        assert_eq!(encode_as(&cells, ROLLUP_COLUMNS_V1), hex);
        let narrow: Vec<u8> = "03 02 00 \
            00 01 03 05 00 00 00 00 00 00 00 0B 00 00 AC 41 00 00 B0 41 \
            01 01 03 05 00 00 00 00 00 00 00 00 00 00 C0 40 00 00 C0 40"
            .split_whitespace()
            .map(|b| u8::from_str_radix(b, 16).unwrap())
            .collect();
        assert_eq!(encode(&cells), narrow);
        for bytes in [hex, narrow] {
            let back = decode(&bytes).unwrap().cells;
            assert_eq!(back[0], Cell::new(vec![0, 0, 0x0B], vec![0x41, 0xAC, 0, 0]));
            assert_eq!(back[1], Cell::new(vec![0, 0, 0x2B], vec![0x41, 0xB0, 0, 0]));
            assert_eq!(back[3], Cell::new(vec![1, 0, 0x20], vec![6]));
        }
    }

    #[test]
    fn cells_no_column_holds_exactly_stay_in_the_tail_in_write_order() {
        let big = Cell::new(vec![0, 0x00, 0x17], (i64::MAX - 1).to_be_bytes().to_vec());
        let raw = Cell::new(vec![0x00, 0x07], vec![1]);
        let compacted = Cell::new(vec![0x81, 0x00, 0x10], vec![2]);
        let first = cell(2, 5, Value::Int(1));
        let second = cell(2, 5, Value::Float(2.5));
        let cells = vec![
            big.clone(),
            first.clone(),
            raw.clone(),
            compacted.clone(),
            second.clone(),
            cell(3, 1, Value::Int(9)),
        ];
        let back = decode(&encode(&cells)).unwrap();
        assert_eq!(back.cells[0], cell(3, 1, Value::Int(9)));
        assert_eq!(&back.cells[1..], &[big, first, raw, compacted, second]);
    }

    #[test]
    fn a_bad_column_is_an_error_not_a_panic() {
        assert_eq!(decode(&[2]), Err(RowError::Truncated(1)));
        // 65 words: more offsets than a qualifier holds.
        assert_eq!(decode(&[2, 1, 0, 65]), Err(RowError::Malformed(3)));
        assert_eq!(decode(&[2, 1, 0, 1, 1, 0]), Err(RowError::Truncated(2)));
        // A float of 2 bytes cannot be given back.
        let mut row = vec![2, 1, 0, 1];
        row.extend_from_slice(&1u64.to_le_bytes());
        row.push(0x09);
        row.extend_from_slice(&1f64.to_le_bytes());
        assert!(decode(&row).is_err());
        assert_eq!(decode(&[3]), Err(RowError::Truncated(1)));
        assert_eq!(decode(&[3, 1]), Err(RowError::Truncated(2)));
        // A tail byte other than 0 and 1, a form with unknown bits.
        assert_eq!(decode(&[3, 1, 2]), Err(RowError::Malformed(2)));
        assert_eq!(decode(&[3, 1, 0, 0, 1, 4]), Err(RowError::Malformed(5)));
        assert_eq!(
            decode(&[3, 1, 0, 0, 1, 3, 1, 0]),
            Err(RowError::Truncated(3))
        );
    }

    fn any_value() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<i8>().prop_map(|v| Value::Int(v as i64)),
            any::<i16>().prop_map(|v| Value::Int(v as i64)),
            any::<i64>().prop_map(Value::Int),
            any::<f32>().prop_map(|v| Value::Float(v as f64)),
            any::<f64>().prop_map(Value::Float),
        ]
    }

    fn any_cell() -> impl Strategy<Value = Cell> {
        prop_oneof![
            8 => (0u8..4, 0u16..100, any_value()).prop_map(|(a, o, v)| cell(a, o, v)),
            1 => (0u8..4, 0u16..4096, any_value()).prop_map(|(a, o, v)| cell(a, o, v)),
            1 => (proptest::collection::vec(any::<u8>(), 0..5), proptest::collection::vec(any::<u8>(), 0..10))
                .prop_map(|(q, v)| Cell::new(q, v)),
        ]
    }

    proptest! {
        /// Any cells read back as the same cells (each aggregator and
        /// offset's winner), in either layout.
        #[test]
        fn rows_in_columns_read_back_their_cells(cells in proptest::collection::vec(any_cell(), 0..120)) {
            let old = encode_as(&cells, ROLLUP_COLUMNS_V1);
            let bytes = encode(&cells);
            prop_assert!(bytes.len() <= old.len() + 1 + cells.len());
            for bytes in [old, bytes] {
                let back = decode(&bytes).unwrap();
                prop_assert_eq!(read(&back.cells), read(&cells));
                let mut sorted = back.cells.clone();
                sorted.sort_by(|a, b| (&a.qualifier, &a.value).cmp(&(&b.qualifier, &b.value)));
                let mut want = cells.clone();
                want.sort_by(|a, b| (&a.qualifier, &a.value).cmp(&(&b.qualifier, &b.value)));
                prop_assert_eq!(sorted, want);
                prop_assert_eq!(RollupRowLayout::of(&bytes), RollupRowLayout::Columns);
            }
            let plain = RollupRowLayout::Cells.encode(&RowCells { cells: cells.clone() });
            prop_assert_eq!(decode(&plain).unwrap().cells, cells);
        }

        /// A damaged row never panics.
        #[test]
        fn damaged_rows_in_columns_never_panic(
            cells in proptest::collection::vec(any_cell(), 0..40),
            at in any::<usize>(),
            byte in any::<u8>(),
            cut in any::<usize>(),
        ) {
            for version in [ROLLUP_COLUMNS_V1, ROLLUP_COLUMNS_V2] {
                let mut bytes = encode_as(&cells, version);
                let n = bytes.len();
                bytes[at % n] = byte;
                let _ = decode(&bytes);
                bytes.truncate(cut % (n + 1));
                let _ = decode(&bytes);
            }
        }
    }
}
