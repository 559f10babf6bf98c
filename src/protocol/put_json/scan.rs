//! The usual `/api/put` body, read in one pass over its bytes as they
//! arrive: a list (or one object) of points whose fields are the four
//! `IncomingDataPoint` ones, with strings free of escapes, numbers plain,
//! tag values strings or null. Each point's fields are taken straight
//! from the bytes read into [`DecodedPoints`]: no decoded copy of the
//! text, no serde.
//!
//! Anything else (a syntax error, an escape, a bare `NaN`, text that is
//! not UTF-8, a field OpenTSDB ignores, a number where a name goes...) is
//! left to the full reader in `mod.rs`, which goes on from the last
//! point taken here with the place it has reached in the text: that
//! reader alone decides what such text means and says what is wrong with
//! it, word for word as before. What is taken here is only what that
//! reader would have read the same way: the points taken are those it
//! would have taken, and the place counts the same bytes (valid UTF-8,
//! nothing quoted), so its answers do not change.

use std::io::{self, Read};

use super::READ_CHUNK;
use super::points::DecodedPoints;

/// Where the full reader takes over.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Handover {
    /// At the start of the body: nothing was taken.
    Start,
    /// Within the list, after its `[` and the points taken (`first`: no
    /// point yet), before the comma or `]` that follows them.
    InList { first: bool, at: (usize, usize) },
    /// After the list's `]`.
    AfterList { at: (usize, usize) },
}

/// What the scan left to do.
pub(super) enum Scanned {
    /// The body was read whole: every point is in the [`DecodedPoints`].
    Done,
    /// The full reader goes on with `rest` (bytes read, not taken), then
    /// the rest of the source; `at` says where, with serde's place in the
    /// text (line, and bytes taken on it) for its error messages.
    Resume { rest: Vec<u8>, at: Handover },
}

/// Reads the points of a body from `src` into `points` while the body
/// has the usual form (see the module header).
pub(super) fn scan<R: Read>(src: R, points: &mut DecodedPoints) -> io::Result<Scanned> {
    let mut s = Scanner {
        src,
        buf: vec![0; READ_CHUNK],
        pos: 0,
        end: 0,
        eof: false,
        line: 1,
        column: 0,
    };
    // Leading whitespace (what `str::trim` drops, ASCII) is no part of
    // the text the full reader counts places in.
    let opening = loop {
        match s.buf[s.pos..s.end].iter().position(|b| !is_trimmed(*b)) {
            Some(n) => break s.buf[s.pos + n],
            None if s.fill()? => continue,
            None => return Ok(s.resume(Handover::Start)),
        }
    };
    let mut fields = Fields::default();
    if opening == b'{' {
        return s.single(points, &mut fields);
    }
    if opening != b'[' {
        return Ok(s.resume(Handover::Start));
    }
    let open = s.buf[s.pos..s.end]
        .iter()
        .position(|b| *b == b'[')
        .expect("seen");
    s.pos += open + 1;
    s.column = 1;
    let mut first = true;
    loop {
        let unit = match s.next_in_list(first, &mut fields) {
            Ok(u) => u,
            Err(Stop::More) if s.fill()? => continue,
            Err(_) => {
                let at = s.place();
                return Ok(s.resume(Handover::InList { first, at }));
            }
        };
        match unit {
            Unit::Point { start, end } => {
                let Ok(text) = std::str::from_utf8(&s.buf[start..end]) else {
                    let at = s.place();
                    return Ok(s.resume(Handover::InList { first, at }));
                };
                fields.keep(text, start, points);
                s.take(end);
                first = false;
            }
            Unit::Close { end } => {
                s.take(end);
                return s.after_list();
            }
        }
    }
}

/// The bytes `str::trim` drops that are ASCII.
fn is_trimmed(b: u8) -> bool {
    matches!(b, b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | b' ')
}

/// Why a piece of text was not read here.
#[derive(Debug, PartialEq)]
enum Stop {
    /// It goes on past the bytes read so far.
    More,
    /// It is not of the usual form: the full reader's business.
    Other,
}

type Step<T> = Result<T, Stop>;

/// What came next in a list.
enum Unit {
    /// A point, from its `{` to its `}` inclusive (absolute in the buffer).
    Point { start: usize, end: usize },
    /// The list's `]`, which ends before `end`.
    Close { end: usize },
}

/// A place in the buffer: `start..end`.
type Span = (usize, usize);

/// The fields of one point, as places in the buffer.
#[derive(Default)]
struct Fields {
    /// The fields seen, one bit each (a field twice is serde's error).
    seen: u8,
    metric: Option<Span>,
    timestamp: i64,
    value: Option<Span>,
    /// The tags object as written, `{` to `}`; `None`: null or absent.
    tags: Option<Span>,
    /// Its tags in the order written, a repeated key keeping its first
    /// place and last value (as `TagList`), placed from the object's `{`.
    tag_list: Vec<(Span, Option<Span>)>,
    /// The text of the tags object `tag_list` was read from (empty: none
    /// whole): the same text again is the same tags, not read again.
    tags_text: Vec<u8>,
}

impl Fields {
    /// Hands the point to `points`; `text` is the point's text, which
    /// starts at `start` in the buffer.
    fn keep(&self, text: &str, start: usize, points: &mut DecodedPoints) {
        let at = |(from, to): Span| &text[from - start..to - start];
        let tags = self.tags.map(|written| {
            let from_tags = move |(from, to): Span| at((written.0 + from, written.0 + to));
            let list = self
                .tag_list
                .iter()
                .map(move |(k, v)| (from_tags(*k), v.map(from_tags)));
            (Some(at(written).as_bytes()), list)
        });
        points.push_fields(
            self.metric.map(at),
            self.timestamp,
            self.value.map(at),
            tags,
        );
    }
}

struct Scanner<R> {
    src: R,
    buf: Vec<u8>,
    /// `buf[pos..end]`: read, not yet taken.
    pos: usize,
    end: usize,
    eof: bool,
    /// serde's place after the bytes taken: lines, and bytes since the
    /// last newline.
    line: usize,
    column: usize,
}

impl<R: Read> Scanner<R> {
    /// Reads more of the body after what is not yet taken, until the
    /// buffer is full or the body ends; false if nothing more came. Full
    /// buffers, and a buffer twice as large when one piece of text fills
    /// it: a piece read again after each read costs at most twice its
    /// size, however small the reads.
    fn fill(&mut self) -> io::Result<bool> {
        if self.eof {
            return Ok(false);
        }
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.end -= self.pos;
            self.pos = 0;
        }
        if self.buf.len() - self.end < READ_CHUNK / 4 {
            self.buf.resize(self.buf.len() * 2, 0);
        }
        let before = self.end;
        while self.end < self.buf.len() {
            match self.src.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(self.end > before)
    }

    /// Takes the bytes up to `to` (absolute in the buffer).
    fn take(&mut self, to: usize) {
        let taken = &self.buf[self.pos..to];
        match memchr::memrchr(b'\n', taken) {
            Some(last) => {
                self.line += memchr::memchr_iter(b'\n', taken).count();
                self.column = taken.len() - last - 1;
            }
            None => self.column += taken.len(),
        }
        self.pos = to;
    }

    fn place(&self) -> (usize, usize) {
        (self.line, self.column)
    }

    /// The full reader's turn, with what was read and not taken.
    fn resume(self, at: Handover) -> Scanned {
        let mut rest = self.buf;
        rest.truncate(self.end);
        rest.drain(..self.pos);
        Scanned::Resume { rest, at }
    }

    /// The next point or the list's end, with the comma before a point
    /// that is not the first; nothing is taken.
    fn next_in_list(&self, first: bool, fields: &mut Fields) -> Step<Unit> {
        let b = &self.buf[..self.end];
        let mut i = ws(b, self.pos)?;
        if b[i] == b']' {
            return Ok(Unit::Close { end: i + 1 });
        }
        if !first {
            if b[i] != b',' {
                return Err(Stop::Other);
            }
            i = ws(b, i + 1)?;
        }
        if b[i] != b'{' {
            return Err(Stop::Other);
        }
        let end = point(b, i, fields)?;
        Ok(Unit::Point { start: i, end })
    }

    /// After the list: only whitespace to the end.
    fn after_list(mut self) -> io::Result<Scanned> {
        loop {
            if self.buf[self.pos..self.end].iter().any(|b| !is_trimmed(*b)) {
                let at = self.place();
                return Ok(self.resume(Handover::AfterList { at }));
            }
            // Whitespace: taken only for the place of what may follow.
            self.take(self.end);
            if !self.fill()? {
                return Ok(Scanned::Done);
            }
        }
    }

    /// A body that is one object: its point, kept once the whole body is
    /// known to be that object; else the full reader reads it all.
    fn single(mut self, points: &mut DecodedPoints, fields: &mut Fields) -> io::Result<Scanned> {
        // Nothing is taken here: the buffer holds the body from its start.
        let start = self.buf[..self.end]
            .iter()
            .position(|b| *b == b'{')
            .expect("seen");
        let end = loop {
            match point(&self.buf[..self.end], start, fields) {
                Ok(end) => break end,
                Err(Stop::More) if self.fill()? => continue,
                Err(_) => return Ok(self.resume(Handover::Start)),
            }
        };
        let mut i = end;
        loop {
            match self.buf[i..self.end].iter().position(|b| !is_trimmed(*b)) {
                Some(_) => return Ok(self.resume(Handover::Start)),
                None => i = self.end,
            }
            if !self.fill()? {
                break;
            }
        }
        let Ok(text) = std::str::from_utf8(&self.buf[start..end]) else {
            return Ok(self.resume(Handover::Start));
        };
        fields.keep(text, start, points);
        Ok(Scanned::Done)
    }
}

/// Skips JSON whitespace from `i`: the next byte's place.
fn ws(b: &[u8], mut i: usize) -> Step<usize> {
    while i < b.len() {
        match b[i] {
            b' ' | b'\n' | b'\t' | b'\r' => i += 1,
            _ => return Ok(i),
        }
    }
    Err(Stop::More)
}

/// A string whose `"` is at `i - 1`: its contents and the place after
/// its closing `"`. No escapes, no control characters (serde's errors);
/// UTF-8 is checked for the whole point once it is read.
fn string(b: &[u8], i: usize) -> Step<(Span, usize)> {
    let mut k = i;
    while k < b.len() {
        match b[k] {
            b'"' => return Ok(((i, k), k + 1)),
            b'\\' | 0..=0x1f => return Err(Stop::Other),
            _ => k += 1,
        }
    }
    Err(Stop::More)
}

/// `null` at `i`: the place after it.
fn null(b: &[u8], i: usize) -> Step<usize> {
    let word = b"null";
    let have = &b[i..b.len().min(i + word.len())];
    if !word.starts_with(have) {
        return Err(Stop::Other);
    }
    if have.len() < word.len() {
        return Err(Stop::More);
    }
    Ok(i + word.len())
}

/// A JSON number at `i` as serde accepts one (`-`? int frac? exp?): the
/// place after it. A number cut by the end of what is read needs more.
fn number(b: &[u8], i: usize) -> Step<usize> {
    let digits = |mut k: usize| -> Step<usize> {
        let from = k;
        while k < b.len() && b[k].is_ascii_digit() {
            k += 1;
        }
        if k == b.len() {
            return Err(Stop::More);
        }
        if k == from {
            return Err(Stop::Other);
        }
        Ok(k)
    };
    let mut k = i;
    if b[k] == b'-' {
        k += 1;
        if k == b.len() {
            return Err(Stop::More);
        }
    }
    let int = k;
    k = digits(k)?;
    if b[int] == b'0' && k - int > 1 {
        return Err(Stop::Other);
    }
    if b[k] == b'.' {
        k = digits(k + 1)?;
    }
    if matches!(b[k], b'e' | b'E') {
        k += 1;
        if k < b.len() && matches!(b[k], b'+' | b'-') {
            k += 1;
        }
        if k == b.len() {
            return Err(Stop::More);
        }
        k = digits(k)?;
    }
    Ok(k)
}

/// Digits that fit an `i64` whatever they are.
const SAFE_DIGITS: usize = 18;

fn digits_value(d: &[u8]) -> i64 {
    d.iter().fold(0i64, |v, c| v * 10 + i64::from(c - b'0'))
}

/// `timestamp` at `i`: a plain integer, or a string of digits
/// (`JsonTimestamp`: a string is parsed as a `long`); the place after it.
fn timestamp(b: &[u8], i: usize, out: &mut i64) -> Step<usize> {
    let (d, next) = match b[i] {
        b'"' => {
            let ((from, to), next) = string(b, i + 1)?;
            (&b[from..to], next)
        }
        b'0'..=b'9' => {
            let end = number(b, i)?;
            (&b[i..end], end)
        }
        _ => return Err(Stop::Other),
    };
    // A fraction or exponent is read as a double by serde; an empty string
    // is refused by the full reader.
    if d.is_empty() || d.len() > SAFE_DIGITS || !d.iter().all(u8::is_ascii_digit) {
        return Err(Stop::Other);
    }
    *out = digits_value(d);
    Ok(next)
}

/// A string (its contents, into `out`) or null (`out` left as it is) at
/// `i`: a `metric`, a tag value, or a `value` that is not a number.
fn string_or_null(b: &[u8], i: usize, out: &mut Option<Span>) -> Step<usize> {
    match b[i] {
        b'"' => {
            let (s, next) = string(b, i + 1)?;
            *out = Some(s);
            Ok(next)
        }
        b'n' => null(b, i),
        _ => Err(Stop::Other),
    }
}

/// `value` at `i`: a string (its contents), a number (its text, as the
/// former reader kept the raw number), or null.
fn value(b: &[u8], i: usize, out: &mut Option<Span>) -> Step<usize> {
    if let b'-' | b'0'..=b'9' = b[i] {
        let end = number(b, i)?;
        *out = Some((i, end));
        return Ok(end);
    }
    string_or_null(b, i, out)
}

/// `tags` at `i`: null, or an object of strings to strings or nulls.
fn tags(b: &[u8], i: usize, f: &mut Fields) -> Step<usize> {
    if b[i] == b'n' {
        return null(b, i);
    }
    if b[i] != b'{' {
        return Err(Stop::Other);
    }
    let known = f.tags_text.len();
    if known > 0 && b.len() >= i + known && b[i..i + known] == f.tags_text[..] {
        f.tags = Some((i, i + known));
        return Ok(i + known);
    }
    f.tags_text.clear();
    f.tag_list.clear();
    let rel = |(from, to): Span| (from - i, to - i);
    let mut k = ws(b, i + 1)?;
    if b[k] != b'}' {
        loop {
            let (key, at) = member_name(b, k)?;
            let mut value = None;
            k = string_or_null(b, at, &mut value)?;
            let name = &b[key.0..key.1];
            let value = value.map(rel);
            match f
                .tag_list
                .iter_mut()
                .find(|(seen, _)| &b[i + seen.0..i + seen.1] == name)
            {
                Some(tag) => tag.1 = value,
                None => f.tag_list.push((rel(key), value)),
            }
            k = ws(b, k)?;
            match b[k] {
                b',' => k = ws(b, k + 1)?,
                b'}' => break,
                _ => return Err(Stop::Other),
            }
        }
    }
    f.tags = Some((i, k + 1));
    f.tags_text.extend_from_slice(&b[i..k + 1]);
    Ok(k + 1)
}

/// An object member's name whose opening quote is at `k`: its span, and
/// the place of its value (past the `:` and any blanks).
fn member_name(b: &[u8], k: usize) -> Step<(Span, usize)> {
    if b[k] != b'"' {
        return Err(Stop::Other);
    }
    let (key, next) = string(b, k + 1)?;
    let k = ws(b, next)?;
    if b[k] != b':' {
        return Err(Stop::Other);
    }
    Ok((key, ws(b, k + 1)?))
}

/// A point object whose `{` is at `i`, read into `f`: the place after
/// its `}`.
fn point(b: &[u8], i: usize, f: &mut Fields) -> Step<usize> {
    f.seen = 0;
    f.metric = None;
    f.timestamp = 0;
    f.value = None;
    f.tags = None;
    let mut k = ws(b, i + 1)?;
    if b[k] == b'}' {
        return Ok(k + 1);
    }
    loop {
        let key;
        (key, k) = member_name(b, k)?;
        let field = match &b[key.0..key.1] {
            b"metric" => 0,
            b"timestamp" => 1,
            b"value" => 2,
            b"tags" => 3,
            // Ignored by OpenTSDB, but its value must still be valid JSON.
            _ => return Err(Stop::Other),
        };
        if f.seen & (1 << field) != 0 {
            return Err(Stop::Other);
        }
        f.seen |= 1 << field;
        k = match field {
            0 => string_or_null(b, k, &mut f.metric)?,
            1 => timestamp(b, k, &mut f.timestamp)?,
            2 => value(b, k, &mut f.value)?,
            _ => tags(b, k, f)?,
        };
        k = ws(b, k)?;
        match b[k] {
            b',' => k = ws(b, k + 1)?,
            b'}' => return Ok(k + 1),
            _ => return Err(Stop::Other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hands out `n` bytes per read.
    struct Pieces<'a>(&'a [u8], usize);

    impl Read for Pieces<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.0.len().min(self.1).min(buf.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    fn scanned(body: &str, piece: usize) -> (usize, Option<(String, Handover)>) {
        let mut points = DecodedPoints::default();
        let mut src = Pieces(body.as_bytes(), piece);
        match scan(&mut src, &mut points).unwrap() {
            Scanned::Done => (points.len(), None),
            Scanned::Resume { mut rest, at } => {
                // What the full reader reads: the rest, then the source.
                rest.extend_from_slice(src.0);
                (points.len(), Some((String::from_utf8(rest).unwrap(), at)))
            }
        }
    }

    #[test]
    fn the_usual_bodies_are_read_whole_here() {
        let point = r#"{"metric":"sys.cpu.user","timestamp":1356998400,"value":42.5,"tags":{"host":"web01","dc":"lga"}}"#;
        let list = format!(" \n[{point},\n {point} ,{point}]\r\n ");
        for piece in [1, 7, 64 << 10] {
            assert_eq!(scanned(&list, piece), (3, None));
            assert_eq!(scanned(point, piece), (1, None));
            assert_eq!(scanned("[]", piece), (0, None));
            assert_eq!(
                scanned(
                    r#"[{"metric":null,"timestamp":"1356998400","value":"1","tags":{"a":null,"a":"é"}},{}]"#,
                    piece
                ),
                (2, None)
            );
        }
    }

    #[test]
    fn the_rest_goes_to_the_full_reader_from_the_last_point_taken() {
        let point = r#"{"metric":"m","timestamp":1,"value":1,"tags":{"h":"a"}}"#;
        for piece in [1, 5, 64 << 10] {
            // A bare NaN, an escape, an unknown field: after the first point.
            for odd in [r#"{"value":NaN}"#, r#"{"metric":"a\"b"}"#, r#"{"x":1}"#] {
                let body = format!("[{point},\n {odd}]");
                assert_eq!(
                    scanned(&body, piece),
                    (
                        1,
                        Some((
                            format!(",\n {odd}]"),
                            Handover::InList {
                                first: false,
                                at: (1, 1 + point.len())
                            }
                        ))
                    )
                );
            }
            let body = format!("\n[\n{point}\n,\n{point}]x");
            assert_eq!(
                scanned(&body, piece),
                (
                    2,
                    Some((
                        "x".into(),
                        Handover::AfterList {
                            at: (4, point.len() + 1)
                        }
                    ))
                )
            );
            // Not a list or object, or one object with something after.
            let whole = format!("{point} {point}");
            for body in ["  \u{a0}[]", "\"x\"", "", "  ", whole.as_str()] {
                assert_eq!(
                    scanned(body, piece),
                    (0, Some((body.to_string(), Handover::Start)))
                );
            }
            // Cut short: the full reader says where.
            let cut = &point[..point.len() - 3];
            assert_eq!(
                scanned(&format!("[{cut}"), piece),
                (
                    0,
                    Some((
                        cut.to_string(),
                        Handover::InList {
                            first: true,
                            at: (1, 1)
                        }
                    ))
                )
            );
        }
    }
}
