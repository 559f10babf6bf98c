//! An in-memory engine for tests: a sorted map per table behind one lock.

use std::collections::BTreeMap;

use parking_lot::RwLock;

use super::{
    Durability, KvSnapshot, KvStore, Mutation, Result, ScanIter, ScanRange, Table, WriteBatch,
    counter_value,
};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Default)]
pub(crate) struct MemoryStore {
    tables: RwLock<[Map; 6]>,
}

fn idx(t: Table) -> usize {
    match t {
        Table::Data => 0,
        Table::Uid => 1,
        Table::Meta => 2,
        Table::Index => 3,
        Table::Tree => 4,
        Table::Rollup => 5,
    }
}

/// A copy of every table (tests hold small stores).
struct MemorySnapshot([Map; 6]);

impl KvSnapshot for MemorySnapshot {
    fn scan_all(&self, table: Table) -> ScanIter<'_> {
        Box::new(
            self.0[idx(table)]
                .iter()
                .map(|(k, v)| Ok((k.clone(), v.clone()))),
        )
    }
}

impl MemoryStore {
    pub(crate) fn new() -> MemoryStore {
        MemoryStore::default()
    }
}

impl KvStore for MemoryStore {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.tables.read()[idx(table)].get(key).cloned())
    }

    fn write(&self, batch: WriteBatch) -> Result<()> {
        let mut t = self.tables.write();
        for m in batch.mutations {
            match m {
                Mutation::Put { table, key, value } => {
                    t[idx(table)].insert(key, value);
                }
                Mutation::Delete { table, key } => {
                    t[idx(table)].remove(&key);
                }
            }
        }
        Ok(())
    }

    fn scan<'a>(&'a self, table: Table, range: &ScanRange) -> ScanIter<'a> {
        // Copies the range out so no lock is held while the caller iterates.
        let t = self.tables.read();
        let map = &t[idx(table)];
        let limit = range.limit.unwrap_or(usize::MAX);
        let items: Vec<_> = map
            .range(range.start.clone()..)
            .take_while(|(k, _)| range.stop.is_empty() || k.as_slice() < range.stop.as_slice())
            .take(limit)
            .map(|(k, v)| Ok((k.clone(), v.clone())))
            .collect();
        Box::new(items.into_iter())
    }

    fn increment(&self, table: Table, key: &[u8], delta: i64, _: Durability) -> Result<i64> {
        let mut t = self.tables.write();
        let map = &mut t[idx(table)];
        let v = counter_value(table, key, map.get(key).map(|v| v.as_slice()))?.wrapping_add(delta);
        map.insert(key.to_vec(), v.to_be_bytes().to_vec());
        Ok(v)
    }

    fn compare_and_set(
        &self,
        table: Table,
        key: &[u8],
        expected: Option<&[u8]>,
        new: &[u8],
        _: Durability,
    ) -> Result<bool> {
        let mut t = self.tables.write();
        let map = &mut t[idx(table)];
        if map.get(key).map(|v| v.as_slice()) != expected {
            return Ok(false);
        }
        map.insert(key.to_vec(), new.to_vec());
        Ok(true)
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn snapshot(&self) -> Result<Box<dyn KvSnapshot>> {
        Ok(Box::new(MemorySnapshot(self.tables.read().clone())))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    #[test]
    fn conformance() {
        super::super::conformance::run(Arc::new(super::MemoryStore::new()));
    }
}
