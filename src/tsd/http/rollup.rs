//! `/api/rollup` (`RollupDataPointRpc`): rollups and pre-aggregates, a
//! JSON object or array of points like `/api/put`'s with `interval`,
//! `aggregator` and `groupByAggregator`; the put path's field readers,
//! checks, flags and answer (`super::put`).

use hyper::Method;
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::call::body_unless_get;
use super::put::{PutFlags, PutOutcome, json_str, render, validate_point};
use super::{Call, Reply, method_not_allowed};
use crate::db::RollupPoint;
use crate::protocol::parse_value;
use crate::protocol::put_json::point::{JavaString, JsonTimestamp, TagList, value_text};
use crate::protocol::telnet::check_finite;
use crate::storage::Durability;

/// One point of the body (`RollUpDataPoint`).
#[derive(Debug, Deserialize)]
struct JsonRollup<'a> {
    #[serde(borrow, default)]
    metric: Option<JavaString<'a>>,
    #[serde(default)]
    timestamp: JsonTimestamp,
    #[serde(borrow, default)]
    value: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tags: Option<TagList<'a>>,
    #[serde(borrow, default)]
    interval: Option<JavaString<'a>>,
    #[serde(borrow, default)]
    aggregator: Option<JavaString<'a>>,
    #[serde(borrow, default, rename = "groupByAggregator")]
    group_by: Option<JavaString<'a>>,
}

fn text<'a>(s: &'a Option<JavaString<'_>>) -> Option<&'a str> {
    s.as_ref().and_then(|j| j.0.as_deref())
}

/// The point as `RollUpDataPoint` serializes in `details` (null fields
/// left out, as its `NON_NULL` inclusion does).
fn point_json(p: &JsonRollup, value: Option<&str>) -> String {
    let opt = |v: Option<&str>| v.map(json_str).unwrap_or_else(|| "null".into());
    let mut s = format!(
        "{{\"metric\":{},\"timestamp\":{},\"value\":{},\"tags\":",
        opt(text(&p.metric)),
        p.timestamp.0,
        opt(value)
    );
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
                s.push_str(&opt(v.as_deref()));
            }
            s.push('}');
        }
    }
    for (name, v) in [
        ("interval", text(&p.interval)),
        ("aggregator", text(&p.aggregator)),
        ("groupByAggregator", text(&p.group_by)),
    ] {
        if let Some(v) = v {
            s.push_str(&format!(",\"{name}\":{}", json_str(v)));
        }
    }
    s.push('}');
    s
}

/// `RollUpDataPoint.validate` after `IncomingDataPoint.validate`.
fn validate_rollup(p: &JsonRollup) -> Result<(), &'static str> {
    let is_groupby = text(&p.group_by).is_some_and(|g| !g.is_empty());
    if text(&p.interval).is_none_or(str::is_empty) && !is_groupby {
        return Err("Missing interval");
    }
    if text(&p.aggregator).is_none_or(str::is_empty) && !is_groupby {
        return Err("Missing aggregator");
    }
    Ok(())
}

/// Checks and writes one point; the error message for `details`.
fn write_one(
    state: &super::super::TsdState,
    p: &JsonRollup,
    durability: Durability,
) -> Result<(), String> {
    super::super::stats::inc(&state.stats.rollup_points);
    let value = value_text(p.value).map_err(|e| e.0)?;
    let metric = text(&p.metric).unwrap_or("");
    let tags: Vec<(&str, Option<&str>)> = p
        .tags
        .as_ref()
        .map(|t| {
            t.0.iter()
                .map(|(k, v)| (k.as_ref(), v.as_deref()))
                .collect()
        })
        .unwrap_or_default();
    let (v, tag_list) = validate_point(
        metric,
        p.timestamp.0,
        value.as_deref(),
        p.tags.as_ref().map(|_| tags.as_slice()),
    )
    .map_err(String::from)?;
    validate_rollup(p).map_err(String::from)?;
    let r = parse_value(v).and_then(|value| {
        check_finite(metric, p.timestamp.0, value)?;
        let point = RollupPoint {
            metric,
            timestamp: p.timestamp.0,
            value,
            // A null tag value fails name validation like an empty one.
            tags: tag_list
                .iter()
                .map(|(k, v)| (*k, v.unwrap_or("")))
                .collect(),
            interval: text(&p.interval),
            aggregator: text(&p.aggregator),
            group_by: text(&p.group_by),
            is_groupby: text(&p.group_by).is_some(),
        };
        state.db.write_rollup(&point, durability)
    });
    r.map_err(|e| {
        state.stats.count_error(&e);
        e.http_message()
    })
}

/// `/api/rollup`: POST only.
pub(super) async fn route(c: Call, body: Incoming) -> Reply {
    if c.method != Method::POST {
        return method_not_allowed(&c.method);
    }
    let flags = PutFlags::of(&c.query);
    let body = match body_unless_get(&c, body).await {
        Ok(b) => b.unwrap_or_default(),
        Err(r) => return r,
    };
    super::query::blocking(&c.state, move |st| answer(st, flags, &body)).await
}

fn answer(state: &super::super::TsdState, flags: PutFlags, body: &[u8]) -> Reply {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Reply::error(
            400,
            "Missing message content",
            "Supply valid JSON formatted data in the body of your request",
        );
    }
    let bad =
        |e: serde_json::Error| Reply::error(400, "Unable to parse the given JSON", &e.to_string());
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    let points: Vec<JsonRollup> = if first == Some(&b'[') {
        match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => return bad(e),
        }
    } else {
        match serde_json::from_slice(body) {
            Ok(p) => vec![p],
            Err(e) => return bad(e),
        }
    };
    if points.is_empty() {
        return Reply::error(400, "No datapoints found in content", "");
    }
    let durability = if flags.sync {
        Durability::Sync
    } else {
        Durability::Process
    };
    let mut outcome = PutOutcome {
        keep_errors: flags.details,
        ..PutOutcome::default()
    };
    for p in &points {
        match write_one(state, p, durability) {
            Ok(()) => outcome.success += 1,
            Err(msg) => {
                outcome.failed += 1;
                if outcome.keep_errors {
                    let value = value_text(p.value).ok().flatten();
                    outcome.errors.push((point_json(p, value.as_deref()), msg));
                }
            }
        }
    }
    let (status, body) = render(flags, &outcome);
    match body {
        None => Reply::empty(status),
        Some(b) => Reply::json(status, b),
    }
}
