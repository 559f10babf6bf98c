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
            format!("histogram sys.cpu.user 1356998400 42 {} host=web01", &TEST_B64[..4]),
            "histogram: HBase error: Byte array shorter than 6 bytes detected: [0, 2, 0]\n",
        ),
        (
            format!("histogram sys.cpu.user 1356998400 42 {} host=web01", &TEST_B64[..8]),
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
    let quiet = TestServer::start(&[CONFIG, AUTO_METRIC, ("tsd.rpc.telnet.return_errors", "false")]);
    let line = format!("histogram sys.cpu.user 1356998400 42 {} host=web01\n", &TEST_B64[..4]);
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
    assert_eq!((v["success"].as_i64(), v["failed"].as_i64()), (Some(1), Some(1)));
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
        (r#"{"timestamp":1356998400,"id":42,"value":"AAAA","tags":{"host":"web01"}}"#, "Metric name was empty"),
        (r#"{"metric":"m","timestamp":0,"id":42,"value":"AAAA","tags":{"host":"web01"}}"#, "Invalid timestamp"),
        (r#"{"metric":"m","timestamp":1356998400,"id":42,"value":"AAAA"}"#, "Missing tags"),
        (r#"{"metric":"m","timestamp":1356998400,"tags":{"host":"web01"}}"#, "Histogram buckets cannot be null or empty if 'value' is empty."),
        (r#"{"metric":"m","timestamp":1356998400,"buckets":{},"tags":{"host":"web01"}}"#, "Histogram buckets cannot be null or empty if 'value' is empty."),
        (r#"{"metric":"m","timestamp":1356998400,"id":256,"value":"AAAA","tags":{"host":"web01"}}"#, "Invalid type. Must be from 0 to 255."),
        (r#"{"metric":"m","timestamp":1356998400,"id":7,"value":"AAAAAAAAAA==","tags":{"host":"web01"}}"#, "No codec found mapped to ID 7"),
        (r#"{"metric":"m","timestamp":1356998400,"buckets":{"0":1},"tags":{"host":"web01"}}"#, "Unable to parse bucket bounds: 0"),
        (r#"{"metric":"m","timestamp":1356998400,"buckets":{"a,1":1},"tags":{"host":"web01"}}"#, "Unable to parse value to a number"),
        (r#"{"metric":"sys.cpu.user","timestamp":1356998400,"buckets":{"0,1":1},"tags":{"host":"web01"}}"#, "Unknown metric"),
        (r#"{"metric":"sys.cpu.user","timestamp":1356998400,"id":42,"value":"AAIAAAAA","tags":{"host":"web01"}}"#, "Unexpected exception"),
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
