//! WAL records: the series definitions, points, histogram points and
//! deletes that appenders log, encoded and decoded one by one; pure
//! functions over bytes, the bottom of the log (docs/format/wal.md). The
//! frames that carry them (length, CRC, compression) are in
//! [`super::frame`], the columnar body of a batch in [`super::columns`].

use crate::codec::varint;
use crate::model::point::{Timestamp, Value};

/// The first byte of every record, and of every payload: payloads whose
/// first record is `REC_ZSTD`, `REC_COLUMNS` or `REC_PACKED` hold a
/// compressed batch (read by the frame layer), so the tags share one
/// byte space.
pub(super) const REC_SERIES: u8 = 1;
pub(super) const REC_INT: u8 = 2;
pub(super) const REC_FLOAT: u8 = 3;
pub(super) const REC_DELETE: u8 = 4;
/// The rest of the payload is the records of several appends, compressed
/// with zstd: only ever a payload's first and only record.
pub(super) const REC_ZSTD: u8 = 5;
/// A histogram point: its stored cell value (codec id and bytes).
pub(super) const REC_HISTOGRAM: u8 = 6;
/// The rest of the payload is a batch of series definitions and points
/// laid out by series (the `columns` module) and compressed with zstd: like
/// `REC_ZSTD`, only ever a payload's first and only record. Written by
/// format 5, read by this build.
pub(super) const REC_COLUMNS: u8 = 7;
/// As `REC_COLUMNS`, with the values bit-packed (format 6): what the
/// writer makes of a batch of definitions and points.
pub(super) const REC_PACKED: u8 = 8;

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
    /// A point whose timestamp no row can hold (written by a build that
    /// accepted it: replay skips and counts it rather than refusing to
    /// open).
    UnstorablePoint { id: u32, raw_ts: u64, value: Value },
    /// A histogram point (`/api/histogram`, telnet `histogram`): the
    /// time as sent (checked at replay) and the cell value as stored.
    Histogram {
        id: u32,
        raw_ts: u64,
        value: Vec<u8>,
    },
    /// Hourly rows of a series (by TSUID bytes) deleted by a query.
    Delete {
        tsuid: Vec<u8>,
        first_hour: u32,
        last_hour: u32,
    },
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    varint::put(s.len() as u64, out);
    out.extend_from_slice(s.as_bytes());
}

/// Generic over the tags' source so the writer can encode a
/// [`crate::write::Series`] without copying its names.
pub(super) fn encode_series<K: AsRef<str>, V: AsRef<str>>(
    out: &mut Vec<u8>,
    id: u32,
    metric: &str,
    tags: impl ExactSizeIterator<Item = (K, V)>,
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

pub(super) fn encode_histogram(out: &mut Vec<u8>, id: u32, ts: Timestamp, value: &[u8]) {
    out.push(REC_HISTOGRAM);
    varint::put(id as u64, out);
    varint::put(ts.raw(), out);
    varint::put(value.len() as u64, out);
    out.extend_from_slice(value);
}

pub(super) fn encode_delete(out: &mut Vec<u8>, tsuid: &[u8], first_hour: u32, last_hour: u32) {
    out.push(REC_DELETE);
    varint::put(tsuid.len() as u64, out);
    out.extend_from_slice(tsuid);
    varint::put(first_hour as u64, out);
    varint::put(last_hour as u64, out);
}

/// Reads a payload byte by byte; shared with the frame layer, which
/// reads a compressed batch's length after its tag.
pub(super) struct Cursor<'a> {
    pub(super) b: &'a [u8],
    pub(super) i: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn byte(&mut self) -> Option<u8> {
        let v = *self.b.get(self.i)?;
        self.i += 1;
        Some(v)
    }

    pub(super) fn varint(&mut self) -> Option<u64> {
        varint::get(self.b, &mut self.i)
    }

    pub(super) fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.i..self.i.checked_add(n)?)?;
        self.i += n;
        Some(s)
    }

    pub(super) fn str(&mut self) -> Option<&'a str> {
        let n = self.varint()? as usize;
        std::str::from_utf8(self.bytes(n)?).ok()
    }
}

/// A point record as logged: its time as sent, checked here.
pub(super) fn point_record(id: u32, raw_ts: u64, value: Value) -> Record {
    // The record is whole: only its time is beyond what a row holds. It
    // is kept (as such) so that one such point costs itself, not its
    // frame.
    match i64::try_from(raw_ts).map(Timestamp::from_raw) {
        Ok(Ok(ts)) => Record::Point { id, ts, value },
        _ => Record::UnstorablePoint { id, raw_ts, value },
    }
}

/// One record of a payload, borrowed from its bytes.
pub(super) enum RecordRef<'a> {
    /// A series definition; `bytes` is the whole record as encoded.
    Series {
        bytes: &'a [u8],
        id: u32,
        metric: &'a str,
        tags: Vec<(&'a str, &'a str)>,
    },
    /// A point, with its time as logged (checked by [`point_record`]).
    Point { id: u32, raw_ts: u64, value: Value },
    Histogram {
        id: u32,
        raw_ts: u64,
        value: &'a [u8],
    },
    Delete {
        tsuid: &'a [u8],
        first_hour: u32,
        last_hour: u32,
    },
}

impl RecordRef<'_> {
    fn to_record(&self) -> Record {
        match self {
            RecordRef::Series {
                id, metric, tags, ..
            } => Record::Series {
                id: *id,
                metric: (*metric).to_string(),
                tags: tags
                    .iter()
                    .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                    .collect(),
            },
            RecordRef::Point { id, raw_ts, value } => point_record(*id, *raw_ts, *value),
            RecordRef::Histogram { id, raw_ts, value } => Record::Histogram {
                id: *id,
                raw_ts: *raw_ts,
                value: value.to_vec(),
            },
            RecordRef::Delete {
                tsuid,
                first_hour,
                last_hour,
            } => Record::Delete {
                tsuid: tsuid.to_vec(),
                first_hour: *first_hour,
                last_hour: *last_hour,
            },
        }
    }
}

/// Hands each record of `payload` to `f`, in order, without copying
/// it; `None` once a byte is out of place (after the records before it).
/// The one reader of plain records: [`decode_records`] and the columnar
/// layout of a batch (`super::columns`) both read through it.
pub(super) fn walk_records<'a>(payload: &'a [u8], mut f: impl FnMut(RecordRef<'a>)) -> Option<()> {
    let mut c = Cursor { b: payload, i: 0 };
    while c.i < payload.len() {
        let start = c.i;
        match c.byte()? {
            REC_SERIES => {
                let id = c.varint()? as u32;
                let metric = c.str()?;
                let n = c.varint()? as usize;
                // A corrupt count must not reserve gigabytes.
                let mut tags = Vec::with_capacity(n.min(64));
                for _ in 0..n {
                    tags.push((c.str()?, c.str()?));
                }
                f(RecordRef::Series {
                    bytes: &payload[start..c.i],
                    id,
                    metric,
                    tags,
                });
            }
            kind @ (REC_INT | REC_FLOAT) => {
                let id = c.varint()? as u32;
                let raw_ts = c.varint()?;
                let value = if kind == REC_INT {
                    Value::Int(varint::unzigzag(c.varint()?))
                } else {
                    let b: [u8; 8] = c.bytes(8)?.try_into().ok()?;
                    Value::Float(f64::from_bits(u64::from_le_bytes(b)))
                };
                f(RecordRef::Point { id, raw_ts, value });
            }
            REC_HISTOGRAM => {
                let id = c.varint()? as u32;
                let raw_ts = c.varint()?;
                let n = c.varint()? as usize;
                let value = c.bytes(n)?;
                f(RecordRef::Histogram { id, raw_ts, value });
            }
            REC_DELETE => {
                let n = c.varint()? as usize;
                let tsuid = c.bytes(n)?;
                let first_hour = u32::try_from(c.varint()?).ok()?;
                let last_hour = u32::try_from(c.varint()?).ok()?;
                f(RecordRef::Delete {
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

pub(super) fn decode_records(payload: &[u8], out: &mut Vec<Record>) -> Option<()> {
    walk_records(payload, |r| out.push(r.to_record()))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Encodes a record as the writer (or, for a time no row can hold,
    /// an older build) logged it.
    pub(in crate::write::wal) fn encode(r: &Record, out: &mut Vec<u8>) {
        match r {
            Record::Series { id, metric, tags } => {
                encode_series(out, *id, metric, tags.iter().map(|(k, v)| (k, v)))
            }
            Record::Point { id, ts, value } => encode_point(out, *id, *ts, *value),
            // As an older build wrote it: a point record with any raw time.
            Record::UnstorablePoint { id, raw_ts, value } => {
                out.push(if matches!(value, Value::Int(_)) {
                    REC_INT
                } else {
                    REC_FLOAT
                });
                varint::put(*id as u64, out);
                varint::put(*raw_ts, out);
                match value {
                    Value::Int(i) => varint::put(varint::zigzag(*i), out),
                    Value::Float(f) => out.extend_from_slice(&f.to_bits().to_le_bytes()),
                }
            }
            Record::Histogram { id, raw_ts, value } => {
                out.push(REC_HISTOGRAM);
                varint::put(*id as u64, out);
                varint::put(*raw_ts, out);
                varint::put(value.len() as u64, out);
                out.extend_from_slice(value);
            }
            Record::Delete {
                tsuid,
                first_hour,
                last_hour,
            } => encode_delete(out, tsuid, *first_hour, *last_hour),
        }
    }

    #[test]
    fn histogram_records_round_trip() {
        let mut out = Vec::new();
        encode_histogram(
            &mut out,
            3,
            Timestamp::Millis(1356998400250),
            &[42, 0, 0, 0, 0],
        );
        assert_eq!(out[0], REC_HISTOGRAM);
        let mut recs = Vec::new();
        decode_records(&out, &mut recs).unwrap();
        assert_eq!(
            recs,
            vec![Record::Histogram {
                id: 3,
                raw_ts: 1356998400250,
                value: vec![42, 0, 0, 0, 0],
            }]
        );
        // Cut anywhere, the record is undecodable (its frame is damaged).
        for n in 1..out.len() {
            assert!(decode_records(&out[..n], &mut Vec::new()).is_none(), "{n}");
        }
    }
}
