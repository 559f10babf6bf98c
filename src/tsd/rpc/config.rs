//! `/api/config` and `/api/config/filters` (OpenTSDB's `ShowConfig`; API
//! only). The one place that reads the raw configuration after start.

use hyper::Method;

use crate::tsd::http::call::{Call, allow};
use crate::tsd::http::reply::{Reply, not_found};

pub(crate) fn http(c: &Call) -> Reply {
    if let Err(r) = allow(c, &[Method::GET, Method::POST]) {
        return r;
    }
    match c.rest.first().map(String::as_str) {
        None => {}
        Some("filters") => {
            return Reply::json(200, crate::query::filter::filters_json().to_string());
        }
        Some(_) => return not_found(true, &c.query),
    }
    let map: serde_json::Map<String, serde_json::Value> = c
        .state
        .settings
        .entries()
        .map(|(k, v)| (k.to_string(), v.into()))
        .collect();
    Reply::json(200, serde_json::Value::Object(map).to_string())
}
