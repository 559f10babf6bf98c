//! Change epochs for the query result cache (`crate::query::cache`): how
//! a cached answer learns that data it covered changed.
//!
//! The cache keeps results only for times before a *settled floor* it
//! raises itself ([`CacheEpochs::raise_floor`]) before it reads. A write
//! lands either after the floor (the tail every query recomputes: nothing
//! to do) or before it (a late point): then the write bumps the epoch of
//! its metric's stripe. Deletes and series new to the index bump their
//! metrics' stripes; renames,
//! index rebuilds and annotation changes bump the global epoch.
//!
//! Ordering: the cache raises the floor, then reads the epoch, then reads
//! the data; an appender makes its points visible, then reads the floor.
//! Both sides use `SeqCst`, so either the read sees the late point or the
//! appender sees the raised floor and bumps the epoch the cache read
//! (the entry is then refused on its next use).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use super::Db;
use crate::model::Uid;
use crate::store::read::epoch::{Epoch, EpochSource};

/// Metrics share stripes: a late point for one metric also drops the
/// cached answers of the metrics hashed to its stripe. 256 stripes keep
/// that rare while the array stays 2 KiB.
const STRIPES: usize = 256;

/// The epochs and the settled floor; one per [`Db`](super::Db).
pub struct CacheEpochs {
    /// Points before this time (ms) are settled as far as a cached answer
    /// is concerned; i64::MIN while nothing is cached.
    floor: AtomicI64,
    global: AtomicU64,
    stripes: Box<[AtomicU64]>,
}

impl Default for CacheEpochs {
    fn default() -> Self {
        CacheEpochs {
            floor: AtomicI64::new(i64::MIN),
            global: AtomicU64::new(0),
            stripes: (0..STRIPES).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

fn stripe_of(metric: Uid) -> usize {
    // Fibonacci hashing spreads consecutive UIDs over the stripes.
    (metric.id().wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize % STRIPES
}

impl CacheEpochs {
    /// Declares every point before `ms` settled: writes before it from now
    /// on invalidate. Only ever moves forward.
    pub fn raise_floor(&self, ms: i64) {
        self.floor.fetch_max(ms, Ordering::SeqCst);
    }

    /// The current settled floor (ms).
    pub fn floor(&self) -> i64 {
        self.floor.load(Ordering::SeqCst)
    }

    /// The epoch answers for `metric` are computed under;
    /// `retention_floor` is the metric's first hour still retained.
    pub fn epoch(&self, metric: Uid, retention_floor: u32) -> Epoch {
        Epoch::new(
            self.global.load(Ordering::SeqCst),
            self.stripes[stripe_of(metric)].load(Ordering::SeqCst),
            retention_floor,
        )
    }

    /// Something about `metric`'s settled data changed.
    pub fn bump_metric(&self, metric: Uid) {
        self.stripes[stripe_of(metric)].fetch_add(1, Ordering::SeqCst);
    }

    /// Something every cached answer may depend on changed (names,
    /// the index, annotations).
    pub fn bump_all(&self) {
        self.global.fetch_add(1, Ordering::SeqCst);
    }

    /// Called by an appender once its points are visible: bumps the
    /// stripe of each metric written before the floor. One load for the
    /// whole batch; a bump only for late points.
    pub(crate) fn note_written(&self, points: impl Iterator<Item = (Uid, i64)>) {
        let floor = self.floor();
        if floor == i64::MIN {
            return;
        }
        let mut last: Option<Uid> = None;
        for (metric, ms) in points {
            if ms < floor && last != Some(metric) {
                self.bump_metric(metric);
                last = Some(metric);
            }
        }
    }
}

impl EpochSource for Db {
    fn raise_floor(&self, ms: i64) {
        self.cache_epochs().raise_floor(ms);
    }

    fn epoch(&self, metric: Uid) -> Epoch {
        self.cache_epoch(metric)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_late_points_move_the_epoch() {
        let e = CacheEpochs::default();
        let w = crate::model::UidWidth::new(3).unwrap();
        let (a, b) = (Uid::new(1, w).unwrap(), Uid::new(2, w).unwrap());
        let before = e.epoch(a, 0);
        // Nothing cached yet: even old points cost nothing.
        e.note_written([(a, 5)].into_iter());
        assert_eq!(e.epoch(a, 0), before);
        e.raise_floor(1_000);
        e.note_written([(a, 1_000), (a, 2_000)].into_iter());
        assert_eq!(e.epoch(a, 0), before, "the tail is not settled");
        e.note_written([(b, 999)].into_iter());
        assert_eq!(e.epoch(a, 0), before, "another metric's late point");
        e.note_written([(a, 999)].into_iter());
        assert_ne!(e.epoch(a, 0), before);
        let now = e.epoch(a, 0);
        e.raise_floor(10);
        assert_eq!(e.floor(), 1_000, "the floor never moves back");
        e.bump_all();
        assert_ne!(e.epoch(a, 0), now);
        assert_ne!(e.epoch(a, 0), e.epoch(a, 1), "retention moved");
    }
}
