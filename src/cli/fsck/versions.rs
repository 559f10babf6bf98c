//! `tsdb fsck`'s check of a row's versions: on a cluster each TSD that
//! wrote a row keeps its own version of it, and points two versions both
//! hold are OpenTSDB's duplicate columns in another form.

use std::collections::BTreeMap;
use std::io::Write;

use super::FsckArgs;
use super::report::FsckReport;
use crate::codec::qualifier::StoredPoint;
use crate::codec::row::{self, RowCells};
use crate::codec::row_key::RowKey;
use crate::model::uid::java_byte_array;
use crate::storage::KeyRead;
use crate::store::Store;

/// On a cluster, a row several TSDs wrote has a version per writer, which
/// reads merge (a later version's point wins at the same timestamp;
/// docs/scale-out.md "The merge rule"). Points two versions both hold
/// are reported as OpenTSDB reports duplicate columns; a row of several
/// versions is compactable. With `--fix` or `--compact` the merged row,
/// what reads return, becomes the only version: at once when the
/// overlapping points agree, and with `--resolve-duplicates` (or
/// `--fix-all`) when they differ.
pub(super) fn check_versions(
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

#[cfg(test)]
mod tests {
    use super::super::fixture::{BASE, Fixture, fixing, qualifier};
    use super::*;
    use crate::codec::row::Cell;
    use crate::storage::KeyVersion;

    /// A version of the row holding one point, written by `writer`.
    fn version(writer: &str, offset_s: u16, value: u8) -> KeyVersion {
        let row = RowCells {
            cells: vec![Cell::new(qualifier(offset_s, 0), vec![value])],
        };
        KeyVersion {
            writer: writer.into(),
            value: row.encode(),
        }
    }

    fn check(f: &Fixture, read: &KeyRead, a: &FsckArgs) -> (FsckReport, String) {
        let parsed = f.store.layout().parse_row_key(&f.key).unwrap();
        let (mut r, mut out) = (FsckReport::default(), Vec::new());
        check_versions(&f.store, &f.key, read, &parsed, a, &mut r, &mut out).unwrap();
        (r, String::from_utf8(out).unwrap())
    }

    #[test]
    fn one_version_is_nothing_to_check() {
        let f = Fixture::new();
        let read = KeyRead {
            versions: vec![version("tsd1", 10, 1)],
            value: Some(version("tsd1", 10, 1).value),
        };
        assert_eq!(
            check(&f, &read, &fixing(|_| {})),
            (FsckReport::default(), String::new())
        );
    }

    #[test]
    fn versions_holding_a_point_each_are_compactable() {
        let f = Fixture::new();
        let merged = RowCells {
            cells: vec![Cell::new(
                [qualifier(10, 0), qualifier(20, 0)].concat(),
                vec![1, 2, 0],
            )],
        };
        let read = KeyRead {
            versions: vec![version("tsd1", 10, 1), version("tsd2", 20, 2)],
            value: Some(merged.encode()),
        };
        let (r, out) = check(&f, &read, &FsckArgs::default());
        assert_eq!(out, "");
        assert_eq!((r.duplicates, r.fixable_compacted_columns), (0, 1));
        // --compact makes the merge the only version.
        let compact = FsckArgs {
            compact: true,
            ..Default::default()
        };
        check(&f, &read, &compact);
        assert_eq!(f.row(), Some(merged));
    }

    #[test]
    fn a_point_two_versions_hold_differently_is_resolved_only_when_asked() {
        let f = Fixture::new();
        let newer = version("tsd2", 10, 7);
        let read = KeyRead {
            versions: vec![version("tsd1", 10, 1), newer.clone()],
            value: Some(newer.value.clone()),
        };
        let (r, out) = check(&f, &read, &FsckArgs::default());
        assert_eq!(
            out,
            format!(
                "More than one version had a value for the same timestamp: ({}) in row {} (written by tsd1, tsd2)\n",
                (BASE as u64 + 10) * 1000,
                java_byte_array(&f.key)
            )
        );
        assert_eq!(
            (
                r.duplicates,
                r.duplicates_fixed,
                r.fixable_compacted_columns
            ),
            (1, 0, 0)
        );
        let (r, _) = check(&f, &read, &fixing(|_| {}));
        assert_eq!(r.duplicates_fixed, 0);
        assert_ne!(f.row().map(|r| r.encode()), Some(newer.value.clone()));
        let (r, _) = check(&f, &read, &fixing(|a| a.resolve_duplicates = true));
        assert_eq!(r.duplicates_fixed, 1);
        assert_eq!(f.row().map(|r| r.encode()), Some(newer.value));
    }
}
