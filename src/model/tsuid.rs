//! Series identities (TSUIDs): a metric UID and tag pairs, as OpenTSDB
//! builds them and as every layer from the row key to the query output
//! names a series. Byte layout: docs/format/row-key.md.

use thiserror::Error;

use super::uid::{Uid, UidError, UidWidths, hex_upper, parse_hex};

#[derive(Debug, Error, PartialEq, Eq)]
pub enum TsuidError {
    #[error(
        "TSUID of {len} bytes does not fit the layout (metric {metric} bytes, tag pair {pair} bytes)"
    )]
    BadLength {
        len: usize,
        metric: usize,
        pair: usize,
    },
    #[error("invalid TSUID '{0}': not hex")]
    NotHex(String),
    #[error("tag pairs are not sorted by tag key UID or repeat a tag key")]
    UnsortedTags,
    #[error(transparent)]
    Uid(#[from] UidError),
}

/// A series identity: metric UID and tag pairs sorted by tag key UID bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tsuid {
    pub metric: Uid,
    /// Sorted by tag key (by UID value, which for fixed-width big-endian
    /// bytes is the same as OpenTSDB's unsigned memcmp order).
    pub tags: Vec<(Uid, Uid)>,
}

impl Tsuid {
    /// Builds a TSUID, sorting the pairs by tag key UID as OpenTSDB does.
    pub fn new(metric: Uid, mut tags: Vec<(Uid, Uid)>) -> Result<Tsuid, TsuidError> {
        tags.sort_unstable();
        if tags.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(TsuidError::UnsortedTags);
        }
        Ok(Tsuid { metric, tags })
    }

    pub fn to_bytes(&self, widths: &UidWidths) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            widths.metric.bytes() + self.tags.len() * (widths.tagk.bytes() + widths.tagv.bytes()),
        );
        self.metric.write_to(widths.metric, &mut out);
        self.write_tags(widths, &mut out);
        out
    }

    /// The tag pairs as they follow the metric in a TSUID or row key.
    pub fn write_tags(&self, widths: &UidWidths, out: &mut Vec<u8>) {
        for (k, v) in &self.tags {
            k.write_to(widths.tagk, out);
            v.write_to(widths.tagv, out);
        }
    }

    pub fn to_hex(&self, widths: &UidWidths) -> String {
        hex_upper(&self.to_bytes(widths))
    }

    pub fn from_bytes(bytes: &[u8], widths: &UidWidths) -> Result<Tsuid, TsuidError> {
        let m = widths.metric.bytes();
        let pair = widths.tagk.bytes() + widths.tagv.bytes();
        if bytes.len() < m || !(bytes.len() - m).is_multiple_of(pair) {
            return Err(TsuidError::BadLength {
                len: bytes.len(),
                metric: m,
                pair,
            });
        }
        let metric = Uid::from_bytes(&bytes[..m], widths.metric)?;
        let tags = parse_pairs(&bytes[m..], widths)?;
        Ok(Tsuid { metric, tags })
    }

    /// Parses hex of either case, as OpenTSDB's API accepts.
    pub fn parse_hex(s: &str, widths: &UidWidths) -> Result<Tsuid, TsuidError> {
        let bytes = parse_hex(s).ok_or_else(|| TsuidError::NotHex(s.to_string()))?;
        Tsuid::from_bytes(&bytes, widths)
    }
}

/// A TSUID as a client gave it, for annotations: hex of the right length
/// for the layout (metric, then whole tag pairs), but its UIDs neither
/// resolved nor checked, since OpenTSDB stores an annotation under the
/// bytes it is given (`UniqueId.stringToUid`): a TSUID with a UID 0 or
/// pairs out of order is stored as written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TsuidBytes(Vec<u8>);

impl TsuidBytes {
    /// `stringToUid`: hex of either case, an odd length padded with a
    /// leading zero; the length must fit the layout.
    pub fn parse_hex(s: &str, widths: &UidWidths) -> Result<TsuidBytes, TsuidError> {
        let padded;
        let hex = if s.len() % 2 == 1 {
            padded = format!("0{s}");
            padded.as_str()
        } else {
            s
        };
        let bytes = parse_hex(hex).ok_or_else(|| TsuidError::NotHex(s.to_string()))?;
        let m = widths.metric.bytes();
        let pair = widths.tagk.bytes() + widths.tagv.bytes();
        if bytes.len() < m || !(bytes.len() - m).is_multiple_of(pair) {
            return Err(TsuidError::BadLength {
                len: bytes.len(),
                metric: m,
                pair,
            });
        }
        Ok(TsuidBytes(bytes))
    }

    pub fn of(tsuid: &Tsuid, widths: &UidWidths) -> TsuidBytes {
        TsuidBytes(tsuid.to_bytes(widths))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Tag pairs of a TSUID or row key, checked to be sorted by tag key.
pub fn parse_pairs(bytes: &[u8], widths: &UidWidths) -> Result<Vec<(Uid, Uid)>, TsuidError> {
    let (k, v) = (widths.tagk.bytes(), widths.tagv.bytes());
    let tags: Vec<(Uid, Uid)> = bytes
        .chunks(k + v)
        .map(|p| {
            Ok((
                Uid::from_bytes(&p[..k], widths.tagk)?,
                Uid::from_bytes(&p[k..], widths.tagv)?,
            ))
        })
        .collect::<Result<_, UidError>>()?;
    if tags.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Err(TsuidError::UnsortedTags);
    }
    Ok(tags)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::uid::UidWidth;

    /// OpenTSDB's default widths (3 bytes each); also for row-key tests.
    pub(crate) fn w3() -> UidWidths {
        UidWidths::default()
    }

    pub(crate) fn uid(id: u64) -> Uid {
        Uid::new(id, UidWidth::DEFAULT).unwrap()
    }

    #[test]
    fn seed_tsuid() {
        let t = Tsuid::new(uid(1), vec![(uid(1), uid(1))]).unwrap();
        assert_eq!(t.to_hex(&w3()), "000001000001000001");
        assert_eq!(Tsuid::parse_hex("000001000001000001", &w3()).unwrap(), t);
        assert_eq!(
            Tsuid::parse_hex("00000a00000100000b", &w3())
                .unwrap()
                .metric,
            uid(10)
        );
    }

    /// No limit on the number of tag pairs: a series with none (its
    /// TSUID is its metric UID alone) and one with 64 round-trip.
    #[test]
    fn tsuids_with_no_tag_and_with_sixty_four() {
        let bare = Tsuid::new(uid(1), Vec::new()).unwrap();
        assert_eq!(bare.to_hex(&w3()), "000001");
        assert_eq!(Tsuid::parse_hex("000001", &w3()).unwrap(), bare);
        let wide = Tsuid::new(uid(1), (1..=64).rev().map(|i| (uid(i), uid(i))).collect()).unwrap();
        assert_eq!(wide.tags.len(), 64);
        assert!(wide.tags.windows(2).all(|w| w[0].0 < w[1].0));
        let hex = wide.to_hex(&w3());
        assert_eq!(hex.len(), 6 + 64 * 12);
        assert_eq!(Tsuid::parse_hex(&hex, &w3()).unwrap(), wide);
    }

    #[test]
    fn malformed_tsuids() {
        assert!(Tsuid::parse_hex("00001", &w3()).is_err());
        assert!(Tsuid::parse_hex("zz0001", &w3()).is_err());
        assert!(Tsuid::new(uid(1), vec![(uid(1), uid(1)), (uid(1), uid(2))]).is_err());
    }
}
