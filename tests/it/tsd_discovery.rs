//! Discovery endpoints against a real TSD: /api/suggest, /suggest,
//! /api/search/lookup (served from the series index), /api/config/filters.

use crate::common;

use common::{Backend, Tsds, err, http, json_http, on_both_backends, post_put};
use serde_json::{Value, json};

on_both_backends!(
    suggest_prefix_order_max_and_errors,
    lookup_from_the_series_index,
);

fn get(srv: &Tsds, path: &str) -> common::HttpResponse {
    http(srv.route("GET", path, "").addr, "GET", path, &[], b"")
}

fn post(srv: &Tsds, path: &str, body: &str) -> common::HttpResponse {
    json_http(srv.route("POST", path, body).addr, "POST", path, body)
}

/// Servers with sys.cpu.user on web01/web02 (dc=lga), sys.cpu.sys on
/// web01, and an assigned-but-unwritten metric (written through the
/// writer); `None` when the backend is not there.
fn seeded(backend: Backend) -> Option<Tsds> {
    let tsds = Tsds::start(backend, &[("tsd.core.auto_create_metrics", "true")])?;
    let srv = tsds.writer();
    let pts = json!([
        {"metric":"sys.cpu.user","timestamp":1356998400,"value":1,"tags":{"host":"web01","dc":"lga"}},
        {"metric":"sys.cpu.user","timestamp":1356998400,"value":2,"tags":{"host":"web02","dc":"lga"}},
        {"metric":"sys.cpu.sys","timestamp":1356998400,"value":3,"tags":{"host":"web01"}},
        {"metric":"app.hits","timestamp":1356998400,"value":3,"tags":{"owner":"web01"}},
    ]);
    assert_eq!(post_put(srv.addr, "", &pts.to_string()).status, 204);
    srv.state
        .db()
        .uids()
        .assign(rtsdb::model::UidKind::Metric, "sys.disk")
        .unwrap();
    Some(tsds)
}

fn suggest_prefix_order_max_and_errors(backend: Backend) {
    let Some(srv) = seeded(backend) else {
        return;
    };
    let r = get(&srv, "/api/suggest?type=metrics&q=sys");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), r#"["sys.cpu.sys","sys.cpu.user","sys.disk"]"#);
    let r = get(&srv, "/api/suggest?type=metrics&q=");
    assert_eq!(
        r.text(),
        r#"["app.hits","sys.cpu.sys","sys.cpu.user","sys.disk"]"#
    );
    assert_eq!(
        get(&srv, "/api/suggest?type=metrics&max=2").text(),
        r#"["app.hits","sys.cpu.sys"]"#
    );
    assert_eq!(
        get(&srv, "/api/suggest?type=tagk&q=ho").text(),
        r#"["host"]"#
    );
    assert_eq!(
        get(&srv, "/api/suggest?type=tagv&q=web").text(),
        r#"["web01","web02"]"#
    );
    // Case-sensitive prefix.
    assert_eq!(get(&srv, "/api/suggest?type=tagv&q=WEB").text(), "[]");
    // POST JSON.
    let r = post(&srv, "/api/suggest", r#"{"type":"tagk","q":"","max":"1"}"#);
    assert_eq!((r.status, r.text()), (200, r#"["dc"]"#.to_string()));
    let r = post(&srv, "/api/suggest", r#"{"type":"tagv","q":"web","max":1}"#);
    assert_eq!(r.text(), r#"["web01"]"#);
    // Legacy /suggest.
    let r = get(&srv, "/suggest?type=metrics&q=sys.cpu");
    assert_eq!(
        (r.status, r.text()),
        (200, r#"["sys.cpu.sys","sys.cpu.user"]"#.to_string())
    );
    // Errors.
    let r = get(&srv, "/api/suggest?q=sys");
    assert_eq!(
        (r.status, r.text()),
        (400, err(400, "Missing parameter <code>type</code>"))
    );
    let r = post(&srv, "/api/suggest", r#"{"q":"sys"}"#);
    assert_eq!(
        (r.status, r.text()),
        (400, err(400, "Missing 'type' parameter"))
    );
    let r = get(&srv, "/api/suggest?type=metric");
    assert_eq!(
        (r.status, r.text()),
        (400, err(400, "Invalid 'type' parameter:metric"))
    );
    // SuggestRpc: max <= 0 (or empty) means the default of 25;
    // Integer.parseInt takes no spaces.
    assert_eq!(
        get(&srv, "/api/suggest?type=metrics&max=0").text(),
        r#"["app.hits","sys.cpu.sys","sys.cpu.user","sys.disk"]"#
    );
    assert_eq!(
        get(&srv, "/api/suggest?type=metrics&max=-3&q=sys.cpu").text(),
        r#"["sys.cpu.sys","sys.cpu.user"]"#
    );
    assert_eq!(
        get(&srv, "/api/suggest?type=metrics&max=&q=sys.d").text(),
        r#"["sys.disk"]"#
    );
    assert_eq!(get(&srv, "/api/suggest?type=metrics&max=%201").status, 400);
    let r = get(&srv, "/api/suggest?type=metrics&max=ten");
    assert_eq!(
        (r.status, r.text()),
        (400, err(400, "Unable to parse 'max' as a number"))
    );
    let r = post(&srv, "/api/suggest", "");
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["message"], "Missing message content");
    let r = post(&srv, "/api/suggest", "{nope");
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["error"]["message"],
        "Unable to parse the given JSON"
    );
    let r = http(
        srv.reader().addr,
        "DELETE",
        "/api/suggest?type=metrics",
        &[],
        b"",
    );
    assert_eq!(r.status, 405);
}

fn without_time(mut v: Value) -> Value {
    // A Java float: `12.0`.
    assert!(v["time"].is_f64(), "{v}");
    v.as_object_mut().unwrap().remove("time");
    v
}

fn lookup_from_the_series_index(backend: Backend) {
    let Some(srv) = seeded(backend) else {
        return;
    };
    let r = get(&srv, "/api/search/lookup?m=sys.cpu.user");
    assert_eq!(r.status, 200, "{}", r.text());
    // metric 2 = sys.cpu.user (app.hits came... see UIDs below).
    let user = srv
        .reader()
        .state
        .db()
        .uids()
        .get_id(rtsdb::model::UidKind::Metric, "sys.cpu.user")
        .unwrap()
        .id();
    assert_eq!(user, 1);
    assert_eq!(
        without_time(r.json()),
        json!({"type":"LOOKUP","metric":"sys.cpu.user","tags":[],"limit":25,"startIndex":0,
            "totalResults":2,"results":[
              {"tsuid":"000001000001000001000002000002","metric":"sys.cpu.user","tags":{"dc":"lga","host":"web01"}},
              {"tsuid":"000001000001000003000002000002","metric":"sys.cpu.user","tags":{"dc":"lga","host":"web02"}}]})
    );
    // Exact text shape (field order) with the time blanked.
    // Jackson's SearchQuery order: startIndex and totalResults come last.
    let text = r.text();
    assert!(
        text.starts_with(
            r#"{"type":"LOOKUP","metric":"sys.cpu.user","tags":[],"limit":25,"time":"#
        ),
        "{text}"
    );
    assert!(
        text.ends_with(r#"}}],"startIndex":0,"totalResults":2}"#),
        "{text}"
    );
    // host=* with limit.
    let r = get(
        &srv,
        "/api/search/lookup?m=sys.cpu.user%7Bhost=*%7D&limit=1",
    );
    let v = without_time(r.json());
    assert_eq!(v["tags"], json!([{"key":"host","value":"*"}]));
    assert_eq!(v["limit"], 1);
    assert_eq!(v["totalResults"], 1);
    assert_eq!(v["results"][0]["tags"]["host"], "web01");
    // Repeated tag keys are OR-ed; different keys AND-ed.
    let r = get(
        &srv,
        "/api/search/lookup?m=sys.cpu.user{host=web01,host=web02,dc=lga}",
    );
    assert_eq!(r.json()["totalResults"], 2);
    let r = get(&srv, "/api/search/lookup?m=sys.cpu.user{host=web02,dc=*}");
    assert_eq!(r.json()["totalResults"], 1);
    // No metric: every metric; *=value matches any key.
    let r = get(&srv, "/api/search/lookup?m={*=web01}&use_meta=false");
    let v = r.json();
    let metrics: Vec<&str> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["metric"].as_str().unwrap())
        .collect();
    assert_eq!(metrics, vec!["sys.cpu.user", "sys.cpu.sys", "app.hits"]);
    let r = get(&srv, "/api/search/lookup?m={host=web01}");
    assert_eq!(r.json()["totalResults"], 2);
    // POST JSON.
    let r = post(
        &srv,
        "/api/search/lookup",
        r#"{"metric":"sys.cpu.user","tags":[{"key":"host","value":"web02"}],"limit":5,"useMeta":true}"#,
    );
    let v = without_time(r.json());
    assert_eq!(v["metric"], "sys.cpu.user");
    assert_eq!(v["limit"], 5);
    assert_eq!(v["totalResults"], 1);
    assert_eq!(v["results"][0]["tsuid"], "000001000001000003000002000002");
    // An assigned metric without series: no results, not an error.
    let r = get(&srv, "/api/search/lookup?m=sys.disk");
    assert_eq!(
        (r.status, r.json()["totalResults"].clone()),
        (200, json!(0))
    );
    // Unknown names.
    let r = get(&srv, "/api/search/lookup?m=nope");
    assert_eq!(r.status, 404);
    assert_eq!(
        r.text(),
        r#"{"error":{"code":404,"message":"Unable to resolve one or more UIDs","details":"No such name for 'metrics': 'nope'"}}"#
    );
    let r = get(&srv, "/api/search/lookup?m=sys.cpu.user{colo=*}");
    assert_eq!(r.status, 404);
    // Bad input.
    let r = get(&srv, "/api/search/lookup");
    assert_eq!(
        (r.status, r.text()),
        (400, err(400, "Missing parameter <code>m</code>"))
    );
    let r = get(&srv, "/api/search/lookup?m=sys.cpu.user&limit=x");
    assert_eq!(
        (r.status, r.text()),
        (400, err(400, "Unable to convert 'limit' to a valid number"))
    );
    let r = get(&srv, "/api/search/lookup?m=sys.cpu.user{host");
    assert_eq!(r.status, 400);
    assert!(
        r.text()
            .starts_with(r#"{"error":{"code":400,"message":"Unable to parse query""#),
        "{}",
        r.text()
    );
    let r = post(&srv, "/api/search/lookup", "[1,2]");
    assert_eq!(r.status, 400);
    // A body without metric or tags; the JSON form leaves them out of the
    // echo when absent (SearchQuery is NON_NULL).
    let r = post(&srv, "/api/search/lookup", r#"{"limit":5}"#);
    assert_eq!(
        (r.status, r.text()),
        (
            400,
            err(
                400,
                "Missing metric and tags. Please supply at least one value."
            )
        )
    );
    let r = post(&srv, "/api/search/lookup", r#"{"metric":"sys.cpu.user"}"#);
    assert!(
        r.text()
            .starts_with(r#"{"type":"LOOKUP","metric":"sys.cpu.user","limit":25,"time":"#),
        "{}",
        r.text()
    );
    // Verbs and types SearchRpc does not know.
    let r = http(
        srv.reader().addr,
        "DELETE",
        "/api/search/lookup?m=sys.cpu.user",
        &[],
        b"",
    );
    assert_eq!(
        (r.status, r.text()),
        (400, err(400, "Unsupported method: DELETE"))
    );
    let r = get(&srv, "/api/search/foo?query=x");
    assert_eq!(
        (r.status, r.text()),
        (
            400,
            r#"{"error":{"code":400,"message":"Invalid search query type supplied","details":"Unknown type: foo"}}"#.into()
        )
    );
    let r = get(&srv, "/api/search/tsmeta");
    assert_eq!(
        (r.status, r.text()),
        (400, err(400, "Missing parameter <code>query</code>"))
    );
    // The other types need a plugin in OpenTSDB; rtsdb answers them from
    // its own data (tests/it/tsd_search.rs).
    for t in [
        "tsmeta",
        "tsmeta_summary",
        "tsuids",
        "uidmeta",
        "annotation",
    ] {
        let r = get(&srv, &format!("/api/search/{t}?query=name:*"));
        assert_eq!(r.status, 200, "{t}: {}", r.text());
    }
}

/// Embedded only: a fixed answer, nothing stored.
#[test]
fn config_filters_lists_the_seven_builtins() {
    let srv = Tsds::start(Backend::Embedded, &[]).unwrap();
    let r = get(&srv, "/api/config/filters");
    assert_eq!(r.status, 200);
    let v = r.json();
    let names: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(
        names,
        vec![
            "iliteral_or",
            "iwildcard",
            "literal_or",
            "not_iliteral_or",
            "not_literal_or",
            "regexp",
            "wildcard"
        ]
    );
    assert_eq!(
        v["literal_or"],
        json!({"description":"Accepts one or more exact values and matches if the series contains any of them. Multiple values can be included and must be separated by the | (pipe) character. The filter is case sensitive and will not allow characters that TSDB does not allow at write time.",
               "examples":"host=literal_or(web01),  host=literal_or(web01|web02|web03)  {\"type\":\"literal_or\",\"tagk\":\"host\",\"filter\":\"web01|web02|web03\",\"groupBy\":false}"})
    );
    assert_eq!(
        v["regexp"]["examples"],
        "host=regexp(.*)  {\"type\":\"regexp\",\"tagk\":\"host\",\"filter\":\".*\",\"groupBy\":false}"
    );
    assert!(
        v["iwildcard"]["description"]
            .as_str()
            .unwrap()
            .contains("case insensitive")
    );
    assert_eq!(get(&srv, "/api/config/nope").status, 404);
}
