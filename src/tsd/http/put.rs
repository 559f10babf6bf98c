//! `/api/put` (`PutDataPointRpc`): a JSON object or array of points,
//! each checked and written on its own; `summary`, `details`, `sync` and
//! `sync_timeout` shape the answer exactly as OpenTSDB 2.4 does.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hyper::Method;
use hyper::body::Incoming;

use crate::model::Timestamp;
use crate::protocol::{PointError, parse_value};
use crate::write::{PendingPoint, SeriesMemo, TagsKey};

use super::super::TsdState;
use super::body::{
    BodyFault, Decoder, Encoding, Metered, Reservation, WireReader, collect_wire, decode,
    deflate_decoder, into_fault, preflight, pump, read_start,
};
use super::{Call, Reply, method_not_allowed};
use crate::db::Appended;
use crate::protocol::put_json::points::{Batch, Cursor, DecodedPoints, PointView, TagView};
use crate::protocol::put_json::{self, ParseError};
use crate::protocol::telnet::check_finite;

/// Plain put bodies shorter than this are parsed and checked on the
/// connection's task; others on a blocking thread.
const BLOCKING_BODY: usize = 256 * 1024;
/// Put bodies are read this far (as sent) on the connection's task before
/// a thread parses them, the rest as it arrives: a client that stops
/// sending holds a thread only with this much of the budget, so the
/// threads held so are at most the budget over this.
const STREAM_AFTER: usize = 4 << 20;
/// Points checked and appended at once.
const APPEND_BATCH: usize = 8192;
/// Pieces of a body on their way from the connection to its reader.
const WIRE_QUEUE: usize = 4;

/// Why a put body gave no points, as the HTTP layer answers it.
#[derive(Debug)]
enum BodyError {
    /// It could not be read (see [`BodyFault`]).
    Fault(BodyFault),
    /// Only whitespace.
    Empty,
    /// Not a point or list of points: the parser's words.
    Json(String),
    /// An empty list.
    NoPoints,
}

/// Parses a put body (`protocol::put_json`) read through its meter.
/// After a syntax error the rest of the body is still read, unmetered,
/// so that a corrupt compressed stream or one over the limit is answered
/// as such, as when bodies were read whole first.
fn parse_body<R: std::io::Read>(src: &mut Metered<'_, R>) -> Result<DecodedPoints, BodyError> {
    match put_json::parse(src) {
        Ok(points) => Ok(points),
        Err(ParseError::Read(e)) => Err(BodyError::Fault(into_fault(e))),
        Err(ParseError::Empty) => Err(BodyError::Empty),
        Err(ParseError::NoPoints) => Err(BodyError::NoPoints),
        Err(ParseError::BadPoint(words)) => Err(BodyError::Json(words)),
        Err(ParseError::Syntax(words)) => {
            src.stop_metering();
            if let Err(e) = std::io::copy(src, &mut std::io::sink()) {
                return Err(BodyError::Fault(into_fault(e)));
            }
            Err(BodyError::Json(words))
        }
    }
}

/// The query-string flags of a put.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PutFlags {
    pub summary: bool,
    pub details: bool,
    pub sync: bool,
    /// Milliseconds; 0 = wait forever.
    pub sync_timeout: u64,
}

impl PutFlags {
    /// The flags of a request's query string (present means true), for
    /// `/api/put`, `/api/rollup` and `/api/histogram`.
    pub(crate) fn of(q: &super::Query) -> PutFlags {
        PutFlags {
            summary: q.has("summary"),
            details: q.has("details"),
            sync: q.has("sync"),
            sync_timeout: if q.has("sync") {
                q.get("sync_timeout")
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0)
            } else {
                0
            },
        }
    }
}

/// The outcome of one request, before rendering.
#[derive(Debug, Default)]
pub(crate) struct PutOutcome {
    pub success: u64,
    pub failed: u64,
    /// Whether errors are kept (`details`): only an answer with details
    /// shows them, and a large body's could take as much as the body.
    pub keep_errors: bool,
    /// (point as JSON, error message) of the points refused by the checks.
    pub errors: Vec<(String, String)>,
    /// The same for failed writes and syncs, listed after `errors` (the
    /// checks of a body used to end before its first write).
    pub write_errors: Vec<(String, String)>,
    pub timed_out: bool,
    /// Points logged but not acknowledged when a sync wait timed out.
    pub pending: u64,
    /// Why the shared storage could not take the points of a `sync` put
    /// (they stay logged and are written once it is back): answered 503.
    pub storage_down: Option<PointError>,
}

pub(crate) fn json_str(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialize")
}

/// The point as `IncomingDataPoint` serializes it in `details`.
fn point_json(p: &PointView, tags: Option<&[TagView]>) -> String {
    let mut s = String::from("{\"metric\":");
    match p.metric {
        Some(m) => s.push_str(&json_str(m)),
        None => s.push_str("null"),
    }
    s.push_str(&format!(",\"timestamp\":{},\"value\":", p.timestamp));
    match p.value {
        Some(v) => s.push_str(&json_str(v)),
        None => s.push_str("null"),
    }
    s.push_str(",\"tags\":");
    match tags {
        None => s.push_str("null"),
        Some(t) => {
            s.push('{');
            for (i, (k, v)) in t.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                s.push_str(&json_str(k));
                s.push(':');
                match v {
                    Some(v) => s.push_str(&json_str(v)),
                    None => s.push_str("null"),
                }
            }
            s.push('}');
        }
    }
    s.push('}');
    s
}

/// `IncomingDataPoint.validate`, in order: the value and the tags of a
/// point that passes, else the message of its first failure.
pub(crate) fn validate_point<'v, 't, T>(
    metric: &str,
    timestamp: i64,
    value: Option<&'v str>,
    tags: Option<&'t [T]>,
) -> Result<(&'v str, &'t [T]), &'static str> {
    if metric.is_empty() {
        return Err("Metric name was empty");
    }
    if timestamp <= 0 {
        return Err("Invalid timestamp");
    }
    let Some(v) = value.filter(|v| !v.is_empty()) else {
        return Err("Empty value");
    };
    let tags = tags.unwrap_or(&[]);
    if tags.is_empty() {
        return Err("Missing tags");
    }
    Ok((v, tags))
}

/// Checks and resolves every point of a batch; the good ones are returned
/// for logging, the bad ones recorded in `outcome`.
pub(crate) fn check_points(
    state: &TsdState,
    batch: &Batch,
    header_tag: Option<(&str, &str)>,
    memo: &mut SeriesMemo,
    outcome: &mut PutOutcome,
) -> Vec<PendingPoint> {
    let mut good = Vec::with_capacity(batch.points.len());
    let mut key = String::new();
    let mut tags: Vec<(&str, &str)> = Vec::with_capacity(8);
    let mut built_for = None;
    let mut tags_key = TagsKey::default();
    for p in &batch.points {
        let tag_list = batch.tags(p);
        let fail = |msg: String, outcome: &mut PutOutcome| {
            outcome.failed += 1;
            if outcome.keep_errors {
                outcome.errors.push((point_json(p, tag_list), msg));
            }
        };
        let metric = p.metric.unwrap_or("");
        let (v, tag_list) = match validate_point(metric, p.timestamp, p.value, tag_list) {
            Ok(ok) => ok,
            Err(msg) => {
                fail(msg.into(), outcome);
                continue;
            }
        };
        // Points that share their tag set (written alike in a row) share
        // the list built for the first of them.
        if built_for.is_none() || built_for != p.tag_set() {
            tags.clear();
            for (k, v) in tag_list {
                // A null tag value fails name validation like an empty one.
                tags.push((k, v.unwrap_or("")));
            }
            if let Some((hk, hv)) = header_tag
                && !tags.iter().any(|t| t.0 == hk)
            {
                tags.push((hk, hv));
            }
            tags_key.set(&tags);
            built_for = p.tag_set();
        }
        let r = parse_value(v).and_then(|value| {
            check_finite(metric, p.timestamp, value)?;
            let memo_text = tags_key.memo_text();
            // A series this connection named before: its names were
            // checked then, and only the time is left to check.
            if let Some(text) = memo_text
                && let Ok(ts) = Timestamp::from_raw(p.timestamp)
                && let Some(series) = state.db.recall(memo, metric, text)
            {
                return Ok(PendingPoint { series, ts, value });
            }
            let (series, ts) = state.db.resolve_keyed(
                metric,
                p.timestamp,
                value,
                &tags,
                Some(&tags_key),
                &mut key,
            )?;
            if let Some(text) = memo_text {
                memo.remember(metric, text, series.clone());
            }
            Ok(PendingPoint { series, ts, value })
        });
        match r {
            Ok(pp) => good.push(pp),
            Err(e) => {
                state.stats.count_error(&e);
                fail(e.http_message(), outcome)
            }
        }
    }
    good
}

/// What checking and logging the points of a body left to answer.
#[derive(Debug, Default)]
pub(crate) struct Logged {
    pub outcome: PutOutcome,
    /// The last append, to wait on for `sync`.
    pub last: Option<Appended>,
    /// Points appended.
    pub accepted: u64,
}

/// Checks and logs the points of a body a batch at a time, calling
/// `throttle` after each append (back-pressure for fast writers).
pub(crate) fn log_points(
    state: &TsdState,
    points: &DecodedPoints,
    header_tag: Option<(&str, &str)>,
    memo: &mut SeriesMemo,
    keep_errors: bool,
    throttle: &mut dyn FnMut(Appended),
) -> Logged {
    let mut logged = Logged::default();
    logged.outcome.keep_errors = keep_errors;
    let mut at = Cursor::default();
    let mut batch = Batch::default();
    while points.read_batch(&mut at, APPEND_BATCH, &mut batch) {
        let good = check_points(state, &batch, header_tag, memo, &mut logged.outcome);
        if good.is_empty() {
            continue;
        }
        match state.db.append(&good) {
            Ok(a) => {
                logged.accepted += good.len() as u64;
                throttle(a);
                logged.last = Some(a);
            }
            Err(e) => {
                state.stats.count_error(&e);
                logged.outcome.failed += good.len() as u64;
                let o = &mut logged.outcome;
                o.write_errors.push(("null".into(), e.http_message()));
            }
        }
    }
    logged
}

/// Acknowledges the logged points, once durable if `sync` asks.
pub(crate) async fn acknowledge(state: &TsdState, logged: Logged, flags: PutFlags) -> PutOutcome {
    let Logged {
        mut outcome,
        last,
        accepted,
    } = logged;
    if flags.sync
        && let Some(a) = last
    {
        let wait = state.db.wait_durable(a);
        let durable = if flags.sync_timeout > 0 {
            match tokio::time::timeout(Duration::from_millis(flags.sync_timeout), wait).await {
                Ok(r) => r,
                Err(_) => {
                    outcome.timed_out = true;
                    outcome.pending = accepted;
                    return outcome;
                }
            }
        } else {
            wait.await
        };
        // Not durable: none of them may be acknowledged.
        if let Err(e) = durable {
            state.stats.count_error(&e);
            outcome.failed += accepted;
            outcome.write_errors.push(("null".into(), e.http_message()));
            if matches!(e, PointError::StorageDown(_)) {
                outcome.storage_down = Some(e);
            }
            return outcome;
        }
    }
    outcome.success += accepted;
    outcome
}

/// Renders the answer: (status, JSON body or None for 204).
pub(crate) fn render(flags: PutFlags, o: &PutOutcome) -> (u16, Option<String>) {
    if o.timed_out {
        let timeouts = o.pending;
        if !flags.summary && !flags.details {
            return (
                400,
                Some(super::error_body(
                    400,
                    &format!(
                        "The put call has timedout with 0 successful writes, {} failed writes and {timeouts} timed out writes.",
                        o.failed
                    ),
                    "Please see the TSD logs or append \"details\" to the put request",
                )),
            );
        }
        let mut s = format!(
            "{{\"success\":0,\"failed\":{},\"timeouts\":{timeouts}",
            o.failed
        );
        if flags.details {
            s.push_str(",\"errors\":");
            s.push_str(&errors_json(o));
        }
        s.push('}');
        return (400, Some(s));
    }
    // The issue asks a cluster to fail a `sync` put fast with a 503 while
    // the storage cannot take it, so that clients retry (OpenTSDB 2.4.1
    // has no such answer: its puts wait on HBase's retries, then fail
    // with 400 or time out). Whatever `summary`/`details` asked: no point
    // of the request was acknowledged, and the error says why.
    if let Some(e) = &o.storage_down {
        return (
            503,
            Some(super::error_body(
                503,
                &e.http_message(),
                "The data points were logged by this TSD and will be written once the storage is back, but were not acknowledged: retry the request",
            )),
        );
    }
    let status = if o.failed > 0 { 400 } else { 200 };
    if flags.details {
        let mut s = String::from("{\"errors\":");
        s.push_str(&errors_json(o));
        s.push_str(&format!(
            ",\"failed\":{},\"success\":{}",
            o.failed, o.success
        ));
        if flags.sync && flags.sync_timeout > 0 {
            s.push_str(",\"timeouts\":0");
        }
        s.push('}');
        (status, Some(s))
    } else if flags.summary {
        let mut s = format!("{{\"failed\":{},\"success\":{}", o.failed, o.success);
        if flags.sync && flags.sync_timeout > 0 {
            s.push_str(",\"timeouts\":0");
        }
        s.push('}');
        (status, Some(s))
    } else if o.failed > 0 {
        (
            400,
            Some(super::error_body(
                400,
                "One or more data points had errors",
                "Please see the TSD logs or append \"details\" to the put request",
            )),
        )
    } else {
        (204, None)
    }
}

fn errors_json(o: &PutOutcome) -> String {
    let mut s = String::from("[");
    for (i, (dp, err)) in o.errors.iter().chain(&o.write_errors).enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&format!(
            "{{\"datapoint\":{dp},\"error\":{}}}",
            json_str(err)
        ));
    }
    s.push(']');
    s
}

/// The series memo of one HTTP connection ([`SeriesMemo`]): a client's
/// put bodies usually name the series its previous ones named. The
/// server puts it in each request's extensions; a connection's requests
/// are served one at a time, so its lock is not waited on.
#[derive(Clone, Default)]
pub(crate) struct ConnMemo(Arc<parking_lot::Mutex<SeriesMemo>>);

/// What reading and logging a put body needs, on whichever thread.
struct PutJob {
    state: Arc<TsdState>,
    header_tag: Option<(String, String)>,
    keep_errors: bool,
    memo: ConnMemo,
}

impl PutJob {
    /// Parses the body's text from `src` (growing `reservation` to the
    /// text read, if given, then shrinking it to what the parsed points
    /// hold), then checks and logs the points.
    fn parse_and_log<R: std::io::Read>(
        &self,
        src: R,
        mut reservation: Option<&mut Reservation>,
        throttle: &mut dyn FnMut(Appended),
    ) -> Result<Logged, Reply> {
        let limit = self.state.options.max_body_bytes;
        let mut metered = Metered::new(src, reservation.as_deref_mut());
        let parsed = parse_body(&mut metered);
        drop(metered);
        let points = parsed.map_err(|e| match e {
            BodyError::Fault(f) => f.reply(limit),
            BodyError::Empty => Reply::error(
                400,
                "Missing message content",
                "Supply valid JSON formatted data in the body of your request",
            ),
            BodyError::Json(words) => Reply::error(400, "Unable to parse the given JSON", &words),
            BodyError::NoPoints => Reply::error(400, "No datapoints found in content", ""),
        })?;
        if let Some(r) = reservation {
            r.shrink_to(points.heap_bytes());
        }
        let stats = &self.state.stats;
        stats
            .http_puts
            .fetch_add(points.len() as u64, Ordering::Relaxed);
        let ht = self
            .header_tag
            .as_ref()
            .map(|(k, v)| (k.as_str(), v.as_str()));
        // (Were the lock ever held, by a job its client gave up on, this
        // body goes without a memo rather than wait.)
        let mut own = SeriesMemo::default();
        let mut held = self.memo.0.try_lock();
        let memo = held.as_deref_mut().unwrap_or(&mut own);
        Ok(log_points(
            &self.state,
            &points,
            ht,
            memo,
            self.keep_errors,
            throttle,
        ))
    }

    /// [`PutJob::parse_and_log`] on a blocking thread, for bodies too
    /// large to parse on the connection's task, from the reader `src`
    /// makes there (a gzip reader reads its header when made); the
    /// reservation is given back when done.
    fn spawn<R: std::io::Read>(
        self,
        src: impl FnOnce() -> R + Send + 'static,
        mut reservation: Reservation,
    ) -> tokio::task::JoinHandle<Result<Logged, Reply>> {
        tokio::task::spawn_blocking(move || {
            let db = self.state.db.clone();
            self.parse_and_log(src(), Some(&mut reservation), &mut |a| {
                db.throttle_blocking(a)
            })
        })
    }
}

fn joined(r: Result<Result<Logged, Reply>, tokio::task::JoinError>) -> Result<Logged, Reply> {
    r.unwrap_or_else(|_| Err(Reply::error(500, "Unexpected exception", "")))
}

/// `/api/put`: POST only; parses the body as it arrives (on a blocking
/// thread unless it is small), then checks and logs its points a batch at
/// a time, and answers as `summary`/`details`/`sync` ask.
pub(super) async fn route(c: Call, mut body: Incoming) -> Reply {
    if c.method != Method::POST {
        return method_not_allowed(&c.method);
    }
    if *c.verb() == Method::GET {
        return Reply::error(
            400,
            "Missing message content",
            "Supply valid JSON formatted data in the body of your request",
        );
    }
    let (state, q) = (&c.state, &c.query);
    let flags = PutFlags::of(q);
    let header_tag = if state.options.header_tag.is_empty() {
        None
    } else {
        c.head
            .headers
            .get(state.options.header_tag.as_str())
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
    };
    let limit = state.options.max_body_bytes;
    let declared = match preflight(state, &c.head) {
        Ok(d) => d,
        Err(r) => return r,
    };
    let mut reservation = match Reservation::new(state, declared.unwrap_or(0)).await {
        Ok(r) => r,
        Err(r) => return r,
    };
    let job = PutJob {
        state: state.clone(),
        header_tag,
        keep_errors: flags.details,
        memo: c
            .head
            .extensions
            .get::<ConnMemo>()
            .cloned()
            .unwrap_or_default(),
    };
    let decoder = match Encoding::of(&c.head) {
        Encoding::Unsupported(name) => {
            // Read anyway: a body over the limit is answered as such.
            return match collect_wire(state, body, &mut reservation).await {
                Ok(_) => Encoding::unsupported(&name),
                Err(r) => r,
            };
        }
        Encoding::Deflate => {
            // Zlib or raw deflate: which one is only known at the end, so
            // the (compressed) body is read whole first.
            let wire = match collect_wire(state, body, &mut reservation).await {
                Ok(w) => w,
                Err(r) => return r,
            };
            let decoder = match deflate_decoder(&wire, limit) {
                Ok(d) => d,
                Err(f) => return f.reply(limit),
            };
            let src = move || decode(decoder, std::io::Cursor::new(wire), limit);
            return answer(state, flags, joined(job.spawn(src, reservation).await)).await;
        }
        Encoding::Identity => Decoder::Identity,
        Encoding::Gzip => Decoder::Gzip,
    };
    let start = match read_start(state, &mut body, &mut reservation, STREAM_AFTER).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    if start.whole && decoder == Decoder::Identity && start.len < BLOCKING_BODY {
        // Small: parsed here. The text is the body as sent, reserved.
        let logged = job.parse_and_log(WireReader::new(start, None), None, &mut |_| {});
        drop(reservation);
        if let Ok(Logged { last: Some(a), .. }) = &logged {
            state.db.throttle(*a).await;
        }
        return answer(state, flags, logged).await;
    }
    if start.whole {
        let src = move || decode(decoder, WireReader::new(start, None), limit);
        return answer(state, flags, joined(job.spawn(src, reservation).await)).await;
    }
    let (to, from) = tokio::sync::mpsc::channel(WIRE_QUEUE);
    let sent = start.len;
    let src = move || decode(decoder, WireReader::new(start, Some(from)), limit);
    let mut reader = job.spawn(src, reservation);
    let pumped = tokio::select! {
        biased;
        pumped = pump(state, body, sent, to) => pumped,
        // The reader stopped before the end of the body: its answer.
        read = &mut reader => return answer(state, flags, joined(read)).await,
    };
    if let Err(r) = pumped {
        return r;
    }
    answer(state, flags, joined(reader.await)).await
}

/// The answer to a put whose body was read and logged (or refused).
pub(crate) async fn answer(
    state: &TsdState,
    flags: PutFlags,
    logged: Result<Logged, Reply>,
) -> Reply {
    let logged = match logged {
        Ok(l) => l,
        Err(r) => return r,
    };
    let outcome = acknowledge(state, logged, flags).await;
    let (status, body) = render(flags, &outcome);
    match body {
        None => Reply::empty(status),
        Some(b) => Reply::json(status, b),
    }
}
