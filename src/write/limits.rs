//! Cardinality limits: how many series the store may gain per hour and
//! hold in total, as VictoriaMetrics' `-maxHourlySeries` and
//! `-maxDailySeries` bound a flood of new series (OpenTSDB has none; its
//! only bound is the UID width).
//!
//! A series is new when the store does not know it: some name has no UID
//! yet, or its TSUID is not in the series index. Only new series count
//! and only they are refused; points of known series always pass. The
//! check runs before any UID is assigned, so a refused series costs no
//! UIDs either.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::index::SeriesIndex;
use crate::model::row_span::hour_floor;
use crate::protocol::PointError;

/// `tsd.storage.series.max_new_per_hour`.
pub(crate) const MAX_NEW_PER_HOUR_KEY: &str = "tsd.storage.series.max_new_per_hour";
/// `tsd.storage.series.max_total`.
pub(crate) const MAX_TOTAL_KEY: &str = "tsd.storage.series.max_total";

/// The limits an operator set; `None` is no limit (the default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SeriesLimits {
    /// New series accepted per clock hour (UTC).
    pub max_new_per_hour: Option<NonZeroU64>,
    /// Series the store may hold: the ones it knew when it opened plus
    /// the ones created since.
    pub max_total: Option<NonZeroU64>,
}

impl SeriesLimits {
    pub fn is_unlimited(&self) -> bool {
        self.max_new_per_hour.is_none() && self.max_total.is_none()
    }
}

/// Series refused by each limit (for `/api/stats`).
#[derive(Debug, Default)]
pub(crate) struct LimitStats {
    pub(crate) refused_hourly: AtomicU64,
    pub(crate) refused_total: AtomicU64,
}

/// Admits or refuses new series against [`SeriesLimits`].
pub(crate) struct SeriesLimiter {
    limits: SeriesLimits,
    index: Arc<SeriesIndex>,
    window: Mutex<Window>,
    stats: LimitStats,
}

/// Series admitted in the current hour, and in all since open.
struct Window {
    hour: u64,
    admitted_this_hour: u64,
    /// Series the index held at open plus every series admitted since: a
    /// series admitted twice by racing writers is counted twice, so the
    /// limit is never passed, at worst reached one series early.
    total: u64,
}

impl SeriesLimiter {
    pub(crate) fn new(limits: SeriesLimits, index: Arc<SeriesIndex>) -> SeriesLimiter {
        let total = index.len() as u64;
        SeriesLimiter {
            limits,
            index,
            window: Mutex::new(Window {
                hour: 0,
                admitted_this_hour: 0,
                total,
            }),
            stats: LimitStats::default(),
        }
    }

    pub(crate) fn limits(&self) -> SeriesLimits {
        self.limits
    }

    pub(crate) fn stats(&self) -> &LimitStats {
        &self.stats
    }

    /// Whether the store already holds the series of this TSUID.
    pub(crate) fn is_known(&self, tsuid: &crate::model::Tsuid) -> bool {
        self.index.last_hour(tsuid).is_some()
    }

    /// Admits one new series at `now_s`, or says which limit refuses it.
    /// `describe` names the series for the error.
    pub(crate) fn admit(
        &self,
        now_s: u64,
        describe: impl FnOnce() -> String,
    ) -> Result<(), PointError> {
        let exceeded = self.window.lock().admit(&self.limits, now_s);
        match exceeded {
            Ok(()) => Ok(()),
            Err(Exceeded::Total(max)) => {
                self.stats.refused_total.fetch_add(1, Ordering::Relaxed);
                Err(refused(
                    &format!("the store holds {max} series, its limit"),
                    MAX_TOTAL_KEY,
                    &describe(),
                ))
            }
            Err(Exceeded::Hourly(max)) => {
                self.stats.refused_hourly.fetch_add(1, Ordering::Relaxed);
                Err(refused(
                    &format!("{max} new series were created this hour, the limit"),
                    MAX_NEW_PER_HOUR_KEY,
                    &describe(),
                ))
            }
        }
    }
}

/// The limit a new series would pass.
#[derive(Debug, PartialEq, Eq)]
enum Exceeded {
    Hourly(NonZeroU64),
    Total(NonZeroU64),
}

impl Window {
    /// Counts one new series at `now_s` unless a limit forbids it.
    fn admit(&mut self, limits: &SeriesLimits, now_s: u64) -> Result<(), Exceeded> {
        let hour = hour_floor(now_s);
        if self.hour != hour {
            self.hour = hour;
            self.admitted_this_hour = 0;
        }
        if let Some(max) = limits.max_total
            && self.total >= max.get()
        {
            return Err(Exceeded::Total(max));
        }
        if let Some(max) = limits.max_new_per_hour
            && self.admitted_this_hour >= max.get()
        {
            return Err(Exceeded::Hourly(max));
        }
        self.admitted_this_hour += 1;
        self.total += 1;
        Ok(())
    }
}

/// Telnet `put: illegal argument: …`, HTTP the message itself: the point
/// is refused for what it is (a new series), not for a storage fault, and
/// sending it again will not help until the limit allows it.
fn refused(why: &str, key: &str, series: &str) -> PointError {
    PointError::IllegalArgument(format!(
        "too many series: {why} ({key}); refusing new series {series}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hourly_count_starts_again_each_hour_and_the_total_never_does() {
        let n = |v| NonZeroU64::new(v);
        let limits = SeriesLimits {
            max_new_per_hour: n(2),
            max_total: n(5),
        };
        let mut w = Window {
            hour: 0,
            admitted_this_hour: 0,
            total: 1,
        };
        let h = 1_356_998_400;
        assert_eq!(w.admit(&limits, h), Ok(()));
        assert_eq!(w.admit(&limits, h + 3599), Ok(()));
        assert_eq!(
            w.admit(&limits, h + 10),
            Err(Exceeded::Hourly(n(2).unwrap()))
        );
        assert_eq!(w.admit(&limits, h + 3600), Ok(()));
        assert_eq!(w.admit(&limits, h + 3601), Ok(()));
        // 1 at open + 4 admitted.
        assert_eq!(
            w.admit(&limits, h + 7200),
            Err(Exceeded::Total(n(5).unwrap()))
        );
        assert!(SeriesLimits::default().is_unlimited());
    }
}
