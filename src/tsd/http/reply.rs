//! The answers every handler builds: [`Reply`] (status, content type,
//! body, headers), OpenTSDB's JSON error envelope, its legacy error
//! pages and 404s, and the parsed query string ([`Query`]) they depend
//! on. Below the router and every handler: it names none of them.

use hyper::Method;

use crate::query::request::query_pairs;

pub(super) const JSON_TYPE: &str = "application/json; charset=UTF-8";
pub(super) const TEXT_TYPE: &str = "text/plain; charset=UTF-8";
pub(super) const HTML_TYPE: &str = "text/html; charset=UTF-8";

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
    pub(super) status: u16,
    pub(super) content_type: &'static str,
    pub(super) body: Vec<u8>,
    /// Headers besides the content type (`Cache-Control`, `Location`).
    pub(super) headers: Vec<(&'static str, String)>,
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

    pub(super) fn is_json(&self) -> bool {
        self.content_type == JSON_TYPE
    }

    pub(super) fn empty(status: u16) -> Reply {
        Reply::json(status, Vec::new())
    }
}

/// The parsed query string.
#[derive(Debug, Default)]
pub(crate) struct Query(pub(super) Vec<(String, String)>);

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
