//! A store as it was at one moment, copied into a new store directory:
//! what a backup holds besides the write-ahead log.
//!
//! [`Store::snapshot`] takes the engine's consistent view of every table
//! (fjall's cross-keyspace snapshot: a batch is in it whole or not at
//! all, and nothing written after it is); [`StoreSnapshot::write_to`]
//! streams each table, in key order, into a fresh engine in the
//! destination as table files, syncs them, and writes the store header
//! last. A copy that stopped halfway has engine files but no header, and
//! [`Store::open`] refuses such a directory instead of guessing.

use std::path::Path;
use std::time::Duration;

use super::{ENGINE_DIR, Result, Store, StoreError, StoreHeader, lock_dir};
use crate::storage::fjall::{FjallOptions, FjallStore};
use crate::storage::{KvSnapshot, Table};

/// The tables of a store at the moment [`Store::snapshot`] was called.
pub struct StoreSnapshot {
    tables: Box<dyn KvSnapshot>,
    header: StoreHeader,
}

/// Entries copied into a new store, per table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopiedTables {
    /// `(table name, entries)` for each table, in [`Table::ALL`] order.
    pub entries: Vec<(&'static str, u64)>,
}

impl CopiedTables {
    /// Entries copied into `table`.
    pub fn of(&self, table: &str) -> u64 {
        self.entries
            .iter()
            .find(|(t, _)| *t == table)
            .map_or(0, |(_, n)| *n)
    }
}

impl Store {
    /// A consistent view of every table as of now, to copy with
    /// [`StoreSnapshot::write_to`]. Writes go on meanwhile; they are not
    /// in the view. The view pins the versions it sees, so copy it soon.
    pub fn snapshot(&self) -> Result<StoreSnapshot> {
        // The header as stored (a store in memory has none: it is
        // described by its layout).
        let header = match self.dir() {
            Some(dir) => StoreHeader::read(dir)?
                .ok_or_else(|| StoreError::MissingHeader(dir.display().to_string()))?,
            None => StoreHeader::new(&self.layout, "fjall"),
        };
        Ok(StoreSnapshot {
            tables: self.kv.snapshot()?,
            header,
        })
    }
}

impl StoreSnapshot {
    /// Writes the snapshot as a new store in `dest`, which must hold no
    /// store yet (other files, such as a backup's WAL, may be there). The
    /// store is durable when this returns; its header is written last.
    pub fn write_to(&self, dest: &Path) -> Result<CopiedTables> {
        std::fs::create_dir_all(dest)?;
        // Nobody may open the copy before it is complete.
        let _lock = lock_dir(dest, Duration::ZERO)?;
        let engine_dir = dest.join(ENGINE_DIR);
        if StoreHeader::read(dest)?.is_some() || engine_dir.exists() {
            return Err(StoreError::Io(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} already holds a store", dest.display()),
            )));
        }
        let engine = FjallStore::open(&engine_dir, &FjallOptions::default())?;
        let mut copied = CopiedTables::default();
        for table in Table::ALL {
            let n = engine.ingest(table, self.tables.scan_all(table))?;
            copied.entries.push((table.name(), n));
        }
        engine.sync_all_files()?;
        drop(engine);
        self.header.write_new(dest)?;
        Ok(copied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::WriteBatch;
    use crate::store::StoreOptions;

    #[test]
    fn a_snapshot_is_copied_as_it_was_taken() {
        let src = tempfile::tempdir().unwrap();
        let store = Store::open(src.path(), &StoreOptions::default()).unwrap();
        let mut b = WriteBatch::new();
        for i in 0u8..100 {
            b.put(Table::Data, vec![1, i], vec![i]);
        }
        b.put(Table::Uid, b"u".to_vec(), b"1".to_vec());
        b.put(Table::Meta, b"m".to_vec(), b"2".to_vec());
        store.kv().write(b).unwrap();
        let snap = store.snapshot().unwrap();
        // Written after the snapshot: not in the copy.
        let mut later = WriteBatch::new();
        later.put(Table::Data, vec![2], vec![0]);
        later.delete(Table::Data, vec![1, 0]);
        store.kv().write(later).unwrap();

        let dest = tempfile::tempdir().unwrap();
        std::fs::create_dir(dest.path().join("wal")).unwrap();
        let copied = snap.write_to(dest.path()).unwrap();
        assert_eq!(copied.of("tsdb"), 100);
        assert_eq!(copied.of("tsdb-uid"), 1);
        assert_eq!(copied.of("tsdb-meta"), 1);
        assert_eq!(copied.of("rtsdb-index"), 0);
        // A second copy into the same place is refused.
        assert!(snap.write_to(dest.path()).is_err());
        drop(snap);

        let copy = Store::open(dest.path(), &StoreOptions::default()).unwrap();
        assert_eq!(copy.layout(), store.layout());
        assert_eq!(copy.kv().get(Table::Data, &[1, 0]).unwrap(), Some(vec![0]));
        assert_eq!(copy.kv().get(Table::Data, &[2]).unwrap(), None);
        assert_eq!(
            copy.kv().get(Table::Uid, b"u").unwrap(),
            Some(b"1".to_vec())
        );
        let all = copy
            .kv()
            .scan(Table::Data, &crate::storage::ScanRange::default())
            .count();
        assert_eq!(all, 100);
    }

    #[test]
    fn a_copy_without_its_header_does_not_open() {
        let src = tempfile::tempdir().unwrap();
        let store = Store::open(src.path(), &StoreOptions::default()).unwrap();
        let mut b = WriteBatch::new();
        b.put(Table::Data, vec![1], vec![1]);
        store.kv().write(b).unwrap();
        let dest = tempfile::tempdir().unwrap();
        store.snapshot().unwrap().write_to(dest.path()).unwrap();
        // As if the copy had stopped before its last step.
        std::fs::remove_file(dest.path().join(super::super::header::HEADER_FILE)).unwrap();
        let e = Store::open(dest.path(), &StoreOptions::default())
            .err()
            .unwrap();
        assert!(matches!(e, StoreError::MissingHeader(_)), "{e}");
    }
}
