//! Histogram points in the data table (OpenTSDB 2.4): one `0x06`-prefixed
//! cell per point in the series' hourly row, beside its data columns
//! (docs/format/histogram.md). Writes are read-modify-writes of the row
//! under its lock ([`Store::update_row`]), like annotations, so they never
//! lose cells the flusher writes meanwhile; the flusher's row compaction
//! carries histogram cells through untouched.

use crate::codec::column::ColumnError;
use crate::codec::qualifier::{CellKind, HISTOGRAM_PREFIX, object_offset_ms, object_qualifier};
use crate::codec::row::Cell;
use crate::model::Tsuid;
use crate::model::point::Timestamp;
use crate::model::row_span::row_base_clamped;
use crate::storage::Durability;

use super::{Result, Store};

/// One stored histogram point: milliseconds and the cell value (codec id
/// then the codec's bytes).
pub type StoredHistogram = (u64, Vec<u8>);

/// What a histogram query reads from the rows of its series.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistogramRead {
    /// Per series asked for, in that order: its histograms in time order.
    pub series: Vec<Vec<StoredHistogram>>,
    /// (series index, stored JSON) of every annotation cell in the rows
    /// read, whatever its time: the caller filters.
    pub annotations: Vec<(usize, Vec<u8>)>,
}

impl Store {
    /// Writes histogram cells of one series (a cell already at the same
    /// qualifier is replaced, as HBase would).
    pub fn put_histograms(
        &self,
        tsuid: &Tsuid,
        cells: &[(Timestamp, Vec<u8>)],
        durability: Durability,
    ) -> Result<()> {
        let mut by_hour: std::collections::BTreeMap<u32, Vec<Cell>> = Default::default();
        for (ts, value) in cells {
            let base = ts.base_time()?;
            let q = object_qualifier(HISTOGRAM_PREFIX, *ts, base).map_err(ColumnError::from)?;
            by_hour
                .entry(base)
                .or_default()
                .push(Cell::new(q, value.clone()));
        }
        for (base, new_cells) in by_hour {
            let key = self.layout().row_key(tsuid, base);
            self.update_row(&key, durability, |row| {
                for c in new_cells {
                    row.put(c);
                }
                Ok(true)
            })?;
        }
        Ok(())
    }

    /// The histogram points of `tsuid` in `[start_ms, end_ms]`, sorted by
    /// time (a second and a millisecond cell of the same instant are both
    /// kept, the second's first, as their qualifiers sort), and the
    /// annotation cells of the rows read.
    pub fn histograms_in(
        &self,
        tsuid: &Tsuid,
        start_ms: u64,
        end_ms: u64,
    ) -> Result<(Vec<StoredHistogram>, Vec<Vec<u8>>)> {
        let mut out = Vec::new();
        let mut notes = Vec::new();
        let first = row_base_clamped(start_ms / 1000);
        let last = row_base_clamped(end_ms / 1000);
        let mut base = first;
        loop {
            let key = self.layout().row_key(tsuid, base);
            if let Some(row) = self.get_row(&key)? {
                notes.extend(
                    row.cells
                        .iter()
                        .filter(|c| CellKind::of(&c.qualifier) == CellKind::Annotation)
                        .map(|c| c.value.clone()),
                );
                let mut hour: Vec<StoredHistogram> = row
                    .cells
                    .iter()
                    .filter(|c| CellKind::of(&c.qualifier) == CellKind::Histogram)
                    .filter_map(|c| {
                        let ms = base as u64 * 1000 + object_offset_ms(&c.qualifier)? as u64;
                        (start_ms..=end_ms)
                            .contains(&ms)
                            .then(|| (ms, c.value.clone()))
                    })
                    .collect();
                hour.sort_by_key(|h| h.0);
                out.extend(hour);
            }
            match base.checked_add(crate::model::row_span::ROW_SPAN_SECS) {
                Some(next) if next <= last => base = next,
                _ => break,
            }
        }
        Ok((out, notes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::row::DuplicatePolicy;
    use crate::codec::row_key::KeyLayout;
    use crate::model::{Uid, UidWidth};

    #[test]
    fn cells_beside_points_and_back() {
        let store = Store::in_memory(KeyLayout::default(), DuplicatePolicy::LastWriteWins);
        let u = |i| Uid::new(i, UidWidth::DEFAULT).unwrap();
        let tsuid = Tsuid::new(u(1), vec![(u(1), u(1))]).unwrap();
        store
            .put_points(
                &tsuid,
                &[(Timestamp::Seconds(1356998400), crate::model::Value::Int(1))],
                Durability::Process,
            )
            .unwrap();
        store
            .put_histograms(
                &tsuid,
                &[
                    (Timestamp::Seconds(1356998400), vec![42, 0, 0, 0, 0]),
                    (Timestamp::Seconds(1356998460), vec![42, 0, 1, 0, 0]),
                    (Timestamp::Millis(1357002000500), vec![42, 9]),
                ],
                Durability::Process,
            )
            .unwrap();
        let key = store.layout().row_key(&tsuid, 1356998400);
        let row = store.get_row(&key).unwrap().unwrap();
        let quals: Vec<Vec<u8>> = row.cells.iter().map(|c| c.qualifier.clone()).collect();
        assert!(quals.contains(&vec![6, 0, 0]));
        assert!(quals.contains(&vec![6, 0, 0x3C]));
        // The data point is still read.
        assert_eq!(store.decode(&key, &row).unwrap().points.len(), 1);
        let (h, notes) = store
            .histograms_in(&tsuid, 1356998400000, 1357002000500)
            .unwrap();
        assert!(notes.is_empty());
        assert_eq!(
            h,
            vec![
                (1356998400000, vec![42, 0, 0, 0, 0]),
                (1356998460000, vec![42, 0, 1, 0, 0]),
                (1357002000500, vec![42, 9]),
            ]
        );
        let key2 = store.layout().row_key(&tsuid, 1357002000);
        let row2 = store.get_row(&key2).unwrap().unwrap();
        assert_eq!(row2.cells[0].qualifier, vec![6, 0, 0, 1, 0xF4]);
        assert_eq!(
            store
                .histograms_in(&tsuid, 1356998401000, 1356998460000)
                .unwrap()
                .0
                .len(),
            1
        );
    }
}
