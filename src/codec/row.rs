//! One data-table row as stored in the key-value engine: the row key is the
//! engine key, and the engine value holds the row's cells (HBase columns).
//! Format: docs/format/data-row.md.

use thiserror::Error;

use super::column::{self, ColumnError};
use super::compressed;
use super::qualifier::{self, CellKind, StoredPoint};
use super::varint;
use crate::model::uid::java_byte_array;

/// Version byte at the start of every encoded row value.
pub const ROW_FORMAT_V1: u8 = 0x01;

/// One column of a row: an HBase qualifier and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    pub qualifier: Vec<u8>,
    pub value: Vec<u8>,
}

impl Cell {
    pub fn new(qualifier: Vec<u8>, value: Vec<u8>) -> Cell {
        Cell { qualifier, value }
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum RowError {
    #[error("row value is empty")]
    Empty,
    #[error("unknown row format version {0}")]
    UnknownVersion(u8),
    #[error("row value truncated at byte {0}")]
    Truncated(usize),
    /// A field that its layout does not allow (rollup columns,
    /// docs/format/rollup.md).
    #[error("row value malformed at byte {0}")]
    Malformed(usize),
}

/// Appends one cell in the row layout (`qlen qualifier vlen value`,
/// docs/format/data-row.md).
pub fn put_cell(qualifier: &[u8], value: &[u8], out: &mut Vec<u8>) {
    varint::put(qualifier.len() as u64, out);
    out.extend_from_slice(qualifier);
    varint::put(value.len() as u64, out);
    out.extend_from_slice(value);
}

/// Calls `f(qualifier, value)` for each cell laid out from `buf[pos..]`
/// to its end, borrowed, in write order (errors name bytes of `buf`).
pub fn for_each_cell_from(
    buf: &[u8],
    mut pos: usize,
    mut f: impl FnMut(&[u8], &[u8]),
) -> Result<(), RowError> {
    while pos < buf.len() {
        let at = pos;
        let q = take_field(buf, &mut pos).ok_or(RowError::Truncated(at))?;
        let at = pos;
        let v = take_field(buf, &mut pos).ok_or(RowError::Truncated(at))?;
        f(q, v);
    }
    Ok(())
}

/// The cells of a row in write order: a later cell was written after an
/// earlier one, which is how "last write wins" is decided between duplicate
/// columns (HBase uses cell timestamps for this).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowCells {
    pub cells: Vec<Cell>,
}

/// One length-prefixed field (a qualifier or a value) at `*pos`.
#[inline]
fn take_field<'a>(buf: &'a [u8], pos: &mut usize) -> Option<&'a [u8]> {
    // Qualifiers and values are short: their length is one varint byte,
    // read here without the general loop (rows are walked cell by cell).
    let len = match buf.get(*pos) {
        Some(&b) if b < 0x80 => {
            *pos += 1;
            b as usize
        }
        _ => usize::try_from(varint::get(buf, pos)?).ok()?,
    };
    let end = pos.checked_add(len)?;
    let bytes = buf.get(*pos..end)?;
    *pos = end;
    Some(bytes)
}

impl RowCells {
    pub fn encode(&self) -> Vec<u8> {
        let size: usize = self
            .cells
            .iter()
            .map(|c| c.qualifier.len() + c.value.len() + 4)
            .sum();
        let mut out = Vec::with_capacity(1 + size);
        out.push(ROW_FORMAT_V1);
        for c in &self.cells {
            put_cell(&c.qualifier, &c.value, &mut out);
        }
        out
    }

    pub fn decode(buf: &[u8]) -> Result<RowCells, RowError> {
        let (&version, _) = buf.split_first().ok_or(RowError::Empty)?;
        if version != ROW_FORMAT_V1 {
            return Err(RowError::UnknownVersion(version));
        }
        let mut pos = 1;
        let mut cells = Vec::new();
        let take = |pos: &mut usize| {
            let at = *pos;
            take_field(buf, pos)
                .map(<[u8]>::to_vec)
                .ok_or(RowError::Truncated(at))
        };
        while pos < buf.len() {
            let qualifier = take(&mut pos)?;
            let value = take(&mut pos)?;
            cells.push(Cell { qualifier, value });
        }
        Ok(RowCells { cells })
    }

    /// Calls `f(qualifier, value)` for each cell of an encoded row value,
    /// borrowed, in write order: a read that keeps few cells allocates
    /// nothing per cell.
    pub fn for_each_borrowed(buf: &[u8], f: impl FnMut(&[u8], &[u8])) -> Result<(), RowError> {
        let (&version, _) = buf.split_first().ok_or(RowError::Empty)?;
        if version != ROW_FORMAT_V1 {
            return Err(RowError::UnknownVersion(version));
        }
        for_each_cell_from(buf, 1, f)
    }

    /// The only cell of an encoded row value, borrowed, if it has exactly
    /// one (the common compacted case), without decoding the rest.
    pub fn single_cell(buf: &[u8]) -> Option<(&[u8], &[u8])> {
        if buf.first() != Some(&ROW_FORMAT_V1) {
            return None;
        }
        let mut pos = 1;
        let q = take_field(buf, &mut pos)?;
        let v = take_field(buf, &mut pos)?;
        (pos == buf.len()).then_some((q, v))
    }

    /// Writes a cell as HBase would: same qualifier replaces the old value,
    /// and the cell becomes the most recent one.
    pub fn put(&mut self, cell: Cell) {
        self.cells.retain(|c| c.qualifier != cell.qualifier);
        self.cells.push(cell);
    }

    pub fn remove(&mut self, qualifier: &[u8]) -> bool {
        let before = self.cells.len();
        self.cells.retain(|c| c.qualifier != qualifier);
        before != self.cells.len()
    }

    /// Cells sorted by qualifier, as HBase returns them (for display).
    pub fn sorted(&self) -> Vec<&Cell> {
        let mut v: Vec<&Cell> = self.cells.iter().collect();
        v.sort_by(|a, b| a.qualifier.cmp(&b.qualifier));
        v
    }
}

/// What to do with two different values for one timestamp in a row
/// (`tsd.storage.fix_duplicates`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DuplicatePolicy {
    /// The most recently written value wins (rtsdb's default).
    #[default]
    LastWriteWins,
    /// OpenTSDB's default: reading such a row fails.
    Strict,
}

/// A row's content, decoded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DecodedRow {
    /// Sorted by offset, one per timestamp.
    pub points: Vec<StoredPoint>,
    /// Annotation cells: (qualifier, JSON value).
    pub annotations: Vec<Cell>,
    /// Histogram and unknown odd-prefix cells, kept untouched.
    pub other: Vec<Cell>,
    /// How many duplicate points were dropped (identical or resolved).
    pub duplicates: usize,
}

/// Whether `points` are in time order, one per timestamp: a row's points
/// as they are stored, needing no merge.
pub fn sorted_unique(points: &[StoredPoint]) -> bool {
    points.windows(2).all(|w| w[0].offset_ms < w[1].offset_ms)
}

/// Decodes every data column of a row (single, compacted and append
/// columns), merging them by timestamp the way OpenTSDB's compaction does.
pub fn decode_row(
    row_key: &[u8],
    cells: &RowCells,
    policy: DuplicatePolicy,
) -> Result<DecodedRow, ColumnError> {
    let mut row = DecodedRow::default();
    let mut points: Vec<StoredPoint> = Vec::new();
    // For each cell that held points: its index and where its points end.
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for (i, cell) in cells.cells.iter().enumerate() {
        let q = &cell.qualifier;
        let before = points.len();
        match CellKind::of(q) {
            CellKind::Single => points.push(column::decode_single(q, &cell.value)?),
            CellKind::Compacted => column::decode_compacted(q, &cell.value, &mut points)?,
            CellKind::Append => column::decode_append(&cell.value, &mut points)?,
            CellKind::Compressed => compressed::decode(&cell.value, &mut points)?,
            CellKind::Annotation => row.annotations.push(cell.clone()),
            // Kept untouched: OpenTSDB's compaction skips what it cannot read.
            CellKind::Histogram | CellKind::Object | CellKind::Unknown => {
                row.other.push(cell.clone())
            }
            CellKind::TooShort => return Err(ColumnError::UnknownQualifier(q.clone())),
        }
        if points.len() > before {
            spans.push((i, points.len()));
        }
    }
    row.annotations
        .sort_by_key(|c| qualifier::object_offset_ms(&c.qualifier).unwrap_or(0));
    let is_append = |cell: usize| CellKind::of(&cells.cells[cell].qualifier) == CellKind::Append;
    // The common case: one data column (compacted or compressed) whose
    // points are already sorted and unique; no merging needed.
    if spans.len() <= 1
        && !spans.first().is_some_and(|&(cell, _)| is_append(cell))
        && sorted_unique(&points)
    {
        row.points = points;
        return Ok(row);
    }
    // Each point's cell and position in it: later writes win among
    // duplicates, and within one append column the later pair always wins.
    let mut seq: Vec<(usize, usize)> = Vec::with_capacity(points.len());
    let mut start = 0;
    for &(cell, end) in &spans {
        seq.extend((0..end - start).map(|pos| (cell, pos)));
        start = end;
    }
    let mut order: Vec<usize> = (0..points.len()).collect();
    order.sort_by_key(|&j| (points[j].offset_ms, seq[j]));
    let mut last_j = usize::MAX;
    for j in order {
        let p = points[j];
        match row.points.last_mut() {
            Some(last) if last.offset_ms == p.offset_ms => {
                row.duplicates += 1;
                if last.value == p.value && last.flags == p.flags {
                    last_j = j;
                    continue;
                }
                let same_append = is_append(seq[j].0) && seq[last_j].0 == seq[j].0;
                let policy = if same_append {
                    DuplicatePolicy::LastWriteWins
                } else {
                    policy
                };
                last_j = j;
                match policy {
                    DuplicatePolicy::LastWriteWins => *last = p,
                    DuplicatePolicy::Strict => {
                        return Err(ColumnError::Duplicate(format!(
                            "Duplicate timestamp for key={}, ms_offset={}, older={}, newer={}; set tsd.storage.fix_duplicates=true to fix automatically or run Fsck",
                            java_byte_array(row_key),
                            p.offset_ms,
                            java_byte_array(&last.value_bytes()),
                            java_byte_array(&p.value_bytes())
                        )));
                    }
                }
            }
            _ => {
                last_j = j;
                row.points.push(p)
            }
        }
    }
    Ok(row)
}

/// How a row's data points are written when it is compacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RowEncoding {
    /// rtsdb's compressed column (docs/format/compressed-column.md), or
    /// OpenTSDB's compacted column when that is smaller (tiny rows).
    #[default]
    Compressed,
    /// Always OpenTSDB's compacted column.
    Classic,
}

/// The single cell holding `points` (sorted, one per timestamp).
pub fn encode_points(points: &[StoredPoint], encoding: RowEncoding) -> Cell {
    let (q, v) = column::encode_compacted(points);
    if encoding == RowEncoding::Compressed {
        let c = compressed::encode(points);
        if c.len() + compressed::COMPRESSED_QUALIFIER.len() < q.len() + v.len() {
            return Cell::new(compressed::COMPRESSED_QUALIFIER.to_vec(), c);
        }
    }
    Cell::new(q, v)
}

/// Rewrites a row's data columns as one column, keeping annotations and
/// other objects (OpenTSDB's TSD compaction).
pub fn compact(decoded: &DecodedRow, encoding: RowEncoding) -> RowCells {
    let mut cells = RowCells::default();
    if !decoded.points.is_empty() {
        cells.cells.push(encode_points(&decoded.points, encoding));
    }
    cells.cells.extend(decoded.annotations.iter().cloned());
    cells.cells.extend(decoded.other.iter().cloned());
    cells
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::point::{Timestamp, Value};
    use proptest::prelude::*;

    const BASE: u32 = 1356998400;

    fn point_cell(ts: Timestamp, v: Value) -> Cell {
        let (p, enc) = StoredPoint::new(ts, BASE, v).unwrap();
        Cell::new(p.qualifier(), enc.as_bytes().to_vec())
    }

    #[test]
    fn odd_qualifiers_read_by_their_cell_kind() {
        let annotation = Cell::new(vec![0x01, 0x00, 0x7B], b"{}".to_vec());
        // A 7-byte qualifier is no OpenTSDB object, whatever its prefix:
        // kept untouched, not read as an annotation or an append column.
        let odd7 = Cell::new(vec![0x01, 0, 0, 0, 0, 0, 0], b"{}".to_vec());
        let append7 = Cell::new(vec![0x05, 0, 0, 0, 0, 0, 0], vec![0x00, 0x10, 0x2A]);
        let row = RowCells {
            cells: vec![annotation.clone(), odd7.clone(), append7.clone()],
        };
        let d = decode_row(b"k", &row, DuplicatePolicy::LastWriteWins).unwrap();
        assert_eq!(d.annotations, vec![annotation]);
        assert_eq!(d.other, vec![odd7, append7]);
        assert!(d.points.is_empty());
        // Shorter than 2 bytes is an error, whatever the byte.
        for q in [vec![], vec![0x01], vec![0x05]] {
            let row = RowCells {
                cells: vec![Cell::new(q, vec![0x2A])],
            };
            assert!(matches!(
                decode_row(b"k", &row, DuplicatePolicy::LastWriteWins),
                Err(ColumnError::UnknownQualifier(_))
            ));
        }
    }

    #[test]
    fn duplicates_last_write_wins_or_strict() {
        let mut row = RowCells::default();
        row.put(point_cell(Timestamp::Seconds(BASE + 1), Value::Int(1)));
        row.put(point_cell(Timestamp::Seconds(BASE + 1), Value::Float(1.5)));
        row.put(point_cell(Timestamp::Seconds(BASE + 2), Value::Int(2)));
        let lww = decode_row(b"k", &row, DuplicatePolicy::LastWriteWins).unwrap();
        assert_eq!(lww.points.len(), 2);
        assert_eq!(lww.points[0].value, Value::Float(1.5));
        let err = decode_row(&[0, 0, 1], &row, DuplicatePolicy::Strict).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("Duplicate timestamp for key=[0, 0, 1], ms_offset=1000")
        );
        // Seconds and milliseconds writes of the same instant are duplicates too.
        let mut row = RowCells::default();
        row.put(point_cell(Timestamp::Seconds(BASE + 1), Value::Int(1)));
        row.put(point_cell(
            Timestamp::Millis(BASE as u64 * 1000 + 1000),
            Value::Int(9),
        ));
        let lww = decode_row(b"k", &row, DuplicatePolicy::LastWriteWins).unwrap();
        assert_eq!(lww.points.len(), 1);
        assert_eq!(lww.points[0].value, Value::Int(9));
        // Identical duplicates are always collapsed.
        let mut row = RowCells::default();
        row.put(point_cell(Timestamp::Seconds(BASE + 1), Value::Int(1)));
        let (q, v) = column::encode_compacted(&[
            StoredPoint::new(Timestamp::Seconds(BASE + 1), BASE, Value::Int(1))
                .unwrap()
                .0,
            StoredPoint::new(Timestamp::Seconds(BASE + 5), BASE, Value::Int(5))
                .unwrap()
                .0,
        ]);
        row.put(Cell::new(q, v));
        let strict = decode_row(b"k", &row, DuplicatePolicy::Strict).unwrap();
        assert_eq!(strict.points.len(), 2);
        assert_eq!(strict.duplicates, 1);
    }

    #[test]
    fn within_one_append_column_the_later_pair_wins_even_when_strict() {
        let p = |v| {
            StoredPoint::new(Timestamp::Seconds(BASE + 1), BASE, Value::Int(v))
                .unwrap()
                .0
        };
        let (q, v) = column::encode_append_column(&[p(1), p(2)]);
        let row = RowCells {
            cells: vec![Cell::new(q, v)],
        };
        let d = decode_row(b"k", &row, DuplicatePolicy::Strict).unwrap();
        assert_eq!(d.points, vec![p(2)]);
    }

    #[test]
    fn annotations_and_unknown_objects_are_kept_apart() {
        let mut row = RowCells::default();
        row.put(Cell::new(vec![1, 0, 5], br#"{"startTime":1}"#.to_vec()));
        row.put(Cell::new(vec![0x42, 0, 5], b"x".to_vec()));
        row.put(point_cell(Timestamp::Seconds(BASE + 3), Value::Int(7)));
        let d = decode_row(b"k", &row, DuplicatePolicy::Strict).unwrap();
        assert_eq!(d.points.len(), 1);
        assert_eq!(d.annotations.len(), 1);
        assert_eq!(d.other.len(), 1);
        let compacted = compact(&d, RowEncoding::Classic);
        assert_eq!(compacted.cells.len(), 3);
    }

    #[test]
    fn corrupt_row_values_are_errors() {
        assert_eq!(RowCells::decode(&[]), Err(RowError::Empty));
        assert_eq!(RowCells::decode(&[9]), Err(RowError::UnknownVersion(9)));
        assert!(RowCells::decode(&[1, 5, 0]).is_err());
        assert!(
            RowCells::decode(&[
                1, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01
            ])
            .is_err()
        );
    }

    proptest! {
        #[test]
        fn row_value_round_trip(cells in proptest::collection::vec((proptest::collection::vec(any::<u8>(), 0..300), proptest::collection::vec(any::<u8>(), 0..300)), 0..10)) {
            let row = RowCells { cells: cells.into_iter().map(|(q, v)| Cell::new(q, v)).collect() };
            prop_assert_eq!(RowCells::decode(&row.encode()).unwrap(), row);
        }

        /// A new row of sorted, unique points compacts to the same bytes
        /// whether they go through an append column and a decoding (the
        /// merge of late points) or straight in (`Store`'s new-row path).
        #[test]
        fn new_sorted_points_compact_as_through_an_append_column(
            raw in proptest::collection::btree_map(0u32..3_600_000, (any::<bool>(), any::<i64>(), any::<f64>(), 0u8..3), 0..200),
            classic in any::<bool>(),
        ) {
            let encoding = if classic { RowEncoding::Classic } else { RowEncoding::Compressed };
            let mut points = Vec::new();
            let mut last_offset = None;
            for (ms, (in_seconds, i, f, kind)) in raw {
                let ts = if in_seconds {
                    Timestamp::Seconds(BASE + ms / 1000)
                } else {
                    Timestamp::Millis(BASE as u64 * 1000 + ms as u64)
                };
                let v = match kind {
                    0 => Value::Int(i),
                    1 => Value::Float(f),
                    _ => Value::Float(f as f32 as f64),
                };
                let Ok((p, _)) = StoredPoint::new(ts, BASE, v) else { continue };
                // Seconds collapse several millisecond offsets into one.
                if last_offset.is_some_and(|o| o >= p.offset_ms) {
                    continue;
                }
                last_offset = Some(p.offset_ms);
                points.push(p);
            }
            let (q, v) = crate::codec::column::encode_append_column(&points);
            let through = RowCells { cells: vec![Cell::new(q, v)] };
            let through = compact(&decode_row(b"k", &through, DuplicatePolicy::LastWriteWins).unwrap(), encoding);
            let straight = compact(&DecodedRow { points, ..Default::default() }, encoding);
            prop_assert_eq!(straight.encode(), through.encode());
        }

        #[test]
        fn row_decode_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(cells) = RowCells::decode(&buf) {
                let _ = decode_row(b"k", &cells, DuplicatePolicy::Strict);
            }
        }
    }
}
