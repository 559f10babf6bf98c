//! `tsdb fsck`: checks data rows as OpenTSDB's `Fsck` does (row keys,
//! orphaned UIDs, unparseable or badly encoded values, duplicates,
//! unknown objects) plus rtsdb's own (corrupt engine values, compressed
//! block checksums), and repairs them when asked.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;

use super::Context;
use crate::codec::column;
use crate::codec::compressed;
use crate::codec::qualifier::{self, CellKind, FLAG_FLOAT, LENGTH_MASK, StoredPoint};
use crate::codec::row::{self, Cell, RowCells};
use crate::codec::row_key::RowKey;
use crate::db::DbError;
use crate::model::row_span::row_base_clamped;
use crate::model::uid::{hex_upper, java_byte_array};
use crate::model::{UidKind, Value};
use crate::storage::KeyRead;
use crate::store::Store;
use crate::store::WAL_DIR;
use crate::uid::UidTable;
use crate::write::wal;

/// Rows read per round trip: on a cluster one statement reads this many
/// rows with their versions (a statement per row made a full scan of a
/// million rows take hours).
const ROWS_PER_READ: usize = 1000;

#[derive(Debug, Args, Default)]
pub struct FsckArgs {
    /// Scan the whole data table instead of the rows of a query.
    #[arg(long)]
    pub full_scan: bool,
    /// Accepted for compatibility; rtsdb scans with one thread.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Fix errors that can be fixed without losing data.
    #[arg(long)]
    pub fix: bool,
    /// Fix everything: implies every --delete-* and --resolve-duplicates.
    #[arg(long)]
    pub fix_all: bool,
    /// Compact rows holding more than one data column.
    #[arg(long)]
    pub compact: bool,
    #[arg(long)]
    pub delete_bad_compacts: bool,
    #[arg(long)]
    pub delete_bad_rows: bool,
    #[arg(long)]
    pub delete_bad_values: bool,
    #[arg(long)]
    pub delete_orphans: bool,
    #[arg(long)]
    pub delete_unknown_columns: bool,
    #[arg(long)]
    pub resolve_duplicates: bool,
    /// Keep the most recent of duplicate values (default: the oldest, as OpenTSDB).
    #[arg(long)]
    pub last_write_wins: bool,
    /// Copy every readable entry of a damaged store into a new store in
    /// NEW_DIR and report what could not be read (rtsdb; the store in
    /// --data-dir is only read). Exits 1 if anything was lost.
    #[arg(long, value_name = "NEW_DIR")]
    pub salvage: Option<PathBuf>,
    /// [START-DATE [END-DATE] query [queries...]]
    #[arg(allow_hyphen_values = true)]
    pub query: Vec<String>,
}

impl FsckArgs {
    fn fixing(&self) -> bool {
        self.fix || self.fix_all
    }
    fn wants(&self, flag: bool) -> bool {
        self.fix_all || (self.fix && flag)
    }
}

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

    fn print(&self, out: &mut dyn Write) -> std::io::Result<()> {
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

pub(crate) fn run(
    ctx: &Context,
    a: FsckArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<i32> {
    let started = Instant::now();
    if let Some(dest) = &a.salvage {
        let src = ctx.db_options()?.data_dir;
        let report = crate::store::salvage::salvage(&src, dest)?;
        write!(out, "{report}")?;
        let lost = report.lost_anything();
        writeln!(
            out,
            "Salvaged {} into {} in {:.1}s: {}",
            src.display(),
            dest.display(),
            started.elapsed().as_secs_f64(),
            if lost {
                "some entries could not be read (listed above)"
            } else {
                "nothing was lost"
            }
        )?;
        return Ok(if lost { 1 } else { 0 });
    }
    if !a.full_scan && a.query.is_empty() {
        writeln!(
            err,
            "Usage: fsck [flags] [START-DATE [END-DATE] query [queries...]]\nScans the OpenTSDB data table for errors. Use the --full-scan flag\nto scan the entire data table or specify a command line query to scan a subset."
        )?;
        return Ok(2);
    }
    let mut report = FsckReport::default();
    // Before the store opens: opening it replays the log.
    check_wal(&ctx.db_options()?.data_dir.join(WAL_DIR), &mut report, out)?;
    let db = ctx.open_db()?;
    let (store, table): (&Store, &crate::uid::UidTable) = (db.store(), db.uids());
    let keys: Vec<Vec<u8>> = if a.full_scan {
        let mut keys = Vec::new();
        for item in store.scan_all_rows() {
            keys.push(item?.0);
        }
        keys
    } else {
        let q = match super::query_args::parse(&a.query, super::now_ms()) {
            Ok(q) => q,
            Err(e) => {
                writeln!(err, "{e}")?;
                return Ok(2);
            }
        };
        let start_s = q.start_ms / 1000;
        let end_s = q.end_ms.unwrap_or_else(super::now_ms) / 1000;
        let (start_base, end_base) = (row_base_clamped(start_s), row_base_clamped(end_s));
        let mut keys = Vec::new();
        for sub in &q.queries {
            let metric = match table.get_id(UidKind::Metric, &sub.metric) {
                Ok(m) => m,
                Err(e) => {
                    writeln!(err, "{e}")?;
                    return Ok(1);
                }
            };
            for item in store.scan_metric_rows(metric, start_base, end_base) {
                keys.push(item.map(|(k, _)| k).or_else(|e| match e {
                    // Unreadable engine values are fsck's business, not a stop.
                    crate::store::StoreError::Row { key, .. } => {
                        Ok(crate::model::uid::parse_hex(&key).unwrap_or_default())
                    }
                    other => Err(other),
                })?);
            }
        }
        keys
    };
    let progress = super::row_progress("fsck");
    for chunk in keys.chunks(ROWS_PER_READ) {
        let refs: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
        let reads = store.read_row_versions(&refs)?;
        for (key, read) in chunk.iter().zip(reads) {
            check_row(store, table, &a, key, &read, &mut report, out)?;
        }
        if let Some(pb) = &progress {
            pb.inc(chunk.len() as u64);
        }
    }
    if let Some(pb) = progress {
        pb.finish_and_clear();
    }
    if a.full_scan {
        check_rollups(&db, &mut report, out)?;
    }
    store.sync()?;
    if a.compact {
        // Beyond OpenTSDB's row compaction: let the storage engine merge
        // its files too (and drop rows past their retention), then drop
        // its journal, which only repeats what the tables now hold.
        store.compact()?;
        let dir = store.dir().map(Path::to_path_buf);
        db.close()?;
        drop(db);
        if let Some(dir) = dir {
            let freed = Store::compact_offline(&dir)?;
            writeln!(
                out,
                "Compacted the storage engine; {freed} bytes of journal released"
            )?;
        }
    }
    report.print(out)?;
    writeln!(
        out,
        "Completed fsck in [{}] seconds",
        started.elapsed().as_secs()
    )?;
    Ok(if report.total_errors() > report.total_fixed() {
        1
    } else {
        0
    })
}

/// Reads every row of the rollup and pre-aggregate tables
/// (docs/format/rollup.md) and reports those that cannot be read back: a
/// key without a table name or a row key, a value that does not decode,
/// a cell whose aggregator id is not configured, whose offset lies past
/// its row, or whose value does not match its flags. Nothing is fixed:
/// rollups are derived data, written again from their source.
fn check_rollups(
    db: &crate::db::Db,
    r: &mut FsckReport,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    use crate::rollup::codec;
    use crate::store::rollup_table::split_key;
    let layout = *db.store().layout();
    let settings = db.rollup_settings();
    for item in db.rollup_table().scan_all() {
        let (key, value) = item?;
        r.rollup_rows += 1;
        let hex = crate::model::uid::hex_upper(&key);
        let mut bad = |why: String, out: &mut dyn Write| -> std::io::Result<()> {
            r.bad_rollups += 1;
            writeln!(out, "Rollup row {hex}: {why}")
        };
        let Some((table, row_key)) = split_key(&key) else {
            bad("no table name".into(), out)?;
            continue;
        };
        let parsed = match layout.parse_row_key(row_key) {
            Ok(k) => k,
            Err(e) => {
                bad(format!("in {table}: {e}"), out)?;
                continue;
            }
        };
        let cells = match crate::rollup::columns::decode(&value) {
            Ok(c) => c,
            Err(e) => {
                bad(format!("in {table}: {e}"), out)?;
                continue;
            }
        };
        let interval = settings.and_then(|s| {
            s.config
                .intervals
                .iter()
                .find(|i| i.table == table || i.pre_agg_table == table)
        });
        for c in &cells.cells {
            let problem = match (c.qualifier.len(), interval) {
                (2, _) => column::decode_single(&c.qualifier, &c.value)
                    .err()
                    .map(|e| e.to_string()),
                (3, Some(iv)) => {
                    match codec::decode_cell(&c.qualifier, &c.value, parsed.base_time, iv) {
                        Err(e) => Some(e.to_string()),
                        Ok(cell)
                            if (cell.timestamp - parsed.base_time) / iv.interval_seconds
                                >= iv.intervals =>
                        {
                            Some(format!(
                                "offset past the {} intervals of a row",
                                iv.intervals
                            ))
                        }
                        Ok(cell)
                            if settings
                                .and_then(|s| s.config.aggregator_for(cell.aggregator_id))
                                .is_none() =>
                        {
                            Some(format!(
                                "aggregator id {} is not configured",
                                cell.aggregator_id
                            ))
                        }
                        Ok(_) => None,
                    }
                }
                // A table the configuration no longer names: its cells'
                // intervals are unknown.
                (3, None) => None,
                (n, _) => Some(format!("qualifier of {n} bytes")),
            };
            if let Some(why) = problem {
                bad(
                    format!(
                        "in {table}: cell {}: {why}",
                        crate::model::uid::java_byte_array(&c.qualifier)
                    ),
                    out,
                )?;
            }
        }
    }
    Ok(())
}

/// Reads every segment of the write-ahead log in `dir` (those waiting to
/// be replayed, and those replay moved aside because they lost frames or
/// records) and reports, per segment, its records and what cannot be
/// replayed from it. A torn last frame of the newest waiting segment is
/// what a crash leaves, not damage.
fn check_wal(dir: &Path, r: &mut FsckReport, out: &mut dyn Write) -> anyhow::Result<()> {
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

/// A data point with where it came from, for duplicate resolution.
struct Found {
    point: StoredPoint,
    /// Position of its cell in write order: higher is newer.
    order: usize,
}

fn check_row(
    store: &Store,
    table: &UidTable,
    a: &FsckArgs,
    key: &[u8],
    read: &KeyRead,
    r: &mut FsckReport,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    r.rows_processed += 1;
    let layout = store.layout();
    // Every repair replaces the row whole: on a cluster, the versions
    // other TSDs wrote would otherwise be merged back in by the next read.
    let delete_row = || store.replace_row(key, &RowCells::default());
    // 1. The row key.
    let parsed: RowKey = match layout.parse_row_key(key) {
        Ok(k) => k,
        Err(_) if is_global_annotation_row(store, key) => {
            return check_cells(store, key, read, None, a, r, out);
        }
        // A key of the right shape naming UID 0 (an annotation stored
        // under the TSUID a client gave, as OpenTSDB stores it): no UID
        // resolves it, so it is an orphan, as OpenTSDB's fsck finds it.
        Err(e) if is_zero_uid(&e) => {
            r.orphans += 1;
            writeln!(out, "Orphaned row {}: {e}", java_byte_array(key))?;
            if a.wants(a.delete_orphans) {
                delete_row()?;
                r.orphans_fixed += 1;
            }
            return Ok(());
        }
        Err(e) => {
            r.bad_key += 1;
            writeln!(out, "Invalid row key {}: {e}", java_byte_array(key))?;
            if a.wants(a.delete_bad_rows) {
                delete_row()?;
                r.bad_key_fixed += 1;
            }
            return Ok(());
        }
    };
    // 2. Every UID must resolve.
    let mut unresolved = Vec::new();
    if let Err(e) = table.get_name(UidKind::Metric, parsed.tsuid.metric) {
        unresolved.push(e.to_string());
    }
    for (k, v) in &parsed.tsuid.tags {
        if let Err(e) = table.get_name(UidKind::TagKey, *k) {
            unresolved.push(e.to_string());
        }
        if let Err(e) = table.get_name(UidKind::TagValue, *v) {
            unresolved.push(e.to_string());
        }
    }
    if !unresolved.is_empty() {
        r.orphans += 1;
        writeln!(
            out,
            "Orphaned row {} (TSUID {}): {}",
            java_byte_array(key),
            parsed.tsuid.to_hex(&layout.widths),
            unresolved.join("; ")
        )?;
        if a.wants(a.delete_orphans) {
            delete_row()?;
            r.orphans_fixed += 1;
        }
        return Ok(());
    }
    check_versions(store, key, read, &parsed, a, r, out)?;
    // A repair of the versions above made their merge the only version:
    // the value read is still what the row holds.
    check_cells(store, key, read, Some(&parsed), a, r, out)
}

fn is_zero_uid(e: &crate::codec::row_key::KeyError) -> bool {
    use crate::codec::row_key::KeyError;
    use crate::model::{TsuidError, UidError};
    matches!(
        e,
        KeyError::Uid(UidError::Zero) | KeyError::Tsuid(TsuidError::Uid(UidError::Zero))
    )
}

fn is_global_annotation_row(store: &Store, key: &[u8]) -> bool {
    let l = store.layout();
    key.len() == l.prefix_len() && key[..l.prefix_len() - 4].iter().all(|b| *b == 0)
}

fn check_cells(
    store: &Store,
    key: &[u8],
    read: &KeyRead,
    parsed: Option<&RowKey>,
    a: &FsckArgs,
    r: &mut FsckReport,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let raw = read.value.as_deref().unwrap_or_default();
    let cells = match RowCells::decode(raw) {
        Ok(c) => c,
        Err(e) => {
            r.bad_values += 1;
            writeln!(
                out,
                "Unreadable row value for {}: {e}",
                java_byte_array(key)
            )?;
            if a.wants(a.delete_bad_rows || a.delete_bad_values) {
                store.replace_row(key, &RowCells::default())?;
                r.bad_values_deleted += 1;
            }
            return Ok(());
        }
    };
    let mut found: Vec<Found> = Vec::new();
    let mut kept: Vec<Cell> = Vec::new();
    let mut data_columns = 0usize;
    let mut changed = false;
    for (order, cell) in cells.cells.iter().enumerate() {
        r.kvs_processed += 1;
        let q = &cell.qualifier;
        let unknown =
            |r: &mut FsckReport, out: &mut dyn Write, msg: &str| -> anyhow::Result<bool> {
                r.unknown += 1;
                writeln!(
                    out,
                    "{msg}\n\t{} {}={}",
                    java_byte_array(key),
                    hex_upper(q),
                    hex_upper(&cell.value)
                )?;
                if a.wants(a.delete_unknown_columns) {
                    r.unknown_fixed += 1;
                    return Ok(true);
                }
                Ok(false)
            };
        let kind = CellKind::of(q);
        let not_opentsdb = match kind {
            CellKind::TooShort => Some("Invalid qualifier, must be on 2 bytes or more."),
            CellKind::Unknown => {
                Some("Unknown qualifier, must be 2, 3, 5 or an even number of bytes.")
            }
            _ => None,
        };
        if let Some(msg) = not_opentsdb {
            let deleted = unknown(r, out, msg)?;
            changed |= deleted;
            if !deleted {
                kept.push(cell.clone());
            }
            continue;
        }
        if !matches!(kind, CellKind::Single | CellKind::Compacted) {
            let points_before = found.len();
            let bad_block = match kind {
                CellKind::Annotation => {
                    r.annotations += 1;
                    kept.push(cell.clone());
                    continue;
                }
                CellKind::Append => {
                    let mut pts = Vec::new();
                    column::decode_append(&cell.value, &mut pts)
                        .err()
                        .map(|e| e.to_string())
                        .or_else(|| {
                            found.extend(pts.into_iter().map(|point| Found { point, order }));
                            None
                        })
                }
                CellKind::Compressed => {
                    let mut pts = Vec::new();
                    compressed::decode(&cell.value, &mut pts)
                        .err()
                        .map(|e| e.to_string())
                        .or_else(|| {
                            found.extend(pts.into_iter().map(|point| Found { point, order }));
                            None
                        })
                }
                CellKind::Histogram => {
                    kept.push(cell.clone());
                    continue;
                }
                _ => {
                    r.future += 1;
                    writeln!(
                        out,
                        "Possible future object: {} {}",
                        java_byte_array(key),
                        hex_upper(q)
                    )?;
                    kept.push(cell.clone());
                    continue;
                }
            };
            match bad_block {
                None => data_columns += (found.len() > points_before) as usize,
                Some(e) => {
                    r.bad_compacted_columns += 1;
                    writeln!(out, "Corrupted column in row {}: {e}", hex_upper(key))?;
                    if a.wants(a.delete_bad_compacts) {
                        r.bad_compacted_columns_deleted += 1;
                        changed = true;
                    } else {
                        kept.push(cell.clone());
                    }
                }
            }
            continue;
        }
        if kind == CellKind::Single {
            data_columns += 1;
            match check_single(q, &cell.value, r, out, key)? {
                SingleCheck::Ok(point) => found.push(Found { point, order }),
                SingleCheck::Fixable(point) => {
                    found.push(Found { point, order });
                    if a.fixing() {
                        r.value_encoding_fixed += 1;
                        changed = true;
                    }
                }
                SingleCheck::Bad => {
                    if a.wants(a.delete_bad_values) {
                        r.bad_values_deleted += 1;
                        changed = true;
                    } else {
                        kept.push(cell.clone());
                    }
                }
            }
            continue;
        }
        data_columns += 1;
        let mut pts = Vec::new();
        match column::decode_compacted(q, &cell.value, &mut pts) {
            Ok(()) => {
                if let Some(&last) = cell.value.last()
                    && last != 0
                    && last != 1
                {
                    writeln!(
                        out,
                        "Compacted column in row {} ends in {last:#04x}, not 0x00 or 0x01",
                        hex_upper(key)
                    )?;
                }
                found.extend(pts.into_iter().map(|point| Found { point, order }));
            }
            Err(e) => {
                r.bad_compacted_columns += 1;
                writeln!(out, "Corrupted value in row {}: {e}", hex_upper(key))?;
                if a.wants(a.delete_bad_compacts) {
                    r.bad_compacted_columns_deleted += 1;
                    changed = true;
                } else {
                    kept.push(cell.clone());
                }
            }
        }
    }

    // 3. Data points: duplicates and value widths.
    let mut by_ts: BTreeMap<u32, Vec<Found>> = BTreeMap::new();
    for f in found {
        by_ts.entry(f.point.offset_ms).or_default().push(f);
    }
    let mut resolved: Vec<StoredPoint> = Vec::with_capacity(by_ts.len());
    let mut unresolved_dupes: Vec<StoredPoint> = Vec::new();
    for (offset, mut group) in by_ts {
        group.sort_by_key(|f| f.order);
        r.valid_datapoints += group.len() as u64;
        let distinct = group
            .windows(2)
            .any(|w| w[0].point.value != w[1].point.value || w[0].point.flags != w[1].point.flags);
        if group.len() > 1 {
            r.duplicates += 1;
            let base = parsed.map(|p| p.base_time as u64 * 1000).unwrap_or(0);
            writeln!(
                out,
                "More than one column had a value for the same timestamp: ({}) in row {}",
                base + offset as u64,
                java_byte_array(key)
            )?;
            if !distinct || a.wants(a.resolve_duplicates) {
                r.duplicates_fixed += 1;
                changed = true;
            } else {
                unresolved_dupes.extend(group.iter().skip(1).map(|f| f.point));
            }
        }
        // OpenTSDB keeps the oldest value unless told last-write-wins
        // (flag, or tsd.storage.fix_duplicates, rtsdb's default).
        let newest = a.last_write_wins || store.duplicates() == row::DuplicatePolicy::LastWriteWins;
        let keep = if newest { group.last() } else { group.first() };
        let mut p = match keep {
            Some(f) => f.point,
            None => continue,
        };
        // VLE: integers wider than they need to be.
        if let Value::Int(_) = p.value {
            let canonical = qualifier::encode_value(p.value).flags;
            if canonical != p.flags {
                r.vle += 1;
                r.vle_bytes += ((p.flags & LENGTH_MASK) - (canonical & LENGTH_MASK)) as u64;
                if a.fixing() {
                    p.flags = canonical;
                    r.vle_fixed += 1;
                    changed = true;
                }
            }
        }
        resolved.push(p);
    }
    if data_columns > 1 && !changed {
        r.fixable_compacted_columns += 1;
        if a.compact || a.fixing() {
            changed = true;
        }
    }
    if !changed {
        return Ok(());
    }
    // Rewrite the row: one data column (unresolved duplicates kept as
    // single cells, untouched), then every non-data cell kept.
    let mut new_row = RowCells::default();
    if !resolved.is_empty() {
        new_row
            .cells
            .push(row::encode_points(&resolved, store.encoding()));
    }
    for p in unresolved_dupes {
        new_row
            .cells
            .push(Cell::new(p.qualifier(), p.value_bytes()));
    }
    new_row.cells.extend(kept);
    store.replace_row(key, &new_row)?;
    Ok(())
}

/// On a cluster, a row several TSDs wrote has a version per writer, which
/// reads merge (a later version's point wins at the same timestamp;
/// docs/scale-out.md "The merge rule"). Points two versions both hold
/// are reported as OpenTSDB reports duplicate columns; a row of several
/// versions is compactable. With `--fix` or `--compact` the merged row,
/// what reads return, becomes the only version: at once when the
/// overlapping points agree, and with `--resolve-duplicates` (or
/// `--fix-all`) when they differ.
fn check_versions(
    store: &Store,
    key: &[u8],
    read: &KeyRead,
    parsed: &RowKey,
    a: &FsckArgs,
    r: &mut FsckReport,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let versions = &read.versions;
    if versions.len() < 2 {
        return Ok(());
    }
    // Per timestamp offset: the points of each version holding one.
    let mut by_offset: BTreeMap<u32, Vec<(usize, StoredPoint)>> = BTreeMap::new();
    for (i, v) in versions.iter().enumerate() {
        // A version that does not decode is read as the newest one as it
        // is stored (see `LayoutRows::merge`); `check_cells` reports it.
        let Ok(cells) = RowCells::decode(&v.value) else {
            continue;
        };
        let Ok(decoded) = row::decode_row(key, &cells, row::DuplicatePolicy::LastWriteWins) else {
            continue;
        };
        for p in decoded.points {
            by_offset.entry(p.offset_ms).or_default().push((i, p));
        }
    }
    let (mut overlapping, mut differing) = (0u64, 0u64);
    for (offset, group) in &by_offset {
        if group.len() < 2 {
            continue;
        }
        overlapping += 1;
        let writers: Vec<&str> = group
            .iter()
            .map(|(i, _)| versions[*i].writer.as_str())
            .collect();
        if group
            .windows(2)
            .any(|w| w[0].1.value != w[1].1.value || w[0].1.flags != w[1].1.flags)
        {
            differing += 1;
        }
        writeln!(
            out,
            "More than one version had a value for the same timestamp: ({}) in row {} (written by {})",
            parsed.base_time as u64 * 1000 + *offset as u64,
            java_byte_array(key),
            writers.join(", ")
        )?;
    }
    r.duplicates += overlapping;
    if overlapping == 0 {
        r.fixable_compacted_columns += 1;
    }
    let resolvable = differing == 0 || a.wants(a.resolve_duplicates);
    if (a.fixing() || a.compact) && resolvable {
        if let Some(merged) = &read.value {
            store.replace_row(key, &RowCells::decode(merged)?)?;
        }
        r.duplicates_fixed += overlapping;
    }
    Ok(())
}

enum SingleCheck {
    Ok(StoredPoint),
    /// Readable after OpenTSDB's read-side fix; rewriting fixes it.
    Fixable(StoredPoint),
    Bad,
}

fn check_single(
    q: &[u8],
    value: &[u8],
    r: &mut FsckReport,
    out: &mut dyn Write,
    key: &[u8],
) -> anyhow::Result<SingleCheck> {
    let flags = q[q.len() - 1] & 0x0F;
    let declared = (flags & LENGTH_MASK) as usize + 1;
    if flags & FLAG_FLOAT != 0 && value.len() != 4 && value.len() != 8 {
        r.bad_values += 1;
        writeln!(
            out,
            "This floating point value must be encoded either on 4 or 8 bytes, but it's on {} bytes. Row {} qualifier {}",
            value.len(),
            java_byte_array(key),
            hex_upper(q)
        )?;
        return Ok(SingleCheck::Bad);
    }
    match column::decode_single(q, value) {
        Ok(p) => {
            if flags & FLAG_FLOAT != 0 && declared == 4 && value.len() == 8 {
                r.value_encoding += 1;
                writeln!(
                    out,
                    "Floating point value with 8 bytes in a 4-byte column: row {} qualifier {}",
                    java_byte_array(key),
                    hex_upper(q)
                )?;
                return Ok(SingleCheck::Fixable(p));
            }
            Ok(SingleCheck::Ok(p))
        }
        Err(e) => {
            r.bad_values += 1;
            writeln!(
                out,
                "Unparseable value in row {} qualifier {}: {e}",
                java_byte_array(key),
                hex_upper(q)
            )?;
            Ok(SingleCheck::Bad)
        }
    }
}
