//! FNV-1a, the one non-cryptographic hash of the crate: for in-process
//! maps and for spreading keys over shards and lock stripes. Keys come
//! from clients, but a collision-heavy client only slows its own series
//! down; SipHash showed up in profiles.

use std::hash::{BuildHasherDefault, Hasher};

const OFFSET_BASIS: u64 = 0xcbf29ce484222325;
const PRIME: u64 = 0x100000001b3;

/// FNV-1a (64-bit) of `bytes`, continuing from `seed` (0 for a fresh hash;
/// a nonzero seed mixes in, e.g., a table number).
#[inline]
pub(crate) fn fnv1a(seed: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(OFFSET_BASIS ^ seed, |h, b| {
        (h ^ *b as u64).wrapping_mul(PRIME)
    })
}

#[derive(Default, Clone, Copy)]
pub(crate) struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // A fresh hasher starts from the offset basis; later writes go on
        // from the state (fnv1a undoes its seed's xor with the basis).
        self.0 = fnv1a(
            if self.0 == 0 {
                0
            } else {
                self.0 ^ OFFSET_BASIS
            },
            bytes,
        );
    }

    fn write_u32(&mut self, i: u32) {
        // Series ids: a multiplicative mix is enough.
        self.0 = (self.0 ^ i as u64).wrapping_mul(0x9E3779B97F4A7C15);
    }
}

pub(crate) type FnvBuild = BuildHasherDefault<Fnv>;
pub(crate) type FnvMap<K, V> = std::collections::HashMap<K, V, FnvBuild>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_reference_values() {
        // The published FNV-1a 64-bit test vectors.
        assert_eq!(fnv1a(0, b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a(0, b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a(0, b"foobar"), 0x85944171f73967e8);
        let mut h = Fnv::default();
        h.write(b"foo");
        h.write(b"bar");
        assert_eq!(h.finish(), fnv1a(0, b"foobar"));
    }
}
