//! What the data rows of a [`Store`] guarantee, whichever engine holds
//! them, and the row operations built here from the store's own (the
//! UID widths of its TSUIDs, deleting a range of series' rows). The
//! database handle ([`crate::db::Db`]) writes, reads and deletes rows
//! through the store's methods; the engine below is reached through one
//! seam, [`crate::storage::KvStore`].
//!
//! The database handle keeps what is the same for every engine: the
//! write-ahead log, the hour buffers and their merge into reads, the
//! ordering of deletes after their WAL record. The store keeps only the
//! rows: the points and annotation cells of each series-hour.
//!
//! # What every engine's rows guarantee
//!
//! - **A row changes atomically.** Each call that changes a row (a
//!   [`put_points`] merge, an annotation write, a delete) is applied to
//!   that row as one read-modify-write: a concurrent reader sees the row
//!   before or after it, never half of it, and two writers of one row
//!   never lose each other's cells (the flusher writing points and an
//!   HTTP request writing an annotation into the same hour both stay).
//!   A call touching several rows is *not* atomic across them: a reader
//!   may see some of its rows changed and others not yet.
//! - **Last write wins on equal timestamps.** A point written for a
//!   series and timestamp that already has one replaces it, whatever
//!   the two values' types; a row never yields two points for one
//!   timestamp. (A store opened with the strict duplicate policy instead
//!   keeps both cells and fails the read, as OpenTSDB does; `Db` opens
//!   last-write-wins stores unless told otherwise.) Points of one call
//!   arrive with at most one per timestamp (the caller deduplicates).
//! - **Reads are per row consistent, not snapshots.** The
//!   [`SeriesSource`] reads see each row as of some moment during the
//!   read; rows written or deleted meanwhile may or may not show.
//!   Points come back sorted by time within each series.
//! - **Durable by [`sync`].** A write or delete survives a process crash
//!   once it returns (the embedded engine hands it to the OS); [`sync`]
//!   makes everything returned so far survive a power loss. The database
//!   handle deletes WAL segments only after `sync`, so an engine that
//!   acknowledges before its data is safe must not return from `sync`
//!   until it is.
//! - **Expired hours are invisible.** Rows older than the store's
//!   retention period are never returned by reads or scans, whether or
//!   not they are physically gone yet.
//!
//! A store on a new engine should pass `conformance::run` (in this
//! file, for tests), as the embedded one and a cluster's do.
//!
//! [`put_points`]: Store::put_points
//! [`sync`]: Store::sync
//! [`SeriesSource`]: super::read::SeriesSource

use std::collections::{HashMap, HashSet};

use super::{Result, Store};
use crate::model::{Tsuid, Uid, UidWidths};
use crate::storage::Durability;

impl Store {
    /// Byte width of the UIDs in this store's TSUIDs, fixed for its life
    /// (how TSUIDs are written in the WAL and parsed from hex).
    pub fn widths(&self) -> UidWidths {
        self.layout().widths
    }

    /// Deletes every row of `tsuids` whose base hour lies in
    /// `[first_hour, last_hour]` (points and annotation cells alike);
    /// returns how many rows existed and were deleted. Rows are deleted
    /// one at a time: a concurrent reader may see some gone, others not.
    pub fn delete_rows(&self, tsuids: &[Tsuid], first_hour: u32, last_hour: u32) -> Result<u64> {
        // One scan of each metric's rows in the range rather than a delete
        // per series and hour: a range may span years of hours that were
        // never written, and a scan only meets the rows that exist.
        let mut by_metric: HashMap<Uid, HashSet<&Tsuid>> = HashMap::new();
        for t in tsuids {
            by_metric.entry(t.metric).or_default().insert(t);
        }
        let mut keys = Vec::new();
        for (metric, doomed) in by_metric {
            for row in self.scan_metric_rows(metric, first_hour, last_hour) {
                let (key, _) = row?;
                if let Ok(k) = self.layout().parse_row_key(&key)
                    && doomed.contains(&k.tsuid)
                {
                    keys.push(key);
                }
            }
        }
        // (Deleted after the scan, not during it: the engine's iterator
        // need not tolerate writes under it.)
        for k in &keys {
            self.delete_row(k, Durability::Process)?;
        }
        Ok(keys.len() as u64)
    }
}

#[cfg(test)]
pub(crate) mod conformance {
    //! Behaviour every store's rows must show; run against each engine (a
    //! fresh, empty one with 3-byte UIDs and last write wins).
    use std::sync::Arc;

    use super::*;
    use crate::model::annotation::{Annotation, Changes};
    use crate::model::point::{Timestamp, Value};
    use crate::model::{TsuidBytes, UidWidth};
    use crate::store::read::{Point, SeriesSource};

    /// Rows written as the database handle writes them.
    const P: Durability = Durability::Process;

    fn uid(i: u64) -> Uid {
        Uid::new(i, UidWidth::DEFAULT).unwrap()
    }

    fn series(metric: u64, tagv: u64) -> Tsuid {
        Tsuid::new(uid(metric), vec![(uid(1), uid(tagv))]).unwrap()
    }

    /// The hours the test writes, with one empty hour either side:
    /// `read_tsuids` looks each hour up, so a read from 0 to the last
    /// row would cost a million lookups per series.
    const READ_MS: (u64, u64) = (1356994800 * 1000, 1357009200 * 1000);

    /// (series index, ms, value) of everything `read_tsuids` and
    /// `scan_tsuids` return for `tsuids` (which must share a metric) in
    /// [`READ_MS`]; both must agree.
    fn read(rows: &Store, tsuids: &[Tsuid]) -> Vec<(usize, u64, Value)> {
        let mut by_get = Vec::new();
        let (start, end) = READ_MS;
        rows.read_tsuids(tsuids, start, end, &mut |i, p: &[Point]| {
            by_get.extend(p.iter().map(|p| (i, p.timestamp_ms(), p.value())));
            true
        })
        .unwrap();
        let mut by_scan = Vec::new();
        rows.scan_tsuids(
            tsuids[0].metric,
            tsuids,
            start,
            end,
            &mut |i, p: &[Point]| {
                by_scan.extend(p.iter().map(|p| (i, p.timestamp_ms(), p.value())));
                true
            },
        )
        .unwrap();
        by_get.sort_by_key(|&(i, ms, _)| (i, ms));
        by_scan.sort_by_key(|&(i, ms, _)| (i, ms));
        assert_eq!(by_get, by_scan, "gets and scans disagree");
        by_get
    }

    fn note(tsuid: Option<&Tsuid>, start: i64, desc: &str) -> (Annotation, Changes) {
        let t = tsuid.map(|t| t.to_hex(&UidWidths::default()));
        let json = serde_json::json!({
            "tsuid": t.unwrap_or_default(),
            "startTime": start,
            "description": desc,
        });
        Annotation::parse(json.to_string().as_bytes()).unwrap()
    }

    pub(crate) fn run(rows: Arc<Store>) {
        let rows = &*rows;
        assert_eq!(rows.widths(), UidWidths::default());
        let (a, b, other) = (series(1, 1), series(1, 2), series(2, 1));
        let h0 = 1356998400u32;
        let h1 = h0 + 3600;
        let s = Timestamp::Seconds;

        // Put across two hours, then overwrite: last write wins, whatever
        // the type, and untouched points stay.
        rows.put_points(&a, &[(s(h0 + 1), Value::Int(1)), (s(h1), Value::Int(2))], P)
            .unwrap();
        rows.put_points(
            &a,
            &[(s(h0 + 1), Value::Float(1.5)), (s(h0 + 2), Value::Int(3))],
            P,
        )
        .unwrap();
        rows.put_points(&b, &[(s(h0 + 1), Value::Int(7))], P)
            .unwrap();
        rows.put_points(&other, &[(s(h0), Value::Int(9))], P)
            .unwrap();
        let ms = |t: u32| t as u64 * 1000;
        assert_eq!(
            read(rows, &[a.clone(), b.clone()]),
            vec![
                (0, ms(h0 + 1), Value::Float(1.5)),
                (0, ms(h0 + 2), Value::Int(3)),
                (0, ms(h1), Value::Int(2)),
                (1, ms(h0 + 1), Value::Int(7)),
            ]
        );
        let all = rows
            .read_series(uid(1), 0, u64::MAX / 2, &mut |_| true)
            .unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].tsuid, a);
        assert_eq!(all[0].points.len(), 3);
        let (found, stats) = rows.scan_series().unwrap();
        assert_eq!(found.get(&a).map(|s| s.last), Some(h1));
        assert_eq!(found.get(&other).map(|s| s.last), Some(h0));
        assert_eq!((stats.series, stats.bad_rows), (3, 0));

        // Annotations share the series' rows: points written after them
        // keep them, and they merge, overwrite and delete on their own.
        let (ab, bb) = (
            TsuidBytes::of(&a, &rows.widths()),
            TsuidBytes::of(&b, &rows.widths()),
        );
        let (n, c) = note(Some(&a), (h0 + 5) as i64, "outage");
        rows.sync_annotation(Some(&ab), &n, c, false, Durability::Sync)
            .unwrap();
        rows.put_points(&a, &[(s(h0 + 6), Value::Int(4))], P)
            .unwrap();
        let got = rows.get_annotation(Some(&ab), s(h0 + 5)).unwrap().unwrap();
        assert_eq!(got.description, "outage");
        assert_eq!(read(rows, std::slice::from_ref(&a)).len(), 4);
        let (g, c) = note(None, (h1 + 1) as i64, "global");
        rows.sync_annotation(None, &g, c, false, Durability::Process)
            .unwrap();
        assert_eq!(rows.global_annotations(0, u64::MAX / 2).unwrap().len(), 1);
        assert!(rows.get_annotation(Some(&bb), s(h0 + 5)).unwrap().is_none());
        assert_eq!(
            rows.annotations_in(Some(&ab), ms(h0), ms(h1))
                .unwrap()
                .len(),
            1
        );
        assert!(
            rows.annotations_in(Some(&ab), ms(h0 + 6), ms(h1))
                .unwrap()
                .is_empty()
        );
        assert!(
            rows.delete_annotation(None, s(h1 + 1), Durability::Process)
                .unwrap()
        );
        assert!(
            !rows
                .delete_annotation(None, s(h1 + 1), Durability::Process)
                .unwrap()
        );
        assert_eq!(
            rows.delete_annotations_in(Some(&ab), 0, u64::MAX / 2, Durability::Process)
                .unwrap(),
            1
        );
        assert_eq!(read(rows, std::slice::from_ref(&a)).len(), 4, "points kept");

        // Deleting an hour range removes those rows of the listed series
        // only, and counts rows, not points.
        rows.sync_annotation(Some(&ab), &n, c, false, Durability::Process)
            .unwrap();
        assert_eq!(
            rows.delete_rows(&[a.clone(), other.clone()], h0, h0)
                .unwrap(),
            2
        );
        assert_eq!(
            read(rows, &[a.clone(), b.clone()]),
            vec![(0, ms(h1), Value::Int(2)), (1, ms(h0 + 1), Value::Int(7))]
        );
        assert!(rows.get_annotation(Some(&ab), s(h0 + 5)).unwrap().is_none());
        assert_eq!(
            rows.delete_rows(std::slice::from_ref(&a), h0, h0).unwrap(),
            0
        );
        assert_eq!(
            rows.delete_rows(&[a.clone(), b.clone()], 0, u32::MAX)
                .unwrap(),
            2
        );
        assert!(read(rows, &[a.clone(), b.clone()]).is_empty());

        // Several series at once merge as one at a time would, and keep
        // an annotation in a touched row.
        rows.sync_annotation(Some(&ab), &n, c, false, Durability::Process)
            .unwrap();
        rows.put_points(&a, &[(s(h0 + 6), Value::Int(4))], P)
            .unwrap();
        rows.put_points_many(
            &[
                (
                    a.clone(),
                    vec![(s(h0 + 6), Value::Int(5)), (s(h1 + 1), Value::Int(6))],
                ),
                (b.clone(), vec![(s(h0 + 2), Value::Int(8))]),
            ],
            P,
        )
        .unwrap();
        assert_eq!(
            read(rows, &[a.clone(), b]),
            vec![
                (0, ms(h0 + 6), Value::Int(5)),
                (0, ms(h1 + 1), Value::Int(6)),
                (1, ms(h0 + 2), Value::Int(8)),
            ]
        );
        assert!(rows.get_annotation(Some(&ab), s(h0 + 5)).unwrap().is_some());
        rows.sync().unwrap();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::codec::row::DuplicatePolicy;
    use crate::codec::row_key::{KeyLayout, Salt};
    use crate::store::{Store, StoreOptions};

    #[test]
    fn embedded_engine_conforms() {
        let store = Store::in_memory(KeyLayout::default(), DuplicatePolicy::LastWriteWins);
        super::conformance::run(Arc::new(store));
        // Salted keys spread a metric over buckets; on disk the engine
        // is fjall rather than memory.
        let salted = KeyLayout {
            salt: Salt {
                width: 1,
                buckets: 4,
            },
            ..Default::default()
        };
        super::conformance::run(Arc::new(Store::in_memory(
            salted,
            DuplicatePolicy::LastWriteWins,
        )));
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        super::conformance::run(Arc::new(store));
    }
}
