//! Random requests against a running TSD: whatever the endpoint, method,
//! query string or body, the server answers with a status (never a
//! dropped connection from a panic) and keeps serving.

use crate::common;

use common::{TestServer, http, telnet};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const PATHS: &[&str] = &[
    "/api/put",
    "/api/put?details",
    "/api/histogram",
    "/api/histogram?details",
    "/api/histogram?summary&sync",
    "/api/query?m=sum:1m-sum:percentiles[50,99]:show-histogram-buckets:sys.lat",
    "/api/rollup",
    "/api/rollup?details",
    "/api/rollup?sync&summary",
    "/api/query",
    "/api/query/last",
    "/api/query/gexp",
    "/api/query/exp",
    "/api/suggest",
    "/api/search/lookup",
    "/api/uid/assign",
    "/api/uid/rename",
    "/api/uid/uidmeta",
    "/api/uid/tsmeta",
    "/api/annotation",
    "/api/annotation/bulk",
    "/api/stats",
    "/api/stats/query",
    "/api/config/filters",
    "/api/v1/query",
    "/api/serializers",
    "/api/search/tsmeta",
    "/api/search/tsuids",
    "/api/search/uidmeta",
    "/api/search/annotation",
    "/api/query?jsonp=cb",
    "/api/version?serializer=xml",
    "/suggest",
    "/metrics",
    "/api/tree",
    "/api/tree/rule",
    "/api/tree/rules",
    "/api/tree/branch",
    "/api/tree/test",
    "/api/tree/collisions",
    "/api/tree/notmatched",
    "/api/tree/other",
    "/q?ascii",
    "/q?json",
    "/q?png&wxh=200x150",
    "/q?png&wxh=200x150&smooth=acsplines&key=out%20left%20box",
    "/q?png&wxh=200x150&smooth=bins&key=out%20bottom%20center%20horiz",
    "/q?json&smooth=zsort",
    "/q",
    "/logs",
    "/logs?json",
    "/",
    "/s/app.js",
    "/s/",
    "/favicon.ico",
];

fn query_string() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("start"),
        Just("end"),
        Just("m"),
        Just("tsuid"),
        Just("type"),
        Just("q"),
        Just("max"),
        Just("uid"),
        Just("tsuids"),
        Just("timeseries"),
        Just("metric"),
        Just("tagv"),
        Just("name"),
        Just("start_time"),
        Just("limit"),
        Just("back_scan"),
        Just("create"),
        Just("method_override"),
        Just("exp"),
        Just("treeid"),
        Just("branch"),
        Just("level"),
        Just("order"),
        Just("definition"),
        Just("regex"),
        Just("separator"),
        Just("regex_group_idx"),
        // /q's own.
        Just("wxh"),
        Just("o"),
        Just("tz"),
        Just("nocache"),
        Just("yrange"),
        Just("y2range"),
        Just("ylabel"),
        Just("yformat"),
        Just("xformat"),
        Just("ylog"),
        Just("key"),
        Just("nokey"),
        Just("title"),
        Just("bgcolor"),
        Just("fgcolor"),
        Just("smooth"),
        Just("style"),
    ];
    let value = prop_oneof![
        Just("1356998400".to_string()),
        Just("1h-ago".to_string()),
        Just("sum:sys.cpu%7Bhost=*%7D".to_string()),
        Just("sum:rate:1m-avg-nan:sys.cpu".to_string()),
        // Cacheable (a fixed interval): repeats go through the cache.
        Just("avg:1m-avg:sys.cpu%7Bhost=*%7D".to_string()),
        Just("000001000001000001".to_string()),
        Just("scale(sum:sys.cpu%7Bhost=*%7D,2)".to_string()),
        Just("sumSeries(sum:sys.cpu,alias(sum:sys.cpu,@host))".to_string()),
        Just("highestMax(movingAverage(sum:sys.cpu,'1min'),1)".to_string()),
        "[a-zA-Z(),:'@*0-9%{}=.-]{0,24}".prop_map(String::from),
        Just("metrics".to_string()),
        Just("true".to_string()),
        Just("delete".to_string()),
        Just("%5B0:10%5D".to_string()),
        Just("%5B-5:%5D".to_string()),
        Just("x0000FF".to_string()),
        Just("%2525g".to_string()),
        Just("100x100".to_string()),
        Just("40000x100".to_string()),
        Just("axis%20x1y2".to_string()),
        Just("csplines".to_string()),
        Just("bezier".to_string()),
        Just("points".to_string()),
        Just("Europe/Paris".to_string()),
        Just("2013/01/01-00:00:00".to_string()),
        "[a-zA-Z0-9%{}=*:.,|-]{0,12}".prop_map(String::from),
    ];
    proptest::collection::vec((key, value), 0..5).prop_map(|kv| {
        kv.into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&")
    })
}

fn body() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just(
            r#"{"metric":"sys.cpu","timestamp":1356998400,"value":1,"tags":{"host":"a"}}"#
                .to_string()
        ),
        Just(
            r#"{"start":1356998400,"queries":[{"aggregator":"sum","metric":"sys.cpu"}]}"#
                .to_string()
        ),
        Just(
            r#"{"start":"2h-ago","noCache":"yes","queries":[{"aggregator":"sum","metric":"sys.cpu","downsample":"1m-avg"}]}"#
                .to_string()
        ),
        Just(r#"[{"startTime":1356998400,"tsuid":"000001000001000001"}]"#.to_string()),
        // /api/histogram: both forms, around random bucket keys, counts,
        // ids and base64 text.
        (
            "[0-9a-z,.\\-]{0,12}",
            "-?[0-9]{1,20}",
            "-?[0-9]{1,4}",
            "[A-Za-z0-9+/=]{0,40}",
        )
            .prop_map(|(key, count, id, b64)| format!(
                r#"[{{"metric":"sys.lat","timestamp":1356998400,"tags":{{"host":"a"}},"buckets":{{{}:{count}}},"underflow":{count},"overflow":"{count}"}},
                   {{"metric":"sys.lat","timestamp":"1356998460","tags":{{"host":"a"}},"id":{id},"value":"{b64}"}}]"#,
                serde_json::to_string(&key).unwrap()
            )),
        Just(
            r#"{"start":1356998400,"queries":[{"aggregator":"none","metric":"sys.lat","percentiles":[1,50,100],"showHistogramBuckets":"true","downsample":"0all-sum"}]}"#
                .to_string()
        ),
        Just(r#"{"metric":["a b","c"],"tagk":[""]}"#.to_string()),
        Just(r#"{"treeId":1,"name":"t","enabled":true,"strictMatch":"true"}"#.to_string()),
        Just(
            r#"[{"treeId":1,"level":0,"order":0,"type":"TAGK","field":"host","regex":"^(w)"}]"#
                .to_string()
        ),
        Just(r#"{"treeId":1,"level":"1","type":"metric","separator":"\\."}"#.to_string()),
        Just(r#"{"treeId":1,"tsuids":["000001000001000001","zz"]}"#.to_string()),
        // /api/query/exp: a valid request around a random expression, and
        // random joins and fill policies.
        (
            "[a-c0-9.+*/%()<>=!&|?:~^; -]{0,24}",
            prop_oneof![Just("union"), Just("intersection"), Just("x")],
            prop_oneof![Just("nan"), Just("zero"), Just("scalar"), Just("null"), Just("?")],
        )
            .prop_map(|(expr, op, fill)| format!(
                r#"{{"time":{{"start":1356998400,"aggregator":"sum","downsampler":{{"interval":"1m","aggregator":"avg"}}}},
                "filters":[{{"id":"f","tags":[{{"type":"wildcard","tagk":"host","filter":"*","groupBy":true}}]}}],
                "metrics":[{{"id":"a","metric":"sys.cpu","filter":"f","fillPolicy":{{"policy":"{fill}","value":1}}}},
                           {{"id":"b","metric":"sys.cpu"}},{{"id":"c","metric":"sys.cpu","filter":"f"}}],
                "expressions":[{{"id":"e","expr":{},"join":{{"operator":"{op}","useQueryTags":true}}}},
                               {{"id":"n","expr":"e * a"}}],"outputs":[{{"id":"n"}},{{"id":"a"}},{{"id":"e"}}]}}"#,
                serde_json::to_string(&expr).unwrap()
            )),
        // /api/rollup: random intervals, aggregators and group-bys.
        (
            prop_oneof![Just("1h"), Just("1m"), Just("13m"), Just(""), Just("1d"), Just("-")],
            prop_oneof![Just("sum"), Just("AVG"), Just("count"), Just("nosuch"), Just("")],
            proptest::option::of(prop_oneof![Just("sum"), Just("max"), Just(""), Just("dev")]),
            prop_oneof![Just("1356998400"), Just("1356998400123"), Just("-5"), Just("\"x\"")],
        )
            .prop_map(|(interval, agg, group_by, ts)| format!(
                r#"[{{"metric":"sys.cpu","timestamp":{ts},"value":"1.5","interval":"{interval}","aggregator":"{agg}",{}"tags":{{"host":"a"}}}}]"#,
                group_by.map(|g| format!(r#""groupByAggregator":"{g}","#)).unwrap_or_default()
            )),
        "[ -~]{0,64}".prop_map(String::from),
        "[{}\\[\\]\":,0-9a-z]{0,64}".prop_map(String::from),
    ]
}

#[test]
fn random_requests_always_get_an_answer() {
    let srv = TestServer::start(&[
        ("tsd.core.auto_create_metrics", "true"),
        ("tsd.http.query.allow_delete", "true"),
        ("tsd.core.meta.enable_realtime_ts", "true"),
        ("tsd.core.meta.enable_tsuid_tracking", "true"),
        ("tsd.core.tree.enable_processing", "true"),
        (
            "tsd.core.histograms.config",
            r#"{"net.opentsdb.core.SimpleHistogramDecoder": 0}"#,
        ),
        ("tsd.rollups.enable", "true"),
        ("tsd.rollups.auto", "true"),
        ("tsd.rollups.config", crate::tsd_rollup::CONFIG),
    ]);
    assert_eq!(
        telnet(
            srv.addr,
            b"put sys.cpu 1356998400 1 host=a\nput sys.cpu 1356998460 2.5 host=b\n\
              histogram sys.lat 1356998400 u=1:o=2:0,1=3:1,5=4 host=a\n\
              rollup 1h-sum sys.cpu 1356998400 7 host=a\n"
        ),
        ""
    );
    let cases = std::env::var("TSD_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let mut runner = TestRunner::new(Config::with_cases(cases));
    let method = prop_oneof![
        Just("GET"),
        Just("POST"),
        Just("PUT"),
        Just("DELETE"),
        Just("OPTIONS")
    ];
    let strategy = (
        method,
        proptest::sample::select(PATHS),
        query_string(),
        body(),
    );
    runner
        .run(&strategy, |(method, path, qs, body)| {
            let sep = if path.contains('?') { '&' } else { '?' };
            let target = if qs.is_empty() {
                path.to_string()
            } else {
                format!("{path}{sep}{qs}")
            };
            let r = http(
                srv.addr,
                method,
                &target,
                &[("Content-Type", "application/json")],
                body.as_bytes(),
            );
            prop_assert!(
                (200..600).contains(&r.status),
                "{method} {target}: status {}",
                r.status
            );
            // The tree and histogram endpoints answer every bad request
            // as the client's error.
            if path.starts_with("/api/tree") || path.starts_with("/api/histogram") {
                prop_assert!(
                    r.status < 500,
                    "{method} {target} {body}: status {} {}",
                    r.status,
                    r.text()
                );
            }
            Ok(())
        })
        .unwrap();
    // Random telnet rollup lines: each gets no answer or one error line.
    let words = prop_oneof![
        Just("1h-sum"),
        Just("sum"),
        Just("1h-sum:sum"),
        Just("::"),
        Just(":"),
        Just("-"),
        Just("1h-"),
        Just("sys.cpu"),
        Just("1356998400"),
        Just("1.5"),
        Just("x"),
        Just(""),
        Just("host=a"),
        Just("_aggregate=SUM"),
        Just("a=b=c"),
    ];
    TestRunner::new(Config::with_cases(cases))
        .run(&proptest::collection::vec(words, 0..8), |w| {
            let line = format!("rollup {}\n", w.join(" "));
            let out = telnet(srv.addr, line.as_bytes());
            prop_assert!(
                out.is_empty() || (out.starts_with("rollup: ") && out.matches('\n').count() == 1),
                "{line:?}: {out:?}"
            );
            Ok(())
        })
        .unwrap();
    // Still serving both protocols.
    assert_eq!(http(srv.addr, "GET", "/api/version", &[], b"").status, 200);
    assert!(telnet(srv.addr, b"version\n").starts_with("net.opentsdb.tools BuildData"));
}

/// Random telnet `histogram` lines: every one gets 2.4.1's answer (an
/// error line or nothing), never a dropped connection, and the TSD keeps
/// serving.
#[test]
fn random_histogram_lines_always_get_an_answer() {
    let srv = TestServer::start(&[
        ("tsd.core.auto_create_metrics", "true"),
        (
            "tsd.core.histograms.config",
            r#"{"net.opentsdb.core.SimpleHistogramDecoder": 7}"#,
        ),
    ]);
    let cases = std::env::var("TSD_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let mut runner = TestRunner::new(Config::with_cases(cases));
    let word = prop_oneof![
        Just("7".to_string()),
        Just("u=1:o=2:0,1=3".to_string()),
        Just("host=a".to_string()),
        Just("1356998400".to_string()),
        Just("AAEAAAAAP4AAAAMBAg==".to_string()),
        "[0-9a-zA-Z=:,.+/\\-]{0,16}".prop_map(String::from),
    ];
    runner
        .run(&proptest::collection::vec(word, 0..7), |words| {
            let line = format!("histogram {}\nversion\n", words.join(" "));
            let out = telnet(srv.addr, line.as_bytes());
            // The answer to the line (if any) comes before `version`'s.
            prop_assert!(
                out.contains("net.opentsdb.tools BuildData"),
                "{line:?}: {out:?}"
            );
            let first = out.lines().next().unwrap_or("");
            prop_assert!(
                first.starts_with("histogram: ") || first.starts_with("net.opentsdb.tools"),
                "{line:?}: {out:?}"
            );
            Ok(())
        })
        .unwrap();
    assert_eq!(http(srv.addr, "GET", "/api/version", &[], b"").status, 200);
}
