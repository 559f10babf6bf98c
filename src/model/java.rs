//! Java's text formats, reproduced where OpenTSDB's output depends on them
//! (its CLI tools print `Double.toString`, `Date.toString` and
//! `HashMap.toString` verbatim, and scripts parse that output).

use chrono::{DateTime, Utc};

/// `Double.toString(d)`: shortest round-trip digits, plain notation for
/// 1e-3 <= |d| < 1e7 (always with a fractional part), else `d.dddE±n`.
pub fn double_to_string(d: f64) -> String {
    if d.is_nan() {
        return "NaN".into();
    }
    if d.is_infinite() {
        return if d > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if d == 0.0 {
        return if d.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    let abs = d.abs();
    if (1e-3..1e7).contains(&abs) {
        let s = format!("{d}");
        if s.contains('.') { s } else { format!("{s}.0") }
    } else {
        // Rust's `{:e}` gives the shortest digits as `d.ddde-n`.
        let s = format!("{d:e}");
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
pub fn format_f(d: f64) -> String {
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
pub fn date_to_string(millis: i64) -> String {
    match DateTime::<Utc>::from_timestamp_millis(millis) {
        Some(t) => t.format("%a %b %d %H:%M:%S UTC %Y").to_string(),
        None => millis.to_string(),
    }
}

/// `String.hashCode()` over UTF-16 code units.
pub fn string_hash_code(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32))
}

/// The order in which a `java.util.HashMap` built with
/// `new HashMap<>(expected)` and filled with `keys` (in that order)
/// iterates. OpenTSDB prints tag maps this way (`{host=web01, dc=lga}`).
pub fn hashmap_order<'a>(keys: &[&'a str], expected: usize) -> Vec<&'a str> {
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
pub fn map_to_string<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let body: Vec<String> = pairs.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{{{}}}", body.join(", "))
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
}
