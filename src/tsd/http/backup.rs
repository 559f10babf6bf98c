//! `POST /api/backup` (rtsdb's own): a consistent copy of the running
//! database ([`Db::backup`](crate::db::Db::backup)), written while writes
//! go on. It exists only with `tsd.backup.enable` (a 404 otherwise, as
//! OpenTSDB answers for an RPC its configuration leaves out) and writes
//! only inside `tsd.backup.dir`: `?dir=NAME` names a directory there
//! (an absolute path must lie inside it), none picks a name from the
//! current time. Only a real POST starts one, never a GET with
//! `method_override`, so no link or image tag can. docs/backup.md.

use std::path::PathBuf;

use hyper::Method;
use hyper::body::Incoming;

use super::query::blocking;
use super::{Call, Reply, method_not_allowed};
use crate::db::{BackupError, backup_destination};

/// The route: the body is not read (nothing is taken from it).
pub(super) async fn route(c: Call, _body: Incoming) -> Reply {
    if *c.verb() != Method::POST {
        return method_not_allowed(c.verb());
    }
    let requested = c
        .query
        .get("dir")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from);
    blocking(&c.state, move |state| {
        let root = &state.options.backup.root;
        let made =
            backup_destination(root, requested.as_deref()).and_then(|dest| state.db.backup(&dest));
        match made {
            Ok(b) => Reply::json(200, b.to_json().to_string()),
            Err(e) => error(&e),
        }
    })
    .await
}

fn error(e: &BackupError) -> Reply {
    let status = match e {
        BackupError::NotEmpty { .. } | BackupError::OutsideRoot { .. } => 400,
        _ => 500,
    };
    if status == 500 {
        tracing::error!(error = %e, "backup failed");
    }
    Reply::error(status, &e.to_string(), "")
}
