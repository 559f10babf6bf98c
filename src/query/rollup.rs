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
use super::downsample::{Bucketer, FillPolicy, Interval};
use super::engine::{
    Frame, Pipeline, QueryContext, SubStats, build_results, finish_all, group_points, select,
};
use super::error::QueryError;
use super::group::Scratch;
use super::limits::Budget;
use super::output::QueryResult;
use super::request::{ValidQuery, ValidSubQuery};
use crate::model::Value;
use crate::rollup::aggregates::{add, pick};
use crate::rollup::codec::{RollupColumns, RollupSlot};
use crate::rollup::{RollupInterval, RollupSettings};

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
        let table = if sub.original.pre_aggregate {
            &interval.pre_agg_table
        } else {
            &interval.table
        };
        let t_read = budget.elapsed();
        // Each series' slots go through its pipeline as they are handed
        // over, not buffered again; a bucket may span two hand-overs.
        let mut pipes = frame.pipes(&fed, sel.tsuids.len());
        let mut open: Vec<Option<Bucket>> = vec![None; sel.tsuids.len()];
        let read = source
            .read_rollups(
                table,
                interval,
                sel.metric_uid,
                &sel.tsuids,
                columns,
                start_s,
                end_s,
                &mut |i, slots| {
                    let p = &mut pipes[i];
                    combine(slots, plan.column, &mut open[i], bucketer, |ts, v| {
                        feed.push(p, ts, v)
                    });
                },
            )
            .map_err(QueryError::Storage)?;
        for (p, b) in pipes.iter_mut().zip(&mut open) {
            if let Some(b) = b.take() {
                b.emit(plan.column, |ts, v| feed.push(p, ts, v));
            }
        }
        let (rows, points) = (read.rows, read.cells);
        stats.rows += rows;
        budget.charge(0, points)?;
        stats.raw_points += points;
        finish_all(&mut pipes);
        let t_agg = budget.elapsed();
        stats.storage_ms += (t_agg - t_read).as_secs_f64() * 1000.0;
        let seen: Vec<bool> = pipes.iter().map(|p| p.seen).collect();
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
        let results = build_results(ctx, q, &fed, &sel, &seen, &[], &mut stats, |_, present| {
            let outs: Vec<&[(i64, Value)]> =
                present.iter().map(|&p| pipes[p].out.as_slice()).collect();
            group_points(&fed, &outs, frame.from, frame.to, &mut scratch)
        })?;
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

/// Combines a series' time-sorted slots into one value per bucket,
/// handed to `emit` in time order as each bucket closes; `open` is the
/// bucket still open from the series' previous slots, and is left open
/// for the next ones (the caller emits it at the end).
fn combine(
    slots: &[RollupSlot],
    column: Column,
    open: &mut Option<Bucket>,
    bucketer: &Bucketer,
    mut emit: impl FnMut(i64, Value),
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
        let count = s.count.map_or(0.0, |c| c.as_f64());
        match open {
            Some(acc) if acc.start == b => {
                acc.value = match column {
                    Column::Min => pick(acc.value, v, false),
                    Column::Max => pick(acc.value, v, true),
                    _ => add(acc.value, v),
                };
                acc.count += count;
            }
            _ => {
                if let Some(done) = open.take() {
                    done.emit(column, &mut emit);
                }
                *open = Some(Bucket {
                    start: b,
                    end: bucketer.next(b),
                    value: v,
                    count,
                });
            }
        }
    }
}
