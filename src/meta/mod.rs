//! OpenTSDB's meta objects (spec section 7): UIDMeta, stored in the UID's
//! reverse row of `tsdb-uid`, and TSMeta, stored in `tsdb-meta` under the
//! TSUID, with the per-series counters behind `lastReceived` and
//! `totalDatapoints`. Format: docs/format/meta-table.md.
//!
//! The counters are not written per point: the write path counts in
//! memory ([`crate::write::Series`]) and adds what it counted here from
//! time to time and at shutdown ([`add_counters`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize, Serializer};

use crate::model::Tsuid;
use crate::model::{Uid, UidKind};
use crate::storage::{KvStore, ScanRange, StorageError, Table, WriteBatch};
use crate::uid::keys::{FAMILY_NAME, cell_key, split_cell_key, uid_meta};
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

/// The stored UIDMeta fields of a UID (`None` if there is no meta cell).
pub fn read_uid_meta(
    kv: &dyn KvStore,
    uids: &UidTable,
    kind: UidKind,
    uid: Uid,
) -> Result<Option<UidMetaFields>> {
    let bytes = uid.to_bytes(uids.width(kind));
    decode(kv.get(Table::Uid, &uid_meta(kind, &bytes))?)
}

/// A stored JSON meta cell, if there is one.
fn decode<T: serde::de::DeserializeOwned>(cell: Option<Vec<u8>>) -> Result<Option<T>> {
    cell.map(|v| serde_json::from_slice(&v).map_err(|e| MetaError::Corrupt(e.to_string())))
        .transpose()
}

/// The UIDMeta of an existing UID: its stored fields, or the default
/// object (empty strings, `created` 0) when none are stored. Fails with
/// `NoSuchId` when the UID has no name.
pub fn uid_meta_of(kv: &dyn KvStore, uids: &UidTable, kind: UidKind, uid: Uid) -> Result<UidMeta> {
    let name = uids.get_name(kind, uid)?;
    let f = read_uid_meta(kv, uids, kind, uid)?.unwrap_or_default();
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

/// Writes the UIDMeta cell of a UID.
pub fn write_uid_meta(
    kv: &dyn KvStore,
    uids: &UidTable,
    kind: UidKind,
    uid: Uid,
    f: &UidMetaFields,
) -> Result<()> {
    let mut stored = f.clone();
    stored.kind = kind.type_name().to_string();
    let mut b = WriteBatch::new();
    b.put(
        Table::Uid,
        uid_meta(kind, &uid.to_bytes(uids.width(kind))),
        serde_json::to_vec(&stored).expect("json"),
    );
    kv.write(b)?;
    Ok(())
}

/// Deletes the UIDMeta cell of a UID.
pub fn delete_uid_meta(kv: &dyn KvStore, uids: &UidTable, kind: UidKind, uid: Uid) -> Result<()> {
    let mut b = WriteBatch::new();
    b.delete(Table::Uid, uid_meta(kind, &uid.to_bytes(uids.width(kind))));
    kv.write(b)?;
    Ok(())
}

fn meta_key(tsuid: &[u8], qualifier: &[u8]) -> Vec<u8> {
    cell_key(tsuid, FAMILY_NAME, qualifier)
}

fn read_u64(kv: &dyn KvStore, key: &[u8]) -> Result<u64> {
    Ok(match kv.get(Table::Meta, key)? {
        Some(v) if v.len() == 8 => i64::from_be_bytes(v.try_into().expect("8 bytes")).max(0) as u64,
        Some(v) => return Err(MetaError::Corrupt(format!("counter of {} bytes", v.len()))),
        None => 0,
    })
}

/// The stored TSMeta fields of a series, if any.
pub fn read_ts_fields(kv: &dyn KvStore, tsuid: &[u8]) -> Result<Option<TsMetaFields>> {
    decode(kv.get(Table::Meta, &meta_key(tsuid, TS_META))?)
}

pub fn write_ts_fields(kv: &dyn KvStore, tsuid: &[u8], f: &TsMetaFields) -> Result<()> {
    let mut b = WriteBatch::new();
    b.put(
        Table::Meta,
        meta_key(tsuid, TS_META),
        serde_json::to_vec(f).expect("json"),
    );
    kv.write(b)?;
    Ok(())
}

/// Deletes the TSMeta object of a series (its counters stay, as in
/// OpenTSDB, where deleting a TSMeta leaves `ts_ctr`).
pub fn delete_ts_fields(kv: &dyn KvStore, tsuid: &[u8]) -> Result<()> {
    let mut b = WriteBatch::new();
    b.delete(Table::Meta, meta_key(tsuid, TS_META));
    kv.write(b)?;
    Ok(())
}

/// (`totalDatapoints`, `lastReceived`) as stored.
pub fn read_counters(kv: &dyn KvStore, tsuid: &[u8]) -> Result<(u64, u64)> {
    Ok((
        read_u64(kv, &meta_key(tsuid, TS_CTR))?,
        read_u64(kv, &meta_key(tsuid, TS_LAST))?,
    ))
}

/// Adds counted points to the stored counters of each series, in one
/// batch: `(tsuid bytes, points, last received seconds)`.
pub fn add_counters(kv: &dyn KvStore, deltas: &[(Vec<u8>, u64, u64)]) -> Result<()> {
    if deltas.is_empty() {
        return Ok(());
    }
    let mut b = WriteBatch::new();
    for (tsuid, n, last) in deltas {
        let (count, stored_last) = read_counters(kv, tsuid).unwrap_or((0, 0));
        b.put(
            Table::Meta,
            meta_key(tsuid, TS_CTR),
            ((count + n) as i64).to_be_bytes().to_vec(),
        );
        b.put(
            Table::Meta,
            meta_key(tsuid, TS_LAST),
            ((*last).max(stored_last) as i64).to_be_bytes().to_vec(),
        );
    }
    kv.write(b)?;
    Ok(())
}

/// The full TSMeta of a series with a stored TSMeta object (`None`
/// otherwise). Names that no longer resolve fail with `NoSuchId`.
pub fn ts_meta_of(
    kv: &dyn KvStore,
    uids: &UidTable,
    tsuid: &Tsuid,
    bytes: &[u8],
) -> Result<Option<TsMeta>> {
    let Some(f) = read_ts_fields(kv, bytes)? else {
        return Ok(None);
    };
    let metric = uid_meta_of(kv, uids, UidKind::Metric, tsuid.metric)?;
    let mut tags = Vec::with_capacity(tsuid.tags.len() * 2);
    for (k, v) in &tsuid.tags {
        tags.push(uid_meta_of(kv, uids, UidKind::TagKey, *k)?);
        tags.push(uid_meta_of(kv, uids, UidKind::TagValue, *v)?);
    }
    let (total, last) = read_counters(kv, bytes)?;
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

/// Counts from [`purge`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PurgeStats {
    pub uid_meta: u64,
    pub ts_rows: u64,
}

/// `uid metapurge`: deletes every UIDMeta cell and every `tsdb-meta` cell.
pub fn purge(kv: &dyn KvStore) -> Result<PurgeStats> {
    let mut stats = PurgeStats::default();
    let mut b = WriteBatch::new();
    for item in kv.scan(Table::Uid, &ScanRange::default()) {
        let (key, _) = item?;
        if let Some((_, family, qualifier)) = split_cell_key(&key)
            && family == FAMILY_NAME
            && qualifier.ends_with(b"_meta")
        {
            b.delete(Table::Uid, key.clone());
            stats.uid_meta += 1;
        }
    }
    let mut last_row: Option<Vec<u8>> = None;
    for item in kv.scan(Table::Meta, &ScanRange::default()) {
        let (key, _) = item?;
        if let Some((row, _, _)) = split_cell_key(&key)
            && last_row.as_deref() != Some(row)
        {
            stats.ts_rows += 1;
            last_row = Some(row.to_vec());
        }
        b.delete(Table::Meta, key);
    }
    kv.write(b)?;
    Ok(stats)
}
