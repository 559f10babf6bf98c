//! The Prometheus query API under `/prometheus/api/v1/`.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::http::request::Parts;

use super::super::reply::Reply;
use crate::tsd::TsdState;

/// `/prometheus<sub>` for every `sub` but the remote-write path.
pub(super) async fn route(
    _state: &Arc<TsdState>,
    _head: Parts,
    _body: Incoming,
    _sub: &str,
) -> Reply {
    Reply::json(
        404,
        r#"{"status":"error","errorType":"bad_data","error":"not found"}"#,
    )
}
