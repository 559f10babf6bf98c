//! The columnar body of a `07` record (docs/format/wal.md): a batch of
//! series definitions and points laid out by series, with times and
//! values delta-coded, so that zstd, which then compresses the body, sees
//! runs of small, alike bytes instead of 16-byte point records. A point
//! costs about a quarter of what the same records cost compressed as they
//! are (`05`). Pure functions over bytes, like [`super::record`].

use super::record::{Record, RecordRef, decode_records, point_record, walk_records};
use crate::codec::compressed::{MAX_DECIMALS, decimal_scale_into};
use crate::codec::varint::{self, unzigzag, zigzag};
use crate::model::hash::FastMap;
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

/// Lays batches out by series, keeping its scratch space from one batch
/// to the next: the WAL writer lays out every batch it writes, so a
/// vector per series or per batch (and a map of series that forgets its
/// size) would cost more than the layout itself.
#[derive(Default)]
pub(super) struct Layout {
    /// The series definitions, as logged.
    series: Vec<u8>,
    /// Group of each point (series, in the order first seen), its time
    /// as logged and value, in log order.
    group_of: Vec<u32>,
    raw_ts: Vec<u64>,
    values: Vec<Value>,
    /// Per group: the series id and its number of points.
    groups: Vec<(u32, u32)>,
    group_by_id: FastMap<u32, u32>,
    /// The points again, grouped: each group's in log order.
    grouped_ts: Vec<u64>,
    grouped_values: Vec<Value>,
    /// Where each group's next point goes in the grouped arrays.
    next: Vec<u32>,
    heads: Vec<u8>,
    times: Vec<u8>,
    value_bytes: Vec<u8>,
    floats: Vec<f64>,
    mantissas: Vec<i64>,
}

impl Layout {
    /// Appends the columnar body of the records in `payload` (plain
    /// records back to back, as appenders encode them) to `out`. `false`
    /// (with `out` as it was) when a record does not decode, or cannot be
    /// laid out by series: a delete or a histogram, whose place among the
    /// points replay depends on.
    pub(super) fn encode(&mut self, payload: &[u8], out: &mut Vec<u8>) -> bool {
        self.series.clear();
        self.group_of.clear();
        self.raw_ts.clear();
        self.values.clear();
        self.groups.clear();
        self.group_by_id.clear();
        let mut by_series = true;
        let decoded = walk_records(payload, |r| match r {
            RecordRef::Series { bytes, .. } => self.series.extend_from_slice(bytes),
            RecordRef::Point { id, raw_ts, value } => {
                let groups = &mut self.groups;
                let g = *self.group_by_id.entry(id).or_insert_with(|| {
                    groups.push((id, 0));
                    groups.len() as u32 - 1
                });
                self.groups[g as usize].1 += 1;
                self.group_of.push(g);
                self.raw_ts.push(raw_ts);
                self.values.push(value);
            }
            RecordRef::Histogram { .. } | RecordRef::Delete { .. } => by_series = false,
        });
        if decoded.is_none() || !by_series {
            return false;
        }
        // Each group's points, in log order, one group after another.
        self.next.clear();
        let mut at = 0u32;
        for &(_, n) in &self.groups {
            self.next.push(at);
            at += n;
        }
        self.grouped_ts.clear();
        self.grouped_ts.resize(self.raw_ts.len(), 0);
        self.grouped_values.clear();
        self.grouped_values.resize(self.values.len(), Value::Int(0));
        for (i, &g) in self.group_of.iter().enumerate() {
            let to = &mut self.next[g as usize];
            self.grouped_ts[*to as usize] = self.raw_ts[i];
            self.grouped_values[*to as usize] = self.values[i];
            *to += 1;
        }
        let base = self.raw_ts.first().copied().unwrap_or(0);
        self.heads.clear();
        self.times.clear();
        self.value_bytes.clear();
        let mut prev_id = 0i64;
        let mut from = 0usize;
        for &(id, n) in &self.groups {
            let to = from + n as usize;
            varint::put(zigzag(i64::from(id) - prev_id), &mut self.heads);
            prev_id = i64::from(id);
            varint::put(u64::from(n), &mut self.heads);
            encode_times(&self.grouped_ts[from..to], base, &mut self.times);
            encode_values(
                &self.grouped_values[from..to],
                &mut self.floats,
                &mut self.mantissas,
                &mut self.value_bytes,
            );
            from = to;
        }
        put_section(out, &self.series);
        varint::put(self.groups.len() as u64, out);
        varint::put(base, out);
        put_section(out, &self.heads);
        put_section(out, &self.times);
        put_section(out, &self.value_bytes);
        if self.raw_ts.capacity() > KEEP_POINTS {
            // A rare huge batch (a backlog written at once) does not pin
            // its scratch space for the life of the log.
            *self = Layout::default();
        }
        true
    }
}

/// The points a [`Layout`] keeps room for between batches: several
/// times a batch the writer wakes for (1 MiB of log).
const KEEP_POINTS: usize = 256 << 10;

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

/// One series' values: all integers, all decimals of one scale, or
/// mixed. `floats` and `mantissas` are scratch space.
fn encode_values(
    values: &[Value],
    floats: &mut Vec<f64>,
    mantissas: &mut Vec<i64>,
    out: &mut Vec<u8>,
) {
    let int = |v: &Value| match v {
        Value::Int(i) => Some(*i),
        Value::Float(_) => None,
    };
    if values.iter().all(|v| int(v).is_some()) {
        out.push(VALUES_INT);
        put_deltas(values.iter().filter_map(int), out);
        return;
    }
    floats.clear();
    floats.extend(values.iter().map_while(|v| match v {
        Value::Float(f) => Some(*f),
        Value::Int(_) => None,
    }));
    if floats.len() == values.len()
        && let Some(e) = decimal_scale_into(floats, mantissas)
    {
        out.push(VALUES_DECIMAL);
        out.push(e as u8);
        put_deltas(mantissas.iter().copied(), out);
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

fn put_deltas(ints: impl Iterator<Item = i64>, out: &mut Vec<u8>) {
    let mut prev = 0i64;
    for i in ints {
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
