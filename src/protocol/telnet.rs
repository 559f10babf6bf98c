//! OpenTSDB's telnet-style line protocol as text: framing (lines up to
//! `max_line_length` bytes, `\n` or `\r\n`, ISO-8859-1), word splitting
//! as `Tags.splitString`, and the `put` line parser
//! (`PutDataPointRpc.importDataPoint`) with its exact messages, checked
//! in OpenTSDB's order up to (not including) the series' names, which
//! the write path's series cache checks. `tsdb import` reads the same
//! lines without the `put` word.
//!
//! Hot paths (every telnet and import line): nothing here allocates per
//! line for ordinary lines.

use std::borrow::Cow;

use super::{PointError, parse_value};
use crate::model::Value;
use crate::model::java::{double_to_string, java_tags};

/// Decodes a line as ISO-8859-1, as OpenTSDB does.
pub fn decode_line(bytes: &[u8]) -> Cow<'_, str> {
    if bytes.is_ascii() {
        Cow::Borrowed(std::str::from_utf8(bytes).expect("ASCII is UTF-8"))
    } else {
        Cow::Owned(bytes.iter().map(|&b| b as char).collect())
    }
}

/// The `lines` of a chunk (slices of `chunk`, as [`split_lines`] gives
/// them), each decoded as [`decode_line`] decodes it. A chunk that is
/// ASCII throughout, as nearly every one is, is checked once and its lines
/// borrowed from it, instead of checking and converting line by line.
pub fn decode_lines<'a>(
    chunk: &'a [u8],
    lines: &'a [&'a [u8]],
) -> impl Iterator<Item = Cow<'a, str>> + 'a {
    let text = chunk
        .is_ascii()
        .then(|| std::str::from_utf8(chunk).expect("ASCII is UTF-8"));
    lines.iter().map(move |raw| match text {
        Some(text) => {
            let at = raw.as_ptr() as usize - chunk.as_ptr() as usize;
            Cow::Borrowed(&text[at..at + raw.len()])
        }
        None => decode_line(raw),
    })
}

/// Complete lines of `buf` (without `\n` / `\r\n`) and how many bytes
/// they used. `Err(len)` if a line (or the unterminated rest) is longer
/// than `max`.
pub fn split_lines(buf: &[u8], max: usize) -> Result<(Vec<&[u8]>, usize), usize> {
    let mut lines = Vec::new();
    let mut start = 0;
    while let Some(pos) = memchr(b'\n', &buf[start..]) {
        let mut line = &buf[start..start + pos];
        if let Some(l) = line.strip_suffix(b"\r") {
            line = l;
        }
        if line.len() > max {
            return Err(line.len());
        }
        lines.push(line);
        start += pos + 1;
    }
    if buf.len() - start > max {
        return Err(buf.len() - start);
    }
    Ok((lines, start))
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    memchr::memchr(needle, hay)
}

/// The lines of a chunk (complete lines, `\n` or `\r\n`), decoded.
pub fn chunk_lines(data: &[u8]) -> impl Iterator<Item = std::borrow::Cow<'_, str>> {
    let data = data.strip_suffix(b"\n").unwrap_or(data);
    data.split(|&b| b == b'\n').map(|raw| {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        decode_line(raw)
    })
}

/// Words per line kept on the stack; longer lines spill to one Vec.
const STACK_WORDS: usize = 24;

/// A line's words as OpenTSDB's `Tags.splitString(line, ' ')`: split on
/// every single space, empty words kept. Held on the stack for ordinary
/// lines (a `put` with 20 tags fits), so splitting does not allocate.
pub struct Words<'a> {
    stack: [&'a str; STACK_WORDS],
    n: usize,
    heap: Vec<&'a str>,
}

impl<'a> Words<'a> {
    pub fn split(line: &'a str) -> Words<'a> {
        let mut w = Words {
            stack: [""; STACK_WORDS],
            n: 0,
            heap: Vec::new(),
        };
        // One pass over the bytes: words are short, so a searcher set up
        // per word (`str::split`) cost more than the scan itself. A space
        // is one byte in UTF-8, so every cut is at a char boundary.
        let mut start = 0;
        for (i, &b) in line.as_bytes().iter().enumerate() {
            if b == b' ' {
                w.push(&line[start..i]);
                start = i + 1;
            }
        }
        w.push(&line[start..]);
        w
    }

    fn push(&mut self, word: &'a str) {
        if self.n < STACK_WORDS {
            self.stack[self.n] = word;
        } else {
            if self.heap.is_empty() {
                self.heap.extend_from_slice(&self.stack);
            }
            self.heap.push(word);
        }
        self.n += 1;
    }

    pub fn as_slice(&self) -> &[&'a str] {
        if self.heap.is_empty() {
            &self.stack[..self.n]
        } else {
            &self.heap
        }
    }
}

/// A `put` line, parsed and checked up to (not including) the series.
#[derive(Debug, Clone, PartialEq)]
pub struct PutLine<'a> {
    pub metric: &'a str,
    pub timestamp: i64,
    pub value: Value,
    /// In arrival order, unique keys.
    pub tags: Vec<(&'a str, &'a str)>,
}

/// `Tags.parse`: one `k=v` word into the tag list.
pub(crate) fn parse_tag<'a>(
    tags: &mut Vec<(&'a str, &'a str)>,
    word: &'a str,
) -> Result<(), PointError> {
    let mut parts = word.split('=');
    let (k, v) = match (parts.next(), parts.next(), parts.next()) {
        (Some(k), Some(v), None) if !k.is_empty() && !v.is_empty() => (k, v),
        _ => return Err(PointError::IllegalArgument(format!("invalid tag: {word}"))),
    };
    match tags.iter().find(|t| t.0 == k) {
        Some(t) if t.1 == v => Ok(()),
        Some(_) => Err(PointError::IllegalArgument(format!(
            "duplicate tag: {word}, tags={}",
            java_tags(tags)
        ))),
        None => {
            tags.push((k, v));
            Ok(())
        }
    }
}

/// `importDataPoint` for the words of a `put` line (`words[0]` is `put`),
/// in OpenTSDB's order: argument count, metric, timestamp, value, tags,
/// value parsing, NaN/Infinity.
pub fn parse_put<'a>(words: &[&'a str]) -> Result<PutLine<'a>, PointError> {
    parse_point(words.get(1..).unwrap_or_default())
}

/// The same checks for a line's words after the command word: what
/// `tsdb import` reads (`<metric> <timestamp> <value> <tagk=tagv>...`).
pub fn parse_point<'a>(words: &[&'a str]) -> Result<PutLine<'a>, PointError> {
    if words.len() < 4 {
        return Err(PointError::IllegalArgument(format!(
            "not enough arguments (need least 4, got {})",
            words.len()
        )));
    }
    let metric = words[0];
    if metric.is_empty() {
        return Err(PointError::IllegalArgument("empty metric name".into()));
    }
    let timestamp = parse_timestamp(words[1])?;
    let value_word = words[2];
    if value_word.is_empty() {
        return Err(PointError::IllegalArgument("empty value".into()));
    }
    let mut tags = Vec::with_capacity(words.len() - 3);
    for w in &words[3..] {
        if !w.is_empty() {
            parse_tag(&mut tags, w)?;
        }
    }
    let value = parse_value(value_word)?;
    check_finite(metric, timestamp, value)?;
    Ok(PutLine {
        metric,
        timestamp,
        value,
        tags,
    })
}

/// A line's timestamp word: dots dropped (`1356998400.500` is
/// milliseconds), then a positive long.
fn parse_timestamp(word: &str) -> Result<i64, PointError> {
    let ts_word: Cow<str> = if word.as_bytes().contains(&b'.') {
        Cow::Owned(word.replace('.', ""))
    } else {
        Cow::Borrowed(word)
    };
    let timestamp = crate::model::java::parse_long(&ts_word).map_err(PointError::InvalidValue)?;
    if timestamp <= 0 {
        return Err(PointError::IllegalArgument(format!(
            "invalid timestamp: {timestamp}"
        )));
    }
    Ok(timestamp)
}

/// The first words of a `put` line and the text of its tag words, found
/// without splitting the whole line: what a line naming a series it named
/// before needs ([`parse_known_point`]). The words are those
/// [`Words::split`] gives: `metric` is word 1, `timestamp` word 2,
/// `value` word 3, and `tags_text` runs from the start of word 4 to the
/// line's end.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PutHead<'a> {
    pub metric: &'a str,
    pub timestamp: &'a str,
    pub value: &'a str,
    pub tags_text: &'a str,
}

impl<'a> PutHead<'a> {
    /// The head of `line` if its first word is `put` and it has at least
    /// five words (else it goes through [`Words::split`] and
    /// [`parse_put`], which say what is wrong).
    pub fn of(line: &'a str) -> Option<PutHead<'a>> {
        let rest = line.strip_prefix("put ")?;
        // Four cuts at most: the tag words are never looked at one by one
        // here, so a line costs a scan of its first words, not of its
        // whole length. A space is one byte in UTF-8: every cut is at a
        // char boundary.
        let mut spaces = memchr::memchr_iter(b' ', rest.as_bytes());
        let a = spaces.next()?;
        let b = spaces.next()?;
        let c = spaces.next()?;
        Some(PutHead {
            metric: &rest[..a],
            timestamp: &rest[a + 1..b],
            value: &rest[b + 1..c],
            tags_text: &rest[c + 1..],
        })
    }
}

/// The timestamp and value of a point line (the words after the command
/// word) whose metric and tags are known to be valid, because the same
/// words named a series before. `None` if anything else is wrong: the
/// full [`parse_point`] then says what, in OpenTSDB's order.
pub fn parse_known_point(words: &[&str]) -> Option<(i64, Value)> {
    let timestamp = parse_timestamp(words.get(1)?).ok()?;
    let value_word = words.get(2)?;
    if value_word.is_empty() {
        return None;
    }
    let value = parse_value(value_word).ok()?;
    check_finite(words[0], timestamp, value).ok()?;
    Some((timestamp, value))
}

/// A `rollup` line, parsed and checked as `RollupDataPointRpc` does before
/// `TSDB.addAggregatePoint`.
#[derive(Debug, Clone, PartialEq)]
pub struct RollupLine<'a> {
    pub point: PutLine<'a>,
    /// `<interval>` of `<interval>-<agg>`.
    pub interval: Option<&'a str>,
    /// `<agg>` of `<interval>-<agg>`, else the group-by aggregator.
    pub aggregator: Option<&'a str>,
    /// The aggregator after `:`, or the whole spec without a `-`.
    pub group_by: Option<&'a str>,
}

/// `RollupDataPointRpc.importDataPoint` for the words of a `rollup` line
/// (`rollup <interval>-<agg>[:<groupby agg>]|<groupby agg> <metric>
/// <timestamp> <value> <tagk=tagv>...`), in OpenTSDB's order.
pub fn parse_rollup<'a>(words: &[&'a str]) -> Result<RollupLine<'a>, PointError> {
    if words.len() < 6 {
        return Err(PointError::IllegalArgument(format!(
            "not enough arguments (need least 7, got {})",
            words.len().saturating_sub(1)
        )));
    }
    let spec = words[1];
    if spec.is_empty() {
        return Err(PointError::IllegalArgument(
            "Missing interval or aggregator".into(),
        ));
    }
    // Java's String.split drops trailing empty strings.
    let mut parts: Vec<&str> = spec.split(':').collect();
    while parts.len() > 1 && parts.last() == Some(&"") {
        parts.pop();
    }
    if parts.iter().all(|p| p.is_empty()) && spec.contains(':') {
        // `"::".split(":")` is empty: OpenTSDB fails on its first element.
        return Err(PointError::IllegalArgument(
            "Missing interval or aggregator".into(),
        ));
    }
    let (mut interval, mut temporal, mut spatial) = (None, None, None);
    match parts[0].find('-') {
        Some(dash) => {
            interval = Some(&parts[0][..dash]);
            temporal = Some(&parts[0][dash + 1..]);
        }
        None if parts.len() == 1 => spatial = Some(parts[0]),
        None => {}
    }
    if parts.len() > 1 {
        spatial = Some(parts[1]);
    }
    let metric = words[2];
    if metric.is_empty() {
        return Err(PointError::IllegalArgument("empty metric name".into()));
    }
    let timestamp = parse_timestamp(words[3])?;
    let value_word = words[4];
    if value_word.is_empty() {
        return Err(PointError::IllegalArgument("empty value".into()));
    }
    let mut tags = Vec::with_capacity(words.len() - 5);
    for w in &words[5..] {
        if !w.is_empty() {
            parse_tag(&mut tags, w)?;
        }
    }
    if spatial.is_some() && temporal.is_none() {
        temporal = spatial;
    }
    let value = parse_value(value_word)?;
    check_finite(metric, timestamp, value)?;
    Ok(RollupLine {
        point: PutLine {
            metric,
            timestamp,
            value,
            tags,
        },
        interval,
        aggregator: temporal,
        group_by: spatial,
    })
}

/// `TSDB.addPoint(float|double)`'s first check.
pub fn check_finite(metric: &str, timestamp: i64, value: Value) -> Result<(), PointError> {
    if let Value::Float(f) = value
        && !f.is_finite()
    {
        return Err(PointError::IllegalArgument(format!(
            "value is NaN or Infinite: {} for metric={metric} timestamp={timestamp}",
            double_to_string(f)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(line: &str) -> Result<PutLine<'_>, String> {
        let words: Vec<&str> = line.split(' ').collect();
        parse_put(&words).map_err(|e| e.telnet_line())
    }

    #[test]
    fn put_errors_verbatim() {
        assert_eq!(
            put("put").unwrap_err(),
            "put: illegal argument: not enough arguments (need least 4, got 0)"
        );
        assert_eq!(
            put("put m 1 1").unwrap_err(),
            "put: illegal argument: not enough arguments (need least 4, got 3)"
        );
        assert_eq!(
            put("put  1356998400 1 host=a").unwrap_err(),
            "put: illegal argument: empty metric name"
        );
        assert_eq!(
            put("put m notatime 1 host=a").unwrap_err(),
            "put: invalid value: Invalid character 'n' in notatime"
        );
        assert_eq!(
            put("put m 0 1 host=a").unwrap_err(),
            "put: illegal argument: invalid timestamp: 0"
        );
        assert_eq!(
            put("put m -5 1 host=a").unwrap_err(),
            "put: illegal argument: invalid timestamp: -5"
        );
        assert_eq!(
            put("put m 1356998400  host=a").unwrap_err(),
            "put: illegal argument: empty value"
        );
        assert_eq!(
            put("put m 1356998400 1 host").unwrap_err(),
            "put: illegal argument: invalid tag: host"
        );
        assert_eq!(
            put("put m 1356998400 1 host=a=b").unwrap_err(),
            "put: illegal argument: invalid tag: host=a=b"
        );
        assert_eq!(
            put("put m 1356998400 1 host=a host=b").unwrap_err(),
            "put: illegal argument: duplicate tag: host=b, tags={host=a}"
        );
        assert!(put("put m 1356998400 1 host=a host=a").is_ok());
        assert_eq!(
            put("put m 1356998400 NaN host=a").unwrap_err(),
            "put: invalid value: Invalid character 'N' in NaN"
        );
        assert_eq!(
            put("put m 1356998400 1e999 host=a").unwrap_err(),
            "put: illegal argument: value is NaN or Infinite: Infinity for metric=m timestamp=1356998400"
        );
        assert_eq!(
            put("put m 1356998400 1.2.3 host=a").unwrap_err(),
            "put: invalid value: For input string: \"1.2.3\""
        );
        let p = put("put m 1356998400.500 1.5 host=a  dc=x").unwrap();
        assert_eq!(p.timestamp, 1356998400500);
        assert_eq!(p.value, Value::Float(1.5));
        assert_eq!(p.tags, vec![("host", "a"), ("dc", "x")]);
    }

    #[test]
    fn framing() {
        let (lines, used) = split_lines(b"a\r\nb\npartial", 10).unwrap();
        assert_eq!(lines, vec![&b"a"[..], &b"b"[..]]);
        assert_eq!(used, 5);
        assert_eq!(split_lines(b"0123456789AB\n", 10), Err(12));
        assert_eq!(split_lines(b"0123456789AB", 10), Err(12));
        assert_eq!(decode_line(&[0x63, 0xE9]), "c\u{e9}");
        let lines: Vec<_> = chunk_lines(b"a\r\nb\n\nc\n").collect();
        assert_eq!(lines, vec!["a", "b", "", "c"]);
    }

    #[test]
    fn words_as_split_string() {
        let w = Words::split("put m  1");
        assert_eq!(w.as_slice(), ["put", "m", "", "1"]);
        let long = vec!["t=v"; 30].join(" ");
        assert_eq!(Words::split(&long).as_slice().len(), 30);
        assert_eq!(Words::split("").as_slice(), [""]);
    }

    #[test]
    fn lines_of_a_chunk_decoded_as_each_line() {
        for chunk in [
            &b"put m 1 2 a=b\r\nversion\n\nput m 1 2 a=c\npar"[..],
            &b"put m 1 2 a=\xe9\nput m 1 2 a=b\n"[..],
            &b""[..],
        ] {
            let (lines, _) = split_lines(chunk, 1024).unwrap();
            let each: Vec<Cow<str>> = lines.iter().map(|l| decode_line(l)).collect();
            let whole: Vec<Cow<str>> = decode_lines(chunk, &lines).collect();
            assert_eq!(whole, each);
        }
    }

    #[test]
    fn put_head_is_the_split_words() {
        for line in [
            "put m 1 2 a=b",
            "put m 1356998400 42.5 host=web01 dc=lga",
            "put m  1 2 a=b",
            "put m 1 2 ",
            "put m 1 2  a=b",
            "put  m 1 2 a=b c",
            "put \u{e9}t\u{e9} 1 2 a=\u{e9}",
        ] {
            let words = Words::split(line);
            let words = words.as_slice();
            let head = PutHead::of(line).unwrap_or_else(|| panic!("{line:?}"));
            let at = words[4].as_ptr() as usize - line.as_ptr() as usize;
            assert_eq!(
                head,
                PutHead {
                    metric: words[1],
                    timestamp: words[2],
                    value: words[3],
                    tags_text: &line[at..],
                },
                "{line:?}"
            );
        }
        // Fewer than five words, or another command: the full parser's.
        for line in [
            "put m 1 2",
            "put",
            "put ",
            "rollup m 1 2 a=b",
            "putm 1 2 a=b",
            "PUT m 1 2 a=b",
        ] {
            assert_eq!(PutHead::of(line), None, "{line:?}");
        }
    }
}
