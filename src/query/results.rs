//! Per-group result assembly, the one home for it: a group's points
//! (its member's own for `none`, else the group-by merge), its `tags`
//! and `aggregateTags` (`SpanGroup.computeTags`), TSUIDs and annotations,
//! `padding`'s cut and `showQuery`'s echo. The raw path, rollups, the
//! result cache and histograms all build their output series here.

use std::collections::BTreeMap;

use super::context::QueryContext;
use super::downsample::FillPolicy;
use super::error::QueryError;
use super::group::{self, Scratch};
use super::output::QueryResult;
use super::request::{ValidQuery, ValidSubQuery};
use super::select::Selected;
use super::stats::SubStats;
use crate::model::{Annotation, Tsuid, Uid, UidKind, Value};

/// What every output series of a group carries besides its name and
/// points: its tags, its aggregated tags, its TSUIDs (`showTSUIDs`) and
/// its annotations.
#[derive(Debug, Clone)]
pub(super) struct GroupLabels {
    tags: BTreeMap<String, String>,
    aggregate_tags: Vec<String>,
    tsuids: Vec<String>,
    annotations: Vec<Annotation>,
}

impl GroupLabels {
    /// The labels of a group of `sel`'s series: tags and TSUIDs from the
    /// members at `present` (those with points), annotations from the
    /// members at `noted` (`notes` is per series, empty when none are
    /// wanted).
    pub(super) fn of(
        ctx: &QueryContext,
        q: &ValidQuery,
        sel: &Selected,
        present: &[usize],
        noted: &[usize],
        notes: &[Vec<Annotation>],
    ) -> Result<GroupLabels, QueryError> {
        let (tags, aggregate_tags) = compute_tags(ctx, present.iter().map(|&p| &sel.tsuids[p]))?;
        let mut annotations: Vec<Annotation> = Vec::new();
        if !notes.is_empty() {
            for &p in noted {
                annotations.extend(notes[p].iter().cloned());
            }
            // Collections.sort: stable, by raw start time.
            annotations.sort_by_key(|a| a.start_time);
        }
        let mut tsuids: Vec<String> = Vec::new();
        if q.original.show_tsuids {
            let widths = ctx.widths();
            tsuids = present
                .iter()
                .map(|&p| sel.tsuids[p].to_hex(&widths))
                .collect();
            tsuids.sort();
        }
        Ok(GroupLabels {
            tags,
            aggregate_tags,
            tsuids,
            annotations,
        })
    }

    /// The output series `metric` of sub-query `sub` with these labels.
    pub(super) fn into_result(
        self,
        metric: String,
        dps: Vec<(i64, Value)>,
        nan_as_null: bool,
        query: Option<serde_json::Value>,
        sub: &ValidSubQuery,
    ) -> QueryResult {
        QueryResult {
            metric,
            tags: self.tags,
            aggregate_tags: self.aggregate_tags,
            tsuids: self.tsuids,
            dps,
            nan_as_null,
            query,
            stats: None,
            annotations: self.annotations,
            show_empty_annotations: false,
            query_index: sub.index,
        }
    }
}

/// Builds the output series of a sub-query from the pipelines' outputs;
/// `dps` computes a group's points from its present members.
#[allow(clippy::too_many_arguments)]
pub(super) fn build_results(
    ctx: &QueryContext,
    q: &ValidQuery,
    sub: &ValidSubQuery,
    sel: &Selected,
    seen: &[bool],
    notes: &[Vec<Annotation>],
    stats: &mut SubStats,
    mut dps: impl FnMut(usize, &[usize]) -> Vec<(i64, Value)>,
) -> Result<Vec<QueryResult>, QueryError> {
    let nan_as_null = sub
        .downsample
        .as_ref()
        .is_some_and(|d| d.fill == FillPolicy::Null);
    let query_json = q.original.show_query.then(|| show_query(sub));
    let mut results = Vec::with_capacity(sel.groups.len());
    for (g, members) in sel.groups.iter().enumerate() {
        let present: Vec<usize> = members.iter().copied().filter(|&p| seen[p]).collect();
        if present.is_empty() {
            continue;
        }
        let mut points = dps(g, &present);
        if q.original.padding {
            pad(&mut points, q.start_ms, q.end_ms);
        }
        stats.output_points += points.len() as u64;
        let labels = GroupLabels::of(ctx, q, sel, &present, &present, notes)?;
        results.push(labels.into_result(
            sel.metric_name.clone(),
            points,
            nan_as_null,
            query_json.clone(),
            sub,
        ));
    }
    Ok(results)
}

/// A group's points from its members' outputs: the member's own points
/// for `none`, else the group-by merge.
pub(super) fn group_points(
    sub: &ValidSubQuery,
    outs: &[&[(i64, Value)]],
    from: i64,
    to: i64,
    scratch: &mut Scratch,
) -> Vec<(i64, Value)> {
    let mut dps = Vec::new();
    if sub.aggregator.is_none() {
        if let Some(out) = outs.first() {
            dps.extend(out.iter().copied().filter(|p| p.0 >= from && p.0 <= to));
        }
    } else {
        group::aggregate(
            outs,
            &sub.aggregator,
            sub.rate.is_some(),
            from,
            to,
            scratch,
            &mut dps,
        );
    }
    dps
}

/// Keeps the points of time-sorted `dps` in `[start, end]` plus the last
/// one before `start` and the first one after `end`, where they exist.
fn pad(dps: &mut Vec<(i64, Value)>, start: i64, end: i64) {
    let first_in = dps.partition_point(|p| p.0 < start);
    let past_end = dps.partition_point(|p| p.0 <= end);
    dps.truncate((past_end + 1).min(dps.len()));
    dps.drain(..first_in.saturating_sub(1));
}

/// Parses the annotation cells a read met and keeps, per series, those
/// starting in `[start_ms, end_ms]`. Unreadable cells are skipped.
pub(super) fn series_notes(
    n: usize,
    cells: Vec<(usize, Vec<u8>)>,
    start_ms: i64,
    end_ms: i64,
) -> Vec<Vec<Annotation>> {
    let mut out = vec![Vec::new(); n];
    for (i, json) in cells {
        match Annotation::from_storage(&json) {
            Ok(a) if (start_ms..=end_ms).contains(&a.start_ms()) && i < n => out[i].push(a),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "skipping an unreadable annotation"),
        }
    }
    out
}

/// `SpanGroup.computeTags`: a key whose value differs between series goes
/// to `aggregateTags`; every other key seen in any series goes to `tags`.
/// Works on UIDs (one name per UID, so equal UIDs are equal names) and
/// resolves only the keys and values that end up in the output.
pub(super) fn compute_tags<'a>(
    ctx: &QueryContext,
    series: impl Iterator<Item = &'a Tsuid>,
) -> Result<(BTreeMap<String, String>, Vec<String>), QueryError> {
    // Few distinct keys per group: a small vector beats a map.
    let mut seen: Vec<(Uid, Option<Uid>)> = Vec::new();
    for s in series {
        for &(k, v) in &s.tags {
            match seen.iter_mut().find(|(sk, _)| *sk == k) {
                Some((_, cur)) => {
                    if cur.is_some_and(|c| c != v) {
                        *cur = None;
                    }
                }
                None => seen.push((k, Some(v))),
            }
        }
    }
    let mut tags = BTreeMap::new();
    let mut agg = Vec::new();
    for (k, v) in seen {
        let k = ctx.uids.get_name(UidKind::TagKey, k)?.to_string();
        match v {
            Some(v) => {
                tags.insert(k, ctx.uids.get_name(UidKind::TagValue, v)?.to_string());
            }
            None => agg.push(k),
        }
    }
    agg.sort();
    Ok((tags, agg))
}

/// The sub-query as `showQuery` prints it (`TSSubQuery`'s JSON).
pub(crate) fn show_query(sub: &ValidSubQuery) -> serde_json::Value {
    let o = &sub.original;
    let filters: Vec<serde_json::Value> = sub
        .filters
        .iter()
        .map(|f| {
            serde_json::json!({
                "tagk": f.tagk, "filter": f.filter, "group_by": f.group_by, "type": f.kind.name()
            })
        })
        .collect();
    serde_json::json!({
        "aggregator": sub.aggregator.name,
        "metric": sub.metric,
        "tsuids": o.tsuids,
        "downsample": o.downsample,
        "rate": o.rate,
        "filters": filters,
        "explicitTags": o.explicit_tags,
        "index": sub.index,
        "tags": o.tags,
        "rateOptions": sub.rate,
        "percentiles": o.percentiles,
        "rollupUsage": o.rollup_usage,
        "preAggregate": o.pre_aggregate,
        "showHistogramBuckets": o.show_histogram_buckets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pad_keeps_one_point_each_side() {
        let v = Value::Int(1);
        let pts = |ts: &[i64]| ts.iter().map(|&t| (t, v)).collect::<Vec<_>>();
        let mut d = pts(&[1, 2, 5, 6, 9, 10]);
        pad(&mut d, 5, 6);
        assert_eq!(d, pts(&[2, 5, 6, 9]));
        // Nothing outside: unchanged.
        let mut d = pts(&[5, 6]);
        pad(&mut d, 5, 6);
        assert_eq!(d, pts(&[5, 6]));
        // Nothing inside: the neighbours alone.
        let mut d = pts(&[1, 2, 9, 10]);
        pad(&mut d, 5, 6);
        assert_eq!(d, pts(&[2, 9]));
        let mut d: Vec<(i64, Value)> = Vec::new();
        pad(&mut d, 5, 6);
        assert!(d.is_empty());
    }
}
