//! `dropcaches`: telnet, `/api/dropcaches`, `/dropcaches`
//! (OpenTSDB's `DropCachesRpc`).

use hyper::Method;

use super::After;
use crate::tsd::TsdState;
use crate::tsd::http::call::{Call, allow};
use crate::tsd::http::reply::Reply;

/// The text reply of telnet and the legacy page.
const DROPPED: &str = "Caches dropped.\n";

fn drop_caches(state: &TsdState) {
    // OpenTSDB logs this at WARN: dropped caches slow the next requests.
    tracing::warn!("dropping all in-memory caches");
    state.db.drop_caches();
}

pub(crate) fn telnet(state: &TsdState, out: &mut Vec<u8>) -> After {
    drop_caches(state);
    out.extend_from_slice(DROPPED.as_bytes());
    After::Continue
}

/// GET or DELETE, as in OpenTSDB 2.4.1, on both paths.
pub(crate) fn http(c: &Call) -> Reply {
    if let Err(r) = allow(c, &[Method::GET, Method::DELETE]) {
        return r;
    }
    drop_caches(&c.state);
    if c.api() {
        Reply::json(200, "{\"message\":\"Caches dropped\",\"status\":\"200\"}")
    } else {
        Reply::text(200, DROPPED)
    }
}
