//! `stats`: telnet, `/api/stats` (and `/api/stats/query`), `/stats`
//! (OpenTSDB's `StatsRpc`). The figures come from
//! [`TsdState::stats_report`]; this file only picks the shape. rtsdb's
//! additions: `DELETE /api/stats/query?id=N` cancels a running query,
//! and `/api/stats/cardinality` is answered by
//! [`cardinality`](crate::tsd::http::cardinality).

use hyper::Method;

use super::After;
use crate::tsd::TsdState;
use crate::tsd::http::call::{Call, allow};
use crate::tsd::http::cardinality;
use crate::tsd::http::reply::Reply;
use crate::tsd::stats::Cancel;

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
    let sub = if c.api() {
        c.rest.first().map(String::as_str)
    } else {
        None
    };
    if sub == Some("query") && c.method == Method::DELETE {
        return cancel(c);
    }
    if let Err(r) = allow(c, &[Method::GET, Method::POST]) {
        return r;
    }
    if c.api() {
        return match sub {
            Some("query") => Reply::json(200, c.state.queries.json().to_string()),
            Some("cardinality") => cardinality::http(c),
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

/// `DELETE /api/stats/query?id=N`: asks the running query `N` to stop.
/// Its client gets a 503 (`/api/query`, `/api/query/exp`, `gexp`), `/q`'s
/// 500 page, or a Prometheus `canceled` error once its run sees the
/// cancel, at its next batch of points read or PromQL step.
fn cancel(c: &Call) -> Reply {
    let Some(raw) = c.query.get("id") else {
        return Reply::error(
            400,
            "Missing parameter <code>id</code>",
            "DELETE /api/stats/query needs the id of a running query (see GET /api/stats/query)",
        );
    };
    let Ok(id) = raw.trim().parse::<u64>() else {
        return Reply::error(400, "Invalid query id", &format!("Not a query id: {raw}"));
    };
    match c.state.queries.cancel(id) {
        Cancel::Cancelled => Reply::json(
            200,
            serde_json::json!({"id": id, "cancelled": true}).to_string(),
        ),
        Cancel::Finished => Reply::error(
            400,
            "Query already finished",
            &format!("Query {id} has finished and cannot be cancelled"),
        ),
        Cancel::Unknown => Reply::error(404, "No such query", &format!("No query with id {id}")),
    }
}
