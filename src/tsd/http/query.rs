//! `/api/query`, `/api/query/last` and `/api/query/exp`: request
//! parsing, execution and rendering live in `crate::query`; this file maps
//! HTTP onto them, and holds what `/api/query/gexp` (`gexp.rs`) shares
//! with them: running a query off the async workers, tracked in
//! `/api/stats/query`, and its errors. Which of them a path reaches is
//! decided in `routes.rs`.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use hyper::Method;

use super::{Reply, method_not_allowed};
use crate::query::{self, QueryContext, QueryError, QueryResponse};
use crate::tsd::TsdState;
use crate::tsd::stats::{ShownQuery, Watched};

pub(super) fn context(state: &TsdState) -> QueryContext<'_> {
    let db = &state.db;
    QueryContext::new(db, &state.options.query)
}

/// The context of a query listed in `/api/stats/query`: it reports its
/// points read there and stops when cancelled from there.
pub(super) fn watched_context<'s>(state: &'s TsdState, w: &Watched) -> QueryContext<'s> {
    context(state).with_progress(w.progress.clone())
}

pub(super) fn error(e: QueryError) -> Reply {
    Reply::error(e.status(), &e.message(), e.details().unwrap_or(""))
}

/// Runs `f` off the async workers: queries are CPU-bound, and storage
/// reads and writes block.
pub(super) async fn blocking(
    state: &Arc<TsdState>,
    f: impl FnOnce(&TsdState) -> Reply + Send + 'static,
) -> Reply {
    let st = state.clone();
    tokio::task::spawn_blocking(move || f(&st))
        .await
        .unwrap_or_else(|_| unexpected())
}

/// Runs `f`, a short job, right here on the async worker. A panic
/// answers 500 as a failed pool task does, rather than ending the
/// connection.
fn in_place<T: From<Reply>>(f: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| unexpected().into())
}

/// The answer to a query whose run panicked.
fn unexpected() -> Reply {
    Reply::error(500, "Unexpected exception", "")
}

/// `/api/query` (GET with `m=`/`tsuid=`, POST JSON, DELETE).
/// `method` is the API method (`method_override` applied), `verb` the
/// request's own.
pub(super) async fn handle(
    state: &Arc<TsdState>,
    method: &Method,
    verb: &Method,
    raw_query: Option<String>,
    body: Option<Vec<u8>>,
    may_delete: bool,
) -> Reply {
    let delete = match delete_mode(state, method, verb) {
        Ok(delete) => delete,
        Err(refused) => return refused,
    };
    // Parsing, checking and a small query's run take less than a hand-off.
    match in_place(|| {
        begin(
            state,
            delete,
            may_delete,
            raw_query.as_deref(),
            body.as_deref(),
        )
    }) {
        Begun::Answered(reply) => reply,
        Begun::Large(w, prepared) => {
            blocking(state, move |st| {
                let ctx = watched_context(st, &w);
                finish_tracked(st, w.id, prepared.run(&ctx, Some(&st.query_cache)))
            })
            .await
        }
    }
}

impl From<Reply> for Begun {
    fn from(r: Reply) -> Self {
        Begun::Answered(r)
    }
}

/// How far `/api/query` got on the connection's async worker.
enum Begun {
    /// Answered already: refused, or small enough to run right there.
    Answered(Reply),
    /// A query to run off the async workers, listed in
    /// `/api/stats/query`.
    Large(Watched, query::Prepared),
}

/// Parses and checks a query, lists it in `/api/stats/query`, and runs it
/// when it is small ([`query::Prepared::is_small`]): it then costs less
/// than the two thread wake-ups of a hand-off to the blocking pool.
///
/// `may_delete`: whether the requester may delete data (always, without
/// authentication); a body asking `"delete": true` is refused otherwise.
fn begin(
    state: &TsdState,
    delete: bool,
    may_delete: bool,
    raw_query: Option<&str>,
    body: Option<&[u8]>,
) -> Begun {
    let parsed = match body {
        Some(b) if !b.is_empty() => query::parse_post(b),
        _ => query::parse_get(raw_query.unwrap_or("")),
    };
    let mut q = match parsed {
        Ok(q) => q,
        Err(e) => return Begun::Answered(error(e)),
    };
    q.delete |= delete;
    if q.delete && !may_delete {
        return Begun::Answered(Reply::error(
            403,
            "Forbidden",
            "A delete query needs the admin role",
        ));
    }
    // The serializer reads `?arrays` from the query string whatever
    // the method (`HttpJsonSerializer.formatQueryAsyncV1`), so a POST
    // body's answer can be in arrays too.
    q.arrays |= crate::query::request::query_pairs(raw_query.unwrap_or(""))
        .iter()
        .any(|(k, _)| k == "arrays");
    let q = Arc::new(q);
    let w = state
        .queries
        .start(ShownQuery::Parsed(q.clone()), String::new());
    let ctx = watched_context(state, &w);
    match query::prepare(&ctx, &q) {
        Ok(p) if p.is_small(&ctx) => Begun::Answered(finish_tracked(
            state,
            w.id,
            p.run(&ctx, Some(&state.query_cache)),
        )),
        Ok(p) => Begun::Large(w, p),
        Err(e) => Begun::Answered(finish_tracked(state, w.id, Err(e))),
    }
}

/// The checks `/api/query` and `/api/query/gexp` make of the method:
/// whether the request deletes what it reads, or its refusal. QueryRpc
/// refuses the DELETE verb itself when deleting is off, and turns a DELETE
/// API method (the verb or GET + method_override=delete) into a delete
/// query only when it is on. `method` is the API method
/// (`method_override` applied), `verb` the request's own.
pub(super) fn delete_mode(state: &TsdState, method: &Method, verb: &Method) -> Result<bool, Reply> {
    if !(method == Method::GET || method == Method::POST || method == Method::DELETE) {
        return Err(method_not_allowed(method));
    }
    let allowed = state.options.query.allow_delete;
    if verb == Method::DELETE && !allowed {
        return Err(Reply::error(
            400,
            "Bad request",
            "Deleting data is not enabled (tsd.http.query.allow_delete=false)",
        ));
    }
    Ok(method == Method::DELETE && allowed)
}

/// Runs a parsed query as `/api/query` does: listed in
/// `/api/stats/query` as `shown` while it runs, the rows it selected
/// deleted when it is a delete query, answered as JSON.
pub(super) fn run_tracked(
    st: &TsdState,
    shown: ShownQuery,
    run: impl FnOnce(&QueryContext) -> Result<QueryResponse, QueryError>,
) -> Reply {
    let w = st.queries.start(shown, String::new());
    finish_tracked(st, w.id, run(&watched_context(st, &w)))
}

/// The end of a query listed in `/api/stats/query` under `id`: deletes
/// the rows it selected when it is a delete query, answers as JSON and
/// records the outcome.
fn finish_tracked(st: &TsdState, id: u64, answered: Result<QueryResponse, QueryError>) -> Reply {
    let answered = answered.and_then(|r| {
        for d in &r.deletions {
            st.db
                .delete_rows(&d.tsuids, d.start_ms, d.end_ms)
                .map_err(|e| QueryError::Storage(e.to_string()))?;
        }
        Ok(r)
    });
    let reply = match answered {
        Ok(r) => Reply::json(200, r.to_json()),
        Err(e) => {
            let msg = e.to_string();
            let r = error(e);
            st.queries.finish(id, r.status, Some(msg));
            return r;
        }
    };
    st.queries.finish(id, reply.status, None);
    reply
}

/// `/api/query/last` (GET with `timeseries=`/`tsuids=`, POST JSON).
pub(super) async fn handle_last(
    state: &Arc<TsdState>,
    method: &Method,
    raw_query: Option<String>,
    body: Option<Vec<u8>>,
) -> Reply {
    if !(method == Method::GET || method == Method::POST) {
        return method_not_allowed(method);
    }
    blocking(state, move |st| {
        let parsed = match body.as_deref() {
            Some(b) if !b.is_empty() => query::parse_last_post(b),
            _ => query::parse_last_get(raw_query.as_deref().unwrap_or("")),
        };
        let q = match parsed {
            Ok(q) => q,
            Err(e) => return error(e),
        };
        match query::execute_last(&context(st), &q) {
            Ok(v) => Reply::json(200, v.to_string()),
            Err(e) => error(e),
        }
    })
    .await
}

/// `/api/query/exp` (POST JSON; QueryRpc lets GET and DELETE through too,
/// where the missing body is the error).
pub(super) async fn handle_exp(
    state: &Arc<TsdState>,
    method: &Method,
    body: Option<Vec<u8>>,
) -> Reply {
    if !(method == Method::GET || method == Method::POST || method == Method::DELETE) {
        return method_not_allowed(method);
    }
    if method == Method::DELETE && !state.options.query.allow_delete {
        return Reply::error(
            400,
            "Bad request",
            "Deleting data is not enabled (tsd.http.query.allow_delete=false)",
        );
    }
    blocking(state, move |st| {
        let ctx = context(st);
        let prepared = match query::exp::prepare(&ctx, body.as_deref().unwrap_or(b"")) {
            Ok(p) => p,
            Err(e) => return error(e),
        };
        let w = st.queries.start(
            ShownQuery::Json(
                serde_json::to_value(prepared.query()).unwrap_or(serde_json::Value::Null),
            ),
            String::new(),
        );
        let ctx = ctx.with_progress(w.progress.clone());
        match prepared.run(&ctx, Some(&st.query_cache)) {
            Ok(json) => {
                st.queries.finish(w.id, 200, None);
                Reply::json(200, json)
            }
            Err(e) => {
                let msg = e.to_string();
                let r = error(e);
                st.queries.finish(w.id, r.status, Some(msg));
                r
            }
        }
    })
    .await
}
