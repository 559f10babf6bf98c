//! The `/api/query` response exactly as OpenTSDB's JSON serializer writes
//! it: `dps` as an object (or arrays), ms or seconds keys, Java
//! `Double.toString` numbers, `"NaN"` (or `null` with the null fill
//! policy), optional `query`, `tsuids`, `stats` and a final
//! `statsSummary` object.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::model::Tsuid;
use crate::model::java::write_double;
use crate::model::{Annotation, Value};

/// One output series (a group of a sub-query).
#[derive(Debug, Clone, PartialEq)]
pub struct QueryResult {
    pub metric: String,
    pub tags: BTreeMap<String, String>,
    /// Sorted (OpenTSDB's order is a HashSet's, i.e. unspecified).
    pub aggregate_tags: Vec<String>,
    /// Sorted hex TSUIDs of the contributing series.
    pub tsuids: Vec<String>,
    /// Points in `[start, end]`, timestamps in ms.
    pub dps: Vec<(i64, Value)>,
    /// NaN serializes as `null` (fill policy `null`).
    pub nan_as_null: bool,
    /// The sub-query, for `showQuery`.
    pub query: Option<serde_json::Value>,
    /// Per-result stats, for `showStats`.
    pub stats: Option<serde_json::Value>,
    /// The group's series annotations in `[start, end]`, sorted by start
    /// time; left out of the JSON when empty (unless
    /// `show_empty_annotations`).
    pub annotations: Vec<Annotation>,
    /// Write `"annotations":[]` even when there are none. A query's group
    /// has a null list when it has no annotations, but the series gexp's
    /// cross-series functions build carry an empty one
    /// (`EDPtoDPS.getAnnotations`), which 2.4.1's serializer writes.
    pub show_empty_annotations: bool,
    /// The sub-query (its index after de-duplication) the result answers:
    /// gexp finds a function argument's groups by it.
    pub query_index: usize,
}

/// A whole response.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueryResponse {
    pub results: Vec<QueryResult>,
    pub ms_resolution: bool,
    pub arrays: bool,
    pub show_tsuids: bool,
    /// `statsSummary`, for `showSummary`/`showStats`.
    pub summary: Option<serde_json::Value>,
    /// Global annotations (`globalAnnotations`), sorted by start time and
    /// repeated in every result; left out when empty.
    pub global_annotations: Vec<Annotation>,
    /// For a `delete` query: the rows its scans covered, which the caller
    /// deletes once the answer is built (the engine only reads).
    pub deletions: Vec<RowRange>,
}

/// Whole hour rows of some series, `[start_ms, end_ms]` inclusive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowRange {
    pub tsuids: Vec<Tsuid>,
    pub start_ms: u64,
    pub end_ms: u64,
}

fn write_str(out: &mut String, s: &str) {
    // serde_json escapes exactly as JSON requires: quotes, backslashes and
    // control characters. Names rarely hold one, so the usual string is
    // copied as it is rather than through a string of its own.
    if s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into()));
    } else {
        out.push('"');
        out.push_str(s);
        out.push('"');
    }
}

/// An integer's decimal text (`{i}`, without `core::fmt`'s cost per
/// number).
fn write_int(out: &mut String, i: i64) {
    out.push_str(itoa::Buffer::new().format(i));
}

/// A value as Jackson writes it.
pub(crate) fn write_value(out: &mut String, v: Value, nan_as_null: bool) {
    match v {
        Value::Int(i) => write_int(out, i),
        Value::Float(f) if f.is_nan() => out.push_str(if nan_as_null { "null" } else { "\"NaN\"" }),
        Value::Float(f) if f.is_infinite() => out.push_str(if f > 0.0 {
            "\"Infinity\""
        } else {
            "\"-Infinity\""
        }),
        Value::Float(f) => write_double(out, f),
    }
}

impl QueryResponse {
    /// The response body.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(256 + self.results.len() * 256);
        out.push('[');
        for (i, r) in self.results.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            self.write_result(&mut out, r);
        }
        if let Some(s) = &self.summary {
            if !self.results.is_empty() {
                out.push(',');
            }
            out.push_str("{\"statsSummary\":");
            out.push_str(&s.to_string());
            out.push('}');
        }
        out.push(']');
        out
    }

    /// The body parsed as a JSON value (numbers lose Java's formatting).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::from_str(&self.to_json()).unwrap_or(serde_json::Value::Null)
    }

    fn write_result(&self, out: &mut String, r: &QueryResult) {
        out.push_str("{\"metric\":");
        write_str(out, &r.metric);
        out.push_str(",\"tags\":{");
        for (i, (k, v)) in r.tags.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_str(out, k);
            out.push(':');
            write_str(out, v);
        }
        out.push_str("},\"aggregateTags\":[");
        for (i, k) in r.aggregate_tags.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_str(out, k);
        }
        out.push(']');
        if let Some(q) = &r.query {
            out.push_str(",\"query\":");
            out.push_str(&q.to_string());
        }
        if self.show_tsuids {
            out.push_str(",\"tsuids\":[");
            for (i, t) in r.tsuids.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_str(out, t);
            }
            out.push(']');
        }
        for (name, notes, show_empty) in [
            ("annotations", &r.annotations, r.show_empty_annotations),
            ("globalAnnotations", &self.global_annotations, false),
        ] {
            if notes.is_empty() && !show_empty {
                continue;
            }
            let _ = write!(out, ",\"{name}\":[");
            for (i, n) in notes.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                n.write_api_json(out);
            }
            out.push(']');
        }
        if let Some(s) = &r.stats {
            out.push_str(",\"stats\":");
            out.push_str(&s.to_string());
        }
        out.push_str(",\"dps\":");
        out.push(if self.arrays { '[' } else { '{' });
        for (i, &(ts, v)) in r.dps.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let t = if self.ms_resolution { ts } else { ts / 1000 };
            if self.arrays {
                out.push('[');
                write_int(out, t);
                out.push(',');
                write_value(out, v, r.nan_as_null);
                out.push(']');
            } else {
                out.push('"');
                write_int(out, t);
                out.push_str("\":");
                write_value(out, v, r.nan_as_null);
            }
        }
        out.push(if self.arrays { ']' } else { '}' });
        out.push('}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(dps: Vec<(i64, Value)>) -> QueryResult {
        QueryResult {
            metric: "m".into(),
            tags: [("host".to_string(), "a".to_string())].into(),
            aggregate_tags: vec![],
            tsuids: vec!["000001000001000001".into()],
            dps,
            nan_as_null: false,
            query: None,
            stats: None,
            annotations: vec![],
            show_empty_annotations: false,
            query_index: 0,
        }
    }

    #[test]
    fn numbers_like_jackson() {
        let mut r = QueryResponse {
            results: vec![result(vec![
                (1356998400000, Value::Int(1)),
                (1356998401500, Value::Float(1.0)),
                (1356998402000, Value::Float(1e10)),
                (1356998403000, Value::Float(f64::NAN)),
            ])],
            ..Default::default()
        };
        assert_eq!(
            r.to_json(),
            r#"[{"metric":"m","tags":{"host":"a"},"aggregateTags":[],"dps":{"1356998400":1,"1356998401":1.0,"1356998402":1.0E10,"1356998403":"NaN"}}]"#
        );
        r.arrays = true;
        r.ms_resolution = true;
        r.show_tsuids = true;
        r.results[0].nan_as_null = true;
        r.results[0].dps.truncate(1);
        r.results[0]
            .dps
            .push((1356998403000, Value::Float(f64::NAN)));
        assert_eq!(
            r.to_json(),
            r#"[{"metric":"m","tags":{"host":"a"},"aggregateTags":[],"tsuids":["000001000001000001"],"dps":[[1356998400000,1],[1356998403000,null]]}]"#
        );
        assert_eq!(QueryResponse::default().to_json(), "[]");
    }

    #[test]
    fn strings_escaped_as_serde_json_does() {
        let mut names: Vec<String> = [
            "",
            "host",
            "a b",
            "é\u{2028}ü",
            "q\"t",
            "back\\slash",
            "\u{7f}",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        names.extend((0u8..0x20).map(|b| format!("x{}y", b as char)));
        for n in names {
            let mut out = String::new();
            write_str(&mut out, &n);
            assert_eq!(out, serde_json::to_string(&n).unwrap(), "{n:?}");
        }
    }

    #[test]
    fn integers_as_display_writes_them() {
        for i in [
            0,
            1,
            -1,
            42,
            i64::MIN,
            i64::MAX,
            1_356_998_400_000,
            -1_356_998_400,
        ] {
            let mut out = String::new();
            write_int(&mut out, i);
            assert_eq!(out, i.to_string());
        }
    }
}
