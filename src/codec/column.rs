//! Data-table columns of several points: compacted and append columns,
//! and single-point cells with OpenTSDB's read-side fixes, built from the
//! primitives of [`super::qualifier`]. Formats:
//! docs/format/compacted-column.md, docs/format/append-column.md.

use thiserror::Error;

use super::compressed::CompressedError;
use super::qualifier::{
    APPEND_PREFIX, FLAG_FLOAT, LENGTH_MASK, QualifierError, StoredPoint, decode_value, qualifier_at,
};
use crate::model::point::Value;
use crate::model::uid::hex_upper;

/// Trailing byte of a multi-point compacted column.
pub const META_SECONDS_ONLY: u8 = 0x00;
/// ... and of one mixing second and millisecond points.
pub const META_MIXED: u8 = 0x01;

pub const APPEND_QUALIFIER: [u8; 3] = [APPEND_PREFIX, 0, 0];

#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum ColumnError {
    /// A point's qualifier or value on its own is wrong.
    #[error(transparent)]
    Qualifier(#[from] QualifierError),
    #[error(
        "Corrupted floating point value: {} flags=0x{flags:x} -- first 4 bytes are expected to be zeros.",
        crate::model::uid::java_byte_array(value)
    )]
    CorruptedFloat { value: Vec<u8>, flags: u8 },
    #[error(
        "Corrupted value: couldn't break down into individual values (consumed {consumed} bytes, but was expecting to consume {expected}): qualifier={}, value={}",
        hex_upper(qualifier),
        hex_upper(value)
    )]
    CorruptedCompacted {
        qualifier: Vec<u8>,
        value: Vec<u8>,
        consumed: usize,
        expected: usize,
    },
    #[error("Unknown qualifier, must be 2, 3, 5 or an even number of bytes: {}", hex_upper(.0))]
    UnknownQualifier(Vec<u8>),
    #[error("{0}")]
    Duplicate(String),
    #[error(transparent)]
    Compressed(#[from] CompressedError),
}

/// A stand-alone (single point) cell, with OpenTSDB's read-side fixes
/// (`Internal.extractDataPoints`): a 4-byte float written on 8 bytes with
/// leading zeros is read from its last 4 bytes, and the length bits of the
/// flags are taken from the actual value length.
pub fn decode_single(qualifier: &[u8], value: &[u8]) -> Result<StoredPoint, ColumnError> {
    let (_, offset_ms, millis, mut flags) =
        qualifier_at(qualifier).ok_or_else(|| ColumnError::UnknownQualifier(qualifier.to_vec()))?;
    let mut value = value;
    if flags & FLAG_FLOAT != 0 && flags & LENGTH_MASK == 0x3 && value.len() == 8 {
        if value[..4] != [0, 0, 0, 0] {
            return Err(ColumnError::CorruptedFloat {
                value: value.to_vec(),
                flags,
            });
        }
        value = &value[4..];
    }
    if !matches!(value.len(), 1 | 2 | 4 | 8) {
        return Err(QualifierError::BadValueLength {
            flags,
            len: value.len(),
        }
        .into());
    }
    flags = (flags & !LENGTH_MASK) | (value.len() as u8 - 1);
    Ok(StoredPoint {
        offset_ms,
        millis,
        flags,
        value: decode_value(flags, value)?,
    })
}

/// Walks concatenated `qualifier` / `value` pairs: the shared body of
/// compacted columns. Returns the points and the number of value bytes used.
fn walk(qualifier: &[u8], value: &[u8], out: &mut Vec<StoredPoint>) -> Option<usize> {
    let (mut qi, mut vi) = (0, 0);
    while qi < qualifier.len() {
        let (qlen, offset_ms, millis, flags) = qualifier_at(&qualifier[qi..])?;
        let vlen = (flags & LENGTH_MASK) as usize + 1;
        let bytes = value.get(vi..vi + vlen)?;
        out.push(StoredPoint {
            offset_ms,
            millis,
            flags,
            value: decode_value(flags, bytes).ok()?,
        });
        qi += qlen;
        vi += vlen;
    }
    Some(vi)
}

/// Decodes a compacted column (several points, trailing meta byte).
pub fn decode_compacted(
    qualifier: &[u8],
    value: &[u8],
    out: &mut Vec<StoredPoint>,
) -> Result<(), ColumnError> {
    let start = out.len();
    let corrupted = |consumed| ColumnError::CorruptedCompacted {
        qualifier: qualifier.to_vec(),
        value: value.to_vec(),
        consumed,
        expected: value.len().saturating_sub(1),
    };
    match walk(qualifier, value, out) {
        Some(consumed) if consumed + 1 == value.len() => Ok(()),
        other => {
            out.truncate(start);
            Err(corrupted(other.unwrap_or(0)))
        }
    }
}

/// Streams the points of a well-formed compacted column whose offsets are
/// strictly increasing to `f(offset_ms, value)`, without allocating: the
/// query path's decoder. Returns false (having possibly called `f` for a
/// prefix) if the column is malformed or not strictly sorted; the caller
/// then falls back to the general row decoder.
pub fn for_each_compacted(qualifier: &[u8], value: &[u8], mut f: impl FnMut(u32, Value)) -> bool {
    let (mut qi, mut vi) = (0usize, 0usize);
    let mut last: Option<u32> = None;
    while qi < qualifier.len() {
        let Some((qlen, offset_ms, _, flags)) = qualifier_at(&qualifier[qi..]) else {
            return false;
        };
        let vlen = (flags & LENGTH_MASK) as usize + 1;
        let Some(bytes) = value.get(vi..vi + vlen) else {
            return false;
        };
        if last.is_some_and(|l| offset_ms <= l) {
            return false;
        }
        last = Some(offset_ms);
        let v = if flags & FLAG_FLOAT == 0 {
            let mut be = [0u8; 8];
            be[8 - vlen..].copy_from_slice(bytes);
            // Sign-extend from the value's width.
            let shift = 64 - 8 * vlen as u32;
            Value::Int(((i64::from_be_bytes(be)) << shift) >> shift)
        } else {
            match decode_value(flags, bytes) {
                Ok(v) => v,
                Err(_) => return false,
            }
        };
        f(offset_ms, v);
        qi += qlen;
        vi += vlen;
    }
    vi + 1 == value.len()
}

/// Builds one compacted column from points sorted by offset, without
/// duplicates. A single point is written as a plain cell (no meta byte),
/// as OpenTSDB does.
pub fn encode_compacted(points: &[StoredPoint]) -> (Vec<u8>, Vec<u8>) {
    let mut qualifier = Vec::with_capacity(points.len() * 2);
    let mut value = Vec::with_capacity(points.len() * 2 + 1);
    let (mut seconds, mut millis) = (false, false);
    for p in points {
        p.write_qualifier(&mut qualifier);
        p.write_value(&mut value);
        seconds |= !p.millis;
        millis |= p.millis;
    }
    if points.len() > 1 {
        value.push(if seconds && millis {
            META_MIXED
        } else {
            META_SECONDS_ONLY
        });
    }
    (qualifier, value)
}

/// Decodes an append column value: `<qualifier><value>` pairs in the order
/// they were appended (no meta byte).
pub fn decode_append(value: &[u8], out: &mut Vec<StoredPoint>) -> Result<(), ColumnError> {
    let mut i = 0;
    while i < value.len() {
        let bad = || ColumnError::CorruptedCompacted {
            qualifier: APPEND_QUALIFIER.to_vec(),
            value: value.to_vec(),
            consumed: i,
            expected: value.len(),
        };
        let (qlen, offset_ms, millis, flags) = qualifier_at(&value[i..]).ok_or_else(bad)?;
        let vlen = (flags & LENGTH_MASK) as usize + 1;
        let bytes = value.get(i + qlen..i + qlen + vlen).ok_or_else(bad)?;
        out.push(StoredPoint {
            offset_ms,
            millis,
            flags,
            value: decode_value(flags, bytes)?,
        });
        i += qlen + vlen;
    }
    Ok(())
}

/// Appends one point to an append column value.
pub fn encode_append(point: &StoredPoint, out: &mut Vec<u8>) {
    point.write_qualifier(out);
    point.write_value(out);
}

/// An append column (`05 00 00`) holding `points` in the given order.
pub fn encode_append_column(points: &[StoredPoint]) -> (Vec<u8>, Vec<u8>) {
    let mut value = Vec::with_capacity(points.len() * 4);
    for p in points {
        encode_append(p, &mut value);
    }
    (APPEND_QUALIFIER.to_vec(), value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::qualifier::{object_offset_ms, point_qualifier};
    use crate::model::point::{STALE_MARKER_BITS, Timestamp};
    use crate::model::uid::{hex_upper, parse_hex};
    use proptest::prelude::*;

    const BASE: u32 = 1356998400;

    fn s(n: u32) -> Timestamp {
        Timestamp::Seconds(n)
    }

    #[test]
    fn test_internal_vectors() {
        // getOffsetFromQualifier({00,37}) = 3000 ms
        let p = decode_single(&[0x00, 0x37], &[0, 0, 0, 0, 0, 0, 0, 1]).unwrap();
        assert_eq!(p.offset_ms, 3000);
        assert_eq!(p.timestamp_ms(BASE), 1356998403000);
        // fixQualifierFlags: 00 27 with a 4-byte value reads as 00 23.
        let p = decode_single(&[0x00, 0x27], &[0, 0, 0, 5]).unwrap();
        assert_eq!(p.qualifier(), vec![0x00, 0x23]);
        assert_eq!(p.value, Value::Int(5));
        // fixFloatingPointValue: 4-byte float flags with 8 bytes, zeros first.
        let p = decode_single(&[0x00, 0x0B], &parse_hex("00000000422A0000").unwrap()).unwrap();
        assert_eq!(p.value, Value::Float(42.5));
        assert_eq!(p.flags, 0x0B);
        assert!(matches!(
            decode_single(&[0x00, 0x0B], &parse_hex("01000000422A0000").unwrap()),
            Err(ColumnError::CorruptedFloat { .. })
        ));
        // Value length from flags: {0,0x4B} = 4, {0,0x1F} = 8, {0,0} = 1, {0,0x0F} = 8.
        for (q, len) in [(0x4Bu8, 4usize), (0x1F, 8), (0x00, 1), (0x0F, 8)] {
            assert_eq!((q & LENGTH_MASK) as usize + 1, len);
        }
        assert!(decode_single(&[0x00, 0x00], &[1, 2, 3]).is_err());
        assert!(decode_single(&[0x00], &[1]).is_err());
    }

    #[test]
    fn compaction_queue_two_cell_row() {
        let a = decode_single(&[0x00, 0x07], &[0, 0, 0, 0, 0, 0, 0, 4]).unwrap();
        let b = decode_single(&[0x00, 0x17], &[0, 0, 0, 0, 0, 0, 0, 5]).unwrap();
        // Read-side fixes keep the 8-byte width the cells were written with.
        let (q, v) = encode_compacted(&[a, b]);
        assert_eq!(hex_upper(&q), "00070017");
        assert_eq!(hex_upper(&v), "0000000000000004000000000000000500");
        let mut out = Vec::new();
        decode_compacted(&q, &v, &mut out).unwrap();
        assert_eq!(out, vec![a, b]);
        // Mixed second/ms rows end in 0x01.
        let (p1, _) = StoredPoint::new(s(BASE + 1), BASE, Value::Int(1)).unwrap();
        let (p2, _) = StoredPoint::new(
            Timestamp::Millis(BASE as u64 * 1000 + 1500),
            BASE,
            Value::Int(2),
        )
        .unwrap();
        let (_, v) = encode_compacted(&[p1, p2]);
        assert_eq!(*v.last().unwrap(), META_MIXED);
        // One point: a plain cell without meta byte.
        let (q, v) = encode_compacted(&[p1]);
        assert_eq!((q.len(), v.len()), (2, 1));
    }

    #[test]
    fn corrupt_compacted_is_an_error() {
        let mut out = Vec::new();
        // Value too short for the flags.
        assert!(decode_compacted(&[0, 0x07, 0, 0x17], &[0; 9], &mut out).is_err());
        // Missing meta byte.
        assert!(decode_compacted(&[0, 0x00, 0, 0x10], &[1, 2], &mut out).is_err());
        // Qualifier truncated.
        assert!(decode_compacted(&[0, 0x00, 0xF0], &[1, 2, 0], &mut out).is_err());
        assert!(out.is_empty());
    }

    #[test]
    fn append_column() {
        let (p1, _) = StoredPoint::new(s(BASE + 10), BASE, Value::Int(7)).unwrap();
        let (p2, _) = StoredPoint::new(
            Timestamp::Millis(BASE as u64 * 1000 + 5),
            BASE,
            Value::Float(0.1),
        )
        .unwrap();
        let mut v = Vec::new();
        encode_append(&p1, &mut v);
        encode_append(&p2, &mut v);
        let mut out = Vec::new();
        decode_append(&v, &mut out).unwrap();
        assert_eq!(out, vec![p1, p2]);
        assert!(decode_append(&v[..v.len() - 1], &mut out).is_err());
    }

    fn arb_value() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<i64>().prop_map(Value::Int),
            prop_oneof![
                Just(0i64),
                Just(127),
                Just(128),
                Just(-129),
                Just(32768),
                Just(i32::MAX as i64 + 1),
                Just(i64::MIN)
            ]
            .prop_map(Value::Int),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::Float),
            any::<f32>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| Value::Float(f as f64)),
            Just(Value::Float(f64::from_bits(STALE_MARKER_BITS))),
        ]
    }

    /// A point as comparable bits (a NaN is not equal to itself).
    fn bits(p: &StoredPoint) -> (u32, bool, u8, bool, u64) {
        let (float, v) = match p.value {
            Value::Int(i) => (false, i as u64),
            Value::Float(f) => (true, f.to_bits()),
        };
        (p.offset_ms, p.millis, p.flags, float, v)
    }

    /// A stale marker in a single, a compacted and an append column comes
    /// back with its bits.
    #[test]
    fn stale_markers_keep_their_bits_in_every_column() {
        let marker = Value::Float(f64::from_bits(STALE_MARKER_BITS));
        let pts: Vec<StoredPoint> = [(s(BASE + 1), Value::Int(3)), (s(BASE + 2), marker)]
            .into_iter()
            .map(|(ts, v)| StoredPoint::new(ts, BASE, v).unwrap().0)
            .collect();
        let single = decode_single(&pts[1].qualifier(), &pts[1].value_bytes()).unwrap();
        assert!(single.value.is_stale_marker());
        let (q, v) = encode_compacted(&pts);
        let mut out = Vec::new();
        decode_compacted(&q, &v, &mut out).unwrap();
        assert_eq!(
            out.iter().map(bits).collect::<Vec<_>>(),
            pts.iter().map(bits).collect::<Vec<_>>()
        );
        let (_, v) = encode_append_column(&pts);
        let mut out = Vec::new();
        decode_append(&v, &mut out).unwrap();
        assert_eq!(
            out.iter().map(bits).collect::<Vec<_>>(),
            pts.iter().map(bits).collect::<Vec<_>>()
        );
    }

    proptest! {
        #[test]
        fn point_round_trip(offset in 0u32..3_600_000, millis in any::<bool>(), value in arb_value()) {
            let ts = if millis { Timestamp::Millis(BASE as u64 * 1000 + offset as u64) } else { Timestamp::Seconds(BASE + offset / 1000) };
            let (p, enc) = StoredPoint::new(ts, BASE, value).unwrap();
            let q = point_qualifier(ts, BASE, enc.flags).unwrap();
            prop_assert_eq!(&p.qualifier(), &q);
            prop_assert_eq!(p.value_bytes(), enc.as_bytes().to_vec());
            let back = decode_single(&q, enc.as_bytes()).unwrap();
            prop_assert_eq!(bits(&back), bits(&p));
            prop_assert_eq!(back.timestamp(BASE), ts);
            match (value, back.value) {
                (Value::Int(a), Value::Int(b)) => prop_assert_eq!(a, b),
                (Value::Float(a), Value::Float(b)) => prop_assert_eq!(a.to_bits(), b.to_bits()),
                _ => prop_assert!(false, "type changed"),
            }
        }

        #[test]
        fn compacted_round_trip(points in proptest::collection::btree_map(0u32..3_600_000, (any::<bool>(), arb_value()), 1..50)) {
            let pts: Vec<StoredPoint> = points.into_iter().map(|(off, (ms, v))| {
                let ts = if ms { Timestamp::Millis(BASE as u64 * 1000 + off as u64) } else { Timestamp::Seconds(BASE + off / 1000) };
                StoredPoint::new(ts, BASE, v).unwrap().0
            }).collect();
            let mut sorted = pts.clone();
            sorted.sort_by_key(|p| p.offset_ms);
            sorted.dedup_by_key(|p| p.offset_ms);
            let (q, v) = encode_compacted(&sorted);
            let mut out = Vec::new();
            if sorted.len() == 1 {
                out.push(decode_single(&q, &v).unwrap());
            } else {
                decode_compacted(&q, &v, &mut out).unwrap();
            }
            prop_assert_eq!(out.iter().map(bits).collect::<Vec<_>>(), sorted.iter().map(bits).collect::<Vec<_>>());
        }

        #[test]
        fn decoders_never_panic(q in proptest::collection::vec(any::<u8>(), 0..12), v in proptest::collection::vec(any::<u8>(), 0..20)) {
            let mut out = Vec::new();
            let _ = decode_single(&q, &v);
            let _ = decode_compacted(&q, &v, &mut out);
            let _ = decode_append(&v, &mut out);
            let _ = object_offset_ms(&q);
        }
    }
}
