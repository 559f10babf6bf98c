//! Series selection: which series of the index a sub-query reads, and
//! how they group. A metric and its tag filters (`literal_or`,
//! `wildcard`, `regexp`, their `not_` and case-insensitive forms) are
//! resolved to UIDs and matched against the distinct tag values the index
//! holds for each key (never against rows); explicit TSUIDs are parsed
//! and checked; series whose tag UIDs were deleted are dropped; the rest
//! are grouped by the values of the group-by keys.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::context::QueryContext;
use super::error::QueryError;
use super::filter::{FilterType, TagFilter};
use super::request::ValidSubQuery;
use crate::model::Tsuid;
use crate::model::hash::FastMap;
use crate::model::{Uid, UidKind, UidWidths};
use crate::uid::UidTableError;

/// At most how many series `sub` selects, from the index's counts alone
/// (no series list is built): the metric's series, or fewer where a
/// `literal_or` filter names the only values its key may have. A name
/// that does not resolve counts none: [`select`] then fails the query, or
/// (`skip_unresolved_tagvs`) selects nothing through that value.
pub(super) fn series_bound(ctx: &QueryContext, sub: &ValidSubQuery) -> usize {
    if !sub.tsuids.is_empty() {
        return sub.tsuids.len();
    }
    let name = sub.metric.as_deref().unwrap_or_default();
    let Ok(metric) = ctx.uids.get_id(UidKind::Metric, name) else {
        return 0;
    };
    ctx.index.with_metric(metric, |m| {
        let Some(m) = m else { return 0 };
        let mut bound = m.len();
        for f in &sub.filters {
            let Some(values) = f.literals() else { continue };
            let Ok(k) = ctx.uids.get_id(UidKind::TagKey, &f.tagk) else {
                return 0;
            };
            let named: usize = values
                .iter()
                .filter_map(|v| ctx.uids.lookup_id(UidKind::TagValue, v).ok().flatten())
                .map(|v| m.with_tag(k, v).len())
                .sum();
            bound = bound.min(named);
        }
        bound
    })
}

/// Which tag UIDs still have names, remembered for one query: series share
/// most of their tag values, so each distinct UID is looked up once.
#[derive(Default)]
struct NameCheck {
    known: FastMap<(UidKind, Uid), bool>,
    /// The tags of the last series that resolved: series come sorted, so
    /// most of a series' pairs are its predecessor's, known good without
    /// a lookup.
    last: Vec<(Uid, Uid)>,
}

impl NameCheck {
    fn exists(&mut self, ctx: &QueryContext, kind: UidKind, uid: Uid) -> Result<bool, QueryError> {
        if let Some(&e) = self.known.get(&(kind, uid)) {
            return Ok(e);
        }
        let e = match ctx.uids.get_name(kind, uid) {
            Ok(_) => true,
            Err(UidTableError::NoSuchId { .. }) => false,
            Err(e) => return Err(e.into()),
        };
        self.known.insert((kind, uid), e);
        Ok(e)
    }

    /// False if one of the series' tag UIDs was deleted.
    fn resolves(&mut self, ctx: &QueryContext, tsuid: &Tsuid) -> Result<bool, QueryError> {
        for (j, &(k, v)) in tsuid.tags.iter().enumerate() {
            let last = self.last.get(j).copied();
            if last.is_none_or(|l| l.0 != k) && !self.exists(ctx, UidKind::TagKey, k)? {
                return Ok(false);
            }
            if last.is_none_or(|l| l.1 != v) && !self.exists(ctx, UidKind::TagValue, v)? {
                return Ok(false);
            }
        }
        self.last.clone_from(&tsuid.tags);
        Ok(true)
    }
}

/// The series a sub-query chose, in the order they are read, and their
/// groups.
#[derive(Debug, Clone)]
pub(super) struct Selected {
    pub(super) metric_uid: Uid,
    pub(super) metric_name: String,
    /// Every grouped series, sorted; pipelines follow this order.
    pub(super) tsuids: Vec<Tsuid>,
    /// Per output series (in output order): positions in `tsuids`,
    /// ascending.
    pub(super) groups: Vec<Vec<usize>>,
    /// Series of the metric in the index (picks scan or lookups).
    pub(super) total: usize,
    pub(super) unresolved: u64,
}

impl Selected {
    pub(super) fn heap_bytes(&self) -> usize {
        let t: usize = self
            .tsuids
            .iter()
            .map(|t| 48 + t.tags.capacity() * 16)
            .sum();
        let g: usize = self.groups.iter().map(|g| 24 + g.capacity() * 8).sum();
        t + g + self.metric_name.len()
    }
}

/// `candidates` without the series one of whose tag UIDs no longer
/// resolves to a name (deleted), and how many those were.
pub(crate) fn resolvable(
    ctx: &QueryContext,
    candidates: Vec<Tsuid>,
) -> Result<(Vec<Tsuid>, u64), QueryError> {
    let mut series: Vec<Tsuid> = Vec::with_capacity(candidates.len());
    let mut check = NameCheck::default();
    let mut unresolved = 0;
    for tsuid in candidates {
        if check.resolves(ctx, &tsuid)? {
            series.push(tsuid);
        } else {
            unresolved += 1;
        }
    }
    Ok((series, unresolved))
}

/// Picks a sub-query's series and groups them.
pub(super) fn select(ctx: &QueryContext, sub: &ValidSubQuery) -> Result<Selected, QueryError> {
    let widths = ctx.widths();
    let (metric_uid, metric_name, candidates, group_keys, total) = if !sub.tsuids.is_empty() {
        select_tsuids(ctx, sub, widths)?
    } else {
        select_metric(ctx, sub)?
    };
    // Drop series whose tag UIDs were deleted (OpenTSDB fails the query).
    let (series, unresolved) = resolvable(ctx, candidates)?;
    // Group: by the values of the group-by keys, ordered by UID bytes.
    let mut groups: BTreeMap<(Vec<Uid>, Option<Tsuid>), Vec<usize>> = BTreeMap::new();
    for (i, s) in series.iter().enumerate() {
        let mut key = Vec::with_capacity(group_keys.len());
        for gk in &group_keys {
            match s.tags.iter().find(|(k, _)| k == gk) {
                Some(&(_, v)) => key.push(v),
                None => break,
            }
        }
        if key.len() != group_keys.len() {
            continue;
        }
        let per_series = sub.aggregator.is_none().then(|| s.clone());
        groups.entry((key, per_series)).or_default().push(i);
    }
    let grouped: Vec<usize> = {
        let mut v: Vec<usize> = groups.values().flatten().copied().collect();
        v.sort_unstable();
        v
    };
    // Position of each series in `tsuids`.
    let mut slot = vec![usize::MAX; series.len()];
    for (p, &i) in grouped.iter().enumerate() {
        slot[i] = p;
    }
    // `grouped` is ascending: the grouped series move out in order.
    let tsuids: Vec<Tsuid> = series
        .into_iter()
        .enumerate()
        .filter_map(|(i, t)| (slot[i] != usize::MAX).then_some(t))
        .collect();
    let groups = groups
        .into_values()
        .map(|m| m.iter().map(|&i| slot[i]).collect())
        .collect();
    Ok(Selected {
        metric_uid,
        metric_name,
        tsuids,
        groups,
        total,
        unresolved,
    })
}

type Selection = (Uid, String, Vec<Tsuid>, Vec<Uid>, usize);

fn select_tsuids(
    ctx: &QueryContext,
    sub: &ValidSubQuery,
    widths: UidWidths,
) -> Result<Selection, QueryError> {
    let mut list: Vec<Tsuid> = Vec::new();
    for hex in &sub.tsuids {
        let t = Tsuid::parse_hex(hex, &widths)
            .map_err(|e| QueryError::bad(format!("Invalid TSUID '{hex}': {e}")))?;
        if let Some(first) = list.first()
            && first.metric != t.metric
        {
            return Err(QueryError::bad(format!(
                "One or more TSUIDs did not share the same metric [{}] [{}]",
                first.metric.to_hex(widths.metric),
                t.metric.to_hex(widths.metric)
            )));
        }
        if !list.contains(&t) {
            list.push(t);
        }
    }
    let metric = list[0].metric;
    let name = ctx
        .uids
        .get_name(UidKind::Metric, metric)
        .map_err(|e| QueryError::bad(e.to_string()))?;
    list.sort();
    let n = list.len();
    Ok((metric, name.to_string(), list, Vec::new(), n))
}

/// The series of one metric that tag filters select, as
/// [`match_series`] finds them in the index.
#[derive(Debug, Clone)]
pub(crate) struct Matched {
    pub(crate) metric: Uid,
    /// Sorted.
    pub(crate) series: Vec<Tsuid>,
    /// Each filter's tag key, in the filters' order.
    pub(crate) filter_keys: Vec<Uid>,
    /// Series of the metric in the index.
    pub(crate) total: usize,
}

/// Picks a metric query's series from the index.
fn select_metric(ctx: &QueryContext, sub: &ValidSubQuery) -> Result<Selection, QueryError> {
    let name = sub.metric.clone().unwrap_or_default();
    let m = match_series(ctx, &name, &sub.filters, sub.explicit_tags)?;
    let group_keys: Vec<Uid> = {
        let set: BTreeSet<Uid> = sub
            .filters
            .iter()
            .zip(&m.filter_keys)
            .filter(|(f, _)| f.group_by)
            .map(|(_, k)| *k)
            .collect();
        set.into_iter().collect()
    };
    Ok((m.metric, name, m.series, group_keys, m.total))
}

/// The series of metric `name` that every one of `filters` accepts (with
/// `explicit_tags`, only those tagged with exactly the filters' keys),
/// sorted. Every filter is evaluated against the distinct tag values the
/// index holds for its key (never against rows), then the matching
/// postings are intersected. Names are resolved first, as OpenTSDB does:
/// an unknown metric or tag key fails, as does an unknown literal value
/// unless `skip_unresolved_tagvs`.
pub(crate) fn match_series(
    ctx: &QueryContext,
    name: &str,
    filters: &[TagFilter],
    explicit_tags: bool,
) -> Result<Matched, QueryError> {
    let metric = ctx.uids.get_id(UidKind::Metric, name)?;
    // Resolve tag keys and literal values first, as OpenTSDB does.
    let mut tagks: Vec<Uid> = Vec::with_capacity(filters.len());
    let mut literals: HashMap<Uid, HashSet<Uid>> = HashMap::new();
    for f in filters {
        let k = ctx.uids.get_id(UidKind::TagKey, &f.tagk)?;
        tagks.push(k);
        if let Some(lits) = f.literals() {
            let set = literals.entry(k).or_default();
            for l in lits {
                match ctx.uids.lookup_id(UidKind::TagValue, l)? {
                    Some(v) => {
                        set.insert(v);
                    }
                    None if ctx.skip_unresolved_tagvs => {}
                    None => {
                        return Err(QueryError::NoSuchName(format!(
                            "No such name for 'tagv': '{l}'"
                        )));
                    }
                }
            }
        }
    }
    let filter_keys: BTreeSet<Uid> = tagks.iter().copied().collect();
    ctx.index.with_metric(metric, |m| {
        let Some(m) = m else {
            return Ok(Matched {
                metric,
                series: Vec::new(),
                filter_keys: tagks.clone(),
                total: 0,
            });
        };
        // Per key: the values allowed (positive filters) or refused (not_*).
        let mut allowed: BTreeMap<Uid, HashSet<Uid>> = BTreeMap::new();
        let mut refused: HashMap<Uid, HashSet<Uid>> = HashMap::new();
        for (k, v) in &literals {
            allowed.insert(*k, v.clone());
        }
        for (f, &k) in filters.iter().zip(&tagks) {
            if f.kind == FilterType::LiteralOr {
                continue;
            }
            let mut pass = HashSet::new();
            let mut fail = HashSet::new();
            for v in m.tag_values(k) {
                let Ok(vname) = ctx.uids.get_name(UidKind::TagValue, v) else {
                    continue;
                };
                if f.matches(Some(&vname)) {
                    pass.insert(v);
                } else {
                    fail.insert(v);
                }
            }
            if f.is_positive() {
                match allowed.get_mut(&k) {
                    Some(a) => a.retain(|v| pass.contains(v)),
                    None => {
                        allowed.insert(k, pass);
                    }
                }
            } else {
                refused.entry(k).or_default().extend(fail);
            }
        }
        // Intersect the postings of the constrained keys, smallest first.
        let mut lists: Vec<Vec<u32>> = allowed
            .iter()
            .map(|(&k, vals)| {
                let mut ids: Vec<u32> = vals
                    .iter()
                    .flat_map(|&v| m.with_tag(k, v))
                    .copied()
                    .collect();
                ids.sort_unstable();
                ids
            })
            .collect();
        lists.sort_by_key(Vec::len);
        let ids: Vec<u32> = match lists.split_first() {
            None => (0..m.len() as u32).collect(),
            Some((first, rest)) => first
                .iter()
                .copied()
                .filter(|id| rest.iter().all(|l| l.binary_search(id).is_ok()))
                .collect(),
        };
        let mut out = Vec::with_capacity(ids.len());
        'series: for id in ids {
            let t = &m.series[id as usize];
            for (k, bad) in &refused {
                if let Some((_, v)) = t.tags.iter().find(|(tk, _)| tk == k)
                    && bad.contains(v)
                {
                    continue 'series;
                }
            }
            if explicit_tags
                && (t.tags.len() != filter_keys.len()
                    || !t.tags.iter().all(|(k, _)| filter_keys.contains(k)))
            {
                continue;
            }
            out.push(t.clone());
        }
        out.sort();
        Ok(Matched {
            metric,
            series: out,
            filter_keys: tagks.clone(),
            total: m.len(),
        })
    })
}

/// What one tag key asks of a series, for selection by predicate
/// (PromQL's label matchers) rather than by OpenTSDB's filters.
pub(crate) struct TagTest<'a> {
    pub(crate) key: &'a str,
    pub(crate) values: ValueTest<'a>,
}

/// Whether a tag value (by name) passes.
pub(crate) type ValuePredicate<'a> = &'a dyn Fn(&str) -> bool;

/// The values a [`TagTest`] lets through.
pub(crate) enum ValueTest<'a> {
    /// Exactly this value (never empty): a series without the key fails.
    /// Looked up by name, not tested against every value of the key.
    Is(&'a str),
    /// The values `accepts` accepts; `absent` says whether a series
    /// without the key passes (PromQL: a missing label reads as "").
    Accepts {
        accepts: ValuePredicate<'a>,
        absent: bool,
    },
}

/// The series of `metric` that pass every one of `tests`, sorted. As in
/// [`match_series`], each test runs against the distinct values the index
/// holds for its key among the metric's series (never against rows), and
/// the postings of what passes are intersected; unlike it, an unknown key
/// or value is not an error: it selects nothing, or everything where a
/// missing key passes. Series whose tag UIDs were deleted are left in:
/// [`resolvable`] drops them.
pub(crate) fn match_tag_tests(
    ctx: &QueryContext,
    metric: Uid,
    tests: &[TagTest],
) -> Result<Vec<Tsuid>, QueryError> {
    // Per key: values allowed (every series must carry one of them) and
    // values refused (a series carrying one fails; absence passes).
    enum Required<'t> {
        Pair(Uid, Uid),
        Passing(Uid, ValuePredicate<'t>),
    }
    let mut allowed: Vec<Required> = Vec::new();
    let mut refused: Vec<(Uid, ValuePredicate)> = Vec::new();
    for t in tests {
        let key = ctx.uids.lookup_id(UidKind::TagKey, t.key)?;
        match (&t.values, key) {
            (ValueTest::Is(_), None) => return Ok(Vec::new()),
            (ValueTest::Accepts { absent: false, .. }, None) => return Ok(Vec::new()),
            // No series has the key and absence passes: no constraint.
            (ValueTest::Accepts { absent: true, .. }, None) => {}
            (ValueTest::Is(v), Some(k)) => match ctx.uids.lookup_id(UidKind::TagValue, v)? {
                Some(v) => allowed.push(Required::Pair(k, v)),
                None => return Ok(Vec::new()),
            },
            (
                ValueTest::Accepts {
                    accepts,
                    absent: false,
                },
                Some(k),
            ) => allowed.push(Required::Passing(k, *accepts)),
            (
                ValueTest::Accepts {
                    accepts,
                    absent: true,
                },
                Some(k),
            ) => refused.push((k, *accepts)),
        }
    }
    ctx.index.with_metric(metric, |m| {
        let Some(m) = m else { return Ok(Vec::new()) };
        // A value's name is looked up once per call, whichever tests ask.
        let mut names: FastMap<Uid, Option<std::sync::Arc<str>>> = FastMap::default();
        let mut name_of = |v: Uid| -> Result<Option<std::sync::Arc<str>>, QueryError> {
            if let Some(n) = names.get(&v) {
                return Ok(n.clone());
            }
            let n = match ctx.uids.get_name(UidKind::TagValue, v) {
                Ok(n) => Some(n),
                Err(UidTableError::NoSuchId { .. }) => None,
                Err(e) => return Err(e.into()),
            };
            names.insert(v, n.clone());
            Ok(n)
        };
        let mut lists: Vec<Vec<u32>> = Vec::with_capacity(allowed.len());
        for need in &allowed {
            let mut ids: Vec<u32> = match *need {
                Required::Pair(k, v) => m.with_tag(k, v).to_vec(),
                Required::Passing(k, accepts) => {
                    let mut ids = Vec::new();
                    for v in m.tag_values(k) {
                        if name_of(v)?.is_some_and(|n| accepts(&n)) {
                            ids.extend_from_slice(m.with_tag(k, v));
                        }
                    }
                    ids
                }
            };
            ids.sort_unstable();
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            lists.push(ids);
        }
        let mut bad: HashMap<Uid, HashSet<Uid>> = HashMap::new();
        for &(k, accepts) in &refused {
            for v in m.tag_values(k) {
                if !name_of(v)?.is_some_and(|n| accepts(&n)) {
                    bad.entry(k).or_default().insert(v);
                }
            }
        }
        lists.sort_by_key(Vec::len);
        let ids: Vec<u32> = match lists.split_first() {
            None => (0..m.len() as u32).collect(),
            Some((first, rest)) => first
                .iter()
                .copied()
                .filter(|id| rest.iter().all(|l| l.binary_search(id).is_ok()))
                .collect(),
        };
        let mut out: Vec<Tsuid> = ids
            .into_iter()
            .map(|id| &m.series[id as usize])
            .filter(|t| {
                !t.tags
                    .iter()
                    .any(|(k, v)| bad.get(k).is_some_and(|b| b.contains(v)))
            })
            .cloned()
            .collect();
        out.sort();
        Ok(out)
    })
}
