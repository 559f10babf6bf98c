//! Sub-queries answered from the rollup tables (`TsdbQuery`'s rollup
//! path, 2.4.1): a downsampler whose interval is a multiple of a
//! configured rollup interval (not the default one) reads that rollup's
//! table instead of raw points; `rollupUsage` says what happens when it
//! holds nothing. `avg` is `sum / count` per rollup timestamp (a
//! timestamp lacking either gives no point, as in OpenTSDB).
//!
//! The rollup cells are first combined into the downsampler's buckets
//! (sums and counts added, min of mins, max of maxes, the average from the
//! bucket's sums and counts), then fed through the usual pipeline, so
//! fill policies, rate and the group-by merge are the raw path's own.

use super::aggregator::Aggregator;
use super::context::QueryContext;
use super::downsample::{Bucketer, FillPolicy, Interval};
use super::error::QueryError;
use super::filter::FilterType;
use super::group::{FoldBy, FoldRule, GridCell, MaxRule, MinRule, Scratch, SumRule, folds};
use super::limits::Budget;
use super::output::QueryResult;
use super::pipeline::{Frame, Pipeline, finish_all};
use super::request::{ValidQuery, ValidSubQuery};
use super::results::{build_results, group_points};
use super::select::{Selected, select};
use super::stats::SubStats;
use crate::codec::row::RowError;
use crate::model::Value;
use crate::model::aggregator::OneValue;
use crate::rollup::aggregates::{add, pick};
use crate::rollup::codec::{
    self, DenseReader, RollupColumns, RollupSlot, ShortRow, ShortView, SlotReader,
};
use crate::rollup::{RollupInterval, RollupSettings};
use crate::store::read::SeriesSource;
use crate::store::read::rollup::{RollupReadStats, RollupRow, RollupRowSink, RollupSource};

/// `TsdbQuery.ROLLUP_USAGE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RollupUsage {
    /// Raw points only.
    Raw,
    /// The best matching rollup; nothing if it holds nothing (default).
    NoFallback,
    /// The best match, then the next ones, down to raw at the default.
    Fallback,
    /// The best match, then raw.
    FallbackRaw,
}

impl RollupUsage {
    /// `ROLLUP_USAGE.parse`: case-insensitive; anything unknown is the
    /// default (OpenTSDB logs a warning).
    pub(super) fn parse(s: Option<&str>) -> RollupUsage {
        match s.map(str::to_ascii_uppercase).as_deref() {
            Some("ROLLUP_RAW") => RollupUsage::Raw,
            Some("ROLLUP_FALLBACK") => RollupUsage::Fallback,
            Some("ROLLUP_FALLBACK_RAW") => RollupUsage::FallbackRaw,
            Some("ROLLUP_NOFALLBACK") | None => RollupUsage::NoFallback,
            Some(other) => {
                tracing::warn!(
                    usage = other,
                    "unknown rollupUsage, using ROLLUP_NOFALLBACK"
                );
                RollupUsage::NoFallback
            }
        }
    }
}

/// Which rollup column a downsampling function reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Column {
    Sum,
    Count,
    Min,
    Max,
    /// `sum` and `count`.
    Avg,
}

impl Column {
    /// `RollupQuery` maps zimsum, mimmax and mimmin to their columns;
    /// functions no column holds are answered from raw points.
    fn of(function: &Aggregator) -> Option<Column> {
        Some(match function.name {
            "sum" | "zimsum" => Column::Sum,
            "count" => Column::Count,
            "min" | "mimmin" => Column::Min,
            "max" | "mimmax" => Column::Max,
            "avg" => Column::Avg,
            _ => return None,
        })
    }
}

/// How a sub-query would read rollups.
pub(super) struct RollupPlan<'a> {
    settings: &'a RollupSettings,
    /// Best match first; only non-default intervals.
    intervals: Vec<&'a RollupInterval>,
    column: Column,
    usage: RollupUsage,
}

/// The plan of `sub`, or None when it reads raw points.
pub(super) fn plan<'a>(
    ctx: &QueryContext<'a>,
    q: &ValidQuery,
    sub: &ValidSubQuery,
) -> Option<RollupPlan<'a>> {
    let settings = ctx.rollups?.rollup_settings()?;
    let usage = RollupUsage::parse(sub.original.rollup_usage.as_deref());
    if usage == RollupUsage::Raw || q.original.delete {
        return None;
    }
    let ds = sub.downsample.as_ref()?;
    let Interval::Fixed(ms) = ds.interval else {
        return None;
    };
    if ms == 0 || ms % 1000 != 0 {
        return None;
    }
    let column = Column::of(&ds.function)?;
    let matches = settings.config.best_matches(ms / 1000);
    // The default interval is the raw table: a best match there is raw.
    let intervals: Vec<&RollupInterval> = matches
        .into_iter()
        .take_while(|i| !i.default_interval)
        .collect();
    if intervals.is_empty() {
        return None;
    }
    Some(RollupPlan {
        settings,
        intervals,
        column,
        usage,
    })
}

/// What reading rollups gave a sub-query.
pub(super) enum RollupAnswer {
    /// The sub-query's results, from a rollup table.
    Rolled(Vec<QueryResult>, SubStats),
    /// Answer this sub-query from raw points instead: the fallback of
    /// `ROLLUP_FALLBACK_RAW`, or of `ROLLUP_FALLBACK` down to the default
    /// interval, with its downsampler reset as 2.4.1 resets it.
    Raw(Box<ValidSubQuery>),
}

/// `TsdbQuery.transformRollupQueryToDownSampler` (2.4.1): a sub-query
/// falling back from the rollup interval `tried` to raw points is
/// downsampled at that interval (not the one asked for: a `2h-avg` that
/// found its `1h` rollups empty answers hourly averages of raw points)
/// with the rollup aggregator (`zimsum` read as `sum`, `mimmin` as `min`,
/// `mimmax` as `max`), keeping its fill policy; `DownsamplingSpecification`'s
/// constructor used there drops the calendar flag and time zone, which
/// fixed intervals do not use anyway.
fn reset_to_rollup_interval(sub: &ValidSubQuery, tried: &RollupInterval) -> Box<ValidSubQuery> {
    let mut raw = Box::new(sub.clone());
    if let Some(d) = raw.downsample.as_mut() {
        d.interval = Interval::Fixed(tried.interval_seconds as u64 * 1000);
        let name = match d.function.name {
            "zimsum" => "sum",
            "mimmin" => "min",
            "mimmax" => "max",
            other => other,
        };
        if let Some(f) = Aggregator::by_name(name) {
            d.function = f;
        }
    }
    raw
}

/// Whether `sub` asks for pre-aggregates, as 2.4.1's `TsdbQuery` decides
/// it: `preAggregate` set, or a `literal_or` filter on
/// `tsd.rollups.agg_tag_key` whose filter text is not
/// `tsd.rollups.raw_agg_tag_value` (compared as written, case and all, as
/// `resolveTagFilters` compares it; `_aggregate=sum|max` counts too).
/// 2.4.1's documentation names only `preAggregate`; its code reads the
/// filter as well, and rtsdb follows the code.
fn reads_pre_aggregates(settings: &RollupSettings, sub: &ValidSubQuery) -> bool {
    sub.original.pre_aggregate
        || sub.filters.iter().any(|f| {
            f.kind == FilterType::LiteralOr
                && f.tagk == settings.agg_tag_key
                && f.filter != settings.raw_agg_tag_value
        })
}

/// What a sub-query that reads no rollup interval reads its points from
/// when it asks for pre-aggregates ([`reads_pre_aggregates`]): the
/// default interval's pre-aggregate table, as data rows
/// (`TsdbQuery.tableToBeScanned`). `None`: the data table, as usual (no
/// rollups configured, or no pre-aggregates asked for). A delete query
/// keeps to the data table: deletes remove data rows only.
pub(super) fn pre_aggregate_source<'a>(
    ctx: &QueryContext<'a>,
    q: &ValidQuery,
    sub: &ValidSubQuery,
) -> Option<&'a dyn SeriesSource> {
    let rollups = ctx.rollups?;
    let settings = rollups.rollup_settings()?;
    if q.original.delete || !reads_pre_aggregates(settings, sub) {
        return None;
    }
    rollups.pre_aggregates()
}

/// Runs `sub` over rollups, or says how to answer it from raw points.
pub(super) fn run(
    ctx: &QueryContext,
    q: &ValidQuery,
    sub: &ValidSubQuery,
    budget: &mut Budget,
    plan: &RollupPlan,
) -> Result<RollupAnswer, QueryError> {
    let source = ctx.rollups.expect("planned with rollups");
    let mut stats = SubStats::default();
    let sel = select(ctx, sub)?;
    stats.unresolved = sel.unresolved;
    stats.series = sel.tsuids.len() as u64;
    // One point per bucket reaches the downsampler, which then keeps it:
    // counts were already added up, so `count` becomes `sum` there.
    let mut fed = sub.clone();
    if let Some(d) = fed.downsample.as_mut()
        && plan.column == Column::Count
    {
        d.function = Aggregator::by_name("sum").expect("sum exists");
    }
    let frame = Frame::new(q, &fed, budget, sel.tsuids.len())?;
    let bucketer = frame.bucketer.as_ref().expect("downsampled");
    let feed = Feed::of(&fed);
    let ids = |name: &str| plan.settings.config.aggregation_ids.get(name).copied();
    // The aggregation whose cells hold the values read, and for `avg` the
    // count each sum is divided by.
    let (value, count) = match plan.column {
        Column::Sum => ("sum", None),
        Column::Count => ("count", None),
        Column::Min => ("min", None),
        Column::Max => ("max", None),
        Column::Avg => ("sum", Some("count")),
    };
    let columns = RollupColumns {
        value: ids(value),
        count: count.and_then(ids),
    };
    let start_ms = bucketer.bucket(q.start_ms).unwrap_or(q.start_ms).max(0);
    let start_s = (start_ms / 1000).min(u32::MAX as i64) as u32;
    let end_s = (q.end_ms.max(0) / 1000).min(u32::MAX as i64) as u32;
    for (n, interval) in plan.intervals.iter().enumerate() {
        let table = if reads_pre_aggregates(plan.settings, sub) {
            &interval.pre_agg_table
        } else {
            &interval.table
        };
        let t_read = budget.elapsed();
        let read = |columns, f: &mut dyn FnMut(usize, &[RollupSlot])| {
            source
                .read_rollups(
                    table,
                    interval,
                    sel.metric_uid,
                    &sel.tsuids,
                    columns,
                    start_s,
                    end_s,
                    f,
                )
                .map_err(QueryError::Storage)
        };
        // The dashboard query (no fill, no rate, a group aggregator that
        // folds) is folded into its groups' points by the read threads;
        // anything else, or a group whose series do not share their
        // timestamps, goes through each series' pipeline.
        let folded = match FoldPlan::new(q, &fed, &sel, plan.column, bucketer, frame.from, frame.to)
        {
            Some(fold) => fold.read(source, table, interval, &sel, columns, start_s, end_s)?,
            None => None,
        };
        let (read, seen, outs) = match folded {
            Some(f) => (f.read, f.seen, Outs::Groups(f.groups)),
            None => {
                // Each series' slots go through its pipeline as they are
                // handed over, not buffered again; a bucket may span two
                // hand-overs.
                let mut pipes = frame.pipes(&fed, sel.tsuids.len());
                let mut open: Vec<Option<Bucket>> = vec![None; sel.tsuids.len()];
                let read = read(columns, &mut |i, slots| {
                    let p = &mut pipes[i];
                    combine(slots, plan.column, &mut open[i], bucketer, |b| {
                        b.emit(plan.column, |ts, v| feed.push(p, ts, v))
                    });
                })?;
                for (p, b) in pipes.iter_mut().zip(&mut open) {
                    if let Some(b) = b.take() {
                        b.emit(plan.column, |ts, v| feed.push(p, ts, v));
                    }
                }
                finish_all(&mut pipes);
                let seen: Vec<bool> = pipes.iter().map(|p| p.seen).collect();
                (read, seen, Outs::Pipes(pipes))
            }
        };
        let (rows, points) = (read.rows, read.cells);
        stats.rows += rows;
        budget.charge(0, points)?;
        stats.raw_points += points;
        let t_agg = budget.elapsed();
        stats.storage_ms += (t_agg - t_read).as_secs_f64() * 1000.0;
        if !seen.contains(&true) {
            // `FallbackRollupOnEmptyResult`.
            // The raw read starts over: what the rollup read counted is
            // not part of its answer's stats (OpenTSDB runs the query
            // again).
            match plan.usage {
                RollupUsage::FallbackRaw => {
                    return Ok(RollupAnswer::Raw(reset_to_rollup_interval(sub, interval)));
                }
                RollupUsage::Fallback if n + 1 < plan.intervals.len() => continue,
                RollupUsage::Fallback => {
                    return Ok(RollupAnswer::Raw(reset_to_rollup_interval(sub, interval)));
                }
                _ => return Ok(RollupAnswer::Rolled(Vec::new(), stats)),
            }
        }
        let mut scratch = Scratch::default();
        let results = match outs {
            Outs::Pipes(pipes) => {
                build_results(ctx, q, &fed, &sel, &seen, &[], &mut stats, |_, present| {
                    let outs: Vec<&[(i64, Value)]> =
                        present.iter().map(|&p| pipes[p].out.as_slice()).collect();
                    group_points(&fed, &outs, frame.from, frame.to, &mut scratch)
                })?
            }
            Outs::Groups(mut groups) => {
                build_results(ctx, q, &fed, &sel, &seen, &[], &mut stats, |g, _| {
                    std::mem::take(&mut groups[g])
                })?
            }
        };
        budget.check_time()?;
        stats.aggregation_ms = (budget.elapsed() - t_agg).as_secs_f64() * 1000.0;
        return Ok(RollupAnswer::Rolled(results, stats));
    }
    Ok(RollupAnswer::Rolled(Vec::new(), stats))
}

/// Where a sub-query's combined buckets go: through its pipeline, or
/// straight to the pipeline's output when the downsampler would only hand
/// each one back as its function of that one value (no fill policy, no
/// rate): the bucket is then not looked up again, nor held open.
enum Feed<'a> {
    Pipeline,
    Straight(&'a Aggregator),
}

impl<'a> Feed<'a> {
    fn of(fed: &'a ValidSubQuery) -> Feed<'a> {
        match &fed.downsample {
            Some(d) if d.fill == FillPolicy::None && fed.rate.is_none() => {
                Feed::Straight(&d.function)
            }
            _ => Feed::Pipeline,
        }
    }

    fn push(&self, p: &mut Pipeline, ts: i64, v: Value) {
        p.seen = true;
        match self {
            Feed::Pipeline => p.push_point(ts, v),
            // The downsampler's own arithmetic on the bucket's one value
            // (`sum` of -0.0 is 0.0, for one).
            Feed::Straight(f) => p.out.push((ts, Value::Float(f.run_double_one(v.as_f64())))),
        }
    }
}

/// A downsampling bucket being combined from rollup slots: its start and
/// end (ms, the next bucket's start), the combined value, and (for `avg`)
/// the combined count.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    start: i64,
    end: i64,
    value: Value,
    count: f64,
}

impl Bucket {
    /// Adds `later`, a later part of the same bucket: sums and counts
    /// added, the min of mins, the max of maxes.
    fn merge(&mut self, later: Bucket, column: Column) {
        self.value = match column {
            Column::Min => pick(self.value, later.value, false),
            Column::Max => pick(self.value, later.value, true),
            _ => add(self.value, later.value),
        };
        self.count += later.count;
    }

    /// Hands the bucket's value to `emit`: the column's value as a double
    /// (OpenTSDB reads rollup values as doubles: its answers from rollups
    /// are never integers), or for `avg` the sum over the count.
    fn emit(self, column: Column, mut emit: impl FnMut(i64, Value)) {
        match column {
            Column::Avg if self.count > 0.0 => {
                emit(self.start, Value::Float(self.value.as_f64() / self.count))
            }
            Column::Avg => {}
            _ => emit(self.start, Value::Float(self.value.as_f64())),
        }
    }
}

/// Combines a series' time-sorted slots into one bucket per downsampling
/// bucket, handed to `close` in time order as each closes; `open` is the
/// bucket still open from the series' previous slots, and is left open
/// for the next ones (the caller closes it at the end).
fn combine(
    slots: &[RollupSlot],
    column: Column,
    open: &mut Option<Bucket>,
    bucketer: &Bucketer,
    mut close: impl FnMut(Bucket),
) {
    let avg = column == Column::Avg;
    for s in slots {
        // A timestamp without its value (or, for avg, its count) gives no
        // point.
        let Some(v) = s.value else { continue };
        if avg && s.count.is_none() {
            continue;
        }
        let ts = s.timestamp as i64 * 1000;
        // Slots come in time order: a slot mostly falls in the open
        // bucket or the one after it (the plan's buckets are fixed
        // intervals), found without the division a lookup costs (one per
        // slot at 1h over 1h rollups).
        let b = match open {
            Some(acc) if ts >= acc.start && ts < acc.end => acc.start,
            Some(acc) if ts >= acc.end && ts < bucketer.next(acc.end) => acc.end,
            _ => match bucketer.bucket(ts) {
                Some(b) => b,
                None => continue,
            },
        };
        let part = Bucket {
            start: b,
            end: 0,
            value: v,
            count: s.count.map_or(0.0, |c| c.as_f64()),
        };
        match open {
            Some(acc) if acc.start == b => acc.merge(part, column),
            _ => {
                if let Some(done) = open.take() {
                    close(done);
                }
                *open = Some(Bucket {
                    end: bucketer.next(b),
                    ..part
                });
            }
        }
    }
}

/// The points a rollup read gave: per series, through their pipelines,
/// or already folded into each group's points.
enum Outs<'a> {
    Pipes(Vec<Pipeline<'a>>),
    /// By group (in `Selected::groups` order).
    Groups(Vec<Vec<(i64, Value)>>),
}

/// Most grid cells (groups × buckets) one read thread folds into (20
/// bytes each: 80 MiB); a larger read goes through each series' pipeline.
const MAX_FOLD_CELLS: u64 = 4 << 20;

/// A series in no group.
const NO_GROUP: u32 = u32::MAX;

/// How the read threads fold each series' combined buckets straight into
/// its group's points: what each bucket's pipeline would output (no fill
/// policy, no rate: the downsampling function of the bucket's one value),
/// folded as `group::aggregate`'s same-grid fast path folds it
/// ([`GridCell`]), so no per-series point list is built or merged. That
/// fast path applies when every series of a group has a point at every
/// timestamp any of them has; a read finding otherwise is thrown away and
/// the sub-query read again through the pipelines (which interpolate).
/// Within a thread a bucket's series are folded in row order, which is
/// the series order unless the table is salted or a bucket spans rows:
/// sums may then differ from the pipelines' in float rounding only.
struct FoldPlan<'a> {
    column: Column,
    /// The downsampling function.
    ds: &'a Aggregator,
    /// The group aggregator, one that [`folds`].
    agg: &'a Aggregator,
    bucketer: &'a Bucketer,
    /// Bucket width, ms, and its inverse.
    width: i64,
    per_ms: f64,
    /// The output range `[from, to]` (ms).
    from: i64,
    to: i64,
    /// `Selected::groups` index of each series.
    group_of: Vec<u32>,
    groups: usize,
}

/// What a folded read gave.
struct Folded {
    read: RollupReadStats,
    seen: Vec<bool>,
    groups: Vec<Vec<(i64, Value)>>,
}

impl<'a> FoldPlan<'a> {
    /// The plan, when `fed` can be folded.
    fn new(
        q: &ValidQuery,
        fed: &'a ValidSubQuery,
        sel: &Selected,
        column: Column,
        bucketer: &'a Bucketer,
        from: i64,
        to: i64,
    ) -> Option<FoldPlan<'a>> {
        let ds = fed.downsample.as_ref()?;
        let Interval::Fixed(width) = ds.interval else {
            return None;
        };
        if ds.fill != FillPolicy::None
            || fed.rate.is_some()
            || q.original.padding
            || !folds(&fed.aggregator)
            || width == 0
        {
            return None;
        }
        let mut group_of = vec![NO_GROUP; sel.tsuids.len()];
        for (g, members) in sel.groups.iter().enumerate() {
            for &m in members {
                group_of[m] = g as u32;
            }
        }
        Some(FoldPlan {
            column,
            ds: &ds.function,
            agg: &fed.aggregator,
            bucketer,
            width: width as i64,
            per_ms: 1.0 / width as f64,
            from,
            to,
            group_of,
            groups: sel.groups.len(),
        })
    }

    /// Reads and folds; None when the grid would be too large or a group's
    /// series turned out not to share their timestamps.
    #[allow(clippy::too_many_arguments)]
    fn read(
        &self,
        source: &dyn RollupSource,
        table: &str,
        interval: &RollupInterval,
        sel: &Selected,
        columns: RollupColumns,
        start_s: u32,
        end_s: u32,
    ) -> Result<Option<Folded>, QueryError> {
        let slices = source.rollup_slices(interval, start_s, end_s);
        let Some(first) = slices.first() else {
            return Ok(None);
        };
        let first = self.bucket_of(first.from as i64 * 1000);
        let mut folds = Vec::with_capacity(slices.len());
        for s in &slices {
            let (from, to) = (s.from as i64 * 1000, s.to as i64 * 1000);
            let lo = ((self.bucket_of(from) - first) / self.width) as usize;
            let len = ((self.bucket_of(to - 1) - first) / self.width) as usize + 1 - lo;
            if (len as u64).saturating_mul(self.groups as u64) > MAX_FOLD_CELLS {
                return Ok(None);
            }
            folds.push(SliceFold {
                plan: self,
                first,
                from,
                to,
                lo,
                len,
                open: vec![None; sel.tsuids.len()],
                grid: vec![GridCell::default(); len * self.groups],
                points: vec![0; len * self.groups],
                edges: Vec::new(),
                seen: vec![false; sel.tsuids.len()],
            });
        }
        let mut readers: Vec<SliceRows> = folds
            .iter_mut()
            .map(|fold| SliceRows {
                rows: RowFold::new(columns, interval, self.width),
                fold,
            })
            .collect();
        let mut sinks: Vec<&mut dyn RollupRowSink> = readers
            .iter_mut()
            .map(|r| r as &mut dyn RollupRowSink)
            .collect();
        let read = source
            .read_rollup_slices(
                table,
                sel.metric_uid,
                &sel.tsuids,
                start_s,
                end_s,
                &slices,
                &mut sinks,
            )
            .map_err(QueryError::Storage)?;
        drop(sinks);
        drop(readers);
        // Buckets still open at a slice's end, then those spanning two
        // slices or more: their parts (in slice order) are merged, and
        // folded where they start.
        let mut edges = Vec::new();
        for f in &mut folds {
            for i in 0..f.open.len() {
                if let Some(b) = f.open[i].take() {
                    f.close(i, b);
                }
            }
            edges.append(&mut f.edges);
        }
        edges.sort_by_key(|&(i, b)| (i, b.start));
        let mut merged: Vec<(usize, Bucket)> = Vec::new();
        for (i, b) in edges {
            match merged.last_mut() {
                Some((j, acc)) if *j == i && acc.start == b.start => acc.merge(b, self.column),
                _ => merged.push((i, b)),
            }
        }
        for (i, b) in merged {
            let at = folds.iter().rposition(|f| b.start >= f.from).unwrap_or(0);
            folds[at].fold(i, b);
        }
        let mut seen = vec![false; sel.tsuids.len()];
        for f in &folds {
            for (s, &v) in seen.iter_mut().zip(&f.seen) {
                *s |= v;
            }
        }
        let mut groups = Vec::with_capacity(self.groups);
        for (g, members) in sel.groups.iter().enumerate() {
            let present = members.iter().filter(|&&m| seen[m]).count() as u32;
            let mut out = Vec::new();
            for f in &folds {
                let at = g * f.len;
                for (k, (c, &n)) in f.grid[at..at + f.len]
                    .iter()
                    .zip(&f.points[at..at + f.len])
                    .enumerate()
                {
                    if n == 0 {
                        continue;
                    }
                    if n != present {
                        // Not one grid: interpolation is the pipelines'.
                        return Ok(None);
                    }
                    let t = first + (f.lo + k) as i64 * self.width;
                    if t >= self.from && t <= self.to {
                        out.push((t, Value::Float(c.value(self.agg))));
                    }
                }
            }
            groups.push(out);
        }
        Ok(Some(Folded { read, seen, groups }))
    }

    fn bucket_of(&self, ts: i64) -> i64 {
        self.bucketer.bucket(ts).unwrap_or(ts)
    }
}

/// One read thread's fold: the grid of its slice's buckets (by group,
/// then bucket), the series' open buckets, and the buckets reaching out
/// of the slice, left for the merge.
struct SliceFold<'a> {
    plan: &'a FoldPlan<'a>,
    /// Start of bucket 0 (ms).
    first: i64,
    /// The slice (ms).
    from: i64,
    to: i64,
    /// The slice's first bucket, and how many it has.
    lo: usize,
    len: usize,
    open: Vec<Option<Bucket>>,
    grid: Vec<GridCell>,
    /// Series with a point in each grid cell.
    points: Vec<u32>,
    edges: Vec<(usize, Bucket)>,
    seen: Vec<bool>,
}

impl SliceFold<'_> {
    /// A closed bucket of series `i`: folded, or kept for the merge when
    /// it reaches out of the slice.
    fn close(&mut self, i: usize, b: Bucket) {
        if b.start < self.from || b.end > self.to {
            self.edges.push((i, b));
        } else {
            self.fold(i, b);
        }
    }

    /// Folds a whole bucket of series `i` (one starting in this slice).
    fn fold(&mut self, i: usize, b: Bucket) {
        // A whole number of widths past `first` (a bucket of the slice
        // starts there or later): a product rounded, exact below 2^52
        // buckets, rather than a division per bucket.
        let k = ((b.start - self.first) as f64 * self.plan.per_ms).round() as usize;
        self.fold_at(i, k - self.lo, b);
    }

    /// Folds a whole bucket of series `i`, the slice's `k`th.
    #[inline]
    fn fold_at(&mut self, i: usize, k: usize, b: Bucket) {
        b.emit(self.plan.column, |_, v| {
            self.seen[i] = true;
            self.fold_value(self.plan.group_of[i], k, v.as_f64());
        });
    }

    /// Folds the value of a bucket of a series of group `g` (if any), the
    /// slice's `k`th.
    #[inline(always)]
    fn fold_value(&mut self, g: u32, k: usize, v: f64) {
        if g == NO_GROUP {
            return;
        }
        let plan = self.plan;
        let at = g as usize * self.len + k;
        self.points[at] += 1;
        // The pipeline's output for the bucket: the downsampling function
        // of its one value (`Feed::Straight`).
        self.grid[at].add(plan.agg, plan.ds.run_double_one(v));
    }
}

/// How a slice's rows are read and folded, by how the plan's buckets lie
/// in the rows. Rows start on bucket boundaries and hold whole buckets
/// when their grain ([`codec::row_grain_seconds`]) is a whole number of
/// buckets; the plan's bucket is a whole number of rollup intervals.
enum RowFold {
    /// A bucket per rollup interval, within rows: each cell is read as a
    /// double and folded where it lies; rows of at most
    /// [`codec::SHORT_OFFSETS`] offsets are laid out in a [`ShortRow`].
    Dense(DenseReader, Box<ShortRow>),
    /// Buckets of several intervals within rows: each row's slots are
    /// combined bucket by bucket as they come (the row's first bucket
    /// found once), none left open.
    Whole(SlotReader, u32),
    /// Buckets that may span rows and slices: [`combine`] with each
    /// series' open bucket.
    Spanning(SlotReader, Vec<RollupSlot>),
}

impl RowFold {
    fn new(columns: RollupColumns, interval: &RollupInterval, width: i64) -> RowFold {
        let step = interval.interval_seconds as i64 * 1000;
        let grain = codec::row_grain_seconds(interval) as i64 * 1000;
        let per_bucket = (step > 0 && grain % width == 0 && width % step == 0)
            .then(|| u32::try_from(width / step).ok())
            .flatten();
        match per_bucket {
            Some(1) => RowFold::Dense(DenseReader::new(columns, interval), Box::default()),
            Some(n) => RowFold::Whole(SlotReader::new(columns, interval), n),
            None => RowFold::Spanning(SlotReader::new(columns, interval), Vec::new()),
        }
    }
}

/// A row laid out by offset with its cells as doubles, handed over
/// offset by offset ([`DenseReader::drain`]).
trait DenseCells {
    fn drain_cells(&mut self, f: impl FnMut(u32, Option<f64>, Option<f64>));
}

impl DenseCells for DenseReader {
    #[inline(always)]
    fn drain_cells(&mut self, f: impl FnMut(u32, Option<f64>, Option<f64>)) {
        self.drain(f)
    }
}

impl DenseCells for &ShortRow {
    #[inline(always)]
    fn drain_cells(&mut self, f: impl FnMut(u32, Option<f64>, Option<f64>)) {
        self.drain(f)
    }
}

/// A read thread's sink on the folded path: reads each row of its slice
/// and folds its cells into the slice's buckets there and then, keeping
/// nothing per row (unlike the slot-by-slot read,
/// [`read_rollups`](crate::store::read::rollup::RollupSource::read_rollups),
/// whose sink holds every slot until the read ends).
struct SliceRows<'f, 'a> {
    rows: RowFold,
    fold: &'f mut SliceFold<'a>,
}

impl SliceFold<'_> {
    /// A row of series `i` (laid out in `row`, starting at `base`) with a
    /// bucket per rollup interval, within the row: each cell folded at the
    /// slice's bucket found once for the row plus its offset, as
    /// [`Bucket::emit`] would fold the bucket of that one cell.
    #[inline(always)]
    fn dense_row(&mut self, i: usize, base: u32, row: &mut impl DenseCells) {
        let plan = self.plan;
        let (avg, width) = (plan.column == Column::Avg, plan.width);
        let start = base as i64 * 1000;
        // The row starts on a bucket of the slice.
        let k0 = (start - self.first) / width - self.lo as i64;
        let g = plan.group_of[i];
        row.drain_cells(|at, value, count| {
            // A timestamp without its value (or, for avg, a positive
            // count) gives no point.
            let Some(value) = value else { return };
            let v = match count {
                Some(c) if avg && c > 0.0 => value / c,
                _ if avg => return,
                _ => value,
            };
            match usize::try_from(k0 + at as i64) {
                Ok(k) if k < self.len => {
                    self.seen[i] = true;
                    self.fold_value(g, k, v);
                }
                // Not one of the slice's buckets (no row reaches out of
                // its slice): the general way.
                _ => {
                    let b = start + at as i64 * width;
                    self.close(
                        i,
                        Bucket {
                            start: b,
                            end: b + width,
                            value: Value::Float(value),
                            count: count.unwrap_or(0.0),
                        },
                    );
                }
            }
        });
    }

    /// [`dense_row`](Self::dense_row) of a short row whose cells all fold
    /// into the slice's buckets, for a series of a group: the grid cells
    /// of the row's buckets taken once, and each cell folded by the
    /// group's rule and the downsampler's rule for one value, both chosen
    /// once for the row. False (nothing done) for any other row, which
    /// `dense_row` folds.
    #[inline(always)]
    fn short_row(&mut self, i: usize, base: u32, row: &impl ShortCells) -> bool {
        let plan = self.plan;
        let g = plan.group_of[i];
        let avg = plan.column == Column::Avg;
        let bits = row.offsets(avg);
        if g == NO_GROUP || bits == 0 {
            return false;
        }
        let start = base as i64 * 1000;
        // The row starts on a bucket of the slice.
        let k0 = (start - self.first) / plan.width - self.lo as i64;
        let hi = (63 - bits.leading_zeros()) as i64;
        if k0 < 0 || k0 + hi >= self.len as i64 {
            return false;
        }
        let at = g as usize * self.len + k0 as usize;
        let n = hi as usize + 1;
        let cells = ShortFold {
            grid: &mut self.grid[at..at + n],
            points: &mut self.points[at..at + n],
            ds: plan.ds,
            avg,
        };
        let folded = match FoldBy::of(plan.agg) {
            FoldBy::Sum => fold_by_one::<SumRule>(row, cells),
            FoldBy::Min => fold_by_one::<MinRule>(row, cells),
            FoldBy::Max => fold_by_one::<MaxRule>(row, cells),
        };
        if folded {
            self.seen[i] = true;
        }
        true
    }

    /// A row of series `i` (laid out in `row`) holding whole buckets of
    /// `per_bucket` rollup intervals each: its slots combined as
    /// [`combine`] combines them, without looking buckets up (the row's
    /// first bucket is found once).
    fn row_of_buckets(&mut self, i: usize, row: &mut SlotReader, per_bucket: u32) {
        let plan = self.plan;
        let (column, width) = (plan.column, plan.width);
        let avg = column == Column::Avg;
        let start = row.base() as i64 * 1000;
        // The row starts on a bucket of the slice.
        let k0 = (start - self.first) / width - self.lo as i64;
        let mut open: Option<(u32, Bucket)> = None;
        row.drain(|at, s| {
            // A timestamp without its value (or, for avg, its count) gives
            // no point.
            let Some(value) = s.value else { return };
            let count = match s.count {
                Some(c) => c.as_f64(),
                None if avg => return,
                None => 0.0,
            };
            let k = at / per_bucket;
            let b = start + k as i64 * width;
            let part = Bucket {
                start: b,
                end: b + width,
                value,
                count,
            };
            match &mut open {
                Some((j, acc)) if *j == k => acc.merge(part, column),
                _ => {
                    if let Some((j, done)) = open.replace((k, part)) {
                        self.fold_row_bucket(i, k0 + j as i64, done);
                    }
                }
            }
        });
        if let Some((j, done)) = open {
            self.fold_row_bucket(i, k0 + j as i64, done);
        }
    }

    /// Folds bucket `k` of the slice, one a row held whole.
    fn fold_row_bucket(&mut self, i: usize, k: i64, b: Bucket) {
        match usize::try_from(k) {
            Ok(k) if k < self.len => self.fold_at(i, k, b),
            // Not one of the slice's buckets (no row reaches out of its
            // slice): the general way.
            _ => self.close(i, b),
        }
    }
}

/// The grid cells a short row folds into (its buckets of its group, by
/// offset), and how: the downsampling function `ds` of each cell's one
/// value (for `avg` the value over its count, a count not above zero
/// giving no point).
struct ShortFold<'g> {
    grid: &'g mut [GridCell],
    points: &'g mut [u32],
    ds: &'g Aggregator,
    avg: bool,
}

impl ShortFold<'_> {
    /// Folds the cell at offset `b` as [`SliceFold::fold_value`] folds
    /// it, by the group's rule `R` and the downsampler's rule for one
    /// value `O`: for `avg`, its value over its count (a count not above
    /// zero, or NaN, gives no point: false).
    #[inline(always)]
    fn fold_avg<R: FoldRule, O: OneRule>(&mut self, b: usize, value: f64, count: f64) -> bool {
        if count > 0.0 {
            self.fold_value::<R, O>(b, value / count);
            true
        } else {
            false
        }
    }

    /// [`fold_avg`](Self::fold_avg) of any other column: its value.
    #[inline(always)]
    fn fold_value<R: FoldRule, O: OneRule>(&mut self, b: usize, v: f64) {
        self.points[b] += 1;
        self.grid[b].add_by::<R>(self.ds.run_one_as(O::ONE, v));
    }
}

/// The downsampler's rule for one value as a type, so that a row's loop
/// is compiled for it ([`Aggregator::one_value`]).
trait OneRule {
    const ONE: OneValue;
}
struct PlusZeroOne;
struct SameOne;
struct OtherOne;
impl OneRule for PlusZeroOne {
    const ONE: OneValue = OneValue::PlusZero;
}
impl OneRule for SameOne {
    const ONE: OneValue = OneValue::Same;
}
impl OneRule for OtherOne {
    const ONE: OneValue = OneValue::Other;
}

/// A short row's cells as [`SliceFold::short_row`] folds them: laid out
/// ([`ShortRow`]) or read where they lie ([`ShortView`]).
trait ShortCells {
    /// The offsets that may give a point (bit `at`): those holding a
    /// value, and for `avg` its count.
    fn offsets(&self, avg: bool) -> u64;
    /// Folds each cell of [`offsets`](Self::offsets) into `cells`, in
    /// offset order, as [`ShortFold::fold_avg`] folds it; whether one gave a
    /// point. One loop per rule pair, with no call per cell.
    fn fold<R: FoldRule, O: OneRule>(&self, cells: ShortFold) -> bool;
}

impl ShortCells for ShortRow {
    #[inline(always)]
    fn offsets(&self, avg: bool) -> u64 {
        let (has_value, has_count, _, _) = self.parts();
        if avg {
            has_value & has_count
        } else {
            has_value
        }
    }

    #[inline(always)]
    fn fold<R: FoldRule, O: OneRule>(&self, mut cells: ShortFold) -> bool {
        let (_, _, values, counts) = self.parts();
        let mut bits = self.offsets(cells.avg);
        let mut folded = false;
        while bits != 0 {
            let b = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if cells.avg {
                folded |= cells.fold_avg::<R, O>(b, values[b], counts[b]);
            } else {
                cells.fold_value::<R, O>(b, values[b]);
                folded = true;
            }
        }
        folded
    }
}

impl ShortCells for ShortView<'_> {
    /// The view holds a count at every offset it reads when counts are
    /// read ([`DenseReader::short_view`]).
    #[inline(always)]
    fn offsets(&self, _avg: bool) -> u64 {
        self.offsets()
    }

    #[inline(always)]
    fn fold<R: FoldRule, O: OneRule>(&self, mut cells: ShortFold) -> bool {
        let (mut bits, values, counts) = self.parts();
        let mut folded = false;
        match (cells.avg, counts) {
            (true, Some(counts)) => {
                for k in 0..values.len().min(counts.len()) {
                    let b = bits.trailing_zeros() as usize;
                    bits &= bits.wrapping_sub(1);
                    folded |= cells.fold_avg::<R, O>(b, values.get(k), counts.get(k));
                }
            }
            // No count column read: no average.
            (true, None) => {}
            (false, _) => {
                for k in 0..values.len() {
                    let b = bits.trailing_zeros() as usize;
                    bits &= bits.wrapping_sub(1);
                    cells.fold_value::<R, O>(b, values.get(k));
                    folded = true;
                }
            }
        }
        folded
    }
}

/// [`ShortCells::fold`] by the group's rule `R`, the downsampler's rule
/// for one value chosen here, once for the row.
#[inline(always)]
fn fold_by_one<R: FoldRule>(row: &impl ShortCells, cells: ShortFold) -> bool {
    match cells.ds.one_value() {
        OneValue::PlusZero => row.fold::<R, PlusZeroOne>(cells),
        OneValue::Same => row.fold::<R, SameOne>(cells),
        OneValue::Other => row.fold::<R, OtherOne>(cells),
    }
}

impl RollupRowSink for SliceRows<'_, '_> {
    fn row(
        &mut self,
        i: usize,
        row: RollupRow<'_>,
        start_s: u32,
        end_s: u32,
    ) -> Result<u64, RowError> {
        let fold = &mut *self.fold;
        let cells = match &mut self.rows {
            RowFold::Dense(r, short) => {
                // A row computed by rtsdb is folded from where it lies;
                // any other, laid out first.
                if let Some(view) = r.short_view(row.cells, row.base, start_s, end_s)
                    && fold.short_row(i, row.base, &view)
                {
                    view.cells()
                } else if r.lay_out_short(row.cells, row.base, start_s, end_s, short) {
                    if !fold.short_row(i, row.base, &**short) {
                        fold.dense_row(i, row.base, &mut &**short);
                    }
                    short.cells()
                } else {
                    let cells = r.lay_out(row.cells, row.base, start_s, end_s)?;
                    fold.dense_row(i, row.base, r);
                    cells
                }
            }
            RowFold::Whole(r, per_bucket) => {
                let cells = r.lay_out(row.cells, row.base, start_s, end_s)?;
                fold.row_of_buckets(i, r, *per_bucket);
                cells
            }
            RowFold::Spanning(r, slots) => {
                let cells = r.lay_out(row.cells, row.base, start_s, end_s)?;
                slots.clear();
                r.drain(|_, s| slots.push(s));
                let mut open = fold.open[i].take();
                let (column, bucketer) = (fold.plan.column, fold.plan.bucketer);
                combine(slots, column, &mut open, bucketer, |b| fold.close(i, b));
                fold.open[i] = open;
                cells
            }
        };
        Ok(cells)
    }
}
