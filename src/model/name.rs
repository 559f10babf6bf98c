//! Which strings may be metric names, tag keys and tag values.

use thiserror::Error;

/// A rejected name, with OpenTSDB's exact message
/// (`Tags.validateString`), which clients match on.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error("{0}")]
pub struct InvalidName(pub String);

/// The characters OpenTSDB accepts beyond `a-z A-Z 0-9 - _ . /` and letters,
/// from `tsd.core.tag.allow_specialchars`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NameRules {
    special: Vec<char>,
}

impl NameRules {
    pub fn with_special_chars(chars: &str) -> NameRules {
        NameRules {
            special: chars.chars().collect(),
        }
    }

    fn allowed(&self, c: char) -> bool {
        c.is_ascii_alphanumeric()
            || matches!(c, '-' | '_' | '.' | '/')
            // Java checks `Character.isLetter` per UTF-16 code unit, so
            // letters outside the Basic Multilingual Plane (surrogate pairs)
            // are rejected there; we keep that to accept exactly the same set.
            || (c.is_alphabetic() && (c as u32) <= 0xFFFF)
            || self.special.contains(&c)
    }

    /// Checks `s` and builds OpenTSDB's message on failure; `what` is the
    /// phrase it uses, e.g. `metric name` or `tag value with key [host]`.
    pub fn validate(&self, what: &str, s: &str) -> Result<(), InvalidName> {
        if s.is_empty() {
            return Err(InvalidName(format!("Invalid {what}: empty string")));
        }
        match s.chars().find(|&c| !self.allowed(c)) {
            None => Ok(()),
            Some(c) => Err(InvalidName(format!(
                "Invalid {what} (\"{s}\"): illegal character: {c}"
            ))),
        }
    }

    pub fn validate_metric(&self, s: &str) -> Result<(), InvalidName> {
        self.validate("metric name", s)
    }

    pub fn validate_tag(&self, key: &str, value: &str) -> Result<(), InvalidName> {
        self.validate(&format!("tag name with value [{value}]"), key)?;
        self.validate(&format!("tag value with key [{key}]"), value)
    }
}

/// Prometheus' metric name rule, `[a-zA-Z_:][a-zA-Z0-9_:]*`: what a
/// remote-written series' `__name__` must be.
pub fn is_prometheus_metric_name(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_' || c == b':')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
}

/// Prometheus' label name rule, `[a-zA-Z_][a-zA-Z0-9_]*` (remote write's
/// label names, PromQL's `label_replace`/`count_values` targets, the
/// API's `label/<name>/values`).
pub fn is_prometheus_label_name(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opentsdb_messages() {
        let r = NameRules::default();
        assert!(r.validate_metric("sys.cpu.0").is_ok());
        assert!(r.validate_metric("a-b_c/d.e").is_ok());
        assert!(r.validate_metric("中国").is_ok());
        assert_eq!(
            r.validate_metric("a b").unwrap_err().0,
            "Invalid metric name (\"a b\"): illegal character:  "
        );
        assert_eq!(
            r.validate_metric("").unwrap_err().0,
            "Invalid metric name: empty string"
        );
        assert_eq!(
            r.validate_tag("ho!st", "web01").unwrap_err().0,
            "Invalid tag name with value [web01] (\"ho!st\"): illegal character: !"
        );
        assert_eq!(
            r.validate_tag("host", "web 01").unwrap_err().0,
            "Invalid tag value with key [host] (\"web 01\"): illegal character:  "
        );
        assert!(r.validate_metric("a\u{0}b").is_err());
        assert!(r.validate_metric("\u{1F600}").is_err());
        let special = NameRules::with_special_chars("!@ ");
        assert!(special.validate_metric("a b!@").is_ok());
    }
}
