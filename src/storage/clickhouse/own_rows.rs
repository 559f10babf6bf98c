//! What this process wrote of each data row lately, so that it writes a
//! row again with new cells without reading it back
//! ([`RowAppends::append_rows`](crate::storage::RowAppends::append_rows);
//! docs/scale-out.md, "Writing rows").
//!
//! A read may come from a replica that lags: the first replica of a
//! shard took a `sync` put's row and died before the second fetched it.
//! A row rebuilt from the second's copy and written as a newer version of
//! the same (key, writer) replaces, once the first returns and the
//! replicas agree, the version holding the acknowledged points. So a
//! version is only ever written from what this process knows completely:
//! every cell it wrote under that writer name, kept here. A row not held
//! here (never written by this process, forgotten to bound memory, or
//! possibly touched by a delete) gets a new writer name (a *slot*) whose
//! first version holds only the new cells; reads merge every writer's
//! version of a key, so nothing needs reading to write.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of row values held at most: about a million series' current
/// hours at 10 s points (a compressed hour is ~450 bytes). Rows beyond
/// it are forgotten least recently written first, which costs their next
/// write a new slot, never a cell.
const BUDGET_BYTES: usize = 512 << 20;
/// A row not written for this long is forgotten: its hour is long sealed
/// and a late point for it is rare enough to start a slot of its own.
const IDLE: Duration = Duration::from_secs(2 * 3600);
/// How often idle rows are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// A row's version as this process last wrote it.
pub(super) struct OwnRow {
    /// The writer name its versions go under.
    pub(super) slot: Arc<str>,
    /// Every cell written under `slot`, as one row value.
    pub(super) value: Vec<u8>,
    used: Instant,
}

pub(super) struct OwnRows {
    rows: HashMap<Vec<u8>, OwnRow>,
    bytes: usize,
    budget: usize,
    /// The cluster's delete generation these rows were checked against.
    deletes_seen: Option<u64>,
    swept: Instant,
}

impl OwnRows {
    pub(super) fn new() -> OwnRows {
        OwnRows::with_budget(BUDGET_BYTES)
    }

    fn with_budget(budget: usize) -> OwnRows {
        OwnRows {
            rows: HashMap::new(),
            bytes: 0,
            budget,
            deletes_seen: None,
            swept: Instant::now(),
        }
    }

    /// Forgets every row when the cluster's delete generation moved since
    /// the last call: a delete by any TSD may have put tombstones over
    /// these rows' slots, and writing a slot again from here would bring
    /// the deleted cells back.
    pub(super) fn check_deletes(&mut self, generation: u64) {
        if self.deletes_seen != Some(generation) {
            self.rows.clear();
            self.bytes = 0;
            self.deletes_seen = Some(generation);
        }
    }

    pub(super) fn get(&self, key: &[u8]) -> Option<&OwnRow> {
        self.rows.get(key)
    }

    /// Records `value` as the whole of `key`'s version under `slot`.
    pub(super) fn keep(&mut self, key: Vec<u8>, slot: Arc<str>, value: Vec<u8>) {
        let size = key.len() + value.len();
        let key_len = key.len();
        let row = OwnRow {
            slot,
            value,
            used: Instant::now(),
        };
        if let Some(old) = self.rows.insert(key, row) {
            self.bytes -= key_len + old.value.len();
        }
        self.bytes += size;
        self.bound();
    }

    /// Forgets `key` (this process deleted or replaced it).
    pub(super) fn forget(&mut self, key: &[u8]) {
        if let Some(old) = self.rows.remove(key) {
            self.bytes -= key.len() + old.value.len();
        }
    }

    /// Forgets idle rows, and the least recently written ones while over
    /// budget.
    fn bound(&mut self) {
        let now = Instant::now();
        if now.duration_since(self.swept) >= SWEEP_EVERY {
            self.swept = now;
            self.retain(|row| now.duration_since(row.used) < IDLE);
        }
        if self.bytes > self.budget {
            // Down to three quarters, so the sort is paid once per many
            // writes rather than on each.
            let mut by_age: Vec<(Instant, usize)> = self
                .rows
                .iter()
                .map(|(k, r)| (r.used, k.len() + r.value.len()))
                .collect();
            by_age.sort_unstable_by_key(|&(t, _)| t);
            let mut to_free = self.bytes - self.budget * 3 / 4;
            let mut cut = None;
            for (t, size) in by_age {
                cut = Some(t);
                to_free = to_free.saturating_sub(size);
                if to_free == 0 {
                    break;
                }
            }
            if let Some(cut) = cut {
                self.retain(|row| row.used > cut);
            }
        }
    }

    fn retain(&mut self, keep: impl Fn(&OwnRow) -> bool) {
        let mut freed = 0;
        self.rows.retain(|k, r| {
            let kept = keep(r);
            if !kept {
                freed += k.len() + r.value.len();
            }
            kept
        });
        self.bytes -= freed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(n: u32) -> Arc<str> {
        Arc::from(format!("tsd@{n}"))
    }

    #[test]
    fn a_kept_row_replaces_its_last_version_and_counts_its_bytes_once() {
        let mut own = OwnRows::new();
        own.keep(b"k1".to_vec(), slot(1), vec![0; 10]);
        own.keep(b"k1".to_vec(), slot(1), vec![0; 30]);
        own.keep(b"k2".to_vec(), slot(2), vec![0; 5]);
        assert_eq!(own.bytes, 2 + 30 + 2 + 5);
        assert_eq!(own.get(b"k1").unwrap().value.len(), 30);
        own.forget(b"k1");
        assert!(own.get(b"k1").is_none());
        assert_eq!(own.bytes, 2 + 5);
    }

    #[test]
    fn a_moved_delete_generation_forgets_every_row() {
        let mut own = OwnRows::new();
        own.check_deletes(3);
        own.keep(b"k".to_vec(), slot(1), vec![1]);
        own.check_deletes(3);
        assert!(own.get(b"k").is_some(), "same generation: rows kept");
        own.check_deletes(4);
        assert!(own.get(b"k").is_none());
        assert_eq!(own.bytes, 0);
    }

    #[test]
    fn over_budget_the_least_recently_written_rows_go_first() {
        let mut own = OwnRows::with_budget(100);
        for i in 0..10u8 {
            own.keep(vec![i], slot(u32::from(i)), vec![0; 19]);
        }
        assert!(own.bytes <= 100, "{} bytes held", own.bytes);
        assert!(own.get(&[9]).is_some(), "the newest row is kept");
        assert!(own.get(&[0]).is_none(), "the oldest row is forgotten");
    }
}
