//! Prometheus remote write 1.0 and 2.0 into the write path.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::http::request::Parts;

use super::super::reply::Reply;
use crate::tsd::TsdState;

/// `POST /api/v1/write`.
pub(super) async fn route(_state: &Arc<TsdState>, _head: Parts, _body: Incoming) -> Reply {
    Reply::text(501, "remote write is being built\n")
}
