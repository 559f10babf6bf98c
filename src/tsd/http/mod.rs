//! The HTTP side of the TSD: CORS, request bodies (size limit,
//! gzip/deflate), gzip responses and the JSON error envelope
//! `{"error":{"code":..,"message":..,"details":..}}`. Paths, methods and
//! `tsd.mode` are routed by [`routes`]; each endpoint has its own file,
//! or a module of `crate::tsd::rpc` if telnet serves it too.

pub(crate) mod access;
mod annotation;
mod backup;
mod body;
pub(crate) mod call;
pub(crate) mod cardinality;
mod gexp;
mod graph;
mod histogram;
mod influx;
mod ingest;
mod logs;
mod metrics;
mod otlp;
pub(crate) mod prometheus;
pub(crate) mod put;
mod query;
pub(crate) mod reply;
mod rollup;
mod routes;
mod search;
mod serializers;
mod suggest;
mod tree;
mod ui;
mod uid;

pub(crate) use body::BodyBudget;
use call::{Call, allow, content, json_text, parse_json, read_body};
pub use graph::GraphOptions;
pub(crate) use graph::{GraphCache, new_cache as new_graph_cache};
pub use influx::InfluxOptions;
pub(crate) use put::ConnMemo;
use reply::{
    Query, Reply, error_body, legacy_bad_request, legacy_internal_error, make_page,
    method_not_allowed,
};
use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use super::TsdState;
use super::stats::inc;

/// Bodies at least this long are gzipped for clients that accept it.
const GZIP_MIN: usize = 512;

fn now_s() -> u64 {
    chrono::Utc::now().timestamp().max(0) as u64
}

/// hyper's entry point for one request.
pub(crate) async fn serve_request(
    state: Arc<TsdState>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    inc(&state.stats.rpc_http);
    let accept_gzip = req
        .headers()
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("gzip"));
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut cors = false;
    let reply = 'reply: {
        if !state.options.cors_domains.is_empty()
            && let Some(origin) = &origin
        {
            let allowed = state
                .options
                .cors_domains
                .iter()
                .any(|d| d == "*" || d.eq_ignore_ascii_case(origin));
            if !allowed {
                break 'reply Reply::error(200, "CORS domain not allowed", "");
            }
            cors = true;
            if req.method() == Method::OPTIONS {
                break 'reply Reply::text(200, Vec::new());
            }
        }
        match &state.auth {
            None => routes::dispatch(&state, req).await,
            Some(auth) => {
                let (mut head, body) = req.into_parts();
                match access::admit(&state, auth, &mut head).await {
                    Err(refused) => refused,
                    Ok((need, user)) => {
                        // Admin requests are logged with their outcome.
                        let audit = (need == crate::auth::Need::Role(crate::auth::Role::Admin))
                            .then(|| (head.method.clone(), head.uri.path().to_string()));
                        let reply = routes::dispatch(&state, Request::from_parts(head, body)).await;
                        if let Some((method, path)) = audit {
                            tracing::info!(target: crate::auth::AUDIT_TARGET, action = "admin", protocol = "http", user = user.as_ref().map_or("-", |u| u.name.as_str()), %method, %path, status = reply.status, "admin request");
                        }
                        reply
                    }
                }
            }
        }
    };
    if reply.status >= 400 {
        inc(&state.stats.http_errors);
    }
    let mut body = reply.body;
    let mut builder = Response::builder()
        .status(StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR));
    if reply.status != 204 {
        builder = builder.header(header::CONTENT_TYPE, reply.content_type);
    }
    for (name, value) in &reply.headers {
        if let Ok(v) = HeaderValue::from_str(value) {
            builder = builder.header(*name, v);
        }
    }
    // PNGs are compressed already.
    if accept_gzip && body.len() >= GZIP_MIN && reply.content_type != graph::PNG_TYPE {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        if std::io::Write::write_all(&mut enc, &body).is_ok()
            && let Ok(z) = enc.finish()
        {
            body = z;
            builder = builder.header(header::CONTENT_ENCODING, "gzip");
        }
    }
    if cors && let Some(origin) = origin {
        builder = builder
            .header(
                header::ACCESS_CONTROL_ALLOW_ORIGIN,
                HeaderValue::from_str(&origin).unwrap_or(HeaderValue::from_static("*")),
            )
            .header(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                "GET, POST, PUT, DELETE",
            )
            .header(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                HeaderValue::from_str(&state.options.cors_headers)
                    .unwrap_or(HeaderValue::from_static("")),
            );
    }
    let resp = builder
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())));
    Ok(resp)
}
