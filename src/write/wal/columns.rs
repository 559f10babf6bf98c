//! The columnar body of a `07` record (docs/format/wal.md): a batch of
//! series definitions and points laid out by series, with times and
//! values delta-coded, so that zstd, which then compresses the body, sees
//! runs of small, alike bytes instead of 16-byte point records. A point
//! costs about a quarter of what the same records cost compressed as they
//! are (`05`). Pure functions over bytes, like [`super::record`].

use std::collections::HashMap;

use super::record::{Record, decode_records, encode_series, point_record};
use crate::codec::compressed::{MAX_DECIMALS, decimal_scale};
use crate::codec::varint::{self, unzigzag, zigzag};
use crate::model::point::Value;

/// A series' values are all integers: zigzag deltas follow.
const VALUES_INT: u8 = 0;
/// All floats `m / 10^e` for integers `m`: `e`, then zigzag deltas of `m`.
const VALUES_DECIMAL: u8 = 1;
/// Anything else: per point `0` and a zigzag integer, or `1` and the
/// float's 8 bytes (little-endian IEEE-754).
const VALUES_MIXED: u8 = 2;
const MIXED_INT: u8 = 0;
const MIXED_FLOAT: u8 = 1;

/// One series' points in a batch, in the order they were logged.
struct Group {
    id: u32,
    raw_ts: Vec<u64>,
    values: Vec<Value>,
}

/// Appends the columnar body of `records` to `out`. `false` (with `out`
/// as it was) when a record cannot be laid out by series: a delete or a
/// histogram, whose place among the points replay depends on.
pub(super) fn encode(records: &[Record], out: &mut Vec<u8>) -> bool {
    let start = out.len();
    let mut series = Vec::new();
    let mut groups: Vec<Group> = Vec::new();
    let mut index: HashMap<u32, usize> = HashMap::new();
    for r in records {
        let (id, raw_ts, value) = match r {
            Record::Series { id, metric, tags } => {
                encode_series(&mut series, *id, metric, tags.iter().map(|(k, v)| (k, v)));
                continue;
            }
            Record::Point { id, ts, value } => (*id, ts.raw(), *value),
            Record::UnstorablePoint { id, raw_ts, value } => (*id, *raw_ts, *value),
            Record::Histogram { .. } | Record::Delete { .. } => {
                out.truncate(start);
                return false;
            }
        };
        let g = *index.entry(id).or_insert_with(|| {
            groups.push(Group {
                id,
                raw_ts: Vec::new(),
                values: Vec::new(),
            });
            groups.len() - 1
        });
        groups[g].raw_ts.push(raw_ts);
        groups[g].values.push(value);
    }
    let base = groups.first().map_or(0, |g| g.raw_ts[0]);
    let (mut heads, mut times, mut values) = (Vec::new(), Vec::new(), Vec::new());
    let mut prev_id = 0i64;
    for g in &groups {
        varint::put(zigzag(i64::from(g.id) - prev_id), &mut heads);
        prev_id = i64::from(g.id);
        varint::put(g.raw_ts.len() as u64, &mut heads);
        encode_times(&g.raw_ts, base, &mut times);
        encode_values(&g.values, &mut values);
    }
    put_section(out, &series);
    varint::put(groups.len() as u64, out);
    varint::put(base, out);
    put_section(out, &heads);
    put_section(out, &times);
    put_section(out, &values);
    true
}

fn put_section(out: &mut Vec<u8>, section: &[u8]) {
    varint::put(section.len() as u64, out);
    out.extend_from_slice(section);
}

/// The first time as a difference from the batch's first, then each as
/// the change of the step from the one before (a regular series: zeros).
/// Wrapping arithmetic on the raw times, so every `u64` round-trips.
fn encode_times(raw: &[u64], base: u64, out: &mut Vec<u8>) {
    let mut prev = base as i64;
    let mut step = 0i64;
    for &t in raw {
        let d = (t as i64).wrapping_sub(prev);
        varint::put(zigzag(d.wrapping_sub(step)), out);
        step = d;
        prev = t as i64;
    }
    // The first point's "step" is its distance from `base`, not a step
    // of the series: the second point's step is coded from it as well,
    // which costs a byte or two once per series and batch.
}

fn encode_values(values: &[Value], out: &mut Vec<u8>) {
    let ints: Option<Vec<i64>> = values
        .iter()
        .map(|v| match v {
            Value::Int(i) => Some(*i),
            Value::Float(_) => None,
        })
        .collect();
    if let Some(ints) = ints {
        out.push(VALUES_INT);
        put_deltas(&ints, out);
        return;
    }
    let floats: Option<Vec<f64>> = values
        .iter()
        .map(|v| match v {
            Value::Float(f) => Some(*f),
            Value::Int(_) => None,
        })
        .collect();
    if let Some((e, mantissas)) = floats.as_deref().and_then(decimal_scale) {
        out.push(VALUES_DECIMAL);
        out.push(e as u8);
        put_deltas(&mantissas, out);
        return;
    }
    out.push(VALUES_MIXED);
    for v in values {
        match v {
            Value::Int(i) => {
                out.push(MIXED_INT);
                varint::put(zigzag(*i), out);
            }
            Value::Float(f) => {
                out.push(MIXED_FLOAT);
                out.extend_from_slice(&f.to_bits().to_le_bytes());
            }
        }
    }
}

fn put_deltas(ints: &[i64], out: &mut Vec<u8>) {
    let mut prev = 0i64;
    for &i in ints {
        varint::put(zigzag(i.wrapping_sub(prev)), out);
        prev = i;
    }
}

struct Reader<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Option<u64> {
        varint::get(self.b, &mut self.i)
    }

    fn byte(&mut self) -> Option<u8> {
        let v = *self.b.get(self.i)?;
        self.i += 1;
        Some(v)
    }

    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.i..self.i.checked_add(n)?)?;
        self.i += n;
        Some(s)
    }

    fn section(&mut self) -> Option<Reader<'a>> {
        let n = usize::try_from(self.varint()?).ok()?;
        Some(Reader {
            b: self.bytes(n)?,
            i: 0,
        })
    }

    fn done(&self) -> bool {
        self.i == self.b.len()
    }
}

/// Decodes a columnar body onto `out`: the series definitions, then each
/// series' points in the order they were logged. `None` if any byte is
/// out of place (the caller drops the whole frame).
pub(super) fn decode(body: &[u8], out: &mut Vec<Record>) -> Option<()> {
    let mut r = Reader { b: body, i: 0 };
    let series = r.section()?;
    let before = out.len();
    decode_records(series.b, out)?;
    if !out[before..]
        .iter()
        .all(|rec| matches!(rec, Record::Series { .. }))
    {
        return None;
    }
    let groups = r.varint()?;
    let base = r.varint()?;
    let mut heads = r.section()?;
    let mut times = r.section()?;
    let mut values = r.section()?;
    if !r.done() {
        return None;
    }
    let mut id = 0i64;
    for _ in 0..groups {
        id = id.wrapping_add(unzigzag(heads.varint()?));
        let id = u32::try_from(id).ok()?;
        let n = heads.varint()?;
        // Every point takes at least a byte of times: a corrupt count
        // must not reserve gigabytes.
        if n > (times.b.len() - times.i) as u64 {
            return None;
        }
        let mut prev = base as i64;
        let mut step = 0i64;
        let mut raw_ts = Vec::with_capacity(n as usize);
        for _ in 0..n {
            step = step.wrapping_add(unzigzag(times.varint()?));
            prev = prev.wrapping_add(step);
            raw_ts.push(prev as u64);
        }
        decode_values(&mut values, &raw_ts, |raw_ts, value| {
            out.push(point_record(id, raw_ts, value))
        })?;
    }
    (heads.done() && times.done() && values.done()).then_some(())
}

/// Decodes the values of the points at `raw_ts`, handing each point to
/// `point`.
fn decode_values(
    r: &mut Reader<'_>,
    raw_ts: &[u64],
    mut point: impl FnMut(u64, Value),
) -> Option<()> {
    let kind = r.byte()?;
    let scale = match kind {
        VALUES_INT => None,
        VALUES_DECIMAL => {
            let e = u32::from(r.byte()?);
            if e > MAX_DECIMALS {
                return None;
            }
            Some(10f64.powi(e as i32))
        }
        VALUES_MIXED => {
            for &t in raw_ts {
                let v = match r.byte()? {
                    MIXED_INT => Value::Int(unzigzag(r.varint()?)),
                    MIXED_FLOAT => Value::Float(f64::from_bits(u64::from_le_bytes(
                        r.bytes(8)?.try_into().ok()?,
                    ))),
                    _ => return None,
                };
                point(t, v);
            }
            return Some(());
        }
        _ => return None,
    };
    let mut prev = 0i64;
    for &t in raw_ts {
        prev = prev.wrapping_add(unzigzag(r.varint()?));
        // As the compressed column decodes it (codec::compressed), which
        // is what `decimal_scale` checked every value round-trips through.
        point(
            t,
            match scale {
                None => Value::Int(prev),
                Some(scale) => Value::Float(prev as f64 / scale),
            },
        );
    }
    Some(())
}
