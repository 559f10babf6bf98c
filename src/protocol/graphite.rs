//! Graphite's plaintext protocol: `path value timestamp` lines, with
//! Graphite 1.1's tags (`path;tag=value;tag2=value2`), and the templates
//! (`tsd.graphite.templates`) that lift parts of a dotted path into tags,
//! a small subset of InfluxDB's graphite templates. Pure parsing: the
//! listener is `tsd/graphite.rs`.
//!
//! A line's words are separated by spaces or tabs. The timestamp is Unix
//! seconds, with a fraction or without; it may be left out, or be `-1`,
//! for the time the line is received. The value is a finite number
//! (carbon drops NaN; here it is a bad line).
//!
//! A template is `[filter] template [tag=value,...]`, templates are
//! separated by `;`. The template's dotted parts name what each part of a
//! path becomes: `measurement`, `field`, a tag's name, or nothing (an
//! empty part: dropped); the last one may end in `*` (`measurement*`,
//! `field*`) to take the rest of the path. The metric is the measurement
//! parts joined by `.`, then, if there are field parts, `.` and those.
//! Path parts past a template without `*` are dropped, as InfluxDB drops
//! them. The filter is a dotted pattern (`*` matches one part) that a
//! path must start with; the first template whose filter matches is
//! used, else the one without a filter, else none (the path is the
//! metric). Templates' extra tags come first; the line's own tags win
//! over both.

use std::borrow::Cow;

use thiserror::Error;

/// Why a line was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GraphiteError {
    #[error("expected \"path value [timestamp]\", got {0} words")]
    Words(usize),
    #[error("empty metric path")]
    EmptyPath,
    #[error(
        "invalid tag {0:?}: tags are name=value, a name of at least one byte without ;!^= and a value not starting with ~"
    )]
    BadTag(String),
    #[error("duplicate tag {0:?}")]
    DuplicateTag(String),
    #[error("invalid value {0:?}: not a finite number")]
    BadValue(String),
    #[error("invalid timestamp {0:?}: Unix seconds expected")]
    BadTimestamp(String),
    #[error("the line is not UTF-8")]
    NotUtf8,
}

/// One line's point.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphitePoint<'a> {
    /// The dotted path, without its tags.
    pub path: &'a str,
    /// Graphite 1.1 tags, as written.
    pub tags: Vec<(&'a str, &'a str)>,
    pub value: f64,
    /// Unix milliseconds; `None`: when received.
    pub timestamp_ms: Option<i64>,
}

/// Reads one line (without its newline; a trailing `\r` is ignored).
pub fn parse_line(line: &[u8]) -> Result<GraphitePoint<'_>, GraphiteError> {
    let line = std::str::from_utf8(line).map_err(|_| GraphiteError::NotUtf8)?;
    let mut words = line.split([' ', '\t', '\r']).filter(|w| !w.is_empty());
    let (name, value) = (words.next(), words.next());
    let (Some(name), Some(value)) = (name, value) else {
        return Err(GraphiteError::Words(usize::from(name.is_some())));
    };
    let time = words.next();
    let extra = words.count();
    if extra > 0 {
        return Err(GraphiteError::Words(3 + extra));
    }
    let mut parts = name.split(';');
    let path = parts.next().unwrap_or("");
    if path.is_empty() {
        return Err(GraphiteError::EmptyPath);
    }
    let mut tags: Vec<(&str, &str)> = Vec::new();
    for t in parts {
        let Some((k, v)) = t.split_once('=') else {
            return Err(GraphiteError::BadTag(t.to_string()));
        };
        if k.is_empty() || k.contains(['!', '^']) || v.is_empty() || v.starts_with('~') {
            return Err(GraphiteError::BadTag(t.to_string()));
        }
        if tags.iter().any(|(other, _)| *other == k) {
            return Err(GraphiteError::DuplicateTag(k.to_string()));
        }
        tags.push((k, v));
    }
    let value = value
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| GraphiteError::BadValue(value.to_string()))?;
    let timestamp_ms = match time {
        None | Some("-1") => None,
        Some(t) => Some(seconds_to_ms(t).ok_or_else(|| GraphiteError::BadTimestamp(t.into()))?),
    };
    Ok(GraphitePoint {
        path,
        tags,
        value,
        timestamp_ms,
    })
}

/// Unix seconds (whole or with a fraction) as milliseconds, if they are
/// a time after 1970.
fn seconds_to_ms(t: &str) -> Option<i64> {
    if let Ok(s) = t.parse::<i64>() {
        return s.checked_mul(1000).filter(|ms| *ms >= 0);
    }
    let s = t
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)?;
    let ms = (s * 1000.0).floor();
    (ms < i64::MAX as f64).then_some(ms as i64)
}

/// A template's part: what one part of a path becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Measurement,
    Field,
    Tag(String),
    Skip,
}

/// One template: see the module header.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Template {
    /// The parts a path must start with; `*` matches any one. None: the
    /// default template.
    filter: Option<Vec<String>>,
    parts: Vec<Part>,
    /// The last part takes the rest of the path.
    greedy: bool,
    tags: Vec<(String, String)>,
}

/// Why `tsd.graphite.templates` could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("graphite template {template:?}: {why}")]
pub struct TemplateError {
    template: String,
    why: &'static str,
}

/// The templates of `tsd.graphite.templates`, in the order written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Templates(Vec<Template>);

/// A path mapped by a template: the metric and the tags it lifted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapped<'a> {
    pub metric: String,
    pub tags: Vec<(Cow<'a, str>, Cow<'a, str>)>,
}

impl Templates {
    /// Reads `;`-separated templates; an empty text is no template.
    pub fn parse(spec: &str) -> Result<Templates, TemplateError> {
        let mut out = Vec::new();
        for text in spec.split(';').map(str::trim).filter(|t| !t.is_empty()) {
            let bad = |why| TemplateError {
                template: text.to_string(),
                why,
            };
            let words: Vec<&str> = text.split_ascii_whitespace().collect();
            let (filter, template, tags) = match words.as_slice() {
                [t] => (None, *t, None),
                [a, b] if b.contains('=') => (None, *a, Some(*b)),
                [f, t] => (Some(*f), *t, None),
                [f, t, tags] => (Some(*f), *t, Some(*tags)),
                _ => return Err(bad("expected [filter] template [tag=value,...]")),
            };
            let mut parts = Vec::new();
            let mut greedy = false;
            let names: Vec<&str> = template.split('.').collect();
            for (i, p) in names.iter().enumerate() {
                let (name, star) = match p.strip_suffix('*') {
                    Some(n) => (n, true),
                    None => (*p, false),
                };
                if star {
                    if i + 1 != names.len() {
                        return Err(bad("only the last part may end in *"));
                    }
                    if name != "measurement" && name != "field" {
                        return Err(bad("only measurement* and field* take the rest of a path"));
                    }
                    greedy = true;
                }
                parts.push(match name {
                    "measurement" => Part::Measurement,
                    "field" => Part::Field,
                    "" => Part::Skip,
                    tag => Part::Tag(tag.to_string()),
                });
            }
            if !parts.contains(&Part::Measurement) {
                return Err(bad("a template needs a measurement part"));
            }
            let tags = match tags {
                None => Vec::new(),
                Some(t) => t
                    .split(',')
                    .map(|kv| match kv.split_once('=') {
                        Some((k, v)) if !k.is_empty() && !v.is_empty() => {
                            Ok((k.to_string(), v.to_string()))
                        }
                        _ => Err(bad("extra tags are tag=value,...")),
                    })
                    .collect::<Result<_, _>>()?,
            };
            let filter = filter.map(|f| f.split('.').map(str::to_string).collect());
            out.push(Template {
                filter,
                parts,
                greedy,
                tags,
            });
        }
        Ok(Templates(out))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The template a path is mapped by, if any.
    fn find(&self, parts: &[&str]) -> Option<&Template> {
        let matches = |f: &[String]| {
            f.len() <= parts.len() && f.iter().zip(parts).all(|(f, p)| f == "*" || f == p)
        };
        self.0
            .iter()
            .find(|t| t.filter.as_deref().is_some_and(matches))
            .or_else(|| self.0.iter().find(|t| t.filter.is_none()))
    }

    /// `path` mapped by its template; `None` when no template applies, or
    /// the path is too short to have a measurement (the path is then the
    /// metric as written).
    pub fn apply<'t>(&'t self, path: &str) -> Option<Mapped<'t>> {
        let parts: Vec<&str> = path.split('.').collect();
        let t = self.find(&parts)?;
        let mut measurement: Vec<&str> = Vec::new();
        let mut field: Vec<&str> = Vec::new();
        let mut tags: Vec<(Cow<'t, str>, String)> = Vec::new();
        for (i, part) in t.parts.iter().enumerate() {
            let taken: &[&str] = if t.greedy && i + 1 == t.parts.len() {
                parts.get(i..).unwrap_or(&[])
            } else {
                parts.get(i..=i).unwrap_or(&[])
            };
            if taken.is_empty() {
                break;
            }
            match part {
                Part::Measurement => measurement.extend_from_slice(taken),
                Part::Field => field.extend_from_slice(taken),
                Part::Skip => {}
                Part::Tag(name) => {
                    // A tag named twice joins its parts, as InfluxDB does.
                    let value = taken.join(".");
                    match tags.iter_mut().find(|(k, _)| k == name) {
                        Some((_, v)) => {
                            v.push('.');
                            v.push_str(&value);
                        }
                        None => tags.push((Cow::Borrowed(name.as_str()), value)),
                    }
                }
            }
        }
        if measurement.is_empty() {
            return None;
        }
        let mut metric = measurement.join(".");
        if !field.is_empty() {
            metric.push('.');
            metric.push_str(&field.join("."));
        }
        let mut all: Vec<(Cow<'t, str>, Cow<'t, str>)> = t
            .tags
            .iter()
            .filter(|(k, _)| !tags.iter().any(|(n, _)| n == k))
            .map(|(k, v)| (Cow::Borrowed(k.as_str()), Cow::Borrowed(v.as_str())))
            .collect();
        all.extend(tags.into_iter().map(|(k, v)| (k, Cow::Owned(v))));
        Some(Mapped { metric, tags: all })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines() {
        let p = parse_line(b"servers.web01.cpu.load 0.75 1700000000").unwrap();
        assert_eq!(p.path, "servers.web01.cpu.load");
        assert!(p.tags.is_empty());
        assert_eq!(p.value, 0.75);
        assert_eq!(p.timestamp_ms, Some(1_700_000_000_000));
        let p = parse_line(b"a.b\t-3\t1700000000.5\r").unwrap();
        assert_eq!(p.value, -3.0);
        assert_eq!(p.timestamp_ms, Some(1_700_000_000_500));
        assert_eq!(parse_line(b"a 1").unwrap().timestamp_ms, None);
        assert_eq!(parse_line(b"a 1 -1").unwrap().timestamp_ms, None);
    }

    #[test]
    fn tags_of_graphite_1_1() {
        let p = parse_line(b"disk.used;host=web01;mount=/var 42 1700000000").unwrap();
        assert_eq!(p.path, "disk.used");
        assert_eq!(p.tags, [("host", "web01"), ("mount", "/var")]);
        for bad in [
            "a;b 1 1",
            "a;=b 1 1",
            "a;b= 1 1",
            "a;b=~x 1 1",
            "a;b!c=1 1 1",
        ] {
            assert!(
                matches!(parse_line(bad.as_bytes()), Err(GraphiteError::BadTag(_))),
                "{bad}"
            );
        }
        assert_eq!(
            parse_line(b"a;x=1;x=2 1 1"),
            Err(GraphiteError::DuplicateTag("x".into()))
        );
    }

    #[test]
    fn bad_lines() {
        assert_eq!(parse_line(b""), Err(GraphiteError::Words(0)));
        assert_eq!(parse_line(b"a"), Err(GraphiteError::Words(1)));
        assert_eq!(parse_line(b"a 1 2 3"), Err(GraphiteError::Words(4)));
        assert_eq!(parse_line(b";a=b 1 1"), Err(GraphiteError::EmptyPath));
        for v in ["nan", "inf", "x", "1e999"] {
            assert!(matches!(
                parse_line(format!("a {v} 1").as_bytes()),
                Err(GraphiteError::BadValue(_))
            ));
        }
        for t in ["x", "-2", "1e30"] {
            assert!(
                matches!(
                    parse_line(format!("a 1 {t}").as_bytes()),
                    Err(GraphiteError::BadTimestamp(_))
                ),
                "{t}"
            );
        }
        assert_eq!(parse_line(b"a\xff 1 1"), Err(GraphiteError::NotUtf8));
    }

    fn mapped(t: &Templates, path: &str) -> Option<(String, Vec<(String, String)>)> {
        t.apply(path).map(|m| {
            (
                m.metric,
                m.tags
                    .into_iter()
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect(),
            )
        })
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn templates_lift_parts_into_tags() {
        let t = Templates::parse(
            "servers.* .host.measurement.field* dc=eu; stats.* ..measurement*; region.host.measurement*",
        )
        .unwrap();
        assert_eq!(
            mapped(&t, "servers.web01.cpu.load.1m"),
            Some((
                "cpu.load.1m".into(),
                pairs(&[("dc", "eu"), ("host", "web01")])
            ))
        );
        assert_eq!(
            mapped(&t, "stats.counters.requests.ok"),
            Some(("requests.ok".into(), vec![]))
        );
        // No filter matches: the default.
        assert_eq!(
            mapped(&t, "us-east.web02.mem.free"),
            Some((
                "mem.free".into(),
                pairs(&[("region", "us-east"), ("host", "web02")])
            ))
        );
        // Too short for a measurement: the path is the metric.
        assert_eq!(mapped(&t, "us-east.web02"), None);
        assert_eq!(mapped(&Templates::default(), "a.b"), None);
        // Parts past a template without * are dropped.
        let t = Templates::parse("host.measurement").unwrap();
        assert_eq!(
            mapped(&t, "h.cpu.extra"),
            Some(("cpu".into(), pairs(&[("host", "h")])))
        );
        // A tag named twice joins its parts.
        let t = Templates::parse("dc.dc.measurement*").unwrap();
        assert_eq!(
            mapped(&t, "eu.west.cpu"),
            Some(("cpu".into(), pairs(&[("dc", "eu.west")])))
        );
    }

    #[test]
    fn bad_templates_are_named() {
        for bad in [
            "measurement*.host",
            "host.field",
            "host*.measurement",
            "a b c d",
            "measurement x=",
        ] {
            let e = Templates::parse(bad).unwrap_err();
            assert!(
                e.to_string().contains(bad.split(';').next().unwrap()),
                "{e}"
            );
        }
        assert!(Templates::parse(" ; ").unwrap().is_empty());
    }

    proptest::proptest! {
        #[test]
        fn never_panics(line in proptest::collection::vec(proptest::num::u8::ANY, 0..80),
                        text in "[a-z.;=~!* 0-9\\-]{0,40}") {
            let _ = parse_line(&line);
            let _ = parse_line(text.as_bytes());
            if let Ok(t) = Templates::parse(&text) {
                let _ = t.apply(&text);
            }
        }
    }
}
