//! The route table: OpenTSDB's paths (`/api/<x>`, `/api/v<N>/<x>`,
//! case-insensitive first component, legacy `/<x>`), each mapped to one
//! handler, and which configurations serve it (`tsd.mode`,
//! `tsd.core.enable_api`, `tsd.core.enable_ui`, `tsd.no_diediedie`), as
//! `RpcManager.initializeBuiltinRpcs` registers them. Commands telnet
//! serves too are handled in `crate::tsd::rpc`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request};

use super::call::{Call, body_unless_get, read_body};
use super::reply::{Query, Reply, not_found};
use super::{annotation, gexp, histogram, metrics, otlp, prometheus, put, query, rollup, search};
use super::{backup, graph, influx, logs, serializers, suggest, tree, ui, uid};
use crate::tsd::TsdState;
use crate::tsd::rpc::{self, Serve};

const MAX_API_VERSION: u32 = 1;

pub(super) type BoxReply = Pin<Box<dyn Future<Output = Reply> + Send>>;

/// How an endpoint takes its request.
#[derive(Clone, Copy)]
pub(super) enum Handler {
    /// Answers from the request line and headers alone.
    Head(fn(&Call) -> Reply),
    /// Gets the body of non-GET requests (OpenTSDB never reads a GET
    /// body), read and decompressed.
    Body(fn(&Call, Option<&[u8]>) -> Reply),
    /// Reads the body itself and may wait (put, query).
    Async(fn(Call, Incoming) -> BoxReply),
}

/// Which paths a row answers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum At {
    /// `/api/<x>`, when `tsd.core.enable_api` is set.
    Api,
    /// `/<x>`, when `tsd.core.enable_ui` is set.
    Legacy,
    /// Both, one handler (the commands of `crate::tsd::rpc`).
    Both,
}

/// One row of the table.
struct Route {
    /// Lower-cased endpoint: `put`, `version`, ...
    endpoint: &'static str,
    at: At,
    serve: Serve,
    handler: Handler,
}

const fn route(endpoint: &'static str, at: At, serve: Serve, handler: Handler) -> Route {
    Route {
        endpoint,
        at,
        serve,
        handler,
    }
}

use At::{Api, Both, Legacy};
use Handler::{Async, Body, Head};
use Serve::{Always, Backups, DieDieDie, Reads, Writes};

const ANNOTATION: Handler = Async(|c, b| Box::pin(annotation::route(c, b, false)));
/// `/api/annotations`: the same RPC, but a GET lists global annotations.
const ANNOTATIONS: Handler = Async(|c, b| Box::pin(annotation::route(c, b, true)));

static ROUTES: &[Route] = &[
    route("put", Api, Writes, Async(|c, b| Box::pin(put::route(c, b)))),
    route(
        "rollup",
        Api,
        Writes,
        Async(|c, b| Box::pin(rollup::route(c, b))),
    ),
    route(
        "histogram",
        Api,
        Writes,
        Async(|c, b| Box::pin(histogram::route(c, b))),
    ),
    route(
        "query",
        Api,
        Reads,
        Async(|c, b| Box::pin(query_route(c, b))),
    ),
    route("annotation", Api, Always, ANNOTATION),
    route("annotations", Api, Always, ANNOTATIONS),
    route("version", Both, Always, Head(rpc::version::http)),
    route("aggregators", Both, Always, Head(rpc::aggregators::http)),
    route("dropcaches", Both, Always, Head(rpc::dropcaches::http)),
    route("stats", Both, Always, Head(rpc::stats::http)),
    route("config", Api, Always, Head(rpc::config::http)),
    route("serializers", Api, Always, Head(serializers::http)),
    route(
        "suggest",
        Api,
        Reads,
        Body(|c, b| suggest::handle(&c.state, &c.method, &c.query, b)),
    ),
    route(
        "suggest",
        Legacy,
        Reads,
        Head(|c| suggest::handle_legacy(&c.state, &c.query)),
    ),
    route(
        "search",
        Api,
        Reads,
        Body(|c, b| search::handle(&c.state, &c.method, &c.rest, &c.query, b)),
    ),
    route(
        "uid",
        Api,
        Writes,
        Body(|c, b| uid::handle(&c.state, &c.method, &c.rest, &c.query, b)),
    ),
    route(
        "tree",
        Api,
        Writes,
        Body(|c, b| tree::handle(&c.state, &c.method, &c.rest, &c.query, b)),
    ),
    route("metrics", Legacy, Always, Head(metrics::http)),
    // The page, its files and `/q`: rw and ro, with the UI on.
    route("", Legacy, Reads, Head(ui::home)),
    route("s", Legacy, Reads, Head(ui::static_file)),
    route("favicon.ico", Legacy, Reads, Head(ui::favicon)),
    route(
        "q",
        Legacy,
        Reads,
        Async(|c, b| Box::pin(graph::route(c, b))),
    ),
    route("logs", Legacy, Always, Head(logs::http)),
    route("diediedie", Legacy, DieDieDie, Head(rpc::diediedie::http)),
    route(
        "backup",
        Api,
        Backups,
        Async(|c, b| Box::pin(backup::route(c, b))),
    ),
];

/// `/api/query/<x>`: reads the body of POST requests only (a DELETE's
/// query is in its query string), then `/api/query`, `/last`, `/gexp` or
/// `/exp`.
async fn query_route(c: Call, body: Incoming) -> Reply {
    let body = if c.method == Method::POST && *c.verb() != Method::GET {
        match read_body(&c, body).await {
            Ok(b) => Some(b),
            Err(r) => return r,
        }
    } else {
        None
    };
    let raw = c.head.uri.query().map(String::from);
    match c.rest.first().map(String::as_str) {
        None | Some("") => {
            let admin = super::access::may(&c.state, &c.head, crate::auth::Role::Admin);
            query::handle(&c.state, &c.method, c.verb(), raw, body, admin).await
        }
        Some("last") => query::handle_last(&c.state, &c.method, raw, body).await,
        // QueryRpc compares the endpoint in lower case.
        Some(e) if e.eq_ignore_ascii_case("gexp") => {
            gexp::handle(&c.state, &c.method, c.verb(), raw, body).await
        }
        Some(e) if e.eq_ignore_ascii_case("exp") => {
            query::handle_exp(&c.state, &c.method, body).await
        }
        Some(_) => not_found(true, &c.query),
    }
}

/// Where a path leads, before the table is consulted.
struct Path {
    /// Lower-cased; empty for `/` and `/api`.
    endpoint: String,
    api_version: u32,
    rest: Vec<String>,
}

fn parse_path(path: &str) -> Result<Path, Reply> {
    let parts: Vec<&str> = path.split('/').skip(1).filter(|p| !p.is_empty()).collect();
    let lower_from = |i: usize| -> Vec<String> {
        parts
            .iter()
            .skip(i)
            .map(|p| p.to_ascii_lowercase())
            .collect()
    };
    let first = parts
        .first()
        .map(|p| p.to_ascii_lowercase())
        .unwrap_or_default();
    if first != "api" {
        return Ok(Path {
            endpoint: first,
            api_version: 0,
            rest: lower_from(1),
        });
    }
    let mut i = 1;
    let mut version = MAX_API_VERSION;
    if let Some(p) = parts.get(1) {
        let b = p.as_bytes();
        if b.len() > 1 && (b[0] == b'v' || b[0] == b'V') && b[1].is_ascii_digit() {
            version = p[1..]
                .parse::<u32>()
                .map_err(|_| Reply::error(400, "Invalid API version format supplied", ""))?;
            if version > MAX_API_VERSION {
                return Err(Reply::error(
                    501,
                    "Requested API version is greater than the max implemented",
                    &format!("API version [{version}] is greater than the max [{MAX_API_VERSION}]"),
                ));
            }
            i = 2;
        }
    }
    let endpoint = parts
        .get(i)
        .map(|p| p.to_ascii_lowercase())
        .unwrap_or_default();
    Ok(Path {
        endpoint,
        api_version: version.max(1),
        rest: lower_from(i + 1),
    })
}

/// `getAPIMethod`: the verb, with `method_override` honoured on GET.
fn api_method(method: &Method, q: &Query) -> Result<Method, Reply> {
    if method != Method::GET {
        return Ok(method.clone());
    }
    match q.get("method_override") {
        None => Ok(Method::GET),
        Some("") => Err(Reply::error(405, "Missing method override value", "")),
        Some(m) => match m.to_ascii_lowercase().as_str() {
            "get" => Ok(Method::GET),
            "post" => Ok(Method::POST),
            "put" => Ok(Method::PUT),
            "delete" => Ok(Method::DELETE),
            _ => Err(Reply::error(
                405,
                "Unknown or unsupported method override value",
                "",
            )),
        },
    }
}

/// Routes a request to its handler.
pub(super) async fn dispatch(state: &Arc<TsdState>, req: Request<Incoming>) -> Reply {
    let (head, body) = req.into_parts();
    if otlp::owns(head.uri.path()) {
        return otlp::route(state, head, body).await;
    }
    if prometheus::owns(head.uri.path()) {
        return prometheus::dispatch(state, head, body).await;
    }
    if influx::owns(head.uri.path()) {
        return influx::dispatch(state, head, body).await;
    }
    let query = Query::parse(head.uri.query());
    let path = head.uri.path();
    if !path.starts_with('/') {
        return Reply::error(400, "Bad Request", "The URI must start with a slash");
    }
    let path = match parse_path(path) {
        Ok(p) => p,
        Err(reply) => return reply,
    };
    let jsonp = (path.api_version > 0)
        .then(|| query.get("jsonp").map(str::to_owned))
        .flatten();
    let mut reply = dispatch_to(state, head, body, path, query).await;
    if let Some(callback) = jsonp {
        serializers::wrap_jsonp(&callback, &mut reply);
    }
    reply
}

/// [`dispatch`] once the path is known.
async fn dispatch_to(
    state: &Arc<TsdState>,
    head: hyper::http::request::Parts,
    body: Incoming,
    path: Path,
    query: Query,
) -> Reply {
    let api = path.api_version > 0;
    if let Err(r) = serializers::check_requested(&query, api) {
        return r;
    }
    let method = match api_method(&head.method, &query) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let o = &state.options;
    let (enabled, at) = if api {
        (o.enable_api, Api)
    } else {
        (o.enable_ui, Legacy)
    };
    let found = ROUTES
        .iter()
        .find(|r| r.endpoint == path.endpoint && (r.at == at || r.at == Both) && r.serve.on(o))
        .filter(|_| enabled);
    let Some(found) = found else {
        return not_found(api, &query);
    };
    let call = Call {
        state: state.clone(),
        head,
        method,
        api_version: path.api_version,
        rest: path.rest,
        query,
        body_hold: std::sync::OnceLock::new(),
    };
    match found.handler {
        Head(f) => f(&call),
        Body(f) => match body_unless_get(&call, body).await {
            Ok(b) => f(&call, b.as_deref()),
            Err(r) => r,
        },
        Async(f) => f(call, body).await,
    }
}
