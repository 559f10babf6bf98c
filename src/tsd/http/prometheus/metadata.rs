//! Metric metadata sent by remote write (`WriteRequest.metadata` in 1.0,
//! each series' metadata in 2.0): type, help and unit per metric name,
//! kept in memory by the TSD for `/prometheus/api/v1/metadata`.
//!
//! Prometheus keeps metadata per scrape target and forgets it with the
//! target; a remote-write receiver sees only what senders send, again and
//! again (Prometheus resends all metadata every minute). So this keeps
//! the distinct entries per metric, newest last, and nothing on disk:
//! after a restart the senders fill it again within their send period.
//! Bounded: at most [`MAX_METRICS`] metrics and [`MAX_PER_METRIC`]
//! distinct entries each, help texts cut to [`MAX_TEXT`] bytes.

use std::collections::BTreeMap;

use parking_lot::RwLock;

/// Metrics kept; a sender past that is refused no sample, only its new
/// metrics' metadata is not kept.
pub(crate) const MAX_METRICS: usize = 100_000;
/// Distinct entries kept per metric (targets may disagree on help
/// texts); the oldest goes first.
pub(crate) const MAX_PER_METRIC: usize = 8;
/// Longest help or unit text kept, in bytes.
pub(crate) const MAX_TEXT: usize = 1024;

/// One metric's metadata as Prometheus' `/api/v1/metadata` spells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MetricMetadata {
    /// `counter`, `gauge`, `histogram`, `gaugehistogram`, `summary`,
    /// `info`, `stateset` or `unknown`.
    pub kind: String,
    pub help: String,
    pub unit: String,
}

/// The metadata the TSD has been sent, by metric name.
#[derive(Debug, Default)]
pub(crate) struct MetadataStore {
    by_metric: RwLock<BTreeMap<String, Vec<MetricMetadata>>>,
}

impl MetadataStore {
    /// Keeps `m` for `metric` unless the same entry is kept already.
    pub(crate) fn record(&self, metric: &str, mut m: MetricMetadata) {
        for text in [&mut m.help, &mut m.unit, &mut m.kind] {
            cut(text, MAX_TEXT);
        }
        if self
            .by_metric
            .read()
            .get(metric)
            .is_some_and(|kept| kept.contains(&m))
        {
            return;
        }
        let mut map = self.by_metric.write();
        if !map.contains_key(metric) && map.len() >= MAX_METRICS {
            return;
        }
        let kept = map.entry(metric.to_string()).or_default();
        if kept.contains(&m) {
            return;
        }
        if kept.len() >= MAX_PER_METRIC {
            kept.remove(0);
        }
        kept.push(m);
    }

    /// The metadata of `metric` (or of every metric, by name), at most
    /// `limit` metrics (Prometheus' `limit` counts metrics, not entries).
    // Listed by the query API (`/prometheus/api/v1/metadata`), built on
    // another branch.
    #[allow(dead_code)]
    pub(crate) fn list(
        &self,
        metric: Option<&str>,
        limit: Option<usize>,
    ) -> Vec<(String, Vec<MetricMetadata>)> {
        let map = self.by_metric.read();
        let limit = limit.unwrap_or(usize::MAX);
        match metric {
            Some(name) => map
                .get_key_value(name)
                .map(|(k, v)| (k.clone(), v.clone()))
                .into_iter()
                .take(limit)
                .collect(),
            None => map
                .iter()
                .take(limit)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }
}

/// Cuts `s` to at most `max` bytes, on a character boundary.
fn cut(s: &mut String, max: usize) {
    if s.len() > max {
        let mut at = max;
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s.truncate(at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(kind: &str, help: &str) -> MetricMetadata {
        MetricMetadata {
            kind: kind.into(),
            help: help.into(),
            unit: String::new(),
        }
    }

    #[test]
    fn entries_are_kept_once_per_metric_and_listed_by_name() {
        let s = MetadataStore::default();
        s.record("up", md("gauge", "is it up"));
        s.record("up", md("gauge", "is it up"));
        s.record("up", md("gauge", "other help"));
        s.record("a_total", md("counter", "a"));
        let all = s.list(None, None);
        assert_eq!(
            all.iter()
                .map(|(n, v)| (n.as_str(), v.len()))
                .collect::<Vec<_>>(),
            vec![("a_total", 1), ("up", 2)]
        );
        assert_eq!(s.list(None, Some(1)).len(), 1);
        assert_eq!(s.list(Some("up"), None)[0].1[1].help, "other help");
        assert!(s.list(Some("nope"), None).is_empty());
        assert!(s.list(Some("up"), Some(0)).is_empty());
    }

    #[test]
    fn memory_is_bounded() {
        let s = MetadataStore::default();
        for i in 0..MAX_PER_METRIC + 3 {
            s.record("m", md("gauge", &format!("h{i}")));
        }
        let kept = &s.list(Some("m"), None)[0].1;
        assert_eq!(kept.len(), MAX_PER_METRIC);
        assert_eq!(kept[0].help, "h3");
        s.record("long", md("gauge", &"é".repeat(MAX_TEXT)));
        assert!(s.list(Some("long"), None)[0].1[0].help.len() <= MAX_TEXT);
    }
}
