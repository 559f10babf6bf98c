//! The line protocol against a real TSD over loopback sockets: every
//! error line of OpenTSDB's section 2 verbatim, the other commands, and
//! bad input that must leave the server serving.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{Backend, TestServer, Tsds, http, on_both_backends, telnet};

on_both_backends!(
    every_put_error_line_is_verbatim,
    commands_and_both_protocols_on_one_port,
    bad_input_leaves_the_server_serving,
    a_stalled_half_line_does_not_block_others,
    a_connection_sees_a_rename_made_elsewhere_at_once,
);

fn every_put_error_line_is_verbatim(backend: Backend) {
    let Some(t) = Tsds::start(backend, &[]) else {
        return;
    };
    let srv = t.writer();
    // Only `sys.cpu` exists: auto-create of metrics is off by default.
    srv.state
        .db()
        .uids()
        .assign(rtsdb::model::UidKind::Metric, "sys.cpu")
        .unwrap();
    let cases: &[(&str, &str)] = &[
        (
            "put",
            "put: illegal argument: not enough arguments (need least 4, got 0)",
        ),
        (
            "put sys.cpu 1356998400 1",
            "put: illegal argument: not enough arguments (need least 4, got 3)",
        ),
        (
            "put  1356998400 1 host=a",
            "put: illegal argument: empty metric name",
        ),
        (
            "put sys.cpu notatime 1 host=a",
            "put: invalid value: Invalid character 'n' in notatime",
        ),
        (
            "put sys.cpu 0 1 host=a",
            "put: illegal argument: invalid timestamp: 0",
        ),
        (
            "put sys.cpu -1 1 host=a",
            "put: illegal argument: invalid timestamp: -1",
        ),
        (
            "put sys.cpu 99999999999999 1 host=a",
            "put: illegal argument: bad timestamp=99999999999999 when trying to add value=[1]/0 to metric=sys.cpu, tags={host=a}",
        ),
        (
            "put sys.cpu 1356998400  host=a",
            "put: illegal argument: empty value",
        ),
        (
            "put sys.cpu 1356998400 abc host=a",
            "put: invalid value: Invalid character 'a' in abc",
        ),
        (
            "put sys.cpu 1356998400 1.2.3 host=a",
            "put: invalid value: For input string: \"1.2.3\"",
        ),
        (
            "put sys.cpu 1356998400 NaN host=a",
            "put: invalid value: Invalid character 'N' in NaN",
        ),
        (
            "put sys.cpu 1356998400 Infinity host=a",
            "put: invalid value: Invalid character 'I' in Infinity",
        ),
        (
            "put sys.cpu 1356998400 1e999 host=a",
            "put: illegal argument: value is NaN or Infinite: Infinity for metric=sys.cpu timestamp=1356998400",
        ),
        (
            "put sys.cpu 1356998400 1 host",
            "put: illegal argument: invalid tag: host",
        ),
        (
            "put sys.cpu 1356998400 1 host=",
            "put: illegal argument: invalid tag: host=",
        ),
        (
            "put sys.cpu 1356998400 1 =a",
            "put: illegal argument: invalid tag: =a",
        ),
        (
            "put sys.cpu 1356998400 1 a=b=c",
            "put: illegal argument: invalid tag: a=b=c",
        ),
        (
            "put sys.cpu 1356998400 1 host=a host=b",
            "put: illegal argument: duplicate tag: host=b, tags={host=a}",
        ),
        (
            "put sys.cpu 1356998400 1  ",
            "put: illegal argument: Need at least one tag (metric=sys.cpu, tags={})",
        ),
        (
            "put sys.cpu 1356998400 1 a=1 b=2 c=3 d=4 e=5 f=6 g=7 h=8 i=9",
            "put: illegal argument: Too many tags: 9 maximum allowed: 8, tags: {a=1, b=2, c=3, d=4, e=5, f=6, g=7, h=8, i=9}",
        ),
        (
            "put sys.c!pu 1356998400 1 host=a",
            "put: illegal argument: Invalid metric name (\"sys.c!pu\"): illegal character: !",
        ),
        (
            "put sys.cpu 1356998400 1 ho$t=a",
            "put: illegal argument: Invalid tag name with value [a] (\"ho$t\"): illegal character: $",
        ),
        (
            "put sys.cpu 1356998400 1 host=a,b",
            "put: illegal argument: Invalid tag value with key [host] (\"a,b\"): illegal character: ,",
        ),
        (
            "put no.such.metric 1356998400 1 host=a",
            "put: unknown metric: No such name for 'metrics': 'no.such.metric'",
        ),
        (
            "PUT sys.cpu 1356998400 1 host=a",
            "unknown command: PUT.  Try `help'.",
        ),
        ("bogus", "unknown command: bogus.  Try `help'."),
        ("", "unknown command: .  Try `help'."),
    ];
    let mut input = String::new();
    for (line, _) in cases {
        input.push_str(line);
        input.push('\n');
    }
    // `PUT` as the very first byte would switch to HTTP: lead with a put.
    let input = format!("put sys.cpu 1356998400 42 host=web01\n{input}");
    let out = telnet(srv.addr, input.as_bytes());
    let got: Vec<&str> = out.lines().collect();
    let want: Vec<&str> = cases.iter().map(|c| c.1).collect();
    assert_eq!(got, want);
    // Good lines are silent and stored; CRLF is accepted.
    assert_eq!(
        telnet(srv.addr, b"put sys.cpu 1356998401 1.5 host=web01\r\nput sys.cpu 1356998402.250 7 host=web01 host=web01\n"),
        ""
    );
    assert_eq!(t.reader().point_count("sys.cpu"), 3);
    assert_eq!(t.reader().point_count("no.such.metric"), 0);
}

fn commands_and_both_protocols_on_one_port(backend: Backend) {
    let Some(t) = Tsds::start(backend, &[("tsd.core.auto_create_metrics", "true")]) else {
        return;
    };
    let srv = t.writer();
    let out = telnet(srv.addr, b"version\n");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].starts_with("net.opentsdb.tools BuildData built at revision "));
    assert!(lines[1].starts_with("Built on "));
    assert_eq!(
        telnet(srv.addr, b"help\n"),
        "available commands: put rollup histogram stats dropcaches version exit help diediedie \n"
    );
    assert_eq!(telnet(srv.addr, b"dropcaches\n"), "Caches dropped.\n");
    telnet(srv.addr, b"put a.b 1356998400 1 host=x\n");
    let stats = telnet(srv.addr, b"stats\n");
    assert!(
        stats
            .lines()
            .any(|l| l.starts_with("tsd.rpc.received ") && l.contains(" type=telnet host=")),
        "{stats}"
    );
    assert!(
        stats
            .lines()
            .any(|l| l.starts_with("tsd.datapoints.added "))
    );
    assert!(
        stats
            .lines()
            .any(|l| l.starts_with("tsd.uid.cache-hit ") && l.contains("kind=metrics"))
    );
    for l in stats.lines() {
        assert!(l.split(' ').count() >= 4, "{l}");
    }
    // `exit` closes the connection: nothing after it runs.
    assert_eq!(telnet(srv.addr, b"exit\nversion\n"), "");
    // HTTP on the same port.
    let r = http(srv.addr, "GET", "/api/version", &[], b"");
    assert_eq!(r.status, 200);
    assert!(r.json()["short_revision"].is_string());
    assert_eq!(t.reader().point_count("a.b"), 1);
}

fn bad_input_leaves_the_server_serving(backend: Backend) {
    let Some(t) = Tsds::start(backend, &[("tsd.core.auto_create_metrics", "true")]) else {
        return;
    };
    let srv = t.writer();
    // Binary garbage (first byte not A-Z: telnet), including NULs and
    // invalid UTF-8.
    let garbage: Vec<u8> = (0..4000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let mut g = vec![0u8];
    g.extend(
        garbage
            .chunks(200)
            .flat_map(|c| c.iter().copied().chain([b'\n'])),
    );
    let out = telnet(srv.addr, &g);
    assert!(!out.is_empty());
    // Latin-1 bytes are letters to OpenTSDB: é (0xE9) is accepted.
    assert_eq!(telnet(srv.addr, b"put caf\xe9 1356998400 1 host=a\n"), "");
    assert_eq!(t.reader().point_count("caf\u{e9}"), 1);
    // An over-long line is refused with an error and the connection closed.
    let long = format!("put m 1356998400 1 host={}\nversion\n", "x".repeat(2000));
    let out = telnet(srv.addr, long.as_bytes());
    assert!(out.starts_with("error: line too long"), "{out}");
    assert!(!out.contains("Built on"));
    // So is an unterminated one that never ends.
    let mut s = TcpStream::connect(srv.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"put ").unwrap();
    let _ = s.write_all(&vec![b'y'; 100_000]);
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(out.starts_with("error: line too long"), "{out}");
    // Still serving.
    assert_eq!(telnet(srv.addr, b"dropcaches\n"), "Caches dropped.\n");
}

fn a_stalled_half_line_does_not_block_others(backend: Backend) {
    let Some(t) = Tsds::start(backend, &[("tsd.core.auto_create_metrics", "true")]) else {
        return;
    };
    let srv = t.writer();
    let mut stalled = TcpStream::connect(srv.addr).unwrap();
    stalled.write_all(b"put stall 1356998400 1 ho").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    for i in 0..20 {
        let line = format!("put other 13569984{i:02} {i} host=a\n");
        assert_eq!(telnet(srv.addr, line.as_bytes()), "");
    }
    let r = http(srv.addr, "GET", "/api/aggregators", &[], b"");
    assert_eq!(r.status, 200);
    assert_eq!(t.reader().point_count("other"), 20);
    // The stalled client finishes its line later; its point is taken.
    stalled.write_all(b"st=a\n").unwrap();
    stalled.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = String::new();
    stalled
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let _ = stalled.read_to_string(&mut rest);
    assert_eq!(rest, "");
    assert_eq!(t.reader().point_count("stall"), 1);
}

/// Embedded only: connection handling, and nothing is stored.
#[test]
fn idle_connections_time_out_and_limits_apply() {
    // The limit, with a timeout far longer than any stall of a loaded
    // machine, so the two idle connections are still open when the third
    // comes.
    let srv = TestServer::start(&[
        ("tsd.core.socket.timeout", "600"),
        ("tsd.core.connections.limit", "2"),
        ("tsd.no_diediedie", "true"),
        ("tsd.mode", "ro"),
    ]);
    // ro: no put; no diediedie.
    assert_eq!(
        telnet(srv.addr, b"put m 1356998400 1 host=a\ndiediedie\nhelp\n"),
        "unknown command: put.  Try `help'.\nunknown command: diediedie.  Try `help'.\navailable commands: stats dropcaches version exit help \n"
    );
    // The server counts a connection open until it has torn it down: wait
    // for the one above to be gone, and for the next two to be counted.
    let open = || {
        srv.state
            .stats_report()
            .stats
            .iter()
            .find(|s| {
                s.name == "connectionmgr.connections"
                    && s.tag.as_ref().is_some_and(|(_, v)| v == "open")
            })
            .map(|s| s.value.parse::<u64>().unwrap())
            .unwrap()
    };
    let settle = |want| {
        for _ in 0..6000 {
            if open() == want {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("{} connections open, waited for {want}", open());
    };
    settle(0);
    let _a = TcpStream::connect(srv.addr).unwrap();
    let _b = TcpStream::connect(srv.addr).unwrap();
    settle(2);
    // A third is closed at once.
    let mut c = TcpStream::connect(srv.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let _ = c.write_all(b"version\n");
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    assert!(out.is_empty());
    drop(srv);

    // The idle one is closed by the server after the timeout: the read
    // sees the end of the stream, not its own (much longer) timeout.
    let srv = TestServer::start(&[("tsd.core.socket.timeout", "1")]);
    let mut a = TcpStream::connect(srv.addr).unwrap();
    a.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut buf = [0u8; 1];
    assert_eq!(
        a.read(&mut buf)
            .expect("closed by the server, not timed out"),
        0
    );
}

/// Reads from a telnet connection until `want` has arrived.
fn read_until(s: &mut TcpStream, want: &str) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains(want) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed before {want:?}: {got:?}");
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// A connection remembers the series its lines named (the memo), but a
/// rename on another connection is seen by its very next line: the old
/// name gets a new UID as in OpenTSDB, and bad timestamps on a remembered
/// series still get OpenTSDB's message with the tags. (On the cluster
/// the rename goes to the writer too: another TSD's rename reaches this
/// one's caches one ZooKeeper watch delivery later, not "at once".)
fn a_connection_sees_a_rename_made_elsewhere_at_once(backend: Backend) {
    let Some(t) = Tsds::start(backend, &[("tsd.core.auto_create_metrics", "true")]) else {
        return;
    };
    let srv = t.writer();
    let mut s = TcpStream::connect(srv.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(
        b"put memo.m 1356998400 1 host=a dc=x\nput memo.m 1356998401 2 host=a dc=x\nversion\n",
    )
    .unwrap();
    read_until(&mut s, "Built on");
    let r = http(
        srv.addr,
        "POST",
        "/api/uid/rename?metric=memo.m&name=memo.renamed",
        &[],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    s.write_all(
        b"put memo.m 1356998410 3 host=a dc=x\nput memo.m 99999999999999 3 host=a dc=x\nversion\n",
    )
    .unwrap();
    let out = read_until(&mut s, "Built on");
    assert!(
        out.starts_with(
            "put: illegal argument: bad timestamp=99999999999999 when trying to add value=[3]/0 to metric=memo.m, tags={"
        ),
        "{out}"
    );
    assert_eq!(t.reader().point_count("memo.renamed"), 2);
    assert_eq!(t.reader().point_count("memo.m"), 1);
}
