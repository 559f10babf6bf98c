//! The default interval's pre-aggregate table read as data rows: what
//! OpenTSDB 2.4.1 scans for a sub-query that asks for pre-aggregates
//! (`preAggregate`, or a `literal_or` filter on `tsd.rollups.agg_tag_key`)
//! without a downsampler that picks a rollup interval
//! (`TsdbQuery.tableToBeScanned`). `/api/rollup` writes a pre-aggregate
//! without an interval there with a data-table row key and qualifier
//! (`db/rollup.rs`, docs/format/rollup.md), so its rows decode as data
//! rows do, and [`PreAggregates`] serves them through the same
//! [`SeriesSource`] the raw path reads: selection, pipelines, grouping
//! and results are the raw path's own. Pre-aggregates are written
//! straight to their table, never buffered, so nothing is merged in.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Point, PointSink, ReadStats, SeriesData, SeriesSource, hour_range};
use crate::model::row_span::row_bases;
use crate::model::{Tsuid, Uid};
use crate::storage::prefix_end;
use crate::store::histograms::HistogramRead;
use crate::store::rollup_table::RollupTable;
use crate::store::{Result, Store};

/// One pre-aggregate table (by its configured name) of a store, read as
/// data rows.
pub struct PreAggregates {
    store: Arc<Store>,
    rollups: Arc<RollupTable>,
    table: String,
}

impl PreAggregates {
    /// `table` of `rollups` (the default interval's
    /// `preAggregationTable`), its row keys laid out as `store`'s.
    pub fn new(store: Arc<Store>, rollups: Arc<RollupTable>, table: &str) -> PreAggregates {
        PreAggregates {
            store,
            rollups,
            table: table.to_string(),
        }
    }

    /// The points of one row in `[start_ms, end_ms]`, in time order, and
    /// its annotation cells.
    fn decode(
        &self,
        key: &[u8],
        cells: &crate::codec::row::RowCells,
        base: u32,
        start_ms: u64,
        end_ms: u64,
    ) -> Result<(Vec<Point>, Vec<Vec<u8>>)> {
        let decoded = self.store.decode(key, cells)?;
        let points = decoded
            .points
            .iter()
            .map(|p| Point::new(p.timestamp_ms(base), p.value))
            .filter(|p| (start_ms..=end_ms).contains(&p.timestamp_ms()))
            .collect();
        let notes = decoded.annotations.into_iter().map(|c| c.value).collect();
        Ok((points, notes))
    }
}

impl SeriesSource for PreAggregates {
    fn read_tsuids(
        &self,
        tsuids: &[Tsuid],
        start_ms: u64,
        end_ms: u64,
        sink: &mut PointSink<'_>,
    ) -> Result<ReadStats> {
        let mut stats = ReadStats::default();
        let Some((start_base, end_base)) = hour_range(start_ms, end_ms) else {
            return Ok(stats);
        };
        let layout = self.store.layout();
        for (i, tsuid) in tsuids.iter().enumerate() {
            let first = start_base.max(self.store.retention_floor(tsuid.metric));
            for base in row_bases(first, end_base) {
                let key = layout.row_key(tsuid, base);
                let Some(cells) = self.rollups.get_row(&self.table, &key)? else {
                    continue;
                };
                stats.rows += 1;
                stats.bytes += cells.cells.iter().map(|c| c.value.len()).sum::<usize>() as u64;
                let (points, notes) = self.decode(&key, &cells, base, start_ms, end_ms)?;
                stats.annotations.extend(notes.into_iter().map(|n| (i, n)));
                stats.points += points.len() as u64;
                if !points.is_empty() && !sink(i, &points) {
                    return Ok(stats);
                }
            }
        }
        Ok(stats)
    }

    fn reads_locally(&self) -> bool {
        self.store.reads_locally()
    }

    fn read_series(
        &self,
        metric: Uid,
        start_ms: u64,
        end_ms: u64,
        want: &mut dyn FnMut(&Tsuid) -> bool,
    ) -> Result<Vec<SeriesData>> {
        let Some((start_base, end_base)) = hour_range(start_ms, end_ms) else {
            return Ok(Vec::new());
        };
        let layout = self.store.layout();
        let buckets: Vec<Option<u32>> = if layout.salt.enabled() {
            (0..layout.salt.buckets).map(Some).collect()
        } else {
            vec![None]
        };
        let start_base = start_base.max(self.store.retention_floor(metric));
        let mut by_series: BTreeMap<Tsuid, Vec<Point>> = BTreeMap::new();
        for bucket in buckets {
            let start = layout.scan_prefix(bucket, metric, start_base);
            let stop = prefix_end(&layout.scan_prefix(bucket, metric, end_base));
            for row in self.rollups.scan(&self.table, &start, &stop) {
                let (key, cells) = row?;
                let row_key = layout.parse_row_key(&key)?;
                if !want(&row_key.tsuid) {
                    continue;
                }
                let (points, _) = self.decode(&key, &cells, row_key.base_time, start_ms, end_ms)?;
                if !points.is_empty() {
                    by_series.entry(row_key.tsuid).or_default().extend(points);
                }
            }
        }
        Ok(super::series_data(by_series))
    }

    /// Histograms are written to the data table only (2.4.1's
    /// `addHistogramPoint`): a pre-aggregate table holds none.
    fn read_histograms(
        &self,
        tsuids: &[Tsuid],
        _start_ms: u64,
        _end_ms: u64,
    ) -> Result<HistogramRead> {
        Ok(HistogramRead {
            series: tsuids.iter().map(|_| Vec::new()).collect(),
            annotations: Vec::new(),
        })
    }
}
