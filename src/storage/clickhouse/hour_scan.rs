//! Scans of one metric's data rows over a range of hours, answered from
//! the read cache hour by hour (docs/scale-out.md, "The read cache").
//!
//! A query over many series reads by scanning the metric's rows of its
//! range. Each hour safely past that such a scan reads is read whole
//! (every series of the metric in that hour, not only the scan's part of
//! it) and kept as one entry of the read cache, stamped and checked
//! exactly as a cached row is: the hour's bucket is the bucket of each of
//! its rows (metric and base hour), so any write that would change one of
//! its rows, a new row included, makes it stale. Hours not safely past,
//! or while nothing vouches for the change counters, are read from
//! ClickHouse as before.

use super::read_cache::{self, Stamp};
use super::{DataRows, Inner, Scan};
use crate::model::row_span::ROW_SPAN_SECS;
use crate::storage::{KeyValue, Result, ScanRange, Table};

/// Longest range of hours a scan reads through the cache; a longer one
/// (a year, mostly empty hours for a sparse metric) reads as a plain
/// scan, rather than keep an entry per empty hour.
const MAX_CACHED_SCAN_HOURS: u32 = 31 * 24;

/// The shape of a scan the cache can answer: the rows of one metric
/// (salt included) from the hour based at `first` to the one at `last`
/// (row base times, [`ROW_SPAN_SECS`] apart).
pub(super) struct ScanHours {
    /// Salt and metric: every row key of the range begins with it.
    prefix: Vec<u8>,
    first: u32,
    last: u32,
}

impl Inner {
    /// The hours `range` spans when it lies within one metric's rows and
    /// the read cache is on; `None` otherwise (read as a plain scan).
    pub(super) fn scan_hours(&self, range: &ScanRange) -> Option<ScanHours> {
        if !self.cache.enabled() {
            return None;
        }
        hours_of(&*self.rows, range)
    }
}

/// The hours `range` spans when it lies within one metric's rows, as
/// `rows` places hours in keys.
fn hours_of(rows: &dyn DataRows, range: &ScanRange) -> Option<ScanHours> {
    let (at, first) = rows.hour(&range.start)?;
    let stop = &range.stop;
    if stop.len() < at + 4 || stop[..at] != range.start[..at] {
        return None;
    }
    let stop_hour = u32::from_be_bytes(stop[at..at + 4].try_into().ok()?);
    // A stop that is exactly an hour's prefix ends before that hour.
    let last = if stop.len() == at + 4 {
        stop_hour.checked_sub(ROW_SPAN_SECS)?
    } else {
        stop_hour
    };
    // Row base times only, and the hour after `last` must exist: a
    // whole hour's scan stops at the next one's prefix.
    if first % ROW_SPAN_SECS != 0
        || last % ROW_SPAN_SECS != 0
        || last < first
        || last > u32::MAX - ROW_SPAN_SECS
        || (last - first) / ROW_SPAN_SECS >= MAX_CACHED_SCAN_HOURS
    {
        return None;
    }
    let prefix = &range.start[..at];
    // The layout must place the hour where it was read from, for the
    // first hour and the one after the last (a key without one, or
    // rows without hours, read as a plain scan).
    for hour in [first, last + ROW_SPAN_SECS] {
        if rows.hour(&hour_key(prefix, hour)) != Some((at, hour)) {
            return None;
        }
    }
    Some(ScanHours {
        prefix: prefix.to_vec(),
        first,
        last,
    })
}

/// The row key prefix of `hour`'s rows of the metric `prefix`.
fn hour_key(prefix: &[u8], hour: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + 4);
    k.extend_from_slice(prefix);
    k.extend_from_slice(&hour.to_be_bytes());
    k
}

/// A scan from ClickHouse under way, gathering the whole hours it reads
/// for the cache.
struct Fill<'a> {
    scan: Scan<'a>,
    /// The first hour read, and each hour's stamp from before the read
    /// (`None`: the hour is not kept).
    first: u32,
    stamps: Vec<Option<Stamp>>,
    /// The hour being gathered, its rows so far and their bytes; `keep`
    /// false once it grew past what the cache could hold.
    current: u32,
    rows: Vec<KeyValue>,
    bytes: usize,
    keep: bool,
}

impl Fill<'_> {
    fn keeps_any(&self) -> bool {
        self.stamps.iter().any(Option::is_some)
    }

    /// Keeps the hours before `hour` (those the scan went past without a
    /// row are empty), and starts gathering `hour`.
    fn advance_to(&mut self, hour: u32, prefix: &[u8], store: &Inner) -> usize {
        let mut kept = 0;
        while self.current < hour {
            let rows = std::mem::take(&mut self.rows);
            let stamp = self.stamps[((self.current - self.first) / ROW_SPAN_SECS) as usize];
            if let (true, Some(stamp)) = (self.keep, stamp) {
                store
                    .cache
                    .put_hour(&hour_key(prefix, self.current), rows, stamp);
                kept += 1;
            }
            self.current += ROW_SPAN_SECS;
            self.bytes = 0;
            self.keep = true;
        }
        kept
    }

    fn gather(&mut self, key: &[u8], value: &[u8], store: &Inner) {
        if !self.keep {
            return;
        }
        self.bytes += key.len() + value.len();
        if store.cache.could_keep_hour(self.bytes, self.rows.len() + 1) {
            self.rows.push((key.to_vec(), value.to_vec()));
        } else {
            self.keep = false;
            self.rows = Vec::new();
        }
    }
}

/// A scan's own key range: from `start` (inclusive) to `stop` (exclusive).
struct Bounds {
    start: Vec<u8>,
    stop: Vec<u8>,
}

impl Bounds {
    fn contains(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && key < self.stop.as_slice()
    }
}

/// [`KvStore::scan`](crate::storage::KvStore::scan) of one metric's data
/// rows over a range of hours through the read cache.
pub(super) struct HourScan<'a> {
    store: &'a Inner,
    prefix: Vec<u8>,
    /// The next hour not yet answered, and the last one.
    next_hour: u32,
    last: u32,
    /// The scan's own bounds, within the whole hours read.
    bounds: Bounds,
    /// This TSD's clock when the scan began.
    now: u32,
    /// Whether the change counters were fenced (asked once, when an hour
    /// safely past is first met).
    fenced: Option<bool>,
    /// Rows of a cached hour left to hand out (within the bounds).
    out: std::vec::IntoIter<KeyValue>,
    fill: Option<Fill<'a>>,
    done: bool,
    started: std::time::Instant,
    hours_cached: u32,
    hours_kept: usize,
}

impl<'a> HourScan<'a> {
    pub(super) fn new(store: &'a Inner, hours: ScanHours, range: &ScanRange) -> HourScan<'a> {
        HourScan {
            store,
            prefix: hours.prefix,
            next_hour: hours.first,
            last: hours.last,
            bounds: Bounds {
                start: range.start.clone(),
                stop: range.stop.clone(),
            },
            now: crate::model::time::now_s(),
            fenced: None,
            out: Vec::new().into_iter(),
            fill: None,
            done: false,
            started: std::time::Instant::now(),
            hours_cached: 0,
            hours_kept: 0,
        }
    }

    /// The stamp hour `hour` is served or kept under, if it may be.
    fn stamp(&mut self, hour: u32) -> Option<Stamp> {
        if !read_cache::cacheable(hour, self.now) {
            return None;
        }
        let fenced = *self
            .fenced
            .get_or_insert_with(|| self.store.coordinator.fence());
        if !fenced {
            return None;
        }
        let bucket = read_cache::bucket_of(&self.prefix, hour);
        self.store.cache.stamp(&*self.store.coordinator, bucket)
    }

    /// Answers the next hour from the cache, or starts reading from it on
    /// from ClickHouse: whole hours, up to the next one cached, when they
    /// may be kept; else the rest of the range as it is.
    fn start_next(&mut self) {
        let hour = self.next_hour;
        let Some(stamp) = self.stamp(hour) else {
            let from = hour_key(&self.prefix, hour).max(self.bounds.start.clone());
            self.fill = Some(Fill {
                scan: Scan::new(self.store, Table::Data, from, self.bounds.stop.clone()),
                first: hour,
                stamps: Vec::new(),
                current: hour,
                rows: Vec::new(),
                bytes: 0,
                keep: false,
            });
            self.next_hour = self.last;
            self.done = true;
            return;
        };
        if let Some(rows) = self
            .store
            .cache
            .get_hour(&hour_key(&self.prefix, hour), stamp)
        {
            let within: Vec<KeyValue> = rows
                .iter()
                .filter(|(k, _)| self.bounds.contains(k))
                .cloned()
                .collect();
            self.out = within.into_iter();
            self.hours_cached += 1;
            self.advance();
            return;
        }
        // Stamps of every hour read, taken before the read begins.
        let mut stamps = vec![Some(stamp)];
        let mut end = hour;
        while end < self.last {
            let next = end + ROW_SPAN_SECS;
            let Some(s) = self.stamp(next) else { break };
            if self
                .store
                .cache
                .get_hour(&hour_key(&self.prefix, next), s)
                .is_some()
            {
                break;
            }
            stamps.push(Some(s));
            end = next;
        }
        self.fill = Some(Fill {
            scan: Scan::new(
                self.store,
                Table::Data,
                hour_key(&self.prefix, hour),
                hour_key(&self.prefix, end + ROW_SPAN_SECS),
            ),
            first: hour,
            stamps,
            current: hour,
            rows: Vec::new(),
            bytes: 0,
            keep: true,
        });
        self.next_hour = end;
        self.advance();
    }

    /// Past `next_hour`.
    fn advance(&mut self) {
        if self.next_hour >= self.last {
            self.done = true;
        } else {
            self.next_hour += ROW_SPAN_SECS;
        }
    }

    fn finished(&self) {
        tracing::debug!(
            hours_cached = self.hours_cached,
            hours_kept = self.hours_kept,
            micros = self.started.elapsed().as_micros() as u64,
            "data rows scanned through the read cache"
        );
    }
}

impl Iterator for HourScan<'_> {
    type Item = Result<KeyValue>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(kv) = self.out.next() {
                return Some(Ok(kv));
            }
            if let Some(fill) = &mut self.fill {
                match fill.scan.next() {
                    Some(Ok((key, value))) => {
                        let at = self.prefix.len();
                        // Every key between two hours' prefixes has one.
                        let hour = key
                            .get(at..at + 4)
                            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                        if let (true, Some(hour)) = (fill.keeps_any(), hour) {
                            // The hour whose range holds the key (row
                            // keys hold row base times: itself).
                            let hour = hour - hour % ROW_SPAN_SECS;
                            self.hours_kept += fill.advance_to(hour, &self.prefix, self.store);
                            fill.gather(&key, &value, self.store);
                        }
                        if self.bounds.contains(&key) {
                            return Some(Ok((key, value)));
                        }
                        continue;
                    }
                    Some(Err(e)) => {
                        self.fill = None;
                        self.done = true;
                        return Some(Err(e));
                    }
                    None => {
                        if fill.keeps_any() {
                            let after = fill.first + fill.stamps.len() as u32 * ROW_SPAN_SECS;
                            self.hours_kept += fill.advance_to(after, &self.prefix, self.store);
                        }
                        self.fill = None;
                        continue;
                    }
                }
            }
            if self.done {
                self.finished();
                return None;
            }
            self.start_next();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys of one metric byte, a base hour, then tags.
    struct OneByteMetric;
    impl DataRows for OneByteMetric {
        fn place(&self, key: &[u8]) -> (Vec<u8>, u32) {
            (key.to_vec(), self.hour(key).map_or(0, |h| h.1))
        }
        fn hour(&self, key: &[u8]) -> Option<(usize, u32)> {
            let b = key.get(1..5)?;
            Some((1, u32::from_be_bytes([b[0], b[1], b[2], b[3]])))
        }
        fn rollup_base(&self, _: &[u8]) -> u32 {
            0
        }
        fn merge(&self, _: &[u8], versions: &[&[u8]]) -> Option<Vec<u8>> {
            versions.last().map(|v| v.to_vec())
        }
    }

    fn key(metric: u8, hour: u32, tags: &[u8]) -> Vec<u8> {
        [&[metric][..], &hour.to_be_bytes(), tags].concat()
    }

    fn hours(start: Vec<u8>, stop: Vec<u8>) -> Option<(Vec<u8>, u32, u32)> {
        hours_of(&OneByteMetric, &ScanRange::new(start, stop)).map(|h| (h.prefix, h.first, h.last))
    }

    /// What a query's scan of listed series asks (from the first hour and
    /// lowest series to past the last hour's highest) is read hour by
    /// hour; anything else as a plain scan.
    #[test]
    fn only_one_metrics_whole_hours_are_read_through_the_cache() {
        let h = 1_356_998_400;
        assert_eq!(
            hours(key(7, h, &[1]), key(7, h + 7200, &[9])),
            Some((vec![7], h, h + 7200))
        );
        // A stop at an hour's very prefix ends before that hour.
        assert_eq!(
            hours(key(7, h, &[]), key(7, h + 3600, &[])),
            Some((vec![7], h, h))
        );
        // Two metrics, a stop before the start, no stop, a time that is
        // no row base, more than 31 days of hours, the last hour there is.
        assert_eq!(hours(key(7, h, &[1]), key(8, h, &[1])), None);
        assert_eq!(hours(key(7, h + 3600, &[1]), key(7, h, &[1])), None);
        assert_eq!(hours(key(7, h, &[1]), Vec::new()), None);
        assert_eq!(hours(key(7, h + 1, &[1]), key(7, h + 3600, &[1])), None);
        assert_eq!(
            hours(key(7, h, &[1]), key(7, h + 31 * 24 * 3600, &[1])),
            None
        );
        assert!(hours(key(7, h, &[1]), key(7, h + (31 * 24 - 1) * 3600, &[1])).is_some());
        let top = u32::MAX - u32::MAX % 3600;
        assert_eq!(hours(key(7, top, &[1]), key(7, top, &[9])), None);
        // Keys too short to hold an hour.
        assert_eq!(hours(vec![7, 0], key(7, h, &[1])), None);
        assert_eq!(hours(key(7, h, &[1]), vec![7, 0x50]), None);
    }
}
