//! Segment files: `NNNNNNNNNNNNNNNN.wal` in the log's directory, and
//! reading one back for replay.

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};

use super::record::{self, Record};

const SEGMENT_SUFFIX: &str = ".wal";

pub(crate) fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:016}{SEGMENT_SUFFIX}"))
}

/// Segment numbers present in `dir`, ascending.
pub(crate) fn list_segments(dir: &Path) -> std::io::Result<Vec<u64>> {
    let mut out = Vec::new();
    if !dir.exists() {
        return Ok(out);
    }
    for e in fs::read_dir(dir)? {
        let name = e?.file_name();
        let name = name.to_string_lossy();
        if let Some(n) = name
            .strip_suffix(SEGMENT_SUFFIX)
            .and_then(|s| s.parse::<u64>().ok())
        {
            out.push(n);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Makes a segment's creation or removal durable.
pub(super) fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// What reading a segment found.
#[derive(Debug, Default)]
pub(crate) struct SegmentContents {
    pub records: Vec<Record>,
    /// Bytes after the last good frame (a torn or corrupt tail).
    pub bad_tail: u64,
}

/// Reads every intact frame of a segment. Reading stops at the first
/// truncated or corrupt frame: a crash can only tear the tail.
pub(crate) fn read_segment(path: &Path) -> std::io::Result<SegmentContents> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    let mut out = SegmentContents::default();
    let good = record::decode_frames(&bytes, &mut out.records);
    out.bad_tail = (bytes.len() - good) as u64;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::record::tests::{OLD_SEGMENT, old_segment_frames};
    use super::*;

    #[test]
    fn an_old_segment_is_read_back_up_to_its_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = segment_path(dir.path(), 12);
        let mut bytes = OLD_SEGMENT.to_vec();
        bytes.extend_from_slice(&[9, 0, 0, 0, 1, 2]);
        fs::write(&path, bytes).unwrap();
        fs::write(dir.path().join("notes.txt"), "not a segment").unwrap();
        let got = read_segment(&path).unwrap();
        assert_eq!(got.bad_tail, 6);
        assert_eq!(got.records, old_segment_frames().concat());
        assert_eq!(list_segments(dir.path()).unwrap(), vec![12]);
        assert_eq!(path.file_name().unwrap(), "0000000000000012.wal");
    }
}
