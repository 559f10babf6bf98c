//! A fast non-cryptographic hasher (FNV-1a, 64-bit) for the write path's
//! in-process maps: their keys come from clients, but a collision-heavy
//! client only slows its own series down; SipHash showed up in profiles.

use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default, Clone, Copy)]
pub struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf29ce484222325
        } else {
            self.0
        };
        for b in bytes {
            h = (h ^ *b as u64).wrapping_mul(0x100000001b3);
        }
        self.0 = h;
    }

    fn write_u32(&mut self, i: u32) {
        // Series ids: a multiplicative mix is enough.
        self.0 = (self.0 ^ i as u64).wrapping_mul(0x9E3779B97F4A7C15);
    }
}

pub type FnvBuild = BuildHasherDefault<Fnv>;
pub type FnvMap<K, V> = std::collections::HashMap<K, V, FnvBuild>;
