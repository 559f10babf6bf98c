//! Request bodies under a memory budget (`tsd.http.request.max_inflight_bytes`):
//! a request that finds the budget held by bodies in flight waits, then
//! gets a 503 in OpenTSDB's error shape, counted in `/api/stats`; a
//! compressed body is held to the budget by its inflated size. And
//! `/api/put` bodies, now parsed as they arrive, answer as before
//! (streamed, gzipped, a syntax error late in the body).

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{TestServer, http, parse_response, post_put};
use rtsdb::model::UidKind;
use serde_json::json;

/// The value of `tsd.<name>` in `/api/stats`.
fn stat(addr: SocketAddr, name: &str) -> u64 {
    let stats = http(addr, "GET", "/api/stats", &[], b"").json();
    let s = stats
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["metric"] == format!("tsd.{name}"))
        .unwrap_or_else(|| panic!("no tsd.{name} in {stats}"));
    s["value"].as_str().unwrap().parse().unwrap()
}

/// Waits until `tsd.<name>` reads `want` (the server got to a state the
/// test set up; not a timing assertion).
fn await_stat(addr: SocketAddr, name: &str, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while stat(addr, name) != want {
        assert!(Instant::now() < deadline, "tsd.{name} never reached {want}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A put whose body is sent in part: it holds its reservation until
/// [`HeldPut::finish`] sends the rest.
struct HeldPut {
    stream: TcpStream,
    rest: Vec<u8>,
}

impl HeldPut {
    /// Declares `body` and sends its first byte.
    fn start(addr: SocketAddr, body: Vec<u8>) -> HeldPut {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let head = format!(
            "POST /api/put?summary HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(&body[..1]).unwrap();
        HeldPut {
            stream,
            rest: body[1..].to_vec(),
        }
    }

    fn finish(mut self) -> common::HttpResponse {
        self.stream.write_all(&self.rest).unwrap();
        let mut raw = Vec::new();
        let _ = self.stream.read_to_end(&mut raw);
        parse_response(&raw)
    }
}

fn points(metric: &str, n: usize) -> String {
    let p: Vec<String> = (0..n)
        .map(|i| {
            format!(
                r#"{{"metric":"{metric}","timestamp":{},"value":{i},"tags":{{"host":"web{:02}"}}}}"#,
                1356998400 + i,
                i % 10
            )
        })
        .collect();
    format!("[{}]", p.join(","))
}

/// `body` padded with trailing spaces to `len` bytes.
fn padded(body: String, len: usize) -> Vec<u8> {
    let mut b = body.into_bytes();
    assert!(b.len() <= len);
    b.resize(len, b' ');
    b
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

#[test]
fn a_spent_budget_answers_503_until_bodies_finish() {
    let srv = TestServer::start(&[
        ("tsd.core.auto_create_metrics", "true"),
        ("tsd.http.request.max_inflight_bytes", "1000"),
        ("tsd.http.request.max_inflight_wait", "50"),
    ]);
    let a = srv.addr;
    // A put that declares the whole budget and sends one byte holds it.
    let held = HeldPut::start(a, padded(points("held", 3), 1000));
    await_stat(a, "http.body.inflight_bytes", 1000);

    let r = post_put(a, "?summary", &points("late", 2));
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(
        r.header("content-type"),
        Some("application/json; charset=UTF-8")
    );
    let e = r.json();
    assert_eq!(e["error"]["code"], 503);
    assert_eq!(e["error"]["message"], "Too many request bodies in flight");
    assert!(
        e["error"]["details"]
            .as_str()
            .unwrap()
            .contains("tsd.http.request.max_inflight_bytes"),
        "{e}"
    );
    // Every endpoint's body is held to the budget.
    let r = common::json_http(a, "POST", "/api/uid/assign", r#"{"metric":["x"]}"#);
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(stat(a, "http.body.rejected"), 2);
    assert_eq!(srv.point_count("late"), 0);

    // The held put completes; then there is room again.
    let r = held.finish();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), json!({"failed":0,"success":3}));
    await_stat(a, "http.body.inflight_bytes", 0);
    let r = post_put(a, "?summary", &points("late", 2));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(srv.point_count("held"), 3);
    assert_eq!(srv.point_count("late"), 2);
    assert_eq!(stat(a, "http.body.rejected"), 2);
}

#[test]
fn a_compressed_body_is_held_to_the_budget_as_it_inflates() {
    let srv = TestServer::start(&[
        ("tsd.core.auto_create_metrics", "true"),
        ("tsd.http.request.max_inflight_bytes", "65536"),
        ("tsd.http.request.max_inflight_wait", "50"),
    ]);
    let a = srv.addr;
    let held = HeldPut::start(a, padded(points("held", 3), 32768));
    await_stat(a, "http.body.inflight_bytes", 32768);
    // A few kilobytes sent, over 200 KB once inflated: more than is left.
    let text = points("zipped", 3000);
    assert!(text.len() > 200_000);
    let z = gzip(text.as_bytes());
    assert!(z.len() < 32768);
    let zipped = || {
        http(
            a,
            "POST",
            "/api/put?summary",
            &[("Content-Encoding", "gzip")],
            &z,
        )
    };
    let r = zipped();
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(stat(a, "http.body.rejected"), 1);
    assert_eq!(srv.point_count("zipped"), 0);
    assert_eq!(held.finish().status, 200);
    await_stat(a, "http.body.inflight_bytes", 0);
    let r = zipped();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), json!({"failed":0,"success":3000}));
    assert_eq!(srv.point_count("zipped"), 3000);
}

/// Bodies large enough to be parsed as they arrive answer as whole ones
/// did: per-point errors in body order, gzip, and a syntax error at the
/// very end refusing the request with nothing written, no name created.
#[test]
fn streamed_puts_answer_as_before() {
    let srv = TestServer::start(&[("tsd.core.auto_create_metrics", "true")]);
    let a = srv.addr;
    // Over 4 MB (parsed as it arrives, not read whole first), bad points
    // spread through it.
    let n = 60_000;
    let body: Vec<String> = (0..n)
        .map(|i| match i % 1000 {
            7 => format!(r#"{{"metric":"s","timestamp":0,"value":{i},"tags":{{"h":"a"}}}}"#),
            500 => format!(r#"{{"metric":"s","timestamp":{},"value":"x{i}","tags":{{"h":"a"}}}}"#, 1356998400 + i),
            _ => format!(
                r#"{{"metric":"s","timestamp":{},"value":{i},"tags":{{"h":"a","i":"{}"}},"pad":"{}"}}"#,
                1356998400 + i,
                i % 7,
                "p".repeat(10)
            ),
        })
        .collect();
    let body = format!("[{}]", body.join(",\n"));
    assert!(body.len() > 4 << 20);
    let bad = n / 500;
    let r = post_put(a, "?details", &body);
    assert_eq!(r.status, 400, "{}", r.text());
    let v = r.json();
    assert_eq!(v["success"], n - bad);
    assert_eq!(v["failed"], bad);
    let errors = v["errors"].as_array().unwrap();
    let firsts: Vec<(i64, &str)> = errors
        .iter()
        .take(2)
        .map(|e| {
            (
                e["datapoint"]["timestamp"].as_i64().unwrap(),
                e["error"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        firsts,
        vec![
            (0, "Invalid timestamp"),
            (1356998400 + 500, "Unable to parse value to a number")
        ]
    );
    assert_eq!(
        errors[1]["datapoint"],
        json!({"metric":"s","timestamp":1356998900,"value":"x500","tags":{"h":"a"}})
    );
    assert_eq!(srv.point_count("s"), n - bad);

    // The same body gzipped, under other names.
    let renamed = body.replace("\"s\"", "\"z\"");
    let r = http(
        a,
        "POST",
        "/api/put?summary",
        &[("Content-Encoding", "gzip")],
        &gzip(renamed.as_bytes()),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json(), json!({"failed":bad,"success":n - bad}));
    assert_eq!(srv.point_count("z"), n - bad);

    // A syntax error in the last bytes, plain and gzipped: nothing of the
    // body is written, not even the names of its metrics.
    for (metric, zipped) in [("late.plain", false), ("late.zipped", true)] {
        let mut late = body.replace("\"s\"", &format!("\"{metric}\""));
        late.pop();
        late.push_str(",}");
        let sent_text = late.clone();
        let (headers, sent) = if zipped {
            (vec![("Content-Encoding", "gzip")], gzip(late.as_bytes()))
        } else {
            (vec![], late.into_bytes())
        };
        let r = http(a, "POST", "/api/put", &headers, &sent);
        assert_eq!(r.status, 400, "{}", r.text());
        let e = r.json();
        assert_eq!(e["error"]["message"], "Unable to parse the given JSON");
        // The `}` after the last comma, on the body's last line.
        let column = sent_text.rsplit('\n').next().unwrap().len();
        assert_eq!(
            e["error"]["details"],
            format!("expected value at line {n} column {column}")
        );
        assert!(
            srv.state
                .db()
                .uids()
                .get_id(UidKind::Metric, metric)
                .is_err(),
            "{metric} was created"
        );
    }
    // A corrupt gzip stream after a good start is a decompression error,
    // as when bodies were inflated whole first.
    let mut z = gzip(body.as_bytes());
    let at = z.len() / 2;
    z.truncate(at);
    let r = http(a, "POST", "/api/put", &[("Content-Encoding", "gzip")], &z);
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(
        r.json()["error"]["message"],
        "Unable to decompress the request body"
    );
}

/// Bodies that each hold part of the budget and all wait for more cannot
/// all wait: one goes on beyond the budget, so every one is answered.
#[test]
fn bodies_that_all_wait_for_each_other_still_finish() {
    let srv = TestServer::start(&[
        ("tsd.core.auto_create_metrics", "true"),
        ("tsd.http.request.max_inflight_bytes", "1048576"),
        // Far longer than the puts take: were they stuck, a 503.
        ("tsd.http.request.max_inflight_wait", "30000"),
    ]);
    let a = srv.addr;
    // Each admitted by its size sent (a quarter of the budget at most),
    // then over 2 MB once inflated; all sent at once.
    let bodies: Vec<Vec<u8>> = (0..4)
        .map(|i| gzip(points(&format!("stuck.{i}"), 30_000).as_bytes()))
        .collect();
    assert!(bodies.iter().all(|z| z.len() < 1048576 / 4));
    let go = std::sync::Arc::new(std::sync::Barrier::new(bodies.len()));
    let senders: Vec<_> = bodies
        .into_iter()
        .map(|z| {
            let go = go.clone();
            std::thread::spawn(move || {
                go.wait();
                http(
                    a,
                    "POST",
                    "/api/put?summary",
                    &[("Content-Encoding", "gzip")],
                    &z,
                )
            })
        })
        .collect();
    for (i, s) in senders.into_iter().enumerate() {
        let r = s.join().unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(srv.point_count(&format!("stuck.{i}")), 30_000);
    }
    assert_eq!(stat(a, "http.body.rejected"), 0);
    await_stat(a, "http.body.inflight_bytes", 0);
}
