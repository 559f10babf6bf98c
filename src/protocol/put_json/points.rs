//! The points of a `/api/put` body, decoded into a compact buffer
//! ([`DecodedPoints`]) as they are read, and read back a batch at a time
//! ([`Batch`] of [`PointView`]s): the names and tag sets of a series
//! stored once while they recur, numbers as varints (`codec::varint`).

use crate::codec::varint;

use super::point::{BadBody, JsonPoint, value_text};

/// A point as the client wrote it, borrowed from [`DecodedPoints`]: what
/// the checks and the `details` of an answer need.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PointView<'a> {
    /// `None`: null or absent.
    pub metric: Option<&'a str>,
    pub timestamp: i64,
    /// The value's text as Jackson coerces it into a `String`.
    pub value: Option<&'a str>,
    /// Where its tags are in the batch; `None`: null or absent.
    tags: Option<(usize, usize)>,
}

/// One tag as written: a null value is `None`.
pub(crate) type TagView<'a> = (&'a str, Option<&'a str>);

/// Points read back from [`DecodedPoints`], a batch at a time.
#[derive(Default)]
pub(crate) struct Batch<'a> {
    pub points: Vec<PointView<'a>>,
    tags: Vec<TagView<'a>>,
}

impl PointView<'_> {
    /// Where its tags are in its batch: points of a batch with the same
    /// place have the same tags (`None`: no tags).
    pub(crate) fn tag_set(&self) -> Option<(usize, usize)> {
        self.tags
    }
}

impl<'a> Batch<'a> {
    /// The tags of `p`, a point of this batch, in the order written.
    pub(crate) fn tags(&self, p: &PointView<'a>) -> Option<&[TagView<'a>]> {
        p.tags.map(|(from, to)| &self.tags[from..to])
    }
}

/// Where reading [`DecodedPoints`] back has got to.
#[derive(Default)]
pub(crate) struct Cursor {
    record: usize,
    value: usize,
    timestamp: i64,
    metric: (usize, usize),
    set: usize,
}

// How each field of a record refers to its data.
const ABSENT: u8 = 0;
const SAME: u8 = 1;
const NEW: u8 = 2;

/// Slots in each table of recently seen names and tag sets.
const RECENT: usize = 1024;

/// The points of a body, compact: one record of a few bytes per point
/// (a varint timestamp delta, references to its metric name and tag set,
/// its value's length), the names and tag sets each stored once while
/// they recur within the last [`RECENT`] distinct ones.
#[derive(Default)]
pub(crate) struct DecodedPoints {
    /// Metric names, tag names and tag values.
    pub(super) text: String,
    /// Value texts, one after another.
    values: String,
    /// Tag sets: a count, then per tag the key's and value's place in
    /// `text` (a value flagged absent or present), all varints.
    sets: Vec<u8>,
    /// Per point: timestamp delta (zigzag varint), metric, value, tags.
    pub(super) records: Vec<u8>,
    len: usize,
    last_timestamp: i64,
    last_metric: Option<(usize, usize)>,
    last_set: Option<usize>,
    /// The text of the tags of the last point that had tags, as written,
    /// if it was read with it (see [`DecodedPoints::push_fields`]).
    last_written_set: Vec<u8>,
    recent_text: Recent,
    recent_sets: Recent,
    scratch: Vec<u8>,
}

/// A two-way set-associative table of recently stored byte strings:
/// (hash, offset, length). Two ways, so that two strings that recur
/// together and share a set do not keep evicting each other.
#[derive(Default)]
struct Recent(Vec<Option<(u64, usize, usize)>>);

impl Recent {
    /// Where `bytes` is in `store` if it was stored there recently; else
    /// the set to [`Recent::remember`] it in once stored.
    fn find(&mut self, store: &[u8], bytes: &[u8]) -> Result<usize, (usize, u64)> {
        if self.0.is_empty() {
            self.0 = vec![None; RECENT];
        }
        let h = crate::model::hash::hash_bytes(0, bytes);
        let set = (h % (RECENT / 2) as u64) as usize * 2;
        for way in [set, set + 1] {
            if let Some((sh, off, len)) = self.0[way]
                && sh == h
                && len == bytes.len()
                && &store[off..off + len] == bytes
            {
                return Ok(off);
            }
        }
        Err((set, h))
    }

    /// The newest string goes first in its set, the one it displaces to
    /// the second way.
    fn remember(&mut self, (set, h): (usize, u64), off: usize, len: usize) {
        self.0[set + 1] = self.0[set];
        self.0[set] = Some((h, off, len));
    }

    fn heap_bytes(&self) -> usize {
        self.0.capacity() * std::mem::size_of::<Option<(u64, usize, usize)>>()
    }
}

/// A varint of [`DecodedPoints`]' own buffers, which it wrote whole.
fn get_usize(b: &[u8], at: &mut usize) -> usize {
    get(b, at) as usize
}

fn get(b: &[u8], at: &mut usize) -> u64 {
    varint::get(b, at).expect("a varint the buffer wrote")
}

impl DecodedPoints {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memory this holds.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.text.capacity()
            + self.values.capacity()
            + self.sets.capacity()
            + self.records.capacity()
            + self.scratch.capacity()
            + self.last_written_set.capacity()
            + self.recent_text.heap_bytes()
            + self.recent_sets.heap_bytes()
    }

    /// Keeps `p`, unless a point before it had a value no `String` can
    /// hold: then the body is refused with the first such value's error
    /// (in `bad`) once it has parsed, and nothing more need be kept.
    pub(super) fn push(&mut self, p: &JsonPoint, bad: &mut Option<BadBody>) {
        if bad.is_some() {
            return;
        }
        let value = match value_text(p.value) {
            Ok(v) => v,
            Err(e) => {
                *bad = Some(e);
                return;
            }
        };
        let metric = p.metric.as_ref().and_then(|m| m.0.as_deref());
        let tags = p.tags.as_ref().map(|t| {
            let tags = t.0.iter().map(|(k, v)| (k.as_ref(), v.as_deref()));
            (None, tags)
        });
        self.push_fields(metric, p.timestamp.0, value.as_deref(), tags);
    }

    /// Keeps a point given by its fields as read: its tags (null or
    /// absent: `None`) in the order written with unique keys, with their
    /// text as written if the reader has it (an object with no escapes:
    /// the same text names the same tags, so a point whose tags are
    /// written as the previous one's are is given that one's set without
    /// looking at each name).
    pub(super) fn push_fields<'t>(
        &mut self,
        metric: Option<&str>,
        timestamp: i64,
        value: Option<&str>,
        tags: Option<(
            Option<&[u8]>,
            impl ExactSizeIterator<Item = (&'t str, Option<&'t str>)>,
        )>,
    ) {
        let delta = timestamp.wrapping_sub(self.last_timestamp);
        self.last_timestamp = timestamp;
        varint::put(varint::zigzag(delta), &mut self.records);
        match metric {
            None => self.records.push(ABSENT),
            Some(m) => {
                let at = self.add_text(m);
                if self.last_metric == Some(at) {
                    self.records.push(SAME);
                } else {
                    self.records.push(NEW);
                    varint::put(at.0 as u64, &mut self.records);
                    varint::put(at.1 as u64, &mut self.records);
                    self.last_metric = Some(at);
                }
            }
        }
        match value {
            None => self.records.push(ABSENT),
            Some(v) => {
                self.records.push(NEW);
                varint::put(v.len() as u64, &mut self.records);
                self.values.push_str(v);
            }
        }
        match tags {
            None => self.records.push(ABSENT),
            Some((written, tags)) => {
                let set = match (written, self.last_set) {
                    (Some(w), Some(last)) if !w.is_empty() && w == self.last_written_set => last,
                    _ => {
                        let set = self.add_set(tags);
                        self.last_written_set.clear();
                        self.last_written_set
                            .extend_from_slice(written.unwrap_or_default());
                        set
                    }
                };
                if self.last_set == Some(set) {
                    self.records.push(SAME);
                } else {
                    self.records.push(NEW);
                    varint::put(set as u64, &mut self.records);
                    self.last_set = Some(set);
                }
            }
        }
        self.len += 1;
    }

    /// Where `s` is in `text`: a recent copy, or a new one.
    fn add_text(&mut self, s: &str) -> (usize, usize) {
        match self.recent_text.find(self.text.as_bytes(), s.as_bytes()) {
            Ok(off) => (off, s.len()),
            Err(slot) => {
                let off = self.text.len();
                self.text.push_str(s);
                self.recent_text.remember(slot, off, s.len());
                (off, s.len())
            }
        }
    }

    /// Where the tag set is in `sets`: a recent copy, or a new one.
    fn add_set<'t>(
        &mut self,
        tags: impl ExactSizeIterator<Item = (&'t str, Option<&'t str>)>,
    ) -> usize {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        varint::put(tags.len() as u64, &mut scratch);
        for (k, v) in tags {
            let (off, len) = self.add_text(k);
            varint::put(off as u64, &mut scratch);
            varint::put(len as u64, &mut scratch);
            match v {
                None => scratch.push(ABSENT),
                Some(v) => {
                    let (off, len) = self.add_text(v);
                    scratch.push(NEW);
                    varint::put(off as u64, &mut scratch);
                    varint::put(len as u64, &mut scratch);
                }
            }
        }
        let off = match self.recent_sets.find(&self.sets, &scratch) {
            Ok(off) => off,
            Err(slot) => {
                let off = self.sets.len();
                self.sets.extend_from_slice(&scratch);
                self.recent_sets.remember(slot, off, scratch.len());
                off
            }
        };
        self.scratch = scratch;
        off
    }

    /// Reads the next (up to) `max` points into `out`; false when none
    /// are left.
    pub(crate) fn read_batch<'a>(
        &'a self,
        at: &mut Cursor,
        max: usize,
        out: &mut Batch<'a>,
    ) -> bool {
        out.points.clear();
        out.tags.clear();
        let mut last_tags = None;
        let r = &self.records[..];
        while out.points.len() < max && at.record < r.len() {
            let delta = varint::unzigzag(get(r, &mut at.record));
            at.timestamp = at.timestamp.wrapping_add(delta);
            let kind = r[at.record];
            at.record += 1;
            let metric = (kind != ABSENT).then(|| {
                if kind == NEW {
                    at.metric.0 = get_usize(r, &mut at.record);
                    at.metric.1 = get_usize(r, &mut at.record);
                }
                &self.text[at.metric.0..at.metric.0 + at.metric.1]
            });
            let value = match r[at.record] {
                ABSENT => {
                    at.record += 1;
                    None
                }
                _ => {
                    at.record += 1;
                    let len = get_usize(r, &mut at.record);
                    let v = &self.values[at.value..at.value + len];
                    at.value += len;
                    Some(v)
                }
            };
            let tags = match r[at.record] {
                ABSENT => {
                    at.record += 1;
                    None
                }
                kind => {
                    at.record += 1;
                    if kind == NEW {
                        at.set = get_usize(r, &mut at.record);
                    }
                    match last_tags {
                        // The set of the batch's last point with tags:
                        // its tags are in the batch already.
                        Some(span) if kind == SAME => Some(span),
                        _ => {
                            let from = out.tags.len();
                            self.read_set(at.set, &mut out.tags);
                            last_tags = Some((from, out.tags.len()));
                            last_tags
                        }
                    }
                }
            };
            out.points.push(PointView {
                metric,
                timestamp: at.timestamp,
                value,
                tags,
            });
        }
        !out.points.is_empty()
    }

    fn read_set<'a>(&'a self, mut at: usize, out: &mut Vec<TagView<'a>>) {
        let s = &self.sets[..];
        let text = |off: usize, len: usize| &self.text[off..off + len];
        let n = get_usize(s, &mut at);
        for _ in 0..n {
            let (off, len) = (get_usize(s, &mut at), get_usize(s, &mut at));
            let key = text(off, len);
            let flag = s[at];
            at += 1;
            let value = (flag != ABSENT).then(|| {
                let (off, len) = (get_usize(s, &mut at), get_usize(s, &mut at));
                text(off, len)
            });
            out.push((key, value));
        }
    }
}
