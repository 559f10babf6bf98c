//! The embedded [`IndexStore`]: the series index in the store's
//! `rtsdb-index` table, in the same engine as the data rows.
//!
//! # Layout
//!
//! - `S <tsuid bytes>` → the base hour (4 bytes, big-endian seconds) of
//!   the newest row written for the series. The TSUID starts with the
//!   metric UID, so a prefix scan on `S <metric>` lists a metric's series.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Result, Store};
use crate::index::{self, HourSpan, IndexStore, RebuildStats};
use crate::model::Tsuid;
use crate::storage::coordinator::Coordinator;
use crate::storage::{Durability, KvStore, ScanRange, Table, WriteBatch};

const SERIES: u8 = b'S';

/// The base hour an entry's value holds (0 if it is too short).
fn hour_of(value: &[u8]) -> u32 {
    value
        .get(..4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .unwrap_or(0)
}

/// The coordinator's change counter ([`Coordinator::bump`]) a shared
/// index moves each time entries reach the engine.
pub(crate) const INDEX_GENERATION: &str = "index";

pub(crate) struct KvIndexStore {
    kv: Arc<dyn KvStore>,
    /// Entries recorded but not written yet (TSUID bytes → hour), when
    /// writes are batched ([`KvIndexStore::deferred`]).
    pending: Option<parking_lot::Mutex<HashMap<Vec<u8>, u32>>>,
    /// Shared with other processes (a cluster): told of every flush.
    coordinator: Option<Arc<dyn Coordinator>>,
    /// How a query learns whether the entries moved.
    freshness: IndexFreshness,
}

/// How a shared index's [generation](IndexStore::generation) is read
/// before a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IndexFreshness {
    /// Asked of the coordinator (a ZooKeeper round trip per query): a
    /// flush any TSD had acknowledged before the query is seen.
    Asked,
    /// As the coordinator's watch saw it after a fence
    /// ([`Coordinator::fence`]: a round trip at most once per lease, shared
    /// with the cluster's read cache), and asked while no watch vouches
    /// for it: a flush any TSD had acknowledged before the query is seen
    /// all the same.
    Watched,
}

impl KvIndexStore {
    pub(crate) fn new(kv: Arc<dyn KvStore>) -> KvIndexStore {
        KvIndexStore {
            kv,
            pending: None,
            coordinator: None,
            freshness: IndexFreshness::Asked,
        }
    }

    /// Records are kept until [`IndexStore::flush`]: on a remote engine
    /// a write per new series (one INSERT each) would cost more than the
    /// points. Each flush that wrote entries bumps [`INDEX_GENERATION`]
    /// in `coordinator`, which other TSDs read before a query
    /// ([`IndexStore::generation`]) instead of reading the entries.
    pub(crate) fn deferred(
        kv: Arc<dyn KvStore>,
        coordinator: Arc<dyn Coordinator>,
        freshness: IndexFreshness,
    ) -> KvIndexStore {
        KvIndexStore {
            kv,
            pending: Some(Default::default()),
            coordinator: Some(coordinator),
            freshness,
        }
    }

    fn entry_key(tsuid: &[u8]) -> Vec<u8> {
        let mut key = Vec::with_capacity(tsuid.len() + 1);
        key.push(SERIES);
        key.extend_from_slice(tsuid);
        key
    }
}

impl IndexStore for KvIndexStore {
    fn load(&self, f: &mut dyn FnMut(&[u8], u32)) -> index::Result<()> {
        for item in self.kv.scan(Table::Index, &ScanRange::prefix(&[SERIES])) {
            let (key, value) = item?;
            f(&key[1..], hour_of(&value));
        }
        Ok(())
    }

    fn load_prefix(&self, prefix: &[u8], f: &mut dyn FnMut(&[u8], u32)) -> index::Result<()> {
        let mut start = Vec::with_capacity(prefix.len() + 1);
        start.push(SERIES);
        start.extend_from_slice(prefix);
        for item in self.kv.scan(Table::Index, &ScanRange::prefix(&start)) {
            let (key, value) = item?;
            f(&key[1..], hour_of(&value));
        }
        Ok(())
    }

    fn record(&self, tsuid: &[u8], hour: u32) -> index::Result<()> {
        self.record_all(&[(tsuid.to_vec(), hour)])
    }

    fn record_all(&self, entries: &[(Vec<u8>, u32)]) -> index::Result<()> {
        if let Some(pending) = &self.pending {
            let mut p = pending.lock();
            for (tsuid, hour) in entries {
                let h = p.entry(tsuid.clone()).or_insert(*hour);
                *h = (*h).max(*hour);
            }
            return Ok(());
        }
        if entries.is_empty() {
            return Ok(());
        }
        // One batch: fjall's journal frames each batch with a sequence
        // number and a checksum (about 20 bytes) and writes it with a
        // system call, which a batch per new series paid each time.
        let mut batch = WriteBatch::new();
        batch.durability = Durability::Process;
        for (tsuid, hour) in entries {
            batch.put(
                Table::Index,
                Self::entry_key(tsuid),
                hour.to_be_bytes().to_vec(),
            );
        }
        Ok(self.kv.write(batch)?)
    }

    fn flush(&self) -> index::Result<()> {
        let Some(pending) = &self.pending else {
            return Ok(());
        };
        let taken = std::mem::take(&mut *pending.lock());
        if taken.is_empty() {
            return Ok(());
        }
        let mut batch = WriteBatch::new();
        for (tsuid, hour) in &taken {
            batch.put(
                Table::Index,
                Self::entry_key(tsuid),
                hour.to_be_bytes().to_vec(),
            );
        }
        let written = self
            .kv
            .write(batch)
            .map_err(index::IndexError::from)
            .and_then(|()| {
                // Once written, before the rows of the same flush: a TSD that
                // reads a row can find its series.
                match &self.coordinator {
                    Some(c) => Ok(c.bump(INDEX_GENERATION)?),
                    None => Ok(()),
                }
            });
        if let Err(e) = written {
            // Kept for the next attempt, under anything recorded meanwhile
            // (written again, and the generation moved then).
            let mut p = pending.lock();
            for (tsuid, hour) in taken {
                let h = p.entry(tsuid).or_insert(hour);
                *h = (*h).max(hour);
            }
            return Err(e);
        }
        Ok(())
    }

    fn generation(&self) -> index::Result<Option<u64>> {
        match &self.coordinator {
            Some(c) => {
                let watched = match self.freshness {
                    IndexFreshness::Watched if c.fence() => c.watched(INDEX_GENERATION),
                    _ => None,
                };
                if let Some(generation) = watched {
                    return Ok(Some(generation));
                }
                // A round trip: its cost is logged beside the ClickHouse
                // statements' (`debug`).
                let started = std::time::Instant::now();
                let generation = c.generation(INDEX_GENERATION)?;
                tracing::debug!(
                    micros = started.elapsed().as_micros() as u64,
                    generation,
                    "series index generation read"
                );
                Ok(Some(generation))
            }
            None => Ok(None),
        }
    }

    fn clear(&self) -> index::Result<()> {
        if let Some(pending) = &self.pending {
            pending.lock().clear();
        }
        let mut batch = WriteBatch::new();
        for item in self.kv.scan(Table::Index, &ScanRange::default()) {
            batch.delete(Table::Index, item?.0);
        }
        Ok(self.kv.write(batch)?)
    }
}

impl Store {
    /// Every series with a data row, with the base hour of its newest
    /// row: what the series index is rebuilt from.
    pub fn scan_series(&self) -> Result<(HashMap<Tsuid, HourSpan>, RebuildStats)> {
        let mut stats = RebuildStats::default();
        let mut found: HashMap<Tsuid, HourSpan> = HashMap::new();
        for item in self.scan_all_rows() {
            let (key, _) = item?;
            stats.rows += 1;
            match self.layout().parse_row_key(&key) {
                Ok(rk) if rk.tsuid.metric.id() != 0 => {
                    found
                        .entry(rk.tsuid)
                        .and_modify(|h| h.include(rk.base_time))
                        .or_insert(HourSpan::new(rk.base_time));
                }
                Ok(_) => {}
                Err(_) => stats.bad_rows += 1,
            }
        }
        stats.series = found.len() as u64;
        Ok((found, stats))
    }
}

#[cfg(test)]
mod tests {
    //! A [`SeriesIndex`] over the embedded engine.
    use super::*;
    use crate::codec::row::DuplicatePolicy;
    use crate::codec::row_key::KeyLayout;
    use crate::index::SeriesIndex;
    use crate::model::{Timestamp, Uid, UidWidth, Value};

    fn open(store: &Store) -> SeriesIndex {
        SeriesIndex::open(store.index_store(), store.layout().widths).unwrap()
    }

    fn u(i: u64) -> Uid {
        Uid::new(i, UidWidth::DEFAULT).unwrap()
    }

    #[test]
    fn add_lookup_persist_and_rebuild() {
        let store = Store::in_memory(KeyLayout::default(), DuplicatePolicy::LastWriteWins);
        let idx = open(&store);
        let a = Tsuid::new(u(1), vec![(u(1), u(1)), (u(2), u(5))]).unwrap();
        let b = Tsuid::new(u(1), vec![(u(1), u(2)), (u(2), u(5))]).unwrap();
        let c = Tsuid::new(u(2), vec![(u(1), u(1))]).unwrap();
        assert!(idx.add(&a).unwrap());
        assert!(!idx.add(&a).unwrap());
        idx.add_at(&b, 1356998400).unwrap();
        idx.add(&c).unwrap();
        assert_eq!(idx.series_of(u(1)), vec![a.clone(), b.clone()]);
        assert_eq!(idx.lookup(u(1), u(2), u(5)).len(), 2);
        assert_eq!(idx.lookup(u(1), u(1), u(2)), vec![b.clone()]);
        assert_eq!(
            idx.with_metric(u(1), |m| m.unwrap().tag_values(u(1)).count()),
            2
        );
        // Reopening loads what was written.
        let again = open(&store);
        assert_eq!(again.len(), 3);
        assert_eq!(again.last_hour(&b), Some(1356998400));
        // Rebuild from data rows.
        store
            .put_points(
                &a,
                &[(Timestamp::Seconds(1357002001), Value::Int(1))],
                Durability::Process,
            )
            .unwrap();
        let (found, stats) = store.scan_series().unwrap();
        again.replace_all(&found).unwrap();
        assert_eq!(stats.series, 1);
        assert_eq!(again.series_of(u(1)), vec![a.clone()]);
        assert_eq!(again.last_hour(&a), Some(1357002000));
        assert_eq!(open(&store).len(), 1);
    }

    /// Counts the writes a [`SeriesIndex`] asks of its backend.
    struct CountingWrites {
        inner: Arc<dyn IndexStore>,
        writes: std::sync::atomic::AtomicUsize,
    }

    impl IndexStore for CountingWrites {
        fn load(&self, f: &mut dyn FnMut(&[u8], u32)) -> index::Result<()> {
            self.inner.load(f)
        }
        fn record(&self, tsuid: &[u8], hour: u32) -> index::Result<()> {
            self.record_all(&[(tsuid.to_vec(), hour)])
        }
        fn record_all(&self, entries: &[(Vec<u8>, u32)]) -> index::Result<()> {
            self.writes
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.inner.record_all(entries)
        }
        fn clear(&self) -> index::Result<()> {
            self.inner.clear()
        }
    }

    /// An append's series go to the backend in one write, each with the
    /// newest of its hours; series already known at that hour are not
    /// written again.
    #[test]
    fn an_appends_series_are_recorded_in_one_write() {
        let store = Store::in_memory(KeyLayout::default(), DuplicatePolicy::LastWriteWins);
        let counting = Arc::new(CountingWrites {
            inner: store.index_store(),
            writes: Default::default(),
        });
        let writes = || counting.writes.load(std::sync::atomic::Ordering::Relaxed);
        let idx = SeriesIndex::open(counting.clone(), store.layout().widths).unwrap();
        let a = Tsuid::new(u(1), vec![(u(1), u(1))]).unwrap();
        let b = Tsuid::new(u(1), vec![(u(1), u(2))]).unwrap();
        let c = Tsuid::new(u(2), vec![(u(1), u(1))]).unwrap();
        let (h0, h1) = (1356998400, 1357002000);
        idx.add_at(&c, h1).unwrap();
        assert_eq!(writes(), 1);
        let fresh = idx
            .add_all(&[(&a, h1), (&b, h0), (&a, h0), (&c, h0), (&b, h1)])
            .unwrap();
        assert_eq!(fresh, vec![true, true, false, false, false]);
        assert_eq!(writes(), 2);
        assert_eq!(idx.last_hour(&a), Some(h1));
        assert_eq!(idx.last_hour(&b), Some(h1));
        // Nothing new: no write.
        assert_eq!(idx.add_all(&[(&a, h0), (&c, h1)]).unwrap(), vec![false; 2]);
        assert_eq!(writes(), 2);
        // What the one write recorded is what a reopen loads.
        let again = open(&store);
        assert_eq!(again.len(), 3);
        assert_eq!(again.last_hour(&a), Some(h1));
        assert_eq!(again.last_hour(&b), Some(h1));
        assert_eq!(again.last_hour(&c), Some(h1));
    }
}
