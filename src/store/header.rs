//! The store header: the layout a store was created with, recorded once and
//! checked on every open. Format: docs/format/store-header.md.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::StoreError;
use crate::codec::row_key::{KeyLayout, Salt};
use crate::model::uid::{UidWidth, UidWidths};

pub const HEADER_FILE: &str = "rtsdb-store.json";
pub const FORMAT_NAME: &str = "rtsdb";
pub const FORMAT_VERSION: u32 = 1;

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

    pub fn read(dir: &Path) -> Result<Option<StoreHeader>, StoreError> {
        let path = dir.join(HEADER_FILE);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let header: StoreHeader = serde_json::from_str(&text)
            .map_err(|e| StoreError::BadHeader(format!("{}: {e}", path.display())))?;
        if header.format != FORMAT_NAME {
            return Err(StoreError::BadHeader(format!(
                "{}: format is '{}', expected '{FORMAT_NAME}'",
                path.display(),
                header.format
            )));
        }
        if header.format_version != FORMAT_VERSION {
            return Err(StoreError::UnsupportedVersion {
                found: header.format_version,
                supported: FORMAT_VERSION,
            });
        }
        Ok(Some(header))
    }

    /// Writes the header so that a crash leaves either no header or a
    /// complete one: temporary file, fsync, rename, fsync of the directory.
    pub fn write_new(&self, dir: &Path) -> Result<(), StoreError> {
        let tmp = dir.join(format!("{HEADER_FILE}.tmp"));
        let mut f = File::create(&tmp)?;
        let mut text =
            serde_json::to_string_pretty(self).map_err(|e| StoreError::BadHeader(e.to_string()))?;
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
