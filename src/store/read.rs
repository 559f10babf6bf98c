//! The read side, in one place: the three things a query reads from,
//! each a trait the database implements and the query engine reads
//! through (it never names the database's internals).
//!
//! - [`SeriesSource`] (here): a series' points in a time range,
//!   column-wise, stored rows merged with the write buffer; implemented
//!   by the store (rows on disk) and by the database (rows on disk merged
//!   with points still buffered in memory), plus histogram cells and
//!   annotations.
//! - [`RollupSource`](rollup::RollupSource) ([`rollup`]): the rollup
//!   tables' rows, in time slices read in parallel.
//! - [`EpochSource`](epoch::EpochSource) ([`epoch`]): the epoch a cached
//!   answer depends on.
//!
//! [`PreAggregates`](pre_aggregates::PreAggregates) ([`pre_aggregates`])
//! is a [`SeriesSource`] too: the default interval's pre-aggregate table
//! read as data rows, which the rollup source hands out.

pub mod epoch;
pub mod pre_aggregates;
pub mod rollup;

use crate::codec::CellKind;
use crate::codec::column;
use crate::codec::row::RowCells;
use crate::model::Tsuid;
use crate::model::Uid;
use crate::model::hash::FastMap;
use crate::model::point::{STALE_MARKER_BITS, Timestamp, Value};
use crate::model::row_span::{ROW_SPAN_SECS, row_base_clamped, row_bases};
use crate::storage::{ScanRange, Table, prefix_end};

use super::{Result, Store};

/// One point of a series read back, in 16 bytes rather than the 24 of a
/// timestamp beside a [`Value`] (whose enum tag takes a word of its own):
/// a large query streams every point it reads through memory a few times
/// (decoded or copied out of the write buffer, then read by the
/// pipelines), and those passes were bound by the bytes.
///
/// The write buffer keeps its points in this form too, with the precision
/// they were written in ([`Point::written`]), so a query reads them
/// without converting them.
#[derive(Clone, Copy)]
pub struct Point {
    /// Milliseconds, with [`FLOAT_FLAG`] for a float value and
    /// [`SECONDS_FLAG`] for a point written in seconds.
    ts: u64,
    /// The value's bits: an `i64`'s, or an `f64`'s under [`FLOAT_FLAG`].
    bits: u64,
}

/// Bit of a point's timestamp word meaning "written in seconds".
const SECONDS_FLAG: u64 = 1 << 63;
/// Bit of a point's timestamp word meaning "the value is a float".
const FLOAT_FLAG: u64 = 1 << 62;

impl Point {
    /// A point at `timestamp_ms` (below 2^62, some 146 million years).
    #[inline(always)]
    pub fn new(timestamp_ms: u64, value: Value) -> Point {
        debug_assert!(timestamp_ms < FLOAT_FLAG, "timestamp {timestamp_ms}");
        match value {
            Value::Int(v) => Point {
                ts: timestamp_ms,
                bits: v as u64,
            },
            Value::Float(f) => Point {
                ts: timestamp_ms | FLOAT_FLAG,
                bits: f.to_bits(),
            },
        }
    }

    /// A point as written, remembering its precision ([`timestamp`]).
    ///
    /// [`timestamp`]: Point::timestamp
    pub fn written(ts: Timestamp, value: Value) -> Point {
        match ts {
            Timestamp::Seconds(s) => {
                let mut p = Point::new(u64::from(s) * 1000, value);
                p.ts |= SECONDS_FLAG;
                p
            }
            Timestamp::Millis(ms) => Point::new(ms, value),
        }
    }

    #[inline(always)]
    pub fn timestamp_ms(self) -> u64 {
        self.ts & !(SECONDS_FLAG | FLOAT_FLAG)
    }

    #[inline(always)]
    pub fn value(self) -> Value {
        if self.is_float() {
            Value::Float(f64::from_bits(self.bits))
        } else {
            Value::Int(self.bits as i64)
        }
    }

    #[inline(always)]
    pub fn is_float(self) -> bool {
        self.ts & FLOAT_FLAG != 0
    }

    /// The timestamp in the precision it was written in: seconds only
    /// for a point made by [`written`](Point::written) from seconds.
    pub fn timestamp(self) -> Timestamp {
        if self.ts & SECONDS_FLAG != 0 {
            Timestamp::Seconds((self.timestamp_ms() / 1000) as u32)
        } else {
            Timestamp::Millis(self.timestamp_ms())
        }
    }
}

impl Point {
    /// Whether the value is Prometheus' stale marker
    /// ([`Value::is_stale_marker`], asked of the bits in place).
    #[inline(always)]
    pub fn is_stale_marker(self) -> bool {
        self.is_float() && self.bits == STALE_MARKER_BITS
    }
}

/// `pts` without Prometheus' stale markers, for the readers that serve
/// OpenTSDB's APIs, where a marker is no value (the point reads as
/// absent); [`SeriesSource`] hands markers back, for PromQL. Borrowed,
/// without copying, when there is none (every row OpenTSDB writes).
#[inline]
pub fn without_stale_markers(pts: &[Point]) -> std::borrow::Cow<'_, [Point]> {
    if pts.iter().any(|p| p.is_stale_marker()) {
        std::borrow::Cow::Owned(
            pts.iter()
                .copied()
                .filter(|p| !p.is_stale_marker())
                .collect(),
        )
    } else {
        std::borrow::Cow::Borrowed(pts)
    }
}

/// Equal as (timestamp, value) pairs: the precision a point was written
/// in is not part of it, and values compare as [`Value`]s do.
impl PartialEq for Point {
    fn eq(&self, other: &Point) -> bool {
        self.timestamp_ms() == other.timestamp_ms() && self.value() == other.value()
    }
}

impl std::fmt::Debug for Point {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Point")
            .field("timestamp_ms", &self.timestamp_ms())
            .field("value", &self.value())
            .finish()
    }
}

/// A series' points in a time range, sorted by time, one per timestamp.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesData {
    pub tsuid: Tsuid,
    pub points: Vec<Point>,
}

/// What a read touched, for query limits and `showStats`, and the
/// annotation cells met in the rows read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadStats {
    pub rows: u64,
    pub points: u64,
    pub bytes: u64,
    /// (series index, stored JSON) of every annotation cell in the rows
    /// read, whatever its time: the caller filters.
    pub annotations: Vec<(usize, Vec<u8>)>,
}

impl ReadStats {
    /// Adds the stats of a read of series listed from `offset` on in a
    /// longer list (its annotations' series indexes move by `offset`).
    pub fn add(&mut self, other: ReadStats, offset: usize) {
        self.rows += other.rows;
        self.points += other.points;
        self.bytes += other.bytes;
        self.annotations.extend(
            other
                .annotations
                .into_iter()
                .map(|(i, cell)| (i + offset, cell)),
        );
    }
}

/// Receives the points of series `i` (an index into the requested list),
/// a row at a time and in time order for each series; returns false to
/// stop the read (a limit or a timeout was hit).
pub type PointSink<'a> = dyn FnMut(usize, &[Point]) -> bool + 'a;

/// Source of series data for queries.
pub trait SeriesSource: Send + Sync {
    /// Streams the points in `[start_ms, end_ms]` of each listed series to
    /// `sink`, reading only those series' hourly rows (one lookup per
    /// series and hour), so the cost follows the number of series asked
    /// for, not the metric's size. Series must share nothing but need not
    /// share a metric.
    fn read_tsuids(
        &self,
        tsuids: &[Tsuid],
        start_ms: u64,
        end_ms: u64,
        sink: &mut PointSink<'_>,
    ) -> Result<ReadStats>;

    /// Same contract as [`read_tsuids`](Self::read_tsuids), for series of
    /// one metric, but free to read by scanning the metric's rows: cheaper
    /// when the list covers most of the metric.
    fn scan_tsuids(
        &self,
        metric: Uid,
        tsuids: &[Tsuid],
        start_ms: u64,
        end_ms: u64,
        sink: &mut PointSink<'_>,
    ) -> Result<ReadStats> {
        let _ = metric;
        self.read_tsuids(tsuids, start_ms, end_ms, sink)
    }

    /// How many threads a query may read disjoint runs of its series with
    /// at once (each run through its own `read_tsuids`/`scan_tsuids`).
    fn read_threads(&self) -> usize {
        1
    }

    /// Whether a read of a few rows is a short job on this machine's CPU
    /// and disks (an embedded store), not a wait on other servers: then a
    /// small query may run on an async worker rather than be handed to a
    /// thread made for blocking.
    fn reads_locally(&self) -> bool {
        false
    }

    /// Every series of `metric` with at least one point in
    /// `[start_ms, end_ms]` for which `want` returns true, with its points
    /// in that range.
    fn read_series(
        &self,
        metric: Uid,
        start_ms: u64,
        end_ms: u64,
        want: &mut dyn FnMut(&Tsuid) -> bool,
    ) -> Result<Vec<SeriesData>>;

    /// The histogram points (OpenTSDB 2.4) of each listed series in
    /// `[start_ms, end_ms]`, in time order (one list per series, in the
    /// order asked), and the annotation cells of the rows read.
    fn read_histograms(
        &self,
        tsuids: &[Tsuid],
        start_ms: u64,
        end_ms: u64,
    ) -> Result<super::histograms::HistogramRead>;

    /// The codecs histogram cells are read with
    /// (`tsd.core.histograms.config`); `None` where histograms are off.
    fn histogram_codecs(&self) -> Option<&crate::histogram::Codecs> {
        None
    }

    /// Stored JSON of the global annotations starting in
    /// `[start_ms, end_ms]`.
    fn global_annotations(
        &self,
        start_ms: u64,
        end_ms: u64,
    ) -> Result<Vec<crate::model::Annotation>> {
        let _ = (start_ms, end_ms);
        Ok(Vec::new())
    }
}

impl SeriesSource for Store {
    fn reads_locally(&self) -> bool {
        true
    }

    fn read_histograms(
        &self,
        tsuids: &[Tsuid],
        start_ms: u64,
        end_ms: u64,
    ) -> Result<super::histograms::HistogramRead> {
        let mut read = super::histograms::HistogramRead::default();
        for (i, t) in tsuids.iter().enumerate() {
            let (hs, notes) = self.histograms_in(t, start_ms, end_ms)?;
            read.series.push(hs);
            read.annotations.extend(notes.into_iter().map(|n| (i, n)));
        }
        Ok(read)
    }

    fn global_annotations(
        &self,
        start_ms: u64,
        end_ms: u64,
    ) -> Result<Vec<crate::model::Annotation>> {
        self.annotations_in(None, start_ms, end_ms)
    }

    fn read_series(
        &self,
        metric: Uid,
        start_ms: u64,
        end_ms: u64,
        want: &mut dyn FnMut(&Tsuid) -> bool,
    ) -> Result<Vec<SeriesData>> {
        let Some((start_base, end_base)) = hour_range(start_ms, end_ms) else {
            return Ok(Vec::new());
        };
        let mut by_series: std::collections::BTreeMap<Tsuid, Vec<Point>> = Default::default();
        for item in self.scan_metric_rows(metric, start_base, end_base) {
            let (key, cells) = item?;
            let row_key = self.layout().parse_row_key(&key)?;
            if !want(&row_key.tsuid) {
                continue;
            }
            let decoded = self.decode(&key, &cells)?;
            let points: Vec<Point> = decoded
                .points
                .iter()
                .map(|p| Point::new(p.timestamp_ms(row_key.base_time), p.value))
                .filter(|p| (start_ms..=end_ms).contains(&p.timestamp_ms()))
                .collect();
            if !points.is_empty() {
                by_series.entry(row_key.tsuid).or_default().extend(points);
            }
        }
        Ok(series_data(by_series))
    }

    fn read_tsuids(
        &self,
        tsuids: &[Tsuid],
        start_ms: u64,
        end_ms: u64,
        sink: &mut PointSink<'_>,
    ) -> Result<ReadStats> {
        let mut stats = ReadStats::default();
        let Some((start_base, end_base)) = hour_range(start_ms, end_ms) else {
            return Ok(stats);
        };
        let mut buf = Vec::with_capacity(4096);
        // The rows to read, in the order they are handed to `sink`, asked
        // for a chunk at a time (one round trip per chunk on a remote
        // engine; the same gets one by one on the embedded one). The
        // iterator is lazy: a sink that stops early stops the reads.
        let mut wanted = tsuids.iter().enumerate().flat_map(|(i, tsuid)| {
            let first = start_base.max(self.retention_floor(tsuid.metric));
            row_bases(first, end_base)
                .map(move |base| (i, base, self.layout().row_key(tsuid, base)))
        });
        loop {
            let chunk: Vec<(usize, u32, Vec<u8>)> = wanted.by_ref().take(ROWS_PER_READ).collect();
            if chunk.is_empty() {
                return Ok(stats);
            }
            let keys: Vec<&[u8]> = chunk.iter().map(|(_, _, k)| k.as_slice()).collect();
            let values = self.kv().get_many(Table::Data, &keys)?;
            for ((i, base, key), value) in chunk.iter().zip(values) {
                let Some(value) = value else { continue };
                stats.rows += 1;
                stats.bytes += (key.len() + value.len()) as u64;
                for c in self.decode_points(key, &value, *base, start_ms, end_ms, &mut buf)? {
                    stats.annotations.push((*i, c.value));
                }
                stats.points += buf.len() as u64;
                if !buf.is_empty() && !sink(*i, &buf) {
                    return Ok(stats);
                }
            }
        }
    }

    fn scan_tsuids(
        &self,
        metric: Uid,
        tsuids: &[Tsuid],
        start_ms: u64,
        end_ms: u64,
        sink: &mut PointSink<'_>,
    ) -> Result<ReadStats> {
        let mut stats = ReadStats::default();
        let Some((start_base, end_base)) = hour_range(start_ms, end_ms) else {
            return Ok(stats);
        };
        let start_base = start_base.max(self.retention_floor(metric));
        let layout = *self.layout();
        let mw = layout.widths.metric.bytes();
        // Row keys end with the TSUID's tag bytes: look series up by those.
        let wanted: FastMap<Vec<u8>, usize> = tsuids
            .iter()
            .enumerate()
            .filter(|(_, t)| t.metric == metric)
            .map(|(i, t)| (t.to_bytes(&layout.widths)[mw..].to_vec(), i))
            .collect();
        // Rows sort by tags within an hour: a scan runs from the smallest
        // wanted series to the largest, so a run of a metric's series (a
        // query read on several threads) reads little of the others'. On
        // an engine where a scan is cheap to start that holds per hour, up
        // to a month of hours (past that, starting a scan per hour of a
        // mostly empty range would cost more than it saves); otherwise one
        // scan spans the range.
        let (Some(low), Some(high)) = (wanted.keys().min(), wanted.keys().max()) else {
            return Ok(stats);
        };
        let hours = end_base.saturating_sub(start_base) / ROW_SPAN_SECS + 1;
        let spans: Vec<(u32, u32)> = if self.kv().seeks_are_cheap() && hours <= MAX_HOURLY_SCANS {
            row_bases(start_base, end_base).map(|b| (b, b)).collect()
        } else {
            vec![(start_base, end_base)]
        };
        let buckets: Vec<Option<u32>> = if layout.salt.enabled() {
            (0..layout.salt.buckets).map(Some).collect()
        } else {
            vec![None]
        };
        let prefix = layout.prefix_len();
        let mut buf = Vec::with_capacity(4096);
        for (bucket, &(first, last)) in buckets
            .iter()
            .flat_map(|b| spans.iter().map(move |s| (*b, s)))
        {
            let mut start = layout.scan_prefix(bucket, metric, first);
            start.extend_from_slice(low);
            let mut stop = layout.scan_prefix(bucket, metric, last);
            stop.extend_from_slice(high);
            let stop = prefix_end(&stop);
            for item in self.kv().scan(Table::Data, &ScanRange::new(start, stop)) {
                let (key, value) = item?;
                let Some(&i) = key.get(prefix..).and_then(|tags| wanted.get(tags)) else {
                    continue;
                };
                let ts = &key[prefix - 4..prefix];
                let base = u32::from_be_bytes([ts[0], ts[1], ts[2], ts[3]]);
                stats.rows += 1;
                stats.bytes += (key.len() + value.len()) as u64;
                for c in self.decode_points(&key, &value, base, start_ms, end_ms, &mut buf)? {
                    stats.annotations.push((i, c.value));
                }
                stats.points += buf.len() as u64;
                if !buf.is_empty() && !sink(i, &buf) {
                    return Ok(stats);
                }
            }
        }
        Ok(stats)
    }
}

/// Longest range [`SeriesSource::scan_tsuids`] reads as one scan per hour.
const MAX_HOURLY_SCANS: u32 = 31 * 24;

/// Rows asked of the engine at once by [`SeriesSource::read_tsuids`]:
/// large enough that a remote engine's round trip is paid rarely, small
/// enough that a sink which stops early wastes little.
const ROWS_PER_READ: usize = 256;

/// First and last hourly row base times covering `[start_ms, end_ms]`; a
/// range reaching past 2106 reads through the last row.
fn hour_range(start_ms: u64, end_ms: u64) -> Option<(u32, u32)> {
    if end_ms < start_ms {
        return None;
    }
    Some((
        row_base_clamped(start_ms / 1000),
        row_base_clamped(end_ms / 1000),
    ))
}

impl Store {
    /// Decodes one row's points in `[start_ms, end_ms]` into `buf`
    /// (cleared first). A row holding one well-formed compacted column —
    /// what this store writes — is decoded in place without allocating;
    /// anything else goes through the general decoder with the store's
    /// duplicate policy. Returns the row's annotation cells (rows holding
    /// annotations always take the general path).
    pub fn decode_points(
        &self,
        key: &[u8],
        value: &[u8],
        base: u32,
        start_ms: u64,
        end_ms: u64,
        buf: &mut Vec<Point>,
    ) -> Result<Vec<crate::codec::row::Cell>> {
        buf.clear();
        let base_ms = base as u64 * 1000;
        let mut push = |offset_ms: u32, value: Value| {
            let timestamp_ms = base_ms + offset_ms as u64;
            if timestamp_ms >= start_ms && timestamp_ms <= end_ms {
                buf.push(Point::new(timestamp_ms, value));
            }
        };
        if let Some((q, v)) = RowCells::single_cell(value) {
            match CellKind::of(q) {
                CellKind::Single => {
                    let p = column::decode_single(q, v)?;
                    push(p.offset_ms, p.value);
                    return Ok(Vec::new());
                }
                CellKind::Compacted if column::for_each_compacted(q, v, &mut push) => {
                    return Ok(Vec::new());
                }
                CellKind::Compressed => {
                    // Errors (a bad checksum) fall through to the general
                    // decoder, which reports them with the row key.
                    thread_local! {
                        static SCRATCH: std::cell::RefCell<crate::codec::compressed::Scratch> = Default::default();
                    }
                    // The range as offsets from the row's base: a point at
                    // offset `o` is kept if `base_ms + o` is in range.
                    let from = start_ms.saturating_sub(base_ms).min(u32::MAX as u64 + 1) as i64;
                    let to = match end_ms.checked_sub(base_ms) {
                        Some(d) => d.min(u32::MAX as u64) as i64,
                        None => -1,
                    };
                    let ok = SCRATCH.with(|scratch| {
                        crate::codec::compressed::decode_values_in(
                            v,
                            &mut scratch.borrow_mut(),
                            from,
                            to,
                            buf,
                            |offset_ms, value| Point::new(base_ms + offset_ms as u64, value),
                        )
                        .is_ok()
                    });
                    if ok {
                        return Ok(Vec::new());
                    }
                }
                _ => {}
            }
        }
        buf.clear();
        let cells = super::decode_cells(key, value)?;
        let decoded = self.decode(key, &cells)?;
        for p in &decoded.points {
            let timestamp_ms = base_ms + p.offset_ms as u64;
            if timestamp_ms >= start_ms && timestamp_ms <= end_ms {
                buf.push(Point::new(timestamp_ms, p.value));
            }
        }
        Ok(decoded.annotations)
    }
}

/// A metric scan's points gathered by series, as [`SeriesData`]. Rows of
/// one series come in hour order within a salt bucket, and a series lives
/// in one bucket, so each list is already sorted.
pub(crate) fn series_data(
    by_series: std::collections::BTreeMap<Tsuid, Vec<Point>>,
) -> Vec<SeriesData> {
    by_series
        .into_iter()
        .map(|(tsuid, points)| SeriesData { tsuid, points })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A point takes 16 bytes and gives back exactly what was
    /// written: its precision, and every value's bits.
    #[test]
    fn a_point_is_16_bytes_and_gives_back_what_was_written() {
        assert_eq!(std::mem::size_of::<Point>(), 16);
        let stamps = [
            Timestamp::Seconds(1356998400),
            Timestamp::Millis(1356998400123),
            Timestamp::Millis(1356998400000),
        ];
        let values = [
            Value::Int(0),
            Value::Int(-1),
            Value::Int(i64::MIN),
            Value::Int(i64::MAX),
            Value::Float(-0.0),
            Value::Float(f64::NAN),
            Value::Float(f64::NEG_INFINITY),
            Value::Float(1.5e300),
        ];
        for ts in stamps {
            for v in values {
                let p = Point::written(ts, v);
                assert_eq!(p.timestamp(), ts);
                assert_eq!(p.timestamp_ms(), ts.as_millis());
                match (p.value(), v) {
                    (Value::Float(a), Value::Float(b)) => assert_eq!(a.to_bits(), b.to_bits()),
                    (a, b) => assert_eq!(a, b),
                }
            }
        }
    }

    use crate::codec::row::DuplicatePolicy;
    use crate::codec::row_key::KeyLayout;
    use crate::model::{Timestamp, UidWidth};
    use crate::storage::Durability;

    #[test]
    fn reads_series_across_hours_with_filter() {
        let store = Store::in_memory(KeyLayout::default(), DuplicatePolicy::LastWriteWins);
        let u = |i| Uid::new(i, UidWidth::DEFAULT).unwrap();
        let a = Tsuid::new(u(1), vec![(u(1), u(1))]).unwrap();
        let b = Tsuid::new(u(1), vec![(u(1), u(2))]).unwrap();
        for t in [&a, &b] {
            store
                .put_points(
                    t,
                    &[
                        (Timestamp::Seconds(1356998399), Value::Int(0)),
                        (Timestamp::Seconds(1356998400), Value::Int(1)),
                        (Timestamp::Seconds(1357002000), Value::Int(2)),
                    ],
                    Durability::Process,
                )
                .unwrap();
        }
        let got = store
            .read_series(u(1), 1356998400000, 1357002000000, &mut |t| t == &a)
            .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].tsuid, a);
        assert_eq!(
            got[0]
                .points
                .iter()
                .map(|p| p.timestamp_ms())
                .collect::<Vec<_>>(),
            vec![1356998400000, 1357002000000]
        );
        let all = store.read_series(u(1), 0, u64::MAX, &mut |_| true).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].points.len(), 3);
    }

    /// A stale marker written to rows of either encoding comes back from
    /// the store with its bits; [`without_stale_markers`] drops it and
    /// nothing else.
    #[test]
    fn stale_markers_come_back_from_rows_and_are_dropped_for_opentsdb() {
        use crate::codec::row::RowEncoding;
        let u = |i| Uid::new(i, UidWidth::DEFAULT).unwrap();
        let t = Tsuid::new(u(1), vec![(u(1), u(1))]).unwrap();
        let marker = Value::Float(f64::from_bits(STALE_MARKER_BITS));
        let written = [
            (Timestamp::Seconds(1356998400), Value::Float(1.5)),
            (Timestamp::Seconds(1356998410), marker),
            (Timestamp::Millis(1356998420500), Value::Float(f64::NAN)),
            (Timestamp::Seconds(1356998430), Value::Int(3)),
        ];
        for encoding in [RowEncoding::Classic, RowEncoding::Compressed] {
            let mut store = Store::in_memory(KeyLayout::default(), DuplicatePolicy::LastWriteWins);
            store.set_encoding(encoding);
            store
                .put_points(&t, &written[1..], Durability::Process)
                .unwrap();
            // A late point merged into the row rewrites it: the marker
            // goes through a decoding and an encoding again.
            store
                .put_points(&t, &written[..1], Durability::Process)
                .unwrap();
            let mut got: Vec<Point> = Vec::new();
            store
                .read_tsuids(std::slice::from_ref(&t), 0, u64::MAX / 4, &mut |_, p| {
                    got.extend_from_slice(p);
                    true
                })
                .unwrap();
            assert_eq!(got.len(), 4, "{encoding:?}");
            assert!(got[1].is_stale_marker(), "{encoding:?}: {:?}", got[1]);
            assert!(!got[2].is_stale_marker() && got[2].value().as_f64().is_nan());
            let kept = without_stale_markers(&got);
            assert_eq!(
                kept.iter().map(|p| p.timestamp_ms()).collect::<Vec<_>>(),
                vec![1356998400000, 1356998420500, 1356998430000]
            );
            let none = without_stale_markers(&got[..1]);
            assert!(matches!(none, std::borrow::Cow::Borrowed(_)));
        }
    }

    #[test]
    fn reads_listed_series_by_gets_and_scans() {
        let store = Store::in_memory(KeyLayout::default(), DuplicatePolicy::LastWriteWins);
        let u = |i| Uid::new(i, UidWidth::DEFAULT).unwrap();
        let series: Vec<Tsuid> = (1..=3)
            .map(|v| Tsuid::new(u(1), vec![(u(1), u(v))]).unwrap())
            .collect();
        for (i, t) in series.iter().enumerate() {
            let pts: Vec<_> = (0..5)
                .map(|k| {
                    (
                        Timestamp::Seconds(1356998400 + k * 1800),
                        if i == 2 {
                            Value::Float(k as f64 + 0.5)
                        } else {
                            Value::Int(k as i64)
                        },
                    )
                })
                .collect();
            store.put_points(t, &pts, Durability::Process).unwrap();
        }
        let want = [series[2].clone(), series[0].clone()];
        for scan in [false, true] {
            let mut got: Vec<(usize, u64, Value)> = Vec::new();
            let mut sink = |i: usize, pts: &[Point]| {
                got.extend(pts.iter().map(|p| (i, p.timestamp_ms(), p.value())));
                true
            };
            let stats = if scan {
                store.scan_tsuids(
                    u(1),
                    &want,
                    1356998400000 + 1_800_000,
                    1357005600000,
                    &mut sink,
                )
            } else {
                store.read_tsuids(&want, 1356998400000 + 1_800_000, 1357005600000, &mut sink)
            }
            .unwrap();
            assert_eq!(stats.points, 8);
            let mut s0: Vec<_> = got.iter().filter(|g| g.0 == 0).map(|g| g.1).collect();
            let s0_sorted = {
                let mut v = s0.clone();
                v.sort();
                v
            };
            assert_eq!(s0, s0_sorted, "time order per series");
            s0.dedup();
            assert_eq!(s0.len(), 4);
            assert!(got.iter().any(|g| g.0 == 0 && g.2 == Value::Float(1.5)));
            assert!(got.iter().any(|g| g.0 == 1 && g.2 == Value::Int(4)));
        }
    }
}
