//! Prometheus remote write bodies: snappy block format around a protobuf
//! 1.0 `prometheus.WriteRequest` or 2.0 `io.prometheus.write.v2.Request`,
//! decoded into a neutral form the write path takes: series (the metric,
//! the other labels sorted by name, the samples) and metadata entries.
//! Pure parsing, no I/O. 1.0, what every sender here speaks, is read by
//! a protobuf reader that borrows from the decompressed body ([`wire`]);
//! 2.0 by `prost` (its symbol table makes each name one slice for the
//! whole request already).
//!
//! A body that is not snappy or not protobuf is refused whole. A series
//! that cannot be taken (no `__name__`, a duplicate or invalid label
//! name, a 2.0 symbol reference past the table, native histograms) is
//! refused alone: the others are still written, and the first refusal
//! is what the sender is told, as a receiver that skips bad samples
//! does. Labels with an empty value are dropped, as Prometheus drops
//! them.

mod proto;
mod wire;

use crate::model::name::{is_prometheus_label_name, is_prometheus_metric_name};
use std::ops::Range;

use bytes::Bytes;
use prost::Message as _;
use thiserror::Error;

/// The protocol version of a body, from its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// `application/x-protobuf` (`proto=prometheus.WriteRequest`).
    V1,
    /// `application/x-protobuf;proto=io.prometheus.write.v2.Request`.
    V2,
}

impl Version {
    /// The version a `Content-Type` names; `None` for a type remote write
    /// does not have (answered 415). No header at all is 1.0, which is
    /// what every sender that omits it speaks.
    pub fn of_content_type(header: Option<&str>) -> Option<Version> {
        let Some(header) = header else {
            return Some(Version::V1);
        };
        let mut parts = header.split(';').map(str::trim);
        let media = parts.next().unwrap_or("");
        if !media.eq_ignore_ascii_case("application/x-protobuf") {
            return None;
        }
        let mut version = Version::V1;
        for p in parts {
            let Some((k, v)) = p.split_once('=') else {
                continue;
            };
            if !k.trim().eq_ignore_ascii_case("proto") {
                continue;
            }
            version = match v.trim().trim_matches('"') {
                "prometheus.WriteRequest" => Version::V1,
                "io.prometheus.write.v2.Request" => Version::V2,
                _ => return None,
            };
        }
        Some(version)
    }
}

/// Why a body, or one series of it, was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RemoteWriteError {
    #[error("the body is not snappy block format: {0}")]
    NotSnappy(String),
    #[error("the body decompresses to {len} bytes, more than the {max} allowed")]
    TooLarge { len: usize, max: usize },
    #[error("the body is not a protobuf {message}: {cause}")]
    NotProtobuf {
        message: &'static str,
        cause: String,
    },
    #[error("series {index}: symbol reference {reference} is past the {symbols} symbols")]
    BadSymbolRef {
        index: usize,
        reference: u32,
        symbols: usize,
    },
    #[error("series {index}: an odd number of label references ({refs})")]
    OddLabelRefs { index: usize, refs: usize },
    #[error("series {index}: a label name or value is not UTF-8")]
    NotUtf8 { index: usize },
    #[error("duplicate label name {name:?} in series {series}")]
    DuplicateLabel { series: String, name: String },
    #[error("invalid label name {name:?} in series {series}")]
    InvalidLabelName { series: String, name: String },
    #[error("invalid metric name {name:?} in series {series}")]
    InvalidMetricName { series: String, name: String },
    #[error("no __name__ label in series {series}")]
    NoMetricName { series: String },
    #[error(
        "native histograms are not supported: {count} native histogram sample(s) refused in series {series}"
    )]
    NativeHistograms { series: String, count: usize },
}

/// One sample: the value, bit for bit (a stale marker's NaN payload
/// included), and milliseconds since the epoch. It is the protobuf
/// `Sample` of both versions itself, so a series' samples are decoded
/// once, in place.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(double, tag = "1")]
    pub value: f64,
    #[prost(int64, tag = "2")]
    pub timestamp_ms: i64,
}

/// A name or label value: a slice of the decompressed body, known to be
/// UTF-8.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Text(Bytes);

impl Text {
    /// `b` if it is UTF-8.
    fn new(b: Bytes) -> Option<Text> {
        std::str::from_utf8(&b).ok()?;
        Some(Text(b))
    }

    pub fn as_str(&self) -> &str {
        // SAFETY: `Text::new`, the only constructor, checked the bytes
        // are UTF-8, and `Bytes` never changes them.
        unsafe { std::str::from_utf8_unchecked(&self.0) }
    }
}

impl std::fmt::Debug for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

/// A series as the write path takes it. Its names are one string (the
/// metric, then each label's name and value), not a string each: one
/// allocation per series, where the write path resolves thousands of
/// series a request.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// `__name__`'s value, then the other labels' names and values.
    text: String,
    /// Where `__name__`'s value ends in `text`.
    metric_end: usize,
    /// The other labels (name, value) in `text`, sorted by name, none
    /// empty.
    labels: Vec<(Range<usize>, Range<usize>)>,
    pub samples: Vec<Sample>,
}

impl Series {
    /// The series of `metric` and `labels` (sorted by name, none empty).
    pub(crate) fn new(metric: &str, labels: &[(&str, &str)], samples: Vec<Sample>) -> Series {
        let len = metric.len() + labels.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
        let mut text = String::with_capacity(len);
        text.push_str(metric);
        let mut span = |s: &str| {
            let start = text.len();
            text.push_str(s);
            start..text.len()
        };
        let labels = labels.iter().map(|&(k, v)| (span(k), span(v))).collect();
        Series {
            text,
            metric_end: metric.len(),
            labels,
            samples,
        }
    }

    pub fn metric(&self) -> &str {
        &self.text[..self.metric_end]
    }

    /// The labels but `__name__`, sorted by name: the write path's tags.
    pub fn tags(&self) -> Vec<(&str, &str)> {
        self.labels
            .iter()
            .map(|(k, v)| (&self.text[k.clone()], &self.text[v.clone()]))
            .collect()
    }
}

/// A metric's type as Prometheus' metadata API spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Unknown,
    Counter,
    Gauge,
    Histogram,
    GaugeHistogram,
    Summary,
    Info,
    StateSet,
}

impl MetricKind {
    /// The protobuf enum's number (1.0 and 2.0 share them; 0 is unknown
    /// in 1.0 and unspecified in 2.0).
    fn of_number(n: i32) -> MetricKind {
        match n {
            1 => MetricKind::Counter,
            2 => MetricKind::Gauge,
            3 => MetricKind::Histogram,
            4 => MetricKind::GaugeHistogram,
            5 => MetricKind::Summary,
            6 => MetricKind::Info,
            7 => MetricKind::StateSet,
            _ => MetricKind::Unknown,
        }
    }

    /// `counter`, `gauge`, … as `/api/v1/metadata` writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Unknown => "unknown",
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
            MetricKind::GaugeHistogram => "gaugehistogram",
            MetricKind::Summary => "summary",
            MetricKind::Info => "info",
            MetricKind::StateSet => "stateset",
        }
    }
}

/// Metadata sent for a metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    pub metric: String,
    pub kind: MetricKind,
    pub help: String,
    pub unit: String,
}

/// A decoded request.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Request {
    /// The series that can be written, in the order sent.
    pub series: Vec<Series>,
    /// The series refused, in the order sent, with the samples each
    /// carried (float and histogram) that are therefore not written.
    pub refused: Vec<(RemoteWriteError, usize)>,
    pub metadata: Vec<Metadata>,
    /// Exemplars received (not stored: nothing reads them back).
    pub exemplars: usize,
}

impl Request {
    /// The samples of the writable series.
    pub fn sample_count(&self) -> usize {
        self.series.iter().map(|s| s.samples.len()).sum()
    }
}

/// Decodes a remote-write body of `version`; `max_len` bounds the
/// decompressed length, checked against the length the snappy header
/// declares before anything is allocated.
pub fn decode(body: &[u8], version: Version, max_len: usize) -> Result<Request, RemoteWriteError> {
    let raw = decompress(body, max_len)?;
    match version {
        Version::V1 => from_v1(&raw),
        Version::V2 => {
            let raw = Bytes::from(raw);
            let req = proto::RequestV2::decode(raw).map_err(|e| RemoteWriteError::NotProtobuf {
                message: "io.prometheus.write.v2.Request",
                cause: e.to_string(),
            })?;
            Ok(from_v2(req))
        }
    }
}

/// The snappy block of `body`, at most `max_len` bytes decompressed.
fn decompress(body: &[u8], max_len: usize) -> Result<Vec<u8>, RemoteWriteError> {
    let len =
        snap::raw::decompress_len(body).map_err(|e| RemoteWriteError::NotSnappy(e.to_string()))?;
    if len > max_len {
        return Err(RemoteWriteError::TooLarge { len, max: max_len });
    }
    snap::raw::Decoder::new()
        .decompress_vec(body)
        .map_err(|e| RemoteWriteError::NotSnappy(e.to_string()))
}

/// `{a="1", b="2"}` as Prometheus prints label sets, cut short for
/// error messages.
fn describe(labels: &[(&str, &str)]) -> String {
    const MAX: usize = 512;
    let mut s = String::from("{");
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(k);
        s.push('=');
        s.push_str(&format!("{v:?}"));
        if s.len() > MAX {
            let mut cut = MAX;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            s.truncate(cut);
            s.push('…');
            break;
        }
    }
    s.push('}');
    s
}

/// A series' labels (in any order, empty values included) checked and
/// split into the metric and the other labels, sorted. `labels` is
/// scratch space, left reordered.
fn series_of(
    labels: &mut Vec<(&str, &str)>,
    samples: Vec<Sample>,
) -> Result<Series, RemoteWriteError> {
    labels.retain(|(_, v)| !v.is_empty());
    labels.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let labels = &*labels;
    let series = || describe(labels);
    if let Some(w) = labels.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(RemoteWriteError::DuplicateLabel {
            series: series(),
            name: w[0].0.to_string(),
        });
    }
    if let Some((k, _)) = labels.iter().find(|(k, _)| !is_prometheus_label_name(k)) {
        return Err(RemoteWriteError::InvalidLabelName {
            series: series(),
            name: k.to_string(),
        });
    }
    let Some(at) = labels.iter().position(|(k, _)| *k == "__name__") else {
        return Err(RemoteWriteError::NoMetricName { series: series() });
    };
    if !is_prometheus_metric_name(labels[at].1) {
        return Err(RemoteWriteError::InvalidMetricName {
            series: series(),
            name: labels[at].1.to_string(),
        });
    }
    // The labels either side of `__name__` stay sorted, in one run.
    let mut rest: [(&str, &str); 32] = [("", ""); 32];
    if labels.len() <= rest.len() {
        let rest = &mut rest[..labels.len() - 1];
        rest[..at].copy_from_slice(&labels[..at]);
        rest[at..].copy_from_slice(&labels[at + 1..]);
        Ok(Series::new(labels[at].1, rest, samples))
    } else {
        let rest: Vec<(&str, &str)> = labels[..at]
            .iter()
            .chain(&labels[at + 1..])
            .copied()
            .collect();
        Ok(Series::new(labels[at].1, &rest, samples))
    }
}

/// Files a series, or its refusal, in `out`.
fn file(
    out: &mut Request,
    labels: &mut Vec<(&str, &str)>,
    samples: Vec<Sample>,
    histograms: usize,
) {
    let count = samples.len();
    match series_of(labels, samples) {
        Ok(series) if histograms > 0 => {
            out.refused.push((
                RemoteWriteError::NativeHistograms {
                    series: describe_series(&series),
                    count: histograms,
                },
                histograms,
            ));
            if !series.samples.is_empty() {
                out.series.push(series);
            }
        }
        Ok(series) => out.series.push(series),
        Err(e) => out.refused.push((e, count + histograms)),
    }
}

/// `metric{labels}` of a checked series.
fn describe_series(s: &Series) -> String {
    format!("{}{}", s.metric(), describe(&s.tags()))
}

/// Decodes a 1.0 `prometheus.WriteRequest` from `raw`, borrowing the
/// label names and values from it until each series is checked (see
/// [`wire`]). A body that is not protobuf anywhere is refused whole.
fn from_v1(raw: &[u8]) -> Result<Request, RemoteWriteError> {
    let not_protobuf = |e: wire::WireError| RemoteWriteError::NotProtobuf {
        message: "prometheus.WriteRequest",
        cause: e.to_string(),
    };
    let mut out = Request::default();
    let mut raw_labels: Vec<(&[u8], &[u8])> = Vec::new();
    let mut labels: Vec<(&str, &str)> = Vec::new();
    let mut index = 0;
    for field in wire::Fields::new(raw) {
        let (number, value) = field.map_err(not_protobuf)?;
        match number {
            // `repeated TimeSeries timeseries = 1`
            1 => {
                let ts = value.len_delimited(number).map_err(not_protobuf)?;
                let series = v1_series(ts, &mut raw_labels).map_err(not_protobuf)?;
                out.exemplars += series.exemplars;
                labels.clear();
                let utf8 = raw_labels.iter().try_for_each(|(k, v)| {
                    labels.push((std::str::from_utf8(k).ok()?, std::str::from_utf8(v).ok()?));
                    Some(())
                });
                match utf8 {
                    Some(()) => file(&mut out, &mut labels, series.samples, series.histograms),
                    None => out.refused.push((
                        RemoteWriteError::NotUtf8 { index },
                        series.samples.len() + series.histograms,
                    )),
                }
                index += 1;
            }
            // `repeated MetricMetadata metadata = 3`: a few a request.
            3 => {
                let m = value.len_delimited(number).map_err(not_protobuf)?;
                let m = proto::MetricMetadata::decode(m).map_err(|e| {
                    RemoteWriteError::NotProtobuf {
                        message: "prometheus.WriteRequest",
                        cause: e.to_string(),
                    }
                })?;
                if !m.metric_family_name.is_empty() {
                    out.metadata.push(Metadata {
                        metric: m.metric_family_name,
                        kind: MetricKind::of_number(m.r#type),
                        help: m.help,
                        unit: m.unit,
                    });
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// What a 1.0 `TimeSeries` holds besides its labels.
struct V1Series {
    samples: Vec<Sample>,
    /// Exemplars, counted, not read.
    exemplars: usize,
    /// Native histogram samples, counted, not read (they are refused).
    histograms: usize,
}

/// Reads a 1.0 `TimeSeries`: its labels, as written, into `labels`.
fn v1_series<'a>(
    buf: &'a [u8],
    labels: &mut Vec<(&'a [u8], &'a [u8])>,
) -> Result<V1Series, wire::WireError> {
    labels.clear();
    let mut series = V1Series {
        samples: Vec::new(),
        exemplars: 0,
        histograms: 0,
    };
    for field in wire::Fields::new(buf) {
        let (number, value) = field?;
        match number {
            // `repeated Label labels = 1`: `string name = 1; string value = 2`.
            1 => {
                let (mut name, mut text): (&[u8], &[u8]) = (&[], &[]);
                for f in wire::Fields::new(value.len_delimited(number)?) {
                    match f? {
                        (1, v) => name = v.len_delimited(1)?,
                        (2, v) => text = v.len_delimited(2)?,
                        _ => {}
                    }
                }
                labels.push((name, text));
            }
            // `repeated Sample samples = 2`: `double value = 1; int64 timestamp = 2`.
            2 => {
                let mut sample = Sample {
                    value: 0.0,
                    timestamp_ms: 0,
                };
                for f in wire::Fields::new(value.len_delimited(number)?) {
                    match f? {
                        (1, v) => sample.value = f64::from_bits(v.fixed64(1)?),
                        (2, v) => sample.timestamp_ms = v.varint(2)? as i64,
                        _ => {}
                    }
                }
                series.samples.push(sample);
            }
            3 => {
                value.len_delimited(number)?;
                series.exemplars += 1;
            }
            4 => {
                value.len_delimited(number)?;
                series.histograms += 1;
            }
            _ => {}
        }
    }
    Ok(series)
}

fn from_v2(req: proto::RequestV2) -> Request {
    // Each symbol checked once; one that is not UTF-8 refuses the series
    // that use it.
    let symbols: Vec<Option<Text>> = req.symbols.into_iter().map(Text::new).collect();
    let symbols = &symbols;
    let mut out = Request::default();
    for (index, ts) in req.timeseries.into_iter().enumerate() {
        out.exemplars += ts.exemplars.len();
        let carried = ts.samples.len() + ts.histograms.len();
        let symbol = |reference: u32| match symbols.get(reference as usize) {
            Some(Some(text)) => Ok(text),
            Some(None) => Err(RemoteWriteError::NotUtf8 { index }),
            None => Err(RemoteWriteError::BadSymbolRef {
                index,
                reference,
                symbols: symbols.len(),
            }),
        };
        if ts.labels_refs.len() % 2 != 0 {
            out.refused.push((
                RemoteWriteError::OddLabelRefs {
                    index,
                    refs: ts.labels_refs.len(),
                },
                carried,
            ));
            continue;
        }
        let labels: Result<Vec<(&str, &str)>, RemoteWriteError> = ts
            .labels_refs
            .chunks_exact(2)
            .map(|p| Ok((symbol(p[0])?.as_str(), symbol(p[1])?.as_str())))
            .collect();
        let mut labels = match labels {
            Ok(l) => l,
            Err(e) => {
                out.refused.push((e, carried));
                continue;
            }
        };
        // The series' metadata, kept once its name is known good.
        let metadata = match ts.metadata {
            Some(m) if m.r#type != 0 || m.help_ref != 0 || m.unit_ref != 0 => {
                match (symbol(m.help_ref), symbol(m.unit_ref)) {
                    (Ok(help), Ok(unit)) => Some((MetricKind::of_number(m.r#type), help, unit)),
                    (Err(e), _) | (_, Err(e)) => {
                        out.refused.push((e, carried));
                        continue;
                    }
                }
            }
            _ => None,
        };
        let before = out.series.len();
        file(&mut out, &mut labels, ts.samples, ts.histograms.len());
        if let (Some((kind, help, unit)), Some(s)) = (metadata, out.series.get(before)) {
            out.metadata.push(Metadata {
                metric: s.metric().to_string(),
                kind,
                help: help.as_str().to_string(),
                unit: unit.as_str().to_string(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests;
