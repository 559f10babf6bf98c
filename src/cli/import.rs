//! `tsdb import`: OpenTSDB's `TextImporter`. Reads files (plain or `.gz`)
//! of put lines without the `put` word,
//! `<metric> <timestamp> <value> <tagk=tagv>...`, checks each with the
//! telnet `put` parser and the write path's series checks, and writes
//! whole rows straight to the store: points are grouped per series in
//! memory and written with [`Store::put_points`] when the buffer fills and
//! at the end, keeping the series index up to date.
//!
//! As OpenTSDB does: metrics are auto-created; timestamps of one series
//! must strictly increase unless
//! `tsd.core.bulk.allow_out_of_order_timestamps` is set; the first bad
//! line stops the import (`Exception caught while processing file <f>
//! line=<line>`) and the points before it are kept; each file ends with
//! `Processed file <f> in N ms, M data points (X points/s)`.
//!
//! The store is opened directly, so a store held by a running TSD is
//! refused (`in use by another process`).

use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::Context as _;
use clap::Args;

use super::Context;
use crate::codec::column::encode_value;
use crate::index::SeriesIndex;
use crate::model::Timestamp;
use crate::model::Value;
use crate::model::uid::java_byte_array;
use crate::storage::Durability;
use crate::store::Store;
use crate::tsd::telnet::decode_line;
use crate::write::line::parse_point;
use crate::write::{PointError, Series, SeriesCache};

/// Points held in memory before rows are written.
const FLUSH_POINTS: usize = 8_000_000;

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Files to import, plain or gzipped (`.gz`).
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

/// One series seen in this import and its last timestamp (ms).
struct Known {
    series: Arc<Series>,
    last_ms: u64,
}

/// The importer's state across files.
struct Importer {
    store: Arc<Store>,
    index: SeriesIndex,
    series: SeriesCache,
    allow_out_of_order: bool,
    /// By process-local series id (dense, from 1).
    known: Vec<Option<Known>>,
    /// Points in arrival order: (series id, time, value). One flat buffer
    /// (no per-series growth), grouped per series when written.
    pending: Vec<(u32, Timestamp, Value)>,
}

/// Why a line was refused.
fn line_error(e: &PointError) -> String {
    match e {
        PointError::IllegalArgument(m) => format!("illegal argument: {m}"),
        PointError::InvalidValue(m) => format!("invalid value: {m}"),
        PointError::UnknownName(m) => format!("unknown metric: {m}"),
        PointError::Storage(m) => format!("storage error: {m}"),
    }
}

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
    /// One line; `Err` carries the message for a bad line.
    fn line(&mut self, line: &str, key: &mut String) -> Result<(), String> {
        // Words as OpenTSDB's Tags.splitString: on single spaces (on the
        // stack for the usual line, which has at most 11 words).
        let mut arr: [&str; 16] = [""; 16];
        let mut n = 0;
        let mut spill: Vec<&str> = Vec::new();
        for w in line.split(' ') {
            if n < arr.len() {
                arr[n] = w;
            } else {
                if spill.is_empty() {
                    spill.extend_from_slice(&arr);
                }
                spill.push(w);
            }
            n += 1;
        }
        let words: &[&str] = if spill.is_empty() { &arr[..n] } else { &spill };
        let p = parse_point(words).map_err(|e| line_error(&e))?;
        let (series, ts) = self
            .series
            .resolve(p.metric, p.timestamp, p.value, &p.tags, key)
            .map_err(|e| line_error(&e))?;
        let ms = ts.as_millis();
        let id = series.id as usize;
        if self.known.len() <= id {
            self.known.resize_with(id + 1, || None);
        }
        let entry = self.known[id].get_or_insert_with(|| Known {
            series: series.clone(),
            last_ms: 0,
        });
        if ms <= entry.last_ms && !self.allow_out_of_order {
            let enc = encode_value(p.value);
            return Err(format!(
                "illegal argument: New timestamp={} is less than or equal to previous={} when trying to add value={} to {}",
                ts.raw(),
                entry.last_ms,
                java_byte_array(enc.as_bytes()),
                series.describe()
            ));
        }
        entry.last_ms = entry.last_ms.max(ms);
        self.pending.push((series.id, ts, p.value));
        Ok(())
    }

    /// Writes every pending point as whole rows: a counting sort groups
    /// them per series (keeping arrival order within each, so later
    /// duplicates win), then one `put_points` per series.
    fn flush(&mut self) -> anyhow::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut start = vec![0usize; self.known.len() + 1];
        for &(id, _, _) in &self.pending {
            start[id as usize + 1] += 1;
        }
        for i in 1..start.len() {
            start[i] += start[i - 1];
        }
        let mut next = start.clone();
        let mut grouped = vec![(Timestamp::Seconds(0), Value::Int(0)); self.pending.len()];
        for &(id, ts, v) in &self.pending {
            grouped[next[id as usize]] = (ts, v);
            next[id as usize] += 1;
        }
        for (id, known) in self.known.iter().enumerate() {
            let points = &grouped[start[id]..start[id + 1]];
            let Some(k) = known else { continue };
            if points.is_empty() {
                continue;
            }
            if let Some(latest) = points.iter().map(|(ts, _)| ts.base_time()).max() {
                self.index.add_at(&k.series.tsuid, latest)?;
            }
            self.store
                .put_points(&k.series.tsuid, points, Durability::Process)?;
        }
        self.pending.clear();
        Ok(())
    }

    /// Imports one file; returns the points read, or the bad line.
    fn file(
        &mut self,
        path: &Path,
        progress: Option<&indicatif::ProgressBar>,
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
        let mut buf = Vec::with_capacity(256);
        let mut key = String::new();
        let mut points = 0u64;
        let mut line_no = 0u64;
        loop {
            buf.clear();
            if reader.read_until(b'\n', &mut buf)? == 0 {
                break;
            }
            line_no += 1;
            let mut raw = &buf[..];
            if let Some(r) = raw.strip_suffix(b"\n") {
                raw = r;
            }
            if let Some(r) = raw.strip_suffix(b"\r") {
                raw = r;
            }
            let line = decode_line(raw);
            if let Err(msg) = self.line(&line, &mut key) {
                return Ok(Err((line_no, line.into_owned(), msg)));
            }
            points += 1;
            if self.pending.len() >= FLUSH_POINTS {
                self.flush()?;
            }
            if let Some(pb) = progress
                && points.is_multiple_of(65536)
            {
                pb.set_position(read.load(Ordering::Relaxed));
            }
        }
        Ok(Ok(points))
    }
}

fn rate(points: u64, ms: u128) -> f64 {
    points as f64 * 1000.0 / (ms.max(1) as f64)
}

pub fn run(
    ctx: &Context,
    a: ImportArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<i32> {
    let store = ctx.open_store()?;
    let mut auto = ctx.config.auto_create();
    auto.metrics = true; // TextImporter forces tsd.core.auto_create_metrics
    let uids = Arc::new(crate::uid::UidTable::new(
        &store,
        auto,
        ctx.config.name_rules(),
    ));
    let max_tags = ctx
        .config
        .get_int::<usize>("tsd.storage.max_tags")?
        .unwrap_or(8);
    let mut imp = Importer {
        index: SeriesIndex::open(&store)?,
        store: store.clone(),
        series: SeriesCache::new(uids, max_tags),
        allow_out_of_order: ctx
            .config
            .get_bool("tsd.core.bulk.allow_out_of_order_timestamps"),
        known: Vec::new(),
        pending: Vec::with_capacity(1 << 20),
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
        let result = imp.file(path, progress.as_ref());
        let result = match result {
            Ok(r) => r,
            Err(e) => {
                imp.flush()?;
                store.sync()?;
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
                store.sync()?;
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
    store.sync()?;
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
