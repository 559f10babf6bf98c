//! The HTTP API against a real TSD where a case file cannot say it: two
//! requests on one keep-alive connection, compressed bodies and body
//! limits. Request→response checks are in `tests/compat/http/*.case`.

use crate::common;

use std::io::Write;

use common::{Backend, TestServer, Tsds, http, on_both_backends};
use serde_json::json;

fn point(metric: &str, ts: i64, value: serde_json::Value) -> serde_json::Value {
    json!({"metric": metric, "timestamp": ts, "value": value, "tags": {"host": "web01"}})
}

/// Embedded only: the connection handling is the same whatever the
/// backend, and nothing is stored.
#[test]
fn keep_alive_serves_two_requests_on_one_connection() {
    let srv = TestServer::start(&[]);
    let mut s = std::net::TcpStream::connect(srv.addr).unwrap();
    s.write_all(b"GET /api/version HTTP/1.1\r\nHost: x\r\n\r\nGET /api/aggregators HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = String::new();
    std::io::Read::read_to_string(&mut s, &mut raw).unwrap();
    assert_eq!(raw.matches("HTTP/1.1 200 OK").count(), 2);
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

on_both_backends!(compressed_bodies);

/// Compressed request bodies are stored whole (read back through the
/// other TSD on the cluster); responses are compressed when accepted.
fn compressed_bodies(backend: Backend) {
    let Some(t) = Tsds::start(backend, &[("tsd.core.auto_create_metrics", "true")]) else {
        return;
    };
    let a = t.writer().addr;
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
    assert_eq!(t.reader().point_count("big.put"), n as usize);
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
}

/// Embedded only: the limits apply before anything reaches the store.
#[test]
fn body_limits() {
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
