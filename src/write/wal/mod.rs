//! The write-ahead log: every accepted point is appended here before it
//! is acknowledged. Format: docs/format/wal.md.
//!
//! Split as Prometheus splits `tsdb/record` from `tsdb/wlog`, so the byte
//! format can be read and tested apart from the files and the thread;
//! each file uses only the ones listed before it:
//!
//! - `record`: records, encoded and decoded one by one; pure functions
//!   over bytes.
//! - `columns`: the columnar body of a compressed batch of points, and
//!   the size of a batch.
//! - `frame`: frames (length + CRC-32) around records, a batch compressed
//!   into one frame, and reading frames back past damage.
//! - `segment`: segment file names, listing them, reading one back.
//! - `writer`: the [`Wal`] handle and its writer thread (group commit,
//!   fdatasync, rotation, deleting segments the store no longer needs).

mod columns;
mod frame;
mod record;
mod segment;
mod writer;

pub(crate) use record::Record;
pub(crate) use segment::{
    DAMAGED_DIR, list_damaged, list_segments, move_aside, read_segment, segment_path,
};
pub use writer::{Appended, PendingHistogram, PendingPoint, WalError};
pub(crate) use writer::{Wal, WalOptions};
