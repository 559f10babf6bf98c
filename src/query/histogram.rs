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

use super::context::QueryContext;
use super::downsample::Bucketer;
use super::error::QueryError;
use super::output::QueryResult;
use super::pipeline::scan_range;
use super::request::{HistogramQuery, ValidQuery, ValidSubQuery};
use super::results::{GroupLabels, series_notes, show_query};
use super::select::select;
use super::stats::SubStats;
use crate::histogram::SimpleHistogram;
use crate::histogram::simple::Bucket;
use crate::model::Value;
use crate::model::java::float_to_string;

/// One series' histograms in time order (ms).
type Histos = Vec<(i64, SimpleHistogram)>;

/// Sums the histograms of each downsampling bucket, stamped with the
/// bucket's start (`HistogramDownsampler`, 2.4.1): histograms before the
/// query start rounded up to a bucket boundary are not read (its
/// `seekInterval`), calendar buckets are anchored on the interval of the
/// series' first histogram read (not on the query start, as points'
/// buckets are), and histograms outside the `all` bucket are dropped.
fn downsample(series: Histos, bucketer: &Bucketer) -> Histos {
    let seek = bucketer.histogram_seek();
    let from = series.partition_point(|(ts, _)| *ts < seek);
    let Some(&(first, _)) = series.get(from) else {
        return Vec::new();
    };
    let bucketer = bucketer.anchored_on(first);
    let mut out: Histos = Vec::new();
    for (ts, h) in series.into_iter().skip(from) {
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
        // Every member's notes, with histograms or not (a series without
        // any in range still hands its annotations to the group).
        let labels = GroupLabels::of(ctx, q, &sel, &present, members, &notes)?;
        let result = |metric: String, dps: Vec<(i64, Value)>| {
            labels
                .clone()
                .into_result(metric, dps, false, query_json.clone(), sub)
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

    /// (bucket start, total count) of `points` (ms, count) downsampled
    /// with `spec` in `tz`, as 2.4.1's `TestHistogramDownsampler` builds
    /// its downsamplers (query from 0, no end).
    fn buckets(spec: &str, tz: chrono_tz::Tz, points: &[(i64, i64)]) -> Vec<(i64, i64)> {
        let spec = DownsampleSpec::parse(spec, false).unwrap();
        let b = Bucketer::new(&spec, tz, 0, i64::MAX);
        let series = points.iter().map(|&(t, n)| (t, h(0.0, 1.0, n))).collect();
        downsample(series, &b)
            .iter()
            .map(|(t, h)| (*t, h.buckets.values().sum()))
            .collect()
    }

    const BASE_TIME: i64 = 1356998400000;
    const DST_TS: i64 = 1450137600000;

    /// `testDownsampler_calendarHour`: buckets start on the interval of
    /// the first histogram (`DateTime.previousInterval`), 4 hours from
    /// local midnight in Kabul (+4:30).
    #[test]
    fn calendar_hours_anchor_on_the_first_histogram() {
        use chrono_tz::Asia::Kabul;
        use chrono_tz::Pacific::Funafuti;
        let points: Vec<(i64, i64)> = [0, 1800000, 3599000, 3600000, 5400000, 7199000]
            .iter()
            .zip(1..)
            .map(|(d, n)| (BASE_TIME + d, n))
            .collect();
        assert_eq!(
            buckets("1hc-sum", Funafuti, &points),
            [(BASE_TIME, 6), (BASE_TIME + 3600000, 15)]
        );
        assert_eq!(
            buckets("1hc-sum", Kabul, &points),
            [
                (1356996600000, 1),
                (1356996600000 + 3600000, 9),
                (1356996600000 + 7200000, 11)
            ]
        );
        assert_eq!(buckets("4hc-sum", Kabul, &points), [(1356996600000, 21)]);
    }

    /// `testDownsampler_calendarDay`: `3dc` steps three days from the
    /// first of January, so the bucket of 2015-12-15 starts that day.
    #[test]
    fn calendar_days_anchor_on_the_first_histogram() {
        use chrono_tz::Asia::Kabul;
        use chrono_tz::Pacific::Funafuti;
        let points: Vec<(i64, i64)> = [0, 86399000, 126001000, 172799000, 172800000, 242999000]
            .iter()
            .zip(1..)
            .map(|(d, n)| (DST_TS + d, n))
            .collect();
        assert_eq!(
            buckets("1d-sum", chrono_tz::Tz::UTC, &points),
            [
                (DST_TS, 3),
                (DST_TS + 86400000, 7),
                (DST_TS + 172800000, 11)
            ]
        );
        assert_eq!(
            buckets("1dc-sum", Funafuti, &points),
            [
                (1450094400000, 1),
                (1450094400000 + 86400000, 5),
                (1450094400000 + 2 * 86400000, 9),
                (1450094400000 + 3 * 86400000, 6)
            ]
        );
        assert_eq!(buckets("3dc-sum", Kabul, &points), [(1450121400000, 21)]);
    }

    /// `testDownsampler_calendarWeek`: weeks start on Sunday; `2wc` steps
    /// two weeks from the week of the first histogram.
    #[test]
    fn calendar_weeks_anchor_on_the_first_histogram() {
        use chrono_tz::Asia::Kabul;
        use chrono_tz::Pacific::Fiji;
        let day = 86400000;
        let points = [
            (DST_TS, 1),
            (DST_TS + 7 * day, 2),
            (1451129400000, 3),
            (DST_TS + 21 * day, 4),
            (1452367799000, 5),
        ];
        assert_eq!(
            buckets("1wc-sum", Fiji, &points),
            (0..5)
                .map(|k| (1449918000000 + k * 7 * day, k + 1))
                .collect::<Vec<_>>()
        );
        assert_eq!(
            buckets("2wc-sum", Kabul, &points),
            [(1449948600000, 6), (1451158200000, 9)]
        );
    }

    /// `seekInterval`: histograms before the query start rounded up to a
    /// bucket boundary are not read; the first one read anchors the rest.
    #[test]
    fn histograms_before_the_seek_point_are_not_read() {
        let spec = DownsampleSpec::parse("3dc-sum", false).unwrap();
        // Query from 2015-12-16 12:00 UTC: 3-day grid from January 1st
        // (Dec 15, 18, ...), so the seek lands on Dec 18.
        let b = Bucketer::new(&spec, chrono_tz::Tz::UTC, DST_TS + 36 * 3600000, i64::MAX);
        let day = 86400000;
        let got: Vec<(i64, i64)> = downsample(
            vec![
                (DST_TS + 2 * day, h(0.0, 1.0, 1)),
                (DST_TS + 3 * day + 5, h(0.0, 1.0, 2)),
                (DST_TS + 6 * day, h(0.0, 1.0, 4)),
            ],
            &b,
        )
        .iter()
        .map(|(t, h)| (*t, h.buckets.values().sum()))
        .collect();
        assert_eq!(got, [(DST_TS + 3 * day, 2), (DST_TS + 6 * day, 4)]);
        // Fixed intervals round the start up too.
        let spec = DownsampleSpec::parse("1m-sum", false).unwrap();
        let b = Bucketer::new(&spec, chrono_tz::Tz::UTC, 30_000, 600_000);
        let got = downsample(vec![(40_000, h(0.0, 1.0, 1)), (70_000, h(0.0, 1.0, 2))], &b);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, 60_000);
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
