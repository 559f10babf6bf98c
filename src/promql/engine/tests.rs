//! Evaluator tests over the in-memory storage; expected answers worked
//! out from Prometheus 2.42's rules.

use std::time::Duration;

use super::{Engine, EngineOptions};
use crate::promql::error::ErrorKind;
use crate::promql::memory::MemoryStorage;
use crate::promql::value::{Labels, QueryValue, Sample, Series, VectorSample, stale_nan};

const S: i64 = 1000;
const M: i64 = 60 * S;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    Labels::from_pairs(pairs.iter().copied())
}

/// `http_requests{job, instance}` counters rising by 10 (instance 0) and
/// 20 (instance 1) per minute from 0 to 10 minutes; `a` and `b` gauges
/// sharing `x="1"`.
fn store() -> MemoryStorage {
    let mut s = MemoryStorage::new();
    for (inst, rate) in [("0", 10.0), ("1", 20.0)] {
        let points: Vec<(i64, f64)> = (0..=10).map(|i| (i * M, i as f64 * rate)).collect();
        s.add_series(
            &[
                ("__name__", "http_requests"),
                ("job", "api"),
                ("instance", inst),
            ],
            &points,
        );
    }
    s.add_series(
        &[
            ("__name__", "http_requests"),
            ("job", "db"),
            ("instance", "0"),
        ],
        &[(0, 1.0), (5 * M, 2.0), (10 * M, 3.0)],
    );
    s.add_series(&[("__name__", "a"), ("x", "1")], &[(0, 1.0)]);
    s.add_series(&[("__name__", "b"), ("x", "1")], &[(0, 2.0)]);
    s
}

fn instant(s: &MemoryStorage, q: &str, t: i64) -> QueryValue {
    Engine::default()
        .instant(s, q, t)
        .unwrap_or_else(|e| panic!("{q}: {e}"))
}

fn vector(s: &MemoryStorage, q: &str, t: i64) -> Vec<VectorSample> {
    match instant(s, q, t) {
        QueryValue::Vector(v) => v,
        other => panic!("{q}: not a vector: {other:?}"),
    }
}

/// A vector as sorted `(labels, value)` pairs.
fn sorted(mut v: Vec<VectorSample>) -> Vec<(Labels, f64)> {
    v.sort_by(|a, b| a.labels.cmp(&b.labels));
    v.into_iter().map(|s| (s.labels, s.v)).collect()
}

fn err(s: &MemoryStorage, q: &str, t: i64) -> (ErrorKind, String) {
    let e = Engine::default().instant(s, q, t).unwrap_err();
    (e.kind, e.message)
}

#[test]
fn instant_selector_takes_latest_sample_within_lookback() {
    let s = store();
    let v = sorted(vector(&s, "http_requests{job=\"api\"}", 3 * M + 30 * S));
    assert_eq!(
        v,
        vec![
            (
                labels(&[
                    ("__name__", "http_requests"),
                    ("instance", "0"),
                    ("job", "api")
                ]),
                30.0
            ),
            (
                labels(&[
                    ("__name__", "http_requests"),
                    ("instance", "1"),
                    ("job", "api")
                ]),
                60.0
            ),
        ]
    );
    // The sample at 10m is still seen 5m later (both ends closed), not after.
    assert_eq!(vector(&s, "http_requests{job=\"db\"}", 15 * M).len(), 1);
    assert!(vector(&s, "http_requests{job=\"db\"}", 15 * M + 1).is_empty());
    // Element times are the evaluation time.
    assert!(
        vector(&s, "http_requests", 90 * S)
            .iter()
            .all(|x| x.t == 90 * S)
    );
}

#[test]
fn stale_marker_ends_a_series() {
    let mut s = MemoryStorage::new();
    s.add_series(
        &[("__name__", "g")],
        &[(0, 1.0), (M, stale_nan()), (2 * M, 3.0)],
    );
    assert_eq!(vector(&s, "g", 30 * S).len(), 1);
    assert!(vector(&s, "g", M + 30 * S).is_empty());
    assert_eq!(sorted(vector(&s, "g", 2 * M))[0].1, 3.0);
    // Range selectors drop markers.
    match instant(&s, "g[5m]", 2 * M) {
        QueryValue::Matrix(m) => {
            assert_eq!(
                m[0].samples,
                vec![Sample { t: 0, v: 1.0 }, Sample { t: 2 * M, v: 3.0 }]
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn range_selector_window_is_closed_and_keeps_stored_times() {
    let s = store();
    match instant(&s, "http_requests{job=\"db\"}[5m]", 10 * M) {
        QueryValue::Matrix(m) => {
            assert_eq!(m.len(), 1);
            assert_eq!(
                m[0].samples,
                vec![Sample { t: 5 * M, v: 2.0 }, Sample { t: 10 * M, v: 3.0 }]
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn offset_and_at_move_the_reference_time() {
    let s = store();
    let q = "http_requests{job=\"api\",instance=\"0\"}";
    assert_eq!(
        sorted(vector(&s, &format!("{q} offset 2m"), 5 * M))[0].1,
        30.0
    );
    assert_eq!(
        sorted(vector(&s, &format!("{q} offset -2m"), 5 * M))[0].1,
        70.0
    );
    assert_eq!(sorted(vector(&s, &format!("{q} @ 120"), 9 * M))[0].1, 20.0);
    assert_eq!(
        sorted(vector(&s, &format!("{q} @ 240 offset 1m"), 9 * M))[0].1,
        30.0
    );
    // @ end() in a range query: the same value at every step.
    let m = Engine::default()
        .range(&s, &format!("{q} @ end()"), 0, 4 * M, M)
        .unwrap();
    match m {
        QueryValue::Matrix(m) => {
            assert!(m[0].samples.iter().all(|p| p.v == 40.0));
            assert_eq!(m[0].samples.len(), 5);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn literals() {
    let s = MemoryStorage::new();
    assert_eq!(
        instant(&s, "1 + 2 * 3", 5000),
        QueryValue::Scalar(Sample { t: 5000, v: 7.0 })
    );
    assert_eq!(
        instant(&s, "2 ^ 3 ^ 2", 0),
        QueryValue::Scalar(Sample { t: 0, v: 512.0 })
    );
    assert_eq!(
        instant(&s, "-(1)", 0),
        QueryValue::Scalar(Sample { t: 0, v: -1.0 })
    );
    assert_eq!(
        instant(&s, "\"hello\"", 7),
        QueryValue::String {
            t: 7,
            value: "hello".into()
        }
    );
    assert_eq!(
        instant(&s, "1 > bool 2", 0),
        QueryValue::Scalar(Sample { t: 0, v: 0.0 })
    );
}

#[test]
fn arithmetic_drops_the_name_comparison_keeps_it() {
    let s = store();
    let t = 2 * M;
    let v = sorted(vector(&s, "http_requests{job=\"db\"} * 2", t));
    assert_eq!(v, vec![(labels(&[("instance", "0"), ("job", "db")]), 2.0)]);
    let v = sorted(vector(&s, "http_requests{job=\"api\"} > 25", t));
    assert_eq!(
        v,
        vec![(
            labels(&[
                ("__name__", "http_requests"),
                ("instance", "1"),
                ("job", "api")
            ]),
            40.0
        )]
    );
    // A scalar on the left of a comparison: the vector's value is kept.
    let v = sorted(vector(&s, "25 < http_requests{job=\"api\"}", t));
    assert_eq!(v[0].1, 40.0);
    let v = sorted(vector(&s, "http_requests{job=\"api\"} > bool 25", t));
    assert_eq!(
        v,
        vec![
            (labels(&[("instance", "0"), ("job", "api")]), 0.0),
            (labels(&[("instance", "1"), ("job", "api")]), 1.0),
        ]
    );
    // atan2 keeps the name in 2.42.
    let v = vector(&s, "http_requests{job=\"db\"} atan2 1", t);
    assert_eq!(v[0].labels.metric_name(), "http_requests");
    let v = sorted(vector(&s, "-http_requests{job=\"db\"}", t));
    assert_eq!(v, vec![(labels(&[("instance", "0"), ("job", "db")]), -1.0)]);
}

#[test]
fn vector_matching() {
    let s = store();
    let t = 2 * M;
    // One-to-one on all labels but the name.
    let v = sorted(vector(&s, "a + b", t));
    assert_eq!(v, vec![(labels(&[("x", "1")]), 3.0)]);
    // Matching signatures and result labels are kept apart: a comparison
    // keeps the name the signature leaves out.
    let v = sorted(vector(&s, "a >= a", t));
    assert_eq!(v, vec![(labels(&[("__name__", "a"), ("x", "1")]), 1.0)]);
    let v = sorted(vector(&s, "a == bool b", t));
    assert_eq!(v, vec![(labels(&[("x", "1")]), 0.0)]);
    // on(): one-to-one keeps only the matching labels.
    let v = sorted(vector(
        &s,
        "http_requests{job=\"api\"} - on(instance) http_requests{job=\"db\"}",
        t,
    ));
    assert_eq!(v, vec![(labels(&[("instance", "0")]), 19.0)]);
    // Two series of the "one" side in one match group.
    let (kind, msg) = err(
        &s,
        "http_requests{job=\"api\"} / ignoring(instance) http_requests{job=\"api\"}",
        t,
    );
    assert_eq!(kind, ErrorKind::Execution);
    assert_eq!(
        msg,
        "found duplicate series for the match group {job=\"api\"} on the right hand-side of the operation: \
         [{__name__=\"http_requests\", instance=\"1\", job=\"api\"}, {__name__=\"http_requests\", instance=\"0\", job=\"api\"}]\
         ;many-to-many matching not allowed: matching labels must be unique on one side"
    );
    let (kind, msg) = err(
        &s,
        "http_requests{job=\"api\"} / on(job) group_left http_requests{job=\"api\"}",
        t,
    );
    assert_eq!(kind, ErrorKind::Execution);
    assert!(msg.starts_with("found duplicate series"), "{msg}");
    let v = sorted(vector(
        &s,
        "http_requests{job=\"api\"} / on(instance) group_left(job) http_requests{job=\"db\"}",
        t,
    ));
    assert_eq!(v, vec![(labels(&[("instance", "0"), ("job", "db")]), 20.0)]);
    let v = sorted(vector(
        &s,
        "http_requests{job=\"db\"} + on(instance) group_right http_requests{job=\"api\"}",
        t,
    ));
    assert_eq!(
        v,
        vec![(labels(&[("instance", "0"), ("job", "api")]), 21.0)]
    );
    // Many-to-one without group_left.
    let mut s2 = store();
    s2.add_series(&[("__name__", "c"), ("x", "1"), ("y", "1")], &[(0, 1.0)]);
    s2.add_series(&[("__name__", "c"), ("x", "1"), ("y", "2")], &[(0, 1.0)]);
    let (kind, msg) = err(&s2, "c + on(x) a", t);
    assert_eq!(
        (kind, msg.as_str()),
        (
            ErrorKind::Execution,
            "multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)"
        )
    );
    let v = sorted(vector(&s2, "c + on(x) group_left a", t));
    assert_eq!(
        v,
        vec![
            (labels(&[("x", "1"), ("y", "1")]), 2.0),
            (labels(&[("x", "1"), ("y", "2")]), 2.0)
        ]
    );
}

#[test]
fn set_operators() {
    let s = store();
    let t = 2 * M;
    let v = sorted(vector(
        &s,
        "http_requests and on(instance) http_requests{job=\"db\"}",
        t,
    ));
    assert_eq!(v.len(), 2);
    assert!(v.iter().all(|(l, _)| l.get("instance") == "0"));
    let v = vector(&s, "a or b", t);
    assert_eq!(v.len(), 1, "b has a's labels but the name");
    let v = sorted(vector(&s, "a or on(x) http_requests{job=\"db\"}", t));
    assert_eq!(v.len(), 2);
    let v = sorted(vector(
        &s,
        "http_requests unless on(job) http_requests{job=\"db\"}",
        t,
    ));
    assert_eq!(v.len(), 2);
    assert!(v.iter().all(|(l, _)| l.get("job") == "api"));
    assert!(vector(&s, "a and nothing", t).is_empty());
}

#[test]
fn aggregations() {
    let s = store();
    let t = 2 * M;
    assert_eq!(
        sorted(vector(&s, "sum(http_requests)", t)),
        vec![(Labels::default(), 61.0)]
    );
    assert_eq!(
        sorted(vector(&s, "sum by (job) (http_requests)", t)),
        vec![
            (labels(&[("job", "api")]), 60.0),
            (labels(&[("job", "db")]), 1.0)
        ]
    );
    assert_eq!(
        sorted(vector(&s, "max without (instance) (http_requests)", t)),
        vec![
            (labels(&[("job", "api")]), 40.0),
            (labels(&[("job", "db")]), 1.0)
        ]
    );
    assert_eq!(
        sorted(vector(&s, "avg(http_requests{job=\"api\"})", t))[0].1,
        30.0
    );
    assert_eq!(sorted(vector(&s, "count(http_requests)", t))[0].1, 3.0);
    assert_eq!(sorted(vector(&s, "group(http_requests)", t))[0].1, 1.0);
    assert_eq!(sorted(vector(&s, "min(http_requests)", t))[0].1, 1.0);
    assert_eq!(
        sorted(vector(&s, "stdvar(http_requests{job=\"api\"})", t))[0].1,
        100.0
    );
    assert_eq!(
        sorted(vector(&s, "stddev(http_requests{job=\"api\"})", t))[0].1,
        10.0
    );
    assert_eq!(
        sorted(vector(&s, "quantile(0.5, http_requests)", t))[0].1,
        20.0
    );
    // topk keeps the elements' labels, largest first.
    let v = vector(&s, "topk(2, http_requests)", t);
    assert_eq!(v.iter().map(|x| x.v).collect::<Vec<_>>(), vec![40.0, 20.0]);
    assert_eq!(v[0].labels.metric_name(), "http_requests");
    let v = vector(&s, "bottomk by (job) (1, http_requests)", t);
    assert_eq!(v.len(), 2);
    assert!(vector(&s, "topk(0, http_requests)", t).is_empty());
    let v = sorted(vector(
        &s,
        "count_values(\"value\", http_requests{job=\"api\"} / 3)",
        t,
    ));
    assert_eq!(
        v,
        vec![
            (labels(&[("value", "13.333333333333334")]), 1.0),
            (labels(&[("value", "6.666666666666667")]), 1.0)
        ]
    );
    let (kind, msg) = err(&s, "count_values(\"a-b\", http_requests)", t);
    assert_eq!(
        (kind, msg.as_str()),
        (ErrorKind::Execution, "invalid label name \"a-b\"")
    );
}

#[test]
fn min_max_skip_nan_unless_all_nan() {
    let mut s = MemoryStorage::new();
    s.add_series(&[("__name__", "n"), ("i", "0")], &[(0, f64::NAN)]);
    s.add_series(&[("__name__", "n"), ("i", "1")], &[(0, 5.0)]);
    s.add_series(&[("__name__", "n"), ("i", "2")], &[(0, 3.0)]);
    assert_eq!(sorted(vector(&s, "max(n)", 0))[0].1, 5.0);
    assert_eq!(sorted(vector(&s, "min(n)", 0))[0].1, 3.0);
    assert!(sorted(vector(&s, "max(n{i=\"0\"})", 0))[0].1.is_nan());
    let v = vector(&s, "topk(3, n)", 0);
    assert_eq!(v[0].v, 5.0);
    assert!(v[2].v.is_nan());
}

#[test]
fn topk_and_bottomk_order_ties_as_2_42() {
    let mut s = MemoryStorage::new();
    s.add_series(&[("__name__", "n"), ("i", "0")], &[(0, f64::NAN)]);
    s.add_series(&[("__name__", "n"), ("i", "1")], &[(0, 5.0)]);
    s.add_series(&[("__name__", "n"), ("i", "2")], &[(0, 5.0)]);
    s.add_series(&[("__name__", "n"), ("i", "3")], &[(0, 3.0)]);
    let order = |q: &str| -> Vec<String> {
        vector(&s, q, 0)
            .iter()
            .map(|x| x.labels.get("i").to_string())
            .collect()
    };
    // What Prometheus 2.42 answered for these samples.
    assert_eq!(order("topk(3, n)"), ["1", "2", "3"]);
    assert_eq!(order("bottomk(3, n)"), ["3", "2", "1"]);
    assert_eq!(order("topk(2, n)"), ["1", "2"]);
}

#[test]
fn same_labelset_after_dropping_names_is_an_error() {
    let s = store();
    let (kind, msg) = err(&s, "-{__name__=~\"a|b\"}", 0);
    assert_eq!(
        (kind, msg.as_str()),
        (
            ErrorKind::Execution,
            "vector cannot contain metrics with the same labelset"
        )
    );
    let (kind, _) = err(&s, "{__name__=~\"a|b\"} * 2", 0);
    assert_eq!(kind, ErrorKind::Execution);
    // Comparisons keep the names, so no clash.
    assert_eq!(vector(&s, "{__name__=~\"a|b\"} > 0", 0).len(), 2);
    // A range function drops them too, over all steps of a range query,
    // aggregated or not; `last_over_time` keeps them.
    for q in [
        "count_over_time({x=\"1\"}[5m])",
        "sum(count_over_time({x=\"1\"}[5m]))",
    ] {
        let e = Engine::default().range(&s, q, 0, 4 * M, M).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Execution, "{q}");
    }
    let kept = Engine::default()
        .range(&s, "sum(last_over_time({x=\"1\"}[5m]))", 0, 4 * M, M)
        .unwrap();
    assert_eq!(
        kept,
        QueryValue::Matrix(vec![Series {
            labels: Labels::default(),
            samples: (0..=4).map(|k| Sample { t: k * M, v: 3.0 }).collect(),
        }])
    );
}

#[test]
fn absent_labels_come_from_equality_matchers() {
    let s = store();
    let v = vector(
        &s,
        "absent(nope{job=\"x\", instance=~\"y\", a=\"1\", a=\"2\"})",
        0,
    );
    assert_eq!(sorted(v), vec![(labels(&[("job", "x")]), 1.0)]);
    assert!(vector(&s, "absent(http_requests)", 0).is_empty());
    let v = vector(&s, "absent_over_time(nope{job=\"x\"}[1m])", 0);
    assert_eq!(sorted(v), vec![(labels(&[("job", "x")]), 1.0)]);
    assert!(vector(&s, "absent_over_time(http_requests[1m])", 0).is_empty());
}

#[test]
fn range_query_gathers_steps_sorted_by_labels() {
    let s = store();
    let m = Engine::default()
        .range(&s, "http_requests{instance=\"0\"}", 3 * M, 16 * M, 2 * M)
        .unwrap();
    let QueryValue::Matrix(m) = m else {
        panic!("{m:?}")
    };
    assert_eq!(m.len(), 2);
    assert_eq!(m[0].labels.get("job"), "api");
    // Series end 5 minutes after their last sample (at 10m).
    assert_eq!(
        m[0].samples.iter().map(|p| p.t).collect::<Vec<_>>(),
        vec![3 * M, 5 * M, 7 * M, 9 * M, 11 * M, 13 * M, 15 * M]
    );
    assert_eq!(m[0].samples[1].v, 50.0);
    assert_eq!(
        m[1].samples.iter().map(|p| p.v).collect::<Vec<_>>(),
        vec![1.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0]
    );
    // A scalar becomes one series without labels.
    let m = Engine::default().range(&s, "1", 0, 2 * M, M).unwrap();
    assert_eq!(
        m,
        QueryValue::Matrix(vec![Series {
            labels: Labels::default(),
            samples: vec![
                Sample { t: 0, v: 1.0 },
                Sample { t: M, v: 1.0 },
                Sample { t: 2 * M, v: 1.0 }
            ]
        }])
    );
    let e = Engine::default()
        .range(&s, "http_requests[5m]", 0, M, M)
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadData);
    assert_eq!(
        e.message,
        "invalid expression type \"range vector\" for range query, must be Scalar or instant Vector"
    );
}

#[test]
fn subquery_steps_are_absolute_multiples_of_the_step() {
    let s = store();
    let q = "http_requests{job=\"db\"}[5m:2m]";
    let QueryValue::Matrix(m) = instant(&s, q, 11 * M) else {
        panic!()
    };
    // Window [6m, 11m]: steps at 6m, 8m, 10m.
    assert_eq!(
        m[0].samples,
        vec![
            Sample { t: 6 * M, v: 2.0 },
            Sample { t: 8 * M, v: 2.0 },
            Sample { t: 10 * M, v: 3.0 }
        ]
    );
    // The default step is one minute; offset moves the window.
    let QueryValue::Matrix(m) = instant(&s, "http_requests{job=\"db\"}[2m:] offset 5m", 11 * M)
    else {
        panic!()
    };
    assert_eq!(
        m[0].samples.iter().map(|p| p.t).collect::<Vec<_>>(),
        vec![4 * M, 5 * M, 6 * M]
    );
    let v = vector(&s, "absent_over_time(nope[5m:1m])", 0);
    assert_eq!(sorted(v), vec![(Labels::default(), 1.0)]);
}

#[test]
fn too_many_samples_and_timeout() {
    let s = store();
    let small = Engine::new(EngineOptions {
        max_samples: 5,
        ..EngineOptions::default()
    });
    let e = small.range(&s, "http_requests", 0, 10 * M, M).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Execution);
    assert_eq!(
        e.message,
        "query processing would load too many samples into memory in query execution"
    );
    let hurried = Engine::new(EngineOptions {
        timeout: Duration::ZERO,
        ..EngineOptions::default()
    });
    let e = hurried
        .range(&s, "http_requests", 0, 10 * M, M)
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout);
}

#[test]
fn a_cancelled_query_stops_with_canceled() {
    let s = store();
    let progress = std::sync::Arc::new(crate::query::QueryProgress::new());
    let engine = Engine::default().watching(progress.clone());
    assert!(engine.range(&s, "http_requests", 0, 10 * M, M).is_ok());
    progress.cancel();
    for e in [
        engine.range(&s, "http_requests", 0, 10 * M, M).unwrap_err(),
        engine
            .instant(&s, "sum(http_requests)", 10 * M)
            .unwrap_err(),
    ] {
        assert_eq!(e.kind, ErrorKind::Canceled);
        assert_eq!(e.message, "query was canceled in expression evaluation");
    }
}

/// 10,000 series over 360 one-minute steps: a plain selector, a sum, a
/// grouped sum and an arithmetic operation must each take well under a
/// second (tens of milliseconds in a release build; run with
/// `cargo test --release -- --ignored range_query_speed --nocapture`).
#[test]
#[ignore = "a timing, meaningful in release builds only"]
fn range_query_speed() {
    let mut s = MemoryStorage::new();
    let steps = 360;
    for i in 0..10_000 {
        let name = format!("h{i}");
        let group = format!("g{}", i % 10);
        let points: Vec<(i64, f64)> = (0..=steps + 5).map(|k| (k * M, (k + i) as f64)).collect();
        s.add_series(
            &[("__name__", "cpu"), ("host", &name), ("region", &group)],
            &points,
        );
    }
    let start = 5 * M;
    let end = start + (steps - 1) * M;
    for q in [
        "cpu",
        "sum(cpu)",
        "avg by (region) (cpu)",
        "cpu * 2",
        "cpu > 100",
    ] {
        let began = std::time::Instant::now();
        let cpu_began = thread_cpu_time();
        let out = Engine::default().range(&s, q, start, end, M).unwrap();
        let cpu = thread_cpu_time() - cpu_began;
        let took = began.elapsed();
        let QueryValue::Matrix(m) = out else { panic!() };
        println!("{q}: {} series, {took:?} elapsed, {cpu:?} CPU", m.len());
        assert!(cpu < Duration::from_secs(1), "{q} took {cpu:?} of CPU");
    }
}

/// This thread's CPU time: on a shared machine the wall clock measures
/// the neighbours as much as the query.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given and nothing else.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[test]
fn aggregations_of_a_selector_in_range_queries_match_the_general_path() {
    let s = store();
    for agg in [
        "sum by (job)",
        "avg",
        "max without (instance)",
        "min by (instance)",
        "count",
        "group by (job)",
        "stddev by (job)",
        "stdvar",
    ] {
        // `+ 0` hides the selector from the grid path; `without` drops the
        // name either way and `by` never keeps it.
        let direct = Engine::default()
            .range(&s, &format!("{agg} (http_requests)"), 0, 16 * M, M)
            .unwrap();
        let general = Engine::default()
            .range(&s, &format!("{agg} (http_requests + 0)"), 0, 16 * M, M)
            .unwrap();
        assert_eq!(direct, general, "{agg}");
        let QueryValue::Matrix(m) = direct else {
            panic!()
        };
        assert!(!m.is_empty(), "{agg}");
    }
}

/// A range query's answer built from one instant query per step, as the
/// per-step path computes it.
fn range_by_instants(s: &MemoryStorage, q: &str, start: i64, end: i64, step: i64) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    let mut t = start;
    while t <= end {
        for e in vector(s, q, t) {
            match out.iter_mut().find(|x| x.labels == e.labels) {
                Some(x) => x.samples.push(Sample { t, v: e.v }),
                None => out.push(Series {
                    labels: e.labels,
                    samples: vec![Sample { t, v: e.v }],
                }),
            }
        }
        t += step;
    }
    out.sort_by(|a, b| a.labels.cmp(&b.labels));
    out
}

#[test]
fn range_functions_and_their_aggregations_walked_over_all_steps_match_each_step() {
    let s = store();
    let functions = [
        "rate",
        "increase",
        "delta",
        "irate",
        "idelta",
        "resets",
        "changes",
        "avg_over_time",
        "sum_over_time",
        "count_over_time",
        "min_over_time",
        "max_over_time",
        "last_over_time",
        "present_over_time",
        "stddev_over_time",
        "stdvar_over_time",
    ];
    for f in functions {
        for q in [
            format!("{f}(http_requests[3m])"),
            format!("sum({f}(http_requests[3m]))"),
            format!("avg by (job) ({f}(http_requests[150s]))"),
            format!("stddev without (instance) ({f}(http_requests[3m] offset 1m))"),
            format!("count(({f}(http_requests{{job=\"api\"}}[5m])))"),
        ] {
            let walked = Engine::default().range(&s, &q, 30 * S, 14 * M, 30 * S);
            let walked = match walked.unwrap_or_else(|e| panic!("{q}: {e}")) {
                QueryValue::Matrix(m) => m,
                other => panic!("{q}: {other:?}"),
            };
            assert_eq!(
                walked,
                range_by_instants(&s, &q, 30 * S, 14 * M, 30 * S),
                "{q}"
            );
        }
    }
    // Nothing selected: an empty answer at every step.
    for q in [
        "sum(rate(nothing[1m]))",
        "rate(nothing[1m])",
        "avg(nothing)",
    ] {
        let out = Engine::default().range(&s, q, 0, 10 * M, M).unwrap();
        assert_eq!(out, QueryValue::Matrix(Vec::new()), "{q}");
    }
}
