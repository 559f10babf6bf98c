//! `/api/query/gexp`: maps HTTP onto `crate::query::gexp`.

use std::sync::Arc;

use hyper::Method;

use super::query::{blocking, context, error};
use super::{Reply, method_not_allowed};
use crate::query::{self, QueryError};
use crate::tsd::TsdState;

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
    if !(method == Method::GET || method == Method::POST || method == Method::DELETE) {
        return method_not_allowed(method);
    }
    let allowed = state.options.query.allow_delete;
    if verb == Method::DELETE && !allowed {
        return Reply::error(
            400,
            "Bad request",
            "Deleting data is not enabled (tsd.http.query.allow_delete=false)",
        );
    }
    let delete = method == Method::DELETE && allowed;
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
        let id = st.queries.start(
            serde_json::to_value(&q.query).unwrap_or(serde_json::Value::Null),
            String::new(),
        );
        let answered = query::execute_gexp(&context(st), &q).and_then(|r| {
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
    })
    .await
}
