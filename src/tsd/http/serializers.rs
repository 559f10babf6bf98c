//! `/api/serializers` and the choice of serializer (`?serializer=`), as
//! OpenTSDB 2.2 and 2.3 served them and its documentation describes them.
//! 2.4.0 and 2.4.1 answer 404 at `/api/serializers` only because the line
//! registering it in `RpcManager` was dropped (the `Serializers` RPC class
//! is still there); clients written against the docs call it (the Go
//! client bluebreezecf/opentsdb-goclient does before anything else), so
//! rtsdb serves it.
//!
//! rtsdb has one serializer, OpenTSDB's default `json`
//! (`HttpJsonSerializer`). `HttpQuery.initializeSerializerMaps` lists the
//! default serializer by the public `parse*`/`format*` methods of the
//! `HttpSerializer` base class, which is what [`PARSERS`] and
//! [`FORMATTERS`] hold (in declaration order: Java's reflection gives no
//! fixed order; overloaded methods appear twice, as in an `ArrayList`).

use hyper::Method;

use super::{Call, Query, Reply, allow};

/// The one serializer: OpenTSDB's short name for `HttpJsonSerializer`.
pub(crate) const JSON: &str = "json";

const PARSERS: &[&str] = &[
    "PutV1",
    "PutV1",
    "SuggestV1",
    "UidAssignV1",
    "UidRenameV1",
    "SearchQueryV1",
    "QueryV1",
    "LastPointQueryV1",
    "UidMetaV1",
    "TSMetaV1",
    "TreeV1",
    "TreeRuleV1",
    "TreeRulesV1",
    "TreeTSUIDsListV1",
    "AnnotationV1",
    "AnnotationsV1",
    "AnnotationBulkDeleteV1",
];

const FORMATTERS: &[&str] = &[
    "PutV1",
    "SuggestV1",
    "SerializersV1",
    "AggregatorsV1",
    "VersionV1",
    "DropCachesV1",
    "UidAssignV1",
    "UidRenameV1",
    "QueryV1",
    "QueryAsyncV1",
    "LastPointQueryV1",
    "UidMetaV1",
    "TSMetaV1",
    "TSMetaListV1",
    "BranchV1",
    "TreeV1",
    "TreesV1",
    "TreeRuleV1",
    "TreeCollisionNotMatchedV1",
    "TreeTestV1",
    "AnnotationV1",
    "AnnotationsV1",
    "AnnotationBulkDeleteV1",
    "StatsV1",
    "ThreadStatsV1",
    "RegionStatsV1",
    "JVMStatsV1",
    "QueryStatsV1",
    "SearchResultsV1",
    "ConfigV1",
    "FilterConfigV1",
    "NotFoundV1",
    "ErrorV1",
    "ErrorV1",
];

/// `GET|POST /api/serializers`.
pub(crate) fn http(c: &Call) -> Reply {
    if let Err(r) = allow(c, &[Method::GET, Method::POST]) {
        return r;
    }
    // The keys in the order OpenTSDB's `HashMap` gives them (what 2.3
    // actually sent; the docs list them in another order). No `version`:
    // OpenTSDB leaves it out for the default serializer.
    let body = format!(
        "[{{\"request_content_type\":\"application/json\",\"formatters\":{},\"response_content_type\":\"application/json; charset=UTF-8\",\"parsers\":{},\"serializer\":\"{JSON}\",\"class\":\"net.opentsdb.tsd.HttpJsonSerializer\"}}]",
        serde_json::to_string(FORMATTERS).expect("json"),
        serde_json::to_string(PARSERS).expect("json"),
    );
    Reply::json(200, body)
}

/// `HttpQuery.setSerializer`: `?serializer=` must name a loaded serializer
/// (any path, before the route is looked up); a `Content-Type` that names
/// none falls back to the default, so it is never an error.
pub(crate) fn check_requested(q: &Query, api: bool) -> Result<(), Reply> {
    match q.get("serializer") {
        Some(name) if name != JSON => {
            let details = format!("Could not find a serializer with the name: {name}");
            Err(if api {
                Reply::error(400, "Requested serializer was not found", &details)
            } else {
                super::legacy_bad_request(q, "Requested serializer was not found")
            })
        }
        _ => Ok(()),
    }
}

/// `?jsonp=<fn>`: the JSON serializer wraps what it writes, answers and
/// errors alike, in `fn(...)` on `/api/` paths (legacy paths write their
/// JSON without it). OpenTSDB 2.4.1 answers some endpoints with a 500
/// "Missing callback name" for an empty `jsonp=`; rtsdb leaves the answer
/// unwrapped instead.
pub(crate) fn wrap_jsonp(callback: &str, reply: &mut Reply) {
    if callback.is_empty() || !reply.is_json() || reply.body.is_empty() {
        return;
    }
    let mut body = Vec::with_capacity(reply.body.len() + callback.len() + 2);
    body.extend_from_slice(callback.as_bytes());
    body.push(b'(');
    body.extend_from_slice(&reply.body);
    body.push(b')');
    reply.body = body;
}
