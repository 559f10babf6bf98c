//! Histogram sub-queries (OpenTSDB 2.4 `percentiles`,
//! `showHistogramBuckets`), as `TsdbQuery.runHistogram` answers them:
//! the series' histogram cells, each series downsampled by summing the
//! histograms of a bucket (`HistogramDownsampler`, fill policies do not
//! apply), the series of a group summed at equal timestamps (no
//! interpolation: `HistogramAggregationIterator`), then one output series
//! per percentile (`<metric>_pct_<p>`, `Float.toString(p)`) and, with
//! buckets, one per bucket of the group's first histogram
//! (`<metric>_<lower>_<upper>`, `_UNDERFLOW`, `_OVERFLOW`).

use std::collections::BTreeMap;

use super::QueryContext;
use super::downsample::Bucketer;
use super::engine::{SubStats, compute_tags, scan_range, select, series_notes, show_query};
use super::error::QueryError;
use super::output::QueryResult;
use super::request::{HistogramQuery, ValidQuery, ValidSubQuery};
use crate::histogram::SimpleHistogram;
use crate::histogram::simple::Bucket;
use crate::model::Value;
use crate::model::java::float_to_string;

/// One series' histograms in time order (ms).
type Histos = Vec<(i64, SimpleHistogram)>;

/// Sums the histograms of each downsampling bucket, stamped with the
/// bucket's start (`HistogramDownsampler`); histograms outside the `all`
/// bucket are dropped.
fn downsample(series: Histos, bucketer: &Bucketer) -> Histos {
    let mut out: Histos = Vec::new();
    for (ts, h) in series {
        let Some(b) = bucketer.bucket(ts) else {
            continue;
        };
        match out.last_mut() {
            Some((last, acc)) if *last == b => acc.add(&h),
            _ => out.push((b, h)),
        }
    }
    out
}

/// The group's histograms: at each timestamp any member has, the sum of
/// the members' histograms there (`HistogramAggregationIterator`).
fn merge(members: &[&Histos]) -> Histos {
    let mut by_ts: BTreeMap<i64, SimpleHistogram> = BTreeMap::new();
    for m in members {
        for (ts, h) in m.iter() {
            match by_ts.get_mut(ts) {
                Some(acc) => acc.add(h),
                None => {
                    by_ts.insert(*ts, h.clone());
                }
            }
        }
    }
    by_ts.into_iter().collect()
}

/// A bucket series of `showHistogramBuckets`.
#[derive(Debug, Clone, Copy)]
enum BucketSeries {
    Underflow,
    Regular(Bucket),
    Overflow,
}

impl BucketSeries {
    fn suffix(self) -> String {
        match self {
            BucketSeries::Underflow => "_UNDERFLOW".into(),
            BucketSeries::Overflow => "_OVERFLOW".into(),
            BucketSeries::Regular(b) => {
                format!("_{}_{}", float_to_string(b.lower), float_to_string(b.upper))
            }
        }
    }

    /// The count in `h` (0 for a bucket it lacks).
    fn count(self, h: &SimpleHistogram) -> i64 {
        match self {
            BucketSeries::Underflow => h.underflow,
            BucketSeries::Overflow => h.overflow,
            BucketSeries::Regular(b) => h.buckets.get(&b).copied().unwrap_or(0),
        }
    }
}

pub(super) fn run(
    ctx: &QueryContext,
    q: &ValidQuery,
    sub: &ValidSubQuery,
    hq: &HistogramQuery,
    stats: &mut SubStats,
) -> Result<Vec<QueryResult>, QueryError> {
    let sel = select(ctx, sub)?;
    stats.unresolved = sel.unresolved;
    stats.series = sel.tsuids.len() as u64;
    let (scan_start, scan_end) = scan_range(q, sub);
    let stored = ctx
        .source
        .read_histograms(&sel.tsuids, scan_start, scan_end)
        .map_err(|e| QueryError::Storage(e.to_string()))?;
    let bucketer = sub
        .downsample
        .as_ref()
        .map(|d| Bucketer::new(d, q.tz, q.start_ms, q.end_ms));
    let notes = if q.original.no_annotations {
        Vec::new()
    } else {
        series_notes(sel.tsuids.len(), stored.annotations, q.start_ms, q.end_ms)
    };
    let mut series: Vec<Histos> = Vec::with_capacity(stored.series.len());
    for cells in stored.series {
        let mut hs = Vec::with_capacity(cells.len());
        for (ms, value) in cells {
            stats.raw_points += 1;
            stats.bytes += value.len() as u64;
            // A store with histograms read by a TSD without the codecs
            // cannot decode them: 2.4.1 fails such a query too.
            let codecs = ctx.source.histogram_codecs().ok_or_else(|| {
                QueryError::Storage(
                    "Histogram storage has not been enabled. Check the 'tsd.core.histograms.config' configuration."
                        .into(),
                )
            })?;
            let h = codecs
                .decode_cell(&value)
                .map_err(|e| QueryError::Storage(e.to_string()))?;
            hs.push((ms as i64, h));
        }
        series.push(match &bucketer {
            Some(b) => downsample(hs, b),
            None => hs,
        });
    }
    let widths = ctx.widths();
    let query_json = q.original.show_query.then(|| show_query(sub));
    let mut results = Vec::new();
    for members in &sel.groups {
        let present: Vec<usize> = members
            .iter()
            .copied()
            .filter(|&p| !series[p].is_empty())
            .collect();
        if present.is_empty() {
            continue;
        }
        let merged = merge(&present.iter().map(|&p| &series[p]).collect::<Vec<_>>());
        // The iterator runs over the scanned rows; the serializer keeps
        // what lies in the query's range.
        let merged: Histos = merged
            .into_iter()
            .filter(|(ts, _)| *ts >= scan_start as i64 && *ts <= scan_end as i64)
            .collect();
        let first = merged.first().map(|(_, h)| h.clone());
        let points: Vec<&(i64, SimpleHistogram)> = merged
            .iter()
            .filter(|(ts, _)| *ts >= q.start_ms && *ts <= q.end_ms)
            .collect();
        let (tags, aggregate_tags) = compute_tags(ctx, present.iter().map(|&p| &sel.tsuids[p]))?;
        // Every member's notes, with histograms or not (a series without
        // any in range still hands its annotations to the group).
        let mut annotations: Vec<crate::model::Annotation> = Vec::new();
        if !notes.is_empty() {
            for &m in members {
                annotations.extend(notes[m].iter().cloned());
            }
            annotations.sort_by_key(|a| a.start_time);
        }
        let mut hex: Vec<String> = Vec::new();
        if q.original.show_tsuids {
            hex = present
                .iter()
                .map(|&p| sel.tsuids[p].to_hex(&widths))
                .collect();
            hex.sort();
        }
        let result = |metric: String, dps: Vec<(i64, Value)>| QueryResult {
            metric,
            tags: tags.clone(),
            aggregate_tags: aggregate_tags.clone(),
            tsuids: hex.clone(),
            dps,
            nan_as_null: false,
            query: query_json.clone(),
            stats: None,
            annotations: annotations.clone(),
            show_empty_annotations: false,
            query_index: sub.index,
        };
        for &p in &hq.percentiles {
            let dps = points
                .iter()
                .map(|(ts, h)| (*ts, Value::Float(h.percentile(p as f64))))
                .collect();
            stats.output_points += points.len() as u64;
            results.push(result(
                format!("{}_pct_{}", sel.metric_name, float_to_string(p)),
                dps,
            ));
        }
        if hq.show_buckets
            && let Some(first) = first
        {
            let kinds = std::iter::once(BucketSeries::Underflow)
                .chain(first.buckets.keys().map(|b| BucketSeries::Regular(*b)))
                .chain(std::iter::once(BucketSeries::Overflow));
            for kind in kinds {
                let dps = points
                    .iter()
                    .map(|(ts, h)| (*ts, Value::Int(kind.count(h))))
                    .collect();
                stats.output_points += points.len() as u64;
                results.push(result(format!("{}{}", sel.metric_name, kind.suffix()), dps));
            }
        }
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::downsample::DownsampleSpec;

    fn h(lower: f32, upper: f32, n: i64) -> SimpleHistogram {
        let mut h = SimpleHistogram::new(0);
        h.add_bucket(lower, upper, n);
        h
    }

    #[test]
    fn downsampling_sums_a_bucket() {
        let spec = DownsampleSpec::parse("1m-sum", false).unwrap();
        let b = Bucketer::new(&spec, chrono_tz::Tz::UTC, 0, 600_000);
        let out = downsample(
            vec![
                (0, h(0.0, 1.0, 1)),
                (30_000, h(0.0, 1.0, 2)),
                (60_000, h(1.0, 2.0, 5)),
            ],
            &b,
        );
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].0, 0);
        assert_eq!(out[0].1.buckets.values().copied().collect::<Vec<_>>(), [3]);
        assert_eq!(out[1].0, 60_000);
    }

    #[test]
    fn merging_sums_equal_timestamps_only() {
        let a = vec![(0, h(0.0, 1.0, 1)), (10, h(0.0, 1.0, 1))];
        let b = vec![(0, h(0.0, 1.0, 4)), (20, h(0.0, 1.0, 7))];
        let m = merge(&[&a, &b]);
        let got: Vec<(i64, i64)> = m
            .iter()
            .map(|(t, h)| (*t, h.buckets.values().sum()))
            .collect();
        assert_eq!(got, [(0, 5), (10, 1), (20, 7)]);
    }
}
