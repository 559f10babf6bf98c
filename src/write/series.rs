//! Series identity on the write path: a point's metric and tags, checked
//! the way OpenTSDB's `TSDB.addPoint` checks them, resolved to a [`Tsuid`]
//! once per series and cached under the series' text identity.
//!
//! The cache key is the metric and the tags sorted by name, so a known
//! series costs one string build and one hash lookup per point: no UID
//! lookup, no storage read.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use std::collections::HashSet;

use parking_lot::{Mutex, RwLock};

use crate::codec::qualifier::encode_value;
use crate::model::Tsuid;
use crate::model::java::{hashmap_order, java_tags};
use crate::model::point::{Timestamp, TimestampError, Value, beyond_last_row};
use crate::model::uid::java_byte_array;
use crate::model::{NameRules, UidKind};
use crate::protocol::PointError;
use crate::uid::{UidTable, UidTableError};
use crate::write::limits::SeriesLimiter;
use crate::write::rules::{self, DEFAULT_MAX_LABELS, RulesPassed, SeriesRules};

use crate::model::hash::{FastBuild, FastMap, hash_bytes};

const SHARDS: usize = 16;

impl From<UidTableError> for PointError {
    fn from(e: UidTableError) -> Self {
        match e {
            UidTableError::NoSuchName { .. } => PointError::UnknownName(e.to_string()),
            UidTableError::InvalidName(n) => PointError::IllegalArgument(n.0),
            other => PointError::Storage(other.to_string()),
        }
    }
}

/// One series known to this process.
#[derive(Debug)]
pub struct Series {
    /// Process-local number (buffer shard, WAL references).
    pub id: u32,
    pub tsuid: Tsuid,
    /// The metric and the tags sorted by key, as [`series_key`] writes
    /// them: the cache's key is this very string, so a series' names are
    /// stored once, in one allocation (a million series cost a million
    /// strings, not five million plus a tag vector each).
    name: Box<str>,
    /// Where its definition was last logged in the WAL (segment and
    /// stretch of log; 0: never): the WAL writer's business.
    pub(crate) wal_segment: AtomicU64,
    /// 1 + the latest hour recorded in the series index (0: none yet),
    /// so the index is touched once per series and hour, not per point.
    pub(crate) indexed_hour: AtomicU64,
    /// Points accepted since the counters were last added to `tsdb-meta`
    /// (TSMeta `totalDatapoints`, without a storage write per point).
    pub(crate) unsaved_points: AtomicU64,
    /// Epoch seconds of the newest accepted point's arrival (TSMeta
    /// `lastReceived`); 0 if none since start.
    pub(crate) last_received: AtomicU64,
    /// The rule sets its names pass: a series found in the cache is
    /// still refused to a protocol whose rules its names break.
    passes: RulesPassed,
}

/// One connection's memo of the series its points named, keyed by their
/// names as the connection wrote them: the metric, and a text standing
/// for the tags (telnet: the tag words in arrival order; `/api/put`: the
/// tags' part of the series key, [`TagsKey`]). A point that names a
/// series the same way again skips parsing its tags, building its series
/// key and the shared cache's lookup (together about a quarter of a
/// telnet put's CPU with 8 tags).
///
/// Two levels: the tag texts, each stored once and numbered, then the
/// series by tag text number and metric. Collectors send a host's metrics
/// one after another, so the tag text is usually the last one's,
/// compared in place with no hash of it, and a series' entry holds only
/// its metric. Bounded by [`SeriesMemo::MAX`] series (emptied when
/// full), and emptied when the shared cache forgets names
/// ([`SeriesCache::recall`]).
#[derive(Default)]
pub struct SeriesMemo {
    /// The tag texts, by number.
    tag_texts: Vec<Box<str>>,
    /// Numbers in `tag_texts`, found by the text's hash.
    by_text: hashbrown::HashTable<u32>,
    /// (tag text number, metric, series).
    series: hashbrown::HashTable<(u32, Box<str>, Arc<Series>)>,
    /// The tag text of the last lookup or entry.
    last_text: Option<u32>,
    generation: u64,
}

impl SeriesMemo {
    /// Series kept per connection: a few MB at most, and more than the
    /// series one collector connection usually sends.
    pub const MAX: usize = 16 * 1024;

    fn text_hash(text: &str) -> u64 {
        hash_bytes(0x6d656d6f, text.as_bytes())
    }

    fn series_hash(text: u32, metric: &str) -> u64 {
        hash_bytes(u64::from(text), metric.as_bytes())
    }

    /// The number of `tags_text`, if stored.
    fn text_number(&mut self, tags_text: &str) -> Option<u32> {
        if let Some(n) = self.last_text
            && *self.tag_texts[n as usize] == *tags_text
        {
            return Some(n);
        }
        let texts = &self.tag_texts;
        let n = *self.by_text.find(Self::text_hash(tags_text), |&n| {
            *texts[n as usize] == *tags_text
        })?;
        self.last_text = Some(n);
        Some(n)
    }

    fn get(&mut self, metric: &str, tags_text: &str) -> Option<&Arc<Series>> {
        let text = self.text_number(tags_text)?;
        self.series
            .find(Self::series_hash(text, metric), |(t, m, _)| {
                *t == text && **m == *metric
            })
            .map(|(_, _, s)| s)
    }

    /// Remembers that `metric` with `tags_text` named `series` (whose
    /// names were checked).
    pub fn remember(&mut self, metric: &str, tags_text: &str, series: Arc<Series>) {
        if self.series.len() >= Self::MAX {
            self.clear();
        }
        let text = match self.text_number(tags_text) {
            Some(n) => n,
            None => {
                let n = self.tag_texts.len() as u32;
                self.tag_texts.push(tags_text.into());
                let texts = &self.tag_texts;
                self.by_text
                    .insert_unique(Self::text_hash(tags_text), n, |&n| {
                        Self::text_hash(&texts[n as usize])
                    });
                self.last_text = Some(n);
                n
            }
        };
        let hash = Self::series_hash(text, metric);
        if self
            .series
            .find(hash, |(t, m, _)| *t == text && **m == *metric)
            .is_some()
        {
            return;
        }
        self.series
            .insert_unique(hash, (text, metric.into(), series), |(t, m, _)| {
                Self::series_hash(*t, m)
            });
    }

    fn clear(&mut self) {
        self.tag_texts.clear();
        self.by_text.clear();
        self.series.clear();
        self.last_text = None;
    }

    pub fn len(&self) -> usize {
        self.series.len()
    }

    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }
}

/// The names of a point to resolve, and the rules they are checked by.
#[derive(Clone, Copy)]
struct Names<'n, 't> {
    rules: SeriesRules,
    metric: &'n str,
    tags: &'n [(&'n str, &'n str)],
    /// The tags' part of the series key, if built already.
    tags_key: Option<&'t TagsKey>,
}

/// The cache of known series.
pub struct SeriesCache {
    uids: Arc<UidTable>,
    rules: NameRules,
    max_tags: usize,
    /// `tsd.prometheus.max_labels`: labels besides the name a series
    /// checked by [`SeriesRules::Prometheus`] may have.
    max_labels: usize,
    shards: Vec<Shard>,
    /// The ids of the series whose names were [forgotten](Self::forget_names),
    /// by TSUID: a series re-resolved after that keeps its id, so its
    /// buffered points and WAL references stay one series. Filled only by
    /// `forget_names` (a TSUID has one series until then), emptied as the
    /// series come back.
    forgotten: Mutex<FastMap<Tsuid, u32>>,
    /// Bumped each time names are forgotten: what a [`SeriesMemo`] checks
    /// before it answers.
    generation: AtomicU64,
    next_id: AtomicU32,
    /// Cardinality limits on new series (none unless configured).
    limiter: Option<SeriesLimiter>,
    /// [`UidTable::remote_changes`] when the names were last known good:
    /// a rename or delete on another TSD makes them stale.
    remote_seen: AtomicU64,
}

/// What separates the names in a series key: before each tag, and
/// between its key and value. Validated names never hold them; a key built
/// from names that do is not looked up (see [`series_key`]).
const TAG_START: char = '\0';
const TAG_VALUE: char = '\u{1}';

/// Builds the cache key of a series: metric, then `\0k\x01v` per tag,
/// sorted by key. Returns false if a name holds a separator: such a key
/// could equal another series' key, so it must not be looked up (the
/// names are then refused by validation).
fn series_key(metric: &str, tags: &[(&str, &str)], out: &mut String) -> bool {
    out.clear();
    out.push_str(metric);
    let tags_ok = sorted_tags_into(tags, out);
    tags_ok && !has_separator(metric)
}

/// Whether a name holds a series key's separator.
fn has_separator(name: &str) -> bool {
    name.bytes().any(|b| b <= 1)
}

/// Appends the tags part of a series key (see [`series_key`]) to `out`;
/// false if a name holds a separator.
fn sorted_tags_into(tags: &[(&str, &str)], out: &mut String) -> bool {
    let from = out.len();
    let mut sorted: [(&str, &str); 16] = [("", ""); 16];
    if tags.len() <= sorted.len() {
        sorted[..tags.len()].copy_from_slice(tags);
        let s = &mut sorted[..tags.len()];
        s.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (k, v) in s.iter() {
            out.push(TAG_START);
            out.push_str(k);
            out.push(TAG_VALUE);
            out.push_str(v);
        }
    } else {
        let mut v: Vec<(&str, &str)> = tags.to_vec();
        v.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (k, val) in v {
            out.push(TAG_START);
            out.push_str(k);
            out.push(TAG_VALUE);
            out.push_str(val);
        }
    }
    let separators = 2 * tags.len();
    out[from..].bytes().filter(|b| *b <= 1).count() == separators
}

/// The tags part of a series key, sorted once for the points that share
/// their tags (the points of an `/api/put` body written with the same
/// tags): their keys are then the metric and this text.
#[derive(Debug, Default)]
pub struct TagsKey {
    text: String,
    /// No name holds a separator.
    valid: bool,
}

impl TagsKey {
    /// The key part of `tags` (arrival order, unique keys).
    pub fn set(&mut self, tags: &[(&str, &str)]) {
        self.text.clear();
        self.valid = sorted_tags_into(tags, &mut self.text);
    }

    /// The text a [`SeriesMemo`] knows these tags by; `None` if a name
    /// holds a separator (such names are refused, never remembered).
    pub fn memo_text(&self) -> Option<&str> {
        self.valid.then_some(self.text.as_str())
    }

    /// [`series_key`] of `metric` and these tags.
    fn series_key(&self, metric: &str, out: &mut String) -> bool {
        out.clear();
        out.push_str(metric);
        out.push_str(&self.text);
        self.valid && !has_separator(metric)
    }
}

/// The metric and the tags of a series key ([`series_key`]).
fn key_names(key: &str) -> (&str, SeriesTags<'_>) {
    let end = key.find(TAG_START).unwrap_or(key.len());
    let (metric, rest) = key.split_at(end);
    let tags = SeriesTags {
        rest,
        left: rest.bytes().filter(|b| *b == TAG_START as u8).count(),
    };
    (metric, tags)
}

/// The tags of a series key, in key order.
#[derive(Debug, Clone)]
pub struct SeriesTags<'a> {
    rest: &'a str,
    left: usize,
}

impl<'a> Iterator for SeriesTags<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<(&'a str, &'a str)> {
        let tag = self.rest.strip_prefix(TAG_START)?;
        let end = tag.find(TAG_START).unwrap_or(tag.len());
        let (kv, rest) = tag.split_at(end);
        self.rest = rest;
        self.left -= 1;
        let (k, v) = kv.split_once(TAG_VALUE).expect("a series key's tag");
        Some((k, v))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for SeriesTags<'_> {}

/// A cached series, found in its shard by its key (its name) without a
/// second copy of the key.
#[derive(Debug, Clone)]
struct ByName(Arc<Series>);

impl std::hash::Hash for ByName {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        // As `str` hashes, so that lookups by `&str` find it.
        self.0.name.hash(h)
    }
}

impl PartialEq for ByName {
    fn eq(&self, other: &ByName) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for ByName {}

impl std::borrow::Borrow<str> for ByName {
    fn borrow(&self) -> &str {
        &self.0.name
    }
}

type Shard = RwLock<HashSet<ByName, FastBuild>>;

impl SeriesCache {
    pub fn new(uids: Arc<UidTable>, max_tags: usize) -> SeriesCache {
        SeriesCache {
            rules: uids.rules().clone(),
            uids,
            max_tags,
            max_labels: DEFAULT_MAX_LABELS,
            shards: (0..SHARDS)
                .map(|_| RwLock::new(HashSet::default()))
                .collect(),
            forgotten: Mutex::new(FastMap::default()),
            generation: AtomicU64::new(0),
            next_id: AtomicU32::new(1),
            limiter: None,
            remote_seen: AtomicU64::new(0),
        }
    }

    /// Whether another TSD renamed or deleted a UID name since the last
    /// call that said so (one atomic load when not); the caller then
    /// forgets the names, as after a rename of its own.
    pub fn names_changed_elsewhere(&self) -> bool {
        let now = self.uids.remote_changes();
        // A load first: the swap writes a line every resolving thread reads.
        self.remote_seen.load(Ordering::Acquire) != now
            && self.remote_seen.swap(now, Ordering::AcqRel) != now
    }

    /// Refuses new series beyond `limiter`'s limits ([`SeriesCache::resolve`]
    /// only: replayed series were acknowledged already).
    pub(crate) fn with_limiter(mut self, limiter: SeriesLimiter) -> SeriesCache {
        self.limiter = (!limiter.limits().is_unlimited()).then_some(limiter);
        self
    }

    /// Sets `tsd.prometheus.max_labels` (see [`rules::DEFAULT_MAX_LABELS`]).
    pub(crate) fn with_max_labels(mut self, max_labels: usize) -> SeriesCache {
        self.max_labels = max_labels;
        self
    }

    pub(crate) fn limiter(&self) -> Option<&SeriesLimiter> {
        self.limiter.as_ref()
    }

    /// Forgets which names map to which series (`dropcaches`, and after a
    /// UID rename): the next point re-resolves its names, so a renamed name
    /// gets a new UID as in OpenTSDB instead of writing to the renamed one.
    pub fn forget_names(&self) {
        let mut forgotten = self.forgotten.lock();
        for shard in &self.shards {
            for s in shard.write().drain() {
                forgotten.insert(s.0.tsuid.clone(), s.0.id);
            }
        }
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The series `memo` remembers for `metric` and `tags_text` (the tag
    /// words as written), unless the names were forgotten since it
    /// remembered anything (then the memo is emptied).
    pub fn recall(
        &self,
        memo: &mut SeriesMemo,
        metric: &str,
        tags_text: &str,
    ) -> Option<Arc<Series>> {
        let generation = self.generation.load(Ordering::Acquire);
        if memo.generation != generation {
            memo.clear();
            memo.generation = generation;
            return None;
        }
        memo.get(metric, tags_text).cloned()
    }

    pub fn uids(&self) -> &Arc<UidTable> {
        &self.uids
    }

    /// Runs `f` on every known series.
    pub fn for_each(&self, mut f: impl FnMut(&Arc<Series>)) {
        for shard in &self.shards {
            for s in shard.read().iter() {
                f(&s.0);
            }
        }
    }

    /// Number of series known.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.read().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard(&self, key: &str) -> &Shard {
        // Seeded apart from the maps' own hashing of the same key.
        let h = hash_bytes(0x5eed, key.as_bytes());
        &self.shards[(h % SHARDS as u64) as usize]
    }

    /// Checks one point and finds (or creates) its series. `tags` are in
    /// arrival order with unique keys; `key_buf` is scratch space.
    /// Checks, in OpenTSDB's order: timestamp range, tag count, names, then
    /// UID resolution (`NoSuchUniqueName` when auto-create is off).
    pub fn resolve(
        &self,
        metric: &str,
        raw_ts: i64,
        value: Value,
        tags: &[(&str, &str)],
        key_buf: &mut String,
    ) -> Result<(Arc<Series>, Timestamp), PointError> {
        self.resolve_cell(metric, raw_ts, CellValue::Point(value), tags, key_buf)
    }

    /// [`resolve`](Self::resolve) for a cell of any kind: `value` is only
    /// shown in the refusal of a bad timestamp (encoded then, not before:
    /// the put path does not pay for it).
    pub fn resolve_cell(
        &self,
        metric: &str,
        raw_ts: i64,
        value: CellValue<'_>,
        tags: &[(&str, &str)],
        key_buf: &mut String,
    ) -> Result<(Arc<Series>, Timestamp), PointError> {
        self.resolve_keyed(metric, raw_ts, value, tags, None, key_buf)
    }

    /// [`resolve_cell`](Self::resolve_cell) with the tags' part of the
    /// series key built already (`tags_key`, of these `tags`), if it was.
    pub fn resolve_keyed(
        &self,
        metric: &str,
        raw_ts: i64,
        value: CellValue<'_>,
        tags: &[(&str, &str)],
        tags_key: Option<&TagsKey>,
        key_buf: &mut String,
    ) -> Result<(Arc<Series>, Timestamp), PointError> {
        let names = Names {
            rules: SeriesRules::OpenTsdb,
            metric,
            tags,
            tags_key,
        };
        self.resolve_with(names, raw_ts, value, key_buf)
    }

    /// [`resolve`](Self::resolve) with the names checked by `rules`
    /// (remote write: [`SeriesRules::Prometheus`]) instead of OpenTSDB's.
    pub fn resolve_as(
        &self,
        rules: SeriesRules,
        metric: &str,
        raw_ts: i64,
        value: Value,
        tags: &[(&str, &str)],
        key_buf: &mut String,
    ) -> Result<(Arc<Series>, Timestamp), PointError> {
        let names = Names {
            rules,
            metric,
            tags,
            tags_key: None,
        };
        self.resolve_with(names, raw_ts, CellValue::Point(value), key_buf)
    }

    fn resolve_with(
        &self,
        names: Names<'_, '_>,
        raw_ts: i64,
        value: CellValue<'_>,
        key_buf: &mut String,
    ) -> Result<(Arc<Series>, Timestamp), PointError> {
        let Names {
            rules,
            metric,
            tags,
            tags_key,
        } = names;
        let ts = Timestamp::from_raw(raw_ts).map_err(|e| bad_timestamp(e, metric, value, tags))?;
        let keyed = match tags_key {
            Some(k) => k.series_key(metric, key_buf),
            None => series_key(metric, tags, key_buf),
        };
        if keyed && let Some(s) = self.shard(key_buf).read().get(key_buf.as_str()) {
            let s = s.0.clone();
            if !s.passes.allows(rules) {
                // Known, but written by a protocol with other rules: the
                // check refuses it in this protocol's words.
                self.check_names(rules, metric, tags)?;
            }
            return Ok((s, ts));
        }
        self.check_names(rules, metric, tags)?;
        if let Some(limiter) = &self.limiter
            && !self
                .known_tsuid(metric, tags)
                .is_some_and(|t| limiter.is_known(&t))
        {
            limiter.admit(crate::model::time::now_s() as u64, || {
                format!("metric={metric}, tags={}", java_tags(tags))
            })?;
        }
        // Names checked by other rules than OpenTSDB's are not checked
        // again by the UID table's (OpenTSDB's character set).
        let uid = |kind, name: &str| match rules {
            SeriesRules::OpenTsdb => self.uids.get_or_create_id(kind, name),
            SeriesRules::Prometheus | SeriesRules::Utf8Names => {
                self.uids.get_or_create_checked_id(kind, name)
            }
        };
        let metric_uid = uid(UidKind::Metric, metric)?;
        let keys: Vec<&str> = tags.iter().map(|t| t.0).collect();
        let mut pairs = Vec::with_capacity(tags.len());
        for k in hashmap_order(&keys, 16) {
            let v = tags.iter().find(|t| t.0 == k).expect("key from tags").1;
            let ku = uid(UidKind::TagKey, k)?;
            let vu = uid(UidKind::TagValue, v)?;
            pairs.push((ku, vu));
        }
        let tsuid = Tsuid::new(metric_uid, pairs)
            .map_err(|e| PointError::IllegalArgument(e.to_string()))?;
        Ok((self.insert(key_buf, tsuid, Some(rules)), ts))
    }

    /// The TSUID of these names if every one of them has a UID already,
    /// without assigning any.
    fn known_tsuid(&self, metric: &str, tags: &[(&str, &str)]) -> Option<Tsuid> {
        let metric = self.uids.get_id(UidKind::Metric, metric).ok()?;
        let mut pairs = Vec::with_capacity(tags.len());
        for (k, v) in tags {
            pairs.push((
                self.uids.get_id(UidKind::TagKey, k).ok()?,
                self.uids.get_id(UidKind::TagValue, v).ok()?,
            ));
        }
        Tsuid::new(metric, pairs).ok()
    }

    /// Checks a series' names by `rules`.
    fn check_names(
        &self,
        rules: SeriesRules,
        metric: &str,
        tags: &[(&str, &str)],
    ) -> Result<(), PointError> {
        match rules {
            SeriesRules::OpenTsdb => self.check_opentsdb_names(metric, tags),
            SeriesRules::Prometheus => rules::check_prometheus(metric, tags, self.max_labels),
            SeriesRules::Utf8Names => rules::check_utf8_names(metric, tags, self.max_labels),
        }
    }

    /// The rule sets the names of a series new to the cache pass;
    /// `checked` passed already (not checked again).
    fn rules_passed(
        &self,
        metric: &str,
        tags: &[(&str, &str)],
        checked: Option<SeriesRules>,
    ) -> RulesPassed {
        [
            SeriesRules::OpenTsdb,
            SeriesRules::Prometheus,
            SeriesRules::Utf8Names,
        ]
        .into_iter()
        .filter(|r| Some(*r) == checked || self.check_names(*r, metric, tags).is_ok())
        .fold(RulesPassed::default(), RulesPassed::with)
    }

    /// `IncomingDataPoints.checkMetricAndTags`.
    fn check_opentsdb_names(&self, metric: &str, tags: &[(&str, &str)]) -> Result<(), PointError> {
        if tags.is_empty() {
            return Err(PointError::IllegalArgument(format!(
                "Need at least one tag (metric={metric}, tags={{}})"
            )));
        }
        if tags.len() > self.max_tags {
            return Err(PointError::IllegalArgument(format!(
                "Too many tags: {} maximum allowed: {}, tags: {}",
                tags.len(),
                self.max_tags,
                java_tags(tags)
            )));
        }
        let bad = |e: crate::model::InvalidName| PointError::IllegalArgument(e.0);
        self.rules.validate_metric(metric).map_err(bad)?;
        let keys: Vec<&str> = tags.iter().map(|t| t.0).collect();
        for k in hashmap_order(&keys, 16) {
            let v = tags.iter().find(|t| t.0 == k).expect("key from tags").1;
            self.rules.validate_tag(k, v).map_err(bad)?;
        }
        Ok(())
    }

    /// The series of names read back from the WAL: created with explicit
    /// UID assignment, since its points were acknowledged already, and
    /// with no name check (they passed the rules of the protocol that
    /// wrote them, which may not be OpenTSDB's).
    pub fn resolve_replayed(
        &self,
        metric: &str,
        tags: &[(&str, &str)],
    ) -> Result<Arc<Series>, PointError> {
        let mut key = String::new();
        if series_key(metric, tags, &mut key)
            && let Some(s) = self.shard(&key).read().get(key.as_str())
        {
            return Ok(s.0.clone());
        }
        let metric_uid = self.uids.assign_checked(UidKind::Metric, metric)?.uid();
        let mut pairs = Vec::with_capacity(tags.len());
        for (k, v) in tags {
            pairs.push((
                self.uids.assign_checked(UidKind::TagKey, k)?.uid(),
                self.uids.assign_checked(UidKind::TagValue, v)?.uid(),
            ));
        }
        let tsuid = Tsuid::new(metric_uid, pairs)
            .map_err(|e| PointError::IllegalArgument(e.to_string()))?;
        Ok(self.insert(&key, tsuid, None))
    }

    /// Caches the series of `key` (as [`series_key`] built it from valid
    /// names; `checked`: the rules they were checked by, if any) unless a
    /// concurrent caller did.
    fn insert(&self, key: &str, tsuid: Tsuid, checked: Option<SeriesRules>) -> Arc<Series> {
        // Found before the shard is locked: other series' writers wait
        // on that lock.
        let passes = {
            let (metric, tags) = key_names(key);
            let tags: Vec<(&str, &str)> = tags.collect();
            self.rules_passed(metric, &tags, checked)
        };
        let mut map = self.shard(key).write();
        if let Some(s) = map.get(key) {
            return s.0.clone();
        }
        let forgotten = self.forgotten.lock().remove(&tsuid);
        let id = forgotten.unwrap_or_else(|| self.next_id.fetch_add(1, Ordering::Relaxed));
        let mut s = Series::new(id, tsuid, key);
        s.passes = passes;
        let s = Arc::new(s);
        map.insert(ByName(s.clone()));
        s
    }
}

impl Series {
    /// A series with nothing logged, indexed or counted yet, named by its
    /// [`series_key`].
    fn new(id: u32, tsuid: Tsuid, key: &str) -> Series {
        Series {
            id,
            tsuid,
            name: key.into(),
            wal_segment: AtomicU64::new(0),
            indexed_hour: AtomicU64::new(0),
            unsaved_points: AtomicU64::new(0),
            last_received: AtomicU64::new(0),
            passes: RulesPassed::default(),
        }
    }

    /// Series `id` of `metric` with the one tag `host=h<id>` (tests of the
    /// buffer and the WAL).
    #[cfg(test)]
    pub(crate) fn for_test(id: u32, metric: &str) -> Arc<Series> {
        Series::for_test_of_metric(id, 1, metric)
    }

    /// [`for_test`](Self::for_test) with the metric's UID given.
    #[cfg(test)]
    pub(crate) fn for_test_of_metric(id: u32, metric_uid: u64, metric: &str) -> Arc<Series> {
        use crate::model::{Uid, UidWidth};
        let u = |i| Uid::new(i, UidWidth::DEFAULT).unwrap();
        let tsuid = Tsuid::new(u(metric_uid), vec![(u(1), u(id as u64))]).unwrap();
        let mut key = String::new();
        series_key(metric, &[("host", &format!("h{id}"))], &mut key);
        Arc::new(Series::new(id, tsuid, &key))
    }

    /// A test series numbered `id` for `tsuid` (two numbers for one TSUID
    /// happen when the series cache forgets a series).
    #[cfg(test)]
    pub(crate) fn for_test_as(id: u32, tsuid: Tsuid) -> Arc<Series> {
        Arc::new(Series::new(id, tsuid, "m{host=h}"))
    }

    pub fn metric(&self) -> &str {
        key_names(&self.name).0
    }

    /// The tags, sorted by key name.
    pub fn tags(&self) -> SeriesTags<'_> {
        key_names(&self.name).1
    }

    /// `metric{k=v,...}` for logs.
    pub fn describe(&self) -> String {
        let mut s = self.metric().to_string();
        s.push('{');
        for (i, (k, v)) in self.tags().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(s, "{k}={v}");
        }
        s.push('}');
        s
    }
}

/// `TSDB.addPoint`'s refusal of a timestamp, in its words where it has
/// them: `negative timestamp=…` and `bad timestamp=…` (past 13 digits).
/// OpenTSDB 2.4.1 also takes millisecond timestamps whose second is past
/// 4294967295 and writes them under a base time wrapped to 32 bits (filed
/// in 1970); rtsdb refuses them in the same words, with the reason added.
/// `0` keeps the line parser's `invalid timestamp: 0`.
/// The value of a cell being written, as a refused write shows it.
#[derive(Debug, Clone, Copy)]
pub enum CellValue<'a> {
    /// A data point: its value bytes and flags.
    Point(Value),
    /// A histogram point (`TSDB.addHistogramPoint`): its stored bytes,
    /// flags 0.
    Histogram(&'a [u8]),
}

fn bad_timestamp(
    e: TimestampError,
    metric: &str,
    value: CellValue<'_>,
    tags: &[(&str, &str)],
) -> PointError {
    let raw = match e {
        TimestampError::NotPositive(0) => {
            return PointError::IllegalArgument(e.to_string());
        }
        TimestampError::NotPositive(raw)
        | TimestampError::TooLarge(raw)
        | TimestampError::BeyondLastRow(raw) => raw,
    };
    let (bytes, flags) = match value {
        CellValue::Point(v) => {
            let enc = encode_value(v);
            (java_byte_array(enc.as_bytes()), enc.flags)
        }
        CellValue::Histogram(b) => (java_byte_array(b), 0),
    };
    let mut msg = format!(
        "{} timestamp={raw} when trying to add value={bytes}/{flags} to metric={metric}, tags={}",
        if raw < 0 { "negative" } else { "bad" },
        java_tags(tags)
    );
    if let TimestampError::BeyondLastRow(_) = e {
        msg.push_str(": ");
        msg.push_str(&beyond_last_row(raw));
    }
    PointError::IllegalArgument(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::row::DuplicatePolicy;
    use crate::codec::row_key::KeyLayout;
    use crate::store::Store;
    use crate::uid::AutoCreate;

    fn cache(auto_metrics: bool) -> SeriesCache {
        let store = Store::in_memory(KeyLayout::default(), DuplicatePolicy::LastWriteWins);
        let uids = UidTable::new(
            store.uid_store(),
            AutoCreate {
                metrics: auto_metrics,
                ..Default::default()
            },
            NameRules::default(),
        );
        SeriesCache::new(Arc::new(uids), 8)
    }

    #[test]
    fn same_series_whatever_the_tag_order() {
        let c = cache(true);
        let mut buf = String::new();
        let (a, ts) = c
            .resolve(
                "m",
                1356998400,
                Value::Int(1),
                &[("host", "a"), ("dc", "x")],
                &mut buf,
            )
            .unwrap();
        assert_eq!(ts, Timestamp::Seconds(1356998400));
        let (b, _) = c
            .resolve(
                "m",
                1356998401,
                Value::Int(1),
                &[("dc", "x"), ("host", "a")],
                &mut buf,
            )
            .unwrap();
        assert_eq!(a.id, b.id);
        let (d, _) = c
            .resolve(
                "m",
                1356998401,
                Value::Int(1),
                &[("dc", "y"), ("host", "a")],
                &mut buf,
            )
            .unwrap();
        assert_ne!(a.id, d.id);
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn names_are_kept_once_and_read_back() {
        let c = cache(true);
        let mut buf = String::new();
        let (s, _) = c
            .resolve("m.x", 1, Value::Int(1), &[("z", "1"), ("a", "2")], &mut buf)
            .unwrap();
        assert_eq!(s.metric(), "m.x");
        assert_eq!(s.tags().len(), 2);
        assert_eq!(s.tags().collect::<Vec<_>>(), vec![("a", "2"), ("z", "1")]);
        assert_eq!(s.describe(), "m.x{a=2,z=1}");
    }

    /// A name holding the key's separators could spell another series'
    /// key: it is validated (and refused), never taken for that series.
    #[test]
    fn separators_in_names_never_reach_another_series() {
        let c = cache(true);
        let mut buf = String::new();
        c.resolve("a", 1, Value::Int(1), &[("b", "c"), ("x", "y")], &mut buf)
            .unwrap();
        let r = c.resolve("a\0b\u{1}c", 1, Value::Int(1), &[("x", "y")], &mut buf);
        assert!(matches!(r, Err(PointError::IllegalArgument(_))), "{r:?}");
        assert_eq!(c.len(), 1);
    }

    /// After the names are forgotten (a rename, `dropcaches`) a series
    /// resolved again keeps its id: its buffered points stay one series.
    #[test]
    fn a_forgotten_series_keeps_its_id() {
        let c = cache(true);
        let mut buf = String::new();
        let (a, _) = c
            .resolve("m", 1, Value::Int(1), &[("host", "a")], &mut buf)
            .unwrap();
        c.forget_names();
        assert_eq!(c.len(), 0);
        let (b, _) = c
            .resolve("m", 1, Value::Int(1), &[("host", "a")], &mut buf)
            .unwrap();
        assert!(!Arc::ptr_eq(&a, &b));
        assert_eq!(a.id, b.id);
        let (d, _) = c
            .resolve("m", 1, Value::Int(1), &[("host", "b")], &mut buf)
            .unwrap();
        assert_ne!(d.id, a.id);
    }

    /// A key built from a [`TagsKey`] is the one [`series_key`] builds,
    /// and refused alike when a name holds a separator.
    #[test]
    fn tags_keys_build_the_series_key() {
        let cases: [(&str, &[(&str, &str)]); 5] = [
            ("m", &[("host", "a"), ("dc", "x"), ("cpu", "0")]),
            ("m", &[]),
            ("m\u{1}", &[("host", "a")]),
            ("m", &[("ho\0st", "a")]),
            ("m", &[("host", "a\u{1}b")]),
        ];
        let (mut want, mut got, mut k) = (String::new(), String::new(), TagsKey::default());
        for (metric, tags) in cases {
            let ok = series_key(metric, tags, &mut want);
            k.set(tags);
            assert_eq!(k.series_key(metric, &mut got), ok, "{metric:?} {tags:?}");
            assert_eq!(got, want);
        }
        let many: Vec<(String, String)> = (0..20)
            .map(|i| (format!("k{}", 19 - i), i.to_string()))
            .collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        assert!(series_key("m", &many, &mut want));
        k.set(&many);
        assert!(k.series_key("m", &mut got));
        assert_eq!(got, want);
    }

    /// A memo answers for the names exactly as written, and forgets all
    /// when the shared cache forgets names.
    #[test]
    fn a_memo_recalls_names_as_written_until_names_are_forgotten() {
        let c = cache(true);
        let mut buf = String::new();
        let mut memo = SeriesMemo::default();
        assert!(c.recall(&mut memo, "m", "host=a dc=x").is_none());
        let (s, _) = c
            .resolve(
                "m",
                1,
                Value::Int(1),
                &[("host", "a"), ("dc", "x")],
                &mut buf,
            )
            .unwrap();
        memo.remember("m", "host=a dc=x", s.clone());
        memo.remember("m", "host=a dc=x", s.clone());
        assert_eq!(memo.len(), 1);
        let got = c.recall(&mut memo, "m", "host=a dc=x").unwrap();
        assert!(Arc::ptr_eq(&got, &s));
        // Other words, even naming the same series, are not this entry.
        assert!(c.recall(&mut memo, "m", "dc=x host=a").is_none());
        assert!(c.recall(&mut memo, "m", "host=a dc=x ").is_none());
        assert!(c.recall(&mut memo, "m ", "host=a dc=x").is_none());
        assert!(c.recall(&mut memo, "mm", "host=a dc=x").is_none());
        c.forget_names();
        assert!(c.recall(&mut memo, "m", "host=a dc=x").is_none());
        assert!(memo.is_empty());
    }

    /// Series that share a metric or a tag text are told apart, whichever
    /// order they are asked for in.
    #[test]
    fn a_memo_tells_series_apart_by_metric_and_tags() {
        let c = cache(true);
        let mut buf = String::new();
        let names = [
            ("m1", "host=a"),
            ("m2", "host=a"),
            ("m1", "host=b"),
            ("m2", "host=ab"),
        ];
        let mut memo = SeriesMemo::default();
        let mut series = Vec::new();
        for (m, t) in names {
            let host = t.strip_prefix("host=").unwrap();
            let (s, _) = c
                .resolve(m, 1, Value::Int(1), &[("host", host)], &mut buf)
                .unwrap();
            memo.remember(m, t, s.clone());
            series.push(s);
        }
        assert_eq!(memo.len(), 4);
        for order in [[0, 1, 2, 3], [3, 2, 1, 0], [0, 2, 1, 3], [1, 1, 3, 0]] {
            for i in order {
                let (m, t) = names[i];
                let got = c.recall(&mut memo, m, t).unwrap();
                assert!(Arc::ptr_eq(&got, &series[i]), "{m} {t}");
            }
        }
        assert!(c.recall(&mut memo, "m3", "host=a").is_none());
        assert!(c.recall(&mut memo, "m1", "host=ab").is_none());
        assert!(c.recall(&mut memo, "m1", "host=").is_none());
    }

    #[test]
    fn a_memo_stays_within_its_bound() {
        let c = cache(true);
        let mut buf = String::new();
        let (s, _) = c
            .resolve("m", 1, Value::Int(1), &[("host", "a")], &mut buf)
            .unwrap();
        let mut memo = SeriesMemo::default();
        for i in 0..SeriesMemo::MAX + 10 {
            memo.remember("m", &format!("host=a x={i}"), s.clone());
        }
        assert!(memo.len() <= SeriesMemo::MAX);
        assert!(
            c.recall(&mut memo, "m", &format!("host=a x={}", SeriesMemo::MAX + 9))
                .is_some()
        );
    }

    fn prom(
        c: &SeriesCache,
        metric: &str,
        tags: &[(&str, &str)],
    ) -> Result<Arc<Series>, PointError> {
        let mut buf = String::new();
        c.resolve_as(
            SeriesRules::Prometheus,
            metric,
            1_356_998_400_000,
            Value::Float(1.0),
            tags,
            &mut buf,
        )
        .map(|(s, _)| s)
    }

    /// What Prometheus allows and OpenTSDB's put rules refuse resolves
    /// under the Prometheus rules: no tag, `:` in the name, 20 labels,
    /// any UTF-8 in values.
    #[test]
    fn prometheus_rules_take_what_put_refuses() {
        let c = cache(false);
        let a = prom(&c, "up", &[]).unwrap();
        assert_eq!(a.describe(), "up{}");
        assert_eq!(a.tags().len(), 0);
        let b = prom(
            &c,
            "job:http_requests:rate5m",
            &[
                ("le", "+Inf"),
                ("path", "/a b \"q\" =,x"),
                ("city", "Zürich"),
            ],
        )
        .unwrap();
        assert_eq!(
            b.tags().collect::<Vec<_>>(),
            vec![
                ("city", "Zürich"),
                ("le", "+Inf"),
                ("path", "/a b \"q\" =,x")
            ]
        );
        let many: Vec<(String, String)> = (0..20).map(|i| (format!("l{i}"), "v".into())).collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        prom(&c, "m", &many).unwrap();
        assert!(matches!(
            prom(&c, "sys.cpu", &[("host", "a")]),
            Err(PointError::IllegalArgument(_))
        ));
        assert!(matches!(
            prom(&c, "m", &[("host", "a"), ("host", "b")]),
            Err(PointError::IllegalArgument(_))
        ));
    }

    /// A series is found in the cache before any check: one that a
    /// protocol's rules refuse stays refused there even once the other
    /// protocol created it, and one both allow is the same series.
    #[test]
    fn a_cached_series_is_refused_to_a_protocol_whose_rules_it_breaks() {
        let c = cache(true);
        let mut buf = String::new();
        prom(&c, "up", &[]).unwrap();
        let r = c.resolve("up", 1, Value::Int(1), &[], &mut buf);
        assert_eq!(
            r.unwrap_err(),
            PointError::IllegalArgument("Need at least one tag (metric=up, tags={})".into())
        );
        prom(&c, "m", &[("path", "a b")]).unwrap();
        let r = c.resolve("m", 1, Value::Int(1), &[("path", "a b")], &mut buf);
        assert!(matches!(r, Err(PointError::IllegalArgument(_))), "{r:?}");
        let (put, _) = c
            .resolve("sys.cpu", 1, Value::Int(1), &[("host", "a")], &mut buf)
            .unwrap();
        assert!(prom(&c, "sys.cpu", &[("host", "a")]).is_err());
        let (both, _) = c
            .resolve("cpu", 1, Value::Int(1), &[("host", "a")], &mut buf)
            .unwrap();
        let again = prom(&c, "cpu", &[("host", "a")]).unwrap();
        assert!(Arc::ptr_eq(&both, &again));
        assert!(!Arc::ptr_eq(&put, &again));
    }

    /// Label values holding what other formats use as separators (`=`,
    /// `,`, spaces, quotes, braces) never make two label sets one key.
    #[test]
    fn punctuation_in_values_never_merges_series() {
        let c = cache(true);
        let sets: [&[(&str, &str)]; 8] = [
            &[("a", "1,b=2")],
            &[("a", "1"), ("b", "2")],
            &[("a", "1 b=2")],
            &[("a", "\"1\",b=\"2\"")],
            &[("a", "1}"), ("b", "{2")],
            &[("a", "1"), ("b", "{2")],
            &[("a", "1=b"), ("c", "2")],
            &[("a", "1"), ("b", "=c=2")],
        ];
        let mut ids = std::collections::HashSet::new();
        for tags in sets {
            let s = prom(&c, "m", tags).unwrap();
            assert!(ids.insert(s.id), "{tags:?}");
            let mut want: Vec<_> = tags.to_vec();
            want.sort();
            assert_eq!(s.tags().collect::<Vec<_>>(), want);
            // The same names find the same series.
            assert_eq!(prom(&c, "m", tags).unwrap().id, s.id);
        }
        assert_eq!(c.len(), sets.len());
        // The key's own separators are refused, never looked up.
        assert!(prom(&c, "m", &[("a", "1\0b\u{1}2")]).is_err());
        assert_eq!(c.len(), sets.len());
    }

    /// Replay takes names only other rules than OpenTSDB's allow: they
    /// were checked when written.
    #[test]
    fn replay_takes_names_of_either_rules() {
        let c = cache(false);
        let s = c
            .resolve_replayed("job:rate5m", &[("path", "/a b=\"c\"")])
            .unwrap();
        assert_eq!(s.metric(), "job:rate5m");
        let none = c.resolve_replayed("up", &[]).unwrap();
        assert_eq!(none.tags().len(), 0);
        // The series is then found by the Prometheus rules, not by put's.
        let mut buf = String::new();
        let (again, _) = c
            .resolve_as(
                SeriesRules::Prometheus,
                "up",
                1_356_998_400_000,
                Value::Float(0.5),
                &[],
                &mut buf,
            )
            .unwrap();
        assert!(Arc::ptr_eq(&none, &again));
        assert!(c.resolve("up", 1, Value::Int(1), &[], &mut buf).is_err());
    }

    /// `tsd.core.auto_create_metrics` is the put paths' setting: a
    /// remote-written series creates its names with it off.
    #[test]
    fn remote_written_names_are_created_without_auto_create() {
        let c = cache(false);
        let mut buf = String::new();
        assert!(
            c.resolve("m", 1, Value::Int(1), &[("host", "a")], &mut buf)
                .is_err()
        );
        let (s, _) = c
            .resolve_as(
                SeriesRules::Prometheus,
                "m",
                1_356_998_400_000,
                Value::Float(1.0),
                &[("host", "a")],
                &mut buf,
            )
            .unwrap();
        assert_eq!(s.metric(), "m");
        // Now the name exists, a put of the same metric resolves too.
        assert!(
            c.resolve(
                "m",
                1_356_998_400,
                Value::Int(1),
                &[("host", "b")],
                &mut buf
            )
            .is_ok()
        );
    }

    #[test]
    fn opentsdb_messages() {
        let c = cache(false);
        let mut buf = String::new();
        let e = |r: Result<(Arc<Series>, Timestamp), PointError>| r.unwrap_err();
        assert_eq!(
            e(c.resolve("m", 1, Value::Int(1), &[("host", "a")], &mut buf)),
            PointError::UnknownName("No such name for 'metrics': 'm'".into())
        );
        assert_eq!(
            e(c.resolve("m", 1, Value::Int(1), &[], &mut buf)),
            PointError::IllegalArgument("Need at least one tag (metric=m, tags={})".into())
        );
        let nine: Vec<(String, String)> =
            (0..9).map(|i| (format!("k{i}"), "v".to_string())).collect();
        let nine: Vec<(&str, &str)> = nine.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let msg = match e(c.resolve("m", 1, Value::Int(1), &nine, &mut buf)) {
            PointError::IllegalArgument(m) => m,
            other => panic!("{other:?}"),
        };
        assert!(
            msg.starts_with("Too many tags: 9 maximum allowed: 8, tags: {"),
            "{msg}"
        );
        assert_eq!(
            e(c.resolve("a b", 1, Value::Int(1), &[("host", "a")], &mut buf)),
            PointError::IllegalArgument(
                "Invalid metric name (\"a b\"): illegal character:  ".into()
            )
        );
        assert_eq!(
            e(c.resolve("m", 99999999999999, Value::Int(1), &[("host", "a")], &mut buf)),
            PointError::IllegalArgument(
                "bad timestamp=99999999999999 when trying to add value=[1]/0 to metric=m, tags={host=a}"
                    .into()
            )
        );
    }
}
