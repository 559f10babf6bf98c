//! The HTTP side of the TSD: OpenTSDB's routing (`/api/<x>`,
//! `/api/v<N>/<x>`, case-insensitive first component, legacy paths),
//! method checks and `method_override`, CORS, `tsd.mode` routing, request
//! bodies (size limit, gzip/deflate), gzip responses and the JSON error
//! envelope `{"error":{"code":..,"message":..,"details":..}}`.

mod annotation;
pub mod put;
mod query;
mod search;
mod suggest;
mod uid;

use crate::query::request::query_pairs;
use std::convert::Infallible;
use std::io::Read;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use super::TsdState;
use super::stats::inc;

/// `Aggregators.java`'s 2.4 list.
pub const AGGREGATORS: [&str; 35] = [
    "sum",
    "min",
    "max",
    "avg",
    "none",
    "median",
    "mult",
    "dev",
    "diff",
    "count",
    "zimsum",
    "mimmin",
    "mimmax",
    "first",
    "last",
    "pfsum",
    "squareSum",
    "p999",
    "p99",
    "p95",
    "p90",
    "p75",
    "p50",
    "ep999r3",
    "ep99r3",
    "ep95r3",
    "ep90r3",
    "ep75r3",
    "ep50r3",
    "ep999r7",
    "ep99r7",
    "ep95r7",
    "ep90r7",
    "ep75r7",
    "ep50r7",
];

const MAX_API_VERSION: u32 = 1;
const JSON_TYPE: &str = "application/json; charset=UTF-8";
const TEXT_TYPE: &str = "text/plain; charset=UTF-8";
const HTML_TYPE: &str = "text/html; charset=UTF-8";
/// Bodies at least this long are gzipped for clients that accept it.
const GZIP_MIN: usize = 512;
/// Put bodies at least this long are checked on a blocking thread.
const BLOCKING_BODY: usize = 256 * 1024;

/// OpenTSDB's error envelope (no stack trace: there is no Java one).
pub fn error_body(code: u16, message: &str, details: &str) -> String {
    let mut s = format!(
        "{{\"error\":{{\"code\":{code},\"message\":{}",
        serde_json::to_string(message).expect("string")
    );
    if !details.is_empty() {
        s.push_str(",\"details\":");
        s.push_str(&serde_json::to_string(details).expect("string"));
    }
    s.push_str("}}");
    s
}

/// A response under construction.
struct Reply {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
}

impl Reply {
    fn json(status: u16, body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            status,
            content_type: JSON_TYPE,
            body: body.into(),
        }
    }

    fn text(status: u16, body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            status,
            content_type: TEXT_TYPE,
            body: body.into(),
        }
    }

    fn error(status: u16, message: &str, details: &str) -> Reply {
        Reply::json(status, error_body(status, message, details))
    }

    fn empty(status: u16) -> Reply {
        Reply::json(status, Vec::new())
    }
}

/// The parsed query string.
#[derive(Debug, Default)]
pub struct Query(Vec<(String, String)>);

impl Query {
    pub fn parse(q: Option<&str>) -> Query {
        Query(query_pairs(q.unwrap_or("")))
    }

    /// OpenTSDB's "present" flags: any value, even `false`, is true.
    pub fn has(&self, k: &str) -> bool {
        self.0.iter().any(|(n, _)| n == k)
    }

    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
    }
}

/// A routed request.
struct Route {
    /// Lower-cased route key: `api/put`, `version`, ...
    key: String,
    /// 0 for legacy paths.
    api_version: u32,
    /// Lower-cased path components after the endpoint.
    rest: Vec<String>,
}

fn route(path: &str) -> Result<Route, Reply> {
    let parts: Vec<&str> = path.split('/').skip(1).filter(|p| !p.is_empty()).collect();
    let first = parts
        .first()
        .map(|p| p.to_ascii_lowercase())
        .unwrap_or_default();
    if first != "api" {
        return Ok(Route {
            key: first,
            api_version: 0,
            rest: parts
                .iter()
                .skip(1)
                .map(|p| p.to_ascii_lowercase())
                .collect(),
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
    Ok(Route {
        key: if endpoint.is_empty() {
            "api".into()
        } else {
            format!("api/{endpoint}")
        },
        api_version: version.max(1),
        rest: parts
            .iter()
            .skip(i + 1)
            .map(|p| p.to_ascii_lowercase())
            .collect(),
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

fn method_not_allowed(m: &Method) -> Reply {
    Reply::error(
        405,
        "Method not allowed",
        &format!("The HTTP method [{m}] is not permitted for this endpoint"),
    )
}

fn not_found(api: bool, q: &Query) -> Reply {
    if api {
        Reply::error(404, "Endpoint not found", "")
    } else if q.has("json") {
        Reply::json(404, "{\"err\":\"Page Not Found\"}")
    } else {
        Reply {
            status: 404,
            content_type: HTML_TYPE,
            body: b"<!DOCTYPE html><html><head><title>Page Not Found</title></head><body><h2>Page Not Found</h2><blockquote><h1>404</h1>Sorry, the page you requested was not found.</blockquote></body></html>".to_vec(),
        }
    }
}

fn now_s() -> u64 {
    chrono::Utc::now().timestamp().max(0) as u64
}

/// Reads, limits and decompresses the request body.
async fn read_body(state: &TsdState, req: Request<Incoming>) -> Result<Vec<u8>, Reply> {
    let limit = state.options.max_body_bytes;
    let too_big = || {
        Reply::error(
            413,
            "Request body too large",
            &format!(
                "The request body is larger than the limit of {limit} bytes (tsd.http.request.max_chunk)"
            ),
        )
    };
    let chunked = req
        .headers()
        .get(header::TRANSFER_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    if chunked && !state.options.enable_chunked {
        return Err(Reply::error(400, "Chunked request not supported.", ""));
    }
    if let Some(len) = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && len > limit as u64
    {
        return Err(too_big());
    }
    let encoding = req
        .headers()
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default();
    let body = Limited::new(req.into_body(), limit)
        .collect()
        .await
        .map_err(|e| {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                too_big()
            } else {
                Reply::error(400, "Unable to read the request body", &e.to_string())
            }
        })?
        .to_bytes();
    let inflate = |r: &mut dyn Read| -> Result<Vec<u8>, Reply> {
        let mut out = Vec::new();
        r.take(limit as u64 + 1)
            .read_to_end(&mut out)
            .map_err(|e| {
                Reply::error(400, "Unable to decompress the request body", &e.to_string())
            })?;
        if out.len() > limit {
            return Err(too_big());
        }
        Ok(out)
    };
    match encoding.as_str() {
        "" | "identity" => Ok(body.to_vec()),
        "gzip" | "x-gzip" => inflate(&mut flate2::read::MultiGzDecoder::new(&body[..])),
        "deflate" => {
            // HTTP's deflate is zlib-wrapped; some clients send raw deflate.
            inflate(&mut flate2::read::ZlibDecoder::new(&body[..]))
                .or_else(|_| inflate(&mut flate2::read::DeflateDecoder::new(&body[..])))
        }
        other => Err(Reply::error(
            400,
            "Unsupported Content-Encoding",
            &format!("Content-Encoding [{other}] is not supported; use gzip or deflate"),
        )),
    }
}

/// The body of a request whose (overridden) verb carries one: `None` for
/// GET requests, which OpenTSDB never reads a body of.
async fn body_unless_get(
    state: &TsdState,
    req: Request<Incoming>,
) -> Result<Option<Vec<u8>>, Reply> {
    if req.method() == Method::GET {
        return Ok(None);
    }
    read_body(state, req).await.map(Some)
}

/// Parses a JSON request body with OpenTSDB's messages for an empty or
/// malformed one.
fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Reply> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(Reply::error(
            400,
            "Missing message content",
            "Supply valid JSON formatted data in the body of your request",
        ));
    }
    serde_json::from_slice(body)
        .map_err(|e| Reply::error(400, "Unable to parse the given JSON", &e.to_string()))
}

/// A JSON value as the string OpenTSDB's map parsing would give
/// (`null`: none; other non-strings: their JSON text).
fn json_text(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// hyper's entry point for one request.
pub async fn serve_request(
    state: Arc<TsdState>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    inc(&state.stats.rpc_http);
    let accept_gzip = req
        .headers()
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("gzip"));
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut cors = false;
    let reply = 'reply: {
        if !state.options.cors_domains.is_empty()
            && let Some(origin) = &origin
        {
            let allowed = state
                .options
                .cors_domains
                .iter()
                .any(|d| d == "*" || d.eq_ignore_ascii_case(origin));
            if !allowed {
                break 'reply Reply::error(200, "CORS domain not allowed", "");
            }
            cors = true;
            if req.method() == Method::OPTIONS {
                break 'reply Reply::text(200, Vec::new());
            }
        }
        dispatch(&state, req).await
    };
    if reply.status >= 400 {
        inc(&state.stats.http_errors);
    }
    let mut body = reply.body;
    let mut builder = Response::builder()
        .status(StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR));
    if reply.status != 204 {
        builder = builder.header(header::CONTENT_TYPE, reply.content_type);
    }
    if accept_gzip && body.len() >= GZIP_MIN {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        if std::io::Write::write_all(&mut enc, &body).is_ok()
            && let Ok(z) = enc.finish()
        {
            body = z;
            builder = builder.header(header::CONTENT_ENCODING, "gzip");
        }
    }
    if cors && let Some(origin) = origin {
        builder = builder
            .header(
                header::ACCESS_CONTROL_ALLOW_ORIGIN,
                HeaderValue::from_str(&origin).unwrap_or(HeaderValue::from_static("*")),
            )
            .header(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                "GET, POST, PUT, DELETE",
            )
            .header(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                HeaderValue::from_str(&state.options.cors_headers)
                    .unwrap_or(HeaderValue::from_static("")),
            );
    }
    let resp = builder
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())));
    Ok(resp)
}

async fn dispatch(state: &Arc<TsdState>, req: Request<Incoming>) -> Reply {
    let path = req.uri().path().to_string();
    let query = Query::parse(req.uri().query());
    if !path.starts_with('/') {
        return Reply::error(400, "Bad Request", "The URI must start with a slash");
    }
    let route = match route(&path) {
        Ok(r) => r,
        Err(reply) => return reply,
    };
    let api = route.api_version > 0;
    let method = match api_method(req.method(), &query) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let cfg = &state.options;
    let get_post = |m: &Method| m == Method::GET || m == Method::POST;
    if api {
        if !cfg.enable_api {
            return not_found(true, &query);
        }
        match route.key.as_str() {
            "api/put" if cfg.mode.writes() => {
                if method != Method::POST {
                    return method_not_allowed(&method);
                }
                if req.method() == Method::GET {
                    return Reply::error(
                        400,
                        "Missing message content",
                        "Supply valid JSON formatted data in the body of your request",
                    );
                }
                handle_put(state, req, &query).await
            }
            "api/query" if cfg.mode != super::Mode::WriteOnly => {
                let raw = req.uri().query().map(String::from);
                let verb = req.method().clone();
                let body = if method == Method::POST && req.method() != Method::GET {
                    match read_body(state, req).await {
                        Ok(b) => Some(b),
                        Err(r) => return r,
                    }
                } else {
                    None
                };
                match route
                    .rest
                    .first()
                    .map(|s| s.to_ascii_lowercase())
                    .as_deref()
                {
                    None | Some("") => query::handle(state, &method, &verb, raw, body).await,
                    Some("last") => query::handle_last(state, &method, raw, body).await,
                    Some(_) => not_found(true, &query),
                }
            }
            "api/annotation" | "api/annotations" => {
                let body = if method != Method::GET && req.method() != Method::GET {
                    match read_body(state, req).await {
                        Ok(b) => Some(b),
                        Err(r) => return r,
                    }
                } else {
                    None
                };
                annotation::handle(state, &method, &route.rest, query, body).await
            }
            "api/version" => {
                if !get_post(&method) {
                    return method_not_allowed(&method);
                }
                Reply::json(200, crate::version::json().to_string())
            }
            "api/aggregators" => {
                if !get_post(&method) {
                    return method_not_allowed(&method);
                }
                Reply::json(200, serde_json::to_string(&AGGREGATORS[..]).expect("json"))
            }
            "api/dropcaches" => {
                if !(get_post(&method) || method == Method::DELETE) {
                    return method_not_allowed(&method);
                }
                state.db.drop_caches();
                Reply::json(200, "{\"message\":\"Caches dropped\",\"status\":\"200\"}")
            }
            "api/stats" => {
                if !get_post(&method) {
                    return method_not_allowed(&method);
                }
                match route.rest.first().map(String::as_str) {
                    Some("query") => Reply::json(200, state.queries.json().to_string()),
                    _ => Reply::json(200, state.stats_report().json().to_string()),
                }
            }
            "api/config" => {
                if !get_post(&method) {
                    return method_not_allowed(&method);
                }
                match route.rest.first().map(String::as_str) {
                    None => {}
                    Some("filters") => {
                        return Reply::json(200, crate::query::filter::filters_json().to_string());
                    }
                    Some(_) => return not_found(true, &query),
                }
                let map: serde_json::Map<String, serde_json::Value> = state
                    .settings
                    .entries()
                    .map(|(k, v)| (k.to_string(), v.into()))
                    .collect();
                Reply::json(200, serde_json::Value::Object(map).to_string())
            }
            "api/suggest" if cfg.mode != super::Mode::WriteOnly => {
                match body_unless_get(state, req).await {
                    Ok(body) => suggest::handle(state, &method, &query, body.as_deref()),
                    Err(r) => r,
                }
            }
            "api/search" if cfg.mode != super::Mode::WriteOnly => {
                match body_unless_get(state, req).await {
                    Ok(body) => {
                        search::handle(state, &method, &route.rest, &query, body.as_deref())
                    }
                    Err(r) => r,
                }
            }
            "api/uid" if cfg.mode.writes() => match body_unless_get(state, req).await {
                Ok(body) => uid::handle(state, &method, &route.rest, &query, body.as_deref()),
                Err(r) => r,
            },
            _ => not_found(true, &query),
        }
    } else {
        if !cfg.enable_ui {
            return not_found(false, &query);
        }
        match route.key.as_str() {
            "version" => {
                if query.has("json") {
                    Reply::json(200, crate::version::json().to_string())
                } else {
                    Reply::text(200, format!("{}\n", crate::version::version_lines()))
                }
            }
            "aggregators" => {
                Reply::json(200, serde_json::to_string(&AGGREGATORS[..]).expect("json"))
            }
            "stats" => {
                let lines = state.stats_report().lines();
                if query.has("json") {
                    Reply::json(200, serde_json::to_string(&lines).expect("json"))
                } else {
                    let mut s = lines.join("\n");
                    s.push('\n');
                    Reply::text(200, s)
                }
            }
            "suggest" if cfg.mode != super::Mode::WriteOnly => {
                suggest::handle_legacy(state, &query)
            }
            "metrics" => Reply {
                status: 200,
                content_type: "text/plain; version=0.0.4; charset=utf-8",
                body: state.stats_report().prometheus().into_bytes(),
            },
            "dropcaches" => {
                state.db.drop_caches();
                Reply::text(200, "Caches dropped.\n")
            }
            "diediedie" if !cfg.no_diediedie => {
                state.request_shutdown();
                Reply::text(200, "Cleaning up and exiting now.\n")
            }
            _ => not_found(false, &query),
        }
    }
}

async fn handle_put(state: &Arc<TsdState>, req: Request<Incoming>, q: &Query) -> Reply {
    let flags = put::PutFlags {
        summary: q.has("summary"),
        details: q.has("details"),
        sync: q.has("sync"),
        sync_timeout: if q.has("sync") {
            q.get("sync_timeout")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        } else {
            0
        },
    };
    let header_tag = if state.options.header_tag.is_empty() {
        None
    } else {
        req.headers()
            .get(state.options.header_tag.as_str())
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
    };
    let body = match read_body(state, req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let text = match std::str::from_utf8(&body) {
        Ok(t) => t.trim().to_string(),
        Err(_) => String::from_utf8_lossy(&body).trim().to_string(),
    };
    drop(body);
    if text.is_empty() {
        return Reply::error(
            400,
            "Missing message content",
            "Supply valid JSON formatted data in the body of your request",
        );
    }
    let len = text.len();
    let st = state.clone();
    let check =
        move || -> Result<(Vec<crate::write::PendingPoint>, put::PutOutcome, usize), Reply> {
            let fixed;
            let parsed = match put::parse_body(&text) {
                Ok(p) => p,
                Err(first) => {
                    fixed = put::quote_non_numeric(&text).ok_or_else(|| {
                        Reply::error(400, "Unable to parse the given JSON", &first.0)
                    })?;
                    put::parse_body(&fixed)
                        .map_err(|e| Reply::error(400, "Unable to parse the given JSON", &e.0))?
                }
            };
            if parsed.is_empty() {
                return Err(Reply::error(400, "No datapoints found in content", ""));
            }
            let n = parsed.len();
            let mut outcome = put::PutOutcome::default();
            let ht = header_tag.as_ref().map(|(k, v)| (k.as_str(), v.as_str()));
            let good = put::check_points(&st, &parsed, ht, &mut outcome)
                .map_err(|e| Reply::error(400, "Unable to parse the given JSON", &e.0))?;
            Ok((good, outcome, n))
        };
    let checked = if len >= BLOCKING_BODY {
        match tokio::task::spawn_blocking(check).await {
            Ok(r) => r,
            Err(_) => Err(Reply::error(500, "Unexpected exception", "")),
        }
    } else {
        check()
    };
    let (good, mut outcome, n) = match checked {
        Ok(x) => x,
        Err(r) => return r,
    };
    state
        .stats
        .http_puts
        .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
    put::write_points(state, good, flags, &mut outcome).await;
    let (status, body) = put::render(flags, &outcome);
    match body {
        None => Reply::empty(status),
        Some(b) => Reply::json(status, b),
    }
}
