//! `diediedie`: telnet and `/diediedie` (OpenTSDB's `DieDieDie`), unless
//! `tsd.no_diediedie`.

use super::After;
use crate::tsd::TsdState;
use crate::tsd::http::call::Call;
use crate::tsd::http::reply::Reply;

const BYE: &str = "Cleaning up and exiting now.\n";

/// The connection loop stops the server once this reply is written.
pub(crate) fn telnet(_: &TsdState, out: &mut Vec<u8>) -> After {
    out.extend_from_slice(BYE.as_bytes());
    After::Shutdown
}

pub(crate) fn http(c: &Call) -> Reply {
    c.state.request_shutdown();
    Reply::text(200, BYE)
}
