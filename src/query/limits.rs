//! Query limits (`tsd.query.limits.*`, `tsd.query.timeout`) and the
//! errors OpenTSDB answers with when one is hit.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::error::QueryError;
use super::progress::QueryProgress;

/// Limits for one query; 0 means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryLimits {
    /// `tsd.query.timeout`, ms.
    pub timeout_ms: u64,
    /// `tsd.query.limits.bytes.default`.
    pub max_bytes: u64,
    /// `tsd.query.limits.data_points.default`.
    pub max_data_points: u64,
    /// rtsdb's own guard: most points a query may produce (fill policies
    /// over huge ranges would otherwise allocate without bound).
    pub max_output_points: u64,
}

impl Default for QueryLimits {
    fn default() -> Self {
        QueryLimits {
            timeout_ms: 0,
            max_bytes: 0,
            max_data_points: 0,
            max_output_points: 50_000_000,
        }
    }
}

/// Tracks one query's use against its limits. Shared by the threads that
/// read one query's series in parallel, so the totals are atomic.
#[derive(Debug)]
pub(crate) struct Budget {
    limits: QueryLimits,
    started: Instant,
    bytes: AtomicU64,
    points: AtomicU64,
    /// The query's progress as the server lists it: points charged are
    /// counted there too, and a cancelled query fails its next charge.
    progress: Option<Arc<QueryProgress>>,
}

/// Bytes and points a [`Budget`] was charged, at some moment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Charged {
    bytes: u64,
    points: u64,
}

impl Budget {
    pub(crate) fn new(limits: QueryLimits) -> Budget {
        Budget {
            limits,
            started: Instant::now(),
            bytes: AtomicU64::new(0),
            points: AtomicU64::new(0),
            progress: None,
        }
    }

    /// A budget that also reports to `progress` and stops when it is
    /// cancelled.
    pub(crate) fn watching(limits: QueryLimits, progress: Arc<QueryProgress>) -> Budget {
        Budget {
            progress: Some(progress),
            ..Budget::new(limits)
        }
    }

    pub(crate) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// What was charged so far, to [`rewind`](Self::rewind) to.
    pub(crate) fn charged(&self) -> Charged {
        Charged {
            bytes: self.bytes.load(Ordering::Relaxed),
            points: self.points.load(Ordering::Relaxed),
        }
    }

    /// Forgets what was charged since `to`: a read that is given up and
    /// made again another way is charged once.
    pub(crate) fn rewind(&self, to: Charged) {
        self.bytes.store(to.bytes, Ordering::Relaxed);
        self.points.store(to.points, Ordering::Relaxed);
    }

    /// Accounts for data read; the error to return if a limit is passed.
    pub(crate) fn charge(&self, bytes: u64, points: u64) -> Result<(), QueryError> {
        if let Some(p) = &self.progress {
            // Counted before the limits: a read that is given up and
            // made again (`rewind`) did read its points.
            p.add_points(points);
        }
        let bytes = self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        let points = self.points.fetch_add(points, Ordering::Relaxed) + points;
        let l = &self.limits;
        if l.max_data_points > 0 && points > l.max_data_points {
            return Err(QueryError::TooLarge(format!(
                "Sorry, you have attempted to fetch more than our limit of {} data points. Please try filtering using more tags or decrease your time range.",
                l.max_data_points
            )));
        }
        if l.max_bytes > 0 && bytes > l.max_bytes {
            return Err(QueryError::TooLarge(format!(
                "Sorry, you have attempted to fetch more than our maximum amount of {}MB from storage. Please try filtering using more tags or decrease your time range.",
                l.max_bytes / 1024 / 1024
            )));
        }
        self.check_time()
    }

    /// The query's timeout or its cancellation, whichever came.
    pub(crate) fn check_time(&self) -> Result<(), QueryError> {
        if let Some(p) = &self.progress {
            p.check()?;
        }
        if self.limits.timeout_ms > 0 && self.elapsed().as_millis() as u64 > self.limits.timeout_ms
        {
            return Err(QueryError::Timeout(format!(
                "Sorry, your query timed out. Time limit: {} ms",
                self.limits.timeout_ms
            )));
        }
        Ok(())
    }

    /// Refuses a query whose fill policy would emit more than the output
    /// guard allows.
    pub(crate) fn check_output(&self, points: u64) -> Result<(), QueryError> {
        let max = self.limits.max_output_points;
        if max > 0 && points > max {
            return Err(QueryError::TooLarge(format!(
                "Sorry, this query would produce more than {max} data points. Please use a larger downsampling interval or decrease your time range."
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_messages() {
        let b = Budget::new(QueryLimits {
            max_data_points: 10,
            ..Default::default()
        });
        assert!(b.charge(100, 10).is_ok());
        let e = b.charge(0, 1).unwrap_err();
        assert_eq!(e.status(), 413);
        assert!(e.message().starts_with(
            "Sorry, you have attempted to fetch more than our limit of 10 data points."
        ));
        let b = Budget::new(QueryLimits {
            max_bytes: 2 << 20,
            ..Default::default()
        });
        let e = b.charge(3 << 20, 0).unwrap_err();
        assert!(e.message().contains("maximum amount of 2MB"), "{e}");
        let b = Budget::new(QueryLimits {
            timeout_ms: 1,
            ..Default::default()
        });
        std::thread::sleep(Duration::from_millis(3));
        assert_eq!(b.check_time().unwrap_err().status(), 408);
    }
}
