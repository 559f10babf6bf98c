//! Segment files: `NNNNNNNNNNNNNNNN.wal` in the log's directory, and
//! reading one back for replay.

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};

use super::frame::{self, FrameScan};
use super::record::Record;
use crate::model::Timestamp;

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

/// Where replay moves a segment it could not store whole (damaged frames,
/// points it had to skip), for an operator to inspect; never replayed.
pub(crate) const DAMAGED_DIR: &str = "damaged";

/// Moves segment `n` of `dir` into [`DAMAGED_DIR`] under a name no earlier
/// move used (numbering restarts after an empty log), and returns where it
/// went.
pub(crate) fn move_aside(dir: &Path, n: u64) -> std::io::Result<PathBuf> {
    let aside = dir.join(DAMAGED_DIR);
    fs::create_dir_all(&aside)?;
    let from = segment_path(dir, n);
    let mut to = segment_path(&aside, n);
    for k in 1.. {
        if !to.exists() {
            break;
        }
        to = aside.join(format!("{n:016}.{k}{SEGMENT_SUFFIX}"));
    }
    fs::rename(&from, &to)?;
    sync_dir(&aside);
    sync_dir(dir);
    Ok(to)
}

/// Files moved aside by [`move_aside`], by name.
pub(crate) fn list_damaged(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let aside = dir.join(DAMAGED_DIR);
    if !aside.is_dir() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for e in fs::read_dir(&aside)? {
        let path = e?.path();
        if path.extension().is_some_and(|x| x == "wal") {
            out.push(path);
        }
    }
    out.sort();
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
    /// Frames read, the damage skipped between (and after) them, and a
    /// frame cut short at the end (a torn write: normal at the end of the
    /// segment a crash interrupted).
    pub scan: FrameScan,
}

impl SegmentContents {
    /// What the records hold, for reports (`tsdb fsck`): the points, and
    /// those that cannot be stored whatever the store holds.
    pub(crate) fn summary(&self) -> SegmentSummary {
        let mut s = SegmentSummary::default();
        let mut declared = std::collections::HashSet::new();
        for r in &self.records {
            match r {
                Record::Series { id, .. } => {
                    declared.insert(*id);
                }
                Record::Point { id, .. } => {
                    s.points += 1;
                    if !declared.contains(id) {
                        s.orphaned_points += 1;
                    }
                }
                Record::UnstorablePoint { .. } => {
                    s.points += 1;
                    s.unstorable_points += 1;
                }
                Record::Histogram { id, raw_ts, .. } => {
                    s.points += 1;
                    if !matches!(i64::try_from(*raw_ts).map(Timestamp::from_raw), Ok(Ok(_))) {
                        s.unstorable_points += 1;
                    } else if !declared.contains(id) {
                        s.orphaned_points += 1;
                    }
                }
                Record::Delete { .. } => s.deletes += 1,
            }
        }
        s
    }
}

/// Counts over a segment's records.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentSummary {
    pub points: u64,
    pub deletes: u64,
    /// Points of a series whose declaration is not in the segment (it was
    /// in a damaged frame): their names are lost, so they cannot be stored.
    pub orphaned_points: u64,
    /// Points whose timestamp no row can hold.
    pub unstorable_points: u64,
}

/// Reads every frame of a segment that can be found: a damaged frame is
/// skipped (and counted), the frames after it are read.
pub(crate) fn read_segment(path: &Path) -> std::io::Result<SegmentContents> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    let mut out = SegmentContents::default();
    out.scan = frame::decode_frames(&bytes, &mut out.records);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::frame::tests::{OLD_SEGMENT, old_segment_frames};
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
        assert_eq!(got.scan.torn_tail, 6);
        assert_eq!(got.records, old_segment_frames().concat());
        assert_eq!(list_segments(dir.path()).unwrap(), vec![12]);
        assert_eq!(path.file_name().unwrap(), "0000000000000012.wal");
    }
}
