//! The counters `tsdb fsck` keeps as it checks, and the summary it prints
//! at the end with OpenTSDB's labels (plus rtsdb's WAL and rollup lines).

use std::io::Write;

/// OpenTSDB's counters, printed at the end.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct FsckReport {
    pub kvs_processed: u64,
    pub rows_processed: u64,
    pub valid_datapoints: u64,
    pub annotations: u64,
    pub bad_key: u64,
    pub bad_key_fixed: u64,
    pub duplicates: u64,
    pub duplicates_fixed: u64,
    pub orphans: u64,
    pub orphans_fixed: u64,
    pub future: u64,
    pub unknown: u64,
    pub unknown_fixed: u64,
    pub bad_values: u64,
    pub bad_values_deleted: u64,
    pub value_encoding: u64,
    pub value_encoding_fixed: u64,
    pub bad_compacted_columns: u64,
    pub bad_compacted_columns_deleted: u64,
    pub fixable_compacted_columns: u64,
    pub vle: u64,
    pub vle_bytes: u64,
    pub vle_fixed: u64,
    /// The write-ahead log, read before the store opens (opening replays
    /// it): segments read, damage skipped, points that cannot be stored.
    pub wal_segments: u64,
    pub wal_damaged_frames: u64,
    pub wal_damaged_bytes: u64,
    pub wal_torn_tail_bytes: u64,
    pub wal_orphaned: u64,
    pub wal_unstorable: u64,
    /// Rows of the rollup and pre-aggregate tables read (`--full-scan`).
    pub rollup_rows: u64,
    /// Rollup rows or cells that cannot be read back.
    pub bad_rollups: u64,
}

impl FsckReport {
    pub(crate) fn total_errors(&self) -> u64 {
        self.bad_key
            + self.duplicates
            + self.orphans
            + self.unknown
            + self.bad_values
            + self.bad_compacted_columns
            + self.fixable_compacted_columns
            + self.value_encoding
            + self.wal_damaged_frames
            + self.wal_orphaned
            + self.wal_unstorable
            + self.bad_rollups
    }

    pub(crate) fn total_fixed(&self) -> u64 {
        self.bad_key_fixed
            + self.duplicates_fixed
            + self.orphans_fixed
            + self.unknown_fixed
            + self.value_encoding_fixed
            + self.bad_values_deleted
            + self.bad_compacted_columns_deleted
    }

    pub(super) fn print(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let lines: [(&str, u64); 34] = [
            ("Key Values Processed", self.kvs_processed),
            ("Rows Processed", self.rows_processed),
            ("Valid Datapoints", self.valid_datapoints),
            ("Annotations", self.annotations),
            ("Invalid Row Keys Found", self.bad_key),
            ("Invalid Rows Deleted", self.bad_key_fixed),
            ("Duplicate Datapoints", self.duplicates),
            ("Duplicate Datapoints Resolved", self.duplicates_fixed),
            ("Orphaned UID Rows", self.orphans),
            ("Orphaned UID Rows Deleted", self.orphans_fixed),
            ("Possible Future Objects", self.future),
            ("Unknown Objects", self.unknown),
            ("Unknown Objects Deleted", self.unknown_fixed),
            ("Unparseable Datapoint Values", self.bad_values),
            (
                "Unparseable Datapoint Values Deleted",
                self.bad_values_deleted,
            ),
            (
                "Improperly Encoded Floating Point Values",
                self.value_encoding,
            ),
            (
                "Improperly Encoded Floating Point Values Fixed",
                self.value_encoding_fixed,
            ),
            ("Unparseable Compacted Columns", self.bad_compacted_columns),
            (
                "Unparseable Compacted Columns Deleted",
                self.bad_compacted_columns_deleted,
            ),
            ("Datapoints Qualified for VLE ", self.vle),
            ("Datapoints Compressed with VLE", self.vle_fixed),
            ("Bytes Saved with VLE", self.vle_bytes),
            ("WAL Segments Checked", self.wal_segments),
            ("WAL Damaged Frames", self.wal_damaged_frames),
            ("WAL Damaged Bytes", self.wal_damaged_bytes),
            ("WAL Torn Tail Bytes", self.wal_torn_tail_bytes),
            ("WAL Orphaned Datapoints", self.wal_orphaned),
            ("WAL Unstorable Datapoints", self.wal_unstorable),
            ("Rollup Rows Processed", self.rollup_rows),
            ("Unreadable Rollup Rows or Cells", self.bad_rollups),
            ("Total Errors", self.total_errors()),
            ("Total Correctable Errors", self.total_errors()),
            ("Total Errors Fixed", self.total_fixed()),
            ("Compactable Rows", self.fixable_compacted_columns),
        ];
        for (label, n) in lines {
            writeln!(out, "{label}: {n}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_prints_every_counter_and_the_totals() {
        let r = FsckReport {
            bad_key: 2,
            bad_key_fixed: 1,
            orphans: 1,
            wal_damaged_frames: 3,
            bad_rollups: 1,
            ..Default::default()
        };
        assert_eq!((r.total_errors(), r.total_fixed()), (7, 1));
        let mut out = Vec::new();
        r.print(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 34);
        assert_eq!(lines[0], "Key Values Processed: 0");
        assert!(lines.contains(&"Invalid Row Keys Found: 2"));
        assert!(lines.contains(&"Invalid Rows Deleted: 1"));
        assert!(lines.contains(&"WAL Damaged Frames: 3"));
        assert!(lines.contains(&"Unreadable Rollup Rows or Cells: 1"));
        assert_eq!(
            &lines[30..],
            [
                "Total Errors: 7",
                "Total Correctable Errors: 7",
                "Total Errors Fixed: 1",
                "Compactable Rows: 0"
            ]
        );
    }
}
