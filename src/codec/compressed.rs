//! rtsdb's compressed column: one hour of one series in a few bits per
//! point, stored under its own odd-length qualifier (`0C 00 00`) beside
//! OpenTSDB's columns. Format: docs/format/compressed-column.md.
//!
//! Timestamps are delta-of-delta encoded; values are stored as integers
//! (floats with few decimals scaled by a power of ten, as VictoriaMetrics
//! does) delta or delta-of-delta encoded, whichever is smaller; both
//! streams are bit-packed in frames of 64. Everything round-trips exactly:
//! integer/float type, 4/8-byte float width, value width, second/ms
//! precision and every float bit. A CRC32 guards the block.

use thiserror::Error;

use super::qualifier::{
    COMPRESSED_PREFIX, FLAG_FLOAT, LENGTH_MASK, StoredPoint, decode_value, encode_value,
};
use super::varint::{self, unzigzag, zigzag};
use crate::model::point::Value;
use crate::model::row_span::ROW_SPAN_MS;

/// The compressed column's qualifier.
pub const COMPRESSED_QUALIFIER: [u8; 3] = [COMPRESSED_PREFIX, 0, 0];

const VERSION: u8 = 1;
const FRAME: usize = 64;
/// Largest decimal exponent tried when scaling floats to integers.
pub(crate) const MAX_DECIMALS: u32 = 9;

const TS_SECONDS: u8 = 0;
const TS_MILLIS: u8 = 1;
const TS_MIXED: u8 = 2;

const VAL_INT: u8 = 0;
const VAL_DECIMAL: u8 = 1;
const VAL_RAW: u8 = 2;

const XFORM_DELTA: u8 = 0;
const XFORM_DOD: u8 = 1;

const FLAGS_CANONICAL: u8 = 0;
const FLAGS_EXPLICIT: u8 = 1;

#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum CompressedError {
    #[error("compressed column checksum mismatch (stored {stored:08x}, computed {computed:08x})")]
    Checksum { stored: u32, computed: u32 },
    #[error("compressed column is corrupt: {0}")]
    Corrupt(&'static str),
    #[error("compressed column version {0} is not supported")]
    Version(u8),
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn u8(&mut self) -> Result<u8, CompressedError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or(CompressedError::Corrupt("truncated"))?;
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, CompressedError> {
        varint::get(self.buf, &mut self.pos)
            .ok_or(CompressedError::Corrupt("truncated or overlong varint"))
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], CompressedError> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or(CompressedError::Corrupt("length overflow"))?;
        let s = self
            .buf
            .get(self.pos..end)
            .ok_or(CompressedError::Corrupt("truncated"))?;
        self.pos = end;
        Ok(s)
    }
}

/// Bit-packs values in frames of 64: a width byte, then `n * width` bits.
fn pack(values: &[u64], out: &mut Vec<u8>) {
    for frame in values.chunks(FRAME) {
        let width = frame
            .iter()
            .map(|v| 64 - v.leading_zeros())
            .max()
            .unwrap_or(0) as usize;
        out.push(width as u8);
        if width == 0 {
            continue;
        }
        let mut acc: u128 = 0;
        let mut bits = 0usize;
        for &v in frame {
            acc |= (v as u128) << bits;
            bits += width;
            while bits >= 8 {
                out.push(acc as u8);
                acc >>= 8;
                bits -= 8;
            }
        }
        if bits > 0 {
            out.push(acc as u8);
        }
    }
}

fn unpack(r: &mut Reader<'_>, n: usize, out: &mut Vec<u64>) -> Result<(), CompressedError> {
    out.reserve(n);
    unpack_frames(r, n, |frame| out.extend_from_slice(frame))
}

/// Bytes of a frame's copy for [`unpack_frame`]: 64 values of up to 56
/// bits, and room for the last value's 8-byte load.
const PADDED: usize = FRAME * 7 + 8;

/// Unpacks one frame of 64 values of `W` bits from `src`.
type Kernel = fn(&[u8; PADDED], &mut [u64; FRAME]);

/// The bit-unpacking kernel of one width (up to 56 bits): every value is
/// one unaligned 8-byte load, a shift and a mask, all three fixed at
/// compile time, with no branch per value. Eight values of `W` bits take
/// exactly `W` bytes, so each group of eight starts on a byte boundary and
/// the offsets inside a group repeat from one group to the next. Values
/// past the frame's count come from the bytes after it and are ignored by
/// the caller.
#[inline(never)]
fn unpack_frame<const W: usize>(src: &[u8; PADDED], dst: &mut [u64; FRAME]) {
    let mask = u64::MAX >> (64 - W);
    for g in 0..FRAME / 8 {
        for j in 0..8 {
            let bit = j * W;
            let at = g * W + bit / 8;
            let word = u64::from_le_bytes(src[at..at + 8].try_into().unwrap_or([0; 8]));
            dst[g * 8 + j] = (word >> (bit % 8)) & mask;
        }
    }
}

macro_rules! kernels {
    ($($w:literal)*) => { [$(unpack_frame::<$w> as Kernel),*] };
}

/// [`unpack_frame`] by width less one: 1 to 56 bits.
static KERNELS: [Kernel; 56] = kernels!(
    1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28
    29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56
);

/// A frame of width 0.
static ZEROS: [u64; FRAME] = [0; FRAME];

/// Unpacks `n` values, handing them to `f` a frame (up to 64) at a time,
/// so callers run their transform (a running sum) as a loop over a slice.
#[inline(always)]
fn unpack_frames(
    r: &mut Reader<'_>,
    n: usize,
    mut f: impl FnMut(&[u64]),
) -> Result<(), CompressedError> {
    let mut left = n;
    let mut padded = [0u8; PADDED];
    let mut values = [0u64; FRAME];
    while left > 0 {
        let count = left.min(FRAME);
        let width = r.u8()? as usize;
        if width > 64 {
            return Err(CompressedError::Corrupt("bit width above 64"));
        }
        if width == 0 {
            f(&ZEROS[..count]);
            left -= count;
            continue;
        }
        let bytes = r.bytes((count * width).div_ceil(8))?;
        if let Some(kernel) = KERNELS.get(width - 1) {
            padded[..bytes.len()].copy_from_slice(bytes);
            kernel(&padded, &mut values);
        } else {
            let mask: u128 = if width == 64 {
                u64::MAX as u128
            } else {
                (1u128 << width) - 1
            };
            let mut acc: u128 = 0;
            let mut bits = 0usize;
            let mut it = bytes.iter();
            for v in values.iter_mut().take(count) {
                while bits < width {
                    acc |= (*it
                        .next()
                        .ok_or(CompressedError::Corrupt("truncated frame"))?
                        as u128)
                        << bits;
                    bits += 8;
                }
                *v = (acc & mask) as u64;
                acc >>= width;
                bits -= width;
            }
        }
        f(&values[..count]);
        left -= count;
    }
    Ok(())
}

/// Writes a sequence of i64 as first value, then deltas or deltas of
/// deltas (whichever packs smaller), zigzagged and bit-packed.
fn encode_ints(values: &[i64], out: &mut Vec<u8>) {
    let deltas: Vec<i64> = values.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
    let dods: Vec<u64> = deltas
        .windows(2)
        .map(|w| zigzag(w[1].wrapping_sub(w[0])))
        .collect();
    let zdeltas: Vec<u64> = deltas.iter().map(|d| zigzag(*d)).collect();
    let mut a = Vec::new();
    pack(&zdeltas, &mut a);
    let mut b = Vec::new();
    if let Some(first) = deltas.first() {
        varint::put(zigzag(*first), &mut b);
    }
    pack(&dods, &mut b);
    varint::put(zigzag(values[0]), out);
    if a.len() <= b.len() {
        out.push(XFORM_DELTA);
        out.extend_from_slice(&a);
    } else {
        out.push(XFORM_DOD);
        out.extend_from_slice(&b);
    }
}

fn decode_ints(r: &mut Reader<'_>, n: usize, out: &mut Vec<i64>) -> Result<(), CompressedError> {
    out.reserve(n);
    let first = unzigzag(r.varint()?);
    out.push(first);
    let xform = r.u8()?;
    match xform {
        XFORM_DELTA => {
            let mut cur = first;
            unpack_frames(r, n - 1, |zs| {
                out.extend(zs.iter().map(|&z| {
                    cur = cur.wrapping_add(unzigzag(z));
                    cur
                }))
            })?;
        }
        XFORM_DOD => {
            if n < 2 {
                return Ok(());
            }
            let mut delta = unzigzag(r.varint()?);
            let mut cur = first.wrapping_add(delta);
            out.push(cur);
            unpack_frames(r, n - 2, |zs| {
                out.extend(zs.iter().map(|&z| {
                    delta = delta.wrapping_add(unzigzag(z));
                    cur = cur.wrapping_add(delta);
                    cur
                }))
            })?;
        }
        _ => return Err(CompressedError::Corrupt("unknown integer transform")),
    }
    Ok(())
}

/// Reads the offsets stream. A regular series (every delta-of-delta zero,
/// i.e. only zero-width frames) is returned as `(first, delta)` without
/// materialising anything; otherwise the offsets are decoded into `out`.
fn decode_offsets(
    r: &mut Reader<'_>,
    n: usize,
    out: &mut Vec<i64>,
) -> Result<Option<(i64, i64)>, CompressedError> {
    let save = r.pos;
    let first = unzigzag(r.varint()?);
    if n >= 2 && r.u8()? == XFORM_DOD {
        let delta = unzigzag(r.varint()?);
        let frames = (n - 2).div_ceil(FRAME);
        let at = r.pos;
        if r.buf
            .get(at..at + frames)
            .is_some_and(|w| w.iter().all(|b| *b == 0))
        {
            r.pos = at + frames;
            return Ok(Some((first, delta)));
        }
    }
    r.pos = save;
    decode_ints(r, n, out)?;
    Ok(None)
}

/// The smallest number of decimals `e` such that every value is exactly
/// `m / 10^e` for an integer `m` below 2^53, with the scaled integers.
/// The WAL's columnar batches scale floats by the same rule
/// (`write::wal::columns`).
pub(crate) fn decimal_scale(values: &[f64]) -> Option<(u32, Vec<i64>)> {
    let mut out = Vec::with_capacity(values.len());
    decimal_scale_into(values, &mut out).map(|e| (e, out))
}

/// [`decimal_scale`] into `out` (emptied first), for callers that keep
/// the vector from one call to the next: the decimals `e`, or `None`.
pub(crate) fn decimal_scale_into(values: &[f64], out: &mut Vec<i64>) -> Option<u32> {
    'exp: for e in 0..=MAX_DECIMALS {
        let scale = 10f64.powi(e as i32);
        out.clear();
        for &v in values {
            let m = (v * scale).round();
            if !m.is_finite() || m.abs() >= (1u64 << 53) as f64 {
                continue 'exp;
            }
            // Check through the integer the decoder will see (this also
            // sends -0.0 to the raw path, which keeps its sign bit).
            let m = m as i64;
            if (m as f64 / scale).to_bits() != v.to_bits() {
                continue 'exp;
            }
            out.push(m);
        }
        return Some(e);
    }
    None
}

/// Encodes points sorted by offset, one per timestamp.
pub fn encode(points: &[StoredPoint]) -> Vec<u8> {
    let n = points.len();
    let mut out = Vec::with_capacity(16 + n);
    out.push(VERSION);
    varint::put(n as u64, &mut out);
    if n > 0 {
        encode_timestamps(points, &mut out);
        encode_values(points, &mut out);
        let canonical = points
            .iter()
            .all(|p| encode_value(p.value).flags == p.flags);
        if canonical {
            out.push(FLAGS_CANONICAL);
        } else {
            out.push(FLAGS_EXPLICIT);
            let flags: Vec<u64> = points.iter().map(|p| p.flags as u64).collect();
            pack(&flags, &mut out);
        }
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

fn encode_timestamps(points: &[StoredPoint], out: &mut Vec<u8>) {
    let all_s = points.iter().all(|p| !p.millis);
    let all_ms = points.iter().all(|p| p.millis);
    let (kind, unit) = if all_s {
        (TS_SECONDS, 1000)
    } else if all_ms {
        (TS_MILLIS, 1)
    } else {
        (TS_MIXED, 1)
    };
    out.push(kind);
    if kind == TS_MIXED {
        let bits: Vec<u64> = points.iter().map(|p| p.millis as u64).collect();
        pack(&bits, out);
    }
    let offsets: Vec<i64> = points.iter().map(|p| (p.offset_ms / unit) as i64).collect();
    encode_ints(&offsets, out);
}

fn encode_values(points: &[StoredPoint], out: &mut Vec<u8>) {
    if points.iter().all(|p| matches!(p.value, Value::Int(_))) {
        out.push(VAL_INT);
        let ints: Vec<i64> = points
            .iter()
            .map(|p| match p.value {
                Value::Int(i) => i,
                Value::Float(_) => 0,
            })
            .collect();
        encode_ints(&ints, out);
        return;
    }
    if points.iter().all(|p| matches!(p.value, Value::Float(_))) {
        let floats: Vec<f64> = points.iter().map(|p| p.value.as_f64()).collect();
        if let Some((e, ints)) = decimal_scale(&floats) {
            out.push(VAL_DECIMAL);
            out.push(e as u8);
            encode_ints(&ints, out);
            return;
        }
    }
    // Mixed types or floats with many significant digits: the values as
    // OpenTSDB writes them, type and width from the flags stream.
    out.push(VAL_RAW);
    for p in points {
        out.push(p.flags);
        p.write_value(out);
    }
}

/// Reusable buffers for decoding many blocks without allocating.
#[derive(Debug, Default)]
pub struct Scratch {
    ms_bits: Vec<u64>,
    offsets: Vec<i64>,
    ints: Vec<i64>,
    raw: Vec<(u8, Value)>,
    explicit: Vec<u64>,
}

/// Decodes a compressed column, verifying its checksum first.
pub fn decode(value: &[u8], out: &mut Vec<StoredPoint>) -> Result<(), CompressedError> {
    let mut scratch = Scratch::default();
    decode_with(value, &mut scratch, |p| out.push(p))
}

/// What [`parse`] learnt about a block; its streams are in the scratch.
struct Parsed {
    n: usize,
    ts_kind: u8,
    /// `(first, delta)` when the offsets are an arithmetic sequence.
    regular: Option<(i64, i64)>,
    /// Milliseconds per offset unit.
    unit: i64,
    val_kind: u8,
    scale: f64,
}

/// Checks a block (checksum, structure, offsets inside the hour, flags
/// agreeing with value types) and decodes its streams into `scratch`.
fn parse(value: &[u8], scratch: &mut Scratch) -> Result<Parsed, CompressedError> {
    let Scratch {
        ms_bits,
        offsets,
        ints,
        raw,
        explicit,
    } = scratch;
    ms_bits.clear();
    offsets.clear();
    ints.clear();
    raw.clear();
    explicit.clear();
    if value.len() < 5 {
        return Err(CompressedError::Corrupt("shorter than its header"));
    }
    let (body, crc) = value.split_at(value.len() - 4);
    let stored = u32::from_be_bytes([crc[0], crc[1], crc[2], crc[3]]);
    let computed = crc32fast::hash(body);
    if stored != computed {
        return Err(CompressedError::Checksum { stored, computed });
    }
    let mut r = Reader { buf: body, pos: 0 };
    let version = r.u8()?;
    if version != VERSION {
        return Err(CompressedError::Version(version));
    }
    let n = r.varint()? as usize;
    // Every point takes at least one bit of some stream; refuse absurd
    // counts before allocating.
    if n > 4_000_000 {
        return Err(CompressedError::Corrupt("point count out of range"));
    }
    if n == 0 {
        expect_end(&r)?;
        return Ok(Parsed {
            n,
            ts_kind: TS_SECONDS,
            regular: None,
            unit: 1000,
            val_kind: VAL_INT,
            scale: 1.0,
        });
    }
    let ts_kind = r.u8()?;
    match ts_kind {
        TS_SECONDS | TS_MILLIS => {}
        TS_MIXED => unpack(&mut r, n, ms_bits)?,
        _ => return Err(CompressedError::Corrupt("unknown timestamp kind")),
    }
    let regular = decode_offsets(&mut r, n, offsets)?;

    let val_kind = r.u8()?;
    let mut scale = 1.0;
    match val_kind {
        VAL_INT => decode_ints(&mut r, n, ints)?,
        VAL_DECIMAL => {
            let e = r.u8()? as u32;
            if e > MAX_DECIMALS {
                return Err(CompressedError::Corrupt("decimal exponent out of range"));
            }
            scale = 10f64.powi(e as i32);
            decode_ints(&mut r, n, ints)?;
        }
        VAL_RAW => {
            raw.reserve(n);
            for _ in 0..n {
                let flags = r.u8()?;
                let len = (flags & LENGTH_MASK) as usize + 1;
                let bytes = r.bytes(len)?;
                let v = decode_value(flags, bytes)
                    .map_err(|_| CompressedError::Corrupt("bad raw value"))?;
                raw.push((flags, v));
            }
        }
        _ => return Err(CompressedError::Corrupt("unknown value kind")),
    }
    let flags_kind = r.u8()?;
    match flags_kind {
        FLAGS_CANONICAL => {}
        FLAGS_EXPLICIT => unpack(&mut r, n, explicit)?,
        _ => return Err(CompressedError::Corrupt("unknown flags kind")),
    }
    expect_end(&r)?;
    if (regular.is_none() && offsets.len() != n) || (val_kind != VAL_RAW && ints.len() != n) {
        return Err(CompressedError::Corrupt("stream lengths disagree"));
    }
    let unit = if ts_kind == TS_SECONDS { 1000 } else { 1 };
    let limit = ROW_SPAN_MS as i64 / unit;
    let in_hour = |o: i64| (0..limit).contains(&o);
    match regular {
        // An arithmetic sequence has its extremes at its ends.
        Some((first, delta)) => {
            let last = delta
                .checked_mul(n as i64 - 1)
                .and_then(|d| first.checked_add(d));
            if !in_hour(first) || !last.is_some_and(in_hour) {
                return Err(CompressedError::Corrupt("offset outside the hour"));
            }
        }
        None => {
            if offsets.iter().any(|&o| !in_hour(o)) {
                return Err(CompressedError::Corrupt("offset outside the hour"));
            }
        }
    }
    // Validate before anything is emitted.
    for (i, f) in explicit.iter().enumerate() {
        let is_float = match val_kind {
            VAL_RAW => raw[i].1.is_float(),
            VAL_DECIMAL => true,
            _ => false,
        };
        if (*f as u8 & FLAG_FLOAT != 0) != is_float {
            return Err(CompressedError::Corrupt("flags disagree with value type"));
        }
    }
    Ok(Parsed {
        n,
        ts_kind,
        regular,
        unit,
        val_kind,
        scale,
    })
}

/// Decodes a compressed column into `emit`, point by point, in time order.
/// Nothing is emitted unless the whole block is valid.
pub fn decode_with(
    value: &[u8],
    scratch: &mut Scratch,
    mut emit: impl FnMut(StoredPoint),
) -> Result<(), CompressedError> {
    let Parsed {
        n,
        ts_kind,
        regular,
        unit,
        val_kind,
        scale,
    } = parse(value, scratch)?;
    let Scratch {
        ms_bits,
        offsets,
        ints,
        raw,
        explicit,
    } = scratch;
    let offset_at = |i: usize| match regular {
        Some((first, delta)) => first + delta * i as i64,
        None => offsets[i],
    };
    let millis_of = |i: usize| match ts_kind {
        TS_SECONDS => false,
        TS_MILLIS => true,
        _ => ms_bits[i] != 0,
    };
    // The hot path (decimal floats, canonical widths) in one tight loop.
    if val_kind == VAL_DECIMAL && explicit.is_empty() {
        for (i, &m) in ints.iter().enumerate() {
            let o = offset_at(i);
            let v = m as f64 / scale;
            let flags = if (v as f32) as f64 == v {
                FLAG_FLOAT | 0x3
            } else {
                FLAG_FLOAT | 0x7
            };
            emit(StoredPoint {
                offset_ms: (o * unit) as u32,
                millis: millis_of(i),
                flags,
                value: Value::Float(v),
            });
        }
        return Ok(());
    }
    for i in 0..n {
        let (raw_flags, value) = match val_kind {
            VAL_RAW => (Some(raw[i].0), raw[i].1),
            VAL_DECIMAL => (None, Value::Float(ints[i] as f64 / scale)),
            _ => (None, Value::Int(ints[i])),
        };
        let flags = if let Some(f) = explicit.get(i) {
            *f as u8
        } else if let Some(f) = raw_flags {
            f
        } else {
            encode_value(value).flags
        };
        emit(StoredPoint {
            offset_ms: (offset_at(i) * unit) as u32,
            millis: millis_of(i),
            flags,
            value,
        });
    }
    Ok(())
}

/// Decodes only what a query needs, each point's offset from the row's base
/// (ms) and value, into `f`, in time order; nothing is passed on unless the
/// whole block is valid. Leaner than [`decode_with`] on the hot read path.
#[inline]
pub fn decode_values_with(
    value: &[u8],
    scratch: &mut Scratch,
    f: impl FnMut(u32, Value),
) -> Result<(), CompressedError> {
    let p = parse(value, scratch)?;
    emit_values(&p, scratch, f);
    Ok(())
}

/// [`decode_values_with`] for the points whose offsets (ms) lie in
/// `[from, to]`, appended to `out` as `point` builds them. In a block of
/// evenly spaced points (the usual row) that range is found by arithmetic
/// and the points written in one pass, with no check per point.
#[inline]
pub fn decode_values_in<T>(
    value: &[u8],
    scratch: &mut Scratch,
    from: i64,
    to: i64,
    out: &mut Vec<T>,
    point: impl Fn(u32, Value) -> T,
) -> Result<(), CompressedError> {
    let p = parse(value, scratch)?;
    let Some((first, delta)) = p.regular.filter(|&(_, d)| d > 0 || p.n == 1) else {
        emit_values(&p, scratch, |o, v| {
            if (from..=to).contains(&(o as i64)) {
                out.push(point(o, v))
            }
        });
        return Ok(());
    };
    // parse() checked every offset lies inside the hour.
    let (o0, step) = (first * p.unit, (delta * p.unit).max(1));
    let n = scratch.ints.len() as i64;
    let lo = if from <= o0 {
        0
    } else {
        ((from - o0 + step - 1) / step).min(n)
    };
    let hi = if to < o0 {
        0
    } else {
        ((to - o0) / step + 1).min(n)
    };
    let ints = &scratch.ints[lo as usize..hi.max(lo) as usize];
    let offset = |k: usize| (o0 + step * (lo + k as i64)) as u32;
    match p.val_kind {
        VAL_DECIMAL => out.extend(
            ints.iter()
                .enumerate()
                .map(|(k, &m)| point(offset(k), Value::Float(m as f64 / p.scale))),
        ),
        VAL_INT => out.extend(
            ints.iter()
                .enumerate()
                .map(|(k, &m)| point(offset(k), Value::Int(m))),
        ),
        _ => emit_values(&p, scratch, |o, v| {
            if (from..=to).contains(&(o as i64)) {
                out.push(point(o, v))
            }
        }),
    }
    Ok(())
}

/// Hands a parsed block's points to `f` (offset in ms, value), in time
/// order.
#[inline(always)]
fn emit_values(p: &Parsed, scratch: &Scratch, mut f: impl FnMut(u32, Value)) {
    let ints = &scratch.ints;
    match (p.val_kind, p.regular) {
        (VAL_DECIMAL, Some((first, delta))) => {
            let (mut o, step) = (first * p.unit, delta * p.unit);
            for &m in ints {
                f(o as u32, Value::Float(m as f64 / p.scale));
                o += step;
            }
        }
        (VAL_INT, Some((first, delta))) => {
            let (mut o, step) = (first * p.unit, delta * p.unit);
            for &m in ints {
                f(o as u32, Value::Int(m));
                o += step;
            }
        }
        _ => {
            let offsets = &scratch.offsets;
            let offset = |i: usize| {
                let o = match p.regular {
                    Some((first, delta)) => first + delta * i as i64,
                    None => offsets[i],
                };
                (o * p.unit) as u32
            };
            match p.val_kind {
                VAL_RAW => {
                    for (i, (_, v)) in scratch.raw.iter().enumerate() {
                        f(offset(i), *v);
                    }
                }
                VAL_DECIMAL => {
                    for (i, &m) in ints.iter().enumerate() {
                        f(offset(i), Value::Float(m as f64 / p.scale));
                    }
                }
                _ => {
                    for (i, &m) in ints.iter().enumerate() {
                        f(offset(i), Value::Int(m));
                    }
                }
            }
        }
    }
}

fn expect_end(r: &Reader<'_>) -> Result<(), CompressedError> {
    if r.pos == r.buf.len() {
        Ok(())
    } else {
        Err(CompressedError::Corrupt("trailing bytes"))
    }
}

/// Bit-packs `values` as this column packs its streams (frames of 64,
/// each a width byte then its values, docs/format/compressed-column.md),
/// for other formats that keep runs of small integers the same way: the
/// WAL's batches (`write::wal::columns`, record `08`).
pub(crate) fn pack_stream(values: &[u64], out: &mut Vec<u8>) {
    pack(values, out)
}

/// Reads `n` values that [`pack_stream`] packed, from `bytes` at `*pos`,
/// handing each to `f`; `*pos` is then just past them.
pub(crate) fn unpack_stream(
    bytes: &[u8],
    pos: &mut usize,
    n: usize,
    mut f: impl FnMut(u64),
) -> Result<(), CompressedError> {
    let mut r = Reader {
        buf: bytes,
        pos: *pos,
    };
    unpack_frames(&mut r, n, |frame| frame.iter().for_each(|&v| f(v)))?;
    *pos = r.pos;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::point::{STALE_MARKER_BITS, Timestamp};
    use proptest::prelude::*;

    const BASE: u32 = 1_356_998_400;

    fn pt(off_ms: u32, millis: bool, v: Value) -> StoredPoint {
        let ts = if millis {
            Timestamp::Millis(BASE as u64 * 1000 + off_ms as u64)
        } else {
            Timestamp::Seconds(BASE + off_ms / 1000)
        };
        StoredPoint::new(ts, BASE, v).unwrap().0
    }

    fn round_trip(points: &[StoredPoint]) -> Vec<u8> {
        let enc = encode(points);
        let mut out = Vec::new();
        decode(&enc, &mut out).unwrap();
        // The lean query path yields the same offsets and values.
        let mut lean = Vec::new();
        decode_values_with(&enc, &mut Scratch::default(), |o, v| lean.push((o, v))).unwrap();
        assert_eq!(lean.len(), points.len());
        for ((o, v), p) in lean.iter().zip(points) {
            assert_eq!(*o, p.offset_ms);
            match (v, p.value) {
                (Value::Int(a), Value::Int(b)) => assert_eq!(*a, b),
                (Value::Float(a), Value::Float(b)) => assert_eq!(a.to_bits(), b.to_bits()),
                _ => panic!("type changed on the lean path"),
            }
        }
        assert_eq!(out.len(), points.len());
        for (a, b) in out.iter().zip(points) {
            assert_eq!(
                (a.offset_ms, a.millis, a.flags),
                (b.offset_ms, b.millis, b.flags)
            );
            match (a.value, b.value) {
                (Value::Int(x), Value::Int(y)) => assert_eq!(x, y),
                (Value::Float(x), Value::Float(y)) => assert_eq!(x.to_bits(), y.to_bits()),
                _ => panic!("type changed"),
            }
        }
        enc
    }

    #[test]
    fn regular_gauge_takes_few_bits_per_point() {
        // One decimal random-ish walk every 10 s: the devops case.
        let mut v = 500i64;
        let points: Vec<_> = (0..360)
            .map(|i| {
                v += ((i * 7919) % 11) as i64 - 5;
                pt(i * 10_000, false, Value::Float(v as f64 / 10.0))
            })
            .collect();
        let enc = round_trip(&points);
        assert!(
            enc.len() < 360 * 6 / 8 + 40,
            "{} bytes for 360 points",
            enc.len()
        );
        // A counter growing steadily.
        let points: Vec<_> = (0..360)
            .map(|i| pt(i * 10_000, false, Value::Int(1_000_000 + i as i64 * 1234)))
            .collect();
        let enc = round_trip(&points);
        assert!(enc.len() < 40, "{} bytes for a regular counter", enc.len());
    }

    #[test]
    fn edge_values() {
        round_trip(&[]);
        round_trip(&[pt(0, false, Value::Int(i64::MIN))]);
        round_trip(&[
            pt(0, false, Value::Int(i64::MIN)),
            pt(1000, false, Value::Int(i64::MAX)),
        ]);
        round_trip(&[
            pt(0, true, Value::Float(f64::MAX)),
            pt(1, true, Value::Float(f64::MIN_POSITIVE)),
        ]);
        round_trip(&[
            pt(5, true, Value::Int(1)),
            pt(1000, false, Value::Float(0.1)),
            pt(3_599_999, true, Value::Float(1e300)),
        ]);
        round_trip(&[
            pt(0, false, Value::Float(-0.0)),
            pt(1000, false, Value::Float(0.0)),
        ]);
        // Non-canonical widths (8-byte small ints from old writers) survive.
        let mut p = pt(0, false, Value::Int(4));
        p.flags = 0x7;
        round_trip(&[p, pt(1000, false, Value::Int(5))]);
    }

    /// Prometheus' stale marker keeps its bits (and its 8-byte width)
    /// in a column of decimals, alone, and beside integers.
    #[test]
    fn stale_markers_round_trip_bit_for_bit() {
        let marker = Value::Float(f64::from_bits(STALE_MARKER_BITS));
        let gauge = [
            pt(0, false, Value::Float(1.5)),
            pt(10_000, false, Value::Float(2.5)),
            pt(20_000, false, marker),
        ];
        round_trip(&gauge);
        round_trip(&[pt(0, true, marker)]);
        round_trip(&[
            pt(0, false, Value::Int(7)),
            pt(1000, false, marker),
            pt(2000, false, Value::Float(f64::NAN)),
        ]);
        let mut out = Vec::new();
        decode(&encode(&gauge), &mut out).unwrap();
        assert!(out[2].value.is_stale_marker());
        assert_eq!(out[2].flags, FLAG_FLOAT | 0x7);
    }

    #[test]
    fn corruption_is_detected() {
        let points: Vec<_> = (0..100)
            .map(|i| pt(i * 1000, false, Value::Int(i as i64)))
            .collect();
        let enc = encode(&points);
        for i in 0..enc.len() {
            let mut bad = enc.clone();
            bad[i] ^= 0x10;
            let mut out = Vec::new();
            assert!(
                decode(&bad, &mut out).is_err(),
                "flip at byte {i} went unnoticed"
            );
        }
        let mut out = Vec::new();
        assert!(decode(&enc[..enc.len() - 1], &mut out).is_err());
        let mut bad = enc.clone();
        bad[3] ^= 1;
        let mut seen = 0;
        assert!(decode_values_with(&bad, &mut Scratch::default(), |_, _| seen += 1).is_err());
        assert_eq!(seen, 0, "a corrupt block must emit nothing");
        assert!(decode(&[], &mut out).is_err());
    }

    fn arb_series() -> impl Strategy<Value = Vec<StoredPoint>> {
        let value = prop_oneof![
            any::<i64>().prop_map(Value::Int),
            (-1_000_000i64..1_000_000).prop_map(Value::Int),
            (any::<i32>(), 0u32..=6)
                .prop_map(|(m, e)| Value::Float(m as f64 / 10f64.powi(e as i32))),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::Float),
            any::<f32>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| Value::Float(f as f64)),
            Just(Value::Float(1e-300)),
            Just(Value::Float(123456789.123)),
            Just(Value::Float(f64::from_bits(STALE_MARKER_BITS))),
            Just(Value::Float(f64::NAN)),
        ];
        let kind = 0u8..4;
        (
            kind,
            proptest::collection::btree_map(0u32..3_600_000, (any::<bool>(), value), 0..300),
        )
            .prop_map(|(kind, m)| {
                let mut pts: Vec<StoredPoint> = m
                    .into_iter()
                    .map(|(off, (ms, v))| {
                        let v = match (kind, v) {
                            (0, Value::Float(f)) => Value::Int(f as i64),
                            _ => v,
                        };
                        let millis = match kind {
                            1 => false,
                            2 => true,
                            _ => ms,
                        };
                        pt(off, millis, v)
                    })
                    .collect();
                pts.sort_by_key(|p| p.offset_ms);
                pts.dedup_by_key(|p| p.offset_ms);
                pts
            })
    }

    proptest! {
        #[test]
        fn any_series_round_trips(points in arb_series()) {
            round_trip(&points);
        }

        #[test]
        fn regular_series_round_trip(start in 0u32..3600, step in 1u32..60, n in 1usize..360, scale in 0u32..7, seed in any::<i64>()) {
            let mut v = seed % 1_000_000;
            let points: Vec<_> = (0..n)
                .map(|i| start + i as u32 * step)
                .take_while(|s| *s < 3600)
                .map(|s| {
                    v = v.wrapping_add((s as i64 * 31) % 17 - 8);
                    pt(s * 1000, false, Value::Float(v as f64 / 10f64.powi(scale as i32)))
                })
                .collect();
            round_trip(&points);
        }

        /// A ranged decode keeps exactly the points a full decode finds
        /// in the range, in order, bit for bit: blocks of any shape, evenly
        /// spaced ones (found by arithmetic), ranges cutting them anywhere.
        #[test]
        fn a_ranged_decode_keeps_what_a_full_one_finds_in_range(
            any_points in arb_series(),
            start in 0u32..3600,
            step in 1u32..120,
            n in 1usize..400,
            ints in any::<bool>(),
            which in any::<bool>(),
            from in -10i64..3_700_000,
            len in 0i64..4_000_000,
        ) {
            let regular: Vec<_> = (0..n)
                .map(|i| start + i as u32 * step)
                .take_while(|s| *s < 3600)
                .map(|s| {
                    let v = if ints { Value::Int(s as i64 * 7 - 900) } else { Value::Float(s as f64 / 10.0) };
                    pt(s * 1000, false, v)
                })
                .collect();
            let points = if which { &regular } else { &any_points };
            let block = encode(points);
            let to = from + len;
            let mut full = Vec::new();
            decode_values_with(&block, &mut Scratch::default(), |o, v| {
                if (from..=to).contains(&(o as i64)) {
                    full.push((o, v));
                }
            })
            .unwrap();
            let mut ranged = Vec::new();
            decode_values_in(&block, &mut Scratch::default(), from, to, &mut ranged, |o, v| (o, v)).unwrap();
            let bits = |o: &[(u32, Value)]| -> Vec<(u32, bool, u64)> {
                o.iter()
                    .map(|&(t, v)| match v {
                        Value::Int(i) => (t, false, i as u64),
                        Value::Float(f) => (t, true, f.to_bits()),
                    })
                    .collect()
            };
            prop_assert_eq!(bits(&ranged), bits(&full));
        }

        /// The unpacking kernels (one per width) give back what `pack`
        /// wrote, for every width from 0 to 64 bits and any count (frames
        /// cut short at the end), and stop exactly at the stream's end.
        #[test]
        fn frames_of_every_width_unpack_as_packed(
            widths in proptest::collection::vec(0u32..=64, 1..5),
            n in 0usize..300,
            seed in any::<u64>(),
        ) {
            let mut x = seed | 1;
            let values: Vec<u64> = (0..n)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let w = widths[(i / FRAME) % widths.len()];
                    if w == 0 { 0 } else { x >> (64 - w) }
                })
                .collect();
            let mut packed = Vec::new();
            pack(&values, &mut packed);
            packed.push(0xA5);
            let mut r = Reader { buf: &packed, pos: 0 };
            let mut out = Vec::new();
            unpack(&mut r, n, &mut out).unwrap();
            prop_assert_eq!(&out, &values);
            prop_assert_eq!(r.pos, packed.len() - 1);
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut out = Vec::new();
            let _ = decode(&bytes, &mut out);
            // With a valid checksum the body parser itself is exercised.
            let mut body = bytes.clone();
            let crc = crc32fast::hash(&body);
            body.extend_from_slice(&crc.to_be_bytes());
            let _ = decode(&body, &mut out);
        }
    }
}

#[cfg(test)]
mod doc_example {
    use super::*;
    use crate::model::point::Timestamp;
    use crate::model::uid::hex_upper;

    /// The example in docs/format/compressed-column.md.
    #[test]
    fn format_page_example() {
        let base = 1_356_998_400;
        let points: Vec<_> = [50.1, 50.3, 50.2, 50.2, 50.5, 50.4]
            .iter()
            .enumerate()
            .map(|(i, v)| {
                StoredPoint::new(
                    Timestamp::Seconds(base + i as u32 * 10),
                    base,
                    Value::Float(*v),
                )
                .unwrap()
                .0
            })
            .collect();
        let enc = encode(&points);
        let body = &enc[..enc.len() - 4];
        assert_eq!(hex_upper(body), "010600000114000101EA0700030C1C00");
    }
}
