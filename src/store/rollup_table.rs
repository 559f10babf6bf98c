//! The `tsdb-rollup` keyspace: every configured rollup and pre-aggregate
//! table, each entry one row (its value [`RowCells`] as in the data table,
//! docs/format/data-row.md, or computed rollups' columns,
//! [`crate::rollup::columns`]), its key the table's name (length-prefixed)
//! then OpenTSDB's row key. Format: docs/format/rollup.md.

use std::sync::Arc;

use crate::codec::row::{Cell, RowCells};
use crate::rollup::columns::{self, RollupRowLayout};
use crate::storage::{Durability, KvStore, ScanRange, StripedLocks, Table, WriteBatch};

use super::StoreError;

/// Stripes of the read-modify-write locks of rollup rows.
const LOCK_STRIPES: usize = 64;

/// The longest table name a key can carry (its length is one byte).
pub const MAX_TABLE_NAME: usize = 255;

/// `[len u8][name]`: the part of a key naming its table.
pub fn table_prefix(table: &str) -> Vec<u8> {
    let name = &table.as_bytes()[..table.len().min(MAX_TABLE_NAME)];
    let mut out = Vec::with_capacity(1 + name.len());
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out
}

/// The engine key of `row_key` in `table`.
pub fn entry_key(table: &str, row_key: &[u8]) -> Vec<u8> {
    let mut k = table_prefix(table);
    k.extend_from_slice(row_key);
    k
}

/// Splits an engine key into its table name and row key.
pub fn split_key(key: &[u8]) -> Option<(&str, &[u8])> {
    let len = *key.first()? as usize;
    let name = key.get(1..1 + len)?;
    Some((std::str::from_utf8(name).ok()?, &key[1 + len..]))
}

/// Rows of the rollup and pre-aggregate tables.
pub struct RollupTable {
    kv: Arc<dyn KvStore>,
    locks: StripedLocks,
}

impl RollupTable {
    pub(crate) fn new(kv: Arc<dyn KvStore>) -> RollupTable {
        RollupTable {
            kv,
            locks: StripedLocks::new(LOCK_STRIPES),
        }
    }

    /// The cells of one row.
    pub fn get_row(&self, table: &str, row_key: &[u8]) -> Result<Option<RowCells>, StoreError> {
        match self.kv.get(Table::Rollup, &entry_key(table, row_key))? {
            None => Ok(None),
            Some(v) => Ok(Some(decode_row(row_key, &v)?)),
        }
    }

    /// Writes cells into a row as HBase puts would: a cell with the same
    /// qualifier is replaced (and becomes the newest), others are kept.
    /// The row keeps its layout (a new row is laid out as OpenTSDB's).
    pub fn put_cells(
        &self,
        table: &str,
        row_key: &[u8],
        cells: Vec<Cell>,
        durability: Durability,
    ) -> Result<(), StoreError> {
        self.rewrite(table, row_key, |_| false, cells, durability, None)
    }

    /// Removes a row's cells for which `stale(qualifier)` holds, then
    /// writes `cells` as [`put_cells`](Self::put_cells) does, in one
    /// read-modify-write. A row left without cells is deleted. Computed
    /// rollups use it to replace an interval's cells whatever value
    /// flags the old ones had (a qualifier carries them), or to drop them
    /// when the interval no longer holds raw points. The row is written
    /// in `layout`.
    pub fn rewrite_cells(
        &self,
        table: &str,
        row_key: &[u8],
        stale: impl Fn(&[u8]) -> bool,
        cells: Vec<Cell>,
        durability: Durability,
        layout: RollupRowLayout,
    ) -> Result<(), StoreError> {
        self.rewrite(table, row_key, stale, cells, durability, Some(layout))
    }

    /// [`rewrite_cells`](Self::rewrite_cells) in `layout`, or (None) in
    /// the row's own.
    fn rewrite(
        &self,
        table: &str,
        row_key: &[u8],
        stale: impl Fn(&[u8]) -> bool,
        cells: Vec<Cell>,
        durability: Durability,
        layout: Option<RollupRowLayout>,
    ) -> Result<(), StoreError> {
        let key = entry_key(table, row_key);
        let _g = self.locks.lock(0, &key);
        let old = self.kv.get(Table::Rollup, &key)?;
        let mut row = match &old {
            None => RowCells::default(),
            Some(v) => decode_row(row_key, v)?,
        };
        let layout = layout.unwrap_or_else(|| match &old {
            Some(v) => RollupRowLayout::of(v),
            None => RollupRowLayout::Cells,
        });
        let before = row.cells.len();
        row.cells.retain(|c| !stale(&c.qualifier));
        if cells.is_empty() && row.cells.len() == before {
            return Ok(());
        }
        for c in cells {
            row.put(c);
        }
        let mut b = WriteBatch::new();
        b.durability = durability;
        if row.cells.is_empty() {
            if old.is_none() {
                return Ok(());
            }
            b.delete(Table::Rollup, key);
        } else {
            b.put(Table::Rollup, key, layout.encode(&row));
        }
        Ok(self.kv.write(b)?)
    }

    /// Every row of `table` whose row key lies in `[start, stop)` (row
    /// keys without the table prefix; an empty `stop` is the table's end).
    pub fn scan<'a>(
        &'a self,
        table: &str,
        start: &[u8],
        stop: &[u8],
    ) -> impl Iterator<Item = Result<(Vec<u8>, RowCells), StoreError>> + 'a {
        let (range, plen) = table_range(table, start, stop);
        self.kv.scan(Table::Rollup, &range).map(move |r| {
            let (k, v) = r?;
            let row_key = k[plen..].to_vec();
            let cells = decode_row(&row_key, &v)?;
            Ok((row_key, cells))
        })
    }

    /// [`scan`](Self::scan) with each row's value undecoded (its cells
    /// walked borrowed, [`columns::for_each_cell`]).
    pub fn scan_raw<'a>(
        &'a self,
        table: &str,
        start: &[u8],
        stop: &[u8],
    ) -> impl Iterator<Item = Result<(Vec<u8>, Vec<u8>), StoreError>> + 'a {
        let (range, plen) = table_range(table, start, stop);
        self.kv.scan(Table::Rollup, &range).map(move |r| {
            let (mut k, v) = r?;
            k.drain(..plen);
            Ok((k, v))
        })
    }

    /// [`scan_raw`](Self::scan_raw) with each row lent to `visit` (its key
    /// without the table prefix, and its value) instead of copied out,
    /// until `visit` returns false ([`KvStore::visit`]).
    pub fn visit_raw(
        &self,
        table: &str,
        start: &[u8],
        stop: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        let (range, plen) = table_range(table, start, stop);
        self.kv
            .visit(Table::Rollup, &range, &mut |k, v| visit(&k[plen..], v))?;
        Ok(())
    }

    /// Every entry, undecoded, with its full engine key (`tsdb scan`,
    /// `fsck`).
    pub fn scan_all(&self) -> impl Iterator<Item = Result<(Vec<u8>, Vec<u8>), StoreError>> + '_ {
        self.kv
            .scan(Table::Rollup, &ScanRange::new(Vec::new(), Vec::new()))
            .map(|r| r.map_err(StoreError::from))
    }
}

/// The cells of the rollup row `key` (in either layout).
fn decode_row(key: &[u8], value: &[u8]) -> Result<RowCells, StoreError> {
    columns::decode(value).map_err(|cause| StoreError::Row {
        key: crate::model::uid::hex_upper(key),
        cause,
    })
}

/// The engine range of `table`'s rows from `start` up to `stop` (row
/// keys; an empty `stop` is the table's end), and the length of the
/// table's prefix on each engine key.
fn table_range(table: &str, start: &[u8], stop: &[u8]) -> (ScanRange, usize) {
    let prefix = table_prefix(table);
    let begin = [prefix.as_slice(), start].concat();
    let end = if stop.is_empty() {
        crate::storage::prefix_end(&prefix)
    } else {
        [prefix.as_slice(), stop].concat()
    };
    (ScanRange::new(begin, end), prefix.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_carry_their_table() {
        assert_eq!(entry_key("t1", &[9, 8]), vec![2, b't', b'1', 9, 8]);
        assert_eq!(
            split_key(&[2, b't', b'1', 9, 8]),
            Some(("t1", &[9u8, 8][..]))
        );
        assert_eq!(split_key(&[5, b't']), None);
        let kv: Arc<dyn KvStore> = Arc::new(crate::storage::memory::MemoryStore::default());
        let t = RollupTable::new(kv);
        t.put_cells(
            "a",
            &[1],
            vec![Cell::new(vec![0, 0, 0], vec![1])],
            Durability::Process,
        )
        .unwrap();
        t.put_cells(
            "ab",
            &[0],
            vec![Cell::new(vec![0, 0, 0], vec![2])],
            Durability::Process,
        )
        .unwrap();
        t.put_cells(
            "a",
            &[1],
            vec![Cell::new(vec![1, 0, 0], vec![3])],
            Durability::Process,
        )
        .unwrap();
        let rows: Vec<_> = t.scan("a", &[], &[]).map(|r| r.unwrap()).collect();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].1.cells.len(), 2);
        assert_eq!(
            t.get_row("ab", &[0]).unwrap().unwrap().cells[0].value,
            vec![2]
        );
    }
}
