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

on_both_backends!(a_keep_alive_connection_sees_a_rename_made_elsewhere_at_once);

/// One `/api/put` request on a kept-alive connection `s`: (status, body).
fn put_on(s: &mut std::net::TcpStream, body: &str) -> (u16, String) {
    use std::io::Read;
    write!(
        s,
        "POST /api/put?details HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let (head_end, len) = loop {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed: {got:?}");
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            break (end + 4, len);
        }
    };
    while got.len() < head_end + len {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed: {got:?}");
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text[9..12].parse().unwrap();
    (status, text[head_end..head_end + len].to_string())
}

/// A connection remembers the series its put bodies named (as telnet
/// connections do), but a rename on another connection is seen by its
/// very next put: the old name gets a new UID as in OpenTSDB, and a bad
/// timestamp on a remembered series still gets OpenTSDB's message.
fn a_keep_alive_connection_sees_a_rename_made_elsewhere_at_once(backend: Backend) {
    let Some(t) = Tsds::start(backend, &[("tsd.core.auto_create_metrics", "true")]) else {
        return;
    };
    let a = t.writer().addr;
    let mut s = std::net::TcpStream::connect(a).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let tags = r#"{"host":"a","dc":"x"}"#;
    let p = |ts: i64, v: i64| {
        format!(r#"{{"metric":"memo.h","timestamp":{ts},"value":{v},"tags":{tags}}}"#)
    };
    let (status, body) = put_on(
        &mut s,
        &format!("[{},{}]", p(1356998400, 1), p(1356998401, 2)),
    );
    assert_eq!(
        (status, body.as_str()),
        (200, r#"{"errors":[],"failed":0,"success":2}"#)
    );
    let r = http(
        a,
        "POST",
        "/api/uid/rename?metric=memo.h&name=memo.renamed",
        &[],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let (status, body) = put_on(
        &mut s,
        &format!("[{},{}]", p(1356998410, 3), p(99999999999999, 3)),
    );
    assert_eq!(status, 400, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (answer["success"].as_u64(), answer["failed"].as_u64()),
        (Some(1), Some(1)),
        "{body}"
    );
    let error = answer["errors"][0]["error"].as_str().unwrap();
    assert!(
        error.starts_with(
            "bad timestamp=99999999999999 when trying to add value=[3]/0 to metric=memo.h, tags={"
        ),
        "{error}"
    );
    assert_eq!(t.reader().point_count("memo.renamed"), 2);
    assert_eq!(t.reader().point_count("memo.h"), 1);
}
