//! Queries built to hurt a PromQL server, sent to a real TSD: nesting deep
//! enough to overflow a thread's stack, and label-matcher regexps that
//! compile to megabytes each. Each gets Prometheus' `bad_data` answer,
//! and the TSD goes on answering.

use crate::common;

use common::{Backend, HttpResponse, Tsds, http};
use serde_json::Value;

const FORM: (&str, &str) = ("Content-Type", "application/x-www-form-urlencoded");

fn post_form(tsds: &Tsds, path: &str, body: &str) -> HttpResponse {
    http(tsds.reader().addr, "POST", path, &[FORM], body.as_bytes())
}

/// `query` percent-encoded for a form body.
fn encoded(query: &str) -> String {
    query
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Status, `errorType` and `error` of an instant query's answer.
fn instant(tsds: &Tsds, query: &str) -> (u16, Value, String) {
    let r = post_form(
        tsds,
        "/prometheus/api/v1/query",
        &format!("query={}&time=1356998400", encoded(query)),
    );
    let body = r.json();
    let error = body["error"].as_str().unwrap_or_default().to_string();
    (r.status, body["errorType"].clone(), error)
}

#[test]
fn query_bombs_get_bad_data_and_the_tsd_lives_on() {
    let Some(tsds) = Tsds::start(Backend::Embedded, &[]) else {
        return;
    };
    let deep = format!("{}1{}", "(".repeat(20_000), ")".repeat(20_000));
    let chain = format!("1{}", "+1".repeat(20_000));
    let unary = format!("{}1", "-".repeat(20_000));
    for q in [&deep, &chain, &unary] {
        let (status, kind, error) = instant(&tsds, q);
        assert_eq!((status, kind.as_str()), (400, Some("bad_data")), "{error}");
        assert!(error.contains("nested too deeply"), "{error}");
    }
    // A range query is refused the same way.
    let r = post_form(
        &tsds,
        "/prometheus/api/v1/query_range",
        &format!("query={}&start=0&end=60&step=15", encoded(&chain)),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    // About 3 MiB compiled each: twelve of them are past the budget.
    let regexps = [r#"x{a=~"\\w{50}"}"#; 12].join(" or ");
    let (status, kind, error) = instant(&tsds, &regexps);
    assert_eq!((status, kind.as_str()), (400, Some("bad_data")), "{error}");
    assert!(
        error.contains("regular expressions are too large"),
        "{error}"
    );
    // Still answering, and a query of ordinary depth runs.
    let (status, _, error) = instant(&tsds, "sum(rate(x{a=~\"b|c\"}[5m])) or vector(1)");
    assert_eq!(status, 200, "{error}");
}
