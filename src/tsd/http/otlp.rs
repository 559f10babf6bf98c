//! OpenTelemetry metrics over OTLP/HTTP into the write path:
//! `POST /v1/metrics` (the path OTLP exporters append to an endpoint) and
//! `POST /opentelemetry/v1/metrics` (for an exporter given
//! `http://host:4242/opentelemetry` as its base, as VictoriaMetrics and
//! Prometheus name theirs).
//!
//! The body is `application/x-protobuf` or `application/json` (anything
//! else is 415), gzip or deflate as `Content-Encoding` says, read within
//! `/api/put`'s limits. Its metrics become series by
//! `protocol::otlp::translate` (`tsd.otlp.*`) and are logged and
//! acknowledged as remote write's samples are (the same append path,
//! `prometheus::write::log_samples`): once in the WAL, or once durable
//! with `?sync`. Names are checked by [`SeriesRules::LineProtocol`] when kept
//! as sent, by [`SeriesRules::Prometheus`] when built by the naming
//! convention.
//!
//! Answers, as an OTLP/HTTP receiver's, in the request's encoding: 200
//! with an `ExportMetricsServiceResponse`, whose `partial_success` counts
//! the data points refused and says why (the first reason, and how many
//! reasons more); 400 with a `google.rpc.Status` for a body that does not
//! decode; 413 for one over `tsd.http.request.max_chunk`; 503 (which
//! exporters retry) when the store cannot take points (a full disk, the
//! cluster's storage down); 415 for another content type.

use std::sync::Arc;

use hyper::Method;
use hyper::body::Incoming;
use hyper::header;
use hyper::http::request::Parts;

use super::body::read_whole;
use super::prometheus::metadata::MetricMetadata;
use super::prometheus::write::{message, write_request};
use super::reply::{Query, Reply, not_found};
use crate::db::SeriesRules;
use crate::protocol::PointError;
use crate::protocol::otlp::{self, Encoding, Translated};
use crate::protocol::remote_write::Request;
use crate::tsd::TsdState;

/// Bodies at most this long (inflated) are decoded on the connection's
/// task; longer ones on a blocking thread.
const BLOCKING_BODY: usize = 64 * 1024;
/// Series written on the connection's task at most; more on a blocking
/// thread.
const BLOCKING_SERIES: usize = 8192;

/// gRPC status codes of the error answers (`google.rpc.Code`).
const INVALID_ARGUMENT: i32 = 3;
const RESOURCE_EXHAUSTED: i32 = 8;
const INTERNAL: i32 = 13;
const UNAVAILABLE: i32 = 14;

/// Whether a path is OTLP's.
pub(super) fn owns(path: &str) -> bool {
    path == "/v1/metrics" || path == "/opentelemetry/v1/metrics"
}

/// `POST /v1/metrics`.
pub(super) async fn route(state: &Arc<TsdState>, head: Parts, body: Incoming) -> Reply {
    if !state.options.mode.writes() {
        return not_found(true, &Query::parse(head.uri.query()));
    }
    if head.method != Method::POST {
        return Reply::text(405, "OTLP/HTTP takes POST only\n").with_header("Allow", "POST");
    }
    let content_type = head
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let Some(encoding) = Encoding::of_content_type(content_type) else {
        return Reply::text(
            415,
            format!(
                "unsupported Content-Type {content_type:?}: OTLP/HTTP takes application/x-protobuf or application/json\n"
            ),
        );
    };
    let sync = Query::parse(head.uri.query()).has("sync");
    let translated = match read(state, &head, body, encoding).await {
        Ok(t) => t,
        Err(reply) => return reply,
    };
    write(state.clone(), translated, sync, encoding).await
}

/// An error answer: a `google.rpc.Status` in the request's encoding.
fn status(encoding: Encoding, http: u16, message: &str) -> Reply {
    let code = match http {
        400 => INVALID_ARGUMENT,
        413 => RESOURCE_EXHAUSTED,
        503 => UNAVAILABLE,
        _ => INTERNAL,
    };
    Reply::new(
        http,
        encoding.content_type(),
        encoding.status(code, message),
    )
}

/// The body's error answer (OpenTSDB's envelope, from the shared body
/// reader) as a `Status` with its message and details.
fn as_status(encoding: Encoding, reply: Reply) -> Reply {
    let words = serde_json::from_slice::<serde_json::Value>(&reply.body)
        .ok()
        .and_then(|v| {
            let e = v.get("error")?;
            let m = e.get("message")?.as_str()?.to_string();
            Some(match e.get("details").and_then(|d| d.as_str()) {
                Some(d) if !d.is_empty() => format!("{m}: {d}"),
                _ => m,
            })
        })
        .unwrap_or_else(|| String::from_utf8_lossy(&reply.body).trim().to_string());
    status(encoding, reply.status, &words)
}

/// Reads, inflates, decodes and translates the body.
async fn read(
    state: &Arc<TsdState>,
    head: &Parts,
    body: Incoming,
    encoding: Encoding,
) -> Result<Translated, Reply> {
    let (bytes, reservation) = read_whole(state, head, body)
        .await
        .map_err(|r| as_status(encoding, r))?;
    let small = bytes.len() <= BLOCKING_BODY;
    let st = state.clone();
    let work = move || {
        let request = otlp::decode(&bytes, encoding)?;
        drop(bytes);
        let o = &st.options.otlp;
        Ok(otlp::translate(request, &o.mapping, &st.otlp_deltas))
    };
    let decoded: Result<Translated, otlp::OtlpError> = if small {
        work()
    } else {
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|_| status(encoding, 500, "decoding the request failed"))?
    };
    drop(reservation);
    decoded.map_err(|e| status(encoding, 400, &e.to_string()))
}

/// Writes the series and answers.
async fn write(state: Arc<TsdState>, t: Translated, sync: bool, encoding: Encoding) -> Reply {
    for m in &t.metadata {
        state.metadata.record(
            &m.metric,
            MetricMetadata {
                kind: m.kind.as_str().to_string(),
                help: m.help.clone(),
                unit: m.unit.clone(),
            },
        );
    }
    let rules = if state.options.otlp.mapping.prometheus_names {
        SeriesRules::Prometheus
    } else {
        SeriesRules::LineProtocol
    };
    let refused_points = t.refused_points() as u64;
    let mut reasons: Vec<String> = t.refused.iter().map(|(r, _)| r.to_string()).collect();
    let request = Request {
        series: t.series,
        ..Request::default()
    };
    let blocking = request.series.len() > BLOCKING_SERIES;
    let mut outcome = write_request(state.clone(), request, rules, blocking, sync).await;
    if let Some(e) = &outcome.failure {
        let http = match e {
            PointError::Storage(_) => 500,
            _ => 503,
        };
        return status(encoding, http, &message(e));
    }
    if let Some(why) = outcome.first_refusal.take() {
        reasons.push(why);
    }
    let rejected = refused_points + outcome.refused;
    let text = match reasons.len() {
        0 => String::new(),
        1 => reasons.swap_remove(0),
        n => format!("{} (and {} more reasons)", reasons[0], n - 1),
    };
    if rejected > 0 {
        tracing::debug!(rejected, "OTLP points refused: {text}");
    }
    Reply::new(
        200,
        encoding.content_type(),
        encoding.response(rejected, &text),
    )
}
