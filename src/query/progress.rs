//! One running query's progress as others see it: the points it has read
//! so far and whether it was asked to stop. The server lists it in
//! `/api/stats/query` and cancels it from there; the read loops of both
//! query languages bump the counter and look at the flag a batch of
//! points at a time (never per point), so watching costs a few atomic
//! operations per batch.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::error::QueryError;

/// Points read and the cancellation flag of one query, shared by the
/// threads that read it and whoever lists or cancels it.
#[derive(Debug, Default)]
pub struct QueryProgress {
    points: AtomicU64,
    cancelled: AtomicBool,
}

impl QueryProgress {
    pub fn new() -> QueryProgress {
        QueryProgress::default()
    }

    /// Counts `n` more points read from storage.
    pub fn add_points(&self, n: u64) {
        self.points.fetch_add(n, Ordering::Relaxed);
    }

    /// Points read from storage so far.
    pub fn points_read(&self) -> u64 {
        self.points.load(Ordering::Relaxed)
    }

    /// Asks the query to stop: its read loops see it at their next batch.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    /// The error a cancelled query stops with; `Ok` while it may go on.
    pub fn check(&self) -> Result<(), QueryError> {
        if self.is_cancelled() {
            return Err(QueryError::Cancelled(CANCELLED.into()));
        }
        Ok(())
    }
}

/// What a cancelled query answers its client (both query languages).
pub(crate) const CANCELLED: &str = "The query was cancelled (DELETE /api/stats/query)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_cancels() {
        let p = QueryProgress::new();
        p.add_points(4096);
        p.add_points(10);
        assert_eq!(p.points_read(), 4106);
        assert!(p.check().is_ok());
        p.cancel();
        let e = p.check().unwrap_err();
        assert_eq!(e.status(), 503);
        assert_eq!(e.message(), CANCELLED);
    }
}
