//! Annotations in the data table: one `0x01`-prefixed cell in the hourly
//! row of the annotation's start time, the series' row or (global notes)
//! the all-zero-metric row (docs/format/annotation.md). Every write is a
//! read-modify-write of the row under its lock ([`Store::update_row`]),
//! so it never loses cells written meanwhile by the flusher or another
//! annotation write.

use crate::codec::column::ColumnError;
use crate::codec::qualifier::{ANNOTATION_PREFIX, object_offset_ms, object_qualifier};
use crate::codec::row::{Cell, RowCells};
use crate::model::TsuidBytes;
use crate::model::annotation::{Annotation, Changes};
use crate::model::point::Timestamp;
use crate::model::row_span::row_base_clamped;
use crate::storage::{Durability, ScanRange, Table, prefix_end};

use super::{Result, Store, StoreError};

/// Base hour of a range end in ms; past 2106, the last row.
fn base_of_ms(ms: u64) -> u32 {
    row_base_clamped(ms / 1000)
}

fn is_annotation(q: &[u8]) -> bool {
    q.len() % 2 == 1 && q.first() == Some(&ANNOTATION_PREFIX)
}

impl Store {
    /// Row key and qualifier of the annotation of `tsuid` (global: `None`)
    /// starting at `start`.
    pub fn annotation_cell(
        &self,
        tsuid: Option<&TsuidBytes>,
        start: Timestamp,
    ) -> Result<(Vec<u8>, Vec<u8>)> {
        let base = start.base_time()?;
        let key = match tsuid {
            Some(t) => self.layout().row_key_of_bytes(t.as_bytes(), base),
            None => self.layout().global_annotation_row(base),
        };
        let q = object_qualifier(ANNOTATION_PREFIX, start, base).map_err(ColumnError::from)?;
        Ok((key, q))
    }

    fn parse_note(key: &[u8], value: &[u8]) -> Result<Annotation> {
        Annotation::from_storage(value).map_err(|e| StoreError::BadAnnotation {
            key: crate::model::uid::hex_upper(key),
            message: e.0,
        })
    }

    /// The stored annotation, if any.
    pub fn get_annotation(
        &self,
        tsuid: Option<&TsuidBytes>,
        start: Timestamp,
    ) -> Result<Option<Annotation>> {
        let (key, q) = self.annotation_cell(tsuid, start)?;
        let Some(row) = self.get_row(&key)? else {
            return Ok(None);
        };
        match row.cells.iter().find(|c| c.qualifier == q) {
            Some(c) => Ok(Some(Self::parse_note(&key, &c.value)?)),
            None => Ok(None),
        }
    }

    /// `Annotation.syncToStorage`: merges (or, with `overwrite`, replaces)
    /// `note` into what is stored and writes it, atomically for the row.
    /// Returns the annotation as now stored.
    pub fn sync_annotation(
        &self,
        tsuid: Option<&TsuidBytes>,
        note: &Annotation,
        changes: Changes,
        overwrite: bool,
        durability: Durability,
    ) -> Result<Annotation> {
        let start =
            Timestamp::from_raw(note.start_time).map_err(|e| StoreError::BadAnnotation {
                key: String::new(),
                message: e.to_string(),
            })?;
        let (key, q) = self.annotation_cell(tsuid, start)?;
        let mut result = None;
        self.update_row(&key, durability, |row: &mut RowCells| {
            let stored = match row.cells.iter().find(|c| c.qualifier == q) {
                Some(c) => Some(Self::parse_note(&key, &c.value)?),
                None => None,
            };
            let merged = note.merged(changes, stored.as_ref(), overwrite);
            row.put(Cell::new(q.clone(), merged.to_storage_json().into_bytes()));
            result = Some(merged);
            Ok(true)
        })?;
        Ok(result.expect("update_row ran the closure"))
    }

    /// Deletes one annotation; false if there was none.
    pub fn delete_annotation(
        &self,
        tsuid: Option<&TsuidBytes>,
        start: Timestamp,
        durability: Durability,
    ) -> Result<bool> {
        let (key, q) = self.annotation_cell(tsuid, start)?;
        let mut removed = false;
        self.update_row(&key, durability, |row| {
            removed = row.remove(&q);
            Ok(removed)
        })?;
        Ok(removed)
    }

    /// Keys of the rows that may hold annotations of `tsuid` (global:
    /// `None`) starting in `[start_ms, end_ms]`.
    fn annotation_rows(
        &self,
        tsuid: Option<&TsuidBytes>,
        start_ms: u64,
        end_ms: u64,
    ) -> Result<Vec<(Vec<u8>, RowCells)>> {
        let (start_base, end_base) = (base_of_ms(start_ms), base_of_ms(end_ms));
        let mut rows = Vec::new();
        match tsuid {
            Some(t) => {
                // The series' rows are the keys built from its bytes for
                // each hour (one salt bucket): a range of them, filtered
                // on the tag pairs, which need not resolve or be valid UIDs.
                let layout = self.layout();
                let start = layout.row_key_of_bytes(t.as_bytes(), start_base);
                let p = layout.prefix_len();
                let stop = prefix_end(&layout.row_key_of_bytes(t.as_bytes(), end_base)[..p]);
                let tags = &t.as_bytes()[layout.widths.metric.bytes()..];
                for item in self.kv().scan(Table::Data, &ScanRange::new(start, stop)) {
                    let (key, value) = item?;
                    if key.len() == p + tags.len() && &key[p..] == tags {
                        let cells = super::decode_cells(&key, &value)?;
                        rows.push((key, cells));
                    }
                }
            }
            None => {
                let start = self.layout().global_annotation_row(start_base);
                let stop = prefix_end(&self.layout().global_annotation_row(end_base));
                for item in self.kv().scan(Table::Data, &ScanRange::new(start, stop)) {
                    let (key, value) = item?;
                    let cells = super::decode_cells(&key, &value)?;
                    rows.push((key, cells));
                }
            }
        }
        Ok(rows)
    }

    /// Start time in ms of an annotation cell of the row `key`.
    fn note_start_ms(&self, key: &[u8], q: &[u8]) -> Option<u64> {
        let p = self.layout().prefix_len();
        let ts = key.get(p - 4..p)?;
        let base = u32::from_be_bytes([ts[0], ts[1], ts[2], ts[3]]) as u64;
        Some(base * 1000 + object_offset_ms(q)? as u64)
    }

    /// Annotations of `tsuid` (global: `None`) whose start time lies in
    /// `[start_ms, end_ms]`, sorted by start time.
    pub fn annotations_in(
        &self,
        tsuid: Option<&TsuidBytes>,
        start_ms: u64,
        end_ms: u64,
    ) -> Result<Vec<Annotation>> {
        let mut out = Vec::new();
        for (key, cells) in self.annotation_rows(tsuid, start_ms, end_ms)? {
            for c in cells.cells.iter().filter(|c| is_annotation(&c.qualifier)) {
                if self
                    .note_start_ms(&key, &c.qualifier)
                    .is_some_and(|t| t >= start_ms && t <= end_ms)
                {
                    out.push(Self::parse_note(&key, &c.value)?);
                }
            }
        }
        out.sort_by_key(|a| a.start_time);
        Ok(out)
    }

    /// Every annotation stored, global and of series, in row order (one
    /// pass over the data rows: what `/api/search/annotation` searches).
    pub fn all_annotations(&self) -> Result<Vec<Annotation>> {
        let mut out = Vec::new();
        for item in self.scan_all_rows() {
            let (key, value) = item?;
            let cells = super::decode_cells(&key, &value)?;
            for c in cells.cells.iter().filter(|c| is_annotation(&c.qualifier)) {
                out.push(Self::parse_note(&key, &c.value)?);
            }
        }
        Ok(out)
    }

    /// `Annotation.deleteRange`: deletes the annotations of `tsuid`
    /// (global: `None`) starting in `[start_ms, end_ms]`; returns how many.
    pub fn delete_annotations_in(
        &self,
        tsuid: Option<&TsuidBytes>,
        start_ms: u64,
        end_ms: u64,
        durability: Durability,
    ) -> Result<u64> {
        let mut total = 0;
        for (key, _) in self.annotation_rows(tsuid, start_ms, end_ms)? {
            self.update_row(&key, durability, |row| {
                let before = row.cells.len();
                row.cells.retain(|c| {
                    !(is_annotation(&c.qualifier)
                        && self
                            .note_start_ms(&key, &c.qualifier)
                            .is_some_and(|t| t >= start_ms && t <= end_ms))
                });
                let n = (before - row.cells.len()) as u64;
                total += n;
                Ok(n > 0)
            })?;
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::row::DuplicatePolicy;
    use crate::codec::row_key::{KeyLayout, Salt};
    use crate::model::{Uid, UidWidth, UidWidths, Value};
    use std::sync::Arc;

    fn tsuid() -> crate::model::Tsuid {
        let u = |i| Uid::new(i, UidWidth::DEFAULT).unwrap();
        crate::model::Tsuid::new(u(1), vec![(u(1), u(1))]).unwrap()
    }

    /// The annotations' name of [`tsuid`].
    fn bytes(t: &crate::model::Tsuid) -> TsuidBytes {
        TsuidBytes::of(t, &UidWidths::default())
    }

    fn note(start: i64, desc: &str) -> (Annotation, Changes) {
        Annotation::parse(
            format!(
                r#"{{"tsuid":"000001000001000001","startTime":{start},"description":"{desc}"}}"#
            )
            .as_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn annotations_share_rows_with_points_and_survive_flushes() {
        let store = Store::in_memory(KeyLayout::default(), DuplicatePolicy::LastWriteWins);
        let t = tsuid();
        let (a, c) = note(1292148123, "Network Outage");
        store
            .sync_annotation(Some(&bytes(&t)), &a, c, false, Durability::Process)
            .unwrap();
        let key = store.layout().row_key(&t, 1292148000);
        // A flush of points into the same row keeps the annotation cell.
        store
            .put_points(
                &t,
                &[(Timestamp::Seconds(1292148001), Value::Int(1))],
                Durability::Process,
            )
            .unwrap();
        let row = store.get_row(&key).unwrap().unwrap();
        assert_eq!(row.cells.len(), 2);
        let d = store.decode(&key, &row).unwrap();
        assert_eq!(d.points.len(), 1);
        assert_eq!(d.annotations[0].qualifier, vec![1, 0, 0x7B]);
        let got = store
            .get_annotation(Some(&bytes(&t)), Timestamp::Seconds(1292148123))
            .unwrap()
            .unwrap();
        assert_eq!(got.description, "Network Outage");
        // Global notes live in the zero-metric row, even in salted stores.
        let salted = Store::in_memory(
            KeyLayout {
                widths: UidWidths::default(),
                salt: Salt {
                    width: 1,
                    buckets: 4,
                },
            },
            DuplicatePolicy::LastWriteWins,
        );
        let (mut g, c) = note(1292148123, "global");
        g.tsuid.clear();
        salted
            .sync_annotation(None, &g, c, false, Durability::Process)
            .unwrap();
        assert!(
            salted
                .get_row(&[0, 0, 0, 0, 0x4D, 0x04, 0x9D, 0x20])
                .unwrap()
                .is_some()
        );
        assert_eq!(
            salted.annotations_in(None, 0, u64::MAX / 2).unwrap().len(),
            1
        );
        assert_eq!(
            salted
                .delete_annotations_in(None, 0, u64::MAX / 2, Durability::Process)
                .unwrap(),
            1
        );
        assert!(
            salted
                .annotations_in(None, 0, u64::MAX / 2)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn concurrent_writes_to_one_row_keep_every_cell() {
        let store = Arc::new(Store::in_memory(
            KeyLayout::default(),
            DuplicatePolicy::LastWriteWins,
        ));
        let t = tsuid();
        let threads: Vec<_> = (0..4)
            .map(|k| {
                let (store, t) = (store.clone(), t.clone());
                std::thread::spawn(move || {
                    for i in 0..50 {
                        let (a, c) = note(1292148000 + k * 100 + i, "x");
                        store
                            .sync_annotation(Some(&bytes(&t)), &a, c, false, Durability::Process)
                            .unwrap();
                        store
                            .put_points(
                                &t,
                                &[(
                                    Timestamp::Seconds((1292148000 + k * 100 + i) as u32),
                                    Value::Int(i),
                                )],
                                Durability::Process,
                            )
                            .unwrap();
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        let notes = store
            .annotations_in(Some(&bytes(&t)), 0, u64::MAX / 2)
            .unwrap();
        assert_eq!(notes.len(), 200);
        let key = store.layout().row_key(&t, 1292148000);
        let d = store
            .decode(&key, &store.get_row(&key).unwrap().unwrap())
            .unwrap();
        assert_eq!(d.points.len(), 200);
    }
}
