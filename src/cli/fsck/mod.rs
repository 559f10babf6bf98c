//! `tsdb fsck`: checks data rows as OpenTSDB's `Fsck` does (row keys,
//! orphaned UIDs, unparseable or badly encoded values, duplicates,
//! unknown objects) plus rtsdb's own (corrupt engine values, compressed
//! block checksums, a row's versions on a cluster, the write-ahead log,
//! the rollup tables), and repairs them when asked.
//!
//! This file holds the command: its arguments, which rows it reads, and
//! the run; each thing checked has its own file: [`rows`] (row keys and
//! their UIDs), [`versions`] (a row's versions on a cluster), [`cells`]
//! (a row's cells and points, and the row rewritten), [`wal`] (the
//! write-ahead log) and [`rollups`] (the rollup tables), each counting
//! into [`report::FsckReport`], which prints the summary.

mod cells;
mod report;
mod rollups;
mod rows;
mod versions;
mod wal;

#[cfg(test)]
mod fixture;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;

use super::Context;
use crate::model::UidKind;
use crate::model::row_span::row_base_clamped;
use crate::store::{Store, WAL_DIR};
use crate::uid::UidTable;
use report::FsckReport;

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
    /// Whether any repair was asked for.
    fn fixing(&self) -> bool {
        self.fix || self.fix_all
    }
    /// Whether the repair `flag` names is to be done.
    fn wants(&self, flag: bool) -> bool {
        self.fix_all || (self.fix && flag)
    }
}

/// Runs `tsdb fsck`: a salvage when asked for one, else the WAL, then
/// the rows asked for (and the rollup tables on a full scan), checked and
/// repaired as `a` asks, and the summary. Returns the exit code.
pub(crate) fn run(
    ctx: &Context,
    a: FsckArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<i32> {
    let started = Instant::now();
    if let Some(dest) = &a.salvage {
        return salvage_into(ctx, dest, started, out);
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
    wal::check_wal(&ctx.db_options()?.data_dir.join(WAL_DIR), &mut report, out)?;
    let db = ctx.open_db()?;
    let (store, table): (&Store, &UidTable) = (db.store(), db.uids());
    let keys = match rows_to_check(store, table, &a, err)? {
        Selected::Rows(keys) => keys,
        Selected::Exit(code) => return Ok(code),
    };
    check_rows(store, table, &a, &keys, &mut report, out)?;
    if a.full_scan {
        rollups::check_rollups(&db, &mut report, out)?;
    }
    // Only repairs wrote anything; a check alone runs on a full disk.
    if a.fixing() {
        store.sync()?;
    }
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

/// `--salvage NEW_DIR`: the store copied into `dest` and what was lost
/// reported; exit code 1 if anything was.
fn salvage_into(
    ctx: &Context,
    dest: &Path,
    started: Instant,
    out: &mut dyn Write,
) -> anyhow::Result<i32> {
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
    Ok(if lost { 1 } else { 0 })
}

/// The data rows a run checks, or the exit code of a query that cannot
/// select any (its error already printed).
enum Selected {
    Rows(Vec<Vec<u8>>),
    Exit(i32),
}

/// Every data row's key on `--full-scan`, else the keys of the rows of the
/// query's metrics within its time range.
fn rows_to_check(
    store: &Store,
    table: &UidTable,
    a: &FsckArgs,
    err: &mut dyn Write,
) -> anyhow::Result<Selected> {
    let mut keys = Vec::new();
    if a.full_scan {
        for item in store.scan_all_rows() {
            keys.push(item?.0);
        }
        return Ok(Selected::Rows(keys));
    }
    let q = match super::query_args::parse(&a.query, super::now_ms()) {
        Ok(q) => q,
        Err(e) => {
            writeln!(err, "{e}")?;
            return Ok(Selected::Exit(2));
        }
    };
    let start_s = q.start_ms / 1000;
    let end_s = q.end_ms.unwrap_or_else(super::now_ms) / 1000;
    let (start_base, end_base) = (row_base_clamped(start_s), row_base_clamped(end_s));
    for sub in &q.queries {
        let metric = match table.get_id(UidKind::Metric, &sub.metric) {
            Ok(m) => m,
            Err(e) => {
                writeln!(err, "{e}")?;
                return Ok(Selected::Exit(1));
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
    Ok(Selected::Rows(keys))
}

/// Reads the rows of `keys` a batch at a time, with their versions, and
/// checks each.
fn check_rows(
    store: &Store,
    table: &UidTable,
    a: &FsckArgs,
    keys: &[Vec<u8>],
    report: &mut FsckReport,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let progress = super::row_progress("fsck");
    for chunk in keys.chunks(ROWS_PER_READ) {
        let refs: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
        let reads = store.read_row_versions(&refs)?;
        for (key, read) in chunk.iter().zip(reads) {
            rows::check_row(store, table, a, key, &read, report, out)?;
        }
        if let Some(pb) = &progress {
            pb.inc(chunk.len() as u64);
        }
    }
    if let Some(pb) = progress {
        pb.finish_and_clear();
    }
    Ok(())
}
