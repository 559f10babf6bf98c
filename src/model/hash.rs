//! The one non-cryptographic hash of the crate: for in-process maps and
//! for spreading keys over shards and lock stripes. Nothing it computes is
//! stored. XXH3 (already needed to check fjall's journal) hashes a
//! 150-byte series key many times faster than a byte-at-a-time hash, and
//! the series lookup of every accepted point hashes one. Keys come from
//! clients, but a collision-heavy client only slows its own series down;
//! SipHash showed up in profiles.

use std::hash::{BuildHasherDefault, Hasher};

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// The hash of `bytes`, continuing from `seed` (0 for a fresh hash; a
/// nonzero seed mixes in, e.g., a table number).
#[inline]
pub(crate) fn hash_bytes(seed: u64, bytes: &[u8]) -> u64 {
    xxh3_64_with_seed(bytes, seed)
}

/// [`hash_bytes`] as a [`Hasher`]: each write goes on from the state.
#[derive(Default, Clone, Copy)]
pub(crate) struct FastHasher(u64);

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0 = hash_bytes(self.0, bytes);
    }

    fn write_u8(&mut self, i: u8) {
        // `str` hashing ends with a 0xff byte: a cheap mix is enough.
        self.write_u64(i as u64);
    }

    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64);
    }

    fn write_u64(&mut self, i: u64) {
        // Series ids and the like: a multiplicative mix is enough.
        self.0 = (self.0 ^ i)
            .wrapping_mul(0x9E3779B97F4A7C15)
            .rotate_left(29);
    }

    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

pub(crate) type FastBuild = BuildHasherDefault<FastHasher>;
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, FastBuild>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_chain_and_differ() {
        let mut a = FastHasher::default();
        a.write(b"foo");
        a.write(b"bar");
        let mut b = FastHasher::default();
        b.write(b"foo");
        b.write(b"baz");
        assert_ne!(a.finish(), b.finish());
        assert_eq!(hash_bytes(0, b"x"), hash_bytes(0, b"x"));
        assert_ne!(hash_bytes(0, b"x"), hash_bytes(1, b"x"));
        let mut c = FastHasher::default();
        c.write_u32(1);
        let mut d = FastHasher::default();
        d.write_u32(2);
        assert_ne!(c.finish(), d.finish());
    }
}
