//! Parsing a query as Prometheus 2.42 does: promql-parser (which follows
//! Prometheus 3.x) with 2.42's `holt_winters` added, and what 2.42 does
//! not know refused with 2.42's words.

use std::sync::Once;

use promql_parser::parser::function::{Function, register_extra_functions};
use promql_parser::parser::token::{T_LIMIT_RATIO, T_LIMITK};
use promql_parser::parser::value::ValueType;
use promql_parser::parser::{self, Expr};

use crate::promql::error::PromError;

/// Functions promql-parser knows that Prometheus 2.42 does not: 2.42
/// answers a call of any of them "unknown function".
const NOT_IN_2_42: &[&str] = &[
    "double_exponential_smoothing",
    "info",
    "sort_by_label",
    "sort_by_label_desc",
    "mad_over_time",
    "histogram_avg",
    "histogram_quantiles",
    "histogram_stddev",
    "histogram_stdvar",
    "max_of",
    "min_of",
    "first_over_time",
    "ts_of_first_over_time",
    "ts_of_last_over_time",
    "ts_of_max_over_time",
    "ts_of_min_over_time",
    "start_timestamp",
    "start",
    "end",
    "range",
    "step",
];

static REGISTER: Once = Once::new();

/// Adds 2.42's `holt_winters(range vector, scalar, scalar)` to the
/// parser's functions, once per process.
fn register_holt_winters() {
    REGISTER.call_once(|| {
        let f = Function::new(
            "holt_winters",
            vec![ValueType::Matrix, ValueType::Scalar, ValueType::Scalar],
            0,
            ValueType::Vector,
            false,
        );
        // The only failure is a clash with a built-in function, which
        // holt_winters is not in any promql-parser that has the hook.
        let _ = register_extra_functions(vec![f]);
    });
}

/// Parses `query`; a parse error, or a function, aggregation or syntax
/// that only Prometheus 3.x has, is `bad_data`.
pub fn parse_query(query: &str) -> Result<Expr, PromError> {
    register_holt_winters();
    super::nesting::check(query)?;
    super::regexes::check(query)?;
    if let Some(err) = syntax_2_42(query) {
        return Err(err);
    }
    let expr = parser::parse(query).map_err(PromError::bad_data)?;
    check_2_42(&expr, query)?;
    Ok(expr)
}

/// Walks the tree for what 2.42's parser would have refused.
fn check_2_42(expr: &Expr, query: &str) -> Result<(), PromError> {
    match expr {
        Expr::Aggregate(a) => {
            let id = a.op.id();
            if id == T_LIMITK || id == T_LIMIT_RATIO {
                let name = if id == T_LIMITK {
                    "limitk"
                } else {
                    "limit_ratio"
                };
                return Err(unknown_function(query, name));
            }
            if let Some(p) = &a.param {
                check_2_42(p, query)?;
            }
            check_2_42(&a.expr, query)
        }
        Expr::Unary(u) => check_2_42(&u.expr, query),
        Expr::Binary(b) => {
            if let Some(m) = &b.modifier
                && (m.fill_values.lhs.is_some() || m.fill_values.rhs.is_some())
            {
                return Err(PromError::bad_data(
                    "parse error: fill modifiers are not supported by Prometheus 2.42",
                ));
            }
            check_2_42(&b.lhs, query)?;
            check_2_42(&b.rhs, query)
        }
        Expr::Paren(p) => check_2_42(&p.expr, query),
        Expr::Subquery(s) => check_2_42(&s.expr, query),
        Expr::VectorSelector(vs) => check_selector(vs),
        Expr::MatrixSelector(ms) => check_selector(&ms.vs),
        Expr::Call(c) => {
            if NOT_IN_2_42.contains(&c.func.name) {
                return Err(unknown_function(query, c.func.name));
            }
            c.args.args.iter().try_for_each(|a| check_2_42(a, query))
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => Ok(()),
        Expr::Extension(_) => Err(PromError::bad_data("parse error: unexpected expression")),
    }
}

fn check_selector(vs: &parser::VectorSelector) -> Result<(), PromError> {
    if !vs.matchers.or_matchers.is_empty() {
        // `{a="1" or b="2"}` is 3.x syntax; 2.42 stops at the `or`.
        return Err(PromError::bad_data(
            "parse error: unexpected identifier \"or\" in label matching, expected \",\" or \"}\"",
        ));
    }
    Ok(())
}

/// 2.42's error for a name it has no function for, at the name's first
/// place in the query as `line:column:`.
fn unknown_function(query: &str, name: &str) -> PromError {
    let pos = find_call(query, name);
    let (line, col) = line_col(query, pos);
    PromError::bad_data(format!(
        "{line}:{col}: parse error: unknown function with name {name:?}"
    ))
}

/// Byte offset of the first `name` that stands as a word followed by `(`.
fn find_call(query: &str, name: &str) -> usize {
    let bytes = query.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
    let mut from = 0;
    while let Some(i) = query[from..].find(name) {
        let start = from + i;
        let end = start + name.len();
        let word_start = start == 0 || !is_ident(bytes[start - 1]);
        let word_end = end == bytes.len() || !is_ident(bytes[end]);
        let paren = query[end..].trim_start().starts_with('(');
        if word_start && word_end && paren {
            return start;
        }
        from = end;
    }
    0
}

/// 1-based line and column of byte `pos`, counted as Prometheus' parser
/// counts them (bytes since the last line break).
fn line_col(query: &str, pos: usize) -> (usize, usize) {
    let before = &query[..pos.min(query.len())];
    let line = before.matches('\n').count() + 1;
    let col = match before.rfind('\n') {
        Some(nl) => pos - nl,
        None => pos + 1,
    };
    (line, col)
}

/// Syntax 3.x accepts and 2.42 refuses, found in the text (the tree does
/// not keep it): a quoted string naming the metric or a label inside
/// braces (`{"my.metric"}`) or in grouping options (`by ("a.b")`), and
/// durations without a unit (`x[5]`, `offset 5`).
fn syntax_2_42(query: &str) -> Option<PromError> {
    let mut in_str: Option<char> = None;
    let mut escaped = false;
    let mut depth = 0usize;
    let mut expect_name = false;
    // Parentheses opened, each marked whether it holds grouping labels.
    let mut parens: Vec<bool> = Vec::new();
    let mut bracket_start: Option<usize> = None;
    let mut last_word = "";
    let mut word_start: Option<usize> = None;
    let at = |pos: usize, msg: String| {
        let (line, col) = line_col(query, pos);
        Some(PromError::bad_data(format!(
            "{line}:{col}: parse error: {msg}"
        )))
    };
    for (i, c) in query.char_indices() {
        if let Some(q) = in_str {
            if escaped {
                escaped = false;
            } else if c == '\\' && q != '`' {
                escaped = true;
            } else if c == q {
                in_str = None;
            }
            continue;
        }
        let ident = c.is_ascii_alphanumeric() || c == '_' || c == ':';
        if ident {
            if word_start.is_none() {
                word_start = Some(i);
            }
            continue;
        }
        if let Some(ws) = word_start.take() {
            last_word = &query[ws..i];
            if last_word == "offset" && depth == 0 {
                let rest = query[i..].trim_start();
                let num_at = query.len() - rest.len();
                let rest = rest.strip_prefix('-').unwrap_or(rest);
                let digits = rest
                    .find(|ch: char| !(ch.is_ascii_digit() || ch == '.'))
                    .unwrap_or(rest.len());
                let unit = rest[digits..].starts_with(|ch: char| ch.is_ascii_alphabetic());
                if digits > 0 && !unit {
                    let end = query.len() - rest.len() + digits;
                    return at(
                        num_at,
                        format!(
                            "unexpected number {:?} in offset, expected duration",
                            &query[num_at..end]
                        ),
                    );
                }
            }
        }
        match c {
            '{' => {
                depth += 1;
                expect_name = true;
            }
            '}' => {
                depth = depth.saturating_sub(1);
                expect_name = false;
            }
            ',' if depth > 0 => expect_name = true,
            '(' => {
                let grouping = matches!(
                    last_word,
                    "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
                ) && query[..i].trim_end().ends_with(last_word);
                parens.push(grouping);
            }
            ')' => {
                parens.pop();
            }
            '[' => bracket_start = Some(i + 1),
            ']' => {
                if let Some(start) = bracket_start.take() {
                    let mut pos = start;
                    for part in query[start..i].split(':') {
                        let trimmed = part.trim();
                        let lead = part.len() - part.trim_start().len();
                        if !trimmed.is_empty()
                            && trimmed.bytes().all(|b| b.is_ascii_digit() || b == b'.')
                        {
                            return at(pos + lead, "missing unit character in duration".into());
                        }
                        pos += part.len() + 1;
                    }
                }
            }
            '"' | '\'' | '`' => {
                let quoted = quoted_prefix(&query[i..]);
                if depth > 0 && expect_name {
                    return at(
                        i,
                        format!(
                            "unexpected string {quoted:?} in label matching, expected identifier or \"}}\""
                        ),
                    );
                }
                if depth == 0 && parens.last() == Some(&true) {
                    return at(
                        i,
                        format!("unexpected string {quoted:?} in grouping opts, expected label"),
                    );
                }
                in_str = Some(c);
                expect_name = false;
            }
            c if c.is_whitespace() => {}
            _ => expect_name = false,
        }
    }
    None
}

/// The quoted string at the start of `s`, quotes included.
fn quoted_prefix(s: &str) -> String {
    let mut chars = s.char_indices();
    let Some((_, q)) = chars.next() else {
        return String::new();
    };
    let mut escaped = false;
    for (i, c) in chars {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == q {
            return s[..=i].to_string();
        }
    }
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holt_winters_parses() {
        assert!(parse_query("holt_winters(x[5m], 0.5, 0.5)").is_ok());
    }

    #[test]
    fn names_only_3x_has_are_unknown() {
        let e = parse_query("sum(info(up))").unwrap_err();
        assert_eq!(
            e.message,
            "1:5: parse error: unknown function with name \"info\""
        );
        let e = parse_query("limitk(2, up)").unwrap_err();
        assert_eq!(
            e.message,
            "1:1: parse error: unknown function with name \"limitk\""
        );
        let e = parse_query("mad_over_time(up[5m])").unwrap_err();
        assert!(e.message.contains("\"mad_over_time\""));
        assert_eq!(e.kind, crate::promql::ErrorKind::BadData);
    }

    #[test]
    fn quoted_names_in_braces_are_refused() {
        let e = parse_query("{\"my.metric\"}").unwrap_err();
        assert_eq!(e.kind, crate::promql::ErrorKind::BadData);
        assert_eq!(
            e.message,
            "1:2: parse error: unexpected string \"\\\"my.metric\\\"\" in label matching, expected identifier or \"}\""
        );
        assert!(parse_query("{__name__=\"my.metric\"}").is_ok());
        assert!(parse_query("x{a=\"{\\\"b\"}").is_ok());
    }

    #[test]
    fn durations_need_a_unit_and_grouping_labels_no_quotes() {
        let msg = |q: &str| parse_query(q).unwrap_err().message;
        assert_eq!(
            msg("x[5]"),
            "1:3: parse error: missing unit character in duration"
        );
        assert_eq!(
            msg("x offset 5"),
            "1:10: parse error: unexpected number \"5\" in offset, expected duration"
        );
        assert_eq!(
            msg("sum by (\"a.b\") (x)"),
            "1:9: parse error: unexpected string \"\\\"a.b\\\"\" in grouping opts, expected label"
        );
        assert!(parse_query("x[5m:1m] offset 1m").is_ok());
        assert!(parse_query("label_replace(x, \"a\", \"$1\", \"b\", \"(.*)\")").is_ok());
        assert!(parse_query("x{offset=\"5\"} offset 5m").is_ok());
    }

    #[test]
    fn parse_errors_are_bad_data() {
        let e = parse_query("sum(").unwrap_err();
        assert_eq!(e.kind, crate::promql::ErrorKind::BadData);
    }
}
