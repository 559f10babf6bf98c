//! Writing histogram points (`HistogramDataPointRpc`, OpenTSDB 2.4): the
//! checks and conversions shared by `POST /api/histogram` (in
//! `super::super::http::histogram`) and the telnet `histogram` command,
//! with 2.4.1's messages. Points are decoded then encoded again before
//! they are stored, so only histograms a codec reads are kept.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::db::PendingHistogram;
use crate::histogram::{Codecs, HistogramError, SimpleHistogram};
use crate::model::java::{parse_double, parse_int, parse_long};
use crate::protocol::PointError;
use crate::protocol::jackson;
use crate::protocol::telnet::parse_tag;

use super::super::TsdState;
use super::super::stats::inc;

/// Why histogram writes are refused when `tsd.core.histograms.config` is
/// not set (HTTP 503, telnet `illegal argument`).
pub(crate) const DISABLED: &str =
    "Histogram storage has not been enabled. Check the 'tsd.core.histograms.config' configuration.";

/// One point of an `/api/histogram` body (`HistogramPojo`): either
/// `value` (base64 of the codec's bytes) with `id`, or `buckets`
/// (`"lower,upper": count`) with `underflow` and `overflow`. Fields are
/// coerced as Jackson does; unknown fields are ignored.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct JsonHistogram {
    #[serde(deserialize_with = "jackson::string_opt")]
    pub metric: Option<String>,
    #[serde(deserialize_with = "jackson::long")]
    pub timestamp: i64,
    #[serde(deserialize_with = "jackson::string_opt")]
    pub value: Option<String>,
    pub tags: Option<BTreeMap<String, JavaText>>,
    #[serde(deserialize_with = "jackson::long")]
    pub id: i64,
    pub buckets: Option<BTreeMap<String, JavaLong>>,
    #[serde(deserialize_with = "jackson::long")]
    pub underflow: i64,
    #[serde(deserialize_with = "jackson::long")]
    pub overflow: i64,
}

/// A `String` map value as Jackson coerces it (numbers and booleans as
/// their text, `null` as none).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct JavaText(pub Option<String>);

impl<'de> Deserialize<'de> for JavaText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        jackson::string_opt(d).map(JavaText)
    }
}

/// A `Long` map value as Jackson coerces it (numeric strings read,
/// `null` as 0, as `addBucket` counts a null).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct JavaLong(pub i64);

impl<'de> Deserialize<'de> for JavaLong {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        jackson::long(d).map(JavaLong)
    }
}

impl JsonHistogram {
    /// The point as the `details` of an answer show it.
    pub(crate) fn to_json(&self) -> String {
        let mut o = serde_json::Map::new();
        o.insert("metric".into(), self.metric.clone().into());
        o.insert("timestamp".into(), self.timestamp.into());
        o.insert("value".into(), self.value.clone().into());
        o.insert(
            "tags".into(),
            match &self.tags {
                None => serde_json::Value::Null,
                Some(t) => t
                    .iter()
                    .map(|(k, v)| (k.clone(), serde_json::Value::from(v.0.clone())))
                    .collect::<serde_json::Map<_, _>>()
                    .into(),
            },
        );
        o.insert("id".into(), self.id.into());
        o.insert(
            "buckets".into(),
            match &self.buckets {
                None => serde_json::Value::Null,
                Some(b) => b
                    .iter()
                    .map(|(k, v)| (k.clone(), serde_json::Value::from(v.0)))
                    .collect::<serde_json::Map<_, _>>()
                    .into(),
            },
        );
        o.insert("underflow".into(), self.underflow.into());
        o.insert("overflow".into(), self.overflow.into());
        serde_json::Value::Object(o).to_string()
    }

    /// `HistogramPojo.validate`, in its order.
    fn validate(&self) -> Result<(), String> {
        if self.metric.as_deref().unwrap_or("").is_empty() {
            return Err("Metric name was empty".into());
        }
        if self.timestamp <= 0 {
            return Err("Invalid timestamp".into());
        }
        if self.tags.as_ref().is_none_or(|t| t.is_empty()) {
            return Err("Missing tags".into());
        }
        if self.value.as_deref().unwrap_or("").is_empty() {
            if self.buckets.as_ref().is_none_or(|b| b.is_empty()) {
                return Err(
                    "Histogram buckets cannot be null or empty if 'value' is empty.".into(),
                );
            }
        } else if !(0..=255).contains(&self.id) {
            return Err("Invalid type. Must be from 0 to 255.".into());
        }
        Ok(())
    }

    /// `HistogramPojo.toSimpleHistogram`.
    fn to_simple(&self, codecs: &Codecs) -> Result<SimpleHistogram, PointError> {
        let mut h = SimpleHistogram::new(codecs.simple_id().map_err(illegal)?);
        h.overflow = self.overflow;
        h.underflow = self.underflow;
        for (bounds, count) in self.buckets.iter().flatten() {
            let parts: Vec<&str> = bounds.split(',').collect();
            if parts.len() != 2 {
                return Err(PointError::IllegalArgument(format!(
                    "Unable to parse bucket bounds: {bounds}"
                )));
            }
            h.add_bucket(parse_float(parts[0])?, parse_float(parts[1])?, count.0);
        }
        Ok(h)
    }
}

fn illegal(e: HistogramError) -> PointError {
    PointError::IllegalArgument(e.to_string())
}

/// A histogram that does not decode: 2.4.1 meets a short or foreign one
/// as an `IllegalArgumentException`, bytes that end too soon as Kryo's
/// runtime exception (HTTP `Unexpected exception`).
fn undecodable(e: HistogramError) -> PointError {
    match e {
        HistogramError::Corrupt(m) => PointError::Storage(m),
        e => illegal(e),
    }
}

/// `Float.parseFloat` (a `NumberFormatException` on bad text).
fn parse_float(s: &str) -> Result<f32, PointError> {
    parse_double(s)
        .map(|d| d as f32)
        .map_err(PointError::InvalidValue)
}

/// `DatatypeConverter.parseBase64Binary`: lenient, characters outside the
/// alphabet are skipped and decoding stops at the first `=`; a dangling
/// sixth of a byte is dropped.
pub(crate) fn base64_decode(s: &str) -> Vec<u8> {
    fn sextet(c: u8) -> Option<u8> {
        match c {
            b'A'..=b'Z' => Some(c - b'A'),
            b'a'..=b'z' => Some(c - b'a' + 26),
            b'0'..=b'9' => Some(c - b'0' + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    }
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &c in s.as_bytes() {
        if c == b'=' {
            break;
        }
        let Some(v) = sextet(c) else { continue };
        acc = (acc << 6) | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

/// `DatatypeConverter.printBase64Binary`: standard alphabet, padded.
#[cfg(test)]
pub(crate) fn base64_encode(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(b.len().div_ceil(3) * 4);
    for chunk in b.chunks(3) {
        let n = chunk.len();
        let v = (chunk[0] as u32) << 16
            | (chunk.get(1).copied().unwrap_or(0) as u32) << 8
            | chunk.get(2).copied().unwrap_or(0) as u32;
        for i in 0..4 {
            if i <= n {
                s.push(A[(v >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// Checks one JSON point and resolves its series, as `processDataPoint`
/// does for a `HistogramPojo`: validation (its messages), then decoding
/// (`value`) or building (`buckets`), encoding again with the codec id,
/// then `TSDB.addHistogramPoint`'s checks. The error is the per-point
/// message of an answer's `details`.
pub(crate) fn check_json(
    state: &TsdState,
    codecs: &Codecs,
    p: &JsonHistogram,
    key_buf: &mut String,
) -> Result<PendingHistogram, String> {
    if let Err(m) = p.validate() {
        inc(&state.stats.illegal_arguments);
        return Err(m);
    }
    check_json_point(state, codecs, p, key_buf).map_err(|e| {
        state.stats.count_error(&e);
        match e {
            // Kryo's runtime exception: `catch (RuntimeException e)`.
            PointError::Storage(_) => "Unexpected exception".into(),
            e => e.http_message(),
        }
    })
}

fn check_json_point(
    state: &TsdState,
    codecs: &Codecs,
    p: &JsonHistogram,
    key_buf: &mut String,
) -> Result<PendingHistogram, PointError> {
    let h = match p.value.as_deref().filter(|v| !v.is_empty()) {
        None => p.to_simple(codecs)?,
        Some(v) => codecs
            .decode(p.id, &base64_decode(v), false)
            .map_err(undecodable)?,
    };
    let raw = h.encode(true);
    let metric = p.metric.as_deref().unwrap_or("");
    let tags: Vec<(&str, &str)> = p
        .tags
        .iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.0.as_deref().unwrap_or("")))
        .collect();
    let (series, ts) = state
        .db
        .resolve_histogram(metric, p.timestamp, &raw, &tags, key_buf)?;
    Ok(PendingHistogram {
        series,
        ts,
        value: raw,
    })
}

/// What a telnet `histogram` line leads to.
#[derive(Debug)]
pub(crate) enum TelnetHistogram {
    /// A point to log.
    Point(PendingHistogram),
    /// Refused before 2.4.1 hands the point to storage: the error line is
    /// always written (`histogram: illegal argument: …`).
    Refused(PointError),
    /// Refused by the decoding or by `addHistogramPoint`, which 2.4.1
    /// meets in the write's errback: `histogram: HBase error: <message>`,
    /// written only with `tsd.rpc.telnet.return_errors`.
    Failed(String),
    /// A malformed bucket list (`u=…:o=…:lo,hi=n`): 2.4.1's errback parses
    /// the line again to hand it to the storage-exception handler, fails
    /// the same way and so never answers. Logged here, not answered.
    Dropped(PointError),
}

/// `HistogramDataPointRpc.importDataPoint`: `histogram <metric>
/// <timestamp> [<id>] <value> <tagk=tagv>...`; with an id the value is
/// base64 of the codec's bytes, without one it is the bucket list.
pub(crate) fn telnet(state: &TsdState, words: &[&str], key_buf: &mut String) -> TelnetHistogram {
    use TelnetHistogram::*;
    let Some(codecs) = state.db.histogram_codecs() else {
        return Refused(PointError::IllegalArgument(DISABLED.into()));
    };
    if words.len() < 5 {
        return Refused(PointError::IllegalArgument(format!(
            "not enough arguments (need least 5, got {})",
            words.len() - 1
        )));
    }
    let metric = words[1];
    if metric.is_empty() {
        return Refused(PointError::IllegalArgument("empty metric name".into()));
    }
    let ts_word = words[2].replace('.', "");
    let timestamp = match parse_long(&ts_word) {
        Ok(t) => t,
        Err(e) => return Refused(PointError::InvalidValue(e)),
    };
    if timestamp <= 0 {
        return Refused(PointError::IllegalArgument(format!(
            "invalid timestamp: {timestamp}"
        )));
    }
    // An integer third word is the codec id (`Integer.parseInt`).
    let given_id = parse_int(words[3]).ok();
    let (id, value, tag_words) = match given_id {
        Some(id) => (id as i64, words[4], &words[5..]),
        None => match codecs.simple_id() {
            Ok(simple) => (simple as i64, words[3], &words[4..]),
            Err(e) => return Refused(illegal(e)),
        },
    };
    if value.is_empty() {
        return Refused(PointError::IllegalArgument("empty histogram value".into()));
    }
    let mut tags = Vec::with_capacity(tag_words.len());
    for w in tag_words {
        if !w.is_empty()
            && let Err(e) = parse_tag(&mut tags, w)
        {
            return Refused(e);
        }
    }
    let h = if given_id.is_some() {
        match codecs.decode(id, &base64_decode(value), false) {
            Ok(h) => h,
            Err(e) => return Failed(e.to_string()),
        }
    } else {
        match parse_buckets(codecs, value) {
            Ok(h) => h,
            Err(e) => return Dropped(e),
        }
    };
    // Encoded again by the codec that read it, its id first.
    let raw = h.encode(true);
    match state
        .db
        .resolve_histogram(metric, timestamp, &raw, &tags, key_buf)
    {
        Ok((series, ts)) => Point(PendingHistogram {
            series,
            ts,
            value: raw,
        }),
        Err(e) => Failed(e.message().to_string()),
    }
}

/// `parseTelnet`: `u=<n>`, `o=<n>` and `<lower>,<upper>=<n>` separated by
/// `:` (keys case-insensitive).
pub(crate) fn parse_buckets(codecs: &Codecs, encoded: &str) -> Result<SimpleHistogram, PointError> {
    let mut h = SimpleHistogram::new(codecs.simple_id().map_err(illegal)?);
    let long = |s: &str| parse_long(s).map_err(PointError::InvalidValue);
    for bucket in encoded.split(':') {
        let kv: Vec<&str> = bucket.split('=').collect();
        if kv.len() != 2 {
            return Err(PointError::IllegalArgument(format!(
                "Improperly formatted bucket: {bucket}"
            )));
        }
        match kv[0].to_lowercase().as_str() {
            "u" => h.underflow = long(kv[1])?,
            "o" => h.overflow = long(kv[1])?,
            bounds => {
                let b: Vec<&str> = bounds.split(',').collect();
                if b.len() != 2 {
                    return Err(PointError::IllegalArgument(format!(
                        "Improperly formatted bounds: {bucket}"
                    )));
                }
                h.add_bucket(parse_float(b[0])?, parse_float(b[1])?, long(kv[1])?);
            }
        }
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_as_jaxb() {
        let raw = [0u8, 2, 0, 0, 0, 0, 0x3F, 0x80];
        let s = base64_encode(&raw);
        assert_eq!(s, "AAIAAAAAP4A=");
        assert_eq!(base64_decode(&s), raw);
        assert_eq!(base64_decode(&s[..4]), [0, 2, 0]);
        assert_eq!(base64_decode("AA IA\nAA"), [0, 2, 0, 0]);
        assert_eq!(base64_encode(b"ab"), "YWI=");
        assert_eq!(base64_encode(b"abc"), "YWJj");
    }

    #[test]
    fn bucket_lists() {
        let codecs =
            Codecs::from_config(Some(r#"{"net.opentsdb.core.SimpleHistogramDecoder": 42}"#))
                .unwrap()
                .unwrap();
        let h = parse_buckets(&codecs, "u=0:o=1:0,1=42:1,5=24").unwrap();
        assert_eq!(h.buckets.len(), 2);
        assert_eq!((h.underflow, h.overflow, h.id), (0, 1, 42));
        let e = |s| parse_buckets(&codecs, s).unwrap_err().message().to_string();
        assert_eq!(e("u=0:o"), "Improperly formatted bucket: o");
        assert_eq!(e("0=1"), "Improperly formatted bounds: 0=1");
        assert_eq!(e("a,1=1"), "For input string: \"a\"");
    }
}
