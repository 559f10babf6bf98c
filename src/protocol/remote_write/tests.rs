//! The parser on bodies built here with the same messages.

use super::proto::{self, Label, MetricMetadata, RequestV2, TimeSeries, TimeSeriesV2};
use super::*;
use proptest::prelude::*;

const MAX: usize = 1 << 20;

fn snappy(raw: &[u8]) -> Vec<u8> {
    snap::raw::Encoder::new().compress_vec(raw).unwrap()
}

fn labels(pairs: &[(&str, &str)]) -> Vec<Label> {
    pairs
        .iter()
        .map(|(n, v)| Label {
            name: n.as_bytes().to_vec().into(),
            value: v.as_bytes().to_vec().into(),
        })
        .collect()
}

fn v1_series(pairs: &[(&str, &str)], samples: &[(i64, f64)]) -> TimeSeries {
    TimeSeries {
        labels: labels(pairs),
        samples: samples
            .iter()
            .map(|&(timestamp_ms, value)| Sample {
                value,
                timestamp_ms,
            })
            .collect(),
        exemplars: vec![],
        histograms: vec![],
    }
}

fn v1_body(series: Vec<TimeSeries>, metadata: Vec<MetricMetadata>) -> Vec<u8> {
    snappy(
        &proto::WriteRequest {
            timeseries: series,
            metadata,
        }
        .encode_to_vec(),
    )
}

#[test]
fn content_types_pick_the_version() {
    let v = Version::of_content_type;
    assert_eq!(v(None), Some(Version::V1));
    assert_eq!(v(Some("application/x-protobuf")), Some(Version::V1));
    assert_eq!(
        v(Some("application/x-protobuf;proto=prometheus.WriteRequest")),
        Some(Version::V1)
    );
    assert_eq!(
        v(Some(
            "application/x-protobuf;proto=io.prometheus.write.v2.Request"
        )),
        Some(Version::V2)
    );
    assert_eq!(
        v(Some(
            "Application/X-Protobuf; proto=\"io.prometheus.write.v2.Request\""
        )),
        Some(Version::V2)
    );
    assert_eq!(v(Some("application/json")), None);
    assert_eq!(v(Some("application/x-protobuf;proto=foo.Bar")), None);
}

#[test]
fn a_v1_request_decodes_to_sorted_series_without_empty_labels() {
    let stale = f64::from_bits(0x7ff0_0000_0000_0002);
    let body = v1_body(
        vec![
            v1_series(
                &[
                    ("job", "node"),
                    ("__name__", "job:up:sum"),
                    ("note", ""),
                    ("le", "+Inf"),
                ],
                &[(1_700_000_000_000, 1.5), (1_700_000_015_000, stale)],
            ),
            v1_series(&[("__name__", "up")], &[(1_700_000_000_000, 1.0)]),
        ],
        vec![MetricMetadata {
            r#type: 1,
            metric_family_name: "http_requests_total".into(),
            help: "Requests.".into(),
            unit: String::new(),
        }],
    );
    let r = decode(&body, Version::V1, MAX).unwrap();
    assert!(r.refused.is_empty());
    assert_eq!(r.series.len(), 2);
    let s = &r.series[0];
    assert_eq!(s.metric(), "job:up:sum");
    assert_eq!(s.tags(), vec![("job", "node"), ("le", "+Inf")]);
    assert_eq!(s.samples[1].value.to_bits(), 0x7ff0_0000_0000_0002);
    assert_eq!(r.series[1].tags(), vec![]);
    assert_eq!(r.sample_count(), 3);
    assert_eq!(
        r.metadata,
        vec![Metadata {
            metric: "http_requests_total".into(),
            kind: MetricKind::Counter,
            help: "Requests.".into(),
            unit: String::new(),
        }]
    );
}

#[test]
fn bad_series_are_refused_alone_and_named() {
    let mut with_histogram = v1_series(&[("__name__", "h")], &[]);
    with_histogram.histograms.push(vec![8, 1]);
    let body = v1_body(
        vec![
            v1_series(&[("__name__", "m"), ("a", "1"), ("a", "2")], &[(1, 1.0)]),
            v1_series(&[("a", "1")], &[(1, 1.0)]),
            v1_series(&[("__name__", "m"), ("a.b", "1")], &[(1, 1.0)]),
            v1_series(&[("__name__", "sys.cpu")], &[(1, 1.0)]),
            with_histogram,
            v1_series(&[("__name__", "ok")], &[(1, 1.0), (2, 2.0)]),
        ],
        vec![],
    );
    let r = decode(&body, Version::V1, MAX).unwrap();
    assert_eq!(r.series.len(), 1);
    assert_eq!(r.series[0].metric(), "ok");
    let errors: Vec<String> = r.refused.iter().map(|(e, _)| e.to_string()).collect();
    assert_eq!(
        errors,
        vec![
            "duplicate label name \"a\" in series {__name__=\"m\", a=\"1\", a=\"2\"}",
            "no __name__ label in series {a=\"1\"}",
            "invalid label name \"a.b\" in series {__name__=\"m\", a.b=\"1\"}",
            "invalid metric name \"sys.cpu\" in series {__name__=\"sys.cpu\"}",
            "native histograms are not supported: 1 native histogram sample(s) refused in series h{}",
        ]
    );
    assert_eq!(r.refused[0].1, 1);
}

#[test]
fn a_v2_request_resolves_its_symbols_and_metadata() {
    let req = RequestV2 {
        symbols: [
            "",
            "__name__",
            "rpc_seconds",
            "job",
            "api",
            "Latency.",
            "seconds",
        ]
        .map(|s| bytes::Bytes::from(s.as_bytes()))
        .to_vec(),
        timeseries: vec![
            TimeSeriesV2 {
                labels_refs: vec![1, 2, 3, 4],
                samples: vec![Sample {
                    value: 0.25,
                    timestamp_ms: 1_700_000_000_000,
                }],
                histograms: vec![],
                exemplars: vec![vec![]],
                metadata: Some(proto::MetadataV2 {
                    r#type: 5,
                    help_ref: 5,
                    unit_ref: 6,
                }),
                created_timestamp: 0,
            },
            TimeSeriesV2 {
                labels_refs: vec![1, 2, 3, 99],
                samples: vec![Sample {
                    value: 1.0,
                    timestamp_ms: 1,
                }],
                ..Default::default()
            },
            TimeSeriesV2 {
                labels_refs: vec![1, 2, 3],
                ..Default::default()
            },
        ],
    };
    let r = decode(&snappy(&req.encode_to_vec()), Version::V2, MAX).unwrap();
    assert_eq!(r.series.len(), 1);
    assert_eq!(r.series[0].metric(), "rpc_seconds");
    assert_eq!(r.series[0].tags(), vec![("job", "api")]);
    assert_eq!(r.exemplars, 1);
    assert_eq!(
        r.metadata,
        vec![Metadata {
            metric: "rpc_seconds".into(),
            kind: MetricKind::Summary,
            help: "Latency.".into(),
            unit: "seconds".into(),
        }]
    );
    assert_eq!(
        r.refused,
        vec![
            (
                RemoteWriteError::BadSymbolRef {
                    index: 1,
                    reference: 99,
                    symbols: 7
                },
                1
            ),
            (RemoteWriteError::OddLabelRefs { index: 2, refs: 3 }, 0),
        ]
    );
}

#[test]
fn labels_that_are_not_utf8_refuse_their_series() {
    let mut bad = v1_series(&[("__name__", "m")], &[(1, 1.0)]);
    bad.labels.push(Label {
        name: "a".as_bytes().to_vec().into(),
        value: vec![0xff, 0xfe].into(),
    });
    let body = v1_body(
        vec![bad, v1_series(&[("__name__", "ok")], &[(1, 1.0)])],
        vec![],
    );
    let r = decode(&body, Version::V1, MAX).unwrap();
    assert_eq!(r.series.len(), 1);
    assert_eq!(r.refused, vec![(RemoteWriteError::NotUtf8 { index: 0 }, 1)]);
    let req = RequestV2 {
        symbols: vec!["".into(), "__name__".into(), vec![0xc3].into()],
        timeseries: vec![TimeSeriesV2 {
            labels_refs: vec![1, 2],
            samples: vec![Sample {
                value: 1.0,
                timestamp_ms: 1,
            }],
            ..Default::default()
        }],
    };
    let r = decode(&snappy(&req.encode_to_vec()), Version::V2, MAX).unwrap();
    assert_eq!(r.refused, vec![(RemoteWriteError::NotUtf8 { index: 0 }, 1)]);
}

#[test]
fn garbage_truncated_and_oversized_bodies_are_refused() {
    let good = v1_body(vec![v1_series(&[("__name__", "up")], &[(1, 1.0)])], vec![]);
    assert!(matches!(
        decode(b"not snappy at all", Version::V1, MAX),
        Err(RemoteWriteError::NotSnappy(_)) | Err(RemoteWriteError::NotProtobuf { .. })
    ));
    assert!(matches!(
        decode(&[], Version::V1, MAX),
        Err(RemoteWriteError::NotSnappy(_))
    ));
    assert!(matches!(
        decode(&good[..good.len() - 3], Version::V1, MAX),
        Err(RemoteWriteError::NotSnappy(_))
    ));
    // Snappy around bytes that are no protobuf.
    assert!(matches!(
        decode(&snappy(&[0xff; 40]), Version::V1, MAX),
        Err(RemoteWriteError::NotProtobuf { .. })
    ));
    // A header declaring 4 GB: refused before anything is allocated.
    let mut huge = vec![0x80, 0x80, 0x80, 0x80, 0x0f];
    huge.extend_from_slice(&[0; 8]);
    assert_eq!(
        decode(&huge, Version::V1, MAX),
        Err(RemoteWriteError::TooLarge {
            len: 0xf000_0000,
            max: MAX
        })
    );
    let raw_len = snap::raw::decompress_len(&good).unwrap();
    assert!(matches!(
        decode(&good, Version::V1, raw_len - 1),
        Err(RemoteWriteError::TooLarge { .. })
    ));
    assert!(decode(&good, Version::V1, raw_len).is_ok());
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode(&bytes, Version::V1, MAX);
        let _ = decode(&bytes, Version::V2, MAX);
        // The same bytes as a valid snappy block: the protobuf decoder's turn.
        let body = snappy(&bytes);
        let _ = decode(&body, Version::V1, MAX);
        let _ = decode(&body, Version::V2, MAX);
    }
}

/// A field key's bytes (numbers below 16, as these tests use).
fn key(field: u8, wire_type: u8) -> u8 {
    field << 3 | wire_type
}

#[test]
fn v1_unknown_fields_and_groups_are_skipped() {
    let plain = v1_series(&[("__name__", "up"), ("job", "a")], &[(5, 1.5)]);
    let mut raw = proto::WriteRequest {
        timeseries: vec![plain.clone()],
        metadata: vec![],
    }
    .encode_to_vec();
    // Field 9 (varint), field 10 (a group holding a varint and a nested
    // group), field 11 (fixed32), field 12 (fixed64), field 13 (bytes).
    raw.extend_from_slice(&[key(9, 0), 0x96, 0x01]);
    raw.extend_from_slice(&[key(10, 3), key(1, 0), 7, key(2, 3), key(2, 4), key(10, 4)]);
    raw.extend_from_slice(&[key(11, 5), 1, 2, 3, 4]);
    raw.extend_from_slice(&[key(12, 1), 1, 2, 3, 4, 5, 6, 7, 8]);
    raw.extend_from_slice(&[key(13, 2), 2, b'h', b'i']);
    let r = decode(&snappy(&raw), Version::V1, MAX).unwrap();
    let expected = decode(&v1_body(vec![plain], vec![]), Version::V1, MAX).unwrap();
    assert_eq!(r, expected);
    assert_eq!(r.series[0].tags(), vec![("job", "a")]);
    assert_eq!(
        r.series[0].samples,
        vec![Sample {
            value: 1.5,
            timestamp_ms: 5
        }]
    );
}

#[test]
fn v1_bodies_that_break_protobuf_are_refused_whole() {
    let good = proto::WriteRequest {
        timeseries: vec![v1_series(&[("__name__", "up")], &[(1, 1.0)])],
        metadata: vec![],
    }
    .encode_to_vec();
    let refused = |raw: &[u8]| {
        matches!(
            decode(&snappy(raw), Version::V1, MAX),
            Err(RemoteWriteError::NotProtobuf { .. })
        )
    };
    assert!(refused(&good[..good.len() - 1]), "truncated");
    // Series as a varint: the wrong wire type for a known field.
    assert!(refused(&[key(1, 0), 1]), "wrong wire type");
    // An end-group tag with no start, and a group never closed.
    assert!(refused(&[key(10, 4)]), "unmatched end");
    assert!(refused(&[key(10, 3), key(1, 0), 1]), "open group");
    // Field number 0, wire type 7, an 11-byte varint.
    assert!(refused(&[0, 1]), "field 0");
    assert!(refused(&[key(9, 7)]), "wire type 7");
    assert!(
        refused(&[
            key(9, 0),
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0x7f
        ]),
        "long varint"
    );
    // Groups nested past the limit.
    let mut deep = vec![key(10, 3); 200];
    deep.extend(vec![key(10, 4); 200]);
    assert!(refused(&deep), "too deep");
}

proptest! {
    /// The borrowing 1.0 reader takes what `prost` takes, and reads it
    /// the same: random bytes, and valid requests with bytes appended.
    #[test]
    fn the_v1_reader_agrees_with_prost(
        bytes in proptest::collection::vec(any::<u8>(), 0..256),
        names in proptest::collection::vec("[a-c_]{1,3}", 1..5),
        value in any::<f64>(),
        ts in any::<i64>(),
    ) {
        let by_prost = |raw: &[u8]| proto::WriteRequest::decode(raw).is_ok();
        let by_us = |raw: &[u8]| decode(&snappy(raw), Version::V1, MAX).is_ok();
        prop_assert_eq!(by_prost(&bytes), by_us(&bytes));
        let pairs: Vec<(&str, &str)> = std::iter::once(("__name__", "m"))
            .chain(names.iter().map(|n| (n.as_str(), "v")))
            .collect();
        let mut raw = proto::WriteRequest {
            timeseries: vec![v1_series(&pairs, &[(ts, value)])],
            metadata: vec![],
        }
        .encode_to_vec();
        // The sample as prost reads it back (a -0.0 is not sent: proto3
        // leaves out a value equal to 0, as Prometheus' encoder does).
        let sent = proto::WriteRequest::decode(raw.as_slice()).unwrap().timeseries[0].samples[0];
        let r = decode(&snappy(&raw), Version::V1, MAX).unwrap();
        if let Some(s) = r.series.first().map(|s| s.samples[0]) {
            prop_assert_eq!(s.timestamp_ms, sent.timestamp_ms);
            prop_assert_eq!(s.value.to_bits(), sent.value.to_bits());
        }
        raw.extend_from_slice(&bytes);
        prop_assert_eq!(by_prost(&raw), by_us(&raw));
    }
}
