//! `/api/search/*` (`SearchRpc`): `lookup` is answered from the series
//! index ([`crate::index::lookup`]); the other types, which need a search
//! plugin in OpenTSDB, from rtsdb's own data (`Db::search`, query
//! language in [`crate::search`]), in `SearchQuery`'s response shape.

use std::time::Instant;

use hyper::Method;
use serde::{Deserialize, Serialize};

use super::{Query, Reply, parse_json};
use crate::db::{SearchHits, SearchRequest};
use crate::index::lookup::{DEFAULT_LIMIT, LookupQuery, lookup};
use crate::protocol::jackson;
use crate::search::{SearchExpr, SearchType};
use crate::tsd::TsdState;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct TagPair {
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    value: Option<String>,
}

/// The JSON body of a lookup (`SearchQuery`), echoed in the response.
#[derive(Debug, Clone, Deserialize)]
struct LookupBody {
    #[serde(default)]
    metric: Option<String>,
    #[serde(default)]
    tags: Option<Vec<TagPair>>,
    #[serde(default)]
    limit: Option<i64>,
    #[serde(default, rename = "startIndex")]
    start_index: Option<i64>,
    #[serde(default, rename = "useMeta", alias = "use_meta")]
    _use_meta: Option<bool>,
}

#[derive(Serialize)]
struct ResultRow {
    tsuid: String,
    metric: String,
    tags: serde_json::Map<String, serde_json::Value>,
}

/// `SearchQuery` as Jackson writes it: properties in field declaration
/// order, those whose getter name differs from the field's (`startIndex`,
/// `totalResults`) last; `NON_NULL`, so a missing metric or tag list is
/// left out; `time` is a Java float (`12.0`).
#[derive(Serialize)]
struct LookupResponse {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    metric: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tags: Option<Vec<TagPair>>,
    limit: i64,
    time: f32,
    results: Vec<ResultRow>,
    #[serde(rename = "startIndex")]
    start_index: i64,
    #[serde(rename = "totalResults")]
    total_results: usize,
}

/// The search types `SearchQuery.parseSearchType` knows.
const TYPES: [&str; 6] = [
    "tsmeta",
    "tsmeta_summary",
    "tsuids",
    "uidmeta",
    "annotation",
    "lookup",
];

fn bad(msg: &str, details: &str) -> Reply {
    Reply::error(400, msg, details)
}

/// `/api/search/<type>`.
pub(super) fn handle(
    state: &TsdState,
    method: &Method,
    rest: &[String],
    q: &Query,
    body: Option<&[u8]>,
) -> Reply {
    // `SearchRpc` answers other verbs with a plain 400, not a 405.
    if !(method == Method::GET || method == Method::POST) {
        return bad(&format!("Unsupported method: {}", method.as_str()), "");
    }
    let kind = rest
        .first()
        .map(|t| t.to_ascii_lowercase())
        .unwrap_or_default();
    if !TYPES.contains(&kind.as_str()) {
        let details = if kind.is_empty() {
            "Type provided was null or empty".to_string()
        } else {
            format!("Unknown type: {}", rest[0])
        };
        return bad("Invalid search query type supplied", &details);
    }
    if kind == "lookup" {
        return match parse_lookup(q, body) {
            Ok(b) => run_lookup(state, b),
            Err(r) => r,
        };
    }
    let kind = SearchType::parse(&kind).expect("a known type");
    let body = match body {
        Some(b) => match parse_json::<SearchBody>(b) {
            Ok(b) => b,
            Err(r) => return r,
        },
        None => match search_qs(q) {
            Ok(b) => b,
            Err(r) => return r,
        },
    };
    run_search(state, kind, body)
}

/// The JSON body of a search (`SearchQuery`), echoed in the response.
#[derive(Debug, Clone, Deserialize)]
struct SearchBody {
    #[serde(default, deserialize_with = "jackson::string_opt")]
    query: Option<String>,
    #[serde(default, deserialize_with = "jackson::string_opt")]
    metric: Option<String>,
    #[serde(default)]
    tags: Option<Vec<TagPair>>,
    #[serde(default, deserialize_with = "opt_long")]
    limit: Option<i64>,
    #[serde(default, rename = "startIndex", deserialize_with = "opt_long")]
    start_index: Option<i64>,
}

fn opt_long<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    jackson::long(d).map(Some)
}

/// `SearchRpc.parseQueryString` for the types other than lookup.
fn search_qs(q: &Query) -> Result<SearchBody, Reply> {
    let query = q
        .get("query")
        .filter(|s| !s.is_empty())
        .ok_or_else(|| bad("Missing parameter <code>query</code>", ""))?;
    let int = |key: &str| -> Result<Option<i64>, Reply> {
        q.get(key)
            .map(|v| {
                // `Integer.parseInt`: no spaces, 32 bits.
                v.parse::<i32>()
                    .map(i64::from)
                    .map_err(|_| bad(&format!("Unable to convert '{key}' to a valid number"), ""))
            })
            .transpose()
    };
    Ok(SearchBody {
        query: Some(query.to_string()),
        metric: None,
        tags: None,
        limit: int("limit")?,
        start_index: int("start_index")?,
    })
}

/// `SearchQuery` as Jackson writes it (see [`LookupResponse`]), with the
/// query string; `metric` is `"*"` unless given, as its constructor sets.
#[derive(Serialize)]
struct SearchResponse {
    #[serde(rename = "type")]
    kind: &'static str,
    query: String,
    metric: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    tags: Option<Vec<TagPair>>,
    limit: i64,
    time: f32,
    results: Vec<Box<serde_json::value::RawValue>>,
    #[serde(rename = "startIndex")]
    start_index: i64,
    #[serde(rename = "totalResults")]
    total_results: usize,
}

fn run_search(state: &TsdState, kind: SearchType, body: SearchBody) -> Reply {
    let query = body.query.unwrap_or_default();
    let expr = match SearchExpr::parse(&query) {
        Ok(e) => e,
        Err(e) => return bad("Unable to parse query", &e.to_string()),
    };
    let limit = body.limit.unwrap_or(DEFAULT_LIMIT as i64);
    let start_index = body.start_index.unwrap_or(0);
    let req = SearchRequest {
        kind,
        expr,
        limit,
        start_index: start_index.max(0) as usize,
    };
    let found = match state.db.search(&req) {
        Ok(f) => f,
        Err(e) => return Reply::error(500, &e.to_string(), ""),
    };
    let results: Vec<Box<serde_json::value::RawValue>> = match &found.hits {
        SearchHits::TsMeta(v) => v.iter().map(to_raw).collect(),
        SearchHits::UidMeta(v) => v.iter().map(to_raw).collect(),
        SearchHits::Summaries(v) => v
            .iter()
            .map(|s| {
                let row = ResultRow {
                    tsuid: s.tsuid.clone(),
                    metric: s.metric.clone(),
                    tags: s
                        .tags
                        .iter()
                        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                        .collect(),
                };
                to_raw(&row)
            })
            .collect(),
        SearchHits::Tsuids(v) => v.iter().map(to_raw).collect(),
        SearchHits::Annotations(v) => v
            .iter()
            .map(|a| serde_json::value::RawValue::from_string(a.to_api_json()).expect("json"))
            .collect(),
    };
    let resp = SearchResponse {
        kind: kind.name(),
        query,
        metric: body.metric.unwrap_or_else(|| "*".into()),
        tags: body.tags,
        limit,
        time: found.time_ms,
        results,
        start_index,
        total_results: found.total,
    };
    Reply::json(200, serde_json::to_string(&resp).expect("json"))
}

/// One result as the JSON it is written as.
fn to_raw<T: Serialize>(v: &T) -> Box<serde_json::value::RawValue> {
    serde_json::value::to_raw_value(v).expect("json")
}

fn parse_lookup(q: &Query, body: Option<&[u8]>) -> Result<LookupBody, Reply> {
    if let Some(b) = body {
        let parsed: LookupBody = parse_json(b)?;
        return Ok(parsed);
    }
    let m = q
        .get("m")
        .filter(|m| !m.is_empty())
        .ok_or_else(|| bad("Missing parameter <code>m</code>", ""))?;
    let (metric, tags) = LookupQuery::parse_m(m).map_err(|e| bad("Unable to parse query", &e))?;
    let limit = match q.get("limit") {
        None => None,
        // `Integer.parseInt`: no spaces, 32 bits.
        Some(l) => Some(
            l.parse::<i32>()
                .map_err(|_| bad("Unable to convert 'limit' to a valid number", ""))?
                as i64,
        ),
    };
    Ok(LookupBody {
        metric: Some(metric),
        tags: Some(
            tags.into_iter()
                .map(|(k, v)| TagPair {
                    key: Some(k),
                    value: Some(v),
                })
                .collect(),
        ),
        limit,
        start_index: None,
        _use_meta: None,
    })
}

fn run_lookup(state: &TsdState, body: LookupBody) -> Reply {
    let started = Instant::now();
    if body.metric.is_none() && body.tags.as_ref().is_none_or(|t| t.is_empty()) {
        return bad(
            "Missing metric and tags. Please supply at least one value.",
            "",
        );
    }
    let limit = body.limit.unwrap_or(DEFAULT_LIMIT as i64);
    // SearchRpc and SearchQuery accept any limit; a non-positive one is
    // taken as "no limit" here (not checked against the 2.4 scanner).
    let cap = if limit > 0 {
        limit as usize
    } else {
        usize::MAX
    };
    let metric = body.metric.clone().unwrap_or_default();
    let pairs: Vec<(String, String)> = body
        .tags
        .iter()
        .flatten()
        .map(|t| {
            (
                t.key.clone().unwrap_or_default(),
                t.value.clone().unwrap_or_default(),
            )
        })
        .collect();
    let query = LookupQuery::new(&metric, &pairs, cap);
    let w = &state.db;
    let found = match lookup(w.uids(), w.index(), &query) {
        Ok(f) => f,
        Err(e @ crate::uid::UidTableError::NoSuchName { .. }) => {
            return Reply::error(404, "Unable to resolve one or more UIDs", &e.to_string());
        }
        Err(e) => return Reply::error(500, "Unexpected exception", &e.to_string()),
    };
    let widths = w.store().widths();
    let results: Vec<ResultRow> = found
        .into_iter()
        .map(|r| ResultRow {
            tsuid: r.tsuid.to_hex(&widths),
            metric: r.metric,
            tags: r
                .tags
                .into_iter()
                .map(|(k, v)| (k, serde_json::Value::String(v)))
                .collect(),
        })
        .collect();
    let resp = LookupResponse {
        kind: "LOOKUP",
        metric: body.metric,
        tags: body.tags,
        limit,
        time: started.elapsed().as_millis() as f32,
        total_results: results.len(),
        results,
        start_index: body.start_index.unwrap_or(0),
    };
    Reply::json(200, serde_json::to_string(&resp).expect("json"))
}
