//! Go's regular expressions (RE2 syntax, as Prometheus 2.42 compiles them
//! with `grafana/regexp`) on Rust's `regex` crate, which reads the same
//! syntax with three differences this file removes:
//!
//! - Go's `\d`, `\w`, `\s` (and `\D`, `\W`, `\S`) are ASCII classes;
//!   Rust's are Unicode. They are rewritten to the ASCII sets.
//! - Go's `\b`/`\B` are ASCII word boundaries: rewritten `(?-u:\b)`.
//! - Go reads `\Q…\E` as literal text: rewritten escaped.
//! - Rust reads `&&` and `~~` inside a class as set operations, Go as
//!   characters: escaped.
//!
//! Compiled programs are limited in size, so a "regexp of death" is
//! refused with an error rather than eating memory.

use regex::{Regex, RegexBuilder};

/// The most memory one compiled expression may take (the `regex`
/// crate's own default, stated here so it is a decision).
const SIZE_LIMIT_BYTES: usize = 10 << 20;

/// Compiles `pattern` anchored at both ends, as Prometheus anchors the
/// regular expressions of `label_replace` and of `=~`/`!~` matchers:
/// `^(?:pattern)$`.
pub fn compile_anchored(pattern: &str) -> Result<Regex, regex::Error> {
    RegexBuilder::new(&format!("^(?:{})$", translate(pattern)))
        .size_limit(SIZE_LIMIT_BYTES)
        .dfa_size_limit(SIZE_LIMIT_BYTES)
        .build()
}

/// `pattern` with Go's meanings of the Perl classes, word boundaries and
/// quoted text spelled so that Rust's `regex` reads them the same.
fn translate(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars().peekable();
    let mut in_class = false;
    // Whether the class just opened (a `]` there is a literal).
    let mut class_start = false;
    while let Some(c) = chars.next() {
        let at_class_start = std::mem::take(&mut class_start);
        match c {
            '\\' => {
                let Some(e) = chars.next() else {
                    // A trailing backslash: left for the compiler to refuse.
                    out.push('\\');
                    break;
                };
                match e {
                    'd' => out.push_str("[0-9]"),
                    'D' => out.push_str("[^0-9]"),
                    'w' => out.push_str("[0-9A-Za-z_]"),
                    'W' => out.push_str("[^0-9A-Za-z_]"),
                    's' => out.push_str(r"[\t\n\f\r ]"),
                    'S' => out.push_str(r"[^\t\n\f\r ]"),
                    'b' if !in_class => out.push_str(r"(?-u:\b)"),
                    'B' if !in_class => out.push_str(r"(?-u:\B)"),
                    'Q' if !in_class => {
                        let mut literal = String::new();
                        while let Some(q) = chars.next() {
                            if q == '\\' && chars.peek() == Some(&'E') {
                                chars.next();
                                break;
                            }
                            literal.push(q);
                        }
                        out.push_str(&regex::escape(&literal));
                    }
                    _ => {
                        out.push('\\');
                        out.push(e);
                    }
                }
            }
            '[' if !in_class => {
                in_class = true;
                out.push('[');
                if chars.peek() == Some(&'^') {
                    chars.next();
                    out.push('^');
                }
                class_start = true;
            }
            '[' if chars.peek() == Some(&':') => {
                // A named ASCII class inside a class, `[:alpha:]`: copied
                // whole so its `]` does not close the outer class.
                out.push('[');
                while let Some(n) = chars.next() {
                    out.push(n);
                    if n == ':' && chars.peek() == Some(&']') {
                        out.push(']');
                        chars.next();
                        break;
                    }
                }
            }
            ']' if in_class && !at_class_start => {
                in_class = false;
                out.push(']');
            }
            '[' => out.push_str(r"\["),
            // Rust reads `&&`, `~~` (and `--`) in a class as set
            // operations; in Go they are the characters themselves.
            '&' | '~' if in_class => {
                out.push('\\');
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchored_at_both_ends() {
        let re = compile_anchored("a|b").unwrap();
        assert!(re.is_match("a"));
        assert!(!re.is_match("ab"));
        assert!(!re.is_match("xa"));
    }

    #[test]
    fn perl_classes_are_ascii_as_in_go() {
        let digits = compile_anchored(r"\d+").unwrap();
        assert!(digits.is_match("123"));
        // Arabic-Indic digits are \d in Rust's Unicode mode, not in Go.
        assert!(!digits.is_match("١٢٣"));
        assert!(compile_anchored(r"[\d\s]+").unwrap().is_match("1 2\t3"));
        assert!(!compile_anchored(r"\w+").unwrap().is_match("é"));
        assert!(compile_anchored(r"\W").unwrap().is_match("é"));
        // \v is not in Go's \s.
        assert!(!compile_anchored(r"\s").unwrap().is_match("\u{b}"));
        assert!(compile_anchored(r"[^\d]").unwrap().is_match("x"));
    }

    #[test]
    fn word_boundaries_and_quoted_text() {
        let re = compile_anchored(r".*\bfoo\b.*").unwrap();
        assert!(re.is_match("a foo b"));
        assert!(!re.is_match("afoo"));
        let q = compile_anchored(r"\Qa.b*\E+").unwrap();
        assert!(!q.is_match("a.b*a.b*"));
        assert!(q.is_match("a.b**"));
        assert!(!q.is_match("axbb"));
    }

    #[test]
    fn brackets_inside_classes() {
        assert!(compile_anchored(r"[]a]+").unwrap().is_match("]a"));
        assert!(compile_anchored(r"[[:digit:]x]+").unwrap().is_match("1x2"));
        assert!(compile_anchored(r"[a[]+").unwrap().is_match("a[["));
        assert!(compile_anchored(r"[a&&b]+").unwrap().is_match("a&b"));
    }

    #[test]
    fn bad_patterns_are_errors() {
        assert!(compile_anchored("(").is_err());
        assert!(compile_anchored(r"a\").is_err());
        // Too big to compile within the limit.
        assert!(compile_anchored("((a{100}){100}){100}").is_err());
    }
}
