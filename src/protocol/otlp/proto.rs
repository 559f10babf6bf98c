//! The OTLP metrics messages, declared by hand for `prost` (no protoc, no
//! build step) and for serde (OTLP/JSON): `ExportMetricsServiceRequest`
//! and its response from opentelemetry-proto v1.x
//! (`collector/metrics/v1/metrics_service.proto`, `metrics/v1/metrics.proto`,
//! `common/v1/common.proto`, `resource/v1/resource.proto`). Field numbers
//! are the .proto files'; fields rtsdb does not read (exemplars, min and
//! max, schema URLs, dropped-attribute counts, an exponential
//! histogram's buckets) are left out, and prost and serde skip them.
//!
//! The JSON names are OTLP/JSON's: lowerCamelCase, with the .proto's
//! snake_case accepted too (receivers must take both); 64-bit integers
//! as decimal strings or numbers, doubles as numbers or the strings
//! `NaN`/`Infinity`/`-Infinity` (see [`super::json`]); enums as numbers
//! (or their names); unknown fields ignored.

use serde::Deserialize;

use super::json;

/// `opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ExportMetricsServiceRequest {
    #[prost(message, repeated, tag = "1")]
    #[serde(alias = "resource_metrics", deserialize_with = "json::list")]
    pub resource_metrics: Vec<ResourceMetrics>,
}

/// `opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportMetricsServiceResponse {
    #[prost(message, optional, tag = "1")]
    pub partial_success: Option<ExportMetricsPartialSuccess>,
}

/// `opentelemetry.proto.collector.metrics.v1.ExportMetricsPartialSuccess`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportMetricsPartialSuccess {
    #[prost(int64, tag = "1")]
    pub rejected_data_points: i64,
    #[prost(string, tag = "2")]
    pub error_message: String,
}

/// `google.rpc.Status`: the body of an OTLP/HTTP error answer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Status {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

/// `opentelemetry.proto.metrics.v1.ResourceMetrics`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ResourceMetrics {
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    #[serde(alias = "scope_metrics", deserialize_with = "json::list")]
    pub scope_metrics: Vec<ScopeMetrics>,
}

/// `opentelemetry.proto.resource.v1.Resource`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Resource {
    #[prost(message, repeated, tag = "1")]
    #[serde(deserialize_with = "json::list")]
    pub attributes: Vec<KeyValue>,
}

/// `opentelemetry.proto.metrics.v1.ScopeMetrics`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ScopeMetrics {
    #[prost(message, optional, tag = "1")]
    pub scope: Option<InstrumentationScope>,
    #[prost(message, repeated, tag = "2")]
    #[serde(deserialize_with = "json::list")]
    pub metrics: Vec<Metric>,
}

/// `opentelemetry.proto.common.v1.InstrumentationScope`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct InstrumentationScope {
    #[prost(string, tag = "1")]
    #[serde(deserialize_with = "json::string")]
    pub name: String,
    #[prost(string, tag = "2")]
    #[serde(deserialize_with = "json::string")]
    pub version: String,
    #[prost(message, repeated, tag = "3")]
    #[serde(deserialize_with = "json::list")]
    pub attributes: Vec<KeyValue>,
}

/// `opentelemetry.proto.common.v1.KeyValue`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    #[serde(deserialize_with = "json::string")]
    pub key: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

/// `opentelemetry.proto.common.v1.AnyValue`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(from = "AnyValueJson")]
pub struct AnyValue {
    #[prost(oneof = "any_value::Value", tags = "1, 2, 3, 4, 5, 6, 7")]
    pub value: Option<any_value::Value>,
}

pub mod any_value {
    /// `AnyValue.value`.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Value {
        #[prost(string, tag = "1")]
        StringValue(String),
        #[prost(bool, tag = "2")]
        BoolValue(bool),
        #[prost(int64, tag = "3")]
        IntValue(i64),
        #[prost(double, tag = "4")]
        DoubleValue(f64),
        #[prost(message, tag = "5")]
        ArrayValue(super::ArrayValue),
        #[prost(message, tag = "6")]
        KvlistValue(super::KeyValueList),
        #[prost(bytes = "vec", tag = "7")]
        BytesValue(Vec<u8>),
    }
}

/// [`AnyValue`] in OTLP/JSON: its oneof's member is a field of its own.
/// (serde's `flatten` would drop a member that fails to decode, and its
/// point with it, instead of refusing the body.)
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct AnyValueJson {
    #[serde(alias = "string_value", deserialize_with = "json::opt_string")]
    string_value: Option<String>,
    #[serde(alias = "bool_value", deserialize_with = "json::opt_boolean")]
    bool_value: Option<bool>,
    #[serde(alias = "int_value", deserialize_with = "json::opt_i64")]
    int_value: Option<i64>,
    #[serde(alias = "double_value", deserialize_with = "json::opt_f64")]
    double_value: Option<f64>,
    #[serde(alias = "array_value")]
    array_value: Option<ArrayValue>,
    #[serde(alias = "kvlist_value")]
    kvlist_value: Option<KeyValueList>,
    #[serde(alias = "bytes_value", deserialize_with = "json::opt_bytes")]
    bytes_value: Option<Vec<u8>>,
}

impl From<AnyValueJson> for AnyValue {
    fn from(j: AnyValueJson) -> AnyValue {
        use any_value::Value as V;
        let value = j
            .string_value
            .map(V::StringValue)
            .or(j.bool_value.map(V::BoolValue))
            .or(j.int_value.map(V::IntValue))
            .or(j.double_value.map(V::DoubleValue))
            .or(j.array_value.map(V::ArrayValue))
            .or(j.kvlist_value.map(V::KvlistValue))
            .or(j.bytes_value.map(V::BytesValue));
        AnyValue { value }
    }
}

/// `opentelemetry.proto.common.v1.ArrayValue`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default)]
pub struct ArrayValue {
    #[prost(message, repeated, tag = "1")]
    #[serde(deserialize_with = "json::list")]
    pub values: Vec<AnyValue>,
}

/// `opentelemetry.proto.common.v1.KeyValueList`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default)]
pub struct KeyValueList {
    #[prost(message, repeated, tag = "1")]
    #[serde(deserialize_with = "json::list")]
    pub values: Vec<KeyValue>,
}

/// `opentelemetry.proto.metrics.v1.Metric`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(from = "MetricJson")]
pub struct Metric {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub description: String,
    #[prost(string, tag = "3")]
    pub unit: String,
    #[prost(oneof = "metric::Data", tags = "5, 7, 9, 10, 11")]
    pub data: Option<metric::Data>,
}

pub mod metric {
    /// `Metric.data`.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Data {
        #[prost(message, tag = "5")]
        Gauge(super::Gauge),
        #[prost(message, tag = "7")]
        Sum(super::Sum),
        #[prost(message, tag = "9")]
        Histogram(super::Histogram),
        #[prost(message, tag = "10")]
        ExponentialHistogram(super::ExponentialHistogram),
        #[prost(message, tag = "11")]
        Summary(super::Summary),
    }
}

/// [`Metric`] in OTLP/JSON (see [`AnyValueJson`]).
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct MetricJson {
    #[serde(deserialize_with = "json::string")]
    name: String,
    #[serde(deserialize_with = "json::string")]
    description: String,
    #[serde(deserialize_with = "json::string")]
    unit: String,
    gauge: Option<Gauge>,
    sum: Option<Sum>,
    histogram: Option<Histogram>,
    #[serde(alias = "exponential_histogram")]
    exponential_histogram: Option<ExponentialHistogram>,
    summary: Option<Summary>,
}

impl From<MetricJson> for Metric {
    fn from(j: MetricJson) -> Metric {
        use metric::Data as D;
        let data = j
            .gauge
            .map(D::Gauge)
            .or(j.sum.map(D::Sum))
            .or(j.histogram.map(D::Histogram))
            .or(j.exponential_histogram.map(D::ExponentialHistogram))
            .or(j.summary.map(D::Summary));
        Metric {
            name: j.name,
            description: j.description,
            unit: j.unit,
            data,
        }
    }
}

/// `opentelemetry.proto.metrics.v1.AggregationTemporality`.
pub const TEMPORALITY_DELTA: i32 = 1;
/// `AGGREGATION_TEMPORALITY_CUMULATIVE`.
pub const TEMPORALITY_CUMULATIVE: i32 = 2;
/// `DataPointFlags.DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK`.
pub const FLAG_NO_RECORDED_VALUE: u32 = 1;

/// `opentelemetry.proto.metrics.v1.Gauge`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Gauge {
    #[prost(message, repeated, tag = "1")]
    #[serde(alias = "data_points", deserialize_with = "json::list")]
    pub data_points: Vec<NumberDataPoint>,
}

/// `opentelemetry.proto.metrics.v1.Sum`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Sum {
    #[prost(message, repeated, tag = "1")]
    #[serde(alias = "data_points", deserialize_with = "json::list")]
    pub data_points: Vec<NumberDataPoint>,
    #[prost(int32, tag = "2")]
    #[serde(
        alias = "aggregation_temporality",
        deserialize_with = "json::temporality"
    )]
    pub aggregation_temporality: i32,
    #[prost(bool, tag = "3")]
    #[serde(alias = "is_monotonic", deserialize_with = "json::boolean")]
    pub is_monotonic: bool,
}

/// `opentelemetry.proto.metrics.v1.Histogram`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Histogram {
    #[prost(message, repeated, tag = "1")]
    #[serde(alias = "data_points", deserialize_with = "json::list")]
    pub data_points: Vec<HistogramDataPoint>,
    #[prost(int32, tag = "2")]
    #[serde(
        alias = "aggregation_temporality",
        deserialize_with = "json::temporality"
    )]
    pub aggregation_temporality: i32,
}

/// `opentelemetry.proto.metrics.v1.ExponentialHistogram`: only its points
/// are counted (rtsdb refuses them), so each is kept undecoded.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ExponentialHistogram {
    #[prost(bytes = "vec", repeated, tag = "1")]
    #[serde(alias = "data_points", deserialize_with = "json::count_list")]
    pub data_points: Vec<Vec<u8>>,
}

/// `opentelemetry.proto.metrics.v1.Summary`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Summary {
    #[prost(message, repeated, tag = "1")]
    #[serde(alias = "data_points", deserialize_with = "json::list")]
    pub data_points: Vec<SummaryDataPoint>,
}

/// `opentelemetry.proto.metrics.v1.NumberDataPoint`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(from = "NumberDataPointJson")]
pub struct NumberDataPoint {
    #[prost(message, repeated, tag = "7")]
    pub attributes: Vec<KeyValue>,
    #[prost(fixed64, tag = "2")]
    pub start_time_unix_nano: u64,
    #[prost(fixed64, tag = "3")]
    pub time_unix_nano: u64,
    #[prost(oneof = "number_data_point::Value", tags = "4, 6")]
    pub value: Option<number_data_point::Value>,
    #[prost(uint32, tag = "8")]
    pub flags: u32,
}

pub mod number_data_point {
    /// `NumberDataPoint.value`.
    #[derive(Clone, Copy, PartialEq, prost::Oneof)]
    pub enum Value {
        #[prost(double, tag = "4")]
        AsDouble(f64),
        #[prost(sfixed64, tag = "6")]
        AsInt(i64),
    }
}

/// [`NumberDataPoint`] in OTLP/JSON (see [`AnyValueJson`]).
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct NumberDataPointJson {
    #[serde(deserialize_with = "json::list")]
    attributes: Vec<KeyValue>,
    #[serde(alias = "start_time_unix_nano", deserialize_with = "json::u64")]
    start_time_unix_nano: u64,
    #[serde(alias = "time_unix_nano", deserialize_with = "json::u64")]
    time_unix_nano: u64,
    #[serde(alias = "as_double", deserialize_with = "json::opt_f64")]
    as_double: Option<f64>,
    #[serde(alias = "as_int", deserialize_with = "json::opt_i64")]
    as_int: Option<i64>,
    #[serde(deserialize_with = "json::u32")]
    flags: u32,
}

impl From<NumberDataPointJson> for NumberDataPoint {
    fn from(j: NumberDataPointJson) -> NumberDataPoint {
        use number_data_point::Value as V;
        NumberDataPoint {
            attributes: j.attributes,
            start_time_unix_nano: j.start_time_unix_nano,
            time_unix_nano: j.time_unix_nano,
            value: j.as_double.map(V::AsDouble).or(j.as_int.map(V::AsInt)),
            flags: j.flags,
        }
    }
}

/// `opentelemetry.proto.metrics.v1.HistogramDataPoint`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HistogramDataPoint {
    #[prost(message, repeated, tag = "9")]
    #[serde(deserialize_with = "json::list")]
    pub attributes: Vec<KeyValue>,
    #[prost(fixed64, tag = "2")]
    #[serde(alias = "start_time_unix_nano", deserialize_with = "json::u64")]
    pub start_time_unix_nano: u64,
    #[prost(fixed64, tag = "3")]
    #[serde(alias = "time_unix_nano", deserialize_with = "json::u64")]
    pub time_unix_nano: u64,
    #[prost(fixed64, tag = "4")]
    #[serde(deserialize_with = "json::u64")]
    pub count: u64,
    #[prost(double, optional, tag = "5")]
    #[serde(deserialize_with = "json::opt_f64")]
    pub sum: Option<f64>,
    #[prost(fixed64, repeated, tag = "6")]
    #[serde(alias = "bucket_counts", deserialize_with = "json::u64_list")]
    pub bucket_counts: Vec<u64>,
    #[prost(double, repeated, tag = "7")]
    #[serde(alias = "explicit_bounds", deserialize_with = "json::f64_list")]
    pub explicit_bounds: Vec<f64>,
    #[prost(uint32, tag = "10")]
    #[serde(deserialize_with = "json::u32")]
    pub flags: u32,
}

/// `opentelemetry.proto.metrics.v1.SummaryDataPoint`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SummaryDataPoint {
    #[prost(message, repeated, tag = "7")]
    #[serde(deserialize_with = "json::list")]
    pub attributes: Vec<KeyValue>,
    #[prost(fixed64, tag = "2")]
    #[serde(alias = "start_time_unix_nano", deserialize_with = "json::u64")]
    pub start_time_unix_nano: u64,
    #[prost(fixed64, tag = "3")]
    #[serde(alias = "time_unix_nano", deserialize_with = "json::u64")]
    pub time_unix_nano: u64,
    #[prost(fixed64, tag = "4")]
    #[serde(deserialize_with = "json::u64")]
    pub count: u64,
    #[prost(double, tag = "5")]
    #[serde(deserialize_with = "json::f64")]
    pub sum: f64,
    #[prost(message, repeated, tag = "6")]
    #[serde(alias = "quantile_values", deserialize_with = "json::list")]
    pub quantile_values: Vec<ValueAtQuantile>,
    #[prost(uint32, tag = "8")]
    #[serde(deserialize_with = "json::u32")]
    pub flags: u32,
}

/// `SummaryDataPoint.ValueAtQuantile`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(default)]
pub struct ValueAtQuantile {
    #[prost(double, tag = "1")]
    #[serde(deserialize_with = "json::f64")]
    pub quantile: f64,
    #[prost(double, tag = "2")]
    #[serde(deserialize_with = "json::f64")]
    pub value: f64,
}
