//! The plot options `/q` accepts, checked as `GraphHandler` checks them
//! (`setPlotDimensions`, `setPlotParams`): each is taken from its last
//! occurrence, URL-decoded a second time and trimmed, refused if it holds
//! a back-tick, and tested with OpenTSDB's pattern — which only has to
//! match somewhere in the value (`Matcher.find`), as in 2.4.1.

use std::sync::LazyLock;

use regex::Regex;

use crate::render::options::{KeyPlace, PlotParams, Range, SMOOTH, SMOOTH_RE, Style, parse_key};

/// A refused parameter, worded as OpenTSDB words it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct ParamError(pub String);

fn bad(msg: impl Into<String>) -> ParamError {
    ParamError(msg.into())
}

// OpenTSDB's patterns, with `\d` spelled `[0-9]` (Java's is ASCII only).
// Each message quotes the pattern as Java prints it.
const RANGE: &str =
    r#"\["?-?[0-9]+\.?([0-9]+)?([eE]-?[0-9]+)?"?:"?-?([0-9]+\.?[0-9]+?)?([eE]-?[0-9]+)?"?\]"#;
const LABEL: &str = r"[a-zA-z0-9 \-_]";
const KEY: &str = r"(out|left|top|center|right|horiz|box|bottom)?\s?";
const STYLE: &str = "(linespoint|points|circles|dots)";
const COLOR: &str = "(x|X)[a-fA-F0-9]{6}";
const FORMAT: &str = r"(%[a-zA-Z])+[:\/]?\s?";
const WXH: &str = r"^[0-9]+x[0-9]+$";

/// The patterns as Java's `Pattern.toString` shows them in messages.
const LABEL_SHOWN: &str = r"[a-zA-z0-9 \-_]";
const KEY_SHOWN: &str = r"(out|left|top|center|right|horiz|box|bottom)?\s?";
const FORMAT_SHOWN: &str = r"(%[a-zA-Z])+[:\/]?\s?";
const WXH_SHOWN: &str = r"^\d+x\d+$";

fn re(p: &str) -> Regex {
    Regex::new(p).expect("a constant pattern")
}

static RANGE_RE: LazyLock<Regex> = LazyLock::new(|| re(RANGE));
static LABEL_RE: LazyLock<Regex> = LazyLock::new(|| re(LABEL));
static KEY_RE: LazyLock<Regex> = LazyLock::new(|| re(KEY));
static STYLE_RE: LazyLock<Regex> = LazyLock::new(|| re(STYLE));
static COLOR_RE: LazyLock<Regex> = LazyLock::new(|| re(COLOR));
static FORMAT_RE: LazyLock<Regex> = LazyLock::new(|| re(FORMAT));
static WXH_RE: LazyLock<Regex> = LazyLock::new(|| re(WXH));

/// `Plot.MIN_PIXELS`.
const MIN_PIXELS: i32 = 100;
/// rtsdb's own bound: OpenTSDB lets gnuplot try up to 32767 a side, which
/// here would be a 3 GB bitmap; a request past this is refused instead.
pub(crate) const MAX_PIXELS: i32 = 8192;

/// `URLDecoder.decode`: `+` is a space, `%XY` a byte; a bad escape is an
/// error worded as Java's.
pub(crate) fn java_url_decode(s: &str) -> Result<String, ParamError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                if i + 2 >= b.len() {
                    return Err(bad("URLDecoder: Incomplete trailing escape (%) pattern"));
                }
                let pair = &b[i + 1..i + 3];
                let digit = |c: u8| (c as char).to_digit(16);
                let (Some(h), Some(l)) = (digit(pair[0]), digit(pair[1])) else {
                    return Err(bad(format!(
                        "URLDecoder: Illegal hex characters in escape (%) pattern - For input string: \"{}\"",
                        String::from_utf8_lossy(pair)
                    )));
                };
                let v = (h * 16 + l) as u8;
                out.push(v);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// `popParam`: the last value of `name`, decoded again and trimmed.
fn pop(pairs: &[(String, String)], name: &str) -> Result<Option<String>, ParamError> {
    let Some((_, v)) = pairs.iter().rev().find(|(k, _)| k == name) else {
        return Ok(None);
    };
    let given = java_url_decode(v.trim())?;
    if given.contains('`') || given.contains("%60") || given.contains("&#96;") {
        return Err(bad(format!(
            "Parameter {name} contained a back-tick. That's a no-no."
        )));
    }
    Ok(Some(given))
}

/// `setPlotDimensions`: `wxh=<w>x<h>`, at least 100 a side.
fn dimensions(pairs: &[(String, String)]) -> Result<Option<(u32, u32)>, ParamError> {
    // getQueryStringParam: the first value.
    let Some((_, raw)) = pairs.iter().find(|(k, _)| k == "wxh") else {
        return Ok(None);
    };
    if raw.is_empty() {
        return Ok(None);
    }
    let wxh = java_url_decode(raw.trim())?;
    if !WXH_RE.is_match(&wxh) {
        return Err(bad(format!(
            "'wxh' was invalid. Must satisfy the pattern {WXH_SHOWN}"
        )));
    }
    if wxh.len() < 7 {
        return Err(bad(format!("Parameter wxh too short: {wxh}")));
    }
    let Some(x) = wxh[3..].find('x').map(|i| i + 3) else {
        return Err(bad(format!("Invalid wxh parameter: {wxh}")));
    };
    let short = |s: &str| -> Result<i32, ParamError> {
        // Short.parseShort's messages.
        let n: i64 = s
            .parse()
            .ok()
            .filter(|n: &i64| *n <= i64::from(i32::MAX))
            .ok_or_else(|| {
                bad(format!(
                    "Can't parse wxh '{wxh}': For input string: \"{s}\""
                ))
            })?;
        if n > i64::from(i16::MAX) {
            return Err(bad(format!(
                "Can't parse wxh '{wxh}': Value out of range. Value:\"{s}\" Radix:10"
            )));
        }
        Ok(n as i32)
    };
    let (w, h) = (short(&wxh[..x])?, short(&wxh[x + 1..])?);
    if w < MIN_PIXELS || h < MIN_PIXELS {
        let what = if w < MIN_PIXELS { "width" } else { "height" };
        return Err(bad(format!(
            "Invalid wxh parameter: {wxh}, {what} smaller than {MIN_PIXELS} in {w}x{h}"
        )));
    }
    if w > MAX_PIXELS || h > MAX_PIXELS {
        let what = if w > MAX_PIXELS { "width" } else { "height" };
        return Err(bad(format!(
            "Invalid wxh parameter: {wxh}, {what} larger than {MAX_PIXELS} in {w}x{h}"
        )));
    }
    Ok(Some((w as u32, h as u32)))
}

/// Reads `[min:max]` (quotes allowed, either end may be empty).
fn parse_range(v: &str) -> Range {
    let inner = v
        .find('[')
        .and_then(|a| v[a..].find(']').map(|b| &v[a + 1..a + b]))
        .unwrap_or("");
    let (lo, hi) = inner.split_once(':').unwrap_or((inner, ""));
    let num = |s: &str| s.trim().trim_matches('"').parse::<f64>().ok();
    Range {
        min: num(lo),
        max: num(hi),
    }
}

/// The first `xRRGGBB` in the value.
fn parse_color(v: &str) -> Option<[u8; 3]> {
    let m = COLOR_RE.find(v)?;
    let hex = &m.as_str()[1..];
    let c = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0);
    Some([c(0), c(2), c(4)])
}

impl PlotParams {
    /// The options of a `/q` query string (decoded once), checked in
    /// `GraphHandler`'s order.
    pub(crate) fn parse(pairs: &[(String, String)]) -> Result<PlotParams, ParamError> {
        let mut p = PlotParams {
            size: dimensions(pairs)?,
            key: Some(KeyPlace::default()),
            ..Default::default()
        };
        let checked = |name: &str, re: &Regex, msg: &dyn Fn() -> String| match pop(pairs, name)? {
            Some(v) if !re.is_match(&v) => Err(bad(msg())),
            other => Ok(other),
        };
        let range_msg = |n: &str| format!("'{n}' was invalid. Must be in the format [min:max].");
        let pattern_msg =
            |n: &str, shown: &str| format!("'{n}' was invalid. Must satisfy the pattern {shown}");
        p.yrange = checked("yrange", &RANGE_RE, &|| range_msg("yrange"))?.map(|v| parse_range(&v));
        p.y2range =
            checked("y2range", &RANGE_RE, &|| range_msg("y2range"))?.map(|v| parse_range(&v));
        p.ylabel = checked("ylabel", &LABEL_RE, &|| pattern_msg("ylabel", LABEL_SHOWN))?;
        p.y2label = checked("y2label", &LABEL_RE, &|| {
            pattern_msg("y2label", LABEL_SHOWN)
        })?;
        p.yformat = checked("yformat", &FORMAT_RE, &|| {
            pattern_msg("yformat", FORMAT_SHOWN)
        })?;
        p.y2format = checked("y2format", &FORMAT_RE, &|| {
            pattern_msg("y2format", FORMAT_SHOWN)
        })?;
        p.xformat = checked("xformat", &FORMAT_RE, &|| {
            pattern_msg("xformat", FORMAT_SHOWN)
        })?;
        p.ylog = pop(pairs, "ylog")?.is_some();
        p.y2log = pop(pairs, "y2log")?.is_some();
        if let Some(k) = checked("key", &KEY_RE, &|| pattern_msg("key", KEY_SHOWN))? {
            p.key = Some(parse_key(&k));
        }
        p.title = checked("title", &LABEL_RE, &|| pattern_msg("title", LABEL_SHOWN))?;
        let color_msg = |n: &str| format!("'{n}' was invalid. Must be a hex value e.g. 'xFFFFFF'");
        p.bgcolor =
            checked("bgcolor", &COLOR_RE, &|| color_msg("bgcolor"))?.and_then(|v| parse_color(&v));
        p.fgcolor =
            checked("fgcolor", &COLOR_RE, &|| color_msg("fgcolor"))?.and_then(|v| parse_color(&v));
        p.smooth = checked("smooth", &SMOOTH_RE, &|| pattern_msg("smooth", SMOOTH))?;
        if let Some(s) = checked("style", &STYLE_RE, &|| pattern_msg("style", STYLE))? {
            // The first word the pattern finds decides.
            let found = STYLE_RE.find(&s).map(|m| m.as_str()).unwrap_or("");
            p.style = match found {
                "points" => Style::Points,
                "circles" => Style::Circles,
                "dots" => Style::Dots,
                _ => Style::LinesPoints,
            };
        }
        // After `key`, so that `nokey` wins.
        if pop(pairs, "nokey")?.is_some() {
            p.key = None;
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(qs: &[(&str, &str)]) -> Result<PlotParams, ParamError> {
        let pairs: Vec<(String, String)> = qs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        PlotParams::parse(&pairs)
    }

    fn err(qs: &[(&str, &str)]) -> String {
        parse(qs).unwrap_err().0
    }

    #[test]
    fn defaults() {
        let p = parse(&[]).unwrap();
        assert_eq!(p.size(), (1024, 768));
        assert_eq!(p.key, Some(KeyPlace::default()));
        assert_eq!(p.style, Style::LinesPoints);
    }

    #[test]
    fn wxh_messages() {
        assert_eq!(parse(&[("wxh", "300x200")]).unwrap().size(), (300, 200));
        assert_eq!(
            err(&[("wxh", "300 200")]),
            r"'wxh' was invalid. Must satisfy the pattern ^\d+x\d+$"
        );
        assert_eq!(err(&[("wxh", "50x50")]), "Parameter wxh too short: 50x50");
        assert_eq!(
            err(&[("wxh", "1000x50")]),
            "Invalid wxh parameter: 1000x50, height smaller than 100 in 1000x50"
        );
        assert_eq!(
            err(&[("wxh", "40000x100")]),
            "Can't parse wxh '40000x100': Value out of range. Value:\"40000\" Radix:10"
        );
        assert!(err(&[("wxh", "9000x100")]).contains("larger than 8192"));
    }

    #[test]
    fn option_messages() {
        assert_eq!(
            err(&[("yrange", "0:10")]),
            "'yrange' was invalid. Must be in the format [min:max]."
        );
        assert_eq!(
            err(&[("bgcolor", "red")]),
            "'bgcolor' was invalid. Must be a hex value e.g. 'xFFFFFF'"
        );
        assert_eq!(
            err(&[("style", "lines")]),
            "'style' was invalid. Must satisfy the pattern (linespoint|points|circles|dots)"
        );
        assert_eq!(
            err(&[("title", "a`b")]),
            "Parameter title contained a back-tick. That's a no-no."
        );
        assert_eq!(
            err(&[("ylabel", "!!!")]),
            r"'ylabel' was invalid. Must satisfy the pattern [a-zA-z0-9 \-_]"
        );
        assert_eq!(
            err(&[("yformat", "%25.2f")]),
            r"'yformat' was invalid. Must satisfy the pattern (%[a-zA-Z])+[:\/]?\s?"
        );
        assert!(err(&[("title", "%zz")]).starts_with("URLDecoder: Illegal hex"));
    }

    #[test]
    fn options_read() {
        let p = parse(&[
            ("yrange", "[0:]"),
            ("y2range", "[\"-5\":1000]"),
            ("ylog", ""),
            ("key", "out left box"),
            ("bgcolor", "x112233"),
            ("style", "points"),
            ("title", "CPU+use"),
            ("smooth", "csplines"),
        ])
        .unwrap();
        assert_eq!(
            p.yrange,
            Some(Range {
                min: Some(0.0),
                max: None
            })
        );
        assert_eq!(
            p.y2range,
            Some(Range {
                min: Some(-5.0),
                max: Some(1000.0)
            })
        );
        assert!(p.ylog);
        let k = p.key.unwrap();
        assert!(k.left && k.outside && k.boxed && !k.bottom);
        assert_eq!(p.bgcolor, Some([0x11, 0x22, 0x33]));
        assert_eq!(p.style, Style::Points);
        assert_eq!(p.title.as_deref(), Some("CPU use"));
        assert_eq!(p.smoothing(), Some("csplines"));
        assert_eq!(parse(&[("key", "top"), ("nokey", "")]).unwrap().key, None);
    }
}
