//! WAL frames: a length and a CRC-32 around a payload of records, a
//! batch of frames compressed into one (laid out by series when it holds
//! only definitions and points), and reading a run of frames back with
//! damaged stretches skipped and counted; pure functions over bytes
//! (docs/format/wal.md). Records are [`super::record`]'s, the columnar
//! body [`super::columns`]'; segment files and the writer thread are in
//! [`super::segment`] and [`super::writer`].

use super::columns::{self, Body, Layout};
use super::record::{
    Cursor, REC_COLUMNS, REC_PACKED, REC_SERIES, REC_ZSTD, Record, decode_records,
};
use crate::codec::varint;

/// `len: u32 LE` then `crc: u32 LE` before every payload.
const FRAME_HEADER: usize = 8;
/// Refuse to read frames larger than this (corruption guard).
const MAX_FRAME: usize = 256 << 20;

/// A run of frames shorter than this is written as it is: compressing a
/// single `sync` put's frame saves nothing.
const COMPRESS_MIN: usize = 512;
/// zstd's fastest levels compress these records about as well as its
/// default (3) and at several times the speed.
const ZSTD_LEVEL: i32 = 1;

/// Reserves the header of a frame at the end of `buf`; records encoded
/// after it belong to the frame until [`finish_frame`] seals it. Returns
/// where the frame starts.
pub(super) fn start_frame(buf: &mut Vec<u8>) -> usize {
    let start = buf.len();
    buf.extend_from_slice(&[0u8; FRAME_HEADER]);
    start
}

/// Fills in the header of the frame started at `start`, covering every
/// byte after it. Returns the frame's length, header included.
pub(super) fn finish_frame(buf: &mut [u8], start: usize) -> u64 {
    let len = buf.len() - start - FRAME_HEADER;
    let crc = crc32fast::hash(&buf[start + FRAME_HEADER..]);
    buf[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
    buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    (len + FRAME_HEADER) as u64
}

/// Compresses what appenders framed into the frames the log writes.
pub(super) struct FrameCompressor {
    zstd: zstd::bulk::Compressor<'static>,
    /// The batch's records back to back, as the appenders encoded them.
    records: Vec<u8>,
    /// The same laid out by series, and its scratch space.
    layout: Layout,
    columns: Vec<u8>,
    compressed: Vec<u8>,
}

impl FrameCompressor {
    pub(super) fn new() -> FrameCompressor {
        FrameCompressor {
            zstd: zstd::bulk::Compressor::new(ZSTD_LEVEL)
                .expect("zstd takes its own fastest level"),
            records: Vec::new(),
            layout: Layout::default(),
            columns: Vec::new(),
            compressed: Vec::new(),
        }
    }

    /// Rewrites `frames` (whole frames back to back, as [`finish_frame`]
    /// left them) as one frame holding all their records compressed,
    /// when that is smaller; leaves them as they are otherwise. A batch
    /// of series definitions and points is laid out by series first
    /// (`REC_PACKED`); one with a delete or a histogram, whose order
    /// among the points matters, is compressed as it is (`REC_ZSTD`).
    pub(super) fn compress(&mut self, frames: &mut Vec<u8>) {
        if frames.len() < COMPRESS_MIN {
            return;
        }
        self.records.clear();
        let mut i = 0;
        while i + FRAME_HEADER <= frames.len() {
            let len = u32::from_le_bytes(frames[i..i + 4].try_into().expect("4 bytes")) as usize;
            let Some(payload) = frames.get(i + FRAME_HEADER..i + FRAME_HEADER + len) else {
                return;
            };
            self.records.extend_from_slice(payload);
            i += FRAME_HEADER + len;
        }
        if i != frames.len() || self.records.len() > MAX_FRAME {
            return;
        }
        self.columns.clear();
        let by_series =
            self.layout.encode(&self.records, &mut self.columns) && self.columns.len() <= MAX_FRAME;
        let (tag, body) = if by_series {
            (REC_PACKED, &self.columns)
        } else {
            (REC_ZSTD, &self.records)
        };
        self.compressed.clear();
        self.compressed
            .reserve(zstd::zstd_safe::compress_bound(body.len()));
        if self
            .zstd
            .compress_to_buffer(body.as_slice(), &mut self.compressed)
            .is_err()
        {
            return;
        }
        let mut frame = Vec::with_capacity(self.compressed.len() + FRAME_HEADER + 6);
        let start = start_frame(&mut frame);
        frame.push(tag);
        varint::put(body.len() as u64, &mut frame);
        frame.extend_from_slice(&self.compressed);
        finish_frame(&mut frame, start);
        if frame.len() < frames.len() {
            *frames = frame;
        }
    }
}

/// The bytes a `REC_ZSTD`, `REC_COLUMNS` or `REC_PACKED` payload holds,
/// after its tag byte.
fn decompress(c: &mut Cursor<'_>) -> Option<Vec<u8>> {
    let raw_len = usize::try_from(c.varint()?).ok()?;
    if raw_len > MAX_FRAME {
        return None;
    }
    let rest = c.bytes(c.b.len() - c.i)?;
    let raw = zstd::bulk::decompress(rest, raw_len).ok()?;
    (raw.len() == raw_len).then_some(raw)
}

fn decode_payload(payload: &[u8], out: &mut Vec<Record>) -> Option<()> {
    let mut c = Cursor { b: payload, i: 1 };
    match payload.first() {
        // (Compressed records are never compressed again: a `REC_ZSTD`,
        // `REC_COLUMNS` or `REC_PACKED` among them is undecodable.)
        Some(&REC_ZSTD) => decode_records(&decompress(&mut c)?, out),
        Some(&REC_COLUMNS) => columns::decode(Body::Varints, &decompress(&mut c)?, out),
        Some(&REC_PACKED) => columns::decode(Body::Packed, &decompress(&mut c)?, out),
        _ => decode_records(payload, out),
    }
}

/// Decodes the frame at the start of `bytes` onto `out` and returns its
/// length, header included. `None`, with `out` left as it was, if the
/// frame is truncated, too long, fails its CRC or holds an undecodable
/// record: a frame is replayed whole or not at all.
pub(super) fn decode_frame(bytes: &[u8], out: &mut Vec<Record>) -> Option<usize> {
    let payload = checked_payload(bytes)?;
    let before = out.len();
    if decode_payload(payload, out).is_none() {
        out.truncate(before);
        return None;
    }
    Some(FRAME_HEADER + payload.len())
}

/// The payload of the frame at the start of `bytes` if its header is
/// whole, its length plausible and its CRC matches.
fn checked_payload(bytes: &[u8]) -> Option<&[u8]> {
    let header = bytes.get(..FRAME_HEADER)?;
    let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
    if len > MAX_FRAME {
        return None;
    }
    let payload = bytes.get(FRAME_HEADER..FRAME_HEADER + len)?;
    (crc32fast::hash(payload) == crc).then_some(payload)
}

/// Whether the bytes at the start of `bytes` are a frame cut short by the
/// end of the data: a whole-looking header whose payload runs past the
/// end, or a header itself cut short. This is what a crash leaves at the
/// end of the segment being written.
fn is_truncated_frame(bytes: &[u8]) -> bool {
    match bytes.get(..FRAME_HEADER) {
        None => true,
        Some(h) => {
            let len = u32::from_le_bytes(h[..4].try_into().expect("4 bytes")) as usize;
            len <= MAX_FRAME && FRAME_HEADER + len > bytes.len()
        }
    }
}

/// Candidate frames longer than this are only checksummed when the bytes
/// after them look like the start of another frame (or the end).
const CHEAP_CANDIDATE: usize = 64 << 10;

/// Whether `bytes` could start a frame: a length within bounds and, for a
/// non-empty payload, a record tag as its first byte (every payload the
/// writer makes starts with a record). Costs no CRC.
fn plausible_start(bytes: &[u8]) -> Option<usize> {
    let Some(len) = bytes.get(..4) else {
        // Cut short: plausible as the torn last frame.
        return Some(0);
    };
    let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
    if len > MAX_FRAME {
        return None;
    }
    match bytes.get(FRAME_HEADER) {
        _ if len == 0 => Some(0),
        Some(tag) if (REC_SERIES..=REC_PACKED).contains(tag) => Some(len),
        Some(_) => None,
        // Cut short: plausible as the torn last frame.
        None => Some(len),
    }
}

/// Where the next frame that decodes starts in `bytes`, searching from
/// offset 1. Candidates whose length is impossible (past the data or
/// [`MAX_FRAME`]) or whose payload does not start with a record tag are
/// rejected before any CRC is computed, and a long candidate must also be
/// followed by a plausible frame start (or the end): so a damaged stretch
/// costs about one pass over it plus a few short checksums, not a CRC of
/// up to the rest of the segment at every byte.
fn resync(bytes: &[u8]) -> Option<usize> {
    (1..bytes.len().saturating_sub(FRAME_HEADER - 1)).find(|&at| {
        let rest = &bytes[at..];
        // An empty frame carries nothing, and eight zero bytes (a float
        // 0.0) inside a payload would pass for one.
        let Some(len) = plausible_start(rest).filter(|&len| len > 0) else {
            return false;
        };
        let end = FRAME_HEADER + len;
        if end > rest.len() {
            return false;
        }
        if len > CHEAP_CANDIDATE && end < rest.len() && plausible_start(&rest[end..]).is_none() {
            return false;
        }
        let mut probe = Vec::new();
        decode_frame(rest, &mut probe).is_some()
    })
}

/// What decoding a run of frames found besides its records.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameScan {
    /// Frames decoded.
    pub frames: u64,
    /// Stretches of bytes skipped between good frames (each at least one
    /// frame whose length, CRC or records were wrong), and at the end when
    /// no frame could be found again in them.
    pub damaged_frames: u64,
    pub damaged_bytes: u64,
    /// Bytes of a frame cut short at the very end (a torn write).
    pub torn_tail: u64,
}

/// Decodes every frame of `bytes` that can be found: after a bad frame
/// the next offset where a whole frame with a matching CRC starts is
/// looked for and decoding goes on from there, so one damaged frame costs
/// only itself.
pub(super) fn decode_frames(bytes: &[u8], out: &mut Vec<Record>) -> FrameScan {
    let mut scan = FrameScan::default();
    let mut i = 0;
    while i < bytes.len() {
        if let Some(n) = decode_frame(&bytes[i..], out) {
            scan.frames += 1;
            i += n;
            continue;
        }
        match resync(&bytes[i..]) {
            Some(skip) => {
                scan.damaged_frames += 1;
                scan.damaged_bytes += skip as u64;
                i += skip;
            }
            None => {
                let rest = (bytes.len() - i) as u64;
                if is_truncated_frame(&bytes[i..]) {
                    scan.torn_tail = rest;
                } else {
                    scan.damaged_frames += 1;
                    scan.damaged_bytes += rest;
                }
                break;
            }
        }
    }
    scan
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::model::point::{Timestamp, Value};
    use crate::write::wal::record::tests::encode;
    use crate::write::wal::record::{encode_delete, point_record};
    use proptest::prelude::*;

    /// A segment as written by the log of ba3fdfc (before the codec and the
    /// segment I/O were split), spelled out byte by byte: any change to the
    /// stored format would strand logs written by an older build.
    #[rustfmt::skip] // one line per field, as annotated
    pub(in crate::write::wal) const OLD_SEGMENT: &[u8] = &[
        // Frame 1: len 43, CRC-32 of the payload.
        0x2b, 0x00, 0x00, 0x00, 0x1e, 0x86, 0xbf, 0xcf,
        // Series 3 "sys.cpu" with one tag host=h3.
        0x01, 0x03, 0x07, b's', b'y', b's', b'.', b'c', b'p', b'u',
        0x01, 0x04, b'h', b'o', b's', b't', 0x02, b'h', b'3',
        // Int point: id 3, ts 1356998400, zigzag(-5) = 9.
        0x02, 0x03, 0x80, 0xce, 0x88, 0x87, 0x05, 0x09,
        // Float point: id 3, ts 1356998400123 ms, 1.5 as f64 LE.
        0x03, 0x03, 0xfb, 0xb0, 0xa1, 0x9b, 0xbf, 0x27,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f,
        // Frame 2: len 21.
        0x15, 0x00, 0x00, 0x00, 0xfc, 0x5c, 0xe2, 0xa0,
        // Delete: 9-byte TSUID, hours 1356998400..=1357002000.
        0x04, 0x09, 0x00, 0x00, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x03,
        0x80, 0xce, 0x88, 0x87, 0x05, 0x90, 0xea, 0x88, 0x87, 0x05,
        // Frame 3: len 9; the series is already declared in this segment.
        0x09, 0x00, 0x00, 0x00, 0x93, 0x42, 0x4f, 0x01,
        // Int point: id 3, ts 1357002001, zigzag(300) = 600.
        0x02, 0x03, 0x91, 0xea, 0x88, 0x87, 0x05, 0xd8, 0x04,
    ];

    /// The records of [`OLD_SEGMENT`], frame by frame.
    pub(in crate::write::wal) fn old_segment_frames() -> Vec<Vec<Record>> {
        let point = |ts, value| Record::Point { id: 3, ts, value };
        vec![
            vec![
                Record::Series {
                    id: 3,
                    metric: "sys.cpu".into(),
                    tags: vec![("host".into(), "h3".into())],
                },
                point(Timestamp::Seconds(1356998400), Value::Int(-5)),
                point(Timestamp::Millis(1356998400123), Value::Float(1.5)),
            ],
            vec![Record::Delete {
                tsuid: vec![0, 0, 1, 0, 0, 1, 0, 0, 3],
                first_hour: 1356998400,
                last_hour: 1357002000,
            }],
            vec![point(Timestamp::Seconds(1357002001), Value::Int(300))],
        ]
    }

    fn encode_frames(frames: &[Vec<Record>]) -> Vec<u8> {
        let mut out = Vec::new();
        for f in frames {
            let start = start_frame(&mut out);
            for r in f {
                encode(r, &mut out);
            }
            finish_frame(&mut out, start);
        }
        out
    }

    #[test]
    fn segment_written_before_the_split_still_decodes() {
        let mut got = Vec::new();
        let scan = decode_frames(OLD_SEGMENT, &mut got);
        assert_eq!(
            scan,
            FrameScan {
                frames: 3,
                ..Default::default()
            }
        );
        assert_eq!(got, old_segment_frames().concat());
    }

    #[test]
    fn a_point_no_row_can_hold_costs_only_itself() {
        // Frame: series 1, int point at 9999999999999 ms (past 2106),
        // int point at 1356998400 s.
        let frame = vec![
            Record::Series {
                id: 1,
                metric: "m".into(),
                tags: vec![("a".into(), "b".into())],
            },
            Record::UnstorablePoint {
                id: 1,
                raw_ts: 9_999_999_999_999,
                value: Value::Int(1),
            },
            Record::Point {
                id: 1,
                ts: Timestamp::Seconds(1356998400),
                value: Value::Int(2),
            },
        ];
        let bytes = encode_frames(std::slice::from_ref(&frame));
        let mut got = Vec::new();
        assert_eq!(decode_frames(&bytes, &mut got).frames, 1);
        assert_eq!(got, frame);
    }

    #[test]
    fn garbage_between_frames_is_skipped_and_counted() {
        let frames = old_segment_frames();
        let mut bytes = encode_frames(&frames[..1]);
        // A stretch of pseudo-random bytes (and zeros) where frames were.
        let mut x = 0x9e37_79b9_u32;
        let garbage: Vec<u8> = (0..200_000)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                if i % 1000 >= 984 { 0 } else { x as u8 }
            })
            .collect();
        bytes.extend_from_slice(&garbage);
        bytes.extend_from_slice(&encode_frames(&frames[1..]));
        let mut got = Vec::new();
        let scan = decode_frames(&bytes, &mut got);
        assert_eq!(got, frames.concat());
        assert_eq!(
            scan,
            FrameScan {
                frames: 3,
                damaged_frames: 1,
                damaged_bytes: garbage.len() as u64,
                torn_tail: 0
            }
        );
        // Garbage at the end that no frame follows is damage, not a torn
        // write; a frame cut short there is a torn write.
        let mut got = Vec::new();
        let mut tail = encode_frames(&frames);
        tail.extend_from_slice(&garbage);
        let scan = decode_frames(&tail, &mut got);
        assert_eq!((scan.damaged_frames, scan.torn_tail), (1, 0));
        let mut torn = encode_frames(&frames);
        let last = encode_frames(&frames[..1]);
        torn.extend_from_slice(&last[..last.len() - 1]);
        let scan = decode_frames(&torn, &mut Vec::new());
        assert_eq!(
            (scan.damaged_frames, scan.torn_tail),
            (0, last.len() as u64 - 1)
        );
    }

    #[test]
    fn encoders_still_produce_the_old_bytes() {
        assert_eq!(encode_frames(&old_segment_frames()), OLD_SEGMENT);
    }

    #[test]
    fn oversized_and_unknown_records_are_rejected() {
        let mut out = Vec::new();
        let mut huge = ((MAX_FRAME + 1) as u32).to_le_bytes().to_vec();
        huge.extend_from_slice(&[0; 4]);
        assert_eq!(decode_frame(&huge, &mut out), None);
        // A good record before the unknown one is dropped with its frame.
        let mut unknown = Vec::new();
        let start = start_frame(&mut unknown);
        encode_delete(&mut unknown, &[1], 0, 0);
        unknown.push(9);
        finish_frame(&mut unknown, start);
        assert_eq!(decode_frame(&unknown, &mut out), None);
        assert!(out.is_empty());
    }

    fn record() -> impl Strategy<Value = Record> {
        // Every timestamp a row can hold: seconds, then milliseconds up to
        // the last second of the last row.
        let ts = (1i64..=u32::MAX as i64 * 1000 + 999)
            .prop_map(|r| Timestamp::from_raw(r).expect("in range"));
        // NaN != NaN would fail the comparison, not the codec.
        let value = prop_oneof![
            any::<i64>().prop_map(Value::Int),
            any::<f64>()
                .prop_filter("not NaN", |f| !f.is_nan())
                .prop_map(Value::Float),
        ];
        prop_oneof![
            (
                any::<u32>(),
                ".{0,20}",
                prop::collection::vec((".{0,10}", ".{0,10}"), 0..4)
            )
                .prop_map(|(id, metric, tags)| Record::Series { id, metric, tags }),
            (any::<u32>(), ts, value.clone()).prop_map(|(id, ts, value)| Record::Point {
                id,
                ts,
                value
            }),
            // Times no row can hold, as older builds logged them.
            (
                any::<u32>(),
                prop_oneof![Just(0u64), (u32::MAX as u64 * 1000 + 1000)..],
                value
            )
                .prop_map(|(id, raw_ts, value)| Record::UnstorablePoint {
                    id,
                    raw_ts,
                    value
                }),
            (
                prop::collection::vec(any::<u8>(), 0..20),
                any::<u32>(),
                any::<u32>()
            )
                .prop_map(|(tsuid, first_hour, last_hour)| Record::Delete {
                    tsuid,
                    first_hour,
                    last_hour
                }),
        ]
    }

    fn frames() -> impl Strategy<Value = Vec<Vec<Record>>> {
        prop::collection::vec(prop::collection::vec(record(), 0..6), 1..5)
    }

    /// What the writer writes for a batch of appends.
    fn compressed(frames: &[Vec<Record>]) -> Vec<u8> {
        let mut bytes = encode_frames(frames);
        FrameCompressor::new().compress(&mut bytes);
        bytes
    }

    /// The records of a batch as replay reads them back from what the
    /// writer wrote: laid out by series (definitions first, then each
    /// series' points in the order logged, series in the order first
    /// seen) when the batch went into one `REC_PACKED` frame, as logged
    /// otherwise.
    fn replayed(batch: &[Vec<Record>]) -> Vec<Record> {
        let all = batch.concat();
        if compressed(batch)[FRAME_HEADER] != REC_PACKED {
            return all;
        }
        by_series(&all)
    }

    /// Records reordered as a batch laid out by series reads back.
    fn by_series(all: &[Record]) -> Vec<Record> {
        let mut out: Vec<Record> = all
            .iter()
            .filter(|r| matches!(r, Record::Series { .. }))
            .cloned()
            .collect();
        let id = |r: &Record| match r {
            Record::Point { id, .. } | Record::UnstorablePoint { id, .. } => Some(*id),
            _ => None,
        };
        let mut seen = std::collections::HashSet::new();
        for r in all {
            if let Some(i) = id(r).filter(|i| seen.insert(*i)) {
                out.extend(all.iter().filter(|p| id(p) == Some(i)).cloned());
            }
        }
        out
    }

    /// Batches big enough to be compressed.
    fn batches() -> impl Strategy<Value = Vec<Vec<Vec<Record>>>> {
        let frame = prop::collection::vec(record(), 10..40);
        // Half of them hold no delete, so they go into `REC_PACKED`.
        let batch = prop_oneof![prop::collection::vec(frame, 1..4), point_batches()];
        prop::collection::vec(batch, 1..4)
    }

    /// A devops-like batch: series 0..100 defined, then 20 steps of 10 s
    /// with each series' value wandering (gauges in tenths, counters).
    fn devops_batch() -> Vec<Vec<Record>> {
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            rng >> 33
        };
        let mut values: Vec<i64> = (0..100).map(|_| (next() % 1000) as i64).collect();
        let mut frames = vec![
            (0..100)
                .map(|id| Record::Series {
                    id,
                    metric: format!("cpu.m{}", id % 10),
                    tags: vec![("host".into(), format!("host_{}", id / 10))],
                })
                .collect::<Vec<_>>(),
        ];
        for step in 0..20u32 {
            frames.push(
                (0..100u32)
                    .map(|id| {
                        let v = &mut values[id as usize];
                        let value = if id % 10 >= 8 {
                            *v += 1000 + (next() % 500) as i64;
                            Value::Int(*v)
                        } else {
                            *v = (*v + (next() % 21) as i64 - 10).clamp(0, 1000);
                            Value::Float(*v as f64 / 10.0)
                        };
                        Record::Point {
                            id,
                            ts: Timestamp::Seconds(1356998400 + step * 10),
                            value,
                        }
                    })
                    .collect(),
            );
        }
        frames
    }

    #[test]
    fn a_batch_of_points_is_written_as_one_frame_laid_out_by_series() {
        let frames = devops_batch();
        let raw = encode_frames(&frames);
        let bytes = compressed(&frames);
        assert_eq!(bytes[FRAME_HEADER], REC_PACKED);
        // Against the same records compressed as they are (`REC_ZSTD`,
        // what format 4 wrote).
        let records: Vec<u8> = frames
            .iter()
            .flat_map(|f| {
                let mut out = Vec::new();
                f.iter().for_each(|r| encode(r, &mut out));
                out
            })
            .collect();
        let as_is = zstd::bulk::compress(&records, ZSTD_LEVEL).unwrap().len();
        assert!(
            bytes.len() * 2 < as_is,
            "{} bytes by series, {as_is} as logged, {} raw",
            bytes.len(),
            raw.len()
        );
        let mut got = Vec::new();
        let scan = decode_frames(&bytes, &mut got);
        assert_eq!(scan.frames, 1);
        assert_eq!(got, replayed(&frames));
        assert_eq!(got.len(), frames.concat().len());
        // A lone small frame stays as it is.
        let small = &frames[1][..2];
        assert_eq!(
            compressed(&[small.to_vec()]),
            encode_frames(&[small.to_vec()])
        );
    }

    /// Series interleaved, definitions between points, and values of
    /// every kind a group can hold: integers, decimals, other floats
    /// (NaN, -0.0, a third), and times in seconds, in milliseconds and
    /// past the last row.
    fn mixed_batch() -> Vec<Vec<Record>> {
        let series = |id: u32| Record::Series {
            id,
            metric: format!("m{id}"),
            tags: vec![("host".into(), format!("h{}", id % 3))],
        };
        let point = |id: u32, raw_ts: u64, value| point_record(id, raw_ts, value);
        let values = [
            Value::Int(-7),
            Value::Float(0.25),
            Value::Float(f64::NAN),
            Value::Float(-0.0),
            Value::Float(1.0 / 3.0),
            Value::Int(i64::MAX),
            Value::Float(12.5),
        ];
        let mut frames = vec![vec![series(9), series(2)]];
        for step in 0..12u64 {
            let mut f = Vec::new();
            if step == 4 {
                f.push(series(40_000));
            }
            for id in [9u32, 2, 40_000, 7] {
                if id == 40_000 && step < 4 {
                    continue;
                }
                let raw_ts = match (id, step % 3) {
                    (7, 0) => 9_999_999_999_999,
                    (7, _) => 1_356_998_400_000 + step * 250,
                    _ => 1_356_998_400 + step * 10,
                };
                let value = match id {
                    9 => Value::Int(step as i64 * 1000 - 3),
                    2 => Value::Float(step as f64 / 10.0),
                    _ => values[(step as usize + id as usize) % values.len()],
                };
                f.push(point(id, raw_ts, value));
            }
            frames.push(f);
        }
        frames
    }

    /// The plain records of a batch back to back, as the writer gathers
    /// them from its frames.
    fn records_of(frames: &[Vec<Record>]) -> Vec<u8> {
        let mut out = Vec::new();
        frames.concat().iter().for_each(|r| encode(r, &mut out));
        out
    }

    /// One frame holding a batch as format 5 wrote it: a `REC_COLUMNS`
    /// record (what logs left by a format 5 build hold).
    fn format_5_frame(frames: &[Vec<Record>]) -> Vec<u8> {
        let mut body = Vec::new();
        assert!(Layout::default().encode_as(Body::Varints, &records_of(frames), &mut body));
        let mut frame = Vec::new();
        let start = start_frame(&mut frame);
        frame.push(REC_COLUMNS);
        varint::put(body.len() as u64, &mut frame);
        frame.extend_from_slice(&zstd::bulk::compress(&body, ZSTD_LEVEL).unwrap());
        finish_frame(&mut frame, start);
        frame
    }

    /// The body of a columnar frame, decompressed.
    fn body_of(frame: &[u8]) -> Vec<u8> {
        let mut c = Cursor {
            b: &frame[FRAME_HEADER..],
            i: 1,
        };
        decompress(&mut c).unwrap()
    }

    /// The columnar layout of the devops and mixed batches, checked by
    /// CRC-32 and length: against what the first layout (3ebaab5, store
    /// format 5) wrote for `REC_COLUMNS`, which the test encoder must
    /// still write for the test below to mean anything, and against what
    /// format 6 writes. Both are a stored format.
    #[test]
    fn batches_are_laid_out_as_formats_5_and_6_lay_them_out() {
        for (frames, format_5, format_6) in [
            (devops_batch(), (0x8f7f_e854, 7065), (0x529d_8191, 6178)),
            (mixed_batch(), (0xb13d_d9af, 388), (0x5dcc_e5aa, 362)),
        ] {
            let body = body_of(&format_5_frame(&frames));
            assert_eq!((crc32fast::hash(&body), body.len()), format_5);
            let bytes = compressed(&frames);
            assert_eq!(bytes[FRAME_HEADER], REC_PACKED);
            let body = body_of(&bytes);
            assert_eq!((crc32fast::hash(&body), body.len()), format_6);
        }
    }

    /// A log written by format 5 (`REC_COLUMNS` frames) reads back as it
    /// did: every record of the batch, laid out by series.
    #[test]
    fn format_5_batches_read_back() {
        for frames in [devops_batch(), mixed_batch()] {
            let bytes = format_5_frame(&frames);
            let mut got = Vec::new();
            let scan = decode_frames(&bytes, &mut got);
            assert_eq!((scan.frames, scan.damaged_frames), (1, 0));
            assert_eq!(keys(&got), keys(&by_series(&frames.concat())));
        }
    }

    /// The devops batch takes fewer bytes in a `REC_PACKED` frame than in
    /// the `REC_COLUMNS` frame format 5 wrote (the figures are in
    /// docs/format/wal.md).
    #[test]
    fn packed_values_take_fewer_bytes_than_format_5s() {
        let frames = devops_batch();
        let (packed, varints) = (compressed(&frames).len(), format_5_frame(&frames).len());
        assert!(packed < varints, "{packed} packed, {varints} as format 5");
    }

    #[test]
    fn a_batch_with_a_delete_keeps_its_order() {
        let mut frames = devops_batch();
        frames.insert(
            5,
            vec![Record::Delete {
                tsuid: vec![0, 0, 1, 0, 0, 1, 0, 0, 3],
                first_hour: 1356998400,
                last_hour: 1356998400,
            }],
        );
        let bytes = compressed(&frames);
        assert_eq!(bytes[FRAME_HEADER], REC_ZSTD);
        let mut got = Vec::new();
        decode_frames(&bytes, &mut got);
        assert_eq!(got, frames.concat());
    }

    /// Batches of definitions and points only (what `REC_PACKED` holds).
    fn point_batches() -> impl Strategy<Value = Vec<Vec<Record>>> {
        let point = record().prop_filter("no delete", |r| !matches!(r, Record::Delete { .. }));
        prop::collection::vec(prop::collection::vec(point, 10..40), 1..4)
    }

    /// One series' values in a batch, of every kind a group can hold.
    fn series_values() -> impl Strategy<Value = Vec<Value>> {
        let n = 1..80usize;
        let any_float = prop_oneof![
            any::<u64>().prop_map(f64::from_bits),
            Just(-0.0),
            Just(f64::NAN),
            Just(-f64::NAN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(f64::MIN_POSITIVE / 3.0),
            Just(0.1),
            // Prometheus' stale marker, which replay must hand back
            // with its payload.
            Just(f64::from_bits(crate::model::point::STALE_MARKER_BITS)),
        ];
        prop_oneof![
            prop::collection::vec(any::<i64>().prop_map(Value::Int), n.clone()),
            // Counters: steps that wander a little, from anywhere.
            (
                any::<i64>(),
                any::<i64>(),
                prop::collection::vec(-600i64..600, n.clone())
            )
                .prop_map(|(mut v, mut step, jitter)| {
                    jitter
                        .iter()
                        .map(|j| {
                            step = step.wrapping_add(*j);
                            v = v.wrapping_add(step);
                            Value::Int(v)
                        })
                        .collect()
                }),
            // Gauges of e decimals.
            (
                0i32..=9,
                -(1i64 << 40)..(1i64 << 40),
                prop::collection::vec(-50i64..50, n.clone())
            )
                .prop_map(|(e, mut m, steps)| {
                    steps
                        .iter()
                        .map(|d| {
                            m += d;
                            Value::Float(m as f64 / 10f64.powi(e))
                        })
                        .collect()
                }),
            prop::collection::vec(any_float.clone().prop_map(Value::Float), n.clone()),
            prop::collection::vec(
                prop_oneof![
                    any::<i64>().prop_map(Value::Int),
                    any_float.prop_map(Value::Float)
                ],
                n
            ),
        ]
    }

    /// A batch of a few series defined in its first frame, then one
    /// frame per step with a point of each series that has one left
    /// (seconds every 10 s, or milliseconds every 250 ms).
    fn value_batches() -> impl Strategy<Value = Vec<Vec<Record>>> {
        prop::collection::vec((any::<u32>(), any::<bool>(), series_values()), 1..8).prop_map(
            |series| {
                let mut frames = vec![
                    series
                        .iter()
                        .map(|(id, _, _)| Record::Series {
                            id: *id,
                            metric: format!("m{id}"),
                            tags: vec![("host".into(), "h".into())],
                        })
                        .collect::<Vec<_>>(),
                ];
                let steps = series.iter().map(|(_, _, v)| v.len()).max().unwrap_or(0);
                for k in 0..steps {
                    frames.push(
                        series
                            .iter()
                            .filter_map(|(id, millis, values)| {
                                let ts = if *millis {
                                    Timestamp::Millis(1_356_998_400_000 + k as u64 * 250)
                                } else {
                                    Timestamp::Seconds(1_356_998_400 + k as u32 * 10)
                                };
                                values
                                    .get(k)
                                    .map(|&value| Record::Point { id: *id, ts, value })
                            })
                            .collect(),
                    );
                }
                frames
            },
        )
    }

    /// Records as comparable text, floats by their bits (NaN != NaN).
    fn keys(records: &[Record]) -> Vec<String> {
        records
            .iter()
            .map(|r| match r {
                Record::Point {
                    id,
                    ts,
                    value: Value::Float(f),
                } => format!("{id} {} float {:016x}", ts.raw(), f.to_bits()),
                other => format!("{other:?}"),
            })
            .collect()
    }

    proptest! {
        /// Every point (any time a record can hold, any value bit) comes
        /// back from a batch laid out by series, with its series.
        #[test]
        fn a_batch_laid_out_by_series_round_trips(batch in point_batches()) {
            let bytes = compressed(&batch);
            let mut got = Vec::new();
            let scan = decode_frames(&bytes, &mut got);
            prop_assert_eq!(scan.damaged_frames, 0);
            prop_assert_eq!(got, replayed(&batch));
        }

        /// Every value a series can hold (integers of any size,
        /// counters, decimals of every scale, floats of every bit
        /// pattern: NaN payloads, -0.0, infinities, subnormals; and
        /// groups mixing them) comes back bit for bit from a batch the
        /// writer packs, and from one format 5 wrote.
        #[test]
        fn every_value_round_trips_bit_for_bit(frames in value_batches()) {
            let want = keys(&by_series(&frames.concat()));
            let mut got = Vec::new();
            let scan = decode_frames(&compressed(&frames), &mut got);
            prop_assert_eq!(scan.damaged_frames, 0);
            if compressed(&frames)[FRAME_HEADER] == REC_PACKED {
                prop_assert_eq!(keys(&got), want.clone());
            } else {
                prop_assert_eq!(keys(&got), keys(&frames.concat()));
            }
            let mut got = Vec::new();
            decode_frames(&format_5_frame(&frames), &mut got);
            prop_assert_eq!(keys(&got), want);
        }

        /// A body with any byte changed, framed with a CRC that
        /// matches (so only the body's own checks stand between it and
        /// replay), never panics: it decodes or its frame is dropped.
        #[test]
        fn a_changed_byte_in_a_packed_body_never_panics(
            frames in value_batches(),
            at in any::<prop::sample::Index>(),
            flip in 1u8..=255,
        ) {
            let bytes = compressed(&frames);
            prop_assume!(bytes[FRAME_HEADER] == REC_PACKED);
            let mut body = body_of(&bytes);
            let at = at.index(body.len());
            body[at] ^= flip;
            let mut frame = Vec::new();
            let start = start_frame(&mut frame);
            frame.push(REC_PACKED);
            varint::put(body.len() as u64, &mut frame);
            frame.extend_from_slice(&zstd::bulk::compress(&body, ZSTD_LEVEL).unwrap());
            finish_frame(&mut frame, start);
            let mut got = Vec::new();
            let scan = decode_frames(&frame, &mut got);
            prop_assert_eq!(scan.frames + scan.damaged_frames, 1);
        }

        #[test]
        fn records_round_trip(frames in frames()) {
            let bytes = encode_frames(&frames);
            let mut got = Vec::new();
            let scan = decode_frames(&bytes, &mut got);
            prop_assert_eq!(scan, FrameScan { frames: frames.len() as u64, ..Default::default() });
            prop_assert_eq!(got, frames.concat());
        }

        /// A changed byte anywhere in a frame (header or payload) costs
        /// exactly that frame: every frame after it is read.
        #[test]
        fn a_corrupted_frame_costs_only_itself(
            frames in frames(),
            which in any::<prop::sample::Index>(),
            at in any::<prop::sample::Index>(),
            flip in 1u8..=255,
        ) {
            let k = which.index(frames.len());
            let mut bytes = encode_frames(&frames[..k]);
            let mut bad = encode_frames(&frames[k..=k]);
            let at = at.index(bad.len());
            bad[at] ^= flip;
            bytes.extend_from_slice(&bad);
            bytes.extend_from_slice(&encode_frames(&frames[k + 1..]));
            let mut got = Vec::new();
            let scan = decode_frames(&bytes, &mut got);
            let mut want = frames.clone();
            want.remove(k);
            prop_assert_eq!(got, want.concat());
            prop_assert!(scan.damaged_frames + u64::from(scan.torn_tail > 0) >= 1, "{:?}", scan);
        }

        /// Compressed batches read back as the records appended, and a
        /// changed byte in one costs exactly that batch.
        #[test]
        fn a_corrupted_compressed_batch_costs_only_itself(
            batches in batches(),
            which in any::<prop::sample::Index>(),
            at in any::<prop::sample::Index>(),
            flip in 1u8..=255,
        ) {
            let all: Vec<Record> = batches.iter().flat_map(|b| replayed(b)).collect();
            let bytes: Vec<u8> = batches.iter().flat_map(|b| compressed(b)).collect();
            let mut got = Vec::new();
            decode_frames(&bytes, &mut got);
            prop_assert_eq!(&got, &all);

            let k = which.index(batches.len());
            // (A batch that does not compress is written as its frames,
            // each of which costs only itself: covered above.)
            let one = compressed(&batches[k]);
            prop_assume!(one[FRAME_HEADER] == REC_ZSTD || one[FRAME_HEADER] == REC_PACKED);
            let mut bytes = Vec::new();
            for (i, b) in batches.iter().enumerate() {
                let mut one = compressed(b);
                if i == k {
                    let at = at.index(one.len());
                    one[at] ^= flip;
                }
                bytes.extend_from_slice(&one);
            }
            let mut got = Vec::new();
            decode_frames(&bytes, &mut got);
            let want: Vec<Record> = batches
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != k)
                .flat_map(|(_, b)| replayed(b))
                .collect();
            prop_assert_eq!(got, want);
        }

        /// Cutting the last frame short anywhere keeps exactly the frames
        /// before it.
        #[test]
        fn a_truncated_frame_is_not_decoded(frames in frames(), cut in any::<prop::sample::Index>()) {
            let good = encode_frames(&frames[..frames.len() - 1]);
            let last = encode_frames(&frames[frames.len() - 1..]);
            let mut bytes = good.clone();
            bytes.extend_from_slice(&last[..cut.index(last.len())]);
            let mut got = Vec::new();
            let scan = decode_frames(&bytes, &mut got);
            prop_assert_eq!(scan.torn_tail, (bytes.len() - good.len()) as u64);
            prop_assert_eq!(scan.damaged_frames, 0);
            prop_assert_eq!(got, frames[..frames.len() - 1].concat());
        }

        /// A changed byte anywhere in the last frame (header or payload)
        /// keeps exactly the frames before it.
        #[test]
        fn a_corrupted_frame_is_not_decoded(
            frames in frames(),
            at in any::<prop::sample::Index>(),
            flip in 1u8..=255,
        ) {
            let good = encode_frames(&frames[..frames.len() - 1]);
            let mut last = encode_frames(&frames[frames.len() - 1..]);
            let at = at.index(last.len());
            last[at] ^= flip;
            let mut bytes = good.clone();
            bytes.extend_from_slice(&last);
            let mut got = Vec::new();
            let scan = decode_frames(&bytes, &mut got);
            prop_assert_eq!(scan.frames, frames.len() as u64 - 1);
            prop_assert_eq!(got, frames[..frames.len() - 1].concat());
        }
    }
}
