//! PromQL answers compared with a real Prometheus 2.42: the same samples
//! are pushed by remote write 1.0 to a Prometheus started here and to an
//! rtsdb TSD (embedded store and cluster), then every query of
//! `tests/promql/cases.promql` is asked of both, as instant queries at a
//! few times and as range queries, and the answers must agree: status and
//! `errorType`, result type, label sets, timestamps, and values within
//! 1e-9 relative (NaN equal to NaN, infinities exact). Every failing case
//! is reported, with a readable diff, before the test fails.
//!
//! The case file's format is in its header. The data set is built here
//! from the test's start time (Prometheus 2.42 refuses samples far older
//! than its newest), so `${base}` in a case stands for the data's first
//! timestamp in seconds and `${base+N}` for N seconds after it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::common::{Backend, Tsds, on_both_backends};
use super::prom_common::{
    self as pc, PROMETHEUS, Prometheus, PushSeries, STALE_NAN_BITS, TSD_SETTINGS,
    push_in_time_order,
};

/// The case file, relative to the crate root.
const CASE_FILE: &str = "tests/promql/cases.promql";

/// Spacing of the data set's samples.
const STEP_MS: i64 = 15_000;
/// Samples per regular series: 0..=LAST_INDEX, 50 minutes of data.
const LAST_INDEX: i64 = 200;

// ---------------------------------------------------------------------------
// The data set
// ---------------------------------------------------------------------------

/// Labels from pairs; `name` is `__name__`.
fn labels(name: &str, pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut l = vec![("__name__".to_string(), name.to_string())];
    l.extend(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    l
}

fn series(name: &str, pairs: &[(&str, &str)], samples: Vec<(i64, f64)>) -> PushSeries {
    PushSeries {
        labels: labels(name, pairs),
        samples,
    }
}

/// Every series the cases query, its timestamps from `base` (ms) on.
/// Values are deterministic functions of the sample's index, so a failing
/// case reproduces.
fn dataset(base: i64) -> Vec<PushSeries> {
    let ts = |i: i64| base + i * STEP_MS;
    let regular = |f: &dyn Fn(i64) -> f64| -> Vec<(i64, f64)> {
        (0..=LAST_INDEX).map(|i| (ts(i), f(i))).collect()
    };
    let stale = f64::from_bits(STALE_NAN_BITS);
    let mut out = Vec::new();

    // Counters, with resets in some series.
    let mut seed = 0i64;
    for job in ["api", "db"] {
        for instance in ["a:9090", "b:9090"] {
            for method in ["get", "post"] {
                seed += 1;
                let s = seed;
                let mut value = 0.0;
                let mut samples = Vec::new();
                for i in 0..=LAST_INDEX {
                    let inc = ((i * 7 + s * 3) % 11) as f64 + s as f64 * 0.5;
                    let reset = (s % 3 == 0 && i == 80) || (s % 3 == 1 && i == 150);
                    value = if reset { inc } else { value + inc };
                    samples.push((ts(i), value));
                }
                out.push(series(
                    "http_requests_total",
                    &[
                        ("job", job),
                        ("instance", instance),
                        ("method", method),
                        ("code", "200"),
                    ],
                    samples,
                ));
            }
        }
    }
    out.push(series(
        "http_requests_total",
        &[
            ("job", "api"),
            ("instance", "a:9090"),
            ("method", "get"),
            ("code", "500"),
        ],
        regular(&|i| (i / 20) as f64),
    ));
    // A counter that moves rarely (changes, resets, idelta).
    out.push(series(
        "errors_total",
        &[("job", "api")],
        regular(&|i| match i {
            0..=49 => 0.0,
            50..=119 => 3.0,
            120..=159 => 1.0,
            _ => 2.0 + (i - 160) as f64,
        }),
    ));

    // Gauges: decimals, negatives, integers.
    for (h, (host, dc)) in [
        ("h1", "east"),
        ("h2", "east"),
        ("h3", "west"),
        ("h4", "west"),
    ]
    .into_iter()
    .enumerate()
    {
        let h = h as f64;
        out.push(series(
            "node_temp_celsius",
            &[("host", host), ("dc", dc)],
            regular(&|i| 20.5 * ((i as f64) / 9.0 + h).sin() - 3.25),
        ));
        out.push(series(
            "queue_depth",
            &[("host", host)],
            regular(&|i| ((i * 13 + (h as i64) * 5) % 21) as f64 - 10.0),
        ));
    }

    // Classic histograms: cumulative buckets with +Inf, _sum, _count.
    for (j, job) in ["api", "db"].into_iter().enumerate() {
        let scale = (j + 1) as f64;
        let bounds = ["0.05", "0.1", "0.5", "1", "+Inf"];
        let per_step = |i: i64| -> [f64; 5] {
            let c0 = (i % 3) as f64 * scale;
            let c1 = c0 + (i % 4) as f64;
            let c2 = c1 + 2.0;
            let c3 = c2 + (i % 2) as f64 * scale;
            [c0, c1, c2, c3, c3 + 1.0]
        };
        let cumulative = |b: usize, i: i64| -> f64 { (0..=i).map(|k| per_step(k)[b]).sum() };
        for (b, le) in bounds.into_iter().enumerate() {
            out.push(series(
                "http_request_duration_seconds_bucket",
                &[("job", job), ("le", le)],
                regular(&|i| cumulative(b, i)),
            ));
        }
        out.push(series(
            "http_request_duration_seconds_sum",
            &[("job", job)],
            regular(&|i| {
                (0..=i)
                    .map(|k| 0.07 * per_step(k)[4] + 0.01 * k as f64)
                    .sum()
            }),
        ));
        out.push(series(
            "http_request_duration_seconds_count",
            &[("job", job)],
            regular(&|i| cumulative(4, i)),
        ));
    }
    // A histogram without its +Inf bucket: histogram_quantile gives NaN.
    for (le, per) in [("0.1", 1.0), ("1", 3.0)] {
        out.push(series(
            "rpc_latency_seconds_bucket",
            &[("le", le)],
            regular(&|i| per * i as f64),
        ));
    }

    // Staleness: a marker in the middle, then the series comes back; one
    // that ends with a marker; a gap longer than the lookback without a
    // marker; one that just stops.
    let mut flappy: Vec<(i64, f64)> = (0..60).map(|i| (ts(i), i as f64 * 1.5)).collect();
    flappy.push((ts(60), stale));
    flappy.extend((90..=LAST_INDEX).map(|i| (ts(i), 100.0 - i as f64)));
    out.push(series("flappy_gauge", &[("host", "s1")], flappy));
    let mut ends: Vec<(i64, f64)> = (0..=120).map(|i| (ts(i), (i % 7) as f64)).collect();
    ends.push((ts(121), stale));
    out.push(series("flappy_gauge", &[("host", "s2")], ends));
    out.push(series(
        "gappy_gauge",
        &[("host", "g1")],
        (0..=40)
            .chain(70..=LAST_INDEX)
            .map(|i| (ts(i), (i * 3 % 17) as f64))
            .collect(),
    ));
    out.push(series(
        "ended_gauge",
        &[("host", "e1")],
        (0..=150).map(|i| (ts(i), i as f64 / 4.0)).collect(),
    ));

    // Many labels, as Kubernetes series carry.
    for pod in ["web-7d9f-abcde", "web-7d9f-fghij"] {
        out.push(series(
            "container_cpu_usage_seconds_total",
            &[
                ("namespace", "prod"),
                ("pod", pod),
                ("container", "web"),
                ("node", "node-1.example.internal"),
                ("cluster", "eu-1"),
                ("region", "eu-west"),
                ("zone", "eu-west-1b"),
                ("image", "registry.example/web:1.2.3"),
                ("app", "web"),
                ("team", "storefront"),
                ("tier", "frontend"),
                ("version", "1.2.3"),
                ("env", "production"),
                ("shard", "07"),
            ],
            regular(&|i| i as f64 * 0.37 + pod.len() as f64),
        ));
    }

    // UTF-8 and punctuation in label values.
    for (city, v) in [("Zürich", 1.0), ("東京", 2.0)] {
        out.push(series(
            "utf8_metric",
            &[
                ("city", city),
                ("note", "a b \"q\" :/=+Inf \\ end"),
                ("sym", "🙂 ∑ ✓"),
                ("path", "/var/log"),
            ],
            regular(&|i| v * i as f64),
        ));
    }

    // A recording rule's name, with colons.
    for (job, k) in [("api", 1.0), ("db", 2.5)] {
        out.push(series(
            "job:x:rate5m",
            &[("job", job)],
            regular(&|i| k * ((i % 13) as f64 + 0.5)),
        ));
    }

    // Binary-operator matching: shared labels, one side with an extra series.
    for (host, mount, used, size) in [
        ("h1", "/", 40.0, 100.0),
        ("h1", "/data", 700.0, 1000.0),
        ("h2", "/", 55.5, 100.0),
        ("h2", "/data", 10.0, 2000.0),
    ] {
        out.push(series(
            "disk_used_bytes",
            &[("host", host), ("mount", mount)],
            regular(&|i| used * 1e6 + i as f64 * 1000.0),
        ));
        out.push(series(
            "disk_size_bytes",
            &[("host", host), ("mount", mount)],
            regular(&|_| size * 1e6),
        ));
    }
    out.push(series(
        "disk_size_bytes",
        &[("host", "h3"), ("mount", "/")],
        regular(&|_| 5e8),
    ));
    for (host, region, team, cpus) in [
        ("h1", "eu", "core", 4.0),
        ("h2", "eu", "edge", 8.0),
        ("h3", "us", "core", 16.0),
    ] {
        out.push(series(
            "host_info",
            &[("host", host), ("region", region), ("team", team)],
            regular(&|_| 1.0),
        ));
        out.push(series("cpu_count", &[("host", host)], regular(&|_| cpus)));
    }

    // Set operators: two metrics that overlap in part.
    for (job, instance, v) in [("api", "a", 1.0), ("api", "b", 0.0), ("db", "a", 1.0)] {
        out.push(series(
            "up",
            &[("job", job), ("instance", instance)],
            regular(&|_| v),
        ));
    }
    for (job, instance, v) in [("api", "a", 1.0), ("db", "b", 0.0)] {
        out.push(series(
            "probe_success",
            &[("job", job), ("instance", instance)],
            regular(&|_| v),
        ));
    }

    // count_values, topk, bottomk, quantile.
    for (host, v) in [("h1", 1.0), ("h2", 2.0), ("h3", 2.0), ("h4", 3.5)] {
        out.push(series("version_info", &[("host", host)], regular(&|_| v)));
    }
    for p in 1..=6i64 {
        let player = format!("p{p}");
        out.push(series(
            "score",
            &[
                ("player", &player),
                ("team", if p % 2 == 0 { "red" } else { "blue" }),
            ],
            regular(&|i| ((p * 17 + i * 3) % 50) as f64 + p as f64 * 0.01),
        ));
    }

    // A name alone; an empty label value (dropped at ingest).
    out.push(series("lonely_metric", &[], regular(&|i| i as f64 * 0.25)));
    out.push(series(
        "empty_label_metric",
        &[("a", "1"), ("note", "")],
        regular(&|i| i as f64),
    ));

    // Ordinary NaN and infinities as values.
    for (kind, special) in [
        ("nan", f64::NAN),
        ("inf", f64::INFINITY),
        ("neginf", f64::NEG_INFINITY),
    ] {
        out.push(series(
            "weird_values",
            &[("kind", kind)],
            regular(&|i| if i % 10 == 5 { special } else { i as f64 }),
        ));
    }

    // Millisecond timestamps off the 15 s grid.
    out.push(series(
        "jitter_gauge",
        &[("host", "j1")],
        (0..=LAST_INDEX)
            .map(|i| (ts(i) + (i * 37) % 1000, (i * i) as f64 / 10.0))
            .collect(),
    ));

    // Halves for round(), constant.
    for (case, v) in [
        ("a", 2.5),
        ("b", -1.5),
        ("c", 0.5),
        ("d", -0.5),
        ("e", 1.499_999),
        ("f", -2.5),
    ] {
        out.push(series("round_me", &[("case", case)], regular(&|_| v)));
    }
    out
}

// ---------------------------------------------------------------------------
// The case file
// ---------------------------------------------------------------------------

/// One query of the case file.
#[derive(Debug, Clone)]
struct Case {
    /// 1-based line in the case file.
    line: usize,
    /// As written, before `${base}` is filled in.
    query: String,
    flags: CaseFlags,
}

#[derive(Debug, Clone, Copy, Default)]
struct CaseFlags {
    /// Instant answers must list series in the same order (`sort`,
    /// `sort_desc`, one group of `topk`/`bottomk`): compared as the
    /// sequence of values, since 2.42 leaves ties in any order.
    ordered: bool,
    /// Asked as instant queries only.
    instant_only: bool,
    /// Prometheus answers nothing at every probe, on purpose (`absent` of a
    /// series that exists, a filter that keeps nothing): without the flag
    /// such a case fails, as it most likely names a series that does not
    /// exist.
    empty: bool,
}

/// Reads the case file: one query a line, `#` comments, blank lines, and
/// `[flag,flag]` in front of a query for its flags.
fn parse_cases(text: &str) -> Result<Vec<Case>, String> {
    let mut cases = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut flags = CaseFlags::default();
        let mut query = line;
        if let Some(rest) = line.strip_prefix('[') {
            let (list, q) = rest
                .split_once(']')
                .ok_or_else(|| format!("{CASE_FILE}:{}: `[` without `]`", n + 1))?;
            for flag in list.split(',').map(str::trim) {
                match flag {
                    "ordered" => flags.ordered = true,
                    "instant-only" => flags.instant_only = true,
                    "empty" => flags.empty = true,
                    other => {
                        return Err(format!("{CASE_FILE}:{}: unknown flag {other:?}", n + 1));
                    }
                }
            }
            query = q.trim();
        }
        if query.is_empty() {
            return Err(format!("{CASE_FILE}:{}: flags without a query", n + 1));
        }
        cases.push(Case {
            line: n + 1,
            query: query.to_string(),
            flags,
        });
    }
    Ok(cases)
}

fn read_cases() -> Vec<Case> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(CASE_FILE);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    parse_cases(&text).unwrap_or_else(|e| panic!("{e}"))
}

/// `${base}` and `${base+N}` replaced by seconds since the epoch.
fn fill_times(query: &str, base_s: i64) -> String {
    let re = regex::Regex::new(r"\$\{base(?:\+(\d+))?\}").expect("a valid regex");
    re.replace_all(query, |c: &regex::Captures| {
        let add: i64 = c.get(1).map_or(0, |m| m.as_str().parse().unwrap_or(0));
        (base_s + add).to_string()
    })
    .into_owned()
}

// ---------------------------------------------------------------------------
// Answers, as both servers give them
// ---------------------------------------------------------------------------

pub(super) type LabelSet = BTreeMap<String, String>;

#[derive(Debug, Clone, Copy)]
pub(super) struct Point {
    pub(super) t_ms: i64,
    pub(super) v: f64,
}

/// One answer of the query API, reduced to what is compared.
#[derive(Debug)]
pub(super) enum Answer {
    Error {
        http: u16,
        kind: String,
        message: String,
    },
    Scalar(Point),
    Str(i64, String),
    Vector(Vec<(LabelSet, Point)>),
    Matrix(Vec<(LabelSet, Vec<Point>)>),
    /// Not in Prometheus' shape at all: what was wrong with it.
    Unreadable(String),
}

impl Answer {
    fn kind_name(&self) -> &'static str {
        match self {
            Answer::Error { .. } => "error",
            Answer::Scalar(_) => "scalar",
            Answer::Str(..) => "string",
            Answer::Vector(_) => "vector",
            Answer::Matrix(_) => "matrix",
            Answer::Unreadable(_) => "unreadable",
        }
    }

    /// Whether the answer holds no sample (an empty vector or matrix).
    pub(super) fn is_empty(&self) -> bool {
        match self {
            Answer::Vector(v) => v.is_empty(),
            Answer::Matrix(m) => m.is_empty(),
            _ => false,
        }
    }

    pub(super) fn from_http(http: u16, body: &str) -> Answer {
        let json: serde_json::Value = match serde_json::from_str(body) {
            Ok(j) => j,
            Err(e) => {
                return Answer::Unreadable(format!("HTTP {http}, not JSON ({e}): {body:.300}"));
            }
        };
        match Self::from_json(http, &json) {
            Ok(a) => a,
            Err(why) => Answer::Unreadable(format!("HTTP {http}, {why}: {body:.300}")),
        }
    }

    fn from_json(http: u16, json: &serde_json::Value) -> Result<Answer, String> {
        let status = json["status"].as_str().ok_or("no status")?;
        if status == "error" {
            return Ok(Answer::Error {
                http,
                kind: json["errorType"]
                    .as_str()
                    .ok_or("no errorType")?
                    .to_string(),
                message: json["error"].as_str().unwrap_or_default().to_string(),
            });
        }
        if status != "success" {
            return Err(format!("status {status:?}"));
        }
        if http != 200 {
            return Err("success with a status other than 200".into());
        }
        let data = &json["data"];
        let result = &data["result"];
        match data["resultType"].as_str().ok_or("no resultType")? {
            "scalar" => Ok(Answer::Scalar(point(result)?)),
            "string" => {
                let t = time_ms(&result[0])?;
                let s = result[1].as_str().ok_or("string value not a string")?;
                Ok(Answer::Str(t, s.to_string()))
            }
            "vector" => {
                let items = result.as_array().ok_or("vector result not an array")?;
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    out.push((label_set(&item["metric"])?, point(&item["value"])?));
                }
                Ok(Answer::Vector(out))
            }
            "matrix" => {
                let items = result.as_array().ok_or("matrix result not an array")?;
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    let values = item["values"].as_array().ok_or("no values")?;
                    let points = values.iter().map(point).collect::<Result<Vec<_>, _>>()?;
                    out.push((label_set(&item["metric"])?, points));
                }
                Ok(Answer::Matrix(out))
            }
            other => Err(format!("resultType {other:?}")),
        }
    }
}

fn label_set(v: &serde_json::Value) -> Result<LabelSet, String> {
    let obj = v.as_object().ok_or("metric not an object")?;
    obj.iter()
        .map(|(k, v)| {
            v.as_str()
                .map(|s| (k.clone(), s.to_string()))
                .ok_or_else(|| format!("label {k} not a string"))
        })
        .collect()
}

/// `[seconds, "value"]`.
fn point(v: &serde_json::Value) -> Result<Point, String> {
    let t_ms = time_ms(&v[0])?;
    let text = v[1].as_str().ok_or("sample value not a string")?;
    Ok(Point {
        t_ms,
        v: parse_value(text)?,
    })
}

fn time_ms(v: &serde_json::Value) -> Result<i64, String> {
    let s = v.as_f64().ok_or("timestamp not a number")?;
    Ok((s * 1000.0).round() as i64)
}

/// A sample value as the API spells it.
fn parse_value(text: &str) -> Result<f64, String> {
    match text {
        "NaN" => Ok(f64::NAN),
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        _ => text
            .parse::<f64>()
            .map_err(|_| format!("sample value {text:?}")),
    }
}

/// Equal as the comparison wants: NaN equals NaN, infinities exactly,
/// others within 1e-9 relative (with a floor of 1e-12 absolute, so that
/// a sum that should be 0 and comes out as 1e-17 is still 0).
fn same_value(a: f64, b: f64) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    if a.is_infinite() || b.is_infinite() {
        return a == b;
    }
    let diff = (a - b).abs();
    diff <= 1e-12 || diff <= 1e-9 * a.abs().max(b.abs())
}

pub(super) fn show_labels(l: &LabelSet) -> String {
    let name = l.get("__name__").map(String::as_str).unwrap_or("");
    let rest: Vec<String> = l
        .iter()
        .filter(|(k, _)| *k != "__name__")
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect();
    format!("{name}{{{}}}", rest.join(", "))
}

fn show_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

/// At most this many lines of diff per probe.
const MAX_DIFF_LINES: usize = 12;

/// What differs between Prometheus' answer and rtsdb's; empty when they
/// agree.
pub(super) fn diff_answers(prom: &Answer, ours: &Answer, ordered: bool) -> Vec<String> {
    let mut d = Vec::new();
    match (prom, ours) {
        (_, Answer::Unreadable(why)) => d.push(format!("rtsdb's answer is unreadable: {why}")),
        (Answer::Unreadable(why), _) => d.push(format!("Prometheus' answer is unreadable: {why}")),
        (
            Answer::Error {
                http: ph,
                kind: pk,
                message: pm,
            },
            Answer::Error {
                http: oh, kind: ok, ..
            },
        ) => {
            if ph != oh || pk != ok {
                d.push(format!(
                    "error: Prometheus {ph} {pk} ({pm}), rtsdb {oh} {ok}"
                ));
            }
        }
        (
            Answer::Error {
                http,
                kind,
                message,
            },
            other,
        ) => d.push(format!(
            "Prometheus: {http} {kind} ({message}); rtsdb answered a {}",
            other.kind_name()
        )),
        (
            other,
            Answer::Error {
                http,
                kind,
                message,
            },
        ) => d.push(format!(
            "Prometheus answered a {}; rtsdb: {http} {kind} ({message})",
            other.kind_name()
        )),
        (Answer::Scalar(p), Answer::Scalar(o)) => diff_point("scalar", p, o, &mut d),
        (Answer::Str(pt, ps), Answer::Str(ot, os)) => {
            if pt != ot || ps != os {
                d.push(format!(
                    "string: Prometheus {ps:?} at {pt}, rtsdb {os:?} at {ot}"
                ));
            }
        }
        (Answer::Vector(p), Answer::Vector(o)) => diff_vectors(p, o, ordered, &mut d),
        (Answer::Matrix(p), Answer::Matrix(o)) => diff_matrices(p, o, &mut d),
        (p, o) => d.push(format!(
            "result type: Prometheus {}, rtsdb {}",
            p.kind_name(),
            o.kind_name()
        )),
    }
    if d.len() > MAX_DIFF_LINES {
        let more = d.len() - MAX_DIFF_LINES;
        d.truncate(MAX_DIFF_LINES);
        d.push(format!("... and {more} more differences"));
    }
    d
}

fn diff_point(what: &str, p: &Point, o: &Point, d: &mut Vec<String>) {
    if p.t_ms != o.t_ms {
        d.push(format!(
            "{what}: timestamp Prometheus {}, rtsdb {}",
            p.t_ms, o.t_ms
        ));
    } else if !same_value(p.v, o.v) {
        d.push(format!(
            "{what} at {}: Prometheus {}, rtsdb {}",
            p.t_ms,
            show_value(p.v),
            show_value(o.v)
        ));
    }
}

/// Pairs up two lists keyed by label set (both sorted by it), calling
/// `both` for matched entries and reporting the unmatched.
fn pair_by_labels<'a, T>(
    p: &'a [(LabelSet, T)],
    o: &'a [(LabelSet, T)],
    d: &mut Vec<String>,
    mut both: impl FnMut(&LabelSet, &'a T, &'a T, &mut Vec<String>),
) {
    let mut p: Vec<&(LabelSet, T)> = p.iter().collect();
    let mut o: Vec<&(LabelSet, T)> = o.iter().collect();
    p.sort_by(|a, b| a.0.cmp(&b.0));
    o.sort_by(|a, b| a.0.cmp(&b.0));
    let (mut i, mut j) = (0, 0);
    while i < p.len() || j < o.len() {
        let ord = match (p.get(i), o.get(j)) {
            (Some(a), Some(b)) => a.0.cmp(&b.0),
            (Some(_), None) => std::cmp::Ordering::Less,
            _ => std::cmp::Ordering::Greater,
        };
        match ord {
            std::cmp::Ordering::Less => {
                d.push(format!("only in Prometheus: {}", show_labels(&p[i].0)));
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                d.push(format!("only in rtsdb: {}", show_labels(&o[j].0)));
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                both(&p[i].0, &p[i].1, &o[j].1, d);
                i += 1;
                j += 1;
            }
        }
    }
}

fn diff_vectors(
    p: &[(LabelSet, Point)],
    o: &[(LabelSet, Point)],
    ordered: bool,
    d: &mut Vec<String>,
) {
    pair_by_labels(p, o, d, |l, a, b, d| diff_point(&show_labels(l), a, b, d));
    if ordered && d.is_empty() {
        let pv: Vec<f64> = p.iter().map(|x| x.1.v).collect();
        let ov: Vec<f64> = o.iter().map(|x| x.1.v).collect();
        if pv.len() != ov.len() || pv.iter().zip(&ov).any(|(a, b)| !same_value(*a, *b)) {
            let show = |v: &[f64]| {
                v.iter()
                    .map(|x| show_value(*x))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            d.push(format!(
                "order: Prometheus [{}], rtsdb [{}]",
                show(&pv),
                show(&ov)
            ));
        }
    }
}

fn diff_matrices(p: &[(LabelSet, Vec<Point>)], o: &[(LabelSet, Vec<Point>)], d: &mut Vec<String>) {
    pair_by_labels(p, o, d, |l, a, b, d| {
        let name = show_labels(l);
        let pt: Vec<i64> = a.iter().map(|x| x.t_ms).collect();
        let ot: Vec<i64> = b.iter().map(|x| x.t_ms).collect();
        if pt != ot {
            let only_p: Vec<i64> = pt.iter().filter(|t| !ot.contains(t)).copied().collect();
            let only_o: Vec<i64> = ot.iter().filter(|t| !pt.contains(t)).copied().collect();
            d.push(format!(
                "{name}: timestamps differ ({} vs {} points); only in Prometheus {:?}, only in rtsdb {:?}",
                pt.len(),
                ot.len(),
                &only_p[..only_p.len().min(5)],
                &only_o[..only_o.len().min(5)]
            ));
            return;
        }
        for (x, y) in a.iter().zip(b) {
            if !same_value(x.v, y.v) {
                d.push(format!(
                    "{name} at {}: Prometheus {}, rtsdb {}",
                    x.t_ms,
                    show_value(x.v),
                    show_value(y.v)
                ));
            }
        }
    });
}

// ---------------------------------------------------------------------------
// Probes: the times each case is asked at
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Probe {
    Instant {
        t_ms: i64,
    },
    Range {
        start_ms: i64,
        end_ms: i64,
        step_ms: i64,
    },
}

impl Probe {
    fn path(&self) -> &'static str {
        match self {
            Probe::Instant { .. } => "query",
            Probe::Range { .. } => "query_range",
        }
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        let s = |ms: i64| format!("{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000));
        match *self {
            // vmalert adds a `step` (a Go duration) to its instant
            // queries; Prometheus ignores it, and so must rtsdb.
            Probe::Instant { t_ms } if t_ms % 60_000 == 0 => {
                vec![("time", s(t_ms)), ("step", "5m0s".into())]
            }
            Probe::Instant { t_ms } => vec![("time", s(t_ms))],
            Probe::Range {
                start_ms,
                end_ms,
                step_ms,
            } => vec![
                ("start", s(start_ms)),
                ("end", s(end_ms)),
                ("step", s(step_ms)),
            ],
        }
    }

    fn describe(&self, base: i64) -> String {
        let rel = |ms: i64| format!("base+{}s", (ms - base) as f64 / 1000.0);
        match *self {
            Probe::Instant { t_ms } => format!("instant at {}", rel(t_ms)),
            Probe::Range {
                start_ms,
                end_ms,
                step_ms,
            } => format!(
                "range {}..{} step {}s",
                rel(start_ms),
                rel(end_ms),
                step_ms as f64 / 1000.0
            ),
        }
    }
}

/// The instants: off the grid early on, mid-data, the last sample, past
/// the end within the lookback; and two ranges: the whole data on a
/// minute grid, and a middle part on an odd step off the grid.
fn probes(base: i64) -> Vec<Probe> {
    let m = 60_000;
    vec![
        Probe::Instant {
            t_ms: base + 10 * m + 7_250,
        },
        Probe::Instant {
            t_ms: base + 30 * m,
        },
        Probe::Instant {
            t_ms: base + 50 * m,
        },
        Probe::Instant {
            t_ms: base + 53 * m + 30_000,
        },
        Probe::Range {
            start_ms: base,
            end_ms: base + 54 * m,
            step_ms: m,
        },
        Probe::Range {
            start_ms: base + 20 * m + 3_000,
            end_ms: base + 40 * m + 3_000,
            step_ms: 17_000,
        },
    ]
}

// ---------------------------------------------------------------------------
// The shared Prometheus
// ---------------------------------------------------------------------------

/// One Prometheus holding the data set, shared by the tests of this
/// binary that run at the same time; stopped when the last lets go.
struct Reference {
    prometheus: Prometheus,
    /// The data's first timestamp (ms), on a whole minute.
    base: i64,
    data: Vec<PushSeries>,
}

static REFERENCE: Mutex<Weak<Reference>> = Mutex::new(Weak::new());

/// The shared reference, started and loaded on first use; `None` (after
/// saying so) where Prometheus is not installed outside CI.
fn reference(test: &str) -> Option<Arc<Reference>> {
    let bin = pc::binary(PROMETHEUS, test)?;
    let mut slot = REFERENCE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(r) = slot.upgrade() {
        return Some(r);
    }
    let prometheus = Prometheus::start(&bin, |_| "global:\n  scrape_interval: 1m\n".to_string());
    // The answers are judged by 2.42's: another version is another judge.
    let agent = pc::agent(Duration::from_secs(60));
    let (_, info) = pc::get_json(
        &agent,
        &format!("{}/api/v1/status/buildinfo", prometheus.url()),
        &[],
    );
    let version = info["data"]["version"].as_str().unwrap_or_default();
    assert!(
        version.starts_with("2.42."),
        "{PROMETHEUS} is version {version:?}, the tests compare with 2.42"
    );
    // 55 minutes back on a whole minute: the data ends 5 minutes before
    // now, so that every probe lies in the past.
    let base = (pc::now_ms() / 60_000) * 60_000 - 55 * 60_000;
    let data = dataset(base);
    push_in_time_order(
        &agent,
        &format!("{}/api/v1/write", prometheus.url()),
        &data,
        10 * 60_000,
    );
    let r = Arc::new(Reference {
        prometheus,
        base,
        data,
    });
    *slot = Arc::downgrade(&r);
    Some(r)
}

/// Asks one probe of `api` (`.../api/v1`): instant queries as GET with
/// a query string, range queries as a POSTed form (Grafana's default), so
/// that both ways are compared.
fn ask(agent: &ureq::Agent, api: &str, query: &str, probe: &Probe) -> Answer {
    let mut params: Vec<(&str, String)> = vec![("query", query.to_string())];
    params.extend(probe.params());
    let borrowed: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let url = format!("{api}/{}", probe.path());
    let (status, body) = match probe {
        Probe::Instant { .. } => pc::get(agent, &url, &borrowed),
        Probe::Range { .. } => pc::post_form(agent, &url, &borrowed),
    };
    Answer::from_http(status, &body)
}

/// A case that disagrees, or misbehaves, with everything said about it.
struct Failure {
    case: Case,
    lines: Vec<String>,
}

/// Runs every case against Prometheus and `ours` (`.../api/v1`); the
/// failures, and how many cases were run.
fn run_cases(reference: &Reference, ours: &str, cases: &[Case]) -> Vec<Failure> {
    let prom_api = format!("{}/api/v1", reference.prometheus.url());
    let base_s = reference.base / 1000;
    let all_probes = probes(reference.base);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    // Two at a time: the machine has two cores and rtsdb's answers take
    // longer than Prometheus'.
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                let agent = pc::agent(Duration::from_secs(120));
                loop {
                    let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(case) = cases.get(k) else { break };
                    let query = fill_times(&case.query, base_s);
                    let mut lines = Vec::new();
                    let mut all_empty = true;
                    for probe in &all_probes {
                        if case.flags.instant_only && matches!(probe, Probe::Range { .. }) {
                            continue;
                        }
                        let p = ask(&agent, &prom_api, &query, probe);
                        let o = ask(&agent, ours, &query, probe);
                        all_empty &= p.is_empty();
                        let d = diff_answers(&p, &o, case.flags.ordered);
                        if !d.is_empty() {
                            lines.push(format!("{}:", probe.describe(reference.base)));
                            lines.extend(d.into_iter().map(|l| format!("  {l}")));
                        }
                    }
                    if all_empty && !case.flags.empty {
                        lines.push(
                            "Prometheus answers nothing at every probe: a typo? (flag [empty] if meant)"
                                .into(),
                        );
                    }
                    if !all_empty && case.flags.empty {
                        lines.push("flagged [empty] but Prometheus answers something".into());
                    }
                    if !lines.is_empty() {
                        failures.lock().unwrap_or_else(|e| e.into_inner()).push(Failure {
                            case: case.clone(),
                            lines,
                        });
                    }
                }
            });
        }
    });
    let mut f = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    f.sort_by_key(|x| x.case.line);
    f
}

fn report(failures: &[Failure], total: usize, backend: &str) -> String {
    let mut out = String::new();
    for f in failures {
        let _ = writeln!(out, "--- {CASE_FILE}:{}: {}", f.case.line, f.case.query);
        for l in &f.lines {
            let _ = writeln!(out, "  {l}");
        }
    }
    let _ = writeln!(
        out,
        "prom_diff ({backend}): {} of {total} cases agree with Prometheus 2.42, {} differ",
        total - failures.len(),
        failures.len()
    );
    out
}

// ---------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------

/// Every case of the file, against rtsdb on `backend`.
fn promql_cases(backend: Backend) {
    let test = format!("prom_diff::promql_cases ({backend:?})");
    let Some(reference) = reference(&test) else {
        return;
    };
    let Some(tsds) = Tsds::start(backend, TSD_SETTINGS) else {
        return;
    };
    let started = Instant::now();
    let agent = pc::agent(Duration::from_secs(120));
    // A refused request is reported with the cases' diffs, not alone: the
    // cases show what the refusal costs.
    let refused = pc::try_push_in_time_order(
        &agent,
        &format!("http://{}/api/v1/write", tsds.writer().addr),
        &reference.data,
        10 * 60_000,
    );
    let ours = format!("http://{}/prometheus/api/v1", tsds.reader().addr);
    let cases = read_cases();
    let failures = run_cases(&reference, &ours, &cases);
    let mut text = refused.join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    text.push_str(&report(&failures, cases.len(), &format!("{backend:?}")));
    eprintln!("{text}(in {:.1} s)", started.elapsed().as_secs_f64());
    assert!(
        failures.is_empty() && refused.is_empty(),
        "{} cases differ from Prometheus 2.42, {} remote-write requests refused: the diffs are above",
        failures.len(),
        refused.len()
    );
}

on_both_backends!(promql_cases);

/// The case file checked against Prometheus alone, asked twice: every
/// answer is in Prometheus' shape and the same the second time (a case
/// whose answer varies from one asking to the next cannot judge rtsdb),
/// and `[empty]` is on exactly the cases that answer nothing.
#[test]
fn case_file_on_prometheus_alone() {
    let Some(reference) = reference("prom_diff::case_file_on_prometheus_alone") else {
        return;
    };
    let itself = format!("{}/api/v1", reference.prometheus.url());
    let cases = read_cases();
    let failures = run_cases(&reference, &itself, &cases);
    let text = report(&failures, cases.len(), "Prometheus against itself");
    assert!(failures.is_empty(), "{text}");
}

/// The harness checked against Prometheus alone: what was pushed is what
/// Prometheus holds (sample counts per series, the stale marker ending a
/// series), so the encoder and the data set are sound before rtsdb's
/// answers are judged by them.
#[test]
fn reference_holds_the_data_set() {
    let Some(reference) = reference("prom_diff::reference_holds_the_data_set") else {
        return;
    };
    let agent = pc::agent(Duration::from_secs(60));
    let api = format!("{}/api/v1", reference.prometheus.url());
    let end = reference.base + 54 * 60_000;
    let at_end = Probe::Instant { t_ms: end };
    // Every sample of the data, raw: the stale marker is not among them.
    let answer = ask(&agent, &api, "{__name__=~\".+\"}[1h]", &at_end);
    let Answer::Matrix(got) = answer else {
        panic!("a raw range vector: {answer:?}")
    };
    let got: BTreeMap<LabelSet, Vec<Point>> = got.into_iter().collect();
    let stale = |v: f64| v.to_bits() == STALE_NAN_BITS;
    let mut rows = 0;
    for s in &reference.data {
        // Prometheus drops empty label values at ingest.
        let l: LabelSet = s
            .labels
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .cloned()
            .collect();
        let want: Vec<(i64, f64)> = s.samples.iter().copied().filter(|p| !stale(p.1)).collect();
        let have: Vec<(i64, f64)> = got
            .get(&l)
            .map(|ps| ps.iter().map(|p| (p.t_ms, p.v)).collect())
            .unwrap_or_default();
        assert_eq!(have.len(), want.len(), "{}: samples", show_labels(&l));
        for (h, w) in have.iter().zip(&want) {
            assert!(
                h.0 == w.0 && same_value(h.1, w.1),
                "{}: pushed {w:?}, Prometheus has {h:?}",
                show_labels(&l)
            );
        }
        rows += 1;
    }
    assert_eq!(got.len(), rows, "series in Prometheus");
    assert!(rows > 40, "the data set has {rows} label sets");
    // The stale marker ends flappy_gauge{host="s2"} for instant queries.
    let answer = ask(
        &agent,
        &api,
        "flappy_gauge{host=\"s2\"}",
        &Probe::Instant {
            t_ms: reference.base + 121 * STEP_MS + 1,
        },
    );
    assert!(answer.is_empty(), "after the marker: {answer:?}");
}

/// Prometheus 2.42's functions, aggregations, operators and modifiers
/// (promql/parser at v2.42.0): each must appear in the case file.
const FUNCTIONS_2_42: &[&str] = &[
    "abs",
    "absent",
    "absent_over_time",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "avg_over_time",
    "ceil",
    "changes",
    "clamp",
    "clamp_max",
    "clamp_min",
    "cos",
    "cosh",
    "count_over_time",
    "days_in_month",
    "day_of_month",
    "day_of_week",
    "day_of_year",
    "deg",
    "delta",
    "deriv",
    "exp",
    "floor",
    "histogram_count",
    "histogram_sum",
    "histogram_fraction",
    "histogram_quantile",
    "holt_winters",
    "hour",
    "idelta",
    "increase",
    "irate",
    "label_replace",
    "label_join",
    "last_over_time",
    "ln",
    "log10",
    "log2",
    "max_over_time",
    "min_over_time",
    "minute",
    "month",
    "pi",
    "predict_linear",
    "present_over_time",
    "quantile_over_time",
    "rad",
    "rate",
    "resets",
    "round",
    "scalar",
    "sgn",
    "sin",
    "sinh",
    "sort",
    "sort_desc",
    "sqrt",
    "stddev_over_time",
    "stdvar_over_time",
    "sum_over_time",
    "tan",
    "tanh",
    "time",
    "timestamp",
    "vector",
    "year",
];

const AGGREGATIONS_2_42: &[&str] = &[
    "sum",
    "avg",
    "count",
    "min",
    "max",
    "group",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "count_values",
    "quantile",
];

/// Binary operators, written with spaces around them as cases do.
const OPERATORS_2_42: &[&str] = &[
    " + ", " - ", " * ", " / ", " % ", " ^ ", " == ", " != ", " > ", " < ", " >= ", " <= ",
    " and ", " or ", " unless ", " atan2 ",
];

const MODIFIERS_2_42: &[&str] = &[
    " offset ",
    " @ ",
    "start()",
    "end()",
    " by ",
    " without ",
    " on(",
    " ignoring(",
    " group_left",
    " group_right",
    " bool ",
    ":]",
    "[5m:",
];

/// Names Prometheus 3.x added that 2.42 refuses: each has an error case.
const NAMES_AFTER_2_42: &[&str] = &[
    "double_exponential_smoothing",
    "sort_by_label",
    "sort_by_label_desc",
    "mad_over_time",
    "limitk",
    "limit_ratio",
    "info",
];

#[test]
fn case_file_covers_promql_2_42() {
    let cases = read_cases();
    let queries: Vec<&str> = cases.iter().map(|c| c.query.as_str()).collect();
    let called = regex::Regex::new(r"([a-z_][a-z0-9_]*)\s*\(").expect("a valid regex");
    let mut names: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
    for q in &queries {
        for c in called.captures_iter(q) {
            if let Some(m) = c.get(1) {
                names.insert(m.as_str());
            }
        }
    }
    // An aggregation with its grouping in front: `sum by (x) (...)`.
    let grouped = regex::Regex::new(r"([a-z_]+)\s+(?:by|without)\s*\(").expect("a valid regex");
    for q in &queries {
        for c in grouped.captures_iter(q) {
            if let Some(m) = c.get(1) {
                names.insert(m.as_str());
            }
        }
    }
    let mut missing: Vec<String> = Vec::new();
    for f in FUNCTIONS_2_42
        .iter()
        .chain(AGGREGATIONS_2_42)
        .chain(NAMES_AFTER_2_42)
    {
        if !names.contains(f) {
            missing.push(format!("{f}()"));
        }
    }
    for op in OPERATORS_2_42.iter().chain(MODIFIERS_2_42) {
        if !queries.iter().any(|q| q.contains(op)) {
            missing.push(format!("{:?}", op.trim()));
        }
    }
    assert!(
        missing.is_empty(),
        "{CASE_FILE} has no case for: {}",
        missing.join(", ")
    );
}

/// The comparison itself: what it lets pass and what it catches.
#[test]
fn comparison_rules() {
    assert!(same_value(f64::NAN, f64::NAN));
    assert!(!same_value(f64::NAN, 1.0));
    assert!(same_value(f64::INFINITY, f64::INFINITY));
    assert!(!same_value(f64::INFINITY, f64::NEG_INFINITY));
    assert!(!same_value(f64::INFINITY, 1e308));
    assert!(same_value(1e12, 1e12 + 1e-1));
    assert!(!same_value(1.0, 1.0 + 1e-8));
    assert!(same_value(0.0, 1e-17));

    let vector = |items: &[(&str, f64)]| {
        Answer::Vector(
            items
                .iter()
                .map(|(h, v)| {
                    let l: LabelSet = [("host".to_string(), h.to_string())].into();
                    (l, Point { t_ms: 1000, v: *v })
                })
                .collect(),
        )
    };
    let a = vector(&[("a", 1.0), ("b", 2.0)]);
    let b = vector(&[("b", 2.0), ("a", 1.0)]);
    assert!(diff_answers(&a, &b, false).is_empty());
    assert_eq!(
        diff_answers(&a, &b, true).len(),
        1,
        "order is checked when asked"
    );
    let c = vector(&[("a", 1.0), ("c", 2.0)]);
    let d = diff_answers(&a, &c, false);
    assert_eq!(
        d,
        vec![
            "only in Prometheus: {host=\"b\"}",
            "only in rtsdb: {host=\"c\"}"
        ]
    );

    let ok = Answer::from_http(
        200,
        r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"x"},"values":[[1.5,"NaN"],[2,"+Inf"]]}]}}"#,
    );
    let Answer::Matrix(m) = &ok else {
        panic!("{ok:?}")
    };
    assert_eq!(m[0].1[0].t_ms, 1500);
    assert!(m[0].1[0].v.is_nan() && m[0].1[1].v == f64::INFINITY);
    let err = Answer::from_http(
        400,
        r#"{"status":"error","errorType":"bad_data","error":"parse error"}"#,
    );
    let exec = Answer::from_http(
        422,
        r#"{"status":"error","errorType":"execution","error":"many-to-many"}"#,
    );
    assert!(diff_answers(&err, &err, false).is_empty());
    assert_eq!(diff_answers(&err, &exec, false).len(), 1);
    assert_eq!(diff_answers(&err, &ok, false).len(), 1);
    assert!(matches!(
        Answer::from_http(200, "<html>"),
        Answer::Unreadable(_)
    ));

    assert!(
        parse_cases("[ordered] sort(x)\n# c\n\nx")
            .is_ok_and(|c| c.len() == 2 && c[0].flags.ordered)
    );
    assert!(parse_cases("[bogus] x").is_err());
    assert_eq!(
        fill_times("x @ ${base} + y @ ${base+60}", 100),
        "x @ 100 + y @ 160"
    );
}
