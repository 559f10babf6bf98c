//! Prometheus remote write 1.0 and 2.0 into a TSD (`/api/v1/write`,
//! `/prometheus/api/v1/write`), with requests encoded here from the
//! .proto messages (prost + snappy), read back through `/api/query` and
//! the library, on both backends.

use std::time::{SystemTime, UNIX_EPOCH};

use prost::Message;
use rtsdb::model::UidKind;

use crate::common::{Backend, HttpResponse, Tsds, http, json_http, on_both_backends};

// The messages as the .proto files declare them (field numbers are the
// wire format), for the tests' own encoding.

#[derive(Clone, PartialEq, Message)]
struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    timeseries: Vec<TimeSeries>,
    #[prost(message, repeated, tag = "3")]
    metadata: Vec<MetricMetadata>,
}

#[derive(Clone, PartialEq, Message)]
struct TimeSeries {
    #[prost(message, repeated, tag = "1")]
    labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    samples: Vec<Sample>,
    #[prost(message, repeated, tag = "4")]
    histograms: Vec<Histogram>,
}

#[derive(Clone, PartialEq, Message)]
struct Label {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    value: String,
}

#[derive(Clone, PartialEq, Message)]
struct Sample {
    #[prost(double, tag = "1")]
    value: f64,
    #[prost(int64, tag = "2")]
    timestamp: i64,
}

#[derive(Clone, PartialEq, Message)]
struct Histogram {
    #[prost(uint64, tag = "1")]
    count_int: u64,
    #[prost(int64, tag = "15")]
    timestamp: i64,
}

#[derive(Clone, PartialEq, Message)]
struct MetricMetadata {
    #[prost(int32, tag = "1")]
    r#type: i32,
    #[prost(string, tag = "2")]
    metric_family_name: String,
    #[prost(string, tag = "4")]
    help: String,
    #[prost(string, tag = "5")]
    unit: String,
}

#[derive(Clone, PartialEq, Message)]
struct RequestV2 {
    #[prost(string, repeated, tag = "4")]
    symbols: Vec<String>,
    #[prost(message, repeated, tag = "5")]
    timeseries: Vec<TimeSeriesV2>,
}

#[derive(Clone, PartialEq, Message)]
struct TimeSeriesV2 {
    #[prost(uint32, repeated, tag = "1")]
    labels_refs: Vec<u32>,
    #[prost(message, repeated, tag = "2")]
    samples: Vec<Sample>,
    #[prost(message, optional, tag = "5")]
    metadata: Option<MetadataV2>,
}

#[derive(Clone, Copy, PartialEq, Message)]
struct MetadataV2 {
    #[prost(int32, tag = "1")]
    r#type: i32,
    #[prost(uint32, tag = "3")]
    help_ref: u32,
    #[prost(uint32, tag = "4")]
    unit_ref: u32,
}

const V1: &str = "application/x-protobuf";
const V2: &str = "application/x-protobuf;proto=io.prometheus.write.v2.Request";

/// Whole minutes, an hour ago, in ms: within what the store keeps.
fn base_ms() -> i64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    (now.as_secs() as i64 / 60 - 60) * 60_000
}

fn series(labels: &[(&str, &str)], samples: &[(i64, f64)]) -> TimeSeries {
    TimeSeries {
        labels: labels
            .iter()
            .map(|(n, v)| Label {
                name: n.to_string(),
                value: v.to_string(),
            })
            .collect(),
        samples: samples
            .iter()
            .map(|&(timestamp, value)| Sample { value, timestamp })
            .collect(),
        histograms: vec![],
    }
}

fn v1(series: Vec<TimeSeries>) -> Vec<u8> {
    snappy(
        &WriteRequest {
            timeseries: series,
            metadata: vec![],
        }
        .encode_to_vec(),
    )
}

fn snappy(raw: &[u8]) -> Vec<u8> {
    snap::raw::Encoder::new().compress_vec(raw).unwrap()
}

fn push(addr: std::net::SocketAddr, path: &str, content_type: &str, body: &[u8]) -> HttpResponse {
    http(
        addr,
        "POST",
        path,
        &[
            ("Content-Type", content_type),
            ("Content-Encoding", "snappy"),
            ("X-Prometheus-Remote-Write-Version", "0.1.0"),
        ],
        body,
    )
}

/// `/api/query` for `metric` with `filters` (literal values), one series
/// per answer: (tags, dps) of each.
fn query(t: &Tsds, start_ms: i64, metric: &str, filters: &[(&str, &str)]) -> serde_json::Value {
    let filters: Vec<serde_json::Value> = filters
        .iter()
        .map(|(k, v)| serde_json::json!({"type": "literal_or", "tagk": k, "filter": v, "groupBy": true}))
        .collect();
    let body = serde_json::json!({
        "start": start_ms - 1000,
        "msResolution": true,
        "queries": [{"metric": metric, "aggregator": "none", "filters": filters}],
    });
    let r = json_http(t.reader().addr, "POST", "/api/query", &body.to_string());
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

on_both_backends!(remote_write_1_0_keeps_what_prometheus_allows);

/// 1.0: a series with no label but its name, 15 labels, UTF-8 values with
/// spaces, quotes and `=`, `le="+Inf"`, a recording rule's name; read
/// back through `/api/query` and the library.
fn remote_write_1_0_keeps_what_prometheus_allows(backend: Backend) {
    let Some(t) = Tsds::start(backend, &[("tsd.core.auto_create_metrics", "true")]) else {
        return;
    };
    let b = base_ms();
    let fifteen: Vec<(String, String)> = (0..15)
        .map(|i| (format!("l{i:02}"), format!("v{i}")))
        .collect();
    let mut wide: Vec<(&str, &str)> = vec![("__name__", "kube_pod_info")];
    wide.extend(fifteen.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let odd = "Zürich \"HQ\" a=b, c";
    let body = v1(vec![
        series(&[("__name__", "up")], &[(b, 1.0), (b + 15_000, 0.0)]),
        series(&wide, &[(b, 3.0)]),
        series(
            &[
                ("__name__", "http_bucket"),
                ("le", "+Inf"),
                ("site", odd),
                ("note", ""),
            ],
            &[(b, 7.5)],
        ),
        series(
            &[("__name__", "job:http_requests:rate5m"), ("job", "api")],
            &[(b, 0.25), (b + 500, 0.5)],
        ),
    ]);
    let r = push(t.writer().addr, "/api/v1/write", V1, &body);
    assert_eq!(r.status, 204, "{}", r.text());
    // The same at the /prometheus path: the same samples again (last
    // write wins), 204.
    let r = push(t.writer().addr, "/prometheus/api/v1/write", V1, &body);
    assert_eq!(r.status, 204, "{}", r.text());

    // Another value at a time that holds one: the last write wins, 204.
    let again = v1(vec![series(&[("__name__", "up")], &[(b + 15_000, 1.0)])]);
    let r = push(t.writer().addr, "/api/v1/write", V1, &again);
    assert_eq!(r.status, 204, "{}", r.text());

    let up = query(&t, b, "up", &[]);
    assert_eq!(up.as_array().unwrap().len(), 1, "{up}");
    assert_eq!(up[0]["tags"], serde_json::json!({}));
    let dps = &up[0]["dps"];
    assert_eq!(dps[b.to_string()], 1.0, "{up}");
    assert_eq!(dps[(b + 15_000).to_string()], 1.0, "{up}");

    let wide = query(&t, b, "kube_pod_info", &[("l07", "v7")]);
    assert_eq!(wide[0]["tags"].as_object().unwrap().len(), 15, "{wide}");

    let bucket = query(&t, b, "http_bucket", &[("le", "+Inf")]);
    assert_eq!(bucket[0]["tags"]["site"], odd, "{bucket}");
    assert!(bucket[0]["tags"].get("note").is_none(), "{bucket}");

    let rule = query(&t, b, "job:http_requests:rate5m", &[("job", "api")]);
    assert_eq!(rule[0]["dps"][(b + 500).to_string()], 0.5, "{rule}");

    // Through the library: the names are the UIDs' names, the series the
    // sender's.
    let db = t.reader().state.db().clone();
    let uid = db.uids().get_id(UidKind::TagValue, odd).unwrap();
    assert_eq!(&*db.uids().get_name(UidKind::TagValue, uid).unwrap(), odd);
    let read = t.reader().read("job:http_requests:rate5m");
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].points.len(), 2);
}

on_both_backends!(remote_write_answers_each_status);

/// 415 for other content types and encodings, 400 for bodies that are
/// not snappy or not protobuf, for names Prometheus does not allow, for
/// duplicate labels and native histograms (the good series of the same
/// request written), 405 for GET.
fn remote_write_answers_each_status(backend: Backend) {
    let Some(t) = Tsds::start(backend, &[("tsd.core.auto_create_metrics", "true")]) else {
        return;
    };
    let a = t.writer().addr;
    let b = base_ms();
    let good = v1(vec![series(&[("__name__", "ok_total")], &[(b, 1.0)])]);
    assert_eq!(
        push(a, "/api/v1/write", "application/json", &good).status,
        415
    );
    let r = http(
        a,
        "POST",
        "/api/v1/write",
        &[("Content-Type", V1), ("Content-Encoding", "gzip")],
        &good,
    );
    assert_eq!(r.status, 415, "{}", r.text());
    assert_eq!(http(a, "GET", "/api/v1/write", &[], b"").status, 405);

    let r = push(a, "/api/v1/write", V1, b"this is not snappy");
    assert_eq!(r.status, 400, "{}", r.text());
    let r = push(a, "/api/v1/write", V1, &snappy(&[0xff; 64]));
    assert_eq!(r.status, 400);
    assert!(r.text().contains("not a protobuf"), "{}", r.text());
    // No Content-Encoding header: still snappy, as 2.42 takes it.
    let r = http(a, "POST", "/api/v1/write", &[("Content-Type", V1)], &good);
    assert_eq!(r.status, 204, "{}", r.text());

    let mut with_histogram = series(&[("__name__", "native_seconds")], &[]);
    with_histogram.histograms.push(Histogram {
        count_int: 3,
        timestamp: b,
    });
    let mixed = v1(vec![
        series(&[("__name__", "sys.cpu.user"), ("host", "a")], &[(b, 1.0)]),
        series(&[("__name__", "m"), ("a", "1"), ("a", "2")], &[(b, 1.0)]),
        with_histogram,
        series(&[("__name__", "kept"), ("x", "y")], &[(b, 2.0)]),
        series(&[("__name__", "too_early")], &[(1_000, 2.0)]),
    ]);
    let r = push(a, "/api/v1/write", V1, &mixed);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("sys.cpu.user"), "{}", r.text());
    let kept = query(&t, b, "kept", &[]);
    assert_eq!(kept[0]["dps"][b.to_string()], 2.0, "{kept}");
    for (body, words) in [
        (
            v1(vec![series(
                &[("__name__", "m"), ("a", "1"), ("a", "2")],
                &[(b, 1.0)],
            )]),
            "duplicate label name",
        ),
        (
            v1(vec![series(&[("__name__", "too_early")], &[(1_000, 2.0)])]),
            "outside what the store keeps",
        ),
        (
            v1(vec![{
                let mut s = series(&[("__name__", "native_seconds")], &[]);
                s.histograms.push(Histogram {
                    count_int: 1,
                    timestamp: b,
                });
                s
            }]),
            "native histograms",
        ),
        (
            v1(vec![series(&[("job", "x")], &[(b, 1.0)])]),
            "no __name__",
        ),
    ] {
        let r = push(a, "/api/v1/write", V1, &body);
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(r.text().contains(words), "{words}: {}", r.text());
    }
}

on_both_backends!(remote_write_2_0_resolves_symbols_and_counts_what_it_wrote);

/// 2.0: the symbol table, the written-counts headers, metadata kept; a
/// bad symbol reference is a 400 that still writes the good series.
fn remote_write_2_0_resolves_symbols_and_counts_what_it_wrote(backend: Backend) {
    let Some(t) = Tsds::start(backend, &[("tsd.core.auto_create_metrics", "true")]) else {
        return;
    };
    let a = t.writer().addr;
    let b = base_ms();
    let symbols = [
        "",
        "__name__",
        "rpc_seconds",
        "job",
        "api",
        "Latency.",
        "seconds",
    ]
    .map(String::from)
    .to_vec();
    let req = RequestV2 {
        symbols: symbols.clone(),
        timeseries: vec![TimeSeriesV2 {
            labels_refs: vec![1, 2, 3, 4],
            samples: vec![
                Sample {
                    value: 0.5,
                    timestamp: b,
                },
                Sample {
                    value: 0.75,
                    timestamp: b + 1000,
                },
            ],
            metadata: Some(MetadataV2 {
                r#type: 5,
                help_ref: 5,
                unit_ref: 6,
            }),
        }],
    };
    let r = push(a, "/api/v1/write", V2, &snappy(&req.encode_to_vec()));
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(
        r.header("X-Prometheus-Remote-Write-Samples-Written"),
        Some("2")
    );
    assert_eq!(
        r.header("X-Prometheus-Remote-Write-Histograms-Written"),
        Some("0")
    );
    assert_eq!(
        r.header("X-Prometheus-Remote-Write-Exemplars-Written"),
        Some("0")
    );
    let got = query(&t, b, "rpc_seconds", &[("job", "api")]);
    assert_eq!(got[0]["dps"][(b + 1000).to_string()], 0.75, "{got}");

    let bad = RequestV2 {
        symbols,
        timeseries: vec![
            TimeSeriesV2 {
                labels_refs: vec![1, 2, 3, 40],
                samples: vec![Sample {
                    value: 1.0,
                    timestamp: b,
                }],
                metadata: None,
            },
            TimeSeriesV2 {
                labels_refs: vec![1, 2],
                samples: vec![Sample {
                    value: 9.0,
                    timestamp: b + 2000,
                }],
                metadata: None,
            },
        ],
    };
    let r = push(a, "/api/v1/write", V2, &snappy(&bad.encode_to_vec()));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("symbol reference 40"), "{}", r.text());
    assert_eq!(
        r.header("X-Prometheus-Remote-Write-Samples-Written"),
        Some("1")
    );
}

/// A request with only metadata is taken (204) and its samples (none)
/// counted in the TSD's stats; what is kept is `MetadataStore`'s unit
/// tests' and the metadata API's business.
#[test]
fn a_metadata_only_request_is_taken() {
    let Some(t) = Tsds::start(
        Backend::Embedded,
        &[("tsd.core.auto_create_metrics", "true")],
    ) else {
        return;
    };
    let body = snappy(
        &WriteRequest {
            timeseries: vec![],
            metadata: vec![MetricMetadata {
                r#type: 1,
                metric_family_name: "http_requests_total".into(),
                help: "Requests served.".into(),
                unit: String::new(),
            }],
        }
        .encode_to_vec(),
    );
    let r = push(t.writer().addr, "/api/v1/write", V1, &body);
    assert_eq!(r.status, 204, "{}", r.text());
    let stats = json_http(t.writer().addr, "GET", "/api/stats", "");
    assert!(stats.text().contains("remote_write"), "{}", stats.text());
}

/// NaN values and stale markers are samples like others (what the store
/// keeps of a marker's payload is the codecs' business).
#[test]
fn nan_and_stale_markers_are_taken() {
    let Some(t) = Tsds::start(
        Backend::Embedded,
        &[("tsd.core.auto_create_metrics", "true")],
    ) else {
        return;
    };
    let b = base_ms();
    let stale = f64::from_bits(0x7ff0_0000_0000_0002);
    let body = v1(vec![series(
        &[("__name__", "gone"), ("job", "x")],
        &[
            (b, 1.0),
            (b + 1000, f64::NAN),
            (b + 2000, stale),
            (b + 3000, f64::INFINITY),
        ],
    )]);
    let r = push(t.writer().addr, "/api/v1/write", V1, &body);
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(t.reader().point_count("gone"), 4);
}

/// `tsd.prometheus.max_labels` bounds the labels of a remote-written
/// series (not `tsd.storage.max_tags`, the put path's); a body whose
/// snappy header declares more than the body limit is refused before
/// it is inflated.
#[test]
fn limits_are_the_remote_write_ones() {
    let Some(t) = Tsds::start(
        Backend::Embedded,
        &[
            ("tsd.core.auto_create_metrics", "true"),
            ("tsd.prometheus.max_labels", "10"),
            ("tsd.storage.max_tags", "2"),
        ],
    ) else {
        return;
    };
    let a = t.writer().addr;
    let b = base_ms();
    let labels: Vec<(String, String)> = (0..11).map(|i| (format!("l{i}"), "v".into())).collect();
    let mut pairs: Vec<(&str, &str)> = vec![("__name__", "wide")];
    pairs.extend(labels.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let r = push(
        a,
        "/api/v1/write",
        V1,
        &v1(vec![series(&pairs[..11], &[(b, 1.0)])]),
    );
    assert_eq!(r.status, 204, "{}", r.text());
    let r = push(
        a,
        "/api/v1/write",
        V1,
        &v1(vec![series(&pairs, &[(b, 1.0)])]),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("too many labels: 11"), "{}", r.text());
    // A header declaring 4 GB, a few bytes sent.
    let mut huge = vec![0x80, 0x80, 0x80, 0x80, 0x0f];
    huge.extend_from_slice(&[0; 16]);
    let r = push(a, "/api/v1/write", V1, &huge);
    assert_eq!(r.status, 413, "{}", r.text());
}

/// Samples acknowledged with `sync` survive a SIGKILL of the TSD right
/// after the 204, and are read back after the restart.
#[test]
fn acknowledged_samples_survive_a_kill() {
    use crate::common::{ChildOptions, ChildTsd};
    let dir = tempfile::tempdir().unwrap();
    let b = base_ms();
    let tsd = ChildTsd::start(dir.path(), ChildOptions::default());
    let body = v1(vec![
        series(
            &[("__name__", "crash_total"), ("path", "/a b")],
            &[(b, 1.0), (b + 1000, 2.0), (b + 2000, 3.0)],
        ),
        series(&[("__name__", "job:crash:rate5m")], &[(b, 4.0)]),
    ]);
    let r = push(tsd.addr, "/api/v1/write?sync", V1, &body);
    assert_eq!(r.status, 204, "{}", r.text());
    tsd.kill();
    let tsd = ChildTsd::start(dir.path(), ChildOptions::default());
    let q = serde_json::json!({
        "start": b - 1000,
        "msResolution": true,
        "queries": [{"metric": "crash_total", "aggregator": "none"}],
    });
    let r = json_http(tsd.addr, "POST", "/api/query", &q.to_string());
    assert_eq!(r.status, 200, "{}", r.text());
    let got = r.json();
    assert_eq!(got[0]["tags"]["path"], "/a b", "{got}");
    assert_eq!(got[0]["dps"].as_object().unwrap().len(), 3, "{got}");
    // A series with no label but its name, replayed from the WAL.
    let q = serde_json::json!({
        "start": b - 1000,
        "msResolution": true,
        "queries": [{"metric": "job:crash:rate5m", "aggregator": "none"}],
    });
    let got = json_http(tsd.addr, "POST", "/api/query", &q.to_string()).json();
    assert_eq!(got[0]["dps"][b.to_string()], 4.0, "{got}");
    tsd.terminate();
}
