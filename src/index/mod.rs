//! The series index: metric → series and (metric, tag key, tag value) →
//! series, maintained on write, persisted in the `rtsdb-index` table and
//! held in memory for queries.
//!
//! OpenTSDB finds a metric's series by scanning every data row of the
//! metric; tag filters are applied to each row (spec section 9 item 1).
//! Here a query asks the index which series match, and reads only those.
//!
//! # Persistent layout (table `rtsdb-index`)
//!
//! - `S <tsuid bytes>` → the base hour (4 bytes, big-endian seconds) of
//!   the newest row written for the series. The TSUID starts with the
//!   metric UID, so a prefix scan on `S <metric>` lists a metric's series.
//!
//! That is all that is stored: a series' tag pairs are in its TSUID, so
//! the postings (tag pair → series) are built in memory when the `S` rows
//! are loaded at open, and storing them too would only cost disk (about
//! eight keys per series). `rebuild` recreates the `S` rows from the data
//! table if the index is lost or suspected stale.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::model::Tsuid;
use crate::model::{Uid, UidWidths};
use crate::storage::{Durability, KvStore, ScanRange, Table, WriteBatch};
use crate::store::{Result, Store};

pub mod lookup;

const SERIES: u8 = b'S';

/// The series of one metric, with postings per tag pair.
#[derive(Debug, Default)]
pub struct MetricSeries {
    /// Every series, in the order first seen; positions are series ids.
    pub series: Vec<Tsuid>,
    /// (tagk, tagv) → ids of series carrying that pair, ascending.
    postings: HashMap<(Uid, Uid), Vec<u32>>,
    /// tagk → its distinct values among this metric's series.
    values: HashMap<Uid, BTreeSet<Uid>>,
}

impl MetricSeries {
    fn insert(&mut self, tsuid: Tsuid) {
        let id = self.series.len() as u32;
        for &(k, v) in &tsuid.tags {
            self.postings.entry((k, v)).or_default().push(id);
            self.values.entry(k).or_default().insert(v);
        }
        self.series.push(tsuid);
    }

    /// Ids of series carrying `tagk=tagv`, ascending.
    pub fn with_tag(&self, tagk: Uid, tagv: Uid) -> &[u32] {
        self.postings
            .get(&(tagk, tagv))
            .map_or(&[], |v| v.as_slice())
    }

    /// The distinct values of `tagk` among this metric's series.
    pub fn tag_values(&self, tagk: Uid) -> impl Iterator<Item = Uid> + '_ {
        self.values.get(&tagk).into_iter().flatten().copied()
    }

    pub fn len(&self) -> usize {
        self.series.len()
    }

    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }
}

#[derive(Default)]
struct Inner {
    metrics: HashMap<Uid, MetricSeries>,
    /// Every known series → base hour of its newest row.
    known: HashMap<Tsuid, u32>,
}

/// Counts from a rebuild.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RebuildStats {
    pub rows: u64,
    pub series: u64,
    pub bad_rows: u64,
}

pub struct SeriesIndex {
    kv: Arc<dyn KvStore>,
    widths: UidWidths,
    inner: RwLock<Inner>,
}

impl SeriesIndex {
    /// Loads the index of `store` into memory.
    pub fn open(store: &Store) -> Result<SeriesIndex> {
        let index = SeriesIndex {
            kv: store.kv().clone(),
            widths: store.layout().widths,
            inner: RwLock::new(Inner::default()),
        };
        {
            let mut inner = index.inner.write();
            for item in index.kv.scan(Table::Index, &ScanRange::prefix(&[SERIES])) {
                let (key, value) = item?;
                let Ok(tsuid) = Tsuid::from_bytes(&key[1..], &index.widths) else {
                    tracing::warn!(key = ?key, "skipping malformed series index entry");
                    continue;
                };
                let hour = value
                    .get(..4)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                    .unwrap_or(0);
                insert(&mut inner, tsuid, hour);
            }
        }
        Ok(index)
    }

    /// Records a series the write path just wrote to. A known series costs
    /// one hash lookup under a read lock.
    pub fn add(&self, tsuid: &Tsuid) -> Result<bool> {
        self.add_at(tsuid, 0)
    }

    /// As [`add`](Self::add), also remembering `base_time` as the newest
    /// row of the series when it is newer than the recorded one (what
    /// `/api/query/last` starts from). Returns whether the series is new.
    pub fn add_at(&self, tsuid: &Tsuid, base_time: u32) -> Result<bool> {
        {
            let inner = self.inner.read();
            if let Some(&hour) = inner.known.get(tsuid)
                && hour >= base_time
            {
                return Ok(false);
            }
        }
        let mut inner = self.inner.write();
        let is_new = match inner.known.get(tsuid) {
            Some(&hour) if hour >= base_time => return Ok(false),
            Some(_) => false,
            None => true,
        };
        let mut batch = WriteBatch::new();
        batch.durability = Durability::Process;
        let bytes = tsuid.to_bytes(&self.widths);
        let mut key = Vec::with_capacity(bytes.len() + 1);
        key.push(SERIES);
        key.extend_from_slice(&bytes);
        batch.put(Table::Index, key, base_time.to_be_bytes().to_vec());
        self.kv.write(batch)?;
        if is_new {
            insert(&mut inner, tsuid.clone(), base_time);
        } else if let Some(h) = inner.known.get_mut(tsuid) {
            *h = base_time;
        }
        Ok(is_new)
    }

    /// Runs `f` on a metric's series (`None` if the metric has none).
    pub fn with_metric<R>(&self, metric: Uid, f: impl FnOnce(Option<&MetricSeries>) -> R) -> R {
        f(self.inner.read().metrics.get(&metric))
    }

    /// Every series of `metric`.
    pub fn series_of(&self, metric: Uid) -> Vec<Tsuid> {
        self.with_metric(metric, |m| m.map(|m| m.series.clone()).unwrap_or_default())
    }

    /// Every metric with at least one series.
    pub fn metrics(&self) -> Vec<Uid> {
        let mut m: Vec<Uid> = self.inner.read().metrics.keys().copied().collect();
        m.sort_unstable();
        m
    }

    /// Series of `metric` carrying `tagk=tagv`.
    pub fn lookup(&self, metric: Uid, tagk: Uid, tagv: Uid) -> Vec<Tsuid> {
        self.with_metric(metric, |m| {
            m.map(|m| {
                m.with_tag(tagk, tagv)
                    .iter()
                    .map(|&i| m.series[i as usize].clone())
                    .collect()
            })
            .unwrap_or_default()
        })
    }

    /// Whether the series is known, and the base hour of its newest row.
    pub fn last_hour(&self, tsuid: &Tsuid) -> Option<u32> {
        self.inner.read().known.get(tsuid).copied()
    }

    pub fn len(&self) -> usize {
        self.inner.read().known.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Recreates the index from the data table (`tsdb index rebuild`):
    /// drops every entry, then records each series found in the rows.
    pub fn rebuild(&self, store: &Store) -> Result<RebuildStats> {
        let mut stats = RebuildStats::default();
        let mut found: HashMap<Tsuid, u32> = HashMap::new();
        for item in store.scan_all_rows() {
            let (key, _) = item?;
            stats.rows += 1;
            match store.layout().parse_row_key(&key) {
                Ok(rk) if rk.tsuid.metric.id() != 0 => {
                    let h = found.entry(rk.tsuid).or_insert(0);
                    *h = (*h).max(rk.base_time);
                }
                Ok(_) => {}
                Err(_) => stats.bad_rows += 1,
            }
        }
        {
            let mut inner = self.inner.write();
            let mut batch = WriteBatch::new();
            for item in self.kv.scan(Table::Index, &ScanRange::default()) {
                batch.delete(Table::Index, item?.0);
            }
            self.kv.write(batch)?;
            *inner = Inner::default();
        }
        stats.series = found.len() as u64;
        let mut sorted: Vec<(Tsuid, u32)> = found.into_iter().collect();
        sorted.sort();
        for (tsuid, hour) in sorted {
            self.add_at(&tsuid, hour)?;
        }
        Ok(stats)
    }
}

fn insert(inner: &mut Inner, tsuid: Tsuid, hour: u32) {
    if inner.known.insert(tsuid.clone(), hour).is_none() {
        inner.metrics.entry(tsuid.metric).or_default().insert(tsuid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::row::DuplicatePolicy;
    use crate::codec::row_key::KeyLayout;
    use crate::model::{Timestamp, UidWidth, Value};

    fn u(i: u64) -> Uid {
        Uid::new(i, UidWidth::DEFAULT).unwrap()
    }

    #[test]
    fn add_lookup_persist_and_rebuild() {
        let store = Store::in_memory(KeyLayout::default(), DuplicatePolicy::LastWriteWins);
        let idx = SeriesIndex::open(&store).unwrap();
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
        let again = SeriesIndex::open(&store).unwrap();
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
        let stats = again.rebuild(&store).unwrap();
        assert_eq!(stats.series, 1);
        assert_eq!(again.series_of(u(1)), vec![a.clone()]);
        assert_eq!(again.last_hour(&a), Some(1357002000));
        assert_eq!(SeriesIndex::open(&store).unwrap().len(), 1);
    }
}
