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
