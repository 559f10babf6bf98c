//! Tag value filters (`TagVFilter` and its 2.4.1 registry), legacy
//! `k=v` tag conversion, and the `metric{group-by}{filters}` grammar.

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::downsample::java_split;
use crate::protocol::jackson;

/// The seven filter types OpenTSDB 2.4.1 registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FilterType {
    LiteralOr,
    ILiteralOr,
    NotLiteralOr,
    NotILiteralOr,
    Wildcard,
    IWildcard,
    Regexp,
}

impl FilterType {
    pub const ALL: [FilterType; 7] = [
        FilterType::LiteralOr,
        FilterType::ILiteralOr,
        FilterType::NotLiteralOr,
        FilterType::NotILiteralOr,
        FilterType::Wildcard,
        FilterType::IWildcard,
        FilterType::Regexp,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FilterType::LiteralOr => "literal_or",
            FilterType::ILiteralOr => "iliteral_or",
            FilterType::NotLiteralOr => "not_literal_or",
            FilterType::NotILiteralOr => "not_iliteral_or",
            FilterType::Wildcard => "wildcard",
            FilterType::IWildcard => "iwildcard",
            FilterType::Regexp => "regexp",
        }
    }

    pub fn parse(s: &str) -> Option<FilterType> {
        FilterType::ALL.into_iter().find(|t| t.name() == s)
    }

    /// `description()` of the filter class, as `/api/config/filters`
    /// prints it (OpenTSDB's spelling kept, "seperated" included).
    pub fn description(self) -> &'static str {
        match self {
            FilterType::LiteralOr => {
                "Accepts one or more exact values and matches if the series contains any of them. Multiple values can be included and must be separated by the | (pipe) character. The filter is case sensitive and will not allow characters that TSDB does not allow at write time."
            }
            FilterType::ILiteralOr => {
                "Accepts one or more exact values and matches if the series contains any of them. Multiple values can be included and must be seperated by the | (pipe) character. The filter is case insensitive and will not allow characters that TSDB does not allow at write time."
            }
            FilterType::NotLiteralOr => {
                "Accepts one or more exact values and matches if the series does NOT contain any of them. Multiple values can be included and must be separated by the | (pipe) character. The filter is case sensitive and will not allow characters that TSDB does not allow at write time."
            }
            FilterType::NotILiteralOr => {
                "Accepts one or more exact values and matches if the series does NOT contain any of them. Multiple values can be included and must be seperated by the | (pipe) character. The filter is case insensitive and will not allow characters that TSDB does not allow at write time."
            }
            FilterType::Wildcard => {
                "Performs pre, post and in-fix glob matching of values. The globs are case sensitive and multiple wildcards can be used. The wildcard character is the * (asterisk). At least one wildcard must be present in the filter value. A wildcard by itself can be used as well to match on any value for the tag key."
            }
            FilterType::IWildcard => {
                "Performs pre, post and in-fix glob matching of values. The globs are case insensitive and multiple wildcards can be used. The wildcard character is the * (asterisk). Case insensitivity is achieved by dropping all values to lower case. At least one wildcard must be present in the filter value. A wildcard by itself can be used as well to match on any value for the tag key."
            }
            FilterType::Regexp => {
                "Provides full, POSIX compliant regular expression using the built in Java Pattern class. Note that an expression containing curly braces {} will not parse properly in URLs. If the pattern is not a valid regular expression then an exception will be raised."
            }
        }
    }

    /// `examples()` of the filter class.
    pub fn examples(self) -> String {
        let n = self.name();
        match self {
            FilterType::Wildcard | FilterType::IWildcard => format!(
                "host={n}(web*),  host={n}(web*.tsdb.net)  {{\"type\":\"{n}\",\"tagk\":\"host\",\"filter\":\"web*.tsdb.net\",\"groupBy\":false}}"
            ),
            FilterType::Regexp => "host=regexp(.*)  {\"type\":\"regexp\",\"tagk\":\"host\",\"filter\":\".*\",\"groupBy\":false}".to_string(),
            _ => format!(
                "host={n}(web01),  host={n}(web01|web02|web03)  {{\"type\":\"{n}\",\"tagk\":\"host\",\"filter\":\"web01|web02|web03\",\"groupBy\":false}}"
            ),
        }
    }

    fn case_insensitive(self) -> bool {
        matches!(
            self,
            FilterType::ILiteralOr | FilterType::NotILiteralOr | FilterType::IWildcard
        )
    }
}

/// `/api/config/filters`: `{"<type>":{"description":..,"examples":..}}`
/// for every registered filter (sorted by name).
pub(crate) fn filters_json() -> serde_json::Value {
    let map: serde_json::Map<String, serde_json::Value> = FilterType::ALL
        .into_iter()
        .map(|t| {
            (
                t.name().to_string(),
                serde_json::json!({"description": t.description(), "examples": t.examples()}),
            )
        })
        .collect();
    serde_json::Value::Object(map)
}

/// A filter as a client writes it in JSON (`filters` of a sub-query).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FilterSpec {
    #[serde(rename = "type", deserialize_with = "jackson::string")]
    pub kind: String,
    #[serde(deserialize_with = "jackson::string")]
    pub tagk: String,
    #[serde(deserialize_with = "jackson::string")]
    pub filter: String,
    #[serde(
        rename = "groupBy",
        alias = "group_by",
        default,
        deserialize_with = "jackson::boolean"
    )]
    pub group_by: bool,
}

#[derive(Debug, Clone)]
enum Matcher {
    Literals(Vec<String>),
    /// `*` alone: any value (the key must exist).
    Any,
    Wildcard {
        components: Vec<String>,
        /// Pattern ends with `*`: the value must start with the first part.
        prefix: bool,
        /// Pattern starts with `*`: the value must end with the last part.
        postfix: bool,
    },
    Regex(Regex),
}

/// A compiled filter on one tag key.
#[derive(Debug, Clone)]
pub struct TagFilter {
    pub kind: FilterType,
    pub tagk: String,
    pub filter: String,
    pub group_by: bool,
    matcher: Matcher,
}

impl PartialEq for TagFilter {
    fn eq(&self, o: &TagFilter) -> bool {
        self.kind == o.kind && self.tagk == o.tagk && self.filter == o.filter
    }
}

impl TagFilter {
    /// Builds a filter of a registered type, with OpenTSDB's messages.
    pub fn new(kind: &str, tagk: &str, filter: &str, group_by: bool) -> Result<TagFilter, String> {
        let kind = FilterType::parse(kind)
            .ok_or_else(|| format!("Could not find a tag value filter of the type: {kind}"))?;
        TagFilter::of(kind, tagk, filter, group_by)
    }

    pub fn of(
        kind: FilterType,
        tagk: &str,
        filter: &str,
        group_by: bool,
    ) -> Result<TagFilter, String> {
        if tagk.is_empty() {
            return Err("Tagk cannot be null or empty".into());
        }
        if filter.is_empty() {
            return Err("Filter cannot be null or empty".into());
        }
        let ci = kind.case_insensitive();
        let matcher = match kind {
            FilterType::LiteralOr
            | FilterType::ILiteralOr
            | FilterType::NotLiteralOr
            | FilterType::NotILiteralOr => {
                if filter == "|" {
                    return Err("Filter must contain more than just a pipe".into());
                }
                let lits = java_split(filter, '|')
                    .into_iter()
                    .map(|s| if ci { s.to_lowercase() } else { s.to_string() })
                    .collect();
                Matcher::Literals(lits)
            }
            FilterType::Wildcard | FilterType::IWildcard => {
                let actual = if ci {
                    filter.to_lowercase()
                } else {
                    filter.to_string()
                };
                if !actual.contains('*') {
                    return Err(format!(
                        "Filter must contain an asterisk for {}: {filter}",
                        kind.name()
                    ));
                }
                let components: Vec<String> = actual
                    .split('*')
                    .filter(|c| !c.is_empty())
                    .map(String::from)
                    .collect();
                if components.is_empty() {
                    Matcher::Any
                } else {
                    Matcher::Wildcard {
                        prefix: actual.ends_with('*'),
                        postfix: actual.starts_with('*'),
                        components,
                    }
                }
            }
            FilterType::Regexp => Matcher::Regex(Regex::new(filter).map_err(|e| e.to_string())?),
        };
        Ok(TagFilter {
            kind,
            tagk: tagk.to_string(),
            filter: filter.to_string(),
            group_by,
            matcher,
        })
    }

    pub fn from_spec(spec: &FilterSpec) -> Result<TagFilter, String> {
        TagFilter::new(&spec.kind, &spec.tagk, &spec.filter, spec.group_by)
    }

    pub fn to_spec(&self) -> FilterSpec {
        FilterSpec {
            kind: self.kind.name().to_string(),
            tagk: self.tagk.clone(),
            filter: self.filter.clone(),
            group_by: self.group_by,
        }
    }

    /// A legacy `tagk=value` (`TagVFilter.getFilter` + `mapToFilters`):
    /// `*` → `wildcard(*)`, `type(expr)` → that filter, a value containing
    /// `*` → case-insensitive `iwildcard`, anything else → `literal_or`.
    pub fn from_legacy(tagk: &str, value: &str, group_by: bool) -> Result<TagFilter, String> {
        if tagk.is_empty() {
            return Err("Tagk cannot be null or empty".into());
        }
        if value.is_empty() {
            return Err("Filter cannot be null or empty".into());
        }
        if value == "*" {
            return TagFilter::of(FilterType::Wildcard, tagk, "*", group_by);
        }
        if let Some(paren) = value.find('(') {
            let kind = value[..paren].to_lowercase();
            let close = value
                .rfind(')')
                .filter(|&c| c > paren)
                .ok_or_else(|| format!("Filter must end with a ')': {value}"))?;
            return TagFilter::new(&kind, tagk, &value[paren + 1..close], group_by);
        }
        if value.contains('*') {
            return TagFilter::of(FilterType::IWildcard, tagk, value, group_by);
        }
        TagFilter::of(FilterType::LiteralOr, tagk, value, group_by)
    }

    /// Whether a series passes, given its value for this filter's key
    /// (`None` if the series lacks the key: only the `not_*` types pass).
    pub fn matches(&self, value: Option<&str>) -> bool {
        let Some(v) = value else {
            return !self.is_positive();
        };
        let lowered;
        let v = if self.kind.case_insensitive() {
            lowered = v.to_lowercase();
            lowered.as_str()
        } else {
            v
        };
        match &self.matcher {
            Matcher::Literals(l) => l.iter().any(|x| x == v) == self.is_positive(),
            Matcher::Any => true,
            Matcher::Wildcard {
                components,
                prefix,
                postfix,
            } => {
                if *postfix && !*prefix && !v.ends_with(components[components.len() - 1].as_str()) {
                    return false;
                }
                if *prefix && !*postfix && !v.starts_with(components[0].as_str()) {
                    return false;
                }
                // OpenTSDB's quirk: advance by the component's length, not
                // past where it was found.
                let mut idx = 0;
                for c in components {
                    match v.get(idx..).and_then(|rest| rest.find(c.as_str())) {
                        Some(_) => idx += c.len(),
                        None => return false,
                    }
                }
                true
            }
            Matcher::Regex(re) => re.is_match(v),
        }
    }

    /// The literal values of a `literal_or` (for index lookups).
    pub fn literals(&self) -> Option<&[String]> {
        match (&self.matcher, self.kind) {
            (Matcher::Literals(l), FilterType::LiteralOr) => Some(l),
            _ => None,
        }
    }

    /// Does this filter select series by positive match (so the index can
    /// narrow on it)? The `not_*` types also pass series lacking the key.
    pub fn is_positive(&self) -> bool {
        !matches!(
            self.kind,
            FilterType::NotLiteralOr | FilterType::NotILiteralOr
        )
    }
}

/// Adds `filter` as `mapToFilters` does: a group-by filter equal to an
/// existing one marks that one group-by instead of being added twice.
fn add_filter(filters: &mut Vec<TagFilter>, filter: TagFilter) {
    if filter.group_by
        && let Some(existing) = filters.iter_mut().find(|f| **f == filter)
    {
        existing.group_by = true;
        return;
    }
    filters.push(filter);
}

/// Converts a legacy `tags` map (group-by) into filters.
pub(crate) fn tags_to_filters<'a>(
    tags: impl IntoIterator<Item = (&'a String, &'a String)>,
    filters: &mut Vec<TagFilter>,
) -> Result<(), String> {
    for (k, v) in tags {
        add_filter(filters, TagFilter::from_legacy(k, v, true)?);
    }
    Ok(())
}

/// `Tags.parse`: one `k=v`.
fn parse_tag(tag: &str) -> Result<(&str, &str), String> {
    let kv: Vec<&str> = tag.split('=').collect();
    if kv.len() != 2 || kv[0].is_empty() || kv[1].is_empty() {
        return Err(format!("invalid tag: {tag}"));
    }
    Ok((kv[0], kv[1]))
}

/// `Tags.parseWithMetricAndFilters`: `metric{gk=gv,...}{fk=fv,...}` →
/// the metric name and its filters (first braces group-by, second not).
pub(crate) fn parse_metric_with_filters(m: &str) -> Result<(String, Vec<TagFilter>), String> {
    let mut filters = Vec::new();
    let Some(curly) = m.find('{') else {
        return Ok((m.to_string(), filters));
    };
    if !m.ends_with('}') {
        return Err(format!("Missing '}}' at the end of: {m}"));
    }
    let len = m.len();
    if curly == len - 2 {
        return Ok((m[..curly].to_string(), filters));
    }
    let close = m.find('}').unwrap_or(len - 1);
    // A '}' before the first '{' (`a}{b=c}`): OpenTSDB's substring throws
    // (a 500); answer with a client error instead.
    if close < curly {
        return Err(format!("Unbalanced braces in: {m}"));
    }
    if close != len - 1 {
        let bracket = m.rfind('{').unwrap_or(close);
        for f in m[bracket + 1..len - 1].split(',') {
            if f.is_empty() {
                break;
            }
            let (k, v) = parse_tag(f).map_err(|e| format!("When parsing filter '{f}': {e}"))?;
            let filter = TagFilter::from_legacy(k, v, false)
                .map_err(|e| format!("When parsing filter '{f}': {e}"))?;
            filters.push(filter);
        }
    }
    for tag in m[curly + 1..close].split(',') {
        if tag.is_empty() && close != len - 1 {
            break;
        }
        let (k, v) = parse_tag(tag).map_err(|e| format!("When parsing tag '{tag}': {e}"))?;
        let filter = TagFilter::from_legacy(k, v, true)
            .map_err(|e| format!("When parsing tag '{tag}': {e}"))?;
        add_filter(&mut filters, filter);
    }
    Ok((m[..curly].to_string(), filters))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(kind: &str, filter: &str) -> TagFilter {
        TagFilter::new(kind, "host", filter, false).unwrap()
    }

    #[test]
    fn literal_filters() {
        let lit = f("literal_or", "web01|web02");
        assert!(lit.matches(Some("web01")) && !lit.matches(Some("WEB01")) && !lit.matches(None));
        assert!(f("iliteral_or", "WEB01").matches(Some("web01")));
        let not = f("not_literal_or", "web01");
        assert!(!not.matches(Some("web01")) && not.matches(Some("web02")));
        assert!(not.matches(None), "not_* passes when the key is absent");
        assert!(f("not_iliteral_or", "WEB01").matches(None));
        assert!(!f("not_iliteral_or", "WEB01").matches(Some("web01")));
        assert_eq!(
            TagFilter::new("literal_or", "host", "|", false).unwrap_err(),
            "Filter must contain more than just a pipe"
        );
        assert_eq!(
            TagFilter::new("foo", "host", "x", false).unwrap_err(),
            "Could not find a tag value filter of the type: foo"
        );
    }

    #[test]
    fn wildcard_quirks() {
        assert!(f("wildcard", "web*").matches(Some("web01")));
        assert!(!f("wildcard", "web*").matches(Some("xweb01")));
        assert!(f("wildcard", "*01").matches(Some("web01")));
        assert!(!f("wildcard", "*01").matches(Some("web010")));
        // Not anchored without a leading or trailing `*`.
        assert!(f("wildcard", "web*01").matches(Some("xweb01y")));
        assert!(f("wildcard", "*").matches(Some("anything")));
        assert!(!f("wildcard", "*").matches(None));
        assert!(!f("wildcard", "Web*").matches(Some("web01")));
        assert!(f("iwildcard", "Web*").matches(Some("WEB01")));
        assert!(TagFilter::new("wildcard", "host", "web", false).is_err());
    }

    #[test]
    fn regexp_is_a_substring_match() {
        assert!(f("regexp", "eb0").matches(Some("web01")));
        assert!(!f("regexp", "^eb0").matches(Some("web01")));
        assert!(!f("regexp", ".*").matches(None));
    }

    #[test]
    fn legacy_conversion_and_m_grammar() {
        let (m, fs) = parse_metric_with_filters("sys.cpu{host=*,dc=a|b}{os=web*}").unwrap();
        assert_eq!(m, "sys.cpu");
        let kinds: Vec<(&str, &str, bool)> = fs
            .iter()
            .map(|f| (f.tagk.as_str(), f.kind.name(), f.group_by))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("os", "iwildcard", false),
                ("host", "wildcard", true),
                ("dc", "literal_or", true)
            ]
        );
        let (_, fs) = parse_metric_with_filters("m{host=regexp(web.*)}").unwrap();
        assert_eq!(fs[0].kind, FilterType::Regexp);
        assert_eq!(fs[0].filter, "web.*");
        assert_eq!(parse_metric_with_filters("m{}").unwrap().1.len(), 0);
        assert_eq!(parse_metric_with_filters("m{}{host=a}").unwrap().1.len(), 1);
        assert_eq!(
            parse_metric_with_filters("m{host=a").unwrap_err(),
            "Missing '}' at the end of: m{host=a"
        );
        assert_eq!(
            parse_metric_with_filters("m{host}").unwrap_err(),
            "When parsing tag 'host': invalid tag: host"
        );
    }
}
