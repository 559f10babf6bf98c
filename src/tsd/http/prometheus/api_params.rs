//! The Prometheus query API's parameters, read as Prometheus 2.42 reads
//! them: form values from the query string and an
//! `application/x-www-form-urlencoded` body merged (Go's `r.Form`, body
//! first), times as float Unix seconds or RFC 3339, durations as float
//! seconds or Prometheus' `1h30m` form, `match[]` selectors, `limit`.
//! Each error's text is the one 2.42 gives (without the
//! `invalid parameter "…": ` prefix, which the handler adds).

use chrono::DateTime;
use promql_parser::label::{MatchOp, Matcher};
use promql_parser::parser::Expr;

use crate::promql::engine::parse_query;
use crate::promql::value::METRIC_NAME;

/// The request's form values: the body's pairs first, then the query
/// string's, as Go's `Request.ParseForm` orders `r.Form`.
#[derive(Debug, Default, Clone)]
pub(super) struct Form {
    pairs: Vec<(String, String)>,
}

impl Form {
    /// The form of a request with query string `query` and, for a POST
    /// of a form body, that body.
    pub(super) fn new(query: Option<&str>, body: Option<&[u8]>) -> Form {
        let mut pairs = Vec::new();
        if let Some(b) = body {
            pairs.extend(form_pairs(&String::from_utf8_lossy(b)));
        }
        pairs.extend(form_pairs(query.unwrap_or("")));
        Form { pairs }
    }

    /// The first value of `name`, "" when absent (Go's `r.FormValue`).
    pub(super) fn value(&self, name: &str) -> &str {
        self.pairs
            .iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
    }

    /// Every value of `name`, in order (`r.Form["match[]"]`).
    pub(super) fn values(&self, name: &str) -> Vec<&str> {
        self.pairs
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// Splits `a=1&b=2` into decoded pairs as Go's `url.ParseQuery`: `+` is
/// a space, `%XX` a byte; a pair with a bad escape or a `;` in its key is
/// skipped (Go reports it and goes on with the others).
pub(super) fn form_pairs(s: &str) -> Vec<(String, String)> {
    s.split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            if k.contains(';') {
                return None;
            }
            Some((unescape(k)?, unescape(v)?))
        })
        .collect()
}

/// Go's `url.QueryUnescape`: `None` for a malformed escape.
fn unescape(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = |c: Option<&u8>| c.and_then(|c| (*c as char).to_digit(16));
                let (h, l) = (hex(b.get(i + 1))?, hex(b.get(i + 2))?);
                out.push((h * 16 + l) as u8);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// The earliest time the API takes (Prometheus' `minTime`: what its own
/// clients send for "from the beginning"), epoch ms.
pub(super) const MIN_TIME_MS: i64 = (i64::MIN / 1000 + 62_135_596_801) * 1000;
/// The latest (`maxTime`), epoch ms.
pub(super) const MAX_TIME_MS: i64 = (i64::MAX / 1000 - 62_135_596_801) * 1000 + 999;
/// `minTime` and `maxTime` as RFC 3339 text: Go's parser takes only
/// 4-digit years, so Prometheus recognises these two by their text.
const MIN_TIME_TEXT: &str = "-292273086-05-16T16:47:06Z";
const MAX_TIME_TEXT: &str = "292277025-08-18T07:12:54.999999999Z";

/// A time parameter: float Unix seconds (rounded to the millisecond) or
/// RFC 3339; epoch ms.
pub(super) fn parse_time(s: &str) -> Result<i64, String> {
    if let Ok(t) = s.parse::<f64>()
        && t.is_finite()
    {
        let secs = t.trunc();
        let ms = ((t - secs) * 1000.0).round();
        let total = secs * 1000.0 + ms;
        if total >= i64::MIN as f64 && total <= i64::MAX as f64 {
            return Ok(total as i64);
        }
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        // Prometheus' `timestamp.FromTime`: nanoseconds truncated to ms.
        return Ok(t.timestamp() * 1000 + i64::from(t.timestamp_subsec_millis()));
    }
    match s {
        MIN_TIME_TEXT => Ok(MIN_TIME_MS),
        MAX_TIME_TEXT => Ok(MAX_TIME_MS),
        _ => Err(format!("cannot parse {} to a valid timestamp", go_quote(s))),
    }
}

/// An optional time parameter (`start`, `end`, `time`): `default` when
/// empty; the error 2.42's `parseTimeParam` gives.
pub(super) fn parse_time_param(form: &Form, name: &str, default: i64) -> Result<i64, String> {
    let v = form.value(name);
    if v.is_empty() {
        return Ok(default);
    }
    parse_time(v).map_err(|e| format!("Invalid time value for '{name}': {e}"))
}

/// A duration parameter (`step`, `timeout`): float seconds or
/// Prometheus' duration (`1m30s`, `5m`, `1d`); nanoseconds, as Go's
/// `time.Duration`.
pub(super) fn parse_duration(s: &str) -> Result<i64, String> {
    if let Ok(d) = s.parse::<f64>() {
        let ns = d * 1e9;
        if ns > i64::MAX as f64 || ns < i64::MIN as f64 {
            return Err(format!(
                "cannot parse {} to a valid duration. It overflows int64",
                go_quote(s)
            ));
        }
        // Go converts a NaN to the smallest int64: a negative step.
        return Ok(if ns.is_nan() { i64::MIN } else { ns as i64 });
    }
    if !s.is_empty()
        && let Ok(d) = promql_parser::util::parse_duration(s)
        && let Ok(ns) = i64::try_from(d.as_nanos())
    {
        return Ok(ns);
    }
    Err(format!("cannot parse {} to a valid duration", go_quote(s)))
}

/// `limit` on series, labels and label values (newer Prometheus: 2.42
/// has none): 0 or absent is no limit.
pub(super) fn parse_limit(s: &str) -> Result<usize, String> {
    if s.is_empty() {
        return Ok(0);
    }
    let n: i64 = s
        .parse()
        .map_err(|_| format!("strconv.Atoi: parsing {}: invalid syntax", go_quote(s)))?;
    usize::try_from(n).map_err(|_| "limit must be non-negative".to_string())
}

/// The `match[]` selectors, each a set of matchers that must all match
/// (`foo{a="b"}` gives `__name__="foo"` and `a="b"`); a selector with
/// `or` inside its braces gives one set per alternative. Every set must
/// have a matcher that "" does not pass, as 2.42 requires.
pub(super) fn parse_matchers(selectors: &[&str]) -> Result<Vec<Vec<Matcher>>, String> {
    const NO_NON_EMPTY: &str = "match[] must contain at least one non-empty matcher";
    let mut sets = Vec::new();
    for s in selectors {
        // promql-parser checks what 2.42 checks after parsing, in its own
        // words: answered in 2.42's.
        let parsed = parse_query(s).map_err(|e| {
            if e.message.contains("at least one non-empty matcher") {
                NO_NON_EMPTY.to_string()
            } else {
                e.message
            }
        })?;
        let vs = match parsed {
            Expr::VectorSelector(vs) if vs.offset.is_none() && vs.at.is_none() => vs,
            _ => {
                return Err(format!(
                    "{s}: not a series selector (metric{{label=\"value\"}})"
                ));
            }
        };
        let name = vs
            .name
            .as_deref()
            .map(|n| Matcher::new(MatchOp::Equal, METRIC_NAME, n));
        let groups = if vs.matchers.or_matchers.is_empty() {
            vec![vs.matchers.matchers]
        } else {
            vs.matchers.or_matchers
        };
        for mut g in groups {
            g.extend(name.clone());
            sets.push(g);
        }
    }
    if sets.iter().any(|set| set.iter().all(|m| m.is_match(""))) {
        return Err(NO_NON_EMPTY.into());
    }
    Ok(sets)
}

/// `s` quoted as Go's `%q` quotes it (close enough for messages: JSON's
/// escapes are Go's for everything a parameter holds).
pub(super) fn go_quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_merges_body_first_and_decodes() {
        let f = Form::new(
            Some("query=up&match[]=a&time=1"),
            Some(b"query=rate%28x%5B5m%5D%29&match[]=b+c"),
        );
        assert_eq!(f.value("query"), "rate(x[5m])");
        assert_eq!(f.values("match[]"), vec!["b c", "a"]);
        assert_eq!(f.value("time"), "1");
        assert_eq!(f.value("nocache"), "");
        // A bad escape drops its pair only.
        assert_eq!(
            form_pairs("a=%zz&b=1"),
            vec![("b".to_string(), "1".to_string())]
        );
    }

    #[test]
    fn times_as_floats_and_rfc3339() {
        assert_eq!(parse_time("1435781451.781"), Ok(1_435_781_451_781));
        assert_eq!(parse_time("1435781451"), Ok(1_435_781_451_000));
        assert_eq!(parse_time("1e3"), Ok(1_000_000));
        assert_eq!(parse_time("-1.5"), Ok(-1_500));
        assert_eq!(
            parse_time("2015-07-01T20:10:51.781Z"),
            Ok(1_435_781_451_781)
        );
        assert_eq!(
            parse_time("2015-07-01T22:10:51.781+02:00"),
            Ok(1_435_781_451_781)
        );
        assert_eq!(parse_time(MIN_TIME_TEXT), Ok(MIN_TIME_MS));
        assert_eq!(parse_time(MAX_TIME_TEXT), Ok(MAX_TIME_MS));
        assert_eq!(
            parse_time("yesterday"),
            Err("cannot parse \"yesterday\" to a valid timestamp".to_string())
        );
        assert_eq!(
            parse_time(""),
            Err("cannot parse \"\" to a valid timestamp".to_string())
        );
        let f = Form::new(Some("start=x"), None);
        assert_eq!(
            parse_time_param(&f, "start", 0),
            Err("Invalid time value for 'start': cannot parse \"x\" to a valid timestamp".into())
        );
        assert_eq!(parse_time_param(&f, "end", 7), Ok(7));
    }

    #[test]
    fn durations_as_floats_and_prometheus_form() {
        assert_eq!(parse_duration("15"), Ok(15_000_000_000));
        assert_eq!(parse_duration("0.5"), Ok(500_000_000));
        assert_eq!(parse_duration("15s"), Ok(15_000_000_000));
        assert_eq!(parse_duration("1m"), Ok(60_000_000_000));
        assert_eq!(parse_duration("1h30m"), Ok(5_400_000_000_000));
        assert_eq!(parse_duration("-1"), Ok(-1_000_000_000));
        assert_eq!(
            parse_duration("1x"),
            Err("cannot parse \"1x\" to a valid duration".to_string())
        );
        assert_eq!(
            parse_duration(""),
            Err("cannot parse \"\" to a valid duration".to_string())
        );
        assert_eq!(
            parse_duration("1e300"),
            Err("cannot parse \"1e300\" to a valid duration. It overflows int64".to_string())
        );
    }

    #[test]
    fn limits() {
        assert_eq!(parse_limit(""), Ok(0));
        assert_eq!(parse_limit("10"), Ok(10));
        assert_eq!(
            parse_limit("-1"),
            Err("limit must be non-negative".to_string())
        );
        assert_eq!(
            parse_limit("ten"),
            Err("strconv.Atoi: parsing \"ten\": invalid syntax".to_string())
        );
    }

    #[test]
    fn matchers_include_the_name() {
        let sets = parse_matchers(&["up{job=~\"a.*\"}", "{__name__=\"sys.cpu.user\"}"]).unwrap();
        assert_eq!(sets.len(), 2);
        assert!(
            sets[0]
                .iter()
                .any(|m| m.name == METRIC_NAME && m.value == "up")
        );
        assert!(sets[0].iter().any(|m| m.name == "job" && m.is_match("abc")));
        assert!(
            !sets[0]
                .iter()
                .any(|m| m.name == "job" && m.is_match("xabc"))
        );
        assert_eq!(sets[1][0].value, "sys.cpu.user");
        assert_eq!(
            parse_matchers(&["{job=~\".*\"}"]).unwrap_err(),
            "match[] must contain at least one non-empty matcher"
        );
        assert!(parse_matchers(&["rate(x[5m])"]).is_err());
        assert!(parse_matchers(&["up offset 5m"]).is_err());
        assert!(parse_matchers(&["up{"]).is_err());
    }

    #[test]
    fn label_names() {
        assert!(crate::model::name::is_prometheus_label_name("job"));
        assert!(crate::model::name::is_prometheus_label_name("__name__"));
        assert!(crate::model::name::is_prometheus_label_name("_a1"));
        assert!(!crate::model::name::is_prometheus_label_name("1a"));
        assert!(!crate::model::name::is_prometheus_label_name("a.b"));
        assert!(!crate::model::name::is_prometheus_label_name(""));
    }
}
