//! Read-only operation: a database that cannot take writes still serves
//! everything it holds, and takes writes again by itself.
//!
//! Two things put a database in read-only mode besides a failed WAL or
//! engine write (which [`Db::writable`](super::Db::writable) reports from
//! the WAL and the engine themselves):
//!
//! - **A start on a full disk.** The WAL left by the previous process
//!   cannot be replayed into the engine, which cannot take the writes.
//!   Rather than refuse to open, [`Db::open`](super::Db::open) reads the
//!   log into the write buffer ([`replay::hold_in_memory`](super::replay)),
//!   as far as [`HELD_POINTS_PER_BUFFERED`] allows, so that queries see
//!   every acknowledged point, and keeps every segment on disk. Puts,
//!   rollups, histograms and deletes are refused with the engine's own
//!   cause (`No space left on device`). Once the engine takes writes
//!   again the flusher replays those segments into the store as an open
//!   would (UIDs, index entries, deletes, rollups, in log order), drops
//!   the copy it held in memory, and only then takes writes: a new point
//!   can never be overwritten by an older one replayed after it.
//! - **Free space below `tsd.storage.min_free_bytes`** on the disk of the
//!   data directory (VictoriaMetrics' `-storage.minFreeDiskSpaceBytes`),
//!   checked at every flusher tick: puts are refused before the WAL or
//!   the engine ever meet ENOSPC, and taken again once the disk has that
//!   much free. Points accepted before are still flushed (their rows let
//!   their WAL segments go).
//!
//! `/api/stats` shows either as `tsd.storage.healthy 0` (and `/metrics`
//! as `tsd_storage_healthy 0`), with `tsd.storage.free_bytes` and
//! `tsd.storage.held_points`. docs/durability.md states the promises.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use super::Db;
use super::replay::HeldReplay;
use crate::write::buffer::SealPolicy;

/// The most points a start on a full disk holds in memory, as a multiple
/// of `tsd.storage.buffer.max_points` (2,000,000 by default, so 8,000,000
/// points, about 130 MiB of 16-byte points and their hours): a running
/// TSD flushes well before its buffer holds that much, but a held log
/// cannot be flushed at all, and the rest of it is better served late
/// than the process killed for its memory. Segments past it are not read
/// (a log line names them) until the disk takes writes.
pub(super) const HELD_POINTS_PER_BUFFERED: usize = 4;

/// Why a database refuses writes besides its WAL and engine, and what it
/// holds in memory meanwhile.
pub(super) struct ReadOnly {
    /// The data directory, whose disk's free space is checked.
    dir: PathBuf,
    /// `tsd.storage.min_free_bytes` (0: no floor).
    min_free_bytes: u64,
    /// The log a start on a full disk could not replay, held in memory.
    /// Locked only by its replay; readers look at `holding` and
    /// `held_points`, and try the lock for the cause.
    held: Mutex<Option<HeldReplay>>,
    /// Set until the held log is replayed into the store.
    holding: AtomicBool,
    /// Points of the held log in the write buffer.
    held_points: AtomicU64,
    /// Set while the disk's free space is below `min_free_bytes`.
    below_floor: Mutex<Option<String>>,
    /// Free bytes on the data directory's disk at the last check.
    free_bytes: AtomicU64,
    /// Set while either of the above refuses writes: what every append
    /// checks first, without a lock.
    refusing: AtomicBool,
}

/// Bytes an unprivileged process may still write on the file system
/// holding `dir` (`statvfs`'s `f_bavail` blocks).
pub fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statvfs(3) writes into the zeroed struct it is given, and
    // reads the NUL-terminated path, which outlives the call.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

impl ReadOnly {
    pub(super) fn new(dir: &Path, min_free_bytes: u64, held: Option<HeldReplay>) -> ReadOnly {
        let holding = held.is_some();
        let held_points = held.as_ref().map_or(0, |h| h.points);
        let ro = ReadOnly {
            dir: dir.to_path_buf(),
            min_free_bytes,
            held: Mutex::new(held),
            holding: AtomicBool::new(holding),
            held_points: AtomicU64::new(held_points),
            below_floor: Mutex::new(None),
            free_bytes: AtomicU64::new(0),
            refusing: AtomicBool::new(holding),
        };
        ro.check_floor();
        ro
    }

    /// Why writes are refused, if they are for a reason of this file.
    pub(super) fn reason(&self) -> Option<String> {
        if !self.refusing.load(Ordering::Acquire) {
            return None;
        }
        if self.holding.load(Ordering::Acquire) {
            // Its replay holds the lock: writes are refused meanwhile, not
            // made to wait for it.
            match self.held.try_lock() {
                None => {
                    return Some("the write-ahead log held since a start on a full disk is being replayed into the store; writes are taken once it is".into());
                }
                Some(held) => {
                    if let Some(held) = &*held {
                        return Some(held.cause.clone());
                    }
                }
            }
        }
        self.below_floor.lock().clone()
    }

    /// Points of the previous process's log held in memory, not yet in
    /// the store.
    pub(super) fn held_points(&self) -> u64 {
        self.held_points.load(Ordering::Relaxed)
    }

    /// Whether a log held since a start on a full disk awaits its replay.
    pub(super) fn is_holding(&self) -> bool {
        self.holding.load(Ordering::Acquire)
    }

    pub(super) fn free_bytes(&self) -> u64 {
        self.free_bytes.load(Ordering::Relaxed)
    }

    /// Measures the free space again and goes into or out of read-only
    /// mode by the floor; returns whether it is below the floor.
    pub(super) fn check_floor(&self) -> bool {
        let free = match free_bytes(&self.dir) {
            Ok(free) => free,
            // The directory is gone or unreadable: the WAL says why at
            // the next write; the floor decides nothing.
            Err(_) => return self.below_floor.lock().is_some(),
        };
        self.free_bytes.store(free, Ordering::Relaxed);
        let mut below = self.below_floor.lock();
        if free < self.min_free_bytes {
            self.refusing.store(true, Ordering::Release);
            if below.is_none() {
                tracing::error!(dir = %self.dir.display(), free, min_free_bytes = self.min_free_bytes, "free disk space is below tsd.storage.min_free_bytes; refusing writes until it is back above it");
            }
            *below = Some(format!(
                "No space left on device: {free} bytes free on the disk holding {}, below tsd.storage.min_free_bytes ({}); writes are taken again once it has that much free",
                self.dir.display(),
                self.min_free_bytes
            ));
            true
        } else {
            if below.take().is_some() {
                tracing::info!(dir = %self.dir.display(), free, "free disk space is back above tsd.storage.min_free_bytes; taking writes again");
            }
            self.update_refusing(&below);
            false
        }
    }
}

impl ReadOnly {
    /// Clears the lock-free flag once nothing refuses writes; `below` is
    /// the floor's state, held locked by the caller.
    fn update_refusing(&self, below: &Option<String>) {
        if below.is_none() && !self.holding.load(Ordering::Acquire) {
            self.refusing.store(false, Ordering::Release);
        }
    }
}

impl Db {
    /// Once the engine takes writes and the disk is above the floor
    /// (`below_floor`, [`ReadOnly::check_floor`] of this tick), replays
    /// the log a start on a full disk held in memory. Returns false while
    /// that log is still held: nothing may be flushed then (the buffer
    /// holds only its copy, and the log is replayed whole, in order).
    pub(super) fn leave_read_only(&self, below_floor: bool) -> bool {
        let mut held = self.read_only.held.lock();
        let Some(h) = held.as_mut() else {
            return true;
        };
        if below_floor {
            return false;
        }
        let _f = self.flush_lock.lock();
        let auto = self.auto_rollups().filter(|_| !self.store.shared());
        match super::replay::replay_held(self, h, auto.as_ref()) {
            Ok(report) => {
                // Every held point is in the store now: the buffer's copy
                // goes (nothing else is buffered, writes were refused).
                let policy = SealPolicy {
                    now_s: crate::model::time::now_s(),
                    grace_s: 0,
                    idle_s: 0,
                    pressure: false,
                    everything: true,
                };
                loop {
                    let (id, sealed) = self.buffer.seal(policy, super::flush::FLUSH_BATCH_HOURS);
                    self.buffer.finish(id);
                    if sealed.len() < super::flush::FLUSH_BATCH_HOURS {
                        break;
                    }
                }
                let st = &self.stats;
                st.points_replayed
                    .fetch_add(report.points, Ordering::Relaxed);
                (st.rollup_cells_computed).fetch_add(report.rollup_cells, Ordering::Relaxed);
                (st.replay_damaged_frames).fetch_add(report.damaged_frames, Ordering::Relaxed);
                (st.replay_orphaned).fetch_add(report.orphaned_points, Ordering::Relaxed);
                (st.replay_unstorable).fetch_add(report.unstorable, Ordering::Relaxed);
                tracing::info!(
                    points = report.points,
                    "the write-ahead log held in memory since a start on a full disk is replayed into the store; taking writes again"
                );
                *held = None;
                drop(held);
                self.read_only.held_points.store(0, Ordering::Relaxed);
                self.read_only.holding.store(false, Ordering::Release);
                let below = self.read_only.below_floor.lock();
                self.read_only.update_refusing(&below);
                drop(below);
                // Every table and counter the replay touched may have
                // moved: cached answers are not trusted across it.
                self.epochs.bump_all();
                true
            }
            Err(e) => {
                tracing::debug!(error = %e, "replaying the held write-ahead log failed; will retry");
                h.cause = e.to_string();
                false
            }
        }
    }
}
