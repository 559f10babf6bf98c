//! A bound on how deeply a query nests, checked on its text before it is
//! parsed.
//!
//! The parser, the checks after it, the evaluator and the tree's drop all
//! recurse once per level of the expression tree, on threads with a
//! fixed stack: a query such as `((((…1…))))` or `1+1+…+1` with a hundred
//! thousand levels, a few hundred kilobytes of text, would overflow that
//! stack and end the process rather than get an error, and promql-parser's
//! type checks walk a chain of binary operators once per operator (time
//! quadratic in its length). Prometheus 2.42 has no such limit (Go grows
//! its stacks); rtsdb refuses a query past [`MAX_DEPTH`] levels with
//! `bad_data`, before the parser sees it.
//!
//! The bound is taken on tokens, not on the tree: every node of the tree
//! above a leaf is a binary or unary operator, a subquery's bracket
//! (counted as an operator on what it follows), or opens a parenthesis
//! (calls, aggregations, parentheses), so the depth of the tree is at
//! most, along the deepest chain of parentheses, one level per
//! parenthesis plus the operators written at each enclosing level. Label matchers (`{…}`), strings and comments hold no node and
//! are skipped.

use crate::promql::error::PromError;

/// The deepest nesting a query may have: far beyond what any dashboard or
/// rule writes (tens of levels), and small enough that a debug build
/// evaluates it within half of a 2 MiB thread stack (256 levels took
/// more than 1 MiB there).
pub(super) const MAX_DEPTH: usize = 128;

/// Words that are binary operators.
const WORD_OPERATORS: &[&str] = &["and", "or", "unless", "atan2"];

/// One open parenthesis or bracket while scanning: the operators written
/// directly inside it, and the deepest bound among the groups it holds.
#[derive(Debug, Default, Clone, Copy)]
struct Level {
    operators: usize,
    deepest_inner: usize,
}

impl Level {
    /// The bound on the depth of what this level holds.
    fn depth(self) -> usize {
        1 + self.operators + self.deepest_inner
    }
}

/// `bad_data` when `query` may nest deeper than [`MAX_DEPTH`].
pub(super) fn check(query: &str) -> Result<(), PromError> {
    let depth = depth_bound(query);
    if depth > MAX_DEPTH {
        return Err(PromError::bad_data(format!(
            "parse error: query nested too deeply: more than {MAX_DEPTH} levels of operators, calls and parentheses"
        )));
    }
    Ok(())
}

/// An upper bound on the depth of `query`'s expression tree, from its
/// tokens (see the module's comment). Stops counting once past
/// [`MAX_DEPTH`]: the answer is then only known to be too deep.
fn depth_bound(query: &str) -> usize {
    let bytes = query.as_bytes();
    let mut levels: Vec<Level> = vec![Level::default()];
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'"' | b'\'' | b'`' => i = skip_string(bytes, i),
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'{' => {
                // Matchers: strings inside may hold any brace.
                i += 1;
                while i < bytes.len() && bytes[i] != b'}' {
                    if matches!(bytes[i], b'"' | b'\'' | b'`') {
                        i = skip_string(bytes, i);
                    } else {
                        i += 1;
                    }
                }
                i += 1;
            }
            b'(' | b'[' => {
                if levels.len() > MAX_DEPTH {
                    return levels.len();
                }
                // A bracket follows what it applies to: a subquery is a
                // node above the expression before it, as a postfix
                // operator would be.
                if b == b'['
                    && let Some(level) = levels.last_mut()
                {
                    level.operators += 1;
                }
                levels.push(Level::default());
                i += 1;
            }
            b')' | b']' => {
                // An unbalanced closer is the parser's error to report.
                if levels.len() > 1
                    && let Some(inner) = levels.pop()
                    && let Some(outer) = levels.last_mut()
                {
                    outer.deepest_inner = outer.deepest_inner.max(inner.depth());
                }
                i += 1;
            }
            b'+' | b'-' | b'*' | b'/' | b'%' | b'^' | b'=' | b'!' | b'<' | b'>' => {
                if let Some(level) = levels.last_mut() {
                    level.operators += 1;
                }
                // `==`, `!=`, `<=`, `>=` are one operator.
                i += if bytes.get(i + 1) == Some(&b'=') {
                    2
                } else {
                    1
                };
            }
            _ if is_word_byte(b) => {
                let start = i;
                while i < bytes.len() && is_word_byte(bytes[i]) {
                    i += 1;
                }
                let word = &query[start..i];
                if WORD_OPERATORS.iter().any(|w| w.eq_ignore_ascii_case(word))
                    && let Some(level) = levels.last_mut()
                {
                    level.operators += 1;
                }
            }
            _ => i += 1,
        }
        if levels.iter().map(|l| l.operators + 1).sum::<usize>() > MAX_DEPTH + 1 {
            return MAX_DEPTH + 1;
        }
    }
    // Groups left open (a parse error to come) still count.
    while levels.len() > 1 {
        if let Some(inner) = levels.pop()
            && let Some(outer) = levels.last_mut()
        {
            outer.deepest_inner = outer.deepest_inner.max(inner.depth());
        }
    }
    levels.first().map_or(0, |l| l.depth())
}

/// Bytes of identifiers, keywords, numbers and durations.
fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b':' || b == b'.'
}

/// The index after the string starting at `start` (its quote), or the
/// end of the text for an unterminated one. Backquoted strings have no
/// escapes. (The regexp budget finds its matchers' strings with it too.)
pub(super) fn skip_string(bytes: &[u8], start: usize) -> usize {
    let quote = bytes[start];
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if quote != b'`' => i += 2,
            b if b == quote => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_follow_the_tree() {
        assert_eq!(depth_bound("up"), 1);
        assert_eq!(depth_bound("-up"), 2);
        assert_eq!(depth_bound("a + b"), 2);
        // A chain is as deep as it is long: it nests to the left.
        assert_eq!(depth_bound("a + b - c * d"), 4);
        assert_eq!(depth_bound("sum(rate(x[5m]))"), 5);
        assert_eq!(depth_bound("max_over_time((x)[5m:1m])"), 4);
        // Siblings do not add up: the deeper one counts.
        assert_eq!(depth_bound("sum(rate(x[5m])) / sum(y)"), 6);
        assert_eq!(depth_bound("a == b"), 2);
        assert_eq!(depth_bound("a and b OR c"), 3);
    }

    #[test]
    fn matchers_strings_and_comments_hold_no_nodes() {
        assert_eq!(depth_bound(r#"x{a="((((", b!~"+-*/", c=~'[(]'}"#), 1);
        assert_eq!(depth_bound(r#"label_replace(x, "a", "((", "b", `\`)"#), 2);
        assert_eq!(depth_bound("x # ((((((((\n"), 1);
        // Words that merely hold an operator's name are not operators.
        assert_eq!(depth_bound("order + android"), 2);
    }

    #[test]
    fn deep_queries_are_refused_before_parsing() {
        let deep = format!("{}1{}", "(".repeat(100_000), ")".repeat(100_000));
        let e = check(&deep).unwrap_err();
        assert_eq!(e.kind, crate::promql::ErrorKind::BadData);
        assert!(e.message.contains("nested too deeply"), "{}", e.message);
        let chain = |n: usize| format!("{}1", "1+".repeat(n));
        assert!(check(&chain(MAX_DEPTH)).is_err());
        assert!(check(&chain(MAX_DEPTH - 1)).is_ok());
        assert!(check(&format!("{}1", "-".repeat(100_000))).is_err());
        // Unbalanced text keeps its parser error.
        assert!(check(&")".repeat(10_000)).is_ok());
        assert!(check(&"(".repeat(MAX_DEPTH - 1)).is_ok());
    }

    /// Half the stack of the threads that run queries (tokio's blocking
    /// pool and its workers have 2 MiB): the bound keeps a margin of two.
    const HALF_A_QUERY_THREAD_STACK: usize = 1 << 20;

    /// The deepest query of each shape the check lets through parses,
    /// evaluates (instant and range), pretty-prints and is dropped on
    /// half a query thread's stack.
    #[test]
    fn the_deepest_accepted_queries_fit_half_a_query_threads_stack() {
        let n = MAX_DEPTH - 2;
        let shapes = [
            format!("{}x{}", "(".repeat(n), ")".repeat(n)),
            format!("x{}", " + x".repeat(n)),
            format!("{}x", "-".repeat(n)),
            format!("{}x{}", "abs(".repeat(n), ")".repeat(n)),
            format!("{}x{}", "sum(".repeat(n), ")".repeat(n)),
            format!("{}x{}", "sum by (a) (".repeat(n / 2), ")".repeat(n / 2)),
            format!(
                "{}x{}",
                "x * on (a) group_left (b) (".repeat(n / 3),
                ")".repeat(n / 3)
            ),
            format!(
                "{}x{}",
                "max_over_time((".repeat(n / 3),
                ")[1m:30s])".repeat(n / 3)
            ),
        ];
        for q in shapes {
            assert!(depth_bound(&q) <= MAX_DEPTH, "{q}");
            let run = std::thread::Builder::new()
                .stack_size(HALF_A_QUERY_THREAD_STACK)
                .spawn(move || {
                    let mut s = crate::promql::memory::MemoryStorage::new();
                    s.add_series(&[("__name__", "x"), ("a", "1")], &[(0, 1.0), (60_000, 2.0)]);
                    let engine = crate::promql::Engine::default();
                    let expr = super::super::parse_query(&q).map_err(|e| e.to_string())?;
                    let printed = expr.prettify();
                    drop(expr);
                    engine.instant(&s, &q, 60_000).map_err(|e| e.to_string())?;
                    engine
                        .range(&s, &q, 0, 120_000, 30_000)
                        .map_err(|e| e.to_string())?;
                    Ok::<usize, String>(printed.len())
                })
                .expect("a thread");
            let printed = run.join().expect("no stack overflow, no panic");
            assert!(printed.as_ref().is_ok_and(|len| *len > 0), "{printed:?}");
        }
    }
}
