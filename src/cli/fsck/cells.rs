//! `tsdb fsck`'s check of a data row's cells, as OpenTSDB's `Fsck` checks
//! them: qualifiers it does not know, values that do not parse or are
//! badly encoded, compacted, append and compressed columns that do not
//! decode, points written twice, integers wider than they need to be;
//! and, when asked, the row rewritten as one data column without them.

use std::collections::BTreeMap;
use std::io::Write;

use super::FsckArgs;
use super::report::FsckReport;
use crate::codec::column;
use crate::codec::compressed;
use crate::codec::qualifier::{self, CellKind, FLAG_FLOAT, LENGTH_MASK, StoredPoint};
use crate::codec::row::{self, Cell, RowCells};
use crate::codec::row_key::RowKey;
use crate::model::Value;
use crate::model::uid::{hex_upper, java_byte_array};
use crate::storage::KeyRead;
use crate::store::Store;

/// Checks the cells of the row at `key` (`parsed` is None for the row of
/// global annotations) and rewrites the row if a repair was asked for
/// and something needs one.
pub(super) fn check_cells(
    store: &Store,
    key: &[u8],
    read: &KeyRead,
    parsed: Option<&RowKey>,
    a: &FsckArgs,
    r: &mut FsckReport,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let Some(cells) = decode_row_value(store, key, read, a, r, out)? else {
        return Ok(());
    };
    let mut check = CellCheck {
        key,
        a,
        r,
        out,
        contents: RowContents::default(),
    };
    for (order, cell) in cells.cells.iter().enumerate() {
        check.cell(order, cell)?;
    }
    let points = check.resolve_points(store, parsed)?;
    check.count_compactable();
    if !check.contents.changed {
        return Ok(());
    }
    rewrite_row(store, key, points, check.contents.kept)
}

/// The cells of the row's value, or None once a value that does not
/// decode was reported (and the row deleted, when asked).
fn decode_row_value(
    store: &Store,
    key: &[u8],
    read: &KeyRead,
    a: &FsckArgs,
    r: &mut FsckReport,
    out: &mut dyn Write,
) -> anyhow::Result<Option<RowCells>> {
    let raw = read.value.as_deref().unwrap_or_default();
    match RowCells::decode(raw) {
        Ok(c) => Ok(Some(c)),
        Err(e) => {
            r.bad_values += 1;
            writeln!(
                out,
                "Unreadable row value for {}: {e}",
                java_byte_array(key)
            )?;
            if a.wants(a.delete_bad_rows || a.delete_bad_values) {
                store.replace_row(key, &RowCells::default())?;
                r.bad_values_deleted += 1;
            }
            Ok(None)
        }
    }
}

/// A data point with where it came from, for duplicate resolution.
struct Found {
    point: StoredPoint,
    /// Position of its cell in write order: higher is newer.
    order: usize,
}

/// What a row's cells hold once each was checked.
#[derive(Default)]
struct RowContents {
    /// The points of its data columns.
    found: Vec<Found>,
    /// The cells that go back into the row as they are.
    kept: Vec<Cell>,
    /// Data columns that held points: more than one makes the row
    /// compactable.
    data_columns: usize,
    /// Whether a repair changed what the row must hold.
    changed: bool,
}

/// The check of one row's cells under way: where its findings go and
/// what it found so far.
struct CellCheck<'a> {
    key: &'a [u8],
    a: &'a FsckArgs,
    r: &'a mut FsckReport,
    out: &'a mut dyn Write,
    contents: RowContents,
}

/// The points a row keeps, one per timestamp, and the duplicates left
/// as they were (differing values not asked to be resolved).
struct ResolvedPoints {
    points: Vec<StoredPoint>,
    unresolved_duplicates: Vec<StoredPoint>,
}

impl CellCheck<'_> {
    /// Checks one cell, the `order`-th in write order.
    fn cell(&mut self, order: usize, cell: &Cell) -> anyhow::Result<()> {
        self.r.kvs_processed += 1;
        match CellKind::of(&cell.qualifier) {
            CellKind::TooShort => {
                self.unknown(cell, "Invalid qualifier, must be on 2 bytes or more.")
            }
            CellKind::Unknown => self.unknown(
                cell,
                "Unknown qualifier, must be 2, 3, 5 or an even number of bytes.",
            ),
            CellKind::Annotation => {
                self.r.annotations += 1;
                self.contents.kept.push(cell.clone());
                Ok(())
            }
            CellKind::Histogram => {
                self.contents.kept.push(cell.clone());
                Ok(())
            }
            CellKind::Object => self.future_object(cell),
            CellKind::Append => {
                let mut pts = Vec::new();
                let decoded = column::decode_append(&cell.value, &mut pts).map(|()| pts);
                self.block(order, cell, decoded.map_err(|e| e.to_string()))
            }
            CellKind::Compressed => {
                let mut pts = Vec::new();
                let decoded = compressed::decode(&cell.value, &mut pts).map(|()| pts);
                self.block(order, cell, decoded.map_err(|e| e.to_string()))
            }
            CellKind::Single => self.single(order, cell),
            CellKind::Compacted => self.compacted(order, cell),
        }
    }

    /// A cell no OpenTSDB writes: reported, and dropped when asked.
    fn unknown(&mut self, cell: &Cell, msg: &str) -> anyhow::Result<()> {
        self.r.unknown += 1;
        writeln!(
            self.out,
            "{msg}\n\t{} {}={}",
            java_byte_array(self.key),
            hex_upper(&cell.qualifier),
            hex_upper(&cell.value)
        )?;
        if self.a.wants(self.a.delete_unknown_columns) {
            self.r.unknown_fixed += 1;
            self.contents.changed = true;
        } else {
            self.contents.kept.push(cell.clone());
        }
        Ok(())
    }

    /// An object of a prefix this version does not know: reported, kept.
    fn future_object(&mut self, cell: &Cell) -> anyhow::Result<()> {
        self.r.future += 1;
        writeln!(
            self.out,
            "Possible future object: {} {}",
            java_byte_array(self.key),
            hex_upper(&cell.qualifier)
        )?;
        self.contents.kept.push(cell.clone());
        Ok(())
    }

    /// An append or compressed column, as decoded: a data column if it
    /// held points.
    fn block(
        &mut self,
        order: usize,
        cell: &Cell,
        decoded: Result<Vec<StoredPoint>, String>,
    ) -> anyhow::Result<()> {
        match decoded {
            Ok(pts) => {
                self.contents.data_columns += usize::from(!pts.is_empty());
                self.found(order, pts);
                Ok(())
            }
            Err(e) => {
                let line = format!("Corrupted column in row {}: {e}", hex_upper(self.key));
                self.bad_column(cell, &line)
            }
        }
    }

    /// A single point's cell: a value that does not parse is dropped when
    /// asked, one encoded wider than its column rewritten when fixing.
    fn single(&mut self, order: usize, cell: &Cell) -> anyhow::Result<()> {
        self.contents.data_columns += 1;
        match check_single(&cell.qualifier, &cell.value, self.r, self.out, self.key)? {
            SingleCheck::Ok(point) => self.contents.found.push(Found { point, order }),
            SingleCheck::Fixable(point) => {
                self.contents.found.push(Found { point, order });
                if self.a.fixing() {
                    self.r.value_encoding_fixed += 1;
                    self.contents.changed = true;
                }
            }
            SingleCheck::Bad => {
                if self.a.wants(self.a.delete_bad_values) {
                    self.r.bad_values_deleted += 1;
                    self.contents.changed = true;
                } else {
                    self.contents.kept.push(cell.clone());
                }
            }
        }
        Ok(())
    }

    /// A compacted column: its points, or reported if it does not decode.
    /// A last byte other than OpenTSDB's 0 or 1 is noted, not counted.
    fn compacted(&mut self, order: usize, cell: &Cell) -> anyhow::Result<()> {
        self.contents.data_columns += 1;
        let mut pts = Vec::new();
        match column::decode_compacted(&cell.qualifier, &cell.value, &mut pts) {
            Ok(()) => {
                if let Some(&last) = cell.value.last()
                    && last != 0
                    && last != 1
                {
                    writeln!(
                        self.out,
                        "Compacted column in row {} ends in {last:#04x}, not 0x00 or 0x01",
                        hex_upper(self.key)
                    )?;
                }
                self.found(order, pts);
                Ok(())
            }
            Err(e) => {
                let line = format!("Corrupted value in row {}: {e}", hex_upper(self.key));
                self.bad_column(cell, &line)
            }
        }
    }

    fn found(&mut self, order: usize, pts: Vec<StoredPoint>) {
        self.contents
            .found
            .extend(pts.into_iter().map(|point| Found { point, order }));
    }

    /// A column of several points that does not decode: reported as
    /// `line`, and dropped when asked.
    fn bad_column(&mut self, cell: &Cell, line: &str) -> anyhow::Result<()> {
        self.r.bad_compacted_columns += 1;
        writeln!(self.out, "{line}")?;
        if self.a.wants(self.a.delete_bad_compacts) {
            self.r.bad_compacted_columns_deleted += 1;
            self.contents.changed = true;
        } else {
            self.contents.kept.push(cell.clone());
        }
        Ok(())
    }

    /// One point per timestamp from what the cells held: duplicates
    /// reported and resolved (the oldest kept unless last write wins) when
    /// they agree or when asked, integers narrowed when fixing.
    fn resolve_points(
        &mut self,
        store: &Store,
        parsed: Option<&RowKey>,
    ) -> anyhow::Result<ResolvedPoints> {
        let mut by_ts: BTreeMap<u32, Vec<Found>> = BTreeMap::new();
        for f in std::mem::take(&mut self.contents.found) {
            by_ts.entry(f.point.offset_ms).or_default().push(f);
        }
        // OpenTSDB keeps the oldest value unless told last-write-wins
        // (flag, or tsd.storage.fix_duplicates, rtsdb's default).
        let newest =
            self.a.last_write_wins || store.duplicates() == row::DuplicatePolicy::LastWriteWins;
        let mut resolved = ResolvedPoints {
            points: Vec::with_capacity(by_ts.len()),
            unresolved_duplicates: Vec::new(),
        };
        for (offset, mut group) in by_ts {
            group.sort_by_key(|f| f.order);
            self.r.valid_datapoints += group.len() as u64;
            if group.len() > 1 && !self.duplicates(offset, &group, parsed)? {
                resolved
                    .unresolved_duplicates
                    .extend(group.iter().skip(1).map(|f| f.point));
            }
            let keep = if newest { group.last() } else { group.first() };
            let Some(f) = keep else {
                continue;
            };
            let mut p = f.point;
            self.narrow_integer(&mut p);
            resolved.points.push(p);
        }
        Ok(resolved)
    }

    /// Reports the points of `group` (more than one, in write order) at
    /// `offset`; whether they are resolved, which they are when they agree
    /// or when asked.
    fn duplicates(
        &mut self,
        offset: u32,
        group: &[Found],
        parsed: Option<&RowKey>,
    ) -> anyhow::Result<bool> {
        self.r.duplicates += 1;
        let base = parsed.map(|p| p.base_time as u64 * 1000).unwrap_or(0);
        writeln!(
            self.out,
            "More than one column had a value for the same timestamp: ({}) in row {}",
            base + offset as u64,
            java_byte_array(self.key)
        )?;
        let distinct = group
            .windows(2)
            .any(|w| w[0].point.value != w[1].point.value || w[0].point.flags != w[1].point.flags);
        if !distinct || self.a.wants(self.a.resolve_duplicates) {
            self.r.duplicates_fixed += 1;
            self.contents.changed = true;
            return Ok(true);
        }
        Ok(false)
    }

    /// VLE: an integer stored wider than it needs is counted, and
    /// narrowed when fixing.
    fn narrow_integer(&mut self, p: &mut StoredPoint) {
        if let Value::Int(_) = p.value {
            let canonical = qualifier::encode_value(p.value).flags;
            if canonical != p.flags {
                self.r.vle += 1;
                self.r.vle_bytes += ((p.flags & LENGTH_MASK) - (canonical & LENGTH_MASK)) as u64;
                if self.a.fixing() {
                    p.flags = canonical;
                    self.r.vle_fixed += 1;
                    self.contents.changed = true;
                }
            }
        }
    }

    /// A row of several data columns and nothing else to repair is
    /// compactable; compacted with --compact or when fixing.
    fn count_compactable(&mut self) {
        if self.contents.data_columns > 1 && !self.contents.changed {
            self.r.fixable_compacted_columns += 1;
            if self.a.compact || self.a.fixing() {
                self.contents.changed = true;
            }
        }
    }
}

/// Rewrites the row: one data column (unresolved duplicates kept as
/// single cells, untouched), then every non-data cell kept.
fn rewrite_row(
    store: &Store,
    key: &[u8],
    resolved: ResolvedPoints,
    kept: Vec<Cell>,
) -> anyhow::Result<()> {
    let mut new_row = RowCells::default();
    if !resolved.points.is_empty() {
        new_row
            .cells
            .push(row::encode_points(&resolved.points, store.encoding()));
    }
    for p in resolved.unresolved_duplicates {
        new_row
            .cells
            .push(Cell::new(p.qualifier(), p.value_bytes()));
    }
    new_row.cells.extend(kept);
    store.replace_row(key, &new_row)?;
    Ok(())
}

enum SingleCheck {
    Ok(StoredPoint),
    /// Readable after OpenTSDB's read-side fix; rewriting fixes it.
    Fixable(StoredPoint),
    Bad,
}

fn check_single(
    q: &[u8],
    value: &[u8],
    r: &mut FsckReport,
    out: &mut dyn Write,
    key: &[u8],
) -> anyhow::Result<SingleCheck> {
    let flags = q[q.len() - 1] & 0x0F;
    let declared = (flags & LENGTH_MASK) as usize + 1;
    if flags & FLAG_FLOAT != 0 && value.len() != 4 && value.len() != 8 {
        r.bad_values += 1;
        writeln!(
            out,
            "This floating point value must be encoded either on 4 or 8 bytes, but it's on {} bytes. Row {} qualifier {}",
            value.len(),
            java_byte_array(key),
            hex_upper(q)
        )?;
        return Ok(SingleCheck::Bad);
    }
    match column::decode_single(q, value) {
        Ok(p) => {
            if flags & FLAG_FLOAT != 0 && declared == 4 && value.len() == 8 {
                r.value_encoding += 1;
                writeln!(
                    out,
                    "Floating point value with 8 bytes in a 4-byte column: row {} qualifier {}",
                    java_byte_array(key),
                    hex_upper(q)
                )?;
                return Ok(SingleCheck::Fixable(p));
            }
            Ok(SingleCheck::Ok(p))
        }
        Err(e) => {
            r.bad_values += 1;
            writeln!(
                out,
                "Unparseable value in row {} qualifier {}: {e}",
                java_byte_array(key),
                hex_upper(q)
            )?;
            Ok(SingleCheck::Bad)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{BASE, Fixture, fixing, qualifier};
    use super::*;
    use crate::codec::row::decode_row;

    /// The row's points as reads see them: (offset s, value).
    fn points(f: &Fixture) -> Vec<(u32, Value)> {
        let row = f.row().unwrap();
        decode_row(&f.key, &row, row::DuplicatePolicy::Strict)
            .unwrap()
            .points
            .iter()
            .map(|p| (p.offset_ms / 1000, p.value))
            .collect()
    }

    #[test]
    fn a_second_value_for_a_timestamp_is_a_duplicate_resolved_when_asked() {
        let f = Fixture::new();
        f.add_cells(vec![Cell::new(qualifier(10, 0), vec![99])]);
        let (r, out) = f.check(&FsckArgs::default());
        assert_eq!(
            (r.duplicates, r.duplicates_fixed, r.valid_datapoints),
            (1, 0, 11)
        );
        assert_eq!(
            out,
            format!(
                "More than one column had a value for the same timestamp: ({}) in row {}\n",
                (BASE as u64 + 10) * 1000,
                java_byte_array(&f.key)
            )
        );
        // Differing values are kept apart by --fix alone.
        let (r, _) = f.check(&fixing(|_| {}));
        assert_eq!((r.duplicates, r.duplicates_fixed), (1, 0));
        let (r, _) = f.check(&fixing(|a| a.resolve_duplicates = true));
        assert_eq!((r.duplicates, r.duplicates_fixed), (1, 1));
        // Last write wins (the store's default): the later cell's value.
        let row = f.row().unwrap();
        assert_eq!(row.cells.len(), 1);
        assert_eq!(points(&f)[1], (BASE % 3600 + 10, Value::Int(99)));
        assert_eq!(f.check(&FsckArgs::default()).0.total_errors(), 0);
    }

    #[test]
    fn a_compacted_column_that_does_not_decode_is_deleted_when_asked() {
        let f = Fixture::new();
        let bad = Cell::new([qualifier(250, 0), qualifier(251, 0)].concat(), vec![1]);
        f.add_cells(vec![bad.clone()]);
        let (r, out) = f.check(&FsckArgs::default());
        assert_eq!(r.bad_compacted_columns, 1);
        assert!(
            out.starts_with(&format!("Corrupted value in row {}: ", hex_upper(&f.key))),
            "{out}"
        );
        let (r, _) = f.check(&fixing(|_| {}));
        assert_eq!(r.bad_compacted_columns_deleted, 0);
        assert!(f.row().unwrap().cells.contains(&bad));
        let (r, _) = f.check(&fixing(|a| a.delete_bad_compacts = true));
        assert_eq!(r.bad_compacted_columns_deleted, 1);
        assert!(!f.row().unwrap().cells.contains(&bad));
        assert_eq!(points(&f).len(), 10);
    }

    #[test]
    fn a_qualifier_opentsdb_does_not_know_is_reported_with_its_cell() {
        let f = Fixture::new();
        f.add_cells(vec![Cell::new(vec![0x01], vec![0xFF])]);
        let (r, out) = f.check(&FsckArgs::default());
        assert_eq!((r.unknown, r.kvs_processed), (1, 2));
        assert_eq!(
            out,
            format!(
                "Invalid qualifier, must be on 2 bytes or more.\n\t{} 01=FF\n",
                java_byte_array(&f.key)
            )
        );
        let (r, _) = f.check(&fixing(|a| a.delete_unknown_columns = true));
        assert_eq!(r.unknown_fixed, 1);
        assert_eq!(f.row().unwrap().cells.len(), 1);
    }

    #[test]
    fn an_integer_wider_than_it_needs_is_narrowed_when_fixing() {
        let f = Fixture::new();
        // 3 in 8 bytes, 5 s into the row.
        f.add_cells(vec![Cell::new(
            qualifier(5, 7),
            3i64.to_be_bytes().to_vec(),
        )]);
        let (r, out) = f.check(&FsckArgs::default());
        assert_eq!(out, "");
        assert_eq!((r.vle, r.vle_bytes, r.vle_fixed), (1, 7, 0));
        // Two data columns and nothing to repair: compactable.
        assert_eq!(r.fixable_compacted_columns, 1);
        let (r, _) = f.check(&fixing(|_| {}));
        assert_eq!(r.vle_fixed, 1);
        let row = f.row().unwrap();
        assert_eq!(row.cells.len(), 1);
        assert_eq!(points(&f)[1], (BASE % 3600 + 5, Value::Int(3)));
        let (r, _) = f.check(&FsckArgs::default());
        assert_eq!((r.vle, r.fixable_compacted_columns), (0, 0));
    }

    #[test]
    fn a_float_of_the_wrong_length_is_unparseable() {
        let f = Fixture::new();
        let q = qualifier(5, FLAG_FLOAT | 3);
        f.add_cells(vec![Cell::new(q.clone(), vec![0, 0])]);
        let (r, out) = f.check(&FsckArgs::default());
        assert_eq!(r.bad_values, 1);
        assert_eq!(
            out,
            format!(
                "This floating point value must be encoded either on 4 or 8 bytes, but it's on 2 bytes. Row {} qualifier {}\n",
                java_byte_array(&f.key),
                hex_upper(&q)
            )
        );
        let (r, _) = f.check(&fixing(|a| a.delete_bad_values = true));
        assert_eq!(r.bad_values_deleted, 1);
        assert_eq!(f.check(&FsckArgs::default()).0.total_errors(), 0);
    }

    #[test]
    fn a_row_value_that_does_not_decode_is_reported_and_deleted_when_asked() {
        let f = Fixture::new();
        let read = KeyRead {
            versions: Vec::new(),
            value: Some(vec![0xEE, 1, 2]),
        };
        let check = |a: &FsckArgs| {
            let (mut r, mut out) = (FsckReport::default(), Vec::new());
            check_cells(&f.store, &f.key, &read, None, a, &mut r, &mut out).unwrap();
            (r, String::from_utf8(out).unwrap())
        };
        let (r, out) = check(&FsckArgs::default());
        assert_eq!((r.bad_values, r.bad_values_deleted), (1, 0));
        assert!(
            out.starts_with(&format!(
                "Unreadable row value for {}: ",
                java_byte_array(&f.key)
            )),
            "{out}"
        );
        assert!(f.row().is_some());
        let (r, _) = check(&fixing(|a| a.delete_bad_values = true));
        assert_eq!(r.bad_values_deleted, 1);
        assert_eq!(f.row(), None);
    }
}
