//! `/api/uid/*` (`UniqueIdRpc`): `assign`, `rename`, `uidmeta` and
//! `tsmeta`; any other sub-endpoint answers 501 as OpenTSDB does.

use hyper::Method;
use serde_json::{Map, Value};

use super::{Query, Reply, method_not_allowed, parse_json};
use crate::codec::row_key::Tsuid;
use crate::index::lookup::{LookupQuery, lookup};
use crate::meta::{self, MetaError, TsMetaFields, UidMetaFields};
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
    // A body counts only if it holds something (`query.hasContent()`).
    let body = body.filter(|b| !b.iter().all(u8::is_ascii_whitespace));
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

/// A JSON value as the string OpenTSDB's map parsing would give.
fn as_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
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
                    wanted.push((key, kind, items.iter().filter_map(as_text).collect()))
                }
                Some(v) => wanted.push((key, kind, as_text(v).into_iter().collect())),
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
    let uids = state.writer.uids();
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
    Ok(Reply::json(status, Value::Object(out).to_string()))
}

fn rename(state: &TsdState, q: &Query, body: Option<&[u8]>) -> Answer {
    let get = |obj: &Option<Map<String, Value>>, k: &str| match obj {
        Some(o) => o.get(k).and_then(as_text),
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
    match state.writer.uids().rename(kind, &old, &new) {
        Ok(_) => Ok(Reply::json(200, r#"{"result":"true"}"#)),
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
                .map(|(k, v)| (k.clone(), as_text(v).unwrap_or_default()))
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

fn uidmeta(state: &TsdState, method: &Method, q: &Query, body: Option<&[u8]>) -> Answer {
    let f = if method == Method::GET {
        Map::new()
    } else {
        fields(q, body)?
    };
    let text = |k: &str| {
        if method == Method::GET {
            q.get(k).map(String::from)
        } else {
            f.get(k).and_then(as_text)
        }
    };
    let uid_s = text("uid").ok_or_else(|| {
        if method == Method::GET {
            bad("Missing parameter <code>uid</code>")
        } else {
            bad("Missing UID")
        }
    })?;
    let type_s = text("type").ok_or_else(|| {
        if method == Method::GET {
            bad("Missing parameter <code>type</code>")
        } else {
            bad("Missing type")
        }
    })?;
    let kind =
        UidKind::parse(&type_s).ok_or_else(|| bad(&format!("Invalid type requested: {type_s}")))?;
    let uids = state.writer.uids();
    let uid = uids
        .parse_hex_uid(kind, &uid_s)
        .ok_or_else(|| bad(&format!("Invalid UID: {uid_s}")))?;
    let kv = &**state.writer.store().kv();
    // The UID must exist whatever the verb.
    let current = meta::uid_meta_of(kv, uids, kind, uid).map_err(meta_error)?;
    match *method {
        Method::GET => Ok(Reply::json(
            200,
            serde_json::to_string(&current).expect("json"),
        )),
        Method::DELETE => {
            meta::delete_uid_meta(kv, uids, kind, uid).map_err(internal)?;
            Ok(Reply::empty(204))
        }
        _ => {
            let stored = meta::read_uid_meta(kv, uids, kind, uid)
                .map_err(internal)?
                .unwrap_or_default();
            let mut next = if method == Method::PUT {
                UidMetaFields {
                    created: stored.created,
                    ..Default::default()
                }
            } else {
                stored.clone()
            };
            for (k, v) in &f {
                match k.as_str() {
                    "displayName" => next.display_name = as_text(v).unwrap_or_default(),
                    "description" => next.description = as_text(v).unwrap_or_default(),
                    "notes" => next.notes = as_text(v).unwrap_or_default(),
                    "custom" => next.custom = custom_of(v)?,
                    _ => {}
                }
            }
            next.kind = kind.type_name().into();
            let mut before = stored;
            before.kind = next.kind.clone();
            if next == before {
                return Ok(Reply::empty(304));
            }
            meta::write_uid_meta(kv, uids, kind, uid, &next).map_err(internal)?;
            let now = meta::uid_meta_of(kv, uids, kind, uid).map_err(meta_error)?;
            Ok(Reply::json(200, serde_json::to_string(&now).expect("json")))
        }
    }
}

fn not_found_ts() -> Reply {
    Reply::error(404, "Could not find Timeseries meta data", "")
}

/// The series named by `metric{k=v,...}` (exact, every name must exist).
fn series_of_m(state: &TsdState, m: &str) -> Result<Tsuid, Reply> {
    let (metric, tags) =
        LookupQuery::parse_m(m).map_err(|e| Reply::error(400, "Unable to parse the query", &e))?;
    let uids = state.writer.uids();
    let unknown =
        |e: UidTableError| Reply::error(404, "Unable to resolve one or more UIDs", &e.to_string());
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

fn apply_ts(next: &mut TsMetaFields, f: &Map<String, Value>) -> Result<(), Reply> {
    let number = |k: &str, v: &Value| -> Result<f64, Reply> {
        match v {
            Value::Number(n) => Ok(n.as_f64().unwrap_or(f64::NAN)),
            Value::String(s) => s
                .trim()
                .parse()
                .map_err(|_| bad(&format!("Unable to parse '{k}' as a number"))),
            Value::Null => Ok(f64::NAN),
            _ => Err(bad(&format!("Unable to parse '{k}' as a number"))),
        }
    };
    for (k, v) in f {
        match k.as_str() {
            "displayName" => next.display_name = as_text(v).unwrap_or_default(),
            "description" => next.description = as_text(v).unwrap_or_default(),
            "notes" => next.notes = as_text(v).unwrap_or_default(),
            "units" => next.units = as_text(v).unwrap_or_default(),
            "dataType" => next.data_type = as_text(v).unwrap_or_default(),
            "custom" => next.custom = custom_of(v)?,
            "retention" => {
                let n = number(k, v)?;
                if !n.is_finite() || n.fract() != 0.0 {
                    return Err(bad("Unable to parse 'retention' as a number"));
                }
                next.retention = n as i64;
            }
            "max" => next.max = number(k, v)?,
            "min" => next.min = number(k, v)?,
            _ => {}
        }
    }
    Ok(())
}

fn tsmeta(state: &TsdState, method: &Method, q: &Query, body: Option<&[u8]>) -> Answer {
    let w = &state.writer;
    let uids = w.uids();
    let kv = &**w.store().kv();
    let widths = w.store().layout().widths;
    // What the TSD counted in memory goes to storage before it is read.
    if let Err(e) = w.persist_counters() {
        tracing::warn!(error = %e, "saving series counters failed");
    }
    let render = |tsuid: &Tsuid| -> Result<Option<meta::TsMeta>, Reply> {
        meta::ts_meta_of(kv, uids, tsuid, &tsuid.to_bytes(&widths)).map_err(meta_error)
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
            return Err(bad("Missing parameter <code>tsuid</code>"));
        };
        let (metric, tags) = LookupQuery::parse_m(m)
            .map_err(|e| Reply::error(400, "Unable to parse the query", &e))?;
        let query = LookupQuery::new(&metric, &tags, usize::MAX);
        let found = lookup(uids, w.index(), &query)
            .map_err(|e| Reply::error(404, "Unable to resolve one or more UIDs", &e.to_string()))?;
        let mut out = Vec::new();
        for r in found {
            if let Some(m) = render(&r.tsuid)? {
                out.push(m);
            }
        }
        return Ok(Reply::json(200, serde_json::to_string(&out).expect("json")));
    }
    let f = fields(q, body)?;
    let create = q.has("create") && q.get("create") != Some("false");
    let tsuid = match (f.get("tsuid").and_then(as_text), q.get("m")) {
        (Some(t), _) => parse_tsuid(&t)?,
        (None, Some(m)) => series_of_m(state, m)?,
        (None, None) => return Err(bad("Missing TSUID")),
    };
    let bytes = tsuid.to_bytes(&widths);
    if method == Method::DELETE {
        meta::delete_ts_fields(kv, &bytes).map_err(internal)?;
        return Ok(Reply::empty(204));
    }
    let stored = meta::read_ts_fields(kv, &bytes).map_err(internal)?;
    let hex = tsuid.to_hex(&widths);
    let (before, mut next) = match stored {
        Some(s) => {
            let next = if method == Method::PUT {
                TsMetaFields::new(hex.clone(), s.created)
            } else {
                s.clone()
            };
            (Some(s), next)
        }
        None if create => (None, TsMetaFields::new(hex.clone(), super::now_s())),
        None => {
            return Err(Reply::error(
                404,
                "Could not find TSMeta, specify \"create=true\" to create a new one.",
                "",
            ));
        }
    };
    apply_ts(&mut next, &f)?;
    next.tsuid = hex;
    if let Some(b) = &before
        && b.same_as(&next)
    {
        return Ok(Reply::empty(304));
    }
    // Every name of the series must resolve before anything is written.
    meta::uid_meta_of(kv, uids, UidKind::Metric, tsuid.metric).map_err(meta_error)?;
    for (k, v) in &tsuid.tags {
        meta::uid_meta_of(kv, uids, UidKind::TagKey, *k).map_err(meta_error)?;
        meta::uid_meta_of(kv, uids, UidKind::TagValue, *v).map_err(meta_error)?;
    }
    meta::write_ts_fields(kv, &bytes, &next).map_err(internal)?;
    let m = render(&tsuid)?.ok_or_else(not_found_ts)?;
    Ok(Reply::json(200, serde_json::to_string(&m).expect("json")))
}
