//! Java's text formats, reproduced where OpenTSDB's output depends on them
//! (its CLI tools print `Double.toString`, `Date.toString` and
//! `HashMap.toString` verbatim, and scripts parse that output).

use chrono::{DateTime, Utc};

/// `Double.toString(d)`: shortest round-trip digits, plain notation for
/// 1e-3 <= |d| < 1e7 (always with a fractional part), else `d.dddE±n`.
pub(crate) fn double_to_string(d: f64) -> String {
    let mut s = String::new();
    write_double(&mut s, d);
    s
}

/// Appends `Double.toString(d)` to `out`: a query's answer writes many
/// values, each without a string of its own in the usual (plain) case.
pub(crate) fn write_double(out: &mut String, d: f64) {
    let class = JavaClass::of(d.is_nan(), d.is_infinite(), d == 0.0, d.is_sign_negative());
    if matches!(class, JavaClass::Finite) && is_plain(d) {
        write_plain_double(out, d);
    } else {
        out.push_str(&java_to_string(d, class, is_plain(d)));
    }
}

/// Whether `Double.toString` writes `d` without an exponent.
fn is_plain(d: f64) -> bool {
    (1e-3..1e7).contains(&d.abs())
}

/// A finite, non-zero `d` with 1e-3 <= |d| < 1e7, as Java writes it: the
/// shortest round-trip digits in plain notation, `.0` when whole. Ryu
/// gives the same digits as Rust's `{}` (tested below on edges and random
/// doubles) and, in this range, the same notation — `ddd.0` for a whole
/// number and `0.00ddd` above 1e-3 — at a fraction of its cost; a query's
/// answer is mostly such numbers.
fn write_plain_double(out: &mut String, d: f64) {
    let mut buf = ryu::Buffer::new();
    out.push_str(buf.format_finite(d));
}

/// `Float.toString(f)`: as [`double_to_string`], with the shortest
/// digits that read back as the same `float`.
pub(crate) fn float_to_string(f: f32) -> String {
    let class = JavaClass::of(f.is_nan(), f.is_infinite(), f == 0.0, f.is_sign_negative());
    java_to_string(f, class, (1e-3..1e7).contains(&f.abs()))
}

/// What `Double.toString` and `Float.toString` print by name.
enum JavaClass {
    NaN,
    Infinite { negative: bool },
    Zero { negative: bool },
    Finite,
}

impl JavaClass {
    fn of(nan: bool, infinite: bool, zero: bool, negative: bool) -> JavaClass {
        if nan {
            JavaClass::NaN
        } else if infinite {
            JavaClass::Infinite { negative }
        } else if zero {
            JavaClass::Zero { negative }
        } else {
            JavaClass::Finite
        }
    }
}

/// The one body of `Double.toString` and `Float.toString`: Rust's `{}`
/// and `{:e}` already give the shortest digits of each type.
fn java_to_string<F: std::fmt::Display + std::fmt::LowerExp>(
    v: F,
    class: JavaClass,
    plain: bool,
) -> String {
    match class {
        JavaClass::NaN => return "NaN".into(),
        JavaClass::Infinite { negative } => {
            return if negative { "-Infinity" } else { "Infinity" }.into();
        }
        JavaClass::Zero { negative } => return if negative { "-0.0" } else { "0.0" }.into(),
        JavaClass::Finite => {}
    }
    if plain {
        let s = format!("{v}");
        if s.contains('.') { s } else { format!("{s}.0") }
    } else {
        // `d.ddde-n` from Rust, `d.dddE-n` (with a fractional part) in Java.
        let s = format!("{v:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let mantissa = if mantissa.contains('.') {
            mantissa.to_string()
        } else {
            format!("{mantissa}.0")
        };
        format!("{mantissa}E{exp}")
    }
}

/// `String.format("%f", d)`: six decimals, rounded half-up on the decimal
/// expansion (Java's `Formatter` uses `BigDecimal` of the double).
pub(crate) fn format_f(d: f64) -> String {
    if d.is_nan() {
        return "NaN".into();
    }
    if d.is_infinite() {
        return if d > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    format!("{d:.6}")
}

/// `java.util.Date.toString()` in UTC: `Tue Jan 01 00:00:00 UTC 2013`.
/// OpenTSDB prints the JVM's default zone; rtsdb always prints UTC.
pub(crate) fn date_to_string(millis: i64) -> String {
    match DateTime::<Utc>::from_timestamp_millis(millis) {
        Some(t) => t.format("%a %b %d %H:%M:%S UTC %Y").to_string(),
        None => millis.to_string(),
    }
}

/// `String.hashCode()` over UTF-16 code units.
pub(crate) fn string_hash_code(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32))
}

/// The order in which a `java.util.HashMap` built with
/// `new HashMap<>(expected)` and filled with `keys` (in that order)
/// iterates. OpenTSDB prints tag maps this way (`{host=web01, dc=lga}`).
pub(crate) fn hashmap_order<'a>(keys: &[&'a str], expected: usize) -> Vec<&'a str> {
    // tableSizeFor(expected), then doubled whenever size > 0.75 * capacity.
    let mut cap = expected.max(1).next_power_of_two();
    for size in 1..=keys.len() {
        if size as f64 > cap as f64 * 0.75 {
            cap *= 2;
        }
    }
    let bucket = |k: &str| {
        let h = string_hash_code(k);
        let spread = h ^ ((h as u32) >> 16) as i32;
        (spread as u32 as usize) & (cap - 1)
    };
    let mut ordered: Vec<(usize, usize, &'a str)> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (bucket(k), i, *k))
        .collect();
    ordered.sort();
    ordered.into_iter().map(|(_, _, k)| k).collect()
}

/// `Map.toString()` of string pairs given in iteration order.
pub(crate) fn map_to_string<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let body: Vec<String> = pairs.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{{{}}}", body.join(", "))
}

/// `Tags.parseLong`: strict decimal (optional sign, at most 19 digits, or
/// 20 with the sign), no whitespace. The error is the
/// `NumberFormatException` message OpenTSDB sends back verbatim.
pub(crate) fn parse_long(s: &str) -> Result<i64, String> {
    // The hot path (timestamps, integer values): up to 18 plain digits
    // cannot overflow, so they need none of the checks below.
    if (1..=18).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(s.bytes().fold(0i64, |v, b| v * 10 + i64::from(b - b'0')));
    }
    // Works on chars (for the message) without allocating.
    let n = s.chars().count();
    let mut chars = s.chars();
    let Some(first) = chars.next() else {
        return Err("Empty string".into());
    };
    let mut c = first;
    if c == '+' || c == '-' {
        if n == 1 {
            return Err(format!("Just a sign, no value: {s}"));
        } else if n > 20 {
            return Err(format!("Value too long: {s}"));
        }
        c = chars.next().expect("n > 1");
    } else if n > 19 {
        return Err(format!("Value too long: {s}"));
    }
    // Accumulated negated, as Java does, so that i64::MIN parses.
    let mut v: i64 = 0;
    loop {
        if c.is_ascii_digit() {
            v = v.wrapping_sub(c as i64 - '0' as i64);
        } else {
            return Err(format!("Invalid character '{c}' in {s}"));
        }
        match chars.next() {
            None => break,
            Some(next) => {
                v = v.wrapping_mul(10);
                c = next;
            }
        }
    }
    if v > 0 {
        Err(format!("Overflow in {s}"))
    } else if first == '-' {
        Ok(v)
    } else if v == i64::MIN {
        Err(format!("Overflow in {s}"))
    } else {
        Ok(-v)
    }
}

/// Java's `Integer.parseInt` (decimal, optional sign, no whitespace), with
/// its `NumberFormatException` message, which OpenTSDB's RPCs send back as
/// error details.
pub(crate) fn parse_int(s: &str) -> Result<i32, String> {
    let err = || format!("For input string: \"{s}\"");
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err());
    }
    s.parse::<i32>().map_err(|_| err())
}

/// `Tags.looksLikeInteger`: no `.`, `e` or `E`.
pub(crate) fn looks_like_integer(s: &str) -> bool {
    !s.bytes().any(|b| matches!(b, b'.' | b'e' | b'E'))
}

/// `Double.parseDouble` for decimal input: surrounding whitespace (chars
/// up to U+0020) trimmed, optional sign, `NaN`, `Infinity`, digits with an
/// optional fraction and exponent, optional `f`/`F`/`d`/`D` suffix. Hex
/// floats are not supported. The error is Java's message.
pub(crate) fn parse_double(s: &str) -> Result<f64, String> {
    let bad = || format!("For input string: \"{s}\"");
    let t = s.trim_matches(|c: char| c <= ' ');
    if t.is_empty() {
        return Err(if s.is_empty() {
            "empty String".into()
        } else {
            bad()
        });
    }
    let (neg, body) = match t.as_bytes()[0] {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let signed = |v: f64| if neg { -v } else { v };
    match body {
        "NaN" => return Ok(f64::NAN),
        "Infinity" => return Ok(signed(f64::INFINITY)),
        _ => {}
    }
    let body = body.strip_suffix(['f', 'F', 'd', 'D']).unwrap_or(body);
    let b = body.as_bytes();
    let mut i = 0;
    let int_digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
    i += int_digits;
    let mut frac_digits = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        frac_digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        i += frac_digits;
    }
    if int_digits + frac_digits == 0 {
        return Err(bad());
    }
    let exponent = matches!(b.get(i), Some(b'e' | b'E'));
    if exponent {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let exp_digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        if exp_digits == 0 {
            return Err(bad());
        }
        i += exp_digits;
    }
    if i != b.len() {
        return Err(bad());
    }
    if !exponent && let Some(v) = short_decimal(b, int_digits, frac_digits) {
        return Ok(signed(v));
    }
    body.parse::<f64>().map(signed).map_err(|_| bad())
}

/// Digits, a dot and digits (`b`, checked by the caller: `int_digits`
/// then, after a dot, `frac_digits`; no exponent) read exactly when they
/// are at most 15 significant digits, the usual value of a point: both
/// the digits as an integer (below 2^53) and the power of ten (at most
/// 10^15) are exact doubles, so their quotient, rounded once by IEEE
/// division, is the correctly rounded value `str::parse` gives too
/// (Clinger's fast path). `None` for anything longer.
fn short_decimal(b: &[u8], int_digits: usize, frac_digits: usize) -> Option<f64> {
    const POW10: [f64; 16] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
    ];
    if int_digits + frac_digits > 15 {
        return None;
    }
    let mantissa = b
        .iter()
        .filter(|c| c.is_ascii_digit())
        .fold(0u64, |v, c| v * 10 + u64::from(c - b'0'));
    Some(mantissa as f64 / POW10[frac_digits])
}

/// `HashMap.toString()` of tags as OpenTSDB built the map (insertion in
/// arrival order, default capacity).
pub(crate) fn java_tags(tags: &[(&str, &str)]) -> String {
    let keys: Vec<&str> = tags.iter().map(|t| t.0).collect();
    let order = hashmap_order(&keys, 16);
    map_to_string(
        order
            .iter()
            .map(|k| *tags.iter().find(|t| t.0 == *k).expect("key from tags")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_like_java() {
        assert_eq!(double_to_string(1.0), "1.0");
        assert_eq!(double_to_string(42.5), "42.5");
        assert_eq!(double_to_string(0.1), "0.1");
        assert_eq!(double_to_string(0.1f32 as f64), "0.10000000149011612");
        assert_eq!(double_to_string(1e7), "1.0E7");
        assert_eq!(double_to_string(1.0E10), "1.0E10");
        assert_eq!(double_to_string(1234567.0), "1234567.0");
        assert_eq!(double_to_string(0.001), "0.001");
        assert_eq!(double_to_string(0.0001), "1.0E-4");
        assert_eq!(double_to_string(-2.5e-5), "-2.5E-5");
        assert_eq!(double_to_string(f64::NAN), "NaN");
        assert_eq!(format_f(1.5), "1.500000");
    }

    /// The text `write_double` wrote before Ryu: Rust's shortest digits.
    fn std_double(d: f64) -> String {
        let class = JavaClass::of(d.is_nan(), d.is_infinite(), d == 0.0, d.is_sign_negative());
        java_to_string(d, class, is_plain(d))
    }

    fn written(d: f64) -> String {
        let mut s = String::from("x");
        write_double(&mut s, d);
        s.split_off(1)
    }

    #[test]
    fn doubles_at_the_edges_as_before() {
        let mut edges = vec![
            0.0,
            f64::NAN,
            f64::INFINITY,
            f64::MIN_POSITIVE,
            f64::MIN_POSITIVE / 3.0,
            5e-324,
            f64::MAX,
            f64::EPSILON,
            1e-3,
            1e7,
            9_999_999.999_999_998,
            9_999_999.0,
            0.001_000_000_000_000_1,
            0.1 + 0.2,
            1.0 / 3.0,
            2f64.powi(53),
            2f64.powi(53) + 2.0,
            2f64.powi(63),
            1e16,
            1e21,
            1e22,
            123_456.789,
        ];
        // The bounds of the plain range and the doubles next to them.
        for b in [1e-3, 1e7, 1.0, 10.0, 0.01, 0.1, 1e6] {
            let bits = f64::to_bits(b);
            edges.extend([f64::from_bits(bits - 1), b, f64::from_bits(bits + 1)]);
        }
        // Powers of ten and whole numbers across the range.
        for e in -330..=310 {
            edges.push(format!("1e{e}").parse().unwrap());
            edges.push(format!("9.999999999999999e{e}").parse().unwrap());
        }
        edges.extend((0..2000).map(|i| i as f64 * 4999.5));
        for d in edges {
            for v in [d, -d] {
                assert_eq!(written(v), std_double(v), "{v:e}");
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(20_000))]
        #[test]
        fn any_double_as_before(bits: u64) {
            let d = f64::from_bits(bits);
            proptest::prop_assert_eq!(written(d), std_double(d));
        }

        #[test]
        fn plain_doubles_as_before(m in 1e-3f64..1e7, neg: bool) {
            let d = if neg { -m } else { m };
            proptest::prop_assert_eq!(written(d), std_double(d));
        }

        #[test]
        fn short_decimals_as_before(n in -10_000_000_000i64..10_000_000_000, scale in 0u32..10) {
            // Values as gauges store them: few digits, many decimal places.
            let d = n as f64 / 10f64.powi(scale as i32);
            proptest::prop_assert_eq!(written(d), std_double(d));
        }
    }

    #[test]
    fn dates_like_java() {
        assert_eq!(
            date_to_string(1356998400000),
            "Tue Jan 01 00:00:00 UTC 2013"
        );
    }

    #[test]
    fn hashmap_iteration_order() {
        assert_eq!(string_hash_code("host"), 3208616);
        assert_eq!(string_hash_code("dc"), 3199);
        let mut order = hashmap_order(&["host", "dc"], 2);
        order.sort();
        assert_eq!(order, vec!["dc", "host"]);
        // Java: new HashMap<>(2) with put("type","put"), put("fqdn","x")
        // prints {type=put, fqdn=x} (OpenTSDB's own CLI doc example).
        assert_eq!(hashmap_order(&["fqdn", "type"], 2), vec!["type", "fqdn"]);
        assert_eq!(map_to_string([("a", "1"), ("b", "2")]), "{a=1, b=2}");
    }
    #[test]
    fn parse_long_like_tags() {
        assert_eq!(parse_long("42"), Ok(42));
        assert_eq!(parse_long("-42"), Ok(-42));
        assert_eq!(parse_long("+7"), Ok(7));
        assert_eq!(parse_long("9223372036854775807"), Ok(i64::MAX));
        assert_eq!(parse_long("-9223372036854775808"), Ok(i64::MIN));
        assert_eq!(
            parse_long("9223372036854775808").unwrap_err(),
            "Overflow in 9223372036854775808"
        );
        assert_eq!(
            parse_long("99999999999999999999").unwrap_err(),
            "Value too long: 99999999999999999999"
        );
        assert_eq!(parse_long("").unwrap_err(), "Empty string");
        assert_eq!(parse_long("-").unwrap_err(), "Just a sign, no value: -");
        assert_eq!(
            parse_long("notatime").unwrap_err(),
            "Invalid character 'n' in notatime"
        );
        assert_eq!(
            parse_long("NaN").unwrap_err(),
            "Invalid character 'N' in NaN"
        );
        assert_eq!(parse_long(" 1").unwrap_err(), "Invalid character ' ' in  1");
    }

    #[test]
    fn short_decimals_read_as_str_parse_reads_them() {
        // The fast path must give the very bits the full parser gives.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let digits = (x % 17) as usize;
            let dot = ((x >> 8) % (digits as u64 + 1)) as usize;
            let n = (x >> 16) % 10u64.pow(digits.min(17) as u32).max(1);
            let mut text = format!("{n:0digits$}");
            text.insert(dot, '.');
            if text == "." {
                continue;
            }
            let want: f64 = text.parse().unwrap();
            assert_eq!(
                parse_double(&text).map(f64::to_bits),
                Ok(want.to_bits()),
                "{text}"
            );
            assert_eq!(parse_double(&format!("-{text}")), Ok(-want), "-{text}");
        }
    }

    /// Up to 18 digits take the fast path; the edges past it are in
    /// `parse_long_like_tags`.
    #[test]
    fn parse_long_fast_and_slow_agree() {
        for s in ["0", "7", "1356998400", "000012", "999999999999999999"] {
            assert_eq!(parse_long(s), s.parse::<i64>().map_err(|e| e.to_string()));
        }
        assert_eq!(
            parse_long("12a").unwrap_err(),
            "Invalid character 'a' in 12a"
        );
    }

    #[test]
    fn parse_double_like_java() {
        assert_eq!(parse_double("1.5"), Ok(1.5));
        assert_eq!(parse_double(" 1.5f "), Ok(1.5));
        assert_eq!(parse_double("1e5"), Ok(1e5));
        assert_eq!(parse_double(".5"), Ok(0.5));
        assert_eq!(parse_double("5."), Ok(5.0));
        assert_eq!(parse_double("-2.5d"), Ok(-2.5));
        assert_eq!(parse_double("1e999"), Ok(f64::INFINITY));
        assert!(parse_double("NaN").unwrap().is_nan());
        assert_eq!(parse_double("-Infinity"), Ok(f64::NEG_INFINITY));
        assert_eq!(
            parse_double("inf").unwrap_err(),
            "For input string: \"inf\""
        );
        assert_eq!(
            parse_double("1.2.3").unwrap_err(),
            "For input string: \"1.2.3\""
        );
        assert!(parse_double("e5").is_err());
        assert!(parse_double("1e").is_err());
        assert!(parse_double(".").is_err());
        assert_eq!(parse_double("").unwrap_err(), "empty String");
        assert_eq!(
            parse_double("-0.0").map(f64::to_bits),
            Ok((-0.0f64).to_bits())
        );
        assert_eq!(parse_double("0.1"), Ok(0.1));
        assert_eq!(parse_double("123456789012345.6"), Ok(123456789012345.6));
        assert!(looks_like_integer("42"));
        assert!(!looks_like_integer("4.2"));
        assert!(!looks_like_integer("1E3"));
    }

    #[test]
    fn integer_parse_int() {
        assert_eq!(parse_int("+7"), Ok(7));
        assert_eq!(parse_int("-0012"), Ok(-12));
        assert_eq!(parse_int("x"), Err("For input string: \"x\"".into()));
        assert!(parse_int(" 1").is_err());
        assert!(parse_int("").is_err());
        assert!(parse_int("2147483648").is_err());
        assert_eq!(parse_int("-2147483648"), Ok(i32::MIN));
    }
}
