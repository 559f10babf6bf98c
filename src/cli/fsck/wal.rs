//! `tsdb fsck`'s check of the write-ahead log: every segment waiting to be
//! replayed or moved aside as damaged, read without opening the store.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::report::FsckReport;
use crate::db::DbError;
use crate::write::wal;

/// Reads every segment of the write-ahead log in `dir` (those waiting to
/// be replayed, and those replay moved aside because they lost frames or
/// records) and reports, per segment, its records and what cannot be
/// replayed from it. A torn last frame of the newest waiting segment is
/// what a crash leaves, not damage.
pub(super) fn check_wal(dir: &Path, r: &mut FsckReport, out: &mut dyn Write) -> anyhow::Result<()> {
    let named = |path: &Path| {
        let path = path.to_path_buf();
        move |cause| DbError::Wal { path, cause }
    };
    let waiting = wal::list_segments(dir).map_err(named(dir))?;
    let last = waiting.last().copied();
    let mut paths: Vec<(PathBuf, bool)> = waiting
        .iter()
        .map(|&n| (wal::segment_path(dir, n), Some(n) == last))
        .collect();
    let kept = wal::list_damaged(dir).map_err(named(&dir.join(wal::DAMAGED_DIR)))?;
    paths.extend(kept.into_iter().map(|p| (p, false)));
    for (path, newest) in paths {
        let contents = wal::read_segment(&path).map_err(named(&path))?;
        let scan = contents.scan;
        let sum = contents.summary();
        let (mut damaged, mut damaged_bytes) = (scan.damaged_frames, scan.damaged_bytes);
        if !newest && scan.torn_tail > 0 {
            damaged += 1;
            damaged_bytes += scan.torn_tail;
        } else {
            r.wal_torn_tail_bytes += scan.torn_tail;
        }
        r.wal_segments += 1;
        r.wal_damaged_frames += damaged;
        r.wal_damaged_bytes += damaged_bytes;
        r.wal_orphaned += sum.orphaned_points;
        r.wal_unstorable += sum.unstorable_points;
        writeln!(
            out,
            "WAL segment {}: {} frames, {} datapoints, {} deletes; {damaged} damaged frames ({damaged_bytes} bytes skipped), torn tail {} bytes, {} orphaned datapoints, {} unstorable datapoints",
            path.display(),
            scan.frames,
            sum.points,
            sum.deletes,
            if newest { scan.torn_tail } else { 0 },
            sum.orphaned_points,
            sum.unstorable_points,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(dir: &Path) -> (FsckReport, String) {
        let mut r = FsckReport::default();
        let mut out = Vec::new();
        check_wal(dir, &mut r, &mut out).unwrap();
        (r, String::from_utf8(out).unwrap())
    }

    #[test]
    fn damage_is_counted_but_a_torn_tail_of_the_newest_segment_is_not() {
        let dir = tempfile::tempdir().unwrap();
        // Not a frame: its length is past any frame's.
        let older = wal::segment_path(dir.path(), 1);
        std::fs::write(&older, [b'x'; 100]).unwrap();
        // A frame header cut short: what a crash leaves.
        let newest = wal::segment_path(dir.path(), 2);
        std::fs::write(&newest, [5, 0, 0, 0]).unwrap();
        let (r, out) = check(dir.path());
        assert_eq!(
            (r.wal_segments, r.wal_damaged_frames, r.wal_damaged_bytes),
            (2, 1, 100)
        );
        assert_eq!(r.wal_torn_tail_bytes, 4);
        assert_eq!(
            out,
            format!(
                "WAL segment {}: 0 frames, 0 datapoints, 0 deletes; 1 damaged frames (100 bytes skipped), torn tail 0 bytes, 0 orphaned datapoints, 0 unstorable datapoints\n\
                 WAL segment {}: 0 frames, 0 datapoints, 0 deletes; 0 damaged frames (0 bytes skipped), torn tail 4 bytes, 0 orphaned datapoints, 0 unstorable datapoints\n",
                older.display(),
                newest.display()
            )
        );
    }

    #[test]
    fn a_torn_tail_of_a_segment_moved_aside_is_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = wal::segment_path(dir.path(), 1);
        std::fs::write(&path, [5, 0, 0, 0]).unwrap();
        wal::move_aside(dir.path(), 1).unwrap();
        let (r, _) = check(dir.path());
        assert_eq!(
            (r.wal_segments, r.wal_damaged_frames, r.wal_damaged_bytes),
            (1, 1, 4)
        );
        assert_eq!(r.wal_torn_tail_bytes, 0);
    }

    #[test]
    fn no_log_is_nothing_to_report() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(check(dir.path()), (FsckReport::default(), String::new()));
    }
}
