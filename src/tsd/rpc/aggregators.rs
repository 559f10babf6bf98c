//! `/api/aggregators` and `/aggregators` (OpenTSDB's `ListAggregators`;
//! not a telnet command there either).

use hyper::Method;

use crate::query::Aggregator;
use crate::tsd::http::call::{Call, allow};
use crate::tsd::http::reply::Reply;

/// The names in the query engine's order, the same JSON on both paths.
pub(crate) fn http(c: &Call) -> Reply {
    if let Err(r) = allow(c, &[Method::GET, Method::POST]) {
        return r;
    }
    let names: Vec<&str> = Aggregator::names().collect();
    Reply::json(200, serde_json::to_string(&names).expect("json"))
}
