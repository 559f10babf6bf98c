//! The HTTP side of the TSD: CORS, request bodies (size limit,
//! gzip/deflate), gzip responses and the JSON error envelope
//! `{"error":{"code":..,"message":..,"details":..}}`. Paths, methods and
//! `tsd.mode` are routed by [`routes`]; each endpoint has its own file,
//! or a module of `crate::tsd::rpc` if telnet serves it too.

mod annotation;
mod backup;
mod body;
mod gexp;
mod graph;
mod histogram;
mod logs;
mod metrics;
pub(crate) mod put;
mod put_body;
mod put_scan;
mod query;
mod rollup;
mod routes;
mod search;
mod serializers;
mod suggest;
mod tree;
mod ui;
mod uid;

pub(crate) use body::BodyBudget;
pub use graph::GraphOptions;
pub(crate) use graph::{GraphCache, new_cache as new_graph_cache};
pub(crate) use put::ConnMemo;
pub(crate) use routes::{Call, allow};

use crate::query::request::query_pairs;
use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use super::TsdState;
use super::stats::inc;

const JSON_TYPE: &str = "application/json; charset=UTF-8";
const TEXT_TYPE: &str = "text/plain; charset=UTF-8";
const HTML_TYPE: &str = "text/html; charset=UTF-8";
/// Bodies at least this long are gzipped for clients that accept it.
const GZIP_MIN: usize = 512;

/// OpenTSDB's error envelope (no stack trace: there is no Java one).
pub(crate) fn error_body(code: u16, message: &str, details: &str) -> String {
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
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
    /// Headers besides the content type (`Cache-Control`, `Location`).
    headers: Vec<(&'static str, String)>,
}

impl Reply {
    /// A reply of any content type.
    pub(crate) fn new(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            status,
            content_type,
            body: body.into(),
            headers: Vec::new(),
        }
    }

    /// An HTML page.
    pub(crate) fn html(status: u16, body: impl Into<Vec<u8>>) -> Reply {
        Reply::new(status, HTML_TYPE, body)
    }

    /// Adds a header.
    pub(crate) fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Reply {
        self.headers.push((name, value.into()));
        self
    }

    pub(crate) fn json(status: u16, body: impl Into<Vec<u8>>) -> Reply {
        Reply::new(status, JSON_TYPE, body)
    }

    pub(crate) fn text(status: u16, body: impl Into<Vec<u8>>) -> Reply {
        Reply::new(status, TEXT_TYPE, body)
    }

    pub(crate) fn error(status: u16, message: &str, details: &str) -> Reply {
        Reply::json(status, error_body(status, message, details))
    }

    fn is_json(&self) -> bool {
        self.content_type == JSON_TYPE
    }

    fn empty(status: u16) -> Reply {
        Reply::json(status, Vec::new())
    }
}

/// The parsed query string.
#[derive(Debug, Default)]
pub(crate) struct Query(Vec<(String, String)>);

impl Query {
    pub(crate) fn parse(q: Option<&str>) -> Query {
        Query(query_pairs(q.unwrap_or("")))
    }

    /// OpenTSDB's "present" flags: any value, even `false`, is true.
    pub(crate) fn has(&self, k: &str) -> bool {
        self.0.iter().any(|(n, _)| n == k)
    }

    /// The parameter's value; when it is given more than once, the last
    /// one, as OpenTSDB's `getQueryStringParam` reads it (a client that
    /// appends a parameter to a URL overrides the one already there).
    pub(crate) fn get(&self, k: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }
}

pub(crate) fn method_not_allowed(m: &Method) -> Reply {
    Reply::error(
        405,
        "Method not allowed",
        &format!("The HTTP method [{m}] is not permitted for this endpoint"),
    )
}

/// `HttpQuery.badRequest` on a legacy path: always a 400, as
/// `{"err":..}` with `?json`, else a page (the API gets the envelope).
pub(crate) fn legacy_bad_request(q: &Query, message: &str) -> Reply {
    if q.has("json") {
        let err = serde_json::to_string(message).expect("string");
        return Reply::json(400, format!("{{\"err\":{err}}}"));
    }
    Reply::html(
        400,
        make_page(
            "Bad Request",
            "Looks like it's your fault this time",
            &format!(
                "<blockquote><h1>Bad Request</h1>Sorry but your request was rejected as being invalid.<br/><br/>The reason provided was:<blockquote>{}</blockquote></blockquote>",
                html_message(message)
            ),
        ),
    )
}

/// `HttpQuery.internalError` on a legacy path: a 500, as `{"err":..}`
/// with `?json`, else a page. OpenTSDB prints the Java stack trace where
/// rtsdb has only the error's text.
pub(crate) fn legacy_internal_error(q: &Query, message: &str) -> Reply {
    if q.has("json") {
        let err = serde_json::to_string(message).expect("string");
        return Reply::json(500, format!("{{\"err\":{err}}}"));
    }
    Reply::html(
        500,
        make_page(
            "Internal Server Error",
            "Houston, we have a problem",
            &format!(
                "<blockquote><h1>Internal Server Error</h1>Oops, sorry but your request failed due to a server error.<br/><br/>Please try again in 30 seconds.<pre>{}</pre></blockquote>",
                html_message(message)
            ),
        ),
    )
}

/// A message for an HTML page. OpenTSDB writes it as is; messages quote
/// the request (a metric name, an aggregator), which on the page's own
/// origin would let a link run script, so markup is escaped — except the
/// `<code>` OpenTSDB's own messages use, which keeps their bytes.
fn html_message(message: &str) -> String {
    message
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace("&lt;code&gt;", "<code>")
        .replace("&lt;/code&gt;", "</code>")
        // `GraphHandler` wraps gnuplot's errors in `<pre>`.
        .replace("&lt;pre&gt;", "<pre>")
        .replace("&lt;/pre&gt;", "</pre>")
}

/// `HttpQuery.makePage`: the small HTML page OpenTSDB wraps its legacy
/// answers and errors in (clients compare these bytes).
pub(crate) fn make_page(title: &str, subtitle: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html><html><head><meta http-equiv=content-type content=\"text/html;charset=utf-8\"><title>{title}</title>\n\
         <style><!--\n\
         body{{font-family:arial,sans-serif;margin-left:2em}}A.l:link{{color:#6f6f6f}}A.u:link{{color:green}}.fwf{{font-family:monospace;white-space:pre-wrap}}//--></style>\
         </head>\n\
         <body text=#000000 bgcolor=#ffffff><table border=0 cellpadding=2 cellspacing=0 width=100%><tr><td rowspan=3 width=1% nowrap><img src=s/opentsdb_header.jpg><td>&nbsp;</td></tr><tr><td><font color=#507e9b><b>{subtitle}\
         </b></td></tr><tr><td>&nbsp;</td></tr></table>{body}\
         <table width=100% cellpadding=0 cellspacing=0><tr><td class=subg><img alt=\"\" width=1 height=6></td></tr></table></body></html>"
    )
}

pub(crate) fn not_found(api: bool, q: &Query) -> Reply {
    if api {
        Reply::error(404, "Endpoint not found", "")
    } else if q.has("json") {
        Reply::json(404, "{\"err\":\"Page Not Found\"}")
    } else {
        Reply::html(
            404,
            make_page(
                "Page Not Found",
                "Error 404",
                "<blockquote><h1>Page Not Found</h1>The requested URL was not found on this server.</blockquote>",
            ),
        )
    }
}

fn now_s() -> u64 {
    chrono::Utc::now().timestamp().max(0) as u64
}

/// Reads, limits and decompresses the request body of an endpoint that
/// parses it whole; its bytes count against the budget of bodies in
/// flight until the request is done (see [`body`]).
async fn read_body(c: &Call, body: Incoming) -> Result<Vec<u8>, Reply> {
    let (bytes, reservation) = body::read_whole(&c.state, &c.head, body).await?;
    // A request reads one body; were there a second, it would be held
    // until the first is released.
    let _ = c.body_hold.set(reservation);
    Ok(bytes)
}

/// The body if it holds something besides whitespace: a body counts only
/// then (`HttpQuery.hasContent()`).
fn content(body: Option<&[u8]>) -> Option<&[u8]> {
    body.filter(|b| !b.iter().all(u8::is_ascii_whitespace))
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
pub(crate) async fn serve_request(
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
        routes::dispatch(&state, req).await
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
    for (name, value) in &reply.headers {
        if let Ok(v) = HeaderValue::from_str(value) {
            builder = builder.header(*name, v);
        }
    }
    // PNGs are compressed already.
    if accept_gzip && body.len() >= GZIP_MIN && reply.content_type != graph::PNG_TYPE {
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

#[cfg(test)]
mod query_tests {
    use super::Query;

    #[test]
    fn a_repeated_parameter_reads_as_its_last_value() {
        let q = Query::parse(Some("treeid=1&name=a&treeid=2"));
        assert_eq!(q.get("treeid"), Some("2"));
        assert_eq!(q.get("name"), Some("a"));
        assert_eq!(q.get("TreeId"), None);
        assert!(q.has("treeid"));
    }
}
