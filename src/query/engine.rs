//! The OpenTSDB query engine's public API: [`prepare`] (validation, times
//! fixed), [`Prepared::is_small`] (whether a query is cheap enough to run
//! in place), [`execute`] and the per-sub-query dispatch: a histogram
//! sub-query goes to [`histogram`](super::histogram), a downsampler that
//! matches a rollup to [`rollup`](super::rollup), a cacheable one to the
//! result cache when the caller hands one over (the server's
//! [`QueryCache`], beside the context as the context's rollups are passed
//! to the rollup path), the rest through the raw path here: [`select`] the
//! series, [`read_into`] their [`Pipeline`]s, [`build_results`].
//!
//! The jobs live below this file, each in its own: series selection
//! ([`select`](super::select)), the per-series pipeline and time frame
//! ([`pipeline`](super::pipeline)), the parallel read
//! ([`read`](super::read)), group-result assembly
//! ([`results`](super::results)).

use super::cache::QueryCache;
use super::context::QueryContext;
use super::error::QueryError;
use super::group::Scratch;
use super::histogram;
use super::limits::Budget;
use super::output::{QueryResponse, QueryResult, RowRange};
use super::pipeline::{Cut, Frame, finish_all, read_range};
use super::pool;
use super::read::{MIN_SERIES_PER_THREAD, RunFold, read_into};
use super::request::{TsQuery, ValidQuery, ValidSubQuery};
use super::results::{build_results, group_points, series_notes};
use super::rollup::{self, RollupAnswer};
use super::select::{select, series_bound};
use super::stats::SubStats;
use crate::model::Value;
use crate::model::row_span::ROW_SPAN_MS;

/// Runs a query: validation, then every sub-query in order, cacheable
/// ones through `cache` when there is one.
pub fn execute(
    ctx: &QueryContext,
    q: &TsQuery,
    cache: Option<&QueryCache>,
) -> Result<QueryResponse, QueryError> {
    prepare(ctx, q)?.run(ctx, cache)
}

/// Checks a query and fixes its times ("now" is `ctx`'s): the first half
/// of [`execute`], so that a caller can see how much the query will read
/// ([`Prepared::is_small`]) before choosing where to run it.
pub fn prepare(ctx: &QueryContext, q: &TsQuery) -> Result<Prepared, QueryError> {
    if q.delete && !ctx.allow_delete {
        // QueryRpc's wording. OpenTSDB only checks the DELETE verb and
        // seems to act on a JSON `"delete":true` whatever the setting;
        // we refuse that too rather than delete data unasked.
        return Err(QueryError::BadRequest {
            message: "Bad request".into(),
            details: Some(
                "Deleting data is not enabled (tsd.http.query.allow_delete=false)".into(),
            ),
        });
    }
    Ok(Prepared {
        valid: q.validate(ctx.now_ms, ctx.default_tz)?,
    })
}

/// Most hourly rows a query counted as small may read and downsample
/// ([`Prepared::is_small`]); a row written out point by point (no
/// downsampler) counts as [`RAW_ROW_COST`] rows.
///
/// A small query costs less than handing it to another thread: the TSD
/// runs it on the connection's own async worker. Handing a query to the
/// blocking pool costs two thread wake-ups: 4.5-8 context switches and
/// 0.095-0.20 ms of server CPU per one-host query against 1.0 and
/// 0.05-0.12 ms run in place (release, 1,000 hosts at 10 s, one hour,
/// `avg:1m-avg` of one host, keep-alive loop, 2026-11-27, load 8-10).
/// A row of 1 s points (3,600) costs the worker about 0.03-0.04 ms read
/// and downsampled, 0.45 ms read and written out point by point (the
/// same loop, one series, 1 to 8 hours), so a small query of such rows
/// takes at most about 0.3 ms downsampled, 0.9 ms raw. (Rows of
/// millisecond points may hold more.)
pub const SMALL_QUERY_ROWS: u64 = 8;

/// What a row read without a downsampler counts for against
/// [`SMALL_QUERY_ROWS`]: writing each point out costs about ten times
/// reading and downsampling it (see there), so a raw small query reads
/// at most 2 rows.
const RAW_ROW_COST: u64 = 4;

// A small query reads on one thread: it never spawns the read threads
// (`read_into`), whose wait would block the async worker it runs on.
const _: () = assert!(SMALL_QUERY_ROWS < 2 * MIN_SERIES_PER_THREAD as u64);

/// A query [`prepare`]d: valid, its times fixed.
#[derive(Debug, Clone)]
pub struct Prepared {
    valid: ValidQuery,
}

impl Prepared {
    /// Whether the query reads at most [`SMALL_QUERY_ROWS`] rows (counted
    /// from the index before reading anything: series the filters can
    /// select, times hours; a row of a sub-query with no downsampler
    /// counts [`RAW_ROW_COST`] times), from a store on this machine, and
    /// writes nothing: cheap enough to run where it is asked, with no
    /// hand-off.
    pub fn is_small(&self, ctx: &QueryContext) -> bool {
        let q = &self.valid;
        if q.original.delete || !ctx.source.reads_locally() {
            return false;
        }
        let mut rows = 0u64;
        for sub in &q.queries {
            if sub.histogram.is_some() {
                return false;
            }
            let (start, end) = read_range(q, sub);
            let hours = end.saturating_sub(start) / ROW_SPAN_MS + 1;
            let cost = if sub.downsample.is_some() {
                1
            } else {
                RAW_ROW_COST
            };
            let read = hours.saturating_mul(series_bound(ctx, sub) as u64);
            rows = rows.saturating_add(read.saturating_mul(cost));
            if rows > SMALL_QUERY_ROWS {
                return false;
            }
        }
        true
    }

    /// Runs every sub-query in order, cacheable ones through `cache` when
    /// there is one: the second half of [`execute`].
    pub fn run(
        &self,
        ctx: &QueryContext,
        cache: Option<&QueryCache>,
    ) -> Result<QueryResponse, QueryError> {
        run_valid(ctx, &self.valid, cache)
    }
}

fn run_valid(
    ctx: &QueryContext,
    valid: &ValidQuery,
    cache: Option<&QueryCache>,
) -> Result<QueryResponse, QueryError> {
    let q = &valid.original;
    let mut budget = Budget::watching(ctx.limits, ctx.progress.clone());
    let global_annotations = if !q.no_annotations && q.global_annotations {
        ctx.source
            .global_annotations(valid.start_ms.max(0) as u64, valid.end_ms.max(0) as u64)
            .map_err(|e| QueryError::Storage(e.to_string()))?
    } else {
        Vec::new()
    };
    let mut results = Vec::new();
    let mut summary = serde_json::Map::new();
    let mut totals = SubStats::default();
    let mut deletions = Vec::new();
    for sub in &valid.queries {
        let t0 = budget.elapsed();
        let (mut res, stats) = run_sub(ctx, cache, valid, sub, &mut budget, &mut deletions)?;
        if stats.unresolved > 0 {
            tracing::warn!(
                sub_query = sub.index,
                skipped = stats.unresolved,
                "skipped series whose tag UIDs no longer resolve"
            );
        }
        if q.show_stats {
            for r in &mut res {
                r.stats = Some(stats.to_json(sub.index));
            }
        }
        summary.insert(
            format!("queryIdx_{:02}", sub.index),
            serde_json::json!({
                "processingTime": (budget.elapsed() - t0).as_secs_f64() * 1000.0,
            }),
        );
        totals.add(&stats);
        results.extend(res);
    }
    let summary = (q.show_summary || q.show_stats).then(|| {
        let mut s = match totals.to_json(0) {
            serde_json::Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        s.remove("queryIndex");
        s.insert(
            "timeTotal".into(),
            (budget.elapsed().as_secs_f64() * 1000.0).into(),
        );
        s.extend(summary);
        serde_json::Value::Object(s)
    });
    Ok(QueryResponse {
        results,
        ms_resolution: q.ms_resolution,
        arrays: q.arrays,
        show_tsuids: q.show_tsuids,
        summary,
        global_annotations,
        deletions,
    })
}

fn run_sub(
    ctx: &QueryContext,
    cache: Option<&QueryCache>,
    q: &ValidQuery,
    sub: &ValidSubQuery,
    budget: &mut Budget,
    deletions: &mut Vec<RowRange>,
) -> Result<(Vec<QueryResult>, SubStats), QueryError> {
    if let Some(hq) = &sub.histogram {
        // Histogram cells are written straight to the store (never
        // cached): read every time.
        let mut stats = SubStats::default();
        let results = histogram::run(ctx, q, sub, hq, &mut stats)?;
        budget.check_time()?;
        return Ok((results, stats));
    }
    let fallback;
    let sub = match rollup::plan(ctx, q, sub) {
        None => sub,
        Some(plan) => match rollup::run(ctx, q, sub, budget, &plan)? {
            RollupAnswer::Rolled(results, stats) => return Ok((results, stats)),
            RollupAnswer::Raw(raw) => {
                fallback = raw;
                &*fallback
            }
        },
    };
    // Pre-aggregates asked for without a rollup interval are read from
    // the default interval's pre-aggregate table by the raw path below;
    // the result cache holds answers from the data table only.
    let pre_ctx;
    let (ctx, cache) = match rollup::pre_aggregate_source(ctx, q, sub) {
        Some(source) => {
            pre_ctx = ctx.reading(source);
            (&pre_ctx, None)
        }
        None => (ctx, cache),
    };
    if let Some(answer) = cache.and_then(|c| c.run(ctx, q, sub, budget)) {
        return answer;
    }
    let mut stats = SubStats::default();
    let sel = select(ctx, sub)?;
    stats.unresolved = sel.unresolved;
    stats.series = sel.tsuids.len() as u64;
    let frame = Frame::new(q, sub, budget, sel.tsuids.len())?;
    let mut fold = RunFold::new(sub, &sel);
    let mut pipes = match fold {
        Some(_) => frame.bare_pipes(sub, sel.tsuids.len()),
        None => frame.pipes(sub, sel.tsuids.len()),
    };
    let t_read = budget.elapsed();
    let (before, charged) = (stats.clone(), budget.charged());
    let mut cells = read_into(
        ctx,
        &sel,
        &mut pipes,
        frame.read_start,
        frame.read_end,
        Cut::default(),
        budget,
        &mut stats,
        fold.as_ref(),
    )?;
    if fold.as_ref().is_some_and(RunFold::failed) {
        // A series left its group's grid: read again, folding at the end.
        fold = None;
        (stats, pipes) = (before, frame.pipes(sub, sel.tsuids.len()));
        budget.rewind(charged);
        cells = read_into(
            ctx,
            &sel,
            &mut pipes,
            frame.read_start,
            frame.read_end,
            Cut::default(),
            budget,
            &mut stats,
            None,
        )?;
    }
    // Series annotations per position in `tsuids`, unless not wanted.
    let notes = if !q.original.no_annotations && !cells.is_empty() {
        series_notes(sel.tsuids.len(), cells, q.start_ms, q.end_ms)
    } else {
        Vec::new()
    };
    // A delete query answers with what it read; the caller then drops
    // every row its scan covered (whole hours, so possibly points outside
    // the range).
    if q.original.delete && !sel.tsuids.is_empty() {
        deletions.push(RowRange {
            tsuids: sel.tsuids.clone(),
            start_ms: frame.scan_start,
            end_ms: frame.scan_end,
        });
    }
    finish_all(&mut pipes);
    let t_agg = budget.elapsed();
    stats.storage_ms = (t_agg - t_read).as_secs_f64() * 1000.0;
    let seen: Vec<bool> = pipes.iter().map(|p| p.seen).collect();
    let mut scratch = Scratch::with_threads(ctx.source.read_threads());
    let results = build_results(
        ctx,
        q,
        sub,
        &sel,
        &seen,
        &notes,
        &mut stats,
        |g, present| match &fold {
            Some(f) => f.finish(g, &sub.aggregator, frame.from, frame.to),
            None => {
                let outs: Vec<&[(i64, Value)]> =
                    present.iter().map(|&p| pipes[p].out.as_slice()).collect();
                group_points(sub, &outs, frame.from, frame.to, &mut scratch)
            }
        },
    )?;
    budget.check_time()?;
    stats.aggregation_ms = (budget.elapsed() - t_agg).as_secs_f64() * 1000.0;
    pool::OUTPUTS.give_back(pipes.into_iter().map(|p| p.out));
    Ok((results, stats))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{Db, PendingPoint};
    use crate::model::{Annotation, Tsuid, Uid};
    use crate::query::QueryOptions;
    use crate::query::parse_get;
    use crate::store::read::{ReadStats, SeriesSource};

    /// A database holding `sys.cpu` for `hosts` hosts (`host=web0`...)
    /// and `sys.mem` for one, a point every 10 s over 2015-01-01's first
    /// two hours.
    fn db(hosts: usize) -> (tempfile::TempDir, std::sync::Arc<Db>) {
        let (dir, db) = Db::open_temp();
        let mut key = String::new();
        let mut batch = Vec::new();
        let series = (0..hosts)
            .map(|h| ("sys.cpu", format!("web{h}")))
            .chain([("sys.mem", "web0".to_string())]);
        for (metric, host) in series {
            for t in (1_420_070_400..1_420_077_600).step_by(10) {
                let value = Value::Int(t % 100);
                let (series, ts) = db
                    .resolve(metric, t, value, &[("host", &host)], &mut key)
                    .unwrap();
                batch.push(PendingPoint { series, ts, value });
            }
        }
        db.append(&batch).unwrap();
        (dir, db)
    }

    #[test]
    fn a_watched_query_counts_its_points_and_stops_when_cancelled() {
        let (_dir, db) = db(20);
        let progress = std::sync::Arc::new(crate::query::QueryProgress::new());
        let ctx = QueryContext::new(&db, &QueryOptions::default()).with_progress(progress.clone());
        let q = parse_get("start=1420070400&end=1420077599&m=sum:sys.cpu").unwrap();
        execute(&ctx, &q, None).unwrap();
        // 20 series of 720 points.
        assert_eq!(progress.points_read(), 20 * 720);
        progress.cancel();
        let e = execute(&ctx, &q, None).unwrap_err();
        assert!(matches!(e, QueryError::Cancelled(_)), "{e:?}");
        assert_eq!(e.status(), 503);
    }

    #[test]
    fn small_queries_are_counted_from_the_index() {
        let (_dir, db) = db(20);
        let ctx = QueryContext::new(&db, &QueryOptions::default());
        let small = |qs: &str| {
            let q = parse_get(qs).unwrap();
            prepare(&ctx, &q).unwrap().is_small(&ctx)
        };
        let hour = "start=1420070400&end=1420073999";
        // One series, its hour and the next (the 1m buckets' scan range).
        assert!(small(&format!("{hour}&m=avg:1m-avg:sys.cpu{{host=web3}}")));
        // Four series of two rows each: 8 rows, the most a small one reads.
        let four = "sys.cpu{host=web1|web2|web3|web4}";
        assert!(small(&format!("{hour}&m=sum:1m-avg:{four}")));
        assert!(!small(&format!(
            "{hour}&m=sum:1m-avg:sys.cpu{{host=web1|web2|web3|web4|web5}}"
        )));
        // Without a downsampler the scan ends with the range's hour, and a
        // row counts 4: one series, then two, then three.
        assert!(small(&format!("{hour}&m=sum:sys.mem")));
        assert!(small(&format!("{hour}&m=sum:sys.cpu{{host=web1|web2}}")));
        assert!(!small(&format!(
            "{hour}&m=sum:sys.cpu{{host=web1|web2|web3}}"
        )));
        // Sub-queries add up: 6 + 2 rows, then 8 + 2, then 4 + 8.
        let three = "sys.cpu{host=web1|web2|web3}";
        assert!(small(&format!(
            "{hour}&m=sum:1m-avg:{three}&m=sum:1m-avg:sys.mem"
        )));
        assert!(!small(&format!(
            "{hour}&m=sum:1m-avg:{four}&m=sum:1m-avg:sys.mem"
        )));
        assert!(!small(&format!("{hour}&m=sum:sys.mem&m=sum:1m-avg:{four}")));
        // A filter the index cannot count from names bounds nothing.
        assert!(!small(&format!("{hour}&m=sum:1m-avg:sys.cpu{{host=*}}")));
        assert!(!small(&format!(
            "{hour}&m=sum:1m-avg:sys.cpu{{host=regexp(web1)}}"
        )));
        assert!(!small(&format!("{hour}&m=sum:1m-avg:sys.cpu")));
        // Many hours of one series.
        assert!(!small(
            "start=1420070400&end=1420099200&m=sum:1m-avg:sys.cpu{host=web3}"
        ));
        // `padding` reads an hour more each way: 3 series of 2 rows, then
        // of 4.
        assert!(small(&format!("{hour}&m=sum:1m-avg:{three}")));
        assert!(!small(&format!("{hour}&m=sum:1m-avg:{three}&padding")));
        // Names that do not resolve select nothing (the run then fails,
        // or skips the value): nothing to read.
        assert!(small(&format!("{hour}&m=sum:no.such.metric")));
        assert!(small(&format!("{hour}&m=sum:sys.cpu{{host=nosuch}}")));
        assert!(small(&format!("{hour}&m=sum:sys.cpu{{nosuchkey=web1}}")));
    }

    #[test]
    fn deletes_histograms_and_remote_stores_are_never_small() {
        let (_dir, db) = db(1);
        let mut ctx = QueryContext::new(&db, &QueryOptions::default());
        ctx.allow_delete = true;
        let hour = "start=1420070400&end=1420073999";
        let q = parse_get(&format!("{hour}&m=sum:sys.mem")).unwrap();
        assert!(prepare(&ctx, &q).unwrap().is_small(&ctx));
        let mut delete = q.clone();
        delete.delete = true;
        assert!(!prepare(&ctx, &delete).unwrap().is_small(&ctx));
        let q = parse_get(&format!("{hour}&m=sum:percentiles[99]:sys.mem")).unwrap();
        assert!(!prepare(&ctx, &q).unwrap().is_small(&ctx));
    }

    /// A source whose reads wait on other servers (a cluster's).
    struct Remote<'a>(&'a Db);

    impl SeriesSource for Remote<'_> {
        fn read_tsuids(
            &self,
            tsuids: &[Tsuid],
            start_ms: u64,
            end_ms: u64,
            sink: &mut crate::store::read::PointSink<'_>,
        ) -> crate::store::Result<ReadStats> {
            self.0.read_tsuids(tsuids, start_ms, end_ms, sink)
        }

        fn read_series(
            &self,
            metric: Uid,
            start_ms: u64,
            end_ms: u64,
            want: &mut dyn FnMut(&Tsuid) -> bool,
        ) -> crate::store::Result<Vec<crate::store::read::SeriesData>> {
            self.0.read_series(metric, start_ms, end_ms, want)
        }

        fn read_histograms(
            &self,
            tsuids: &[Tsuid],
            start_ms: u64,
            end_ms: u64,
        ) -> crate::store::Result<crate::store::histograms::HistogramRead> {
            self.0.read_histograms(tsuids, start_ms, end_ms)
        }

        fn global_annotations(
            &self,
            start_ms: u64,
            end_ms: u64,
        ) -> crate::store::Result<Vec<Annotation>> {
            self.0.global_annotations(start_ms, end_ms)
        }
    }

    #[test]
    fn a_small_query_of_a_remote_store_is_not_small() {
        let (_dir, db) = db(1);
        let remote = Remote(&db);
        let mut ctx = QueryContext::new(&db, &QueryOptions::default());
        ctx.source = &remote;
        let q = parse_get("start=1420070400&end=1420073999&m=sum:sys.mem").unwrap();
        let prepared = prepare(&ctx, &q).unwrap();
        assert!(!prepared.is_small(&ctx));
        // Prepared and run in two steps, or in one: the same answer.
        assert_eq!(
            prepared.run(&ctx, None).unwrap().to_json(),
            execute(&ctx, &q, None).unwrap().to_json()
        );
    }
}
