//! The Prometheus HTTP APIs on the TSD's port: remote write in
//! (`/api/v1/write`, `/prometheus/api/v1/write`) and the query API under
//! `/prometheus/api/v1/` (the URL a user gives Grafana or vmalert is
//! `http://host:4242/prometheus`). OpenTSDB's versioned paths keep their
//! meaning: `/api/v1/query` is `/api/query`.
//!
//! - `write`: remote write 1.0 and 2.0 bodies into the write path.
//! - `metadata`: the metric metadata remote write sends, kept in memory
//!   for `metadata`.
//! - `api`: `query`, `query_range`, `series`, `labels`, label values,
//!   `metadata`, `status/buildinfo`, `query_exemplars`, `format_query`,
//!   in Prometheus' JSON and error shapes; `api_params` reads their
//!   parameters, `api_json` writes their answers.

mod api;
mod api_json;
mod api_params;
pub(crate) mod metadata;
pub(super) mod write;

pub(crate) use write::timestamp_of;

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::http::request::Parts;

use super::reply::Reply;
use crate::tsd::TsdState;

/// Where a path goes: a Prometheus API, or OpenTSDB's table.
pub(super) fn owns(path: &str) -> bool {
    path == "/api/v1/write" || path.starts_with("/prometheus/")
}

/// Answers a request whose path [`owns`] said is a Prometheus API's.
pub(super) async fn dispatch(state: &Arc<TsdState>, head: Parts, body: Incoming) -> Reply {
    let path = head.uri.path().to_string();
    let sub = path.strip_prefix("/prometheus").unwrap_or(&path);
    match sub {
        "/api/v1/write" => write::route(state, head, body).await,
        _ => api::route(state, head, body, sub).await,
    }
}
