//! OTLP/JSON's scalar encodings, for serde's `deserialize_with`: the
//! protobuf JSON mapping writes 64-bit integers as decimal strings
//! (numbers are taken too), doubles as numbers or `"NaN"`, `"Infinity"`,
//! `"-Infinity"`, enums as numbers (their names are taken too), and any
//! field may be `null`, which means its default. Anything else is an
//! error that names what was expected.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};

/// A JSON scalar as written.
enum Scalar {
    Null,
    Bool(bool),
    Unsigned(u64),
    Signed(i64),
    Float(f64),
    Text(String),
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a number, a string, a boolean or null")
    }
    fn visit_unit<E>(self) -> Result<Scalar, E> {
        Ok(Scalar::Null)
    }
    fn visit_none<E>(self) -> Result<Scalar, E> {
        Ok(Scalar::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Scalar, D::Error> {
        d.deserialize_any(ScalarVisitor)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Scalar, E> {
        Ok(Scalar::Bool(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Scalar, E> {
        Ok(Scalar::Unsigned(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Scalar, E> {
        Ok(Scalar::Signed(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Scalar, E> {
        Ok(Scalar::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Scalar, E> {
        Ok(Scalar::Text(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Scalar, E> {
        Ok(Scalar::Text(v))
    }
}

fn scalar<'de, D: Deserializer<'de>>(d: D) -> Result<Scalar, D::Error> {
    d.deserialize_any(ScalarVisitor)
}

fn wrong<E: de::Error>(what: &str) -> E {
    E::custom(format!("expected {what}"))
}

/// An unsigned 64-bit integer (`fixed64`, `uint64`).
pub(super) fn u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    match scalar(d)? {
        Scalar::Null => Ok(0),
        Scalar::Unsigned(v) => Ok(v),
        Scalar::Signed(v) => u64::try_from(v).map_err(|_| wrong("an unsigned integer")),
        Scalar::Text(s) => s
            .trim()
            .parse()
            .map_err(|_| wrong("an unsigned integer as a decimal string")),
        Scalar::Float(f) if f.fract() == 0.0 && (0.0..1.8e19).contains(&f) => Ok(f as u64),
        _ => Err(wrong("an unsigned integer")),
    }
}

/// A `uint32`.
pub(super) fn u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let v = u64(d)?;
    u32::try_from(v).map_err(|_| wrong("a 32-bit unsigned integer"))
}

/// A signed 64-bit integer (`int64`, `sfixed64`).
pub(super) fn i64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    match scalar(d)? {
        Scalar::Null => Ok(0),
        Scalar::Signed(v) => Ok(v),
        Scalar::Unsigned(v) => i64::try_from(v).map_err(|_| wrong("a 64-bit integer")),
        Scalar::Text(s) => s
            .trim()
            .parse()
            .map_err(|_| wrong("an integer as a decimal string")),
        Scalar::Float(f) if f.fract() == 0.0 && (-9.2e18..9.2e18).contains(&f) => Ok(f as i64),
        _ => Err(wrong("an integer")),
    }
}

/// A `double`.
pub(super) fn f64<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(opt_f64(d)?.unwrap_or(0.0))
}

/// An `optional double`: `None` when absent or `null`.
pub(super) fn opt_f64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    match scalar(d)? {
        Scalar::Null => Ok(None),
        Scalar::Float(f) => Ok(Some(f)),
        Scalar::Unsigned(v) => Ok(Some(v as f64)),
        Scalar::Signed(v) => Ok(Some(v as f64)),
        Scalar::Text(s) => match s.as_str() {
            "NaN" => Ok(Some(f64::NAN)),
            "Infinity" => Ok(Some(f64::INFINITY)),
            "-Infinity" => Ok(Some(f64::NEG_INFINITY)),
            t => t
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| wrong("a number, NaN, Infinity or -Infinity")),
        },
        Scalar::Bool(_) => Err(wrong("a number")),
    }
}

/// An `int64` that may be absent (a oneof member).
pub(super) fn opt_i64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    match scalar(d)? {
        Scalar::Null => Ok(None),
        s => i64(ScalarDeserializer(s))
            .map(Some)
            .map_err(|_| wrong("an integer")),
    }
}

/// A `string` that may be absent (a oneof member).
pub(super) fn opt_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match scalar(d)? {
        Scalar::Null => Ok(None),
        Scalar::Text(s) => Ok(Some(s)),
        _ => Err(wrong("a string")),
    }
}

/// A `bool` that may be absent (a oneof member).
pub(super) fn opt_boolean<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    match scalar(d)? {
        Scalar::Null => Ok(None),
        Scalar::Bool(b) => Ok(Some(b)),
        _ => Err(wrong("true or false")),
    }
}

/// A `bytes` that may be absent (a oneof member).
pub(super) fn opt_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
    match scalar(d)? {
        Scalar::Null => Ok(None),
        s => bytes_text(ScalarDeserializer(s))
            .map(Some)
            .map_err(|_| wrong("base64 text")),
    }
}

/// A `bool`.
pub(super) fn boolean<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    match scalar(d)? {
        Scalar::Null => Ok(false),
        Scalar::Bool(b) => Ok(b),
        _ => Err(wrong("true or false")),
    }
}

/// A `string`.
pub(super) fn string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    match scalar(d)? {
        Scalar::Null => Ok(String::new()),
        Scalar::Text(s) => Ok(s),
        _ => Err(wrong("a string")),
    }
}

/// A `bytes` field: base64 text in OTLP/JSON (standard or URL-safe
/// alphabet, padding optional).
pub(super) fn bytes_text<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    let text = string(d)?;
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes().filter(|&c| c != b'=') {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return Err(wrong("base64 text")),
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

/// `AggregationTemporality`: its number, or its name (UNSPECIFIED 0,
/// DELTA 1, CUMULATIVE 2, as `proto::TEMPORALITY_*`).
pub(super) fn temporality<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    match scalar(d)? {
        Scalar::Null => Ok(0),
        Scalar::Unsigned(v) => i32::try_from(v).map_err(|_| wrong("a temporality")),
        Scalar::Signed(v) => i32::try_from(v).map_err(|_| wrong("a temporality")),
        Scalar::Text(s) => match s.as_str() {
            "AGGREGATION_TEMPORALITY_UNSPECIFIED" => Ok(0),
            "AGGREGATION_TEMPORALITY_DELTA" => Ok(1),
            "AGGREGATION_TEMPORALITY_CUMULATIVE" => Ok(2),
            _ => Err(wrong("an AggregationTemporality")),
        },
        _ => Err(wrong("an AggregationTemporality")),
    }
}

/// A repeated field of messages: `null` is empty.
pub(super) fn list<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

/// A repeated field whose elements are only counted: one empty entry
/// each.
pub(super) fn count_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<u8>>, D::Error> {
    let n = Option::<Vec<IgnoredAny>>::deserialize(d)?.map_or(0, |v| v.len());
    Ok(vec![Vec::new(); n])
}

/// Elements read by a scalar reader, in a sequence (or `null`).
struct ScalarList<T>(fn(Scalar) -> Result<T, &'static str>, PhantomData<T>);

impl<'de, T> Visitor<'de> for ScalarList<T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of numbers")
    }
    fn visit_unit<E>(self) -> Result<Vec<T>, E> {
        Ok(Vec::new())
    }
    fn visit_none<E>(self) -> Result<Vec<T>, E> {
        Ok(Vec::new())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Vec<T>, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(s) = seq.next_element_seed(ScalarSeed)? {
            out.push((self.0)(s).map_err(wrong::<A::Error>)?);
        }
        Ok(out)
    }
}

struct ScalarSeed;

impl<'de> de::DeserializeSeed<'de> for ScalarSeed {
    type Value = Scalar;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Scalar, D::Error> {
        scalar(d)
    }
}

/// A `repeated fixed64` (bucket counts).
pub(super) fn u64_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
    let one = |s: Scalar| -> Result<u64, &'static str> {
        u64(ScalarDeserializer(s)).map_err(|_| "unsigned integers as decimal strings")
    };
    d.deserialize_any(ScalarList(one, PhantomData))
}

/// A `repeated double` (bucket bounds).
pub(super) fn f64_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    let one = |s: Scalar| -> Result<f64, &'static str> {
        f64(ScalarDeserializer(s)).map_err(|_| "numbers")
    };
    d.deserialize_any(ScalarList(one, PhantomData))
}

/// A [`Scalar`] read again by the readers above.
struct ScalarDeserializer(Scalar);

impl<'de> Deserializer<'de> for ScalarDeserializer {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Scalar::Null => v.visit_unit(),
            Scalar::Bool(b) => v.visit_bool(b),
            Scalar::Unsigned(n) => v.visit_u64(n),
            Scalar::Signed(n) => v.visit_i64(n),
            Scalar::Float(f) => v.visit_f64(f),
            Scalar::Text(s) => v.visit_string(s),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}
