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
use super::downsample::Interval;
use super::engine::{
    Frame, QueryContext, SubStats, build_results, finish_all, group_points, select,
};
use super::error::QueryError;
use super::group::Scratch;
use super::limits::Budget;
use super::output::QueryResult;
use super::request::{ValidQuery, ValidSubQuery};
use crate::model::Value;
use crate::rollup::aggregates::{add, pick};
use crate::rollup::codec::RollupCell;
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
    let ids = |name: &str| plan.settings.config.aggregation_ids.get(name).copied();
    let wanted: Vec<u8> = match plan.column {
        Column::Sum => ids("sum").into_iter().collect(),
        Column::Count => ids("count").into_iter().collect(),
        Column::Min => ids("min").into_iter().collect(),
        Column::Max => ids("max").into_iter().collect(),
        Column::Avg => ids("sum").into_iter().chain(ids("count")).collect(),
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
        // Each series' cells go through its pipeline as they are handed
        // over, not buffered again.
        let mut pipes = frame.pipes(&fed, sel.tsuids.len());
        let mut points = 0u64;
        let sum_id = ids("sum");
        let rows = source
            .read_rollups(
                table,
                interval,
                sel.metric_uid,
                &sel.tsuids,
                &wanted,
                start_s,
                end_s,
                &mut |i, cells| {
                    points += cells.len() as u64;
                    let p = &mut pipes[i];
                    combine(
                        cells,
                        plan.column,
                        sum_id,
                        |ts| bucketer.bucket(ts),
                        |ts, v| {
                            p.seen = true;
                            p.push_point(ts, v);
                        },
                    );
                },
            )
            .map_err(QueryError::Storage)?;
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

/// One value per bucket from a series' time-sorted cells, handed to
/// `emit` in time order; `sum_id` is the id of the `sum` column (for
/// `avg`).
fn combine(
    cells: &[RollupCell],
    column: Column,
    sum_id: Option<u8>,
    bucket: impl Fn(i64) -> Option<i64>,
    mut emit: impl FnMut(i64, Value),
) {
    let avg = column == Column::Avg;
    // OpenTSDB reads rollup values as doubles: its answers from rollups
    // are never integers.
    let mut flush = |acc: Option<(i64, Value, f64)>| {
        if let Some((b, v, count)) = acc {
            match column {
                Column::Avg if count > 0.0 => emit(b, Value::Float(v.as_f64() / count)),
                Column::Avg => {}
                _ => emit(b, Value::Float(v.as_f64())),
            }
        }
    };
    let mut acc: Option<(i64, Value, f64)> = None;
    let mut rest = cells;
    while let Some(first) = rest.first() {
        // The cells of one timestamp: the column's value, or (for avg)
        // the sum and the count, in whichever order they were written
        // (the later of two for one column wins).
        let n = rest
            .iter()
            .position(|c| c.timestamp != first.timestamp)
            .unwrap_or(rest.len());
        let (same, next) = rest.split_at(n);
        rest = next;
        let (mut v, mut count) = (None, None);
        for c in same {
            if avg && Some(c.aggregator_id) != sum_id {
                count = Some(c.value);
            } else {
                v = Some(c.value);
            }
        }
        // A timestamp without its sum (or, for avg, its count) gives no
        // point.
        let Some(v) = v else { continue };
        if avg && count.is_none() {
            continue;
        }
        let Some(b) = bucket(first.timestamp as i64 * 1000) else {
            continue;
        };
        let count = count.map_or(0.0, |c| c.as_f64());
        match &mut acc {
            Some((ab, av, ac)) if *ab == b => {
                *av = match column {
                    Column::Min => pick(*av, v, false),
                    Column::Max => pick(*av, v, true),
                    _ => add(*av, v),
                };
                *ac += count;
            }
            _ => {
                flush(acc.take());
                acc = Some((b, v, count));
            }
        }
    }
    flush(acc);
}
