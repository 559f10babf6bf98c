//! The query model (`TSQuery`/`TSSubQuery`): the POST JSON body with every
//! field and alias, the GET `m=`/`tsuid=` grammars, and validation with
//! OpenTSDB's error messages.

use std::collections::BTreeMap;

use chrono::{NaiveDateTime, TimeZone};
use chrono_tz::Tz;
use serde::{Deserialize, Deserializer, Serialize};

use super::aggregator::Aggregator;
use super::downsample::DownsampleSpec;
use super::error::QueryError;
use super::filter::{self, FilterSpec, TagFilter};
use super::rate::RateOptions;
use crate::model::time::{TimeError, parse_datetime};
use crate::protocol::jackson;

/// A whole query as the client sent it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct TsQuery {
    #[serde(deserialize_with = "string_or_number")]
    pub start: Option<String>,
    #[serde(deserialize_with = "string_or_number")]
    pub end: Option<String>,
    #[serde(deserialize_with = "jackson::string_opt")]
    pub timezone: Option<String>,
    #[serde(alias = "use_calendar")]
    #[serde(deserialize_with = "jackson::boolean")]
    pub use_calendar: bool,
    pub queries: Vec<TsSubQuery>,
    #[serde(deserialize_with = "jackson::boolean")]
    pub padding: bool,
    #[serde(alias = "no_annotations")]
    #[serde(deserialize_with = "jackson::boolean")]
    pub no_annotations: bool,
    #[serde(alias = "global_annotations")]
    #[serde(deserialize_with = "jackson::boolean")]
    pub global_annotations: bool,
    #[serde(alias = "ms", alias = "ms_resolution")]
    #[serde(deserialize_with = "jackson::boolean")]
    pub ms_resolution: bool,
    #[serde(rename = "showTSUIDs", alias = "show_tsuids", alias = "showTsuids")]
    #[serde(deserialize_with = "jackson::boolean")]
    pub show_tsuids: bool,
    #[serde(alias = "show_summary")]
    #[serde(deserialize_with = "jackson::boolean")]
    pub show_summary: bool,
    #[serde(alias = "show_stats")]
    #[serde(deserialize_with = "jackson::boolean")]
    pub show_stats: bool,
    #[serde(alias = "show_query")]
    #[serde(deserialize_with = "jackson::boolean")]
    pub show_query: bool,
    #[serde(deserialize_with = "jackson::boolean")]
    pub delete: bool,
    /// Query-string only (`?arrays`): dps as `[[ts, v], ...]`.
    #[serde(skip_serializing)]
    pub arrays: bool,
    /// rtsdb's own: computes the answer whole, bypassing the result cache
    /// (`?nocache`, or `"noCache": true` in a POST body).
    #[serde(alias = "nocache", alias = "no_cache", skip_serializing)]
    #[serde(deserialize_with = "jackson::boolean")]
    pub no_cache: bool,
}

/// One sub-query (`TSSubQuery`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct TsSubQuery {
    #[serde(deserialize_with = "jackson::string_opt")]
    pub aggregator: Option<String>,
    #[serde(deserialize_with = "jackson::string_opt")]
    pub metric: Option<String>,
    pub tsuids: Vec<String>,
    #[serde(deserialize_with = "jackson::string_opt")]
    pub downsample: Option<String>,
    #[serde(deserialize_with = "jackson::boolean")]
    pub rate: bool,
    #[serde(alias = "rate_options")]
    pub rate_options: Option<RateOptions>,
    pub tags: BTreeMap<String, String>,
    pub filters: Vec<FilterSpec>,
    #[serde(alias = "explicit_tags")]
    #[serde(deserialize_with = "jackson::boolean")]
    pub explicit_tags: bool,
    pub percentiles: Vec<f64>,
    #[serde(alias = "rollup_usage")]
    #[serde(deserialize_with = "jackson::string_opt")]
    pub rollup_usage: Option<String>,
    #[serde(alias = "pre_aggregate")]
    #[serde(deserialize_with = "jackson::boolean")]
    pub pre_aggregate: bool,
    #[serde(alias = "show_histogram_buckets")]
    #[serde(deserialize_with = "jackson::boolean")]
    pub show_histogram_buckets: bool,
}

fn string_or_number<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s),
        serde_json::Value::Number(n) => Some(n.to_string()),
        other => Some(other.to_string()),
    })
}

/// Parses a POST body.
pub fn parse_post(body: &[u8]) -> Result<TsQuery, QueryError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(QueryError::BadRequest {
            message: "Missing message content".into(),
            details: Some("Supply valid JSON formatted data in the body of your request".into()),
        });
    }
    serde_json::from_slice(body).map_err(|e| QueryError::BadRequest {
        message: format!("Unable to parse the given JSON: {e}"),
        details: None,
    })
}

/// Decodes `application/x-www-form-urlencoded` text (`+` is a space).
pub(crate) fn url_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(b[i + 1]), hex(b[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Splits a query string into decoded (name, value) pairs, in order.
pub(crate) fn query_pairs(qs: &str) -> Vec<(String, String)> {
    qs.trim_start_matches('?')
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (url_decode(k), url_decode(v)),
            None => (url_decode(p), String::new()),
        })
        .collect()
}

/// Parses a GET query string (`QueryRpc.parseQuery`). Flags count when
/// present, whatever their value.
pub fn parse_get(qs: &str) -> Result<TsQuery, QueryError> {
    parse_get_with(qs, |_| Ok(Vec::new()))
}

/// [`parse_get`], plus the sub-queries `more` derives from the decoded
/// query string (gexp's `exp=` metric queries): they come after the
/// `m=`/`tsuid=` ones and before the check that there is at least one.
pub(crate) fn parse_get_with(
    qs: &str,
    more: impl FnOnce(&[(String, String)]) -> Result<Vec<TsSubQuery>, QueryError>,
) -> Result<TsQuery, QueryError> {
    let pairs = query_pairs(qs);
    let has = |name: &str| pairs.iter().any(|(k, _)| k == name);
    let first = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let start = first("start")
        .filter(|s| !s.is_empty())
        .ok_or_else(|| QueryError::bad("Missing parameter <code>start</code>"))?;
    let mut q = TsQuery {
        start: Some(start),
        end: first("end").filter(|s| !s.is_empty()),
        padding: has("padding"),
        no_annotations: has("no_annotations"),
        global_annotations: has("global_annotations"),
        show_tsuids: has("show_tsuids"),
        ms_resolution: has("ms"),
        show_query: has("show_query"),
        show_stats: has("show_stats"),
        show_summary: has("show_summary"),
        arrays: has("arrays"),
        no_cache: has("nocache"),
        ..Default::default()
    };
    for (k, v) in &pairs {
        let sub = match k.as_str() {
            "m" => parse_m_subquery(v)?,
            "tsuid" => parse_tsuid_subquery(v)?,
            _ => continue,
        };
        // Identical sub-queries are de-duplicated (a LinkedHashSet).
        if !q.queries.contains(&sub) {
            q.queries.push(sub);
        }
    }
    for sub in more(&pairs)? {
        if !q.queries.contains(&sub) {
            q.queries.push(sub);
        }
    }
    if q.queries.is_empty() {
        return Err(QueryError::bad("Missing sub queries"));
    }
    Ok(q)
}

fn split_parts<'a>(q: &'a str, what: &str) -> Result<Vec<&'a str>, QueryError> {
    let parts: Vec<&str> = q.split(':').collect();
    if parts.len() < 2 || parts.len() > 5 {
        return Err(QueryError::bad(format!(
            "Invalid parameter {what}={q} ({} :-separated parts)",
            if parts.len() < 2 {
                "not enough"
            } else {
                "too many"
            }
        )));
    }
    Ok(parts)
}

fn middle_part(sub: &mut TsSubQuery, part: &str, full: bool) -> Result<(), QueryError> {
    let lower = part.to_lowercase();
    if lower.starts_with("rate") {
        sub.rate = true;
        if part.contains('{') {
            sub.rate_options = Some(RateOptions::parse(part).map_err(QueryError::bad)?);
        }
    } else if part.as_bytes().first().is_some_and(u8::is_ascii_digit) {
        sub.downsample = Some(part.to_string());
    } else if !full
        && !lower.starts_with("percentiles")
        && !lower.starts_with("show-histogram-buckets")
    {
        // tsuid= knows rate, downsample and the histogram parts.
    } else if lower == "pre-agg" {
        sub.pre_aggregate = true;
    } else if lower.starts_with("rollup_") {
        sub.rollup_usage = Some(part.to_string());
    } else if lower.starts_with("percentiles") {
        // QueryRpc.parsePercentiles: the first `[` to the first `]`, split
        // on commas, each trimmed and read by `Float.valueOf`.
        let inner = match (part.find('['), part.find(']')) {
            (Some(a), Some(b)) if a < b => &part[a + 1..b],
            (Some(_), Some(_)) => "",
            _ => {
                return Err(QueryError::bad(format!(
                    "Malformated percentile query paramater: {part}"
                )));
            }
        };
        for p in inner.split(',') {
            let v = crate::model::java::parse_double(p.trim()).map_err(QueryError::bad)?;
            sub.percentiles.push(v as f32 as f64);
        }
    } else if lower.starts_with("show-histogram-buckets") {
        sub.show_histogram_buckets = true;
    } else if lower.starts_with("explicit_tags") {
        sub.explicit_tags = true;
    }
    Ok(())
}

/// `m=<agg>[:rate[{...}]][:<downsample>][:explicit_tags]...:<metric>[{..}][{..}]`.
pub(crate) fn parse_m_subquery(q: &str) -> Result<TsSubQuery, QueryError> {
    if q.is_empty() {
        return Err(QueryError::bad("The query string was empty"));
    }
    let parts = split_parts(q, "m")?;
    let (metric, filters) =
        filter::parse_metric_with_filters(parts[parts.len() - 1]).map_err(QueryError::bad)?;
    let mut sub = TsSubQuery {
        aggregator: Some(parts[0].to_string()),
        metric: Some(metric),
        filters: filters.iter().map(TagFilter::to_spec).collect(),
        ..Default::default()
    };
    for part in &parts[1..parts.len() - 1] {
        middle_part(&mut sub, part, true)?;
    }
    Ok(sub)
}

/// `tsuid=<agg>[:rate][:<downsample>]:<tsuid>[,<tsuid>...]`.
pub(crate) fn parse_tsuid_subquery(q: &str) -> Result<TsSubQuery, QueryError> {
    if q.is_empty() {
        return Err(QueryError::bad("The tsuid query string was empty"));
    }
    let parts = split_parts(q, "tsuid")?;
    let mut sub = TsSubQuery {
        aggregator: Some(parts[0].to_string()),
        tsuids: parts[parts.len() - 1]
            .split(',')
            .map(String::from)
            .collect(),
        ..Default::default()
    };
    for part in &parts[1..parts.len() - 1] {
        middle_part(&mut sub, part, false)?;
    }
    Ok(sub)
}

/// A sub-query after validation: everything parsed and compiled.
#[derive(Debug, Clone)]
pub struct ValidSubQuery {
    pub index: usize,
    pub aggregator: Aggregator,
    pub metric: Option<String>,
    pub tsuids: Vec<String>,
    pub downsample: Option<DownsampleSpec>,
    pub rate: Option<RateOptions>,
    pub filters: Vec<TagFilter>,
    pub explicit_tags: bool,
    /// Set for a histogram query (`percentiles` or
    /// `showHistogramBuckets`): read histogram cells, not points.
    pub histogram: Option<HistogramQuery>,
    pub original: TsSubQuery,
}

/// What a histogram sub-query asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramQuery {
    /// One output series per percentile, in this order.
    pub percentiles: Vec<f32>,
    /// One output series per bucket (of the group's first histogram).
    pub show_buckets: bool,
}

/// A query after validation.
#[derive(Debug, Clone)]
pub struct ValidQuery {
    pub start_ms: i64,
    pub end_ms: i64,
    pub tz: Tz,
    pub queries: Vec<ValidSubQuery>,
    pub original: TsQuery,
}

fn time_error(e: TimeError) -> QueryError {
    QueryError::bad(e.to_string())
}

/// Parses a query time; absolute dates are read in `tz`.
pub(crate) fn parse_time(s: &str, now_ms: u64, tz: Tz) -> Result<i64, QueryError> {
    let utc = parse_datetime(s, now_ms).map_err(time_error)? as i64;
    if tz == Tz::UTC || !(s.contains('/') || s.contains(':')) {
        return Ok(utc);
    }
    let naive = NaiveDateTime::default() + chrono::Duration::milliseconds(utc);
    tz.from_local_datetime(&naive)
        .earliest()
        .map(|t| t.timestamp_millis())
        .ok_or_else(|| QueryError::bad(format!("Invalid absolute date: {s}")))
}

impl TsQuery {
    /// `TSQuery.validateAndSetQuery` + `TSSubQuery.validateAndSetQuery`.
    pub fn validate(&self, now_ms: u64, default_tz: Tz) -> Result<ValidQuery, QueryError> {
        let tz = match self.timezone.as_deref().filter(|t| !t.is_empty()) {
            None => default_tz,
            Some(t) => t
                .parse::<Tz>()
                .map_err(|_| QueryError::bad("The timezone specification could not be found"))?,
        };
        let start = self
            .start
            .as_deref()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| QueryError::bad("Missing start time"))?;
        let start_ms = parse_time(start, now_ms, tz)?;
        let end_ms = match self.end.as_deref().filter(|s| !s.is_empty()) {
            Some(e) => parse_time(e, now_ms, tz)?,
            None => now_ms as i64,
        };
        if end_ms <= start_ms {
            return Err(QueryError::bad(format!(
                "End time [{end_ms}] must be greater than the start time [{start_ms}]"
            )));
        }
        if self.queries.is_empty() {
            return Err(QueryError::bad("Missing queries"));
        }
        let mut queries = Vec::with_capacity(self.queries.len());
        for (index, sub) in self.queries.iter().enumerate() {
            queries.push(sub.validate(index, self.use_calendar)?);
        }
        Ok(ValidQuery {
            start_ms,
            end_ms,
            tz,
            queries,
            original: self.clone(),
        })
    }
}

impl TsSubQuery {
    pub fn validate(&self, index: usize, use_calendar: bool) -> Result<ValidSubQuery, QueryError> {
        let name = self
            .aggregator
            .as_deref()
            .filter(|a| !a.is_empty())
            .ok_or_else(|| QueryError::bad("Missing the aggregation function"))?;
        let aggregator = Aggregator::by_name(name)
            .ok_or_else(|| QueryError::bad(format!("No such aggregation function: {name}")))?;
        let metric = self.metric.clone().filter(|m| !m.is_empty());
        if self.tsuids.is_empty() && metric.is_none() {
            return Err(QueryError::bad(
                "Missing the metric or tsuids, provide at least one",
            ));
        }
        let downsample = match self.downsample.as_deref().filter(|d| !d.is_empty()) {
            None => None,
            Some(d) => Some(DownsampleSpec::parse(d, use_calendar).map_err(QueryError::bad)?),
        };
        let mut filters = Vec::with_capacity(self.filters.len());
        for f in &self.filters {
            filters.push(TagFilter::from_spec(f).map_err(QueryError::bad)?);
        }
        filter::tags_to_filters(&self.tags, &mut filters).map_err(QueryError::bad)?;
        // TSSubQuery.checkHistogramQuery.
        let histogram = if !self.percentiles.is_empty() || self.show_histogram_buckets {
            if !matches!(aggregator.name, "sum" | "none") {
                return Err(QueryError::bad(
                    "Only NONE or SUM aggregation function supported for histogram query",
                ));
            }
            if downsample
                .as_ref()
                .is_some_and(|d| d.function.name != "sum")
            {
                return Err(QueryError::bad(
                    "Only SUM downsampling aggregation supported for histogram query",
                ));
            }
            // `List<Float>`: each percentile is a float.
            let percentiles: Vec<f32> = self.percentiles.iter().map(|p| *p as f32).collect();
            if let Some(p) = percentiles.iter().find(|p| !(0.0..=100.0).contains(*p)) {
                return Err(QueryError::bad(format!(
                    "Invalid percentile parameters: {}",
                    crate::model::java::float_to_string(*p)
                )));
            }
            Some(HistogramQuery {
                percentiles,
                show_buckets: self.show_histogram_buckets,
            })
        } else {
            None
        };
        Ok(ValidSubQuery {
            index,
            aggregator,
            metric,
            tsuids: self.tsuids.clone(),
            downsample,
            rate: self.rate.then(|| self.rate_options.unwrap_or_default()),
            filters,
            explicit_tags: self.explicit_tags,
            histogram,
            original: self.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000_000;

    fn err(r: Result<impl std::fmt::Debug, QueryError>) -> String {
        r.unwrap_err().message()
    }

    #[test]
    fn get_grammar() {
        let q = parse_get(
            "start=1h-ago&m=sum:rate%7Bcounter,100,5%7D:1m-avg-zero:explicit_tags:sys.cpu%7Bhost=*%7D%7Bdc=lga%7D&ms&arrays&show_tsuids=false",
        )
        .unwrap();
        assert!(q.ms_resolution && q.arrays && q.show_tsuids && !q.show_query);
        let s = &q.queries[0];
        assert_eq!(s.aggregator.as_deref(), Some("sum"));
        assert_eq!(s.metric.as_deref(), Some("sys.cpu"));
        assert!(s.rate && s.explicit_tags);
        assert_eq!(s.rate_options.unwrap().counter_max, 100);
        assert_eq!(s.downsample.as_deref(), Some("1m-avg-zero"));
        assert_eq!(s.filters.len(), 2);
        let q = parse_get("start=1&tsuid=sum:000001000001000001,000001000001000002").unwrap();
        assert_eq!(q.queries[0].tsuids.len(), 2);
        // Duplicate sub-queries collapse.
        assert_eq!(
            parse_get("start=1&m=sum:a&m=sum:a").unwrap().queries.len(),
            1
        );
    }

    #[test]
    fn get_errors() {
        assert_eq!(
            err(parse_get("m=sum:a")),
            "Missing parameter <code>start</code>"
        );
        assert_eq!(
            err(parse_get("start=1&m=sum")),
            "Invalid parameter m=sum (not enough :-separated parts)"
        );
        assert_eq!(
            err(parse_get("start=1&m=a:b:c:d:e:f")),
            "Invalid parameter m=a:b:c:d:e:f (too many :-separated parts)"
        );
        assert_eq!(err(parse_get("start=1")), "Missing sub queries");
    }

    #[test]
    fn post_body_and_validation() {
        let q = parse_post(
            br#"{"start":1356998400,"end":"1356998460","ms":true,"showTSUIDs":true,
                "queries":[{"aggregator":"sum","metric":"m","rateOptions":{"counter":true},
                "rate":true,"filters":[{"type":"wildcard","tagk":"host","filter":"*","groupBy":true}],
                "tags":{"dc":"lga"},"unknownField":1}]}"#,
        )
        .unwrap();
        assert!(q.ms_resolution && q.show_tsuids);
        let v = q.validate(NOW, Tz::UTC).unwrap();
        assert_eq!(v.start_ms, 1356998400000);
        assert_eq!(v.queries[0].filters.len(), 2);
        assert!(v.queries[0].rate.unwrap().counter);
        let bad = |body: &str| err(parse_post(body.as_bytes()).unwrap().validate(NOW, Tz::UTC));
        assert_eq!(bad(r#"{"queries":[]}"#), "Missing start time");
        assert_eq!(
            bad(r#"{"start":2,"end":1,"queries":[]}"#),
            "End time [1000] must be greater than the start time [2000]"
        );
        assert_eq!(bad(r#"{"start":1}"#), "Missing queries");
        assert_eq!(
            bad(r#"{"start":1,"queries":[{"metric":"m"}]}"#),
            "Missing the aggregation function"
        );
        assert_eq!(
            bad(r#"{"start":1,"queries":[{"aggregator":"Sum","metric":"m"}]}"#),
            "No such aggregation function: Sum"
        );
        assert_eq!(
            bad(r#"{"start":1,"queries":[{"aggregator":"sum"}]}"#),
            "Missing the metric or tsuids, provide at least one"
        );
        assert_eq!(
            bad(
                r#"{"start":1,"queries":[{"aggregator":"sum","metric":"m","downsample":"1m-nope"}]}"#
            ),
            "No such downsampling function: nope"
        );
        assert_eq!(
            bad(
                r#"{"start":1,"queries":[{"aggregator":"sum","metric":"m","filters":[{"type":"foo","tagk":"a","filter":"b"}]}]}"#
            ),
            "Could not find a tag value filter of the type: foo"
        );
        assert_eq!(
            bad(
                r#"{"start":1,"timezone":"Mars/Base","queries":[{"aggregator":"sum","metric":"m"}]}"#
            ),
            "The timezone specification could not be found"
        );
        assert_eq!(err(parse_post(b"  ")), "Missing message content");
    }

    #[test]
    fn absolute_times_in_a_zone() {
        let tz: Tz = "America/New_York".parse().unwrap();
        assert_eq!(parse_time("2013/01/01", NOW, tz).unwrap(), 1357016400000);
        assert_eq!(parse_time("1356998400", NOW, tz).unwrap(), 1356998400000);
    }
}
