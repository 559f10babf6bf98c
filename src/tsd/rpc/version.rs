//! `version`: telnet, `/api/version`, `/version` (OpenTSDB's `Version`).

use hyper::Method;

use super::After;
use crate::tsd::TsdState;
use crate::tsd::http::call::{Call, allow};
use crate::tsd::http::reply::Reply;

/// The build lines, as telnet and the legacy text page give them.
fn text() -> String {
    format!("{}\n", crate::version::version_lines())
}

pub(crate) fn telnet(_: &TsdState, out: &mut Vec<u8>) -> After {
    out.extend_from_slice(text().as_bytes());
    After::Continue
}

/// JSON for the API and for `/version?json`; the telnet text otherwise.
pub(crate) fn http(c: &Call) -> Reply {
    if let Err(r) = allow(c, &[Method::GET, Method::POST]) {
        return r;
    }
    if c.api() || c.query.has("json") {
        Reply::json(200, crate::version::json().to_string())
    } else {
        Reply::text(200, text())
    }
}
