//! `label_replace` and `label_join`: new label values from old ones.
//! Both keep `__name__` (it can even be their destination) and the
//! element's value, as Prometheus 2.42 does.
//!
//! `label_replace` matches its regular expression anchored at both ends
//! and expands `$1`, `${1}`, `$name`, `${name}` and `$$` in the
//! replacement by the rules of Go's `Regexp.Expand` (a name runs as long
//! as it can, `$1x` is the group named `1x`; an unknown or unmatched
//! group expands to nothing; a malformed reference is literal text).

use regex::Regex;

use super::goregex::compile_anchored;
use super::{FnContext, at_step};
use crate::promql::error::PromError;
use crate::promql::value::VectorSample;

use crate::model::name::is_prometheus_label_name;

/// The string arguments of `label_replace(v, dst, replacement, src, regex)`.
#[derive(Debug, Clone, Copy)]
pub struct Replace<'a> {
    pub dst: &'a str,
    pub replacement: &'a str,
    pub src: &'a str,
    pub regex: &'a str,
}

/// `label_replace`: for each element whose `src` value matches `regex`
/// (anchored), sets `dst` to the expanded replacement (removes it when
/// that is empty); elements that do not match pass unchanged. An
/// invalid expression or destination name is an `execution` error, as
/// 2.42 reports it.
pub fn label_replace(
    input: Vec<VectorSample>,
    args: Replace<'_>,
    ctx: &FnContext,
) -> Result<Vec<VectorSample>, PromError> {
    let re = compile_anchored(args.regex).map_err(|_| {
        PromError::execution(format!(
            "invalid regular expression in label_replace(): {}",
            args.regex
        ))
    })?;
    if !is_prometheus_label_name(args.dst) {
        return Err(PromError::execution(format!(
            "invalid destination label name in label_replace(): {}",
            args.dst
        )));
    }
    Ok(input
        .into_iter()
        .map(|s| {
            let mut labels = s.labels;
            let source = labels.get(args.src);
            if let Some(caps) = re.captures(source) {
                let value = expand(&re, &caps, args.replacement);
                // `set` with "" removes the label, as 2.42 deletes dst and
                // sets it only when the result is not empty.
                labels.set(args.dst, &value);
            }
            at_step(labels, s.v, ctx)
        })
        .collect())
}

/// `template` with its `$` references replaced by the groups of `caps`,
/// by the rules of Go's `Regexp.Expand`.
fn expand(re: &Regex, caps: &regex::Captures<'_>, template: &str) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        rest = &rest[dollar + 1..];
        if let Some(after) = rest.strip_prefix('$') {
            out.push('$');
            rest = after;
            continue;
        }
        let Some((reference, after)) = group_reference(rest) else {
            // Malformed: the `$` is text.
            out.push('$');
            continue;
        };
        rest = after;
        let group = match reference {
            GroupRef::Number(i) => caps.get(i),
            GroupRef::Name(name) => re
                .capture_names()
                .position(|n| n == Some(name))
                .and_then(|i| caps.get(i)),
        };
        if let Some(m) = group {
            out.push_str(m.as_str());
        }
    }
    out.push_str(rest);
    out
}

/// A `$` reference to a capture group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GroupRef<'a> {
    Number(usize),
    Name(&'a str),
}

/// The reference at the start of `text` (just after a `$`): a name of
/// letters, digits and `_`, as long as it runs, optionally in braces; a
/// name of digits alone (no leading zero, at most nine digits, as Go)
/// is a group number.
/// Returns the reference and what follows it; None when malformed.
fn group_reference(text: &str) -> Option<(GroupRef<'_>, &str)> {
    let (braced, body) = match text.strip_prefix('{') {
        Some(b) => (true, b),
        None => (false, text),
    };
    let len = body
        .char_indices()
        .find(|&(_, c)| !(c.is_alphabetic() || c.is_numeric() || c == '_'))
        .map_or(body.len(), |(i, _)| i);
    if len == 0 {
        return None;
    }
    let name = &body[..len];
    let rest = if braced {
        body[len..].strip_prefix('}')?
    } else {
        &body[len..]
    };
    let number = (name.bytes().all(|b| b.is_ascii_digit())
        && (name == "0" || !name.starts_with('0'))
        && name.len() <= 9)
        .then(|| name.parse::<usize>().ok())
        .flatten();
    Some((number.map_or(GroupRef::Name(name), GroupRef::Number), rest))
}

/// `label_join(v, dst, separator, src...)`: sets `dst` to the values of
/// the `src` labels (missing ones as "") joined by `separator`; removes
/// `dst` when that is empty. Invalid label names are `execution` errors.
pub fn label_join(
    input: Vec<VectorSample>,
    dst: &str,
    separator: &str,
    sources: &[String],
    ctx: &FnContext,
) -> Result<Vec<VectorSample>, PromError> {
    if let Some(bad) = sources.iter().find(|s| !is_prometheus_label_name(s)) {
        return Err(PromError::execution(format!(
            "invalid source label name in label_join(): {bad}"
        )));
    }
    if !is_prometheus_label_name(dst) {
        return Err(PromError::execution(format!(
            "invalid destination label name in label_join(): {dst}"
        )));
    }
    Ok(input
        .into_iter()
        .map(|s| {
            let mut labels = s.labels;
            let values: Vec<&str> = sources.iter().map(|src| labels.get(src)).collect();
            let joined = values.join(separator);
            labels.set(dst, &joined);
            at_step(labels, s.v, ctx)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promql::ErrorKind;
    use crate::promql::value::Labels;

    const CTX: FnContext = FnContext { eval_ms: 7_000 };

    fn sample(pairs: &[(&str, &str)]) -> VectorSample {
        VectorSample {
            labels: Labels::from_pairs(pairs.iter().copied()),
            t: 0,
            v: 3.0,
        }
    }

    fn replace(
        input: VectorSample,
        dst: &str,
        replacement: &str,
        src: &str,
        regex: &str,
    ) -> Result<Labels, PromError> {
        let args = Replace {
            dst,
            replacement,
            src,
            regex,
        };
        let out = label_replace(vec![input], args, &CTX)?;
        assert_eq!(out[0].v, 3.0);
        assert_eq!(out[0].t, 7_000);
        Ok(out[0].labels.clone())
    }

    #[test]
    fn replaces_with_groups_and_keeps_the_name() {
        let s = sample(&[("__name__", "up"), ("instance", "web01:9100")]);
        let l = replace(s, "host", "$1", "instance", "(.*):(\\d+)").unwrap();
        assert_eq!(
            l,
            Labels::from_pairs([
                ("__name__", "up"),
                ("instance", "web01:9100"),
                ("host", "web01")
            ])
        );
    }

    #[test]
    fn no_match_leaves_the_element_unchanged() {
        let s = sample(&[("__name__", "up"), ("instance", "web01:9100")]);
        // Anchored: "web" matches only a prefix, so no match.
        let l = replace(s.clone(), "host", "x", "instance", "web").unwrap();
        assert_eq!(l, s.labels);
        // A missing source label is "", which "web" does not match either.
        let l = replace(s.clone(), "host", "x", "nope", "web").unwrap();
        assert_eq!(l, s.labels);
        // But ".*" matches "": the destination is set.
        let l = replace(s, "host", "x", "nope", ".*").unwrap();
        assert_eq!(l.get("host"), "x");
    }

    #[test]
    fn empty_replacement_removes_the_destination() {
        let s = sample(&[("__name__", "up"), ("job", "node")]);
        let l = replace(s, "job", "", "job", "node").unwrap();
        assert_eq!(l, Labels::from_pairs([("__name__", "up")]));
    }

    #[test]
    fn can_rename_the_metric() {
        let s = sample(&[("__name__", "up"), ("job", "node")]);
        let l = replace(s, "__name__", "${1}_up", "job", "(.+)").unwrap();
        assert_eq!(l.metric_name(), "node_up");
    }

    #[test]
    fn expansion_follows_go() {
        let re = compile_anchored("(?P<a>x)(y)").unwrap();
        let caps = re.captures("xy").unwrap();
        let e = |t: &str| expand(&re, &caps, t);
        assert_eq!(e("$1-$2"), "x-y");
        assert_eq!(e("${a}${2}"), "xy");
        assert_eq!(e("$a"), "x");
        // `$1x` is the group named "1x", which does not exist.
        assert_eq!(e("$1x"), "");
        assert_eq!(e("${1}x"), "xx");
        assert_eq!(e("$$1"), "$1");
        // Malformed references are text.
        assert_eq!(e("$"), "$");
        assert_eq!(e("${a"), "${a");
        assert_eq!(e("${a b}"), "${a b}");
        assert_eq!(e("$-"), "$-");
        // Out of range and leading zeros: nothing ("01" is a name).
        assert_eq!(e("$9"), "");
        assert_eq!(e("$01"), "");
        assert_eq!(e("$0"), "xy");
    }

    #[test]
    fn bad_regex_and_label_names_are_execution_errors() {
        let s = sample(&[("a", "b")]);
        let err = replace(s.clone(), "dst", "", "a", "(").unwrap_err();
        assert_eq!(err.kind, ErrorKind::Execution);
        assert_eq!(
            err.message,
            "invalid regular expression in label_replace(): ("
        );
        let err = replace(s.clone(), "1dst", "", "a", "b").unwrap_err();
        assert_eq!(
            err.message,
            "invalid destination label name in label_replace(): 1dst"
        );
        let err = label_join(vec![s.clone()], "d", ",", &["a-b".to_string()], &CTX).unwrap_err();
        assert_eq!(
            err.message,
            "invalid source label name in label_join(): a-b"
        );
        let err = label_join(vec![s], "", ",", &[], &CTX).unwrap_err();
        assert_eq!(
            err.message,
            "invalid destination label name in label_join(): "
        );
    }

    #[test]
    fn joins_values_with_missing_ones_empty() {
        let s = sample(&[("__name__", "m"), ("a", "1"), ("c", "3")]);
        let srcs = ["a".to_string(), "b".to_string(), "c".to_string()];
        let out = label_join(vec![s.clone()], "d", "-", &srcs, &CTX).unwrap();
        assert_eq!(out[0].labels.get("d"), "1--3");
        assert_eq!(out[0].labels.metric_name(), "m");
        // Nothing to join removes the destination.
        let s = sample(&[("__name__", "m"), ("d", "old")]);
        let out = label_join(vec![s], "d", "-", &["zz".to_string()], &CTX).unwrap();
        assert_eq!(out[0].labels, Labels::from_pairs([("__name__", "m")]));
    }

    #[test]
    fn label_names() {
        assert!(is_prometheus_label_name("_a1"));
        assert!(is_prometheus_label_name("__name__"));
        assert!(!is_prometheus_label_name("1a"));
        assert!(!is_prometheus_label_name(""));
        assert!(!is_prometheus_label_name("a.b"));
        assert!(!is_prometheus_label_name("é"));
    }
}
