//! OpenTSDB's meta objects (spec section 7): UIDMeta, stored in the UID's
//! reverse row of `tsdb-uid`, and TSMeta, stored in `tsdb-meta` under the
//! TSUID, with the per-series counters behind `lastReceived` and
//! `totalDatapoints`. Format: docs/format/meta-table.md.
//!
//! What the write path keeps as points arrive follows `tsd.core.meta.*`
//! ([`MetaTracking`]), all off by default as in OpenTSDB: real-time
//! UIDMeta for new names, a TSMeta for each new series, and the per-series
//! counter (a mark, or a count). The counters are not written per point:
//! the write path counts in memory ([`crate::write::Series`]) and stores
//! what it counted from time to time and at shutdown
//! ([`MetaStore::add_counters`]).
//!
//! Meta objects persist through a [`MetaStore`], so they can live in
//! another engine than the data rows; the embedded one is
//! `crate::store::meta_table::KvMetaStore`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize, Serializer};

use crate::model::Tsuid;
use crate::model::{Uid, UidKind};
use crate::storage::StorageError;
use crate::uid::{UidTable, UidTableError};

/// TSMeta JSON qualifier in `tsdb-meta`.
pub const TS_META: &[u8] = b"ts_meta";
/// Data point counter (8-byte signed big-endian), as OpenTSDB's `ts_ctr`.
pub const TS_CTR: &[u8] = b"ts_ctr";
/// Last time (epoch seconds, 8 bytes big-endian) a point was received.
/// OpenTSDB reads this from the HBase timestamp of `ts_ctr`; engine
/// entries have no timestamps, so it is a cell of its own.
pub const TS_LAST: &[u8] = b"ts_last";

pub type Custom = Option<BTreeMap<String, String>>;

/// UIDMeta as the HTTP API serializes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UidMeta {
    pub uid: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub name: String,
    pub description: String,
    pub notes: String,
    pub created: u64,
    pub custom: Custom,
    #[serde(rename = "displayName")]
    pub display_name: String,
}

/// The stored part of a UIDMeta (field order fixed, as OpenTSDB writes it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UidMetaFields {
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(rename = "displayName", default)]
    pub display_name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub notes: String,
    #[serde(default)]
    pub created: u64,
    #[serde(default)]
    pub custom: Custom,
}

fn nan_as_string<S: Serializer>(v: &f64, s: S) -> std::result::Result<S::Ok, S::Error> {
    if v.is_nan() {
        s.serialize_str("NaN")
    } else {
        s.serialize_f64(*v)
    }
}

fn nan_from_any<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<f64, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    Ok(match v {
        serde_json::Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
        serde_json::Value::String(s) => s.trim().parse().unwrap_or(f64::NAN),
        _ => f64::NAN,
    })
}

fn nan() -> f64 {
    f64::NAN
}

/// The stored, user-editable part of a TSMeta.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TsMetaFields {
    #[serde(default)]
    pub tsuid: String,
    #[serde(rename = "displayName", default)]
    pub display_name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub notes: String,
    #[serde(default)]
    pub created: u64,
    #[serde(default)]
    pub custom: Custom,
    #[serde(default)]
    pub units: String,
    #[serde(rename = "dataType", default)]
    pub data_type: String,
    #[serde(default)]
    pub retention: i64,
    #[serde(
        serialize_with = "nan_as_string",
        deserialize_with = "nan_from_any",
        default = "nan"
    )]
    pub max: f64,
    #[serde(
        serialize_with = "nan_as_string",
        deserialize_with = "nan_from_any",
        default = "nan"
    )]
    pub min: f64,
}

impl TsMetaFields {
    pub fn new(tsuid: String, created: u64) -> TsMetaFields {
        TsMetaFields {
            tsuid,
            display_name: String::new(),
            description: String::new(),
            notes: String::new(),
            created,
            custom: None,
            units: String::new(),
            data_type: String::new(),
            retention: 0,
            max: f64::NAN,
            min: f64::NAN,
        }
    }
}

/// TSMeta as the HTTP API serializes it.
#[derive(Debug, Clone, Serialize)]
pub struct TsMeta {
    pub tsuid: String,
    pub metric: UidMeta,
    pub tags: Vec<UidMeta>,
    pub description: String,
    pub notes: String,
    pub created: u64,
    /// Jackson orders TSMeta's properties by field declaration (`custom`
    /// comes right after `created`) and the class is `NON_NULL`, so an
    /// unset map is left out rather than written as `null`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub custom: Custom,
    pub units: String,
    pub retention: i64,
    #[serde(serialize_with = "nan_as_string")]
    pub max: f64,
    #[serde(serialize_with = "nan_as_string")]
    pub min: f64,
    #[serde(rename = "displayName")]
    pub display_name: String,
    #[serde(rename = "dataType")]
    pub data_type: String,
    #[serde(rename = "lastReceived")]
    pub last_received: u64,
    #[serde(rename = "totalDatapoints")]
    pub total_datapoints: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    #[error(transparent)]
    Uid(#[from] UidTableError),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("corrupt meta cell: {0}")]
    Corrupt(String),
}

pub type Result<T> = std::result::Result<T, MetaError>;

/// Points counted for one series since the last save: (TSUID bytes,
/// points, last time a point was received in epoch seconds).
pub type CounterDelta = (Vec<u8>, u64, u64);

/// `tsd.core.meta.*`: which meta objects and counters the write path
/// keeps, as OpenTSDB 2.4.1's `TSDB.addPointInternal` and `UniqueId` do.
/// All off by default, as in OpenTSDB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MetaTracking {
    /// `enable_realtime_uid`: a UIDMeta (with `created`) is stored for
    /// every new UID.
    pub realtime_uid: bool,
    /// `enable_realtime_ts`: with tracking, a TSMeta (with `created`) is
    /// stored when a series first appears.
    pub realtime_ts: bool,
    /// `enable_tsuid_tracking`: series that receive points are marked in
    /// the meta table (`ts_ctr`, and the time of the last point).
    pub tsuid_tracking: bool,
    /// `enable_tsuid_incrementing`: with tracking and real-time TSMeta,
    /// `ts_ctr` counts every point instead of being set to 1.
    pub tsuid_incrementing: bool,
}

/// How points change a series' stored counter ([`MetaTracking::counting`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counting {
    /// Nothing is written (tracking off).
    Off,
    /// `ts_ctr` is set to 1 and the last-received time updated: OpenTSDB's
    /// tracking put of `Bytes.fromLong(1)`.
    MarkSeen,
    /// `ts_ctr` counts the points (`TSMeta.incrementAndGetCounter`).
    Increment,
}

impl MetaTracking {
    /// OpenTSDB's branches: tracking off writes nothing; tracking with
    /// real-time TSMeta and incrementing counts; other tracking marks.
    pub fn counting(&self) -> Counting {
        if !self.tsuid_tracking {
            Counting::Off
        } else if self.realtime_ts && self.tsuid_incrementing {
            Counting::Increment
        } else {
            Counting::MarkSeen
        }
    }

    /// Whether a series' TSMeta is stored when it first appears
    /// (`TSMeta.storeIfNecessary` / the counter's first increment).
    pub fn creates_ts_meta(&self) -> bool {
        self.tsuid_tracking && self.realtime_ts
    }
}

/// The persistence of meta objects and per-series counters.
///
/// Series are named by their TSUID bytes, UIDs by kind and [`Uid`] (the
/// implementation knows the widths). Every method is atomic on its own:
/// a reader sees a meta object as it was before or after a write, never
/// half of it; a write survives a process crash once it returns. Nothing
/// orders two calls against each other: a TSD that reads a TSMeta while
/// another request rewrites it sees either version.
pub trait MetaStore: Send + Sync {
    /// The stored UIDMeta fields of a UID (`None` if none are stored).
    /// Whether the UID has a name is not this trait's business.
    fn uid_meta(&self, kind: UidKind, uid: Uid) -> Result<Option<UidMetaFields>>;

    /// Stores the UIDMeta fields of a UID, replacing what was stored,
    /// with `type` set to the kind's type name (as OpenTSDB writes it).
    fn put_uid_meta(&self, kind: UidKind, uid: Uid, fields: &UidMetaFields) -> Result<()>;

    /// Deletes the UIDMeta of a UID (nothing if there is none).
    fn delete_uid_meta(&self, kind: UidKind, uid: Uid) -> Result<()>;

    /// The stored TSMeta fields of a series, if any.
    fn ts_fields(&self, tsuid: &[u8]) -> Result<Option<TsMetaFields>>;

    /// Stores the TSMeta fields of a series, replacing what was stored.
    fn put_ts_fields(&self, tsuid: &[u8], fields: &TsMetaFields) -> Result<()>;

    /// Deletes the TSMeta fields of a series; its counters stay, as in
    /// OpenTSDB, where deleting a TSMeta leaves `ts_ctr`.
    fn delete_ts_fields(&self, tsuid: &[u8]) -> Result<()>;

    /// (`totalDatapoints`, `lastReceived`) as stored; (0, 0) if never
    /// counted.
    fn counters(&self, tsuid: &[u8]) -> Result<(u64, u64)>;

    /// Adds each delta's points to its series' total and raises its last
    /// received time to the delta's if later, all series in one atomic
    /// step (all or none after a crash).
    ///
    /// Concurrency: the database handle calls this from one thread at a
    /// time (its `counters` lock), so the embedded engine may read, add
    /// and write back. An engine shared by several TSDs must make the
    /// addition itself atomic (a counter increment, a summing table) so
    /// that two TSDs adding to one series lose nothing; a lost update of
    /// the last received time is harmless as long as it only grows.
    fn add_counters(&self, deltas: &[CounterDelta], how: Counting) -> Result<()>;

    /// `uid metapurge`: deletes every UIDMeta and every TSMeta with its
    /// counters, in one atomic step. Series written meanwhile may get new
    /// counters right after.
    fn purge(&self) -> Result<PurgeStats>;
}

/// The UIDMeta of an existing UID: its stored fields, or the default
/// object (empty strings, `created` 0) when none are stored. Fails with
/// `NoSuchId` when the UID has no name.
pub fn uid_meta_of(
    meta: &dyn MetaStore,
    uids: &UidTable,
    kind: UidKind,
    uid: Uid,
) -> Result<UidMeta> {
    let name = uids.get_name(kind, uid)?;
    let f = meta.uid_meta(kind, uid)?.unwrap_or_default();
    Ok(UidMeta {
        uid: uid.to_hex(uids.width(kind)),
        kind: kind.type_name(),
        name: name.to_string(),
        description: f.description,
        notes: f.notes,
        created: f.created,
        custom: f.custom,
        display_name: f.display_name,
    })
}

/// The full TSMeta of a series with a stored TSMeta object (`None`
/// otherwise). Names that no longer resolve fail with `NoSuchId`.
pub fn ts_meta_of(
    meta: &dyn MetaStore,
    uids: &UidTable,
    tsuid: &Tsuid,
    bytes: &[u8],
) -> Result<Option<TsMeta>> {
    let Some(f) = meta.ts_fields(bytes)? else {
        return Ok(None);
    };
    let metric = uid_meta_of(meta, uids, UidKind::Metric, tsuid.metric)?;
    let mut tags = Vec::with_capacity(tsuid.tags.len() * 2);
    for (k, v) in &tsuid.tags {
        tags.push(uid_meta_of(meta, uids, UidKind::TagKey, *k)?);
        tags.push(uid_meta_of(meta, uids, UidKind::TagValue, *v)?);
    }
    let (total, last) = meta.counters(bytes)?;
    Ok(Some(TsMeta {
        tsuid: crate::model::uid::hex_upper(bytes),
        metric,
        tags,
        description: f.description,
        notes: f.notes,
        created: f.created,
        units: f.units,
        retention: f.retention,
        max: f.max,
        min: f.min,
        custom: f.custom,
        display_name: f.display_name,
        data_type: f.data_type,
        last_received: last,
        total_datapoints: total,
    }))
}

/// Counts from [`MetaStore::purge`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PurgeStats {
    pub uid_meta: u64,
    pub ts_rows: u64,
}
