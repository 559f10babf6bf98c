//! Data rows this TSD read from ClickHouse lately, answered again without
//! a round trip while no TSD can have changed them (docs/scale-out.md,
//! "The read cache").
//!
//! Only rows of hours safely past are kept: a row whose base hour lies
//! more than [`CACHED_AFTER_S`] before this TSD's clock. Rows of recent
//! hours, which steady ingest rewrites every flush, are always read from
//! ClickHouse. Whoever inserts a row of an hour more than
//! [`LATE_AFTER_S`] old by its own clock (a late point, a delete's
//! tombstone, an fsck repair, an import of old data) bumps, once the
//! insert returned, the change counter of the row's bucket in the
//! coordinator (`rows-NN`, by metric and hour); so does a retention run
//! that dropped a partition, for every bucket. The gap between the two
//! ages is the clock skew tolerated between TSDs (one hour).
//!
//! Every TSD watches the counters ([`Coordinator::watched`]) and fences
//! them ([`Coordinator::fence`]) before it serves a cached row. A cached
//! row is stamped with its bucket's watched value taken *before* the read
//! that filled it, and served only while the stamp is still the current
//! one: a bump seen during or after the read makes it stale. With no
//! watched value (the session is disconnected, the watch not yet set)
//! nothing is served or kept, and a reconnection changes every value.
//!
//! This process's own inserts move a local counter of their buckets at
//! once, since its own notification comes a moment later.
//!
//! Besides rows, it keeps whole hours of a metric's rows that scans read
//! (hour_scan.rs), under the bucket every row of the hour has.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::storage::KeyValue;
use crate::storage::coordinator::Coordinator;

/// Change counters the data rows are spread over: a bump makes every
/// TSD read again the cached rows of its bucket only. More buckets mean
/// fewer rows read again per bump and a longer ZooKeeper transaction per
/// flush of late rows (one `setData` per bucket a flush touched).
pub(super) const BUCKETS: usize = 64;

/// A row is kept only if its base hour is more than this many seconds
/// before the reading TSD's clock.
pub(super) const CACHED_AFTER_S: u32 = 2 * 3600;
/// An insert of a row whose base hour is more than this many seconds
/// before the writing TSD's clock (read once the insert returned) bumps
/// its bucket. Below [`CACHED_AFTER_S`] by the clock skew tolerated.
pub(super) const LATE_AFTER_S: u32 = 3600;

/// Bytes counted per entry beyond its key and value (map and order
/// entries, the stamp).
const ENTRY_OVERHEAD: usize = 96;
/// Bytes counted per row of a cached hour beyond its key and value (the
/// two vectors' headers).
const ROW_OVERHEAD: usize = 48;

/// Whether a reader at `now_s` may keep a row of base hour `base`.
pub(super) fn cacheable(base: u32, now_s: u32) -> bool {
    u64::from(base) + u64::from(CACHED_AFTER_S) < u64::from(now_s)
}

/// Whether a writer whose insert of a row of base hour `base` returned at
/// `now_s` must bump the row's bucket.
pub(super) fn late(base: u32, now_s: u32) -> bool {
    u64::from(base) + u64::from(LATE_AFTER_S) < u64::from(now_s)
}

/// The bucket of a data row: `metric` is the key before its base hour
/// (salt and metric UID), so one metric's hours spread over the buckets
/// and a late write into one hour leaves the metric's other hours cached.
pub(super) fn bucket_of(metric: &[u8], base: u32) -> usize {
    let mut bytes = Vec::with_capacity(metric.len() + 4);
    bytes.extend_from_slice(metric);
    bytes.extend_from_slice(&base.to_be_bytes());
    (crate::model::hash::hash_bytes(0x7277_6361_6368_6531, &bytes) % BUCKETS as u64) as usize
}

/// The coordinator's change counter of `bucket`.
pub(super) fn counter_name(bucket: usize) -> String {
    format!("rows-{bucket:02}")
}

/// What a cached row was read under: equal to the current stamp of its
/// bucket only if no insert into the bucket is known since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    watched: u64,
    local: u64,
}

/// What is kept under one key.
enum Cached {
    /// One data row; `None`: the row does not exist (a query asks for
    /// every hour of its range, most of them empty for a sparse series).
    Row(Option<Vec<u8>>),
    /// Every row of one metric's hour, in key order (empty: the hour has
    /// none), as a scan of the whole hour found them.
    Hour(Arc<Vec<KeyValue>>),
}

impl Cached {
    fn bytes(&self) -> usize {
        match self {
            Cached::Row(v) => v.as_ref().map_or(0, Vec::len),
            Cached::Hour(rows) => rows
                .iter()
                .map(|(k, v)| k.len() + v.len() + ROW_OVERHEAD)
                .sum(),
        }
    }
}

/// What an entry is kept under: rows by their key, hours by the row key
/// prefix of the hour (salt, metric, base hour), apart.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum CacheKey {
    Row(Vec<u8>),
    Hour(Vec<u8>),
}

impl CacheKey {
    fn len(&self) -> usize {
        match self {
            CacheKey::Row(k) | CacheKey::Hour(k) => k.len(),
        }
    }
}

struct Entry {
    value: Cached,
    stamp: Stamp,
    /// Its place in [`Entries::order`].
    used: u64,
}

#[derive(Default)]
struct Entries {
    map: HashMap<CacheKey, Entry>,
    /// Keys by last use, least recent first.
    order: BTreeMap<u64, CacheKey>,
    next_use: u64,
    bytes: usize,
}

impl Entries {
    fn size(key: &CacheKey, value: &Cached) -> usize {
        key.len() * 2 + value.bytes() + ENTRY_OVERHEAD
    }

    fn remove(&mut self, key: &CacheKey) {
        if let Some(e) = self.map.remove(key) {
            self.order.remove(&e.used);
            self.bytes -= Self::size(key, &e.value);
        }
    }

    /// The entry of `key` if it was kept under `stamp`, marked used now.
    fn use_fresh(&mut self, key: &CacheKey, stamp: Stamp) -> Option<&Cached> {
        let Entries {
            map,
            order,
            next_use,
            ..
        } = self;
        let entry = map.get_mut(key)?;
        if entry.stamp != stamp {
            return None;
        }
        order.remove(&entry.used);
        *next_use += 1;
        entry.used = *next_use;
        order.insert(entry.used, key.clone());
        Some(&entry.value)
    }
}

pub(super) struct ReadCache {
    budget: usize,
    entries: Mutex<Entries>,
    /// Moved by this process's own inserts, per bucket.
    local: Vec<AtomicU64>,
}

impl ReadCache {
    /// A cache of at most `budget` bytes; 0 keeps nothing.
    pub(super) fn new(budget: usize) -> ReadCache {
        ReadCache {
            budget,
            entries: Mutex::new(Entries::default()),
            local: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    pub(super) fn enabled(&self) -> bool {
        self.budget > 0
    }

    /// The current stamp of `bucket`; `None` when nothing vouches for
    /// its rows (no watch).
    pub(super) fn stamp(&self, coordinator: &dyn Coordinator, bucket: usize) -> Option<Stamp> {
        if !self.enabled() {
            return None;
        }
        // The local counter first: an own insert that lands between the
        // two reads still changes the stamp taken after it.
        let local = self.local[bucket].load(Ordering::SeqCst);
        let watched = coordinator.watched(&counter_name(bucket))?;
        Some(Stamp { watched, local })
    }

    /// The cached row of `key` if it was read under `stamp` (the current
    /// one): `Some(None)` for a row known not to exist.
    pub(super) fn get(&self, key: &[u8], stamp: Stamp) -> Option<Option<Vec<u8>>> {
        match self
            .entries
            .lock()
            .use_fresh(&CacheKey::Row(key.to_vec()), stamp)?
        {
            Cached::Row(value) => Some(value.clone()),
            Cached::Hour(_) => None,
        }
    }

    /// Keeps what a read that began under `stamp` found for `key`,
    /// evicting the least recently used entries beyond the budget.
    pub(super) fn put(&self, key: &[u8], value: Option<Vec<u8>>, stamp: Stamp) {
        self.keep(CacheKey::Row(key.to_vec()), Cached::Row(value), stamp);
    }

    /// Every row of the hour whose row keys begin with `hour` (salt,
    /// metric, base hour), in key order, if a scan of the whole hour that
    /// began under `stamp` (the current one) found them.
    pub(super) fn get_hour(&self, hour: &[u8], stamp: Stamp) -> Option<Arc<Vec<KeyValue>>> {
        match self
            .entries
            .lock()
            .use_fresh(&CacheKey::Hour(hour.to_vec()), stamp)?
        {
            Cached::Hour(rows) => Some(rows.clone()),
            Cached::Row(_) => None,
        }
    }

    /// Keeps every row (key order) a scan of the whole hour `hour` that
    /// began under `stamp` found; an hour bigger than the budget is not
    /// kept.
    pub(super) fn put_hour(&self, hour: &[u8], rows: Vec<KeyValue>, stamp: Stamp) {
        self.keep(
            CacheKey::Hour(hour.to_vec()),
            Cached::Hour(Arc::new(rows)),
            stamp,
        );
    }

    /// Whether an hour of rows of `bytes` (keys and values) could be
    /// kept at all: a scan stops gathering an hour for the cache past it.
    pub(super) fn could_keep_hour(&self, bytes: usize, rows: usize) -> bool {
        bytes + rows * ROW_OVERHEAD + ENTRY_OVERHEAD <= self.budget
    }

    fn keep(&self, key: CacheKey, value: Cached, stamp: Stamp) {
        let size = Entries::size(&key, &value);
        if size > self.budget {
            return;
        }
        let mut e = self.entries.lock();
        e.remove(&key);
        while e.bytes + size > self.budget {
            let Some((_, oldest)) = e.order.pop_first() else {
                break;
            };
            e.remove(&oldest);
        }
        e.next_use += 1;
        let used = e.next_use;
        e.order.insert(used, key.clone());
        e.bytes += size;
        e.map.insert(key, Entry { value, stamp, used });
    }

    /// This process inserted rows into `buckets`: what it cached of them
    /// is stale from now on, whether or not the insert went through.
    pub(super) fn wrote(&self, buckets: &[usize]) {
        for b in buckets {
            self.local[*b].fetch_add(1, Ordering::SeqCst);
        }
    }

    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.entries.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::coordinator::LocalCoordinator;

    /// A coordinator without a watch (the trait's default `watched`), as
    /// a TSD whose ZooKeeper session is disconnected.
    struct Unwatched(LocalCoordinator);
    impl Coordinator for Unwatched {
        fn lock(&self, name: &str) -> crate::storage::Result<Box<dyn std::any::Any + Send>> {
            self.0.lock(name)
        }
        fn get_or_create(&self, name: &str, init: &[u8]) -> crate::storage::Result<Vec<u8>> {
            self.0.get_or_create(name, init)
        }
        fn bump(&self, name: &str) -> crate::storage::Result<()> {
            self.0.bump(name)
        }
        fn generation(&self, name: &str) -> crate::storage::Result<u64> {
            self.0.generation(name)
        }
    }

    #[test]
    fn a_bump_of_the_bucket_or_an_own_insert_makes_a_row_stale() {
        let coord = LocalCoordinator::new();
        let cache = ReadCache::new(1 << 20);
        let key = b"row".as_slice();
        let b = bucket_of(key, 0);
        let before = cache.stamp(&coord, b).unwrap();
        cache.put(key, Some(b"v1".to_vec()), before);
        assert_eq!(cache.get(key, before), Some(Some(b"v1".to_vec())));
        assert_eq!(cache.stamp(&coord, b), Some(before));

        // Another TSD's insert, seen through the coordinator.
        coord.bump(&counter_name(b)).unwrap();
        let after = cache.stamp(&coord, b).unwrap();
        assert_ne!(after, before);
        assert_eq!(cache.get(key, after), None);

        // This process's own insert.
        cache.put(key, None, after);
        assert_eq!(cache.get(key, after), Some(None));
        cache.wrote(&[b]);
        let own = cache.stamp(&coord, b).unwrap();
        assert_eq!(cache.get(key, own), None);

        // Another bucket's bump leaves the row alone.
        cache.put(key, Some(b"v2".to_vec()), own);
        coord.bump(&counter_name((b + 1) % BUCKETS)).unwrap();
        assert_eq!(
            cache.get(key, cache.stamp(&coord, b).unwrap()),
            Some(Some(b"v2".to_vec()))
        );
    }

    /// A row is kept only two hours past, a write announced one hour
    /// past: a writer whose clock lags the reader's by up to an hour still
    /// announces every write into an hour the reader may keep.
    #[test]
    fn only_hours_safely_past_are_kept_and_writes_into_them_announced() {
        let hour = 1_356_998_400;
        assert!(!cacheable(hour, hour + 2 * 3600));
        assert!(cacheable(hour, hour + 2 * 3600 + 1));
        assert!(!late(hour, hour + 3600));
        assert!(late(hour, hour + 3600 + 1));
        for skew in [0, 1, 1800, 3599] {
            for reader_now in hour..hour + 4 * 3600 {
                if cacheable(hour, reader_now) {
                    assert!(late(hour, reader_now - skew), "{skew} {reader_now}");
                }
            }
        }
        // One metric's hours spread over the buckets.
        let buckets: std::collections::HashSet<usize> = (0..24)
            .map(|h| bucket_of(b"\0\0\x01", hour + h * 3600))
            .collect();
        assert!(buckets.len() > 12, "{buckets:?}");
    }

    /// A whole hour is kept apart from a row under the same bytes, goes
    /// stale with its bucket as a row does, and counts against the same
    /// budget.
    #[test]
    fn a_whole_hour_is_stamped_and_budgeted_as_a_row() {
        let coord = LocalCoordinator::new();
        let hour = b"\0\0\x01\x50\xe2\x18\xf0".as_slice();
        let rows: Vec<KeyValue> = (0u8..3)
            .map(|i| ([hour, &[i]].concat(), vec![i; 10]))
            .collect();
        let b = bucket_of(&hour[..3], 1_356_994_800);
        let cache = ReadCache::new(1 << 20);
        let before = cache.stamp(&coord, b).unwrap();
        cache.put_hour(hour, rows.clone(), before);
        assert_eq!(cache.get_hour(hour, before).as_deref(), Some(&rows));
        // Not a row, and a row under the same bytes is not the hour.
        assert_eq!(cache.get(hour, before), None);
        cache.put(hour, None, before);
        assert_eq!(cache.get(hour, before), Some(None));
        assert_eq!(cache.get_hour(hour, before).as_deref(), Some(&rows));

        coord.bump(&counter_name(b)).unwrap();
        let after = cache.stamp(&coord, b).unwrap();
        assert_eq!(cache.get_hour(hour, after), None);

        // An empty hour is kept too; one past the budget is not.
        cache.put_hour(hour, Vec::new(), after);
        assert_eq!(cache.get_hour(hour, after).as_deref(), Some(&Vec::new()));
        let small = ReadCache::new(200);
        assert!(!small.could_keep_hour(300, 1));
        small.put_hour(hour, rows.clone(), small.stamp(&coord, b).unwrap());
        assert_eq!(small.get_hour(hour, small.stamp(&coord, b).unwrap()), None);
        assert_eq!(small.bytes(), 0);
    }

    #[test]
    fn without_a_watch_or_a_budget_nothing_is_stamped() {
        let unwatched = Unwatched(LocalCoordinator::new());
        assert_eq!(ReadCache::new(1 << 20).stamp(&unwatched, 0), None);
        assert_eq!(ReadCache::new(0).stamp(&LocalCoordinator::new(), 0), None);
    }

    #[test]
    fn the_least_recently_used_rows_go_beyond_the_budget() {
        let coord = LocalCoordinator::new();
        let one = Entries::size(
            &CacheKey::Row(b"k0".to_vec()),
            &Cached::Row(Some(vec![0; 100])),
        );
        let cache = ReadCache::new(one * 3);
        let keys: Vec<Vec<u8>> = (0..4).map(|i| format!("k{i}").into_bytes()).collect();
        let stamp = |k: &[u8]| cache.stamp(&coord, bucket_of(k, 0)).unwrap();
        for k in &keys[..3] {
            cache.put(k, Some(vec![0; 100]), stamp(k));
        }
        // k0 used again: k1 is now the least recently used.
        assert!(cache.get(&keys[0], stamp(&keys[0])).is_some());
        cache.put(&keys[3], Some(vec![0; 100]), stamp(&keys[3]));
        assert!(cache.get(&keys[1], stamp(&keys[1])).is_none());
        for k in [&keys[0], &keys[2], &keys[3]] {
            assert!(cache.get(k, stamp(k)).is_some());
        }
        assert_eq!(cache.bytes(), one * 3);
        // A row bigger than the whole budget is not kept.
        cache.put(b"big", Some(vec![0; one * 3]), stamp(b"big"));
        assert!(cache.get(b"big", stamp(b"big")).is_none());
        assert_eq!(cache.bytes(), one * 3);
    }
}
