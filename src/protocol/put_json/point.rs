//! The serde side of a `/api/put` point, read as OpenTSDB's Jackson reads
//! an `IncomingDataPoint`: strings that take numbers and booleans as their
//! text ([`JavaString`]), tags whose null values are kept ([`TagList`]),
//! timestamps as numbers or numeric strings ([`JsonTimestamp`]) and the
//! value's text ([`value_text`]). `/api/rollup` reads its points with the
//! same types.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// A JSON scalar read as Jackson reads it into a `String` field: strings
/// as-is, numbers and booleans as their text, `null` as absent.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JavaString<'a>(pub Option<Cow<'a, str>>);

impl<'de: 'a, 'a> Deserialize<'de> for JavaString<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = JavaString<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, number, boolean or null")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(JavaString(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(JavaString(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(JavaString(Some(Cow::Owned(v))))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
                Ok(JavaString(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
                Ok(JavaString(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
                Ok(JavaString(Some(Cow::Owned(
                    crate::model::java::double_to_string(v),
                ))))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
                Ok(JavaString(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(JavaString(None))
            }
            fn visit_none<E>(self) -> Result<Self::Value, E> {
                Ok(JavaString(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// Tags in arrival order; a repeated key keeps its last value (as
/// Jackson filling a `HashMap`).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TagList<'a>(pub Vec<(Cow<'a, str>, Option<Cow<'a, str>>)>);

impl<'de: 'a, 'a> Deserialize<'de> for TagList<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TagList<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of tag names to values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                let mut out: Vec<(Cow<'de, str>, Option<Cow<'de, str>>)> = Vec::new();
                while let Some((k, v)) = m.next_entry::<Cow<'de, str>, JavaString<'de>>()? {
                    match out.iter_mut().find(|e| e.0 == k) {
                        Some(e) => e.1 = v.0,
                        None => out.push((k, v.0)),
                    }
                }
                Ok(TagList(out))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(TagList::default())
            }
        }
        d.deserialize_any(V)
    }
}

/// `IncomingDataPoint.timestamp`: a JSON number (fractions truncated), a
/// string of digits, or null/absent (0).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct JsonTimestamp(pub i64);

impl<'de> Deserialize<'de> for JsonTimestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = JsonTimestamp;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a timestamp")
            }
            fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
                Ok(JsonTimestamp(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                i64::try_from(v)
                    .map(JsonTimestamp)
                    .map_err(|_| E::custom(format!("Numeric value ({v}) out of range of long")))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
                Ok(JsonTimestamp(v as i64))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                let t = v.trim();
                if t.is_empty() {
                    return Ok(JsonTimestamp(0));
                }
                t.parse::<i64>().map(JsonTimestamp).map_err(|_| {
                    E::custom(format!(
                        "Cannot deserialize value of type `long` from String \"{v}\": not a valid Long value"
                    ))
                })
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(JsonTimestamp(0))
            }
        }
        d.deserialize_any(V)
    }
}

/// One point of the body as written by the client.
#[derive(Debug, Deserialize)]
pub(crate) struct JsonPoint<'a> {
    #[serde(borrow, default)]
    pub metric: Option<JavaString<'a>>,
    #[serde(default)]
    pub timestamp: JsonTimestamp,
    #[serde(borrow, default)]
    pub value: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub tags: Option<TagList<'a>>,
}

/// A body that is not a list of points.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BadBody(pub String);

/// The `value` text as Jackson would coerce it into a `String`; a bare
/// number is borrowed from the body, not copied.
pub(crate) fn value_text(raw: Option<&RawValue>) -> Result<Option<Cow<'_, str>>, BadBody> {
    let Some(raw) = raw else { return Ok(None) };
    let t = raw.get().trim();
    match t.as_bytes().first() {
        Some(b'"') => serde_json::from_str::<String>(t)
            .map(|s| Some(Cow::Owned(s)))
            .map_err(|e| BadBody(e.to_string())),
        Some(b'{') | Some(b'[') => Err(BadBody(
            "Cannot deserialize value of type `java.lang.String` from an object or array (field \"value\")".into(),
        )),
        _ if t == "null" => Ok(None),
        _ => Ok(Some(Cow::Borrowed(t))),
    }
}
