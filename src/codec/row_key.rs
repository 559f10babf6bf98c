//! Row keys of the data table. Format: docs/format/row-key.md.

use thiserror::Error;

use crate::model::tsuid::{Tsuid, TsuidError, parse_pairs};
use crate::model::uid::{Uid, UidError, UidKind, UidWidth, UidWidths};

/// Salting: spreads series over `buckets` prefixes (OpenTSDB 2.2+).
/// A width of 0 disables it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Salt {
    pub width: u8,
    pub buckets: u32,
}

impl Default for Salt {
    fn default() -> Self {
        Salt {
            width: 0,
            buckets: 20,
        }
    }
}

impl Salt {
    pub fn enabled(&self) -> bool {
        self.width > 0
    }

    /// OpenTSDB's bucket: Java's `Arrays.hashCode(byte[])` of the TSUID
    /// bytes, modulo the bucket count, made non-negative.
    pub fn bucket(&self, tsuid: &[u8]) -> u32 {
        let mut h: i32 = 1;
        for &b in tsuid {
            h = h.wrapping_mul(31).wrapping_add(b as i8 as i32);
        }
        // Buckets are limited to i32::MAX when the store is created, so
        // this is Java's `hash % buckets` with a positive divisor.
        let m = (h as i64 % self.buckets as i64) as i32;
        m.unsigned_abs()
    }

    /// The salt prefix: the bucket big-endian on `width` bytes, computed as
    /// Java's `RowKey.getSaltBytes` does. Java reduces an int shift modulo
    /// 32, so widths above 4 repeat the low bytes rather than padding zeros;
    /// we keep that so salted keys match OpenTSDB's byte for byte.
    pub fn prefix(&self, bucket: u32) -> Vec<u8> {
        let width = self.width as usize;
        let mut out = vec![0u8; width];
        for i in 1..=width {
            out[width - i] = (bucket >> ((8 * (i - 1)) % 32)) as u8;
        }
        out
    }
}

/// Everything needed to lay out and parse keys: fixed per store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct KeyLayout {
    pub widths: UidWidths,
    pub salt: Salt,
}

pub const TIMESTAMP_BYTES: usize = 4;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum KeyError {
    #[error(
        "row key of {len} bytes does not fit the layout (prefix {prefix} bytes, tag pair {pair} bytes)"
    )]
    BadRowKeyLength {
        len: usize,
        prefix: usize,
        pair: usize,
    },
    /// The series part of the key (metric and tag pairs) is malformed.
    #[error(transparent)]
    Tsuid(#[from] TsuidError),
    #[error(transparent)]
    Uid(#[from] UidError),
}

/// A parsed data-table row key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RowKey {
    pub salt_bucket: Option<u32>,
    pub base_time: u32,
    pub tsuid: Tsuid,
}

impl KeyLayout {
    /// Bytes before the tag pairs: salt, metric, base time.
    pub fn prefix_len(&self) -> usize {
        self.salt.width as usize + self.widths.metric.bytes() + TIMESTAMP_BYTES
    }

    pub fn pair_len(&self) -> usize {
        self.widths.tagk.bytes() + self.widths.tagv.bytes()
    }

    pub fn width(&self, kind: UidKind) -> UidWidth {
        self.widths.of(kind)
    }

    /// `[salt] metric base_time (tagk tagv)*` for the hour holding `base_time`.
    pub fn row_key(&self, tsuid: &Tsuid, base_time: u32) -> Vec<u8> {
        // Built in place (the hot path of every row written and read); the
        // same bytes as `row_key_of_bytes` of the TSUID's bytes (tested).
        let mut out = Vec::with_capacity(self.prefix_len() + tsuid.tags.len() * self.pair_len());
        if self.salt.enabled() {
            let bucket = self.salt.bucket(&tsuid.to_bytes(&self.widths));
            out.extend_from_slice(&self.salt.prefix(bucket));
        }
        tsuid.metric.write_to(self.widths.metric, &mut out);
        out.extend_from_slice(&base_time.to_be_bytes());
        tsuid.write_tags(&self.widths, &mut out);
        out
    }

    /// [`row_key`](Self::row_key) of a TSUID's bytes (which must fit the
    /// layout: metric, then whole tag pairs), as `RowKey.rowKeyFromTSUID`
    /// builds it: salt of the TSUID bytes, metric, base time, tag pairs.
    pub fn row_key_of_bytes(&self, tsuid: &[u8], base_time: u32) -> Vec<u8> {
        let mw = self.widths.metric.bytes();
        let mut out = Vec::with_capacity(self.salt.width as usize + 4 + tsuid.len());
        if self.salt.enabled() {
            out.extend_from_slice(&self.salt.prefix(self.salt.bucket(tsuid)));
        }
        out.extend_from_slice(&tsuid[..mw]);
        out.extend_from_slice(&base_time.to_be_bytes());
        out.extend_from_slice(&tsuid[mw..]);
        out
    }

    /// The inverse of [`row_key_of_bytes`](Self::row_key_of_bytes): the
    /// row's base time, with its series' TSUID bytes (metric then tags)
    /// written into `tsuid`, without parsing the tags. None for a key too
    /// short to hold a base time.
    pub fn split_row_key(&self, key: &[u8], tsuid: &mut Vec<u8>) -> Option<u32> {
        let (metric, base, tags) = self.row_key_parts(key)?;
        tsuid.clear();
        tsuid.extend_from_slice(metric);
        tsuid.extend_from_slice(tags);
        Some(base)
    }

    /// A row key's metric UID bytes, base time and tag bytes, borrowed,
    /// without parsing the tags. None for a key too short to hold a base
    /// time.
    pub fn row_key_parts<'k>(&self, key: &'k [u8]) -> Option<(&'k [u8], u32, &'k [u8])> {
        let (sw, mw) = (self.salt.width as usize, self.widths.metric.bytes());
        let ts = key.get(sw + mw..sw + mw + 4)?;
        let base = u32::from_be_bytes([ts[0], ts[1], ts[2], ts[3]]);
        Some((&key[sw..sw + mw], base, &key[sw + mw + 4..]))
    }

    /// Row key of the global-annotation row for an hour: metric UID all
    /// zeros, no tags, never salted (salt bytes stay zero).
    pub fn global_annotation_row(&self, base_time: u32) -> Vec<u8> {
        let mut out = vec![0u8; self.salt.width as usize + self.widths.metric.bytes()];
        out.extend_from_slice(&base_time.to_be_bytes());
        out
    }

    pub fn parse_row_key(&self, key: &[u8]) -> Result<RowKey, KeyError> {
        let prefix = self.prefix_len();
        let pair = self.pair_len();
        if key.len() < prefix || !(key.len() - prefix).is_multiple_of(pair) {
            return Err(KeyError::BadRowKeyLength {
                len: key.len(),
                prefix,
                pair,
            });
        }
        let sw = self.salt.width as usize;
        let salt_bucket = self
            .salt
            .enabled()
            .then(|| key[..sw].iter().fold(0u64, |acc, &b| (acc << 8) | b as u64) as u32);
        let mw = self.widths.metric.bytes();
        let metric = Uid::from_bytes(&key[sw..sw + mw], self.widths.metric)?;
        let ts = &key[sw + mw..prefix];
        let base_time = u32::from_be_bytes([ts[0], ts[1], ts[2], ts[3]]);
        let tags = parse_pairs(&key[prefix..], &self.widths)?;
        Ok(RowKey {
            salt_bucket,
            base_time,
            tsuid: Tsuid { metric, tags },
        })
    }

    /// Start of the key range holding `metric`'s rows from `base_time` on,
    /// within one salt bucket.
    pub fn scan_prefix(&self, bucket: Option<u32>, metric: Uid, base_time: u32) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.prefix_len());
        if let Some(b) = bucket {
            out.extend_from_slice(&self.salt.prefix(b));
        }
        metric.write_to(self.widths.metric, &mut out);
        out.extend_from_slice(&base_time.to_be_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::row_span::{ROW_SPAN_SECS, row_base};
    use crate::model::tsuid::tests::{uid, w3};
    use crate::model::uid::{hex_upper, parse_hex};
    use proptest::prelude::*;

    fn unhex(s: &str) -> Vec<u8> {
        parse_hex(s).unwrap()
    }

    #[test]
    fn test_row_key_vectors() {
        let layout = KeyLayout::default();
        let t = Tsuid::parse_hex("000001000001000002", &w3()).unwrap();
        assert_eq!(
            layout.row_key(&t, 1356998400),
            vec![0, 0, 1, 0x50, 0xE2, 0x27, 0, 0, 0, 1, 0, 0, 2]
        );
        assert_eq!(
            layout.row_key(&t, 0),
            vec![0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 2]
        );
        let t1 = Tsuid::parse_hex("000001000001000001", &w3()).unwrap();
        assert_eq!(
            hex_upper(&layout.row_key(&t1, 1356998400)),
            "00000150E22700000001000001"
        );
    }

    #[test]
    fn seed_003_row_keys_parse() {
        let layout = KeyLayout::default();
        let keys = [
            ("00000150E22700000001000001", 0x50E22700u32, vec![(1, 1)]),
            (
                "00000150E22700000001000001000002000004",
                0x50E22700,
                vec![(1, 1), (2, 4)],
            ),
            ("00000150E22700000001000002", 0x50E22700, vec![(1, 2)]),
            ("00000150E23510000001000003", 0x50E23510, vec![(1, 3)]),
            (
                "00000150E24320000001000001000002000004",
                0x50E24320,
                vec![(1, 1), (2, 4)],
            ),
        ];
        for (hex, base, tags) in keys {
            let rk = layout.parse_row_key(&unhex(hex)).unwrap();
            assert_eq!(rk.tsuid.metric, uid(1));
            assert_eq!(rk.base_time, base);
            assert_eq!(rk.base_time % ROW_SPAN_SECS, 0);
            let want: Vec<_> = tags.into_iter().map(|(k, v)| (uid(k), uid(v))).collect();
            assert_eq!(rk.tsuid.tags, want);
            assert_eq!(hex_upper(&layout.row_key(&rk.tsuid, rk.base_time)), hex);
        }
    }

    #[test]
    fn salting_matches_java_hash() {
        // Java: Arrays.hashCode(new byte[]{0,0,1,0,0,1,0,0,1}) computed by hand:
        // h = 1; h = 31*h + b for each byte.
        let bytes = unhex("000001000001000001");
        let mut h: i64 = 1;
        for b in &bytes {
            h = (31 * h + (*b as i8 as i64)) as i32 as i64;
        }
        let salt = Salt {
            width: 1,
            buckets: 20,
        };
        assert_eq!(salt.bucket(&bytes) as i64, (h % 20).abs());
        let layout = KeyLayout { widths: w3(), salt };
        let t = Tsuid::from_bytes(&bytes, &w3()).unwrap();
        let key = layout.row_key(&t, 1356998400);
        assert_eq!(key.len(), 14);
        assert_eq!(key[0] as u32, salt.bucket(&bytes));
        let parsed = layout.parse_row_key(&key).unwrap();
        assert_eq!(parsed.salt_bucket, Some(key[0] as u32));
        assert_eq!(parsed.tsuid, t);
        // Negative hash codes are negated, never negative buckets.
        let neg = [0xFFu8; 7];
        assert!(salt.bucket(&neg) < 20);
        // Java's int shifts wrap at 32 bits: width 5 repeats the low byte.
        let wide = Salt {
            width: 5,
            buckets: 300,
        };
        assert_eq!(wide.prefix(0x0102), vec![0x02, 0, 0, 0x01, 0x02]);
        // The global-annotation row is never salted.
        assert_eq!(layout.global_annotation_row(0), vec![0u8; 8]);
    }

    #[test]
    fn bad_keys() {
        let layout = KeyLayout::default();
        assert!(layout.parse_row_key(&[0, 0, 1]).is_err());
        assert!(
            layout
                .parse_row_key(&unhex("00000150E2270000000100"))
                .is_err()
        );
        // Tag pairs out of order are not a row OpenTSDB could have written.
        assert!(
            layout
                .parse_row_key(&unhex("00000150E22700000002000001000001000001"))
                .is_err()
        );
        // A zero UID is never assigned.
        assert!(
            layout
                .parse_row_key(&unhex("00000050E22700000001000001"))
                .is_err()
        );
    }

    proptest! {
        #[test]
        fn row_key_round_trip(
            mw in 1u8..=8, kw in 1u8..=8, vw in 1u8..=8, sw in 0u8..=3,
            buckets in 1u32..=255,
            metric in any::<u64>(), base in any::<u32>(),
            // Remote-written series: no tag, or many more than 8.
            tags in proptest::collection::btree_map(any::<u64>(), any::<u64>(), 0..=64),
        ) {
            let widths = UidWidths {
                metric: UidWidth::new(mw).unwrap(),
                tagk: UidWidth::new(kw).unwrap(),
                tagv: UidWidth::new(vw).unwrap(),
            };
            let clamp = |v: u64, w: UidWidth| Uid::new((v % w.max_id()).max(1), w).unwrap();
            let tags: std::collections::BTreeMap<_, _> = tags
                .into_iter()
                .map(|(k, v)| (clamp(k, widths.tagk), clamp(v, widths.tagv)))
                .collect();
            let tsuid = Tsuid::new(clamp(metric, widths.metric), tags.into_iter().collect()).unwrap();
            let layout = KeyLayout { widths, salt: Salt { width: sw, buckets } };
            let base = row_base(base as u64).unwrap();
            let key = layout.row_key(&tsuid, base);
            let parsed = layout.parse_row_key(&key).unwrap();
            prop_assert_eq!(parsed.base_time, base);
            prop_assert_eq!(&parsed.tsuid, &tsuid);
            prop_assert_eq!(Tsuid::parse_hex(&tsuid.to_hex(&widths), &widths).unwrap(), tsuid);
        }
    }

    /// A series with no tag (a Prometheus metric with no label) is its
    /// metric and base time, nothing after; one with 20 tags has 20
    /// pairs. Both round-trip salted or not, and a tagless key is not the
    /// global annotation row of the same length (whose metric is 0).
    #[test]
    fn keys_of_series_with_no_tag_and_with_twenty() {
        let u = |i| Uid::new(i, UidWidth::DEFAULT).unwrap();
        let bare = Tsuid::new(u(7), Vec::new()).unwrap();
        let wide = Tsuid::new(u(7), (1..=20).map(|i| (u(i), u(100 + i))).collect()).unwrap();
        for salt in [
            Salt::default(),
            Salt {
                width: 1,
                buckets: 20,
            },
        ] {
            let l = KeyLayout {
                widths: UidWidths::default(),
                salt,
            };
            let key = l.row_key(&bare, 1356998400);
            assert_eq!(key.len(), l.prefix_len());
            assert_eq!(hex_upper(&key[salt.width as usize..]), "00000750E22700");
            assert_eq!(l.parse_row_key(&key).unwrap().tsuid, bare);
            assert!(
                l.parse_row_key(&l.global_annotation_row(1356998400))
                    .is_err()
            );
            let key = l.row_key(&wide, 1356998400);
            assert_eq!(key.len(), l.prefix_len() + 20 * 6);
            assert_eq!(l.parse_row_key(&key).unwrap().tsuid, wide);
            for t in [&bare, &wide] {
                assert_eq!(
                    l.row_key(t, 1356998400),
                    l.row_key_of_bytes(&t.to_bytes(&l.widths), 1356998400)
                );
            }
        }
    }

    #[test]
    fn row_keys_of_a_tsuid_and_of_its_bytes_agree() {
        let u = |i| Uid::new(i, UidWidth::DEFAULT).unwrap();
        let t = Tsuid::new(u(7), vec![(u(1), u(2)), (u(3), u(4))]).unwrap();
        for salt in [
            Salt::default(),
            Salt {
                width: 1,
                buckets: 20,
            },
        ] {
            let l = KeyLayout {
                widths: UidWidths::default(),
                salt,
            };
            assert_eq!(
                l.row_key(&t, 1356998400),
                l.row_key_of_bytes(&t.to_bytes(&l.widths), 1356998400)
            );
        }
    }
}
