//! The write-ahead log: every accepted point is appended here before it
//! is acknowledged. Format: docs/format/wal.md.
//!
//! Split as Prometheus splits `tsdb/record` from `tsdb/wlog`, so the byte
//! format can be read and tested apart from the files and the thread:
//!
//! - `record`: records and their frames (length + CRC-32), encoded and
//!   decoded; pure functions over bytes.
//! - `columns`: the columnar body of a compressed batch of points.
//! - `segment`: segment file names, listing them, reading one back.
//! - `writer`: the [`Wal`] handle and its writer thread (group commit,
//!   fdatasync, rotation, deleting segments the store no longer needs).

mod columns;
mod record;
mod segment;
mod writer;

pub(crate) use record::Record;
pub(crate) use segment::{
    DAMAGED_DIR, list_damaged, list_segments, move_aside, read_segment, segment_path,
};
pub use writer::{Appended, PendingHistogram, PendingPoint, WalError};
pub(crate) use writer::{Wal, WalOptions};
