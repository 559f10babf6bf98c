//! The series index: metric → series and (metric, tag key, tag value) →
//! series, maintained on write, persisted through an [`IndexStore`] (the
//! embedded one: `crate::store::index_table::KvIndexStore`, the
//! `rtsdb-index` table) and held in memory for queries.
//!
//! OpenTSDB finds a metric's series by scanning every data row of the
//! metric; tag filters are applied to each row (spec section 9 item 1).
//! Here a query asks the index which series match, and reads only those.
//!
//! # What is persisted
//!
//! One entry per series: its TSUID → the base hour of the newest row
//! written for it. That is all: a series' tag pairs are in its TSUID, so
//! the postings (tag pair → series) are built in memory when the entries
//! are loaded at open, and storing them too would only cost disk (about
//! eight keys per series). [`SeriesIndex::replace_all`] recreates the
//! entries from a scan of the data rows if the index is lost or suspected
//! stale.
//!
//! # Arrivals
//!
//! The index also counts, in memory, the series it learns of while the
//! process runs (appended here, or recorded by another process of a
//! cluster and read back), per metric and clock hour, for the last
//! [`ARRIVAL_HOURS`] hours: the "new series per hour" of
//! `/api/stats/cardinality`. Nothing stored says when a series first
//! appeared (an entry holds its newest hour), so series loaded at open
//! are not arrivals and a restart starts the count again.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use parking_lot::RwLock;

use thiserror::Error;

use crate::model::Tsuid;
use crate::model::hash::{FastBuild, FastMap};
use crate::model::{Uid, UidWidths};
use crate::storage::StorageError;

pub(crate) mod lookup;

#[derive(Debug, Error)]
pub enum IndexError {
    #[error(transparent)]
    Storage(#[from] StorageError),
}

pub type Result<T> = std::result::Result<T, IndexError>;

/// The persistence of the series index: one entry per series, its TSUID
/// bytes → the base hour of its newest row.
///
/// The in-memory [`SeriesIndex`] is the authority while a TSD runs; the
/// engine only has to give back at the next open what was recorded, so:
/// - [`record`](Self::record) is an upsert, atomic per entry and
///   surviving a process crash once it returns; it is only called with an
///   hour newer than the one recorded (or for a series not yet recorded),
///   but an engine that sees calls out of order (several TSDs) should
///   keep the highest hour;
/// - entries may be recorded for series whose rows are not written yet
///   (the write path records before it flushes): a series known to the
///   index may have no data;
/// - no ordering is required between entries, nor between the index and
///   the data rows.
pub trait IndexStore: Send + Sync {
    /// Calls `f` with every recorded entry: (TSUID bytes, base hour).
    /// Entries whose TSUID does not parse are skipped by the caller.
    fn load(&self, f: &mut dyn FnMut(&[u8], u32)) -> Result<()>;

    /// Records that `tsuid`'s newest row has base hour `hour`.
    fn record(&self, tsuid: &[u8], hour: u32) -> Result<()>;

    /// [`record`](Self::record) for several entries at once, atomically
    /// where the engine can (one write for the new series of an append,
    /// not one each). The default records them one by one.
    fn record_all(&self, entries: &[(Vec<u8>, u32)]) -> Result<()> {
        entries
            .iter()
            .try_for_each(|(tsuid, hour)| self.record(tsuid, *hour))
    }

    /// Removes every entry (before a rebuild records them again).
    fn clear(&self) -> Result<()>;

    /// Writes out entries [`record`](Self::record) kept back, for a
    /// backend that batches them (a remote one: one write per tick rather
    /// than per new series). Such a backend's entries are written before
    /// the rows of the same flush, and the WAL replays what a crash lost.
    fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// A counter every process recording into a shared backend moves when
    /// its recorded entries reach the backend ([`flush`](Self::flush)), so
    /// a reader reads a metric's entries again only when it moved. `None`
    /// (the default): no such counter, read every time.
    fn generation(&self) -> Result<Option<u64>> {
        Ok(None)
    }

    /// Calls `f` with the entries whose TSUID bytes start with `prefix`
    /// (a metric's series). The default filters a full [`load`](Self::load).
    fn load_prefix(&self, prefix: &[u8], f: &mut dyn FnMut(&[u8], u32)) -> Result<()> {
        self.load(&mut |tsuid, hour| {
            if tsuid.starts_with(prefix) {
                f(tsuid, hour)
            }
        })
    }
}

/// The series of one metric, with postings per tag pair.
#[derive(Default)]
pub struct MetricSeries {
    /// Every series, in the order first seen; positions are series ids.
    pub series: Vec<Tsuid>,
    /// Base hour of each series' newest row, by id.
    hours: Vec<u32>,
    /// Ids by their TSUID, hashed with [`tsuid_hash`]: a lookup table that
    /// holds ids, not a second copy of each TSUID (at a million series the
    /// copies were ~100 MB).
    ids: hashbrown::HashTable<u32>,
    /// (tagk, tagv) → ids of series carrying that pair, ascending.
    postings: FastMap<(Uid, Uid), Vec<u32>>,
    /// tagk → its distinct values among this metric's series.
    values: FastMap<Uid, BTreeSet<Uid>>,
}

fn tsuid_hash(tsuid: &Tsuid) -> u64 {
    use std::hash::BuildHasher;
    FastBuild::default().hash_one(tsuid)
}

impl std::fmt::Debug for MetricSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricSeries")
            .field("series", &self.series)
            .field("hours", &self.hours)
            .finish_non_exhaustive()
    }
}

impl MetricSeries {
    /// The id of `tsuid` (of this metric), if known.
    fn id_of(&self, tsuid: &Tsuid) -> Option<u32> {
        self.ids
            .find(tsuid_hash(tsuid), |&id| self.series[id as usize] == *tsuid)
            .copied()
    }

    /// Adds a series not known yet.
    fn insert(&mut self, tsuid: Tsuid, hour: u32) {
        let id = self.series.len() as u32;
        for &(k, v) in &tsuid.tags {
            self.postings.entry((k, v)).or_default().push(id);
            self.values.entry(k).or_default().insert(v);
        }
        let series = &self.series;
        self.ids
            .insert_unique(tsuid_hash(&tsuid), id, |&i| tsuid_hash(&series[i as usize]));
        self.series.push(tsuid);
        self.hours.push(hour);
    }

    /// Every tag pair of this metric's series with how many series
    /// carry it, in no particular order.
    pub fn pairs(&self) -> impl Iterator<Item = (Uid, Uid, usize)> + '_ {
        self.postings.iter().map(|(&(k, v), ids)| (k, v, ids.len()))
    }

    /// The base hour of each series' newest row, by id.
    pub fn newest_hours(&self) -> &[u32] {
        &self.hours
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
    /// Keyed, like every map here, by UIDs this TSD handed out, never by
    /// client input: the crate's fast hash.
    metrics: FastMap<Uid, MetricSeries>,
    /// How many series are known, over all metrics.
    count: usize,
    /// Series learnt of since the process started, by hour.
    arrivals: Arrivals,
}

/// How many clock hours of [arrivals](SeriesIndex::arrivals) are kept.
pub const ARRIVAL_HOURS: usize = 24;

/// New series per metric in one clock hour.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HourArrivals {
    /// The hour's start, in epoch seconds.
    pub hour: u32,
    /// (metric, new series), in no particular order.
    pub by_metric: Vec<(Uid, u64)>,
}

/// The last [`ARRIVAL_HOURS`] hours of arrivals, oldest first: memory is
/// one counter per metric that gained a series in one of those hours.
#[derive(Debug, Clone, Default)]
struct Arrivals {
    /// (hour start in epoch s, new series by metric), oldest first.
    hours: std::collections::VecDeque<(u32, FastMap<Uid, u64>)>,
}

impl Arrivals {
    /// Whether the clock hour starting at `hour` is one of the last
    /// [`ARRIVAL_HOURS`] at `now_s`.
    fn recent(hour: u32, now_s: u32) -> bool {
        u64::from(hour) + (ARRIVAL_HOURS as u64) * 3600 > u64::from(now_s - now_s % 3600)
    }

    fn note(&mut self, metric: Uid, now_s: u32) {
        let hour = now_s - now_s % 3600;
        if self.hours.back().is_none_or(|(h, _)| *h < hour) {
            self.hours.push_back((hour, FastMap::default()));
        }
        while let Some((front, _)) = self.hours.front()
            && !Self::recent(*front, now_s)
        {
            self.hours.pop_front();
        }
        if let Some((_, by_metric)) = self.hours.back_mut() {
            *by_metric.entry(metric).or_default() += 1;
        }
    }
}

impl Inner {
    /// The base hour of `tsuid`'s newest row, if the series is known.
    fn hour(&self, tsuid: &Tsuid) -> Option<u32> {
        let m = self.metrics.get(&tsuid.metric)?;
        m.id_of(tsuid).map(|id| m.hours[id as usize])
    }
}

/// Counts from a rebuild (the scan of the data rows it starts from).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RebuildStats {
    pub rows: u64,
    pub series: u64,
    pub bad_rows: u64,
}

/// The base hours of a series' oldest and newest rows, as a scan of the
/// data rows finds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HourSpan {
    pub first: u32,
    pub last: u32,
}

impl HourSpan {
    pub fn new(hour: u32) -> HourSpan {
        HourSpan {
            first: hour,
            last: hour,
        }
    }

    pub fn include(&mut self, hour: u32) {
        self.first = self.first.min(hour);
        self.last = self.last.max(hour);
    }
}

pub struct SeriesIndex {
    backend: Arc<dyn IndexStore>,
    widths: UidWidths,
    inner: RwLock<Inner>,
    /// Other processes record into the same backend (a cluster): a
    /// metric's entries are read again before its series are listed.
    shared: bool,
    /// On a shared backend: the backend's generation when each metric's
    /// entries were last read ([`IndexStore::generation`]).
    refreshed: parking_lot::Mutex<HashMap<Uid, u64>>,
}

impl SeriesIndex {
    /// Loads the index recorded in `backend` into memory.
    pub fn open(backend: Arc<dyn IndexStore>, widths: UidWidths) -> Result<SeriesIndex> {
        let mut inner = Inner::default();
        backend.load(&mut |bytes, hour| match Tsuid::from_bytes(bytes, &widths) {
            Ok(tsuid) => {
                // Loaded, not arrived: see the module's doc.
                insert(&mut inner, tsuid, hour);
            }
            Err(_) => tracing::warn!(tsuid = ?bytes, "skipping malformed series index entry"),
        })?;
        Ok(SeriesIndex {
            backend,
            widths,
            inner: RwLock::new(inner),
            shared: false,
            refreshed: Default::default(),
        })
    }

    /// Marks the backend as written by other processes too (several TSDs
    /// on one cluster): [`with_metric`](Self::with_metric) first reads the
    /// metric's entries again, so a series another TSD created is found by
    /// the next query. A backend with a [generation](IndexStore::generation)
    /// is read only when it moved: one cheap counter read per query.
    pub fn shared(mut self) -> SeriesIndex {
        self.shared = true;
        self
    }

    /// [`refresh_metric`](Self::refresh_metric) unless the backend's
    /// generation is the one the metric was last read at. A generation
    /// that cannot be read (the coordinator is away) means reading.
    fn refresh_metric_if_changed(&self, metric: Uid) {
        let generation = self.backend.generation().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "reading the series index's generation failed; reading the index");
            None
        });
        if let Some(g) = generation
            && self.refreshed.lock().get(&metric) == Some(&g)
        {
            return;
        }
        if self.refresh_metric(metric)
            && let Some(g) = generation
        {
            self.refreshed.lock().insert(metric, g);
        }
    }

    /// Adds the entries recorded for `metric` that memory does not know
    /// yet (by other processes), without recording anything; whether the
    /// read succeeded. A failed read leaves the memory view as it was:
    /// queries answer from it.
    fn refresh_metric(&self, metric: Uid) -> bool {
        self.refresh(&metric.to_bytes(self.widths.metric))
    }

    /// [`refresh_metric`](Self::refresh_metric) for the entries whose
    /// TSUID starts with `prefix` (every entry when it is empty).
    fn refresh(&self, prefix: &[u8]) -> bool {
        let mut found: Vec<(Tsuid, u32)> = Vec::new();
        let widths = self.widths;
        let read = self.backend.load_prefix(prefix, &mut |bytes, hour| {
            if let Ok(t) = Tsuid::from_bytes(bytes, &widths) {
                found.push((t, hour));
            }
        });
        if let Err(e) = read {
            tracing::warn!(error = %e, "reading the shared series index failed; answering from memory");
            return false;
        }
        let fresh: Vec<(Tsuid, u32)> = {
            let inner = self.inner.read();
            found
                .into_iter()
                .filter(|(t, h)| inner.hour(t).is_none_or(|known| known < *h))
                .collect()
        };
        if fresh.is_empty() {
            return true;
        }
        let mut inner = self.inner.write();
        let now = crate::model::time::now_s();
        for (tsuid, hour) in fresh {
            // Checked again under the write lock: memory may have moved on.
            if inner.hour(&tsuid).is_none_or(|known| known < hour) {
                let metric = tsuid.metric;
                if insert(&mut inner, tsuid, hour) {
                    inner.arrivals.note(metric, now);
                }
            }
        }
        true
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
        Ok(self.add_all(&[(tsuid, base_time)])?[0])
    }

    /// [`add_at`](Self::add_at) for several series at once (an append's
    /// points), with one [`IndexStore::record_all`] for those that are new
    /// or moved to a newer hour: the engine then takes one write for an
    /// append's new series, not one each. Returns, for each of `entries`,
    /// whether it was new to the index.
    pub fn add_all(&self, entries: &[(&Tsuid, u32)]) -> Result<Vec<bool>> {
        let stale = |inner: &Inner, tsuid: &Tsuid, base_time: u32| {
            inner.hour(tsuid).is_none_or(|hour| hour < base_time)
        };
        {
            let inner = self.inner.read();
            if !entries.iter().any(|&(t, b)| stale(&inner, t, b)) {
                return Ok(vec![false; entries.len()]);
            }
        }
        let mut inner = self.inner.write();
        // The newest hour of each series among `entries`, in their order.
        let mut newest: FastMap<&Tsuid, u32> = FastMap::default();
        for &(tsuid, base_time) in entries {
            if stale(&inner, tsuid, base_time) {
                let h = newest.entry(tsuid).or_insert(base_time);
                *h = (*h).max(base_time);
            }
        }
        let records: Vec<(Vec<u8>, u32)> = newest
            .iter()
            .map(|(t, &h)| (t.to_bytes(&self.widths), h))
            .collect();
        self.backend.record_all(&records)?;
        let mut is_new = Vec::with_capacity(entries.len());
        let now = crate::model::time::now_s();
        for &(tsuid, _) in entries {
            let fresh = match newest.remove(tsuid) {
                Some(hour) => {
                    let new = insert(&mut inner, tsuid.clone(), hour);
                    if new {
                        inner.arrivals.note(tsuid.metric, now);
                    }
                    new
                }
                None => false,
            };
            is_new.push(fresh);
        }
        Ok(is_new)
    }

    /// [`add_at`](Self::add_at) in memory only, for a store that cannot
    /// take writes (a database opened read-only on a full disk,
    /// `db/read_only.rs`): queries find the series at once; the entry is
    /// recorded when the log it came from is replayed into the store.
    pub fn add_unrecorded(&self, tsuid: &Tsuid, base_time: u32) {
        let mut inner = self.inner.write();
        if inner.hour(tsuid).is_none_or(|hour| hour < base_time) {
            insert(&mut inner, tsuid.clone(), base_time);
        }
    }

    /// Writes out what the backend kept back ([`IndexStore::flush`]).
    pub fn flush(&self) -> Result<()> {
        self.backend.flush()
    }

    /// Runs `f` on a metric's series (`None` if the metric has none).
    pub fn with_metric<R>(&self, metric: Uid, f: impl FnOnce(Option<&MetricSeries>) -> R) -> R {
        if self.shared {
            self.refresh_metric_if_changed(metric);
        }
        f(self.inner.read().metrics.get(&metric))
    }

    /// Every series of `metric`.
    pub fn series_of(&self, metric: Uid) -> Vec<Tsuid> {
        self.with_metric(metric, |m| m.map(|m| m.series.clone()).unwrap_or_default())
    }

    /// Every metric with at least one series (on a shared index, every
    /// metric any process recorded: the whole index is read again).
    pub fn metrics(&self) -> Vec<Uid> {
        if self.shared {
            self.refresh(&[]);
        }
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

    /// Calls `f` with every metric and its series, under the index's read
    /// lock (writers wait: keep `f` to counting). On a shared index the
    /// whole index is read again first, as [`metrics`](Self::metrics) does.
    pub fn visit_metrics(&self, f: &mut dyn FnMut(Uid, &MetricSeries)) {
        if self.shared {
            self.refresh(&[]);
        }
        for (&uid, m) in &self.inner.read().metrics {
            f(uid, m);
        }
    }

    /// The series learnt of in each of the last [`ARRIVAL_HOURS`] clock
    /// hours (see the module's doc), oldest first; hours with none are
    /// left out.
    pub fn arrivals(&self) -> Vec<HourArrivals> {
        let inner = self.inner.read();
        inner
            .arrivals
            .hours
            .iter()
            // Hours are dropped as new series arrive; with none for a day
            // the old ones are still held, and not shown.
            .filter(|(hour, _)| Arrivals::recent(*hour, crate::model::time::now_s()))
            .map(|(hour, by_metric)| HourArrivals {
                hour: *hour,
                by_metric: by_metric.iter().map(|(&m, &n)| (m, n)).collect(),
            })
            .collect()
    }

    /// Whether the series is known, and the base hour of its newest row.
    pub fn last_hour(&self, tsuid: &Tsuid) -> Option<u32> {
        self.inner.read().hour(tsuid)
    }

    pub fn len(&self) -> usize {
        self.inner.read().count
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Replaces every entry with `found` (each series → the hours of its
    /// rows), as a scan of the data rows found them (`tsdb uid metasync`,
    /// `Db::rebuild_index`).
    pub fn replace_all(&self, found: &HashMap<Tsuid, HourSpan>) -> Result<()> {
        // A rebuild finds series already known: they are not arrivals.
        let arrivals = {
            let mut inner = self.inner.write();
            self.backend.clear()?;
            std::mem::take(&mut *inner).arrivals
        };
        let restore = |index: &SeriesIndex| index.inner.write().arrivals = arrivals;
        let mut sorted: Vec<(Tsuid, u32)> =
            found.iter().map(|(t, h)| (t.clone(), h.last)).collect();
        sorted.sort();
        for (tsuid, hour) in sorted {
            if let Err(e) = self.add_at(&tsuid, hour) {
                restore(self);
                return Err(e);
            }
        }
        restore(self);
        self.backend.flush()
    }
}

/// Records `tsuid` with `hour` as its newest row's: a new series is
/// added, a known one takes the hour. Whether the series is new.
fn insert(inner: &mut Inner, tsuid: Tsuid, hour: u32) -> bool {
    let m = inner.metrics.entry(tsuid.metric).or_default();
    match m.id_of(&tsuid) {
        Some(id) => {
            m.hours[id as usize] = hour;
            false
        }
        None => {
            m.insert(tsuid, hour);
            inner.count += 1;
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_keep_the_last_day_by_hour() {
        let uid = |id| Uid::new(id, crate::model::UidWidth::DEFAULT).unwrap();
        let (m1, m2) = (uid(1), uid(2));
        let mut a = Arrivals::default();
        let t0 = 1_420_070_400; // an hour boundary
        a.note(m1, t0 + 5);
        a.note(m1, t0 + 3599);
        a.note(m2, t0 + 3600);
        let counts: Vec<(u32, u64)> = a
            .hours
            .iter()
            .map(|(h, by)| (*h, by.values().sum()))
            .collect();
        assert_eq!(counts, [(t0, 2), (t0 + 3600, 1)]);
        // 24 hours on, the first hour has left the window.
        assert!(Arrivals::recent(t0, t0 + 23 * 3600 + 10));
        assert!(!Arrivals::recent(t0, t0 + 24 * 3600));
        a.note(m2, t0 + 24 * 3600);
        let hours: Vec<u32> = a.hours.iter().map(|(h, _)| *h).collect();
        assert_eq!(hours, [t0 + 3600, t0 + 24 * 3600]);
    }
}
