//! `POST /api/query/exp` against a real TSD: the documented example,
//! joins, fill policies, nested expressions and each validation error,
//! with bodies as OpenTSDB 2.4.1's `QueryExecutor` writes them.

use crate::common;

use common::{TestServer, req, telnet};

const H: u64 = 1431561600; // 2015-05-14T00:00:00Z, an hour boundary

fn server() -> TestServer {
    TestServer::start(&[("tsd.core.auto_create_metrics", "true")])
}

fn put(srv: &TestServer, lines: &str) {
    assert_eq!(telnet(srv.addr, lines.as_bytes()), "");
}

fn exp(srv: &TestServer, body: &str) -> (u16, String) {
    req(srv, "POST", "/api/query/exp", body)
}

fn time() -> String {
    format!(
        r#""time":{{"start":{H},"end":{},"aggregator":"sum"}}"#,
        H + 3600
    )
}

/// Two hosts in each of two metrics; web02 misses two points of `a`.
fn documented_data(srv: &TestServer) {
    put(
        srv,
        &format!(
            "put sys.cpu.user {H} 1 host=web01\n\
             put sys.cpu.user {} 3 host=web01\n\
             put sys.cpu.user {} 5 host=web01\n\
             put sys.cpu.user {} 7 host=web01\n\
             put sys.cpu.user {H} 2 host=web02\n\
             put sys.cpu.user {} 8 host=web02\n\
             put sys.cpu.iowait {H} 10 host=web01\n\
             put sys.cpu.iowait {} 20 host=web01\n\
             put sys.cpu.iowait {} 30 host=web01\n\
             put sys.cpu.iowait {} 40 host=web01\n\
             put sys.cpu.iowait {H} 20 host=web02\n\
             put sys.cpu.iowait {} 30 host=web02\n\
             put sys.cpu.iowait {} 40 host=web02\n\
             put sys.cpu.iowait {} 50 host=web02\n",
            H + 60,
            H + 120,
            H + 180,
            H + 180,
            H + 60,
            H + 120,
            H + 180,
            H + 60,
            H + 120,
            H + 180,
        ),
    );
}

fn ms(offset: u64) -> u64 {
    (H + offset) * 1000
}

/// The "Complete Example" of OpenTSDB's /api/query/exp page (its times
/// made absolute): nested expressions five deep, two outputs with
/// aliases, one of them a metric.
#[test]
fn the_documented_example() {
    let srv = server();
    documented_data(&srv);
    let body = format!(
        r#"{{{},
        "filters":[{{"tags":[{{"type":"wildcard","tagk":"host","filter":"web*","groupBy":true}}],"id":"f1"}}],
        "metrics":[{{"id":"a","metric":"sys.cpu.user","filter":"f1","fillPolicy":{{"policy":"nan"}}}},
                   {{"id":"b","metric":"sys.cpu.iowait","filter":"f1","fillPolicy":{{"policy":"nan"}}}}],
        "expressions":[{{"id":"e","expr":"a + b"}},{{"id":"e2","expr":"e * 2"}},{{"id":"e3","expr":"e2 * 2"}},
                       {{"id":"e4","expr":"e3 * 2"}},{{"id":"e5","expr":"e4 + e2"}}],
        "outputs":[{{"id":"e5","alias":"Mega expression"}},{{"id":"a","alias":"CPU User"}}]}}"#,
        time()
    );
    let (status, text) = exp(&srv, &body);
    assert_eq!(status, 200, "{text}");
    // e = a + b: web01 11,23,35,47; web02 22,NaN,NaN,58 (a's gaps are
    // NaN by its fill policy); e5 = 8e + 2e = 10e.
    let expected_outputs = format!(
        r#"{{"outputs":[{{"id":"e5","alias":"Mega expression","dps":[[{},110.0,220.0],[{},230.0,"NaN"],[{},350.0,"NaN"],[{},470.0,580.0]],"dpsMeta":{{"firstTimestamp":{},"lastTimestamp":{},"setCount":4,"series":2}},"meta":[{{"index":0,"metrics":["timestamp"]}},{{"index":1,"metrics":["sys.cpu.iowait","sys.cpu.user"],"commonTags":{{"host":"web01"}},"aggregatedTags":[]}},{{"index":2,"metrics":["sys.cpu.iowait","sys.cpu.user"],"commonTags":{{"host":"web02"}},"aggregatedTags":[]}}]}},{{"id":"a","alias":"CPU User","dps":[[{},1.0,2.0],[{},3.0,0.0],[{},5.0,0.0],[{},7.0,8.0]],"dpsMeta":{{"firstTimestamp":{},"lastTimestamp":{},"setCount":4,"series":2}},"meta":[{{"index":0,"metrics":["timestamp"]}},{{"index":1,"metrics":["sys.cpu.user"],"commonTags":{{"host":"web01"}},"aggregatedTags":[]}},{{"index":2,"metrics":["sys.cpu.user"],"commonTags":{{"host":"web02"}},"aggregatedTags":[]}}]}}],"query":"#,
        ms(0),
        ms(60),
        ms(120),
        ms(180),
        ms(0),
        ms(180),
        ms(0),
        ms(60),
        ms(120),
        ms(180),
        ms(0),
        ms(180),
    );
    assert!(
        text.starts_with(&expected_outputs),
        "got\n{text}\nwanted\n{expected_outputs}"
    );
    let expected_query = format!(
        r#""query":{{"name":null,"time":{{"start":"{H}","end":"{}","timezone":null,"downsampler":null,"aggregator":"sum","rate":false}},"filters":[{{"id":"f1","tags":[{{"tagk":"host","filter":"web*","group_by":true,"type":"wildcard"}}],"explicitTags":false}}],"metrics":[{{"metric":"sys.cpu.user","id":"a","filter":"f1","aggregator":null,"fillPolicy":{{"policy":"nan","value":"NaN"}},"timeOffset":null}},{{"metric":"sys.cpu.iowait","id":"b","filter":"f1","aggregator":null,"fillPolicy":{{"policy":"nan","value":"NaN"}},"timeOffset":null}}],"expressions":[{{"id":"e","expr":"a + b","join":{{"operator":"union","includeAggTags":true,"useQueryTags":false}},"fillPolicy":null}},{{"id":"e2","expr":"e * 2","join":{{"operator":"union","includeAggTags":true,"useQueryTags":false}},"fillPolicy":null}},{{"id":"e3","expr":"e2 * 2","join":{{"operator":"union","includeAggTags":true,"useQueryTags":false}},"fillPolicy":null}},{{"id":"e4","expr":"e3 * 2","join":{{"operator":"union","includeAggTags":true,"useQueryTags":false}},"fillPolicy":null}},{{"id":"e5","expr":"e4 + e2","join":{{"operator":"union","includeAggTags":true,"useQueryTags":false}},"fillPolicy":null}}],"outputs":[{{"id":"e5","alias":"Mega expression"}},{{"id":"a","alias":"CPU User"}}]}}}}"#,
        H + 3600
    );
    assert!(text.ends_with(&expected_query), "got\n{text}");
}

/// a has web01..web03, b only web01 and web02: a union keeps web03 (b's
/// side is 0 there, the union's own fill, whatever b's fill policy says),
/// an intersection drops it.
#[test]
fn union_and_intersection() {
    let srv = server();
    put(
        &srv,
        &format!(
            "put m.a {H} 1 host=web01\nput m.a {H} 2 host=web02\nput m.a {H} 3 host=web03\n\
             put m.b {H} 10 host=web01\nput m.b {H} 20 host=web02\n"
        ),
    );
    let body = |op: &str| {
        format!(
            r#"{{{},"filters":[{{"id":"f","tags":[{{"type":"wildcard","tagk":"host","filter":"*","groupBy":true}}]}}],
            "metrics":[{{"id":"a","metric":"m.a","filter":"f"}},{{"id":"b","metric":"m.b","filter":"f","fillPolicy":{{"policy":"scalar","value":100}}}}],
            "expressions":[{{"id":"e","expr":"a + b","join":{{"operator":"{op}"}}}}]}}"#,
            time()
        )
    };
    let (s, t) = exp(&srv, &body("union"));
    assert_eq!(s, 200, "{t}");
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    let out = &v["outputs"][0];
    assert_eq!(out["dps"], serde_json::json!([[ms(0), 11.0, 22.0, 3.0]]));
    assert_eq!(out["dpsMeta"]["series"], 3);
    // The first input (a, in 2.4.1's map order) lends the common tags.
    assert_eq!(
        out["meta"][3]["commonTags"],
        serde_json::json!({"host":"web03"})
    );
    let (s, t) = exp(&srv, &body("intersection"));
    assert_eq!(s, 200, "{t}");
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    assert_eq!(
        v["outputs"][0]["dps"],
        serde_json::json!([[ms(0), 11.0, 22.0]])
    );
    // Nothing in common: 2.4.1's error, its iterator dump included.
    put(&srv, &format!("put m.c {H} 5 host=other\n"));
    let (s, t) = exp(
        &srv,
        &format!(
            r#"{{{},"filters":[{{"id":"f","tags":[{{"type":"wildcard","tagk":"host","filter":"*","groupBy":true}}]}}],
            "metrics":[{{"id":"a","metric":"m.a","filter":"f"}},{{"id":"c","metric":"m.c","filter":"f"}}],
            "expressions":[{{"id":"e","expr":"a + c","join":{{"operator":"intersection"}}}}]}}"#,
            time()
        ),
    );
    let msg = "No intersections found: IntersectionIterator(id=e, useQueryTags=false, includeAggTags=true, index=0, queries={a=TimeSyncedIterator(id=a, index=0, dpsSize=3), c=TimeSyncedIterator(id=c, index=1, dpsSize=1)}";
    assert_eq!(
        (s, t),
        (
            400,
            format!(r#"{{"error":{{"code":400,"message":"{msg}","details":"{msg}"}}}}"#)
        )
    );
}

/// Gaps take the metric's fill policy (zero when it has none, the
/// TimeSyncedIterator's default), and so do NaNs; division by zero is 0.
#[test]
fn fill_policies_and_division_by_zero() {
    let srv = server();
    put(
        &srv,
        &format!(
            "put f.a {H} 4 host=x\nput f.a {} 6 host=x\nput f.a {} 8 host=x\nput f.b {H} 2 host=x\nput f.b {} 0 host=x\n",
            H + 60,
            H + 120,
            H + 60
        ),
    );
    let run = |fill: &str, expr: &str| {
        let (s, t) = exp(
            &srv,
            &format!(
                r#"{{{},"metrics":[{{"id":"a","metric":"f.a"}},{{"id":"b","metric":"f.b"{fill}}}],
                "expressions":[{{"id":"e","expr":"{expr}"}}]}}"#,
                time()
            ),
        );
        assert_eq!(s, 200, "{t}");
        let v: serde_json::Value = serde_json::from_str(&t).unwrap();
        v["outputs"][0]["dps"].clone()
    };
    // b has no point at +120: zero by default, so a / b is 0 there too.
    assert_eq!(
        run("", "a / b"),
        serde_json::json!([[ms(0), 2.0], [ms(60), 0.0], [ms(120), 0.0]])
    );
    assert_eq!(
        run("", "a + b"),
        serde_json::json!([[ms(0), 6.0], [ms(60), 6.0], [ms(120), 8.0]])
    );
    assert_eq!(
        run(r#","fillPolicy":{"policy":"scalar","value":"1"}"#, "a + b"),
        serde_json::json!([[ms(0), 6.0], [ms(60), 6.0], [ms(120), 9.0]])
    );
    assert_eq!(
        run(r#","fillPolicy":{"policy":"nan"}"#, "a + b"),
        serde_json::json!([[ms(0), 6.0], [ms(60), 6.0], [ms(120), "NaN"]])
    );
    // Comparisons and booleans come out as 1 and 0.
    assert_eq!(
        run("", "a > 5 && b == 0"),
        serde_json::json!([[ms(0), 0.0], [ms(60), 1.0], [ms(120), 1.0]])
    );
}

/// Nested expressions read the inner one's values; its NaNs take its own
/// fill policy (2.4.1 failed there with a NullPointerException).
#[test]
fn nested_expressions_and_their_fill() {
    let srv = server();
    put(
        &srv,
        &format!(
            "put n.a {H} 1 host=x\nput n.a {} 2 host=x\nput n.b {H} 1 host=x\n",
            H + 60
        ),
    );
    let (s, t) = exp(
        &srv,
        &format!(
            r#"{{{},"metrics":[{{"id":"a","metric":"n.a"}},{{"id":"b","metric":"n.b","fillPolicy":{{"policy":"nan"}}}}],
            "expressions":[{{"id":"inner","expr":"a * b","fillPolicy":{{"policy":"scalar","value":-1}}}},
                           {{"id":"outer","expr":"inner + a"}}],
            "outputs":[{{"id":"outer"}},{{"id":"inner"}}]}}"#,
            time()
        ),
    );
    assert_eq!(s, 200, "{t}");
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    assert_eq!(
        v["outputs"][0]["dps"],
        serde_json::json!([[ms(0), 2.0], [ms(60), 1.0]])
    );
    assert_eq!(
        v["outputs"][1]["dps"],
        serde_json::json!([[ms(0), 1.0], [ms(60), "NaN"]])
    );
    // One row: 2.4.1 never sets lastTimestamp then.
    let (s, t) = exp(
        &srv,
        &format!(
            r#"{{{},"metrics":[{{"id":"b","metric":"n.b"}}],"expressions":[{{"id":"e","expr":"b * 3"}}]}}"#,
            time()
        ),
    );
    assert_eq!(s, 200);
    assert!(t.contains(&format!(
        r#""dps":[[{},3.0]],"dpsMeta":{{"firstTimestamp":{},"lastTimestamp":0,"setCount":1,"series":1}}"#,
        ms(0),
        ms(0)
    )), "{t}");
}

/// Every validation error, worded as 2.4.1 words it (400 here where
/// 2.4.1 answers 500 for a request it refuses before running it).
#[test]
fn validation_errors() {
    let srv = server();
    put(&srv, &format!("put v.a {H} 1 host=x\n"));
    let t = time();
    let m = r#""metrics":[{"id":"a","metric":"v.a"}]"#;
    let cases: Vec<(String, &str)> = vec![
        ("".into(), "Incoming data was null or empty"),
        ("{".into(), "Unable to parse the given JSON"),
        ("{}".into(), "missing time"),
        (r#"{"time":{"aggregator":"sum"}}"#.into(), "Invalid time"),
        (format!("{{{t}}}"), "missing or empty metrics"),
        (
            format!(
                r#"{{{t},"metrics":[{{"id":"a","metric":"v.a"}},{{"id":"a","metric":"v.a"}}]}}"#
            ),
            "duplicated metric id: a",
        ),
        (
            format!(r#"{{{t},{m},"filters":[{{"id":"f"}},{{"id":"f"}}]}}"#),
            "duplicated filter id: f",
        ),
        (
            format!(r#"{{{t},{m},"expressions":[{{"id":"a","expr":"a"}}]}}"#),
            "Duplicated variable or expression id: a",
        ),
        (
            format!(r#"{{{t},"metrics":[{{"id":"a.b","metric":"v.a"}}]}}"#),
            "Invalid metric at index 0",
        ),
        (
            format!(r#"{{{t},{m},"filters":[{{"id":""}}]}}"#),
            "Invalid filter at index 0",
        ),
        (
            format!(r#"{{{t},{m},"expressions":[{{"id":"e","expr":"a +* 2"}}]}}"#),
            "Invalid expression at index 0",
        ),
        (
            format!(r#"{{{t},{m},"expressions":[{{"id":"e"}}]}}"#),
            "Invalid expression at index 0",
        ),
        (
            format!(
                r#"{{{t},"metrics":[{{"id":"a","metric":"v.a","filter":"g"}}],"filters":[{{"id":"f"}}]}}"#
            ),
            "unrecognized filter id g in metric a",
        ),
        (
            format!(r#"{{{t},"metrics":[{{"id":"a","metric":"v.a","filter":"g"}}]}}"#),
            "No filter defined: g",
        ),
        (
            format!(r#"{{{t},{m},"expressions":[{{"id":"e","expr":"a + zz"}}]}}"#),
            "Expression [a + zz] was missing input zz",
        ),
        (
            format!(r#"{{{t},{m},"expressions":[{{"id":"e","expr":"1 + 2"}}]}}"#),
            "The expression didn't appear to have any variables",
        ),
        (
            format!(r#"{{{t},{m},"expressions":[{{"id":"e","expr":"a","join":{{}}}}]}}"#),
            "The set operator cannot be null",
        ),
        (
            format!(r#"{{"time":{{"start":{H},"aggregator":"Sum"}},{m}}}"#),
            "No such aggregation function: Sum",
        ),
        (
            format!(r#"{{"time":{{"start":{H},"end":1,"aggregator":"sum"}},{m}}}"#),
            "End time [1000] must be greater than the start time [1431561600000]",
        ),
        (
            format!(r#"{{{t},"metrics":[{{"id":"a","metric":"no.such"}}]}}"#),
            "No such name for 'metrics': 'no.such'",
        ),
        (
            format!(r#"{{{t},{m},"expressions":[{{"id":"e","expr":"e + a"}}]}}"#),
            "Self referencing expression found: e",
        ),
        (
            format!(
                r#"{{{t},{m},"expressions":[{{"id":"x","expr":"y + a"}},{{"id":"y","expr":"x * 2"}}]}}"#
            ),
            "Circular reference found: y",
        ),
        (
            format!(
                r#"{{{t},"metrics":[{{"id":"A","metric":"v.a"}}],"expressions":[{{"id":"e","expr":"A * 2"}}]}}"#
            ),
            "Missing results for variable A",
        ),
        (
            format!(r#"{{{t},{m},"expressions":[{{"id":"e","expr":"a > 0 ? 1 : 0"}}]}}"#),
            "Expression returned a result of type: java.lang.Integer",
        ),
    ];
    for (body, message) in cases {
        let (s, text) = exp(&srv, &body);
        assert_eq!(s, 400, "{body}: {text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let got = v["error"]["message"].as_str().unwrap();
        assert!(got.starts_with(message), "{body}: {got}");
    }
    // Methods: PUT is refused as by the other query endpoints.
    let (s, _) = req(&srv, "PUT", "/api/query/exp", "{}");
    assert_eq!(s, 405);
}

/// Outputs: none named means every expression; a metric id gives the raw
/// groups; an unknown id is skipped.
#[test]
fn outputs_default_and_unknown() {
    let srv = server();
    put(
        &srv,
        &format!("put o.a {H} 1 host=x\nput o.a {} 2 host=x\n", H + 60),
    );
    let (s, t) = exp(
        &srv,
        &format!(
            r#"{{{},"metrics":[{{"id":"a","metric":"o.a"}}],"expressions":[{{"id":"e","expr":"a * 10"}},{{"id":"f","expr":"a - 1"}}]}}"#,
            time()
        ),
    );
    assert_eq!(s, 200, "{t}");
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    let ids: Vec<&str> = v["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["e", "f"]);
    assert!(v["outputs"][0].get("alias").is_none());
    let (s, t) = exp(
        &srv,
        &format!(
            r#"{{{},"metrics":[{{"id":"a","metric":"o.a"}}],"outputs":[{{"id":"zz"}},{{"id":"a"}}]}}"#,
            time()
        ),
    );
    assert_eq!(s, 200, "{t}");
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    assert_eq!(v["outputs"].as_array().unwrap().len(), 1);
    assert_eq!(
        v["outputs"][0]["dps"],
        serde_json::json!([[ms(0), 1.0], [ms(60), 2.0]])
    );
    // Expression queries are listed with the others, as the query their
    // metrics run as.
    let (s, t) = common::get(&srv, "/api/stats/query");
    assert_eq!(s, 200);
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    let completed = v["completed"].as_array().unwrap();
    assert!(
        completed
            .iter()
            .any(|q| q["query"]["queries"][0]["metric"] == "o.a"),
        "{t}"
    );
}

/// Random expressions, joins and fill policies: a 200 or OpenTSDB's 400,
/// never a 500 (a panic in the handler answers 500).
#[test]
fn random_expressions_get_200_or_400() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let srv = server();
    documented_data(&srv);
    let mut runner = TestRunner::new(Config::with_cases(300));
    // Half raw text, half built from operands and operators (mostly
    // well-formed, so that many requests get as far as evaluating).
    let operand = prop::sample::select(vec!["a", "b", "1", "2.5", "(a - b)", "-a", "!b", "0"]);
    let op = prop::sample::select(vec![
        "+", "-", "*", "/", "%", ">", "<=", "==", "&&", "||", "?:", "&",
    ]);
    let built =
        (operand.clone(), prop::collection::vec((op, operand), 0..5)).prop_map(|(first, rest)| {
            rest.iter()
                .fold(first.to_string(), |acc, (o, x)| format!("{acc} {o} {x}"))
        });
    let strategy = (
        prop_oneof![
            "[ab0-9.+*/%()<>=!&|?:~^ -]{1,24}".prop_map(String::from),
            built
        ],
        prop_oneof![Just("union"), Just("intersection")],
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just("nan"), Just("zero"), Just("null")],
    );
    let ok = std::cell::Cell::new(0);
    runner
        .run(&strategy, |(expr, op, qt, agg, fill)| {
            let body = format!(
                r#"{{{},"filters":[{{"id":"f","tags":[{{"type":"wildcard","tagk":"host","filter":"web*","groupBy":true}}]}}],
                "metrics":[{{"id":"a","metric":"sys.cpu.user","filter":"f","fillPolicy":{{"policy":"{fill}"}}}},
                           {{"id":"b","metric":"sys.cpu.iowait"}}],
                "expressions":[{{"id":"e","expr":{},"join":{{"operator":"{op}","useQueryTags":{qt},"includeAggTags":{agg}}}}},
                               {{"id":"n","expr":"e + a"}}],"outputs":[{{"id":"n"}},{{"id":"e"}}]}}"#,
                time(),
                serde_json::to_string(&expr).unwrap()
            );
            let (s, t) = exp(&srv, &body);
            prop_assert!(s == 200 || s == 400, "{expr}: {s} {t}");
            if s == 200 {
                ok.set(ok.get() + 1);
                prop_assert!(serde_json::from_str::<serde_json::Value>(&t).is_ok(), "{t}");
            }
            Ok(())
        })
        .unwrap();
    assert!(ok.get() > 0, "no random expression ran");
}

/// Figures, not a check: `a / b * 100` over two metrics × 1,000 hosts ×
/// 1 hour at 10 s, against the two plain `/api/query` queries it runs.
/// `cargo test --release --test it -- --ignored exp_cost_against_plain_queries --nocapture`
#[test]
#[ignore]
fn exp_cost_against_plain_queries() {
    use rtsdb::model::Value;
    use std::time::Instant;
    const HOSTS: usize = 1000;
    let db = common::Db::new();
    for h in 0..HOSTS {
        let host = format!("host{h:04}");
        let pts = |scale: f64| -> Vec<(u64, Value)> {
            (0..360u64)
                .map(|i| (i * 10, Value::Float(scale + ((i as usize + h) % 7) as f64)))
                .collect()
        };
        db.put("bench.errors", &[("host", &host)], &pts(1.0));
        db.put("bench.requests", &[("host", &host)], &pts(100.0));
    }
    db.db.flush_all().unwrap();
    let ctx = db.ctx();
    let (start, end) = (common::T, common::T + 3600);
    let plain = |metric: &str| {
        let q = rtsdb::query::parse_get(&format!(
            "start={start}&end={end}&m=sum:{metric}%7Bhost=*%7D"
        ))
        .unwrap();
        rtsdb::query::execute(&ctx, &q, None).unwrap().to_json()
    };
    let body = format!(
        r#"{{"time":{{"start":{start},"end":{end},"aggregator":"sum"}},
        "filters":[{{"id":"f","tags":[{{"type":"wildcard","tagk":"host","filter":"*","groupBy":true}}]}}],
        "metrics":[{{"id":"a","metric":"bench.errors","filter":"f"}},{{"id":"b","metric":"bench.requests","filter":"f"}}],
        "expressions":[{{"id":"e","expr":"a / b * 100"}}]}}"#
    );
    let exp = || rtsdb::query::exp::execute(&ctx, body.as_bytes(), None).unwrap();
    // Warm up, then the median of several runs.
    let out = exp();
    assert!(out.contains("\"series\":1000"));
    plain("bench.errors");
    let median = |f: &dyn Fn() -> usize| {
        let mut t: Vec<f64> = (0..9)
            .map(|_| {
                let t0 = Instant::now();
                std::hint::black_box(f());
                t0.elapsed().as_secs_f64() * 1000.0
            })
            .collect();
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    let two_plain = median(&|| plain("bench.errors").len() + plain("bench.requests").len());
    let expression = median(&|| exp().len());
    println!(
        "exp a/b*100, 2 metrics x {HOSTS} hosts x 1h at 10s: {expression:.1} ms; \
         the two plain queries: {two_plain:.1} ms; ratio {:.2}",
        expression / two_plain
    );
}

/// OpenTSDB's own `TestQueryExecutor` cases, their data
/// (`BaseTimeSyncedIteratorTest`) written with telnet and their
/// assertions checked on the HTTP answer.
#[test]
fn opentsdb_query_executor_tests() {
    let one_extra_same_e = |srv: &TestServer| {
        put(
            srv,
            "put A 1431561600 1 D=D E=E\nput A 1431561660 2 D=D E=E\nput A 1431561720 3 D=D E=E\n\
             put A 1431561600 4 D=F E=E\nput A 1431561660 5 D=F E=E\nput A 1431561720 6 D=F E=E\n\
             put B 1431561600 11 D=D E=E\nput B 1431561660 12 D=D E=E\nput B 1431561720 13 D=D E=E\n\
             put B 1431561600 14 D=F E=E\nput B 1431561660 15 D=F E=E\nput B 1431561720 16 D=F E=E\n\
             put B 1431561600 17 D=G E=E\nput B 1431561660 18 D=G E=E\nput B 1431561720 19 D=G E=E\n",
        )
    };
    let query = |metrics: &str, expressions: &str, outputs: &str| {
        format!(
            r#"{{"time":{{"start":"1431561600","aggregator":"sum"}},
            "filters":[{{"id":"f1","tags":[{{"type":"wildcard","tagk":"D","filter":"*","groupBy":true}}]}}],
            "metrics":{metrics},"expressions":{expressions}{outputs}}}"#
        )
    };
    let filtered =
        r#"[{"id":"a","metric":"A","filter":"f1"},{"id":"b","metric":"B","filter":"f1"}]"#;
    let e = r#"[{"id":"e","expr":"a + b","join":{"operator":"intersection"}}]"#;
    let alias = r#","outputs":[{"id":"e","alias":"A plus B"}]"#;
    let has = |text: &str, parts: &[&str]| {
        for p in parts {
            assert!(text.contains(p), "{p} not in {text}");
        }
    };
    let e_rows = [
        "\"dps\":[[1431561600000,12.0,18.0]",
        "[1431561660000,14.0,20.0]",
        "[1431561720000,16.0,22.0]",
        "\"firstTimestamp\":1431561600000",
        "\"index\":1",
        "\"metrics\":[\"A\",\"B\"]",
        "\"index\":2",
    ];

    let srv = server();
    one_extra_same_e(&srv);
    // oneExpressionWithOutputAlias
    let (s, t) = exp(&srv, &query(filtered, e, alias));
    assert_eq!(s, 200, "{t}");
    has(&t, &["\"alias\":\"A plus B\""]);
    has(&t, &e_rows);
    // oneExpressionDefaultOutput
    let (s, t) = exp(&srv, &query(filtered, e, ""));
    assert_eq!(s, 200, "{t}");
    has(&t, &["\"id\":\"e\""]);
    has(&t, &e_rows);
    // oneExpressionOutputAndBAlso
    let (s, t) = exp(
        &srv,
        &query(
            filtered,
            e,
            r#","outputs":[{"id":"e","alias":"A plus B"},{"id":"a"},{"id":"b"}]"#,
        ),
    );
    assert_eq!(s, 200, "{t}");
    has(&t, &e_rows);
    has(
        &t,
        &[
            "\"id\":\"a\"",
            "\"dps\":[[1431561600000,1.0,4.0]",
            "\"metrics\":[\"A\"]",
            "\"id\":\"b\"",
            "\"dps\":[[1431561600000,11.0,14.0,17.0]",
            "\"metrics\":[\"B\"]",
        ],
    );
    // oneExpressionNoFilter
    let (s, t) = exp(
        &srv,
        &query(
            r#"[{"id":"a","metric":"A"},{"id":"b","metric":"B"}]"#,
            e,
            alias,
        ),
    );
    assert_eq!(s, 200, "{t}");
    has(
        &t,
        &[
            "\"dps\":[[1431561600000,47.0]",
            "[1431561660000,52.0]",
            "[1431561720000,57.0]",
            "\"metrics\":[\"A\",\"B\"]",
        ],
    );
    // twoExpressionsDefaultOutput
    let (s, t) = exp(
        &srv,
        &query(
            filtered,
            r#"[{"id":"e","expr":"a + b","join":{"operator":"intersection"}},
                {"id":"e2","expr":"a * b","join":{"operator":"intersection"}}]"#,
            "",
        ),
    );
    assert_eq!(s, 200, "{t}");
    has(&t, &e_rows);
    has(
        &t,
        &[
            "\"id\":\"e2\"",
            "\"dps\":[[1431561600000,11.0,56.0]",
            "[1431561660000,24.0,75.0]",
            "[1431561720000,39.0,96.0]",
        ],
    );

    // oneExpressionDefaultFill: gaps are 0 (the TimeSyncedIterator's fill).
    let srv = server();
    put(
        &srv,
        "put A 1431561600 1 D=D E=E\nput A 1431561720 3 D=D E=E\n\
         put A 1431561600 4 D=F E=E\nput A 1431561660 5 D=F E=E\n\
         put A 1431561660 8 D=G E=E\nput A 1431561720 9 D=G E=E\n\
         put B 1431561720 13 D=D E=E\nput B 1431561660 15 D=F E=E\nput B 1431561720 19 D=G E=E\n",
    );
    let (s, t) = exp(&srv, &query(filtered, e, alias));
    assert_eq!(s, 200, "{t}");
    has(
        &t,
        &[
            "\"alias\":\"A plus B\"",
            "\"dps\":[[1431561600000,1.0,4.0,0.0]",
            "[1431561660000,0.0,20.0,8.0]",
            "[1431561720000,16.0,0.0,28.0]",
            "\"firstTimestamp\":1431561600000",
            "\"metrics\":[\"A\",\"B\"]",
            "\"index\":3",
        ],
    );
}

/// OpenTSDB's `TestExpressionIterator` cases (iterator level there; here
/// the same inputs and numbers through the endpoint).
#[test]
fn opentsdb_expression_iterator_tests() {
    let query = |expr: &str, op: &str, fill: &str| {
        format!(
            r#"{{"time":{{"start":"1431561600","aggregator":"sum"}},
            "filters":[{{"id":"f1","tags":[{{"type":"wildcard","tagk":"D","filter":"*","groupBy":true}}]}}],
            "metrics":[{{"id":"a","metric":"A","filter":"f1"{fill}}},{{"id":"b","metric":"B","filter":"f1"{fill}}}],
            "expressions":[{{"id":"ei","expr":"{expr}","join":{{"operator":"{op}","includeAggTags":false}}}}]}}"#
        )
    };
    let dps = |srv: &TestServer, body: &str| {
        let (s, t) = exp(srv, body);
        assert_eq!(s, 200, "{t}");
        let v: serde_json::Value = serde_json::from_str(&t).unwrap();
        v["outputs"][0]["dps"].clone()
    };
    let t = |m: u64| 1431561600000 + m * 60000;
    let srv = server();
    put(
        &srv,
        "put A 1431561600 1 D=D E=E\nput A 1431561660 2 D=D E=E\nput A 1431561720 3 D=D E=E\n\
         put A 1431561600 4 D=F E=E\nput A 1431561660 5 D=F E=E\nput A 1431561720 6 D=F E=E\n\
         put B 1431561600 11 D=D E=E\nput B 1431561660 12 D=D E=E\nput B 1431561720 13 D=D E=E\n\
         put B 1431561600 14 D=F E=E\nput B 1431561660 15 D=F E=E\nput B 1431561720 16 D=F E=E\n\
         put B 1431561600 17 D=G E=E\nput B 1431561660 18 D=G E=E\nput B 1431561720 19 D=G E=E\n",
    );
    // aDivideByZeroWithTwoSeries: "Jexl apparently happily allows this".
    assert_eq!(
        dps(&srv, &query("a / 0", "intersection", "")),
        serde_json::json!([[t(0), 0.0, 0.0], [t(1), 0.0, 0.0], [t(2), 0.0, 0.0]])
    );
    // doubleVariableAndPrecedence
    assert_eq!(
        dps(&srv, &query("a + b * b", "intersection", "")),
        serde_json::json!([
            [t(0), 122.0, 200.0],
            [t(1), 146.0, 230.0],
            [t(2), 172.0, 262.0]
        ])
    );
    // unionOneExtraSeries: G has no `a`, so it is b alone.
    assert_eq!(
        dps(&srv, &query("a + b", "union", "")),
        serde_json::json!([
            [t(0), 12.0, 18.0, 17.0],
            [t(1), 14.0, 20.0, 18.0],
            [t(2), 16.0, 22.0, 19.0]
        ])
    );

    // aPlusBMissingPointsFillInfectiousNaN (threeSameEGaps).
    let srv = server();
    put(
        &srv,
        "put A 1431561600 1 D=D E=E\nput A 1431561720 3 D=D E=E\n\
         put A 1431561600 4 D=F E=E\nput A 1431561660 5 D=F E=E\n\
         put A 1431561660 8 D=G E=E\nput A 1431561720 9 D=G E=E\n\
         put B 1431561720 13 D=D E=E\nput B 1431561660 15 D=F E=E\nput B 1431561720 19 D=G E=E\n",
    );
    assert_eq!(
        dps(
            &srv,
            &query("a + b", "intersection", r#","fillPolicy":{"policy":"nan"}"#)
        ),
        serde_json::json!([
            [t(0), "NaN", "NaN", "NaN"],
            [t(1), "NaN", 20.0, "NaN"],
            [t(2), 16.0, "NaN", 28.0]
        ])
    );

    // aPlusBResultsOffsetDefaultFill / unionOffset (timeOffset): a and b
    // never share a timestamp; the other side is 0.
    let srv = server();
    put(
        &srv,
        "put A 1431561600 1 D=D E=E\nput A 1431561660 2 D=D E=E\n\
         put A 1431561600 4 D=F E=E\nput A 1431561660 5 D=F E=E\n\
         put B 1431561720 13 D=D E=E\nput B 1431561780 14 D=D E=E\n\
         put B 1431561720 16 D=F E=E\nput B 1431561780 17 D=F E=E\n",
    );
    let want = serde_json::json!([
        [t(0), 1.0, 4.0],
        [t(1), 2.0, 5.0],
        [t(2), 13.0, 16.0],
        [t(3), 14.0, 17.0]
    ]);
    assert_eq!(dps(&srv, &query("a + b", "intersection", "")), want);
    assert_eq!(dps(&srv, &query("a + b", "union", "")), want);
}

/// Random series with gaps and random arithmetic over them: the endpoint
/// gives the numbers of a plain reference (steps at every timestamp of
/// the series the expression reads, a gap read as 0, division by zero 0).
#[test]
fn random_series_and_expressions_match_a_reference() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    #[derive(Debug, Clone)]
    enum E {
        A,
        B,
        Lit(f64),
        Bin(char, Box<E>, Box<E>),
    }
    impl E {
        fn text(&self) -> String {
            match self {
                E::A => "a".into(),
                E::B => "b".into(),
                E::Lit(v) => format!("{v:.1}"),
                E::Bin(op, l, r) => format!("({} {op} {})", l.text(), r.text()),
            }
        }
        fn eval(&self, a: f64, b: f64) -> f64 {
            match self {
                E::A => a,
                E::B => b,
                E::Lit(v) => *v,
                E::Bin(op, l, r) => {
                    let (x, y) = (l.eval(a, b), r.eval(a, b));
                    match op {
                        '+' => x + y,
                        '-' => x - y,
                        '*' => x * y,
                        _ if y == 0.0 => 0.0,
                        _ => x / y,
                    }
                }
            }
        }
    }
    let leaf = prop_oneof![
        Just(E::A),
        Just(E::B),
        (0i32..10).prop_map(|v| E::Lit(v as f64 + 0.5))
    ];
    let expr = leaf
        .prop_recursive(4, 16, 2, |inner| {
            (
                prop::sample::select(vec!['+', '-', '*', '/']),
                inner.clone(),
                inner,
            )
                .prop_map(|(op, l, r)| E::Bin(op, Box::new(l), Box::new(r)))
        })
        // 2.4.1 refuses an expression without variables.
        .prop_filter("reads a or b", |e| e.text().contains(['a', 'b']));
    let series = || prop::collection::vec(prop::option::of(-20i32..20), 1..8);
    let srv = server();
    let case = std::cell::Cell::new(0);
    let mut runner = TestRunner::new(Config::with_cases(40));
    runner
        .run(&(series(), series(), expr), |(a, b, e)| {
            case.set(case.get() + 1);
            let n = case.get();
            let mut lines = String::new();
            // The first point of each is always there, so both metrics exist.
            for (name, pts) in [("a", &a), ("b", &b)] {
                for (i, v) in pts.iter().enumerate() {
                    if let Some(v) = v.or(if i == 0 { Some(1) } else { None }) {
                        lines.push_str(&format!(
                            "put r{n}.{name} {} {v} host=x\n",
                            H + i as u64 * 10
                        ));
                    }
                }
            }
            put(&srv, &lines);
            let body = format!(
                r#"{{{},"metrics":[{{"id":"a","metric":"r{n}.a"}},{{"id":"b","metric":"r{n}.b"}}],
                "expressions":[{{"id":"e","expr":"{}"}}]}}"#,
                time(),
                e.text()
            );
            let (s, t) = exp(&srv, &body);
            prop_assert_eq!(s, 200, "{}", t);
            let v: serde_json::Value = serde_json::from_str(&t).unwrap();
            let value = |pts: &Vec<Option<i32>>, i: usize| {
                pts.get(i)
                    .copied()
                    .flatten()
                    .or(if i == 0 { Some(1) } else { None })
                    .map_or(0.0, |v| v as f64)
            };
            let present = |pts: &Vec<Option<i32>>, i: usize| {
                i == 0 || pts.get(i).copied().flatten().is_some()
            };
            let mut want = Vec::new();
            for i in 0..a.len().max(b.len()) {
                // Only the variables the expression reads are its inputs.
                let (uses_a, uses_b) = (e.text().contains('a'), e.text().contains('b'));
                if (uses_a && present(&a, i)) || (uses_b && present(&b, i)) {
                    let r = e.eval(value(&a, i), value(&b, i));
                    let r = if r.is_nan() {
                        serde_json::json!("NaN")
                    } else if r.is_infinite() {
                        serde_json::json!(if r > 0.0 { "Infinity" } else { "-Infinity" })
                    } else {
                        serde_json::json!(r)
                    };
                    want.push(serde_json::json!([(H + i as u64 * 10) * 1000, r]));
                }
            }
            // serde_json reads decimals to within an ulp: compare closely.
            let close =
                |x: &serde_json::Value, y: &serde_json::Value| match (x.as_f64(), y.as_f64()) {
                    (Some(p), Some(q)) => (p - q).abs() <= 1e-12 * p.abs().max(1.0),
                    _ => x == y,
                };
            let got = v["outputs"][0]["dps"].as_array().unwrap();
            prop_assert_eq!(got.len(), want.len(), "{} {}", e.text(), t);
            for (g, w) in got.iter().zip(&want) {
                let (g, w) = (g.as_array().unwrap(), w.as_array().unwrap());
                prop_assert!(
                    g.len() == w.len() && g.iter().zip(w).all(|(x, y)| close(x, y)),
                    "{}: {:?} vs {:?}",
                    e.text(),
                    g,
                    w
                );
            }
            Ok(())
        })
        .unwrap();
}

/// `aPlusBOneAggedOneTaggedUseQueryTagsWoutQueryTags`: A's two series sum
/// into one with no common tags, B has one tagged series. Joined on the
/// query's tag keys (none) without aggregated tags, they meet; joined on
/// all tags, they do not.
#[test]
fn join_on_query_tags_without_aggregated_tags() {
    let srv = server();
    put(
        &srv,
        "put A 1431561600 1 D=D E=E\nput A 1431561660 2 D=D E=E\nput A 1431561720 3 D=D E=E\n\
         put A 1431561600 1 D=E E=F\nput A 1431561660 2 D=E E=F\nput A 1431561720 3 D=E E=F\n\
         put B 1431561600 11 D=D E=E\nput B 1431561660 12 D=D E=E\nput B 1431561720 13 D=D E=E\n",
    );
    let body = |join: &str| {
        format!(
            r#"{{"time":{{"start":"1431561600","aggregator":"sum"}},
            "metrics":[{{"id":"a","metric":"A"}},{{"id":"b","metric":"B"}}],
            "expressions":[{{"id":"ei","expr":"a + b","join":{join}}}]}}"#
        )
    };
    let (s, t) = exp(
        &srv,
        &body(r#"{"operator":"intersection","useQueryTags":true,"includeAggTags":false}"#),
    );
    assert_eq!(s, 200, "{t}");
    assert!(
        t.contains(
            r#""dps":[[1431561600000,13.0],[1431561660000,16.0],[1431561720000,19.0]],"dpsMeta":{"firstTimestamp":1431561600000,"lastTimestamp":1431561720000,"setCount":3,"series":1}"#
        ),
        "{t}"
    );
    // The first input (a) lends its (empty) common tags; both aggregated
    // tag keys are kept.
    assert!(
        t.contains(r#""metrics":["A","B"],"commonTags":{},"aggregatedTags":["D","E"]"#),
        "{t}"
    );
    let (s, t) = exp(&srv, &body(r#"{"operator":"intersection"}"#));
    assert_eq!(s, 400, "{t}");
    assert!(t.contains("No intersections found"), "{t}");
}
