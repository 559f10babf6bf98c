//! `tsdb import`: OpenTSDB's `TextImporter`. Reads files (plain or `.gz`)
//! of put lines without the `put` word,
//! `<metric> <timestamp> <value> <tagk=tagv>...`, checks each with the
//! telnet `put` parser and the write path's series checks, and appends
//! them through the database's write path ([`Db::append`]), as the TSD
//! does: logged, buffered per series and hour, written as whole rows, the
//! series index kept up to date. The database is flushed and closed at
//! the end.
//!
//! As OpenTSDB does: a metric not yet known is created only with
//! `--auto-metric` (or `tsd.core.auto_create_metrics`), else its line is
//! bad (`No such name for 'metrics': ...`); timestamps of one series
//! must strictly increase unless
//! `tsd.core.bulk.allow_out_of_order_timestamps` is set; the first bad
//! line stops the import (`Exception caught while processing file <f>
//! line=<line>`) and the points before it are kept, unless
//! `--skip-errors` is given: then each bad line is reported
//! (`Exception: <message>`, `error while processing file <f> line=<line>...
//! Continuing`) and the import goes on; each file ends with
//! `Processed file <f> in N ms, M data points (X points/s)`.
//!
//! Files are read in chunks of whole lines parsed by one worker thread per
//! core; this thread takes the parsed chunks back in file order, so order
//! checks, the first bad line and its number are as for a sequential read.
//!
//! A store held by a running TSD is refused (`in use by another
//! process`).

use std::io::{BufReader, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::Context as _;
use clap::Args;

use super::Context;
use crate::codec::qualifier::encode_value;
use crate::db::Db;
use crate::model::Timestamp;
use crate::model::Value;
use crate::model::uid::java_byte_array;
use crate::protocol::PointError;
use crate::protocol::telnet::{Words, chunk_lines, parse_point, parse_rollup};
use crate::write::{PendingPoint, Series, SeriesCache};

/// Points handed to the write path in one append.
const BATCH_POINTS: usize = 4096;

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Create metrics not yet known (OpenTSDB's `--auto-metric`: sets
    /// `tsd.core.auto_create_metrics`).
    #[arg(long)]
    pub auto_metric: bool,
    /// Report bad lines and go on instead of stopping at the first one.
    #[arg(long)]
    pub skip_errors: bool,
    /// Files to import, plain or gzipped (`.gz`).
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

/// The importer's state across files.
struct Importer {
    db: Arc<Db>,
    allow_out_of_order: bool,
    /// `--skip-errors`: a bad line is reported and skipped.
    skip_errors: bool,
    /// The last timestamp (ms) of each series met in this import, by
    /// process-local series id (dense, from 1); 0 for none, which no
    /// timestamp equals (they are positive).
    last_ms: Vec<u64>,
    /// Accepted points not yet appended, in arrival order.
    pending: Vec<PendingPoint>,
}

/// Why a line was refused.
fn line_error(e: &PointError) -> String {
    match e {
        PointError::IllegalArgument(m) => format!("illegal argument: {m}"),
        PointError::InvalidValue(m) => format!("invalid value: {m}"),
        PointError::UnknownName(m) => format!("unknown metric: {m}"),
        PointError::Storage(m) | PointError::Unavailable(m) | PointError::StorageDown(m) => {
            format!("storage error: {m}")
        }
        PointError::NoSuchRollup(m) => format!("No such rollup: {m}"),
    }
}

/// Parses and checks one line: the put parser, then the series checks
/// and resolution (creating UIDs). Safe to call from several threads.
fn parse_line(
    cache: &SeriesCache,
    line: &str,
    key: &mut String,
) -> Result<(Arc<Series>, Timestamp, Value), String> {
    let words = Words::split(line);
    let p = parse_point(words.as_slice()).map_err(|e| line_error(&e))?;
    let (series, ts) = cache
        .resolve(p.metric, p.timestamp, p.value, &p.tags, key)
        .map_err(|e| line_error(&e))?;
    Ok((series, ts, p.value))
}

/// A chunk of a file, parsed by a worker.
struct Parsed {
    seq: u64,
    data: Vec<u8>,
    lines: u64,
    /// Points with the index of their line in the chunk.
    points: Vec<(Arc<Series>, Timestamp, Value, u32)>,
    /// Bad lines, with their index and message: the first only, unless
    /// errors are skipped.
    errors: Vec<(u32, String)>,
    /// Indexes of `rollup` lines (`tsdb scan --rollup-table --import`),
    /// written by the importer to their rollup table.
    rollups: Vec<u32>,
}

fn parse_chunk(cache: &SeriesCache, seq: u64, data: Vec<u8>, skip_errors: bool) -> Parsed {
    let mut key = String::new();
    let mut points = Vec::with_capacity(data.len() / 64);
    let mut errors = Vec::new();
    let mut lines = 0u64;
    let mut rollups = Vec::new();
    if !data.is_empty() {
        for (i, line) in chunk_lines(&data).enumerate() {
            lines += 1;
            if line.starts_with("rollup ") {
                rollups.push(i as u32);
                continue;
            }
            match parse_line(cache, &line, &mut key) {
                Ok((s, ts, v)) => points.push((s, ts, v, i as u32)),
                Err(m) => {
                    errors.push((i as u32, m));
                    if !skip_errors {
                        break;
                    }
                }
            }
        }
    }
    Parsed {
        seq,
        data,
        lines,
        points,
        errors,
        rollups,
    }
}

/// Bytes per chunk handed to a parsing worker.
const CHUNK: usize = 1 << 20;

/// Counts bytes read through it (progress of compressed files).
struct Counting<R> {
    inner: R,
    read: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

impl Importer {
    /// Records one parsed point: the per-series order check, then the
    /// buffer. `Err` carries the message for the bad line.
    fn accept(&mut self, series: Arc<Series>, ts: Timestamp, value: Value) -> Result<(), String> {
        let ms = ts.as_millis();
        let id = series.id as usize;
        if self.last_ms.len() <= id {
            self.last_ms.resize(id + 1, 0);
        }
        let last_ms = &mut self.last_ms[id];
        if ms <= *last_ms && !self.allow_out_of_order {
            let enc = encode_value(value);
            return Err(format!(
                "illegal argument: New timestamp={} is less than or equal to previous={} when trying to add value={} to {}",
                ts.raw(),
                last_ms,
                java_byte_array(enc.as_bytes()),
                series.describe()
            ));
        }
        *last_ms = (*last_ms).max(ms);
        self.pending.push(PendingPoint { series, ts, value });
        Ok(())
    }

    /// Writes one `rollup` line (the telnet command's words) to its
    /// rollup table; `Err` carries the message for the bad line.
    fn rollup(&self, line: &str) -> Result<(), String> {
        let words = Words::split(line);
        let l = parse_rollup(words.as_slice()).map_err(|e| line_error(&e))?;
        let point = crate::db::RollupPoint::from(l);
        self.db
            .write_rollup(&point, crate::store::Durability::Process)
            .map_err(|e| line_error(&e))
    }

    /// Appends the accepted points through the write path, waiting while
    /// the WAL has a backlog.
    fn flush(&mut self) -> anyhow::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let a = self
            .db
            .append(&self.pending)
            .map_err(|e| anyhow::anyhow!("{}", line_error(&e)))?;
        self.db.throttle_blocking(a);
        self.pending.clear();
        Ok(())
    }

    /// Imports one file; returns the points read, or the bad line.
    fn file(
        &mut self,
        path: &Path,
        progress: Option<&indicatif::ProgressBar>,
        err: &mut dyn Write,
    ) -> anyhow::Result<Result<u64, (u64, String, String)>> {
        let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let size = f.metadata().map(|m| m.len()).unwrap_or(0);
        let read = Arc::new(AtomicU64::new(0));
        let counted = Counting {
            inner: f,
            read: read.clone(),
        };
        let reader: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") {
            Box::new(flate2::read::MultiGzDecoder::new(BufReader::with_capacity(
                1 << 20,
                counted,
            )))
        } else {
            Box::new(counted)
        };
        let mut reader = BufReader::with_capacity(1 << 20, reader);
        if let Some(pb) = progress {
            pb.set_length(size);
            pb.set_position(0);
            pb.set_message(path.display().to_string());
        }
        // Chunks of whole lines are parsed by worker threads; this thread
        // reads, then takes the results in file order for the per-series
        // order check and the buffer, so the first bad line still stops
        // the import with every point before it kept.
        let workers = std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .clamp(1, 8);
        let (job_tx, job_rx) = std::sync::mpsc::sync_channel::<(u64, Vec<u8>)>(workers * 2);
        let job_rx = std::sync::Mutex::new(job_rx);
        let (res_tx, res_rx) = std::sync::mpsc::channel::<Parsed>();
        let db = self.db.clone();
        let cache = db.series();
        let skip_errors = self.skip_errors;
        let mut points = 0u64;
        let mut lines_before = 0u64;
        let mut failure: Option<(u64, String, String)> = None;
        let mut io_error: Option<std::io::Error> = None;
        let mut flush_error: Option<anyhow::Error> = None;
        std::thread::scope(|scope| {
            for _ in 0..workers {
                let (job_rx, res_tx) = (&job_rx, res_tx.clone());
                scope.spawn(move || {
                    loop {
                        let job = job_rx.lock().map(|rx| rx.recv());
                        let Ok(Ok((seq, data))) = job else { return };
                        if res_tx
                            .send(parse_chunk(cache, seq, data, skip_errors))
                            .is_err()
                        {
                            return;
                        }
                    }
                });
            }
            drop(res_tx);
            let mut waiting: std::collections::BTreeMap<u64, Parsed> = Default::default();
            let mut next_seq = 0u64;
            let mut sent = 0u64;
            let mut carry: Vec<u8> = Vec::new();
            let mut eof = false;
            let mut job_tx = Some(job_tx);
            loop {
                // Read and hand out the next chunk, unless done or failed.
                if !eof && failure.is_none() {
                    let mut data = std::mem::take(&mut carry);
                    data.reserve(CHUNK + 4096);
                    while data.len() < CHUNK {
                        match (&mut reader)
                            .take((CHUNK + 4096 - data.len()) as u64)
                            .read_to_end(&mut data)
                        {
                            Ok(0) => {
                                eof = true;
                                break;
                            }
                            Ok(_) => {}
                            Err(e) => {
                                io_error = Some(e);
                                eof = true;
                                break;
                            }
                        }
                    }
                    if !eof && let Some(nl) = data.iter().rposition(|&b| b == b'\n') {
                        carry.extend_from_slice(&data[nl + 1..]);
                        data.truncate(nl + 1);
                    }
                    if let Some(tx) = &job_tx
                        && !data.is_empty()
                    {
                        if tx.send((sent, data)).is_err() {
                            eof = true;
                        }
                        sent += 1;
                    }
                    if let Some(pb) = progress {
                        pb.set_position(read.load(Ordering::Relaxed));
                    }
                }
                if eof || failure.is_some() {
                    job_tx = None;
                }
                // Take the finished chunks that are next in file order.
                let all_sent = job_tx.is_none();
                while next_seq < sent {
                    let mut got = match waiting.remove(&next_seq) {
                        Some(p) => p,
                        None if all_sent => match res_rx.recv() {
                            Ok(p) => {
                                waiting.insert(p.seq, p);
                                continue;
                            }
                            Err(_) => break,
                        },
                        None => match res_rx.try_recv() {
                            Ok(p) => {
                                waiting.insert(p.seq, p);
                                continue;
                            }
                            Err(_) => break,
                        },
                    };
                    next_seq += 1;
                    if failure.is_some() {
                        continue;
                    }
                    // The parsed points move on to the write path: their
                    // series handles are not cloned again per point.
                    let line_at = |idx: u32| {
                        chunk_lines(&got.data)
                            .nth(idx as usize)
                            .unwrap_or_default()
                            .into_owned()
                    };
                    let mut skipped = Vec::new();
                    for (series, ts, value, idx) in std::mem::take(&mut got.points) {
                        if let Err(msg) = self.accept(series, ts, value) {
                            if self.skip_errors {
                                skipped.push((idx, msg));
                                continue;
                            }
                            failure = Some((lines_before + idx as u64 + 1, line_at(idx), msg));
                            break;
                        }
                        points += 1;
                    }
                    for idx in std::mem::take(&mut got.rollups) {
                        if failure.is_some() {
                            break;
                        }
                        let line = line_at(idx);
                        match self.rollup(&line) {
                            Ok(()) => points += 1,
                            Err(msg) if self.skip_errors => skipped.push((idx, msg)),
                            Err(msg) => failure = Some((lines_before + idx as u64 + 1, line, msg)),
                        }
                    }
                    if self.skip_errors {
                        skipped.append(&mut got.errors);
                        skipped.sort_by_key(|(idx, _)| *idx);
                        for (idx, msg) in skipped {
                            // TextImporter's two log lines for a skipped line.
                            let _ = writeln!(err, "Exception: {msg}");
                            let _ = writeln!(
                                err,
                                "error while processing file {} line={}... Continuing",
                                path.display(),
                                line_at(idx)
                            );
                        }
                    } else if failure.is_none()
                        && let Some((idx, msg)) = got.errors.first()
                    {
                        failure =
                            Some((lines_before + *idx as u64 + 1, line_at(*idx), msg.clone()));
                    }
                    lines_before += got.lines;
                    if failure.is_none()
                        && self.pending.len() >= BATCH_POINTS
                        && let Err(e) = self.flush()
                    {
                        flush_error = Some(e);
                        failure = Some((0, String::new(), String::new()));
                    }
                }
                if all_sent && next_seq >= sent {
                    break;
                }
            }
        });
        if let Some(e) = flush_error {
            return Err(e);
        }
        if let Some(e) = io_error {
            return Err(anyhow::Error::new(e).context(format!("reading {}", path.display())));
        }
        Ok(match failure {
            Some(f) => Err(f),
            None => Ok(points),
        })
    }
}

fn rate(points: u64, ms: u128) -> f64 {
    points as f64 * 1000.0 / (ms.max(1) as f64)
}

pub(crate) fn run(
    ctx: &Context,
    a: ImportArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<i32> {
    let mut opts = ctx.db_options()?;
    if a.auto_metric {
        opts.auto_create.metrics = true;
    }
    let db = Db::open(&opts)?;
    let mut imp = Importer {
        db: db.clone(),
        skip_errors: a.skip_errors,
        allow_out_of_order: ctx
            .config
            .get_bool("tsd.core.bulk.allow_out_of_order_timestamps"),
        last_ms: Vec::new(),
        pending: Vec::with_capacity(BATCH_POINTS),
    };
    let progress = std::io::stderr().is_terminal().then(|| {
        let pb = indicatif::ProgressBar::new(0);
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        pb
    });
    let start = Instant::now();
    let mut total = 0u64;
    for path in &a.paths {
        let t0 = Instant::now();
        let result = imp.file(path, progress.as_ref(), err);
        let result = match result {
            Ok(r) => r,
            Err(e) => {
                imp.flush()?;
                db.close()?;
                return Err(e);
            }
        };
        match result {
            Ok(points) => {
                total += points;
                let ms = t0.elapsed().as_millis();
                writeln!(
                    out,
                    "Processed file {} in {ms} ms, {points} data points ({:.1} points/s)",
                    path.display(),
                    rate(points, ms)
                )?;
            }
            Err((line_no, line, msg)) => {
                if let Some(pb) = &progress {
                    pb.finish_and_clear();
                }
                // Points before the bad line are kept, as OpenTSDB does.
                imp.flush()?;
                db.close()?;
                writeln!(
                    err,
                    "Exception caught while processing file {} line={line}",
                    path.display()
                )?;
                writeln!(err, "line {line_no}: {msg}")?;
                return Ok(1);
            }
        }
    }
    imp.flush()?;
    db.close()?;
    if let Some(pb) = &progress {
        pb.finish_and_clear();
    }
    let ms = start.elapsed().as_millis();
    writeln!(
        out,
        "Total: imported {total} data points in {:.3}s ({:.1} points/s)",
        ms as f64 / 1000.0,
        rate(total, ms)
    )?;
    Ok(0)
}
