//! The embedded [`MetaStore`]: UIDMeta as a cell of the UID's row in
//! `tsdb-uid`, TSMeta and the series counters as cells of the TSUID's row
//! in `tsdb-meta` (docs/format/meta-table.md), in the same engine as the
//! data rows.

use std::sync::Arc;

use crate::meta::{
    CounterDelta, Counting, MetaError, MetaStore, PurgeStats, Result, TS_CTR, TS_LAST, TS_META,
    TsMetaFields, UidMetaFields,
};
use crate::model::{Uid, UidKind, UidWidths};
use crate::storage::{KvStore, ScanRange, Table, WriteBatch};
use crate::uid::keys::{FAMILY_NAME, cell_key, split_cell_key, uid_meta};

pub(crate) struct KvMetaStore {
    kv: Arc<dyn KvStore>,
    widths: UidWidths,
}

impl KvMetaStore {
    pub(crate) fn new(kv: Arc<dyn KvStore>, widths: UidWidths) -> KvMetaStore {
        KvMetaStore { kv, widths }
    }

    fn uid_meta_key(&self, kind: UidKind, uid: Uid) -> Vec<u8> {
        uid_meta(kind, &uid.to_bytes(self.widths.of(kind)))
    }

    fn read_u64(&self, key: &[u8]) -> Result<u64> {
        Ok(match self.kv.get(Table::Meta, key)? {
            Some(v) if v.len() == 8 => {
                i64::from_be_bytes(v.try_into().expect("8 bytes")).max(0) as u64
            }
            Some(v) => return Err(MetaError::Corrupt(format!("counter of {} bytes", v.len()))),
            None => 0,
        })
    }

    /// Puts or deletes one cell.
    fn write(&self, table: Table, key: Vec<u8>, value: Option<Vec<u8>>) -> Result<()> {
        let mut b = WriteBatch::new();
        match value {
            Some(v) => b.put(table, key, v),
            None => b.delete(table, key),
        }
        Ok(self.kv.write(b)?)
    }
}

fn meta_key(tsuid: &[u8], qualifier: &[u8]) -> Vec<u8> {
    cell_key(tsuid, FAMILY_NAME, qualifier)
}

/// A stored JSON meta cell, if there is one.
fn decode<T: serde::de::DeserializeOwned>(cell: Option<Vec<u8>>) -> Result<Option<T>> {
    cell.map(|v| serde_json::from_slice(&v).map_err(|e| MetaError::Corrupt(e.to_string())))
        .transpose()
}

impl MetaStore for KvMetaStore {
    fn uid_meta(&self, kind: UidKind, uid: Uid) -> Result<Option<UidMetaFields>> {
        decode(self.kv.get(Table::Uid, &self.uid_meta_key(kind, uid))?)
    }

    fn put_uid_meta(&self, kind: UidKind, uid: Uid, fields: &UidMetaFields) -> Result<()> {
        let mut stored = fields.clone();
        stored.kind = kind.type_name().to_string();
        let json = serde_json::to_vec(&stored).expect("json");
        self.write(Table::Uid, self.uid_meta_key(kind, uid), Some(json))
    }

    fn delete_uid_meta(&self, kind: UidKind, uid: Uid) -> Result<()> {
        self.write(Table::Uid, self.uid_meta_key(kind, uid), None)
    }

    fn ts_fields(&self, tsuid: &[u8]) -> Result<Option<TsMetaFields>> {
        decode(self.kv.get(Table::Meta, &meta_key(tsuid, TS_META))?)
    }

    fn put_ts_fields(&self, tsuid: &[u8], fields: &TsMetaFields) -> Result<()> {
        let json = serde_json::to_vec(fields).expect("json");
        self.write(Table::Meta, meta_key(tsuid, TS_META), Some(json))
    }

    fn delete_ts_fields(&self, tsuid: &[u8]) -> Result<()> {
        self.write(Table::Meta, meta_key(tsuid, TS_META), None)
    }

    fn counters(&self, tsuid: &[u8]) -> Result<(u64, u64)> {
        Ok((
            self.read_u64(&meta_key(tsuid, TS_CTR))?,
            self.read_u64(&meta_key(tsuid, TS_LAST))?,
        ))
    }

    fn add_counters(&self, deltas: &[CounterDelta], how: Counting) -> Result<()> {
        if deltas.is_empty() || how == Counting::Off {
            return Ok(());
        }
        let mut b = WriteBatch::new();
        for (tsuid, n, last) in deltas {
            let (count, stored_last) = self.counters(tsuid).unwrap_or((0, 0));
            let count = match how {
                Counting::Increment => count + n,
                _ => 1,
            };
            b.put(
                Table::Meta,
                meta_key(tsuid, TS_CTR),
                (count as i64).to_be_bytes().to_vec(),
            );
            b.put(
                Table::Meta,
                meta_key(tsuid, TS_LAST),
                ((*last).max(stored_last) as i64).to_be_bytes().to_vec(),
            );
        }
        self.kv.write(b)?;
        Ok(())
    }

    fn purge(&self) -> Result<PurgeStats> {
        let mut stats = PurgeStats::default();
        let mut b = WriteBatch::new();
        for item in self.kv.scan(Table::Uid, &ScanRange::default()) {
            let (key, _) = item?;
            if let Some((_, family, qualifier)) = split_cell_key(&key)
                && family == FAMILY_NAME
                && qualifier.ends_with(b"_meta")
            {
                b.delete(Table::Uid, key.clone());
                stats.uid_meta += 1;
            }
        }
        let mut last_row: Option<Vec<u8>> = None;
        for item in self.kv.scan(Table::Meta, &ScanRange::default()) {
            let (key, _) = item?;
            if let Some((row, _, _)) = split_cell_key(&key)
                && last_row.as_deref() != Some(row)
            {
                stats.ts_rows += 1;
                last_row = Some(row.to_vec());
            }
            b.delete(Table::Meta, key);
        }
        self.kv.write(b)?;
        Ok(stats)
    }
}
