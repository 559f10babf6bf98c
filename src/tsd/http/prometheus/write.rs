//! Prometheus remote write 1.0 and 2.0 into the write path:
//! `POST /api/v1/write` and `/prometheus/api/v1/write`.
//!
//! The version is the `Content-Type`'s (`application/x-protobuf` is 1.0,
//! `…;proto=io.prometheus.write.v2.Request` 2.0, anything else 415, as
//! the 2.0 spec asks); the body is a snappy block whether or not
//! `Content-Encoding: snappy` says so (Prometheus 2.42 does not look at
//! the header; another encoding is 415). Series are checked by
//! [`SeriesRules::Prometheus`] and their samples logged and buffered as
//! `/api/put`'s points are, with the same acknowledgement: once appended
//! to the WAL, or once durable when the URL asks `sync` as `/api/put`'s
//! does.
//!
//! Answers: 204 when every sample was written. 400, with the first
//! refusal as plain text, for a body that is not snappy or not protobuf
//! and for samples that can never be stored (bad names, a time the store
//! cannot hold, native histograms); the good samples of such a request
//! are written, and senders do not retry a 4xx. 5xx only for what a
//! retry can fix: the WAL cannot be written (a full disk) or the shared
//! storage is down. A 2.0 answer carries the
//! `X-Prometheus-Remote-Write-*-Written` counts.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use hyper::Method;
use hyper::body::Incoming;
use hyper::header;
use hyper::http::request::Parts;

use super::super::body::{Reservation, collect_wire, preflight};
use super::super::ingest::{Appender, acknowledge};
use super::super::reply::{Query, Reply};
use super::metadata::MetricMetadata;
use crate::db::{Appended, PendingPoint, SeriesRules};
use crate::model::point::MAX_MILLIS;
use crate::model::{Timestamp, Value};
use crate::protocol::PointError;
use crate::protocol::remote_write::{self, RemoteWriteError, Request, Version};
use crate::tsd::TsdState;

/// Bodies at most this long (as sent) are decoded on the connection's
/// task; longer ones on a blocking thread.
const BLOCKING_BODY: usize = 64 * 1024;
/// Samples checked and appended at once.
const APPEND_BATCH: usize = 8192;

/// The 2.0 answer headers.
const SAMPLES_WRITTEN: &str = "X-Prometheus-Remote-Write-Samples-Written";
const HISTOGRAMS_WRITTEN: &str = "X-Prometheus-Remote-Write-Histograms-Written";
const EXEMPLARS_WRITTEN: &str = "X-Prometheus-Remote-Write-Exemplars-Written";

/// `POST /api/v1/write`.
pub(super) async fn route(state: &Arc<TsdState>, head: Parts, body: Incoming) -> Reply {
    if head.method != Method::POST {
        return Reply::text(405, "remote write takes POST only\n").with_header("Allow", "POST");
    }
    let content_type = head
        .headers
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("?"));
    let Some(version) = Version::of_content_type(content_type) else {
        return Reply::text(
            415,
            format!(
                "unsupported Content-Type {:?}: remote write takes application/x-protobuf (1.0) or application/x-protobuf;proto=io.prometheus.write.v2.Request (2.0)\n",
                content_type.unwrap_or("")
            ),
        );
    };
    if let Some(enc) = head.headers.get(header::CONTENT_ENCODING) {
        let enc = enc.to_str().unwrap_or("?").trim();
        if !enc.eq_ignore_ascii_case("snappy") && !enc.is_empty() {
            return Reply::text(
                415,
                format!("unsupported Content-Encoding {enc:?}: remote write bodies are snappy\n"),
            );
        }
    }
    let sync = Query::parse(head.uri.query()).has("sync");
    let request = match read(state, &head, body, version).await {
        Ok(r) => r,
        Err(reply) => return reply,
    };
    let outcome = write(state.clone(), request, sync).await;
    outcome.reply(version)
}

/// Reads and decodes the body, within `/api/put`'s limits: the body as
/// sent and decompressed each at most `tsd.http.request.max_chunk`, and
/// both held in the budget of bodies in flight while decoded.
async fn read(
    state: &Arc<TsdState>,
    head: &Parts,
    body: Incoming,
    version: Version,
) -> Result<Request, Reply> {
    let limit = state.options.max_body_bytes;
    let declared = preflight(state, head)?;
    let mut reservation = Reservation::new(state, declared.unwrap_or(0)).await?;
    let wire = collect_wire(state, body, &mut reservation).await?;
    // The decompressed length the header declares, reserved before the
    // decoder allocates it (checked against the limit by the decoder).
    if let Ok(len) = snap::raw::decompress_len(&wire)
        && len <= limit
    {
        reservation.grow_to(wire.len() + len).await?;
    }
    let decoded = if wire.len() <= BLOCKING_BODY {
        remote_write::decode(&wire, version, limit)
    } else {
        tokio::task::spawn_blocking(move || remote_write::decode(&wire, version, limit))
            .await
            .map_err(|_| Reply::text(500, "decoding the request failed\n"))?
    };
    drop(reservation);
    decoded.map_err(|e| match e {
        RemoteWriteError::TooLarge { .. } => Reply::text(413, format!("{e}\n")),
        e => Reply::text(400, format!("{e}\n")),
    })
}

/// What writing a request did (remote write's, and OTLP's, which writes
/// its series through [`log_samples`] too).
#[derive(Debug, Default)]
pub(in crate::tsd::http) struct Outcome {
    /// Samples appended (and acknowledged, unless `failure` says not).
    pub(in crate::tsd::http) written: u64,
    /// The first refusal: what the 400 says.
    pub(in crate::tsd::http) first_refusal: Option<String>,
    /// Samples refused for what they are.
    pub(in crate::tsd::http) refused: u64,
    /// Why nothing more could be written, if a retry could fix it.
    pub(in crate::tsd::http) failure: Option<PointError>,
}

impl Outcome {
    fn refuse(&mut self, why: impl FnOnce() -> String, samples: u64) {
        self.refused += samples;
        if self.first_refusal.is_none() {
            self.first_refusal = Some(why());
        }
    }

    fn reply(self, version: Version) -> Reply {
        let reply = if let Some(e) = &self.failure {
            let status = match e {
                PointError::Storage(_) => 500,
                _ => 503,
            };
            Reply::text(status, format!("{}\n", message(e)))
        } else if let Some(why) = &self.first_refusal {
            Reply::text(400, format!("{why}\n"))
        } else {
            Reply::new(204, "text/plain; charset=utf-8", Vec::new())
        };
        match version {
            Version::V1 => reply,
            // Nothing is written when a retryable failure stops the
            // request: the sender sends it all again.
            Version::V2 => reply
                .with_header(
                    SAMPLES_WRITTEN,
                    if self.failure.is_some() {
                        0
                    } else {
                        self.written
                    }
                    .to_string(),
                )
                .with_header(HISTOGRAMS_WRITTEN, "0")
                .with_header(EXEMPLARS_WRITTEN, "0"),
        }
    }
}

/// A refusal's words for the sender's log.
pub(in crate::tsd::http) fn message(e: &PointError) -> String {
    match e {
        PointError::IllegalArgument(m)
        | PointError::InvalidValue(m)
        | PointError::UnknownName(m)
        | PointError::NoSuchRollup(m) => m.clone(),
        PointError::Unavailable(m) | PointError::StorageDown(m) | PointError::Storage(m) => {
            format!("the store cannot take samples now: {m}")
        }
    }
}

/// Whether an error is a sample's own (400) rather than the store's.
fn is_refusal(e: &PointError) -> bool {
    matches!(
        e,
        PointError::IllegalArgument(_)
            | PointError::InvalidValue(_)
            | PointError::UnknownName(_)
            | PointError::NoSuchRollup(_)
    )
}

/// The store's time of a remote-write timestamp (milliseconds), or why
/// it cannot be stored. Times up to `u32::MAX` ms (before 1970-02-19)
/// would read back as seconds, as OpenTSDB tells its precisions apart by
/// magnitude: they are refused, as are times past what a row key holds.
pub(crate) fn timestamp_of(ms: i64) -> Result<Timestamp, String> {
    if ms <= i64::from(u32::MAX) || ms > MAX_MILLIS as i64 {
        return Err(format!(
            "timestamp {ms} ms is outside what the store keeps (after 1970-02-19T17:02:47.295Z, before 2106-02-07T06:28:16Z)"
        ));
    }
    Timestamp::from_raw(ms).map_err(|e| e.to_string())
}

/// Resolves, logs and acknowledges a decoded request's samples, and keeps
/// its metadata.
async fn write(state: Arc<TsdState>, request: Request, sync: bool) -> Outcome {
    for m in &request.metadata {
        state.metadata.record(
            &m.metric,
            MetricMetadata {
                kind: m.kind.as_str().to_string(),
                help: m.help.clone(),
                unit: m.unit.clone(),
            },
        );
    }
    let received = request.sample_count() + request.refused.iter().map(|(_, n)| *n).sum::<usize>();
    state
        .stats
        .remote_write_samples
        .fetch_add(received as u64, Ordering::Relaxed);
    let small = request.sample_count() <= APPEND_BATCH;
    write_request(state, request, SeriesRules::Prometheus, !small, sync).await
}

/// Appends a decoded request's samples under `rules` (on a thread made
/// for blocking when `blocking`: a large request), then acknowledges them
/// as the request asks (`sync`).
pub(in crate::tsd::http) async fn write_request(
    state: Arc<TsdState>,
    request: Request,
    rules: SeriesRules,
    blocking: bool,
    sync: bool,
) -> Outcome {
    let (mut outcome, last) = if !blocking {
        log_samples(&state, &request, rules)
    } else {
        let st = state.clone();
        match tokio::task::spawn_blocking(move || log_samples(&st, &request, rules)).await {
            Ok(r) => r,
            Err(_) => (
                Outcome {
                    failure: Some(PointError::Storage("writing the samples failed".into())),
                    ..Outcome::default()
                },
                None,
            ),
        }
    };
    if outcome.failure.is_none()
        && let Err(e) = acknowledge(&state, last, sync).await
    {
        outcome.failure = Some(e);
    }
    outcome
}

/// Checks (by `rules`) and appends the samples of `request` a batch at a
/// time; the last append, to wait on. Stops at the first failure a retry
/// could fix.
pub(in crate::tsd::http) fn log_samples(
    state: &TsdState,
    request: &Request,
    rules: SeriesRules,
) -> (Outcome, Option<Appended>) {
    let mut outcome = Outcome::default();
    for (e, samples) in &request.refused {
        outcome.refuse(|| e.to_string(), *samples as u64);
    }
    let db = &state.db;
    let mut key = String::new();
    let mut batch: Vec<PendingPoint> = Vec::with_capacity(APPEND_BATCH.min(request.sample_count()));
    let mut appender = Appender::new(state);
    for s in &request.series {
        let tags = s.tags();
        let mut series = None;
        for (i, sample) in s.samples.iter().enumerate() {
            let ts = match timestamp_of(sample.timestamp_ms) {
                Ok(ts) => ts,
                Err(why) => {
                    let name = || format!("{why}, in series {}", describe(s));
                    outcome.refuse(name, 1);
                    continue;
                }
            };
            let value = Value::Float(sample.value);
            let resolved = match &series {
                Some(known) => Arc::clone(known),
                None => match db.resolve_as(
                    rules,
                    s.metric(),
                    sample.timestamp_ms,
                    value,
                    &tags,
                    &mut key,
                ) {
                    Ok((found, _)) => {
                        series = Some(found.clone());
                        found
                    }
                    Err(e) if is_refusal(&e) => {
                        state.stats.count_error(&e);
                        outcome.refuse(|| message(&e), (s.samples.len() - i) as u64);
                        break;
                    }
                    Err(e) => {
                        state.stats.count_error(&e);
                        outcome.failure = Some(e);
                        return (outcome, appender.last());
                    }
                },
            };
            batch.push(PendingPoint {
                series: resolved,
                ts,
                value,
            });
            if batch.len() >= APPEND_BATCH
                && !appender.append_into(&mut batch, &mut outcome.written, &mut outcome.failure)
            {
                return (outcome, appender.last());
            }
        }
    }
    appender.append_into(&mut batch, &mut outcome.written, &mut outcome.failure);
    (outcome, appender.last())
}

/// `metric{a="1", …}` for messages.
fn describe(s: &remote_write::Series) -> String {
    crate::write::rules::describe(s.metric(), &s.tags())
}
