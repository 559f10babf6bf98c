//! InfluxDB's write API on the TSD's port: `POST /write` (1.x: `db`,
//! `rp`, `precision`, `u`/`p`), `POST /api/v2/write` (2.x: `org`,
//! `bucket`, `precision`) and `GET`/`HEAD /ping`, answered as InfluxDB
//! answers them, so that Telegraf and InfluxDB's client libraries write
//! here unchanged. `/api/v2/write` is the one `/api/v2/…` path taken out
//! of OpenTSDB's versioned paths; `/api/v2/put` and the rest still get
//! OpenTSDB's answer.
//!
//! A body (plain or `Content-Encoding: gzip`, within `/api/put`'s limits)
//! is read line by line by `protocol::influx`; each numeric field of a
//! line is a point of the metric `<measurement><separator><field>`
//! (`tsd.influx.separator`, `.` by default) with the line's tags, and,
//! when `tsd.influx.db_tag` names a tag, the database (1.x) or bucket
//! (2.x) as that tag's value. Series are checked by
//! [`SeriesRules::LineProtocol`] (no tag needed, any UTF-8) and their
//! points logged and buffered as `/api/put`'s are, with the same
//! acknowledgement: once appended to the WAL, or once durable with
//! `?sync`. Credentials (`u`/`p`, `Authorization`) are not checked.
//!
//! Answers: 204 when every field was stored. 400 with InfluxDB's error
//! body (1.x `{"error": …}`, 2.x `{"code": "invalid", "message": …}`)
//! naming the first refused lines by number and text — bad lines, times
//! the store cannot hold, names the rules refuse, string fields (the
//! store keeps numbers only; each one is counted in
//! `tsd.rpc.errors type=invalid_values`) — while the good points of the
//! body are stored. 413 for a body over `tsd.http.request.max_chunk`,
//! 503 when the WAL cannot be written (a full disk) or a cluster's
//! storage is down, so that senders retry.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use hyper::Method;
use hyper::body::Incoming;
use hyper::http::request::Parts;

use super::body::read_whole;
use super::ingest::{Appender, acknowledge};
use super::prometheus::timestamp_of;
use super::reply::{Query, Reply};
use crate::config::{Config, ConfigError};
use crate::db::{Appended, PendingPoint, SeriesRules};
use crate::protocol::PointError;
use crate::protocol::influx::{LineReader, Precision};
use crate::tsd::TsdState;
use crate::tsd::rpc::Serve;
use crate::tsd::stats::inc;

/// The version `/ping` and every answer name, as InfluxDB's server sends
/// it: the 1.x API this endpoint speaks.
const INFLUX_VERSION: &str = "1.8.10";
/// Bodies at most this long are parsed on the connection's task; longer
/// ones on a blocking thread.
const BLOCKING_BODY: usize = 64 * 1024;
/// Points checked and appended at once.
const APPEND_BATCH: usize = 8192;
/// Refused lines named in an answer; the rest are counted.
const NAMED_REFUSALS: usize = 10;
/// The longest piece of a refused line quoted in an answer.
const QUOTED_LINE: usize = 256;

/// `tsd.influx.*`: how lines become series.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfluxOptions {
    /// `tsd.influx.separator`: between measurement and field in a metric
    /// name (`_` gives PromQL-friendly names).
    pub separator: String,
    /// `tsd.influx.db_tag`: the tag the database or bucket is kept as;
    /// `None` (empty, the default): not kept.
    pub db_tag: Option<String>,
}

impl InfluxOptions {
    pub fn from_config(c: &Config) -> Result<InfluxOptions, ConfigError> {
        let separator = c.get_string("tsd.influx.separator").to_string();
        if separator.bytes().any(|b| b <= 1) {
            return Err(ConfigError::bad_value(
                "tsd.influx.separator",
                &separator,
                "may not hold a NUL or 0x01 byte",
            ));
        }
        let db_tag = match c.get_string("tsd.influx.db_tag").trim() {
            "" => None,
            t => Some(t.to_string()),
        };
        Ok(InfluxOptions { separator, db_tag })
    }
}

/// Which of InfluxDB's APIs a request came to: they differ in parameter
/// names and error bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    V1,
    V2,
}

impl Api {
    /// InfluxDB's error answer of this API.
    fn error(self, status: u16, message: &str) -> Reply {
        let body = match self {
            Api::V1 => serde_json::json!({ "error": message }),
            Api::V2 => serde_json::json!({ "code": v2_code(status), "message": message }),
        };
        Reply::json(status, body.to_string())
    }

    /// The query parameter naming where points go.
    fn database_param(self) -> &'static str {
        match self {
            Api::V1 => "db",
            Api::V2 => "bucket",
        }
    }
}

/// InfluxDB 2.x's error code of a status.
fn v2_code(status: u16) -> &'static str {
    match status {
        400 => "invalid",
        404 => "not found",
        405 => "method not allowed",
        413 => "request too large",
        503 => "unavailable",
        _ => "internal error",
    }
}

/// Whether a path is one of InfluxDB's that this module answers.
pub(super) fn owns(path: &str) -> bool {
    matches!(path, "/write" | "/api/v2/write" | "/ping")
}

/// Answers a request whose path [`owns`] said is InfluxDB's.
pub(super) async fn dispatch(state: &Arc<TsdState>, head: Parts, body: Incoming) -> Reply {
    let reply = match head.uri.path() {
        "/ping" => ping(&head),
        "/write" => write(state, head, body, Api::V1).await,
        _ => write(state, head, body, Api::V2).await,
    };
    reply
        .with_header("X-Influxdb-Version", INFLUX_VERSION)
        .with_header("X-Influxdb-Build", "rtsdb")
}

/// `/ping`: 204 for GET and HEAD, as InfluxDB's; `?verbose` gives its
/// version in a 200.
fn ping(head: &Parts) -> Reply {
    if head.method != Method::GET && head.method != Method::HEAD {
        return Api::V1
            .error(405, "/ping takes GET or HEAD")
            .with_header("Allow", "GET, HEAD");
    }
    let verbose = Query::parse(head.uri.query())
        .get("verbose")
        .is_some_and(|v| v != "false" && v != "0");
    if verbose {
        return Reply::json(200, format!("{{\"version\":\"{INFLUX_VERSION}\"}}"));
    }
    Reply::new(204, "application/json", Vec::new())
}

/// What a write request asks besides its lines.
struct Params {
    precision: Precision,
    /// The database or bucket's tag, when kept: `(tag, value)`.
    db_tag: Option<(String, String)>,
    /// When the request came: the time of lines without one.
    now_ms: i64,
}

/// `POST /write` and `POST /api/v2/write`.
async fn write(state: &Arc<TsdState>, head: Parts, body: Incoming, api: Api) -> Reply {
    if head.method != Method::POST {
        return api
            .error(405, "writes take POST only")
            .with_header("Allow", "POST");
    }
    if !Serve::Writes.on(&state.options) {
        return api.error(404, "this TSD does not take writes (tsd.mode = ro)");
    }
    let query = Query::parse(head.uri.query());
    let precision = match query.get("precision").filter(|p| !p.is_empty()) {
        None => Precision::Nanoseconds,
        Some(p) => match Precision::parse(p) {
            Some(p) => p,
            None => {
                return api.error(
                    400,
                    &format!("invalid precision {p:?}: use ns, u (or us), ms, s, m or h"),
                );
            }
        },
    };
    let db_tag = state.options.influx.db_tag.as_ref().and_then(|tag| {
        query
            .get(api.database_param())
            .filter(|db| !db.is_empty())
            .map(|db| (tag.clone(), db.to_string()))
    });
    let params = Params {
        precision,
        db_tag,
        now_ms: chrono::Utc::now().timestamp_millis(),
    };
    let (text, reservation) = match read_whole(state, &head, body).await {
        Ok(b) => b,
        Err(reply) => return influx_error(api, &reply),
    };
    let (mut outcome, last) = if text.len() <= BLOCKING_BODY {
        log_lines(state, &text, &params)
    } else {
        let st = state.clone();
        let job = tokio::task::spawn_blocking(move || {
            let r = log_lines(&st, &text, &params);
            (r, params)
        });
        match job.await {
            Ok((r, _)) => r,
            Err(_) => return api.error(500, "writing the points failed"),
        }
    };
    drop(reservation);
    if outcome.failure.is_none()
        && let Err(e) = acknowledge(state, last, query.has("sync")).await
    {
        outcome.failure = Some(e);
    }
    outcome.reply(api)
}

/// An answer of the shared body reader (OpenTSDB's error envelope) in
/// this API's shape, with the same status.
fn influx_error(api: Api, reply: &Reply) -> Reply {
    let envelope: serde_json::Value = serde_json::from_slice(&reply.body).unwrap_or_default();
    let error = &envelope["error"];
    let mut message = error["message"]
        .as_str()
        .unwrap_or("bad request")
        .to_string();
    if let Some(details) = error["details"].as_str().filter(|d| !d.is_empty()) {
        message.push_str(": ");
        message.push_str(details);
    }
    api.error(reply.status, &message)
}

/// What writing a body did.
#[derive(Debug, Default)]
struct Outcome {
    /// Points appended.
    written: u64,
    /// Points (fields) refused, and the first refused lines' words.
    refused: u64,
    refusals: Vec<String>,
    /// Lines with a refusal past those named.
    unnamed: usize,
    /// Why nothing more could be written, if a retry could fix it.
    failure: Option<PointError>,
}

impl Outcome {
    /// Counts `points` refused on line `number`, naming it if it is
    /// among the first refused lines.
    fn refuse(&mut self, number: usize, points: u64, why: impl FnOnce() -> String) {
        self.refused += points;
        if self.refusals.len() < NAMED_REFUSALS {
            self.refusals.push(format!("line {number}: {}", why()));
        } else {
            self.unnamed += 1;
        }
    }

    fn reply(self, api: Api) -> Reply {
        if let Some(e) = &self.failure {
            let status = match e {
                PointError::Storage(_) => 500,
                _ => 503,
            };
            return api.error(
                status,
                &format!("the store cannot take points now: {}", e.message()),
            );
        }
        if self.refusals.is_empty() {
            return Reply::new(204, "application/json", Vec::new());
        }
        let mut message = String::new();
        if self.written > 0 {
            message.push_str("partial write: ");
        }
        message.push_str(&self.refusals.join("\n"));
        if self.unnamed > 0 {
            message.push_str(&format!("\n… and {} more refused lines", self.unnamed));
        }
        message.push_str(&format!(" dropped={}", self.refused));
        api.error(400, &message)
    }
}

/// A refused line's text for a message: cut at [`QUOTED_LINE`] bytes.
fn quoted(text: &[u8]) -> String {
    let s = String::from_utf8_lossy(text);
    if s.len() <= QUOTED_LINE {
        return s.into_owned();
    }
    let mut cut = QUOTED_LINE;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &s[..cut])
}

/// Whether an error is a point's own (400) rather than the store's.
fn is_refusal(e: &PointError) -> bool {
    matches!(
        e,
        PointError::IllegalArgument(_)
            | PointError::InvalidValue(_)
            | PointError::UnknownName(_)
            | PointError::NoSuchRollup(_)
    )
}

/// Reads, checks and appends the lines of `text` a batch at a time; the
/// last append, to wait on. Stops at the first failure a retry could fix.
fn log_lines(state: &TsdState, text: &[u8], params: &Params) -> (Outcome, Option<Appended>) {
    let db = &state.db;
    let separator = state.options.influx.separator.as_str();
    let mut outcome = Outcome::default();
    let mut key = String::new();
    let mut metric = String::new();
    let mut batch: Vec<PendingPoint> = Vec::new();
    let mut received = 0u64;
    let mut appender = Appender::new(state);
    'lines: for parsed in LineReader::new(text) {
        let number = parsed.number;
        let line = match parsed.result {
            Ok(l) => l,
            Err(e) => {
                received += 1;
                inc(&state.stats.illegal_arguments);
                outcome.refuse(number, 1, || {
                    format!("unable to parse '{}': {e}", quoted(parsed.text))
                });
                continue;
            }
        };
        received += line.fields.len() as u64;
        let ms = match line.timestamp {
            None => Ok(params.now_ms),
            Some(t) => params
                .precision
                .to_millis(t)
                .ok_or_else(|| format!("timestamp {t} is out of range")),
        };
        let ms = match ms.and_then(|ms| timestamp_of(ms).map(|_| ms)) {
            Ok(ms) => ms,
            Err(why) => {
                inc(&state.stats.illegal_arguments);
                outcome.refuse(number, line.fields.len() as u64, || why);
                continue;
            }
        };
        let mut tags: Vec<(&str, &str)> = line
            .tags
            .iter()
            .map(|(k, v)| (k.as_ref(), v.as_ref()))
            .collect();
        if let Some((k, v)) = &params.db_tag
            && !tags.iter().any(|(t, _)| t == k)
        {
            tags.push((k, v));
        }
        for field in &line.fields {
            let Some(value) = field.value.to_value() else {
                inc(&state.stats.invalid_values);
                outcome.refuse(number, 1, || {
                    format!(
                        "string field {:?} of {:?} is not stored: rtsdb keeps numbers only",
                        field.key, line.measurement
                    )
                });
                continue;
            };
            metric.clear();
            metric.push_str(&line.measurement);
            metric.push_str(separator);
            metric.push_str(&field.key);
            let (series, ts) = match db.resolve_as(
                SeriesRules::LineProtocol,
                &metric,
                ms,
                value,
                &tags,
                &mut key,
            ) {
                Ok(r) => r,
                Err(e) if is_refusal(&e) => {
                    state.stats.count_error(&e);
                    outcome.refuse(number, 1, || e.message().to_string());
                    continue;
                }
                Err(e) => {
                    state.stats.count_error(&e);
                    outcome.failure = Some(e);
                    break 'lines;
                }
            };
            batch.push(PendingPoint { series, ts, value });
            if batch.len() >= APPEND_BATCH
                && !appender.append_into(&mut batch, &mut outcome.written, &mut outcome.failure)
            {
                break 'lines;
            }
        }
    }
    if outcome.failure.is_none() {
        appender.append_into(&mut batch, &mut outcome.written, &mut outcome.failure);
    }
    state
        .stats
        .influx_points
        .fetch_add(received, Ordering::Relaxed);
    (outcome, appender.last())
}
