//! `/metrics` (rtsdb's own): `/api/stats`' figures for Prometheus.

use super::{Call, Reply};

pub(super) fn http(c: &Call) -> Reply {
    Reply::new(
        200,
        "text/plain; version=0.0.4; charset=utf-8",
        c.state.stats_report().prometheus().into_bytes(),
    )
}
