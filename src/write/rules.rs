//! Which names a series may have, by the protocol that wrote it.
//!
//! OpenTSDB's put rules (telnet `put`, `/api/put`) stay as OpenTSDB has
//! them: at least one tag, at most `tsd.storage.max_tags`, names in
//! OpenTSDB's character set ([`crate::model::NameRules`]). Prometheus
//! remote write needs what those refuse: a series with no label but its
//! name, Kubernetes' 10–20 labels, any UTF-8 in label values, `:` in
//! metric names. InfluxDB line protocol and Graphite need dots and any
//! UTF-8 in every name. [`SeriesRules`] says which set a write is checked
//! by; the checks of the Prometheus and line-protocol sets are here.

use crate::model::name::{is_prometheus_label_name, is_prometheus_metric_name};
use crate::protocol::PointError;

/// The rule set a series' names are checked by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeriesRules {
    /// OpenTSDB's `TSDB.addPoint` checks: telnet and `/api/put`.
    OpenTsdb,
    /// Prometheus' data model: remote write.
    Prometheus,
    /// Names kept as the sender wrote them: InfluxDB line protocol,
    /// Graphite plaintext, OpenTelemetry metrics with
    /// `tsd.otlp.prometheus_names` off. Every name may be any UTF-8 a
    /// label value may be (`cpu.usage_idle`, a Graphite path,
    /// `http.server.duration`), and no tag is needed.
    LineProtocol,
}

impl SeriesRules {
    /// This rule set's bit in a [`RulesPassed`].
    const fn bit(self) -> u8 {
        match self {
            SeriesRules::OpenTsdb => 1,
            SeriesRules::Prometheus => 2,
            SeriesRules::LineProtocol => 4,
        }
    }
}

/// The rule sets a series' names pass, found once when the series is
/// first known: a series created by one protocol is found in the series
/// cache by the other before any check runs, and must still be refused
/// there if its names break that protocol's rules (a remote-written
/// series with no tag must not open `put m 1 1` with no tag to telnet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct RulesPassed(u8);

impl RulesPassed {
    /// Passes every rule set (test series).
    #[cfg(test)]
    pub(crate) const ALL: RulesPassed = RulesPassed(1 | 2 | 4);

    pub(crate) fn with(self, rules: SeriesRules) -> RulesPassed {
        RulesPassed(self.0 | rules.bit())
    }

    pub(crate) fn allows(self, rules: SeriesRules) -> bool {
        self.0 & rules.bit() != 0
    }
}

/// `tsd.prometheus.max_labels`: labels a remote-written series may have
/// besides `__name__`.
pub(crate) const MAX_LABELS_KEY: &str = "tsd.prometheus.max_labels";

/// Default of [`MAX_LABELS_KEY`]. Kubernetes series carry 10–20 labels
/// (cAdvisor's and kube-state-metrics' most), so 64 is far above any
/// sane series, while each label costs a UID pair in every row key and
/// TSUID: a sender gone wrong (a label per request id) is refused before
/// its keys grow without bound.
pub(crate) const DEFAULT_MAX_LABELS: usize = 64;

/// The longest metric name, label name or label value of a
/// remote-written series, in bytes. Each is stored as a UID name (the
/// forward key and reverse value of the UID table, a ClickHouse string)
/// and in every WAL series record and series-cache key; real label
/// values are at most a few hundred bytes (URLs, image names), and a
/// 4 KiB one is a log line sent as a label by mistake. OpenTSDB's put
/// path has no such cap, and keeps none.
pub(crate) const MAX_NAME_BYTES: usize = 4096;

/// Whether a label value can be a series' name part: not empty (senders
/// drop empty values before this), within [`MAX_NAME_BYTES`], and free of
/// the two control bytes the series key separates names with (NUL and
/// 0x01; no real label value holds them).
fn value_problem(v: &str) -> Option<&'static str> {
    if v.is_empty() {
        Some("is empty (Prometheus drops empty label values)")
    } else if v.len() > MAX_NAME_BYTES {
        Some("is longer than 4096 bytes")
    } else if v.bytes().any(|b| b <= 1) {
        Some("holds a NUL or 0x01 byte")
    } else {
        None
    }
}

/// Checks a remote-written series' names: `metric` is `__name__`'s value,
/// `tags` the other labels. The messages name the series as Prometheus
/// writes it, since the sender reads them in its log.
pub(crate) fn check_prometheus(
    metric: &str,
    tags: &[(&str, &str)],
    max_labels: usize,
) -> Result<(), PointError> {
    let bad = |what: String| {
        PointError::IllegalArgument(format!("{what} in series {}", describe(metric, tags)))
    };
    if !is_prometheus_metric_name(metric) {
        return Err(bad(format!("invalid metric name {metric:?}")));
    }
    if metric.len() > MAX_NAME_BYTES {
        return Err(bad("metric name longer than 4096 bytes".into()));
    }
    if tags.len() > max_labels {
        return Err(bad(format!(
            "too many labels: {}, at most {max_labels} besides __name__ ({MAX_LABELS_KEY})",
            tags.len()
        )));
    }
    for (i, (k, v)) in tags.iter().enumerate() {
        if !is_prometheus_label_name(k) || *k == "__name__" {
            return Err(bad(format!("invalid label name {k:?}")));
        }
        if k.len() > MAX_NAME_BYTES {
            return Err(bad("label name longer than 4096 bytes".into()));
        }
        if tags[..i].iter().any(|(other, _)| other == k) {
            return Err(bad(format!("duplicate label name {k:?}")));
        }
        if let Some(why) = value_problem(v) {
            return Err(bad(format!("the value of label {k:?} {why}")));
        }
    }
    Ok(())
}

/// Checks the names of a series written in InfluxDB line protocol or
/// Graphite plaintext. Both allow what OpenTSDB's put path refuses (no
/// tag, spaces, `:`, any UTF-8) and Prometheus' names refuse (the dots
/// of `cpu.usage_idle` and of every Graphite path), so every name is
/// checked as remote write checks a label value: any UTF-8, not empty,
/// within [`MAX_NAME_BYTES`], no NUL or 0x01; a series has at most
/// `max_labels` tags (`tsd.prometheus.max_labels`), each key once.
pub(crate) fn check_line_protocol(
    metric: &str,
    tags: &[(&str, &str)],
    max_labels: usize,
) -> Result<(), PointError> {
    let bad = |what: String| {
        PointError::IllegalArgument(format!("{what} in series {}", describe(metric, tags)))
    };
    if let Some(why) = value_problem(metric) {
        return Err(bad(format!("the metric name {why}")));
    }
    if tags.len() > max_labels {
        return Err(bad(format!(
            "too many tags: {}, at most {max_labels} ({MAX_LABELS_KEY})",
            tags.len()
        )));
    }
    for (i, (k, v)) in tags.iter().enumerate() {
        if *k == "__name__" {
            return Err(bad(format!(
                "invalid tag key {k:?}: the metric name is not a tag"
            )));
        }
        if let Some(why) = value_problem(k) {
            return Err(bad(format!("a tag key {why}")));
        }
        if tags[..i].iter().any(|(other, _)| other == k) {
            return Err(bad(format!("duplicate tag key {k:?}")));
        }
        if let Some(why) = value_problem(v) {
            return Err(bad(format!("the value of tag {k:?} {why}")));
        }
    }
    Ok(())
}

/// `metric{k="v",...}` as Prometheus prints a series, values quoted and
/// escaped; a long series is cut, since it goes into error messages.
pub(crate) fn describe(metric: &str, tags: &[(&str, &str)]) -> String {
    const MAX: usize = 512;
    let mut s = String::new();
    s.push_str(metric);
    s.push('{');
    for (i, (k, v)) in tags.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(k);
        s.push('=');
        s.push_str(&format!("{v:?}"));
        if s.len() > MAX {
            break;
        }
    }
    if s.len() > MAX {
        let mut cut = MAX;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s.push('}');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_names() {
        for ok in ["up", "job:http_requests:rate5m", "_x", ":a", "a1_b2"] {
            assert!(is_prometheus_metric_name(ok), "{ok}");
        }
        for bad in ["", "1a", "sys.cpu", "a-b", "a b", "é"] {
            assert!(!is_prometheus_metric_name(bad), "{bad}");
        }
        for ok in ["le", "_x", "A_1", "__meta"] {
            assert!(is_prometheus_label_name(ok), "{ok}");
        }
        for bad in ["", "a:b", "1x", "a.b", "ü"] {
            assert!(!is_prometheus_label_name(bad), "{bad}");
        }
    }

    #[test]
    fn what_prometheus_allows_passes() {
        let tags = [
            ("le", "+Inf"),
            ("path", "/a b/\"c\"=d,e"),
            ("city", "Zürich 東京"),
        ];
        assert!(check_prometheus("job:rate5m", &tags, 64).is_ok());
        assert!(check_prometheus("up", &[], 64).is_ok());
        let many: Vec<(String, String)> = (0..20).map(|i| (format!("l{i}"), "v".into())).collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert!(check_prometheus("m", &many, 64).is_ok());
        assert!(check_prometheus("m", &many, 19).is_err());
    }

    #[test]
    fn what_it_refuses_is_named() {
        let msg = |m, t: &[(&str, &str)]| match check_prometheus(m, t, 64) {
            Err(PointError::IllegalArgument(s)) => s,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            msg("sys.cpu", &[]),
            "invalid metric name \"sys.cpu\" in series sys.cpu{}"
        );
        assert!(msg("m", &[("a", "1"), ("a", "2")]).starts_with("duplicate label name \"a\""));
        assert!(msg("m", &[("a.b", "1")]).starts_with("invalid label name \"a.b\""));
        assert!(msg("m", &[("__name__", "x")]).starts_with("invalid label name"));
        assert!(msg("m", &[("a", "")]).contains("is empty"));
        assert!(msg("m", &[("a", "x\0y")]).contains("NUL"));
        let long = "x".repeat(MAX_NAME_BYTES + 1);
        assert!(msg("m", &[("a", &long)]).contains("4096"));
        assert!(msg("m", &[("a", &long)]).len() < 700);
    }

    #[test]
    fn line_protocol_names_are_any_utf8() {
        let tags = [("host name", "web 01"), ("région", "Zürich,東京=1")];
        assert!(check_line_protocol("cpu.usage_idle", &tags, 64).is_ok());
        assert!(check_line_protocol("my cpu:1", &[], 64).is_ok());
        let msg = |m, t: &[(&str, &str)]| match check_line_protocol(m, t, 2) {
            Err(PointError::IllegalArgument(s)) => s,
            other => panic!("{other:?}"),
        };
        assert!(msg("", &[]).contains("the metric name is empty"));
        assert!(msg("m", &[("a", "1"), ("a", "2")]).starts_with("duplicate tag key \"a\""));
        assert!(msg("m", &[("a", "1"), ("b", "2"), ("c", "3")]).contains("too many tags: 3"));
        assert!(msg("m", &[("a", "x\u{1}")]).contains("0x01"));
        assert!(msg("m", &[("", "x")]).contains("a tag key is empty"));
        assert!(msg("m", &[("__name__", "x")]).contains("invalid tag key"));
    }

    #[test]
    fn passed_rules_are_remembered_apart() {
        let p = RulesPassed::default().with(SeriesRules::Prometheus);
        assert!(p.allows(SeriesRules::Prometheus));
        assert!(!p.allows(SeriesRules::OpenTsdb));
        assert!(RulesPassed::ALL.allows(SeriesRules::OpenTsdb));
    }
}
