//! `/api/search/lookup` and `tsdb search lookup` over the series index.
//!
//! OpenTSDB's lookup scans `tsdb-meta` (or, with `use_meta=false`, the
//! whole data table) with a row-key regex, which is why it often returns
//! `[]` when meta tracking is off (spec section 9 item 8). Here the series
//! index, which every write keeps up to date, answers instead: no meta
//! setup, no scan of data rows.
//!
//! Matching, as `TimeSeriesLookup`: an optional metric; tag pairs where
//! either side may be `*`. Pairs with the same tag key are OR-ed, pairs
//! with different keys are AND-ed (pairs whose key is `*` form one more
//! OR-group). Results come in TSUID byte order, at most `limit`.

use crate::model::Tsuid;
use crate::model::UidKind;
use crate::uid::{UidTable, UidTableError};

use super::SeriesIndex;

/// A lookup: `None` stands for `*` (any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LookupQuery {
    pub metric: Option<String>,
    pub tags: Vec<(Option<String>, Option<String>)>,
    pub limit: usize,
}

/// OpenTSDB's default `limit`.
pub(crate) const DEFAULT_LIMIT: usize = 25;

/// One matching series with its names resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LookupResult {
    pub tsuid: Tsuid,
    pub metric: String,
    /// In TSUID order (by tag key UID).
    pub tags: Vec<(String, String)>,
}

fn star(s: &str) -> Option<String> {
    let s = s.trim();
    if s.is_empty() || s == "*" {
        None
    } else {
        Some(s.to_string())
    }
}

impl LookupQuery {
    /// Builds a query from a metric (empty or `*` = any) and raw pairs.
    pub(crate) fn new(metric: &str, tags: &[(String, String)], limit: usize) -> LookupQuery {
        LookupQuery {
            metric: star(metric),
            tags: tags.iter().map(|(k, v)| (star(k), star(v))).collect(),
            limit,
        }
    }

    /// Parses `metric{k=v,k2=*,*=v3}` (the metric and the braces optional),
    /// the `m=` grammar of `/api/search/lookup`.
    pub(crate) fn parse_m(m: &str) -> Result<(String, Vec<(String, String)>), String> {
        let m = m.trim();
        let Some(open) = m.find('{') else {
            return Ok((m.to_string(), Vec::new()));
        };
        if !m.ends_with('}') {
            return Err(format!("Missing '}}' at the end of: {m}"));
        }
        let metric = m[..open].trim().to_string();
        let inner = &m[open + 1..m.len() - 1];
        let mut tags = Vec::new();
        for pair in inner.split(',').filter(|p| !p.trim().is_empty()) {
            let Some((k, v)) = pair.split_once('=') else {
                return Err(format!("invalid tag: {pair}"));
            };
            tags.push((k.trim().to_string(), v.trim().to_string()));
        }
        Ok((metric, tags))
    }
}

/// What can go wrong: a name that has no UID (OpenTSDB answers 404
/// `Unable to resolve one or more UIDs`).
pub(crate) type LookupError = UidTableError;

/// Runs a lookup.
pub(crate) fn lookup(
    uids: &UidTable,
    index: &SeriesIndex,
    q: &LookupQuery,
) -> Result<Vec<LookupResult>, LookupError> {
    let metric = q
        .metric
        .as_deref()
        .map(|m| uids.get_id(UidKind::Metric, m))
        .transpose()?;
    // Groups of (key, value) UID pairs; `None` = any.
    type Pair = (Option<crate::model::Uid>, Option<crate::model::Uid>);
    let mut groups: Vec<(Option<crate::model::Uid>, Vec<Pair>)> = Vec::new();
    for (k, v) in &q.tags {
        let ku = k
            .as_deref()
            .map(|k| uids.get_id(UidKind::TagKey, k))
            .transpose()?;
        let vu = v
            .as_deref()
            .map(|v| uids.get_id(UidKind::TagValue, v))
            .transpose()?;
        match groups.iter_mut().find(|(gk, _)| *gk == ku) {
            Some((_, g)) => g.push((ku, vu)),
            None => groups.push((ku, vec![(ku, vu)])),
        }
    }
    let matches = |t: &Tsuid| {
        groups.iter().all(|(_, g)| {
            g.iter().any(|(k, v)| {
                t.tags
                    .iter()
                    .any(|(tk, tv)| k.is_none_or(|k| k == *tk) && v.is_none_or(|v| v == *tv))
            })
        })
    };
    let metrics = match metric {
        Some(m) => vec![m],
        None => index.metrics(),
    };
    let mut found: Vec<Tsuid> = Vec::new();
    for m in metrics {
        index.with_metric(m, |ms| {
            if let Some(ms) = ms {
                found.extend(ms.series.iter().filter(|t| matches(t)).cloned());
            }
        });
    }
    found.sort_unstable();
    let mut out = Vec::new();
    for tsuid in found {
        if out.len() >= q.limit {
            break;
        }
        // A series whose UIDs were deleted since cannot be named: skip it.
        let Ok(metric) = uids.get_name(UidKind::Metric, tsuid.metric) else {
            continue;
        };
        let tags: Result<Vec<(String, String)>, _> = tsuid
            .tags
            .iter()
            .map(|(k, v)| {
                Ok::<_, UidTableError>((
                    uids.get_name(UidKind::TagKey, *k)?.to_string(),
                    uids.get_name(UidKind::TagValue, *v)?.to_string(),
                ))
            })
            .collect();
        let Ok(tags) = tags else { continue };
        out.push(LookupResult {
            tsuid,
            metric: metric.to_string(),
            tags,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_m_grammar() {
        assert_eq!(
            LookupQuery::parse_m("sys.cpu{host=*,*=web01}").unwrap(),
            (
                "sys.cpu".to_string(),
                vec![
                    ("host".to_string(), "*".to_string()),
                    ("*".to_string(), "web01".to_string())
                ]
            )
        );
        assert_eq!(LookupQuery::parse_m("{host=a}").unwrap().0, String::new());
        assert!(LookupQuery::parse_m("m{host=a").is_err());
        assert!(LookupQuery::parse_m("m{host}").is_err());
        let q = LookupQuery::new("*", &[("host".into(), "*".into())], 3);
        assert_eq!(q.metric, None);
        assert_eq!(q.tags, vec![(Some("host".to_string()), None)]);
    }
}
