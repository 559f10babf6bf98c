//! The columnar body of a `08` record (and of the `07` records format 5
//! wrote; docs/format/wal.md): a batch of series definitions and points
//! laid out by series, with times delta-coded and values bit-packed as
//! the compressed column packs them, so that a point's value costs about
//! what it costs in a row, and zstd, which then compresses the body, sees
//! runs of small, alike bytes in the rest. Pure functions over bytes,
//! like [`super::record`], which is below it; [`super::frame`] compresses
//! the body and frames it.

use super::record::{Record, RecordRef, decode_records, point_record, walk_records};
use crate::codec::compressed::{MAX_DECIMALS, decimal_scale_into, pack_stream, unpack_stream};
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

/// Which body a columnar record holds: they differ only in how values
/// are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Body {
    /// Record `07` (format 5): per group a kind, then zigzag varints of
    /// the value deltas. Read, no longer written.
    Varints,
    /// Record `08` (format 6): per group a kind byte and its first value;
    /// the rest of the values bit-packed, one stream per kind.
    Packed,
}

/// `08` kind byte: a decimal group (`m / 10^e`, `e` in the low nibble);
/// without it, integers (low nibble 0).
const KIND_DECIMAL: u8 = 0x10;
/// `08` kind byte: the stream holds delta-of-deltas (a counter's steps
/// change less than its values), not deltas.
const KIND_DOD: u8 = 0x20;
/// `08` kind byte: anything else, written as `07`'s mixed values.
const KIND_MIXED: u8 = 0x40;
/// Streams of an `08` body: integers by deltas, by delta-of-deltas, then
/// decimals of each `e` by deltas, then by delta-of-deltas.
const STREAMS: usize = 2 + 2 * (MAX_DECIMALS as usize + 1);

/// The stream a kind byte's values go to, or `None` if no writer makes
/// that kind byte (or it is [`KIND_MIXED`], which has none).
fn stream_of(kind: u8) -> Option<usize> {
    let e = usize::from(kind & 0x0F);
    let dod = usize::from(kind & KIND_DOD != 0);
    match kind & !(KIND_DOD | 0x0F) {
        0 if e == 0 => Some(dod),
        KIND_DECIMAL if e <= MAX_DECIMALS as usize => {
            Some(2 + dod * (MAX_DECIMALS as usize + 1) + e)
        }
        _ => None,
    }
}

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
    /// `08` sections: kind bytes, first values, the packed streams (its
    /// mixed values go in `value_bytes`).
    kinds: Vec<u8>,
    firsts: Vec<u8>,
    packed: Vec<u8>,
    /// `08` streams, by [`stream_of`].
    streams: Vec<Vec<u64>>,
}

impl Layout {
    /// Appends the `08` body of the records in `payload` (plain records
    /// back to back, as appenders encode them) to `out`. `false` (with
    /// `out` as it was) when a record does not decode, or cannot be laid
    /// out by series: a delete or a histogram, whose place among the
    /// points replay depends on.
    pub(super) fn encode(&mut self, payload: &[u8], out: &mut Vec<u8>) -> bool {
        self.encode_as(Body::Packed, payload, out)
    }

    /// The body of either record, so that tests can write what format 5
    /// wrote and check it is still read.
    pub(super) fn encode_as(&mut self, body: Body, payload: &[u8], out: &mut Vec<u8>) -> bool {
        if !self.group(payload) {
            return false;
        }
        let base = self.raw_ts.first().copied().unwrap_or(0);
        self.heads.clear();
        self.times.clear();
        let mut prev_id = 0i64;
        let mut from = 0usize;
        for &(id, n) in &self.groups {
            let to = from + n as usize;
            varint::put(zigzag(i64::from(id) - prev_id), &mut self.heads);
            prev_id = i64::from(id);
            varint::put(u64::from(n), &mut self.heads);
            encode_times(&self.grouped_ts[from..to], base, &mut self.times);
            from = to;
        }
        put_section(out, &self.series);
        varint::put(self.groups.len() as u64, out);
        varint::put(base, out);
        put_section(out, &self.heads);
        put_section(out, &self.times);
        match body {
            Body::Varints => {
                self.value_bytes.clear();
                let mut from = 0usize;
                for &(_, n) in &self.groups {
                    let to = from + n as usize;
                    encode_values(
                        &self.grouped_values[from..to],
                        &mut self.floats,
                        &mut self.mantissas,
                        &mut self.value_bytes,
                    );
                    from = to;
                }
                put_section(out, &self.value_bytes);
            }
            Body::Packed => self.put_packed_values(out),
        }
        if self.raw_ts.capacity() > KEEP_POINTS {
            // A rare huge batch (a backlog written at once) does not pin
            // its scratch space for the life of the log.
            *self = Layout::default();
        }
        true
    }

    /// Reads the records of `payload` into the grouped arrays; `false`
    /// when a record does not decode or is not a definition or a point.
    fn group(&mut self, payload: &[u8]) -> bool {
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
        true
    }

    /// The values sections of an `08` body: each group's kind byte, its
    /// first value (and first step), the rest bit-packed by kind, and
    /// mixed groups' values as they are.
    fn put_packed_values(&mut self, out: &mut Vec<u8>) {
        self.kinds.clear();
        self.firsts.clear();
        self.value_bytes.clear();
        self.streams.resize_with(STREAMS, Vec::new);
        self.streams.iter_mut().for_each(Vec::clear);
        // A group's first value is coded from the first of the group of
        // its kind before it: a counter's first values in a batch are
        // close to one another.
        let mut last_first = [0i64; STREAMS];
        let mut from = 0usize;
        for &(_, n) in &self.groups {
            let to = from + n as usize;
            let values = &self.grouped_values[from..to];
            from = to;
            let Some(kind) = integers_of(values, &mut self.floats, &mut self.mantissas) else {
                self.kinds.push(KIND_MIXED);
                put_mixed(values, &mut self.value_bytes);
                continue;
            };
            let ints = &self.mantissas;
            let dod = prefers_dod(ints);
            let kind = if dod { kind | KIND_DOD } else { kind };
            self.kinds.push(kind);
            let s = stream_of(kind).expect("a kind this writer makes");
            varint::put(
                zigzag(ints[0].wrapping_sub(last_first[s])),
                &mut self.firsts,
            );
            last_first[s] = ints[0];
            let stream = &mut self.streams[s];
            if dod {
                let mut step = ints[1].wrapping_sub(ints[0]);
                varint::put(zigzag(step), &mut self.firsts);
                for w in ints[1..].windows(2) {
                    let next = w[1].wrapping_sub(w[0]);
                    stream.push(zigzag(next.wrapping_sub(step)));
                    step = next;
                }
            } else {
                stream.extend(ints.windows(2).map(|w| zigzag(w[1].wrapping_sub(w[0]))));
            }
        }
        self.packed.clear();
        for stream in &self.streams {
            pack_stream(stream, &mut self.packed);
        }
        put_section(out, &self.kinds);
        put_section(out, &self.firsts);
        put_section(out, &self.packed);
        put_section(out, &self.value_bytes);
    }
}

/// A group's values as integers into `ints` (decimal floats scaled by
/// the compressed column's rule), with their kind byte; `None` for a
/// group that mixes integers and floats or holds other floats.
fn integers_of(values: &[Value], floats: &mut Vec<f64>, ints: &mut Vec<i64>) -> Option<u8> {
    ints.clear();
    ints.extend(values.iter().map_while(|v| match v {
        Value::Int(i) => Some(*i),
        Value::Float(_) => None,
    }));
    if ints.len() == values.len() {
        return Some(0);
    }
    floats.clear();
    floats.extend(values.iter().map_while(|v| match v {
        Value::Float(f) => Some(*f),
        Value::Int(_) => None,
    }));
    if floats.len() != values.len() {
        return None;
    }
    decimal_scale_into(floats, ints).map(|e| KIND_DECIMAL | e as u8)
}

/// Whether a group's integers pack smaller as delta-of-deltas (after a
/// first step kept with its first value) than as deltas, judged by the
/// widest of each: counters, whose steps wander less than their values.
fn prefers_dod(ints: &[i64]) -> bool {
    if ints.len() < 3 {
        return false;
    }
    let first_step = ints[1].wrapping_sub(ints[0]);
    let (mut deltas, mut dods) = (zigzag(first_step), 0u64);
    let mut step = first_step;
    for w in ints[1..].windows(2) {
        let next = w[1].wrapping_sub(w[0]);
        deltas |= zigzag(next);
        dods |= zigzag(next.wrapping_sub(step));
        step = next;
    }
    let bits = |v: u64| u64::from(64 - v.leading_zeros());
    let n = ints.len() as u64;
    let varint_bits = 8 * bits(zigzag(first_step)).div_ceil(7).max(1);
    (n - 2) * bits(dods) + varint_bits < (n - 1) * bits(deltas)
}

/// The records the writer thread lets pile up before it writes them as
/// one batch, unless a `sync` writer or the flush interval comes first.
///
/// A batch is the unit the log is compressed in: what it spends per
/// series it holds (each series' first value, time and head) is spread
/// over that series' points in the batch. Over `/api/put` several
/// connections take turns request by request, so a batch holds nearly
/// every series with few points each: 4 MiB (about 250,000 points) gives
/// each about 4 times the points 1 MiB did, and the log 15 % fewer bytes
/// (docs/durability.md, "The write batch"). What it costs: a process crash
/// loses at most this much, or a flush interval, of acknowledged non-`sync`
/// points (they were never promised durable; `sync` puts still wait for
/// their fdatasync), and the writer keeps about 5 such buffers.
pub(super) const BATCH_BYTES: usize = 4 << 20;

/// The points a [`Layout`] keeps room for between batches: the most a
/// batch the writer wakes for can hold (a point record takes at least 8
/// bytes).
const KEEP_POINTS: usize = BATCH_BYTES / 8;

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

/// One series' values in a `07` body: all integers, all decimals of one
/// scale, or mixed. `floats` and `mantissas` are scratch space.
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
    put_mixed(values, out);
}

/// Values of any kinds, each with its own: `00` and a zigzag integer, or
/// `01` and the float's 8 bytes.
fn put_mixed(values: &[Value], out: &mut Vec<u8>) {
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

#[derive(Clone)]
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

/// Decodes a columnar body of either kind onto `out`: the series
/// definitions, then each series' points in the order they were logged.
/// `None` if any byte is out of place (the caller drops the whole frame).
pub(super) fn decode(kind: Body, body: &[u8], out: &mut Vec<Record>) -> Option<()> {
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
    let mut values = match kind {
        Body::Varints => Values::Varints(r.section()?),
        Body::Packed => Values::Packed(Box::new(Packed::read(
            &mut r,
            heads.clone(),
            groups,
            times.b.len(),
        )?)),
    };
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
        let point = |raw_ts, value| out.push(point_record(id, raw_ts, value));
        match &mut values {
            Values::Varints(values) => decode_values(values, &raw_ts, point)?,
            Values::Packed(values) => values.group(&raw_ts, point)?,
        }
    }
    let values_done = match &values {
        Values::Varints(values) => values.done(),
        Values::Packed(values) => values.done(),
    };
    (heads.done() && times.done() && values_done).then_some(())
}

/// Where a body's values are read from.
enum Values<'a> {
    Varints(Reader<'a>),
    /// Boxed: its stream cursors are a few hundred bytes, read once a
    /// frame.
    Packed(Box<Packed<'a>>),
}

/// The values sections of an `08` body, with its streams unpacked.
struct Packed<'a> {
    kinds: Reader<'a>,
    firsts: Reader<'a>,
    mixed: Reader<'a>,
    /// Every stream's values, one stream after another.
    values: Vec<u64>,
    /// Per stream: its next value in `values`, and its end.
    at: [usize; STREAMS],
    end: [usize; STREAMS],
    /// Per stream: the first value of its last group.
    last_first: [i64; STREAMS],
}

impl<'a> Packed<'a> {
    /// Reads the sections after `times`, unpacking the streams: their
    /// lengths follow from each group's kind and number of points (read
    /// from a copy of `heads`). `points_bound` caps the points a body
    /// can hold (one byte of times each), so a corrupt count cannot
    /// reserve gigabytes.
    fn read(
        r: &mut Reader<'a>,
        mut heads: Reader<'a>,
        groups: u64,
        points_bound: usize,
    ) -> Option<Packed<'a>> {
        let kinds = r.section()?;
        let firsts = r.section()?;
        let mut packed = r.section()?;
        let mixed = r.section()?;
        let mut len = [0usize; STREAMS];
        let mut points = 0usize;
        for g in 0..groups {
            heads.varint()?;
            let n = usize::try_from(heads.varint()?).ok()?;
            points = points.checked_add(n)?;
            if points > points_bound {
                return None;
            }
            let kind = *kinds.b.get(usize::try_from(g).ok()?)?;
            if kind != KIND_MIXED {
                let s = stream_of(kind)?;
                len[s] += n.saturating_sub(if kind & KIND_DOD != 0 { 2 } else { 1 });
            }
        }
        let mut values = Vec::with_capacity(len.iter().sum());
        let (mut at, mut end) = ([0usize; STREAMS], [0usize; STREAMS]);
        for s in 0..STREAMS {
            at[s] = values.len();
            unpack_stream(packed.b, &mut packed.i, len[s], |v| values.push(v)).ok()?;
            end[s] = values.len();
        }
        packed.done().then_some(Packed {
            kinds,
            firsts,
            mixed,
            values,
            at,
            end,
            last_first: [0; STREAMS],
        })
    }

    /// Decodes the values of the next group's points, at `raw_ts`,
    /// handing each point to `point`.
    fn group(&mut self, raw_ts: &[u64], mut point: impl FnMut(u64, Value)) -> Option<()> {
        let kind = self.kinds.byte()?;
        if kind == KIND_MIXED {
            return decode_mixed(&mut self.mixed, raw_ts, point);
        }
        let s = stream_of(kind)?;
        let (&t0, rest) = raw_ts.split_first()?;
        let scale = (kind & KIND_DECIMAL != 0).then(|| 10f64.powi(i32::from(kind & 0x0F)));
        // As the compressed column decodes it (codec::compressed), which
        // is what `decimal_scale` checked every value round-trips through.
        let value = |m: i64| match scale {
            None => Value::Int(m),
            Some(scale) => Value::Float(m as f64 / scale),
        };
        let mut cur = self.last_first[s].wrapping_add(unzigzag(self.firsts.varint()?));
        self.last_first[s] = cur;
        point(t0, value(cur));
        let next = |at: &mut usize| {
            let v = (*at < self.end[s]).then(|| self.values[*at])?;
            *at += 1;
            Some(unzigzag(v))
        };
        if kind & KIND_DOD != 0 {
            let Some((&t1, rest)) = rest.split_first() else {
                return Some(());
            };
            let mut step = unzigzag(self.firsts.varint()?);
            cur = cur.wrapping_add(step);
            point(t1, value(cur));
            for &t in rest {
                step = step.wrapping_add(next(&mut self.at[s])?);
                cur = cur.wrapping_add(step);
                point(t, value(cur));
            }
        } else {
            for &t in rest {
                cur = cur.wrapping_add(next(&mut self.at[s])?);
                point(t, value(cur));
            }
        }
        Some(())
    }

    fn done(&self) -> bool {
        self.kinds.done() && self.firsts.done() && self.mixed.done() && self.at == self.end
    }
}

/// Decodes values written by [`put_mixed`] for the points at `raw_ts`.
fn decode_mixed(
    r: &mut Reader<'_>,
    raw_ts: &[u64],
    mut point: impl FnMut(u64, Value),
) -> Option<()> {
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
    Some(())
}

/// Decodes the values of the points at `raw_ts` in a `07` body, handing
/// each point to `point`.
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
        VALUES_MIXED => return decode_mixed(r, raw_ts, point),
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
