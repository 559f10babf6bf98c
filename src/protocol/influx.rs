//! InfluxDB line protocol: a request body read line by line into
//! measurements, tags, fields and timestamps, with no I/O and no
//! knowledge of the store (the server maps them onto series:
//! `tsd/http/influx.rs`).
//!
//! ```text
//! cpu,host=web01,region=eu usage_idle=92.5,usage_user=3i,up=t 1700000000000000000
//! ```
//!
//! What is read, as InfluxDB 1.x and 2.x write it:
//! - a measurement, then `,key=value` tags, a space, `key=value` fields
//!   separated by commas, and optionally a space and an integer
//!   timestamp in the request's precision ([`Precision`]);
//! - in the measurement, tag keys, tag values and field keys a backslash
//!   makes the comma, space, equals sign or backslash after it literal;
//!   any other backslash is itself (InfluxDB 2.x's rule; 1.x keeps
//!   `\=` and `\\` as written in a measurement);
//! - field values: floats (`1`, `-1.5`, `1e3`), signed integers (`3i`),
//!   unsigned integers (`3u`), booleans (`t`, `T`, `true`, `True`,
//!   `TRUE` and the `f` forms) and strings in double quotes, in which
//!   `\"` and `\\` are escapes and which may span lines;
//! - blank lines and lines starting with `#` are skipped; a line may end
//!   in `\r\n`.
//!
//! A bad line is an error of its own ([`ParsedLine`] carries its number
//! and text) and reading goes on with the next line, as InfluxDB stores
//! the good lines of a body and names the bad ones. The errors are named
//! in InfluxDB 1.6.7's words (checked against its server), except that
//! data after the timestamp is a `bad timestamp` (1.6.7: `point is
//! invalid`) and an integer out of range does not quote Go's parser.

use std::borrow::Cow;

use thiserror::Error;

use crate::model::Value;

/// The unit of a line's timestamp: the `precision` query parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    #[default]
    Nanoseconds,
    Microseconds,
    Milliseconds,
    Seconds,
    Minutes,
    Hours,
}

impl Precision {
    /// The precision a `precision` parameter names: 1.x's `n`, `ns`, `u`,
    /// `µ`, `ms`, `s`, `m`, `h` and 2.x's `ns`, `us`, `ms`, `s`.
    pub fn parse(s: &str) -> Option<Precision> {
        Some(match s {
            "n" | "ns" => Precision::Nanoseconds,
            "u" | "us" | "µ" | "µs" => Precision::Microseconds,
            "ms" => Precision::Milliseconds,
            "s" => Precision::Seconds,
            "m" => Precision::Minutes,
            "h" => Precision::Hours,
            _ => return None,
        })
    }

    /// A timestamp in this precision as Unix milliseconds: finer ones are
    /// rounded down to the millisecond (the store's finest unit); `None`
    /// when a coarse one does not fit in an `i64` of milliseconds.
    pub fn to_millis(self, t: i64) -> Option<i64> {
        match self {
            Precision::Nanoseconds => Some(t.div_euclid(1_000_000)),
            Precision::Microseconds => Some(t.div_euclid(1_000)),
            Precision::Milliseconds => Some(t),
            Precision::Seconds => t.checked_mul(1_000),
            Precision::Minutes => t.checked_mul(60_000),
            Precision::Hours => t.checked_mul(3_600_000),
        }
    }
}

/// A field's value as written.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FieldValue {
    Float(f64),
    Int(i64),
    UInt(u64),
    Bool(bool),
    /// A string field: read (so the line can be checked) but not kept,
    /// since the store holds numbers only.
    Str,
}

impl FieldValue {
    /// The number stored for this value: booleans as 1 and 0, unsigned
    /// integers above `i64::MAX` as floats; `None` for a string.
    pub fn to_value(self) -> Option<Value> {
        match self {
            FieldValue::Float(f) => Some(Value::Float(f)),
            FieldValue::Int(i) => Some(Value::Int(i)),
            FieldValue::UInt(u) => Some(match i64::try_from(u) {
                Ok(i) => Value::Int(i),
                Err(_) => Value::Float(u as f64),
            }),
            FieldValue::Bool(b) => Some(Value::Int(i64::from(b))),
            FieldValue::Str => None,
        }
    }
}

/// One field of a line.
#[derive(Debug, Clone, PartialEq)]
pub struct Field<'a> {
    pub key: Cow<'a, str>,
    pub value: FieldValue,
}

/// One line: a measurement, its tags and fields, and its timestamp in
/// the request's precision (`None`: the time it is received).
#[derive(Debug, Clone, PartialEq)]
pub struct Line<'a> {
    pub measurement: Cow<'a, str>,
    pub tags: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    pub fields: Vec<Field<'a>>,
    pub timestamp: Option<i64>,
}

/// Why a line could not be read. The words are InfluxDB's where it has
/// them, so that messages read as its users know them.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LineError {
    #[error("missing measurement")]
    MissingMeasurement,
    #[error("missing tag key")]
    MissingTagKey,
    #[error("missing tag value")]
    MissingTagValue,
    #[error("invalid tag format")]
    InvalidTag,
    #[error("duplicate tags")]
    DuplicateTag,
    #[error("missing fields")]
    MissingFields,
    #[error("missing field key")]
    MissingFieldKey,
    #[error("missing field value")]
    MissingFieldValue,
    #[error("invalid field format")]
    InvalidField,
    #[error("invalid number")]
    InvalidNumber,
    #[error("invalid boolean")]
    InvalidBoolean,
    #[error("unable to parse integer {0}: value out of range")]
    OutOfRange(String),
    #[error("unbalanced quotes")]
    UnbalancedQuotes,
    #[error("bad timestamp")]
    BadTimestamp,
    #[error("invalid UTF-8")]
    InvalidUtf8,
}

/// A line read from a body: its 1-based number, its text (up to its end,
/// or up to the error for a line that ends early) and what it holds.
#[derive(Debug)]
pub struct ParsedLine<'a> {
    pub number: usize,
    pub text: &'a [u8],
    pub result: Result<Line<'a>, LineError>,
}

/// The lines of a body, in order; comments and blank lines skipped.
pub struct LineReader<'a> {
    body: &'a [u8],
    pos: usize,
    /// The number of the line `pos` is on.
    line: usize,
}

impl<'a> LineReader<'a> {
    pub fn new(body: &'a [u8]) -> LineReader<'a> {
        LineReader {
            body,
            pos: 0,
            line: 1,
        }
    }

    /// Moves past `n` bytes, counting the newlines among them.
    fn advance_to(&mut self, end: usize) {
        self.line += memchr::memchr_iter(b'\n', &self.body[self.pos..end]).count();
        self.pos = end;
    }
}

impl<'a> Iterator for LineReader<'a> {
    type Item = ParsedLine<'a>;

    fn next(&mut self) -> Option<ParsedLine<'a>> {
        let b = self.body;
        loop {
            // Leading white space and blank lines.
            let mut i = self.pos;
            while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\r' | b'\n') {
                i += 1;
            }
            self.advance_to(i);
            if i >= b.len() {
                return None;
            }
            if b[i] == b'#' {
                let end = memchr::memchr(b'\n', &b[i..]).map_or(b.len(), |n| i + n);
                self.advance_to(end);
                continue;
            }
            let start = i;
            let number = self.line;
            let (result, end) = match parse_at(b, start) {
                Ok((line, end)) => (Ok(line), end),
                Err((e, at)) => {
                    // Reading resumes after the line the error is on.
                    let end =
                        memchr::memchr(b'\n', &b[at.min(b.len())..]).map_or(b.len(), |n| at + n);
                    (Err(e), end)
                }
            };
            let text_end = trim_end(b, start, end);
            self.advance_to(end);
            return Some(ParsedLine {
                number,
                text: &b[start..text_end],
                result,
            });
        }
    }
}

/// `end` moved back over a line's trailing `\r`.
fn trim_end(b: &[u8], start: usize, mut end: usize) -> usize {
    while end > start && matches!(b[end - 1], b'\r' | b'\n') {
        end -= 1;
    }
    end
}

/// Reads one line that starts at `start`; the line and where it ends
/// (its newline, or the body's end), or the error and where it was met.
fn parse_at(b: &[u8], start: usize) -> Result<(Line<'_>, usize), (LineError, usize)> {
    let err = |e, at| Err((e, at));
    let mut i = start;
    // Measurement.
    let m_end = scan_name(b, i, b" ,");
    if m_end == i {
        return err(LineError::MissingMeasurement, i);
    }
    let measurement = unescape(b, i, m_end).map_err(|e| (e, i))?;
    i = m_end;
    // Tags.
    let mut tags: Vec<(Cow<'_, str>, Cow<'_, str>)> = Vec::new();
    while i < b.len() && b[i] == b',' {
        i += 1;
        let k_end = scan_name(b, i, b" ,=");
        if k_end == i {
            return err(LineError::MissingTagKey, i);
        }
        if k_end >= b.len() || b[k_end] != b'=' {
            return err(LineError::MissingTagValue, k_end);
        }
        let key = unescape(b, i, k_end).map_err(|e| (e, i))?;
        i = k_end + 1;
        let v_end = scan_name(b, i, b" ,=");
        if v_end == i {
            return err(LineError::MissingTagValue, i);
        }
        if v_end < b.len() && b[v_end] == b'=' {
            return err(LineError::InvalidTag, v_end);
        }
        let value = unescape(b, i, v_end).map_err(|e| (e, i))?;
        if tags.iter().any(|(k, _)| *k == key) {
            return err(LineError::DuplicateTag, i);
        }
        tags.push((key, value));
        i = v_end;
    }
    // The space before the fields.
    if i >= b.len() || b[i] != b' ' {
        return err(LineError::MissingFields, i);
    }
    while i < b.len() && b[i] == b' ' {
        i += 1;
    }
    // Fields.
    let mut fields = Vec::new();
    loop {
        if at_line_end(b, i) {
            return err(LineError::MissingFields, i);
        }
        let k_end = scan_name(b, i, b" ,=");
        if k_end == i {
            return err(LineError::MissingFieldKey, i);
        }
        if k_end >= b.len() || b[k_end] != b'=' {
            return err(LineError::InvalidField, k_end);
        }
        let key = unescape(b, i, k_end).map_err(|e| (e, i))?;
        i = k_end + 1;
        let (value, v_end) = field_value(b, i).map_err(|e| (e, i))?;
        fields.push(Field { key, value });
        i = v_end;
        if i < b.len() && b[i] == b',' {
            i += 1;
            continue;
        }
        break;
    }
    // Timestamp.
    while i < b.len() && b[i] == b' ' {
        i += 1;
    }
    let mut timestamp = None;
    if !at_line_end(b, i) {
        let t_end = scan_plain(b, i);
        let text = std::str::from_utf8(&b[i..t_end]).map_err(|_| (LineError::BadTimestamp, i))?;
        timestamp = Some(
            text.parse::<i64>()
                .map_err(|_| (LineError::BadTimestamp, i))?,
        );
        i = t_end;
        while i < b.len() && b[i] == b' ' {
            i += 1;
        }
        if !at_line_end(b, i) {
            return err(LineError::BadTimestamp, i);
        }
    }
    if i < b.len() && b[i] == b'\r' {
        i += 1;
    }
    Ok((
        Line {
            measurement,
            tags,
            fields,
            timestamp,
        },
        i,
    ))
}

/// Whether `i` is at the end of a line: a newline, the body's end, or a
/// `\r` before either.
fn at_line_end(b: &[u8], i: usize) -> bool {
    match b.get(i) {
        None | Some(b'\n') => true,
        Some(b'\r') => matches!(b.get(i + 1), None | Some(b'\n')),
        _ => false,
    }
}

/// The end of a name (measurement, tag key or value, field key) from
/// `i`: the first unescaped byte of `stops`, or the line's end.
fn scan_name(b: &[u8], mut i: usize, stops: &[u8]) -> usize {
    while i < b.len() {
        let c = b[i];
        if c == b'\\' && i + 1 < b.len() && b[i + 1] != b'\n' {
            i += 2;
            continue;
        }
        if stops.contains(&c) || at_line_end(b, i) {
            break;
        }
        i += 1;
    }
    i.min(b.len())
}

/// The end of an unquoted field value or timestamp from `i`.
fn scan_plain(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && !matches!(b[i], b' ' | b',') && !at_line_end(b, i) {
        i += 1;
    }
    i
}

/// A name's text with its escapes removed; borrowed when it has none.
fn unescape(b: &[u8], start: usize, end: usize) -> Result<Cow<'_, str>, LineError> {
    let raw = std::str::from_utf8(&b[start..end]).map_err(|_| LineError::InvalidUtf8)?;
    if !raw.contains('\\') {
        return Ok(Cow::Borrowed(raw));
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\'
            && let Some(&next) = chars.peek()
            && matches!(next, ',' | ' ' | '=' | '\\')
        {
            out.push(next);
            chars.next();
            continue;
        }
        out.push(c);
    }
    Ok(Cow::Owned(out))
}

/// A field value from `i` and where it ends.
fn field_value(b: &[u8], i: usize) -> Result<(FieldValue, usize), LineError> {
    if i < b.len() && b[i] == b'"' {
        let mut j = i + 1;
        loop {
            match b.get(j) {
                None => return Err(LineError::UnbalancedQuotes),
                Some(b'\\') if j + 1 < b.len() => j += 2,
                Some(b'"') => break,
                Some(_) => j += 1,
            }
        }
        let end = j + 1;
        // What follows a string is the next field, the timestamp or the
        // line's end.
        if end < b.len() && !matches!(b[end], b',' | b' ') && !at_line_end(b, end) {
            return Err(LineError::InvalidField);
        }
        return Ok((FieldValue::Str, end));
    }
    let end = scan_plain(b, i);
    if end == i {
        return Err(LineError::MissingFieldValue);
    }
    let text = &b[i..end];
    Ok((number(text)?, end))
}

/// An unquoted field value: a boolean, an integer with its `i` or `u`
/// suffix, or a float.
fn number(text: &[u8]) -> Result<FieldValue, LineError> {
    match text {
        b"t" | b"T" | b"true" | b"True" | b"TRUE" => return Ok(FieldValue::Bool(true)),
        b"f" | b"F" | b"false" | b"False" | b"FALSE" => return Ok(FieldValue::Bool(false)),
        _ => {}
    }
    let Ok(s) = std::str::from_utf8(text) else {
        return Err(LineError::InvalidNumber);
    };
    let integer = |digits: &str| {
        !digits.is_empty()
            && digits
                .strip_prefix(['-', '+'])
                .unwrap_or(digits)
                .bytes()
                .all(|c| c.is_ascii_digit())
            && digits.bytes().any(|c| c.is_ascii_digit())
    };
    if let Some(digits) = s.strip_suffix('i') {
        if !integer(digits) {
            return Err(LineError::InvalidNumber);
        }
        return digits
            .parse::<i64>()
            .map(FieldValue::Int)
            .map_err(|_| LineError::OutOfRange(digits.to_string()));
    }
    if let Some(digits) = s.strip_suffix('u') {
        if !integer(digits) || digits.starts_with('-') {
            return Err(LineError::InvalidNumber);
        }
        return digits
            .parse::<u64>()
            .map(FieldValue::UInt)
            .map_err(|_| LineError::OutOfRange(digits.to_string()));
    }
    // Rust reads `inf` and `NaN`; the line protocol has neither.
    if !s
        .bytes()
        .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-'))
    {
        if s.starts_with(|c: char| c.is_ascii_alphabetic()) {
            return Err(LineError::InvalidBoolean);
        }
        return Err(LineError::InvalidNumber);
    }
    s.parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .map(FieldValue::Float)
        .ok_or(LineError::InvalidNumber)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Result<Line<'_>, LineError> {
        let mut r = LineReader::new(text.as_bytes());
        let l = r.next().expect("a line");
        assert!(r.next().is_none(), "one line in {text:?}");
        l.result
    }

    fn tags<'a>(l: &'a Line<'a>) -> Vec<(&'a str, &'a str)> {
        l.tags
            .iter()
            .map(|(k, v)| (k.as_ref(), v.as_ref()))
            .collect()
    }

    #[test]
    fn a_full_line() {
        let l = one("cpu,host=web01,region=eu usage_idle=92.5,n=3i,u=4u,up=t 1700000000000000000")
            .unwrap();
        assert_eq!(l.measurement, "cpu");
        assert_eq!(tags(&l), [("host", "web01"), ("region", "eu")]);
        let f: Vec<_> = l.fields.iter().map(|f| (f.key.as_ref(), f.value)).collect();
        assert_eq!(
            f,
            [
                ("usage_idle", FieldValue::Float(92.5)),
                ("n", FieldValue::Int(3)),
                ("u", FieldValue::UInt(4)),
                ("up", FieldValue::Bool(true)),
            ]
        );
        assert_eq!(l.timestamp, Some(1_700_000_000_000_000_000));
    }

    #[test]
    fn no_tags_and_no_timestamp() {
        let l = one("mem free=1").unwrap();
        assert!(l.tags.is_empty());
        assert_eq!(l.timestamp, None);
        let l = one("mem free=1 \r\n").unwrap();
        assert_eq!(l.timestamp, None);
        assert_eq!(l.fields[0].value, FieldValue::Float(1.0));
    }

    #[test]
    fn escapes_in_names() {
        let l = one(r"my\ cpu\,x,ta\=g\ k=v\,a\ l\=ue\\ fi\ eld\=k\,=1 1").unwrap();
        assert_eq!(l.measurement, "my cpu,x");
        assert_eq!(tags(&l), [("ta=g k", r"v,a l=ue\")]);
        assert_eq!(l.fields[0].key, "fi eld=k,");
        // Other backslashes stay.
        let l = one(r"c:\dir,p=a\b v=1").unwrap();
        assert_eq!(l.measurement, r"c:\dir");
        assert_eq!(tags(&l), [("p", r"a\b")]);
        // Equals signs need no escape in a measurement.
        assert_eq!(one("a=b v=1").unwrap().measurement, "a=b");
    }

    #[test]
    fn strings_are_read_but_not_kept() {
        let l = one(r#"log,host=a msg="a \"quoted\", spaced = string\\",v=2 5"#).unwrap();
        assert_eq!(l.fields[0].value, FieldValue::Str);
        assert_eq!(l.fields[1].value, FieldValue::Float(2.0));
        assert_eq!(l.timestamp, Some(5));
        assert_eq!(l.fields[0].value.to_value(), None);
        // A string may hold a newline: still one line.
        let lines: Vec<_> = LineReader::new(b"a s=\"x\ny\" 1\nb v=1 2\n").collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].result.is_ok());
        assert_eq!(lines[1].number, 3);
        assert_eq!(one("a s=\"open"), Err(LineError::UnbalancedQuotes));
        assert_eq!(one("a s=\"x\"y"), Err(LineError::InvalidField));
    }

    #[test]
    fn booleans() {
        for t in ["t", "T", "true", "True", "TRUE"] {
            let text = format!("m v={t}");
            let l = one(&text).unwrap();
            assert_eq!(l.fields[0].value.to_value(), Some(Value::Int(1)), "{t}");
        }
        for f in ["f", "F", "false", "False", "FALSE"] {
            let text = format!("m v={f}");
            let l = one(&text).unwrap();
            assert_eq!(l.fields[0].value.to_value(), Some(Value::Int(0)), "{f}");
        }
        assert_eq!(one("m v=tRUE"), Err(LineError::InvalidBoolean));
    }

    #[test]
    fn numbers() {
        let v = |s: &str| one(&format!("m v={s}")).map(|l| l.fields[0].value);
        assert_eq!(v("-1.5e3"), Ok(FieldValue::Float(-1500.0)));
        assert_eq!(v(".5"), Ok(FieldValue::Float(0.5)));
        assert_eq!(v("-9223372036854775808i"), Ok(FieldValue::Int(i64::MIN)));
        assert_eq!(v("18446744073709551615u"), Ok(FieldValue::UInt(u64::MAX)));
        assert_eq!(
            v("9223372036854775808i").unwrap_err().to_string(),
            "unable to parse integer 9223372036854775808: value out of range"
        );
        assert_eq!(v("-1u"), Err(LineError::InvalidNumber));
        assert_eq!(v("i"), Err(LineError::InvalidNumber));
        assert_eq!(v("1.5i"), Err(LineError::InvalidNumber));
        assert_eq!(v("1e999"), Err(LineError::InvalidNumber));
        assert_eq!(v("inf"), Err(LineError::InvalidBoolean));
        assert_eq!(v("NaN"), Err(LineError::InvalidBoolean));
        assert_eq!(v("1-"), Err(LineError::InvalidNumber));
        assert_eq!(
            FieldValue::UInt(u64::MAX).to_value(),
            Some(Value::Float(u64::MAX as f64))
        );
        assert_eq!(FieldValue::UInt(7).to_value(), Some(Value::Int(7)));
    }

    #[test]
    fn bad_lines_are_named_and_skipped() {
        let body = b"# a comment\n\ncpu v=1 1\ncpu\ncpu,host v=1\ncpu,=a v=1\ncpu,a=b=c v=1\ncpu,a=1,a=2 v=1\ncpu \ncpu =1\ncpu v\ncpu v=\ncpu v=1 x\ncpu v=1 1 2\n,a=b v=1\ncpu v=2 2";
        let got: Vec<_> = LineReader::new(body)
            .map(|l| {
                (
                    l.number,
                    String::from_utf8_lossy(l.text).into_owned(),
                    l.result.err(),
                )
            })
            .collect();
        let want = [
            (3, "cpu v=1 1", None),
            (4, "cpu", Some(LineError::MissingFields)),
            (5, "cpu,host v=1", Some(LineError::MissingTagValue)),
            (6, "cpu,=a v=1", Some(LineError::MissingTagKey)),
            (7, "cpu,a=b=c v=1", Some(LineError::InvalidTag)),
            (8, "cpu,a=1,a=2 v=1", Some(LineError::DuplicateTag)),
            (9, "cpu ", Some(LineError::MissingFields)),
            (10, "cpu =1", Some(LineError::MissingFieldKey)),
            (11, "cpu v", Some(LineError::InvalidField)),
            (12, "cpu v=", Some(LineError::MissingFieldValue)),
            (13, "cpu v=1 x", Some(LineError::BadTimestamp)),
            (14, "cpu v=1 1 2", Some(LineError::BadTimestamp)),
            (15, ",a=b v=1", Some(LineError::MissingMeasurement)),
            (16, "cpu v=2 2", None),
        ];
        let want: Vec<_> = want
            .into_iter()
            .map(|(n, t, e)| (n, t.to_string(), e))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn invalid_utf8_is_a_line_error() {
        let lines: Vec<_> = LineReader::new(b"c\xff v=1\nc v=1").collect();
        assert_eq!(lines[0].result, Err(LineError::InvalidUtf8));
        assert!(lines[1].result.is_ok());
    }

    #[test]
    fn precisions() {
        let p = |s| Precision::parse(s).unwrap();
        assert_eq!(
            p("ns").to_millis(1_700_000_000_123_456_789),
            Some(1_700_000_000_123)
        );
        assert_eq!(p("n").to_millis(-1), Some(-1));
        assert_eq!(p("u").to_millis(1_500_999), Some(1_500));
        assert_eq!(p("us").to_millis(1_500_999), Some(1_500));
        assert_eq!(p("ms").to_millis(7), Some(7));
        assert_eq!(p("s").to_millis(7), Some(7_000));
        assert_eq!(p("m").to_millis(2), Some(120_000));
        assert_eq!(p("h").to_millis(1), Some(3_600_000));
        assert_eq!(p("h").to_millis(i64::MAX), None);
        assert_eq!(Precision::parse("d"), None);
        assert_eq!(Precision::default(), Precision::Nanoseconds);
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_bytes(body in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            for l in LineReader::new(&body) {
                assert!(l.text.len() <= body.len());
                if let Ok(line) = l.result {
                    assert!(!line.measurement.is_empty());
                    assert!(!line.fields.is_empty());
                }
            }
        }

        #[test]
        fn never_panics_on_line_like_text(body in r##"([a-z\\ ,="#\nti0-9.\-]{0,12}){0,12}"##) {
            let lines: Vec<_> = LineReader::new(body.as_bytes()).collect();
            // Every line of the body is read once, in order.
            for w in lines.windows(2) {
                assert!(w[0].number < w[1].number);
            }
        }

        #[test]
        fn written_lines_read_back(
            m in "[a-z ,=\\\\]{1,8}",
            k in "[a-z ,=]{1,8}",
            v in "[a-z ,=]{1,8}",
            f in "[a-z ,=]{1,8}",
            x in proptest::num::i64::ANY,
            t in proptest::option::of(proptest::num::i64::ANY),
        ) {
            let esc = |s: &str| s.replace('\\', "\\\\").replace(',', "\\,").replace(' ', "\\ ").replace('=', "\\=");
            let mut text = format!("{},{}={} {}={x}i", esc(&m), esc(&k), esc(&v), esc(&f));
            if let Some(t) = t {
                text.push_str(&format!(" {t}"));
            }
            let l = one(&text).unwrap();
            proptest::prop_assert_eq!(l.measurement.as_ref(), m.as_str());
            proptest::prop_assert_eq!(tags(&l), vec![(k.as_str(), v.as_str())]);
            proptest::prop_assert_eq!(l.fields[0].key.as_ref(), f.as_str());
            proptest::prop_assert_eq!(l.fields[0].value, FieldValue::Int(x));
            proptest::prop_assert_eq!(l.timestamp, t);
        }
    }
}
