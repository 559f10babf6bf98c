//! Executing a query: per sub-query, resolve the metric and filters,
//! pick the matching series from the index, stream their rows through
//! downsample → rate, merge each group with the aggregator, and compute
//! `tags`/`aggregateTags` as `SpanGroup.computeTags` does.

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use chrono_tz::Tz;

use super::aggregator::Aggregator;
use super::cache::{self, CacheUse, EpochSource, QueryCache};
use super::downsample::{Bucketer, Downsampler, DownsamplerState, FillPolicy, Interval};
use super::error::QueryError;
use super::filter::FilterType;
use super::group::{self, Scratch};
use super::limits::{Budget, QueryLimits};
use super::options::QueryOptions;
use super::output::{QueryResponse, QueryResult};
use super::pool;
use super::rate::Rate;
use super::request::{TsQuery, ValidQuery, ValidSubQuery};
use crate::db::RollupSource;
use crate::index::SeriesIndex;
use crate::model::Tsuid;
use crate::model::hash::FastMap;
use crate::model::row_span::{ROW_SPAN_MS, ROW_SPAN_SECS, hour_floor};
use crate::model::{Annotation, Uid, UidKind, UidWidths, Value};
use crate::store::read::{Point, ReadStats, SeriesSource};

use super::output::RowRange;
use crate::uid::{UidTable, UidTableError};

/// Everything a query needs from the server.
pub struct QueryContext<'a> {
    pub source: &'a dyn SeriesSource,
    pub uids: &'a UidTable,
    pub index: &'a SeriesIndex,
    pub limits: QueryLimits,
    /// "now" in epoch ms (relative times, missing end).
    pub now_ms: u64,
    /// Zone for absolute dates and calendar downsampling when the query
    /// names none ([`QueryOptions::default_tz`]).
    pub default_tz: Tz,
    /// `tsd.query.skip_unresolved_tagvs`.
    pub skip_unresolved_tagvs: bool,
    /// `tsd.http.query.allow_delete`.
    pub allow_delete: bool,
    /// The result cache, if this context may use one (the server's).
    pub cache: Option<CacheUse<'a>>,
    /// The rollup tables, when the database has rollups configured.
    pub rollups: Option<&'a dyn RollupSource>,
}

impl<'a> QueryContext<'a> {
    /// A context with [`QueryOptions::default`].
    pub fn new(source: &'a dyn SeriesSource, uids: &'a UidTable, index: &'a SeriesIndex) -> Self {
        Self::with_options(source, uids, index, &QueryOptions::default())
    }

    /// A context with the options the server built at start.
    pub fn with_options(
        source: &'a dyn SeriesSource,
        uids: &'a UidTable,
        index: &'a SeriesIndex,
        o: &QueryOptions,
    ) -> Self {
        QueryContext {
            source,
            uids,
            index,
            limits: o.limits,
            now_ms: chrono::Utc::now().timestamp_millis().max(0) as u64,
            default_tz: o.default_tz,
            skip_unresolved_tagvs: o.skip_unresolved_tagvs,
            allow_delete: o.allow_delete,
            cache: None,
            rollups: None,
        }
    }

    /// This context with the result cache `cache`, checked against
    /// `epochs`.
    pub fn with_cache(mut self, cache: &'a QueryCache, epochs: &'a dyn EpochSource) -> Self {
        self.cache = Some(CacheUse { cache, epochs });
        self
    }

    /// This context reading rollups from `source` where a downsampler
    /// matches a configured rollup.
    pub fn with_rollups(mut self, source: &'a dyn RollupSource) -> Self {
        self.rollups = Some(source);
        self
    }

    pub(crate) fn widths(&self) -> UidWidths {
        UidWidths {
            metric: self.uids.width(UidKind::Metric),
            tagk: self.uids.width(UidKind::TagKey),
            tagv: self.uids.width(UidKind::TagValue),
        }
    }
}

/// Counters reported by `showStats`/`showSummary` and the log.
#[derive(Debug, Clone, Default)]
pub(super) struct SubStats {
    pub(super) series: u64,
    pub(super) raw_points: u64,
    pub(super) rows: u64,
    pub(super) bytes: u64,
    /// Series skipped because a tag UID no longer resolves to a name.
    pub(super) unresolved: u64,
    pub(super) output_points: u64,
    pub(super) storage_ms: f64,
    pub(super) aggregation_ms: f64,
}

impl SubStats {
    fn add(&mut self, o: &SubStats) {
        self.series += o.series;
        self.raw_points += o.raw_points;
        self.rows += o.rows;
        self.bytes += o.bytes;
        self.unresolved += o.unresolved;
        self.output_points += o.output_points;
        self.storage_ms += o.storage_ms;
        self.aggregation_ms += o.aggregation_ms;
    }
}

/// Runs a query: validation, then every sub-query in order.
pub fn execute(ctx: &QueryContext, q: &TsQuery) -> Result<QueryResponse, QueryError> {
    prepare(ctx, q)?.run(ctx)
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

    /// Runs every sub-query in order: the second half of [`execute`].
    pub fn run(&self, ctx: &QueryContext) -> Result<QueryResponse, QueryError> {
        run_valid(ctx, &self.valid)
    }
}

/// At most how many series `sub` selects, from the index's counts alone
/// (no series list is built): the metric's series, or fewer where a
/// `literal_or` filter names the only values its key may have. A name
/// that does not resolve counts none: [`select`] then fails the query, or
/// (`skip_unresolved_tagvs`) selects nothing through that value.
fn series_bound(ctx: &QueryContext, sub: &ValidSubQuery) -> usize {
    if !sub.tsuids.is_empty() {
        return sub.tsuids.len();
    }
    let name = sub.metric.as_deref().unwrap_or_default();
    let Ok(metric) = ctx.uids.get_id(UidKind::Metric, name) else {
        return 0;
    };
    ctx.index.with_metric(metric, |m| {
        let Some(m) = m else { return 0 };
        let mut bound = m.len();
        for f in &sub.filters {
            let Some(values) = f.literals() else { continue };
            let Ok(k) = ctx.uids.get_id(UidKind::TagKey, &f.tagk) else {
                return 0;
            };
            let named: usize = values
                .iter()
                .filter_map(|v| ctx.uids.lookup_id(UidKind::TagValue, v).ok().flatten())
                .map(|v| m.with_tag(k, v).len())
                .sum();
            bound = bound.min(named);
        }
        bound
    })
}

fn run_valid(ctx: &QueryContext, valid: &ValidQuery) -> Result<QueryResponse, QueryError> {
    let q = &valid.original;
    let mut budget = Budget::new(ctx.limits);
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
        let (mut res, stats) = run_sub(ctx, valid, sub, &mut budget, &mut deletions)?;
        if stats.unresolved > 0 {
            tracing::warn!(
                sub_query = sub.index,
                skipped = stats.unresolved,
                "skipped series whose tag UIDs no longer resolve"
            );
        }
        if q.show_stats {
            for r in &mut res {
                r.stats = Some(stats_json(&stats, sub.index));
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
        let mut s = match stats_json(&totals, 0) {
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

fn stats_json(s: &SubStats, index: usize) -> serde_json::Value {
    serde_json::json!({
        "queryIndex": index,
        "datapoints": s.output_points,
        "rawDatapoints": s.raw_points,
        "rowsRead": s.rows,
        "bytesRead": s.bytes,
        "seriesMatched": s.series,
        "unresolvedSeries": s.unresolved,
        "storageTime": s.storage_ms,
        "aggregationTime": s.aggregation_ms,
    })
}

/// The hour-aligned range of rows OpenTSDB scans for a query
/// (`getScanStartTimeSeconds`/`getScanEndTimeSeconds`), in ms, inclusive.
pub(super) fn scan_range(q: &ValidQuery, sub: &ValidSubQuery) -> (u64, u64) {
    let iv = sub
        .downsample
        .as_ref()
        .map(|d| d.interval_ms() / 1000)
        .unwrap_or(0);
    let mut start = (q.start_ms.max(0) / 1000) as u64;
    let mut end = (q.end_ms.max(0) as u64).div_ceil(1000);
    if iv > 0 {
        start -= start % iv;
        end = end - end % iv + iv;
    }
    // Whole rows: the store clamps ends past the last row itself.
    let start = hour_floor(start);
    let end = hour_floor(end) + ROW_SPAN_SECS as u64;
    (start * 1000, end * 1000 - 1)
}

/// The rows a sub-query reads, in ms, inclusive: its [`scan_range`], and
/// with `padding` (which wants the nearest point on either side of the
/// range) one more hour each way. Only for reading: a delete keeps to the
/// rows OpenTSDB's scan covers.
pub(super) fn read_range(q: &ValidQuery, sub: &ValidSubQuery) -> (u64, u64) {
    let (scan_start, scan_end) = scan_range(q, sub);
    if q.original.padding {
        (
            scan_start.saturating_sub(ROW_SPAN_MS),
            scan_end + ROW_SPAN_MS,
        )
    } else {
        (scan_start, scan_end)
    }
}

/// Which tag UIDs still have names, remembered for one query: series share
/// most of their tag values, so each distinct UID is looked up once.
#[derive(Default)]
struct NameCheck {
    known: FastMap<(UidKind, Uid), bool>,
    /// The tags of the last series that resolved: series come sorted, so
    /// most of a series' pairs are its predecessor's, known good without
    /// a lookup.
    last: Vec<(Uid, Uid)>,
}

impl NameCheck {
    fn exists(&mut self, ctx: &QueryContext, kind: UidKind, uid: Uid) -> Result<bool, QueryError> {
        if let Some(&e) = self.known.get(&(kind, uid)) {
            return Ok(e);
        }
        let e = match ctx.uids.get_name(kind, uid) {
            Ok(_) => true,
            Err(UidTableError::NoSuchId { .. }) => false,
            Err(e) => return Err(e.into()),
        };
        self.known.insert((kind, uid), e);
        Ok(e)
    }

    /// False if one of the series' tag UIDs was deleted.
    fn resolves(&mut self, ctx: &QueryContext, tsuid: &Tsuid) -> Result<bool, QueryError> {
        for (j, &(k, v)) in tsuid.tags.iter().enumerate() {
            let last = self.last.get(j).copied();
            if last.is_none_or(|l| l.0 != k) && !self.exists(ctx, UidKind::TagKey, k)? {
                return Ok(false);
            }
            if last.is_none_or(|l| l.1 != v) && !self.exists(ctx, UidKind::TagValue, v)? {
                return Ok(false);
            }
        }
        self.last.clone_from(&tsuid.tags);
        Ok(true)
    }
}

/// Per-series streaming state: downsample → rate → output points.
pub(super) struct Pipeline<'a> {
    ds: Option<Downsampler<'a>>,
    rate: Option<Rate>,
    stage: Vec<(i64, Value)>,
    pub(super) out: Vec<(i64, Value)>,
    pub(super) seen: bool,
    /// Outputs to make room for as the read starts (downsampled buckets).
    room: usize,
    /// Taken when the first point at or after the cache's settle
    /// boundary arrives (or at the end of the read if none does).
    pub(super) snap: Option<PipeState>,
}

/// A series' pipeline just before the settle boundary: what the cache
/// keeps to go on from there without reading the points before it.
#[derive(Debug, Clone)]
pub(super) struct PipeState {
    ds: Option<DownsamplerState>,
    rate: Option<Rate>,
    /// How many of the pipeline's outputs were out by then.
    pub(super) settled_len: usize,
    /// Whether any point before the boundary was read.
    pub(super) seen: bool,
}

impl PipeState {
    pub(super) fn heap_bytes(&self) -> usize {
        self.ds.as_ref().map_or(0, DownsamplerState::heap_bytes)
    }
}

impl<'a> Pipeline<'a> {
    fn new(sub: &'a ValidSubQuery, frame: &'a Frame) -> Self {
        Pipeline {
            ds: sub
                .downsample
                .as_ref()
                .zip(frame.bucketer.as_ref())
                .map(|(d, b)| Downsampler::new(d, b, frame.fill_range)),
            rate: sub.rate.map(Rate::new),
            stage: Vec::new(),
            out: Vec::new(),
            seen: false,
            room: 0,
            snap: None,
        }
    }

    /// A pipeline going on from `state`, with no outputs yet.
    pub(super) fn resume(sub: &'a ValidSubQuery, frame: &'a Frame, state: &PipeState) -> Self {
        Pipeline {
            ds: sub
                .downsample
                .as_ref()
                .zip(frame.bucketer.as_ref())
                .zip(state.ds.as_ref())
                .map(|((d, b), s)| Downsampler::resume(d, b, frame.fill_range, s)),
            rate: state.rate.clone(),
            stage: Vec::new(),
            out: Vec::new(),
            seen: state.seen,
            room: 0,
            snap: None,
        }
    }

    fn take_snapshot(&mut self) {
        self.snap = Some(PipeState {
            ds: self.ds.as_ref().map(Downsampler::state),
            rate: self.rate.clone(),
            settled_len: self.out.len(),
            seen: self.seen,
        });
    }

    /// Feeds one point (the rollup path feeds its combined cells).
    pub(super) fn push_point(&mut self, ts: i64, v: Value) {
        self.push(ts, v)
    }

    /// Feeds a row's points: the stages are picked once per row, not per
    /// point.
    fn push_all(&mut self, pts: &[Point]) {
        match (&mut self.ds, &mut self.rate) {
            (Some(d), None) => d.push_points(pts, &mut self.out),
            (None, Some(r)) => r.push_points(pts, &mut self.out),
            _ => {
                for pt in pts {
                    self.push(pt.timestamp_ms() as i64, pt.value());
                }
            }
        }
    }

    fn push(&mut self, ts: i64, v: Value) {
        match (&mut self.ds, &mut self.rate) {
            (None, None) => self.out.push((ts, v)),
            (None, Some(r)) => r.push(ts, v, &mut self.out),
            (Some(d), None) => d.push(ts, v, &mut self.out),
            (Some(d), Some(r)) => {
                d.push(ts, v, &mut self.stage);
                Self::rate_stage(r, &mut self.stage, &mut self.out);
            }
        }
    }

    fn finish(&mut self) {
        if let Some(d) = self.ds.take() {
            match &mut self.rate {
                None => d.finish(&mut self.out),
                Some(r) => {
                    d.finish(&mut self.stage);
                    Self::rate_stage(r, &mut self.stage, &mut self.out);
                }
            }
        }
    }

    /// Feeds the downsampled points waiting in `stage` to the rate.
    fn rate_stage(r: &mut Rate, stage: &mut Vec<(i64, Value)>, out: &mut Vec<(i64, Value)>) {
        for (t, v) in stage.drain(..) {
            r.push(t, v, out);
        }
    }
}

/// The series a sub-query chose, in the order they are read, and their
/// groups.
#[derive(Debug, Clone)]
pub(super) struct Selected {
    pub(super) metric_uid: Uid,
    pub(super) metric_name: String,
    /// Every grouped series, sorted; pipelines follow this order.
    pub(super) tsuids: Vec<Tsuid>,
    /// Per output series (in output order): positions in `tsuids`,
    /// ascending.
    pub(super) groups: Vec<Vec<usize>>,
    /// Series of the metric in the index (picks scan or lookups).
    pub(super) total: usize,
    pub(super) unresolved: u64,
}

impl Selected {
    pub(super) fn heap_bytes(&self) -> usize {
        let t: usize = self
            .tsuids
            .iter()
            .map(|t| 48 + t.tags.capacity() * 16)
            .sum();
        let g: usize = self.groups.iter().map(|g| 24 + g.capacity() * 8).sum();
        t + g + self.metric_name.len()
    }
}

/// Picks a sub-query's series and groups them.
pub(super) fn select(ctx: &QueryContext, sub: &ValidSubQuery) -> Result<Selected, QueryError> {
    let widths = ctx.widths();
    let (metric_uid, metric_name, candidates, group_keys, total) = if !sub.tsuids.is_empty() {
        select_tsuids(ctx, sub, widths)?
    } else {
        select_metric(ctx, sub)?
    };
    // Drop series whose tag UIDs were deleted (OpenTSDB fails the query).
    let mut series: Vec<Tsuid> = Vec::with_capacity(candidates.len());
    let mut check = NameCheck::default();
    let mut unresolved = 0;
    for tsuid in candidates {
        if check.resolves(ctx, &tsuid)? {
            series.push(tsuid);
        } else {
            unresolved += 1;
        }
    }
    // Group: by the values of the group-by keys, ordered by UID bytes.
    let mut groups: BTreeMap<(Vec<Uid>, Option<Tsuid>), Vec<usize>> = BTreeMap::new();
    for (i, s) in series.iter().enumerate() {
        let mut key = Vec::with_capacity(group_keys.len());
        for gk in &group_keys {
            match s.tags.iter().find(|(k, _)| k == gk) {
                Some(&(_, v)) => key.push(v),
                None => break,
            }
        }
        if key.len() != group_keys.len() {
            continue;
        }
        let per_series = sub.aggregator.is_none().then(|| s.clone());
        groups.entry((key, per_series)).or_default().push(i);
    }
    let grouped: Vec<usize> = {
        let mut v: Vec<usize> = groups.values().flatten().copied().collect();
        v.sort_unstable();
        v
    };
    // Position of each series in `tsuids`.
    let mut slot = vec![usize::MAX; series.len()];
    for (p, &i) in grouped.iter().enumerate() {
        slot[i] = p;
    }
    // `grouped` is ascending: the grouped series move out in order.
    let tsuids: Vec<Tsuid> = series
        .into_iter()
        .enumerate()
        .filter_map(|(i, t)| (slot[i] != usize::MAX).then_some(t))
        .collect();
    let groups = groups
        .into_values()
        .map(|m| m.iter().map(|&i| slot[i]).collect())
        .collect();
    Ok(Selected {
        metric_uid,
        metric_name,
        tsuids,
        groups,
        total,
        unresolved,
    })
}

/// The time frame of one sub-query run: what is read, how points fall
/// into buckets, which buckets are filled.
pub(super) struct Frame {
    pub(super) scan_start: u64,
    pub(super) scan_end: u64,
    pub(super) read_start: u64,
    pub(super) read_end: u64,
    pub(super) bucketer: Option<Bucketer>,
    /// First and last bucket to fill; (0, -1) when nothing is filled.
    pub(super) fill_range: (i64, i64),
    /// The output range `[from, to]` aggregated.
    pub(super) from: i64,
    pub(super) to: i64,
}

impl Frame {
    pub(super) fn new(
        q: &ValidQuery,
        sub: &ValidSubQuery,
        budget: &Budget,
        series: usize,
    ) -> Result<Frame, QueryError> {
        let (scan_start, scan_end) = scan_range(q, sub);
        let (read_start, read_end) = read_range(q, sub);
        let bucketer = sub
            .downsample
            .as_ref()
            .map(|d| Bucketer::new(d, q.tz, q.start_ms, q.end_ms));
        let fill_range = match (&sub.downsample, &bucketer) {
            (Some(d), Some(b)) if d.fill != FillPolicy::None => {
                let first = b.bucket(q.start_ms).unwrap_or(q.start_ms);
                let last = match d.interval {
                    Interval::All => first,
                    _ => b.bucket(q.end_ms).unwrap_or(q.end_ms),
                };
                let per_series = match d.interval {
                    Interval::All => 1,
                    _ => ((last - first) as u64 / d.interval_ms().max(1)).saturating_add(1),
                };
                budget.check_output(per_series.saturating_mul(series as u64))?;
                (first, last)
            }
            _ => (0, -1),
        };
        // With `padding` the whole scanned range is aggregated, then cut
        // down to the range plus the nearest point on either side.
        let (from, to) = if q.original.padding {
            (read_start as i64, read_end as i64)
        } else {
            (q.start_ms, q.end_ms)
        };
        Ok(Frame {
            scan_start,
            scan_end,
            read_start,
            read_end,
            bucketer,
            fill_range,
            from,
            to,
        })
    }

    /// `n` pipelines with their output buffers.
    pub(super) fn pipes<'a>(&'a self, sub: &'a ValidSubQuery, n: usize) -> Vec<Pipeline<'a>> {
        let mut pipes = self.bare_pipes(sub, n);
        give_buffers(&mut pipes);
        pipes
    }

    /// `n` pipelines without output buffers yet: [`read_run`] gives a
    /// run's pipelines theirs as the run starts. A run folded as it goes
    /// ([`RunFold`]) gave its buffers back a moment before, still in
    /// cache, and the last given back are taken first. (Buffers taken
    /// for every series up front served a downsampling query better, by
    /// 5-20 % of its time in four alternating pairs; a rate folded as it
    /// goes was 16-18 % faster taking them run by run.)
    fn bare_pipes<'a>(&'a self, sub: &'a ValidSubQuery, n: usize) -> Vec<Pipeline<'a>> {
        // Downsampled outputs: room for the buckets read up front (up to a
        // bound: a long window of a sparse series must not reserve much),
        // rather than growing each series' list step by step.
        let buckets = match sub.downsample.as_ref().map(|d| d.interval) {
            Some(Interval::Fixed(iv)) if iv > 0 => {
                ((self.read_end.saturating_sub(self.read_start)) / iv + 1).min(256) as usize
            }
            _ => 0,
        };
        (0..n)
            .map(|_| {
                let mut p = Pipeline::new(sub, self);
                p.room = buckets;
                p
            })
            .collect()
    }
}

/// Gives each of `pipes` that has no output buffer one from the pool
/// (see [`Frame::bare_pipes`]), with room for its downsampled buckets.
fn give_buffers(pipes: &mut [Pipeline]) {
    let bare = pipes.iter().filter(|p| p.out.capacity() == 0).count();
    if bare == 0 {
        return;
    }
    let mut kept = pool::OUTPUTS.take(bare);
    for p in pipes.iter_mut().filter(|p| p.out.capacity() == 0) {
        p.out = kept.next().unwrap_or_default();
        p.out.reserve(p.room);
    }
}

/// Which points a read feeds to the pipelines.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Cut {
    /// Points before this were read already (the cache holds them).
    pub(super) skip_before: Option<i64>,
    /// Snapshot each pipeline before its first point at or after this.
    pub(super) settle_at: Option<i64>,
}

/// Reads `sel`'s points in `[start, end]` through `pipes`; charges the
/// budget and fills `stats` with what was read. Returns the annotation
/// cells met.
///
/// A read of many series is split into contiguous runs of them, read by
/// as many threads as the source offers ([`SeriesSource::read_threads`]):
/// each run has its own pipelines, so the threads share nothing but the
/// budget and the queue of runs, and a series' points still arrive in
/// time order. With a `fold`, each run is handed to it as soon as it is
/// read (see [`RunFold`]), and the read stops early once the fold failed.
#[allow(clippy::too_many_arguments)]
pub(super) fn read_into(
    ctx: &QueryContext,
    sel: &Selected,
    pipes: &mut [Pipeline],
    start: u64,
    end: u64,
    cut: Cut,
    budget: &mut Budget,
    stats: &mut SubStats,
    fold: Option<&RunFold>,
) -> Result<Vec<(usize, Vec<u8>)>, QueryError> {
    if start > end {
        // A cached run whose every row read is settled.
        settle_unsnapped(pipes, cut);
        return Ok(Vec::new());
    }
    let tsuids = &sel.tsuids;
    let hours = (end.saturating_sub(start)) / ROW_SPAN_MS + 1;
    let use_scan = tsuids.len() > 1
        && (tsuids.len() * 2 >= sel.total || hours.saturating_mul(tsuids.len() as u64) > 200_000);
    let how = ReadPlan {
        metric: sel.metric_uid,
        start,
        end,
        cut,
        use_scan,
    };
    let threads = ctx
        .source
        .read_threads()
        .min(tsuids.len() / MIN_SERIES_PER_THREAD)
        .max(1);
    let budget: &Budget = budget;
    let mut read = if threads == 1 {
        let read = read_run(ctx, &how, tsuids, pipes, budget)?;
        if let Some(f) = fold {
            f.done(0, pipes);
        }
        read
    } else {
        // More runs than threads, taken from a queue: a thread that drew
        // cheap runs (or more of the core) takes more of them. Runs that
        // are folded as they are read are small enough for their outputs
        // to stay in the reading core's cache until folded.
        let runs = match fold {
            None => (threads * RUNS_PER_THREAD).min(tsuids.len() / MIN_SERIES_PER_THREAD),
            Some(_) => tsuids.len().div_ceil(FOLD_RUN_SERIES),
        };
        let per = tsuids.len().div_ceil(runs.max(1));
        let queue: Mutex<Vec<Run>> = Mutex::new(
            tsuids
                .chunks(per)
                .zip(pipes.chunks_mut(per))
                .enumerate()
                .map(|(n, (tsuids, pipes))| Run {
                    offset: n * per,
                    tsuids,
                    pipes,
                })
                .rev()
                .collect(),
        );
        let work = || -> Result<ReadStats, QueryError> {
            let mut total = ReadStats::default();
            loop {
                let Some(Run {
                    offset,
                    tsuids,
                    pipes,
                }) = queue.lock().pop()
                else {
                    return Ok(total);
                };
                total.add(read_run(ctx, &how, tsuids, pipes, budget)?, offset);
                if let Some(f) = fold
                    && !f.done(offset, pipes)
                {
                    return Ok(total);
                }
            }
        };
        let mut total = ReadStats::default();
        for r in crate::parallel::run_all((0..threads).map(|_| work)) {
            total.add(r?, 0);
        }
        total
    };
    settle_unsnapped(pipes, cut);
    stats.rows += read.rows;
    stats.bytes += read.bytes;
    stats.raw_points += read.points;
    budget.charge(read.bytes, 0)?;
    // Annotations in series order, as one thread would have met them.
    read.annotations.sort_by_key(|(i, _)| *i);
    Ok(read.annotations)
}

/// Fewest series a reading thread (and a run of a parallel read) is
/// given: below this a thread costs more to start than it saves.
const MIN_SERIES_PER_THREAD: usize = 64;

/// Runs of series per reading thread in a parallel read.
const RUNS_PER_THREAD: usize = 4;

/// Series in a run of a read folded as it goes ([`RunFold`]): 32 series'
/// rate outputs over an hour at 10 s are about 280 KB, well inside a
/// core's second-level cache here (1 MB) beside the points read.
const FOLD_RUN_SERIES: usize = 32;

/// A sub-query's groups folded run by run while its series are read: the
/// thread that reads a run of series folds it at once ([`group::GridFold`]),
/// while the run's outputs are still in its cache, if every run before
/// it is folded already; otherwise the run waits for the thread that
/// folds its predecessor. Series are thus folded in series order, as
/// [`group::aggregate`] folds them, bit for bit; each run's buffers go
/// back to the pool once it is folded. Made for a rate's outputs (one
/// per point read, all doubles): without it, a 1,000-series rate over an
/// hour wrote 8.6 MB of outputs past the cache and read them back for
/// the fold at the end. If a series leaves its group's grid the fold
/// fails, the read stops, and the sub-query is read again the ordinary
/// way.
pub(super) struct RunFold {
    /// Each series' group, by position in the read.
    group_of: Vec<usize>,
    state: Mutex<FoldState>,
}

struct FoldState {
    /// Position of the first series not folded yet.
    next: usize,
    /// Runs read but not folded yet (a run before them is still being
    /// read), by the position of their first series: each series'
    /// outputs, empty for a series that met no point.
    waiting: BTreeMap<usize, Vec<pool::Outputs>>,
    /// Per group.
    folds: Vec<group::GridFold>,
    failed: bool,
}

impl RunFold {
    /// A fold of `sel`'s groups as `sub` asks, where it may pay: a rate
    /// (whose outputs are one double per point) under an aggregator that
    /// folds.
    pub(super) fn new(sub: &ValidSubQuery, sel: &Selected) -> Option<RunFold> {
        sub.rate?;
        let mut group_of = vec![0; sel.tsuids.len()];
        let mut folds = Vec::with_capacity(sel.groups.len());
        for (g, members) in sel.groups.iter().enumerate() {
            folds.push(group::GridFold::new(&sub.aggregator, true)?);
            for &p in members {
                group_of[p] = g;
            }
        }
        Some(RunFold {
            group_of,
            state: Mutex::new(FoldState {
                next: 0,
                waiting: BTreeMap::new(),
                folds,
                failed: false,
            }),
        })
    }

    /// Takes the run of series from `offset`, just read (its pipelines
    /// are ended here), and folds every run now in order. False once the
    /// fold has failed.
    fn done(&self, offset: usize, pipes: &mut [Pipeline]) -> bool {
        finish_all(pipes);
        let outs: Vec<pool::Outputs> = pipes
            .iter_mut()
            .map(|p| match p.seen {
                true => std::mem::take(&mut p.out),
                false => Vec::new(),
            })
            .collect();
        let mut st = self.state.lock();
        if st.failed {
            return false;
        }
        st.waiting.insert(offset, outs);
        loop {
            let next = st.next;
            let Some(outs) = st.waiting.remove(&next) else {
                return true;
            };
            let folded = fold_run(&mut st.folds, &self.group_of[next..], &outs);
            st.next += outs.len();
            pool::OUTPUTS.give_back(outs.into_iter());
            if !folded {
                st.failed = true;
                return false;
            }
        }
    }

    pub(super) fn failed(&self) -> bool {
        self.state.lock().failed
    }

    /// Appends group `g`'s points with timestamps in `[from, to]`.
    fn finish(&self, g: usize, agg: &Aggregator, from: i64, to: i64) -> Vec<(i64, Value)> {
        let mut dps = Vec::new();
        self.state.lock().folds[g].finish(agg, from, to, &mut dps);
        dps
    }
}

/// Folds a run's outputs into their groups' folds, consecutive series of
/// a group together; `group_of` starts at the run's first series.
fn fold_run(folds: &mut [group::GridFold], group_of: &[usize], outs: &[pool::Outputs]) -> bool {
    let mut at = 0;
    while at < outs.len() {
        let g = group_of[at];
        let end = at
            + group_of[at..outs.len()]
                .iter()
                .take_while(|&&h| h == g)
                .count();
        let series: Vec<&group::Points> = outs[at..end].iter().map(|o| o.as_slice()).collect();
        if !folds[g].add(&series) {
            return false;
        }
        at = end;
    }
    true
}

/// A run of a parallel read: consecutive series from `offset` in the
/// read's list, with their pipelines.
struct Run<'p, 'a> {
    offset: usize,
    tsuids: &'p [Tsuid],
    pipes: &'p mut [Pipeline<'a>],
}

/// What every run of one read shares.
struct ReadPlan {
    metric: Uid,
    start: u64,
    end: u64,
    cut: Cut,
    use_scan: bool,
}

/// Snapshots, at the end of a read with a settle boundary, every pipeline
/// that met no point at or after it.
fn settle_unsnapped(pipes: &mut [Pipeline], cut: Cut) {
    if cut.settle_at.is_some() {
        for p in pipes.iter_mut().filter(|p| p.snap.is_none()) {
            p.take_snapshot();
        }
    }
}

/// Reads one run of series (`tsuids`, with `pipes` in the same order).
fn read_run(
    ctx: &QueryContext,
    how: &ReadPlan,
    tsuids: &[Tsuid],
    pipes: &mut [Pipeline],
    budget: &Budget,
) -> Result<ReadStats, QueryError> {
    give_buffers(pipes);
    let mut failure: Option<QueryError> = None;
    let cut = how.cut;
    // Points are charged to the shared budget a batch at a time: a limit
    // is passed by at most a batch per thread before the read stops.
    let mut uncharged = 0u64;
    let mut sink = |i: usize, pts: &[Point]| {
        uncharged += pts.len() as u64;
        if uncharged >= CHARGE_EVERY_POINTS {
            if let Err(e) = budget.charge(0, uncharged) {
                failure = Some(e);
                return false;
            }
            uncharged = 0;
        }
        let p = &mut pipes[i];
        if p.ds.is_none() {
            // An output per point (a rate's, or the point itself).
            p.out.reserve(if p.out.is_empty() {
                first_room(pts, how.end)
            } else {
                pts.len()
            });
        }
        match cut.settle_at {
            None if cut.skip_before.is_none() => {
                p.seen = true;
                p.push_all(pts);
            }
            _ => {
                let skip = cut.skip_before.unwrap_or(i64::MIN);
                let settle = cut.settle_at.unwrap_or(i64::MAX);
                for pt in pts {
                    let ts = pt.timestamp_ms() as i64;
                    if ts < skip {
                        continue;
                    }
                    if ts >= settle && p.snap.is_none() {
                        p.take_snapshot();
                    }
                    p.seen = true;
                    p.push(ts, pt.value());
                }
            }
        }
        true
    };
    let read = if how.use_scan {
        ctx.source
            .scan_tsuids(how.metric, tsuids, how.start, how.end, &mut sink)
    } else {
        ctx.source
            .read_tsuids(tsuids, how.start, how.end, &mut sink)
    }?;
    match failure {
        Some(e) => Err(e),
        None => budget.charge(0, uncharged).map(|()| read),
    }
}

/// Room for a series' outputs at its first row of `pts`, in a window
/// ending at `end_ms`: as many points as the row's rate would bring until
/// then, between twice and eight times the row. A query of the last hour
/// meets a series' stored rows and then its buffered rest, often several
/// times as many points (a fifth of the hour stored, the rest buffered,
/// right after the bench's load); room for twice the first row was copied
/// again for every series, 6 % of the sum-of-rate query's time.
fn first_room(pts: &[Point], end_ms: u64) -> usize {
    let n = pts.len();
    match (pts.first(), pts.last()) {
        (Some(a), Some(b)) if b.timestamp_ms() > a.timestamp_ms() => {
            let span = u128::from(b.timestamp_ms() - a.timestamp_ms());
            let ahead = u128::from(end_ms.saturating_sub(a.timestamp_ms()));
            let rate_based = (n as u128 - 1) * ahead / span + 1;
            usize::try_from(rate_based)
                .unwrap_or(usize::MAX)
                .clamp(2 * n, 8 * n)
        }
        _ => 2 * n,
    }
}

/// Points a reading thread counts by itself before charging the budget.
const CHARGE_EVERY_POINTS: u64 = 4096;

/// Ends every pipeline (flushes open buckets, trailing fills).
pub(super) fn finish_all(pipes: &mut [Pipeline]) {
    for p in pipes {
        p.finish();
    }
}

/// Builds the output series of a sub-query from the pipelines' outputs;
/// `dps` computes a group's points from its present members.
#[allow(clippy::too_many_arguments)]
pub(super) fn build_results(
    ctx: &QueryContext,
    q: &ValidQuery,
    sub: &ValidSubQuery,
    sel: &Selected,
    seen: &[bool],
    notes: &[Vec<Annotation>],
    stats: &mut SubStats,
    mut dps: impl FnMut(usize, &[usize]) -> Vec<(i64, Value)>,
) -> Result<Vec<QueryResult>, QueryError> {
    let widths = ctx.widths();
    let nan_as_null = sub
        .downsample
        .as_ref()
        .is_some_and(|d| d.fill == FillPolicy::Null);
    let query_json = q.original.show_query.then(|| show_query(sub));
    let mut results = Vec::with_capacity(sel.groups.len());
    for (g, members) in sel.groups.iter().enumerate() {
        let present: Vec<usize> = members.iter().copied().filter(|&p| seen[p]).collect();
        if present.is_empty() {
            continue;
        }
        let mut points = dps(g, &present);
        if q.original.padding {
            pad(&mut points, q.start_ms, q.end_ms);
        }
        stats.output_points += points.len() as u64;
        let (tags, aggregate_tags) = compute_tags(ctx, present.iter().map(|&p| &sel.tsuids[p]))?;
        let mut annotations: Vec<Annotation> = Vec::new();
        if !notes.is_empty() {
            for &p in &present {
                annotations.extend(notes[p].iter().cloned());
            }
            // Collections.sort: stable, by raw start time.
            annotations.sort_by_key(|a| a.start_time);
        }
        let mut hex: Vec<String> = Vec::new();
        if q.original.show_tsuids {
            hex = present
                .iter()
                .map(|&p| sel.tsuids[p].to_hex(&widths))
                .collect();
            hex.sort();
        }
        results.push(QueryResult {
            metric: sel.metric_name.clone(),
            tags,
            aggregate_tags,
            tsuids: hex,
            dps: points,
            nan_as_null,
            query: query_json.clone(),
            stats: None,
            annotations,
            show_empty_annotations: false,
            query_index: sub.index,
        });
    }
    Ok(results)
}

/// A group's points from its members' outputs: the member's own points
/// for `none`, else the group-by merge.
pub(super) fn group_points(
    sub: &ValidSubQuery,
    outs: &[&[(i64, Value)]],
    from: i64,
    to: i64,
    scratch: &mut Scratch,
) -> Vec<(i64, Value)> {
    let mut dps = Vec::new();
    if sub.aggregator.is_none() {
        if let Some(out) = outs.first() {
            dps.extend(out.iter().copied().filter(|p| p.0 >= from && p.0 <= to));
        }
    } else {
        group::aggregate(
            outs,
            &sub.aggregator,
            sub.rate.is_some(),
            from,
            to,
            scratch,
            &mut dps,
        );
    }
    dps
}

fn run_sub(
    ctx: &QueryContext,
    q: &ValidQuery,
    sub: &ValidSubQuery,
    budget: &mut Budget,
    deletions: &mut Vec<RowRange>,
) -> Result<(Vec<QueryResult>, SubStats), QueryError> {
    if let Some(hq) = &sub.histogram {
        // Histogram cells are written straight to the store (never
        // cached): read every time.
        let mut stats = SubStats::default();
        let results = super::histogram::run(ctx, q, sub, hq, &mut stats)?;
        budget.check_time()?;
        return Ok((results, stats));
    }
    let fallback;
    let sub = match super::rollup::plan(ctx, q, sub) {
        None => sub,
        Some(plan) => match super::rollup::run(ctx, q, sub, budget, &plan)? {
            super::rollup::RollupAnswer::Rolled(results, stats) => return Ok((results, stats)),
            super::rollup::RollupAnswer::Raw(raw) => {
                fallback = raw;
                &*fallback
            }
        },
    };
    if let Some(cu) = ctx.cache {
        match cache::Plan::new(ctx, q, sub) {
            Some(plan) => return cache::run(ctx, q, sub, budget, plan),
            None => cu.cache.bypass(),
        }
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

/// Keeps the points of time-sorted `dps` in `[start, end]` plus the last
/// one before `start` and the first one after `end`, where they exist.
fn pad(dps: &mut Vec<(i64, Value)>, start: i64, end: i64) {
    let first_in = dps.partition_point(|p| p.0 < start);
    let past_end = dps.partition_point(|p| p.0 <= end);
    dps.truncate((past_end + 1).min(dps.len()));
    dps.drain(..first_in.saturating_sub(1));
}

/// Parses the annotation cells a read met and keeps, per series, those
/// starting in `[start_ms, end_ms]`. Unreadable cells are skipped.
pub(super) fn series_notes(
    n: usize,
    cells: Vec<(usize, Vec<u8>)>,
    start_ms: i64,
    end_ms: i64,
) -> Vec<Vec<Annotation>> {
    let mut out = vec![Vec::new(); n];
    for (i, json) in cells {
        match Annotation::from_storage(&json) {
            Ok(a) if (start_ms..=end_ms).contains(&a.start_ms()) && i < n => out[i].push(a),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "skipping an unreadable annotation"),
        }
    }
    out
}

type Selection = (Uid, String, Vec<Tsuid>, Vec<Uid>, usize);

fn select_tsuids(
    ctx: &QueryContext,
    sub: &ValidSubQuery,
    widths: UidWidths,
) -> Result<Selection, QueryError> {
    let mut list: Vec<Tsuid> = Vec::new();
    for hex in &sub.tsuids {
        let t = Tsuid::parse_hex(hex, &widths)
            .map_err(|e| QueryError::bad(format!("Invalid TSUID '{hex}': {e}")))?;
        if let Some(first) = list.first()
            && first.metric != t.metric
        {
            return Err(QueryError::bad(format!(
                "One or more TSUIDs did not share the same metric [{}] [{}]",
                first.metric.to_hex(widths.metric),
                t.metric.to_hex(widths.metric)
            )));
        }
        if !list.contains(&t) {
            list.push(t);
        }
    }
    let metric = list[0].metric;
    let name = ctx
        .uids
        .get_name(UidKind::Metric, metric)
        .map_err(|e| QueryError::bad(e.to_string()))?;
    list.sort();
    let n = list.len();
    Ok((metric, name.to_string(), list, Vec::new(), n))
}

/// Picks a metric query's series from the index. Every filter is
/// evaluated against the distinct tag values the index holds for its key
/// (never against rows), then the matching postings are intersected.
fn select_metric(ctx: &QueryContext, sub: &ValidSubQuery) -> Result<Selection, QueryError> {
    let name = sub.metric.clone().unwrap_or_default();
    let metric = ctx.uids.get_id(UidKind::Metric, &name)?;
    // Resolve tag keys and literal values first, as OpenTSDB does.
    let mut tagks: Vec<Uid> = Vec::with_capacity(sub.filters.len());
    let mut literals: HashMap<Uid, HashSet<Uid>> = HashMap::new();
    for f in &sub.filters {
        let k = ctx.uids.get_id(UidKind::TagKey, &f.tagk)?;
        tagks.push(k);
        if let Some(lits) = f.literals() {
            let set = literals.entry(k).or_default();
            for l in lits {
                match ctx.uids.lookup_id(UidKind::TagValue, l)? {
                    Some(v) => {
                        set.insert(v);
                    }
                    None if ctx.skip_unresolved_tagvs => {}
                    None => {
                        return Err(QueryError::NoSuchName(format!(
                            "No such name for 'tagv': '{l}'"
                        )));
                    }
                }
            }
        }
    }
    let group_keys: Vec<Uid> = {
        let set: BTreeSet<Uid> = sub
            .filters
            .iter()
            .zip(&tagks)
            .filter(|(f, _)| f.group_by)
            .map(|(_, k)| *k)
            .collect();
        set.into_iter().collect()
    };
    let filter_keys: BTreeSet<Uid> = tagks.iter().copied().collect();
    ctx.index.with_metric(metric, |m| {
        let Some(m) = m else {
            return Ok((metric, name.clone(), Vec::new(), group_keys.clone(), 0));
        };
        // Per key: the values allowed (positive filters) or refused (not_*).
        let mut allowed: BTreeMap<Uid, HashSet<Uid>> = BTreeMap::new();
        let mut refused: HashMap<Uid, HashSet<Uid>> = HashMap::new();
        for (k, v) in &literals {
            allowed.insert(*k, v.clone());
        }
        for (f, &k) in sub.filters.iter().zip(&tagks) {
            if f.kind == FilterType::LiteralOr {
                continue;
            }
            let mut pass = HashSet::new();
            let mut fail = HashSet::new();
            for v in m.tag_values(k) {
                let Ok(vname) = ctx.uids.get_name(UidKind::TagValue, v) else {
                    continue;
                };
                if f.matches(Some(&vname)) {
                    pass.insert(v);
                } else {
                    fail.insert(v);
                }
            }
            if f.is_positive() {
                match allowed.get_mut(&k) {
                    Some(a) => a.retain(|v| pass.contains(v)),
                    None => {
                        allowed.insert(k, pass);
                    }
                }
            } else {
                refused.entry(k).or_default().extend(fail);
            }
        }
        // Intersect the postings of the constrained keys, smallest first.
        let mut lists: Vec<Vec<u32>> = allowed
            .iter()
            .map(|(&k, vals)| {
                let mut ids: Vec<u32> = vals
                    .iter()
                    .flat_map(|&v| m.with_tag(k, v))
                    .copied()
                    .collect();
                ids.sort_unstable();
                ids
            })
            .collect();
        lists.sort_by_key(Vec::len);
        let ids: Vec<u32> = match lists.split_first() {
            None => (0..m.len() as u32).collect(),
            Some((first, rest)) => first
                .iter()
                .copied()
                .filter(|id| rest.iter().all(|l| l.binary_search(id).is_ok()))
                .collect(),
        };
        let mut out = Vec::with_capacity(ids.len());
        'series: for id in ids {
            let t = &m.series[id as usize];
            for (k, bad) in &refused {
                if let Some((_, v)) = t.tags.iter().find(|(tk, _)| tk == k)
                    && bad.contains(v)
                {
                    continue 'series;
                }
            }
            if sub.explicit_tags
                && (t.tags.len() != filter_keys.len()
                    || !t.tags.iter().all(|(k, _)| filter_keys.contains(k)))
            {
                continue;
            }
            out.push(t.clone());
        }
        out.sort();
        Ok((metric, name.clone(), out, group_keys.clone(), m.len()))
    })
}

/// `SpanGroup.computeTags`: a key whose value differs between series goes
/// to `aggregateTags`; every other key seen in any series goes to `tags`.
/// Works on UIDs (one name per UID, so equal UIDs are equal names) and
/// resolves only the keys and values that end up in the output.
pub(super) fn compute_tags<'a>(
    ctx: &QueryContext,
    series: impl Iterator<Item = &'a Tsuid>,
) -> Result<(BTreeMap<String, String>, Vec<String>), QueryError> {
    // Few distinct keys per group: a small vector beats a map.
    let mut seen: Vec<(Uid, Option<Uid>)> = Vec::new();
    for s in series {
        for &(k, v) in &s.tags {
            match seen.iter_mut().find(|(sk, _)| *sk == k) {
                Some((_, cur)) => {
                    if cur.is_some_and(|c| c != v) {
                        *cur = None;
                    }
                }
                None => seen.push((k, Some(v))),
            }
        }
    }
    let mut tags = BTreeMap::new();
    let mut agg = Vec::new();
    for (k, v) in seen {
        let k = ctx.uids.get_name(UidKind::TagKey, k)?.to_string();
        match v {
            Some(v) => {
                tags.insert(k, ctx.uids.get_name(UidKind::TagValue, v)?.to_string());
            }
            None => agg.push(k),
        }
    }
    agg.sort();
    Ok((tags, agg))
}

/// The sub-query as `showQuery` prints it (`TSSubQuery`'s JSON).
pub(crate) fn show_query(sub: &ValidSubQuery) -> serde_json::Value {
    let o = &sub.original;
    let filters: Vec<serde_json::Value> = sub
        .filters
        .iter()
        .map(|f| {
            serde_json::json!({
                "tagk": f.tagk, "filter": f.filter, "group_by": f.group_by, "type": f.kind.name()
            })
        })
        .collect();
    serde_json::json!({
        "aggregator": sub.aggregator.name,
        "metric": sub.metric,
        "tsuids": o.tsuids,
        "downsample": o.downsample,
        "rate": o.rate,
        "filters": filters,
        "explicitTags": o.explicit_tags,
        "index": sub.index,
        "tags": o.tags,
        "rateOptions": sub.rate,
        "percentiles": o.percentiles,
        "rollupUsage": o.rollup_usage,
        "preAggregate": o.pre_aggregate,
        "showHistogramBuckets": o.show_histogram_buckets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{Db, PendingPoint};
    use crate::query::parse_get;

    /// `hosts` series of `m` over two hours at 10 s, float counters
    /// tagged with a host and one of three data centres; `gap`: a host
    /// that misses one point.
    fn counters(hosts: usize, gap: Option<usize>) -> (tempfile::TempDir, std::sync::Arc<Db>) {
        let (dir, db) = Db::open_temp();
        let mut key = String::new();
        let mut batch = Vec::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for h in 0..hosts {
            let (host, dc) = (format!("h{h:03}"), format!("dc{}", h % 3));
            let mut v = 0.0;
            for (k, t) in (1_420_070_400..1_420_077_600).step_by(10).enumerate() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                v += (x % 1000) as f64 / 7.0;
                if gap == Some(h) && k == 500 {
                    continue;
                }
                let value = Value::Float(v);
                let tags = [("host", host.as_str()), ("dc", dc.as_str())];
                let (series, ts) = db.resolve("m", t, value, &tags, &mut key).unwrap();
                batch.push(PendingPoint { series, ts, value });
            }
        }
        db.append(&batch).unwrap();
        (dir, db)
    }

    /// Each group's points of `qs`'s first sub-query, as bits: folded run
    /// by run as the series are read (`None` if that fold failed), and
    /// folded at the end from every series' outputs.
    #[allow(clippy::type_complexity)]
    fn folded_and_plain(db: &Db, qs: &str) -> (Option<Vec<Vec<(i64, u64)>>>, Vec<Vec<(i64, u64)>>) {
        let ctx = QueryContext::new(db, db.uids(), db.index());
        let prepared = prepare(&ctx, &parse_get(qs).unwrap()).unwrap();
        let (valid, sub) = (&prepared.valid, &prepared.valid.queries[0]);
        let sel = select(&ctx, sub).unwrap();
        let mut budget = Budget::new(ctx.limits);
        let frame = Frame::new(valid, sub, &budget, sel.tsuids.len()).unwrap();
        let mut read = |fold: Option<&RunFold>| {
            let mut pipes = frame.pipes(sub, sel.tsuids.len());
            let (start, end) = (frame.read_start, frame.read_end);
            let mut stats = SubStats::default();
            read_into(
                &ctx,
                &sel,
                &mut pipes,
                start,
                end,
                Cut::default(),
                &mut budget,
                &mut stats,
                fold,
            )
            .unwrap();
            finish_all(&mut pipes);
            pipes
        };
        let bits = |dps: Vec<(i64, Value)>| -> Vec<(i64, u64)> {
            dps.into_iter()
                .map(|(t, v)| (t, v.as_f64().to_bits()))
                .collect()
        };
        let fold = RunFold::new(sub, &sel).expect("a rate under a folding aggregator");
        read(Some(&fold));
        let folded = (!fold.failed()).then(|| {
            (0..sel.groups.len())
                .map(|g| bits(fold.finish(g, &sub.aggregator, frame.from, frame.to)))
                .collect()
        });
        let pipes = read(None);
        let mut scratch = Scratch::default();
        let plain = sel
            .groups
            .iter()
            .map(|members| {
                let outs: Vec<&[(i64, Value)]> = members
                    .iter()
                    .filter(|&&p| pipes[p].seen)
                    .map(|&p| pipes[p].out.as_slice())
                    .collect();
                bits(group_points(sub, &outs, frame.from, frame.to, &mut scratch))
            })
            .collect();
        (folded, plain)
    }

    /// Folding each run of series as it is read answers what the fold at
    /// the end answers, bit for bit, for one group and for groups whose
    /// series interleave; a series off its group's grid fails the fold
    /// (and the query then reads again, folding at the end).
    #[test]
    fn a_fold_made_while_reading_agrees_with_the_fold_at_the_end() {
        let (_dir, db) = counters(200, None);
        let (_gap_dir, gapped) = counters(200, Some(170));
        let hours = "start=1420070400&end=1420077599";
        for agg in ["sum", "avg", "min", "max", "count"] {
            for m in ["m", "m{dc=*}"] {
                let qs = format!("{hours}&m={agg}:rate:{m}");
                let (folded, plain) = folded_and_plain(&db, &qs);
                assert!(plain.iter().all(|g| g.len() == 719), "{qs}");
                assert_eq!(folded.as_ref(), Some(&plain), "{qs}");
                let (folded, _) = folded_and_plain(&gapped, &qs);
                assert_eq!(folded, None, "{qs}");
                // Through the whole query: the answer after the fold
                // failed is the plain one.
                let ctx = QueryContext::new(&*gapped, gapped.uids(), gapped.index());
                let answer = execute(&ctx, &parse_get(&qs).unwrap()).unwrap();
                let (_, plain) = folded_and_plain(&gapped, &qs);
                let got: Vec<Vec<(i64, u64)>> = answer
                    .results
                    .iter()
                    .map(|r| {
                        r.dps
                            .iter()
                            .map(|(t, v)| (*t, v.as_f64().to_bits()))
                            .collect()
                    })
                    .collect();
                assert_eq!(got, plain, "{qs}");
            }
        }
    }

    /// A first row's room follows its rate up to the window's end, within
    /// twice and eight times the row.
    #[test]
    fn a_first_rows_room_follows_its_rate_to_the_windows_end() {
        let row = |n: u64, step_ms: u64| -> Vec<Point> {
            (0..n)
                .map(|i| Point::new(1_000_000 + i * step_ms, Value::Int(1)))
                .collect()
        };
        // 80 points every 10 s, in a window of an hour: the hour's 360.
        assert_eq!(first_room(&row(80, 10_000), 1_000_000 + 3_599_999), 360);
        // A row already reaching the end: twice the row still.
        assert_eq!(first_room(&row(80, 10_000), 1_000_000 + 790_000), 160);
        // A dense row in a long window: eight times the row at most.
        assert_eq!(first_room(&row(10, 1), 1_000_000 + 86_400_000), 80);
        // One point, or none: twice the row.
        assert_eq!(first_room(&row(1, 10_000), u64::MAX), 2);
        assert_eq!(first_room(&[], u64::MAX), 0);
    }

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
    fn small_queries_are_counted_from_the_index() {
        let (_dir, db) = db(20);
        let ctx = QueryContext::new(&*db, db.uids(), db.index());
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
        let mut ctx = QueryContext::new(&*db, db.uids(), db.index());
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
        let ctx = QueryContext::new(&remote, db.uids(), db.index());
        let q = parse_get("start=1420070400&end=1420073999&m=sum:sys.mem").unwrap();
        let prepared = prepare(&ctx, &q).unwrap();
        assert!(!prepared.is_small(&ctx));
        // Prepared and run in two steps, or in one: the same answer.
        assert_eq!(
            prepared.run(&ctx).unwrap().to_json(),
            execute(&ctx, &q).unwrap().to_json()
        );
    }

    #[test]
    fn pad_keeps_one_point_each_side() {
        let v = Value::Int(1);
        let pts = |ts: &[i64]| ts.iter().map(|&t| (t, v)).collect::<Vec<_>>();
        let mut d = pts(&[1, 2, 5, 6, 9, 10]);
        pad(&mut d, 5, 6);
        assert_eq!(d, pts(&[2, 5, 6, 9]));
        // Nothing outside: unchanged.
        let mut d = pts(&[5, 6]);
        pad(&mut d, 5, 6);
        assert_eq!(d, pts(&[5, 6]));
        // Nothing inside: the neighbours alone.
        let mut d = pts(&[1, 2, 9, 10]);
        pad(&mut d, 5, 6);
        assert_eq!(d, pts(&[2, 9]));
        let mut d: Vec<(i64, Value)> = Vec::new();
        pad(&mut d, 5, 6);
        assert!(d.is_empty());
    }
}
