//! The third thing a query reads: the epoch a cached answer depends on
//! ([`EpochSource`]), so that the result cache learns that data it
//! covered changed. The database implements it with its change epochs
//! (`db::CacheEpochs`).

use crate::model::Uid;

/// What a cached answer was computed under; equal epochs mean nothing it
/// covers changed since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epoch {
    global: u64,
    stripe: u64,
    /// The first hour still inside the metric's retention period: rows
    /// before it stop being read once it moves.
    retention_floor: u32,
}

impl Epoch {
    /// The epoch of the global counter `global`, the metric's stripe
    /// counter `stripe` and its retention floor (an hour, seconds).
    pub(crate) fn new(global: u64, stripe: u64, retention_floor: u32) -> Epoch {
        Epoch {
            global,
            stripe,
            retention_floor,
        }
    }
}

/// What tells the result cache that data it covers changed.
pub trait EpochSource: Send + Sync {
    /// Points before `ms` count as settled from now on.
    fn raise_floor(&self, ms: i64);
    /// The epoch an answer over `metric` is computed under.
    fn epoch(&self, metric: Uid) -> Epoch;
}
