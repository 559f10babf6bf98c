//! A [`Store`] on a ClickHouse cluster (`tsd.storage.backend =
//! clickhouse`; docs/scale-out.md): the same store over another
//! [`KvStore`], so every tool built on `Store` works unchanged.
//!
//! What differs from the embedded store is where the layout is recorded
//! and how the engine learns about data rows:
//! - The layout record (docs/format/clickhouse.md) lives in the
//!   cluster's [`Coordinator`] (ZooKeeper), created by the first TSD and
//!   enforced on every later one exactly as the embedded header is.
//! - [`LayoutRows`] tells the engine which part of a data row key is the
//!   series (its shard) and merges the versions several TSDs wrote of one
//!   row: later cells win per timestamp.
//!
//! The data directory still matters: it holds the TSD's write-ahead log,
//! and its lock keeps two processes from sharing one log.

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::header::{self, SaltSettings, Widths};
use super::{Result, Store, StoreError, StoreOptions, lock_dir};
use crate::codec::row::{self, DecodedRow, DuplicatePolicy, RowCells, RowEncoding};
use crate::codec::row_key::KeyLayout;
use crate::storage::KvStore;
pub use crate::storage::clickhouse::ClickHouseConfig;
use crate::storage::clickhouse::{ClickHouseStore, DataRows};
pub use crate::storage::coordinator::{Coordinator, LocalCoordinator};

/// The name of the layout record in the coordinator.
pub const LAYOUT_RECORD: &str = "layout";
/// The engine name a cluster's layout record carries.
pub const ENGINE: &str = "clickhouse";

/// What every TSD of a cluster must agree on (docs/format/clickhouse.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayoutRecord {
    pub format: String,
    pub format_version: u32,
    pub engine: String,
    pub uid_width: Widths,
    pub salt: SaltSettings,
    /// `compressed` or `classic` (`tsd.storage.row_encoding`).
    pub row_encoding: String,
}

fn encoding_name(e: RowEncoding) -> &'static str {
    match e {
        RowEncoding::Compressed => "compressed",
        RowEncoding::Classic => "classic",
    }
}

impl LayoutRecord {
    fn new(layout: &KeyLayout, encoding: RowEncoding) -> LayoutRecord {
        let h = header::StoreHeader::new(layout, ENGINE);
        LayoutRecord {
            format: h.format,
            format_version: h.format_version,
            engine: h.engine,
            uid_width: h.uid_width,
            salt: h.salt,
            row_encoding: encoding_name(encoding).into(),
        }
    }

    fn layout(&self) -> Result<KeyLayout> {
        header::StoreHeader {
            format: self.format.clone(),
            format_version: self.format_version,
            engine: self.engine.clone(),
            uid_width: self.uid_width.clone(),
            salt: self.salt.clone(),
        }
        .layout()
    }

    fn encoding(&self) -> Result<RowEncoding> {
        match self.row_encoding.as_str() {
            "compressed" => Ok(RowEncoding::Compressed),
            "classic" => Ok(RowEncoding::Classic),
            other => Err(StoreError::BadHeader(format!(
                "the cluster's layout record names row encoding '{other}'"
            ))),
        }
    }
}

/// Data-row knowledge the ClickHouse engine needs, from the key layout.
pub(crate) struct LayoutRows {
    layout: KeyLayout,
    encoding: RowEncoding,
}

impl DataRows for LayoutRows {
    fn place(&self, key: &[u8]) -> (Vec<u8>, u32) {
        let Some((at, base)) = self.hour(key) else {
            return (key.to_vec(), 0);
        };
        let mut series = key[..at].to_vec();
        series.extend_from_slice(&key[at + 4..]);
        (series, base)
    }

    fn hour(&self, key: &[u8]) -> Option<(usize, u32)> {
        let end = self.layout.prefix_len();
        let at = end.checked_sub(4)?;
        let base = key.get(at..end)?;
        Some((at, u32::from_be_bytes([base[0], base[1], base[2], base[3]])))
    }

    fn rollup_base(&self, key: &[u8]) -> u32 {
        // The row key in a rollup entry has the data table's layout.
        super::rollup_table::split_key(key).map_or(0, |(_, row_key)| self.place(row_key).1)
    }

    fn merge(&self, key: &[u8], versions: &[&[u8]]) -> Option<Vec<u8>> {
        merge_versions(key, versions, self.encoding)
    }
}

/// Folds versions (oldest first) into one row: a later version's point
/// replaces an earlier one at the same timestamp, a later annotation or
/// other object the one with the same qualifier. `None` if one does not
/// decode.
fn merge_versions(key: &[u8], versions: &[&[u8]], encoding: RowEncoding) -> Option<Vec<u8>> {
    let mut points = std::collections::BTreeMap::new();
    let mut annotations = std::collections::BTreeMap::new();
    let mut other = std::collections::BTreeMap::new();
    for v in versions {
        let cells = RowCells::decode(v).ok()?;
        let d = row::decode_row(key, &cells, DuplicatePolicy::LastWriteWins).ok()?;
        for p in d.points {
            points.insert(p.offset_ms, p);
        }
        for c in d.annotations {
            annotations.insert(c.qualifier.clone(), c);
        }
        for c in d.other {
            other.insert(c.qualifier.clone(), c);
        }
    }
    let mut merged = DecodedRow {
        points: points.into_values().collect(),
        annotations: annotations.into_values().collect(),
        other: other.into_values().collect(),
        duplicates: 0,
    };
    merged
        .annotations
        .sort_by_key(|c| crate::codec::qualifier::object_offset_ms(&c.qualifier).unwrap_or(0));
    Some(row::compact(&merged, encoding).encode())
}

/// Names this TSD among the writers of the data table: the host and the
/// data directory, so it stays the same across restarts (its versions
/// replace its own older ones) and differs between TSDs.
fn writer_name(data_dir: &Path) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    let dir = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let h = crate::model::hash::hash_bytes(0, dir.to_string_lossy().as_bytes());
    format!("{host}:{h:016x}")
}

impl Store {
    /// Opens the store of a ClickHouse cluster: `data_dir` holds only the
    /// lock (and, above, the WAL); the layout is the one the cluster's
    /// record holds, created from `opts` by the first TSD.
    pub fn open_cluster(
        data_dir: &Path,
        opts: &StoreOptions,
        config: &ClickHouseConfig,
        coordinator: Arc<dyn Coordinator>,
    ) -> Result<Store> {
        std::fs::create_dir_all(data_dir)?;
        let lock = lock_dir(data_dir, std::time::Duration::from_secs(2))?;
        let where_ = format!(
            "ClickHouse cluster '{}', database '{}'",
            config.cluster, config.database
        );
        let wanted = LayoutRecord::new(&opts.layout_for_new_store()?, opts.encoding);
        let init = serde_json::to_vec(&wanted).expect("a layout record serializes");
        let stored = coordinator.get_or_create(LAYOUT_RECORD, &init)?;
        let record: LayoutRecord = serde_json::from_slice(&stored).map_err(|e| {
            StoreError::BadHeader(format!("the layout record of the {where_}: {e}"))
        })?;
        if !(header::OLDEST_CLUSTER_VERSION..=header::FORMAT_VERSION)
            .contains(&record.format_version)
        {
            return Err(StoreError::UnsupportedVersion {
                dir: where_,
                found: record.format_version,
                supported: header::FORMAT_VERSION,
            });
        }
        if record.engine != ENGINE {
            return Err(StoreError::BadHeader(format!(
                "the layout record of the {where_} names engine '{}', not '{ENGINE}'",
                record.engine
            )));
        }
        let layout = record.layout()?;
        opts.check(Path::new(&where_), &layout)?;
        let encoding = record.encoding()?;
        if let Some(asked) = opts.explicit_encoding
            && asked != encoding
        {
            return Err(StoreError::LayoutMismatch {
                dir: where_,
                setting: "tsd.storage.row_encoding",
                stored: record.row_encoding.clone(),
                requested: encoding_name(asked).into(),
            });
        }
        let rows = Arc::new(LayoutRows { layout, encoding });
        let kv: Arc<dyn KvStore> = Arc::new(ClickHouseStore::open(
            config.clone(),
            coordinator.clone(),
            rows,
            writer_name(data_dir),
        )?);
        tracing::info!(cluster = %config.cluster, database = %config.database, ?layout, "opened the cluster store");
        let mut store = Store::assemble(
            kv,
            layout,
            opts.duplicates,
            Some(data_dir.to_path_buf()),
            Some(lock),
        );
        store.encoding = encoding;
        store.retention = opts.retention.clone();
        // Every TSD of the cluster writes these tables.
        store.shared = true;
        // One INSERT per new series would cost more than its points: the
        // flusher writes the index entries of a tick together, and tells
        // the other TSDs through the coordinator.
        // With the read cache on, a query answers from memory when no
        // TSD wrote since: the index's generation is the watched one too,
        // or its round trip would be most of such a query's time.
        let freshness = if config.read_cache_bytes > 0 {
            super::index_table::IndexFreshness::Watched
        } else {
            super::index_table::IndexFreshness::Asked
        };
        store.index = Arc::new(super::index_table::KvIndexStore::deferred(
            store.kv.clone(),
            coordinator,
            freshness,
        ));
        Ok(store)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::qualifier::StoredPoint;
    use crate::model::point::{Timestamp, Value};

    const BASE: u32 = 1_356_998_400;

    fn row(points: &[(u32, i64)]) -> Vec<u8> {
        let stored: Vec<StoredPoint> = points
            .iter()
            .map(|&(s, v)| {
                StoredPoint::new(
                    Timestamp::from_raw(i64::from(BASE + s)).unwrap(),
                    BASE,
                    Value::Int(v),
                )
                .unwrap()
                .0
            })
            .collect();
        row::compact(
            &DecodedRow {
                points: stored,
                ..Default::default()
            },
            RowEncoding::Compressed,
        )
        .encode()
    }

    #[test]
    fn later_versions_win_per_timestamp_and_keep_the_rest() {
        let key = [0u8; 13];
        let merged = merge_versions(
            &key,
            &[&row(&[(1, 10), (2, 20)]), &row(&[(2, 21), (3, 30)])],
            RowEncoding::Compressed,
        )
        .unwrap();
        assert_eq!(merged, row(&[(1, 10), (2, 21), (3, 30)]));
    }

    /// Versions merged by the cluster's read keep a stale marker's bits
    /// (store format 9): the merge decodes and encodes the row again.
    #[test]
    fn a_stale_marker_survives_the_merge_of_versions() {
        let marker = Value::Float(f64::from_bits(crate::model::point::STALE_MARKER_BITS));
        let one = |s: u32, v: Value| {
            let p = StoredPoint::new(Timestamp::Seconds(BASE + s), BASE, v)
                .unwrap()
                .0;
            row::compact(
                &DecodedRow {
                    points: vec![p],
                    ..Default::default()
                },
                RowEncoding::Compressed,
            )
            .encode()
        };
        let key = [0u8; 13];
        let merged = merge_versions(
            &key,
            &[&one(1, Value::Int(1)), &one(2, marker)],
            RowEncoding::Compressed,
        )
        .unwrap();
        let cells = RowCells::decode(&merged).unwrap();
        let decoded = row::decode_row(&key, &cells, DuplicatePolicy::LastWriteWins).unwrap();
        assert_eq!(decoded.points.len(), 2);
        assert!(decoded.points[1].value.is_stale_marker());
    }

    #[test]
    fn the_series_is_the_key_without_its_base_hour() {
        let layout = KeyLayout::default();
        let rows = LayoutRows {
            layout,
            encoding: RowEncoding::Compressed,
        };
        let end = layout.prefix_len();
        let mut key = vec![7u8; end - 4];
        key.extend_from_slice(&BASE.to_be_bytes());
        key.extend_from_slice(&[1, 2, 3, 4, 5, 6]);
        let (series, base) = rows.place(&key);
        assert_eq!(base, BASE);
        assert_eq!(series.len(), key.len() - 4);
        assert_eq!(&series[end - 4..], &[1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn a_second_tsd_with_other_widths_is_refused_naming_both_values() {
        let Some(config) = crate::storage::clickhouse::test_cluster::config("layout") else {
            return;
        };
        let coord: Arc<dyn Coordinator> = Arc::new(LocalCoordinator::new());
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let first = Store::open_cluster(a.path(), &StoreOptions::default(), &config, coord.clone())
            .unwrap();
        let wide = StoreOptions {
            metric_width: Some(4),
            ..Default::default()
        };
        let err = Store::open_cluster(b.path(), &wide, &config, coord.clone())
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("tsd.storage.uid.width.metric = 3"), "{err}");
        assert!(err.contains("asks for 4"), "{err}");
        assert!(err.contains(&config.database), "{err}");
        let same = Store::open_cluster(b.path(), &StoreOptions::default(), &config, coord).unwrap();
        assert_eq!(same.layout(), first.layout());
        let kv = first.kv().clone();
        drop((first, same));
        drop(kv);
        drop_database(&config);
    }

    #[test]
    fn rows_on_the_cluster_conform() {
        let Some(config) = crate::storage::clickhouse::test_cluster::config("rows") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_cluster(
            dir.path(),
            &StoreOptions::default(),
            &config,
            Arc::new(LocalCoordinator::new()),
        )
        .unwrap();
        crate::store::rows::conformance::run(Arc::new(store));
        drop_database(&config);
    }

    fn drop_database(config: &ClickHouseConfig) {
        let store = ClickHouseStore::open(
            config.clone(),
            Arc::new(LocalCoordinator::new()),
            Arc::new(crate::storage::clickhouse::OpaqueRows),
            "cleanup".into(),
        )
        .unwrap();
        crate::storage::clickhouse::test_cluster::drop_database(&store);
    }
}
