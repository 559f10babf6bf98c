//! `/api/query/gexp`: maps HTTP onto `crate::query::gexp`.

use std::sync::Arc;

use hyper::Method;

use super::Reply;
use super::query::{blocking, delete_mode, error, run_tracked};
use crate::query;
use crate::tsd::TsdState;
use crate::tsd::stats::ShownQuery;

/// GET (or DELETE, which deletes what the sub-queries read when
/// `tsd.http.query.allow_delete` is on, as for `/api/query`). `method` is
/// the API method (`method_override` applied), `verb` the request's own.
pub(super) async fn handle(
    state: &Arc<TsdState>,
    method: &Method,
    verb: &Method,
    raw_query: Option<String>,
    body: Option<Vec<u8>>,
) -> Reply {
    let delete = match delete_mode(state, method, verb) {
        Ok(delete) => delete,
        Err(refused) => return refused,
    };
    let post = method == Method::POST;
    blocking(state, move |st| {
        if post {
            // 2.4.1 reads a POST's JSON query (with its errors), runs it,
            // then fails on the expressions a JSON body cannot carry and
            // never answers. Refuse it plainly, after the body's own
            // errors.
            return match query::parse_post(body.as_deref().unwrap_or(b"")) {
                Err(e) => error(e),
                Ok(_) => Reply::error(
                    400,
                    "Expressions are only read from the exp= parameters of a GET request",
                    "",
                ),
            };
        }
        let mut q = match query::parse_gexp(raw_query.as_deref().unwrap_or("")) {
            Ok(q) => q,
            Err(e) => return error(e),
        };
        q.query.delete |= delete;
        let shown = ShownQuery::Parsed(Arc::new(q.query.clone()));
        run_tracked(st, shown, |ctx| {
            query::execute_gexp(ctx, &q, Some(&st.query_cache))
        })
    })
    .await
}
