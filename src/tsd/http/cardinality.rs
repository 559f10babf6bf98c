//! The cardinality view: `GET /api/stats/cardinality?topN=N` in rtsdb's
//! JSON (docs/stats.md), and the same figures in Prometheus 2.42's
//! `/api/v1/status/tsdb` shape for the Prometheus API. Both read
//! [`Db::cardinality`] through a cache of a few seconds
//! ([`CardinalityCache`]), so a page refreshing it, or several operators
//! at once, count the index once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::call::Call;
use super::reply::Reply;
use crate::db::Db;
use crate::db::cardinality::{Cardinality, Counted, MAX_TOP_N};
use crate::tsd::stats::DEFAULT_TENANT;

/// How long a count is answered again before the index is counted anew.
const FRESH_FOR: Duration = Duration::from_secs(5);

/// Lists' length when the request names none (`topN`, `limit`).
pub(crate) const DEFAULT_TOP_N: usize = 10;

/// The last count, with when it was made (epoch ms) and how long ago.
#[derive(Default)]
pub(crate) struct CardinalityCache {
    last: parking_lot::Mutex<Option<CachedCount>>,
}

/// A count kept by [`CardinalityCache`].
#[derive(Clone)]
struct CachedCount {
    at: Instant,
    at_ms: u64,
    counted: Arc<Cardinality>,
}

impl CardinalityCache {
    /// The count with lists of `top_n`, and when it was made (epoch ms):
    /// the last one if it is fresh and its lists were at least as long,
    /// else a new one. Concurrent callers wait for one count rather than
    /// each counting.
    pub(crate) fn get(&self, db: &Db, top_n: usize) -> crate::db::Result<(Cardinality, u64)> {
        let mut last = self.last.lock();
        if let Some(c) = last.as_ref()
            && c.at.elapsed() < FRESH_FOR
            && c.counted.top_n >= top_n
        {
            return Ok((truncated(&c.counted, top_n), c.at_ms));
        }
        let t0 = Instant::now();
        let counted = Arc::new(db.cardinality(top_n)?);
        tracing::debug!(
            series = counted.series,
            ms = t0.elapsed().as_millis() as u64,
            "counted the series index's cardinality"
        );
        let at_ms = chrono::Utc::now().timestamp_millis().max(0) as u64;
        *last = Some(CachedCount {
            at: Instant::now(),
            at_ms,
            counted: counted.clone(),
        });
        Ok(((*counted).clone(), at_ms))
    }
}

/// `c` with every list cut to `n`.
fn truncated(c: &Cardinality, n: usize) -> Cardinality {
    let mut c = c.clone();
    c.top_n = n;
    c.by_metric.truncate(n);
    c.by_tag_key.truncate(n);
    c.values_by_tag_key.truncate(n);
    c.bytes_by_tag_key.truncate(n);
    c.by_tag_pair.truncate(n);
    c.new_by_metric.truncate(n);
    c
}

/// A list length from a request: a positive number up to [`MAX_TOP_N`].
pub(crate) fn parse_top_n(raw: Option<&str>) -> Result<usize, String> {
    let Some(raw) = raw else {
        return Ok(DEFAULT_TOP_N);
    };
    match raw.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_TOP_N).contains(&n) => Ok(n),
        _ => Err(format!(
            "must be a whole number from 1 to {MAX_TOP_N}, not {raw:?}"
        )),
    }
}

/// `GET /api/stats/cardinality[?topN=N]`.
pub(crate) fn http(c: &Call) -> Reply {
    let n = match parse_top_n(c.query.get("topN")) {
        Ok(n) => n,
        Err(e) => return Reply::error(400, "Invalid topN", &format!("topN {e}")),
    };
    // A count of a large index takes a while: off the async workers
    // where the runtime allows it, as a shared store's sync put does.
    let count = || c.state.cardinality.get(&c.state.db, n);
    let multi = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    let counted = if multi {
        tokio::task::block_in_place(count)
    } else {
        count()
    };
    match counted {
        Ok((counted, at_ms)) => Reply::json(200, to_json(&counted, at_ms).to_string()),
        Err(e) => Reply::error(500, "Counting the series index failed", &e.to_string()),
    }
}

/// rtsdb's JSON (docs/stats.md, "/api/stats/cardinality").
fn to_json(c: &Cardinality, at_ms: u64) -> serde_json::Value {
    json!({
        "tenant": DEFAULT_TENANT,
        "topN": c.top_n,
        "computedAt": at_ms,
        "totalSeries": c.series,
        "metrics": c.metrics,
        "tagPairs": c.tag_pairs,
        "seriesByMetric": c.by_metric.iter()
            .map(|m| json!({"metric": m.name, "series": m.count}))
            .collect::<Vec<_>>(),
        "seriesByTagKey": c.by_tag_key.iter()
            .map(|k| json!({"tagk": k.tagk, "series": k.series, "values": k.values}))
            .collect::<Vec<_>>(),
        "seriesByTagPair": c.by_tag_pair.iter()
            .map(|p| json!({"tagk": p.tagk, "tagv": p.tagv, "series": p.series}))
            .collect::<Vec<_>>(),
        "newSeriesByMetric": c.new_by_metric.iter()
            .map(|a| json!({
                "metric": a.metric,
                "total": a.total,
                "hours": a.hours.iter()
                    .map(|(h, n)| json!({"hour": h, "series": n}))
                    .collect::<Vec<_>>(),
            }))
            .collect::<Vec<_>>(),
    })
}

/// Prometheus' label for the metric name.
const NAME_LABEL: &str = "__name__";

/// The `data` of Prometheus 2.42's `/api/v1/status/tsdb` for a count cut
/// to `limit`: the metric name counts as the label `__name__`, as in
/// Prometheus, so it takes its place among the labels and pairs.
/// `chunkCount` is 0: rtsdb keeps rows of an hour, not chunks; `minTime`
/// and `maxTime` span the hours of the series' newest rows.
pub(crate) fn prometheus_status(c: &Cardinality, limit: usize) -> serde_json::Value {
    let list = |mut v: Vec<Counted>| {
        v.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.name.cmp(&b.name)));
        v.truncate(limit);
        v.iter()
            .map(|e| json!({"name": e.name, "value": e.count}))
            .collect::<Vec<_>>()
    };
    let with_name = |v: &[Counted], name_count: u64| {
        let mut v = v.to_vec();
        if c.metrics > 0 {
            v.push(Counted {
                name: NAME_LABEL.into(),
                count: name_count,
            });
        }
        v
    };
    // The top pairs of the union are among the top pairs of each part.
    let mut pairs: Vec<Counted> = c
        .by_tag_pair
        .iter()
        .map(|p| Counted {
            name: format!("{}={}", p.tagk, p.tagv),
            count: p.series,
        })
        .collect();
    pairs.extend(c.by_metric.iter().map(|m| Counted {
        name: format!("{NAME_LABEL}={}", m.name),
        count: m.count,
    }));
    let (min_time, max_time) = match c.newest_rows {
        Some((lo, hi)) => (
            i64::from(lo) * 1000,
            (i64::from(hi) + crate::model::row_span::ROW_SPAN_MS as i64 / 1000) * 1000 - 1,
        ),
        None => (0, 0),
    };
    json!({
        "headStats": {
            "numSeries": c.series,
            "numLabelPairs": c.tag_pairs + c.metrics,
            "chunkCount": 0,
            "minTime": min_time,
            "maxTime": max_time,
        },
        "seriesCountByMetricName": list(c.by_metric.clone()),
        "labelValueCountByLabelName": list(with_name(&c.values_by_tag_key, c.metrics)),
        "memoryInBytesByLabelName": list(with_name(&c.bytes_by_tag_key, c.metric_name_bytes)),
        "seriesCountByLabelValuePair": list(pairs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_n_bounds() {
        assert_eq!(parse_top_n(None), Ok(DEFAULT_TOP_N));
        assert_eq!(parse_top_n(Some("3")), Ok(3));
        assert!(parse_top_n(Some("0")).is_err());
        assert!(parse_top_n(Some("x")).is_err());
        assert!(parse_top_n(Some(&(MAX_TOP_N + 1).to_string())).is_err());
    }

    #[test]
    fn prometheus_shape_names_the_metric_label() {
        let c = Cardinality {
            top_n: 10,
            series: 4,
            metrics: 2,
            tag_pairs: 4,
            by_metric: vec![
                Counted {
                    name: "cpu".into(),
                    count: 3,
                },
                Counted {
                    name: "mem".into(),
                    count: 1,
                },
            ],
            by_tag_key: Vec::new(),
            values_by_tag_key: vec![Counted {
                name: "host".into(),
                count: 3,
            }],
            bytes_by_tag_key: vec![Counted {
                name: "host".into(),
                count: 4,
            }],
            by_tag_pair: vec![crate::db::cardinality::TagPairCount {
                tagk: "host".into(),
                tagv: "a".into(),
                series: 2,
            }],
            metric_name_bytes: 12,
            new_by_metric: Vec::new(),
            newest_rows: Some((3600, 7200)),
        };
        let v = prometheus_status(&c, 2);
        assert_eq!(v["headStats"]["numSeries"], 4);
        assert_eq!(v["headStats"]["numLabelPairs"], 6);
        assert_eq!(v["headStats"]["minTime"], 3_600_000);
        assert_eq!(v["headStats"]["maxTime"], 10_799_999);
        assert_eq!(
            v["labelValueCountByLabelName"],
            json!([{"name": "host", "value": 3}, {"name": "__name__", "value": 2}])
        );
        assert_eq!(
            v["memoryInBytesByLabelName"],
            json!([{"name": "__name__", "value": 12}, {"name": "host", "value": 4}])
        );
        assert_eq!(
            v["seriesCountByLabelValuePair"],
            json!([{"name": "__name__=cpu", "value": 3}, {"name": "host=a", "value": 2}])
        );
    }
}
