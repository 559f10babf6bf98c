//! OpenTelemetry metrics over OTLP/HTTP into a TSD (`/v1/metrics`,
//! `/opentelemetry/v1/metrics`), read back through `/api/query` and
//! PromQL, on both backends:
//!
//! - the OpenTelemetry Python SDK with its OTLP/HTTP exporter (pip
//!   `opentelemetry-sdk opentelemetry-exporter-otlp-proto-http`): a
//!   counter (cumulative), a counter exported as deltas, an observable
//!   gauge and a histogram;
//! - bodies encoded here: OTLP/JSON, gzipped protobuf, partial success
//!   for an exponential histogram, and the 400 and 415 answers.
//!
//! Without the Python packages the SDK test is skipped with a printed
//! reason; in CI (`CI=true`) it fails instead (`scripts/with-cluster`
//! installs them).

use std::io::Write as _;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use prost::Message as _;
use rtsdb::protocol::otlp::proto::*;

use crate::common::{Backend, HttpResponse, Tsds, http, on_both_backends};

on_both_backends!(
    python_sdk_counter_gauge_histogram,
    bodies_sent_by_hand,
    prometheus_names_when_asked
);

/// `%XX` for everything but unreserved characters, for query strings.
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The last value of `m` (an `/api/query` sub-query) in the last hour.
fn last_value(tsds: &Tsds, m: &str) -> Option<f64> {
    let (status, body) = tsds.req("GET", &format!("/api/query?start=1h-ago&m={}", enc(m)), "");
    assert_eq!(status, 200, "{m}: {body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    let dps = json.get(0)?.get("dps")?.as_object()?;
    let (_, v) = dps
        .iter()
        .max_by_key(|(t, _)| t.parse::<i64>().unwrap_or(0))?;
    v.as_f64()
}

/// An instant PromQL query's answer: (labels, value) per series.
fn promql(tsds: &Tsds, query: &str) -> Vec<(serde_json::Value, f64)> {
    let (status, body) = tsds.req(
        "GET",
        &format!("/prometheus/api/v1/query?query={}", enc(query)),
        "",
    );
    assert_eq!(status, 200, "{query}: {body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    json["data"]["result"]
        .as_array()
        .unwrap_or_else(|| panic!("{query}: {body}"))
        .iter()
        .map(|r| {
            let v = r["value"][1].as_str().unwrap().parse::<f64>().unwrap();
            (r["metric"].clone(), v)
        })
        .collect()
}

/// Whether the OpenTelemetry SDK and its OTLP/HTTP exporter import; the
/// reason to skip when not (a failure in CI).
fn python_sdk(test: &str) -> bool {
    let ok = Command::new("python3")
        .args([
            "-c",
            "import opentelemetry.sdk.metrics, opentelemetry.exporter.otlp.proto.http.metric_exporter",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return true;
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    assert!(
        !ci,
        "{test}: the OpenTelemetry Python SDK is missing in CI (scripts/with-cluster installs it)"
    );
    let _ = writeln!(
        std::io::stderr(),
        "{test}: skipped: the OpenTelemetry Python SDK is not installed (pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-http)"
    );
    false
}

/// What the SDK exports: a cumulative counter (3 then 4 more), a delta
/// counter exported twice (2, then 5), an observable gauge (21.5) and a
/// histogram of 5, 20 and 300 ms, from service `otlp-test`, instance
/// `inst-1`.
const SDK_SCRIPT: &str = r#"
import sys
from opentelemetry.sdk.metrics import MeterProvider, Counter
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader, AggregationTemporality
from opentelemetry.sdk.resources import Resource
from opentelemetry.metrics import Observation
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

endpoint = sys.argv[1]
resource = Resource.create({"service.name": "otlp-test", "service.instance.id": "inst-1"})

cumulative = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=endpoint), export_interval_millis=3600000)
provider = MeterProvider(resource=resource, metric_readers=[cumulative])
meter = provider.get_meter("rtsdb.test", "1.0")
orders = meter.create_counter("orders.placed", unit="{order}", description="orders")
orders.add(3, {"shop": "north"})
orders.add(4, {"shop": "north"})
meter.create_observable_gauge("room.temperature", callbacks=[lambda options: [Observation(21.5, {"room": "lab"})]], unit="Cel")
latency = meter.create_histogram("request.latency", unit="ms")
for v in (5, 20, 300):
    latency.record(v, {"route": "/a"})
if not provider.force_flush():
    sys.exit("force_flush failed (cumulative)")
provider.shutdown()

delta = PeriodicExportingMetricReader(
    OTLPMetricExporter(endpoint=endpoint, preferred_temporality={Counter: AggregationTemporality.DELTA}),
    export_interval_millis=3600000)
provider = MeterProvider(resource=resource, metric_readers=[delta])
jobs = provider.get_meter("rtsdb.test").create_counter("jobs.finished")
jobs.add(2)
if not provider.force_flush():
    sys.exit("force_flush failed (delta 1)")
jobs.add(5)
if not provider.force_flush():
    sys.exit("force_flush failed (delta 2)")
provider.shutdown()
print("exported")
"#;

fn python_sdk_counter_gauge_histogram(backend: Backend) {
    if !python_sdk("python_sdk_counter_gauge_histogram") {
        return;
    }
    let Some(tsds) = Tsds::start(backend, &[]) else {
        return;
    };
    let endpoint = format!("http://{}/v1/metrics", tsds.writer().addr);
    let out = Command::new("python3")
        .args(["-c", SDK_SCRIPT, &endpoint])
        .output()
        .expect("python3 runs");
    let log = format!(
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the SDK's export failed: {log}");
    assert!(!log.contains("Failed to export"), "{log}");

    // /api/query: names kept as the SDK sent them; job and instance
    // from the resource.
    let filter = "{job=otlp-test,instance=inst-1}";
    assert_eq!(
        last_value(&tsds, &format!("sum:orders.placed{filter}")),
        Some(7.0),
        "{log}"
    );
    assert_eq!(
        last_value(&tsds, &format!("sum:room.temperature{filter}")),
        Some(21.5)
    );
    assert_eq!(
        last_value(&tsds, &format!("sum:request.latency_count{filter}")),
        Some(3.0)
    );
    assert_eq!(
        last_value(&tsds, &format!("sum:request.latency_sum{filter}")),
        Some(325.0)
    );
    // Two delta exports (2, then 5) made cumulative.
    assert_eq!(
        last_value(&tsds, &format!("sum:jobs.finished{filter}")),
        Some(7.0)
    );

    // PromQL: the same series, the histogram's buckets cumulative.
    let got = promql(&tsds, r#"{__name__="orders.placed"}"#);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].1, 7.0);
    assert_eq!(got[0].0["shop"], "north");
    assert_eq!(got[0].0["job"], "otlp-test");
    let buckets = promql(&tsds, r#"{__name__="request.latency_bucket",route="/a"}"#);
    let le = |bound: &str| {
        buckets
            .iter()
            .find(|(m, _)| m["le"] == bound)
            .map(|(_, v)| *v)
    };
    assert_eq!(le("0"), Some(0.0), "{buckets:?}");
    assert_eq!(le("5"), Some(1.0), "{buckets:?}");
    assert_eq!(le("10"), Some(1.0));
    assert_eq!(le("25"), Some(2.0));
    assert_eq!(le("500"), Some(3.0));
    assert_eq!(le("+Inf"), Some(3.0));
    let median = promql(
        &tsds,
        r#"histogram_quantile(0.5, {__name__="request.latency_bucket"})"#,
    );
    assert_eq!(median.len(), 1, "{median:?}");
    assert!(
        (10.0..=25.0).contains(&median[0].1),
        "the median lies in the 10–25 bucket: {median:?}"
    );
    let temp = promql(&tsds, r#"{__name__="room.temperature",room="lab"}"#);
    assert_eq!(temp.len(), 1);
    assert_eq!(temp[0].1, 21.5);
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn post(tsds: &Tsds, path: &str, headers: &[(&str, &str)], body: &[u8]) -> HttpResponse {
    http(tsds.writer().addr, "POST", path, headers, body)
}

fn gauge_request(name: &str, t_ns: u64, value: f64) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: "service.name".into(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue("hand".into())),
                    }),
                }],
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: None,
                metrics: vec![
                    Metric {
                        name: name.into(),
                        description: String::new(),
                        unit: String::new(),
                        data: Some(metric::Data::Gauge(Gauge {
                            data_points: vec![NumberDataPoint {
                                attributes: vec![],
                                start_time_unix_nano: 0,
                                time_unix_nano: t_ns,
                                value: Some(number_data_point::Value::AsDouble(value)),
                                flags: 0,
                            }],
                        })),
                    },
                    Metric {
                        name: "exp.hist".into(),
                        description: String::new(),
                        unit: String::new(),
                        data: Some(metric::Data::ExponentialHistogram(ExponentialHistogram {
                            data_points: vec![vec![]],
                        })),
                    },
                ],
            }],
        }],
    }
}

fn bodies_sent_by_hand(backend: Backend) {
    let Some(tsds) = Tsds::start(backend, &[]) else {
        return;
    };
    let t = now_ns();
    // OTLP/JSON as exporters write it, on the /opentelemetry path.
    let json = format!(
        r#"{{"resourceMetrics":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"hand"}}}}]}},
        "scopeMetrics":[{{"metrics":[{{"name":"json.gauge","gauge":{{"dataPoints":[
          {{"timeUnixNano":"{t}","asInt":"12","attributes":[{{"key":"k","value":{{"stringValue":"v"}}}}]}}]}}}}]}}]}}]}}"#
    );
    let r = post(
        &tsds,
        "/opentelemetry/v1/metrics?sync",
        &[("Content-Type", "application/json")],
        json.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "{}");
    assert_eq!(
        last_value(&tsds, "sum:json.gauge{job=hand,k=v}"),
        Some(12.0)
    );

    // Gzipped protobuf; the exponential histogram is refused and counted.
    let pb = gauge_request("pb.gauge", t, 2.5).encode_to_vec();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&pb).unwrap();
    let r = post(
        &tsds,
        "/v1/metrics",
        &[
            ("Content-Type", "application/x-protobuf"),
            ("Content-Encoding", "gzip"),
        ],
        &gz.finish().unwrap(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("Content-Type"), Some("application/x-protobuf"));
    let answer = ExportMetricsServiceResponse::decode(&r.body[..]).unwrap();
    let partial = answer.partial_success.expect("a partial success");
    assert_eq!(partial.rejected_data_points, 1);
    assert!(
        partial
            .error_message
            .contains("exponential histogram exp.hist"),
        "{}",
        partial.error_message
    );
    assert_eq!(last_value(&tsds, "sum:pb.gauge{job=hand}"), Some(2.5));

    // Not OTLP: 400 with a Status in the request's encoding; another
    // content type: 415.
    let r = post(
        &tsds,
        "/v1/metrics",
        &[("Content-Type", "application/json")],
        b"{\"resourceMetrics\":7}",
    );
    assert_eq!(r.status, 400, "{}", r.text());
    let status: serde_json::Value = r.json();
    assert_eq!(status["code"], 3);
    assert!(status["message"].as_str().unwrap().contains("OTLP/JSON"));
    let r = post(
        &tsds,
        "/v1/metrics",
        &[("Content-Type", "application/x-protobuf")],
        b"\xff\xff\xff\xff",
    );
    assert_eq!(r.status, 400);
    let status = Status::decode(&r.body[..]).unwrap();
    assert_eq!(status.code, 3);
    let r = post(
        &tsds,
        "/v1/metrics",
        &[("Content-Type", "text/plain")],
        b"x",
    );
    assert_eq!(r.status, 415);
    let r = http(tsds.writer().addr, "GET", "/v1/metrics", &[], b"");
    assert_eq!(r.status, 405);
}

/// `tsd.otlp.prometheus_names`: names built by the OpenTelemetry →
/// Prometheus convention, asked for in PromQL without `__name__`.
fn prometheus_names_when_asked(backend: Backend) {
    let Some(tsds) = Tsds::start(backend, &[("tsd.otlp.prometheus_names", "true")]) else {
        return;
    };
    let t = now_ns();
    let json = format!(
        r#"{{"resourceMetrics":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"hand"}}}}]}},
        "scopeMetrics":[{{"metrics":[{{"name":"net.io","unit":"By","sum":{{"aggregationTemporality":2,"isMonotonic":true,"dataPoints":[
          {{"timeUnixNano":"{t}","asDouble":1024,"attributes":[{{"key":"http.method","value":{{"stringValue":"GET"}}}}]}}]}}}}]}}]}}]}}"#
    );
    let r = post(
        &tsds,
        "/v1/metrics",
        &[("Content-Type", "application/json")],
        json.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let got = promql(&tsds, r#"net_io_bytes_total{http_method="GET",job="hand"}"#);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].1, 1024.0);
}
