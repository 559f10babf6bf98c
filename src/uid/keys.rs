//! Engine keys of the `tsdb-uid` and `tsdb-meta` tables. Each HBase cell
//! (row, family, qualifier) is one engine entry keyed
//! `row 0x00 family 0x00 qualifier`. Format: docs/format/uid-table.md.

use crate::model::UidKind;

pub const FAMILY_ID: &[u8] = b"id";
pub const FAMILY_NAME: &[u8] = b"name";
/// Row key of the MAXID counters.
pub const MAXID_ROW: &[u8] = &[0];

/// Key of one cell. Family and qualifier never contain 0x00, so the key
/// splits unambiguously from the right even when the row (a UID) does.
pub fn cell_key(row: &[u8], family: &[u8], qualifier: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(row.len() + family.len() + qualifier.len() + 2);
    k.extend_from_slice(row);
    k.push(0);
    k.extend_from_slice(family);
    k.push(0);
    k.extend_from_slice(qualifier);
    k
}

/// Splits a cell key into (row, family, qualifier).
pub fn split_cell_key(key: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let q = key.iter().rposition(|&b| b == 0)?;
    let f = key[..q].iter().rposition(|&b| b == 0)?;
    Some((&key[..f], &key[f + 1..q], &key[q + 1..]))
}

/// name → UID, in the name's row.
pub fn forward(kind: UidKind, name: &str) -> Vec<u8> {
    cell_key(name.as_bytes(), FAMILY_ID, kind.qualifier().as_bytes())
}

/// UID → name, in the UID's row.
pub fn reverse(kind: UidKind, uid_bytes: &[u8]) -> Vec<u8> {
    cell_key(uid_bytes, FAMILY_NAME, kind.qualifier().as_bytes())
}

/// UIDMeta JSON, in the UID's row.
pub fn uid_meta(kind: UidKind, uid_bytes: &[u8]) -> Vec<u8> {
    cell_key(uid_bytes, FAMILY_NAME, kind.meta_qualifier().as_bytes())
}

/// The 8-byte MAXID counter of a kind.
pub fn max_id(kind: UidKind) -> Vec<u8> {
    cell_key(MAXID_ROW, FAMILY_ID, kind.qualifier().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_back() {
        let k = reverse(UidKind::TagValue, &[0, 0, 1]);
        assert_eq!(k, b"\x00\x00\x01\x00name\x00tagv");
        assert_eq!(
            split_cell_key(&k),
            Some((&[0u8, 0, 1][..], &b"name"[..], &b"tagv"[..]))
        );
        let k = forward(UidKind::Metric, "sys.cpu.0");
        assert_eq!(
            split_cell_key(&k),
            Some((&b"sys.cpu.0"[..], &b"id"[..], &b"metrics"[..]))
        );
        let k = max_id(UidKind::TagKey);
        assert_eq!(
            split_cell_key(&k),
            Some((&[0u8][..], &b"id"[..], &b"tagk"[..]))
        );
        assert_eq!(split_cell_key(b"noseparators"), None);
    }
}
