//! Unique IDs: the small integers that stand in for metric names, tag keys
//! and tag values in every row key.

use std::fmt;

use thiserror::Error;

/// The three independent UID namespaces, each with its own counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UidKind {
    Metric,
    TagKey,
    TagValue,
}

impl UidKind {
    pub const ALL: [UidKind; 3] = [UidKind::Metric, UidKind::TagKey, UidKind::TagValue];

    /// The qualifier OpenTSDB uses in `tsdb-uid` (`metrics`, `tagk`, `tagv`);
    /// also the word its CLI and error messages print.
    pub fn qualifier(self) -> &'static str {
        match self {
            UidKind::Metric => "metrics",
            UidKind::TagKey => "tagk",
            UidKind::TagValue => "tagv",
        }
    }

    /// The UIDMeta qualifier (`metric_meta`, ...). OpenTSDB's docs say
    /// `metrics_meta`; its code writes `metric_meta`, which is what we follow.
    pub fn meta_qualifier(self) -> &'static str {
        match self {
            UidKind::Metric => "metric_meta",
            UidKind::TagKey => "tagk_meta",
            UidKind::TagValue => "tagv_meta",
        }
    }

    /// The upper-case type name used in UIDMeta JSON.
    pub fn type_name(self) -> &'static str {
        match self {
            UidKind::Metric => "METRIC",
            UidKind::TagKey => "TAGK",
            UidKind::TagValue => "TAGV",
        }
    }

    /// Parses the kind names users type: `metrics`/`metric`, `tagk`, `tagv`
    /// (case-insensitive, as OpenTSDB's `UniqueId.stringToUniqueIdType`).
    pub fn parse(s: &str) -> Option<UidKind> {
        match s.to_ascii_lowercase().as_str() {
            "metric" | "metrics" => Some(UidKind::Metric),
            "tagk" => Some(UidKind::TagKey),
            "tagv" => Some(UidKind::TagValue),
            _ => None,
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            UidKind::Metric => 0,
            UidKind::TagKey => 1,
            UidKind::TagValue => 2,
        }
    }
}

impl fmt::Display for UidKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.qualifier())
    }
}

/// Byte width of one UID kind: 1 to 8, fixed when a store is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UidWidth(u8);

impl UidWidth {
    pub const DEFAULT: UidWidth = UidWidth(3);

    pub fn new(bytes: u8) -> Result<UidWidth, UidError> {
        if (1..=8).contains(&bytes) {
            Ok(UidWidth(bytes))
        } else {
            Err(UidError::BadWidth(bytes as u64))
        }
    }

    pub fn bytes(self) -> usize {
        self.0 as usize
    }

    /// Largest id that fits: 2^(8·width) − 1.
    pub fn max_id(self) -> u64 {
        if self.0 == 8 {
            u64::MAX
        } else {
            (1u64 << (8 * self.0 as u32)) - 1
        }
    }
}

impl Default for UidWidth {
    fn default() -> Self {
        UidWidth::DEFAULT
    }
}

/// Widths of the three kinds, as recorded in the store header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct UidWidths {
    pub metric: UidWidth,
    pub tagk: UidWidth,
    pub tagv: UidWidth,
}

impl UidWidths {
    pub fn of(&self, kind: UidKind) -> UidWidth {
        match kind {
            UidKind::Metric => self.metric,
            UidKind::TagKey => self.tagk,
            UidKind::TagValue => self.tagv,
        }
    }
}

/// A UID value. Always carried with its width when turned into bytes, so a
/// value can never be written with the wrong width by accident.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Uid(u64);

#[derive(Debug, Error, PartialEq, Eq)]
pub enum UidError {
    #[error("UID width must be between 1 and 8 bytes, got {0}")]
    BadWidth(u64),
    #[error("UID {id} does not fit on {width} bytes (max {max})")]
    OutOfRange { id: u64, width: usize, max: u64 },
    #[error("UID 0 is reserved and never assigned")]
    Zero,
    #[error("wrong UID length: expected {expected} bytes, got {got}")]
    WrongLength { expected: usize, got: usize },
    #[error("invalid UID '{input}': {reason}")]
    Parse { input: String, reason: String },
}

impl Uid {
    /// A UID for `width`; 0 is reserved (OpenTSDB's counters start at 1).
    pub fn new(id: u64, width: UidWidth) -> Result<Uid, UidError> {
        if id == 0 {
            return Err(UidError::Zero);
        }
        if id > width.max_id() {
            return Err(UidError::OutOfRange {
                id,
                width: width.bytes(),
                max: width.max_id(),
            });
        }
        Ok(Uid(id))
    }

    pub fn id(self) -> u64 {
        self.0
    }

    /// Big-endian bytes on exactly `width` bytes.
    ///
    /// Only valid for a width the value was checked against; the store
    /// validates every UID on creation, so truncation cannot happen here.
    pub fn to_bytes(self, width: UidWidth) -> Vec<u8> {
        let mut out = Vec::with_capacity(width.bytes());
        self.write_to(width, &mut out);
        out
    }

    pub fn write_to(self, width: UidWidth, out: &mut Vec<u8>) {
        debug_assert!(self.0 <= width.max_id());
        let be = self.0.to_be_bytes();
        out.extend_from_slice(&be[8 - width.bytes()..]);
    }

    /// Reads a UID from exactly `width` bytes.
    pub fn from_bytes(bytes: &[u8], width: UidWidth) -> Result<Uid, UidError> {
        if bytes.len() != width.bytes() {
            return Err(UidError::WrongLength {
                expected: width.bytes(),
                got: bytes.len(),
            });
        }
        let mut be = [0u8; 8];
        be[8 - bytes.len()..].copy_from_slice(bytes);
        Uid::new(u64::from_be_bytes(be), width)
    }

    /// Upper-case hex padded to the width: UID 255 on 3 bytes is `0000FF`.
    pub fn to_hex(self, width: UidWidth) -> String {
        format!("{:0w$X}", self.0, w = 2 * width.bytes())
    }

    /// Parses the three forms users meet: hex padded to the width
    /// (`0000FF`, case-insensitive), a plain decimal (`255`), or Java's
    /// signed byte array as printed by OpenTSDB's CLI (`[0, 0, -1]`).
    ///
    /// An all-digit string of exactly the hex width is read as hex (that is
    /// how the HTTP API writes UIDs); shorter digit strings are decimal.
    pub fn parse(input: &str, width: UidWidth) -> Result<Uid, UidError> {
        let s = input.trim();
        let err = |reason: &str| UidError::Parse {
            input: input.to_string(),
            reason: reason.to_string(),
        };
        if let Some(inner) = s.strip_prefix('[') {
            let inner = inner
                .strip_suffix(']')
                .ok_or_else(|| err("missing closing ']'"))?;
            let mut bytes = Vec::new();
            for part in inner.split(',') {
                let v: i16 = part
                    .trim()
                    .parse()
                    .map_err(|_| err("byte array elements must be integers"))?;
                if !(-128..=255).contains(&v) {
                    return Err(err("byte array element out of range -128..255"));
                }
                bytes.push(v as u8);
            }
            return Uid::from_bytes(&bytes, width);
        }
        if s.is_empty() {
            return Err(err("empty string"));
        }
        if s.len() == 2 * width.bytes() && s.bytes().all(|b| b.is_ascii_hexdigit()) {
            let id = u64::from_str_radix(s, 16).map_err(|_| err("not hex"))?;
            return Uid::new(id, width);
        }
        if s.bytes().all(|b| b.is_ascii_digit()) {
            let id: u64 = s.parse().map_err(|_| err("decimal out of range"))?;
            return Uid::new(id, width);
        }
        if s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(err(&format!(
                "hex UIDs must have exactly {} digits for a {}-byte width",
                2 * width.bytes(),
                width.bytes()
            )));
        }
        Err(err("expected hex, decimal or a [b0, b1, ...] byte array"))
    }
}

/// Formats bytes as Java's `Arrays.toString(byte[])` does: signed, comma
/// and space separated. OpenTSDB's CLI and error messages print UIDs this way.
pub fn java_byte_array(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 5 + 2);
    s.push('[');
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(&(*b as i8).to_string());
    }
    s.push(']');
    s
}

/// Upper-case hex of arbitrary bytes (TSUIDs, row keys).
pub fn hex_upper(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// Parses hex of either case into bytes.
pub fn parse_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    s.as_bytes()
        .chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn w(n: u8) -> UidWidth {
        UidWidth::new(n).unwrap()
    }

    #[test]
    fn seed_display_examples() {
        assert_eq!(Uid::new(1, w(3)).unwrap().to_hex(w(3)), "000001");
        assert_eq!(Uid::new(255, w(3)).unwrap().to_hex(w(3)), "0000FF");
        assert_eq!(java_byte_array(&[0, 0, 1]), "[0, 0, 1]");
        assert_eq!(java_byte_array(&[0, 0, 0x9C]), "[0, 0, -100]");
        // Seed 000: "-28" is how Java prints the byte 0xE4.
        let uid = Uid::parse("[0, 0, -28]", w(3)).unwrap();
        assert_eq!(uid.id(), 0xE4);
        assert_eq!(uid.to_hex(w(3)), "0000E4");
    }

    #[test]
    fn parse_forms() {
        assert_eq!(Uid::parse("0000ff", w(3)).unwrap().id(), 255);
        assert_eq!(Uid::parse("0000FF", w(3)).unwrap().id(), 255);
        assert_eq!(Uid::parse("255", w(3)).unwrap().id(), 255);
        assert_eq!(Uid::parse("[0, 0, -1]", w(3)).unwrap().id(), 255);
        assert!(Uid::parse("00FF", w(3)).is_err());
        assert!(Uid::parse("0000000000FF", w(3)).is_err());
        assert!(Uid::parse("", w(3)).is_err());
        assert!(Uid::parse("[0, 0]", w(3)).is_err());
        assert!(Uid::parse("[0, 0, 300]", w(3)).is_err());
        assert!(Uid::parse("16777216", w(3)).is_err());
        assert_eq!(Uid::parse("000000", w(3)), Err(UidError::Zero));
        assert!(Uid::parse("zz", w(1)).is_err());
    }

    #[test]
    fn width_limits() {
        assert!(UidWidth::new(0).is_err());
        assert!(UidWidth::new(9).is_err());
        assert_eq!(w(3).max_id(), 16_777_215);
        assert_eq!(w(8).max_id(), u64::MAX);
        assert!(Uid::new(16_777_216, w(3)).is_err());
        assert!(Uid::new(16_777_215, w(3)).is_ok());
    }

    proptest! {
        #[test]
        fn bytes_round_trip(width in 1u8..=8, raw in any::<u64>()) {
            let width = w(width);
            let id = (raw % width.max_id()).max(1);
            let uid = Uid::new(id, width).unwrap();
            let bytes = uid.to_bytes(width);
            prop_assert_eq!(bytes.len(), width.bytes());
            prop_assert_eq!(Uid::from_bytes(&bytes, width).unwrap(), uid);
            prop_assert_eq!(Uid::parse(&uid.to_hex(width), width).unwrap(), uid);
            prop_assert_eq!(Uid::parse(&java_byte_array(&bytes), width).unwrap(), uid);
            prop_assert_eq!(parse_hex(&hex_upper(&bytes)).unwrap(), bytes);
        }
    }
}
