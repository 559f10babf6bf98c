//! JSON values as OpenTSDB reads them: Jackson 2.9's default coercions
//! for typed fields, which clients rely on (OpenTSDB's own documentation
//! sends `"rate":"true"` in a query). Used with `#[serde(deserialize_with)]`
//! on the request objects' typed fields.
//!
//! What Jackson 2.9 (`StdDeserializer._parseBooleanPrimitive`,
//! `_parseLongPrimitive`, `StringDeserializer`) accepts with its default
//! features, and so what these accept:
//! - a boolean field: `true`/`false`; the strings `"true"`, `"True"`,
//!   `"false"`, `"False"` (trimmed) and `""` (false); an integer (0 is
//!   false, anything else true); `null` (false). Any other string is
//!   refused: `only "true" or "false" recognized`.
//! - an integer field: an integer; a float, truncated
//!   (`ACCEPT_FLOAT_AS_INT`); a string holding an integer (trimmed; `""`
//!   is 0); `null` (0). Booleans are refused.
//! - a string field: a string; a number or a boolean as its JSON text;
//!   `null` (none). Arrays and objects are refused.

use std::fmt;

use serde::Deserializer;
use serde::de::{self, Visitor};

struct Bool;

impl Visitor<'_> for Bool {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a boolean")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<bool, E> {
        Ok(v)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<bool, E> {
        Ok(v != 0)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<bool, E> {
        Ok(v != 0)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        match v.trim() {
            "true" | "True" => Ok(true),
            "false" | "False" | "" => Ok(false),
            other => Err(E::custom(format!(
                "Cannot deserialize value of type `boolean` from String \"{other}\": only \"true\" or \"false\" recognized"
            ))),
        }
    }
    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_none<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
}

/// A boolean field.
pub fn boolean<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    d.deserialize_any(Bool)
}

struct Long;

impl Visitor<'_> for Long {
    type Value = i64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an integer")
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<i64, E> {
        Ok(v)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<i64, E> {
        i64::try_from(v).map_err(|_| {
            E::custom(format!(
                "Numeric value ({v}) out of range of long (-9223372036854775808 - 9223372036854775807)"
            ))
        })
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<i64, E> {
        // Java's (long) cast: truncation, saturating, NaN to 0.
        Ok(v as i64)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<i64, E> {
        let t = v.trim();
        if t.is_empty() {
            return Ok(0);
        }
        t.parse::<i64>().map_err(|_| {
            E::custom(format!(
                "Cannot deserialize value of type `long` from String \"{v}\": not a valid Long value"
            ))
        })
    }
    fn visit_unit<E: de::Error>(self) -> Result<i64, E> {
        Ok(0)
    }
    fn visit_none<E: de::Error>(self) -> Result<i64, E> {
        Ok(0)
    }
}

/// An integer (`long`) field.
pub fn long<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    d.deserialize_any(Long)
}

struct Text;

impl Visitor<'_> for Text {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<String>, E> {
        Ok(Some(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Option<String>, E> {
        Ok(Some(v))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Option<String>, E> {
        Ok(Some(v.to_string()))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Option<String>, E> {
        Ok(Some(v.to_string()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Option<String>, E> {
        Ok(Some(v.to_string()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Option<String>, E> {
        // serde_json's shortest text for the double, as Jackson's
        // `getValueAsString` gives the token's text for plain decimals.
        Ok(Some(
            serde_json::Number::from_f64(v).map_or_else(|| v.to_string(), |n| n.to_string()),
        ))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<String>, E> {
        Ok(None)
    }
    fn visit_none<E: de::Error>(self) -> Result<Option<String>, E> {
        Ok(None)
    }
}

/// An optional string field (`null` or absent: `None`).
pub fn string_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    d.deserialize_any(Text)
}

/// A string field that is never `null` in the object (`null` reads as "").
pub fn string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(d.deserialize_any(Text)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Deserialize, Debug, Default)]
    #[serde(default)]
    struct T {
        #[serde(deserialize_with = "super::boolean")]
        b: bool,
        #[serde(deserialize_with = "super::long")]
        n: i64,
        #[serde(deserialize_with = "super::string_opt")]
        s: Option<String>,
    }

    fn t(json: &str) -> Result<T, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn jackson_coercions() {
        assert!(t(r#"{"b":"true"}"#).unwrap().b);
        assert!(t(r#"{"b":" True "}"#).unwrap().b);
        assert!(!t(r#"{"b":"false"}"#).unwrap().b);
        assert!(!t(r#"{"b":""}"#).unwrap().b);
        assert!(t(r#"{"b":1}"#).unwrap().b);
        assert!(!t(r#"{"b":0}"#).unwrap().b);
        assert!(!t(r#"{"b":null}"#).unwrap().b);
        assert!(
            t(r#"{"b":"yes"}"#)
                .unwrap_err()
                .contains("only \"true\" or \"false\"")
        );
        assert!(t(r#"{"b":[true]}"#).is_err());
        assert_eq!(t(r#"{"n":"42"}"#).unwrap().n, 42);
        assert_eq!(t(r#"{"n":" -7 "}"#).unwrap().n, -7);
        assert_eq!(t(r#"{"n":3.9}"#).unwrap().n, 3);
        assert_eq!(t(r#"{"n":""}"#).unwrap().n, 0);
        assert!(
            t(r#"{"n":"4x"}"#)
                .unwrap_err()
                .contains("not a valid Long value")
        );
        assert!(t(r#"{"n":true}"#).is_err());
        assert_eq!(t(r#"{"s":12}"#).unwrap().s.as_deref(), Some("12"));
        assert_eq!(t(r#"{"s":true}"#).unwrap().s.as_deref(), Some("true"));
        assert_eq!(t(r#"{"s":null}"#).unwrap().s, None);
        assert!(t(r#"{"s":{}}"#).is_err());
    }
}
