//! OpenTSDB's put-line parser (`PutDataPointRpc.importDataPoint`): the
//! words of a telnet `put` line, or of a `tsdb import` line, checked in
//! OpenTSDB's order with its exact messages, up to (not including) the
//! series' names, which [`super::series::SeriesCache::resolve`] checks.

use std::borrow::Cow;

use super::series::java_tags;
use super::{PointError, parse_value};
use crate::model::Value;
use crate::model::java::double_to_string;

/// A `put` line, parsed and checked up to (not including) the series.
#[derive(Debug, Clone, PartialEq)]
pub struct PutLine<'a> {
    pub metric: &'a str,
    pub timestamp: i64,
    pub value: Value,
    /// In arrival order, unique keys.
    pub tags: Vec<(&'a str, &'a str)>,
}

/// `Tags.parse`: one `k=v` word into the tag list.
fn parse_tag<'a>(tags: &mut Vec<(&'a str, &'a str)>, word: &'a str) -> Result<(), PointError> {
    let mut parts = word.split('=');
    let (k, v) = match (parts.next(), parts.next(), parts.next()) {
        (Some(k), Some(v), None) if !k.is_empty() && !v.is_empty() => (k, v),
        _ => return Err(PointError::IllegalArgument(format!("invalid tag: {word}"))),
    };
    match tags.iter().find(|t| t.0 == k) {
        Some(t) if t.1 == v => Ok(()),
        Some(_) => Err(PointError::IllegalArgument(format!(
            "duplicate tag: {word}, tags={}",
            java_tags(tags)
        ))),
        None => {
            tags.push((k, v));
            Ok(())
        }
    }
}

/// `importDataPoint` for the words of a `put` line (`words[0]` is `put`),
/// in OpenTSDB's order: argument count, metric, timestamp, value, tags,
/// value parsing, NaN/Infinity.
pub fn parse_put<'a>(words: &[&'a str]) -> Result<PutLine<'a>, PointError> {
    parse_point(words.get(1..).unwrap_or_default())
}

/// The same checks for a line's words after the command word: what
/// `tsdb import` reads (`<metric> <timestamp> <value> <tagk=tagv>...`).
pub fn parse_point<'a>(words: &[&'a str]) -> Result<PutLine<'a>, PointError> {
    if words.len() < 4 {
        return Err(PointError::IllegalArgument(format!(
            "not enough arguments (need least 4, got {})",
            words.len()
        )));
    }
    let metric = words[0];
    if metric.is_empty() {
        return Err(PointError::IllegalArgument("empty metric name".into()));
    }
    let ts_word: Cow<str> = if words[1].contains('.') {
        Cow::Owned(words[1].replace('.', ""))
    } else {
        Cow::Borrowed(words[1])
    };
    let timestamp = crate::model::java::parse_long(&ts_word).map_err(PointError::InvalidValue)?;
    if timestamp <= 0 {
        return Err(PointError::IllegalArgument(format!(
            "invalid timestamp: {timestamp}"
        )));
    }
    let value_word = words[2];
    if value_word.is_empty() {
        return Err(PointError::IllegalArgument("empty value".into()));
    }
    let mut tags = Vec::with_capacity(words.len() - 3);
    for w in &words[3..] {
        if !w.is_empty() {
            parse_tag(&mut tags, w)?;
        }
    }
    let value = parse_value(value_word)?;
    check_finite(metric, timestamp, value)?;
    Ok(PutLine {
        metric,
        timestamp,
        value,
        tags,
    })
}

/// `TSDB.addPoint(float|double)`'s first check.
pub fn check_finite(metric: &str, timestamp: i64, value: Value) -> Result<(), PointError> {
    if let Value::Float(f) = value
        && !f.is_finite()
    {
        return Err(PointError::IllegalArgument(format!(
            "value is NaN or Infinite: {} for metric={metric} timestamp={timestamp}",
            double_to_string(f)
        )));
    }
    Ok(())
}
