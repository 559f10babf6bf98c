//! `/api/search/*` (`SearchRpc`): `lookup` is answered from the series
//! index ([`crate::index::lookup`]); the other types need a search plugin
//! in OpenTSDB and, as there without one, answer 400.

use std::time::Instant;

use hyper::Method;
use serde::{Deserialize, Serialize};

use super::{Query, Reply, method_not_allowed, parse_json};
use crate::index::lookup::{DEFAULT_LIMIT, LookupQuery, lookup};
use crate::tsd::TsdState;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct TagPair {
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    value: Option<String>,
}

/// The JSON body of a lookup, echoed in the response.
#[derive(Debug, Clone, Deserialize)]
struct LookupBody {
    #[serde(default)]
    metric: Option<String>,
    #[serde(default)]
    tags: Vec<TagPair>,
    #[serde(default)]
    limit: Option<i64>,
    #[serde(default, rename = "useMeta", alias = "use_meta")]
    _use_meta: Option<bool>,
}

#[derive(Serialize)]
struct ResultRow {
    tsuid: String,
    metric: String,
    tags: serde_json::Map<String, serde_json::Value>,
}

#[derive(Serialize)]
struct LookupResponse {
    #[serde(rename = "type")]
    kind: &'static str,
    metric: String,
    tags: Vec<TagPair>,
    limit: usize,
    #[serde(rename = "startIndex")]
    start_index: u32,
    time: u64,
    #[serde(rename = "totalResults")]
    total_results: usize,
    results: Vec<ResultRow>,
}

/// `/api/search/<type>`.
pub(super) fn handle(
    state: &TsdState,
    method: &Method,
    rest: &[String],
    q: &Query,
    body: Option<&[u8]>,
) -> Reply {
    if !(method == Method::GET || method == Method::POST) {
        return method_not_allowed(method);
    }
    match rest.first().map(String::as_str) {
        Some("lookup") => match parse_lookup(q, body) {
            Ok(b) => run_lookup(state, b),
            Err(r) => r,
        },
        _ => Reply::error(400, "Searching is not enabled", ""),
    }
}

fn parse_lookup(q: &Query, body: Option<&[u8]>) -> Result<LookupBody, Reply> {
    if let Some(b) = body {
        let parsed: LookupBody = parse_json(b)?;
        return Ok(parsed);
    }
    let m = q
        .get("m")
        .ok_or_else(|| Reply::error(400, "Missing parameter <code>m</code>", ""))?;
    let (metric, tags) =
        LookupQuery::parse_m(m).map_err(|e| Reply::error(400, "Unable to parse the query", &e))?;
    let limit = match q.get("limit") {
        None => None,
        Some(l) => Some(
            l.trim()
                .parse::<i64>()
                .map_err(|_| Reply::error(400, "Unable to parse 'limit' as a number", ""))?,
        ),
    };
    Ok(LookupBody {
        metric: Some(metric),
        tags: tags
            .into_iter()
            .map(|(k, v)| TagPair {
                key: Some(k),
                value: Some(v),
            })
            .collect(),
        limit,
        _use_meta: None,
    })
}

fn run_lookup(state: &TsdState, body: LookupBody) -> Reply {
    let started = Instant::now();
    let limit = match body.limit {
        None => DEFAULT_LIMIT,
        Some(n) if n > 0 => n as usize,
        Some(_) => return Reply::error(400, "Limit must be greater than 0", ""),
    };
    let metric = body.metric.clone().unwrap_or_default();
    let pairs: Vec<(String, String)> = body
        .tags
        .iter()
        .map(|t| {
            (
                t.key.clone().unwrap_or_default(),
                t.value.clone().unwrap_or_default(),
            )
        })
        .collect();
    let query = LookupQuery::new(&metric, &pairs, limit);
    let w = &state.writer;
    let found = match lookup(w.uids(), w.index(), &query) {
        Ok(f) => f,
        Err(e @ crate::uid::UidTableError::NoSuchName { .. }) => {
            return Reply::error(404, "Unable to resolve one or more UIDs", &e.to_string());
        }
        Err(e) => return Reply::error(500, "Unexpected exception", &e.to_string()),
    };
    let widths = w.store().layout().widths;
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
        metric,
        tags: body.tags,
        limit,
        start_index: 0,
        time: started.elapsed().as_millis() as u64,
        total_results: results.len(),
        results,
    };
    Reply::json(200, serde_json::to_string(&resp).expect("json"))
}
