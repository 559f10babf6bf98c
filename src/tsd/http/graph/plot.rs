//! `/q`'s two text answers made from the series it plots (one
//! [`PlotSeries`] per result of each sub-query): `&ascii`'s lines and
//! `&json`'s summary object, byte for byte as `GraphHandler` writes them.

use std::fmt::Write as _;

use crate::model::Value;
use crate::model::java::{double_to_string, hashmap_order};
use crate::render::plot::{InfiniteValue, PlotSeries, plotted};

/// `respondAsciiQuery`: one line per point, `metric seconds value tags`
/// (the `put` format), integers as integers, doubles as Java prints them,
/// NaN left out.
pub(crate) fn ascii(series: &[PlotSeries]) -> Result<String, InfiniteValue> {
    let mut out = String::new();
    for (i, s) in series.iter().enumerate() {
        let mut tags = String::new();
        for (k, v) in &s.tags {
            let _ = write!(tags, " {k}={v}");
        }
        for &(ts, v) in &s.points {
            let value = match v {
                Value::Int(n) => n.to_string(),
                Value::Float(f) => match plotted(i, v)? {
                    None => continue,
                    Some(_) => double_to_string(f),
                },
            };
            let _ = writeln!(out, "{} {} {value}{tags}", s.metric, ts / 1000);
        }
    }
    Ok(out)
}

/// `&json`'s answer: how much was plotted, and the aggregated tags.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Summary {
    /// Points drawn within the range.
    pub plotted: u64,
    /// Raw points read for the plotted series (`aggregatedSize`).
    pub points: u64,
    /// Per sub-query, the aggregated tag keys of its last result (as
    /// 2.4.1 keeps them), `None` (null) when it had no result — except
    /// the first, which 1.0 compatibility makes `[]`.
    pub etags: Vec<Option<Vec<String>>>,
}

/// Writes `entries` as a Java `HashMap<String, Object>` of default
/// capacity serializes: in its bucket order.
fn hashmap_json(entries: &[(&str, String)]) -> String {
    let keys: Vec<&str> = entries.iter().map(|e| e.0).collect();
    let mut out = String::from("{");
    for (i, k) in hashmap_order(&keys, 16).into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let v = &entries
            .iter()
            .find(|e| e.0 == k)
            .expect("a key of entries")
            .1;
        let _ = write!(out, "{}:{v}", serde_json::to_string(k).expect("string"));
    }
    out.push('}');
    out
}

impl Summary {
    /// The object `GraphHandler` sends: `plotted`, `points`, `etags`,
    /// `timing` (ms), and `"cachehit":"disk"` when served from the cache.
    pub(crate) fn to_json(&self, timing_ms: u64, cache_hit: bool) -> String {
        let mut etags = String::from("[");
        for (i, set) in self.etags.iter().enumerate() {
            if i > 0 {
                etags.push(',');
            }
            match set {
                None => etags.push_str("null"),
                Some(keys) => {
                    // A HashSet of default capacity, filled in list order.
                    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
                    let ordered: Vec<&str> = hashmap_order(&refs, 16);
                    etags.push_str(&serde_json::to_string(&ordered).expect("strings"));
                }
            }
        }
        etags.push(']');
        let mut entries = vec![
            ("plotted", self.plotted.to_string()),
            ("points", self.points.to_string()),
            ("etags", etags),
            ("timing", timing_ms.to_string()),
        ];
        if cache_hit {
            entries.push(("cachehit", "\"disk\"".to_string()));
        }
        hashmap_json(&entries)
    }

    /// Reads back what [`Summary::to_json`] wrote (for the cache).
    pub(crate) fn from_json(bytes: &[u8]) -> Option<Summary> {
        let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
        let etags = v
            .get("etags")?
            .as_array()?
            .iter()
            .map(|s| {
                s.as_array().map(|a| {
                    a.iter()
                        .filter_map(|k| k.as_str().map(String::from))
                        .collect()
                })
            })
            .collect();
        Some(Summary {
            plotted: v.get("plotted")?.as_u64()?,
            points: v.get("points")?.as_u64()?,
            etags,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(points: Vec<(i64, Value)>) -> PlotSeries {
        PlotSeries {
            metric: "sys.cpu.user".into(),
            tags: vec![("host".into(), "web01".into()), ("dc".into(), "lga".into())],
            points,
            right_axis: false,
        }
    }

    #[test]
    fn ascii_lines_as_put_lines() {
        let s = series(vec![
            (1356998400000, Value::Int(42)),
            (1356998460000, Value::Float(1.5)),
            (1356998520000, Value::Float(f64::NAN)),
            (1356998580000, Value::Float(1e10)),
        ]);
        assert_eq!(
            ascii(&[s]).unwrap(),
            "sys.cpu.user 1356998400 42 host=web01 dc=lga\n\
             sys.cpu.user 1356998460 1.5 host=web01 dc=lga\n\
             sys.cpu.user 1356998580 1.0E10 host=web01 dc=lga\n"
        );
        let inf = series(vec![(1356998400000, Value::Float(f64::INFINITY))]);
        assert!(ascii(&[inf]).is_err());
    }

    #[test]
    fn title_is_map_to_string() {
        assert_eq!(series(vec![]).title(), "sys.cpu.user{host=web01, dc=lga}");
    }

    #[test]
    fn summary_in_hashmap_order() {
        let s = Summary {
            plotted: 3,
            points: 5,
            etags: vec![Some(vec!["host".into()]), None],
        };
        let json = s.to_json(7, false);
        // java.util.HashMap<String,Object>(16) iterates these keys so.
        assert_eq!(
            json,
            r#"{"plotted":3,"timing":7,"etags":[["host"],null],"points":5}"#
        );
        let hit = s.to_json(1, true);
        assert_eq!(
            hit,
            r#"{"plotted":3,"timing":1,"cachehit":"disk","etags":[["host"],null],"points":5}"#
        );
        assert_eq!(Summary::from_json(json.as_bytes()), Some(s));
    }
}
