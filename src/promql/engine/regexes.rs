//! A budget for the regular expressions of a query's label matchers,
//! checked on its text before it is parsed.
//!
//! promql-parser compiles every `=~` and `!~` matcher while it parses,
//! each up to the `regex` crate's default 10 MiB, and the parsed query
//! holds them all: a few kilobytes of text such as `x{a=~"\\w{100}"}`
//! repeated costs a few MiB of memory and a fraction of a second of CPU
//! per matcher, with no timeout running yet. Go compiles the same
//! expressions far smaller, so Prometheus 2.42 has no such limit; rtsdb
//! gives each query [`QUERY_BUDGET_BYTES`] of compiled expressions and
//! answers `bad_data` past it, before the parser spends anything.
//!
//! Each matcher's expression is compiled here first with a size limit
//! that doubles from [`FIRST_TRY_BYTES`] until it fits, and is charged
//! the limit it fitted in (at most twice its size): the common small
//! expression costs one small compile, and no compile runs past what
//! remains of the budget.

use regex::Error as RegexError;
use regex::RegexBuilder;

use crate::promql::error::PromError;

/// The compiled size all the label-matcher expressions of one query may
/// take together: room for hundreds of dashboard-sized alternations
/// (`host=~"web01|web02|…"`), far below what would hurt the server.
pub(super) const QUERY_BUDGET_BYTES: usize = 32 << 20;

/// The size limit of the first compile of each expression.
const FIRST_TRY_BYTES: usize = 64 << 10;

/// The largest expression promql-parser compiles (the `regex` crate's
/// default limit): a larger one is its error anyway.
const PARSER_LIMIT_BYTES: usize = 10 << 20;

/// `bad_data` when the label matchers' expressions of `query` compile
/// to more than [`QUERY_BUDGET_BYTES`] together.
pub(super) fn check(query: &str) -> Result<(), PromError> {
    check_within(query, QUERY_BUDGET_BYTES)
}

/// `bad_data` when the matchers' expressions of `query` take more than
/// `budget` bytes compiled.
fn check_within(query: &str, budget: usize) -> Result<(), PromError> {
    let mut left = budget;
    for pattern in matcher_patterns(query) {
        let cost = compiled_cost(&pattern, left).ok_or_else(too_large)?;
        left -= cost;
    }
    Ok(())
}

fn too_large() -> PromError {
    PromError::bad_data(format!(
        "parse error: the query's regular expressions are too large: more than {} MiB compiled",
        QUERY_BUDGET_BYTES >> 20
    ))
}

/// What compiling `pattern` as promql-parser does (anchored) charges
/// against a budget of `left` bytes; `None` when it does not fit, or
/// does not fit the parser's own limit (which would refuse it anyway).
fn compiled_cost(pattern: &str, left: usize) -> Option<usize> {
    let anchored = format!("^(?:{pattern})$");
    let cap = left.min(PARSER_LIMIT_BYTES);
    let mut limit = FIRST_TRY_BYTES.min(cap);
    loop {
        match RegexBuilder::new(&anchored).size_limit(limit).build() {
            Ok(_) => return Some(limit),
            Err(RegexError::CompiledTooBig(_)) if limit < cap => {
                limit = limit.saturating_mul(2).min(cap);
            }
            Err(RegexError::CompiledTooBig(_)) => return None,
            // Go takes a brace that starts no repetition as text; the
            // parser compiles such an expression again with those braces
            // escaped, and so is it charged here. An expression that
            // still does not compile is refused by the parser and held
            // by no one.
            Err(_) => {
                let escaped = escape_text_braces(pattern);
                if escaped == pattern {
                    return Some(0);
                }
                return compiled_cost(&escaped, left);
            }
        }
    }
}

/// `pattern` with every `{` that does not start a repetition (`{n}`,
/// `{n,}`, `{n,m}`) escaped, as Go reads such a brace.
fn escape_text_braces(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut chars = pattern.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                out.push(c);
                if let Some((_, next)) = chars.next() {
                    out.push(next);
                }
            }
            '{' if !starts_repetition(&pattern[i + 1..]) => out.push_str("\\{"),
            _ => out.push(c),
        }
    }
    out
}

/// Whether `rest`, the text after a `{`, is a repetition's `n}`, `n,}`
/// or `n,m}`.
fn starts_repetition(rest: &str) -> bool {
    let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
    let n = digits(rest);
    if n == 0 {
        return false;
    }
    let rest = &rest[n..];
    if let Some(after) = rest.strip_prefix(',') {
        after[digits(after)..].starts_with('}')
    } else {
        rest.starts_with('}')
    }
}

/// The expressions of the `=~` and `!~` matchers of `query`, unquoted;
/// a string that does not unquote is left to the parser to refuse.
fn matcher_patterns(query: &str) -> Vec<String> {
    let bytes = query.as_bytes();
    let mut out = Vec::new();
    let mut in_braces = false;
    let mut regex_next = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' | b'\'' | b'`' => {
                let end = super::nesting::skip_string(bytes, i);
                if in_braces
                    && regex_next
                    && let Some(s) = unquote(&query[i..end])
                {
                    out.push(s);
                }
                regex_next = false;
                i = end;
            }
            b'#' if !in_braces => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'{' => {
                in_braces = true;
                i += 1;
            }
            b'}' => {
                in_braces = false;
                regex_next = false;
                i += 1;
            }
            b'=' | b'!' if in_braces && bytes.get(i + 1) == Some(&b'~') => {
                regex_next = true;
                i += 2;
            }
            b' ' | b'\t' | b'\r' | b'\n' => i += 1,
            _ => {
                regex_next = false;
                i += 1;
            }
        }
    }
    out
}

/// The value of a PromQL string literal, quotes included (Go's escapes
/// in `"…"` and `'…'`, none in `` `…` ``); `None` if it is not one.
fn unquote(literal: &str) -> Option<String> {
    let quote = literal.chars().next()?;
    let body = literal.strip_prefix(quote)?.strip_suffix(quote)?;
    if quote == '`' {
        return Some(body.to_string());
    }
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let e = chars.next()?;
        match e {
            'a' => out.push('\u{7}'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'v' => out.push('\u{b}'),
            '\\' | '\'' | '"' => out.push(e),
            'x' => out.push(hex_char(&mut chars, 2)?),
            'u' => out.push(hex_char(&mut chars, 4)?),
            'U' => out.push(hex_char(&mut chars, 8)?),
            '0'..='7' => {
                let mut n = e.to_digit(8)?;
                for _ in 0..2 {
                    n = n * 8 + chars.next()?.to_digit(8)?;
                }
                out.push(char::from_u32(n)?);
            }
            _ => return None,
        }
    }
    Some(out)
}

/// The character of the next `digits` hex digits.
fn hex_char(chars: &mut std::str::Chars<'_>, digits: usize) -> Option<char> {
    let mut n = 0u32;
    for _ in 0..digits {
        n = n.checked_mul(16)? + chars.next()?.to_digit(16)?;
    }
    char::from_u32(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_of_regex_matchers_only() {
        assert_eq!(
            matcher_patterns(r#"x{a=~"a\\w+", b="c", c !~ 'd|e', d=~`\d`} + y{e="=~"}"#),
            vec![r"a\w+", "d|e", r"\d"]
        );
        assert_eq!(
            matcher_patterns(r#"label_replace(x, "a", "$1", "b", "(.*)")"#),
            Vec::<String>::new()
        );
        assert_eq!(unquote(r#""\x41\u00e9\101""#), Some("AéA".to_string()));
        assert_eq!(unquote(r#""\.""#), None);
    }

    #[test]
    fn dashboard_regexes_fit() {
        let hosts: Vec<String> = (0..500).map(|i| format!("web{i:04}")).collect();
        let q = format!(
            r#"sum by (host) (rate(cpu{{host=~"{}", dc!~"eu-.*"}}[5m]))"#,
            hosts.join("|")
        );
        assert!(check(&q).is_ok());
        // Braces Go takes as text, charged as the parser compiles them.
        assert_eq!(
            escape_text_braces(r"/api/{id}/x{2}\{a{1,}b{,3}"),
            r"/api/\{id}/x{2}\{a{1,}b\{,3}"
        );
        assert_eq!(compiled_cost("/api/{id}", 1 << 20), Some(FIRST_TRY_BYTES));
        let q = vec![r#"x{handler=~"/api/{id}"}"#; 20].join(" or ");
        assert!(check(&q).is_ok());
        // An expression that never compiles is the parser's error.
        assert_eq!(compiled_cost("(", 1 << 20), Some(0));
    }

    #[test]
    fn small_expressions_add_up() {
        let q = vec![r#"x{a=~"a|b"}"#; 100].join(" or ");
        assert!(check_within(&q, 100 * FIRST_TRY_BYTES).is_ok());
        let e = check_within(&q, 50 * FIRST_TRY_BYTES).unwrap_err();
        assert_eq!(e.kind, crate::promql::ErrorKind::BadData);
        assert!(
            e.message.contains("regular expressions are too large"),
            "{}",
            e.message
        );
    }

    #[test]
    fn an_expression_past_the_budget_stops_the_compile_at_the_budget() {
        // Between 512 KiB and 1 MiB compiled: charged 1 MiB with room,
        // refused within 512 KiB (with no compile past 512 KiB).
        let big = r"\w{20}";
        assert_eq!(compiled_cost(big, 4 << 20), Some(1 << 20));
        assert_eq!(compiled_cost(big, 512 << 10), None);
        let q = format!("x{{a=~`{big}`}} + x{{b!~`{big}`}}");
        assert!(check_within(&q, 2 << 20).is_ok());
        assert!(check_within(&q, 3 << 19).is_err());
    }
}
