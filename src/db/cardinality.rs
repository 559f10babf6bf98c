//! `Db::cardinality`: how many series there are and where they come
//! from, for `/api/stats/cardinality` and Prometheus' `status/tsdb`:
//! series by metric, by tag key, by tag pair, distinct values and their
//! names' bytes per tag key, and series new per hour per metric, each list cut
//! to its top N.
//!
//! Everything is counted from the in-memory series index in one pass
//! under its read lock (the metric's postings give each tag pair's
//! series count without touching a series). Memory: one counter per
//! distinct tag pair of the whole index (the pairs summed over metrics),
//! one per tag key, and a heap of N per list; never a copy of the series.
//! Names are resolved afterwards, outside the lock: only the top N's,
//! plus each distinct tag value's length for the bytes per tag key (from
//! one scan of the tag value names when there are many, rather than one
//! lookup each, which on a cluster would be a round trip each).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::{Db, Result};
use crate::index::HourArrivals;
use crate::model::hash::FastMap;
use crate::model::{Uid, UidKind};

/// Most entries a list may be asked for (`topN`, `limit`).
pub(crate) const MAX_TOP_N: usize = 10_000;

/// Past this many distinct tag values, their lengths come from one scan
/// of the UID table rather than one lookup each.
const SCAN_NAMES_OVER: usize = 4096;

/// A name and a count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counted {
    pub name: String,
    pub count: u64,
}

/// A tag key: the series carrying it and its distinct values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagKeyCount {
    pub tagk: String,
    pub series: u64,
    pub values: u64,
}

/// A tag pair and the series carrying it, over every metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagPairCount {
    pub tagk: String,
    pub tagv: String,
    pub series: u64,
}

/// A metric's new series per clock hour (see `crate::index`'s
/// arrivals: series this TSD learnt of since it started).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricArrivals {
    pub metric: String,
    /// Over the hours listed.
    pub total: u64,
    /// (hour start in epoch seconds, new series), oldest first, hours
    /// with none left out.
    pub hours: Vec<(u32, u64)>,
}

/// The cardinality of the whole index, lists cut to `top_n`, each sorted
/// by count (largest first), then by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cardinality {
    pub top_n: usize,
    pub series: u64,
    pub metrics: u64,
    /// Distinct tag pairs over every metric.
    pub tag_pairs: u64,
    pub by_metric: Vec<Counted>,
    /// Tag keys by the series carrying them.
    pub by_tag_key: Vec<TagKeyCount>,
    /// Tag keys by their distinct values.
    pub values_by_tag_key: Vec<Counted>,
    /// Tag keys by the bytes of their distinct values' names, each
    /// counted once (Prometheus 2.42's `memoryInBytesByLabelName`).
    pub bytes_by_tag_key: Vec<Counted>,
    pub by_tag_pair: Vec<TagPairCount>,
    /// The bytes of the metric names (Prometheus counts the name as the
    /// label `__name__`).
    pub metric_name_bytes: u64,
    pub new_by_metric: Vec<MetricArrivals>,
    /// Base hours (epoch s) of the oldest and the newest of the series'
    /// newest rows, when any is known.
    pub newest_rows: Option<(u32, u32)>,
}

/// The N largest of what is pushed, ties kept by smaller key.
struct Top<K: Ord + Copy> {
    n: usize,
    heap: BinaryHeap<Reverse<(u64, Reverse<K>)>>,
}

impl<K: Ord + Copy> Top<K> {
    fn new(n: usize) -> Self {
        Top {
            n,
            heap: BinaryHeap::with_capacity(n + 1),
        }
    }

    fn push(&mut self, count: u64, key: K) {
        if self.n == 0 {
            return;
        }
        let item = Reverse((count, Reverse(key)));
        if self.heap.len() < self.n {
            self.heap.push(item);
        } else if self.heap.peek().is_some_and(|smallest| item < *smallest) {
            self.heap.pop();
            self.heap.push(item);
        }
    }

    fn into_vec(self) -> Vec<(u64, K)> {
        self.heap
            .into_iter()
            .map(|Reverse((c, Reverse(k)))| (c, k))
            .collect()
    }
}

/// Largest count first, then by name.
fn sort_by_count<T>(v: &mut [T], key: impl Fn(&T) -> (u64, &str)) {
    v.sort_by(|a, b| {
        let (ca, na) = key(a);
        let (cb, nb) = key(b);
        cb.cmp(&ca).then_with(|| na.cmp(nb))
    });
}

impl Db {
    /// Counts the series index (see the module's doc); names that no
    /// longer resolve (a deleted UID) are shown as their hex UID.
    pub fn cardinality(&self, top_n: usize) -> Result<Cardinality> {
        let n = top_n.min(MAX_TOP_N);
        let mut series = 0u64;
        let mut metrics = 0u64;
        let mut by_metric = Top::<Uid>::new(n);
        let mut metric_names: Vec<Uid> = Vec::new();
        let mut pairs: FastMap<(Uid, Uid), u64> = FastMap::default();
        let mut newest: Option<(u32, u32)> = None;
        self.index().visit_metrics(&mut |metric, m| {
            let len = m.len() as u64;
            if len == 0 {
                return;
            }
            series += len;
            metrics += 1;
            by_metric.push(len, metric);
            metric_names.push(metric);
            for (k, v, count) in m.pairs() {
                *pairs.entry((k, v)).or_default() += count as u64;
            }
            for &h in m.newest_hours().iter().filter(|&&h| h > 0) {
                newest = Some(match newest {
                    None => (h, h),
                    Some((lo, hi)) => (lo.min(h), hi.max(h)),
                });
            }
        });
        let uids = self.uids();
        let name = |kind: UidKind, uid: Uid| -> String {
            match uids.get_name(kind, uid) {
                Ok(n) => n.to_string(),
                Err(_) => uid.to_hex(uids.width(kind)),
            }
        };
        // Per tag key: series, distinct values, bytes of values.
        let value_len = self.value_lengths(pairs.keys().map(|&(_, v)| v))?;
        let mut keys: FastMap<Uid, (u64, u64, u64)> = FastMap::default();
        let mut by_pair = Top::<(Uid, Uid)>::new(n);
        for (&(k, v), &count) in &pairs {
            let e = keys.entry(k).or_default();
            e.0 += count;
            e.1 += 1;
            e.2 += u64::from(value_len.get(&v).copied().unwrap_or(0));
            by_pair.push(count, (k, v));
        }
        let tag_pairs = pairs.len() as u64;
        drop(pairs);
        let (mut key_series, mut key_values, mut key_bytes) =
            (Top::<Uid>::new(n), Top::<Uid>::new(n), Top::<Uid>::new(n));
        for (&k, &(s, v, b)) in &keys {
            key_series.push(s, k);
            key_values.push(v, k);
            key_bytes.push(b, k);
        }
        let mut metric_name_bytes = 0u64;
        for &m in &metric_names {
            metric_name_bytes += name(UidKind::Metric, m).len() as u64;
        }

        let mut by_metric: Vec<Counted> = by_metric
            .into_vec()
            .into_iter()
            .map(|(count, m)| Counted {
                name: name(UidKind::Metric, m),
                count,
            })
            .collect();
        sort_by_count(&mut by_metric, |c| (c.count, &c.name));
        let mut by_tag_key: Vec<TagKeyCount> = key_series
            .into_vec()
            .into_iter()
            .map(|(s, k)| TagKeyCount {
                tagk: name(UidKind::TagKey, k),
                series: s,
                values: keys.get(&k).map_or(0, |e| e.1),
            })
            .collect();
        sort_by_count(&mut by_tag_key, |t| (t.series, &t.tagk));
        let named = |top: Top<Uid>| {
            let mut v: Vec<Counted> = top
                .into_vec()
                .into_iter()
                .map(|(count, k)| Counted {
                    name: name(UidKind::TagKey, k),
                    count,
                })
                .collect();
            sort_by_count(&mut v, |c| (c.count, &c.name));
            v
        };
        let values_by_tag_key = named(key_values);
        let bytes_by_tag_key = named(key_bytes);
        let mut by_tag_pair: Vec<TagPairCount> = by_pair
            .into_vec()
            .into_iter()
            .map(|(series, (k, v))| TagPairCount {
                tagk: name(UidKind::TagKey, k),
                tagv: name(UidKind::TagValue, v),
                series,
            })
            .collect();
        by_tag_pair.sort_by(|a, b| {
            b.series
                .cmp(&a.series)
                .then_with(|| (&a.tagk, &a.tagv).cmp(&(&b.tagk, &b.tagv)))
        });
        let mut new_by_metric =
            arrivals_top(&self.index().arrivals(), n, |m| name(UidKind::Metric, m));
        sort_by_count(&mut new_by_metric, |a| (a.total, &a.metric));
        Ok(Cardinality {
            top_n: n,
            series,
            metrics,
            tag_pairs,
            by_metric,
            by_tag_key,
            values_by_tag_key,
            bytes_by_tag_key,
            by_tag_pair,
            metric_name_bytes,
            new_by_metric,
            newest_rows: newest,
        })
    }

    /// The byte length of each of `values`' names (tag values): looked up
    /// one by one when few, else from one scan of the tag value names.
    fn value_lengths(&self, values: impl Iterator<Item = Uid>) -> Result<FastMap<Uid, u32>> {
        let mut lens: FastMap<Uid, u32> = values.map(|v| (v, 0)).collect();
        let uids = self.uids();
        if lens.len() > SCAN_NAMES_OVER {
            for (uid, name) in uids.scan_reverse(UidKind::TagValue)? {
                if let Some(l) = lens.get_mut(&uid) {
                    *l = name.len() as u32;
                }
            }
        } else {
            for (uid, l) in lens.iter_mut() {
                if let Ok(name) = uids.get_name(UidKind::TagValue, *uid) {
                    *l = name.len() as u32;
                }
            }
        }
        Ok(lens)
    }
}

/// The `n` metrics with the most new series over `hours`, each with its
/// total and its counts per hour (oldest first).
fn arrivals_top(
    hours: &[HourArrivals],
    n: usize,
    name: impl Fn(Uid) -> String,
) -> Vec<MetricArrivals> {
    let mut by_metric: FastMap<Uid, (u64, Vec<(u32, u64)>)> = FastMap::default();
    for h in hours {
        for &(m, c) in &h.by_metric {
            let e = by_metric.entry(m).or_default();
            e.0 += c;
            e.1.push((h.hour, c));
        }
    }
    let mut top = Top::<Uid>::new(n);
    for (&m, &(total, _)) in &by_metric {
        top.push(total, m);
    }
    top.into_vec()
        .into_iter()
        .map(|(total, m)| MetricArrivals {
            metric: name(m),
            total,
            hours: by_metric.remove(&m).map(|e| e.1).unwrap_or_default(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::PendingPoint;
    use crate::model::Value;

    fn write(db: &Db, metric: &str, tags: &[(&str, &str)]) {
        let mut key = String::new();
        let (series, ts) = db
            .resolve(metric, 1_420_070_400, Value::Int(1), tags, &mut key)
            .unwrap();
        db.append(&[PendingPoint {
            series,
            ts,
            value: Value::Int(1),
        }])
        .unwrap();
    }

    #[test]
    fn counts_by_metric_key_and_pair() {
        let (_dir, db) = Db::open_temp();
        for h in ["a", "b", "c"] {
            write(&db, "cpu", &[("host", h), ("dc", "x")]);
        }
        write(&db, "mem", &[("host", "a")]);
        let c = db.cardinality(2).unwrap();
        assert_eq!((c.series, c.metrics, c.tag_pairs), (4, 2, 4));
        let metrics: Vec<(&str, u64)> = c
            .by_metric
            .iter()
            .map(|m| (m.name.as_str(), m.count))
            .collect();
        assert_eq!(metrics, [("cpu", 3), ("mem", 1)]);
        assert_eq!(
            c.by_tag_key,
            [
                TagKeyCount {
                    tagk: "host".into(),
                    series: 4,
                    values: 3
                },
                TagKeyCount {
                    tagk: "dc".into(),
                    series: 3,
                    values: 1
                },
            ]
        );
        let pairs: Vec<(&str, &str, u64)> = c
            .by_tag_pair
            .iter()
            .map(|p| (p.tagk.as_str(), p.tagv.as_str(), p.series))
            .collect();
        assert_eq!(pairs, [("dc", "x", 3), ("host", "a", 2)]);
        // host: a, b, c: 3 bytes; dc: x.
        let bytes: Vec<(&str, u64)> = c
            .bytes_by_tag_key
            .iter()
            .map(|b| (b.name.as_str(), b.count))
            .collect();
        assert_eq!(bytes, [("host", 3), ("dc", 1)]);
        assert_eq!(c.metric_name_bytes, 6);
        assert_eq!(c.new_by_metric.len(), 2);
        assert_eq!(c.new_by_metric[0].metric, "cpu");
        assert_eq!(c.new_by_metric[0].total, 3);
        assert_eq!(c.newest_rows, Some((1_420_070_400, 1_420_070_400)));
    }

    /// A million series (10 metrics x 10,000 hosts x 10 cpus, one point
    /// each) counted: the time one count takes, printed. Run with
    /// `cargo test --release --lib -- --ignored cardinality_of_a_million --nocapture`.
    #[test]
    #[ignore = "a timing, meaningful in release builds only"]
    fn cardinality_of_a_million_series() {
        let (_dir, db) = Db::open_temp();
        let mut key = String::new();
        for m in 0..10 {
            let metric = format!("sys.cpu.m{m}");
            let mut batch = Vec::with_capacity(100_000);
            for h in 0..10_000 {
                let host = format!("host{h:05}");
                for c in 0..10 {
                    let cpu = c.to_string();
                    let (series, ts) = db
                        .resolve(
                            &metric,
                            1_451_606_400,
                            Value::Int(1),
                            &[("host", &host), ("cpu", &cpu)],
                            &mut key,
                        )
                        .unwrap();
                    batch.push(PendingPoint {
                        series,
                        ts,
                        value: Value::Int(1),
                    });
                }
            }
            db.append(&batch).unwrap();
        }
        for _ in 0..3 {
            let t0 = std::time::Instant::now();
            let c = db.cardinality(10).unwrap();
            println!(
                "cardinality of {} series, {} tag pairs: {:?}",
                c.series,
                c.tag_pairs,
                t0.elapsed()
            );
            assert_eq!(c.series, 1_000_000);
            assert_eq!(c.tag_pairs, 10_010);
            assert_eq!(c.by_tag_pair[0].series, 100_000);
        }
    }

    #[test]
    fn top_keeps_the_largest() {
        let mut t = Top::<u32>::new(2);
        for (c, k) in [(5, 1), (9, 2), (1, 3), (9, 4), (7, 5)] {
            t.push(c, k);
        }
        let mut v = t.into_vec();
        v.sort();
        assert_eq!(v, [(9, 2), (9, 4)]);
        assert!(Top::<u32>::new(0).into_vec().is_empty());
    }
}
