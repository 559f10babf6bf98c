//! `tsdb fsck`'s check of a data row's key: a key that does not parse,
//! and a key naming a UID that does not resolve (an orphan), as OpenTSDB's
//! `Fsck` finds them; a row whose key is sound goes on to its versions
//! and its cells.

use std::io::Write;

use super::FsckArgs;
use super::cells::check_cells;
use super::report::FsckReport;
use super::versions::check_versions;
use crate::codec::row::RowCells;
use crate::codec::row_key::RowKey;
use crate::model::UidKind;
use crate::model::uid::java_byte_array;
use crate::storage::KeyRead;
use crate::store::Store;
use crate::uid::UidTable;

/// Checks the row at `key` as read (its merged value and its versions),
/// counting what it finds in `r` and repairing what `a` asks for.
pub(super) fn check_row(
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
