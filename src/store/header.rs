//! The store header: the layout a store was created with, recorded once and
//! checked on every open, with a checksum of its own content so that an
//! edit or a damaged byte is refused instead of misreading every key.
//! Format: docs/format/store-header.md.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::StoreError;
use crate::codec::row_key::{KeyLayout, Salt};
use crate::model::uid::{UidWidth, UidWidths};

pub const HEADER_FILE: &str = "rtsdb-store.json";
pub const FORMAT_NAME: &str = "rtsdb";
/// Version 2 added `checksum`; version 3 the `tsdb-tree` table (trees,
/// docs/format/tree.md) and compressed WAL frames (docs/format/wal.md);
/// version 4 the `tsdb-rollup` table (rollups and pre-aggregates,
/// docs/format/rollup.md); version 5 WAL frames laid out by series
/// (record `07`, docs/format/wal.md); version 6 such frames with their
/// values bit-packed (record `08`); version 7 the rollup rows rtsdb
/// computes laid out in columns (`02`, docs/format/rollup.md); version 8
/// those columns narrowed (`03`: one flags byte for a column's cells
/// when they share it, 4-byte floats when every value is one exactly,
/// and whether a tail follows); version 9 Prometheus' stale marker (a
/// NaN with bits `0x7ff0000000000002`) in data cells as an 8-byte float
/// (docs/format/qualifier-and-value.md), where every NaN had been written
/// on 4 bytes, which keeps no payload, and series with no tag or more
/// than 8 (docs/format/row-key.md), which a store of any version lays out
/// and reads alike.
/// Older stores are read and upgraded in place by [`super::Store::open`]:
/// the header is rewritten (with its checksum), the engine creates the
/// new table empty, and their WAL and rollup rows are read as they are.
pub const FORMAT_VERSION: u32 = 9;
/// The oldest version a cluster's shared layout record may name: versions
/// 5 and 6 changed only the WAL, which each TSD of a cluster keeps in its
/// own data directory, and versions 7 and 8 only the rollup rows rtsdb
/// computes, which a cluster does not (`tsd.rollups.auto` is refused
/// there), so a cluster made by a version 4 build is the same cluster to
/// this one. Version 9's 8-byte stale markers are data cells an older
/// build reads as an ordinary NaN; a cluster's record keeps the version
/// it was created with (a new cluster records 9).
pub const OLDEST_CLUSTER_VERSION: u32 = 4;
/// The oldest version this build reads.
pub const OLDEST_READABLE_VERSION: u32 = 1;
/// Prefix of the `checksum` field: the algorithm, so that it can change.
const CHECKSUM_PREFIX: &str = "crc32:";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Widths {
    pub metric: u8,
    pub tagk: u8,
    pub tagv: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SaltSettings {
    pub width: u8,
    pub buckets: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreHeader {
    pub format: String,
    pub format_version: u32,
    pub engine: String,
    pub uid_width: Widths,
    pub salt: SaltSettings,
}

/// The file as written: the header's fields and the checksum of their
/// canonical bytes ([`StoreHeader::canonical_bytes`]).
#[derive(Serialize, Deserialize)]
struct OnDisk {
    #[serde(flatten)]
    header: StoreHeader,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    checksum: Option<String>,
}

impl StoreHeader {
    pub fn new(layout: &KeyLayout, engine: &str) -> StoreHeader {
        StoreHeader {
            format: FORMAT_NAME.into(),
            format_version: FORMAT_VERSION,
            engine: engine.into(),
            uid_width: Widths {
                metric: layout.widths.metric.bytes() as u8,
                tagk: layout.widths.tagk.bytes() as u8,
                tagv: layout.widths.tagv.bytes() as u8,
            },
            salt: SaltSettings {
                width: layout.salt.width,
                buckets: layout.salt.buckets,
            },
        }
    }

    /// The layout this header records, validated.
    pub fn layout(&self) -> Result<KeyLayout, StoreError> {
        let bad = |e: crate::model::UidError| StoreError::BadHeader(e.to_string());
        let salt = Salt {
            width: self.salt.width,
            buckets: self.salt.buckets,
        };
        validate_salt(&salt)?;
        Ok(KeyLayout {
            widths: UidWidths {
                metric: UidWidth::new(self.uid_width.metric).map_err(bad)?,
                tagk: UidWidth::new(self.uid_width.tagk).map_err(bad)?,
                tagv: UidWidth::new(self.uid_width.tagv).map_err(bad)?,
            },
            salt,
        })
    }

    /// The bytes the checksum covers: the fields in declaration order as
    /// compact JSON, without the checksum (whitespace and field order in
    /// the file do not matter; every value does).
    fn canonical_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a header serializes")
    }

    fn checksum(&self) -> String {
        format!(
            "{CHECKSUM_PREFIX}{:08x}",
            crc32fast::hash(&self.canonical_bytes())
        )
    }

    /// Reads and checks the header of the store in `dir`; `None` when there
    /// is none. A version 1 header (no checksum) is returned as read, with
    /// its `format_version` telling the caller to upgrade it.
    pub fn read(dir: &Path) -> Result<Option<StoreHeader>, StoreError> {
        let path = dir.join(HEADER_FILE);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(StoreError::BadHeader(format!("{}: {e}", path.display())));
            }
        };
        let bad = |what: String| StoreError::BadHeader(format!("{}: {what}", path.display()));
        // The version first, on its own: a newer header may have fields
        // this build does not know, and its error must name both versions.
        let version: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        if version.get("format").and_then(|f| f.as_str()) != Some(FORMAT_NAME) {
            return Err(bad(format!(
                "format is {}, expected '{FORMAT_NAME}'",
                version
                    .get("format")
                    .map_or("missing".into(), |f| f.to_string())
            )));
        }
        let found = version.get("format_version").and_then(|v| v.as_u64());
        let Some(found) = found.and_then(|v| u32::try_from(v).ok()) else {
            return Err(bad("format_version is missing or not a number".into()));
        };
        if !(OLDEST_READABLE_VERSION..=FORMAT_VERSION).contains(&found) {
            return Err(StoreError::UnsupportedVersion {
                dir: dir.display().to_string(),
                found,
                supported: FORMAT_VERSION,
            });
        }
        let on_disk: OnDisk = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let header = on_disk.header;
        if found >= 2 {
            let expected = header.checksum();
            match on_disk.checksum {
                Some(c) if c == expected => {}
                Some(c) => {
                    return Err(bad(format!(
                        "checksum {c} does not match its content ({expected}): the header was edited or damaged; put back the values the store was created with (a backup's {HEADER_FILE} has them), never different ones: every key depends on them"
                    )));
                }
                None => return Err(bad("checksum is missing".into())),
            }
        }
        Ok(Some(header))
    }

    /// Writes the header so that a crash leaves either no header or a
    /// complete one: temporary file, fsync, rename, fsync of the directory.
    pub fn write_new(&self, dir: &Path) -> Result<(), StoreError> {
        let tmp = dir.join(format!("{HEADER_FILE}.tmp"));
        let mut f = File::create(&tmp)?;
        let mut header = self.clone();
        header.format_version = FORMAT_VERSION;
        let on_disk = OnDisk {
            checksum: Some(header.checksum()),
            header,
        };
        let mut text = serde_json::to_string_pretty(&on_disk)
            .map_err(|e| StoreError::BadHeader(e.to_string()))?;
        text.push('\n');
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, dir.join(HEADER_FILE))?;
        File::open(dir)?.sync_all()?;
        Ok(())
    }
}

pub fn validate_salt(salt: &Salt) -> Result<(), StoreError> {
    if salt.width > 8 {
        return Err(StoreError::BadHeader(format!(
            "salt width must be between 0 and 8, got {}",
            salt.width
        )));
    }
    let max = match salt.width {
        1..=3 => 1u64 << (8 * salt.width),
        // OpenTSDB keeps the bucket count in a Java int.
        _ => i32::MAX as u64,
    };
    if salt.buckets == 0 || salt.buckets as u64 > max {
        return Err(StoreError::BadHeader(format!(
            "salt buckets must be between 1 and {max} for a salt width of {}, got {}",
            salt.width, salt.buckets
        )));
    }
    Ok(())
}
