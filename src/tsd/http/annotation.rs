//! `/api/annotation` (alias `/api/annotations`) and `/api/annotation/bulk`
//! as OpenTSDB's `AnnotationRpc` answers them: one annotation by query
//! string or JSON body (GET, POST merge, PUT replace, DELETE), lists of
//! them (bulk POST/PUT) and range deletes (bulk DELETE with
//! `totalDeleted`). Storage goes through the database's store
//! ([`Store`]; its annotation operations are in `crate::store::annotations`).

use std::sync::Arc;

use hyper::Method;
use hyper::body::Incoming;

use super::call::body_unless_get;
use super::{Call, Query, Reply, json_text, method_not_allowed};
use crate::model::TsuidBytes;
use crate::model::annotation::{self, Annotation, AnnotationError, Changes};
use crate::model::time::parse_datetime;
use crate::protocol::jackson;
use crate::store::Durability;
use crate::store::Store;
use crate::tsd::TsdState;

fn bad(message: &str) -> Reply {
    Reply::error(400, message, "")
}

fn missing_content() -> Reply {
    Reply::error(
        400,
        "Missing message content",
        "Supply valid JSON formatted data in the body of your request",
    )
}

fn storage_error(e: impl std::fmt::Display) -> Reply {
    Reply::error(500, &e.to_string(), "")
}

fn now_ms() -> u64 {
    chrono::Utc::now().timestamp_millis().max(0) as u64
}

/// The route: the body of non-GET requests, then [`handle`]. `list` is
/// set for `/api/annotations`, whose GET lists global annotations.
pub(super) async fn route(c: Call, body: Incoming, list: bool) -> Reply {
    match body_unless_get(&c, body).await {
        Ok(b) => handle(&c.state, &c.method, &c.rest, c.query, b, list).await,
        Err(r) => r,
    }
}

/// `/api/annotation[/bulk]`. `body` is `None` for GET requests.
pub(super) async fn handle(
    state: &Arc<TsdState>,
    method: &Method,
    rest: &[String],
    query: Query,
    body: Option<Vec<u8>>,
    list: bool,
) -> Reply {
    let bulk = rest.first().is_some_and(|r| r.ends_with("bulk"));
    let allowed = if bulk {
        [Method::POST, Method::PUT, Method::DELETE].contains(method)
    } else {
        [Method::GET, Method::POST, Method::PUT, Method::DELETE].contains(method)
    };
    if !allowed {
        return method_not_allowed(method);
    }
    let method = method.clone();
    super::query::blocking(state, move |st| {
        let store = st.db.store();
        let body = super::content(body.as_deref());
        let reply = if bulk {
            if method == Method::DELETE {
                bulk_delete(store, &query, body)
            } else {
                bulk_update(store, method == Method::PUT, body)
            }
        } else {
            single(store, &method, &query, body, list)
        };
        if method != Method::GET {
            // Cached query answers carry annotations; after the write, so
            // an answer cached meanwhile is refused (docs/query-cache.md).
            st.db.cache_epochs().bump_all();
        }
        reply
    })
    .await
}

/// `parseQS`: `start_time` (required), `end_time`, `tsuid`,
/// `description`, `notes`; times in seconds, relative or absolute.
fn parse_qs(q: &Query) -> Result<(Annotation, Changes), Reply> {
    let now = now_ms();
    let mut a = Annotation::default();
    let mut c = Changes::default();
    if let Some(t) = q.get("tsuid") {
        a.tsuid = t.to_string();
    }
    let start = match q.get("start_time").filter(|s| !s.is_empty()) {
        None => return Err(bad("Missing start time")),
        Some(s) => parse_datetime(s, now).map_err(|e| bad(&e.to_string()))?,
    };
    if start / 1000 < 1 {
        return Err(bad("Missing start time"));
    }
    a.start_time = (start / 1000) as i64;
    if let Some(e) = q.get("end_time").filter(|s| !s.is_empty()) {
        let end = (parse_datetime(e, now).map_err(|e| bad(&e.to_string()))? / 1000) as i64;
        if end != 0 {
            a.end_time = end;
            c.end_time = true;
        }
    }
    if let Some(d) = q.get("description").filter(|d| !d.is_empty()) {
        a.description = d.to_string();
        c.description = true;
    }
    if let Some(n) = q.get("notes").filter(|n| !n.is_empty()) {
        a.notes = n.to_string();
        c.notes = true;
    }
    Ok((a, c))
}

/// Malformed JSON. OpenTSDB parses a single annotation outside any
/// try block, so there the client gets a 500 carrying Jackson's exception
/// text, and for bulk bodies a 400 with that text. Jackson's wording
/// cannot be reproduced; we answer 400 with a stable message and the
/// parser's detail, which is what clients act on (a failed request).
fn parse_json_error(e: AnnotationError) -> Reply {
    Reply::error(400, "Unable to parse the given JSON", &e.0)
}

/// The annotation's series, `None` for a global one. Its UIDs are not
/// checked: OpenTSDB stores an annotation under the TSUID bytes given.
fn series_of(store: &Store, a: &Annotation) -> Result<Option<TsuidBytes>, String> {
    if a.tsuid.is_empty() {
        return Ok(None);
    }
    tsuid_bytes(store, &a.tsuid).map(Some)
}

fn tsuid_bytes(store: &Store, hex: &str) -> Result<TsuidBytes, String> {
    TsuidBytes::parse_hex(hex, &store.widths()).map_err(|e| format!("Invalid TSUID '{hex}': {e}"))
}

fn single(store: &Store, method: &Method, q: &Query, body: Option<&[u8]>, list: bool) -> Reply {
    let (note, changes) = match body {
        Some(b) => match Annotation::parse(b) {
            Ok(x) => x,
            Err(e) => return parse_json_error(e),
        },
        None => match parse_qs(q) {
            Ok(x) => x,
            Err(r) => return r,
        },
    };
    let tsuid = match series_of(store, &note) {
        Ok(t) => t,
        Err(m) => return bad(&m),
    };
    if *method == Method::GET && list {
        return global_annotations(store, &note);
    }
    let start = note.start();
    if *method == Method::GET {
        let start = match start {
            Ok(s) => s,
            Err(e) => return bad(&e.0),
        };
        return match store.get_annotation(tsuid.as_ref(), start) {
            Ok(Some(a)) => Reply::json(200, a.to_api_json()),
            Ok(None) => Reply::error(404, "Unable to locate annotation in storage", ""),
            Err(e) => storage_error(e),
        };
    }
    if *method == Method::DELETE {
        let start = match start {
            Ok(s) => s,
            Err(e) => return Reply::error(400, "Unable to delete Annotation information", &e.0),
        };
        return match store.delete_annotation(tsuid.as_ref(), start, Durability::Sync) {
            Ok(_) => Reply::empty(204),
            Err(e) => storage_error(e),
        };
    }
    // POST merges, PUT replaces.
    if let Err(e) = start {
        return bad(&e.0);
    }
    if !changes.any() {
        return Reply::empty(304);
    }
    match store.sync_annotation(
        tsuid.as_ref(),
        &note,
        changes,
        *method == Method::PUT,
        Durability::Sync,
    ) {
        Ok(a) => Reply::json(200, a.to_api_json()),
        Err(e) => storage_error(e),
    }
}

/// `AnnotationRpc.fetchMultipleAnnotations` (GET `/api/annotations`):
/// the global annotations starting at or after `startTime` in the rows up
/// to the hour of `endTime` (now when unset) that end by `endTime`, as
/// `Annotation.getGlobalAnnotations` scans and filters them.
///
/// Differences from 2.4.1, where it is broken: it defaults the end to the
/// current time in *milliseconds* against start times in seconds, which
/// overflows the row key it scans to; rtsdb uses seconds. And it answers
/// an end before the start with a 500 wrapping the exception; rtsdb
/// answers 400 with the message.
fn global_annotations(store: &Store, note: &Annotation) -> Reply {
    let start = note.start_time.max(0) as u64;
    let end = if note.end_time == 0 {
        now_ms() / 1000
    } else {
        note.end_time.max(0) as u64
    };
    if end < start {
        return bad("The end timestamp cannot be less than the start timestamp");
    }
    // The rows of the hours from start's to end's, inclusive.
    let last_row_end_ms = (end - end % 3600 + 3600) * 1000 - 1;
    match store.annotations_in(None, (start - start % 3600) * 1000, last_row_end_ms) {
        Ok(all) => {
            let notes: Vec<Annotation> = all
                .into_iter()
                .filter(|a| a.start_time.max(0) as u64 >= start && a.end_time.max(0) as u64 <= end)
                .collect();
            Reply::json(200, annotation::api_json_array(&notes))
        }
        Err(e) => storage_error(e),
    }
}

fn bulk_update(store: &Store, overwrite: bool, body: Option<&[u8]>) -> Reply {
    let Some(body) = body else {
        return missing_content();
    };
    let list: serde_json::Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return parse_json_error(AnnotationError(e.to_string())),
    };
    let Some(items) = list.as_array() else {
        return parse_json_error(AnnotationError(
            "Cannot deserialize value of type `java.util.ArrayList<net.opentsdb.meta.Annotation>` from Object value"
                .into(),
        ));
    };
    let mut notes = Vec::with_capacity(items.len());
    for v in items {
        match Annotation::from_json_value(v) {
            Ok(x) => notes.push(x),
            Err(e) => return parse_json_error(e),
        }
    }
    let mut saved = Vec::with_capacity(notes.len());
    for (note, changes) in notes {
        let failed =
            |m: &str| Reply::error(400, m, &format!("Annotation error: {}", note.describe()));
        let tsuid = match series_of(store, &note) {
            Ok(t) => t,
            Err(m) => return failed(&m),
        };
        if let Err(e) = note.start() {
            return failed(&e.0);
        }
        if !changes.any() {
            tracing::info!(note = %note.describe(), "No changes for annotation");
            continue;
        }
        match store.sync_annotation(tsuid.as_ref(), &note, changes, overwrite, Durability::Sync) {
            Ok(a) => saved.push(a),
            Err(e) => return storage_error(e),
        }
    }
    Reply::json(200, annotation::api_json_array(&saved))
}

/// `AnnotationBulkDelete`, from a body or the query string.
#[derive(Debug, Default)]
struct BulkDelete {
    start_time: Option<String>,
    end_time: Option<String>,
    tsuids: Option<Vec<String>>,
    global: bool,
}

fn parse_bulk_delete(q: &Query, body: Option<&[u8]>) -> Result<BulkDelete, Reply> {
    let Some(body) = body else {
        let start = q
            .get("start_time")
            .filter(|s| !s.is_empty())
            .ok_or_else(|| bad("Missing parameter <code>start_time</code>"))?;
        return Ok(BulkDelete {
            start_time: Some(start.to_string()),
            end_time: q.get("end_time").map(str::to_string),
            tsuids: q
                .get("tsuids")
                .map(|t| t.split(',').map(|s| s.trim().to_string()).collect()),
            global: q.has("global"),
        });
    };
    let v: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| parse_json_error(AnnotationError(e.to_string())))?;
    let obj = v.as_object().ok_or_else(|| {
        parse_json_error(AnnotationError(
            "Cannot deserialize value of type `AnnotationBulkDelete` from a non-object value"
                .into(),
        ))
    })?;
    let mut d = BulkDelete::default();
    for (k, v) in obj {
        match k.as_str() {
            "startTime" => d.start_time = json_text(v),
            "endTime" => d.end_time = json_text(v),
            "global" => {
                d.global = jackson::boolean(v).map_err(|e| {
                    parse_json_error(AnnotationError(format!("{e} (field \"global\")")))
                })?
            }
            "tsuids" => {
                d.tsuids = match v {
                    serde_json::Value::Null => None,
                    serde_json::Value::Array(a) => Some(a.iter().filter_map(json_text).collect()),
                    _ => {
                        return Err(parse_json_error(AnnotationError(
                            "Cannot deserialize value of type `java.util.ArrayList<java.lang.String>` (field \"tsuids\")"
                                .into(),
                        )));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(d)
}

fn bulk_delete(store: &Store, q: &Query, body: Option<&[u8]>) -> Reply {
    let d = match parse_bulk_delete(q, body) {
        Ok(d) => d,
        Err(r) => return r,
    };
    let Some(start_text) = d.start_time.as_deref().filter(|s| !s.is_empty()) else {
        return bad("Missing the start time value");
    };
    if !d.global && d.tsuids.as_ref().is_none_or(|t| t.is_empty()) {
        return bad("Missing the TSUIDs or global annotations flag");
    }
    let now = now_ms();
    let start = match parse_datetime(start_text, now) {
        Ok(s) => s,
        Err(e) => return bad(&e.to_string()),
    };
    let end = match d.end_time.as_deref().filter(|s| !s.is_empty()) {
        None => now,
        Some(e) => match parse_datetime(e, now) {
            Ok(e) => e,
            Err(e) => return bad(&e.to_string()),
        },
    };
    if end < 1 {
        return bad("The end timestamp has not been set");
    }
    if end < start {
        return bad("The end timestamp cannot be less than the start timestamp");
    }
    let mut series = Vec::new();
    for t in d.tsuids.iter().flatten() {
        // `tsuids=` in the query string is one empty TSUID to OpenTSDB,
        // which `UniqueId.stringToUid` refuses with this message.
        if t.is_empty() {
            return bad("UID was empty");
        }
        match tsuid_bytes(store, t) {
            Ok(ts) => series.push(ts),
            Err(m) => return bad(&m),
        }
    }
    let mut total = 0;
    if d.global {
        match store.delete_annotations_in(None, start, end, Durability::Sync) {
            Ok(n) => total += n,
            Err(e) => return storage_error(e),
        }
    }
    for t in &series {
        match store.delete_annotations_in(Some(t), start, end, Durability::Sync) {
            Ok(n) => total += n,
            Err(e) => return storage_error(e),
        }
    }
    let tsuids = match &d.tsuids {
        None => "null".to_string(),
        Some(t) => serde_json::to_string(t).unwrap_or_else(|_| "[]".into()),
    };
    Reply::json(
        200,
        format!(
            "{{\"tsuids\":{tsuids},\"global\":{},\"startTime\":{start},\"endTime\":{end},\"totalDeleted\":{total}}}",
            d.global
        ),
    )
}
