//! The per-series pipeline a sub-query's points stream through
//! (downsample → rate → outputs), its state at the cache's settle
//! boundary, and the time frame of one sub-query run (the rows read, the
//! buckets, the fill range, the output range).

use super::downsample::{Bucketer, Downsampler, DownsamplerState, FillPolicy, Interval};
use super::error::QueryError;
use super::limits::Budget;
use super::pool;
use super::rate::Rate;
use super::request::{ValidQuery, ValidSubQuery};
use crate::model::Value;
use crate::model::row_span::{ROW_SPAN_MS, ROW_SPAN_SECS, hour_floor};
use crate::store::read::Point;

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

/// Per-series streaming state: downsample → rate → output points.
pub(super) struct Pipeline<'a> {
    pub(super) ds: Option<Downsampler<'a>>,
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

    pub(super) fn take_snapshot(&mut self) {
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
    pub(super) fn push_all(&mut self, pts: &[Point]) {
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

    pub(super) fn push(&mut self, ts: i64, v: Value) {
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
    pub(super) fn bare_pipes<'a>(&'a self, sub: &'a ValidSubQuery, n: usize) -> Vec<Pipeline<'a>> {
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
pub(super) fn give_buffers(pipes: &mut [Pipeline]) {
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

/// Ends every pipeline (flushes open buckets, trailing fills).
pub(super) fn finish_all(pipes: &mut [Pipeline]) {
    for p in pipes {
        p.finish();
    }
}
