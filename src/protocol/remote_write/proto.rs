//! The protobuf messages of remote write, declared by hand for `prost`
//! (no protoc, no build step): 1.0's `prometheus.WriteRequest`
//! (prompb/remote.proto and types.proto of Prometheus 2.42) and 2.0's
//! `io.prometheus.write.v2.Request` (the 2.0 spec's types.proto). Field
//! numbers are the .proto files'. 1.0's series are read without them
//! (`super::wire`), these declare what the tests encode. Native histograms and exemplars are
//! kept as their encoded bytes: rtsdb refuses the first and does not
//! store the second, and only needs to count them. Label names, values
//! and 2.0 symbols are slices of the decompressed body (`Bytes`), not
//! a string each: a request holds thousands of them, and they are
//! checked as UTF-8 once, where they are read ([`super::Text`]).

use bytes::Bytes;

pub(crate) use super::Sample;

/// 1.0 `prometheus.WriteRequest`.
///
/// 1.0 bodies are read by [`super::wire`] (borrowing), so this declaration
/// only encodes the tests' bodies.
#[cfg(test)]
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
    // Tag 2 is reserved (Cortex's source field).
    #[prost(message, repeated, tag = "3")]
    pub metadata: Vec<MetricMetadata>,
}

/// 1.0 `prometheus.TimeSeries`.
///
/// 1.0 bodies are read by [`super::wire`] (borrowing), so this declaration
/// only encodes the tests' bodies.
#[cfg(test)]
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TimeSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
    /// `Exemplar` messages, undecoded.
    #[prost(bytes = "vec", repeated, tag = "3")]
    pub exemplars: Vec<Vec<u8>>,
    /// `Histogram` messages (native histograms), undecoded.
    #[prost(bytes = "vec", repeated, tag = "4")]
    pub histograms: Vec<Vec<u8>>,
}

/// 1.0 `prometheus.Label`.
///
/// 1.0 bodies are read by [`super::wire`] (borrowing), so this declaration
/// only encodes the tests' bodies.
#[cfg(test)]
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Label {
    #[prost(bytes = "bytes", tag = "1")]
    pub name: Bytes,
    #[prost(bytes = "bytes", tag = "2")]
    pub value: Bytes,
}

/// 1.0 `prometheus.MetricMetadata`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct MetricMetadata {
    /// `MetricType`: UNKNOWN 0, COUNTER 1, GAUGE 2, HISTOGRAM 3,
    /// GAUGEHISTOGRAM 4, SUMMARY 5, INFO 6, STATESET 7.
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    #[prost(string, tag = "2")]
    pub metric_family_name: String,
    #[prost(string, tag = "4")]
    pub help: String,
    #[prost(string, tag = "5")]
    pub unit: String,
}

/// 2.0 `io.prometheus.write.v2.Request`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RequestV2 {
    // Tags 1 to 3 are reserved (1.0's fields).
    #[prost(bytes = "bytes", repeated, tag = "4")]
    pub symbols: Vec<Bytes>,
    #[prost(message, repeated, tag = "5")]
    pub timeseries: Vec<TimeSeriesV2>,
}

/// 2.0 `io.prometheus.write.v2.TimeSeries`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TimeSeriesV2 {
    /// Name and value pairs of indices into `symbols`.
    #[prost(uint32, repeated, tag = "1")]
    pub labels_refs: Vec<u32>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
    /// `Histogram` messages (native histograms), undecoded.
    #[prost(bytes = "vec", repeated, tag = "3")]
    pub histograms: Vec<Vec<u8>>,
    /// `Exemplar` messages, undecoded.
    #[prost(bytes = "vec", repeated, tag = "4")]
    pub exemplars: Vec<Vec<u8>>,
    #[prost(message, optional, tag = "5")]
    pub metadata: Option<MetadataV2>,
    #[prost(int64, tag = "6")]
    pub created_timestamp: i64,
}

/// 2.0 `io.prometheus.write.v2.Metadata`.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub(crate) struct MetadataV2 {
    /// `MetricType`: UNSPECIFIED 0, then as 1.0's.
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    #[prost(uint32, tag = "3")]
    pub help_ref: u32,
    #[prost(uint32, tag = "4")]
    pub unit_ref: u32,
}
