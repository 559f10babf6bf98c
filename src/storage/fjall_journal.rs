//! Reading fjall's journal files (`fjall/<n>.jnl`) on our own, to find
//! damage before the engine replays them and to cut it out when a damaged
//! store is salvaged.
//!
//! Why: fjall 3.1.13 refuses to open on a batch whose checksum fails
//! (`JournalRecovery(ChecksumMismatch)`), and on some other damage (a
//! flipped tag byte) it silently truncates the journal at that point and
//! drops every later batch. rtsdb checks the journal first
//! ([`check_dir`]) and refuses to open a damaged one with the salvage
//! command; salvage ([`rewrite_without_damage`]) keeps every batch that
//! verifies and lets fjall replay those.
//!
//! The layout (fjall 3.1.13, pinned in Cargo.toml) and what counts as
//! damage: docs/format/fjall-journal.md.

use std::fs;
use std::path::{Path, PathBuf};

const START: u8 = 1;
const ITEM: u8 = 2;
const END: u8 = 3;
const CLEAR: u8 = 4;
const MAGIC: &[u8] = b"FJL\x03";
const START_LEN: usize = 1 + 4 + 8;
const ITEM_HEADER_LEN: usize = 1 + 1 + 1 + 8 + 2 + 4 + 4;
const END_LEN: usize = 1 + 8 + MAGIC.len();
/// More entries than this in one batch is not a batch (rtsdb's largest
/// write batches are far smaller).
const MAX_ENTRIES: u32 = 1 << 24;

/// One journal file as read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct JournalFile {
    pub path: PathBuf,
    /// `(offset, length)` of every batch that verifies, in file order.
    pub batches: Vec<(usize, usize)>,
    /// The sequence number of each of `batches`.
    pub seqnos: Vec<u64>,
    /// Batches of `batches` that verify but whose sequence number breaks
    /// the journal's order ([`Misnumbered`]).
    pub misnumbered: Vec<Misnumbered>,
    /// `(offset, length)` of each damaged stretch: bytes that hold no
    /// verified batch, followed by one, or holding a whole batch's end
    /// marker (a complete batch whose bytes changed): what fjall would
    /// refuse or silently cut off.
    pub damaged: Vec<(usize, usize)>,
    /// Bytes at the end that hold no verified batch, no batch end and are
    /// not zero padding: a batch the process was writing when it died
    /// (fjall discards it; its points are still in rtsdb's WAL, which is
    /// only trimmed after the engine is synced).
    pub tail: usize,
}

/// A batch whose checksum verifies but whose sequence number, which the
/// checksum does not cover, is not above the one before it in replay
/// order, though fjall numbers batches in the order it writes them (under
/// its journal lock): a header changed after it was written (its own, or
/// an earlier batch's whose number rose). fjall would replay its entries
/// out of order, or skip them as already in the tables, so it is damage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Misnumbered {
    /// Its index in [`JournalFile::batches`].
    pub batch: usize,
    pub seqno: u64,
    /// The number salvage writes instead: one above the batch before it
    /// (as repaired), so replay follows the order the batches were
    /// written in, and no number falls, which could make the engine skip
    /// a batch as already in its tables. `None` past `u64::MAX`.
    pub repair: Option<u64>,
}

impl JournalFile {
    pub(crate) fn is_damaged(&self) -> bool {
        !self.damaged.is_empty() || !self.misnumbered.is_empty()
    }

    /// What is wrong with a damaged file, for the error that refuses it.
    pub(crate) fn describe_damage(&self) -> String {
        let mut parts = Vec::new();
        if let Some(&(offset, len)) = self.damaged.first() {
            parts.push(format!(
                "{} damaged stretch(es), the first {len} bytes at offset {offset}, followed by intact batches the engine would not replay",
                self.damaged.len()
            ));
        }
        if let Some(m) = self.misnumbered.first() {
            let (offset, _) = self.batches[m.batch];
            parts.push(format!(
                "{} batch(es) whose sequence number is not above the one before, the first at offset {offset} ({}), which the engine would replay out of order",
                self.misnumbered.len(),
                m.seqno
            ));
        }
        format!(
            "journal {} has {}",
            self.path.display(),
            parts.join(" and ")
        )
    }
}

/// Finds the batches of `files` (in replay order) whose sequence number
/// is not above the one before it, and what salvage writes instead. (A
/// first batch whose number fell is not found: replayed first, its entries
/// are ordered right among the journal's all the same.)
fn mark_misnumbered(files: &mut [JournalFile]) {
    let mut last: Option<u64> = None;
    for file in files {
        for (batch, &seqno) in file.seqnos.iter().enumerate() {
            match last {
                Some(before) if seqno <= before => {
                    let repair = before.checked_add(1);
                    file.misnumbered.push(Misnumbered {
                        batch,
                        seqno,
                        repair,
                    });
                    last = repair.or(Some(before));
                }
                _ => last = Some(seqno),
            }
        }
    }
}

/// Reads every journal file in an engine directory, in replay order.
pub(crate) fn read_dir(engine_dir: &Path) -> std::io::Result<Vec<JournalFile>> {
    let mut files: Vec<(u64, PathBuf)> = Vec::new();
    let entries = match fs::read_dir(engine_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let path = entry?.path();
        let n = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".jnl"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(n) = n {
            files.push((n, path));
        }
    }
    files.sort();
    let mut read = files
        .into_iter()
        .map(|(_, path)| {
            let bytes = fs::read(&path)?;
            Ok(read_journal(path, &bytes))
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    mark_misnumbered(&mut read);
    Ok(read)
}

/// The damaged journal files of an engine directory, if any.
pub(crate) fn check_dir(engine_dir: &Path) -> std::io::Result<Vec<JournalFile>> {
    Ok(read_dir(engine_dir)?
        .into_iter()
        .filter(JournalFile::is_damaged)
        .collect())
}

fn read_journal(path: PathBuf, bytes: &[u8]) -> JournalFile {
    let mut file = JournalFile {
        path,
        ..Default::default()
    };
    let mut pos = 0;
    // Where the bytes not (yet) accounted for by a batch start.
    let mut unread_from = None;
    while pos < bytes.len() {
        if let Some(len) = batch_at(bytes, pos) {
            if let Some(from) = unread_from.take() {
                file.damaged.push((from, pos - from));
            }
            file.batches.push((pos, len));
            file.seqnos.push(u64::from_le_bytes(
                bytes[pos + 5..pos + START_LEN]
                    .try_into()
                    .unwrap_or_default(),
            ));
            pos += len;
            continue;
        }
        if unread_from.is_none() {
            if bytes[pos..].iter().all(|b| *b == 0) {
                break; // the preallocated rest
            }
            unread_from = Some(pos);
        }
        pos += 1;
    }
    if let Some(from) = unread_from {
        let end = bytes.len() - bytes[from..].iter().rev().take_while(|b| **b == 0).count();
        // A batch the process was writing when it died is a prefix of one:
        // it never holds the closing magic bytes, nor the shape of a whole
        // batch (the preallocated zeros after it are no entry tags).
        // Stretches that do held a whole batch whose bytes changed since
        // (fjall would drop some such as if torn, though they may have
        // been synced long ago): damage.
        if holds_batch_end(&bytes[from..end]) || whole_but_changed(bytes, from) {
            file.damaged.push((from, end - from));
        } else {
            file.tail = end - from;
        }
    }
    file
}

/// Whether a whole batch's shape starts at `pos` with its magic bytes
/// written (not the preallocated zeros a torn write leaves), but changed.
fn whole_but_changed(bytes: &[u8], pos: usize) -> bool {
    batch_shape_at(bytes, pos).is_some_and(|(len, _)| {
        bytes[pos + len - MAGIC.len()..pos + len]
            .iter()
            .any(|b| *b != 0)
    })
}

/// Whether `bytes` hold the magic bytes that close a batch (with its end
/// tag possibly damaged): what a torn prefix of one never holds.
fn holds_batch_end(bytes: &[u8]) -> bool {
    bytes.windows(MAGIC.len()).any(|w| w == MAGIC)
}

/// The length of the batch that starts at `pos` if one does and its
/// checksum verifies.
fn batch_at(bytes: &[u8], pos: usize) -> Option<usize> {
    let (len, verified) = batch_shape_at(bytes, pos)?;
    verified.then_some(len)
}

/// The length of what starts at `pos` if it is shaped as a whole batch
/// (start, its entries, an end tag), and whether its checksum and magic
/// bytes verify.
fn batch_shape_at(bytes: &[u8], pos: usize) -> Option<(usize, bool)> {
    let b = bytes.get(pos..)?;
    if b.len() < START_LEN + END_LEN || b[0] != START {
        return None;
    }
    let count = u32::from_le_bytes(b[1..5].try_into().ok()?);
    if count > MAX_ENTRIES {
        return None;
    }
    let mut at = START_LEN;
    let entries_from = at;
    for _ in 0..count {
        match *b.get(at)? {
            ITEM => {
                let h = b.get(at..at + ITEM_HEADER_LEN)?;
                let key_len = u16::from_le_bytes(h[11..13].try_into().ok()?) as usize;
                let disk_len = u32::from_le_bytes(h[17..21].try_into().ok()?) as usize;
                at = at
                    .checked_add(ITEM_HEADER_LEN + key_len)?
                    .checked_add(disk_len)?;
                if at > b.len() {
                    return None;
                }
            }
            CLEAR => at += 1 + 8,
            _ => return None,
        }
    }
    let entries_to = at;
    let end = b.get(at..at + END_LEN)?;
    if end[0] != END {
        return None;
    }
    let checksum = u64::from_le_bytes(end[1..9].try_into().ok()?);
    let verified =
        &end[9..] == MAGIC && xxhash_rust::xxh3::xxh3_64(&b[entries_from..entries_to]) == checksum;
    Some((at + END_LEN, verified))
}

/// Rewrites a journal file (a salvage's working copy, never the original)
/// with only its verified batches, so the engine replays all of them; a
/// misnumbered batch gets its repair number, or is left out without one.
/// Returns the `(offset, length)` of the batches left out.
pub(crate) fn rewrite_without_damage(file: &JournalFile) -> std::io::Result<Vec<(usize, usize)>> {
    let bytes = fs::read(&file.path)?;
    let mut out = Vec::with_capacity(bytes.len());
    let mut left_out = Vec::new();
    for (i, &(off, len)) in file.batches.iter().enumerate() {
        let batch = &bytes[off..off + len];
        match file.misnumbered.iter().find(|m| m.batch == i) {
            None => out.extend_from_slice(batch),
            Some(Misnumbered {
                repair: Some(seqno),
                ..
            }) => {
                out.extend_from_slice(&batch[..5]);
                out.extend_from_slice(&seqno.to_le_bytes());
                out.extend_from_slice(&batch[START_LEN..]);
            }
            Some(Misnumbered { repair: None, .. }) => left_out.push((off, len)),
        }
    }
    fs::write(&file.path, out)?;
    Ok(left_out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(seqno: u64, items: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut entries = Vec::new();
        for (k, v) in items {
            entries.push(ITEM);
            entries.push(0); // a value
            entries.push(0); // uncompressed
            entries.extend_from_slice(&1u64.to_le_bytes());
            entries.extend_from_slice(&(k.len() as u16).to_le_bytes());
            entries.extend_from_slice(&(v.len() as u32).to_le_bytes());
            entries.extend_from_slice(&(v.len() as u32).to_le_bytes());
            entries.extend_from_slice(k);
            entries.extend_from_slice(v);
        }
        let mut out = vec![START];
        out.extend_from_slice(&(items.len() as u32).to_le_bytes());
        out.extend_from_slice(&seqno.to_le_bytes());
        out.extend_from_slice(&entries);
        out.push(END);
        out.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(&entries).to_le_bytes());
        out.extend_from_slice(MAGIC);
        out
    }

    #[test]
    fn a_damaged_batch_costs_only_itself() {
        let a = batch(1, &[(b"k1", b"v1")]);
        let b = batch(2, &[(b"k2", b"v2"), (b"k3", b"v3")]);
        let c = batch(4, &[(b"k4", b"v4")]);
        let mut bytes = [a.clone(), b.clone(), c.clone()].concat();
        bytes.extend_from_slice(&[0; 64]);
        let clean = read_journal(PathBuf::new(), &bytes);
        assert_eq!(clean.batches.len(), 3);
        assert!(!clean.is_damaged());
        assert_eq!(clean.tail, 0);
        // A flipped value byte in the middle batch.
        let flip = a.len() + b.len() - 16;
        bytes[flip] ^= 0xff;
        let j = read_journal(PathBuf::new(), &bytes);
        assert_eq!(j.batches, vec![(0, a.len()), (a.len() + b.len(), c.len())]);
        assert_eq!(j.damaged, vec![(a.len(), b.len())]);
        // A flipped tag byte (fjall would cut the journal there).
        bytes[flip] ^= 0xff;
        bytes[a.len()] = 0x7f;
        let j = read_journal(PathBuf::new(), &bytes);
        assert_eq!(j.batches.len(), 2);
        assert_eq!(j.damaged, vec![(a.len(), b.len())]);
    }

    #[test]
    fn a_changed_byte_in_the_last_whole_batch_is_damage() {
        let a = batch(1, &[(b"k1", b"v1")]);
        let b = batch(2, &[(b"k2", b"v2")]);
        let mut bytes = [a.clone(), b.clone()].concat();
        bytes.extend_from_slice(&[0; 32]);
        bytes[a.len() + b.len() - 16] ^= 0xff;
        let j = read_journal(PathBuf::new(), &bytes);
        assert_eq!(j.batches, vec![(0, a.len())]);
        assert_eq!(j.damaged, vec![(a.len(), b.len())]);
        assert_eq!(j.tail, 0);
    }

    #[test]
    fn a_changed_magic_or_end_tag_in_the_last_batch_is_damage() {
        let a = batch(1, &[(b"k1", b"v1")]);
        let b = batch(2, &[(b"k2", b"v2")]);
        for back in [1, END_LEN] {
            let mut bytes = [a.clone(), b.clone()].concat();
            bytes.extend_from_slice(&[0; 32]);
            // The last magic byte, then the end tag.
            bytes[a.len() + b.len() - back] ^= 0xff;
            let j = read_journal(PathBuf::new(), &bytes);
            assert_eq!(j.damaged, vec![(a.len(), b.len())], "{back}");
            assert_eq!(j.tail, 0);
        }
    }

    /// Each file as `read_dir` sees it, for the order check.
    fn read_all(files: &[Vec<u8>]) -> Vec<JournalFile> {
        let mut read: Vec<JournalFile> = files
            .iter()
            .map(|b| read_journal(PathBuf::new(), b))
            .collect();
        mark_misnumbered(&mut read);
        read
    }

    fn batches(seqnos: &[u64]) -> Vec<u8> {
        seqnos
            .iter()
            .flat_map(|&s| batch(s, &[(b"k", b"v")]))
            .collect()
    }

    #[test]
    fn a_changed_sequence_number_is_found_and_numbers_after_it_rise() {
        let found = |files: &[&[u64]]| -> Vec<Vec<(usize, u64, Option<u64>)>> {
            let bytes: Vec<Vec<u8>> = files.iter().map(|s| batches(s)).collect();
            read_all(&bytes)
                .iter()
                .map(|j| {
                    j.misnumbered
                        .iter()
                        .map(|m| (m.batch, m.seqno, m.repair))
                        .collect()
                })
                .collect()
        };
        // A number that fell in the middle and at the end of the journal.
        assert_eq!(found(&[&[7, 8, 1, 10]]), vec![vec![(2, 1, Some(9))]]);
        assert_eq!(found(&[&[7, 8, 1]]), vec![vec![(2, 1, Some(9))]]);
        // One that rose: the batches after it rise above it.
        let high = 9 | (1 << 40);
        assert_eq!(
            found(&[&[7, 8, high, 10, 11]]),
            vec![vec![(3, 10, Some(high + 1)), (4, 11, Some(high + 2))]]
        );
        // Across two files.
        assert_eq!(
            found(&[&[1, 2, 3], &[4, 2, 6]]),
            vec![vec![], vec![(1, 2, Some(5))]]
        );
        // In order, gaps and all: nothing found.
        assert_eq!(found(&[&[3, 9, 10, 200]]), vec![Vec::new()]);
        let read = read_all(&[batches(&[7, 8, 1])]);
        assert!(read[0].is_damaged());
        assert!(
            read[0]
                .describe_damage()
                .contains("not above the one before")
        );
    }

    #[test]
    fn salvage_writes_the_repaired_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.jnl");
        fs::write(&path, batches(&[1, 2, 0, 4])).unwrap();
        let read = read_dir(dir.path()).unwrap();
        assert!(read[0].is_damaged());
        assert!(rewrite_without_damage(&read[0]).unwrap().is_empty());
        let after = &read_dir(dir.path()).unwrap()[0];
        assert_eq!(after.seqnos, vec![1, 2, 3, 4]);
        assert!(!after.is_damaged());
        // No number above the one before: the batch is left out.
        fs::write(&path, batches(&[1, u64::MAX, 3])).unwrap();
        let read = read_dir(dir.path()).unwrap();
        let (off, len) = read[0].batches[2];
        assert_eq!(rewrite_without_damage(&read[0]).unwrap(), vec![(off, len)]);
        assert_eq!(read_dir(dir.path()).unwrap()[0].seqnos, vec![1, u64::MAX]);
    }

    #[test]
    fn a_torn_last_batch_is_a_tail_not_damage() {
        let a = batch(1, &[(b"k1", b"v1")]);
        let b = batch(2, &[(b"k2", b"v2")]);
        let mut bytes = a.clone();
        bytes.extend_from_slice(&b[..b.len() - 5]);
        bytes.extend_from_slice(&[0; 32]);
        let j = read_journal(PathBuf::new(), &bytes);
        assert_eq!(j.batches, vec![(0, a.len())]);
        assert!(!j.is_damaged());
        assert_eq!(j.tail, b.len() - 5);
    }

    /// Why the check exists: fjall itself, given a damaged tag byte in the
    /// middle of its journal, opens without an error and drops that batch
    /// and every later one. (If this starts failing after a fjall upgrade,
    /// fjall changed how it recovers: re-read its journal code.)
    #[test]
    fn fjall_silently_cuts_its_journal_at_a_damaged_tag() {
        use crate::storage::fjall::{FjallOptions, FjallStore};
        use crate::storage::{Durability, KvStore, Table, WriteBatch};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fjall");
        {
            let kv = FjallStore::open(&path, &FjallOptions::default()).unwrap();
            for i in 0..10u8 {
                let mut b = WriteBatch::new();
                b.put(Table::Uid, [i], [i]);
                b.durability = Durability::Sync;
                kv.write(b).unwrap();
            }
        }
        let journal = &read_dir(&path).unwrap()[0];
        let (third, _) = journal.batches[2];
        let mut bytes = fs::read(&journal.path).unwrap();
        bytes[third] = 0x7F;
        fs::write(&journal.path, &bytes).unwrap();
        assert_eq!(check_dir(&path).unwrap().len(), 1, "our check sees it");
        let kv = FjallStore::open(&path, &FjallOptions::default()).unwrap();
        let left = kv.scan(Table::Uid, &crate::storage::ScanRange::new(vec![], vec![]));
        assert!(left.count() < 9, "fjall kept the batches after the damage");
    }

    /// A changed byte in the last, complete batch is damage too (fjall
    /// refuses it with a checksum error; salvage must be able to cut it).
    #[test]
    fn a_damaged_last_batch_is_damage_to_fjall_and_to_us() {
        use crate::storage::fjall::{FjallOptions, FjallStore};
        use crate::storage::{Durability, KvStore, Table, WriteBatch};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fjall");
        {
            let kv = FjallStore::open(&path, &FjallOptions::default()).unwrap();
            for i in 0..10u8 {
                let mut b = WriteBatch::new();
                b.put(Table::Uid, [i], [i; 16]);
                b.durability = Durability::Sync;
                kv.write(b).unwrap();
            }
        }
        let journal = &read_dir(&path).unwrap()[0];
        let (last, len) = *journal.batches.last().unwrap();
        let mut bytes = fs::read(&journal.path).unwrap();
        bytes[last + len - 20] ^= 0xFF;
        fs::write(&journal.path, &bytes).unwrap();
        assert_eq!(check_dir(&path).unwrap().len(), 1, "our check sees it");
        let opened = FjallStore::open(&path, &FjallOptions::default());
        let left = opened.map(|kv| {
            kv.scan(Table::Uid, &crate::storage::ScanRange::new(vec![], vec![]))
                .count()
        });
        assert!(
            matches!(&left, Err(crate::storage::StorageError::Damaged(_))),
            "fjall: {left:?}"
        );
    }
}
