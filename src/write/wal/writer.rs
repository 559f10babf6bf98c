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
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use tokio::sync::watch;

use crate::model::point::{Timestamp, Value};
use crate::write::series::Series;

use super::record::{encode_delete, encode_point, encode_series, finish_frame, start_frame};
use super::segment::{list_segments, segment_path, sync_dir};

#[derive(Debug, Clone)]
pub struct WalOptions {
    /// Longest time non-`sync` data waits for an fdatasync.
    pub flush_interval: Duration,
    /// A segment is closed once it grows past this.
    pub segment_bytes: u64,
    /// The writer thread wakes early when this much is buffered.
    pub wake_bytes: usize,
    /// Appenders are told to wait when this much is not yet written.
    pub backlog_bytes: usize,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            flush_interval: Duration::from_millis(1000),
            segment_bytes: 64 << 20,
            wake_bytes: 1 << 20,
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

/// One point to log and buffer.
#[derive(Debug, Clone)]
pub struct PendingPoint {
    pub series: Arc<Series>,
    pub ts: Timestamp,
    pub value: Value,
}

struct State {
    buf: Vec<u8>,
    spare: Vec<u8>,
    seq: u64,
    segment: u64,
    sync_wanted: bool,
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
    bytes_written: AtomicU64,
    syncs: AtomicU64,
}

pub struct Wal {
    shared: Arc<Shared>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Wal {
    /// Starts a log writing to segment `first_segment` in `dir`.
    pub fn start(dir: &Path, first_segment: u64, opts: WalOptions) -> std::io::Result<Wal> {
        fs::create_dir_all(dir)?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(segment_path(dir, first_segment))?;
        sync_dir(dir);
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            opts,
            state: Mutex::new(State {
                buf: Vec::with_capacity(1 << 20),
                spare: Vec::with_capacity(1 << 20),
                seq: 0,
                segment: first_segment,
                sync_wanted: false,
                stop: false,
            }),
            wake: Condvar::new(),
            written: watch::channel(0).0,
            durable: watch::channel(0).0,
            closed_below: AtomicU64::new(first_segment),
            bytes_written: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("wal-writer".into())
            .spawn(move || writer_loop(s, file))?;
        Ok(Wal {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Logs `points` as one frame, declaring series not yet declared in
    /// the current segment first.
    pub fn append(&self, points: &[PendingPoint]) -> Appended {
        let sh = &self.shared;
        let mut st = sh.state.lock();
        let segment = st.segment;
        let tag = segment + 1;
        let start = start_frame(&mut st.buf);
        for p in points {
            if p.series.wal_segment.load(Ordering::Relaxed) != tag {
                p.series.wal_segment.store(tag, Ordering::Relaxed);
                let s = &p.series;
                encode_series(&mut st.buf, s.id, &s.metric, &s.tags);
            }
            encode_point(&mut st.buf, p.series.id, p.ts, p.value);
        }
        st.seq += finish_frame(&mut st.buf, start);
        let pending = st.buf.len();
        let seq = st.seq;
        drop(st);
        if pending >= sh.opts.wake_bytes {
            sh.wake.notify_one();
        }
        Appended {
            seq,
            segment,
            backlog: pending >= sh.opts.backlog_bytes,
        }
    }

    /// Logs that the hourly rows `[first_hour, last_hour]` of these series
    /// were deleted, so a replay does not bring back points logged before.
    pub fn append_deletes(&self, tsuids: &[Vec<u8>], first_hour: u32, last_hour: u32) -> Appended {
        let sh = &self.shared;
        let mut st = sh.state.lock();
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
        Appended {
            seq,
            segment,
            backlog: false,
        }
    }

    /// Blocks the calling (non-async) thread until everything up to `seq`
    /// is on stable storage.
    pub fn wait_durable_blocking(&self, seq: u64) {
        let rx = self.shared.durable.subscribe();
        while *rx.borrow() < seq {
            self.shared.state.lock().sync_wanted = true;
            self.shared.wake.notify_one();
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits until everything up to `seq` is on stable storage.
    pub async fn wait_durable(&self, seq: u64) {
        let mut rx = self.shared.durable.subscribe();
        if *rx.borrow() >= seq {
            return;
        }
        self.shared.state.lock().sync_wanted = true;
        self.shared.wake.notify_one();
        let _ = rx.wait_for(|d| *d >= seq).await;
    }

    /// Blocks the calling (non-async) thread until everything up to `seq`
    /// has been handed to the OS.
    pub fn wait_written_blocking(&self, seq: u64) {
        let rx = self.shared.written.subscribe();
        while *rx.borrow() < seq {
            self.shared.wake.notify_one();
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits until everything up to `seq` has been handed to the OS.
    pub async fn wait_written(&self, seq: u64) {
        let mut rx = self.shared.written.subscribe();
        let _ = rx.wait_for(|d| *d >= seq).await;
    }

    pub fn durable_seq(&self) -> u64 {
        *self.shared.durable.borrow()
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

    /// Deletes closed segments numbered below `below`.
    pub fn delete_below(&self, below: u64) -> std::io::Result<usize> {
        let limit = below.min(self.closed_below());
        let mut n = 0;
        for s in list_segments(&self.shared.dir)? {
            if s < limit {
                fs::remove_file(segment_path(&self.shared.dir, s))?;
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
    pub fn close(&self) {
        self.shared.state.lock().stop = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        self.close();
    }
}

fn writer_loop(sh: Arc<Shared>, mut file: File) {
    let interval = sh.opts.flush_interval;
    let mut last_sync = Instant::now();
    let mut file_bytes: u64 = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut synced_seq = 0u64;
    let mut written_seq = 0u64;
    loop {
        let mut st = sh.state.lock();
        loop {
            if st.stop || st.sync_wanted || st.buf.len() >= sh.opts.wake_bytes {
                break;
            }
            let left = interval.saturating_sub(last_sync.elapsed());
            if left.is_zero() {
                break;
            }
            if sh.wake.wait_for(&mut st, left).timed_out() {
                break;
            }
        }
        let mut data = std::mem::take(&mut st.spare);
        std::mem::swap(&mut data, &mut st.buf);
        let end_seq = st.seq;
        let want_sync = st.sync_wanted || st.stop || last_sync.elapsed() >= interval;
        st.sync_wanted = false;
        let stop = st.stop;
        let rotate = !data.is_empty() && file_bytes + data.len() as u64 > sh.opts.segment_bytes;
        let next_segment = st.segment + 1;
        if rotate {
            st.segment = next_segment;
        }
        drop(st);

        if !data.is_empty() {
            // Retry on I/O errors: nothing is acknowledged until written.
            while let Err(e) = file.write_all(&data) {
                tracing::error!(error = %e, "WAL write failed; retrying");
                std::thread::sleep(Duration::from_millis(100));
            }
            file_bytes += data.len() as u64;
            sh.bytes_written
                .fetch_add(data.len() as u64, Ordering::Relaxed);
            written_seq = end_seq;
            sh.written.send_replace(written_seq);
        }
        if (want_sync || rotate) && synced_seq < written_seq {
            while let Err(e) = file.sync_data() {
                tracing::error!(error = %e, "WAL fdatasync failed; retrying");
                std::thread::sleep(Duration::from_millis(100));
            }
            sh.syncs.fetch_add(1, Ordering::Relaxed);
            synced_seq = written_seq;
        }
        if want_sync || rotate {
            last_sync = Instant::now();
            let prev = *sh.durable.borrow();
            sh.durable.send_replace(synced_seq.max(prev));
        }
        data.clear();
        sh.state.lock().spare = data;
        if rotate {
            match OpenOptions::new()
                .create(true)
                .append(true)
                .open(segment_path(&sh.dir, next_segment))
            {
                Ok(f) => {
                    file = f;
                    file_bytes = 0;
                    sync_dir(&sh.dir);
                    sh.closed_below.store(next_segment, Ordering::Release);
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot open a new WAL segment; continuing in the old one");
                }
            }
        }
        if stop {
            let st = sh.state.lock();
            if st.buf.is_empty() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::tests::OLD_SEGMENT;
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
        let b = wal.append(&[p(Timestamp::Seconds(1356998401), Value::Int(i64::MAX))]);
        assert_eq!(a.segment, 7);
        wal.wait_durable(b.seq).await;
        assert!(wal.durable_seq() >= b.seq);
        wal.close();
        let path = segment_path(dir.path(), 7);
        // A torn frame at the end is ignored.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[9, 0, 0, 0, 1, 2]).unwrap();
        let got = read_segment(&path).unwrap();
        assert_eq!(got.bad_tail, 6);
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
            )]);
            std::thread::sleep(Duration::from_millis(2));
        }
        wal.close();
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
    fn the_writer_still_produces_the_old_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let wal = Wal::start(dir.path(), 1, WalOptions::default()).unwrap();
        let s = series(3);
        let p = |ts, value| pending(&s, ts, value);
        wal.append(&[
            p(Timestamp::Seconds(1356998400), Value::Int(-5)),
            p(Timestamp::Millis(1356998400123), Value::Float(1.5)),
        ]);
        wal.append_deletes(&[vec![0, 0, 1, 0, 0, 1, 0, 0, 3]], 1356998400, 1357002000);
        wal.append(&[p(Timestamp::Seconds(1357002001), Value::Int(300))]);
        wal.close();
        assert_eq!(fs::read(segment_path(dir.path(), 1)).unwrap(), OLD_SEGMENT);
    }
}
