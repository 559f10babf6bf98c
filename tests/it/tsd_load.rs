//! Many connections at once over both protocols.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{TestServer, parse_response};

#[test]
fn a_thousand_concurrent_connections() {
    common::raise_fd_limit(8192);
    let srv = TestServer::start(&[("tsd.core.auto_create_metrics", "true")]);
    const N: usize = 1000;
    let mut conns: Vec<TcpStream> = (0..N)
        .map(|_| {
            let s = TcpStream::connect(srv.addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            s
        })
        .collect();
    for (i, s) in conns.iter_mut().enumerate() {
        if i % 2 == 0 {
            s.write_all(format!("put conc {} {i} host=h{i}\nversion\n", 1356998400 + i).as_bytes())
                .unwrap();
        } else {
            let body = format!(
                r#"{{"metric":"conc","timestamp":{},"value":{i},"tags":{{"host":"h{i}"}}}}"#,
                1356998400 + i
            );
            s.write_all(
                format!(
                    "POST /api/put HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            )
            .unwrap();
        }
    }
    // Every connection is open at the same time.
    let deadline = Instant::now() + Duration::from_secs(30);
    // Open connections as /api/stats counts them (less the one asking).
    let open = || {
        let r = common::http(srv.addr, "GET", "/api/stats", &[], b"");
        let stats: serde_json::Value = serde_json::from_str(&r.text()).unwrap();
        let open = stats
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["metric"] == "tsd.connectionmgr.connections" && s["tags"]["type"] == "open")
            .and_then(|s| s["value"].as_str()?.parse::<u64>().ok())
            .unwrap();
        open - 1
    };
    while open() < N as u64 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(open(), N as u64);
    for (i, s) in conns.iter_mut().enumerate() {
        let mut buf = vec![0u8; 4096];
        let mut got = Vec::new();
        loop {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "connection {i} closed early");
            got.extend_from_slice(&buf[..n]);
            if i % 2 == 0 {
                if got.iter().filter(|b| **b == b'\n').count() >= 2 {
                    assert!(String::from_utf8_lossy(&got).starts_with("net.opentsdb.tools"));
                    break;
                }
            } else if got.windows(4).any(|w| w == b"\r\n\r\n") {
                assert_eq!(parse_response(&got).status, 204);
                break;
            }
        }
    }
    drop(conns);
    assert_eq!(srv.point_count("conc"), N);
}
