//! The read of a sub-query's series into their pipelines: split into
//! runs of series read by as many threads as the source offers, each
//! point charged to the query's budget, each run optionally folded into
//! its groups as soon as it is read ([`RunFold`]).

use parking_lot::Mutex;
use std::collections::BTreeMap;

use super::aggregator::Aggregator;
use super::context::QueryContext;
use super::error::QueryError;
use super::group;
use super::limits::Budget;
use super::pipeline::{Cut, Pipeline, finish_all, give_buffers};
use super::pool;
use super::request::ValidSubQuery;
use super::select::Selected;
use super::stats::SubStats;
use crate::model::row_span::ROW_SPAN_MS;
use crate::model::{Tsuid, Uid, Value};
use crate::store::read::{Point, ReadStats, without_stale_markers};

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
pub(super) const MIN_SERIES_PER_THREAD: usize = 64;

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
    pub(super) fn finish(
        &self,
        g: usize,
        agg: &Aggregator,
        from: i64,
        to: i64,
    ) -> Vec<(i64, Value)> {
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
    // Prometheus' stale markers are no value to OpenTSDB: dropped here,
    // where every OpenTSDB query reads its points, and not counted as
    // points read.
    let mut markers = 0u64;
    let mut sink = |i: usize, pts: &[Point]| {
        let kept = without_stale_markers(pts);
        markers += (pts.len() - kept.len()) as u64;
        let pts = &kept[..];
        if pts.is_empty() {
            return true;
        }
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
    let mut read = if how.use_scan {
        ctx.source
            .scan_tsuids(how.metric, tsuids, how.start, how.end, &mut sink)
    } else {
        ctx.source
            .read_tsuids(tsuids, how.start, how.end, &mut sink)
    }?;
    read.points = read.points.saturating_sub(markers);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{Db, PendingPoint};
    use crate::query::group::Scratch;
    use crate::query::pipeline::Frame;
    use crate::query::results::group_points;
    use crate::query::select::select;
    use crate::query::{QueryOptions, execute, parse_get};

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
        let ctx = QueryContext::new(db, &QueryOptions::default());
        let valid = parse_get(qs)
            .unwrap()
            .validate(ctx.now_ms, ctx.default_tz)
            .unwrap();
        let sub = &valid.queries[0];
        let sel = select(&ctx, sub).unwrap();
        let mut budget = Budget::new(ctx.limits);
        let frame = Frame::new(&valid, sub, &budget, sel.tsuids.len()).unwrap();
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
                let ctx = QueryContext::new(&gapped, &QueryOptions::default());
                let answer = execute(&ctx, &parse_get(&qs).unwrap(), None).unwrap();
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

    /// A database of `hosts` series of `m` over two hours at 10 s, with
    /// Prometheus' stale markers at every 7th step when `markers`: the
    /// same points otherwise. Half the points are flushed to rows, the
    /// rest stay buffered, so both sources are read.
    fn with_markers(markers: bool) -> (tempfile::TempDir, std::sync::Arc<Db>) {
        let (dir, db) = Db::open_temp();
        let mut key = String::new();
        for half in [0, 1] {
            let mut batch = Vec::new();
            for h in 0..3 {
                let host = format!("h{h}");
                for (k, t) in (1_420_070_400u32..1_420_077_600).step_by(10).enumerate() {
                    if (t as usize / 3600) % 2 != half {
                        continue;
                    }
                    let value = if k % 7 == 3 {
                        if !markers {
                            continue;
                        }
                        Value::Float(f64::from_bits(crate::model::point::STALE_MARKER_BITS))
                    } else {
                        Value::Float((k * (h + 1)) as f64 / 4.0)
                    };
                    let tags = [("host", host.as_str())];
                    let (series, ts) = db.resolve("m", t as i64, value, &tags, &mut key).unwrap();
                    batch.push(PendingPoint { series, ts, value });
                }
            }
            db.append(&batch).unwrap();
            if half == 0 {
                db.flush_all().unwrap();
            }
        }
        (dir, db)
    }

    /// OpenTSDB's queries answer over a series holding stale markers
    /// exactly as over the same series without them, whatever the
    /// pipeline (raw, downsampled, rates, fills, grouped or not), from
    /// rows and from the buffer.
    #[test]
    fn stale_markers_read_as_absent_points() {
        let (_a, marked) = with_markers(true);
        let (_b, plain) = with_markers(false);
        let hours = "start=1420070400&end=1420077599";
        for m in [
            "sum:m",
            "avg:m{host=*}",
            "sum:1m-avg:m",
            "max:5m-count-zero:m{host=*}",
            "sum:1m-sum-nan:m{host=h1}",
            "sum:rate:m{host=*}",
            "avg:30s-avg:rate{counter}:m",
            "zimsum:m",
        ] {
            let qs = format!("{hours}&m={m}&show_summary");
            let answer = |db: &Db| {
                let ctx = QueryContext::new(db, &QueryOptions::default());
                let mut v = execute(&ctx, &parse_get(&qs).unwrap(), None)
                    .unwrap()
                    .to_value();
                // Times spent differ from run to run, and the markers'
                // bytes are read; counts of points must not differ.
                if let Some(summary) = v.as_array_mut().and_then(|a| a.last_mut()) {
                    let s = &mut summary["statsSummary"];
                    for k in [
                        "timeTotal",
                        "storageTime",
                        "aggregationTime",
                        "queryIdx_00",
                        "bytesRead",
                    ] {
                        s.as_object_mut().map(|o| o.remove(k));
                    }
                }
                v
            };
            let (a, b) = (answer(&marked), answer(&plain));
            assert!(a == b, "{qs}: differs with markers");
            assert!(
                a[0]["dps"].as_object().is_some_and(|d| !d.is_empty()),
                "{qs}"
            );
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
}
