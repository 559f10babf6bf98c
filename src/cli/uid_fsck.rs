//! `tsdb uid fsck [fix] [delete_unknown]`: consistency of the UID
//! mappings, with OpenTSDB's `UidManager.fsck` checks and messages, on
//! either store: the embedded `tsdb-uid` table's cells, or on a cluster
//! the znodes in ZooKeeper (docs/cluster.md). The checks are the same for
//! both; only reading and repairing differ ([`UidSource`]).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use crate::coord::ZkUidStore;
use crate::db::Db;
use crate::model::UidKind;
use crate::model::uid::java_byte_array;
use crate::store::Store;
use crate::uid::keys;

/// The counter of a kind as stored.
#[derive(Default)]
enum MaxId {
    #[default]
    Missing,
    Value(u64),
    /// Stored but unreadable: why.
    Invalid(&'static str),
}

#[derive(Default)]
struct KindState {
    /// name → id bytes (forward mappings)
    name2id: BTreeMap<String, Vec<u8>>,
    /// id bytes → name (reverse mappings)
    id2name: BTreeMap<Vec<u8>, String>,
    maxid: MaxId,
    errors: u64,
}

/// A repair `fix` makes.
enum UidFix {
    /// The reverse mapping of an id names `name`.
    SetReverse(Vec<u8>, String),
    /// The reverse mapping of an id goes.
    DeleteReverse(Vec<u8>),
    /// The counter moves up to this.
    SetMaxId(u64),
}

/// What was read: every kind's mappings, the entries read, and entries
/// that belong to no kind (cell keys or znode paths, as text and bytes).
struct Read {
    kinds: BTreeMap<&'static str, KindState>,
    entries: u64,
    unknown: Vec<Vec<u8>>,
}

/// Where the mappings are stored.
enum UidSource<'a> {
    Embedded(&'a Store),
    ZooKeeper(&'a Arc<ZkUidStore>),
}

fn id_value(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |acc, b| (acc << 8) | *b as u64)
}

fn new_kinds() -> BTreeMap<&'static str, KindState> {
    UidKind::ALL
        .iter()
        .map(|k| (k.qualifier(), KindState::default()))
        .collect()
}

impl UidSource<'_> {
    fn read(&self) -> anyhow::Result<Read> {
        let mut kinds = new_kinds();
        let mut entries = 0u64;
        let mut unknown = Vec::new();
        match self {
            UidSource::Embedded(store) => {
                for item in store.scan_uid_cells(&[]) {
                    let (key, value) = item?;
                    entries += 1;
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
                        state.maxid = match <[u8; 8]>::try_from(value.as_slice()) {
                            Ok(b) => MaxId::Value(i64::from_be_bytes(b) as u64),
                            Err(_) => MaxId::Invalid("should be on 8 bytes"),
                        };
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
            }
            UidSource::ZooKeeper(zk) => {
                for kind in UidKind::ALL {
                    let stored = zk.stored_mappings(kind)?;
                    let state = kinds.get_mut(kind.qualifier()).expect("every kind");
                    entries += (stored.forward.len() + stored.reverse.len()) as u64;
                    state.name2id.extend(stored.forward);
                    state.id2name.extend(
                        stored
                            .reverse
                            .into_iter()
                            .map(|(id, name)| (id, String::from_utf8_lossy(&name).to_string())),
                    );
                    state.maxid = match stored.max_id {
                        None => MaxId::Missing,
                        Some(text) => {
                            entries += 1;
                            match std::str::from_utf8(&text)
                                .ok()
                                .and_then(|t| t.trim().parse().ok())
                            {
                                Some(v) => MaxId::Value(v),
                                None => MaxId::Invalid("should be a decimal number"),
                            }
                        }
                    };
                    unknown.extend(stored.unknown.into_iter().map(String::into_bytes));
                }
            }
        }
        Ok(Read {
            kinds,
            entries,
            unknown,
        })
    }

    /// What an unknown entry is called in the report.
    fn unknown_noun(&self) -> &'static str {
        match self {
            UidSource::Embedded(_) => "unknown columns in the UID table",
            UidSource::ZooKeeper(_) => "unknown znodes among the UID mappings",
        }
    }

    fn delete_unknown(&self, unknown: &[Vec<u8>]) -> anyhow::Result<()> {
        match self {
            UidSource::Embedded(store) => {
                store.edit_uid_cells(unknown.iter().map(|k| (k.clone(), None)).collect())?
            }
            UidSource::ZooKeeper(zk) => {
                for path in unknown {
                    zk.delete_unknown(&String::from_utf8_lossy(path))?;
                }
            }
        }
        Ok(())
    }

    /// A cluster's TSDs reserve UIDs in blocks: a counter above the
    /// number of names is how it works, not a sign of deletes.
    fn reserves_blocks(&self) -> bool {
        matches!(self, UidSource::ZooKeeper(_))
    }

    fn apply(&self, kind: UidKind, fixes: Vec<UidFix>) -> anyhow::Result<()> {
        match self {
            UidSource::Embedded(store) => {
                let cells = fixes
                    .into_iter()
                    .map(|f| match f {
                        UidFix::SetReverse(id, name) => {
                            (keys::reverse(kind, &id), Some(name.into_bytes()))
                        }
                        UidFix::DeleteReverse(id) => (keys::reverse(kind, &id), None),
                        UidFix::SetMaxId(max) => (
                            keys::max_id(kind),
                            Some((max as i64).to_be_bytes().to_vec()),
                        ),
                    })
                    .collect();
                store.edit_uid_cells(cells)?;
            }
            UidSource::ZooKeeper(zk) => {
                for f in fixes {
                    match f {
                        UidFix::SetReverse(id, name) => {
                            zk.repair_reverse(kind, &id, Some(&name))?
                        }
                        UidFix::DeleteReverse(id) => zk.repair_reverse(kind, &id, None)?,
                        UidFix::SetMaxId(max) => zk.raise_max_id(kind, max)?,
                    }
                }
            }
        }
        Ok(())
    }
}

/// Runs the check on the database's UID store; returns the number of
/// errors found.
pub(crate) fn run(
    db: &Db,
    fix: bool,
    delete_unknown: bool,
    out: &mut dyn Write,
) -> anyhow::Result<u64> {
    let started = Instant::now();
    let source = match db.cluster_uids() {
        Some(zk) => UidSource::ZooKeeper(zk),
        None => UidSource::Embedded(db.store()),
    };
    let widths = db.store().layout().widths;
    let Read {
        mut kinds,
        entries: kvcount,
        unknown,
    } = source.read()?;
    if !unknown.is_empty() {
        writeln!(out, "Found {} {}", unknown.len(), source.unknown_noun())?;
        if fix && delete_unknown {
            source.delete_unknown(&unknown)?;
            writeln!(out, "FIX: Removed {} unknown columns", unknown.len())?;
        }
    }
    let mut total = 0u64;
    for kind in UidKind::ALL {
        let name = kind.qualifier();
        let width = widths.of(kind).bytes();
        let s = kinds.get_mut(name).expect("every kind has a state");
        let mut fixes: Vec<UidFix> = Vec::new();
        let maxid = match s.maxid {
            MaxId::Missing => 0,
            MaxId::Value(v) => v,
            MaxId::Invalid(why) => {
                s.errors += 1;
                writeln!(out, "Invalid maximum ID for {name}: {why}")?;
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
                        fixes.push(UidFix::SetReverse(id.clone(), fname.clone()));
                        writeln!(
                            out,
                            "FIX: Restoring {name} reverse mapping: {} -> {fname}",
                            java_byte_array(id)
                        )?;
                    }
                }
                Some(rname) if rname != fname => {
                    // Another name's reverse mapping sits on this id.
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
                        fixes.push(UidFix::SetReverse(id.clone(), fname.clone()));
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
                    // As OpenTSDB: a warning (harmless), not an error.
                    writeln!(
                        out,
                        "Reverse {name} mapping is missing forward mapping: {rname} -> {}",
                        java_byte_array(id)
                    )?;
                    if fix {
                        fixes.push(UidFix::DeleteReverse(id.clone()));
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
                        fixes.push(UidFix::DeleteReverse(id.clone()));
                    }
                }
                Some(_) => {}
            }
        }
        let maxsize = s.id2name.len().max(s.name2id.len()) as u64;
        // OpenTSDB's order: a counter above the names is only reported
        // (deletes leave gaps), and then not checked against the highest
        // id; on a cluster the counter runs ahead by design (blocks), so
        // only the second check means something.
        if maxid > maxsize && !source.reserves_blocks() {
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
                fixes.push(UidFix::SetMaxId(max_found));
                writeln!(out, "FIX: Updated max ID for {name} to {max_found}")?;
            }
        }
        if !fixes.is_empty() {
            source.apply(kind, fixes)?;
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
    // Only repairs wrote anything; a check alone runs on a full disk.
    if fix {
        db.store().sync()?;
    }
    Ok(total)
}
