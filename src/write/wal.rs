//! The write-ahead log: every accepted point is appended here before it
//! is acknowledged. Format: docs/format/wal.md.
//!
//! Appends go to an in-memory buffer; one thread writes the buffer to the
//! current segment file and fdatasyncs it (group commit). `sync` writers
//! wait for [`Wal::wait_durable`]; other data is fsynced at least every
//! `flush_interval`. A segment is deleted by the write path once every
//! point in it is in the store.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use tokio::sync::watch;

use crate::model::point::{Timestamp, Value};

use super::series::Series;

const SEGMENT_SUFFIX: &str = ".wal";
const FRAME_HEADER: usize = 8;
const REC_SERIES: u8 = 1;
const REC_INT: u8 = 2;
const REC_FLOAT: u8 = 3;
const REC_DELETE: u8 = 4;
/// Refuse to read frames larger than this (corruption guard).
const MAX_FRAME: usize = 256 << 20;

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

pub fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:016}{SEGMENT_SUFFIX}"))
}

/// Segment numbers present in `dir`, ascending.
pub fn list_segments(dir: &Path) -> std::io::Result<Vec<u64>> {
    let mut out = Vec::new();
    if !dir.exists() {
        return Ok(out);
    }
    for e in fs::read_dir(dir)? {
        let name = e?.file_name();
        let name = name.to_string_lossy();
        if let Some(n) = name
            .strip_suffix(SEGMENT_SUFFIX)
            .and_then(|s| s.parse::<u64>().ok())
        {
            out.push(n);
        }
    }
    out.sort_unstable();
    Ok(out)
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn encode_series(out: &mut Vec<u8>, s: &Series) {
    out.push(REC_SERIES);
    put_varint(out, s.id as u64);
    put_str(out, &s.metric);
    put_varint(out, s.tags.len() as u64);
    for (k, v) in s.tags.iter() {
        put_str(out, k);
        put_str(out, v);
    }
}

fn encode_point(out: &mut Vec<u8>, id: u32, ts: Timestamp, value: Value) {
    match value {
        Value::Int(i) => {
            out.push(REC_INT);
            put_varint(out, id as u64);
            put_varint(out, ts.raw());
            put_varint(out, ((i << 1) ^ (i >> 63)) as u64);
        }
        Value::Float(f) => {
            out.push(REC_FLOAT);
            put_varint(out, id as u64);
            put_varint(out, ts.raw());
            out.extend_from_slice(&f.to_bits().to_le_bytes());
        }
    }
}

fn encode_delete(out: &mut Vec<u8>, tsuid: &[u8], first_hour: u32, last_hour: u32) {
    out.push(REC_DELETE);
    put_varint(out, tsuid.len() as u64);
    out.extend_from_slice(tsuid);
    put_varint(out, first_hour as u64);
    put_varint(out, last_hour as u64);
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
        let start = st.buf.len();
        st.buf.extend_from_slice(&[0u8; FRAME_HEADER]);
        for p in points {
            if p.series.wal_segment.load(Ordering::Relaxed) != tag {
                p.series.wal_segment.store(tag, Ordering::Relaxed);
                encode_series(&mut st.buf, &p.series);
            }
            encode_point(&mut st.buf, p.series.id, p.ts, p.value);
        }
        let len = st.buf.len() - start - FRAME_HEADER;
        let crc = crc32fast::hash(&st.buf[start + FRAME_HEADER..]);
        st.buf[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
        st.buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
        st.seq += (len + FRAME_HEADER) as u64;
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
        let start = st.buf.len();
        st.buf.extend_from_slice(&[0u8; FRAME_HEADER]);
        for t in tsuids {
            encode_delete(&mut st.buf, t, first_hour, last_hour);
        }
        let len = st.buf.len() - start - FRAME_HEADER;
        let crc = crc32fast::hash(&st.buf[start + FRAME_HEADER..]);
        st.buf[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
        st.buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
        st.seq += (len + FRAME_HEADER) as u64;
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

/// A record read back from a segment.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Series {
        id: u32,
        metric: String,
        tags: Vec<(String, String)>,
    },
    Point {
        id: u32,
        ts: Timestamp,
        value: Value,
    },
    /// Hourly rows of a series (by TSUID bytes) deleted by a query.
    Delete {
        tsuid: Vec<u8>,
        first_hour: u32,
        last_hour: u32,
    },
}

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn byte(&mut self) -> Option<u8> {
        let v = *self.b.get(self.i)?;
        self.i += 1;
        Some(v)
    }

    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= ((b & 0x7F) as u64) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    fn string(&mut self) -> Option<String> {
        let n = self.varint()? as usize;
        let s = self.b.get(self.i..self.i.checked_add(n)?)?;
        self.i += n;
        String::from_utf8(s.to_vec()).ok()
    }
}

fn decode_frame(payload: &[u8], out: &mut Vec<Record>) -> Option<()> {
    let mut c = Cursor { b: payload, i: 0 };
    while c.i < payload.len() {
        match c.byte()? {
            REC_SERIES => {
                let id = c.varint()? as u32;
                let metric = c.string()?;
                let n = c.varint()? as usize;
                let mut tags = Vec::with_capacity(n.min(64));
                for _ in 0..n {
                    tags.push((c.string()?, c.string()?));
                }
                out.push(Record::Series { id, metric, tags });
            }
            kind @ (REC_INT | REC_FLOAT) => {
                let id = c.varint()? as u32;
                let ts = Timestamp::from_raw(c.varint()? as i64).ok()?;
                let value = if kind == REC_INT {
                    let z = c.varint()?;
                    Value::Int(((z >> 1) as i64) ^ -((z & 1) as i64))
                } else {
                    let b: [u8; 8] = c.b.get(c.i..c.i + 8)?.try_into().ok()?;
                    c.i += 8;
                    Value::Float(f64::from_bits(u64::from_le_bytes(b)))
                };
                out.push(Record::Point { id, ts, value });
            }
            REC_DELETE => {
                let n = c.varint()? as usize;
                let tsuid = c.b.get(c.i..c.i.checked_add(n)?)?.to_vec();
                c.i += n;
                let first_hour = u32::try_from(c.varint()?).ok()?;
                let last_hour = u32::try_from(c.varint()?).ok()?;
                out.push(Record::Delete {
                    tsuid,
                    first_hour,
                    last_hour,
                });
            }
            _ => return None,
        }
    }
    Some(())
}

/// What reading a segment found.
#[derive(Debug, Default)]
pub struct SegmentContents {
    pub records: Vec<Record>,
    /// Bytes after the last good frame (a torn or corrupt tail).
    pub bad_tail: u64,
}

/// Reads every intact frame of a segment. Reading stops at the first
/// truncated or corrupt frame: a crash can only tear the tail.
pub fn read_segment(path: &Path) -> std::io::Result<SegmentContents> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    let mut out = SegmentContents::default();
    let mut i = 0;
    while i + FRAME_HEADER <= bytes.len() {
        let len = u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(bytes[i + 4..i + 8].try_into().expect("4 bytes"));
        let end = i + FRAME_HEADER + len;
        if len > MAX_FRAME || end > bytes.len() {
            break;
        }
        let payload = &bytes[i + FRAME_HEADER..end];
        if crc32fast::hash(payload) != crc {
            break;
        }
        let mut recs = Vec::new();
        if decode_frame(payload, &mut recs).is_none() {
            break;
        }
        out.records.extend(recs);
        i = end;
    }
    out.bad_tail = (bytes.len() - i) as u64;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(id: u32) -> Arc<Series> {
        Series::for_test(id, "sys.cpu")
    }

    #[tokio::test]
    async fn appends_are_durable_and_read_back_with_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let wal = Wal::start(dir.path(), 7, WalOptions::default()).unwrap();
        let s = series(3);
        let p = |ts, v| PendingPoint {
            series: s.clone(),
            ts,
            value: v,
        };
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
            wal.append(&[PendingPoint {
                series: s.clone(),
                ts: Timestamp::Seconds(1356998400 + i),
                value: Value::Int(i as i64),
            }]);
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

    /// A segment as written by the log of ba3fdfc (before the codec and the
    /// segment I/O were split), spelled out byte by byte: any change to the
    /// stored format would strand logs written by an older build.
    #[rustfmt::skip] // one line per field, as annotated
    const OLD_SEGMENT: &[u8] = &[
        // Frame 1: len 43, CRC-32 of the payload.
        0x2b, 0x00, 0x00, 0x00, 0x1e, 0x86, 0xbf, 0xcf,
        // Series 3 "sys.cpu" with one tag host=h3.
        0x01, 0x03, 0x07, b's', b'y', b's', b'.', b'c', b'p', b'u',
        0x01, 0x04, b'h', b'o', b's', b't', 0x02, b'h', b'3',
        // Int point: id 3, ts 1356998400, zigzag(-5) = 9.
        0x02, 0x03, 0x80, 0xce, 0x88, 0x87, 0x05, 0x09,
        // Float point: id 3, ts 1356998400123 ms, 1.5 as f64 LE.
        0x03, 0x03, 0xfb, 0xb0, 0xa1, 0x9b, 0xbf, 0x27,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f,
        // Frame 2: len 21.
        0x15, 0x00, 0x00, 0x00, 0xfc, 0x5c, 0xe2, 0xa0,
        // Delete: 9-byte TSUID, hours 1356998400..=1357002000.
        0x04, 0x09, 0x00, 0x00, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x03,
        0x80, 0xce, 0x88, 0x87, 0x05, 0x90, 0xea, 0x88, 0x87, 0x05,
        // Frame 3: len 9; the series is already declared in this segment.
        0x09, 0x00, 0x00, 0x00, 0x93, 0x42, 0x4f, 0x01,
        // Int point: id 3, ts 1357002001, zigzag(300) = 600.
        0x02, 0x03, 0x91, 0xea, 0x88, 0x87, 0x05, 0xd8, 0x04,
    ];

    fn old_segment_records() -> Vec<Record> {
        let point = |ts, value| Record::Point { id: 3, ts, value };
        vec![
            Record::Series {
                id: 3,
                metric: "sys.cpu".into(),
                tags: vec![("host".into(), "h3".into())],
            },
            point(Timestamp::Seconds(1356998400), Value::Int(-5)),
            point(Timestamp::Millis(1356998400123), Value::Float(1.5)),
            Record::Delete {
                tsuid: vec![0, 0, 1, 0, 0, 1, 0, 0, 3],
                first_hour: 1356998400,
                last_hour: 1357002000,
            },
            point(Timestamp::Seconds(1357002001), Value::Int(300)),
        ]
    }

    #[test]
    fn segment_written_before_the_split_still_decodes() {
        let dir = tempfile::tempdir().unwrap();
        let path = segment_path(dir.path(), 1);
        fs::write(&path, OLD_SEGMENT).unwrap();
        let got = read_segment(&path).unwrap();
        assert_eq!(got.bad_tail, 0);
        assert_eq!(got.records, old_segment_records());
    }

    #[test]
    fn the_writer_still_produces_the_old_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let wal = Wal::start(dir.path(), 1, WalOptions::default()).unwrap();
        let s = series(3);
        let p = |ts, value| PendingPoint {
            series: s.clone(),
            ts,
            value,
        };
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
