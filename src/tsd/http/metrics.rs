//! `/metrics` (rtsdb's own): `/api/stats`' figures for Prometheus.

use super::{Call, Reply};

pub(super) fn http(c: &Call) -> Reply {
    Reply {
        status: 200,
        content_type: "text/plain; version=0.0.4; charset=utf-8",
        body: c.state.stats_report().prometheus().into_bytes(),
    }
}
