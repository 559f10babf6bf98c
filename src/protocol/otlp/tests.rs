use proptest::prelude::*;
use prost::Message as _;

use super::proto::*;
use super::*;
use crate::protocol::remote_write::Series;

fn kv(key: &str, v: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
    }
}

const T0: u64 = 1_700_000_000_000_000_000;
const SEC: u64 = 1_000_000_000;

fn number(t: u64, v: f64, attrs: Vec<KeyValue>) -> NumberDataPoint {
    NumberDataPoint {
        attributes: attrs,
        start_time_unix_nano: T0,
        time_unix_nano: t,
        value: Some(number_data_point::Value::AsDouble(v)),
        flags: 0,
    }
}

fn metric(name: &str, unit: &str, data: metric::Data) -> Metric {
    Metric {
        name: name.into(),
        description: format!("about {name}"),
        unit: unit.into(),
        data: Some(data),
    }
}

fn request(metrics: Vec<Metric>) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", "shop"),
                    kv("service.instance.id", "i-1"),
                    kv("host.name", "web01"),
                ],
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "lib".into(),
                    version: "1".into(),
                    attributes: vec![kv("scope.attr", "s")],
                }),
                metrics,
            }],
        }],
    }
}

fn histogram_point(t: u64, counts: Vec<u64>, sum: f64) -> HistogramDataPoint {
    HistogramDataPoint {
        attributes: vec![kv("route", "/a")],
        start_time_unix_nano: T0,
        time_unix_nano: t,
        count: counts.iter().sum(),
        sum: Some(sum),
        bucket_counts: counts,
        explicit_bounds: vec![0.5, 1.0, 2.5],
        flags: 0,
    }
}

/// Each series as `name{k=v,...} value@ms`, sorted.
fn lines(series: &[Series]) -> Vec<String> {
    let mut out: Vec<String> = series
        .iter()
        .flat_map(|s| {
            let tags: Vec<String> = s.tags().iter().map(|(k, v)| format!("{k}={v}")).collect();
            s.samples.iter().map(move |p| {
                format!(
                    "{}{{{}}} {}@{}",
                    s.metric(),
                    tags.join(","),
                    p.value,
                    p.timestamp_ms
                )
            })
        })
        .collect();
    out.sort();
    out
}

fn run(req: ExportMetricsServiceRequest, options: &MappingOptions) -> Translated {
    translate(req, options, &DeltaState::new(1000))
}

const MS: i64 = 1_700_000_000_000;

#[test]
fn every_kind_maps_to_its_series() {
    let req = request(vec![
        metric(
            "queue.depth",
            "{item}",
            metric::Data::Gauge(Gauge {
                data_points: vec![number(T0 + SEC, 7.0, vec![kv("q", "a")])],
            }),
        ),
        metric(
            "http.requests",
            "1",
            metric::Data::Sum(Sum {
                data_points: vec![NumberDataPoint {
                    value: Some(number_data_point::Value::AsInt(42)),
                    ..number(T0 + SEC, 0.0, vec![])
                }],
                aggregation_temporality: TEMPORALITY_CUMULATIVE,
                is_monotonic: true,
            }),
        ),
        metric(
            "latency",
            "s",
            metric::Data::Histogram(Histogram {
                data_points: vec![histogram_point(T0 + SEC, vec![1, 2, 0, 3], 9.5)],
                aggregation_temporality: TEMPORALITY_CUMULATIVE,
            }),
        ),
        metric(
            "rpc",
            "ms",
            metric::Data::Summary(Summary {
                data_points: vec![SummaryDataPoint {
                    attributes: vec![],
                    start_time_unix_nano: T0,
                    time_unix_nano: T0 + SEC,
                    count: 4,
                    sum: 10.0,
                    quantile_values: vec![
                        ValueAtQuantile {
                            quantile: 0.5,
                            value: 2.0,
                        },
                        ValueAtQuantile {
                            quantile: 0.99,
                            value: 4.0,
                        },
                    ],
                    flags: 0,
                }],
            }),
        ),
    ]);
    let t = run(req, &MappingOptions::default());
    assert!(t.refused.is_empty(), "{:?}", t.refused);
    assert_eq!(t.data_points, 4);
    let ms = MS + 1000;
    let ctx = "instance=i-1,job=shop";
    let want = vec![
        format!("http.requests{{{ctx}}} 42@{ms}"),
        format!("latency_bucket{{{ctx},le=+Inf,route=/a}} 6@{ms}"),
        format!("latency_bucket{{{ctx},le=0.5,route=/a}} 1@{ms}"),
        format!("latency_bucket{{{ctx},le=1,route=/a}} 3@{ms}"),
        format!("latency_bucket{{{ctx},le=2.5,route=/a}} 3@{ms}"),
        format!("latency_count{{{ctx},route=/a}} 6@{ms}"),
        format!("latency_sum{{{ctx},route=/a}} 9.5@{ms}"),
        format!("queue.depth{{{ctx},q=a}} 7@{ms}"),
        format!("rpc_count{{{ctx}}} 4@{ms}"),
        format!("rpc_sum{{{ctx}}} 10@{ms}"),
        format!("rpc{{{ctx},quantile=0.5}} 2@{ms}"),
        format!("rpc{{{ctx},quantile=0.99}} 4@{ms}"),
    ];
    let mut want = want;
    want.sort();
    assert_eq!(lines(&t.series), want);
    let kinds: Vec<(&str, &str)> = t
        .metadata
        .iter()
        .map(|m| (m.metric.as_str(), m.kind.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("queue.depth", "gauge"),
            ("http.requests", "counter"),
            ("latency", "histogram"),
            ("rpc", "summary")
        ]
    );
}

#[test]
fn the_naming_convention_and_selected_attributes() {
    let req = request(vec![
        metric(
            "http.server.request.count",
            "{request}",
            metric::Data::Sum(Sum {
                data_points: vec![number(T0 + SEC, 3.0, vec![kv("http.method", "GET")])],
                aggregation_temporality: TEMPORALITY_CUMULATIVE,
                is_monotonic: true,
            }),
        ),
        metric(
            "http.server.duration",
            "ms",
            metric::Data::Histogram(Histogram {
                data_points: vec![histogram_point(T0 + SEC, vec![], 1.0)],
                aggregation_temporality: TEMPORALITY_CUMULATIVE,
            }),
        ),
    ]);
    let options = MappingOptions {
        prometheus_names: true,
        resource_attributes: Selection::parse("host.name"),
        scope_attributes: Selection::parse("*"),
    };
    let t = run(req, &options);
    let ms = MS + 1000;
    let ctx = "host_name=web01,instance=i-1,job=shop";
    let mut want = vec![
        format!(
            "http_server_request_count_total{{host_name=web01,http_method=GET,instance=i-1,job=shop,scope_attr=s}} 3@{ms}"
        ),
        // No buckets: the count alone, as the +Inf bucket.
        format!(
            "http_server_duration_milliseconds_bucket{{{ctx},le=+Inf,route=/a,scope_attr=s}} 0@{ms}"
        ),
        format!("http_server_duration_milliseconds_count{{{ctx},route=/a,scope_attr=s}} 0@{ms}"),
        format!("http_server_duration_milliseconds_sum{{{ctx},route=/a,scope_attr=s}} 1@{ms}"),
    ];
    want.sort();
    assert_eq!(lines(&t.series), want);
}

#[test]
fn a_point_attribute_wins_over_the_resource() {
    let req = request(vec![metric(
        "g",
        "",
        metric::Data::Gauge(Gauge {
            data_points: vec![number(
                T0 + SEC,
                1.0,
                vec![kv("job", "mine"), kv("empty", "")],
            )],
        }),
    )]);
    let t = run(req, &MappingOptions::default());
    assert_eq!(
        lines(&t.series),
        [format!("g{{instance=i-1,job=mine}} 1@{}", MS + 1000)]
    );
}

fn delta_sum(points: Vec<NumberDataPoint>) -> ExportMetricsServiceRequest {
    request(vec![metric(
        "jobs.done",
        "",
        metric::Data::Sum(Sum {
            data_points: points,
            aggregation_temporality: TEMPORALITY_DELTA,
            is_monotonic: true,
        }),
    )])
}

#[test]
fn delta_sums_are_added_up_per_series() {
    let deltas = DeltaState::new(1000);
    let o = MappingOptions::default();
    let a = || vec![kv("worker", "a")];
    let b = || vec![kv("worker", "b")];
    let t = translate(
        delta_sum(vec![
            number(T0 + SEC, 2.0, a()),
            number(T0 + SEC, 10.0, b()),
        ]),
        &o,
        &deltas,
    );
    let t2 = translate(
        delta_sum(vec![
            number(T0 + 2 * SEC, 3.0, a()),
            number(T0 + 2 * SEC, 0.0, b()),
        ]),
        &o,
        &deltas,
    );
    // The same time again, and an earlier one: refused, the total kept.
    let t3 = translate(
        delta_sum(vec![
            number(T0 + 2 * SEC, 5.0, a()),
            number(T0 + SEC, 5.0, b()),
        ]),
        &o,
        &deltas,
    );
    let t4 = translate(delta_sum(vec![number(T0 + 3 * SEC, 1.0, a())]), &o, &deltas);
    let ctx = "instance=i-1,job=shop";
    assert_eq!(
        lines(&t.series),
        [
            format!("jobs.done{{{ctx},worker=a}} 2@{}", MS + 1000),
            format!("jobs.done{{{ctx},worker=b}} 10@{}", MS + 1000)
        ]
    );
    assert_eq!(
        lines(&t2.series),
        [
            format!("jobs.done{{{ctx},worker=a}} 5@{}", MS + 2000),
            format!("jobs.done{{{ctx},worker=b}} 10@{}", MS + 2000)
        ]
    );
    assert!(t3.series.is_empty());
    assert_eq!(t3.refused_points(), 2);
    assert!(matches!(t3.refused[0].0, Refusal::DeltaOutOfOrder { .. }));
    assert_eq!(
        lines(&t4.series),
        [format!("jobs.done{{{ctx},worker=a}} 6@{}", MS + 3000)]
    );
    assert_eq!(deltas.len(), 2);
}

#[test]
fn the_delta_state_is_bounded() {
    let deltas = DeltaState::new(2);
    let o = MappingOptions::default();
    let point = |w: &str, t| number(t, 1.0, vec![kv("worker", w)]);
    let t = translate(
        delta_sum(vec![
            point("a", T0 + SEC),
            point("b", T0 + SEC),
            point("c", T0 + SEC),
        ]),
        &o,
        &deltas,
    );
    assert_eq!(t.series.len(), 2);
    assert!(matches!(
        t.refused[0].0,
        Refusal::DeltaStateFull { max: 2, .. }
    ));
    assert_eq!(deltas.len(), 2);
    // Two hours later the idle series make room.
    let later = T0 + 7200 * SEC;
    let t = translate(delta_sum(vec![point("c", later)]), &o, &deltas);
    assert_eq!(t.series.len(), 1);
    assert_eq!(deltas.len(), 1);
}

#[test]
fn delta_histograms_add_bucket_by_bucket() {
    let deltas = DeltaState::new(10);
    let hist = |t, counts, sum| {
        request(vec![metric(
            "h",
            "",
            metric::Data::Histogram(Histogram {
                data_points: vec![histogram_point(t, counts, sum)],
                aggregation_temporality: TEMPORALITY_DELTA,
            }),
        )])
    };
    let o = MappingOptions::default();
    translate(hist(T0 + SEC, vec![1, 0, 0, 1], 3.0), &o, &deltas);
    let t = translate(hist(T0 + 2 * SEC, vec![0, 2, 1, 0], 4.0), &o, &deltas);
    let got = lines(&t.series);
    let ctx = "instance=i-1,job=shop";
    let at = MS + 2000;
    let mut want = vec![
        format!("h_bucket{{{ctx},le=+Inf,route=/a}} 5@{at}"),
        format!("h_bucket{{{ctx},le=0.5,route=/a}} 1@{at}"),
        format!("h_bucket{{{ctx},le=1,route=/a}} 3@{at}"),
        format!("h_bucket{{{ctx},le=2.5,route=/a}} 4@{at}"),
        format!("h_count{{{ctx},route=/a}} 5@{at}"),
        format!("h_sum{{{ctx},route=/a}} 7@{at}"),
    ];
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn what_cannot_be_stored_is_refused_and_counted() {
    let req = request(vec![
        metric(
            "exp",
            "",
            metric::Data::ExponentialHistogram(ExponentialHistogram {
                data_points: vec![vec![], vec![]],
            }),
        ),
        metric(
            "bad.buckets",
            "",
            metric::Data::Histogram(Histogram {
                data_points: vec![HistogramDataPoint {
                    bucket_counts: vec![1, 2],
                    ..histogram_point(T0, vec![], 0.0)
                }],
                aggregation_temporality: TEMPORALITY_CUMULATIVE,
            }),
        ),
        metric(
            "no.temporality",
            "",
            metric::Data::Sum(Sum {
                data_points: vec![number(T0, 1.0, vec![])],
                aggregation_temporality: 0,
                is_monotonic: true,
            }),
        ),
        metric(
            "",
            "",
            metric::Data::Gauge(Gauge {
                data_points: vec![number(T0, 1.0, vec![])],
            }),
        ),
        metric(
            "no.value",
            "",
            metric::Data::Gauge(Gauge {
                data_points: vec![NumberDataPoint {
                    value: None,
                    ..number(T0, 0.0, vec![])
                }],
            }),
        ),
    ]);
    let t = run(req, &MappingOptions::default());
    assert!(t.series.is_empty());
    assert_eq!(t.data_points, 6);
    assert_eq!(t.refused_points(), 6);
    let words: Vec<String> = t.refused.iter().map(|(r, _)| r.to_string()).collect();
    assert!(
        words[0].starts_with("exponential histogram exp"),
        "{words:?}"
    );
    assert!(words[1].contains("bucket_counts"), "{words:?}");
}

#[test]
fn no_recorded_value_is_a_stale_marker() {
    let req = request(vec![metric(
        "g",
        "",
        metric::Data::Gauge(Gauge {
            data_points: vec![NumberDataPoint {
                flags: FLAG_NO_RECORDED_VALUE,
                value: None,
                ..number(T0, 0.0, vec![])
            }],
        }),
    )]);
    let t = run(req, &MappingOptions::default());
    assert_eq!(
        t.series[0].samples[0].value.to_bits(),
        crate::model::point::STALE_MARKER_BITS
    );
}

/// The same request as protobuf and as OTLP/JSON (the exporters' own
/// output: int64 as strings, camelCase, enums as numbers).
#[test]
fn json_and_protobuf_decode_alike() {
    let json = r#"{"resourceMetrics":[{"resource":{"attributes":[
        {"key":"service.name","value":{"stringValue":"shop"}},
        {"key":"service.instance.id","value":{"stringValue":"i-1"}},
        {"key":"host.name","value":{"stringValue":"web01"}}]},
      "scopeMetrics":[{"scope":{"name":"lib","version":"1","attributes":[
        {"key":"scope.attr","value":{"stringValue":"s"}}]},
        "metrics":[
        {"name":"g","description":"about g","unit":"1","gauge":{"dataPoints":[
          {"attributes":[{"key":"n","value":{"intValue":"5"}},{"key":"b","value":{"boolValue":true}},
                         {"key":"d","value":{"doubleValue":1.5}},{"key":"raw","value":{"bytesValue":"AAH/"}},
                         {"key":"arr","value":{"arrayValue":{"values":[{"stringValue":"x"},{"intValue":"2"}]}}}],
           "startTimeUnixNano":"1700000000000000000","timeUnixNano":"1700000001000000000","asDouble":"NaN"}]}},
        {"name":"c","description":"about c","unit":"","sum":{"aggregationTemporality":2,"isMonotonic":true,
          "dataPoints":[{"timeUnixNano":"1700000001000000000","asInt":"9007199254740993"}]}},
        {"name":"h","description":"about h","unit":"","histogram":{"aggregation_temporality":2,
          "data_points":[{"time_unix_nano":"1700000001000000000","count":"3","sum":2.5,
             "bucketCounts":["1","2"],"explicitBounds":[1]}]}}
      ]}]}]}"#;
    let from_json = decode(json.as_bytes(), Encoding::Json).expect("json");
    let pb = from_json.encode_to_vec();
    let from_pb = decode(&pb, Encoding::Protobuf).expect("protobuf");
    // NaN is not equal to itself: compared as encoded.
    assert_eq!(pb, from_pb.encode_to_vec());
    let t = run(from_pb, &MappingOptions::default());
    let got = lines(&t.series);
    let ms = MS + 1000;
    assert!(
        got.contains(&format!(
            "g{{arr=[\"x\",2],b=true,d=1.5,instance=i-1,job=shop,n=5,raw=AAH/}} NaN@{ms}"
        )),
        "{got:?}"
    );
    assert!(
        got.contains(&format!("c{{instance=i-1,job=shop}} 9007199254740992@{ms}")),
        "{got:?}"
    );
    assert!(
        got.contains(&format!("h_bucket{{instance=i-1,job=shop,le=1}} 1@{ms}")),
        "{got:?}"
    );
    assert!(
        got.contains(&format!("h_bucket{{instance=i-1,job=shop,le=+Inf}} 3@{ms}")),
        "{got:?}"
    );
}

#[test]
fn bad_bodies_are_errors() {
    assert!(matches!(
        decode(b"\xff\xff\xff", Encoding::Protobuf),
        Err(OtlpError::NotProtobuf(_))
    ));
    for bad in [
        &b"{"[..],
        br#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"g","gauge":{"dataPoints":[{"timeUnixNano":"soon"}]}}]}]}]}"#,
        br#"{"resourceMetrics":"many"}"#,
    ] {
        let got = decode(bad, Encoding::Json);
        assert!(matches!(got, Err(OtlpError::NotJson(_))), "{}: {got:?}", String::from_utf8_lossy(bad));
    }
    // Unknown fields and nulls are taken.
    let ok = br#"{"resourceMetrics":[{"resource":null,"future":1,"scopeMetrics":null}]}"#;
    assert!(decode(ok, Encoding::Json).is_ok());
}

#[test]
fn answers_in_each_encoding() {
    assert_eq!(Encoding::Json.response(0, ""), b"{}");
    let json: serde_json::Value =
        serde_json::from_slice(&Encoding::Json.response(3, "no")).expect("json");
    assert_eq!(
        json,
        serde_json::json!({"partialSuccess": {"rejectedDataPoints": "3", "errorMessage": "no"}})
    );
    let pb = ExportMetricsServiceResponse::decode(&Encoding::Protobuf.response(3, "no")[..])
        .expect("protobuf");
    let p = pb.partial_success.expect("partial success");
    assert_eq!(
        (p.rejected_data_points, p.error_message.as_str()),
        (3, "no")
    );
    assert!(Encoding::Protobuf.response(0, "").is_empty());
    let s = Status::decode(&Encoding::Protobuf.status(3, "bad")[..]).expect("status");
    assert_eq!((s.code, s.message.as_str()), (3, "bad"));
    assert_eq!(
        Encoding::of_content_type("application/json; charset=utf-8"),
        Some(Encoding::Json)
    );
    assert_eq!(
        Encoding::of_content_type("application/x-protobuf"),
        Some(Encoding::Protobuf)
    );
    assert_eq!(Encoding::of_content_type("text/plain"), None);
}

proptest! {
    /// Any bytes, in either encoding: an error or series, never a panic.
    #[test]
    fn never_panics_on_garbage(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        let deltas = DeltaState::new(16);
        for encoding in [Encoding::Protobuf, Encoding::Json] {
            if let Ok(req) = decode(&body, encoding) {
                let _ = translate(req, &MappingOptions::default(), &deltas);
            }
        }
    }

    /// A valid request cut or changed anywhere: never a panic.
    #[test]
    fn never_panics_on_damaged_requests(cut in 0usize..2000, at in 0usize..2000, byte in any::<u8>()) {
        let req = request(vec![
            metric("h", "ms", metric::Data::Histogram(Histogram {
                data_points: vec![histogram_point(T0 + SEC, vec![1, 2, 0, 3], 9.5)],
                aggregation_temporality: TEMPORALITY_DELTA,
            })),
            metric("s", "By", metric::Data::Sum(Sum {
                data_points: vec![number(T0 + SEC, 1.0, vec![kv("a", "b")])],
                aggregation_temporality: TEMPORALITY_DELTA,
                is_monotonic: true,
            })),
        ]);
        let mut pb = req.encode_to_vec();
        if !pb.is_empty() {
            let i = at % pb.len();
            pb[i] = byte;
        }
        pb.truncate(cut.min(pb.len()));
        let options = MappingOptions { prometheus_names: true, ..MappingOptions::default() };
        if let Ok(req) = decode(&pb, Encoding::Protobuf) {
            let _ = translate(req, &options, &DeltaState::new(4));
        }
    }
}
