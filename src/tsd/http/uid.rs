//! `/api/uid/*` (`UniqueIdRpc`): `assign`, `rename`, `uidmeta` and
//! `tsmeta`; any other sub-endpoint answers 501 as OpenTSDB does.

use hyper::Method;
use serde_json::{Map, Value};

use super::{Query, Reply, json_text, method_not_allowed, parse_json};
use crate::index::lookup::{LookupQuery, lookup};
use crate::meta::{self, MetaError, TsMetaFields, UidMetaFields};
use crate::model::Tsuid;
use crate::model::UidKind;
use crate::tsd::TsdState;
use crate::uid::{Assigned, UidTableError};

/// `/api/uid/<rest>`.
pub(super) fn handle(
    state: &TsdState,
    method: &Method,
    rest: &[String],
    q: &Query,
    body: Option<&[u8]>,
) -> Reply {
    let body = super::content(body);
    let get_post = method == Method::GET || method == Method::POST;
    let crud = get_post || method == Method::PUT || method == Method::DELETE;
    let r = match rest.first().map(String::as_str) {
        Some("assign") if get_post => assign(state, q, body),
        Some("rename") if get_post => rename(state, q, body),
        Some("uidmeta") if crud => uidmeta(state, method, q, body),
        Some("tsmeta") if crud => tsmeta(state, method, q, body),
        Some("assign" | "rename" | "uidmeta" | "tsmeta") => Err(method_not_allowed(method)),
        _ => Err(Reply::error(
            501,
            "Other UID endpoints have not been implemented yet",
            "",
        )),
    };
    r.unwrap_or_else(|e| e)
}

type Answer = Result<Reply, Reply>;

fn bad(msg: &str) -> Reply {
    Reply::error(400, msg, "")
}

fn internal(e: impl std::fmt::Display) -> Reply {
    Reply::error(500, "Unexpected exception", &e.to_string())
}

fn body_object(body: &[u8]) -> Result<Map<String, Value>, Reply> {
    match parse_json::<Value>(body)? {
        Value::Object(m) => Ok(m),
        _ => Err(Reply::error(
            400,
            "Unable to parse the given JSON",
            "Expected a JSON object",
        )),
    }
}

const KINDS: [(&str, UidKind); 3] = [
    ("metric", UidKind::Metric),
    ("tagk", UidKind::TagKey),
    ("tagv", UidKind::TagValue),
];

fn assign(state: &TsdState, q: &Query, body: Option<&[u8]>) -> Answer {
    let mut wanted: Vec<(&str, UidKind, Vec<String>)> = Vec::new();
    if let Some(b) = body {
        let obj = body_object(b)?;
        for (key, kind) in KINDS {
            match obj.get(key) {
                None | Some(Value::Null) => {}
                Some(Value::Array(items)) => {
                    wanted.push((key, kind, items.iter().filter_map(json_text).collect()))
                }
                Some(v) => wanted.push((key, kind, json_text(v).into_iter().collect())),
            }
        }
    } else {
        for (key, kind) in KINDS {
            if let Some(v) = q.get(key) {
                wanted.push((key, kind, v.split(',').map(String::from).collect()));
            }
        }
    }
    if wanted.is_empty() {
        return Err(bad("Missing values to assign UIDs"));
    }
    let uids = state.db.uids();
    let mut out = Map::new();
    let mut failed = false;
    for (key, kind, names) in wanted {
        let mut ok = Map::new();
        let mut errors = Map::new();
        for name in names {
            match uids.assign(kind, &name) {
                Ok(Assigned::New(uid)) => {
                    ok.insert(name, uid.to_hex(uids.width(kind)).into());
                }
                Ok(Assigned::Existing(uid)) => {
                    errors.insert(
                        name,
                        format!(
                            "Name already exists with UID: {}",
                            uid.to_hex(uids.width(kind))
                        )
                        .into(),
                    );
                }
                Err(e) => {
                    errors.insert(name, e.to_string().into());
                }
            }
        }
        out.insert(key.to_string(), Value::Object(ok));
        if !errors.is_empty() {
            failed = true;
            out.insert(format!("{key}_errors"), Value::Object(errors));
        }
    }
    let status = if failed { 400 } else { 200 };
    // OpenTSDB answers with a java.util.HashMap of these six keys; with its
    // default 16 buckets they always come out in this order (`metric_errors`
    // and `tagv` share a bucket, in insertion order). Each inner map is a
    // TreeMap, sorted by name.
    const JAVA_ORDER: [&str; 6] = [
        "tagv_errors",
        "metric",
        "tagk",
        "tagk_errors",
        "metric_errors",
        "tagv",
    ];
    let parts: Vec<String> = JAVA_ORDER
        .iter()
        .filter_map(|k| {
            out.get(*k)
                .map(|v| format!("{}:{v}", Value::String(k.to_string())))
        })
        .collect();
    Ok(Reply::json(status, format!("{{{}}}", parts.join(","))))
}

fn rename(state: &TsdState, q: &Query, body: Option<&[u8]>) -> Answer {
    let get = |obj: &Option<Map<String, Value>>, k: &str| match obj {
        Some(o) => o.get(k).and_then(json_text),
        None => q.get(k).map(String::from),
    };
    let obj = body.map(body_object).transpose()?;
    let new = get(&obj, "name");
    let old = KINDS
        .iter()
        .find_map(|(key, kind)| get(&obj, key).map(|n| (*kind, n)));
    let (Some(new), Some((kind, old))) = (new, old) else {
        return Err(bad("Missing necessary values to rename UID"));
    };
    match state.db.uids().rename(kind, &old, &new) {
        Ok(_) => {
            // Cached series still map the old name to this UID.
            state.db.forget_series_names();
            Ok(Reply::json(200, r#"{"result":"true"}"#))
        }
        Err(e) => Ok(Reply::json(
            400,
            format!(
                r#"{{"result":"false","error":{}}}"#,
                serde_json::to_string(&e.to_string()).expect("json")
            ),
        )),
    }
}

/// The request's fields: the JSON body's, or the query string's with the
/// body's names (`display_name` → `displayName`).
fn fields(q: &Query, body: Option<&[u8]>) -> Result<Map<String, Value>, Reply> {
    if let Some(b) = body {
        return body_object(b);
    }
    let mut m = Map::new();
    for (qs, name) in [
        ("uid", "uid"),
        ("type", "type"),
        ("tsuid", "tsuid"),
        ("display_name", "displayName"),
        ("description", "description"),
        ("notes", "notes"),
        ("units", "units"),
        ("data_type", "dataType"),
        ("retention", "retention"),
        ("max", "max"),
        ("min", "min"),
    ] {
        if let Some(v) = q.get(qs) {
            m.insert(name.into(), Value::String(v.into()));
        }
    }
    Ok(m)
}

fn custom_of(v: &Value) -> Result<meta::Custom, Reply> {
    match v {
        Value::Null => Ok(None),
        Value::Object(o) => Ok(Some(
            o.iter()
                .map(|(k, v)| (k.clone(), json_text(v).unwrap_or_default()))
                .collect(),
        )),
        _ => Err(bad("Unable to parse the given JSON")),
    }
}

fn meta_error(e: MetaError) -> Reply {
    match e {
        MetaError::Uid(UidTableError::NoSuchId { .. }) => {
            Reply::error(404, "Could not find the requested UID", "")
        }
        other => internal(other),
    }
}

/// The user fields a UIDMeta or TSMeta request sets. OpenTSDB's setters
/// mark a field changed only when the value differs from the object's
/// empty default (`custom`: when not null; `max`/`min`: always, as
/// `NaN != NaN`), and POST merges only the changed fields; a request
/// that changes nothing answers 304 before anything is looked up.
#[derive(Debug, Default)]
struct Edit {
    display_name: Option<String>,
    description: Option<String>,
    notes: Option<String>,
    custom: Option<meta::Custom>,
    units: Option<String>,
    data_type: Option<String>,
    retention: Option<i64>,
    max: Option<f64>,
    min: Option<f64>,
}

impl Edit {
    fn any(&self) -> bool {
        self.display_name.is_some()
            || self.description.is_some()
            || self.notes.is_some()
            || self.custom.is_some()
            || self.units.is_some()
            || self.data_type.is_some()
            || self.retention.is_some()
            || self.max.is_some()
            || self.min.is_some()
    }
}

/// A string field counts as set when it is not empty.
fn set_text(v: &Value) -> Option<String> {
    json_text(v).filter(|s| !s.is_empty())
}

/// `from_body`: a value that is no number fails Jackson's mapping of the
/// whole body; from the query string it fails `parseTSMetaQS` by name.
fn edit_of(f: &Map<String, Value>, ts: bool, from_body: bool) -> Result<Edit, Reply> {
    let unparsable = |k: &str| {
        if from_body {
            bad("Unable to parse the given JSON")
        } else {
            bad(&format!("Unable to parse '{k}' value"))
        }
    };
    let number = |k: &str, v: &Value| -> Result<Option<f64>, Reply> {
        match v {
            Value::Number(n) => Ok(Some(n.as_f64().unwrap_or(f64::NAN))),
            Value::String(s) if s.is_empty() => Ok(None),
            Value::String(s) => s.parse().map(Some).map_err(|_| unparsable(k)),
            Value::Null => Ok(None),
            _ => Err(bad("Unable to parse the given JSON")),
        }
    };
    let mut e = Edit::default();
    for (k, v) in f {
        match k.as_str() {
            "displayName" => e.display_name = set_text(v),
            "description" => e.description = set_text(v),
            "notes" => e.notes = set_text(v),
            "custom" => e.custom = custom_of(v)?.map(Some),
            "units" if ts => e.units = set_text(v),
            "dataType" if ts => e.data_type = set_text(v),
            "retention" if ts => {
                if let Some(n) = number(k, v)? {
                    if !n.is_finite() || n.fract() != 0.0 {
                        return Err(unparsable(k));
                    }
                    e.retention = Some(n as i64).filter(|r| *r != 0);
                }
            }
            "max" if ts => e.max = number(k, v)?,
            "min" if ts => e.min = number(k, v)?,
            _ => {}
        }
    }
    Ok(e)
}

fn uidmeta(state: &TsdState, method: &Method, q: &Query, body: Option<&[u8]>) -> Answer {
    // GET and the query-string forms require `uid` and `type` as query
    // parameters (`getRequiredQueryStringParam`); a JSON body is checked by
    // `UIDMeta.syncToStorage`/`delete` ("Missing UID", "Missing type").
    let from_qs = method == Method::GET || body.is_none();
    let f = if from_qs {
        fields(q, None)?
    } else {
        fields(q, body)?
    };
    let required = |k: &str| -> Result<String, Reply> {
        let v = f.get(k).and_then(json_text).filter(|s| !s.is_empty());
        match (v, from_qs) {
            (Some(v), _) => Ok(v),
            (None, true) => Err(bad(&format!("Missing parameter <code>{k}</code>"))),
            (None, false) => {
                let msg = if k == "uid" {
                    "Missing UID"
                } else {
                    "Missing type"
                };
                Err(if method == Method::DELETE {
                    Reply::error(400, "Unable to delete UIDMeta information", msg)
                } else {
                    bad(msg)
                })
            }
        }
    };
    let uid_s = required("uid")?;
    let type_s = required("type")?;
    // A bad type from the query string escapes OpenTSDB's handler as an
    // IllegalArgumentException, which it answers with 500 and this message;
    // in a body it fails the JSON mapping ("Unable to parse the given
    // JSON"). We keep the message but answer 400: the request is at fault
    // and clients only tell success from failure.
    let kind = UidKind::parse(&type_s).ok_or_else(|| {
        if from_qs {
            bad(&format!("Invalid type requested: {type_s}"))
        } else {
            Reply::error(
                400,
                "Unable to parse the given JSON",
                &format!("Invalid type requested: {type_s}"),
            )
        }
    })?;
    let uids = state.db.uids();
    let uid = uids
        .parse_hex_uid(kind, &uid_s)
        .ok_or_else(|| bad(&format!("Invalid UID: {uid_s}")))?;
    let ms = state.db.meta();
    match *method {
        Method::GET => {
            let current = meta::uid_meta_of(ms, uids, kind, uid).map_err(meta_error)?;
            Ok(Reply::json(
                200,
                serde_json::to_string(&current).expect("json"),
            ))
        }
        Method::DELETE => {
            meta::uid_meta_of(ms, uids, kind, uid).map_err(meta_error)?;
            ms.delete_uid_meta(kind, uid).map_err(internal)?;
            Ok(Reply::empty(204))
        }
        _ => {
            let edit = edit_of(&f, false, !from_qs)?;
            if !edit.any() {
                return Ok(Reply::empty(304));
            }
            // The UID must exist before its meta is written.
            uids.get_name(kind, uid).map_err(|e| meta_error(e.into()))?;
            let stored = ms
                .uid_meta(kind, uid)
                .map_err(internal)?
                .unwrap_or_default();
            let mut next = if method == Method::PUT {
                UidMetaFields {
                    created: stored.created,
                    ..Default::default()
                }
            } else {
                stored
            };
            set(&mut next.display_name, edit.display_name);
            set(&mut next.description, edit.description);
            set(&mut next.notes, edit.notes);
            set(&mut next.custom, edit.custom);
            ms.put_uid_meta(kind, uid, &next).map_err(internal)?;
            let now = meta::uid_meta_of(ms, uids, kind, uid).map_err(meta_error)?;
            Ok(Reply::json(200, serde_json::to_string(&now).expect("json")))
        }
    }
}

fn not_found_ts() -> Reply {
    Reply::error(404, "Could not find Timeseries meta data", "")
}

/// `NoSuchUniqueName` while resolving a series' names (`handleTSMeta`).
fn unknown_name(e: UidTableError) -> Reply {
    Reply::error(404, "Unable to find one of the UIDs", &e.to_string())
}

/// The series named by `metric{k=v,...}` (exact, every name must exist).
/// OpenTSDB resolves these names outside its handler's try block, so an
/// unknown name reaches the client as a 500 carrying the
/// `NoSuchUniqueName` message; we answer with the same message and 404,
/// the status its other "no such name" paths use.
fn series_of_m(state: &TsdState, m: &str) -> Result<Tsuid, Reply> {
    let (metric, tags) = LookupQuery::parse_m(m).map_err(|e| bad(&e))?;
    let uids = state.db.uids();
    let unknown = |e: UidTableError| Reply::error(404, &e.to_string(), "");
    let mu = uids.get_id(UidKind::Metric, &metric).map_err(unknown)?;
    let mut pairs = Vec::new();
    for (k, v) in tags {
        pairs.push((
            uids.get_id(UidKind::TagKey, &k).map_err(unknown)?,
            uids.get_id(UidKind::TagValue, &v).map_err(unknown)?,
        ));
    }
    Tsuid::new(mu, pairs).map_err(|e| bad(&e.to_string()))
}

/// The stored fields after a POST (merge the changed fields) or a PUT
/// (replace every user field).
fn merged_ts(stored: &TsMetaFields, edit: Edit, put: bool) -> TsMetaFields {
    let mut next = if put {
        TsMetaFields::new(stored.tsuid.clone(), stored.created)
    } else {
        stored.clone()
    };
    set(&mut next.display_name, edit.display_name);
    set(&mut next.description, edit.description);
    set(&mut next.notes, edit.notes);
    set(&mut next.custom, edit.custom);
    set(&mut next.units, edit.units);
    set(&mut next.data_type, edit.data_type);
    set(&mut next.retention, edit.retention);
    set(&mut next.max, edit.max);
    set(&mut next.min, edit.min);
    next
}

/// A field the request changed replaces the stored one.
fn set<T>(field: &mut T, edit: Option<T>) {
    if let Some(v) = edit {
        *field = v;
    }
}

fn tsmeta(state: &TsdState, method: &Method, q: &Query, body: Option<&[u8]>) -> Answer {
    let w = &state.db;
    let uids = w.uids();
    let ms = w.meta();
    let widths = w.store().widths();
    // What the TSD counted in memory goes to storage before it is read.
    if let Err(e) = w.persist_counters() {
        tracing::warn!(error = %e, "saving series counters failed");
    }
    let render = |tsuid: &Tsuid| -> Result<Option<meta::TsMeta>, Reply> {
        meta::ts_meta_of(ms, uids, tsuid, &tsuid.to_bytes(&widths)).map_err(|e| match e {
            MetaError::Uid(u @ UidTableError::NoSuchId { .. }) => unknown_name(u),
            other => internal(other),
        })
    };
    let parse_tsuid = |s: &str| {
        Tsuid::parse_hex(s, &widths)
            .map_err(|e| Reply::error(400, &format!("Invalid TSUID: {s}"), &e.to_string()))
    };
    if method == Method::GET {
        if let Some(t) = q.get("tsuid") {
            let tsuid = parse_tsuid(t)?;
            let m = render(&tsuid)?.ok_or_else(not_found_ts)?;
            return Ok(Reply::json(200, serde_json::to_string(&m).expect("json")));
        }
        let Some(m) = q.get("m") else {
            return Err(bad("Missing parameter <code>m</code>"));
        };
        // `Tags.parseWithMetric` failures become a 400 with its message.
        let (metric, tags) = LookupQuery::parse_m(m).map_err(|e| bad(&e))?;
        let query = LookupQuery::new(&metric, &tags, usize::MAX);
        let found = lookup(uids, w.index(), &query).map_err(unknown_name)?;
        let mut out = Vec::new();
        for r in found {
            if let Some(m) = render(&r.tsuid)? {
                out.push(m);
            }
        }
        return Ok(Reply::json(200, serde_json::to_string(&out).expect("json")));
    }
    let f = fields(q, body)?;
    let given = f.get("tsuid").and_then(json_text).filter(|t| !t.is_empty());
    if method == Method::DELETE {
        // `TSMeta.delete` without a TSUID: "Missing UID", wrapped.
        let Some(t) = given else {
            return Err(Reply::error(
                400,
                "Unable to delete TSMeta information",
                "Missing UID",
            ));
        };
        let tsuid = parse_tsuid(&t)?;
        ms.delete_ts_fields(&tsuid.to_bytes(&widths))
            .map_err(internal)?;
        return Ok(Reply::empty(204));
    }
    let edit = edit_of(&f, true, body.is_some())?;
    let put = method == Method::PUT;
    let (tsuid, stored) = match given {
        Some(t) => {
            // `syncToStorage`: nothing changed → 304, then the names must
            // resolve, then the TSMeta must already exist.
            let tsuid = parse_tsuid(&t)?;
            if !edit.any() {
                return Ok(Reply::empty(304));
            }
            render_names(state, &tsuid)?;
            let Some(stored) = ms.ts_fields(&tsuid.to_bytes(&widths)).map_err(internal)? else {
                return Err(bad("Requested TSMeta did not exist"));
            };
            (tsuid, merged_ts(&stored, edit, put))
        }
        None => {
            // Without a TSUID the series comes from `m`; `create=true`
            // (exactly) makes a new TSMeta from the request's fields.
            let Some(m) = q.get("m") else {
                return Err(bad("Missing parameter <code>m</code>"));
            };
            let create = q.get("create") == Some("true");
            let tsuid = series_of_m(state, m)?;
            let hex = tsuid.to_hex(&widths);
            match ms.ts_fields(&tsuid.to_bytes(&widths)).map_err(internal)? {
                Some(stored) => {
                    if !edit.any() {
                        return Ok(Reply::empty(304));
                    }
                    (tsuid, merged_ts(&stored, edit, put))
                }
                None if create => {
                    let blank = TsMetaFields::new(hex, super::now_s());
                    (tsuid, merged_ts(&blank, edit, false))
                }
                None => {
                    return Err(bad(
                        "Could not find TSMeta, specify \"create=true\" to create a new one.",
                    ));
                }
            }
        }
    };
    let mut next = stored;
    next.tsuid = tsuid.to_hex(&widths);
    ms.put_ts_fields(&tsuid.to_bytes(&widths), &next)
        .map_err(internal)?;
    let m = render(&tsuid)?.ok_or_else(not_found_ts)?;
    Ok(Reply::json(200, serde_json::to_string(&m).expect("json")))
}

/// Every name of the series must resolve before its TSMeta is written.
fn render_names(state: &TsdState, tsuid: &Tsuid) -> Result<(), Reply> {
    let uids = state.db.uids();
    let ms = state.db.meta();
    meta::uid_meta_of(ms, uids, UidKind::Metric, tsuid.metric).map_err(meta_error)?;
    for (k, v) in &tsuid.tags {
        meta::uid_meta_of(ms, uids, UidKind::TagKey, *k).map_err(meta_error)?;
        meta::uid_meta_of(ms, uids, UidKind::TagValue, *v).map_err(meta_error)?;
    }
    Ok(())
}
