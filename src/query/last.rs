//! `/api/query/last`: the newest point of each requested series, served
//! from the series index (which knows every series and the hour of its
//! newest row), so it works without OpenTSDB's meta-table settings.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::context::QueryContext;
use super::error::QueryError;
use super::request::query_pairs;
use crate::model::Tsuid;
use crate::model::java::double_to_string;
use crate::model::row_span::{ROW_SPAN_MS, ROW_SPAN_SECS, hour_floor};
use crate::model::{UidKind, UidWidths, Value};
use crate::protocol::jackson;
use crate::store::read::Point;
use crate::uid::UidTableError;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LastSubQuery {
    #[serde(deserialize_with = "jackson::string_opt")]
    pub metric: Option<String>,
    pub tags: BTreeMap<String, String>,
    pub tsuids: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LastQuery {
    pub queries: Vec<LastSubQuery>,
    #[serde(alias = "resolve", deserialize_with = "jackson::boolean")]
    pub resolve_names: bool,
    #[serde(alias = "back_scan", deserialize_with = "jackson::long")]
    pub back_scan: i64,
}

/// Parses the GET form: `timeseries=metric{k=v,..}` and `tsuids=a,b`
/// (both repeatable), `resolve`, `back_scan=<hours>`.
pub fn parse_last_get(qs: &str) -> Result<LastQuery, QueryError> {
    let mut q = LastQuery::default();
    for (k, v) in query_pairs(qs) {
        match k.as_str() {
            "timeseries" => {
                let (metric, tags) = match v.find('{') {
                    None => (v.clone(), BTreeMap::new()),
                    Some(i) => {
                        let inner = v[i + 1..].strip_suffix('}').ok_or_else(|| {
                            QueryError::bad(format!("Missing '}}' at the end of: {v}"))
                        })?;
                        let mut tags = BTreeMap::new();
                        for pair in inner.split(',').filter(|p| !p.is_empty()) {
                            let (a, b) = pair
                                .split_once('=')
                                .filter(|(a, b)| !a.is_empty() && !b.is_empty())
                                .ok_or_else(|| QueryError::bad(format!("invalid tag: {pair}")))?;
                            tags.insert(a.to_string(), b.to_string());
                        }
                        (v[..i].to_string(), tags)
                    }
                };
                q.queries.push(LastSubQuery {
                    metric: Some(metric),
                    tags,
                    tsuids: vec![],
                });
            }
            "tsuids" => q.queries.push(LastSubQuery {
                tsuids: v
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect(),
                ..Default::default()
            }),
            "resolve" => q.resolve_names = true,
            "back_scan" => {
                q.back_scan = v
                    .parse()
                    .map_err(|_| QueryError::bad("Unable to parse back_scan parameter"))?
            }
            _ => {}
        }
    }
    if q.queries.is_empty() {
        return Err(QueryError::bad("Missing timeseries or tsuids"));
    }
    Ok(q)
}

pub fn parse_last_post(body: &[u8]) -> Result<LastQuery, QueryError> {
    serde_json::from_slice(body)
        .map_err(|e| QueryError::bad(format!("Unable to parse the given JSON: {e}")))
}

/// Finds the newest point of every requested series and renders the
/// response array (timestamps in ms, values as strings).
pub fn execute_last(ctx: &QueryContext, q: &LastQuery) -> Result<serde_json::Value, QueryError> {
    let widths = ctx.widths();
    let mut out = Vec::new();
    for sub in &q.queries {
        for tsuid in series_for(ctx, sub, widths, q.back_scan > 0)? {
            let Some(point) = newest(ctx, &tsuid, q.back_scan)? else {
                continue;
            };
            let mut o = serde_json::Map::new();
            if q.resolve_names {
                let resolved = (|| -> Result<_, UidTableError> {
                    let metric = ctx.uids.get_name(UidKind::Metric, tsuid.metric)?;
                    let mut tags = serde_json::Map::new();
                    for &(k, v) in &tsuid.tags {
                        tags.insert(
                            ctx.uids.get_name(UidKind::TagKey, k)?.to_string(),
                            ctx.uids.get_name(UidKind::TagValue, v)?.to_string().into(),
                        );
                    }
                    Ok((metric, tags))
                })();
                match resolved {
                    Ok((metric, tags)) => {
                        o.insert("metric".into(), metric.to_string().into());
                        o.insert("tags".into(), tags.into());
                    }
                    // A deleted UID: skip the series rather than fail.
                    Err(UidTableError::NoSuchId { .. }) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            o.insert("timestamp".into(), point.timestamp_ms().into());
            let value = match point.value() {
                Value::Int(i) => i.to_string(),
                Value::Float(f) => double_to_string(f),
            };
            o.insert("value".into(), value.into());
            o.insert("tsuid".into(), tsuid.to_hex(&widths).into());
            out.push(serde_json::Value::Object(o));
        }
    }
    Ok(serde_json::Value::Array(out))
}

fn series_for(
    ctx: &QueryContext,
    sub: &LastSubQuery,
    widths: UidWidths,
    exact: bool,
) -> Result<Vec<Tsuid>, QueryError> {
    if !sub.tsuids.is_empty() {
        return sub
            .tsuids
            .iter()
            .map(|h| {
                Tsuid::parse_hex(h, &widths)
                    .map_err(|e| QueryError::bad(format!("Invalid TSUID '{h}': {e}")))
            })
            .collect();
    }
    let name = sub
        .metric
        .as_deref()
        .ok_or_else(|| QueryError::bad("Missing metric or tsuids"))?;
    let metric = ctx.uids.get_id(UidKind::Metric, name)?;
    let mut pairs = Vec::with_capacity(sub.tags.len());
    for (k, v) in &sub.tags {
        pairs.push((
            ctx.uids.get_id(UidKind::TagKey, k)?,
            ctx.uids.get_id(UidKind::TagValue, v)?,
        ));
    }
    let mut found: Vec<Tsuid> = ctx.index.with_metric(metric, |m| {
        let Some(m) = m else { return Vec::new() };
        m.series
            .iter()
            .filter(|t| pairs.iter().all(|p| t.tags.contains(p)))
            .filter(|t| !exact || t.tags.len() == pairs.len())
            .cloned()
            .collect()
    });
    found.sort();
    Ok(found)
}

fn newest(ctx: &QueryContext, tsuid: &Tsuid, back_scan: i64) -> Result<Option<Point>, QueryError> {
    let hours: Vec<u64> = if back_scan > 0 {
        let now_hour = hour_floor(ctx.now_ms / 1000);
        (0..=back_scan as u64)
            .map_while(|h| now_hour.checked_sub(h * ROW_SPAN_SECS as u64))
            .collect()
    } else {
        match ctx.index.last_hour(tsuid) {
            // The recorded newest hour, then a day back in case it was deleted.
            Some(h) if h > 0 => (0..24u64)
                .map_while(|i| (h as u64).checked_sub(i * ROW_SPAN_SECS as u64))
                .collect(),
            // Known without a recorded hour: look back a day from now.
            Some(_) => {
                let now_hour = hour_floor(ctx.now_ms / 1000);
                (0..24u64)
                    .map_while(|i| now_hour.checked_sub(i * ROW_SPAN_SECS as u64))
                    .collect()
            }
            None => Vec::new(),
        }
    };
    for hour in hours {
        let mut last = None;
        ctx.source.read_tsuids(
            std::slice::from_ref(tsuid),
            hour * 1000,
            hour * 1000 + ROW_SPAN_MS - 1,
            &mut |_, pts| {
                // A stale marker is no value to OpenTSDB: the newest
                // point is the newest other one.
                last = pts
                    .iter()
                    .rev()
                    .find(|p| !p.is_stale_marker())
                    .copied()
                    .or(last);
                true
            },
        )?;
        if last.is_some() {
            return Ok(last);
        }
    }
    Ok(None)
}
