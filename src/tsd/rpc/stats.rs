//! `stats`: telnet, `/api/stats` (and `/api/stats/query`), `/stats`
//! (OpenTSDB's `StatsRpc`). The figures come from
//! [`TsdState::stats_report`]; this file only picks the shape.

use hyper::Method;

use super::After;
use crate::tsd::TsdState;
use crate::tsd::http::call::{Call, allow};
use crate::tsd::http::reply::Reply;

pub(crate) fn telnet(state: &TsdState, out: &mut Vec<u8>) -> After {
    for l in state.stats_report().lines() {
        out.extend_from_slice(l.as_bytes());
        out.push(b'\n');
    }
    After::Continue
}

/// The API gives JSON objects (or the query log); the legacy page the
/// telnet lines, as text or as a JSON array of strings (`?json`).
pub(crate) fn http(c: &Call) -> Reply {
    if let Err(r) = allow(c, &[Method::GET, Method::POST]) {
        return r;
    }
    if c.api() {
        return match c.rest.first().map(String::as_str) {
            Some("query") => Reply::json(200, c.state.queries.json().to_string()),
            _ => Reply::json(200, c.state.stats_report().json().to_string()),
        };
    }
    let lines = c.state.stats_report().lines();
    if c.query.has("json") {
        Reply::json(200, serde_json::to_string(&lines).expect("json"))
    } else {
        let mut s = lines.join("\n");
        s.push('\n');
        Reply::text(200, s)
    }
}
