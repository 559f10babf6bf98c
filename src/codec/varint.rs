//! Unsigned LEB128 varints and zigzag, shared by the byte formats that use
//! them (data-row cells, compressed columns).

/// Appends `v` as an unsigned LEB128 varint.
pub fn put(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint at `*pos`, advancing it; `None` if the buffer ends first
/// or the varint runs past ten bytes.
pub fn get(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= ((b & 0x7F) as u64) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Maps signed to unsigned so small magnitudes stay small: 0, -1, 1, -2 → 0, 1, 2, 3.
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trips(v in any::<u64>(), s in any::<i64>()) {
            let mut out = Vec::new();
            put(v, &mut out);
            let mut pos = 0;
            prop_assert_eq!(get(&out, &mut pos), Some(v));
            prop_assert_eq!(pos, out.len());
            prop_assert_eq!(unzigzag(zigzag(s)), s);
        }
    }

    #[test]
    fn truncated_is_none() {
        assert_eq!(get(&[0x80], &mut 0), None);
        assert_eq!(get(&[0xFF; 11], &mut 0), None);
    }
}
