//! The [`Wal`] handle and its writer thread.
//!
//! Appends go to an in-memory buffer; one thread writes the buffer to the
//! current segment file and fdatasyncs it (group commit). `sync` writers
//! wait for [`Wal::wait_durable`]; other data is fsynced at least every
//! `flush_interval`. A segment is deleted by the write path once every
//! point in it is in the store.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use thiserror::Error;
use tokio::sync::watch;

use crate::model::point::{Timestamp, Value};
use crate::write::series::Series;

use super::columns::BATCH_BYTES;
use super::frame::{FrameCompressor, finish_frame, start_frame};
use super::record::{encode_delete, encode_histogram, encode_point, encode_series};
use super::segment::{list_segments, segment_path, sync_dir};

/// How long the writer waits between attempts while the log cannot be
/// written (a full disk): short, so it resumes soon after space returns.
const RETRY_INTERVAL: Duration = Duration::from_millis(200);

/// A series is declared again once this much log was written to the
/// segment since its last declaration there, so a damaged frame that held
/// a declaration orphans at most this much log's worth of that series'
/// points, not the rest of a 64 MiB segment (docs/format/wal.md).
///
/// Counted in bytes of the segment file (compressed batches, about a
/// byte a point on regular series), from the segment's start: a segment
/// that a checkpoint closes after a few MiB, as a bulk load's are,
/// declares each series once. Counted in appended records (about 17
/// bytes a point), as before, a 16 MiB stretch ended every million points
/// or so and every series was declared two or three times in such a
/// segment: 0.1 byte a logged point over `/api/put`.
const REDECLARE_BYTES: u64 = 4 << 20;

/// What `Series::wal_segment` holds once a series was declared: the
/// segment and the stretch of it its declaration covers, from the bytes
/// written to the segment so far (0 is "never").
fn declaration_tag(segment: u64, written_in_segment: u64) -> u64 {
    ((segment << 20) | ((written_in_segment / REDECLARE_BYTES) & 0xF_FFFF)) + 1
}

/// Bytes written but not yet synced that force a sync: they are kept in
/// memory until one succeeds (to be written again if it fails).
const UNSYNCED_LIMIT: usize = 16 << 20;

/// Why the log cannot take writes now. While one stands, appends and
/// waiters fail at once with it; the writer keeps retrying and clears it
/// once a write and an fdatasync succeed again.
#[derive(Debug, Clone, Error)]
pub enum WalError {
    /// An I/O error on a segment or on the log's directory, naming it.
    #[error("write-ahead log {}: {cause}", path.display())]
    Io {
        path: PathBuf,
        cause: Arc<std::io::Error>,
    },
    #[error(
        "write-ahead log segment {} was deleted under the running TSD (was the data directory removed?); nothing can be logged until the TSD restarts on an intact data directory",
        path.display()
    )]
    Unlinked { path: PathBuf },
    #[error("the write-ahead log is closed")]
    Closed,
}

/// A segment file as the writer uses it: appends, cutting back, syncing.
/// Real segments are plain files ([`PlainFiles`]); tests put a file that
/// fails on demand behind it.
pub(crate) trait SegmentFile: Send {
    /// Appends `data` at the end of the file.
    fn append(&mut self, data: &[u8]) -> std::io::Result<()>;
    /// Cuts the file back (or extends it) to `len` bytes.
    fn set_len(&mut self, len: u64) -> std::io::Result<()>;
    fn sync_data(&mut self) -> std::io::Result<()>;
    fn len(&self) -> std::io::Result<u64>;
    /// False once the file has no name left (its directory was removed).
    fn linked(&self) -> std::io::Result<bool>;
}

/// Opens (creating if needed) the segment file at a path.
pub(crate) trait SegmentFiles: Send + Sync {
    fn open(&self, path: &Path) -> std::io::Result<Box<dyn SegmentFile>>;
}

/// Segments as plain files, opened for appending.
pub(crate) struct PlainFiles;

impl SegmentFiles for PlainFiles {
    fn open(&self, path: &Path) -> std::io::Result<Box<dyn SegmentFile>> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Box::new(file))
    }
}

impl SegmentFile for File {
    fn append(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.write_all(data)
    }

    fn set_len(&mut self, len: u64) -> std::io::Result<()> {
        File::set_len(self, len)
    }

    fn sync_data(&mut self) -> std::io::Result<()> {
        File::sync_data(self)
    }

    fn len(&self) -> std::io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    fn linked(&self) -> std::io::Result<bool> {
        use std::os::unix::fs::MetadataExt;
        Ok(self.metadata()?.nlink() > 0)
    }
}

#[derive(Debug, Clone)]
pub struct WalOptions {
    /// Longest time non-`sync` data waits for an fdatasync.
    pub flush_interval: Duration,
    /// A segment is closed once it grows past this.
    pub segment_bytes: u64,
    /// The writer thread wakes early when this much is buffered (default
    /// [`BATCH_BYTES`]).
    pub wake_bytes: usize,
    /// Appenders are told to wait when this much is not yet written.
    pub backlog_bytes: usize,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            flush_interval: Duration::from_millis(1000),
            segment_bytes: 64 << 20,
            wake_bytes: BATCH_BYTES,
            backlog_bytes: 64 << 20,
        }
    }
}

/// Where an append landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Log position after the append: durable once `durable >= seq`.
    pub seq: u64,
    /// Segment the points were logged in.
    pub segment: u64,
    /// Too much is waiting to be written: the appender should wait for
    /// `written >= seq` before accepting more.
    pub backlog: bool,
}

impl Appended {
    /// An append of nothing: nothing to wait for.
    pub const NOTHING: Appended = Appended {
        seq: 0,
        segment: 0,
        backlog: false,
    };
}

/// The segment being written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveSegment {
    pub number: u64,
    /// Something was logged in it since it was opened.
    pub logged: bool,
}

/// One point to log and buffer.
#[derive(Debug, Clone)]
pub struct PendingPoint {
    pub series: Arc<Series>,
    pub ts: Timestamp,
    pub value: Value,
}

/// One histogram point to log and store: its cell value as stored (codec
/// id, then the codec's bytes).
#[derive(Debug, Clone)]
pub struct PendingHistogram {
    pub series: Arc<Series>,
    pub ts: Timestamp,
    pub value: Vec<u8>,
}

struct State {
    buf: Vec<u8>,
    spare: Vec<u8>,
    seq: u64,
    segment: u64,
    /// `seq` when `segment` became the one written: it holds records
    /// once `seq` moved past this.
    segment_start_seq: u64,
    sync_wanted: bool,
    /// [`Wal::rotate`] asked for the segment to be closed now.
    rotate_wanted: bool,
    stop: bool,
}

struct Shared {
    dir: PathBuf,
    opts: WalOptions,
    state: Mutex<State>,
    wake: Condvar,
    written: watch::Sender<u64>,
    durable: watch::Sender<u64>,
    /// Segments numbered below this are complete files.
    closed_below: AtomicU64,
    /// Bytes written to the segment appends now go to (`State::segment`),
    /// as far as the writer got: where its declarations stretch stands.
    segment_written: AtomicU64,
    bytes_written: AtomicU64,
    syncs: AtomicU64,
    /// Set while `failure` holds an error (a cheap check for appenders).
    failing: AtomicBool,
    failure: Mutex<Option<WalError>>,
    /// Failed attempts so far: a waiter whose data is not durable fails
    /// when this moves.
    failures: AtomicU64,
}

impl Shared {
    fn failure(&self) -> Option<WalError> {
        if !self.failing.load(Ordering::Acquire) {
            return None;
        }
        self.failure.lock().clone()
    }

    fn set_failure(&self, e: WalError) {
        *self.failure.lock() = Some(e);
        self.failing.store(true, Ordering::Release);
        self.failures.fetch_add(1, Ordering::AcqRel);
        // Wake every waiter so it sees the failure at once.
        self.durable.send_modify(|_| {});
        self.written.send_modify(|_| {});
    }

    fn clear_failure(&self) {
        if self.failing.swap(false, Ordering::AcqRel) {
            *self.failure.lock() = None;
            tracing::info!(dir = %self.dir.display(), "the write-ahead log is writable again");
        }
    }

    /// Whether a waiter for `seq` that started after `failures_seen`
    /// failures is done: `Ok` once durable, the failure if one came.
    fn durable_outcome(
        &self,
        seq: u64,
        durable: u64,
        failures_seen: u64,
    ) -> Option<Result<(), WalError>> {
        if durable >= seq {
            return Some(Ok(()));
        }
        if self.failures.load(Ordering::Acquire) != failures_seen
            || self.failing.load(Ordering::Acquire)
        {
            return Some(Err(self.failure().unwrap_or(WalError::Closed)));
        }
        None
    }
}

pub struct Wal {
    shared: Arc<Shared>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Wal {
    /// Starts a log writing to segment `first_segment` in `dir`. Errors
    /// name the file or directory they are about.
    pub fn start(dir: &Path, first_segment: u64, opts: WalOptions) -> Result<Wal, WalError> {
        Self::start_with(dir, first_segment, opts, Arc::new(PlainFiles))
    }

    /// [`Wal::start`] over segment files opened by `files`.
    pub(crate) fn start_with(
        dir: &Path,
        first_segment: u64,
        opts: WalOptions,
        files: Arc<dyn SegmentFiles>,
    ) -> Result<Wal, WalError> {
        let named = |path: &Path| {
            let path = path.to_path_buf();
            move |cause| WalError::Io {
                path,
                cause: Arc::new(cause),
            }
        };
        fs::create_dir_all(dir).map_err(named(dir))?;
        let path = segment_path(dir, first_segment);
        let file = files.open(&path).map_err(named(&path))?;
        let file_len = file.len().map_err(named(&path))?;
        sync_dir(dir);
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            opts,
            state: Mutex::new(State {
                buf: Vec::with_capacity(1 << 20),
                spare: Vec::with_capacity(1 << 20),
                seq: 0,
                segment: first_segment,
                segment_start_seq: 0,
                sync_wanted: false,
                rotate_wanted: false,
                stop: false,
            }),
            wake: Condvar::new(),
            written: watch::channel(0).0,
            durable: watch::channel(0).0,
            closed_below: AtomicU64::new(first_segment),
            segment_written: AtomicU64::new(file_len),
            bytes_written: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            failing: AtomicBool::new(false),
            failure: Mutex::new(None),
            failures: AtomicU64::new(0),
        });
        let writer = Writer {
            sh: shared.clone(),
            files,
            file,
            path,
            synced_len: file_len,
            unsynced: Vec::new(),
            rewrite: false,
            pending: Vec::new(),
            pending_seq: 0,
            sync_due: false,
            rotate_to: None,
            written_seq: 0,
            synced_seq: 0,
            compressor: FrameCompressor::new(),
        };
        let thread = std::thread::Builder::new()
            .name("wal-writer".into())
            .spawn(move || writer.run())
            .map_err(named(dir))?;
        Ok(Wal {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Why the log cannot take writes now, if it cannot.
    pub fn failure(&self) -> Option<WalError> {
        self.shared.failure()
    }

    /// Logs `points` as one frame, declaring series not yet declared in
    /// the current segment first. Refused at once while the log cannot be
    /// written: nothing could make the points durable.
    pub fn append(&self, points: &[PendingPoint]) -> Result<Appended, WalError> {
        self.append_frame(
            points,
            |p| &p.series,
            |buf, p| encode_point(buf, p.series.id, p.ts, p.value),
        )
    }

    /// Logs histogram points as one frame, as [`Wal::append`] logs points.
    pub fn append_histograms(&self, points: &[PendingHistogram]) -> Result<Appended, WalError> {
        self.append_frame(
            points,
            |p| &p.series,
            |buf, p| encode_histogram(buf, p.series.id, p.ts, &p.value),
        )
    }

    /// One frame of `items`, each after its series' declaration if the
    /// current segment has none yet.
    #[inline]
    fn append_frame<T>(
        &self,
        items: &[T],
        series_of: impl Fn(&T) -> &Arc<Series>,
        encode: impl Fn(&mut Vec<u8>, &T),
    ) -> Result<Appended, WalError> {
        let sh = &self.shared;
        if let Some(e) = sh.failure() {
            return Err(e);
        }
        let mut st = sh.state.lock();
        if st.stop {
            return Err(WalError::Closed);
        }
        let segment = st.segment;
        let tag = declaration_tag(segment, sh.segment_written.load(Ordering::Relaxed));
        let start = start_frame(&mut st.buf);
        for item in items {
            let s = series_of(item);
            if s.wal_segment.load(Ordering::Relaxed) != tag {
                s.wal_segment.store(tag, Ordering::Relaxed);
                encode_series(&mut st.buf, s.id, s.metric(), s.tags());
            }
            encode(&mut st.buf, item);
        }
        st.seq += finish_frame(&mut st.buf, start);
        let pending = st.buf.len();
        let seq = st.seq;
        drop(st);
        if pending >= sh.opts.wake_bytes {
            sh.wake.notify_one();
        }
        Ok(Appended {
            seq,
            segment,
            backlog: pending >= sh.opts.backlog_bytes,
        })
    }

    /// Logs that the hourly rows `[first_hour, last_hour]` of these series
    /// were deleted, so a replay does not bring back points logged before.
    pub fn append_deletes(
        &self,
        tsuids: &[Vec<u8>],
        first_hour: u32,
        last_hour: u32,
    ) -> Result<Appended, WalError> {
        let sh = &self.shared;
        if let Some(e) = sh.failure() {
            return Err(e);
        }
        let mut st = sh.state.lock();
        if st.stop {
            return Err(WalError::Closed);
        }
        let segment = st.segment;
        let start = start_frame(&mut st.buf);
        for t in tsuids {
            encode_delete(&mut st.buf, t, first_hour, last_hour);
        }
        st.seq += finish_frame(&mut st.buf, start);
        let seq = st.seq;
        st.sync_wanted = true;
        drop(st);
        sh.wake.notify_one();
        Ok(Appended {
            seq,
            segment,
            backlog: false,
        })
    }

    /// Closes the segment being written, once everything appended so far
    /// is written to it and synced, and continues in a new one (a
    /// backup's cut: every segment below the number returned is then a
    /// complete file that is never written again). Blocks the calling
    /// (non-async) thread; fails as soon as the log cannot be written.
    pub fn rotate(&self) -> Result<u64, WalError> {
        let sh = &self.shared;
        let seen = sh.failures.load(Ordering::Acquire);
        let closed = {
            let mut st = sh.state.lock();
            if st.stop {
                return Err(WalError::Closed);
            }
            st.rotate_wanted = true;
            st.sync_wanted = true;
            st.segment + 1
        };
        sh.wake.notify_one();
        loop {
            if self.closed_below() >= closed {
                return Ok(closed);
            }
            if sh.failures.load(Ordering::Acquire) != seen || sh.failing.load(Ordering::Acquire) {
                return Err(sh.failure().unwrap_or(WalError::Closed));
            }
            if sh.state.lock().stop {
                return Err(WalError::Closed);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Blocks the calling (non-async) thread until everything up to `seq`
    /// is on stable storage, or fails as soon as the log cannot be
    /// written.
    pub fn wait_durable_blocking(&self, seq: u64) -> Result<(), WalError> {
        let sh = &self.shared;
        let seen = sh.failures.load(Ordering::Acquire);
        let mut rx = sh.durable.subscribe();
        loop {
            let durable = *rx.borrow_and_update();
            if let Some(r) = sh.durable_outcome(seq, durable, seen) {
                return r;
            }
            sh.state.lock().sync_wanted = true;
            sh.wake.notify_one();
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits until everything up to `seq` is on stable storage, or fails
    /// as soon as the log cannot be written.
    pub async fn wait_durable(&self, seq: u64) -> Result<(), WalError> {
        let sh = &self.shared;
        let seen = sh.failures.load(Ordering::Acquire);
        let mut rx = sh.durable.subscribe();
        if let Some(r) = sh.durable_outcome(seq, *rx.borrow(), seen) {
            return r;
        }
        sh.state.lock().sync_wanted = true;
        sh.wake.notify_one();
        let mut outcome = None;
        let waited = rx
            .wait_for(|d| {
                outcome = sh.durable_outcome(seq, *d, seen);
                outcome.is_some()
            })
            .await;
        match (waited, outcome) {
            (Ok(_), Some(r)) => r,
            // The writer is gone: nothing more will become durable.
            _ => Err(self.failure().unwrap_or(WalError::Closed)),
        }
    }

    /// Blocks the calling (non-async) thread until everything up to `seq`
    /// has been handed to the OS (returns at once while the log fails).
    pub fn wait_written_blocking(&self, seq: u64) {
        let rx = self.shared.written.subscribe();
        while *rx.borrow() < seq && !self.shared.failing.load(Ordering::Acquire) {
            self.shared.wake.notify_one();
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits until everything up to `seq` has been handed to the OS
    /// (returns at once while the log fails).
    pub async fn wait_written(&self, seq: u64) {
        let sh = &self.shared;
        let mut rx = sh.written.subscribe();
        let _ = rx
            .wait_for(|d| *d >= seq || sh.failing.load(Ordering::Acquire))
            .await;
    }

    pub fn durable_seq(&self) -> u64 {
        *self.shared.durable.borrow()
    }

    /// Bytes of log appended but not yet fdatasynced: what a power loss
    /// now would cost (0 once the writer caught up).
    pub fn unsynced_bytes(&self) -> u64 {
        let appended = self.shared.state.lock().seq;
        appended.saturating_sub(self.durable_seq())
    }

    /// The segment being written, and whether anything was logged in it.
    pub fn active_segment(&self) -> ActiveSegment {
        let st = self.shared.state.lock();
        ActiveSegment {
            number: st.segment,
            logged: st.seq > st.segment_start_seq,
        }
    }

    /// Segments below this number are complete files.
    pub fn closed_below(&self) -> u64 {
        self.shared.closed_below.load(Ordering::Acquire)
    }

    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    pub fn bytes_written(&self) -> u64 {
        self.shared.bytes_written.load(Ordering::Relaxed)
    }

    pub fn syncs(&self) -> u64 {
        self.shared.syncs.load(Ordering::Relaxed)
    }

    /// Attempts to write or sync the log that failed so far.
    pub fn failed_attempts(&self) -> u64 {
        self.shared.failures.load(Ordering::Relaxed)
    }

    /// Deletes closed segments numbered below `below`.
    pub fn delete_below(&self, below: u64) -> Result<usize, WalError> {
        let limit = below.min(self.closed_below());
        let mut n = 0;
        let dir = &self.shared.dir;
        let named = |path: PathBuf| {
            move |cause| WalError::Io {
                path,
                cause: Arc::new(cause),
            }
        };
        for s in list_segments(dir).map_err(named(dir.clone()))? {
            if s < limit {
                let path = segment_path(dir, s);
                fs::remove_file(&path).map_err(named(path))?;
                n += 1;
            }
        }
        if n > 0 {
            sync_dir(&self.shared.dir);
        }
        Ok(n)
    }

    /// Total bytes of segment files on disk.
    pub fn disk_bytes(&self) -> u64 {
        list_segments(&self.shared.dir)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|s| fs::metadata(segment_path(&self.shared.dir, s)).ok())
            .map(|m| m.len())
            .sum()
    }

    /// Writes and syncs what is buffered, then stops the writer thread.
    /// A log that cannot be written gives up after one more attempt and
    /// returns why: what it held is then only in the caller's buffer.
    pub fn close(&self) -> Result<(), WalError> {
        self.shared.state.lock().stop = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
        match self.shared.failure() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// The writer thread's side: the open segment and what is not yet safe
/// in it.
///
/// Invariants: the file holds exactly `synced_len + unsynced.len()` bytes
/// of whole frames (a failed append is cut back before anything else is
/// written); `unsynced` keeps every byte written since the last successful
/// fdatasync, because after a failed one the kernel may have dropped them:
/// they are then cut off and written again (`rewrite`), and only a sync
/// that follows a fresh write of them makes them durable.
struct Writer {
    sh: Arc<Shared>,
    files: Arc<dyn SegmentFiles>,
    file: Box<dyn SegmentFile>,
    path: PathBuf,
    synced_len: u64,
    unsynced: Vec<u8>,
    /// A sync failed, or an append failed and may have left a torn frame:
    /// cut the file back to `synced_len` and write `unsynced` again.
    rewrite: bool,
    /// Frames taken from the appenders' buffer, not yet written.
    pending: Vec<u8>,
    /// Log position at the end of `pending`.
    pending_seq: u64,
    sync_due: bool,
    /// Segment to continue in once this one is complete and synced.
    rotate_to: Option<u64>,
    written_seq: u64,
    synced_seq: u64,
    compressor: FrameCompressor,
}

impl Writer {
    fn run(mut self) {
        let interval = self.sh.opts.flush_interval;
        let mut last_sync = Instant::now();
        loop {
            let failing = self.sh.failing.load(Ordering::Acquire);
            let mut st = self.sh.state.lock();
            loop {
                if st.stop
                    || (!failing && (st.sync_wanted || st.buf.len() >= self.sh.opts.wake_bytes))
                {
                    break;
                }
                let left = if failing {
                    RETRY_INTERVAL
                } else {
                    interval.saturating_sub(last_sync.elapsed())
                };
                if left.is_zero() {
                    break;
                }
                if self.sh.wake.wait_for(&mut st, left).timed_out() {
                    break;
                }
            }
            let stop = st.stop;
            // Frames of an unfinished attempt go first, and alone: they
            // belong to the segment they were encoded for.
            let fresh = self.pending.is_empty() && self.rotate_to.is_none() && !self.rewrite;
            if fresh {
                let mut data = std::mem::take(&mut st.spare);
                std::mem::swap(&mut data, &mut st.buf);
                let file_len = self.synced_len + self.unsynced.len() as u64;
                let rotate = st.rotate_wanted
                    || (!data.is_empty()
                        && file_len + data.len() as u64 > self.sh.opts.segment_bytes);
                if rotate {
                    st.rotate_wanted = false;
                    st.segment += 1;
                    st.segment_start_seq = st.seq;
                    self.rotate_to = Some(st.segment);
                    // Appends from now on go to the new segment.
                    self.sh.segment_written.store(0, Ordering::Relaxed);
                }
                self.pending_seq = st.seq;
                std::mem::swap(&mut self.pending, &mut data);
                st.spare = data;
            }
            let want_sync = st.sync_wanted || stop || last_sync.elapsed() >= interval;
            st.sync_wanted = false;
            drop(st);
            // Compressed once, outside the appenders' lock; a failed
            // attempt writes the same bytes again.
            if fresh {
                self.compressor.compress(&mut self.pending);
            }
            self.sync_due |= want_sync;
            match self.advance() {
                Ok(synced) => {
                    if synced {
                        last_sync = Instant::now();
                    }
                    self.sh.clear_failure();
                }
                Err(e) => {
                    if !self.sh.failing.load(Ordering::Acquire) {
                        tracing::error!(error = %e, "the write-ahead log cannot be written; refusing writes until it can");
                    }
                    self.sh.set_failure(e);
                    if stop {
                        tracing::error!("stopping with write-ahead log data unwritten");
                        break;
                    }
                    continue;
                }
            }
            if stop && self.sh.state.lock().buf.is_empty() {
                break;
            }
        }
    }

    fn io_error(&self, cause: std::io::Error) -> WalError {
        WalError::Io {
            path: self.path.clone(),
            cause: Arc::new(cause),
        }
    }

    /// Writes what is pending, syncs when due and moves to the next
    /// segment when asked. Returns whether it ran a sync round. Any step
    /// that fails leaves the state so that the next call starts it again.
    fn advance(&mut self) -> Result<bool, WalError> {
        // Writing into a file that no longer has a name acknowledges
        // points nobody can find again.
        match self.file.linked() {
            Ok(true) => {}
            Ok(false) => {
                return Err(WalError::Unlinked {
                    path: self.path.clone(),
                });
            }
            Err(e) => return Err(self.io_error(e)),
        }
        if self.rewrite {
            self.file
                .set_len(self.synced_len)
                .map_err(|e| self.io_error(e))?;
            if !self.unsynced.is_empty() {
                self.file
                    .append(&self.unsynced)
                    .map_err(|e| self.io_error(e))?;
            }
            self.rewrite = false;
            // What was written before the failure is written afresh: it
            // must be synced before anything counts as durable.
            self.sync_due = true;
        }
        if !self.pending.is_empty() {
            if let Err(e) = self.file.append(&self.pending) {
                // A short write leaves part of a frame: cut it off (now,
                // and again before the next attempt if this fails too).
                let end = self.synced_len + self.unsynced.len() as u64;
                if self.file.set_len(end).is_err() {
                    self.rewrite = true;
                }
                return Err(self.io_error(e));
            }
            let n = self.pending.len() as u64;
            self.unsynced.extend_from_slice(&self.pending);
            self.pending.clear();
            self.sh.bytes_written.fetch_add(n, Ordering::Relaxed);
            if self.rotate_to.is_none() {
                // (Before a rotation the file is the segment appends left.)
                let len = self.synced_len + self.unsynced.len() as u64;
                self.sh.segment_written.store(len, Ordering::Relaxed);
            }
            self.written_seq = self.pending_seq;
            self.sh.written.send_replace(self.written_seq);
            if self.unsynced.len() >= UNSYNCED_LIMIT {
                self.sync_due = true;
            }
        }
        let sync_now = self.sync_due || self.rotate_to.is_some();
        if sync_now {
            if !self.unsynced.is_empty() {
                if let Err(e) = self.file.sync_data() {
                    // Never retried as is: after a failed fdatasync the
                    // kernel may have dropped these pages, so a later
                    // success would prove nothing.
                    self.rewrite = true;
                    return Err(self.io_error(e));
                }
                self.sh.syncs.fetch_add(1, Ordering::Relaxed);
                self.synced_len += self.unsynced.len() as u64;
                self.unsynced.clear();
                self.synced_seq = self.written_seq;
            }
            self.sync_due = false;
            let synced = self.synced_seq;
            self.sh.durable.send_modify(|d| *d = (*d).max(synced));
        }
        if let Some(next) = self.rotate_to {
            let path = segment_path(&self.sh.dir, next);
            let file = self.files.open(&path).map_err(|cause| WalError::Io {
                path: path.clone(),
                cause: Arc::new(cause),
            })?;
            self.synced_len = file.len().map_err(|e| self.io_error(e))?;
            self.file = file;
            self.path = path;
            self.rotate_to = None;
            sync_dir(&self.sh.dir);
            self.sh.closed_below.store(next, Ordering::Release);
        }
        Ok(sync_now)
    }
}

#[cfg(test)]
mod tests {
    use super::super::frame::tests::OLD_SEGMENT;
    use super::super::{Record, read_segment};
    use super::*;

    fn series(id: u32) -> Arc<Series> {
        Series::for_test(id, "sys.cpu")
    }

    fn pending(series: &Arc<Series>, ts: Timestamp, value: Value) -> PendingPoint {
        PendingPoint {
            series: series.clone(),
            ts,
            value,
        }
    }

    #[tokio::test]
    async fn appends_are_durable_and_read_back_with_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let wal = Wal::start(dir.path(), 7, WalOptions::default()).unwrap();
        let s = series(3);
        let p = |ts, value| pending(&s, ts, value);
        let a = wal.append(&[
            p(Timestamp::Seconds(1356998400), Value::Int(-5)),
            p(Timestamp::Millis(1356998400123), Value::Float(1.5)),
        ]);
        let a = a.unwrap();
        let b = wal
            .append(&[p(Timestamp::Seconds(1356998401), Value::Int(i64::MAX))])
            .unwrap();
        assert_eq!(a.segment, 7);
        wal.wait_durable(b.seq).await.unwrap();
        assert!(wal.durable_seq() >= b.seq);
        wal.close().unwrap();
        let path = segment_path(dir.path(), 7);
        // A torn frame at the end is ignored.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[9, 0, 0, 0, 1, 2]).unwrap();
        let got = read_segment(&path).unwrap();
        assert_eq!(got.scan.torn_tail, 6);
        assert_eq!(
            got.records,
            vec![
                Record::Series {
                    id: 3,
                    metric: "sys.cpu".into(),
                    tags: vec![("host".into(), "h3".into())]
                },
                Record::Point {
                    id: 3,
                    ts: Timestamp::Seconds(1356998400),
                    value: Value::Int(-5)
                },
                Record::Point {
                    id: 3,
                    ts: Timestamp::Millis(1356998400123),
                    value: Value::Float(1.5)
                },
                Record::Point {
                    id: 3,
                    ts: Timestamp::Seconds(1356998401),
                    value: Value::Int(i64::MAX)
                },
            ]
        );
        assert_eq!(list_segments(dir.path()).unwrap(), vec![7]);
    }

    #[test]
    fn segments_rotate_and_redeclare_series() {
        let dir = tempfile::tempdir().unwrap();
        let wal = Wal::start(
            dir.path(),
            1,
            WalOptions {
                segment_bytes: 100,
                wake_bytes: 1,
                ..Default::default()
            },
        )
        .unwrap();
        let s = series(1);
        for i in 0..50 {
            wal.append(&[pending(
                &s,
                Timestamp::Seconds(1356998400 + i),
                Value::Int(i as i64),
            )])
            .unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        wal.close().unwrap();
        let segs = list_segments(dir.path()).unwrap();
        assert!(segs.len() > 1, "{segs:?}");
        let mut points = 0;
        for seg in &segs {
            let recs = read_segment(&segment_path(dir.path(), *seg))
                .unwrap()
                .records;
            if recs.is_empty() {
                continue;
            }
            assert!(
                matches!(recs[0], Record::Series { .. }),
                "segment {seg} starts with its series"
            );
            points += recs
                .iter()
                .filter(|r| matches!(r, Record::Point { .. }))
                .count();
        }
        assert_eq!(points, 50);
        assert!(wal.delete_below(segs[segs.len() - 1]).unwrap() >= 1);
    }

    #[test]
    fn series_are_declared_again_every_stretch_of_log_and_segment() {
        let t = declaration_tag;
        assert_ne!(t(1, 0), 0, "0 means never declared");
        assert_eq!(t(1, 0), t(1, REDECLARE_BYTES - 1));
        assert_ne!(t(1, REDECLARE_BYTES - 1), t(1, REDECLARE_BYTES));
        assert_ne!(t(1, 5), t(2, 5));
    }

    /// Stretches are counted in bytes of the segment file, which batches
    /// compress, not in the records appended (about 17 bytes a point):
    /// far more records than a stretch that compress into a small file
    /// declare their series once.
    #[test]
    fn a_segment_that_stays_small_declares_each_series_once() {
        let dir = tempfile::tempdir().unwrap();
        let wal = Wal::start(dir.path(), 1, WalOptions::default()).unwrap();
        let (a, b) = (series(1), series(2));
        let chunk = 8192;
        let mut appended = 0;
        let mut last = Appended::NOTHING;
        let mut t = 1356998400;
        while wal.shared.state.lock().seq < 2 * REDECLARE_BYTES {
            let points: Vec<_> = (0..chunk)
                .map(|i| {
                    t += 1;
                    let s = if i % 2 == 0 { &a } else { &b };
                    pending(s, Timestamp::Seconds(t), Value::Int(i64::from(i % 7)))
                })
                .collect();
            last = wal.append(&points).unwrap();
            appended += chunk;
        }
        wal.wait_durable_blocking(last.seq).unwrap();
        let path = segment_path(dir.path(), 1);
        let file_len = fs::metadata(&path).unwrap().len();
        assert!(file_len < REDECLARE_BYTES, "{file_len}");
        assert_eq!(wal.shared.segment_written.load(Ordering::Relaxed), file_len);
        wal.close().unwrap();
        let recs = read_segment(&path).unwrap().records;
        let declared = recs
            .iter()
            .filter(|r| matches!(r, Record::Series { .. }))
            .count();
        assert_eq!(declared, 2);
        assert_eq!(recs.len() - declared, appended as usize);
    }

    #[test]
    fn the_writer_still_produces_the_old_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let wal = Wal::start(dir.path(), 1, WalOptions::default()).unwrap();
        let s = series(3);
        let p = |ts, value| pending(&s, ts, value);
        wal.append(&[
            p(Timestamp::Seconds(1356998400), Value::Int(-5)),
            p(Timestamp::Millis(1356998400123), Value::Float(1.5)),
        ])
        .unwrap();
        wal.append_deletes(&[vec![0, 0, 1, 0, 0, 1, 0, 0, 3]], 1356998400, 1357002000)
            .unwrap();
        wal.append(&[p(Timestamp::Seconds(1357002001), Value::Int(300))])
            .unwrap();
        wal.close().unwrap();
        assert_eq!(fs::read(segment_path(dir.path(), 1)).unwrap(), OLD_SEGMENT);
    }

    /// What the fault-injecting segment file does next.
    #[derive(Default)]
    struct Faults {
        /// Appends write half their bytes, then fail with ENOSPC.
        disk_full: bool,
        /// The next fdatasyncs fail with EIO, and the kernel "drops" what
        /// was written since the last good one (the file is cut back).
        failing_syncs: usize,
        synced_len: u64,
    }

    struct FaultyFiles(Arc<Mutex<Faults>>);

    struct FaultyFile {
        file: File,
        faults: Arc<Mutex<Faults>>,
    }

    impl SegmentFiles for FaultyFiles {
        fn open(&self, path: &Path) -> std::io::Result<Box<dyn SegmentFile>> {
            let file = OpenOptions::new().create(true).append(true).open(path)?;
            Ok(Box::new(FaultyFile {
                file,
                faults: self.0.clone(),
            }))
        }
    }

    impl SegmentFile for FaultyFile {
        fn append(&mut self, data: &[u8]) -> std::io::Result<()> {
            if self.faults.lock().disk_full {
                self.file.write_all(&data[..data.len() / 2])?;
                return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
            }
            self.file.write_all(data)
        }

        fn set_len(&mut self, len: u64) -> std::io::Result<()> {
            self.file.set_len(len)
        }

        fn sync_data(&mut self) -> std::io::Result<()> {
            let mut f = self.faults.lock();
            if f.failing_syncs > 0 {
                f.failing_syncs -= 1;
                self.file.set_len(f.synced_len)?;
                return Err(std::io::Error::from_raw_os_error(libc::EIO));
            }
            self.file.sync_data()?;
            f.synced_len = self.file.metadata()?.len();
            Ok(())
        }

        fn len(&self) -> std::io::Result<u64> {
            SegmentFile::len(&self.file)
        }

        fn linked(&self) -> std::io::Result<bool> {
            self.file.linked()
        }
    }

    fn faulty_wal(dir: &Path) -> (Wal, Arc<Mutex<Faults>>) {
        let faults = Arc::new(Mutex::new(Faults::default()));
        let wal = Wal::start_with(
            dir,
            1,
            WalOptions::default(),
            Arc::new(FaultyFiles(faults.clone())),
        )
        .unwrap();
        (wal, faults)
    }

    /// Waits (bounded) until the writer has cleared its failure.
    fn wait_healthy(wal: &Wal) {
        for _ in 0..500 {
            if wal.failure().is_none() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the WAL did not recover: {:?}", wal.failure());
    }

    fn points_in(path: &Path) -> Vec<i64> {
        let got = read_segment(path).unwrap();
        assert_eq!(
            got.scan.torn_tail, 0,
            "no torn frame is left in the segment"
        );
        got.records
            .iter()
            .filter_map(|r| match r {
                Record::Point {
                    value: Value::Int(v),
                    ..
                } => Some(*v),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_full_disk_fails_fast_leaves_no_torn_frame_and_recovers() {
        let dir = tempfile::tempdir().unwrap();
        let (wal, faults) = faulty_wal(dir.path());
        let s = series(1);
        let put = |v: i64| {
            wal.append(&[pending(
                &s,
                Timestamp::Seconds(1356998400 + v as u32),
                Value::Int(v),
            )])
        };
        let a = put(1).unwrap();
        wal.wait_durable_blocking(a.seq).unwrap();

        faults.lock().disk_full = true;
        let b = put(2).unwrap();
        let e = wal.wait_durable_blocking(b.seq).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("No space left on device"), "{msg}");
        assert!(msg.contains("0000000000000001.wal"), "{msg}");
        // While the disk is full, new writes are refused at once.
        assert!(put(3).is_err());
        assert!(wal.failed_attempts() >= 1);

        faults.lock().disk_full = false;
        wait_healthy(&wal);
        let d = put(4).unwrap();
        wal.wait_durable_blocking(d.seq).unwrap();
        wal.close().unwrap();
        // The point refused while the disk was full is not there; the one
        // that failed its sync was kept and written once space returned.
        assert_eq!(points_in(&segment_path(dir.path(), 1)), vec![1, 2, 4]);
    }

    #[test]
    fn a_failed_fdatasync_is_never_retried_into_an_acknowledgement() {
        let dir = tempfile::tempdir().unwrap();
        let (wal, faults) = faulty_wal(dir.path());
        let s = series(1);
        let put = |v: i64| {
            wal.append(&[pending(
                &s,
                Timestamp::Seconds(1356998400 + v as u32),
                Value::Int(v),
            )])
        };
        let a = put(1).unwrap();
        wal.wait_durable_blocking(a.seq).unwrap();

        // The sync fails and the kernel loses the bytes written since the
        // last good one: the waiter is told, not acknowledged.
        faults.lock().failing_syncs = 1;
        let b = put(2).unwrap();
        let msg = wal.wait_durable_blocking(b.seq).unwrap_err().to_string();
        assert!(msg.contains("Input/output error"), "{msg}");
        wait_healthy(&wal);
        let c = put(3).unwrap();
        wal.wait_durable_blocking(c.seq).unwrap();
        wal.close().unwrap();
        // The lost bytes were written again before the next good sync.
        assert_eq!(points_in(&segment_path(dir.path(), 1)), vec![1, 2, 3]);
    }

    #[test]
    fn a_removed_segment_refuses_writes() {
        let dir = tempfile::tempdir().unwrap();
        let wal_dir = dir.path().join("wal");
        let wal = Wal::start(&wal_dir, 1, WalOptions::default()).unwrap();
        let s = series(1);
        let a = wal
            .append(&[pending(&s, Timestamp::Seconds(1356998400), Value::Int(1))])
            .unwrap();
        wal.wait_durable_blocking(a.seq).unwrap();
        fs::remove_dir_all(&wal_dir).unwrap();
        let b = wal
            .append(&[pending(&s, Timestamp::Seconds(1356998401), Value::Int(2))])
            .unwrap();
        let e = wal.wait_durable_blocking(b.seq).unwrap_err();
        assert!(matches!(e, WalError::Unlinked { .. }), "{e}");
        assert!(e.to_string().contains("was deleted"), "{e}");
        assert!(wal.failure().is_some());
        assert!(!wal_dir.exists(), "the directory is not recreated");
    }

    #[test]
    fn rotate_closes_the_segment_with_everything_appended_before() {
        let dir = tempfile::tempdir().unwrap();
        // A long flush interval: nothing would be written without the rotate.
        let opts = WalOptions {
            flush_interval: Duration::from_secs(3600),
            ..Default::default()
        };
        let wal = Wal::start(dir.path(), 4, opts).unwrap();
        let s = series(1);
        let put = |i: u32| {
            wal.append(&[pending(
                &s,
                Timestamp::Seconds(1356998400 + i),
                Value::Int(i.into()),
            )])
            .unwrap()
        };
        put(1);
        let a = put(2);
        assert_eq!(wal.rotate().unwrap(), 5);
        assert_eq!(wal.closed_below(), 5);
        assert!(wal.durable_seq() >= a.seq, "the closed segment is synced");
        assert_eq!(points_in(&segment_path(dir.path(), 4)), vec![1, 2]);
        // Nothing appended: the new segment is closed empty.
        assert_eq!(wal.rotate().unwrap(), 6);
        let b = put(3);
        assert_eq!(b.segment, 6);
        wal.wait_durable_blocking(b.seq).unwrap();
        assert_eq!(points_in(&segment_path(dir.path(), 5)), Vec::<i64>::new());
        // The series is declared again in the segment it continues in.
        let recs = read_segment(&segment_path(dir.path(), 6)).unwrap().records;
        assert!(matches!(recs[0], Record::Series { .. }), "{recs:?}");
        wal.close().unwrap();
        assert!(matches!(wal.rotate(), Err(WalError::Closed)));
    }
}
