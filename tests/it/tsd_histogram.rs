//! Histograms (OpenTSDB 2.4): `/api/histogram`, telnet `histogram` and
//! `percentiles` queries, reproducing OpenTSDB 2.4.1's
//! TestHistogramDataPointRpc and TestTsdbQueryHistogramQueries (inputs,
//! stored bytes, answers and error texts).

use crate::common::server::{TestServer, err, json_http, telnet};

const CONFIG: (&str, &str) = (
    "tsd.core.histograms.config",
    r#"{"net.opentsdb.core.SimpleHistogramDecoder": 42}"#,
);
const AUTO_METRIC: (&str, &str) = ("tsd.core.auto_create_metrics", "true");

/// TestHistogramDataPointRpc's `test_histo` as stored: codec id 42, two
/// buckets (0-1: 42, 1-5: 24), underflow 0, overflow 1.
const TEST_HISTO: &[u8] = &[
    42, 0, 2, 0, 0, 0, 0, 0x3F, 0x80, 0, 0, 42, 0x3F, 0x80, 0, 0, 0x40, 0xA0, 0, 0, 24, 0, 1,
];
/// Base64 of its bytes without the id (`histogram(false)`).
const TEST_B64: &str = "AAIAAAAAP4AAACo/gAAAQKAAABgAAQ==";

fn start() -> TestServer {
    TestServer::start(&[CONFIG, AUTO_METRIC])
}

/// The cell at `qualifier` of the row of sys.cpu.user host=web01 at
/// 1356998400 (UIDs 1 in a fresh store).
fn cell(srv: &TestServer, qualifier: &[u8]) -> Option<Vec<u8>> {
    let key = [0, 0, 1, 0x50, 0xE2, 0x27, 0x00, 0, 0, 1, 0, 0, 1];
    let row = srv.state.db().store().get_row(&key).unwrap()?;
    row.cells
        .iter()
        .find(|c| c.qualifier == qualifier)
        .map(|c| c.value.clone())
}

fn post(srv: &TestServer, query: &str, body: &str) -> (u16, String) {
    let r = json_http(srv.addr, "POST", &format!("/api/histogram{query}"), body);
    (r.status, r.text())
}

fn binary_point(ts: u64, value: &str) -> String {
    format!(
        r#"{{"metric":"sys.cpu.user","timestamp":{ts},"id":42,"value":"{value}","tags":{{"host":"web01"}}}}"#
    )
}

#[test]
fn base64_of_the_test_histogram() {
    // Sanity of the constants: the base64 decodes to TEST_HISTO[1..].
    let srv = start();
    let line = format!("histogram sys.cpu.user 1356998400 42 {TEST_B64} host=web01\n");
    assert_eq!(telnet(srv.addr, line.as_bytes()), "");
    assert_eq!(cell(&srv, &[6, 0, 0]).as_deref(), Some(TEST_HISTO));
}

#[test]
fn disabled_without_the_configuration() {
    let srv = TestServer::start(&[AUTO_METRIC]);
    let disabled = "Histogram storage has not been enabled. Check the 'tsd.core.histograms.config' configuration.";
    let (status, body) = post(&srv, "", &binary_point(1356998400, TEST_B64));
    assert_eq!((status, body), (503, err(503, disabled)));
    // Checked before the method.
    let r = json_http(srv.addr, "GET", "/api/histogram", "");
    assert_eq!(r.status, 503);
    let line = format!("histogram sys.cpu.user 1356998400 42 {TEST_B64} host=web01\n");
    assert_eq!(
        telnet(srv.addr, line.as_bytes()),
        format!("histogram: illegal argument: {disabled}\n")
    );
    assert_eq!(cell(&srv, &[6, 0, 0]), None);
}

#[test]
fn telnet_bucket_list_and_binary() {
    let srv = start();
    assert_eq!(
        telnet(
            srv.addr,
            b"histogram sys.cpu.user 1356998400 u=0:o=1:0,1=42:1,5=24 host=web01\n"
        ),
        ""
    );
    assert_eq!(cell(&srv, &[6, 0, 0]).as_deref(), Some(TEST_HISTO));
    let line = format!("histogram sys.cpu.user 1356998460 42 {TEST_B64} host=web01\n");
    assert_eq!(telnet(srv.addr, line.as_bytes()), "");
    assert_eq!(cell(&srv, &[6, 0, 0x3C]).as_deref(), Some(TEST_HISTO));
    // Milliseconds: a 4-byte offset after the prefix.
    let line = format!("histogram sys.cpu.user 1356998400.250 42 {TEST_B64} host=web01\n");
    assert_eq!(telnet(srv.addr, line.as_bytes()), "");
    assert_eq!(cell(&srv, &[6, 0, 0, 0, 250]).as_deref(), Some(TEST_HISTO));
}

#[test]
fn telnet_errors() {
    let srv = TestServer::start(&[CONFIG, AUTO_METRIC, ("tsd.core.auto_create_tagks", "false")]);
    let cases: &[(String, &str)] = &[
        (
            format!(
                "histogram sys.cpu.user 1356998400 42 {} host=web01",
                &TEST_B64[..4]
            ),
            "histogram: HBase error: Byte array shorter than 6 bytes detected: [0, 2, 0]\n",
        ),
        (
            format!(
                "histogram sys.cpu.user 1356998400 42 {} host=web01",
                &TEST_B64[..8]
            ),
            "histogram: HBase error: Buffer underflow.\n",
        ),
        (
            "histogram sys.cpu.user 1356998400 42".into(),
            "histogram: illegal argument: not enough arguments (need least 5, got 3)\n",
        ),
        (
            format!("histogram sys.cpu.user 1356998400 42 {TEST_B64} "),
            "histogram: HBase error: Need at least one tag (metric=sys.cpu.user, tags={})\n",
        ),
        (
            format!("histogram sys.cpu.user 1356998400 42 {TEST_B64} nsun=web01"),
            "histogram: HBase error: No such name for 'tagk': 'nsun'\n",
        ),
        (
            format!("histogram sys.cpu.user 1356998400 43 {TEST_B64} host=web01"),
            "histogram: HBase error: No codec found mapped to ID 43\n",
        ),
        (
            format!("histogram sys.cpu.user 0 42 {TEST_B64} host=web01"),
            "histogram: illegal argument: invalid timestamp: 0\n",
        ),
        (
            format!("histogram sys.cpu.user 13x 42 {TEST_B64} host=web01"),
            "histogram: invalid value: Invalid character 'x' in 13x\n",
        ),
        (
            format!("histogram sys.cpu.user 1356998400 42 {TEST_B64} host"),
            "histogram: illegal argument: invalid tag: host\n",
        ),
        // A malformed bucket list: 2.4.1's errback fails again while
        // handing the line on, so nothing is ever written back.
        (
            "histogram sys.cpu.user 1356998400 u=0:o:0,1=2 host=web01".into(),
            "",
        ),
    ];
    for (line, want) in cases {
        assert_eq!(
            telnet(srv.addr, format!("{line}\n").as_bytes()),
            *want,
            "{line}"
        );
    }
    assert_eq!(cell(&srv, &[6, 0, 0]), None);
    // Storage-side errors are only written back with return_errors.
    let quiet = TestServer::start(&[
        CONFIG,
        AUTO_METRIC,
        ("tsd.rpc.telnet.return_errors", "false"),
    ]);
    let line = format!(
        "histogram sys.cpu.user 1356998400 42 {} host=web01\n",
        &TEST_B64[..4]
    );
    assert_eq!(telnet(quiet.addr, line.as_bytes()), "");
}

#[test]
fn http_single_and_two_points() {
    let srv = start();
    let (status, body) = post(
        &srv,
        "",
        r#"{"metric":"sys.cpu.user","timestamp":1356998400,"overflow":1,"buckets":{"0,1":42,"1,5":24},"tags":{"host":"web01"}}"#,
    );
    assert_eq!((status, body.as_str()), (204, ""));
    assert_eq!(cell(&srv, &[6, 0, 0]).as_deref(), Some(TEST_HISTO));
    let two = format!(
        "[{},{}]",
        binary_point(1356998400, TEST_B64),
        binary_point(1356998460, TEST_B64)
    );
    assert_eq!(post(&srv, "", &two).0, 204);
    assert_eq!(cell(&srv, &[6, 0, 0x3C]).as_deref(), Some(TEST_HISTO));
    assert_eq!(
        post(&srv, "?summary", &binary_point(1356998520, TEST_B64)),
        (200, r#"{"failed":0,"success":1}"#.into())
    );
    assert_eq!(
        post(&srv, "?sync", &binary_point(1356998580, TEST_B64)),
        (204, String::new())
    );
    // Fields coerced as Jackson does: numbers as strings and back.
    let (status, body) = post(
        &srv,
        "",
        r#"{"metric":"sys.cpu.user","timestamp":"1356998640","overflow":"1","buckets":{"0,1":"42","1,5":24,"5,6":null},"tags":{"host":"web01"}}"#,
    );
    assert_eq!((status, body.as_str()), (204, ""));
    let mut with_empty = TEST_HISTO.to_vec();
    with_empty[2] = 3;
    with_empty.splice(21..21, [0x40, 0xA0, 0, 0, 0x40, 0xC0, 0, 0, 0]);
    assert_eq!(cell(&srv, &[6, 0, 0xF0]), Some(with_empty));
}

#[test]
fn http_one_good_one_bad() {
    let srv = start();
    let body = format!(
        "[{},{}]",
        binary_point(1356998400, TEST_B64),
        binary_point(1356998460, &TEST_B64[..4])
    );
    let (status, text) = post(&srv, "", &body);
    assert_eq!(status, 400);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&text).unwrap()["error"]["message"],
        "One or more data points had errors"
    );
    assert_eq!(cell(&srv, &[6, 0, 0]).as_deref(), Some(TEST_HISTO));
    assert_eq!(cell(&srv, &[6, 0, 0x3C]), None);
    let (status, text) = post(&srv, "?details", &body);
    assert_eq!(status, 400);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (v["success"].as_i64(), v["failed"].as_i64()),
        (Some(1), Some(1))
    );
    assert_eq!(
        v["errors"][0]["error"],
        "Byte array shorter than 6 bytes detected: [0, 2, 0]"
    );
    assert_eq!(v["errors"][0]["datapoint"]["timestamp"], 1356998460);
}

#[test]
fn http_validation_messages() {
    let srv = TestServer::start(&[CONFIG]);
    let cases = [
        (
            r#"{"timestamp":1356998400,"id":42,"value":"AAAA","tags":{"host":"web01"}}"#,
            "Metric name was empty",
        ),
        (
            r#"{"metric":"m","timestamp":0,"id":42,"value":"AAAA","tags":{"host":"web01"}}"#,
            "Invalid timestamp",
        ),
        (
            r#"{"metric":"m","timestamp":1356998400,"id":42,"value":"AAAA"}"#,
            "Missing tags",
        ),
        (
            r#"{"metric":"m","timestamp":1356998400,"tags":{"host":"web01"}}"#,
            "Histogram buckets cannot be null or empty if 'value' is empty.",
        ),
        (
            r#"{"metric":"m","timestamp":1356998400,"buckets":{},"tags":{"host":"web01"}}"#,
            "Histogram buckets cannot be null or empty if 'value' is empty.",
        ),
        (
            r#"{"metric":"m","timestamp":1356998400,"id":256,"value":"AAAA","tags":{"host":"web01"}}"#,
            "Invalid type. Must be from 0 to 255.",
        ),
        (
            r#"{"metric":"m","timestamp":1356998400,"id":7,"value":"AAAAAAAAAA==","tags":{"host":"web01"}}"#,
            "No codec found mapped to ID 7",
        ),
        (
            r#"{"metric":"m","timestamp":1356998400,"buckets":{"0":1},"tags":{"host":"web01"}}"#,
            "Unable to parse bucket bounds: 0",
        ),
        (
            r#"{"metric":"m","timestamp":1356998400,"buckets":{"a,1":1},"tags":{"host":"web01"}}"#,
            "Unable to parse value to a number",
        ),
        (
            r#"{"metric":"sys.cpu.user","timestamp":1356998400,"buckets":{"0,1":1},"tags":{"host":"web01"}}"#,
            "Unknown metric",
        ),
        (
            r#"{"metric":"sys.cpu.user","timestamp":1356998400,"id":42,"value":"AAIAAAAA","tags":{"host":"web01"}}"#,
            "Unexpected exception",
        ),
    ];
    for (point, want) in cases {
        let (status, text) = post(&srv, "?details", point);
        assert_eq!(status, 400, "{point}: {text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["errors"][0]["error"], want, "{point}");
        assert_eq!(v["failed"], 1, "{point}");
    }
}

#[test]
fn http_envelope_errors() {
    let srv = start();
    let r = json_http(srv.addr, "GET", "/api/histogram", "");
    assert_eq!(r.status, 405);
    assert_eq!(post(&srv, "", "").0, 400);
    assert_eq!(
        post(&srv, "", "[]"),
        (400, err(400, "No datapoints found in content"))
    );
    let (status, text) = post(&srv, "", "{");
    assert_eq!(status, 400);
    assert!(text.contains("Unable to parse the given JSON"), "{text}");
    // Read-only TSDs do not serve it.
    let ro = TestServer::start(&[CONFIG, ("tsd.mode", "ro")]);
    assert_eq!(post(&ro, "", &binary_point(1356998400, TEST_B64)).0, 404);
}

/// TestTsdbQueryHistogramQueries' data (`storeTestHistogramTimeSeriesMs`),
/// with SimpleHistogram in place of the test codec: 300 histograms per
/// host every 500 ms from 1356998400500; web01's i-th holds one count in
/// the bucket (i-1, i+1), web02's the same for 301-i. A percentile of one
/// such histogram is its bucket's midpoint: i (web01), 301-i (web02).
fn store_ms_series(srv: &TestServer) {
    let mut lines = String::new();
    for i in 1..=300u64 {
        let ts = 1356998400000 + 500 * i;
        let ts = format!("{}.{:03}", ts / 1000, ts % 1000);
        lines.push_str(&format!(
            "histogram msg.end2end.latency {ts} {},{}=1 host=web01\n",
            i - 1,
            i + 1
        ));
        let j = 301 - i;
        lines.push_str(&format!(
            "histogram msg.end2end.latency {ts} {},{}=1 host=web02\n",
            j - 1,
            j + 1
        ));
    }
    assert_eq!(telnet(srv.addr, lines.as_bytes()), "");
}

fn query(srv: &TestServer, body: &str) -> (u16, serde_json::Value) {
    let r = json_http(srv.addr, "POST", "/api/query", body);
    let v = serde_json::from_slice(&r.body).unwrap_or(serde_json::Value::Null);
    (r.status, v)
}

fn sub(metric: &str, extra: &str) -> String {
    format!(
        r#"{{"start":1356998400,"end":1357041600,"msResolution":true,"queries":[{{"metric":"{metric}",{extra}}}]}}"#
    )
}

/// (timestamp, value) pairs of one result's `dps`, in time order.
fn dps(r: &serde_json::Value) -> Vec<(i64, f64)> {
    let mut v: Vec<(i64, f64)> = r["dps"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.parse().unwrap(), v.as_f64().unwrap()))
        .collect();
    v.sort_by_key(|p| p.0);
    v
}

#[test]
fn percentiles_of_one_series() {
    let srv = start();
    store_ms_series(&srv);
    // runSingleTsMsSinglePercentile / runSingleTsMsDoulePercentile.
    let (status, v) = query(
        &srv,
        &sub(
            "msg.end2end.latency",
            r#""aggregator":"sum","tags":{"host":"web01"},"percentiles":[98,95.5]"#,
        ),
    );
    assert_eq!(status, 200, "{v}");
    let r = v.as_array().unwrap();
    assert_eq!(r.len(), 2);
    assert_eq!(r[0]["metric"], "msg.end2end.latency_pct_98.0");
    assert_eq!(r[1]["metric"], "msg.end2end.latency_pct_95.5");
    for res in r {
        assert_eq!(res["tags"], serde_json::json!({"host":"web01"}));
        assert_eq!(res["aggregateTags"], serde_json::json!([]));
        assert!(res.get("annotations").is_none());
        let d = dps(res);
        assert_eq!(d.len(), 300);
        for (i, (ts, val)) in d.iter().enumerate() {
            assert_eq!(*ts, 1356998400500 + 500 * i as i64);
            assert_eq!(*val, (i + 1) as f64);
        }
    }
}

#[test]
fn percentiles_summed_grouped_and_per_series() {
    let srv = start();
    store_ms_series(&srv);
    // runSingleTsMsTwoAggSum: both hosts summed at each timestamp; the
    // 98th percentile is in the higher of the two buckets, the 50th in
    // the lower.
    let (status, v) = query(
        &srv,
        &sub(
            "msg.end2end.latency",
            r#""aggregator":"sum","percentiles":[98,50]"#,
        ),
    );
    assert_eq!(status, 200, "{v}");
    let r = v.as_array().unwrap();
    assert_eq!(r.len(), 2);
    assert_eq!(r[0]["tags"], serde_json::json!({}));
    assert_eq!(r[0]["aggregateTags"], serde_json::json!(["host"]));
    let (p98, p50) = (dps(&r[0]), dps(&r[1]));
    assert_eq!(p98.len(), 300);
    for i in 1..=300usize {
        let (a, b) = (i as f64, (301 - i) as f64);
        assert_eq!(p98[i - 1].1, a.max(b));
        assert_eq!(p50[i - 1].1, a.min(b));
    }
    // runSingleTsMsAggNone and runSingleTsMsAggSumTwoGroups: one result per
    // host, web01 first.
    for extra in [
        r#""aggregator":"none","percentiles":[98]"#,
        r#""aggregator":"sum","tags":{"host":"*"},"percentiles":[98]"#,
    ] {
        let (status, v) = query(&srv, &sub("msg.end2end.latency", extra));
        assert_eq!(status, 200, "{v}");
        let r = v.as_array().unwrap();
        assert_eq!(r.len(), 2, "{extra}");
        assert_eq!(r[0]["tags"], serde_json::json!({"host":"web01"}));
        assert_eq!(r[1]["tags"], serde_json::json!({"host":"web02"}));
        assert_eq!(r[1]["aggregateTags"], serde_json::json!([]));
        assert_eq!(dps(&r[0])[0].1, 1.0);
        assert_eq!(dps(&r[1])[0].1, 300.0);
        assert_eq!(dps(&r[1])[299].1, 1.0);
    }
    // A query for the plain points of the metric sees none.
    let (status, v) = query(&srv, &sub("msg.end2end.latency", r#""aggregator":"sum""#));
    assert_eq!((status, v), (200, serde_json::json!([])));
    // Outside the data: nothing.
    let r = json_http(
        srv.addr,
        "GET",
        "/api/query?start=1357041600&end=1357045200&m=sum:percentiles[99]:msg.end2end.latency",
        "",
    );
    assert_eq!((r.status, r.text()), (200, "[]".into()));
}

#[test]
fn downsampled_buckets_as_the_serializer_writes_them() {
    let srv = start();
    let lines = "histogram m 1356998400 u=1:o=0:0,1=2:1,5=3 host=a\n\
                 histogram m 1356998430 u=0:o=2:0,1=1 host=a\n\
                 histogram m 1356998400 0,1=5:5,10=1 host=b\n\
                 histogram m 1356998460 0,1=1 host=b\n";
    assert_eq!(telnet(srv.addr, lines.as_bytes()), "");
    let r = json_http(
        srv.addr,
        "GET",
        "/api/query?start=1356998400&end=1356998520&m=sum:1m-sum:percentiles[50,99.9]:show-histogram-buckets:m",
        "",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // Sums in the first minute: (0,1)=8, (1,5)=3, (5,10)=1, under 1,
    // over 2; in the second: (0,1)=1. The bucket series are those of the
    // first histogram; a bucket a later one lacks counts 0.
    let series = |name: &str, dps: &str| {
        format!(r#"{{"metric":"{name}","tags":{{}},"aggregateTags":["host"],"dps":{dps}}}"#)
    };
    let want = [
        series("m_pct_50.0", r#"{"1356998400":0.5,"1356998460":0.5}"#),
        series("m_pct_99.9", r#"{"1356998400":7.5,"1356998460":0.5}"#),
        series("m_UNDERFLOW", r#"{"1356998400":1,"1356998460":0}"#),
        series("m_0.0_1.0", r#"{"1356998400":8,"1356998460":1}"#),
        series("m_1.0_5.0", r#"{"1356998400":3,"1356998460":0}"#),
        series("m_5.0_10.0", r#"{"1356998400":1,"1356998460":0}"#),
        series("m_OVERFLOW", r#"{"1356998400":2,"1356998460":0}"#),
    ];
    assert_eq!(r.text(), format!("[{}]", want.join(",")));
}

#[test]
fn histogram_query_errors() {
    let srv = start();
    store_ms_series(&srv);
    let bad = |extra: &str| query(&srv, &sub("msg.end2end.latency", extra));
    let msg = |v: &serde_json::Value| v["error"]["message"].as_str().unwrap_or("").to_string();
    let (status, v) = bad(r#""aggregator":"avg","percentiles":[99]"#);
    assert_eq!(status, 400);
    assert_eq!(
        msg(&v),
        "Only NONE or SUM aggregation function supported for histogram query"
    );
    let (status, v) = bad(r#""aggregator":"sum","downsample":"1m-avg","percentiles":[99]"#);
    assert_eq!(status, 400);
    assert_eq!(
        msg(&v),
        "Only SUM downsampling aggregation supported for histogram query"
    );
    let (status, v) = bad(r#""aggregator":"sum","percentiles":[101]"#);
    assert_eq!(status, 400);
    assert_eq!(msg(&v), "Invalid percentile parameters: 101.0");
    let (status, v) = bad(r#""aggregator":"max","showHistogramBuckets":true"#);
    assert_eq!(status, 400);
    assert_eq!(
        msg(&v),
        "Only NONE or SUM aggregation function supported for histogram query"
    );
    let r = json_http(
        srv.addr,
        "GET",
        "/api/query?start=1356998400&m=sum:percentiles99:msg.end2end.latency",
        "",
    );
    assert_eq!(r.status, 400);
    assert_eq!(
        msg(&r.json()),
        "Malformated percentile query paramater: percentiles99"
    );
    let r = json_http(
        srv.addr,
        "GET",
        "/api/query?start=1356998400&m=sum:percentiles[x]:msg.end2end.latency",
        "",
    );
    assert_eq!(r.status, 400);
    assert_eq!(msg(&r.json()), "For input string: \"x\"");
}

/// `tsdb scan` shows a histogram cell as 2.4.1's DumpSeries shows any
/// non-point object (`Arrays.toString(value)` then `[Not a data point]`)
/// and leaves it out of `--import` output; `tsdb fsck` keeps it and finds
/// nothing wrong.
#[test]
fn scan_and_fsck_with_histogram_cells() {
    let mut srv = start();
    let line = format!(
        "put sys.cpu.user 1356998400 5 host=web01\nhistogram sys.cpu.user 1356998460 42 {TEST_B64} host=web01\n"
    );
    assert_eq!(telnet(srv.addr, line.as_bytes()), "");
    srv.stop();
    let kept = std::mem::replace(&mut srv.dir, tempfile::tempdir().unwrap());
    drop(srv);
    let dir = kept.path();
    let r = crate::common::tsdb(dir, &["scan", "2013/01/01", "sum", "sys.cpu.user"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let bytes: Vec<String> = TEST_HISTO.iter().map(|b| (*b as i8).to_string()).collect();
    let want = format!("[{}]\t[Not a data point]", bytes.join(", "));
    assert!(r.stdout.contains(&want), "{}", r.stdout);
    let r = crate::common::tsdb(
        dir,
        &["scan", "--import", "2013/01/01", "sum", "sys.cpu.user"],
    );
    assert_eq!(r.stdout, "sys.cpu.user 1356998400 5 host=web01\n");
    let r = crate::common::tsdb(dir, &["fsck", "--full-scan"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("Total Errors: 0"), "{}", r.stdout);
    let r = crate::common::tsdb(dir, &["fsck", "--full-scan", "--fix-all"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    // Still there after a fixing run.
    let r = crate::common::tsdb(dir, &["scan", "2013/01/01", "sum", "sys.cpu.user"]);
    assert!(r.stdout.contains(&want), "{}", r.stdout);
}

/// `storeTestHistogramTimeSeriesSeconds(false)`: as [`store_ms_series`]
/// but every 30 s from 1356998430 (three hourly rows).
fn store_seconds_series(srv: &TestServer) {
    let mut lines = String::new();
    for i in 1..=300u64 {
        let ts = 1356998400 + 30 * i;
        let j = 301 - i;
        lines.push_str(&format!(
            "histogram msg.end2end.latency {ts} {},{}=1 host=web01\n\
             histogram msg.end2end.latency {ts} {},{}=1 host=web02\n",
            i - 1,
            i + 1,
            j - 1,
            j + 1
        ));
    }
    assert_eq!(telnet(srv.addr, lines.as_bytes()), "");
}

fn note(srv: &TestServer, start: u64) {
    let r = json_http(
        srv.addr,
        "POST",
        "/api/annotation",
        &format!(
            r#"{{"tsuid":"000001000001000001","startTime":{start},"description":"Hello World!"}}"#
        ),
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn annotations_of_a_histogram_group() {
    // runWithAnnotation.
    let srv = TestServer::start(&[CONFIG, AUTO_METRIC, ("tsd.http.query.allow_delete", "true")]);
    store_seconds_series(&srv);
    note(&srv, 1356998490);
    let body = r#"{"start":1356998400,"end":1357041600,"queries":[{"metric":"msg.end2end.latency","aggregator":"sum","tags":{"host":"web01"},"percentiles":[98]}]}"#;
    let (status, v) = query(&srv, body);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v[0]["annotations"].as_array().unwrap().len(), 1);
    assert_eq!(v[0]["annotations"][0]["description"], "Hello World!");
    let d = dps(&v[0]);
    assert_eq!(d.len(), 300);
    assert_eq!(d[0], (1356998430, 1.0));
    // noAnnotations leaves them out.
    let (_, v) = query(
        &srv,
        &body.replace(r#""queries""#, r#""noAnnotations":true,"queries""#),
    );
    assert!(v[0].get("annotations").is_none(), "{v}");
    // runWithOnlyAnnotation: the second hour's row deleted, a note put
    // there: the note is the group's, the histograms jump 119 → 240.
    let r = json_http(
        srv.addr,
        "DELETE",
        "/api/query?start=1357002000&end=1357005599&m=sum:msg.end2end.latency{host=web01}",
        "",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    note(&srv, 1357002090);
    let (status, v) = query(&srv, body);
    assert_eq!(status, 200, "{v}");
    let notes = v[0]["annotations"].as_array().unwrap();
    assert_eq!(notes.len(), 2);
    assert_eq!(notes[1]["startTime"], 1357002090);
    let d = dps(&v[0]);
    assert_eq!(d.len(), 180);
    assert_eq!(d[118].1, 119.0);
    assert_eq!(d[119].1, 240.0);
}

#[test]
fn tsuid_histogram_queries() {
    let srv = start();
    store_seconds_series(&srv);
    // runTSUIDQuery.
    let body = |tsuids: &str| {
        format!(
            r#"{{"start":1356998400,"end":1357041600,"queries":[{{"tsuids":[{tsuids}],"aggregator":"sum","percentiles":[98]}}]}}"#
        )
    };
    let (status, v) = query(&srv, &body(r#""000001000001000001""#));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert_eq!(v[0]["metric"], "msg.end2end.latency_pct_98.0");
    assert_eq!(v[0]["tags"], serde_json::json!({"host":"web01"}));
    assert!(v[0].get("annotations").is_none());
    let d = dps(&v[0]);
    assert_eq!(d.len(), 300);
    assert!(d.iter().enumerate().all(|(i, p)| p.1 == (i + 1) as f64));
    // runTSUIDsAggSum: summed; the higher bucket holds the 98th.
    let (status, v) = query(&srv, &body(r#""000001000001000001","000001000001000002""#));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v[0]["tags"], serde_json::json!({}));
    assert_eq!(v[0]["aggregateTags"], serde_json::json!(["host"]));
    let d = dps(&v[0]);
    assert_eq!(d.len(), 300);
    assert!(
        d.iter()
            .enumerate()
            .all(|(i, p)| p.1 == ((i + 1).max(300 - i)) as f64)
    );
    // The tsuid= form of the query string.
    let r = json_http(
        srv.addr,
        "GET",
        "/api/query?start=1356998400&end=1357041600&tsuid=sum:percentiles[98]:000001000001000001",
        "",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(dps(&r.json()[0]).len(), 300);
}

#[test]
fn tsuid_histogram_query_without_data() {
    // runTSUIDQueryNoData: a series with points but no histogram.
    let srv = start();
    assert_eq!(
        telnet(
            srv.addr,
            b"put msg.end2end.latency 1356998430 1 host=web01\n"
        ),
        ""
    );
    let (status, v) = query(
        &srv,
        r#"{"start":1356998400,"end":1357041600,"queries":[{"tsuids":["000001000001000001"],"aggregator":"sum","percentiles":[98]}]}"#,
    );
    assert_eq!((status, v), (200, serde_json::json!([])));
}

/// Figures, not a check: `cargo test --release --test it
/// tsd_histogram::bench -- --ignored --nocapture`. 100 series × 360
/// histograms (every 10 s for an hour, 8 buckets each) written over HTTP
/// in bodies of 1,000, then percentiles of the sum of all, raw and
/// downsampled.
#[test]
#[ignore]
fn bench_histogram_writes_and_percentiles() {
    let srv = start();
    let started = std::time::Instant::now();
    let mut body = Vec::new();
    let mut written = 0;
    for t in 0..360u64 {
        for s in 0..100u64 {
            let buckets: Vec<String> = (0..8u64)
                .map(|b| format!(r#""{},{}":{}"#, b * 10, b * 10 + 10, (s + t + b) % 17))
                .collect();
            body.push(format!(
                r#"{{"metric":"lat","timestamp":{},"tags":{{"host":"h{s}"}},"buckets":{{{}}},"overflow":1}}"#,
                1356998400 + t * 10,
                buckets.join(",")
            ));
            if body.len() == 1000 {
                let (status, text) = post(&srv, "", &format!("[{}]", body.join(",")));
                assert_eq!(status, 204, "{text}");
                written += body.len();
                body.clear();
            }
        }
    }
    let write_s = started.elapsed().as_secs_f64();
    println!(
        "histogram writes: {written} in {write_s:.2} s = {:.0}/s",
        written as f64 / write_s
    );
    for (what, q) in [
        ("raw", "sum:percentiles[50,99]:lat"),
        ("1m-sum", "sum:1m-sum:percentiles[50,99]:lat"),
        ("1m-sum by host", "sum:1m-sum:percentiles[99]:lat{host=*}"),
    ] {
        let t0 = std::time::Instant::now();
        let r = json_http(
            srv.addr,
            "GET",
            &format!("/api/query?start=1356998400&end=1357002000&m={q}"),
            "",
        );
        assert_eq!(r.status, 200);
        println!(
            "query {what}: {:.1} ms, {} bytes of answer",
            t0.elapsed().as_secs_f64() * 1000.0,
            r.body.len()
        );
    }
}
