//! The `/api/put` body, read as it arrives: the list of points is walked
//! here and serde reads one point at a time, each decoded into a compact
//! buffer ([`DecodedPoints`]), so a request costs a fraction of its body,
//! not the several times its size a JSON tree would.
//!
//! Nothing is written before the whole body has parsed: OpenTSDB parses a
//! put body whole before it looks at any point, so a syntax error late in
//! a body refuses the request with nothing written and no UID created.
//! Buffering the decoded points (a fifth to a third of their JSON for
//! the usual bodies, the names of a series stored once) keeps that, where
//! appending batches while reading could not.
//!
//! The usual body is read by the one-pass scanner of `scan.rs`; this
//! reader goes on from the first point the scanner does not take (or
//! reads the whole body if it is not a list or object of the usual form).
//!
//! The text parsed is the one the former whole-body parser saw, so every
//! answer, a parser error's position included, is the same (a test reads
//! bodies both ways and compares): the bytes
//! decoded lossily as UTF-8 (`String::from_utf8_lossy`), without leading
//! and trailing whitespace (`str::trim`), the bare `NaN`/`Infinity`
//! tokens Jackson accepts quoted.
//!
//! A parser only: it reads from any [`Read`] and says why a body gave no
//! points ([`ParseError`]); the HTTP layer (`tsd::http::put`) meters the
//! body, checks and appends the points and answers the client.
//!
//! - [`point`]: the serde point types, read as Jackson reads them.
//! - [`points`]: the compact buffer the points are decoded into.
//! - `scan`: the one-pass scanner for the usual body.

pub(crate) mod point;
pub(crate) mod points;
mod scan;

use std::fmt;
use std::io::{self, Read};

use serde::Deserialize;
use serde::de::{Deserializer, SeqAccess, Visitor};

use point::{BadBody, JsonPoint};
use points::DecodedPoints;
use scan::{Handover, Scanned};

/// Bytes read from the body at a time, by the scanner and the full
/// reader alike.
const READ_CHUNK: usize = 64 << 10;

/// Why a put body gave no points.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ParseError {
    /// The body could not be read: the reader's error.
    #[error("{0}")]
    Read(io::Error),
    /// Only whitespace.
    #[error("an empty body")]
    Empty,
    /// Not JSON, or not a point or list of points: the parser's words.
    /// The text was not read to its end (see [`parse`]).
    #[error("{0}")]
    Syntax(String),
    /// Read to its end, but a point's value was not one: the words.
    #[error("{0}")]
    BadPoint(String),
    /// An empty list.
    #[error("no points")]
    NoPoints,
}

/// Parses a put body from `src` (its text, inflated); see the module
/// header. After a [`ParseError::Syntax`] the rest of the body is left
/// unread in `src`: the caller reads it out, so that a corrupt
/// compressed stream or one over the limit is answered as such, as when
/// bodies were read whole first.
///
/// A list is read one point at a time: this walks the list itself, as
/// serde would, and hands each element to serde as the text `[` +
/// element, so that serde reads the element exactly as it read it within
/// the whole body (the same errors, the same nesting limit); the
/// positions of its errors are moved to where the element is in the body.
/// Any other body (one object, or not JSON) is parsed whole, as before.
pub(crate) fn parse<R: Read>(src: &mut R) -> Result<DecodedPoints, ParseError> {
    let mut points = DecodedPoints::default();
    let mut bad = None;
    let (rest, at) = match scan::scan(&mut *src, &mut points) {
        Err(e) => return Err(ParseError::Read(e)),
        Ok(Scanned::Done) if points.is_empty() => return Err(ParseError::NoPoints),
        Ok(Scanned::Done) => return Ok(points),
        Ok(Scanned::Resume { rest, at }) => (rest, at),
    };
    let parsed = {
        let mut text = PutText::new(io::Cursor::new(rest).chain(&mut *src));
        match at {
            Handover::Start => match text.peek() {
                Ok(None) => return Err(ParseError::Empty),
                Ok(Some(b'[')) => read_list(&mut text, &mut points, &mut bad),
                Ok(Some(first)) => read_whole(&mut text, first, &mut points, &mut bad),
                Err(e) => Err(Failed::Io(e)),
            },
            Handover::InList { first, at } => {
                text.resume_at(at);
                read_list_from(&mut text, first, &mut points, &mut bad)
            }
            Handover::AfterList { at } => {
                text.resume_at(at);
                after_list(&mut text)
            }
        }
    };
    match parsed {
        Err(Failed::Io(e)) => Err(ParseError::Read(e)),
        Err(Failed::Words(words)) => Err(ParseError::Syntax(words)),
        Ok(()) => match bad {
            Some(BadBody(words)) => Err(ParseError::BadPoint(words)),
            None if points.is_empty() => Err(ParseError::NoPoints),
            None => Ok(points),
        },
    }
}

/// A parse that failed: the readers' error, or the parser's words.
enum Failed {
    Io(io::Error),
    Words(String),
}

impl From<io::Error> for Failed {
    fn from(e: io::Error) -> Failed {
        Failed::Io(e)
    }
}

/// serde's words for a failure it did not see itself, at a place in the
/// text (its `ErrorCode` texts).
fn syntax(words: &str, (line, column): (usize, usize)) -> Failed {
    Failed::Words(format!("{words} at line {line} column {column}"))
}

/// One object, or anything but a list: the whole text, parsed at once.
fn read_whole<R: Read>(
    text: &mut PutText<R>,
    first: u8,
    points: &mut DecodedPoints,
    bad: &mut Option<BadBody>,
) -> Result<(), Failed> {
    let mut whole = Vec::new();
    text.take_rest(&mut whole)?;
    let mut de = serde_json::Deserializer::from_slice(&whole);
    let parsed = if first == b'{' {
        JsonPoint::deserialize(&mut de).map(|p| points.push(&p, bad))
    } else {
        de.deserialize_seq(PointsVisitor { points, bad })
    };
    parsed
        .and_then(|()| de.end())
        .map_err(|e| Failed::Words(e.to_string()))
}

/// A list of points, an element at a time (serde's `SeqAccess` and
/// `end_seq`, then `Deserializer::end`).
fn read_list<R: Read>(
    text: &mut PutText<R>,
    points: &mut DecodedPoints,
    bad: &mut Option<BadBody>,
) -> Result<(), Failed> {
    text.advance(1);
    read_list_from(text, true, points, bad)
}

/// [`read_list`] from after its `[` and the points before (`first`:
/// none), before the comma or `]` that follows them.
fn read_list_from<R: Read>(
    text: &mut PutText<R>,
    mut first: bool,
    points: &mut DecodedPoints,
    bad: &mut Option<BadBody>,
) -> Result<(), Failed> {
    let mut element = Vec::new();
    loop {
        let next = match text.skip_whitespace()? {
            Some(b']') => break,
            Some(b',') if !first => {
                text.advance(1);
                match text.skip_whitespace()? {
                    Some(b']') => return Err(syntax("trailing comma", text.peek_position())),
                    None => return Err(syntax("EOF while parsing a value", text.position())),
                    Some(b) => b,
                }
            }
            Some(b) if first => b,
            Some(_) => return Err(syntax("expected `,` or `]`", text.peek_position())),
            None => return Err(syntax("EOF while parsing a list", text.position())),
        };
        first = false;
        let at = text.position();
        element.clear();
        element.push(b'[');
        text.take_element(next, &mut element)?;
        read_element(&element, at, points, bad)?;
    }
    text.advance(1);
    after_list(text)
}

/// After a list's `]`: nothing but whitespace may follow.
fn after_list<R: Read>(text: &mut PutText<R>) -> Result<(), Failed> {
    match text.skip_whitespace()? {
        None => Ok(()),
        Some(_) => Err(syntax("trailing characters", text.peek_position())),
    }
}

/// One element of a list, given as `[` + its text: serde reads it as it
/// read the element within the list. `at` is where the element starts.
fn read_element(
    element: &[u8],
    at: (usize, usize),
    points: &mut DecodedPoints,
    bad: &mut Option<BadBody>,
) -> Result<(), Failed> {
    let mut de = serde_json::Deserializer::from_slice(element);
    let mut got = false;
    let read = de.deserialize_seq(OneElement {
        points,
        bad,
        got: &mut got,
    });
    match read {
        // The list was not closed: its end is not the element's business.
        Err(_) if got => Ok(()),
        Ok(()) => Ok(()),
        Err(e) => Err(Failed::Words(moved(&e, at))),
    }
}

/// The words of `e`, an error of serde reading `[` + an element that
/// starts at `(line, column)` of the body, placed in the body.
fn moved(e: &serde_json::Error, (line, column): (usize, usize)) -> String {
    let words = e.to_string();
    if e.line() == 0 {
        return words;
    }
    let at = format!(" at line {} column {}", e.line(), e.column());
    let Some(message) = words.strip_suffix(&at) else {
        return words;
    };
    let place = if e.line() == 1 {
        (line, column + e.column() - 1)
    } else {
        (line + e.line() - 1, e.column())
    };
    format!("{message} at line {} column {}", place.0, place.1)
}

/// The first point of a list, kept; the rest of the list is not read.
struct OneElement<'p> {
    points: &'p mut DecodedPoints,
    bad: &'p mut Option<BadBody>,
    got: &'p mut bool,
}

impl<'de> Visitor<'de> for OneElement<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a sequence")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if let Some(p) = seq.next_element::<JsonPoint<'de>>()? {
            self.points.push(&p, self.bad);
            *self.got = true;
        }
        Ok(())
    }
}

/// A list of points, each kept as it is read.
struct PointsVisitor<'p> {
    points: &'p mut DecodedPoints,
    bad: &'p mut Option<BadBody>,
}

impl<'de> Visitor<'de> for PointsVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        // What `Vec<JsonPoint>` says, as the former parser read one.
        f.write_str("a sequence")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(p) = seq.next_element::<JsonPoint<'de>>()? {
            self.points.push(&p, self.bad);
        }
        Ok(())
    }
}

/// The bare tokens Jackson reads as numbers (`ALLOW_NON_NUMERIC_NUMBERS`),
/// in the order they are tried.
const NON_NUMERIC: [&[u8]; 7] = [
    b"-Infinity",
    b"+Infinity",
    b"Infinity",
    b"-INF",
    b"+INF",
    b"INF",
    b"NaN",
];
const LONGEST_TOKEN: usize = 9;

/// The text of a body as serde reads it (see the module header), with
/// the place reached in it.
struct PutText<R> {
    src: R,
    raw: Vec<u8>,
    /// The start of a UTF-8 sequence the last read cut.
    carry: Vec<u8>,
    /// The text of the last read.
    chunk: String,
    /// Something other than whitespace was seen.
    started: bool,
    /// Whitespace that ends the text so far: dropped if nothing follows.
    held: String,
    quoter: Quoter,
    out: Vec<u8>,
    pos: usize,
    done: bool,
    /// Lines taken so far, and bytes since the last newline: serde's
    /// place after the bytes taken.
    line: usize,
    column: usize,
}

impl<R: Read> PutText<R> {
    fn new(src: R) -> Self {
        PutText {
            src,
            raw: vec![0; READ_CHUNK],
            carry: Vec::new(),
            chunk: String::new(),
            started: false,
            held: String::new(),
            quoter: Quoter::default(),
            out: Vec::new(),
            pos: 0,
            done: false,
            line: 1,
            column: 0,
        }
    }

    /// Goes on from where `scan::scan` stopped: past the start of
    /// the text, at serde's place `(line, column)` in it.
    fn resume_at(&mut self, (line, column): (usize, usize)) {
        self.started = true;
        self.line = line;
        self.column = column;
    }

    /// The text not yet taken from the last read; empty only at the end.
    fn available(&mut self) -> io::Result<&[u8]> {
        while self.pos == self.out.len() && !self.done {
            self.fill()?;
        }
        Ok(&self.out[self.pos..])
    }

    fn peek(&mut self) -> io::Result<Option<u8>> {
        Ok(self.available()?.first().copied())
    }

    /// Takes `n` bytes of what [`PutText::available`] showed.
    fn advance(&mut self, n: usize) {
        let taken = &self.out[self.pos..self.pos + n];
        match taken.iter().rposition(|b| *b == b'\n') {
            Some(last) => {
                self.line += taken.iter().filter(|b| **b == b'\n').count();
                self.column = n - last - 1;
            }
            None => self.column += n,
        }
        self.pos += n;
    }

    /// serde's place after the bytes taken (`position`).
    fn position(&self) -> (usize, usize) {
        (self.line, self.column)
    }

    /// serde's place of the next byte, not a newline (`peek_position`).
    fn peek_position(&self) -> (usize, usize) {
        (self.line, self.column + 1)
    }

    /// Takes JSON whitespace, as serde skips it; the next byte.
    fn skip_whitespace(&mut self) -> io::Result<Option<u8>> {
        loop {
            let a = self.available()?;
            let Some(n) = a
                .iter()
                .position(|b| !matches!(b, b' ' | b'\n' | b'\t' | b'\r'))
            else {
                if a.is_empty() {
                    return Ok(None);
                }
                let n = a.len();
                self.advance(n);
                continue;
            };
            let next = a[n];
            self.advance(n);
            return Ok(Some(next));
        }
    }

    /// Takes an element of a list that starts with `first` into `out`:
    /// an object or list up to its closing bracket (the text may be
    /// malformed: serde says where), anything else up to the end (it is
    /// no point: serde refuses it before that).
    fn take_element(&mut self, first: u8, out: &mut Vec<u8>) -> io::Result<()> {
        if first != b'{' && first != b'[' {
            return self.take_rest(out);
        }
        let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
        loop {
            let a = self.available()?;
            if a.is_empty() {
                return Ok(());
            }
            let mut end = None;
            for (i, &b) in a.iter().enumerate() {
                if in_string {
                    if escaped {
                        escaped = false;
                    } else if b == b'\\' {
                        escaped = true;
                    } else if b == b'"' {
                        in_string = false;
                    }
                    continue;
                }
                match b {
                    b'"' => in_string = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            end = Some(i + 1);
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let n = end.unwrap_or(a.len());
            out.extend_from_slice(&a[..n]);
            self.advance(n);
            if end.is_some() {
                return Ok(());
            }
        }
    }

    /// Takes the rest of the text into `out`.
    fn take_rest(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        loop {
            let a = self.available()?;
            if a.is_empty() {
                return Ok(());
            }
            let n = a.len();
            out.extend_from_slice(a);
            self.advance(n);
        }
    }

    fn fill(&mut self) -> io::Result<()> {
        self.out.clear();
        self.pos = 0;
        let n = loop {
            match self.src.read(&mut self.raw) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        };
        let eof = n == 0;
        self.chunk.clear();
        lossy_utf8(&mut self.carry, &self.raw[..n], eof, &mut self.chunk);
        let mut text = self.chunk.as_str();
        if !self.started {
            text = text.trim_start();
            self.started = !text.is_empty();
        }
        let body = text.trim_end().len();
        if body > 0 {
            self.quoter.push(&self.held);
            self.held.clear();
            self.quoter.push(&text[..body]);
        }
        self.held.push_str(&text[body..]);
        self.quoter.run(eof, &mut self.out);
        self.done = eof;
        Ok(())
    }
}

/// Appends `raw` to `out` as `String::from_utf8_lossy` would decode it
/// as part of a longer text: a sequence cut at the end waits in `carry`
/// for the next read unless this is the end.
fn lossy_utf8(carry: &mut Vec<u8>, raw: &[u8], eof: bool, out: &mut String) {
    let joined;
    let bytes = if carry.is_empty() {
        raw
    } else {
        carry.extend_from_slice(raw);
        joined = std::mem::take(carry);
        &joined[..]
    };
    let mut chunks = bytes.utf8_chunks().peekable();
    while let Some(c) = chunks.next() {
        out.push_str(c.valid());
        let bad = c.invalid();
        if bad.is_empty() {
            continue;
        }
        let cut = chunks.peek().is_none()
            && !eof
            && std::str::from_utf8(bad).is_err_and(|e| e.error_len().is_none());
        if cut {
            carry.extend_from_slice(bad);
        } else {
            out.push(char::REPLACEMENT_CHARACTER);
        }
    }
}

/// Quotes the [`NON_NUMERIC`] tokens outside strings, so serde reads
/// them as strings and the points carrying them are refused one by one.
#[derive(Default)]
struct Quoter {
    in_string: bool,
    /// A backslash in a string: the next byte is copied as is.
    escaped: bool,
    /// Text not yet looked at (a cut token waits here for the next read).
    pending: Vec<u8>,
}

impl Quoter {
    fn push(&mut self, s: &str) {
        self.pending.extend_from_slice(s.as_bytes());
    }

    fn run(&mut self, eof: bool, out: &mut Vec<u8>) {
        let b = &self.pending[..];
        out.reserve(b.len());
        let mut i = 0;
        while i < b.len() {
            if self.escaped {
                out.push(b[i]);
                self.escaped = false;
                i += 1;
                continue;
            }
            if self.in_string {
                let run = b[i..]
                    .iter()
                    .position(|c| matches!(c, b'"' | b'\\'))
                    .unwrap_or(b.len() - i);
                out.extend_from_slice(&b[i..i + run]);
                i += run;
                if i < b.len() {
                    self.escaped = b[i] == b'\\';
                    self.in_string = b[i] != b'"';
                    out.push(b[i]);
                    i += 1;
                }
                continue;
            }
            let run = b[i..]
                .iter()
                .position(|c| matches!(c, b'"' | b'-' | b'+' | b'I' | b'N'))
                .unwrap_or(b.len() - i);
            out.extend_from_slice(&b[i..i + run]);
            i += run;
            if i == b.len() {
                break;
            }
            let rest = &b[i..];
            if rest[0] == b'"' {
                self.in_string = true;
                out.push(b'"');
                i += 1;
                continue;
            }
            let cut = !eof
                && rest.len() < LONGEST_TOKEN
                && NON_NUMERIC
                    .iter()
                    .any(|t| t.len() > rest.len() && t.starts_with(rest));
            if cut {
                break;
            }
            match NON_NUMERIC.iter().find(|t| rest.starts_with(t)) {
                Some(t) => {
                    out.push(b'"');
                    out.extend_from_slice(t);
                    out.push(b'"');
                    i += t.len();
                }
                None => {
                    out.push(rest[0]);
                    i += 1;
                }
            }
        }
        self.pending.drain(..i);
    }
}

#[cfg(test)]
mod tests {
    use super::point::value_text;
    use super::points::{Batch, Cursor};
    use super::*;

    /// A point as read, owned, to compare two readings.
    #[derive(Debug, Clone, PartialEq)]
    struct Owned {
        metric: Option<String>,
        timestamp: i64,
        value: Option<String>,
        tags: Option<Vec<(String, Option<String>)>>,
    }

    /// Hands out one byte per read: every cut a stream can make.
    struct Trickle<'a>(&'a [u8]);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() || buf.is_empty() {
                return Ok(0);
            }
            buf[0] = self.0[0];
            self.0 = &self.0[1..];
            Ok(1)
        }
    }

    fn read_back(points: &DecodedPoints) -> Vec<Owned> {
        let mut out = Vec::new();
        let mut at = Cursor::default();
        let mut batch = Batch::default();
        // Small batches: the cursor carries state across them.
        while points.read_batch(&mut at, 3, &mut batch) {
            for p in &batch.points {
                out.push(Owned {
                    metric: p.metric.map(str::to_string),
                    timestamp: p.timestamp,
                    value: p.value.map(str::to_string),
                    tags: batch.tags(p).map(|t| {
                        t.iter()
                            .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
                            .collect()
                    }),
                });
            }
        }
        assert_eq!(out.len(), points.len());
        out
    }

    /// What the streaming reader makes of `body`: the points, or the
    /// error as `kind: words`.
    fn streamed(body: &[u8], trickle: bool) -> Result<Vec<Owned>, String> {
        let r = if trickle {
            parse(&mut Trickle(body))
        } else {
            parse(&mut &body[..])
        };
        match r {
            Ok(p) => Ok(read_back(&p)),
            Err(ParseError::Empty) => Err("empty".into()),
            Err(ParseError::NoPoints) => Err("no points".into()),
            Err(ParseError::Syntax(w) | ParseError::BadPoint(w)) => Err(format!("json: {w}")),
            Err(ParseError::Read(e)) => Err(format!("fault: {e}")),
        }
    }

    /// The former `quote_non_numeric`, byte for byte (it copied the bytes
    /// of strings as Latin-1 characters: compare ASCII bodies only).
    fn former_quote(body: &str) -> Option<String> {
        let tokens = [
            "-Infinity",
            "+Infinity",
            "Infinity",
            "-INF",
            "+INF",
            "INF",
            "NaN",
        ];
        let b = body.as_bytes();
        let mut out = String::new();
        let (mut i, mut in_str, mut changed) = (0, false, false);
        while i < b.len() {
            let c = b[i];
            if in_str {
                out.push(c as char);
                if c == b'\\' && i + 1 < b.len() {
                    out.push(b[i + 1] as char);
                    i += 2;
                    continue;
                }
                in_str = c != b'"';
                i += 1;
                continue;
            }
            if c == b'"' {
                in_str = true;
                out.push('"');
                i += 1;
                continue;
            }
            if let Some(t) = tokens.iter().find(|t| body[i..].starts_with(**t)) {
                out.push_str(&format!("\"{t}\""));
                i += t.len();
                changed = true;
                continue;
            }
            let ch = body[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
        changed.then_some(out)
    }

    /// The former reader: the whole body as lossy UTF-8, trimmed, parsed
    /// from a string (again with bare NaN/Infinity quoted if that failed),
    /// each value's text taken in order.
    fn former(body: &[u8]) -> Result<Vec<Owned>, String> {
        fn parse_str(t: &str) -> Result<Vec<Owned>, Result<String, String>> {
            let t = t.trim();
            let points = if t.starts_with('{') {
                serde_json::from_str::<JsonPoint>(t).map(|p| vec![p])
            } else {
                serde_json::from_str::<Vec<JsonPoint>>(t)
            }
            .map_err(|e| Err(e.to_string()))?;
            let mut out = Vec::new();
            for p in points {
                let value = value_text(p.value).map_err(|b| Ok(b.0))?;
                out.push(Owned {
                    metric: p.metric.and_then(|m| m.0).map(|m| m.into_owned()),
                    timestamp: p.timestamp.0,
                    value: value.map(|v| v.into_owned()),
                    tags: p.tags.map(|t| {
                        t.0.into_iter()
                            .map(|(k, v)| (k.into_owned(), v.map(|v| v.into_owned())))
                            .collect()
                    }),
                });
            }
            Ok(out)
        }
        let text = String::from_utf8_lossy(body).trim().to_string();
        if text.is_empty() {
            return Err("empty".into());
        }
        let parsed = match parse_str(&text) {
            Err(Err(first)) => match former_quote(&text) {
                None => Err(Err(first)),
                Some(fixed) => parse_str(&fixed),
            },
            r => r,
        };
        match parsed {
            Ok(p) if p.is_empty() => Err("no points".into()),
            Ok(p) => Ok(p),
            Err(Ok(bad_value)) | Err(Err(bad_value)) => Err(format!("json: {bad_value}")),
        }
    }

    fn same_as_former(body: &[u8]) {
        let want = former(body);
        assert_eq!(
            streamed(body, false),
            want,
            "{:?}",
            String::from_utf8_lossy(body)
        );
        assert_eq!(
            streamed(body, true),
            want,
            "{:?}",
            String::from_utf8_lossy(body)
        );
    }

    const FIELDS: &[&str] = &[
        r#""metric":"m""#,
        r#""metric":"sys.cpu""#,
        r#""metric":null"#,
        r#""metric":12"#,
        r#""metric":"é\"\\x""#,
        r#""metric":{}"#,
        r#""timestamp":1356998400"#,
        r#""timestamp":"1356998401""#,
        r#""timestamp":1356998400.9"#,
        r#""timestamp":NaN"#,
        r#""timestamp":"x""#,
        r#""timestamp":18446744073709551615"#,
        r#""value":1"#,
        r#""value":18.0"#,
        r#""value":"1.5e3""#,
        r#""value":NaN"#,
        r#""value":-Infinity"#,
        r#""value":-INF"#,
        r#""value":null"#,
        r#""value":"""#,
        r#""value":[1]"#,
        r#""value":{"a":1}"#,
        r#""value":"\ud800""#,
        r#""tags":{"host":"a"}"#,
        r#""tags":{"host":"a","host":"b","dc":null}"#,
        r#""tags":{}"#,
        r#""tags":null"#,
        r#""tags":[]"#,
        r#""other":[1,{"x":NaN}]"#,
        r#""value":1e999"#,
        r#""value":-1e999"#,
        r#""value":1.x"#,
        r#""value":01"#,
        r#""value":-x"#,
        r#""value":1e"#,
        r#""value":tru"#,
        r#""value":nul "#,
        "\"metric\":\"a\tb\"",
        "\"metric\":\"a\nb\"",
        "\"metric\":\"a\u{1}b\"",
        r#""metric":"a\qb""#,
        r#""metric":"a\u12x4""#,
        r#""metric":"\uD800\u0041""#,
        r#""tags":{"a":"b\u00e9"}"#,
        r#""tags":{1:2}"#,
        r#""tags":{"a" "b"}"#,
        r#""timestamp":99999999999999999999"#,
        r#""timestamp":-5"#,
        r#""timestamp":1e5"#,
        // The forms the one-pass scanner (scan.rs) reads, and their
        // near misses, which it leaves to the full reader.
        r#""tags":{"host":"a" , "dc" : "b"}"#,
        r#""tags":{"h\u00e9":"x"}"#,
        r#""tags":{"h":"é","h":null}"#,
        r#""tags":{"h":1}"#,
        r#""tags":{"h":"a",}"#,
        r#""tags":{"h":"a" "b":"c"}"#,
        r#""tags":{"h":nul}"#,
        r#""value":"12""#,
        r#""value":-0"#,
        r#""value":-1.5e-3"#,
        r#""value":1E+2"#,
        r#""value":-"#,
        r#""value":1."#,
        r#""value":"a\"b""#,
        r#""value":true"#,
        r#""timestamp":"0012""#,
        r#""timestamp":0"#,
        r#""timestamp":00"#,
        r#""timestamp":"  12""#,
        r#""timestamp":null"#,
        r#""timestamp":"123456789012345678901""#,
        r#""timestamp":1234567890123456789"#,
        r#""metric" : "m""#,
        "\"metric\":\"m\u{7f}\"",
        "\"metric\":\"\u{1F600}\"",
        r#""metric":"sys.cpu","metric":"x""#,
        r#""unknown":"x""#,
    ];
    const SEPARATORS: &[&str] = &[",", " , ", "\n", "", ",,", "\u{a0}", ":"];
    /// Between the points of a list.
    const ELEMENT_SEPARATORS: &[&str] = &[",", ",\n", " ,\r\n  ", "\n,", ",,", "", ",\u{a0}"];

    proptest::proptest! {
        /// No body, however broken, makes the reader panic, and every one
        /// reads as the former whole-body reader read it.
        #[test]
        fn ascii_bodies_read_as_before(body in "[ -~\n\t]{0,120}") {
            same_as_former(body.as_bytes());
        }

        #[test]
        fn point_lists_read_as_before(
            points in proptest::collection::vec(
                proptest::collection::vec((0..FIELDS.len(), 0..SEPARATORS.len()), 0..5),
                0..5,
            ),
            single in proptest::bool::ANY,
            cut in proptest::option::of(0usize..400),
            pad in "[ \n\t]{0,3}",
            between in 0..ELEMENT_SEPARATORS.len(),
        ) {
            let mut body = pad.clone();
            body.push(if single { '{' } else { '[' });
            for (i, fields) in points.iter().enumerate() {
                if i > 0 { body.push_str(ELEMENT_SEPARATORS[between]); }
                body.push('{');
                for (j, (f, sep)) in fields.iter().enumerate() {
                    if j > 0 { body.push_str(SEPARATORS[*sep]); }
                    body.push_str(FIELDS[*f]);
                }
                body.push('}');
            }
            body.push(if single { '}' } else { ']' });
            body.push_str(&pad);
            let mut bytes = body.into_bytes();
            if let Some(c) = cut { bytes.truncate(c); }
            // The former reader mangled strings (non-ASCII) of bodies it
            // had to quote NaN in: compare the others.
            let text = String::from_utf8_lossy(&bytes).trim().to_string();
            proptest::prop_assume!(text.is_ascii() || former_quote(&text).is_none());
            same_as_former(&bytes);
        }

        /// Bytes that are not UTF-8 and Unicode whitespace around the body.
        #[test]
        fn any_bytes_read_as_before(
            head in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..8),
            tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..8),
            ws in proptest::sample::select(vec!["", "\u{a0}", "\u{3000}", " \u{2028}\n"]),
        ) {
            let mut bytes = head.clone();
            bytes.extend_from_slice(ws.as_bytes());
            bytes.extend_from_slice(br#"[{"metric":"m","timestamp":1,"value":1,"tags":{"h":"v"#);
            bytes.extend_from_slice(&tail);
            bytes.extend_from_slice(br#""}}]"#);
            bytes.extend_from_slice(ws.as_bytes());
            let text = String::from_utf8_lossy(&bytes).trim().to_string();
            proptest::prop_assume!(former_quote(&text).is_none());
            same_as_former(&bytes);
        }
    }

    #[test]
    fn documented_bodies() {
        for body in [
            r#"{"metric":"m","timestamp":"1356998400","value":18.0,"tags":{"host":"a"}}"#,
            r#"[{"metric":"m","timestamp":1356998400.9,"value":"1.5e3","tags":{"host":"a","host":"b"}}]"#,
            "[{\"metric\":",
            r#"{"metric":"m","value":NaN}"#,
            r#"[{"metric":"NaN","value":NaN,"x":-Infinity,"tags":{"a":"b"}}]"#,
            "[]",
            "  \n ",
            "\"x\"",
            r#"[{"value":{"a":1}}, {"value":[1]}]"#,
            r#"[{"value":{"a":1}}, {"value":1} oops"#,
        ] {
            same_as_former(body.as_bytes());
        }
        // serde's nesting limit counts the list around the points.
        for depth in 124..130 {
            let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            same_as_former(format!(r#"[{{"metric":"m","other":{nested}}}]"#).as_bytes());
            same_as_former(format!(r#"{{"metric":"m","other":{nested}}}"#).as_bytes());
        }
        let p = streamed(
            r#"[{"metric":"m","timestamp":1356998400.9,"value":"1.5e3","tags":{"host":"a","host":"b"}}]"#
                .as_bytes(),
            true,
        )
        .unwrap();
        assert_eq!(
            p,
            vec![Owned {
                metric: Some("m".into()),
                timestamp: 1356998400,
                value: Some("1.5e3".into()),
                tags: Some(vec![("host".into(), Some("b".into()))]),
            }]
        );
        assert_eq!(
            streamed(br#"[{"metric":"m","value":NaN}]"#, true).unwrap()[0].value,
            Some("NaN".into())
        );
    }

    /// The former reader turned the non-ASCII text of a body it quoted
    /// NaN in into Latin-1 mojibake ("é" became "Ã©"); Jackson keeps it.
    #[test]
    fn quoting_keeps_utf8_strings_whole() {
        let body = "[{\"metric\":\"é\\\\ü\",\"value\":NaN}]";
        let p = streamed(body.as_bytes(), true).unwrap();
        assert_eq!(p[0].metric.as_deref(), Some("é\\ü"));
        assert_eq!(p[0].value.as_deref(), Some("NaN"));
    }

    #[test]
    fn repeated_names_and_tag_sets_are_kept_once() {
        let mut body = String::from("[");
        for i in 0..10_000 {
            if i > 0 {
                body.push(',');
            }
            body.push_str(&format!(
                r#"{{"metric":"sys.cpu.user","timestamp":{},"value":{i},"tags":{{"host":"web{:02}","dc":"lga"}}}}"#,
                1356998400 + i / 100,
                i % 100
            ));
        }
        body.push(']');
        let points = parse(&mut body.as_bytes()).unwrap();
        assert_eq!(points.len(), 10_000);
        // Names and tag sets once each; a few bytes per point besides.
        assert!(points.text.len() < 1_000, "{}", points.text.len());
        assert!(
            points.records.len() < 10_000 * 8,
            "{}",
            points.records.len()
        );
        assert!(
            points.heap_bytes() < body.len() / 3,
            "{} of {}",
            points.heap_bytes(),
            body.len()
        );
        let back = read_back(&points);
        assert_eq!(back[9_999].timestamp, 1356998400 + 99);
        assert_eq!(back[9_999].value.as_deref(), Some("9999"));
        assert_eq!(
            back[42].tags,
            Some(vec![
                ("host".into(), Some("web42".into())),
                ("dc".into(), Some("lga".into()))
            ])
        );
    }
}
