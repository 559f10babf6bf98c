//! OpenTSDB 2.4's `SimpleHistogram`: buckets with float bounds and 64-bit
//! counts plus underflow and overflow counts; its byte form
//! (docs/format/histogram.md), percentiles and the sum of two histograms,
//! with 2.4.1's arithmetic (float bucket midpoints, an `int` bucket sum).

use std::cmp::Ordering;
use std::collections::BTreeMap;

use super::HistogramError;

/// A bucket's bounds, ordered as `Float.compare` orders them (lower bound
/// first, then upper; `-0.0` below `0.0`, NaN above everything).
#[derive(Debug, Clone, Copy)]
pub struct Bucket {
    pub lower: f32,
    pub upper: f32,
}

/// `Float.floatToIntBits`: every NaN is the one canonical NaN.
fn canonical(f: f32) -> f32 {
    if f.is_nan() { f32::NAN } else { f }
}

fn java_float_cmp(a: f32, b: f32) -> Ordering {
    canonical(a).total_cmp(&canonical(b))
}

impl PartialEq for Bucket {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Bucket {}
impl PartialOrd for Bucket {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Bucket {
    fn cmp(&self, o: &Self) -> Ordering {
        java_float_cmp(self.lower, o.lower).then_with(|| java_float_cmp(self.upper, o.upper))
    }
}

/// One histogram as `SimpleHistogram` holds it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SimpleHistogram {
    /// The codec id it was made with (written first when stored).
    pub id: u8,
    pub buckets: BTreeMap<Bucket, i64>,
    pub underflow: i64,
    pub overflow: i64,
}

/// A histogram's byte form reads past its end: what Kryo's `Input`
/// throws (`KryoException`, not an `IllegalArgumentException`).
const UNDERFLOW: &str = "Buffer underflow.";

/// Kryo 2.21 `Output.writeLong(v, true)`: seven bits a byte, low group
/// first, continuation bit 0x80; a ninth byte carries the top eight bits.
fn put_var_long(v: i64, out: &mut Vec<u8>) {
    let mut v = v as u64;
    for _ in 0..8 {
        if v >> 7 == 0 {
            out.push(v as u8);
            return;
        }
        out.push((v as u8 & 0x7F) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

struct Input<'a> {
    b: &'a [u8],
    i: usize,
}

impl Input<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], HistogramError> {
        let s = self
            .b
            .get(self.i..self.i + N)
            .ok_or_else(|| HistogramError::Corrupt(UNDERFLOW.into()))?;
        self.i += N;
        Ok(s.try_into().expect("N bytes"))
    }

    fn var_long(&mut self) -> Result<i64, HistogramError> {
        let mut v = 0u64;
        for k in 0..8 {
            let [b] = self.take::<1>()?;
            v |= ((b & 0x7F) as u64) << (7 * k);
            if b & 0x80 == 0 {
                return Ok(v as i64);
            }
        }
        let [b] = self.take::<1>()?;
        Ok((v | (b as u64) << 56) as i64)
    }

    fn float(&mut self) -> Result<f32, HistogramError> {
        Ok(f32::from_bits(u32::from_be_bytes(self.take::<4>()?)))
    }
}

/// `Bytes.pretty` (asynchbase): printable ASCII as-is, `\n`/`\t` escaped,
/// other bytes `\xNN`, in quotes; or `Arrays.toString` when fewer than
/// half the bytes are printable.
pub(crate) fn bytes_pretty(raw: &[u8]) -> String {
    let mut s = String::from("\"");
    let mut ascii = 0;
    for &b in raw {
        if (b' '..=b'~').contains(&b) {
            ascii += 1;
            s.push(b as char);
        } else if b == b'\n' {
            s.push_str("\\n");
        } else if b == b'\t' {
            s.push_str("\\t");
        } else {
            s.push_str(&format!("\\x{b:02X}"));
        }
    }
    if ascii < raw.len() / 2 {
        return crate::model::uid::java_byte_array(raw);
    }
    s.push('"');
    s
}

impl SimpleHistogram {
    pub fn new(id: u8) -> SimpleHistogram {
        SimpleHistogram {
            id,
            ..SimpleHistogram::default()
        }
    }

    /// `addBucket`: a bucket already present gets the new count.
    pub fn add_bucket(&mut self, lower: f32, upper: f32, count: i64) {
        self.buckets.insert(Bucket { lower, upper }, count);
    }

    /// `histogram(include_id)`: `[id] count:u16 (lower:f32 upper:f32
    /// count:varlong)* underflow:varlong overflow:varlong`, big-endian.
    pub fn encode(&self, include_id: bool) -> Vec<u8> {
        let mut out = Vec::with_capacity(3 + self.buckets.len() * 10 + 4);
        if include_id {
            out.push(self.id);
        }
        // `writeShort(int)` keeps the low 16 bits.
        out.extend_from_slice(&(self.buckets.len() as u16).to_be_bytes());
        for (b, n) in &self.buckets {
            out.extend_from_slice(&canonical(b.lower).to_bits().to_be_bytes());
            out.extend_from_slice(&canonical(b.upper).to_bits().to_be_bytes());
            put_var_long(*n, &mut out);
        }
        put_var_long(self.underflow, &mut out);
        put_var_long(self.overflow, &mut out);
        out
    }

    /// `SimpleHistogramDecoder.decode`: `raw` as [`encode`](Self::encode)
    /// writes it, with the codec id first if `includes_id` (which must
    /// then be `id`). Bytes after the overflow count are ignored, as
    /// Kryo's reader ignores them.
    pub fn decode(
        id: u8,
        raw: &[u8],
        includes_id: bool,
    ) -> Result<SimpleHistogram, HistogramError> {
        if includes_id && raw.is_empty() {
            return Err(HistogramError::Invalid(
                "The data array cannot be empty.".into(),
            ));
        }
        if includes_id && raw[0] as i8 as i32 != id as i32 {
            return Err(HistogramError::Invalid(format!(
                "Data ID {} did not match the codec ID {id}",
                raw[0] as i8
            )));
        }
        if raw.len() < 6 {
            return Err(HistogramError::Invalid(format!(
                "Byte array shorter than 6 bytes detected: {}",
                bytes_pretty(raw)
            )));
        }
        let mut h = SimpleHistogram::new(id);
        let mut input = Input {
            b: raw,
            i: usize::from(includes_id),
        };
        // A signed short: a "negative" count reads no bucket.
        let count = i16::from_be_bytes(input.take::<2>()?);
        for _ in 0..count.max(0) {
            let lower = input.float()?;
            let upper = input.float()?;
            let n = input.var_long()?;
            h.add_bucket(lower, upper, n);
        }
        h.underflow = input.var_long()?;
        h.overflow = input.var_long()?;
        Ok(h)
    }

    /// `percentile(p)`: the midpoint (computed in `float`) of the first
    /// bucket at which the running count reaches `p` percent of all
    /// bucket counts; `-1` for `p` outside [1, 100]; `0` when no bucket
    /// reaches it (no counts at all). As in 2.4.1 the total is an `int`
    /// sum of the counts' low 32 bits, and under- and overflow are left out.
    pub fn percentile(&self, p: f64) -> f64 {
        if !(1.0..=100.0).contains(&p) {
            return -1.0;
        }
        let sum: i32 = self
            .buckets
            .values()
            .fold(0i32, |s, n| s.wrapping_add(*n as i32));
        let mut running: i64 = 0;
        for (b, n) in &self.buckets {
            running = running.wrapping_add(*n as i32 as i64);
            let area = running as f64 * 100.0 / sum as f64;
            if area >= p {
                return ((b.lower + b.upper) / 2.0) as f64;
            }
        }
        0.0
    }

    /// `aggregate(h, SUM)`: counts of equal buckets added, others taken
    /// over; under- and overflow added.
    pub fn add(&mut self, other: &SimpleHistogram) {
        for (b, n) in &other.buckets {
            let e = self.buckets.entry(*b).or_insert(0);
            *e = e.wrapping_add(*n);
        }
        self.underflow = self.underflow.wrapping_add(other.underflow);
        self.overflow = self.overflow.wrapping_add(other.overflow);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TestHistogramDataPointRpc's `test_histo`: 0-1 → 42, 1-5 → 24,
    /// overflow 1, codec id 42.
    fn test_histo() -> SimpleHistogram {
        let mut h = SimpleHistogram::new(42);
        h.add_bucket(0.0, 1.0, 42);
        h.add_bucket(1.0, 5.0, 24);
        h.overflow = 1;
        h
    }

    #[test]
    fn bytes_as_kryo_writes_them() {
        let h = test_histo();
        assert_eq!(
            h.encode(true),
            [
                42, 0, 2, 0, 0, 0, 0, 0x3F, 0x80, 0, 0, 42, 0x3F, 0x80, 0, 0, 0x40, 0xA0, 0, 0, 24,
                0, 1
            ]
        );
        assert_eq!(h.encode(false), h.encode(true)[1..]);
        assert_eq!(
            SimpleHistogram::decode(42, &h.encode(true), true).unwrap(),
            h
        );
        assert_eq!(
            SimpleHistogram::decode(42, &h.encode(false), false).unwrap(),
            h
        );
    }

    #[test]
    fn var_longs_round_trip() {
        for v in [0i64, 1, 127, 128, 300, 1 << 40, i64::MAX, -1, i64::MIN] {
            let mut b = Vec::new();
            put_var_long(v, &mut b);
            assert!(b.len() <= 9);
            assert_eq!(Input { b: &b, i: 0 }.var_long().unwrap(), v);
        }
        let mut b = Vec::new();
        put_var_long(300, &mut b);
        assert_eq!(b, [0xAC, 0x02]);
    }

    #[test]
    fn short_and_corrupt_bytes() {
        let raw = test_histo().encode(false);
        // The RPC test's base64 cut to 4 characters: 3 bytes.
        let e = SimpleHistogram::decode(42, &raw[..3], false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Byte array shorter than 6 bytes detected: [0, 2, 0]"
        );
        let e = SimpleHistogram::decode(42, &raw[..6], false).unwrap_err();
        assert_eq!(e.to_string(), "Buffer underflow.");
        assert!(matches!(e, HistogramError::Corrupt(_)));
        let e = SimpleHistogram::decode(42, &[1, 0, 0, 0, 0, 0], true).unwrap_err();
        assert_eq!(e.to_string(), "Data ID 1 did not match the codec ID 42");
    }

    /// TestSimpleHistogram's percentile cases.
    #[test]
    fn percentiles() {
        let h = test_histo();
        assert_eq!(h.percentile(50.0), 0.5);
        assert_eq!(h.percentile(99.0), 3.0);
        assert_eq!(h.percentile(0.5), -1.0);
        assert_eq!(h.percentile(100.5), -1.0);
        assert_eq!(SimpleHistogram::new(0).percentile(50.0), 0.0);
        let mut z = SimpleHistogram::new(0);
        z.add_bucket(0.0, 1.0, 0);
        assert_eq!(z.percentile(50.0), 0.0);
    }

    /// TestSimpleHistogram.testSinglePercentile and testPercentileList.
    #[test]
    fn percentiles_of_the_codec_tests() {
        let mut h = SimpleHistogram::new(0);
        h.add_bucket(1.0, 6.0, 5);
        h.add_bucket(6.0, 10.0, 10);
        h.add_bucket(10.0, 20.0, 1);
        h.overflow = 5;
        let h = SimpleHistogram::decode(0, &h.encode(false), false).unwrap();
        assert_eq!(h.percentile(50.0), 8.0);
        assert_eq!(h.percentile(1000.0), -1.0);
        let mut h = h.clone();
        h.add_bucket(20.0, 40.0, 0);
        assert_eq!(h.percentile(50.0), 8.0);
        assert_eq!(h.percentile(99.0), 15.0);
    }

    #[test]
    fn sums() {
        let mut a = test_histo();
        let mut b = SimpleHistogram::new(42);
        b.add_bucket(1.0, 5.0, 6);
        b.add_bucket(5.0, 10.0, 3);
        b.underflow = 2;
        a.add(&b);
        assert_eq!(a.buckets.len(), 3);
        assert_eq!(
            a.buckets[&Bucket {
                lower: 1.0,
                upper: 5.0
            }],
            30
        );
        assert_eq!((a.underflow, a.overflow), (2, 1));
    }
}
