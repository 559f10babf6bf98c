//! `/api/suggest` and the legacy `/suggest` (`SuggestRpc`): names of one
//! kind starting with a prefix, in byte order, as a JSON array.

use hyper::Method;

use super::{Query, Reply, method_not_allowed, parse_json};
use crate::model::UidKind;
use crate::tsd::TsdState;

/// OpenTSDB's default `max`.
const DEFAULT_MAX: i64 = 25;

struct Params {
    kind: String,
    q: String,
    max: Option<String>,
}

fn from_query(q: &Query) -> Result<Params, Reply> {
    let kind = q
        .get("type")
        .ok_or_else(|| Reply::error(400, "Missing parameter <code>type</code>", ""))?;
    Ok(Params {
        kind: kind.to_string(),
        q: q.get("q").unwrap_or("").to_string(),
        max: q.get("max").map(String::from),
    })
}

fn from_json(body: &[u8]) -> Result<Params, Reply> {
    let v: serde_json::Value = parse_json(body)?;
    let text = |k: &str| match v.get(k) {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(other) => Some(other.to_string()),
    };
    let kind = text("type").ok_or_else(|| Reply::error(400, "Missing 'type' parameter", ""))?;
    Ok(Params {
        kind,
        q: text("q").unwrap_or_default(),
        max: text("max"),
    })
}

fn answer(state: &TsdState, p: Params) -> Reply {
    let kind = match p.kind.as_str() {
        "metrics" => UidKind::Metric,
        "tagk" => UidKind::TagKey,
        "tagv" => UidKind::TagValue,
        other => return Reply::error(400, &format!("Invalid 'type' parameter:{other}"), ""),
    };
    // `Integer.parseInt` (no spaces, 32 bits); an empty, zero or negative
    // max falls back to the default, as SuggestRpc calls the one-argument
    // suggest then.
    let max = match p.max.as_deref() {
        None | Some("") => DEFAULT_MAX,
        Some(m) => match m.parse::<i32>() {
            Ok(n) if n > 0 => i64::from(n),
            Ok(_) => DEFAULT_MAX,
            Err(_) => return Reply::error(400, "Unable to parse 'max' as a number", ""),
        },
    };
    let max = usize::try_from(max).unwrap_or(0);
    match state.db.uids().suggest(kind, &p.q, max) {
        Ok(names) => Reply::json(200, serde_json::to_string(&names).expect("json")),
        Err(e) => Reply::error(500, "Unexpected exception", &e.to_string()),
    }
}

/// `/api/suggest`: GET with a query string, POST with a JSON body.
pub(super) fn handle(state: &TsdState, method: &Method, q: &Query, body: Option<&[u8]>) -> Reply {
    let params = match (method, body) {
        (&Method::GET, _) => from_query(q),
        (&Method::POST, Some(b)) => from_json(b),
        (&Method::POST, None) => from_query(q),
        _ => return method_not_allowed(method),
    };
    match params {
        Ok(p) => answer(state, p),
        Err(r) => r,
    }
}

/// Legacy `/suggest`: query string only.
pub(super) fn handle_legacy(state: &TsdState, q: &Query) -> Reply {
    match from_query(q) {
        Ok(p) => answer(state, p),
        Err(r) => r,
    }
}
