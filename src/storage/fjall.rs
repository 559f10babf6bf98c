//! The default embedded engine: fjall, an LSM-tree in pure Rust.
//! One fjall keyspace per logical table. Why fjall: docs/storage-engine.md.

use std::path::Path;

use std::sync::Arc;

use super::StripedLocks;
use ::fjall::compaction::filter::{CompactionFilter, Context, Factory, ItemAccessor, Verdict};
use ::fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use super::{
    Durability, KvStore, Mutation, Result, ScanIter, ScanRange, StorageError, Table, WriteBatch,
    counter_value,
};

/// Read-modify-write operations (increment, compare-and-set) take one of
/// these locks, picked by key hash; fjall has no native counters or CAS.
/// The store directory is locked by one process, so in-process locks are
/// enough for atomicity.
const RMW_STRIPES: usize = 64;

pub(crate) struct FjallStore {
    db: Database,
    tables: [Keyspace; 4],
    rmw: StripedLocks,
}

fn err(e: impl std::fmt::Display) -> StorageError {
    StorageError::Engine(e.to_string())
}

/// Decides, during the engine's compaction, that a data-table entry is
/// expired and can be dropped (retention).
pub(crate) type ExpiryFilter = Arc<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// Engine tuning. Defaults suit a single TSD on a small machine.
#[derive(Clone)]
pub struct FjallOptions {
    /// Block cache shared by all tables, bytes.
    pub cache_bytes: u64,
    /// Drops expired data rows in the engine's compactions.
    pub data_expiry: Option<ExpiryFilter>,
}

impl std::fmt::Debug for FjallOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FjallOptions")
            .field("cache_bytes", &self.cache_bytes)
            .field("data_expiry", &self.data_expiry.is_some())
            .finish()
    }
}

struct ExpiryFactory(std::panic::AssertUnwindSafe<ExpiryFilter>);

struct ExpiryCompaction(ExpiryFilter);

impl Factory for ExpiryFactory {
    fn name(&self) -> &str {
        "rtsdb-retention"
    }

    fn make_filter(&self, _: &Context) -> Box<dyn CompactionFilter> {
        Box::new(ExpiryCompaction(self.0.0.clone()))
    }
}

impl CompactionFilter for ExpiryCompaction {
    fn filter_item(
        &mut self,
        item: ItemAccessor<'_>,
        _: &Context,
    ) -> ::fjall::compaction::filter::CompactionFilterResult {
        Ok(if (self.0)(item.key()) {
            Verdict::Remove
        } else {
            Verdict::Keep
        })
    }
}

impl Default for FjallOptions {
    fn default() -> Self {
        FjallOptions {
            cache_bytes: 64 << 20,
            data_expiry: None,
        }
    }
}

impl FjallStore {
    pub(crate) fn open(path: &Path, opts: &FjallOptions) -> Result<FjallStore> {
        let mut builder = Database::builder(path).cache_size(opts.cache_bytes);
        if let Some(expiry) = &opts.data_expiry {
            let factory: Arc<dyn Factory> =
                Arc::new(ExpiryFactory(std::panic::AssertUnwindSafe(expiry.clone())));
            builder = builder.with_compaction_filter_factories(Arc::new(move |keyspace: &str| {
                (keyspace == Table::Data.name()).then(|| factory.clone())
            }));
        }
        let db = builder.open().map_err(err)?;
        let open = |t: Table| db.keyspace(t.name(), KeyspaceCreateOptions::default);
        let tables = [
            open(Table::Data).map_err(err)?,
            open(Table::Uid).map_err(err)?,
            open(Table::Meta).map_err(err)?,
            open(Table::Index).map_err(err)?,
        ];
        Ok(FjallStore {
            db,
            tables,
            rmw: StripedLocks::new(RMW_STRIPES),
        })
    }

    fn ks(&self, t: Table) -> &Keyspace {
        match t {
            Table::Data => &self.tables[0],
            Table::Uid => &self.tables[1],
            Table::Meta => &self.tables[2],
            Table::Index => &self.tables[3],
        }
    }

    fn put_one(&self, table: Table, key: &[u8], value: Vec<u8>, d: Durability) -> Result<()> {
        let mut b = WriteBatch::new();
        b.durability = d;
        b.put(table, key.to_vec(), value);
        self.write(b)
    }

    /// Forces the engine's own compaction on every table (benchmarks,
    /// size measurements).
    pub(crate) fn major_compact(&self) -> Result<()> {
        for ks in &self.tables {
            ks.rotate_memtable_and_wait().map_err(err)?;
            ks.major_compact().map_err(err)?;
        }
        Ok(())
    }
}

/// Flushes everything into table files, compacts, closes, then deletes the
/// engine's journal: after a clean flush it only repeats what the tables
/// hold, and fjall keeps up to 64 MB of it otherwise. Run only with the
/// store closed everywhere else (the caller holds the store's lock); fjall
/// starts a fresh journal on the next open. Returns the bytes freed.
pub(crate) fn flush_and_trim_journal(path: &Path) -> Result<u64> {
    {
        let store = FjallStore::open(path, &FjallOptions::default())?;
        store.major_compact()?;
        store.sync()?;
        if store.tables.iter().any(|ks| ks.sealed_memtable_count() > 0) {
            return Ok(0);
        }
    }
    let mut freed = 0;
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        if entry.path().extension().is_some_and(|e| e == "jnl") {
            freed += entry.metadata()?.len();
            std::fs::remove_file(entry.path())?;
        }
    }
    std::fs::File::open(path)?.sync_all()?;
    Ok(freed)
}

fn persist_mode(d: Durability) -> PersistMode {
    match d {
        Durability::Process => PersistMode::Buffer,
        Durability::Sync => PersistMode::SyncData,
    }
}

impl KvStore for FjallStore {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.ks(table).get(key).map_err(err)?.map(|v| v.to_vec()))
    }

    fn write(&self, batch: WriteBatch) -> Result<()> {
        // Always set a persist mode: without one fjall keeps the batch in
        // a userspace buffer that a crash loses.
        let mut b = self
            .db
            .batch()
            .durability(Some(persist_mode(batch.durability)));
        for m in batch.mutations {
            match m {
                Mutation::Put { table, key, value } => b.insert(self.ks(table), key, value),
                Mutation::Delete { table, key } => b.remove(self.ks(table), key),
            }
        }
        b.commit().map_err(err)
    }

    fn scan<'a>(&'a self, table: Table, range: &ScanRange) -> ScanIter<'a> {
        let ks = self.ks(table);
        let iter = if range.stop.is_empty() {
            ks.range(range.start.clone()..)
        } else {
            ks.range(range.start.clone()..range.stop.clone())
        };
        let it = iter.map(|g| {
            g.into_inner()
                .map(|(k, v)| (k.to_vec(), v.to_vec()))
                .map_err(err)
        });
        match range.limit {
            Some(n) => Box::new(it.take(n)),
            None => Box::new(it),
        }
    }

    fn increment(&self, table: Table, key: &[u8], delta: i64, d: Durability) -> Result<i64> {
        let _g = self.rmw.lock(table as u64, key);
        let cur = self.get(table, key)?;
        let v = counter_value(table, key, cur.as_deref())?.wrapping_add(delta);
        self.put_one(table, key, v.to_be_bytes().to_vec(), d)?;
        Ok(v)
    }

    fn compare_and_set(
        &self,
        table: Table,
        key: &[u8],
        expected: Option<&[u8]>,
        new: &[u8],
        d: Durability,
    ) -> Result<bool> {
        let _g = self.rmw.lock(table as u64, key);
        if self.get(table, key)?.as_deref() != expected {
            return Ok(false);
        }
        self.put_one(table, key, new.to_vec(), d)?;
        Ok(true)
    }

    fn sync(&self) -> Result<()> {
        self.db.persist(PersistMode::SyncAll).map_err(err)
    }

    fn disk_space(&self) -> u64 {
        self.db.disk_space().unwrap_or(0)
    }

    fn compact(&self) -> Result<()> {
        self.major_compact()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    #[test]
    fn conformance() {
        let dir = tempfile::tempdir().unwrap();
        let store = super::FjallStore::open(dir.path(), &Default::default()).unwrap();
        super::super::conformance::run(Arc::new(store));
    }
}
