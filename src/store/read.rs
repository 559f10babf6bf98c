//! Reading whole series back: the interface the query engine consumes,
//! implemented by the store (rows on disk) and by the write path (rows on
//! disk merged with points still buffered in memory).

use crate::codec::row_key::Tsuid;
use crate::model::Uid;
use crate::model::point::Value;

use super::{Result, Store};

/// One point of a series read back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub timestamp_ms: u64,
    pub value: Value,
}

/// A series' points in a time range, sorted by time, one per timestamp.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesData {
    pub tsuid: Tsuid,
    pub points: Vec<Point>,
}

/// Source of series data for queries.
pub trait SeriesSource: Send + Sync {
    /// Every series of `metric` with at least one point in
    /// `[start_ms, end_ms]` for which `want` returns true, with its points
    /// in that range.
    fn read_series(
        &self,
        metric: Uid,
        start_ms: u64,
        end_ms: u64,
        want: &mut dyn FnMut(&Tsuid) -> bool,
    ) -> Result<Vec<SeriesData>>;
}

impl SeriesSource for Store {
    fn read_series(
        &self,
        metric: Uid,
        start_ms: u64,
        end_ms: u64,
        want: &mut dyn FnMut(&Tsuid) -> bool,
    ) -> Result<Vec<SeriesData>> {
        let start_s = start_ms / 1000;
        let end_s = (end_ms / 1000).min(u32::MAX as u64);
        let start_base = (start_s - start_s % 3600).min(u32::MAX as u64) as u32;
        let end_base = (end_s - end_s % 3600) as u32;
        let mut by_series: std::collections::BTreeMap<Tsuid, Vec<Point>> = Default::default();
        for item in self.scan_metric_rows(metric, start_base, end_base) {
            let (key, cells) = item?;
            let row_key = self.layout().parse_row_key(&key)?;
            if !want(&row_key.tsuid) {
                continue;
            }
            let decoded = self.decode(&key, &cells)?;
            let points: Vec<Point> = decoded
                .points
                .iter()
                .map(|p| Point {
                    timestamp_ms: p.timestamp_ms(row_key.base_time),
                    value: p.value,
                })
                .filter(|p| (start_ms..=end_ms).contains(&p.timestamp_ms))
                .collect();
            if !points.is_empty() {
                by_series.entry(row_key.tsuid).or_default().extend(points);
            }
        }
        // Rows of one series come in hour order within a salt bucket, and a
        // series lives in one bucket, so each list is already sorted.
        Ok(by_series
            .into_iter()
            .map(|(tsuid, points)| SeriesData { tsuid, points })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::row::DuplicatePolicy;
    use crate::codec::row_key::KeyLayout;
    use crate::model::{Timestamp, UidWidth};
    use crate::storage::Durability;

    #[test]
    fn reads_series_across_hours_with_filter() {
        let store = Store::in_memory(KeyLayout::default(), DuplicatePolicy::LastWriteWins);
        let u = |i| Uid::new(i, UidWidth::DEFAULT).unwrap();
        let a = Tsuid::new(u(1), vec![(u(1), u(1))]).unwrap();
        let b = Tsuid::new(u(1), vec![(u(1), u(2))]).unwrap();
        for t in [&a, &b] {
            store
                .put_points(
                    t,
                    &[
                        (Timestamp::Seconds(1356998399), Value::Int(0)),
                        (Timestamp::Seconds(1356998400), Value::Int(1)),
                        (Timestamp::Seconds(1357002000), Value::Int(2)),
                    ],
                    Durability::Process,
                )
                .unwrap();
        }
        let got = store
            .read_series(u(1), 1356998400000, 1357002000000, &mut |t| t == &a)
            .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].tsuid, a);
        assert_eq!(
            got[0]
                .points
                .iter()
                .map(|p| p.timestamp_ms)
                .collect::<Vec<_>>(),
            vec![1356998400000, 1357002000000]
        );
        let all = store.read_series(u(1), 0, u64::MAX, &mut |_| true).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].points.len(), 3);
    }
}
