//! `/api/put` (`PutDataPointRpc`): a JSON object or array of points,
//! each checked and written on its own; `summary`, `details`, `sync` and
//! `sync_timeout` shape the answer exactly as OpenTSDB 2.4 does.

use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hyper::Method;
use hyper::body::Incoming;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::protocol::parse_value;
use crate::write::PendingPoint;

use super::super::TsdState;
use super::{Call, Reply, method_not_allowed, read_body};
use crate::protocol::telnet::check_finite;

/// Put bodies at least this long are checked on a blocking thread.
const BLOCKING_BODY: usize = 256 * 1024;

/// A JSON scalar read as Jackson reads it into a `String` field: strings
/// as-is, numbers and booleans as their text, `null` as absent.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JavaString<'a>(pub Option<Cow<'a, str>>);

impl<'de: 'a, 'a> Deserialize<'de> for JavaString<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = JavaString<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, number, boolean or null")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(JavaString(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(JavaString(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(JavaString(Some(Cow::Owned(v))))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
                Ok(JavaString(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
                Ok(JavaString(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
                Ok(JavaString(Some(Cow::Owned(
                    crate::model::java::double_to_string(v),
                ))))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
                Ok(JavaString(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(JavaString(None))
            }
            fn visit_none<E>(self) -> Result<Self::Value, E> {
                Ok(JavaString(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// Tags in arrival order; a repeated key keeps its last value (as
/// Jackson filling a `HashMap`).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TagList<'a>(pub Vec<(Cow<'a, str>, Option<Cow<'a, str>>)>);

impl<'de: 'a, 'a> Deserialize<'de> for TagList<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TagList<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of tag names to values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                let mut out: Vec<(Cow<'de, str>, Option<Cow<'de, str>>)> = Vec::new();
                while let Some((k, v)) = m.next_entry::<Cow<'de, str>, JavaString<'de>>()? {
                    match out.iter_mut().find(|e| e.0 == k) {
                        Some(e) => e.1 = v.0,
                        None => out.push((k, v.0)),
                    }
                }
                Ok(TagList(out))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(TagList::default())
            }
        }
        d.deserialize_any(V)
    }
}

/// `IncomingDataPoint.timestamp`: a JSON number (fractions truncated), a
/// string of digits, or null/absent (0).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct JsonTimestamp(pub i64);

impl<'de> Deserialize<'de> for JsonTimestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = JsonTimestamp;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a timestamp")
            }
            fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
                Ok(JsonTimestamp(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                i64::try_from(v)
                    .map(JsonTimestamp)
                    .map_err(|_| E::custom(format!("Numeric value ({v}) out of range of long")))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
                Ok(JsonTimestamp(v as i64))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                let t = v.trim();
                if t.is_empty() {
                    return Ok(JsonTimestamp(0));
                }
                t.parse::<i64>().map(JsonTimestamp).map_err(|_| {
                    E::custom(format!(
                        "Cannot deserialize value of type `long` from String \"{v}\": not a valid Long value"
                    ))
                })
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(JsonTimestamp(0))
            }
        }
        d.deserialize_any(V)
    }
}

/// One point of the body as written by the client.
#[derive(Debug, Deserialize)]
pub(crate) struct JsonPoint<'a> {
    #[serde(borrow, default)]
    pub metric: Option<JavaString<'a>>,
    #[serde(default)]
    pub timestamp: JsonTimestamp,
    #[serde(borrow, default)]
    pub value: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub tags: Option<TagList<'a>>,
}

impl JsonPoint<'_> {
    fn metric(&self) -> &str {
        self.metric
            .as_ref()
            .and_then(|m| m.0.as_deref())
            .unwrap_or("")
    }
}

/// A body that is not a list of points.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BadBody(pub String);

/// The `value` text as Jackson would coerce it into a `String`; a bare
/// number is borrowed from the body, not copied.
fn value_text(raw: Option<&RawValue>) -> Result<Option<Cow<'_, str>>, BadBody> {
    let Some(raw) = raw else { return Ok(None) };
    let t = raw.get().trim();
    match t.as_bytes().first() {
        Some(b'"') => serde_json::from_str::<String>(t)
            .map(|s| Some(Cow::Owned(s)))
            .map_err(|e| BadBody(e.to_string())),
        Some(b'{') | Some(b'[') => Err(BadBody(
            "Cannot deserialize value of type `java.lang.String` from an object or array (field \"value\")".into(),
        )),
        _ if t == "null" => Ok(None),
        _ => Ok(Some(Cow::Borrowed(t))),
    }
}

/// Quotes the bare `NaN`/`Infinity` tokens Jackson accepts
/// (`ALLOW_NON_NUMERIC_NUMBERS`) so serde can read the body; the points
/// are then refused one by one.
pub(crate) fn quote_non_numeric(body: &str) -> Option<String> {
    const TOKENS: [&str; 7] = [
        "-Infinity",
        "+Infinity",
        "Infinity",
        "-INF",
        "+INF",
        "INF",
        "NaN",
    ];
    let b = body.as_bytes();
    let mut out = String::with_capacity(body.len() + 16);
    let mut i = 0;
    let mut in_str = false;
    let mut changed = false;
    while i < b.len() {
        let c = b[i];
        if in_str {
            out.push(c as char);
            if c == b'\\' && i + 1 < b.len() {
                out.push(b[i + 1] as char);
                i += 2;
                continue;
            }
            if c == b'"' {
                in_str = false;
            }
            i += 1;
            continue;
        }
        if c == b'"' {
            in_str = true;
            out.push('"');
            i += 1;
            continue;
        }
        if let Some(t) = TOKENS.iter().find(|t| body[i..].starts_with(**t)) {
            out.push('"');
            out.push_str(t);
            out.push('"');
            i += t.len();
            changed = true;
            continue;
        }
        // Copy the rest of a UTF-8 sequence byte by byte through a str slice.
        let ch = body[i..].chars().next().expect("in bounds");
        out.push(ch);
        i += ch.len_utf8();
    }
    changed.then_some(out)
}

/// Parses a put body: one object or an array of them.
pub(crate) fn parse_body(body: &str) -> Result<Vec<JsonPoint<'_>>, BadBody> {
    let t = body.trim();
    if t.starts_with('{') {
        serde_json::from_str::<JsonPoint>(t)
            .map(|p| vec![p])
            .map_err(|e| BadBody(e.to_string()))
    } else {
        serde_json::from_str::<Vec<JsonPoint>>(t).map_err(|e| BadBody(e.to_string()))
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

/// The outcome of one request, before rendering.
#[derive(Debug, Default)]
pub(crate) struct PutOutcome {
    pub success: u64,
    pub failed: u64,
    /// (point as JSON, error message)
    pub errors: Vec<(String, String)>,
    pub timed_out: bool,
    /// Points logged but not acknowledged when a sync wait timed out.
    pub pending: u64,
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialize")
}

/// The point as `IncomingDataPoint` serializes it in `details`.
fn point_json(p: &JsonPoint, value: Option<&str>) -> String {
    let mut s = String::from("{\"metric\":");
    match p.metric.as_ref().and_then(|m| m.0.as_deref()) {
        Some(m) => s.push_str(&json_str(m)),
        None => s.push_str("null"),
    }
    s.push_str(&format!(",\"timestamp\":{},\"value\":", p.timestamp.0));
    match value {
        Some(v) => s.push_str(&json_str(v)),
        None => s.push_str("null"),
    }
    s.push_str(",\"tags\":");
    match &p.tags {
        None => s.push_str("null"),
        Some(t) => {
            s.push('{');
            for (i, (k, v)) in t.0.iter().enumerate() {
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

/// Checks and resolves every point; the good ones are returned for
/// logging, the bad ones recorded in `outcome`. Runs on a blocking thread
/// for big bodies.
pub(crate) fn check_points(
    state: &TsdState,
    points: &[JsonPoint],
    header_tag: Option<(&str, &str)>,
    outcome: &mut PutOutcome,
) -> Result<Vec<PendingPoint>, BadBody> {
    let mut good = Vec::with_capacity(points.len());
    let mut key = String::new();
    let mut tags: Vec<(&str, &str)> = Vec::with_capacity(8);
    for p in points {
        let value = value_text(p.value)?;
        let fail = |msg: String, outcome: &mut PutOutcome| {
            outcome.failed += 1;
            outcome.errors.push((point_json(p, value.as_deref()), msg));
        };
        // IncomingDataPoint.validate, in order.
        if p.metric().is_empty() {
            fail("Metric name was empty".into(), outcome);
            continue;
        }
        if p.timestamp.0 <= 0 {
            fail("Invalid timestamp".into(), outcome);
            continue;
        }
        let Some(v) = value.as_deref().filter(|v| !v.is_empty()) else {
            fail("Empty value".into(), outcome);
            continue;
        };
        let tag_list = p.tags.as_ref().map(|t| t.0.as_slice()).unwrap_or(&[]);
        if tag_list.is_empty() {
            fail("Missing tags".into(), outcome);
            continue;
        }
        tags.clear();
        for (k, v) in tag_list {
            // A null tag value fails name validation like an empty one.
            tags.push((k.as_ref(), v.as_deref().unwrap_or("")));
        }
        if let Some((hk, hv)) = header_tag
            && !tags.iter().any(|t| t.0 == hk)
        {
            tags.push((hk, hv));
        }
        let r = parse_value(v).and_then(|value| {
            check_finite(p.metric(), p.timestamp.0, value)?;
            let (series, ts) =
                state
                    .db
                    .resolve(p.metric(), p.timestamp.0, value, &tags, &mut key)?;
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
    Ok(good)
}

/// Logs the checked points (and waits for durability with `sync`).
pub(crate) async fn write_points(
    state: &TsdState,
    good: Vec<PendingPoint>,
    flags: PutFlags,
    outcome: &mut PutOutcome,
) {
    let mut last = None;
    let mut accepted = 0u64;
    for chunk in good.chunks(8192) {
        match state.db.append(chunk) {
            Ok(a) => {
                accepted += chunk.len() as u64;
                state.db.throttle(a).await;
                last = Some(a);
            }
            Err(e) => {
                state.stats.count_error(&e);
                outcome.failed += chunk.len() as u64;
                outcome.errors.push(("null".into(), e.http_message()));
            }
        }
    }
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
                    return;
                }
            }
        } else {
            wait.await
        };
        // Not durable: none of them may be acknowledged.
        if let Err(e) = durable {
            state.stats.count_error(&e);
            outcome.failed += accepted;
            outcome.errors.push(("null".into(), e.http_message()));
            return;
        }
    }
    outcome.success += accepted;
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
    for (i, (dp, err)) in o.errors.iter().enumerate() {
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

/// `/api/put`: POST only; checks the points (on a blocking thread for big
/// bodies), logs the good ones, answers as `summary`/`details`/`sync` ask.
pub(super) async fn route(c: Call, body: Incoming) -> Reply {
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
    let flags = PutFlags {
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
    };
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
    let body = match read_body(state, &c.head, body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let text = match std::str::from_utf8(&body) {
        Ok(t) => t.trim().to_string(),
        Err(_) => String::from_utf8_lossy(&body).trim().to_string(),
    };
    drop(body);
    if text.is_empty() {
        return Reply::error(
            400,
            "Missing message content",
            "Supply valid JSON formatted data in the body of your request",
        );
    }
    let len = text.len();
    let st = state.clone();
    let check = move || -> Result<(Vec<PendingPoint>, PutOutcome, usize), Reply> {
        let fixed;
        let parsed = match parse_body(&text) {
            Ok(p) => p,
            Err(first) => {
                fixed = quote_non_numeric(&text)
                    .ok_or_else(|| Reply::error(400, "Unable to parse the given JSON", &first.0))?;
                parse_body(&fixed)
                    .map_err(|e| Reply::error(400, "Unable to parse the given JSON", &e.0))?
            }
        };
        if parsed.is_empty() {
            return Err(Reply::error(400, "No datapoints found in content", ""));
        }
        let n = parsed.len();
        let mut outcome = PutOutcome::default();
        let ht = header_tag.as_ref().map(|(k, v)| (k.as_str(), v.as_str()));
        let good = check_points(&st, &parsed, ht, &mut outcome)
            .map_err(|e| Reply::error(400, "Unable to parse the given JSON", &e.0))?;
        Ok((good, outcome, n))
    };
    let checked = if len >= BLOCKING_BODY {
        match tokio::task::spawn_blocking(check).await {
            Ok(r) => r,
            Err(_) => Err(Reply::error(500, "Unexpected exception", "")),
        }
    } else {
        check()
    };
    let (good, mut outcome, n) = match checked {
        Ok(x) => x,
        Err(r) => return r,
    };
    state.stats.http_puts.fetch_add(n as u64, Ordering::Relaxed);
    write_points(state, good, flags, &mut outcome).await;
    let (status, body) = render(flags, &outcome);
    match body {
        None => Reply::empty(status),
        Some(b) => Reply::json(status, b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// No body, however broken, makes the parser panic.
        #[test]
        fn bodies_never_panic(body in "[ -~]{0,200}", numeric in "[0-9eE.+NaInfity-]{0,20}") {
            let _ = parse_body(&body);
            let _ = quote_non_numeric(&body);
            let doc = format!(r#"[{{"metric":"m","timestamp":{numeric},"value":{numeric},"tags":{{"h":"a"}}}}]"#);
            let _ = parse_body(&doc);
            if let Some(fixed) = quote_non_numeric(&doc) {
                let _ = parse_body(&fixed);
            }
        }
    }

    #[test]
    fn bodies() {
        let p = parse_body(
            r#"{"metric":"m","timestamp":"1356998400","value":18.0,"tags":{"host":"a"}}"#,
        )
        .unwrap();
        assert_eq!(p[0].metric(), "m");
        assert_eq!(p[0].timestamp.0, 1356998400);
        assert_eq!(value_text(p[0].value).unwrap().as_deref(), Some("18.0"));
        let p = parse_body(r#"[{"metric":"m","timestamp":1356998400.9,"value":"1.5e3","tags":{"host":"a","host":"b"}}]"#)
            .unwrap();
        assert_eq!(p[0].timestamp.0, 1356998400);
        assert_eq!(value_text(p[0].value).unwrap().as_deref(), Some("1.5e3"));
        assert_eq!(p[0].tags.as_ref().unwrap().0.len(), 1);
        assert!(parse_body("[{\"metric\":").is_err());
        assert!(parse_body(r#"{"metric":"m","value":NaN}"#).is_err());
        let fixed = quote_non_numeric(r#"{"metric":"NaN","value":NaN,"x":-Infinity}"#).unwrap();
        assert_eq!(fixed, r#"{"metric":"NaN","value":"NaN","x":"-Infinity"}"#);
        assert!(quote_non_numeric("[1,2]").is_none());
        assert_eq!(parse_body("[]").unwrap().len(), 0);
    }
}
