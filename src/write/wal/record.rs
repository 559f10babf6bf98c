//! WAL records and the frames that carry them: encoding and decoding only,
//! no I/O, so the byte format (docs/format/wal.md) can be checked on its
//! own. Segment files and the writer thread are in [`super::segment`] and
//! [`super::writer`].

use crate::codec::varint;
use crate::model::point::{Timestamp, Value};

/// `len: u32 LE` then `crc: u32 LE` before every payload.
const FRAME_HEADER: usize = 8;
/// Refuse to read frames larger than this (corruption guard).
const MAX_FRAME: usize = 256 << 20;

const REC_SERIES: u8 = 1;
const REC_INT: u8 = 2;
const REC_FLOAT: u8 = 3;
const REC_DELETE: u8 = 4;

/// A record read back from a segment.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Record {
    Series {
        id: u32,
        metric: String,
        tags: Vec<(String, String)>,
    },
    Point {
        id: u32,
        ts: Timestamp,
        value: Value,
    },
    /// Hourly rows of a series (by TSUID bytes) deleted by a query.
    Delete {
        tsuid: Vec<u8>,
        first_hour: u32,
        last_hour: u32,
    },
}

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

fn put_str(out: &mut Vec<u8>, s: &str) {
    varint::put(s.len() as u64, out);
    out.extend_from_slice(s.as_bytes());
}

/// Generic over the string type so the writer can encode a
/// [`crate::write::Series`] (boxed strings) without copying its names.
pub(super) fn encode_series<K: AsRef<str>, V: AsRef<str>>(
    out: &mut Vec<u8>,
    id: u32,
    metric: &str,
    tags: &[(K, V)],
) {
    out.push(REC_SERIES);
    varint::put(id as u64, out);
    put_str(out, metric);
    varint::put(tags.len() as u64, out);
    for (k, v) in tags {
        put_str(out, k.as_ref());
        put_str(out, v.as_ref());
    }
}

pub(super) fn encode_point(out: &mut Vec<u8>, id: u32, ts: Timestamp, value: Value) {
    match value {
        Value::Int(i) => {
            out.push(REC_INT);
            varint::put(id as u64, out);
            varint::put(ts.raw(), out);
            varint::put(varint::zigzag(i), out);
        }
        Value::Float(f) => {
            out.push(REC_FLOAT);
            varint::put(id as u64, out);
            varint::put(ts.raw(), out);
            out.extend_from_slice(&f.to_bits().to_le_bytes());
        }
    }
}

pub(super) fn encode_delete(out: &mut Vec<u8>, tsuid: &[u8], first_hour: u32, last_hour: u32) {
    out.push(REC_DELETE);
    varint::put(tsuid.len() as u64, out);
    out.extend_from_slice(tsuid);
    varint::put(first_hour as u64, out);
    varint::put(last_hour as u64, out);
}

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn byte(&mut self) -> Option<u8> {
        let v = *self.b.get(self.i)?;
        self.i += 1;
        Some(v)
    }

    fn varint(&mut self) -> Option<u64> {
        varint::get(self.b, &mut self.i)
    }

    fn bytes(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.b.get(self.i..self.i.checked_add(n)?)?;
        self.i += n;
        Some(s)
    }

    fn string(&mut self) -> Option<String> {
        let n = self.varint()? as usize;
        String::from_utf8(self.bytes(n)?.to_vec()).ok()
    }
}

fn decode_payload(payload: &[u8], out: &mut Vec<Record>) -> Option<()> {
    let mut c = Cursor { b: payload, i: 0 };
    while c.i < payload.len() {
        match c.byte()? {
            REC_SERIES => {
                let id = c.varint()? as u32;
                let metric = c.string()?;
                let n = c.varint()? as usize;
                // A corrupt count must not reserve gigabytes.
                let mut tags = Vec::with_capacity(n.min(64));
                for _ in 0..n {
                    tags.push((c.string()?, c.string()?));
                }
                out.push(Record::Series { id, metric, tags });
            }
            kind @ (REC_INT | REC_FLOAT) => {
                let id = c.varint()? as u32;
                let ts = Timestamp::from_raw(c.varint()? as i64).ok()?;
                let value = if kind == REC_INT {
                    Value::Int(varint::unzigzag(c.varint()?))
                } else {
                    let b: [u8; 8] = c.bytes(8)?.try_into().ok()?;
                    Value::Float(f64::from_bits(u64::from_le_bytes(b)))
                };
                out.push(Record::Point { id, ts, value });
            }
            REC_DELETE => {
                let n = c.varint()? as usize;
                let tsuid = c.bytes(n)?.to_vec();
                let first_hour = u32::try_from(c.varint()?).ok()?;
                let last_hour = u32::try_from(c.varint()?).ok()?;
                out.push(Record::Delete {
                    tsuid,
                    first_hour,
                    last_hour,
                });
            }
            _ => return None,
        }
    }
    Some(())
}

/// Decodes the frame at the start of `bytes` onto `out` and returns its
/// length, header included. `None`, with `out` left as it was, if the
/// frame is truncated, too long, fails its CRC or holds an undecodable
/// record: a frame is replayed whole or not at all.
pub(super) fn decode_frame(bytes: &[u8], out: &mut Vec<Record>) -> Option<usize> {
    let header = bytes.get(..FRAME_HEADER)?;
    let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
    if len > MAX_FRAME {
        return None;
    }
    let payload = bytes.get(FRAME_HEADER..FRAME_HEADER + len)?;
    if crc32fast::hash(payload) != crc {
        return None;
    }
    let before = out.len();
    if decode_payload(payload, out).is_none() {
        out.truncate(before);
        return None;
    }
    Some(FRAME_HEADER + len)
}

/// Decodes frames from the start of `bytes` until one is missing or bad
/// (a crash can only tear the tail, so nothing after it is trusted).
/// Returns how many bytes were decoded.
pub(super) fn decode_frames(bytes: &[u8], out: &mut Vec<Record>) -> usize {
    let mut i = 0;
    while let Some(n) = decode_frame(&bytes[i..], out) {
        i += n;
    }
    i
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
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

    fn encode(r: &Record, out: &mut Vec<u8>) {
        match r {
            Record::Series { id, metric, tags } => encode_series(out, *id, metric, tags),
            Record::Point { id, ts, value } => encode_point(out, *id, *ts, *value),
            Record::Delete {
                tsuid,
                first_hour,
                last_hour,
            } => encode_delete(out, tsuid, *first_hour, *last_hour),
        }
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
        assert_eq!(decode_frames(OLD_SEGMENT, &mut got), OLD_SEGMENT.len());
        assert_eq!(got, old_segment_frames().concat());
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
            (any::<u32>(), ts, value).prop_map(|(id, ts, value)| Record::Point { id, ts, value }),
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

    proptest! {
        #[test]
        fn records_round_trip(frames in frames()) {
            let bytes = encode_frames(&frames);
            let mut got = Vec::new();
            prop_assert_eq!(decode_frames(&bytes, &mut got), bytes.len());
            prop_assert_eq!(got, frames.concat());
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
            prop_assert_eq!(decode_frames(&bytes, &mut got), good.len());
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
            prop_assert_eq!(decode_frames(&bytes, &mut got), good.len());
            prop_assert_eq!(got, frames[..frames.len() - 1].concat());
        }
    }
}
