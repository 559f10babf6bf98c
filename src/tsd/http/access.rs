//! Who may send which HTTP request, when `tsd.core.authentication.enable`
//! is on (docs/security.md). [`required`] derives the role a request needs
//! from its method and path alone, by one table ([`RULES`]); a path the
//! table does not name needs `admin`, so a new endpoint is closed until
//! its row is added (one line: an ingest route is `rule("/path", WRITE,
//! WRITE)`). [`admit`] reads the credentials, checks them (a verified
//! token costs a map lookup; a new one an argon2 hash off the async
//! workers) and answers 401 or 403 in OpenTSDB's error shape.

use std::net::SocketAddr;
use std::sync::Arc;

use hyper::Method;
use hyper::header::AUTHORIZATION;
use hyper::http::request::Parts;

use super::reply::{Query, Reply};
use crate::auth::{AUDIT_TARGET, Authenticator, Credentials, Need, Principal, Quick, Role};
use crate::tsd::TsdState;

/// The peer of the connection a request came on, put in each request's
/// extensions by the server, for the audit log.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub SocketAddr);

/// The user a request was admitted as, in its extensions (handlers that
/// find out more about a request from its body, as a delete query, check
/// it with [`may`]).
#[derive(Debug, Clone)]
pub(crate) struct Admitted(pub Arc<Principal>);

const OPEN: Need = Need::Open;
const READ: Need = Need::Role(Role::Read);
const WRITE: Need = Need::Role(Role::Write);
const ADMIN: Need = Need::Role(Role::Admin);

/// One row: a path (lower case, no empty segments; `/api/v1/x` of
/// OpenTSDB's API is looked up as `/api/x` when no row names it as sent),
/// matching itself and every path below it, and what GET/HEAD and every
/// other method need.
struct Rule {
    path: &'static str,
    get: Need,
    other: Need,
}

const fn rule(path: &'static str, get: Need, other: Need) -> Rule {
    Rule { path, get, other }
}

/// The table. The longest matching path wins. Other helpers' routes of
/// this round belong here as one row each.
static RULES: &[Rule] = &[
    // Ingest.
    rule("/api/put", WRITE, WRITE),
    rule("/api/rollup", WRITE, WRITE),
    rule("/api/histogram", WRITE, WRITE),
    rule("/api/v1/write", WRITE, WRITE),
    rule("/prometheus/api/v1/write", WRITE, WRITE),
    rule("/write", WRITE, WRITE),
    rule("/api/v2/write", WRITE, WRITE),
    // InfluxDB clients probe it before anything else, as a health check.
    rule("/ping", OPEN, OPEN),
    // Annotations: read to see them, write to change them.
    rule("/api/annotation", READ, WRITE),
    rule("/api/annotations", READ, WRITE),
    // Queries (POST asks too; a DELETE or a delete query is admin's).
    rule("/api/query", READ, READ),
    rule("/prometheus", READ, READ),
    rule("/prometheus/api/v1/admin", ADMIN, ADMIN),
    rule("/api/suggest", READ, READ),
    rule("/suggest", READ, READ),
    rule("/api/search", READ, READ),
    rule("/api/aggregators", READ, READ),
    rule("/aggregators", READ, READ),
    rule("/api/serializers", READ, READ),
    rule("/api/stats", READ, ADMIN),
    rule("/stats", READ, ADMIN),
    rule("/api/version", READ, READ),
    rule("/version", READ, READ),
    rule("/metrics", READ, READ),
    rule("/q", READ, READ),
    // UIDs, meta and trees: read them; assign, rename, delete as admin
    // (`/api/uid/assign` assigns on GET too).
    rule("/api/uid", READ, ADMIN),
    rule("/api/uid/assign", ADMIN, ADMIN),
    rule("/api/tree", READ, ADMIN),
    // The page's own files show no data; its data comes through the API.
    rule("/", OPEN, ADMIN),
    rule("/s", OPEN, ADMIN),
    rule("/favicon.ico", OPEN, ADMIN),
    // Administration.
    rule("/api/dropcaches", ADMIN, ADMIN),
    rule("/dropcaches", ADMIN, ADMIN),
    rule("/api/config", ADMIN, ADMIN),
    rule("/api/backup", ADMIN, ADMIN),
    rule("/logs", ADMIN, ADMIN),
    rule("/diediedie", ADMIN, ADMIN),
];

/// The request's path as the table is keyed: lower case, empty segments
/// dropped (the router drops them too).
fn normal(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for seg in path.split('/').filter(|s| !s.is_empty()) {
        out.push('/');
        out.push_str(&seg.to_ascii_lowercase());
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

fn lookup(path: &str) -> Option<&'static Rule> {
    RULES
        .iter()
        .filter(|r| {
            path == r.path
                || (path.starts_with(r.path)
                    && (r.path == "/" || path.as_bytes().get(r.path.len()) == Some(&b'/')))
        })
        // The page's `/` row is not a prefix of every path.
        .filter(|r| r.path != "/" || path == "/")
        .max_by_key(|r| r.path.len())
}

/// OpenTSDB's `/api/v<N>/x` as `/api/x`.
fn unversioned(path: &str) -> Option<String> {
    let rest = path.strip_prefix("/api/v")?;
    let (digits, tail) = rest.split_once('/').unwrap_or((rest, ""));
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| format!("/api/{tail}"))
}

/// What a request needs: its rule's, the stricter of the verb's and a
/// `method_override`'s; a delete query by its verb or `method_override`
/// is admin's. Pure, so the table can be tested without a server.
pub(crate) fn required(method: &Method, path: &str, query: &Query, open_version: bool) -> Need {
    let path = normal(path);
    let found = lookup(&path).or_else(|| unversioned(&path).and_then(|p| lookup(&p)));
    let Some(rule) = found else {
        return ADMIN;
    };
    if open_version && (rule.path == "/api/version" || rule.path == "/version") {
        return OPEN;
    }
    let overridden = query.get("method_override").map(str::to_ascii_lowercase);
    let reads = |m: &Method| m == Method::GET || m == Method::HEAD;
    let plain_read = reads(method) && overridden.as_deref().is_none_or(|m| m == "get");
    let deleting = method == Method::DELETE || overridden.as_deref() == Some("delete");
    if rule.path == "/api/query" && deleting {
        return ADMIN;
    }
    if plain_read { rule.get } else { rule.other }
}

/// Whether the user a request was admitted as holds `role` (always, with
/// authentication off).
pub(crate) fn may(state: &TsdState, head: &Parts, role: Role) -> bool {
    state.auth.is_none()
        || head
            .extensions
            .get::<Admitted>()
            .is_some_and(|a| a.0.roles.has(role))
}

fn unauthorized(details: &str) -> Reply {
    Reply::error(401, "Authentication required", details)
        .with_header("www-authenticate", "Bearer realm=\"rtsdb\"")
}

/// The credentials a request carries: its `Authorization` header, else
/// InfluxDB 1.x's `u` and `p` parameters.
fn credentials(head: &Parts, query: &Query) -> Result<Option<Credentials>, Reply> {
    if let Some(v) = head.headers.get(AUTHORIZATION) {
        return Credentials::from_authorization(v.as_bytes())
            .map(Some)
            .map_err(|e| unauthorized(&e.to_string()));
    }
    match (query.get("u"), query.get("p")) {
        (Some(u), Some(p)) => Credentials::from_user_password(u, p)
            .map(Some)
            .map_err(|e| unauthorized(&e.to_string())),
        _ => Ok(None),
    }
}

/// Checks a request before it is routed: `Ok` to serve it (the user put
/// in its extensions, and returned with what it needed so that admin
/// actions can be logged), or the 401/403 to answer.
pub(crate) async fn admit(
    state: &Arc<TsdState>,
    auth: &Arc<Authenticator>,
    head: &mut Parts,
) -> Result<(Need, Option<Arc<Principal>>), Reply> {
    let query = Query::parse(head.uri.query());
    let need = required(
        &head.method,
        head.uri.path(),
        &query,
        state.options.auth.open_version,
    );
    let Need::Role(role) = need else {
        return Ok((need, None));
    };
    let peer = head.extensions.get::<Peer>().map(|p| p.0.to_string());
    let peer = peer.as_deref().unwrap_or("-");
    let creds = match credentials(head, &query) {
        Ok(Some(c)) => c,
        Ok(None) => return Err(unauthorized("No credentials sent")),
        Err(r) => {
            tracing::warn!(target: AUDIT_TARGET, action = "auth.fail", protocol = "http", peer, path = head.uri.path(), reason = "malformed credentials", "authentication failed");
            return Err(r);
        }
    };
    let checked = match auth.quick(&creds) {
        Quick::Known(p) => Ok(p),
        Quick::Refused(r) => Err(r),
        Quick::NeedsHash => {
            let a = auth.clone();
            let c = creds.clone();
            match tokio::task::spawn_blocking(move || a.verify(&c)).await {
                Ok(r) => r,
                Err(_) => return Err(Reply::error(500, "Authentication check failed", "")),
            }
        }
    };
    let principal = match checked {
        Ok(p) => p,
        Err(refusal) => {
            tracing::warn!(target: AUDIT_TARGET, action = "auth.fail", protocol = "http", peer, user = creds.name.as_deref().unwrap_or("-"), path = head.uri.path(), reason = refusal.reason(), "authentication failed");
            return Err(unauthorized("Invalid credentials"));
        }
    };
    if !principal.roles.has(role) {
        tracing::warn!(target: AUDIT_TARGET, action = "access.denied", protocol = "http", peer, user = %principal.name, method = %head.method, path = head.uri.path(), need = %role, "role missing");
        return Err(Reply::error(
            403,
            "Forbidden",
            &format!("User {} does not hold the {role} role", principal.name),
        ));
    }
    head.extensions.insert(Admitted(principal.clone()));
    Ok((need, Some(principal)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn need(method: Method, uri: &str) -> Need {
        let (path, q) = uri.split_once('?').unwrap_or((uri, ""));
        required(&method, path, &Query::parse(Some(q)), false)
    }

    #[test]
    fn each_family_needs_its_role_and_unknown_paths_need_admin() {
        use Method as M;
        assert_eq!(need(M::POST, "/api/put"), WRITE);
        assert_eq!(need(M::POST, "/api/v1/put"), WRITE);
        assert_eq!(need(M::POST, "/API//put?details"), WRITE);
        assert_eq!(need(M::POST, "/api/v1/write"), WRITE);
        assert_eq!(need(M::GET, "/api/query?m=sum:x"), READ);
        assert_eq!(need(M::POST, "/api/query/last"), READ);
        assert_eq!(need(M::DELETE, "/api/query?m=sum:x"), ADMIN);
        assert_eq!(
            need(M::GET, "/api/query?m=sum:x&method_override=delete"),
            ADMIN
        );
        assert_eq!(need(M::POST, "/prometheus/api/v1/query"), READ);
        assert_eq!(need(M::POST, "/prometheus/api/v1/write"), WRITE);
        assert_eq!(need(M::GET, "/api/uid/uidmeta?uid=1&type=metric"), READ);
        assert_eq!(need(M::GET, "/api/uid/assign?metric=x"), ADMIN);
        assert_eq!(need(M::GET, "/api/uid/uidmeta?method_override=post"), ADMIN);
        assert_eq!(need(M::GET, "/api/annotation"), READ);
        assert_eq!(need(M::POST, "/api/annotation"), WRITE);
        assert_eq!(need(M::GET, "/"), OPEN);
        assert_eq!(need(M::GET, "/s/app.js"), OPEN);
        assert_eq!(need(M::GET, "/q?start=1h-ago&m=sum:x"), READ);
        assert_eq!(need(M::GET, "/diediedie"), ADMIN);
        assert_eq!(need(M::GET, "/api/dropcaches"), ADMIN);
        assert_eq!(need(M::GET, "/no/such/thing"), ADMIN);
        assert_eq!(need(M::POST, "/write?db=x"), WRITE);
        assert_eq!(need(M::POST, "/api/v2/write"), WRITE);
        assert_eq!(need(M::GET, "/ping"), OPEN);
        assert_eq!(need(M::GET, "/sx"), ADMIN);
        assert_eq!(need(M::GET, "/api/version"), READ);
        assert_eq!(
            required(&M::GET, "/api/version", &Query::parse(None), true),
            OPEN
        );
    }
}
