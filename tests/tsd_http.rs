//! The HTTP API against a real TSD: every /api/put response shape,
//! routing, methods, modes, CORS, compression and body limits.

mod common;

use std::io::Write;

use common::{TestServer, http, post_put};
use serde_json::json;

const GENERIC: &str = r#"{"error":{"code":400,"message":"One or more data points had errors","details":"Please see the TSD logs or append \"details\" to the put request"}}"#;

fn point(metric: &str, ts: i64, value: serde_json::Value) -> serde_json::Value {
    json!({"metric": metric, "timestamp": ts, "value": value, "tags": {"host": "web01"}})
}

#[test]
fn put_response_shapes() {
    let srv = TestServer::start(&[("tsd.core.auto_create_metrics", "true")]);
    let a = srv.addr;
    // Single object, no flags: 204 and no body.
    let r = post_put(a, "", &point("m", 1356998400, json!(1)).to_string());
    assert_eq!((r.status, r.text()), (204, String::new()));
    // Array; values as number, float and string forms.
    let body = json!([
        point("m", 1356998401, json!(18.0)),
        point("m", 1356998402, json!("42")),
        json!({"metric": "m", "timestamp": "1356998403", "value": "1.5e3", "tags": {"host": "web01"}}),
        point("m", 1356998404500, json!(-7)),
    ]);
    assert_eq!(post_put(a, "", &body.to_string()).status, 204);
    let got = &srv.read("m")[0].points;
    assert_eq!(got.len(), 5);
    assert_eq!(got[1].value, rtsdb::model::Value::Float(18.0));
    assert_eq!(got[2].value, rtsdb::model::Value::Int(42));
    assert_eq!(got[3].value, rtsdb::model::Value::Float(1500.0));
    assert_eq!(got[4].timestamp_ms, 1356998404500);
    // One bad point, no flags: the generic 400; the good one is written.
    let mixed = json!([
        point("m", 1356998405, json!(1)),
        point("", 1356998405, json!(1))
    ])
    .to_string();
    let r = post_put(a, "", &mixed);
    assert_eq!((r.status, r.text()), (400, GENERIC.to_string()));
    assert_eq!(srv.point_count("m"), 6);
    // summary
    let r = post_put(a, "?summary", &mixed);
    assert_eq!(r.status, 400);
    assert_eq!(r.json(), json!({"failed":1,"success":1}));
    let r = post_put(
        a,
        "?summary=false",
        &point("m", 1356998406, json!(1)).to_string(),
    );
    assert_eq!((r.status, r.json()), (200, json!({"failed":0,"success":1})));
    // details (wins over summary)
    let r = post_put(a, "?summary&details", &mixed);
    assert_eq!(r.status, 400);
    assert_eq!(
        r.text(),
        r#"{"errors":[{"datapoint":{"metric":"","timestamp":1356998405,"value":"1","tags":{"host":"web01"}},"error":"Metric name was empty"}],"failed":1,"success":1}"#
    );
    let r = post_put(a, "?details", &point("m", 1356998407, json!(2)).to_string());
    assert_eq!(
        (r.status, r.json()),
        (200, json!({"errors":[],"failed":0,"success":1}))
    );
    // Per-point validation messages, in OpenTSDB's order.
    let bad = json!([
        {"metric":"m","timestamp":0,"value":1,"tags":{"a":"b"}},
        {"metric":"m","timestamp":1356998400,"tags":{"a":"b"}},
        {"metric":"m","timestamp":1356998400,"value":"","tags":{"a":"b"}},
        {"metric":"m","timestamp":1356998400,"value":1},
        {"metric":"m","timestamp":1356998400,"value":1,"tags":{}},
        {"metric":"m","timestamp":1356998400,"value":"abc","tags":{"a":"b"}},
        {"metric":"m","timestamp":1356998400,"value":"1e999","tags":{"a":"b"}},
        {"metric":"m","timestamp":99999999999999i64,"value":1,"tags":{"a":"b"}},
        {"metric":"a b","timestamp":1356998400,"value":1,"tags":{"a":"b"}},
        {"metric":"m","timestamp":1356998400,"value":1,"tags":{"a":"1","b":"2","c":"3","d":"4","e":"5","f":"6","g":"7","h":"8","i":"9"}},
        {"metric":"m","timestamp":1356998400,"value":1,"tags":{"a":"b"},"unknown_field":true},
    ]);
    let r = post_put(a, "?details", &bad.to_string());
    assert_eq!(r.status, 400);
    let v = r.json();
    let errors: Vec<&str> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["error"].as_str().unwrap())
        .collect();
    assert_eq!(
        errors,
        vec![
            "Invalid timestamp",
            "Empty value",
            "Empty value",
            "Missing tags",
            "Missing tags",
            "Unable to parse value to a number",
            "value is NaN or Infinite: Infinity for metric=m timestamp=1356998400",
            "bad timestamp=99999999999999 when trying to add value=[1]/0 to metric=m, tags={a=b}",
            "Invalid metric name (\"a b\"): illegal character:  ",
            "Too many tags: 9 maximum allowed: 8, tags: {a=1, b=2, c=3, d=4, e=5, f=6, g=7, h=8, i=9}",
        ]
    );
    assert_eq!(v["failed"], 10);
    assert_eq!(v["success"], 1);
    // Bare NaN (Jackson accepts it) is refused per point, not per request.
    let r = post_put(
        a,
        "?details",
        r#"[{"metric":"m","timestamp":1356998408,"value":NaN,"tags":{"host":"a"}},{"metric":"m","timestamp":1356998409,"value":1,"tags":{"host":"a"}}]"#,
    );
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["errors"][0]["error"],
        "Unable to parse value to a number"
    );
    assert_eq!(r.json()["success"], 1);
    // sync, sync with timeout
    let r = post_put(a, "?sync", &point("m", 1356998410, json!(1)).to_string());
    assert_eq!(r.status, 204);
    let r = post_put(
        a,
        "?sync&sync_timeout=10000&summary",
        &point("m", 1356998411, json!(1)).to_string(),
    );
    assert_eq!(
        (r.status, r.json()),
        (200, json!({"failed":0,"success":1,"timeouts":0}))
    );
}

#[test]
fn put_request_errors() {
    let srv = TestServer::start(&[]);
    let a = srv.addr;
    let err = |r: &common::HttpResponse| {
        (
            r.status,
            r.json()["error"]["message"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        )
    };
    assert_eq!(
        err(&post_put(a, "", "[]")),
        (400, "No datapoints found in content".into())
    );
    assert_eq!(
        err(&post_put(a, "", "")),
        (400, "Missing message content".into())
    );
    assert_eq!(
        err(&post_put(a, "", "[{\"metric\":")),
        (400, "Unable to parse the given JSON".into())
    );
    assert_eq!(
        err(&post_put(a, "", "\"x\"")),
        (400, "Unable to parse the given JSON".into())
    );
    let r = post_put(
        a,
        "?details",
        &point("unknown.metric", 1356998400, json!(1)).to_string(),
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["errors"][0]["error"], "Unknown metric");
    // Methods.
    let r = http(a, "GET", "/api/put", &[], b"");
    assert_eq!(r.status, 405);
    assert_eq!(
        r.text(),
        r#"{"error":{"code":405,"message":"Method not allowed","details":"The HTTP method [GET] is not permitted for this endpoint"}}"#
    );
    assert_eq!(http(a, "PUT", "/api/put", &[], b"[]").status, 405);
    assert_eq!(
        http(a, "GET", "/api/version?method_override=bogus", &[], b"").status,
        405
    );
    // Routing.
    assert_eq!(
        post_put(a, "", "[]").header("content-type"),
        Some("application/json; charset=UTF-8")
    );
    let r = http(
        a,
        "POST",
        "/api/v1/put?summary",
        &[],
        point("x", 1356998400, json!(1)).to_string().as_bytes(),
    );
    assert_eq!(r.status, 400, "v1 prefix reaches put: {}", r.text());
    assert_eq!(r.json(), json!({"failed":1,"success":0}));
    let r = http(a, "GET", "/API/V1/VERSION", &[], b"");
    assert_eq!(r.status, 200);
    let r = http(a, "POST", "/api/v2/put", &[], b"[]");
    assert_eq!(r.status, 501);
    assert_eq!(
        r.json()["error"]["message"],
        "Requested API version is greater than the max implemented"
    );
    let r = http(a, "GET", "/api/v1x/put", &[], b"");
    assert_eq!(
        (r.status, r.json()["error"]["message"].clone()),
        (400, json!("Invalid API version format supplied"))
    );
    let r = http(a, "GET", "/api/nothing", &[], b"");
    assert_eq!(
        (r.status, r.text()),
        (
            404,
            r#"{"error":{"code":404,"message":"Endpoint not found"}}"#.to_string()
        )
    );
    assert_eq!(
        http(a, "GET", "/nothing?json", &[], b"").text(),
        r#"{"err":"Page Not Found"}"#
    );
}

#[test]
fn misc_endpoints() {
    let srv = TestServer::start(&[]);
    let a = srv.addr;
    let v = http(a, "GET", "/api/version", &[], b"").json();
    for k in [
        "version",
        "short_revision",
        "full_revision",
        "timestamp",
        "repo_status",
        "user",
        "host",
        "repo",
        "branch",
    ] {
        assert!(v[k].is_string(), "{k} in {v}");
    }
    let legacy = http(a, "GET", "/version", &[], b"").text();
    assert!(legacy.starts_with("net.opentsdb.tools BuildData built at revision "));
    let aggs = http(a, "POST", "/api/aggregators", &[], b"").json();
    assert_eq!(aggs.as_array().unwrap().len(), 35);
    assert!(aggs.as_array().unwrap().contains(&json!("zimsum")));
    assert_eq!(
        http(a, "GET", "/api/dropcaches", &[], b"").json(),
        json!({"message":"Caches dropped","status":"200"})
    );
    assert_eq!(
        http(a, "GET", "/dropcaches", &[], b"").text(),
        "Caches dropped.\n"
    );
    let stats = http(a, "GET", "/api/stats", &[], b"").json();
    let names: Vec<&str> = stats
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["metric"].as_str().unwrap())
        .collect();
    for want in [
        "tsd.connectionmgr.connections",
        "tsd.rpc.received",
        "tsd.rpc.errors",
        "tsd.uid.cache-hit",
        "tsd.uid.cache-miss",
        "tsd.uid.cache-size",
        "tsd.uid.ids-used",
        "tsd.uid.ids-available",
        "tsd.datapoints.added",
        "tsd.datapoints.stored",
    ] {
        assert!(names.contains(&want), "{want}");
    }
    assert!(stats[0]["value"].is_string());
    assert!(stats[0]["tags"]["host"].is_string());
    assert!(
        http(a, "GET", "/stats", &[], b"")
            .text()
            .starts_with("tsd.")
    );
    assert!(http(a, "GET", "/stats?json", &[], b"").json().is_array());
    assert_eq!(http(a, "DELETE", "/api/version", &[], b"").status, 405);
    // Keep-alive: two requests on one connection.
    let mut s = std::net::TcpStream::connect(a).unwrap();
    s.write_all(b"GET /api/version HTTP/1.1\r\nHost: x\r\n\r\nGET /api/aggregators HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = String::new();
    std::io::Read::read_to_string(&mut s, &mut raw).unwrap();
    assert_eq!(raw.matches("HTTP/1.1 200 OK").count(), 2);
}

#[test]
fn modes_and_cors() {
    let ro = TestServer::start(&[("tsd.mode", "ro")]);
    let r = post_put(ro.addr, "", &point("m", 1356998400, json!(1)).to_string());
    assert_eq!(
        (r.status, r.json()["error"]["message"].clone()),
        (404, json!("Endpoint not found"))
    );
    assert_eq!(http(ro.addr, "GET", "/api/version", &[], b"").status, 200);
    let no_api = TestServer::start(&[("tsd.core.enable_api", "false")]);
    assert_eq!(
        http(no_api.addr, "GET", "/api/version", &[], b"").status,
        404
    );
    assert_eq!(http(no_api.addr, "GET", "/version", &[], b"").status, 200);

    let cors = TestServer::start(&[("tsd.http.request.cors_domains", "http://good.example")]);
    let r = http(
        cors.addr,
        "OPTIONS",
        "/api/put",
        &[("Origin", "http://good.example")],
        b"",
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://good.example")
    );
    assert_eq!(
        r.header("access-control-allow-methods"),
        Some("GET, POST, PUT, DELETE")
    );
    assert!(
        r.header("access-control-allow-headers")
            .unwrap()
            .contains("Content-Type")
    );
    let r = http(
        cors.addr,
        "GET",
        "/api/version",
        &[("Origin", "http://evil.example")],
        b"",
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["error"]["message"], "CORS domain not allowed");
    // Without CORS, OPTIONS is not a permitted method.
    assert_eq!(
        http(ro.addr, "OPTIONS", "/api/version", &[], b"").status,
        405
    );
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

#[test]
fn compression_and_body_limits() {
    let srv = TestServer::start(&[("tsd.core.auto_create_metrics", "true")]);
    let a = srv.addr;
    // ~50 MB of JSON, gzipped.
    let mut body = String::from("[");
    let mut n = 0u64;
    while body.len() < 50 << 20 {
        if n > 0 {
            body.push(',');
        }
        body.push_str(&format!(
            r#"{{"metric":"big.put","timestamp":{},"value":{},"tags":{{"host":"web{:03}","dc":"lga"}}}}"#,
            1356998400 + n / 100,
            n,
            n % 100
        ));
        n += 1;
    }
    body.push(']');
    let z = gzip(body.as_bytes());
    let r = http(
        a,
        "POST",
        "/api/put?summary",
        &[("Content-Encoding", "gzip")],
        &z,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), json!({"failed":0,"success":n}));
    assert_eq!(srv.point_count("big.put"), n as usize);
    // deflate (zlib) bodies too.
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(point("small", 1356998400, json!(1)).to_string().as_bytes())
        .unwrap();
    let r = http(
        a,
        "POST",
        "/api/put",
        &[("Content-Encoding", "deflate")],
        &e.finish().unwrap(),
    );
    assert_eq!(r.status, 204);
    // gzip responses when accepted.
    let r = http(
        a,
        "GET",
        "/api/stats",
        &[("Accept-Encoding", "gzip, deflate")],
        b"",
    );
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    let mut plain = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&r.body[..]), &mut plain)
        .unwrap();
    assert!(
        serde_json::from_str::<serde_json::Value>(&plain)
            .unwrap()
            .is_array()
    );
    drop(srv);

    // Over the limit: refused with 413, compressed or not; still serving.
    let small = TestServer::start(&[("tsd.http.request.max_chunk", "1000")]);
    let big = vec![b' '; 5000];
    let r = http(small.addr, "POST", "/api/put", &[], &big);
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["error"]["code"], 413);
    let r = http(
        small.addr,
        "POST",
        "/api/put",
        &[("Content-Encoding", "gzip")],
        &gzip(&vec![b' '; 100_000]),
    );
    assert_eq!(r.status, 413);
    let r = http(
        small.addr,
        "POST",
        "/api/put",
        &[("Content-Encoding", "gzip")],
        b"not gzip at all",
    );
    assert_eq!(r.status, 400);
    assert_eq!(
        http(small.addr, "GET", "/api/version", &[], b"").status,
        200
    );
}

/// The commands telnet shares (version, aggregators, stats, dropcaches)
/// check the method on legacy paths too, as OpenTSDB 2.4.1's
/// `RpcUtil.allowedMethods` does for both; a legacy refusal is
/// `HttpQuery.badRequest`'s 400, not the API's 405. `dropcaches` takes GET
/// and DELETE only (OpenTSDB's `DropCachesRpc`), on both paths.
#[test]
fn shared_commands_check_methods_on_both_paths() {
    let srv = TestServer::start(&[]);
    let a = srv.addr;
    for path in ["/version", "/aggregators", "/stats", "/dropcaches"] {
        assert_eq!(http(a, "GET", path, &[], b"").status, 200, "{path}");
        let r = http(a, "PUT", path, &[], b"");
        assert_eq!(r.status, 400, "{path}");
        assert_eq!(r.header("content-type"), Some("text/html; charset=UTF-8"));
        assert!(
            r.text()
                .contains("The reason provided was:<blockquote>Method not allowed</blockquote>")
        );
        let r = http(a, "PUT", &format!("{path}?json"), &[], b"");
        assert_eq!(
            (r.status, r.text()),
            (400, r#"{"err":"Method not allowed"}"#.into())
        );
    }
    for path in ["/version", "/aggregators", "/stats"] {
        assert_eq!(http(a, "POST", path, &[], b"").status, 200, "{path}");
    }
    assert_eq!(
        http(a, "DELETE", "/api/dropcaches", &[], b"").json(),
        json!({"message":"Caches dropped","status":"200"})
    );
    assert_eq!(
        http(a, "DELETE", "/dropcaches", &[], b"").text(),
        "Caches dropped.\n"
    );
    let r = http(a, "POST", "/api/dropcaches", &[], b"");
    assert_eq!(
        (r.status, r.text()),
        (
            405,
            r#"{"error":{"code":405,"message":"Method not allowed","details":"The HTTP method [POST] is not permitted for this endpoint"}}"#.into()
        )
    );
    assert_eq!(http(a, "POST", "/dropcaches", &[], b"").status, 400);
}
