//! The query result cache: dashboards re-ask the same downsampled query
//! every few seconds over a window that slides; the buckets before a
//! *settled* boundary cannot change any more (unless a late point, a
//! delete or a rename says otherwise), so they are kept and only the
//! buckets after it are computed. Design and guarantees:
//! `docs/query-cache.md`.
//!
//! One entry per sub-query (everything but its time range, plus the hour
//! its scan starts at) holds:
//! - the series it chose and their groups;
//! - per series, the downsampled (and rated) points before the settled
//!   boundary, and its pipeline's state at the boundary, so the next
//!   run reads only points from the boundary on;
//! - per output series, the aggregated points up to its *frontier*: the
//!   last time none of whose inputs can still change (see [`frontier`]).
//!
//! An entry is used only under the epoch it was made under
//! ([`crate::db::CacheEpochs`]); anything else is a miss that recomputes
//! and replaces it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::context::QueryContext;
use super::downsample::{FillPolicy, Interval};
use super::error::QueryError;
use super::group::Scratch;
use super::limits::Budget;
use super::options::CacheOptions;
use super::output::QueryResult;
use super::pipeline::{Cut, Frame, PipeState, Pipeline, finish_all, scan_range};
use super::read::read_into;
use super::request::{ValidQuery, ValidSubQuery};
use super::results::{build_results, group_points, series_notes};
use super::select::{Selected, select};
use super::stats::SubStats;
use crate::model::{Tsuid, Uid, UidKind, Value};
use crate::store::read::epoch::{Epoch, EpochSource};

/// Counters for `/api/stats` and `/metrics`.
#[derive(Debug, Default)]
pub struct CacheCounters {
    /// Sub-queries answered from an entry (only the tail computed).
    pub hits: AtomicU64,
    /// Cacheable sub-queries computed whole (no entry, or an outdated one).
    pub misses: AtomicU64,
    /// Entries dropped to stay under the memory bound.
    pub evictions: AtomicU64,
    /// Sub-queries the cache stayed out of (`nocache`, or not cacheable:
    /// docs/query-cache.md).
    pub bypassed: AtomicU64,
}

/// The figures reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub bypassed: u64,
    pub bytes: u64,
    pub entries: u64,
}

/// The query result cache; one per server.
pub struct QueryCache {
    options: CacheOptions,
    inner: Mutex<Inner>,
    counters: CacheCounters,
}

#[derive(Default)]
struct Inner {
    map: HashMap<String, Slot>,
    bytes: usize,
    /// Use clock for least-recently-used eviction.
    tick: u64,
}

struct Slot {
    entry: Entry,
    bytes: usize,
    used: u64,
}

impl QueryCache {
    pub fn new(options: CacheOptions) -> QueryCache {
        QueryCache {
            options,
            inner: Mutex::new(Inner::default()),
            counters: CacheCounters::default(),
        }
    }

    pub fn options(&self) -> CacheOptions {
        self.options
    }

    pub fn stats(&self) -> CacheStats {
        let c = &self.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let inner = self.inner.lock();
        CacheStats {
            hits: g(&c.hits),
            misses: g(&c.misses),
            evictions: g(&c.evictions),
            bypassed: g(&c.bypassed),
            bytes: inner.bytes as u64,
            entries: inner.map.len() as u64,
        }
    }

    /// Counts a sub-query the cache stayed out of.
    fn bypass(&self) {
        if self.options.max_bytes == 0 {
            return;
        }
        self.counters.bypassed.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes the entry out (a concurrent twin then computes whole).
    fn take(&self, key: &str) -> Option<Entry> {
        let mut inner = self.inner.lock();
        let slot = inner.map.remove(key)?;
        inner.bytes -= slot.bytes;
        Some(slot.entry)
    }

    fn put(&self, key: String, entry: Entry) {
        let bytes = entry.heap_bytes() + key.len() + 64;
        let max = self.options.max_bytes as usize;
        let mut inner = self.inner.lock();
        if bytes > max {
            self.counters.evictions.fetch_add(1, Ordering::Relaxed);
            return;
        }
        inner.tick += 1;
        let used = inner.tick;
        if let Some(old) = inner.map.insert(key, Slot { entry, bytes, used }) {
            inner.bytes -= old.bytes;
        }
        inner.bytes += bytes;
        while inner.bytes > max {
            let Some(oldest) = inner
                .map
                .iter()
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(s) = inner.map.remove(&oldest) {
                inner.bytes -= s.bytes;
                self.counters.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// What one cacheable sub-query run is: its key, its settled boundary,
/// its metric.
struct Plan<'a> {
    cache: &'a QueryCache,
    epochs: &'a dyn EpochSource,
    key: String,
    /// Buckets before this (a bucket start) are settled.
    settle: i64,
    metric: Uid,
}

impl<'a> Plan<'a> {
    /// The plan for `sub`, or `None` when the cache stays out: off,
    /// `nocache`, or an answer it cannot reproduce exactly (a calendar or
    /// `all` downsampling interval, `padding`, a delete, timings asked
    /// for, byte or point limits that depend on what is read).
    fn new(
        cache: &'a QueryCache,
        ctx: &QueryContext<'a>,
        q: &ValidQuery,
        sub: &ValidSubQuery,
    ) -> Option<Plan<'a>> {
        if cache.options.max_bytes == 0 {
            return None;
        }
        let o = &q.original;
        let limits = ctx.limits;
        // Settled boundaries fall on bucket starts; without a downsampler
        // every point is its own output (a rate's needs only the point
        // before it, which the pipeline state keeps), so any ms will do.
        let iv = match sub.downsample.as_ref().map(|d| d.interval) {
            None => 1,
            Some(Interval::Fixed(iv)) if iv > 0 => iv as i64,
            _ => None?,
        };
        if o.no_cache
            || o.padding
            || o.delete
            || o.show_stats
            || o.show_summary
            || limits.max_bytes > 0
            || limits.max_data_points > 0
        {
            return None;
        }
        let (scan_start, scan_end) = scan_range(q, sub);
        let fill = sub.downsample.as_ref().map(|d| d.fill);
        // Fill values stop at the query's last bucket, so with a fill
        // policy nothing past it is settled; without one, everything
        // read is, once old enough (a window in the past is then
        // answered without reading at all).
        let newest = (ctx.now_ms as i64 - cache.options.settle_ms as i64).min(match fill {
            Some(FillPolicy::None) | None => scan_end as i64 + 1,
            Some(_) => q.end_ms,
        });
        let settle = newest - newest.rem_euclid(iv);
        if settle <= scan_start as i64 {
            // Nothing settled in range: nothing to keep.
            return None;
        }
        // The metric decides the epoch, read before the series are
        // chosen (a series added meanwhile then moves it). Errors are
        // left to the uncached run to report.
        let metric = if let Some(hex) = sub.tsuids.first() {
            Tsuid::parse_hex(hex, &ctx.widths()).ok()?.metric
        } else {
            ctx.uids
                .get_id(UidKind::Metric, sub.metric.as_deref()?)
                .ok()?
        };
        // Fill values start at the query's first bucket: with a fill
        // policy, answers from different first buckets differ.
        let fill_first = match fill {
            Some(FillPolicy::None) | None => None,
            Some(_) => Some(q.start_ms - q.start_ms.rem_euclid(iv)),
        };
        let key = format!(
            "{}|tz={}|cal={}|noann={}|scan={}|fill={:?}|skip={}",
            serde_json::to_string(&sub.original).unwrap_or_default(),
            q.tz.name(),
            o.use_calendar,
            o.no_annotations,
            scan_start,
            fill_first,
            ctx.skip_unresolved_tagvs,
        );
        Some(Plan {
            cache,
            epochs: ctx.epochs,
            key,
            settle,
            metric,
        })
    }
}

/// One sub-query's cached state.
struct Entry {
    epoch: Epoch,
    sel: Selected,
    /// The settled boundary: a bucket start.
    settled: i64,
    /// Per series (positions in `sel.tsuids`): outputs before `settled`.
    outs: Vec<Vec<(i64, Value)>>,
    /// Per series: the pipeline at `settled`.
    states: Vec<PipeState>,
    /// Per group: aggregated points up to its frontier, if any.
    prefixes: Vec<Option<Prefix>>,
    /// The whole answer of the last run, when everything it read was
    /// settled: a run of the same frame with nothing to read gives it
    /// again, so it is handed out as it is.
    answer: Option<Answer>,
}

/// A sub-query's results as a run over `frame` left them.
struct Answer {
    frame: AnswerFrame,
    results: Vec<QueryResult>,
}

/// Everything besides the entry's data that a run's results depend on:
/// the output range, the fill range (it ends with the query), the rows
/// read, and the query-level flags written into each result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AnswerFrame {
    from: i64,
    to: i64,
    fill_range: (i64, i64),
    read_end: u64,
    index: usize,
    show_query: bool,
    show_tsuids: bool,
}

impl AnswerFrame {
    fn of(q: &ValidQuery, sub: &ValidSubQuery, frame: &Frame) -> AnswerFrame {
        AnswerFrame {
            from: frame.from,
            to: frame.to,
            fill_range: frame.fill_range,
            read_end: frame.read_end,
            index: sub.index,
            show_query: q.original.show_query,
            show_tsuids: q.original.show_tsuids,
        }
    }
}

/// The answer to keep from a run whose settled boundary is `settle`:
/// only when every point it read lies before it (a later run with the
/// same frame then reads nothing and computes the same results).
fn settled_answer(
    q: &ValidQuery,
    sub: &ValidSubQuery,
    frame: &Frame,
    settle: i64,
    results: &[QueryResult],
) -> Option<Answer> {
    (settle > frame.read_end as i64).then(|| Answer {
        frame: AnswerFrame::of(q, sub, frame),
        results: results.to_vec(),
    })
}

impl Answer {
    fn heap_bytes(&self) -> usize {
        self.results
            .iter()
            .map(|r| {
                std::mem::size_of::<QueryResult>()
                    + r.dps.capacity() * std::mem::size_of::<(i64, Value)>()
                    + r.tags
                        .iter()
                        .map(|(k, v)| 64 + k.len() + v.len())
                        .sum::<usize>()
                    + r.aggregate_tags.iter().map(|t| 24 + t.len()).sum::<usize>()
                    + r.tsuids.iter().map(|t| 24 + t.len()).sum::<usize>()
                    + r.metric.len()
                    + r.query.as_ref().map_or(0, |q| q.to_string().len() * 4)
            })
            .sum()
    }
}

/// A group's aggregated points in `[from, frontier]`.
struct Prefix {
    from: i64,
    frontier: i64,
    dps: Vec<(i64, Value)>,
}

impl Entry {
    fn heap_bytes(&self) -> usize {
        const POINT: usize = std::mem::size_of::<(i64, Value)>();
        let outs: usize = self.outs.iter().map(|o| 24 + o.capacity() * POINT).sum();
        let states: usize = self
            .states
            .iter()
            .map(|s| std::mem::size_of::<PipeState>() + s.heap_bytes())
            .sum();
        let prefixes: usize = self
            .prefixes
            .iter()
            .map(|p| 48 + p.as_ref().map_or(0, |p| p.dps.capacity() * POINT))
            .sum();
        let answer = self.answer.as_ref().map_or(0, Answer::heap_bytes);
        self.sel.heap_bytes() + outs + states + prefixes + answer
    }
}

/// The last time at which a group's aggregated value can no longer
/// change once the points before `settle` are settled; `None` if any
/// may.
///
/// The group-by merge decides a member's part at time `t` from its
/// outputs up to `t` and its next output after `t` (whether there is
/// one, and its value, for interpolation). Outputs before `settle` are
/// fixed: settled buckets, rates over them, and fills between them
/// (every later query fills through at least `settle`). So a member
/// whose last output before `settle` is at `k` fixes its part up to
/// `k`; a member with none before `settle` has none there ever (its
/// first output is at or after `settle`), except that a member not seen
/// yet would, with a fill policy, fill every bucket once its first point
/// arrives.
fn frontier(
    sub: &ValidSubQuery,
    members: &[usize],
    outs: &[Vec<(i64, Value)>],
    seen: &[bool],
    settle: i64,
) -> Option<i64> {
    let fills = sub
        .downsample
        .as_ref()
        .is_some_and(|d| d.fill != FillPolicy::None);
    let mut f = settle - 1;
    for &p in members {
        if !seen[p] {
            if fills {
                return None;
            }
            continue;
        }
        let out = &outs[p];
        let k = out.partition_point(|x| x.0 < settle);
        if k > 0 {
            f = f.min(out[k - 1].0);
        }
    }
    Some(f)
}

impl QueryCache {
    /// Answers `sub` through the cache (checked against `ctx`'s epochs),
    /// computing what it lacks; `None` when the cache stays out of `sub`
    /// (counted as bypassed) and the engine runs it uncached.
    pub(super) fn run(
        &self,
        ctx: &QueryContext,
        q: &ValidQuery,
        sub: &ValidSubQuery,
        budget: &mut Budget,
    ) -> Option<Result<(Vec<QueryResult>, SubStats), QueryError>> {
        match Plan::new(self, ctx, q, sub) {
            Some(plan) => Some(run(ctx, q, sub, budget, plan)),
            None => {
                self.bypass();
                None
            }
        }
    }
}

/// Runs a cacheable sub-query: from its entry if one is usable, else
/// whole; either way leaves an entry for the next run.
fn run(
    ctx: &QueryContext,
    q: &ValidQuery,
    sub: &ValidSubQuery,
    budget: &mut Budget,
    plan: Plan,
) -> Result<(Vec<QueryResult>, SubStats), QueryError> {
    // Floor first, then the epoch, then the data (db/epochs.rs).
    plan.epochs.raise_floor(plan.settle);
    let epoch = plan.epochs.epoch(plan.metric);
    let entry = plan
        .cache
        .take(&plan.key)
        .filter(|e| e.epoch == epoch && plan.settle >= e.settled);
    match entry {
        Some(e) => {
            plan.cache.counters.hits.fetch_add(1, Ordering::Relaxed);
            hit(ctx, q, sub, budget, &plan, e)
        }
        None => {
            plan.cache.counters.misses.fetch_add(1, Ordering::Relaxed);
            miss(ctx, q, sub, budget, &plan, epoch)
        }
    }
}

fn miss(
    ctx: &QueryContext,
    q: &ValidQuery,
    sub: &ValidSubQuery,
    budget: &mut Budget,
    plan: &Plan,
    epoch: Epoch,
) -> Result<(Vec<QueryResult>, SubStats), QueryError> {
    let mut stats = SubStats::default();
    let sel = select(ctx, sub)?;
    stats.unresolved = sel.unresolved;
    stats.series = sel.tsuids.len() as u64;
    let n = sel.tsuids.len();
    let frame = Frame::new(q, sub, budget, n)?;
    let mut pipes = frame.pipes(sub, n);
    let cut = Cut {
        skip_before: None,
        settle_at: Some(plan.settle),
    };
    let cells = read_into(
        ctx,
        &sel,
        &mut pipes,
        frame.read_start,
        frame.read_end,
        cut,
        budget,
        &mut stats,
        None,
    )?;
    // Annotations are read with the rows; an entry is kept only when
    // there were none, so later runs need only the rows they read.
    let keep = sel.metric_uid == plan.metric && (q.original.no_annotations || cells.is_empty());
    let notes = if !q.original.no_annotations && !cells.is_empty() {
        series_notes(n, cells, q.start_ms, q.end_ms)
    } else {
        Vec::new()
    };
    finish_all(&mut pipes);
    let seen: Vec<bool> = pipes.iter().map(|p| p.seen).collect();
    let mut states = Vec::with_capacity(n);
    let mut outs = Vec::with_capacity(n);
    for p in &mut pipes {
        let snap = p.snap.take().expect("read_into snapshots every pipeline");
        outs.push(std::mem::take(&mut p.out));
        states.push(snap);
    }
    let frontiers: Vec<Option<i64>> = sel
        .groups
        .iter()
        .map(|m| frontier(sub, m, &outs, &seen, plan.settle))
        .collect();
    let mut prefixes: Vec<Option<Prefix>> = (0..sel.groups.len()).map(|_| None).collect();
    let mut scratch = Scratch::default();
    let results = build_results(
        ctx,
        q,
        sub,
        &sel,
        &seen,
        &notes,
        &mut stats,
        |g, present| {
            let refs: Vec<&[(i64, Value)]> = present.iter().map(|&p| outs[p].as_slice()).collect();
            let dps = group_points(sub, &refs, frame.from, frame.to, &mut scratch);
            prefixes[g] = frontiers[g].map(|f| prefix(&dps, frame.from, frame.to, f));
            dps
        },
    )?;
    budget.check_time()?;
    if keep {
        for (o, s) in outs.iter_mut().zip(&states) {
            o.truncate(s.settled_len);
            o.shrink_to_fit();
        }
        let entry = Entry {
            epoch,
            sel,
            settled: plan.settle,
            outs,
            states,
            prefixes,
            answer: settled_answer(q, sub, &frame, plan.settle, &results),
        };
        plan.cache.put(plan.key.clone(), entry);
    }
    Ok((results, stats))
}

/// The points of a group's answer `dps` over `[from, to]` up to its
/// frontier: beyond `to` the answer holds nothing to keep.
fn prefix(dps: &[(i64, Value)], from: i64, to: i64, frontier: i64) -> Prefix {
    let frontier = frontier.min(to);
    let end = dps.partition_point(|p| p.0 <= frontier);
    Prefix {
        from,
        frontier,
        dps: dps[..end].to_vec(),
    }
}

fn hit(
    ctx: &QueryContext,
    q: &ValidQuery,
    sub: &ValidSubQuery,
    budget: &mut Budget,
    plan: &Plan,
    mut e: Entry,
) -> Result<(Vec<QueryResult>, SubStats), QueryError> {
    let mut stats = SubStats {
        unresolved: e.sel.unresolved,
        series: e.sel.tsuids.len() as u64,
        ..Default::default()
    };
    let n = e.sel.tsuids.len();
    let frame = Frame::new(q, sub, budget, n)?;
    let start = (e.settled.max(0) as u64).max(frame.read_start);
    if start > frame.read_end
        && let Some(a) = e
            .answer
            .as_ref()
            .filter(|a| a.frame == AnswerFrame::of(q, sub, &frame))
    {
        // Nothing to read and the same frame as the run that kept this
        // answer: the same results (docs/query-cache.md).
        let results = a.results.clone();
        stats.output_points = results.iter().map(|r| r.dps.len() as u64).sum();
        plan.cache.put(plan.key.clone(), e);
        return Ok((results, stats));
    }
    let mut pipes: Vec<Pipeline> = e
        .states
        .iter()
        .map(|s| Pipeline::resume(sub, &frame, s))
        .collect();
    let cut = Cut {
        skip_before: Some(e.settled),
        settle_at: Some(plan.settle),
    };
    let cells = read_into(
        ctx,
        &e.sel,
        &mut pipes,
        start,
        frame.read_end,
        cut,
        budget,
        &mut stats,
        None,
    )?;
    let keep = q.original.no_annotations || cells.is_empty();
    let notes = if !q.original.no_annotations && !cells.is_empty() {
        series_notes(n, cells, q.start_ms, q.end_ms)
    } else {
        Vec::new()
    };
    finish_all(&mut pipes);
    let seen: Vec<bool> = pipes.iter().map(|p| p.seen).collect();
    // Each series' whole output: the cached part, then what was computed.
    let mut settled_lens = Vec::with_capacity(n);
    let mut states = Vec::with_capacity(n);
    for (o, p) in e.outs.iter_mut().zip(&mut pipes) {
        let snap = p.snap.take().expect("read_into snapshots every pipeline");
        settled_lens.push(o.len() + snap.settled_len);
        o.extend_from_slice(&p.out);
        states.push(snap);
    }
    drop(pipes);
    let outs = &e.outs;
    let frontiers: Vec<Option<i64>> = e
        .sel
        .groups
        .iter()
        .map(|m| frontier(sub, m, outs, &seen, plan.settle))
        .collect();
    let mut prefixes: Vec<Option<Prefix>> = (0..e.sel.groups.len()).map(|_| None).collect();
    let mut scratch = Scratch::default();
    let old = &e.prefixes;
    let results = build_results(
        ctx,
        q,
        sub,
        &e.sel,
        &seen,
        &notes,
        &mut stats,
        |g, present| {
            let dps = match old[g].as_ref().filter(|p| p.from <= frame.from) {
                Some(pf) => {
                    // Up to the frontier from the entry; after it, the
                    // merge over each member's outputs from its last one
                    // at or before the frontier (all it looks back at).
                    let f = pf.frontier;
                    let mut dps: Vec<(i64, Value)> = pf
                        .dps
                        .iter()
                        .copied()
                        .filter(|p| p.0 >= frame.from && p.0 <= frame.to)
                        .collect();
                    let refs: Vec<&[(i64, Value)]> = present
                        .iter()
                        .map(|&p| {
                            let o = outs[p].as_slice();
                            let a = o.partition_point(|x| x.0 <= f);
                            &o[a.saturating_sub(1)..]
                        })
                        .collect();
                    dps.extend(group_points(
                        sub,
                        &refs,
                        frame.from.max(f.saturating_add(1)),
                        frame.to,
                        &mut scratch,
                    ));
                    dps
                }
                None => {
                    let refs: Vec<&[(i64, Value)]> =
                        present.iter().map(|&p| outs[p].as_slice()).collect();
                    group_points(sub, &refs, frame.from, frame.to, &mut scratch)
                }
            };
            prefixes[g] = frontiers[g].map(|f| prefix(&dps, frame.from, frame.to, f));
            dps
        },
    )?;
    budget.check_time()?;
    if keep {
        for (o, &len) in e.outs.iter_mut().zip(&settled_lens) {
            o.truncate(len);
        }
        e.states = states;
        e.settled = plan.settle;
        e.prefixes = prefixes;
        e.answer = settled_answer(q, sub, &frame, plan.settle, &results);
        plan.cache.put(plan.key.clone(), e);
    }
    Ok((results, stats))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use super::*;
    use crate::db::{Db, PendingPoint};
    use crate::query::{execute, parse_get};
    use crate::store::read::SeriesSource;

    fn open() -> (tempfile::TempDir, Arc<Db>) {
        Db::open_temp()
    }

    /// One point per series at each of `times` (s).
    fn put(db: &Db, hosts: usize, times: impl Iterator<Item = i64> + Clone) {
        let mut key = String::new();
        let mut batch = Vec::new();
        for h in 0..hosts {
            let host = format!("web{h:04}");
            for t in times.clone() {
                let value = Value::Int((t / 10 + h as i64) % 1000);
                let (series, ts) = db
                    .resolve("sys.cpu", t, value, &[("host", &host)], &mut key)
                    .unwrap();
                batch.push(PendingPoint { series, ts, value });
            }
            if batch.len() > 50_000 {
                db.append(&batch).unwrap();
                batch.clear();
            }
        }
        db.append(&batch).unwrap();
    }

    fn median_ms(mut f: impl FnMut() -> String, runs: usize) -> (f64, String) {
        let mut times = Vec::with_capacity(runs);
        let mut out = String::new();
        for _ in 0..runs {
            let t = Instant::now();
            out = f();
            times.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        times.sort_by(f64::total_cmp);
        (times[runs / 2], out)
    }

    /// `cargo test --release --lib -- --ignored --nocapture cache_bench`:
    /// a repeated 1,000-series `avg:1m-avg` one-hour query, uncached vs
    /// cached (a plain repeat; a settled window; a window sliding 5 s per
    /// refresh with 1,000 new points each time).
    #[test]
    #[ignore]
    fn cache_bench() {
        let (_dir, db) = open();
        let hosts = 1000;
        // Wall-clock times, as a live dashboard's: the current hour is
        // still buffered, the ones before are sealed rows.
        let now_s = chrono::Utc::now().timestamp();
        put(&db, hosts, (now_s - 7200..=now_s).step_by(10));
        let cache = QueryCache::new(CacheOptions::default());
        let run = |now_s: i64, qs: &str, cached: bool| {
            let q = parse_get(qs).unwrap();
            let mut ctx = QueryContext::new(&db, &crate::query::QueryOptions::default());
            ctx.now_ms = now_s as u64 * 1000;
            execute(&ctx, &q, cached.then_some(&cache))
                .unwrap()
                .to_json()
        };
        let qs = "start=1h-ago&m=avg:1m-avg:sys.cpu";
        let (plain, a) = median_ms(|| run(now_s, qs, false), 21);
        let (repeat, b) = median_ms(|| run(now_s, qs, true), 21);
        assert_eq!(a, b);
        // A window whose rows all lie before the settle margin.
        let settled = format!(
            "start={}&end={}&m=avg:1m-avg:sys.cpu",
            now_s - 7200 + 300,
            now_s - 3600 - 300
        );
        let (settled_plain, a) = median_ms(|| run(now_s, &settled, false), 21);
        let (settled_ms, b) = median_ms(|| run(now_s, &settled, true), 21);
        assert_eq!(a, b);
        let mut t = now_s;
        let mut slide = Vec::new();
        for _ in 0..21 {
            t += 5;
            if t % 10 == 0 {
                put(&db, hosts, std::iter::once(t));
            }
            let s = Instant::now();
            let b = run(t, qs, true);
            slide.push(s.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(b, run(t, qs, false));
        }
        slide.sort_by(f64::total_cmp);
        // What a live refresh reads anyway: the last two minutes.
        let metric = db.uids().get_id(UidKind::Metric, "sys.cpu").unwrap();
        let from = ((t - 120) * 1000) as u64;
        let (tail_read, _) = median_ms(
            || {
                let n = db
                    .read_series(metric, from, from + 3_600_000, &mut |_| true)
                    .unwrap()
                    .len();
                n.to_string()
            },
            21,
        );
        let st = cache.stats();
        println!(
            "1,000 series avg:1m-avg 1 h, median ms: uncached {plain:.3}, cached repeat {repeat:.3}; \
             settled window: uncached {settled_plain:.3}, cached {settled_ms:.3}; \
             sliding 5 s/refresh: cached {:.3}; reading the last 2 min alone {tail_read:.3}; \
             cache {} bytes, {} hits, {} misses",
            slide[slide.len() / 2],
            st.bytes,
            st.hits,
            st.misses
        );
    }
}
