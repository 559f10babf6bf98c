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

#[cfg(test)]
mod tests {
    use super::super::fixture::{Fixture, fixing};
    use super::*;
    use crate::codec::row::Cell;
    use crate::store::Durability;

    #[test]
    fn a_sound_row_is_counted_and_nothing_else() {
        let f = Fixture::new();
        let (r, out) = f.check(&FsckArgs::default());
        assert_eq!(out, "");
        assert_eq!((r.rows_processed, r.valid_datapoints), (1, 10));
        assert_eq!(r.total_errors(), 0);
    }

    #[test]
    fn a_key_that_does_not_parse_is_reported_and_deleted_when_asked() {
        let f = Fixture::new();
        let bad = vec![0, 0, 1, 2];
        let row = RowCells {
            cells: vec![Cell::new(vec![0, 0], vec![1])],
        };
        f.store.write_row(&bad, &row, Durability::Sync).unwrap();
        let (r, out) = f.check_key(&bad, &FsckArgs::default());
        assert_eq!((r.bad_key, r.bad_key_fixed), (1, 0));
        assert!(out.starts_with("Invalid row key [0, 0, 1, 2]: "), "{out}");
        // --fix alone deletes nothing: the row's data would be lost.
        f.check_key(&bad, &fixing(|_| {}));
        assert!(f.store.get_row(&bad).unwrap().is_some());
        let (r, _) = f.check_key(&bad, &fixing(|a| a.delete_bad_rows = true));
        assert_eq!((r.bad_key, r.bad_key_fixed), (1, 1));
        assert_eq!(f.store.get_row(&bad).unwrap(), None);
    }

    #[test]
    fn a_row_naming_a_deleted_uid_is_an_orphan() {
        let f = Fixture::new();
        f.table.delete(UidKind::TagValue, "web01").unwrap();
        let (r, out) = f.check(&FsckArgs::default());
        assert_eq!((r.orphans, r.orphans_fixed, r.valid_datapoints), (1, 0, 0));
        assert_eq!(
            out,
            format!(
                "Orphaned row {} (TSUID 000001000001000001): No such unique ID for 'tagv': [0, 0, 1]\n",
                java_byte_array(&f.key)
            )
        );
        let (r, _) = f.check(&fixing(|a| a.delete_orphans = true));
        assert_eq!(r.orphans_fixed, 1);
        assert_eq!(f.row(), None);
    }
}
