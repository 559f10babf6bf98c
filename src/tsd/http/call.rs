//! The routed request handlers receive ([`Call`]: state, head, API
//! method and version, path rest, query string), the method check every
//! endpoint makes ([`allow`]), and reading its body whole under the
//! body limits and budget. Below the router and every handler.

use std::sync::Arc;

use hyper::Method;
use hyper::body::Incoming;
use hyper::http::request::Parts;

use super::body::{self, Reservation};
use super::reply::{Query, Reply, legacy_bad_request, method_not_allowed};
use crate::tsd::TsdState;

/// A routed request, without its body.
pub(crate) struct Call {
    pub state: Arc<TsdState>,
    pub head: Parts,
    /// The API method: the verb, or `method_override` on GET.
    pub method: Method,
    /// 0 for legacy paths.
    pub api_version: u32,
    /// Lower-cased path components after the endpoint.
    pub rest: Vec<String>,
    pub query: Query,
    /// The body's share of the budget of bodies in flight, once read
    /// whole (`read_body`): held until the request is done.
    pub body_hold: std::sync::OnceLock<Reservation>,
}

impl Call {
    /// Whether this came by `/api/...` rather than a legacy path.
    pub(crate) fn api(&self) -> bool {
        self.api_version > 0
    }

    /// The request's own verb.
    pub(crate) fn verb(&self) -> &Method {
        &self.head.method
    }
}

/// `RpcUtil.allowedMethods`: refuses an API method not in `allowed`, with
/// a 405 on `/api` paths and OpenTSDB's legacy 400 on the others.
pub(crate) fn allow(c: &Call, allowed: &[Method]) -> Result<(), Reply> {
    if allowed.contains(&c.method) {
        Ok(())
    } else if c.api() {
        Err(method_not_allowed(&c.method))
    } else {
        Err(legacy_bad_request(&c.query, "Method not allowed"))
    }
}

/// Reads, limits and decompresses the request body of an endpoint that
/// parses it whole; its bytes count against the budget of bodies in
/// flight until the request is done (see [`body`]).
pub(super) async fn read_body(c: &Call, body: Incoming) -> Result<Vec<u8>, Reply> {
    let (bytes, reservation) = body::read_whole(&c.state, &c.head, body).await?;
    // A request reads one body; were there a second, it would be held
    // until the first is released.
    let _ = c.body_hold.set(reservation);
    Ok(bytes)
}

/// The body if it holds something besides whitespace: a body counts only
/// then (`HttpQuery.hasContent()`).
pub(super) fn content(body: Option<&[u8]>) -> Option<&[u8]> {
    body.filter(|b| !b.iter().all(u8::is_ascii_whitespace))
}

/// Parses a JSON request body with OpenTSDB's messages for an empty or
/// malformed one.
pub(super) fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Reply> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(Reply::error(
            400,
            "Missing message content",
            "Supply valid JSON formatted data in the body of your request",
        ));
    }
    serde_json::from_slice(body)
        .map_err(|e| Reply::error(400, "Unable to parse the given JSON", &e.to_string()))
}

/// A JSON value as the string OpenTSDB's map parsing would give
/// (`null`: none; other non-strings: their JSON text).
pub(super) fn json_text(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// The body of a request whose verb carries one: `None` for GET
/// requests, which OpenTSDB never reads a body of.
pub(super) async fn body_unless_get(c: &Call, body: Incoming) -> Result<Option<Vec<u8>>, Reply> {
    if *c.verb() == Method::GET {
        return Ok(None);
    }
    read_body(c, body).await.map(Some)
}
