//! Qualifiers and values: the primitives every data column is built
//! from (a point's qualifier and flags, its value bytes, object
//! qualifiers) and the one rule telling what a cell holds from its
//! qualifier ([`CellKind::of`]). Format: docs/format/qualifier-and-value.md.

use thiserror::Error;

use crate::model::point::{STALE_MARKER_BITS, Timestamp, Value};
use crate::model::row_span::{ROW_SPAN_MS, ROW_SPAN_SECS};

/// Flag bit: the value is an IEEE-754 float.
pub const FLAG_FLOAT: u8 = 0x8;
/// Low three bits: value length − 1.
pub const LENGTH_MASK: u8 = 0x7;
pub const FLAGS_MASK: u8 = 0xF;
/// Marks a 4-byte millisecond qualifier (high nibble of its first byte).
pub const MS_PREFIX: u8 = 0xF0;
/// First byte of annotation qualifiers.
pub const ANNOTATION_PREFIX: u8 = 0x01;
/// First byte of the append column qualifier (`05 00 00`).
pub const APPEND_PREFIX: u8 = 0x05;
/// First byte of histogram qualifiers (OpenTSDB 2.4).
pub const HISTOGRAM_PREFIX: u8 = 0x06;
/// First byte of rtsdb's compressed column qualifier (`0C 00 00`).
pub const COMPRESSED_PREFIX: u8 = 0x0C;

#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum QualifierError {
    #[error("timestamp {ts} is not inside the hour starting at {base_time}")]
    OutsideRow { ts: u64, base_time: u32 },
    #[error("value length {len} does not match flags 0x{flags:X}")]
    BadValueLength { flags: u8, len: usize },
}

/// What a data-table cell holds, from its qualifier alone. OpenTSDB 2.4.1
/// spells this rule out in `Fsck` (data points have even qualifiers of 2
/// bytes or more, objects 3 or 5 bytes told apart by their first byte);
/// its readers agree on every qualifier it writes. Every reader here
/// (row decoding, the query fast path, `fsck`, `scan`) asks this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellKind {
    /// One point: a 2-byte second or a 4-byte millisecond qualifier.
    Single,
    /// Several points: any other even-length qualifier.
    Compacted,
    /// OpenTSDB's append column (`05 00 00`).
    Append,
    /// rtsdb's compressed column (`0C 00 00`).
    Compressed,
    /// An annotation: `01` and its offset.
    Annotation,
    /// An OpenTSDB 2.4 histogram point: `06` and its offset; kept, not read.
    Histogram,
    /// A 3- or 5-byte object of unknown prefix, Fsck's "object possibly
    /// from a future version of OpenTSDB"; kept, not read.
    Object,
    /// Shorter than 2 bytes: Fsck's "Invalid qualifier".
    TooShort,
    /// Odd, but neither 3 nor 5 bytes: Fsck's "Unknown qualifier".
    Unknown,
}

impl CellKind {
    #[inline]
    pub fn of(qualifier: &[u8]) -> CellKind {
        match qualifier.len() {
            0 | 1 => CellKind::TooShort,
            2 => CellKind::Single,
            4 if is_ms_qualifier(qualifier[0]) => CellKind::Single,
            n if n % 2 == 0 => CellKind::Compacted,
            3 | 5 => match qualifier[0] {
                ANNOTATION_PREFIX => CellKind::Annotation,
                APPEND_PREFIX => CellKind::Append,
                COMPRESSED_PREFIX => CellKind::Compressed,
                HISTOGRAM_PREFIX => CellKind::Histogram,
                _ => CellKind::Object,
            },
            _ => CellKind::Unknown,
        }
    }

    /// Does a cell of this kind hold data points?
    #[inline]
    pub fn holds_points(self) -> bool {
        matches!(
            self,
            CellKind::Single | CellKind::Compacted | CellKind::Append | CellKind::Compressed
        )
    }
}

const MAX_SECOND_OFFSET: u32 = ROW_SPAN_SECS - 1;
const MAX_MS_OFFSET: u32 = ROW_SPAN_MS as u32 - 1;

/// How a value is written: the flags nibble and its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodedValue {
    pub flags: u8,
    bytes: [u8; 8],
}

impl EncodedValue {
    pub fn len(&self) -> usize {
        (self.flags & LENGTH_MASK) as usize + 1
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[8 - self.len()..]
    }
}

/// Integers in the smallest of 1/2/4/8 bytes; floats on 4 bytes when the
/// value is exactly representable as f32, else 8 (OpenTSDB 2.4). NaNs go
/// on 4 bytes as OpenTSDB writes them, which keeps no payload, except
/// Prometheus' stale marker, which goes on 8 so that its bits survive
/// (store format 9).
#[inline]
pub fn encode_value(value: Value) -> EncodedValue {
    match value {
        Value::Int(v) => {
            let len: u8 = if i8::try_from(v).is_ok() {
                1
            } else if i16::try_from(v).is_ok() {
                2
            } else if i32::try_from(v).is_ok() {
                4
            } else {
                8
            };
            EncodedValue {
                flags: len - 1,
                bytes: v.to_be_bytes(),
            }
        }
        Value::Float(f) => {
            let single = f as f32;
            if single as f64 == f || (f.is_nan() && f.to_bits() != STALE_MARKER_BITS) {
                let mut bytes = [0u8; 8];
                bytes[4..].copy_from_slice(&single.to_bits().to_be_bytes());
                EncodedValue {
                    flags: FLAG_FLOAT | 0x3,
                    bytes,
                }
            } else {
                EncodedValue {
                    flags: FLAG_FLOAT | 0x7,
                    bytes: f.to_bits().to_be_bytes(),
                }
            }
        }
    }
}

/// Decodes a value whose length already matches its flags.
#[inline]
pub fn decode_value(flags: u8, bytes: &[u8]) -> Result<Value, QualifierError> {
    let bad = || QualifierError::BadValueLength {
        flags,
        len: bytes.len(),
    };
    if flags & FLAG_FLOAT != 0 {
        match bytes.len() {
            4 => Ok(Value::Float(f32::from_bits(u32::from_be_bytes(
                bytes.try_into().map_err(|_| bad())?,
            )) as f64)),
            8 => Ok(Value::Float(f64::from_bits(u64::from_be_bytes(
                bytes.try_into().map_err(|_| bad())?,
            )))),
            _ => Err(bad()),
        }
    } else {
        let v = match bytes.len() {
            1 => bytes[0] as i8 as i64,
            2 => i16::from_be_bytes([bytes[0], bytes[1]]) as i64,
            4 => i32::from_be_bytes(bytes.try_into().map_err(|_| bad())?) as i64,
            8 => i64::from_be_bytes(bytes.try_into().map_err(|_| bad())?),
            _ => return Err(bad()),
        };
        Ok(Value::Int(v))
    }
}

/// Is this qualifier (or the qualifier at the start of a compacted one) a
/// 4-byte millisecond qualifier?
#[inline]
pub fn is_ms_qualifier(first_byte: u8) -> bool {
    first_byte & MS_PREFIX == MS_PREFIX
}

/// Qualifier of one data point in the row starting at `base_time`.
#[inline]
pub fn point_qualifier(
    ts: Timestamp,
    base_time: u32,
    flags: u8,
) -> Result<Vec<u8>, QualifierError> {
    let delta = row_offset(ts, base_time)?;
    Ok(match ts {
        Timestamp::Seconds(_) => ((delta << 4) as u16 | flags as u16).to_be_bytes().to_vec(),
        Timestamp::Millis(_) => (0xF000_0000u32 | (delta << 6) | flags as u32)
            .to_be_bytes()
            .to_vec(),
    })
}

/// `ts`'s offset from the row starting at `base_time`, in the unit it was
/// written in (seconds or milliseconds), checked to lie inside the hour.
#[inline]
pub(crate) fn row_offset(ts: Timestamp, base_time: u32) -> Result<u32, QualifierError> {
    let outside = || QualifierError::OutsideRow {
        ts: ts.raw(),
        base_time,
    };
    match ts {
        Timestamp::Seconds(s) => s
            .checked_sub(base_time)
            .filter(|d| *d <= MAX_SECOND_OFFSET)
            .ok_or_else(outside),
        Timestamp::Millis(ms) => ms
            .checked_sub(base_time as u64 * 1000)
            .filter(|d| *d <= MAX_MS_OFFSET as u64)
            .map(|d| d as u32)
            .ok_or_else(outside),
    }
}

/// One data point read back from a row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StoredPoint {
    /// Milliseconds from the row's base time.
    pub offset_ms: u32,
    /// Written with a millisecond qualifier.
    pub millis: bool,
    /// Flags after OpenTSDB's read-side fixes (length matches the value).
    pub flags: u8,
    pub value: Value,
}

impl StoredPoint {
    #[inline]
    pub fn timestamp_ms(&self, base_time: u32) -> u64 {
        base_time as u64 * 1000 + self.offset_ms as u64
    }

    /// The point's time as it was written (seconds or milliseconds).
    #[inline]
    pub fn timestamp(&self, base_time: u32) -> Timestamp {
        if self.millis {
            Timestamp::Millis(self.timestamp_ms(base_time))
        } else {
            Timestamp::Seconds(base_time + self.offset_ms / 1000)
        }
    }

    pub fn qualifier(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4);
        self.write_qualifier(&mut out);
        out
    }

    /// Appends the qualifier without allocating (compaction hot path).
    #[inline]
    pub fn write_qualifier(&self, out: &mut Vec<u8>) {
        if self.millis {
            out.extend_from_slice(
                &(0xF000_0000u32 | (self.offset_ms << 6) | self.flags as u32).to_be_bytes(),
            );
        } else {
            out.extend_from_slice(
                &((((self.offset_ms / 1000) << 4) as u16) | self.flags as u16).to_be_bytes(),
            );
        }
    }

    pub fn value_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8);
        self.write_value(&mut out);
        out
    }

    /// Appends the value bytes, on the width its flags say.
    #[inline]
    pub fn write_value(&self, out: &mut Vec<u8>) {
        let len = (self.flags & LENGTH_MASK) as usize + 1;
        match self.value {
            Value::Int(v) => out.extend_from_slice(&v.to_be_bytes()[8 - len..]),
            Value::Float(f) if len == 4 => {
                out.extend_from_slice(&(f as f32).to_bits().to_be_bytes())
            }
            Value::Float(f) => out.extend_from_slice(&f.to_bits().to_be_bytes()),
        }
    }

    pub fn new(
        ts: Timestamp,
        base_time: u32,
        value: Value,
    ) -> Result<(StoredPoint, EncodedValue), QualifierError> {
        let enc = encode_value(value);
        row_offset(ts, base_time)?;
        let offset_ms = (ts.as_millis() - base_time as u64 * 1000) as u32;
        let point = StoredPoint {
            offset_ms,
            millis: ts.is_millis(),
            flags: enc.flags,
            value: decode_value(enc.flags, enc.as_bytes())?,
        };
        Ok((point, enc))
    }
}

/// The qualifier at the start of `qualifier` (a single one, or the first
/// of a compacted column), read as `(length, offset ms, is ms, flags)`.
#[inline]
pub(crate) fn qualifier_at(qualifier: &[u8]) -> Option<(usize, u32, bool, u8)> {
    let first = *qualifier.first()?;
    if is_ms_qualifier(first) {
        let q = u32::from_be_bytes(qualifier.get(..4)?.try_into().ok()?);
        Some((4, (q & 0x0FFF_FFC0) >> 6, true, (q & 0xF) as u8))
    } else {
        let q = u16::from_be_bytes(qualifier.get(..2)?.try_into().ok()?);
        Some((2, (q >> 4) as u32 * 1000, false, (q & 0xF) as u8))
    }
}

/// Qualifier of an annotation (or other odd-length object) at `ts`:
/// `prefix` then the plain offset, 2 bytes of seconds or 4 of milliseconds.
pub fn object_qualifier(
    prefix: u8,
    ts: Timestamp,
    base_time: u32,
) -> Result<Vec<u8>, QualifierError> {
    let d = row_offset(ts, base_time)?;
    let mut q = vec![prefix];
    match ts {
        Timestamp::Seconds(_) => q.extend_from_slice(&(d as u16).to_be_bytes()),
        Timestamp::Millis(_) => q.extend_from_slice(&d.to_be_bytes()),
    }
    Ok(q)
}

/// Offset in milliseconds of an odd-length object qualifier.
#[inline]
pub fn object_offset_ms(qualifier: &[u8]) -> Option<u32> {
    match qualifier.len() {
        3 => Some(u16::from_be_bytes([qualifier[1], qualifier[2]]) as u32 * 1000),
        5 => Some(u32::from_be_bytes([
            qualifier[1],
            qualifier[2],
            qualifier[3],
            qualifier[4],
        ])),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::uid::hex_upper;

    const BASE: u32 = 1356998400;

    fn cell(ts: Timestamp, v: Value) -> (String, String) {
        let enc = encode_value(v);
        let q = point_qualifier(ts, BASE, enc.flags).unwrap();
        (hex_upper(&q), hex_upper(enc.as_bytes()))
    }

    fn s(n: u32) -> Timestamp {
        Timestamp::Seconds(n)
    }

    fn pair(q: &str, v: &str) -> (String, String) {
        (q.to_string(), v.to_string())
    }

    #[test]
    fn spec_5_2_worked_examples() {
        assert_eq!(cell(s(1356998403), Value::Int(42)), pair("0030", "2A"));
        assert_eq!(cell(s(1356998403), Value::Int(300)), pair("0031", "012C"));
        assert_eq!(
            cell(s(1356998403), Value::Int(70000)),
            pair("0033", "00011170")
        );
        assert_eq!(cell(s(1356998403), Value::Int(-1)), pair("0030", "FF"));
        assert_eq!(
            cell(s(1356998523), Value::Int(4294967296)),
            pair("07B7", "0000000100000000")
        );
        assert_eq!(
            cell(s(1356998403), Value::Float(42.5)),
            pair("003B", "422A0000")
        );
        assert_eq!(
            cell(s(1356998403), Value::Float(0.1)),
            pair("003F", "3FB999999999999A")
        );
        assert_eq!(
            cell(Timestamp::Millis(1356998400500), Value::Int(42)),
            pair("F0007D00", "2A")
        );
        let enc8 = EncodedValue {
            flags: 7,
            bytes: [0; 8],
        };
        assert_eq!(
            hex_upper(
                &point_qualifier(Timestamp::Millis(1356998400008), BASE, enc8.flags).unwrap()
            ),
            "F0000207"
        );
        assert_eq!(
            hex_upper(&point_qualifier(Timestamp::Millis(1356998400001), BASE, 7).unwrap()),
            "F0000047"
        );
        // Seed 003's corrected example: 42 at offset 123 is 07B0 / 2A.
        assert_eq!(cell(s(1356998523), Value::Int(42)), pair("07B0", "2A"));
    }

    /// The stale marker keeps its bits on 8 bytes; any other NaN is
    /// written on 4 as OpenTSDB writes it.
    #[test]
    fn the_stale_marker_is_stored_on_eight_bytes_bit_for_bit() {
        let marker = Value::Float(f64::from_bits(STALE_MARKER_BITS));
        assert_eq!(
            cell(s(1356998403), marker),
            pair("003F", "7FF0000000000002")
        );
        let enc = encode_value(marker);
        match decode_value(enc.flags, enc.as_bytes()).unwrap() {
            Value::Float(f) => assert_eq!(f.to_bits(), STALE_MARKER_BITS),
            v => panic!("{v:?}"),
        }
        let (p, _) = StoredPoint::new(s(1356998403), BASE, marker).unwrap();
        assert!(p.value.is_stale_marker());
        assert_eq!(hex_upper(&p.value_bytes()), "7FF0000000000002");
        // Other NaNs: 4 bytes, as before.
        assert_eq!(encode_value(Value::Float(f64::NAN)).flags, FLAG_FLOAT | 0x3);
        let other = f64::from_bits(0x7ff0_0000_0000_0003);
        assert_eq!(encode_value(Value::Float(other)).flags, FLAG_FLOAT | 0x3);
    }

    #[test]
    fn annotation_qualifiers() {
        // Seed 003: annotation at 1292148123 in row 1292148000 is 01007B.
        let q = object_qualifier(ANNOTATION_PREFIX, s(1292148123), 1292148000).unwrap();
        assert_eq!(hex_upper(&q), "01007B");
        assert_eq!(object_offset_ms(&q), Some(123_000));
        let q = object_qualifier(
            ANNOTATION_PREFIX,
            Timestamp::Millis(1292148000123),
            1292148000,
        )
        .unwrap();
        assert_eq!(hex_upper(&q), "010000007B");
        assert!(
            object_qualifier(ANNOTATION_PREFIX, s(1292148000 + ROW_SPAN_SECS), 1292148000).is_err()
        );
    }

    #[test]
    fn offsets_outside_the_row_are_rejected() {
        assert!(point_qualifier(s(BASE + ROW_SPAN_SECS), BASE, 0).is_err());
        assert!(point_qualifier(s(BASE - 1), BASE, 0).is_err());
        assert!(
            point_qualifier(Timestamp::Millis(BASE as u64 * 1000 + ROW_SPAN_MS), BASE, 0).is_err()
        );
    }

    #[test]
    fn cell_kinds_as_opentsdb_fsck_classifies_them() {
        use CellKind::*;
        for (q, kind) in [
            (&[][..], TooShort),
            (&[0x01][..], TooShort),
            (&[0x00, 0x37][..], Single),
            (&[0xF0, 0x00, 0x7D, 0x00][..], Single),
            (&[0x00, 0x07, 0x00, 0x17][..], Compacted),
            (&[0x00, 0x07, 0xF0, 0x00, 0x7D, 0x00][..], Compacted),
            (&[0x01, 0x00, 0x7B][..], Annotation),
            (&[0x01, 0x00, 0x00, 0x00, 0x7B][..], Annotation),
            (&[0x05, 0x00, 0x00][..], Append),
            (&[0x05, 0x00, 0x00, 0x00, 0x00][..], Append),
            (&[0x0C, 0x00, 0x00][..], Compressed),
            (&[0x06, 0x00, 0x00][..], Histogram),
            (&[0x02, 0x00, 0x00][..], Object),
            // An annotation or append prefix on 7 bytes is neither (Fsck:
            // "must be 2, 3, 5 or an even number of bytes").
            (&[0x01, 0, 0, 0, 0, 0, 0][..], Unknown),
            (&[0x05, 0, 0, 0, 0, 0, 0][..], Unknown),
        ] {
            assert_eq!(CellKind::of(q), kind, "{}", hex_upper(q));
        }
    }
}
