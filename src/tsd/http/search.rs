//! `/api/search/*` (`SearchRpc`): `lookup` is answered from the series
//! index ([`crate::index::lookup`]); the other types need a search plugin
//! in OpenTSDB and, as there without one, answer 400.

use std::time::Instant;

use hyper::Method;
use serde::{Deserialize, Serialize};

use super::{Query, Reply, parse_json};
use crate::index::lookup::{DEFAULT_LIMIT, LookupQuery, lookup};
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
    // Other types are parsed first, then need a search plugin.
    if let Some(b) = body {
        if let Err(r) = parse_json::<serde_json::Value>(b) {
            return r;
        }
    } else {
        if q.get("query").is_none_or(str::is_empty) {
            return bad("Missing parameter <code>query</code>", "");
        }
        for (k, name) in [("limit", "limit"), ("start_index", "start_index")] {
            if let Some(v) = q.get(k)
                && v.parse::<i32>().is_err()
            {
                return bad(&format!("Unable to convert '{name}' to a valid number"), "");
            }
        }
    }
    bad("Searching is not enabled", "")
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
    let widths = w.rows().widths();
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
