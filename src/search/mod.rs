//! Search without a plugin: OpenTSDB answers `/api/search/tsmeta`,
//! `tsmeta_summary`, `tsuids`, `uidmeta` and `annotation` only through an
//! Elasticsearch plugin; rtsdb answers them from its own series index, UID
//! table, meta and annotations (the documents are gathered by
//! `Db::search`, `src/db/search.rs`).
//!
//! # The query language
//!
//! A Lucene-style query string, as OpenTSDB's search documentation writes
//! them, covering:
//! - terms separated by spaces, all of which must match (implicit `AND`);
//!   `AND` and `OR` between terms (`OR` binds looser than `AND`; no
//!   parentheses);
//! - `field:value`, matched against that field only; a bare term against
//!   every field of the document;
//! - `*` (any run of characters) and `?` (one character) in values; a
//!   term without them matches a whole value or one of its parts split at
//!   `.`, `-`, `_`, `/`, `:` or space;
//! - `"quoted values"` for spaces; `*` alone (or an empty query) matches
//!   everything.
//!
//! Matching ignores case. The fields of each type are listed with
//! [`Document`]s' builders in `src/db/search.rs`: `metric`, tag keys as
//! fields (`host:web01`), `tsuid`, `description`, `notes`, `displayName`,
//! `units`, `dataType` for series; `name`, `type`, `uid`, `description`,
//! `notes`, `displayName` for UIDs; `description`, `notes`, `tsuid` and
//! custom keys for annotations.

use thiserror::Error;

/// The search types of `SearchQuery.SearchType` that rtsdb answers itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchType {
    TsMeta,
    TsMetaSummary,
    Tsuids,
    UidMeta,
    Annotation,
}

impl SearchType {
    /// `SearchQuery.parseSearchType`'s names (lookup is answered apart).
    pub fn parse(s: &str) -> Option<SearchType> {
        Some(match s.to_ascii_lowercase().as_str() {
            "tsmeta" => SearchType::TsMeta,
            "tsmeta_summary" => SearchType::TsMetaSummary,
            "tsuids" => SearchType::Tsuids,
            "uidmeta" => SearchType::UidMeta,
            "annotation" => SearchType::Annotation,
            _ => return None,
        })
    }

    /// The name `SearchQuery` serialises (`"type":"TSMETA"`).
    pub fn name(self) -> &'static str {
        match self {
            SearchType::TsMeta => "TSMETA",
            SearchType::TsMetaSummary => "TSMETA_SUMMARY",
            SearchType::Tsuids => "TSUIDS",
            SearchType::UidMeta => "UIDMETA",
            SearchType::Annotation => "ANNOTATION",
        }
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
#[error("{0}")]
pub struct QueryError(pub String);

/// One searchable object: its fields as (name, value) pairs.
#[derive(Debug, Clone, Default)]
pub struct Document {
    fields: Vec<(String, String)>,
}

impl Document {
    pub fn new() -> Document {
        Document::default()
    }

    /// Adds a field (empty values are left out: they match nothing).
    pub fn field(mut self, name: &str, value: &str) -> Document {
        if !value.is_empty() {
            self.fields
                .push((name.to_ascii_lowercase(), value.to_string()));
        }
        self
    }
}

/// A term: an optional field and a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Term {
    field: Option<String>,
    pattern: String,
}

/// A parsed query: OR of ANDs of terms (empty: everything).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchExpr {
    any_of: Vec<Vec<Term>>,
}

impl SearchExpr {
    pub fn parse(query: &str) -> Result<SearchExpr, QueryError> {
        let mut any_of = vec![Vec::new()];
        let mut expect_term = false;
        for token in tokenize(query)? {
            match token.as_str() {
                "OR" | "||" => {
                    if any_of.last().is_some_and(Vec::is_empty) {
                        return Err(QueryError(format!("'{token}' without a term before it")));
                    }
                    any_of.push(Vec::new());
                    expect_term = true;
                }
                "AND" | "&&" => {
                    if any_of.last().is_some_and(Vec::is_empty) {
                        return Err(QueryError(format!("'{token}' without a term before it")));
                    }
                    expect_term = true;
                }
                _ => {
                    let term = parse_term(&token)?;
                    if let Some(t) = term {
                        any_of.last_mut().expect("one group").push(t);
                    }
                    expect_term = false;
                }
            }
        }
        if expect_term {
            return Err(QueryError("the query ends with an operator".into()));
        }
        any_of.retain(|g| !g.is_empty());
        Ok(SearchExpr { any_of })
    }

    pub fn matches(&self, doc: &Document) -> bool {
        self.any_of.is_empty()
            || self
                .any_of
                .iter()
                .any(|all| all.iter().all(|t| term_matches(t, doc)))
    }
}

/// Splits at spaces, keeping `"quoted runs"` (also after `field:`) whole.
fn tokenize(q: &str) -> Result<Vec<String>, QueryError> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in q.chars() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if quoted {
        return Err(QueryError("unbalanced quotes".into()));
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    Ok(out)
}

/// `field:value` or a bare value; `None` for a term that matches
/// everything (`*`, `*:*`).
fn parse_term(token: &str) -> Result<Option<Term>, QueryError> {
    if token == "*:*" {
        return Ok(None);
    }
    let (field, pattern) = match token.split_once(':') {
        // A leading colon or a value with colons of its own (a time) is a
        // bare term.
        Some((f, v)) if !f.is_empty() && !f.contains('*') => (Some(f.to_ascii_lowercase()), v),
        _ => (None, token),
    };
    if pattern.is_empty() {
        return Err(QueryError(format!("no value in '{token}'")));
    }
    if pattern == "*" && field.is_none() {
        return Ok(None);
    }
    Ok(Some(Term {
        field,
        pattern: pattern.to_lowercase(),
    }))
}

fn term_matches(t: &Term, doc: &Document) -> bool {
    doc.fields
        .iter()
        .filter(|(name, _)| t.field.as_ref().is_none_or(|f| f == name))
        .any(|(_, value)| value_matches(&t.pattern, value))
}

fn value_matches(pattern: &str, value: &str) -> bool {
    let value = value.to_lowercase();
    if pattern.contains(['*', '?']) {
        return wildcard(pattern.as_bytes(), value.as_bytes());
    }
    value == pattern
        || value
            .split(['.', '-', '_', '/', ':', ' '])
            .any(|part| part == pattern)
}

/// `*` and `?` glob matching, iteratively with one backtrack point.
fn wildcard(p: &[u8], v: &[u8]) -> bool {
    let (mut pi, mut vi) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while vi < v.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == v[vi]) {
            pi += 1;
            vi += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, vi));
            pi += 1;
        } else if let Some((sp, sv)) = star {
            pi = sp + 1;
            vi = sv + 1;
            star = Some((sp, sv + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> Document {
        Document::new()
            .field("metric", "sys.cpu.user")
            .field("host", "web01")
            .field("dc", "lga")
            .field("description", "User CPU time")
    }

    fn m(q: &str) -> bool {
        SearchExpr::parse(q).unwrap().matches(&doc())
    }

    #[test]
    fn terms_fields_wildcards_and_operators() {
        assert!(m(""));
        assert!(m("*"));
        assert!(m("*:*"));
        assert!(m("sys.cpu.user"));
        assert!(m("cpu"));
        assert!(m("CPU"));
        assert!(!m("cp"));
        assert!(m("sys.cpu.*"));
        assert!(m("metric:sys.*"));
        assert!(!m("host:sys.*"));
        assert!(m("host:web01"));
        assert!(m("host:web0?"));
        assert!(m("host:web01 dc:lga"));
        assert!(m("host:web01 AND dc:lga"));
        assert!(!m("host:web02 AND dc:lga"));
        assert!(m("host:web02 OR dc:lga"));
        assert!(!m("host:web02 OR dc:sjc"));
        assert!(m("description:\"user cpu time\""));
        assert!(m("description:time"));
        assert!(!m("nope"));
        assert!(SearchExpr::parse("a AND").is_err());
        assert!(SearchExpr::parse("OR a").is_err());
        assert!(SearchExpr::parse("\"open").is_err());
        assert!(SearchExpr::parse("host:").is_err());
    }

    #[test]
    fn wildcards() {
        assert!(wildcard(b"*", b""));
        assert!(wildcard(b"a*c", b"abbbc"));
        assert!(wildcard(b"*c", b"abc"));
        assert!(!wildcard(b"a?c", b"ac"));
        assert!(wildcard(b"a*b*c", b"axxbyyc"));
        assert!(!wildcard(b"a*b*c", b"axxbyy"));
    }
}
