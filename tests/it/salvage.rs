//! A damaged engine file: the store is refused with the salvage command
//! named, and `tsdb fsck --salvage NEW_DIR` copies every readable entry
//! into a new store, reporting what it could not read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::common::{Run, tsd_refuses, tsdb};

const METRICS: u64 = 5;
const HOSTS: u64 = 50;
const POINTS: u64 = 20_000;
const BASE: u64 = 1356998400;

/// `(metric, host, time) -> value` of everything imported.
type Points = BTreeMap<(String, String, u64), String>;

fn point(i: u64) -> ((String, String, u64), String) {
    (
        (
            format!("sys.m{}", i % METRICS),
            format!("h{}", i % HOSTS),
            BASE + i * 10,
        ),
        i.to_string(),
    )
}

/// A store holding [`POINTS`] points, imported by `tsdb import`.
fn store(dir: &Path) -> PathBuf {
    let lines: String = (0..POINTS)
        .map(|i| {
            let ((m, h, t), v) = point(i);
            format!("{m} {t} {v} host={h}\n")
        })
        .collect();
    let file = dir.join("points.txt");
    std::fs::write(&file, lines).unwrap();
    let store = dir.join("store");
    let r = tsdb(&store, &["import", "--auto-metric", file.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    store
}

fn scan(store: &Path, metric: &str) -> Run {
    tsdb(store, &["scan", "--import", "1356998400", "sum", metric])
}

/// Every point the store returns; each must be one that was imported.
fn points_in(store: &Path) -> Points {
    let mut out = Points::new();
    for m in 0..METRICS {
        let r = scan(store, &format!("sys.m{m}"));
        assert_eq!(r.code, 0, "{}", r.stderr);
        for line in r.stdout.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            let host = f[3].strip_prefix("host=").unwrap().to_string();
            out.insert((f[0].into(), host, f[1].parse().unwrap()), f[2].into());
        }
    }
    let all: Points = (0..POINTS).map(point).collect();
    for (k, v) in &out {
        assert_eq!(all.get(k), Some(v), "a point that was never written: {k:?}");
    }
    out
}

fn flip(path: &Path, offset: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[offset] ^= 0xFF;
    std::fs::write(path, bytes).unwrap();
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files_under(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// Compacts the store (every row moves into table files and the journal
/// empties) and returns its biggest table file (the data rows) and its
/// length.
fn compacted_biggest_table(store: &Path) -> (PathBuf, usize) {
    let r = tsdb(store, &["fsck", "--full-scan", "--compact"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let mut files = Vec::new();
    files_under(&store.join("fjall"), &mut files);
    let biggest = files
        .into_iter()
        .filter(|p| p.parent().unwrap().ends_with("tables"))
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let len = std::fs::metadata(&biggest).unwrap().len() as usize;
    (biggest, len)
}

fn salvage(store: &Path, dest: &Path) -> Run {
    tsdb(store, &["fsck", "--salvage", dest.to_str().unwrap()])
}

#[test]
fn a_damaged_journal_batch_is_refused_and_salvage_keeps_every_other_batch() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    // The engine's journal holds the imported rows (nothing is compacted
    // into tables yet): damage one batch in its middle.
    // The journal that holds the most (fjall starts with 0.jnl; the bytes
    // past what it wrote are zeros).
    let mut files = Vec::new();
    files_under(&store.join("fjall"), &mut files);
    let mut journals: Vec<(usize, PathBuf)> = files
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "jnl"))
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (b.len() - b.iter().rev().take_while(|b| **b == 0).count(), p)
        })
        .collect();
    journals.sort();
    let (used, journal) = journals.last().cloned().expect("a journal");
    assert!(
        used > 100_000,
        "the imported rows are not in the engine's journal: {journals:?}"
    );
    let bytes = std::fs::read(&journal).unwrap();
    // Two bytes 16 apart: a batch's header holds an 8-byte sequence number
    // no checksum covers (a flip there alone went unnoticed once in CI),
    // and a batch is longer than 16 bytes, so at least one flip lands in
    // checksummed bytes of the same batch or the next: one damaged stretch.
    flip(&journal, used / 2);
    flip(&journal, used / 2 + 16);

    let r = scan(&store, "sys.m0");
    assert_ne!(r.code, 0, "a damaged journal was served");
    assert!(r.stderr.contains("is damaged"), "{}", r.stderr);
    assert!(
        r.stderr.contains("fsck --data-dir") && r.stderr.contains("--salvage NEW_DIR"),
        "the error names the way back: {}",
        r.stderr
    );
    let stderr = tsd_refuses(&store);
    assert!(stderr.contains("--salvage NEW_DIR"), "{stderr}");

    let new = dir.path().join("salvaged");
    let r = salvage(&store, &new);
    assert_eq!(r.code, 1, "something was lost: {}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("1 damaged stretches cut out"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("of journal"), "{}", r.stdout);
    let got = points_in(&new);
    // One batch is a handful of rows; everything else is back.
    assert!(
        got.len() as u64 > POINTS * 95 / 100 && (got.len() as u64) < POINTS,
        "{} of {POINTS} points salvaged",
        got.len()
    );
    let r = tsdb(&new, &["fsck", "--full-scan"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    // The source was only read.
    assert_eq!(std::fs::read(&journal).unwrap().len(), bytes.len());
    // New points go into the salvaged store.
    let more = dir.path().join("more.txt");
    std::fs::write(&more, "sys.m0 1356998401 7 host=h0\n").unwrap();
    let r = tsdb(&new, &["import", "--auto-metric", more.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn a_damaged_table_block_costs_only_its_keys() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let (biggest, len) = compacted_biggest_table(&store);
    flip(&biggest, len / 3);

    let new = dir.path().join("salvaged");
    let r = salvage(&store, &new);
    assert_eq!(r.code, 1, "something was lost: {}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("table tsdb: "), "{}", r.stdout);
    assert!(r.stdout.contains("1 unreadable ranges"), "{}", r.stdout);
    assert!(
        r.stdout.contains("lost: the keys after sys.m"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains(" at 2013-01-"),
        "names the hours: {}",
        r.stdout
    );
    let got = points_in(&new);
    assert!(
        got.len() as u64 > POINTS / 2 && (got.len() as u64) < POINTS,
        "{} of {POINTS} points salvaged",
        got.len()
    );
    // Every series is still named: the UID table was not damaged.
    for m in 0..METRICS {
        assert_eq!(
            tsdb(&new, &["uid", "metrics", &format!("sys.m{m}")]).code,
            0
        );
    }
    let r = tsdb(&new, &["fsck", "--full-scan"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
}

#[test]
fn an_undamaged_store_salvages_whole_and_a_used_destination_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let new = dir.path().join("salvaged");
    let r = salvage(&store, &new);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("nothing was lost"), "{}", r.stdout);
    assert_eq!(points_in(&new).len() as u64, POINTS);
    let r = salvage(&store, &new);
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("already holds a store"), "{}", r.stderr);
}

/// Damage in a table file's trailer keeps the engine from opening at all:
/// the store is refused as damaged, and salvage says plainly that it
/// cannot read it and what to do instead.
#[test]
fn an_engine_that_cannot_open_is_named_damaged_and_salvage_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let (biggest, len) = compacted_biggest_table(&store);
    flip(&biggest, len - 100);
    let r = scan(&store, "sys.m0");
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("is damaged"), "{}", r.stderr);
    let new = dir.path().join("salvaged");
    let r = salvage(&store, &new);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("nothing can be salvaged")
            && r.stderr.contains("restore the latest backup"),
        "{}",
        r.stderr
    );
    assert!(
        !new.join(".salvage-source").exists(),
        "the working copy is removed"
    );
}

/// A batch's sequence number lies outside its checksum: a changed one is
/// found by the order fjall numbers batches in, the store is refused, and
/// salvage renumbers the batch rather than cutting it out, so nothing is
/// lost.
#[test]
fn a_changed_batch_number_is_refused_and_salvage_keeps_the_batch() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let mut files = Vec::new();
    files_under(&store.join("fjall"), &mut files);
    // The journal that holds the most (the bytes past what fjall wrote
    // are zeros).
    let (used, journal) = files
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "jnl"))
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (b.len() - b.iter().rev().take_while(|b| **b == 0).count(), p)
        })
        .max()
        .expect("a journal");
    let mut bytes = std::fs::read(&journal).unwrap();
    // A batch ends with the magic bytes "FJL" 3; the next starts with its
    // tag (1), its entry count (4 bytes) and its sequence number (8).
    let magic = b"FJL\x03";
    let end = (used / 2..used)
        .find(|&i| bytes[i..].starts_with(magic) && bytes.get(i + magic.len()) == Some(&1))
        .expect("a batch after the first quarter of the journal");
    let seqno = end + magic.len() + 5;
    bytes[seqno..seqno + 8].copy_from_slice(&0u64.to_le_bytes());
    std::fs::write(&journal, &bytes).unwrap();

    let r = scan(&store, "sys.m0");
    assert_ne!(r.code, 0, "a journal out of order was served");
    assert!(
        r.stderr.contains("not above the one before") && r.stderr.contains("--salvage NEW_DIR"),
        "{}",
        r.stderr
    );
    let new = dir.path().join("salvaged");
    let r = salvage(&store, &new);
    assert_eq!(
        r.code, 0,
        "nothing should be lost: {}{}",
        r.stdout, r.stderr
    );
    assert!(r.stdout.contains("renumbered: 1 batches"), "{}", r.stdout);
    assert_eq!(points_in(&new).len() as u64, POINTS);
}
