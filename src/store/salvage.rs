//! Salvage: every entry that can still be read from a damaged store,
//! copied into a new one, with a report of what could not be.
//!
//! A damaged engine file makes [`Store::open`](super::Store::open) refuse
//! the store ([`StoreError::Damaged`]), which
//! is right: answers from a store that lost rows would be silently wrong.
//! [`salvage`] is the way back (`tsdb fsck --salvage NEW_DIR`):
//!
//! 1. The source is locked (no TSD may run on it) and never written: the
//!    engine is opened on a working copy inside the destination (table
//!    files hard-linked when the file system allows, the rest copied).
//! 2. Damaged stretches of the engine's journal are cut out of the copy
//!    ([`fjall_journal`]), so the engine replays every batch that verifies.
//! 3. Each table is copied in key order into a fresh engine. A block that
//!    cannot be read is stepped over: the scan restarts at the first key
//!    after it that reads (found by probing, see [`SalvagingScan`]), and the
//!    key range in between is reported as lost.
//! 4. The write-ahead log's segments are copied as they are (the new store
//!    replays them when it opens; damaged frames cost only themselves).
//! 5. The header is written last, so a salvage that stopped halfway
//!    leaves a directory no store open accepts.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::uid_table::KvUidStore;
use super::{ENGINE_DIR, Result, StoreError, StoreHeader, WAL_DIR, lock_dir};
use crate::codec::row_key::KeyLayout;
use crate::model::uid::hex_upper;
use crate::model::{Uid, UidKind};
use crate::storage::fjall::{FjallOptions, FjallStore};
use crate::storage::fjall_journal;
use crate::storage::{KeyValue, KvStore, ScanIter, ScanRange, Table, prefix_end};
use crate::uid::UidStore;
use std::sync::Arc;

/// Where the working copy of the damaged engine lives, inside the
/// destination while the salvage runs.
const WORK_DIR: &str = ".salvage-source";

/// Keys in between two readable ones that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostRange {
    /// The last key read before the damage (`None`: the table's start).
    pub after: Option<Vec<u8>>,
    /// The first key read after it (`None`: the table's end).
    pub before: Option<Vec<u8>>,
    /// What the engine said.
    pub cause: String,
    /// For data rows: the series and hours the keys around the damage
    /// name (`metric{tags} at <hour>`), resolved through the UID table.
    pub described: Option<(String, String)>,
}

/// One table's salvage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSalvage {
    pub table: &'static str,
    pub copied: u64,
    pub lost: Vec<LostRange>,
}

/// A damaged stretch cut out of one of the engine's journal files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalDamage {
    pub file: PathBuf,
    pub offset: usize,
    pub bytes: usize,
}

/// What [`salvage`] copied and what it could not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SalvageReport {
    pub tables: Vec<TableSalvage>,
    /// Journal batches that verified (the engine replayed them).
    pub journal_batches: usize,
    pub journal_damage: Vec<JournalDamage>,
    /// Bytes at a journal's end that held no complete batch.
    pub journal_tail_bytes: usize,
    /// Batches whose sequence number was out of order and was replaced by
    /// one that fits (nothing of them lost).
    pub journal_renumbered: usize,
    /// Write-ahead log segments copied.
    pub wal_segments: usize,
}

impl SalvageReport {
    /// Whether anything that was stored could not be copied. (A torn
    /// journal tail is not: it was never acknowledged.)
    pub fn lost_anything(&self) -> bool {
        !self.journal_damage.is_empty() || self.tables.iter().any(|t| !t.lost.is_empty())
    }
}

fn key_text(k: &Option<Vec<u8>>, none: &str) -> String {
    match k {
        Some(k) => hex_upper(k),
        None => none.to_string(),
    }
}

impl fmt::Display for SalvageReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "journal: {} batches replayed, {} damaged stretches cut out, {} bytes of unfinished tail dropped",
            self.journal_batches,
            self.journal_damage.len(),
            self.journal_tail_bytes
        )?;
        if self.journal_renumbered > 0 {
            writeln!(
                f,
                "  renumbered: {} batches whose sequence number was out of order (their entries kept)",
                self.journal_renumbered
            )?;
        }
        for d in &self.journal_damage {
            writeln!(
                f,
                "  lost: {} bytes at offset {} of journal {} (the batches written there)",
                d.bytes,
                d.offset,
                d.file.display()
            )?;
        }
        for t in &self.tables {
            writeln!(
                f,
                "table {}: {} entries copied, {} unreadable ranges",
                t.table,
                t.copied,
                t.lost.len()
            )?;
            for r in &t.lost {
                let (after, before) = match &r.described {
                    Some((a, b)) => (a.clone(), b.clone()),
                    None => (
                        key_text(&r.after, "the table's start"),
                        key_text(&r.before, "the table's end"),
                    ),
                };
                writeln!(
                    f,
                    "  lost: the keys after {after} and before {before}: {}",
                    r.cause
                )?;
            }
        }
        writeln!(
            f,
            "write-ahead log: {} segments copied (replayed when the new store opens)",
            self.wal_segments
        )
    }
}

/// Copies every readable entry of the store in `src` into a new store in
/// `dest` (which must not hold one), and says what could not be read.
pub fn salvage(src: &Path, dest: &Path) -> Result<SalvageReport> {
    let _src_lock = lock_dir(src, Duration::ZERO)?;
    let header = StoreHeader::read(src)?
        .ok_or_else(|| StoreError::MissingHeader(src.display().to_string()))?;
    let layout = header.layout()?;
    std::fs::create_dir_all(dest)?;
    let _dest_lock = lock_dir(dest, Duration::ZERO)?;
    if StoreHeader::read(dest)?.is_some() || dest.join(ENGINE_DIR).exists() {
        return Err(StoreError::Io(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("{} already holds a store", dest.display()),
        )));
    }
    let mut report = SalvageReport::default();

    let work = dest.join(WORK_DIR);
    if work.exists() {
        std::fs::remove_dir_all(&work)?;
    }
    let work_engine = work.join(ENGINE_DIR);
    copy_tree(&src.join(ENGINE_DIR), &work_engine)?;
    for journal in fjall_journal::read_dir(&work_engine)? {
        report.journal_tail_bytes += journal.tail;
        report.journal_renumbered += journal
            .misnumbered
            .iter()
            .filter(|m| m.repair.is_some())
            .count();
        // Also drops an unfinished tail, as the engine would.
        let left_out = fjall_journal::rewrite_without_damage(&journal)?;
        report.journal_batches += journal.batches.len() - left_out.len();
        let original = src
            .join(ENGINE_DIR)
            .join(journal.path.file_name().unwrap_or_default());
        for (offset, bytes) in journal.damaged.iter().copied().chain(left_out) {
            report.journal_damage.push(JournalDamage {
                file: original.clone(),
                offset,
                bytes,
            });
        }
    }
    let source: Arc<dyn KvStore> = match FjallStore::open(&work_engine, &FjallOptions::default()) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&work);
            return Err(StoreError::CannotSalvage {
                dir: src.display().to_string(),
                cause: match e {
                    crate::storage::StorageError::Damaged(c) => c,
                    other => other.to_string(),
                },
            });
        }
    };

    let target = FjallStore::open(&dest.join(ENGINE_DIR), &FjallOptions::default())?;
    for table in Table::ALL {
        let mut scan = SalvagingScan::new(&*source, table);
        let copied = target.ingest(table, &mut scan)?;
        let mut lost = scan.lost;
        if table == Table::Data {
            let names = KvUidStore::new(source.clone(), layout.widths);
            for r in &mut lost {
                r.described = Some((
                    describe_row(&layout, &names, r.after.as_deref(), "the table's start"),
                    describe_row(&layout, &names, r.before.as_deref(), "the table's end"),
                ));
            }
        }
        report.tables.push(TableSalvage {
            table: table.name(),
            copied,
            lost,
        });
    }
    drop(source);
    std::fs::remove_dir_all(&work)?;

    let wal_src = src.join(WAL_DIR);
    if wal_src.is_dir() {
        let wal_dest = dest.join(WAL_DIR);
        std::fs::create_dir_all(&wal_dest)?;
        for entry in std::fs::read_dir(&wal_src)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                std::fs::copy(entry.path(), wal_dest.join(entry.file_name()))?;
                report.wal_segments += 1;
            }
        }
    }
    target.sync_all_files()?;
    drop(target);
    StoreHeader::new(&layout, "fjall").write_new(dest)?;
    Ok(report)
}

/// A data row key as `metric{k=v,...} at <hour, UTC> (row <hex>)`, names
/// resolved where the UID table still has them (else the UIDs' hex).
fn describe_row(layout: &KeyLayout, names: &KvUidStore, key: Option<&[u8]>, none: &str) -> String {
    let Some(key) = key else {
        return none.to_string();
    };
    let Ok(rk) = layout.parse_row_key(key) else {
        return hex_upper(key);
    };
    let name = |kind: UidKind, uid: Uid| {
        names
            .reverse(kind, uid)
            .ok()
            .flatten()
            .unwrap_or_else(|| uid.to_hex(layout.widths.of(kind)))
    };
    let tags: Vec<String> = rk
        .tsuid
        .tags
        .iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                name(UidKind::TagKey, *k),
                name(UidKind::TagValue, *v)
            )
        })
        .collect();
    let hour = chrono::DateTime::from_timestamp(rk.base_time as i64, 0).map_or_else(
        || rk.base_time.to_string(),
        |t| t.format("%Y-%m-%dT%H:%MZ").to_string(),
    );
    format!(
        "{}{{{}}} at {hour} (row {})",
        name(UidKind::Metric, rk.tsuid.metric),
        tags.join(","),
        hex_upper(key)
    )
}

/// Copies a directory tree; immutable table files are hard-linked where
/// the file system allows (a salvage of a large store costs no copy).
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if from.file_name().is_some_and(|n| n == "tables")
            && std::fs::hard_link(entry.path(), &target).is_ok()
        {
            continue;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// Probes to find where reading can resume after a damaged block: at most
/// this many per damaged stretch.
const MAX_PROBES: usize = 4096;

/// A table scan that steps over what cannot be read.
///
/// When the engine fails after key `K`, the scan looks for the smallest
/// start key from which reading works again: first the successors of
/// `K`'s prefixes, longest first (`K` with its last byte bumped, then its
/// last two bytes dropped and the next bumped, ...), until one reads; then
/// a bisection between `K` and that key, since keys past the damaged block
/// but before the found one are still readable. A start reads when the
/// first entry at or after it comes back (or the table ends there).
pub(crate) struct SalvagingScan<'a> {
    kv: &'a dyn KvStore,
    table: Table,
    iter: Option<ScanIter<'a>>,
    /// Where the next scan starts when `iter` is `None`.
    resume: Vec<u8>,
    last: Option<Vec<u8>>,
    /// A lost range whose end is the next key read.
    open_loss: Option<(Option<Vec<u8>>, String)>,
    done: bool,
    pub(crate) lost: Vec<LostRange>,
}

impl<'a> SalvagingScan<'a> {
    pub(crate) fn new(kv: &'a dyn KvStore, table: Table) -> SalvagingScan<'a> {
        SalvagingScan {
            kv,
            table,
            iter: None,
            resume: Vec::new(),
            last: None,
            open_loss: None,
            done: false,
            lost: Vec::new(),
        }
    }

    /// Ends the open lost range, if any, at `before` (`None`: the end).
    fn close_loss(&mut self, before: Option<&[u8]>) {
        if let Some((after, cause)) = self.open_loss.take() {
            self.lost.push(LostRange {
                after,
                before: before.map(<[u8]>::to_vec),
                cause,
                described: None,
            });
        }
    }

    fn reads_from(&self, start: &[u8]) -> bool {
        let range = ScanRange {
            start: start.to_vec(),
            stop: Vec::new(),
            limit: Some(1),
        };
        !matches!(self.kv.scan(self.table, &range).next(), Some(Err(_)))
    }

    /// The smallest start after `from` (which does not read) that reads,
    /// if any does.
    fn find_resume(&self, from: &[u8]) -> Option<Vec<u8>> {
        let mut probes = 0;
        let mut hi = None;
        for len in (1..=from.len()).rev() {
            let candidate = prefix_end(&from[..len]);
            if candidate.is_empty() {
                continue; // all 0xFF: no key after this prefix
            }
            probes += 1;
            if self.reads_from(&candidate) {
                hi = Some(candidate);
                break;
            }
        }
        let mut hi = hi?;
        let mut lo = from.to_vec();
        while probes < MAX_PROBES {
            let Some(mid) = midpoint(&lo, &hi) else { break };
            probes += 1;
            if self.reads_from(&mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(hi)
    }
}

/// A key strictly between `lo` and `hi` (`lo < hi`) about halfway in
/// byte order, if there is one: both are read as fractions of the same
/// length, padded with zeros, and averaged.
fn midpoint(lo: &[u8], hi: &[u8]) -> Option<Vec<u8>> {
    let len = lo.len().max(hi.len()) + 1;
    let pad = |k: &[u8]| {
        let mut v = k.to_vec();
        v.resize(len, 0);
        v
    };
    let (a, b) = (pad(lo), pad(hi));
    // sum = a + b, over len + 1 bytes, then halved.
    let mut sum = vec![0u8; len + 1];
    let mut carry = 0u16;
    for i in (0..len).rev() {
        let s = a[i] as u16 + b[i] as u16 + carry;
        sum[i + 1] = (s & 0xFF) as u8;
        carry = s >> 8;
    }
    sum[0] = carry as u8;
    let mut half = vec![0u8; len + 1];
    let mut rem = 0u16;
    for i in 0..=len {
        let cur = (rem << 8) | sum[i] as u16;
        half[i] = (cur / 2) as u8;
        rem = cur % 2;
    }
    // sum < 2·256^len, so the first byte of the half is 0.
    let mid = half[1..].to_vec();
    (mid.as_slice() > lo && mid.as_slice() < hi).then_some(mid)
}

impl Iterator for SalvagingScan<'_> {
    type Item = crate::storage::Result<KeyValue>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.done {
                return None;
            }
            let kv = self.kv;
            let table = self.table;
            let resume = std::mem::take(&mut self.resume);
            let iter = self.iter.get_or_insert_with(|| {
                kv.scan(
                    table,
                    &ScanRange {
                        start: resume,
                        stop: Vec::new(),
                        limit: None,
                    },
                )
            });
            match iter.next() {
                Some(Ok((k, v))) => {
                    self.close_loss(Some(&k));
                    self.last = Some(k.clone());
                    return Some(Ok((k, v)));
                }
                None => {
                    self.close_loss(None);
                    self.done = true;
                    return None;
                }
                Some(Err(e)) => {
                    self.iter = None;
                    // Just after the last key read: the smallest key
                    // greater than it.
                    let from = match &self.last {
                        Some(k) => {
                            let mut f = k.clone();
                            f.push(0);
                            f
                        }
                        None => Vec::new(),
                    };
                    // The engine's words, without the salvage hint the
                    // error carries for everyone else.
                    let cause = match e {
                        crate::storage::StorageError::Damaged(c) => c,
                        other => other.to_string(),
                    };
                    if self.open_loss.is_none() {
                        self.open_loss = Some((self.last.clone(), cause));
                    }
                    match self.find_resume(&from) {
                        Some(start) => self.resume = start,
                        None => {
                            self.close_loss(None);
                            self.done = true;
                            return None;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::midpoint;

    #[test]
    fn midpoints_lie_between() {
        assert_eq!(midpoint(&[0], &[2]), Some(vec![1, 0]));
        let m = midpoint(&[1, 2, 3], &[1, 2, 4]).unwrap();
        assert!(
            m.as_slice() > &[1u8, 2, 3][..] && m.as_slice() < &[1u8, 2, 4][..],
            "{m:?}"
        );
        assert!(midpoint(&[], &[0, 0, 1]).is_some());
        let m = midpoint(&[5, 0xFF, 0xFF], &[6]).unwrap();
        assert!(m.as_slice() > &[5u8, 0xFF, 0xFF][..] && m.as_slice() < &[6u8][..]);
    }
}
