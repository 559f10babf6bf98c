//! Request bodies: the limits every body is read under
//! (`tsd.http.request.max_chunk`, chunked transfer, `Content-Encoding`)
//! and the memory budget all bodies in flight share
//! (`tsd.http.request.max_inflight_bytes`).
//!
//! A request reserves its body's bytes before reading any of them: its
//! Content-Length at once, more as the body turns out larger (a chunked
//! body as it arrives, a compressed one as it inflates). When the budget
//! is spent a request waits up to `tsd.http.request.max_inflight_wait`
//! milliseconds for others to finish, then gets a 503; its body is left
//! unread meanwhile, so a waiting request costs no memory. One request
//! never needs more than the whole budget: a body larger than it is read
//! alone.
//!
//! Requests that already hold part of the budget and wait for more could
//! wait for each other forever (eight compressed bodies, each holding an
//! eighth, each needing more): when every holder waits, one of them goes
//! on beyond the budget, so that the budget is exceeded by one body at
//! most, and only then.

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header;
use hyper::http::request::Parts;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc};

use super::reply::Reply;
use crate::tsd::TsdState;

/// A body whose reservation reached this many bytes gives its memory back
/// to the system once it is done (see [`BodyBudget::give_back_memory`]).
const TRIM_AFTER: usize = 8 << 20;
/// Trims after large bodies are coalesced: one at most this often.
const TRIM_DELAY: Duration = Duration::from_secs(1);
/// A streamed body grows its reservation in steps of this many bytes.
const GROW_STEP: usize = 64 << 10;

/// The bytes of request bodies the TSD holds at once, shared by every
/// request; see the module header.
pub(crate) struct BodyBudget {
    /// `None`: no limit (`tsd.http.request.max_inflight_bytes = 0`).
    permits: Option<Arc<Semaphore>>,
    /// The budget, in bytes; the most one request may hold.
    total: usize,
    wait: Duration,
    /// A trim of the allocator is scheduled.
    trim_scheduled: AtomicBool,
    /// Requests holding part of the budget, and those of them waiting.
    holders: parking_lot::Mutex<Holders>,
    /// Told when a holder lets go: its waiters may all be stuck now.
    holder_left: Notify,
}

#[derive(Default)]
struct Holders {
    holding: usize,
    waiting: usize,
}

impl Holders {
    /// Every holder waits for more: none of them can finish to free any.
    fn stuck(&self) -> bool {
        self.holding > 0 && self.waiting == self.holding
    }
}

impl BodyBudget {
    /// `total` bytes (0: no limit), waiting at most `wait` for them.
    pub(crate) fn new(total: usize, wait: Duration) -> BodyBudget {
        // A semaphore takes at most u32::MAX permits at once.
        let total = total.min(u32::MAX as usize);
        BodyBudget {
            permits: (total > 0).then(|| Arc::new(Semaphore::new(total))),
            total,
            wait,
            trim_scheduled: AtomicBool::new(false),
            holders: parking_lot::Mutex::new(Holders::default()),
            holder_left: Notify::new(),
        }
    }

    /// Hands the heap pages freed by a large body back to the system,
    /// once, a moment after the last of a burst of large bodies: glibc
    /// keeps them otherwise, and a TSD that parsed a few large bodies
    /// would stay that large.
    fn give_back_memory(&self, state: &Arc<TsdState>) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.trim_scheduled.swap(true, Ordering::AcqRel) {
            return;
        }
        let state = state.clone();
        rt.spawn(async move {
            tokio::time::sleep(TRIM_DELAY).await;
            state.bodies.trim_scheduled.store(false, Ordering::Release);
            let _ = tokio::task::spawn_blocking(trim_heap).await;
        });
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_heap() {
    // SAFETY: malloc_trim takes no pointers; it only returns free pages of
    // the malloc arenas to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_heap() {}

/// The part of the [`BodyBudget`] one request holds; given back when
/// dropped.
pub(crate) struct Reservation {
    state: Arc<TsdState>,
    permit: Option<OwnedSemaphorePermit>,
    /// Bytes held, with those beyond the budget (`overdrawn`, no permits).
    held: usize,
    overdrawn: usize,
    /// The most this reservation ever held.
    peak: usize,
}

impl Reservation {
    /// Reserves `bytes` (a declared Content-Length; 0 if unknown) before
    /// a body is read.
    pub(crate) async fn new(state: &Arc<TsdState>, bytes: usize) -> Result<Reservation, Reply> {
        let mut r = Reservation {
            state: state.clone(),
            permit: None,
            held: 0,
            overdrawn: 0,
            peak: 0,
        };
        r.grow_to(bytes).await?;
        Ok(r)
    }

    /// Makes the reservation at least `bytes` (at most the whole budget),
    /// waiting for the budget as configured; a 503 if it stays spent.
    pub(crate) async fn grow_to(&mut self, bytes: usize) -> Result<(), Reply> {
        // A handle of its own: the waits below borrow the budget while
        // this reservation changes.
        let state = self.state.clone();
        let budget = &state.bodies;
        let Some(sem) = budget.permits.clone() else {
            let need = bytes.saturating_sub(self.held);
            self.add(need);
            return Ok(());
        };
        let target = bytes.min(budget.total);
        if target <= self.held {
            return Ok(());
        }
        let need = target - self.held;
        if let Ok(permit) = sem.clone().try_acquire_many_owned(need as u32) {
            self.take(permit, need);
            return Ok(());
        }
        let holder = self.held > 0;
        if holder {
            budget.holders.lock().waiting += 1;
        }
        let acquire = sem.acquire_many_owned(need as u32);
        let deadline = tokio::time::sleep(budget.wait);
        tokio::pin!(acquire, deadline);
        let got = loop {
            // Listening before looking: a holder that leaves between the
            // look and the wait still wakes this one. (Created after the
            // look, a notification in between was lost, and two holders
            // left waiting on each other sat out the whole wait: a 503.)
            let left = budget.holder_left.notified();
            tokio::pin!(left);
            left.as_mut().enable();
            if holder {
                let mut h = budget.holders.lock();
                if h.stuck() {
                    // This one goes on; it no longer counts as waiting, so
                    // the others, woken by the same departure, wait on.
                    h.waiting -= 1;
                    drop(h);
                    self.overdraw(need);
                    return Ok(());
                }
            }
            tokio::select! {
                p = &mut acquire => break p.ok(),
                _ = &mut deadline => break None,
                _ = &mut left, if holder => {}
            }
        };
        if holder {
            budget.holders.lock().waiting -= 1;
        }
        match got {
            Some(permit) => {
                self.take(permit, need);
                Ok(())
            }
            None => Err(self.refuse(bytes)),
        }
    }

    fn take(&mut self, permit: OwnedSemaphorePermit, n: usize) {
        match &mut self.permit {
            Some(p) => p.merge(permit),
            None => self.permit = Some(permit),
        }
        self.add(n);
    }

    /// Goes on beyond the budget: every holder waits (see the module
    /// header).
    fn overdraw(&mut self, n: usize) {
        self.overdrawn += n;
        self.add(n);
    }

    /// [`Reservation::grow_to`] for a body read on a blocking thread.
    pub(crate) fn grow_to_blocking(&mut self, bytes: usize) -> Result<(), Reply> {
        tokio::runtime::Handle::current().block_on(self.grow_to(bytes))
    }

    /// Gives back what is held beyond `bytes`: a parsed body may need
    /// far less than its text did.
    pub(crate) fn shrink_to(&mut self, bytes: usize) {
        if bytes >= self.held {
            return;
        }
        let give = self.held - bytes;
        // What was held beyond the budget goes first: it has no permits.
        let unbacked = give.min(self.overdrawn);
        self.overdrawn -= unbacked;
        if let Some(p) = &mut self.permit {
            // Dropping the split part returns it to the budget.
            drop(p.split(give - unbacked));
        }
        self.sub(give);
    }

    fn add(&mut self, n: usize) {
        if self.held == 0 && n > 0 {
            self.state.bodies.holders.lock().holding += 1;
        }
        self.held += n;
        self.peak = self.peak.max(self.held);
        let stats = &self.state.stats;
        stats.http_body_bytes.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn sub(&mut self, n: usize) {
        if n > 0 && self.held == n {
            let budget = &self.state.bodies;
            budget.holders.lock().holding -= 1;
            budget.holder_left.notify_waiters();
        }
        self.held -= n;
        let stats = &self.state.stats;
        stats.http_body_bytes.fetch_sub(n as u64, Ordering::Relaxed);
    }

    fn refuse(&self, bytes: usize) -> Reply {
        let stats = &self.state.stats;
        stats.http_body_rejected.fetch_add(1, Ordering::Relaxed);
        let budget = &self.state.bodies;
        Reply::error(
            503,
            "Too many request bodies in flight",
            &format!(
                "The request body needs {bytes} bytes of the {} bytes that request bodies may hold at once (tsd.http.request.max_inflight_bytes), which stayed in use for {} ms (tsd.http.request.max_inflight_wait); retry later",
                budget.total,
                budget.wait.as_millis()
            ),
        )
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.sub(self.held);
        if self.peak >= TRIM_AFTER {
            self.state.bodies.give_back_memory(&self.state);
        }
    }
}

/// The body's `Content-Encoding`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Encoding {
    Identity,
    Gzip,
    Deflate,
    Unsupported(String),
}

impl Encoding {
    pub(crate) fn of(head: &Parts) -> Encoding {
        let encoding = head
            .headers
            .get(header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_ascii_lowercase())
            .unwrap_or_default();
        match encoding.as_str() {
            "" | "identity" => Encoding::Identity,
            "gzip" | "x-gzip" => Encoding::Gzip,
            "deflate" => Encoding::Deflate,
            _ => Encoding::Unsupported(encoding),
        }
    }

    /// The answer to an encoding rtsdb cannot read.
    pub(crate) fn unsupported(name: &str) -> Reply {
        Reply::error(
            400,
            "Unsupported Content-Encoding",
            &format!("Content-Encoding [{name}] is not supported; use gzip or deflate"),
        )
    }
}

/// The 413 for a body over `tsd.http.request.max_chunk`, sent or inflated.
pub(crate) fn too_big(limit: usize) -> Reply {
    Reply::error(
        413,
        "Request body too large",
        &format!(
            "The request body is larger than the limit of {limit} bytes (tsd.http.request.max_chunk)"
        ),
    )
}

/// The checks made before a body is read (chunked transfer allowed,
/// declared length within the limit); the declared length.
pub(crate) fn preflight(state: &TsdState, head: &Parts) -> Result<Option<usize>, Reply> {
    let limit = state.options.max_body_bytes;
    let chunked = head
        .headers
        .get(header::TRANSFER_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    if chunked && !state.options.enable_chunked {
        return Err(Reply::error(400, "Chunked request not supported.", ""));
    }
    let declared = head
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(len) if len > limit as u64 => Err(too_big(limit)),
        Some(len) => Ok(Some(len as usize)),
        None => Ok(None),
    }
}

fn read_error(e: hyper::Error) -> Reply {
    Reply::error(400, "Unable to read the request body", &e.to_string())
}

/// The start of a body, read on the connection's task.
pub(crate) struct Start {
    /// Its pieces as they came.
    pub(crate) pieces: VecDeque<Bytes>,
    /// Their bytes.
    pub(crate) len: usize,
    /// The whole body is in `pieces`.
    pub(crate) whole: bool,
}

/// Reads a body as sent (still compressed) until `upto` bytes or its end,
/// within the limit and the reservation. A body is read this far before a
/// thread is taken to parse it, so a client that stops sending holds a
/// thread only with that many bytes of the budget.
pub(crate) async fn read_start(
    state: &TsdState,
    body: &mut Incoming,
    reservation: &mut Reservation,
    upto: usize,
) -> Result<Start, Reply> {
    let limit = state.options.max_body_bytes;
    let mut start = Start {
        pieces: VecDeque::new(),
        len: 0,
        whole: false,
    };
    while start.len < upto {
        let Some(frame) = body.frame().await else {
            start.whole = true;
            break;
        };
        let Ok(data) = frame.map_err(read_error)?.into_data() else {
            continue;
        };
        if start.len + data.len() > limit {
            return Err(too_big(limit));
        }
        start.len += data.len();
        reservation.grow_to(start.len).await?;
        start.pieces.push_back(data);
    }
    Ok(start)
}

/// Reads the whole body as sent (still compressed), within the limit and
/// the reservation.
pub(crate) async fn collect_wire(
    state: &TsdState,
    mut body: Incoming,
    reservation: &mut Reservation,
) -> Result<Vec<u8>, Reply> {
    let start = read_start(state, &mut body, reservation, usize::MAX).await?;
    let mut out = Vec::with_capacity(start.len);
    for piece in start.pieces {
        out.extend_from_slice(&piece);
    }
    Ok(out)
}

/// A piece of a body on its way to the thread that reads it.
pub(crate) enum Wire {
    Data(Bytes),
    /// The whole body was sent.
    End,
}

/// Sends the rest of a body, as it arrives, to the thread that reads it,
/// within the limit (`sent` bytes were read before). Returns early,
/// without error, if that thread stopped reading.
pub(crate) async fn pump(
    state: &TsdState,
    mut body: Incoming,
    mut sent: usize,
    to: mpsc::Sender<Wire>,
) -> Result<(), Reply> {
    let limit = state.options.max_body_bytes;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(read_error)?.into_data() else {
            continue;
        };
        sent += data.len();
        if sent > limit {
            return Err(too_big(limit));
        }
        if to.send(Wire::Data(data)).await.is_err() {
            return Ok(());
        }
    }
    let _ = to.send(Wire::End).await;
    Ok(())
}

/// A body as a reader: the start read already, then what [`pump`] sends
/// (none if the start is the whole body); an error if the pump stopped
/// before the end of the body (it answers the request then).
pub(crate) struct WireReader {
    pieces: VecDeque<Bytes>,
    from: Option<mpsc::Receiver<Wire>>,
}

impl WireReader {
    pub(crate) fn new(start: Start, from: Option<mpsc::Receiver<Wire>>) -> WireReader {
        WireReader {
            pieces: start.pieces,
            from: if start.whole { None } else { from },
        }
    }
}

impl Read for WireReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if let Some(piece) = self.pieces.front_mut() {
                if !piece.has_remaining() {
                    self.pieces.pop_front();
                    continue;
                }
                let n = buf.len().min(piece.len());
                piece.copy_to_slice(&mut buf[..n]);
                return Ok(n);
            }
            let Some(from) = &mut self.from else {
                return Ok(0);
            };
            match from.blocking_recv() {
                Some(Wire::Data(b)) => self.pieces.push_back(b),
                Some(Wire::End) => self.from = None,
                None => return Err(BodyFault::Aborted.into()),
            }
        }
    }
}

/// Why a body could not be read, carried through the readers below a
/// parser as an `io::Error`.
#[derive(Debug)]
pub(crate) enum BodyFault {
    /// The compressed body is corrupt (the decoder's words).
    Decode(String),
    /// It inflates beyond `tsd.http.request.max_chunk`.
    TooBig,
    /// The budget stayed spent: the answer to send.
    Refused(Reply),
    /// The body stopped arriving; whoever stopped it answers.
    Aborted,
}

impl fmt::Display for BodyFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyFault::Decode(m) => f.write_str(m),
            BodyFault::TooBig => f.write_str("the request body inflates beyond the limit"),
            BodyFault::Refused(_) => f.write_str("no budget left for the request body"),
            BodyFault::Aborted => f.write_str("the request body stopped arriving"),
        }
    }
}

impl std::error::Error for BodyFault {}

impl From<BodyFault> for io::Error {
    fn from(f: BodyFault) -> io::Error {
        io::Error::other(f)
    }
}

impl BodyFault {
    /// The fault an error of the readers carries, if any.
    pub(crate) fn of(e: &io::Error) -> Option<&BodyFault> {
        e.get_ref()?.downcast_ref::<BodyFault>()
    }

    /// The answer: OpenTSDB's error envelope with rtsdb's messages.
    pub(crate) fn reply(&self, limit: usize) -> Reply {
        match self {
            BodyFault::Decode(m) => Reply::error(400, "Unable to decompress the request body", m),
            BodyFault::TooBig => too_big(limit),
            BodyFault::Refused(r) => r.clone(),
            BodyFault::Aborted => Reply::error(400, "Unable to read the request body", ""),
        }
    }
}

/// How a body's bytes become its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decoder {
    Identity,
    Gzip,
    /// HTTP's deflate: zlib-wrapped.
    Zlib,
    /// The raw deflate some clients send as `deflate`.
    RawDeflate,
}

/// `r` decoded: inflated text is limited to `limit` bytes and its errors
/// become [`BodyFault`]s (a plain body is limited as sent).
pub(crate) fn decode<'a, R: Read + Send + 'a>(
    d: Decoder,
    r: R,
    limit: usize,
) -> Box<dyn Read + Send + 'a> {
    let inflated = |inner: Box<dyn Read + Send + 'a>| -> Box<dyn Read + Send + 'a> {
        Box::new(Inflated {
            inner,
            out: 0,
            limit,
        })
    };
    match d {
        Decoder::Identity => Box::new(r),
        Decoder::Gzip => inflated(Box::new(flate2::read::MultiGzDecoder::new(r))),
        Decoder::Zlib => inflated(Box::new(flate2::read::ZlibDecoder::new(r))),
        Decoder::RawDeflate => inflated(Box::new(flate2::read::DeflateDecoder::new(r))),
    }
}

/// Inflated text: at most `limit` bytes (reading byte `limit + 1` is the
/// fault), decoder errors as [`BodyFault::Decode`].
struct Inflated<'a> {
    inner: Box<dyn Read + Send + 'a>,
    out: usize,
    limit: usize,
}

impl Read for Inflated<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let room = (self.limit + 1 - self.out).min(buf.len());
        match self.inner.read(&mut buf[..room]) {
            Ok(n) => {
                self.out += n;
                if self.out > self.limit {
                    return Err(BodyFault::TooBig.into());
                }
                Ok(n)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Err(e),
            Err(e) if BodyFault::of(&e).is_some() => Err(e),
            Err(e) => Err(BodyFault::Decode(e.to_string()).into()),
        }
    }
}

/// Which decoder reads a `deflate` body: zlib if it decodes the whole
/// body, else raw deflate (whose error is the answer if it fails too).
pub(crate) fn deflate_decoder(wire: &[u8], limit: usize) -> Result<Decoder, BodyFault> {
    let whole = |d| io::copy(&mut decode(d, wire, limit), &mut io::sink());
    if whole(Decoder::Zlib).is_ok() {
        return Ok(Decoder::Zlib);
    }
    match whole(Decoder::RawDeflate) {
        Ok(_) => Ok(Decoder::RawDeflate),
        Err(e) => Err(into_fault(e)),
    }
}

/// The fault an error of [`decode`]'s reader carries.
pub(crate) fn into_fault(e: io::Error) -> BodyFault {
    let words = e.to_string();
    match e.into_inner().map(|inner| inner.downcast::<BodyFault>()) {
        Some(Ok(fault)) => *fault,
        _ => BodyFault::Decode(words),
    }
}

/// Counts the text read through it and grows the request's reservation
/// to match as it goes (in [`GROW_STEP`]s), unless it has none to grow.
pub(crate) struct Metered<'a, R> {
    pub(crate) inner: R,
    read: usize,
    reservation: Option<&'a mut Reservation>,
}

impl<'a, R: Read> Metered<'a, R> {
    pub(crate) fn new(inner: R, reservation: Option<&'a mut Reservation>) -> Self {
        Metered {
            inner,
            read: 0,
            reservation,
        }
    }

    /// Stops growing the reservation: what is read from now on is
    /// thrown away.
    pub(crate) fn stop_metering(&mut self) {
        self.reservation = None;
    }
}

impl<R: Read> Read for Metered<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n;
        if let Some(r) = self.reservation.as_deref_mut()
            && self.read > r.held
        {
            let step = self.read.div_ceil(GROW_STEP) * GROW_STEP;
            r.grow_to_blocking(step).map_err(BodyFault::Refused)?;
        }
        Ok(n)
    }
}

/// Reads a whole body for an endpoint that parses it as one document:
/// within the limits, inflated, its bytes held against the budget until
/// the request is done.
pub(crate) async fn read_whole(
    state: &Arc<TsdState>,
    head: &Parts,
    body: Incoming,
) -> Result<(Vec<u8>, Reservation), Reply> {
    let limit = state.options.max_body_bytes;
    let declared = preflight(state, head)?;
    let mut reservation = Reservation::new(state, declared.unwrap_or(0)).await?;
    let wire = collect_wire(state, body, &mut reservation).await?;
    let decoder = match Encoding::of(head) {
        Encoding::Identity => return Ok((wire, reservation)),
        Encoding::Gzip => Decoder::Gzip,
        Encoding::Deflate => deflate_decoder(&wire, limit).map_err(|f| f.reply(limit))?,
        Encoding::Unsupported(name) => return Err(Encoding::unsupported(&name)),
    };
    let mut out = Vec::new();
    decode(decoder, &wire[..], limit)
        .read_to_end(&mut out)
        .map_err(|e| into_fault(e).reply(limit))?;
    drop(wire);
    reservation.grow_to(out.len()).await?;
    Ok((out, reservation))
}
