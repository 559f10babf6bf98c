//! Property test: the engine against a small reference written with plain
//! loops over raw points, for random data and random aggregator,
//! downsample, rate and filter combinations.

use crate::common;

use common::{Db, T};
use proptest::prelude::*;
use rtsdb::model::Value;

#[derive(Debug, Clone)]
struct Case {
    series: Vec<Vec<(u64, Value)>>,
    agg: &'static str,
    downsample: Option<(u64, &'static str)>,
    rate: bool,
    /// 0: none, 1: host literal (one series), 2: group by dc.
    filter: u8,
}

fn point() -> impl Strategy<Value = Value> {
    prop_oneof![
        (-50i64..50).prop_map(Value::Int),
        (-200i64..200).prop_map(|v| Value::Float(v as f64 / 4.0)),
    ]
}

fn series() -> impl Strategy<Value = Vec<(u64, Value)>> {
    proptest::collection::btree_map(0u64..360, point(), 1..25)
        .prop_map(|m| m.into_iter().map(|(k, v)| (k * 10, v)).collect())
}

fn case() -> impl Strategy<Value = Case> {
    (
        proptest::collection::vec(series(), 1..5),
        proptest::sample::select(vec![
            "sum", "min", "max", "avg", "count", "zimsum", "mimmin", "mimmax", "pfsum", "dev",
            "median",
        ]),
        proptest::option::of((
            proptest::sample::select(vec![60u64, 300]),
            proptest::sample::select(vec!["sum", "avg", "max", "count"]),
        )),
        any::<bool>(),
        0u8..3,
    )
        .prop_map(|(series, agg, downsample, rate, filter)| Case {
            series,
            agg,
            downsample,
            rate,
            filter,
        })
}

/// Per-series transform: downsample then rate.
fn transform(c: &Case, pts: &[(u64, Value)]) -> Vec<(i64, Value)> {
    let mut v: Vec<(i64, Value)> = pts
        .iter()
        .map(|&(t, v)| (((T + t) * 1000) as i64, v))
        .collect();
    if let Some((iv, f)) = c.downsample {
        let iv = iv as i64 * 1000;
        let mut out: Vec<(i64, Vec<f64>)> = Vec::new();
        for (t, x) in v {
            let b = t - t % iv;
            match out.last_mut() {
                Some((lb, vals)) if *lb == b => vals.push(x.as_f64()),
                _ => out.push((b, vec![x.as_f64()])),
            }
        }
        v = out
            .into_iter()
            .map(|(b, vals)| {
                let r = match f {
                    "sum" => vals.iter().sum(),
                    "avg" => vals.iter().sum::<f64>() / vals.len() as f64,
                    "max" => vals.iter().cloned().fold(f64::MIN, f64::max),
                    _ => vals.len() as f64,
                };
                (b, Value::Float(r))
            })
            .collect();
    }
    if c.rate {
        let mut out = Vec::new();
        for w in v.windows(2) {
            let ((t0, a), (t1, b)) = (w[0], w[1]);
            let diff = match (a, b) {
                (Value::Int(a), Value::Int(b)) => (b - a) as f64,
                _ => b.as_f64() - a.as_f64(),
            };
            out.push((t1, Value::Float(diff / ((t1 - t0) as f64 / 1000.0))));
        }
        v = out;
    }
    v
}

/// The group-by merge, one timestamp and one series at a time.
fn merge(c: &Case, group: &[Vec<(i64, Value)>]) -> Vec<(i64, Value)> {
    let mut times: Vec<i64> = group.iter().flatten().map(|p| p.0).collect();
    times.sort();
    times.dedup();
    let mut out = Vec::new();
    for t in times {
        let mut float = c.rate;
        let mut vals: Vec<(Value, Value, i64, i64, bool)> = Vec::new(); // (y0, y1, x0, x1, exact)
        for s in group.iter().filter(|s| !s.is_empty()) {
            let cur = s.iter().rev().find(|p| p.0 <= t);
            let next = s.iter().find(|p| p.0 > t);
            let in_range = t >= s[0].0 && t <= s[s.len() - 1].0;
            if in_range && cur.is_some_and(|p| p.1.is_float()) {
                float = true;
            }
            if next.is_some_and(|p| p.1.is_float()) {
                float = true;
            }
            if !in_range {
                continue;
            }
            let (x0, y0) = *cur.unwrap();
            if x0 == t {
                vals.push((y0, y0, x0, x0, true));
            } else {
                let (x1, y1) = *next.unwrap();
                vals.push((y0, y1, x0, x1, false));
            }
        }
        let interp = match c.agg {
            _ if c.rate => "prev",
            "zimsum" | "count" => "zero",
            "mimmin" => "max",
            "mimmax" => "min",
            "pfsum" => "prev",
            _ => "lerp",
        };
        if float {
            let xs: Vec<f64> = vals
                .iter()
                .map(|&(y0, y1, x0, x1, exact)| {
                    let (y0, y1) = (y0.as_f64(), y1.as_f64());
                    if exact {
                        return y0;
                    }
                    match interp {
                        "lerp" => y0 + (t - x0) as f64 * (y1 - y0) / (x1 - x0) as f64,
                        "zero" => 0.0,
                        "max" => f64::MAX,
                        "min" => -f64::MAX,
                        _ => y0,
                    }
                })
                .collect();
            out.push((t, Value::Float(agg_f(c.agg, &xs))));
        } else {
            let int = |v: Value| {
                if let Value::Int(i) = v {
                    i
                } else {
                    unreachable!()
                }
            };
            let xs: Vec<i64> = vals
                .iter()
                .map(|&(y0, y1, x0, x1, exact)| {
                    let (y0, y1) = (int(y0), int(y1));
                    if exact {
                        return y0;
                    }
                    match interp {
                        "lerp" => y0 + (t - x0) * (y1 - y0) / (x1 - x0),
                        "zero" => 0,
                        "max" => i64::MAX,
                        "min" => i64::MIN,
                        _ => y0,
                    }
                })
                .collect();
            out.push((t, Value::Int(agg_i(c.agg, &xs))));
        }
    }
    out
}

fn agg_f(agg: &str, xs: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    match agg {
        "sum" | "zimsum" | "pfsum" => xs.iter().sum(),
        "min" | "mimmin" => xs.iter().cloned().fold(f64::INFINITY, f64::min),
        "max" | "mimmax" => xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
        "avg" => mean,
        "count" => n,
        "dev" => (xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n).sqrt(),
        _ => {
            let mut s = xs.to_vec();
            s.sort_by(f64::total_cmp);
            s[s.len() / 2]
        }
    }
}

fn agg_i(agg: &str, xs: &[i64]) -> i64 {
    let n = xs.len() as i64;
    match agg {
        "sum" | "zimsum" | "pfsum" => xs.iter().sum(),
        "min" | "mimmin" => *xs.iter().min().unwrap(),
        "max" | "mimmax" => *xs.iter().max().unwrap(),
        "avg" => xs.iter().sum::<i64>() / n,
        "count" => n,
        "dev" => {
            let f: Vec<f64> = xs.iter().map(|&x| x as f64).collect();
            agg_f("dev", &f) as i64
        }
        _ => {
            let mut s = xs.to_vec();
            s.sort();
            s[s.len() / 2]
        }
    }
}

fn close(a: &serde_json::Value, b: Value, agg: &str) -> bool {
    match b {
        Value::Int(i) => {
            let Some(x) = a.as_i64() else { return false };
            // dev truncates a square root: allow the rounding of two methods.
            x == i || (agg == "dev" && (x - i).abs() <= 1)
        }
        Value::Float(f) => {
            let Some(x) = a.as_f64().filter(|_| a.is_f64()) else {
                return false;
            };
            (x - f).abs() <= 1e-9 * f.abs().max(1.0)
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_reference(c in case()) {
        let db = Db::new();
        for (i, s) in c.series.iter().enumerate() {
            let host = format!("h{i}");
            let dc = format!("d{}", i % 2);
            db.put("m", &[("host", &host), ("dc", &dc)], s);
        }
        let mut parts = vec![c.agg.to_string()];
        if c.rate {
            parts.push("rate".into());
        }
        if let Some((iv, f)) = c.downsample {
            parts.push(format!("{}s-{f}", iv));
        }
        let filter = match c.filter {
            1 => "{host=h0}",
            2 => "{dc=*}",
            _ => "",
        };
        parts.push(format!("m{filter}"));
        let qs = format!("start={T}&end={}&m={}", T + 3600, parts.join(":"));
        let got = db.get_value(&qs);
        // Reference groups.
        let transformed: Vec<Vec<(i64, Value)>> = c.series.iter().map(|s| transform(&c, s)).collect();
        let groups: Vec<Vec<Vec<(i64, Value)>>> = match c.filter {
            1 => vec![vec![transformed[0].clone()]],
            2 => (0..2)
                .map(|d| transformed.iter().enumerate().filter(|(i, _)| i % 2 == d).map(|(_, s)| s.clone()).collect::<Vec<_>>())
                .filter(|g| !g.is_empty())
                .collect(),
            _ => vec![transformed],
        };
        let arr = got.as_array().unwrap();
        prop_assert_eq!(arr.len(), groups.len(), "{} -> {}", qs, got);
        for (g, r) in groups.iter().zip(arr) {
            let want: Vec<(i64, Value)> = merge(&c, g)
                .into_iter()
                .filter(|p| p.0 >= (T * 1000) as i64 && p.0 <= ((T + 3600) * 1000) as i64)
                .collect();
            let dps = r["dps"].as_object().unwrap();
            prop_assert_eq!(dps.len(), want.len(), "{} -> {}", qs, r);
            for (t, v) in &want {
                let key = (t / 1000).to_string();
                prop_assert!(close(&dps[&key], *v, c.agg), "{} at {}: got {} want {:?}", qs, key, dps[&key], v);
            }
        }
    }
}
