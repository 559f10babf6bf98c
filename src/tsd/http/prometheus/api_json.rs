//! The Prometheus query API's JSON, byte for byte as Prometheus 2.42
//! writes it: the `{"status":…}` envelope, label sets, sample values as
//! strings (`NaN`, `+Inf`, `-Inf`), timestamps as seconds with a
//! millisecond fraction.

use std::fmt::Write as _;

use crate::promql::value::{Labels, QueryValue, Sample, Series, VectorSample, format_float};

/// A sample value of a vector or matrix, as 2.42 writes it
/// (`jsonutil.MarshalValue`): Go's shortest round-trip digits in plain
/// notation, but in exponent form (`1e-07`, `1e+21`) below 1e-6 and from
/// 1e21 on in magnitude.
pub(super) fn sample_value(v: f64) -> String {
    let a = v.abs();
    if a != 0.0 && a.is_finite() && !(1e-6..1e21).contains(&a) {
        go_exponent(v)
    } else {
        format_float(v)
    }
}

/// Go's `FormatFloat(v, 'e', -1, 64)`: Rust's `{:e}` with the exponent's
/// sign always written and at least two digits (`1e-07`, `1.5e+21`).
fn go_exponent(v: f64) -> String {
    let s = format!("{v:e}");
    let Some((mantissa, exp)) = s.split_once('e') else {
        return s;
    };
    let (sign, digits) = match exp.strip_prefix('-') {
        Some(d) => ('-', d),
        None => ('+', exp),
    };
    format!("{mantissa}e{sign}{digits:0>2}")
}

/// A sample's timestamp (ms) as seconds, as 2.42's
/// `jsonutil.MarshalTimestamp` writes it: the millisecond fraction in
/// three digits when there is one (`1435781451.781`, `1435781451.100`),
/// none otherwise (`1435781451`).
pub(super) fn timestamp(ms: i64) -> String {
    let neg = ms < 0;
    let a = ms.unsigned_abs();
    let (secs, frac) = (a / 1000, a % 1000);
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    let _ = write!(s, "{secs}");
    if frac != 0 {
        let _ = write!(s, ".{frac:03}");
    }
    s
}

/// A JSON string as Go's `encoding/json` writes it: `<`, `>`, `&`,
/// U+2028 and U+2029 escaped as `\u` sequences, control characters
/// other than `\n`, `\r`, `\t` as `\u00XX`.
pub(super) fn string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A label set as a JSON object, in label order.
pub(super) fn labels(out: &mut String, l: &Labels) {
    out.push('{');
    for (i, label) in l.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        string(out, &label.name);
        out.push(':');
        string(out, &label.value);
    }
    out.push('}');
}

/// A scalar's or string's timestamp: 2.42 writes `float64(t) / 1000`
/// through `encoding/json` there, the shortest digits of that float
/// (`1435781451.1`).
fn float_timestamp(ms: i64) -> String {
    format!("{}", ms as f64 / 1000.0)
}

/// `[t,"v"]` for a sample of a vector or matrix.
fn point(out: &mut String, t: i64, v: f64) {
    out.push('[');
    out.push_str(&timestamp(t));
    out.push_str(",\"");
    out.push_str(&sample_value(v));
    out.push_str("\"]");
}

fn vector_sample(out: &mut String, s: &VectorSample) {
    out.push_str("{\"metric\":");
    labels(out, &s.labels);
    out.push_str(",\"value\":");
    point(out, s.t, s.v);
    out.push('}');
}

fn series(out: &mut String, s: &Series) {
    out.push_str("{\"metric\":");
    labels(out, &s.labels);
    out.push_str(",\"values\":[");
    for (i, Sample { t, v }) in s.samples.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        point(out, *t, *v);
    }
    out.push_str("]}");
}

/// The `data` of a query's answer: `{"resultType":…,"result":…}`.
pub(super) fn query_data(value: &QueryValue) -> String {
    let mut out = String::from("{\"resultType\":");
    match value {
        QueryValue::Scalar(s) => {
            out.push_str("\"scalar\",\"result\":[");
            out.push_str(&float_timestamp(s.t));
            out.push_str(",\"");
            out.push_str(&format_float(s.v));
            out.push_str("\"]");
        }
        QueryValue::String { t, value } => {
            out.push_str("\"string\",\"result\":[");
            out.push_str(&float_timestamp(*t));
            out.push(',');
            string(&mut out, value);
            out.push(']');
        }
        QueryValue::Vector(v) => {
            out.push_str("\"vector\",\"result\":[");
            for (i, s) in v.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                vector_sample(&mut out, s);
            }
            out.push(']');
        }
        QueryValue::Matrix(m) => {
            out.push_str("\"matrix\",\"result\":[");
            for (i, s) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                series(&mut out, s);
            }
            out.push(']');
        }
    }
    out.push('}');
    out
}

/// A JSON array of strings.
pub(super) fn strings<S: AsRef<str>>(items: &[S]) -> String {
    let mut out = String::from("[");
    for (i, s) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        string(&mut out, s.as_ref());
    }
    out.push(']');
    out
}

/// A JSON array of label sets (`/series`).
pub(super) fn label_sets(items: &[Labels]) -> String {
    let mut out = String::from("[");
    for (i, l) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        labels(&mut out, l);
    }
    out.push(']');
    out
}

/// `{"status":"success","data":…}`, with `warnings` when there are some.
pub(super) fn success(data: &str, warnings: &[String]) -> String {
    let mut out = String::with_capacity(data.len() + 32);
    out.push_str("{\"status\":\"success\",\"data\":");
    out.push_str(data);
    if !warnings.is_empty() {
        out.push_str(",\"warnings\":");
        out.push_str(&strings(warnings));
    }
    out.push('}');
    out
}

/// `{"status":"error","errorType":…,"error":…}`.
pub(super) fn error(error_type: &str, message: &str) -> String {
    let mut out = String::from("{\"status\":\"error\",\"errorType\":");
    string(&mut out, error_type);
    out.push_str(",\"error\":");
    string(&mut out, message);
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_as_go_writes_them() {
        // Vector and matrix samples: plain, exponent past the cut-offs.
        assert_eq!(sample_value(1.0), "1");
        assert_eq!(sample_value(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(sample_value(-0.0), "-0");
        assert_eq!(sample_value(f64::NAN), "NaN");
        assert_eq!(sample_value(f64::INFINITY), "+Inf");
        assert_eq!(sample_value(f64::NEG_INFINITY), "-Inf");
        assert_eq!(sample_value(1e21), "1e+21");
        assert_eq!(sample_value(1.5e300), "1.5e+300");
        assert_eq!(sample_value(1e-7), "1e-07");
        assert_eq!(sample_value(-2.5e-10), "-2.5e-10");
        assert_eq!(sample_value(1e20), "100000000000000000000");
        assert_eq!(sample_value(1e-6), "0.000001");
        assert_eq!(sample_value(123456.789), "123456.789");
        // Scalars: plain notation always.
        assert_eq!(format_float(1e21), "1000000000000000000000");
        assert_eq!(format_float(1e-7), "0.0000001");
        assert_eq!(format_float(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(format_float(-0.0), "-0");
        assert_eq!(format_float(f64::NAN), "NaN");
        assert_eq!(format_float(f64::INFINITY), "+Inf");
        assert_eq!(format_float(f64::NEG_INFINITY), "-Inf");
    }

    #[test]
    fn timestamps_in_seconds() {
        assert_eq!(timestamp(1_435_781_451_781), "1435781451.781");
        assert_eq!(timestamp(1_435_781_451_000), "1435781451");
        assert_eq!(timestamp(1_435_781_451_100), "1435781451.100");
        assert_eq!(float_timestamp(1_435_781_451_100), "1435781451.1");
        assert_eq!(float_timestamp(1_000), "1");
        assert_eq!(timestamp(1_435_781_451_001), "1435781451.001");
        assert_eq!(timestamp(0), "0");
        assert_eq!(timestamp(-1_500), "-1.500");
    }

    #[test]
    fn strings_escaped_as_go() {
        let mut s = String::new();
        string(&mut s, "a\"b\\c<d>&\u{1}\n\u{2028}é");
        assert_eq!(s, r#""a\"b\\c\u003cd\u003e\u0026\u0001\n\u2028é""#);
    }

    #[test]
    fn shapes() {
        let l = Labels::from_pairs([("__name__", "up"), ("job", "x")]);
        let v = QueryValue::Vector(vec![VectorSample {
            labels: l.clone(),
            t: 1_000,
            v: 1.0,
        }]);
        assert_eq!(
            success(&query_data(&v), &[]),
            r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":"up","job":"x"},"value":[1,"1"]}]}}"#
        );
        let m = QueryValue::Matrix(vec![Series {
            labels: l,
            samples: vec![
                Sample { t: 1_500, v: 2.0 },
                Sample {
                    t: 2_500,
                    v: f64::NAN,
                },
            ],
        }]);
        assert_eq!(
            query_data(&m),
            r#"{"resultType":"matrix","result":[{"metric":{"__name__":"up","job":"x"},"values":[[1.500,"2"],[2.500,"NaN"]]}]}"#
        );
        let s = QueryValue::Scalar(Sample { t: 1_000, v: 1e-7 });
        assert_eq!(
            query_data(&s),
            r#"{"resultType":"scalar","result":[1,"0.0000001"]}"#
        );
        let st = QueryValue::String {
            t: 1_000,
            value: "a".into(),
        };
        assert_eq!(
            query_data(&st),
            r#"{"resultType":"string","result":[1,"a"]}"#
        );
        assert_eq!(
            success("[]", &["results truncated due to limit".into()]),
            r#"{"status":"success","data":[],"warnings":["results truncated due to limit"]}"#
        );
        assert_eq!(
            error("bad_data", "x"),
            r#"{"status":"error","errorType":"bad_data","error":"x"}"#
        );
    }
}
