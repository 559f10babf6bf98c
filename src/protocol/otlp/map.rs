//! OTLP metrics as Prometheus-model series: what each metric kind becomes,
//! which attributes become tags, and delta sums and histograms made
//! cumulative.
//!
//! - A gauge is a series per data point's attributes; a sum is one too
//!   (monotonic: a counter, `_total` with the naming convention on).
//! - A histogram with explicit bounds is `<name>_bucket{le="<bound>"}`
//!   (cumulative counts, `le="+Inf"` the total count), `<name>_sum` (when
//!   sent) and `<name>_count`; a summary is `<name>{quantile="<q>"}`,
//!   `<name>_sum` and `<name>_count`.
//! - Exponential histograms are refused, each of their points counted in
//!   the answer's rejected points (a Prometheus-style bucket series cannot
//!   hold their changing scale).
//! - A delta sum or histogram is added up per series into the cumulative
//!   value a Prometheus counter holds ([`DeltaState`], bounded); a point
//!   not later than its series' last is refused. An unspecified
//!   temporality is refused (the data model calls it invalid).
//! - A point flagged "no recorded value" becomes a Prometheus stale marker
//!   on each of its series.
//! - Tags: the data point's attributes, then the scope's and the
//!   resource's that [`MappingOptions`] selects (a data point's attribute
//!   wins a clash), plus `job` (`service.namespace/service.name`, or
//!   `service.name`) and `instance` (`service.instance.id`) from the
//!   resource, as the OpenTelemetry → Prometheus convention has them. A
//!   non-string value is its text (arrays and maps as JSON); an empty
//!   value is no tag, as Prometheus drops empty labels.

use std::collections::HashMap;

use parking_lot::Mutex;
use thiserror::Error;

use super::names::{self, Shape};
use super::proto::{self, any_value, metric, number_data_point};
use crate::model::point::STALE_MARKER_BITS;
use crate::protocol::remote_write::{Metadata, MetricKind, Sample, Series};

/// The tag `service.name` (with `service.namespace`) becomes.
pub const JOB: &str = "job";
/// The tag `service.instance.id` becomes.
pub const INSTANCE: &str = "instance";
/// A delta series idle this long (in its points' time) may be forgotten
/// when the [`DeltaState`] is full.
const DELTA_IDLE_NS: u64 = 3600 * 1_000_000_000;

/// Which attributes of a resource or scope become tags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Selection {
    /// None of them.
    #[default]
    None,
    /// These keys.
    Only(Vec<String>),
    /// All of them.
    All,
}

impl Selection {
    /// A configuration value: `*` for all, else keys separated by commas
    /// (empty: none).
    pub fn parse(text: &str) -> Selection {
        let text = text.trim();
        if text == "*" {
            return Selection::All;
        }
        let keys: Vec<String> = text
            .split(',')
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(String::from)
            .collect();
        if keys.is_empty() {
            Selection::None
        } else {
            Selection::Only(keys)
        }
    }

    fn takes(&self, key: &str) -> bool {
        match self {
            Selection::None => false,
            Selection::Only(keys) => keys.iter().any(|k| k == key),
            Selection::All => true,
        }
    }
}

/// How metrics become series.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MappingOptions {
    /// Names built by the OpenTelemetry → Prometheus convention
    /// ([`names`]); otherwise kept as sent.
    pub prometheus_names: bool,
    /// Resource attributes kept as tags (besides `job` and `instance`).
    pub resource_attributes: Selection,
    /// Instrumentation scope attributes kept as tags.
    pub scope_attributes: Selection,
}

/// Why data points were refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Refusal {
    #[error("metric with no name: its {points} data point(s) refused")]
    NoName { points: usize },
    #[error("exponential histogram {metric}: not supported, send explicit-bucket histograms")]
    ExponentialHistogram { metric: String },
    #[error("{metric}: aggregation temporality unspecified")]
    NoTemporality { metric: String },
    #[error("{metric}: a data point with no value")]
    NoValue { metric: String },
    #[error("{metric}: {why}")]
    BadHistogram { metric: String, why: &'static str },
    #[error("{metric}: delta point at or before the last one of its series")]
    DeltaOutOfOrder { metric: String },
    #[error(
        "{metric}: {max} delta series are being made cumulative already (tsd.otlp.delta.max_series)"
    )]
    DeltaStateFull { metric: String, max: usize },
}

/// A request as series: what the write path takes, and what was refused.
#[derive(Debug, Default)]
pub struct Translated {
    pub series: Vec<Series>,
    /// Refusals, each with the data points it cost.
    pub refused: Vec<(Refusal, usize)>,
    /// A metric's type, description and unit, once per metric.
    pub metadata: Vec<Metadata>,
    /// Data points received.
    pub data_points: usize,
}

impl Translated {
    /// Data points refused.
    pub fn refused_points(&self) -> usize {
        self.refused.iter().map(|(_, n)| n).sum()
    }

    fn refuse(&mut self, why: Refusal, points: usize) {
        if points > 0 {
            self.refused.push((why, points));
        }
    }
}

/// The running totals that make delta sums and histograms cumulative, per
/// series, for the server's life: at most `max_series` of them.
#[derive(Debug)]
pub struct DeltaState {
    series: Mutex<HashMap<String, Running>>,
    max_series: usize,
}

#[derive(Debug)]
struct Running {
    /// The last point's time.
    last_ns: u64,
    total: Total,
}

#[derive(Debug)]
enum Total {
    Number(f64),
    Histogram {
        bounds: Vec<f64>,
        counts: Vec<u64>,
        sum: f64,
        count: u64,
    },
}

impl DeltaState {
    pub fn new(max_series: usize) -> DeltaState {
        DeltaState {
            series: Mutex::new(HashMap::new()),
            max_series,
        }
    }

    /// Series being added up now.
    pub fn len(&self) -> usize {
        self.series.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds a point to its series' total (`fresh` is its first total);
    /// the new total, or why the point is refused.
    fn add(
        &self,
        key: String,
        time_ns: u64,
        metric: &str,
        fresh: impl FnOnce() -> Total,
        add: impl FnOnce(&mut Total) -> bool,
    ) -> Result<Total, Refusal> {
        let mut map = self.series.lock();
        if let Some(r) = map.get_mut(&key) {
            if time_ns <= r.last_ns {
                return Err(Refusal::DeltaOutOfOrder {
                    metric: metric.to_string(),
                });
            }
            r.last_ns = time_ns;
            if !add(&mut r.total) {
                r.total = fresh();
            }
            return Ok(r.total.clone());
        }
        if map.len() >= self.max_series {
            map.retain(|_, r| r.last_ns.saturating_add(DELTA_IDLE_NS) >= time_ns);
            if map.len() >= self.max_series {
                return Err(Refusal::DeltaStateFull {
                    metric: metric.to_string(),
                    max: self.max_series,
                });
            }
        }
        let total = fresh();
        let out = total.clone();
        map.insert(
            key,
            Running {
                last_ns: time_ns,
                total,
            },
        );
        Ok(out)
    }
}

impl Clone for Total {
    fn clone(&self) -> Total {
        match self {
            Total::Number(v) => Total::Number(*v),
            Total::Histogram {
                bounds,
                counts,
                sum,
                count,
            } => Total::Histogram {
                bounds: bounds.clone(),
                counts: counts.clone(),
                sum: *sum,
                count: *count,
            },
        }
    }
}

/// Labels of a point as (name, value), first of a name wins.
type Labels = Vec<(String, String)>;

/// Turns a decoded request into series.
pub fn translate(
    req: proto::ExportMetricsServiceRequest,
    options: &MappingOptions,
    deltas: &DeltaState,
) -> Translated {
    let mut out = Translated::default();
    let mut t = Translator {
        options,
        deltas,
        out: &mut out,
    };
    for rm in req.resource_metrics {
        let resource = rm
            .resource
            .map(|r| t.resource_labels(&r.attributes))
            .unwrap_or_default();
        for sm in rm.scope_metrics {
            let mut context = Labels::new();
            if let Some(scope) = &sm.scope {
                t.push_attributes(&mut context, &scope.attributes, &options.scope_attributes);
            }
            context.extend(resource.iter().cloned());
            for m in sm.metrics {
                t.metric(m, &context);
            }
        }
    }
    out
}

struct Translator<'a> {
    options: &'a MappingOptions,
    deltas: &'a DeltaState,
    out: &'a mut Translated,
}

/// What a number series' values mean.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Temporality {
    /// As sent (gauges, cumulative sums).
    AsIs,
    /// Deltas to add up.
    Delta,
}

impl Translator<'_> {
    fn key(&self, key: &str) -> String {
        if self.options.prometheus_names {
            names::label_name(key)
        } else {
            key.to_string()
        }
    }

    fn resource_labels(&self, attributes: &[proto::KeyValue]) -> Labels {
        let text = |k: &str| {
            attributes
                .iter()
                .find(|a| a.key == k)
                .map(|a| value_text(a.value.as_ref()))
                .filter(|v| !v.is_empty())
        };
        let mut labels = Labels::new();
        if let Some(name) = text("service.name") {
            let job = match text("service.namespace") {
                Some(ns) => format!("{ns}/{name}"),
                None => name,
            };
            labels.push((JOB.to_string(), job));
        }
        if let Some(id) = text("service.instance.id") {
            labels.push((INSTANCE.to_string(), id));
        }
        self.push_attributes(&mut labels, attributes, &self.options.resource_attributes);
        labels
    }

    fn push_attributes(
        &self,
        labels: &mut Labels,
        attributes: &[proto::KeyValue],
        selection: &Selection,
    ) {
        for a in attributes {
            if selection.takes(&a.key) {
                labels.push((self.key(&a.key), value_text(a.value.as_ref())));
            }
        }
    }

    /// A point's labels: its attributes, then `context`'s.
    fn labels(&self, attributes: &[proto::KeyValue], context: &Labels) -> Labels {
        let mut labels: Labels = attributes
            .iter()
            .map(|a| (self.key(&a.key), value_text(a.value.as_ref())))
            .collect();
        labels.extend(context.iter().cloned());
        labels
    }

    fn name(&self, m: &proto::Metric, shape: Shape) -> String {
        if self.options.prometheus_names {
            names::metric_name(&m.name, &m.unit, shape)
        } else {
            m.name.clone()
        }
    }

    fn metric(&mut self, m: proto::Metric, context: &Labels) {
        let Some(data) = &m.data else {
            return;
        };
        let points = match data {
            metric::Data::Gauge(g) => g.data_points.len(),
            metric::Data::Sum(s) => s.data_points.len(),
            metric::Data::Histogram(h) => h.data_points.len(),
            metric::Data::ExponentialHistogram(h) => h.data_points.len(),
            metric::Data::Summary(s) => s.data_points.len(),
        };
        self.out.data_points += points;
        if m.name.is_empty() {
            self.out.refuse(Refusal::NoName { points }, points);
            return;
        }
        let temporality = |t: i32, name: &str| match t {
            proto::TEMPORALITY_DELTA => Ok(Temporality::Delta),
            proto::TEMPORALITY_CUMULATIVE => Ok(Temporality::AsIs),
            _ => Err(Refusal::NoTemporality {
                metric: name.to_string(),
            }),
        };
        let (name, kind) = match data {
            metric::Data::Gauge(g) => {
                let name = self.name(&m, Shape::Gauge);
                for p in &g.data_points {
                    self.number(&name, p, context, Temporality::AsIs);
                }
                (name, MetricKind::Gauge)
            }
            metric::Data::Sum(s) => {
                let (shape, kind) = if s.is_monotonic {
                    (Shape::Counter, MetricKind::Counter)
                } else {
                    (Shape::Other, MetricKind::Gauge)
                };
                let name = self.name(&m, shape);
                match temporality(s.aggregation_temporality, &name) {
                    Ok(t) => {
                        for p in &s.data_points {
                            self.number(&name, p, context, t);
                        }
                    }
                    Err(why) => self.out.refuse(why, points),
                }
                (name, kind)
            }
            metric::Data::Histogram(h) => {
                let name = self.name(&m, Shape::Other);
                match temporality(h.aggregation_temporality, &name) {
                    Ok(t) => {
                        for p in &h.data_points {
                            self.histogram(&name, p, context, t);
                        }
                    }
                    Err(why) => self.out.refuse(why, points),
                }
                (name, MetricKind::Histogram)
            }
            metric::Data::ExponentialHistogram(_) => {
                let name = self.name(&m, Shape::Other);
                self.out
                    .refuse(Refusal::ExponentialHistogram { metric: name }, points);
                return;
            }
            metric::Data::Summary(s) => {
                let name = self.name(&m, Shape::Other);
                for p in &s.data_points {
                    self.summary(&name, p, context);
                }
                (name, MetricKind::Summary)
            }
        };
        if !self.out.metadata.iter().any(|md| md.metric == name) {
            self.out.metadata.push(Metadata {
                metric: name,
                kind,
                help: m.description,
                unit: m.unit,
            });
        }
    }

    /// Files one series of one sample.
    fn push(
        &mut self,
        metric: String,
        labels: &Labels,
        extra: Option<(&str, String)>,
        ms: i64,
        value: f64,
    ) {
        let mut pairs: Vec<(&str, &str)> = Vec::with_capacity(labels.len() + 1);
        if let Some((k, v)) = &extra {
            pairs.push((k, v));
        }
        for (k, v) in labels {
            if !v.is_empty() && !pairs.iter().any(|(other, _)| other == k) {
                pairs.push((k, v));
            }
        }
        pairs.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let sample = Sample {
            value,
            timestamp_ms: ms,
        };
        self.out
            .series
            .push(Series::new(&metric, &pairs, vec![sample]));
    }

    fn number(
        &mut self,
        name: &str,
        p: &proto::NumberDataPoint,
        context: &Labels,
        temporality: Temporality,
    ) {
        let labels = self.labels(&p.attributes, context);
        let ms = millis(p.time_unix_nano);
        if p.flags & proto::FLAG_NO_RECORDED_VALUE != 0 {
            self.push(name.to_string(), &labels, None, ms, stale());
            return;
        }
        let value = match p.value {
            Some(number_data_point::Value::AsDouble(v)) => v,
            Some(number_data_point::Value::AsInt(v)) => v as f64,
            None => {
                let why = Refusal::NoValue {
                    metric: name.to_string(),
                };
                self.out.refuse(why, 1);
                return;
            }
        };
        let value = match temporality {
            Temporality::AsIs => value,
            Temporality::Delta => {
                let key = series_key(name, &labels);
                let added = self.deltas.add(
                    key,
                    p.time_unix_nano,
                    name,
                    || Total::Number(value),
                    |t| match t {
                        Total::Number(v) => {
                            *v += value;
                            true
                        }
                        Total::Histogram { .. } => false,
                    },
                );
                match added {
                    Ok(Total::Number(v)) => v,
                    Ok(Total::Histogram { .. }) => value,
                    Err(why) => {
                        self.out.refuse(why, 1);
                        return;
                    }
                }
            }
        };
        self.push(name.to_string(), &labels, None, ms, value);
    }

    fn histogram(
        &mut self,
        name: &str,
        p: &proto::HistogramDataPoint,
        context: &Labels,
        temporality: Temporality,
    ) {
        let labels = self.labels(&p.attributes, context);
        let ms = millis(p.time_unix_nano);
        let bad = |why| Refusal::BadHistogram {
            metric: name.to_string(),
            why,
        };
        if !p.bucket_counts.is_empty() && p.bucket_counts.len() != p.explicit_bounds.len() + 1 {
            let why = "bucket_counts must have one more entry than explicit_bounds";
            self.out.refuse(bad(why), 1);
            return;
        }
        if p.explicit_bounds.iter().any(|b| b.is_nan())
            || p.explicit_bounds.windows(2).any(|w| w[0] >= w[1])
        {
            self.out
                .refuse(bad("explicit_bounds must increase strictly"), 1);
            return;
        }
        let stale = p.flags & proto::FLAG_NO_RECORDED_VALUE != 0;
        let (counts, sum, count) = if stale {
            (p.bucket_counts.clone(), p.sum, p.count)
        } else {
            match temporality {
                Temporality::AsIs => (p.bucket_counts.clone(), p.sum, p.count),
                Temporality::Delta => {
                    let key = series_key(name, &labels);
                    let fresh = || Total::Histogram {
                        bounds: p.explicit_bounds.clone(),
                        counts: p.bucket_counts.clone(),
                        sum: p.sum.unwrap_or(0.0),
                        count: p.count,
                    };
                    let added = self
                        .deltas
                        .add(key, p.time_unix_nano, name, fresh, |t| match t {
                            Total::Histogram {
                                bounds,
                                counts,
                                sum,
                                count,
                            } if *bounds == p.explicit_bounds
                                && counts.len() == p.bucket_counts.len() =>
                            {
                                for (c, d) in counts.iter_mut().zip(&p.bucket_counts) {
                                    *c = c.saturating_add(*d);
                                }
                                *sum += p.sum.unwrap_or(0.0);
                                *count = count.saturating_add(p.count);
                                true
                            }
                            // New bounds start the series again.
                            _ => false,
                        });
                    match added {
                        Ok(Total::Histogram {
                            counts, sum, count, ..
                        }) => (counts, p.sum.map(|_| sum), count),
                        Ok(Total::Number(_)) => (p.bucket_counts.clone(), p.sum, p.count),
                        Err(why) => {
                            self.out.refuse(why, 1);
                            return;
                        }
                    }
                }
            }
        };
        let value = |v: f64| if stale { self::stale() } else { v };
        let bucket = format!("{name}_bucket");
        let mut cumulative: u64 = 0;
        for (bound, c) in p.explicit_bounds.iter().zip(&counts) {
            cumulative = cumulative.saturating_add(*c);
            let le = Some(("le", number_text(*bound)));
            self.push(bucket.clone(), &labels, le, ms, value(cumulative as f64));
        }
        let le = Some(("le", "+Inf".to_string()));
        self.push(bucket, &labels, le, ms, value(count as f64));
        if let Some(sum) = sum {
            self.push(format!("{name}_sum"), &labels, None, ms, value(sum));
        }
        self.push(
            format!("{name}_count"),
            &labels,
            None,
            ms,
            value(count as f64),
        );
    }

    fn summary(&mut self, name: &str, p: &proto::SummaryDataPoint, context: &Labels) {
        let labels = self.labels(&p.attributes, context);
        let ms = millis(p.time_unix_nano);
        let stale = p.flags & proto::FLAG_NO_RECORDED_VALUE != 0;
        let value = |v: f64| if stale { self::stale() } else { v };
        for q in &p.quantile_values {
            let quantile = Some(("quantile", number_text(q.quantile)));
            self.push(name.to_string(), &labels, quantile, ms, value(q.value));
        }
        self.push(format!("{name}_sum"), &labels, None, ms, value(p.sum));
        self.push(
            format!("{name}_count"),
            &labels,
            None,
            ms,
            value(p.count as f64),
        );
    }
}

/// Prometheus' stale marker.
fn stale() -> f64 {
    f64::from_bits(STALE_MARKER_BITS)
}

/// Milliseconds of a time in nanoseconds.
fn millis(ns: u64) -> i64 {
    (ns / 1_000_000) as i64
}

/// A bound or quantile as a label value: `+Inf`, `-Inf`, else the
/// shortest decimal that reads back the same (`0.005`, `10`).
fn number_text(v: f64) -> String {
    if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

/// A series' identity for its delta total: the name and its labels
/// sorted, none empty, separated by bytes no name holds.
fn series_key(name: &str, labels: &Labels) -> String {
    let mut pairs: Vec<(&str, &str)> = Vec::with_capacity(labels.len());
    for (k, v) in labels {
        if !v.is_empty() && !pairs.iter().any(|(other, _)| other == k) {
            pairs.push((k, v));
        }
    }
    pairs.sort_unstable();
    let mut key = String::from(name);
    for (k, v) in pairs {
        key.push('\0');
        key.push_str(k);
        key.push('\u{1}');
        key.push_str(v);
    }
    key
}

/// An attribute value as tag text.
fn value_text(v: Option<&proto::AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        None => String::new(),
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(other) => {
            let json = json_of(other);
            match json {
                serde_json::Value::String(s) => s,
                j => j.to_string(),
            }
        }
    }
}

/// An attribute value as JSON (arrays and maps as OpenTelemetry's
/// Prometheus exporter writes them).
fn json_of(v: &any_value::Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        any_value::Value::StringValue(s) => J::String(s.clone()),
        any_value::Value::BoolValue(b) => J::Bool(*b),
        any_value::Value::IntValue(i) => J::from(*i),
        any_value::Value::DoubleValue(d) => match serde_json::Number::from_f64(*d) {
            Some(n) => J::Number(n),
            None => J::String(number_text(*d)),
        },
        any_value::Value::ArrayValue(a) => J::Array(
            a.values
                .iter()
                .map(|v| v.value.as_ref().map_or(J::Null, json_of))
                .collect(),
        ),
        any_value::Value::KvlistValue(kv) => J::Object(
            kv.values
                .iter()
                .map(|e| {
                    let v = e.value.as_ref().and_then(|v| v.value.as_ref());
                    (e.key.clone(), v.map_or(J::Null, json_of))
                })
                .collect(),
        ),
        any_value::Value::BytesValue(b) => J::String(base64(b)),
    }
}

/// Standard base64 with padding: a protobuf `bytes` attribute as OTLP/JSON
/// would have sent it.
fn base64(b: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for chunk in b.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, &c| (n << 8) | u32::from(c)) << (8 * (3 - chunk.len()));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
