//! Rollups and pre-aggregates: writing them as OpenTSDB 2.4.1's
//! `TSDB.addAggregatePoint` does, computing them from raw rows
//! (`tsd.rollups.auto`), and serving their rows to queries (the database's
//! [`RollupSource`]). Layout: docs/format/rollup.md.

use super::Db;
use crate::codec::qualifier::{encode_value, point_qualifier};
use crate::codec::row::Cell;
use crate::codec::row_key::KeyLayout;
use crate::model::hash::FastMap;
use crate::model::java::java_tags;
use crate::model::{Timestamp, Tsuid, Uid, Value};
use crate::protocol::PointError;
use crate::rollup::aggregates::{AUTO_AGGREGATES, Aggregates};
use crate::rollup::codec;
use crate::rollup::columns::RollupRowLayout;
use crate::rollup::{RollupInterval, RollupSettings};
use crate::storage::Durability;
use crate::store::read::SeriesSource;
use crate::store::read::rollup::{
    RollupReadStats, RollupRow, RollupRowSink, RollupSlice, RollupSource,
};
use crate::store::rollup_table::RollupTable;
use crate::store::{Store, StoreError};

/// One point of `/api/rollup` or a telnet `rollup` line, parsed.
#[derive(Debug, Clone)]
pub struct RollupPoint<'a> {
    pub metric: &'a str,
    pub timestamp: i64,
    pub value: Value,
    pub tags: Vec<(&'a str, &'a str)>,
    /// The rollup interval (`1h`); None or empty for a raw pre-aggregate.
    pub interval: Option<&'a str>,
    /// The rollup (temporal) aggregator.
    pub aggregator: Option<&'a str>,
    /// The group-by (spatial) aggregator of a pre-aggregate.
    pub group_by: Option<&'a str>,
    /// Whether the point is a pre-aggregate: over HTTP whenever
    /// `groupByAggregator` is present (even empty), in telnet whenever the
    /// spec names one.
    pub is_groupby: bool,
}

/// A telnet or `tsdb import` `rollup` line is a pre-aggregate whenever
/// its spec names a group-by aggregator.
impl<'a> From<crate::protocol::telnet::RollupLine<'a>> for RollupPoint<'a> {
    fn from(l: crate::protocol::telnet::RollupLine<'a>) -> RollupPoint<'a> {
        RollupPoint {
            metric: l.point.metric,
            timestamp: l.point.timestamp,
            value: l.point.value,
            tags: l.point.tags,
            interval: l.interval,
            aggregator: l.aggregator,
            group_by: l.group_by,
            is_groupby: l.group_by.is_some(),
        }
    }
}

/// `Arrays.toString(byte[])/flags` as OpenTSDB's timestamp message shows
/// the value.
fn java_value(v: Value) -> String {
    let e = encode_value(v);
    let bytes: Vec<String> = e
        .as_bytes()
        .iter()
        .map(|b| (*b as i8).to_string())
        .collect();
    format!("[{}]/{}", bytes.join(", "), e.flags)
}

/// The aggregators a derived rollup cannot be combined from.
fn is_derived(upper: &str) -> bool {
    upper == "AVG" || upper == "DEV"
}

impl Db {
    /// The rollup settings, when `tsd.rollups.enable` is on.
    pub fn rollup_settings(&self) -> Option<&RollupSettings> {
        self.opts.rollups.as_deref()
    }

    /// Checks and stores one rollup or pre-aggregate point, in the order
    /// and with the messages of `TSDB.addAggregatePointInternal`.
    pub fn write_rollup(&self, p: &RollupPoint, durability: Durability) -> Result<(), PointError> {
        let ill = |m: String| Err(PointError::IllegalArgument(m));
        let interval = p.interval.filter(|i| !i.is_empty());
        // OpenTSDB refuses an interval without a configuration here, and
        // fails later on a null default interval for a pre-aggregate; both
        // get this message.
        let Some(settings) = self.rollup_settings() else {
            return ill("No rollup or aggregations were configured".into());
        };
        let group_by = p.group_by.unwrap_or("");
        if p.is_groupby && group_by.is_empty() {
            return ill(format!(
                "Cannot write a group by data point without specifying the aggregation function. Metric={} tags={}",
                p.metric,
                java_tags(&p.tags)
            ));
        }
        if p.timestamp < 0 || p.timestamp > u32::MAX as i64 {
            return ill(format!(
                "{} timestamp={} when trying to add value={} to metric={}, tags={}",
                if p.timestamp < 0 { "negative " } else { "bad" },
                p.timestamp,
                java_value(p.value),
                p.metric,
                java_tags(&p.tags)
            ));
        }
        let ts = p.timestamp as u32;
        let key = settings.agg_tag_key.as_str();
        let mut tags: Vec<(&str, &str)> = p.tags.clone();
        let upper = group_by.to_uppercase();
        let agg_tag_value: String = match tags.iter().position(|t| t.0 == key) {
            None if !p.is_groupby => {
                if settings.tag_raw {
                    tags.push((key, settings.raw_agg_tag_value.as_str()));
                }
                settings.raw_agg_tag_value.clone()
            }
            None => {
                tags.push((key, upper.as_str()));
                upper.clone()
            }
            Some(i) => {
                let given = tags[i].1;
                if p.group_by.is_none() || !given.eq_ignore_ascii_case(group_by) {
                    return ill(format!(
                        "Given tag value for {key} of {given} did not match the group by aggregator of {} for {} {}",
                        p.group_by.unwrap_or("null"),
                        p.metric,
                        java_tags(&tags)
                    ));
                }
                tags[i].1 = upper.as_str();
                upper.clone()
            }
        };
        if p.is_groupby {
            if crate::model::Aggregator::by_name(&group_by.to_lowercase()).is_none() {
                return ill(format!(
                    "Invalid group by aggregator {group_by} with metric {} {}",
                    p.metric,
                    java_tags(&tags)
                ));
            }
            if settings.block_derived && is_derived(&agg_tag_value) {
                return ill(format!(
                    "Derived group by aggregations are not allowed {group_by} with metric {} {}",
                    p.metric,
                    java_tags(&tags)
                ));
            }
        }
        let config = &settings.config;
        let rollup = match interval {
            None => None,
            Some(i) => Some(
                config
                    .interval(i)
                    .map_err(|e| PointError::NoSuchRollup(e.to_string()))?,
            ),
        };
        let aggregator_id = match rollup {
            None => None,
            Some(_) => Some(
                config
                    .id_for(p.aggregator.unwrap_or(""))
                    .map_err(|e| PointError::IllegalArgument(e.to_string()))?,
            ),
        };
        let (series, _) =
            self.resolve(p.metric, p.timestamp, p.value, &tags, &mut String::new())?;
        if let Some(agg) = p.aggregator {
            let agg = agg.to_uppercase();
            if settings.block_derived && is_derived(&agg) {
                return ill(format!(
                    "Derived rollup aggregations are not allowed {agg} with metric {} {}",
                    p.metric,
                    java_tags(&tags)
                ));
            }
        }
        let encoded = encode_value(p.value);
        let (table, base, qualifier) = match (rollup, aggregator_id) {
            (Some(r), Some(id)) => {
                let base = codec::base_time(ts, r);
                let q = codec::qualifier(ts, base, encoded.flags, id, r)
                    .map_err(|e| PointError::IllegalArgument(e.to_string()))?;
                let table = if p.is_groupby {
                    &r.pre_agg_table
                } else {
                    &r.table
                };
                (table.as_str(), base, q.to_vec())
            }
            _ => {
                // A raw pre-aggregate: the default interval's pre-aggregate
                // table, with a data-table row key and qualifier.
                let base = ts - ts % crate::model::row_span::ROW_SPAN_SECS;
                let q = point_qualifier(Timestamp::Seconds(ts), base, encoded.flags)
                    .map_err(|e| PointError::IllegalArgument(e.to_string()))?;
                (config.default_interval().pre_agg_table.as_str(), base, q)
            }
        };
        self.writable()?;
        let row_key = self.store.layout().row_key(&series.tsuid, base);
        self.rollup_table
            .put_cells(
                table,
                &row_key,
                vec![Cell::new(qualifier, encoded.as_bytes().to_vec())],
                durability,
            )
            .map_err(|e| PointError::Storage(e.to_string()))?;
        // Queries choose their series from the index: a series may have
        // rollups and no raw points.
        self.index
            .add(&series.tsuid)
            .map_err(|e| PointError::Storage(e.to_string()))?;
        self.epochs.bump_metric(series.tsuid.metric);
        self.stats
            .rollup_points_stored
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

impl RollupSource for Db {
    fn rollup_settings(&self) -> Option<&RollupSettings> {
        Db::rollup_settings(self)
    }

    fn pre_aggregates(&self) -> Option<&dyn SeriesSource> {
        self.pre_aggregates.as_ref().map(|p| p as &dyn SeriesSource)
    }

    fn rollup_slices(
        &self,
        interval: &RollupInterval,
        start_s: u32,
        end_s: u32,
    ) -> Vec<RollupSlice> {
        let first = codec::base_time(start_s, interval);
        let stop = codec::next_base_time(codec::base_time(end_s, interval), interval);
        let threads = self.store.read_plan().threads.max(1) as u64;
        let mut cuts: Vec<u64> = (0..threads)
            .map(|k| {
                let at = first as u64 + (stop - first as u64) * k / threads;
                codec::base_time(at.min(u32::MAX as u64) as u32, interval) as u64
            })
            .collect();
        cuts.push(stop);
        cuts.dedup();
        cuts.windows(2)
            .map(|w| RollupSlice {
                from: w[0],
                to: w[1],
            })
            .collect()
    }

    fn read_rollup_slices(
        &self,
        table: &str,
        metric: Uid,
        tsuids: &[Tsuid],
        start_s: u32,
        end_s: u32,
        slices: &[RollupSlice],
        sinks: &mut [&mut dyn RollupRowSink],
    ) -> Result<RollupReadStats, String> {
        let layout = self.store.layout();
        let widths = layout.widths;
        // Series by the bytes of their TSUID (metric then tags), which a
        // row key holds around its base time: no key is parsed per row.
        // In key order, the rows of one base time come in the order of
        // their tags: each row's series is tried first as the one after
        // the last row's in that order, and looked up only when it is
        // not (a new base time, a series without the row).
        let mut order: Vec<(Vec<u8>, usize)> = tsuids
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_bytes(&widths), i))
            .collect();
        order.sort_unstable();
        let rank: FastMap<&[u8], usize> = order
            .iter()
            .enumerate()
            .map(|(r, (bytes, _))| (bytes.as_slice(), r))
            .collect();
        let mw = widths.metric.bytes();
        // Reads start at the retained floor, as for raw rows: expired rows
        // wait for the engine's compactions to go.
        let start_s = start_s.max(self.store.retention_floor(metric));
        let slice =
            |s: RollupSlice, sink: &mut dyn RollupRowSink| -> Result<RollupReadStats, String> {
                let mut read = RollupReadStats::default();
                let mut tsuid = Vec::new();
                // The rank in `order` the next row's series is tried at.
                let mut next = 0;
                for (start, end) in
                    scan_bounds(layout, metric, s.from.min(u32::MAX as u64) as u32, s.to)
                {
                    // Rows are lent by the engine, not copied out: each is
                    // read once, where it lies.
                    let mut failed = None;
                    self.rollup_table
                        .visit_raw(table, &start, &end, &mut |key, value| {
                            read.rows += 1;
                            let Some((metric, base, tags)) = layout.row_key_parts(key) else {
                                return true;
                            };
                            let guess = order.get(next).filter(|(bytes, _)| {
                                bytes.len() == mw + tags.len()
                                    && bytes[..mw] == *metric
                                    && bytes[mw..] == *tags
                            });
                            let i = match guess {
                                Some(&(_, i)) => i,
                                None => {
                                    tsuid.clear();
                                    tsuid.extend_from_slice(metric);
                                    tsuid.extend_from_slice(tags);
                                    let Some(&r) = rank.get(tsuid.as_slice()) else {
                                        return true;
                                    };
                                    next = r;
                                    order[r].1
                                }
                            };
                            next += 1;
                            // A series' rows come in time order (its salt
                            // bucket is one range of the key order).
                            let row = RollupRow { base, cells: value };
                            match sink.row(i, row, start_s, end_s) {
                                Ok(cells) => {
                                    read.cells += cells;
                                    true
                                }
                                Err(e) => {
                                    failed = Some(e);
                                    false
                                }
                            }
                        })
                        .map_err(|e| e.to_string())?;
                    if let Some(e) = failed {
                        return Err(e.to_string());
                    }
                }
                Ok(read)
            };
        assert_eq!(slices.len(), sinks.len(), "one sink per rollup slice");
        let parts: Vec<Result<RollupReadStats, String>> = if slices.len() <= 1 {
            slices
                .iter()
                .zip(sinks.iter_mut())
                .map(|(s, sink)| slice(*s, &mut **sink))
                .collect()
        } else {
            std::thread::scope(|sc| {
                let handles: Vec<_> = slices
                    .iter()
                    .zip(sinks.iter_mut())
                    .map(|(s, sink)| {
                        let slice = &slice;
                        sc.spawn(move || slice(*s, &mut **sink))
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join()
                            .unwrap_or_else(|_| Err("rollup read thread panicked".into()))
                    })
                    .collect()
            })
        };
        let mut total = RollupReadStats::default();
        for part in parts {
            let part = part?;
            total.rows += part.rows;
            total.cells += part.cells;
        }
        Ok(total)
    }
}

/// The starts of the `iv`-second intervals overlapping the hour `hour`.
fn intervals_of_hour(hour: u32, iv: u32) -> impl Iterator<Item = u32> {
    let first = hour - hour % iv;
    let last = hour + 3599;
    (0..)
        .map(move |k: u32| first as u64 + k as u64 * iv as u64)
        .take_while(move |b| *b <= last as u64)
        .map(|b| b as u32)
}

/// Why the rollups of written hours could not be computed
/// (`tsd.rollups.auto`).
#[derive(Debug, thiserror::Error)]
pub enum AutoRollupError {
    /// Reading the raw points or writing the rollup rows failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An interval's cell cannot be addressed in its row.
    #[error(transparent)]
    Codec(#[from] codec::RollupCodecError),
}

/// What `tsd.rollups.auto` computes rollups with: the stored raw rows it
/// reads and the rollup tables it writes. The flusher uses it after
/// writing sealed hours, and WAL replay after writing replayed ones, so
/// both follow one rule (docs/rollups.md).
pub(crate) struct AutoRollups<'a> {
    pub settings: &'a RollupSettings,
    pub rows: &'a Store,
    pub table: &'a RollupTable,
    pub layout: &'a KeyLayout,
}

/// Interval starts to compute, per configured (non-default) interval.
type Work<'a> = Vec<(&'a RollupInterval, Vec<u32>)>;

impl AutoRollups<'_> {
    /// Recomputes, from the stored raw points, every configured interval
    /// (but the default one) overlapping the hours `hours` of `tsuid` just
    /// written, and stores their sum, count, min and max in the
    /// interval's rollup table (with `Durability::Process`: the caller
    /// syncs before it lets the WAL holding these hours go). A late point
    /// (which seals its hour again) recomputes its intervals too. Returns
    /// the cells written.
    pub(crate) fn roll_up_hours(
        &self,
        tsuid: &Tsuid,
        hours: &[u32],
    ) -> Result<u64, AutoRollupError> {
        let mut work: Work = Vec::new();
        for iv in self.intervals() {
            let mut starts: Vec<u32> = hours
                .iter()
                .flat_map(|h| intervals_of_hour(*h, iv.interval_seconds))
                .collect();
            starts.sort_unstable();
            starts.dedup();
            if !starts.is_empty() {
                work.push((iv, starts));
            }
        }
        self.recompute(tsuid, &work, None)
    }

    /// Recomputes the rollups of `tsuids` as they are once their raw rows
    /// of the hours `first_hour..=last_hour` are deleted (what
    /// [`Db::delete_rows`] removes): an interval lying within those hours
    /// loses its cells, one straddling their edge keeps the aggregates of
    /// its remaining points. Points in the deleted hours are left out
    /// whether or not their rows are gone yet, so this may run before the
    /// rows go (a delete, which thus never leaves rollups counting deleted
    /// points durable without the delete) or after (WAL replay of the
    /// delete). Only intervals holding cells are visited: the rollup rows
    /// of the range are scanned, not every interval of it. Returns the
    /// cells written.
    pub(crate) fn roll_up_deleted(
        &self,
        tsuids: &[Tsuid],
        first_hour: u32,
        last_hour: u32,
    ) -> Result<u64, AutoRollupError> {
        let gone = (first_hour, last_hour.saturating_add(3599));
        let widths = self.layout.widths;
        let slot: FastMap<Vec<u8>, usize> = tsuids
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_bytes(&widths), i))
            .collect();
        let mut metrics: Vec<Uid> = tsuids.iter().map(|t| t.metric).collect();
        metrics.sort_unstable();
        metrics.dedup();
        let ids = self.auto_ids();
        let mut work: Vec<Work> = vec![Vec::new(); tsuids.len()];
        let mut tsuid = Vec::new();
        for iv in self.intervals() {
            let mut starts: Vec<Vec<u32>> = vec![Vec::new(); tsuids.len()];
            let first = codec::base_time(first_hour, iv);
            let stop = codec::next_base_time(codec::base_time(gone.1, iv), iv);
            for &metric in &metrics {
                for (start, end) in scan_bounds(self.layout, metric, first, stop) {
                    for r in self.table.scan_raw(&iv.table, &start, &end) {
                        let (key, value) = r?;
                        let Some(base) = self.layout.split_row_key(&key, &mut tsuid) else {
                            continue;
                        };
                        let Some(&i) = slot.get(tsuid.as_slice()) else {
                            continue;
                        };
                        // An unreadable row is left as it is: the
                        // intervals it does hold are still read below.
                        let _ = crate::rollup::columns::for_each_cell(&value, |q, _| {
                            let Some(p) = codec::QualifierParts::of(q) else {
                                return;
                            };
                            if !ids.contains(&p.aggregator_id) {
                                return;
                            }
                            let at = base as u64 + p.offset as u64 * iv.interval_seconds as u64;
                            let end = at + iv.interval_seconds as u64;
                            if at <= gone.1 as u64 && end > gone.0 as u64 {
                                starts[i].push(at as u32);
                            }
                        });
                    }
                }
            }
            for (i, mut s) in starts.into_iter().enumerate() {
                s.sort_unstable();
                s.dedup();
                if !s.is_empty() {
                    work[i].push((iv, s));
                }
            }
        }
        let mut written = 0;
        for (t, w) in tsuids.iter().zip(&work) {
            written += self.recompute(t, w, Some(gone))?;
        }
        Ok(written)
    }

    /// The intervals rtsdb computes: every configured one but the
    /// default (whose table is the raw data).
    fn intervals(&self) -> impl Iterator<Item = &RollupInterval> {
        self.settings
            .config
            .intervals
            .iter()
            .filter(|i| !i.default_interval)
    }

    /// The aggregation ids of the columns rtsdb computes.
    fn auto_ids(&self) -> Vec<u8> {
        AUTO_AGGREGATES
            .iter()
            .filter_map(|name| self.settings.config.aggregation_ids.get(*name).copied())
            .collect()
    }

    /// Computes `work`'s intervals of `tsuid` from its stored raw points,
    /// leaving out those within `excluded` (seconds, inclusive), and
    /// rewrites their cells: each interval's computed columns replace the
    /// old ones whatever their value flags, and an interval without
    /// points loses them.
    fn recompute(
        &self,
        tsuid: &Tsuid,
        work: &Work,
        excluded: Option<(u32, u32)>,
    ) -> Result<u64, AutoRollupError> {
        let (mut lo, mut hi) = (u64::MAX, 0u64);
        for (iv, starts) in work {
            if let (Some(f), Some(l)) = (starts.first(), starts.last()) {
                lo = lo.min(*f as u64);
                hi = hi.max(*l as u64 + iv.interval_seconds as u64 - 1);
            }
        }
        if lo > hi {
            return Ok(0);
        }
        let kept = |ts: u32| excluded.is_none_or(|(a, b)| ts < a || ts > b);
        let mut points: Vec<(u32, Value)> = Vec::new();
        self.rows.read_tsuids(
            std::slice::from_ref(tsuid),
            lo * 1000,
            hi * 1000 + 999,
            &mut |_, pts| {
                // A stale marker is no value to a rollup (as to every
                // OpenTSDB read).
                points.extend(
                    pts.iter()
                        .filter(|p| !p.is_stale_marker())
                        .map(|p| ((p.timestamp_ms() / 1000) as u32, p.value()))
                        .filter(|p| kept(p.0)),
                );
                true
            },
        )?;
        let config = &self.settings.config;
        let ids = self.auto_ids();
        let mut written = 0;
        for (iv, starts) in work {
            // Per rollup row: the offsets recomputed and their new cells.
            let mut rows: std::collections::BTreeMap<u32, (Vec<u32>, Vec<Cell>)> =
                Default::default();
            for &start in starts {
                let base = codec::base_time(start, iv);
                let row = rows.entry(base).or_default();
                row.0.push((start - base) / iv.interval_seconds);
                let end = start as u64 + iv.interval_seconds as u64;
                let from = points.partition_point(|p| p.0 < start);
                let mut agg: Option<Aggregates> = None;
                for p in points[from..].iter().take_while(|p| (p.0 as u64) < end) {
                    match &mut agg {
                        None => agg = Some(Aggregates::new(p.1)),
                        Some(a) => a.add(p.1),
                    }
                }
                let Some(agg) = agg else { continue };
                for name in AUTO_AGGREGATES {
                    let Some(&id) = config.aggregation_ids.get(name) else {
                        continue;
                    };
                    let v = encode_value(agg.value(name));
                    let q = codec::qualifier(start, base, v.flags, id, iv)?;
                    row.1.push(Cell::new(q.to_vec(), v.as_bytes().to_vec()));
                }
            }
            for (base, (offsets, cells)) in rows {
                written += cells.len() as u64;
                let stale = |q: &[u8]| {
                    codec::QualifierParts::of(q).is_some_and(|p| {
                        ids.contains(&p.aggregator_id) && offsets.contains(&p.offset)
                    })
                };
                self.table.rewrite_cells(
                    &iv.table,
                    &self.layout.row_key(tsuid, base),
                    stale,
                    cells,
                    Durability::Process,
                    RollupRowLayout::Columns,
                )?;
            }
        }
        Ok(written)
    }
}

/// The engine key ranges holding `metric`'s rows from base time `first`
/// up to (not including) `stop`, one per salt bucket.
fn scan_bounds(layout: &KeyLayout, metric: Uid, first: u32, stop: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    let buckets: Vec<Option<u32>> = if layout.salt.enabled() {
        (0..layout.salt.buckets).map(Some).collect()
    } else {
        vec![None]
    };
    buckets
        .into_iter()
        .map(|b| {
            let start = layout.scan_prefix(b, metric, first);
            let end = if stop > u32::MAX as u64 {
                let mut e = layout.scan_prefix(b, metric, u32::MAX);
                e.push(0xFF);
                e
            } else {
                layout.scan_prefix(b, metric, stop as u32)
            };
            (start, end)
        })
        .collect()
}

impl Db {
    /// [`AutoRollups`] over this database's rows and rollup tables, when
    /// `tsd.rollups.auto` is on.
    pub(super) fn auto_rollups(&self) -> Option<AutoRollups<'_>> {
        let settings = self.opts.rollups.as_deref().filter(|r| r.auto)?;
        Some(AutoRollups {
            settings,
            rows: &self.store,
            table: &self.rollup_table,
            layout: self.store.layout(),
        })
    }
}
