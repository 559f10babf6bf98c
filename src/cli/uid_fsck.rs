//! `tsdb uid fsck [fix] [delete_unknown]`: consistency of the UID table,
//! with OpenTSDB's `UidManager.fsck` checks and messages.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Instant;

use crate::model::UidKind;
use crate::model::uid::java_byte_array;
use crate::store::Store;
use crate::uid::keys;

#[derive(Default)]
struct KindState {
    /// name → id bytes (forward cells)
    name2id: BTreeMap<String, Vec<u8>>,
    /// id bytes → name (reverse cells)
    id2name: BTreeMap<Vec<u8>, String>,
    maxid: Option<Vec<u8>>,
    errors: u64,
}

fn id_value(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |acc, b| (acc << 8) | *b as u64)
}

/// Runs the check; returns the number of errors found.
pub(crate) fn run(
    store: &Store,
    fix: bool,
    delete_unknown: bool,
    out: &mut dyn Write,
) -> anyhow::Result<u64> {
    let started = Instant::now();
    let mut kinds: BTreeMap<&'static str, KindState> = UidKind::ALL
        .iter()
        .map(|k| (k.qualifier(), KindState::default()))
        .collect();
    let mut kvcount = 0u64;
    let mut unknown = Vec::new();
    for item in store.scan_uid_cells(&[]) {
        let (key, value) = item?;
        kvcount += 1;
        let Some((row, family, qualifier)) = keys::split_cell_key(&key) else {
            unknown.push(key);
            continue;
        };
        let qualifier = String::from_utf8_lossy(qualifier).to_string();
        let is_meta = qualifier.ends_with("_meta");
        let Some(state) = kinds.get_mut(qualifier.as_str()) else {
            if !is_meta {
                unknown.push(key.clone());
            }
            continue;
        };
        if family == keys::FAMILY_ID && row == keys::MAXID_ROW {
            state.maxid = Some(value);
        } else if family == keys::FAMILY_ID {
            state
                .name2id
                .insert(String::from_utf8_lossy(row).to_string(), value);
        } else if family == keys::FAMILY_NAME {
            state
                .id2name
                .insert(row.to_vec(), String::from_utf8_lossy(&value).to_string());
        } else {
            unknown.push(key.clone());
        }
    }
    if !unknown.is_empty() {
        writeln!(
            out,
            "Found {} unknown columns in the UID table",
            unknown.len()
        )?;
        if fix && delete_unknown {
            store.edit_uid_cells(unknown.iter().map(|k| (k.clone(), None)).collect())?;
            writeln!(out, "FIX: Removed {} unknown columns", unknown.len())?;
        }
    }
    let mut total = 0u64;
    for kind in UidKind::ALL {
        let name = kind.qualifier();
        let width = store.layout().widths.of(kind).bytes();
        let s = kinds.get_mut(name).expect("every kind has a state");
        // Cell key → new value, or `None` to delete the cell.
        let mut fixes: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        let maxid = match &s.maxid {
            None => 0,
            Some(v) if v.len() == 8 => {
                i64::from_be_bytes(v.as_slice().try_into().unwrap_or([0; 8])) as u64
            }
            Some(_) => {
                s.errors += 1;
                writeln!(out, "Invalid maximum ID for {name}: should be on 8 bytes")?;
                0
            }
        };
        let mut max_found = 0u64;
        // Forward mappings must have the matching reverse mapping.
        let forward: Vec<(String, Vec<u8>)> = s
            .name2id
            .iter()
            .map(|(n, i)| (n.clone(), i.clone()))
            .collect();
        let mut ids_seen: BTreeMap<Vec<u8>, String> = BTreeMap::new();
        for (fname, id) in &forward {
            if id.len() != width {
                s.errors += 1;
                writeln!(
                    out,
                    "Invalid {name} ID length for {fname}: {} bytes, expected {width}",
                    id.len()
                )?;
                continue;
            }
            max_found = max_found.max(id_value(id));
            if let Some(other) = ids_seen.insert(id.clone(), fname.clone()) {
                s.errors += 1;
                writeln!(
                    out,
                    "Inconsistent forward {name} mapping {fname} -> {} vs {other} -> {}",
                    java_byte_array(id),
                    java_byte_array(id)
                )?;
                continue;
            }
            match s.id2name.get(id) {
                None => {
                    s.errors += 1;
                    writeln!(
                        out,
                        "Forward {name} mapping is missing reverse mapping: {fname} -> {}",
                        java_byte_array(id)
                    )?;
                    if fix {
                        fixes.push((keys::reverse(kind, id), Some(fname.as_bytes().to_vec())));
                        writeln!(
                            out,
                            "FIX: Restoring {name} reverse mapping: {} -> {fname}",
                            java_byte_array(id)
                        )?;
                    }
                }
                Some(rname) if rname != fname => {
                    // Another name's reverse cell sits on this id.
                    if s.name2id.get(rname) == Some(id) {
                        continue; // reported once as a duplicate forward above
                    }
                    s.errors += 1;
                    writeln!(
                        out,
                        "Forward {name} mapping bogus: {fname} -> {} but the reverse mapping points to {rname}",
                        java_byte_array(id)
                    )?;
                    if fix {
                        fixes.push((keys::reverse(kind, id), Some(fname.as_bytes().to_vec())));
                    }
                }
                Some(_) => {}
            }
        }
        // Reverse mappings must have the matching forward mapping.
        for (id, rname) in &s.id2name {
            max_found = max_found.max(id_value(id));
            match s.name2id.get(rname) {
                None => {
                    writeln!(
                        out,
                        "Reverse {name} mapping is missing forward mapping: {rname} -> {}",
                        java_byte_array(id)
                    )?;
                    if fix {
                        fixes.push((keys::reverse(kind, id), None));
                    }
                }
                Some(found) if found != id => {
                    s.errors += 1;
                    writeln!(
                        out,
                        "Inconsistent reverse {name} mapping {} -> {rname} vs {} -> {rname}",
                        java_byte_array(id),
                        java_byte_array(found)
                    )?;
                    if fix {
                        fixes.push((keys::reverse(kind, id), None));
                    }
                }
                Some(_) => {}
            }
        }
        let maxsize = s.id2name.len().max(s.name2id.len()) as u64;
        if maxid > maxsize {
            writeln!(
                out,
                "Max ID for {name} is {maxid} but only {maxsize} entries were found.  Maybe {} IDs were deleted?",
                maxid - maxsize
            )?;
        } else if maxid < max_found {
            s.errors += 1;
            writeln!(
                out,
                "We found an ID of {max_found} for {name} but the max ID is only {maxid}!  Future IDs may be double-assigned!"
            )?;
            if fix {
                fixes.push((
                    keys::max_id(kind),
                    Some((max_found as i64).to_be_bytes().to_vec()),
                ));
                writeln!(out, "FIX: Updated max ID for {name} to {max_found}")?;
            }
        }
        if !fixes.is_empty() {
            store.edit_uid_cells(fixes)?;
        }
        if s.errors > 0 {
            writeln!(out, "{name}: Found {} errors.", s.errors)?;
            total += s.errors;
        }
    }
    let ms = started.elapsed().as_millis().max(1) as u64;
    writeln!(
        out,
        "{kvcount} KVs analyzed in {ms}ms (~{} KV/s)",
        kvcount * 1000 / ms
    )?;
    if total == 0 {
        writeln!(out, "No errors found.")?;
    } else {
        writeln!(out, "{total} errors found.")?;
    }
    store.sync()?;
    Ok(total)
}
