//! /api/query and /api/query/last against a real TSD, with data written
//! over telnet: the documented examples (opentsdb.md 4.3, 4.8) and errors,
//! asserting exact bodies.

mod common;

use common::{TestServer, get, http, telnet};

fn server_with_two_hosts() -> TestServer {
    let srv = TestServer::start(&[("tsd.core.auto_create_metrics", "true")]);
    let out = telnet(
        srv.addr,
        b"put sys.cpu.user 1356998400 1 host=web01\n\
          put sys.cpu.user 1356998460 2 host=web01\n\
          put sys.cpu.user 1356998400 3 host=web02\n\
          put sys.cpu.user 1356998460 4 host=web02\n",
    );
    assert_eq!(out, "");
    srv
}

#[test]
fn documented_group_by_examples() {
    let srv = server_with_two_hosts();
    let base = "/api/query?start=1356998400&end=1356998460";
    // 4.8: host=* gives one result per host, aggregateTags empty.
    assert_eq!(
        get(&srv, &format!("{base}&m=sum:sys.cpu.user%7Bhost=*%7D")),
        (
            200,
            r#"[{"metric":"sys.cpu.user","tags":{"host":"web01"},"aggregateTags":[],"dps":{"1356998400":1,"1356998460":2}},{"metric":"sys.cpu.user","tags":{"host":"web02"},"aggregateTags":[],"dps":{"1356998400":3,"1356998460":4}}]"#
                .to_string()
        )
    );
    // No tags: one result, host aggregated away.
    assert_eq!(
        get(&srv, &format!("{base}&m=sum:sys.cpu.user")),
        (
            200,
            r#"[{"metric":"sys.cpu.user","tags":{},"aggregateTags":["host"],"dps":{"1356998400":4,"1356998460":6}}]"#.to_string()
        )
    );
    // arrays and ms.
    assert_eq!(
        get(
            &srv,
            &format!("{base}&m=sum:sys.cpu.user%7Bhost=web01%7D&arrays&ms")
        )
        .1,
        r#"[{"metric":"sys.cpu.user","tags":{"host":"web01"},"aggregateTags":[],"dps":[[1356998400000,1],[1356998460000,2]]}]"#
    );
    // POST JSON with filters, downsampling makes doubles.
    let body = r#"{"start":1356998400,"end":1356998460,"queries":[{"aggregator":"avg","metric":"sys.cpu.user","downsample":"1m-sum","filters":[{"type":"literal_or","tagk":"host","filter":"web01|web02","groupBy":false}]}]}"#;
    let r = http(
        srv.addr,
        "POST",
        "/api/query",
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    );
    assert_eq!(
        (r.status, r.text()),
        (
            200,
            r#"[{"metric":"sys.cpu.user","tags":{},"aggregateTags":["host"],"dps":{"1356998400":2.0,"1356998460":3.0}}]"#.to_string()
        )
    );
}

#[test]
fn documented_interpolation_example() {
    // opentsdb.md 4.3: A = {10:5, 30:15, 50:5}, B = {0:10, 20:20, 40:10, 60:20}.
    let srv = TestServer::start(&[("tsd.core.auto_create_metrics", "true")]);
    let t = 1356998400;
    let mut lines = String::new();
    for (o, v) in [(10, 5), (30, 15), (50, 5)] {
        lines.push_str(&format!("put m {} {v} s=a\n", t + o));
    }
    for (o, v) in [(0, 10), (20, 20), (40, 10), (60, 20)] {
        lines.push_str(&format!("put m {} {v} s=b\n", t + o));
    }
    assert_eq!(telnet(srv.addr, lines.as_bytes()), "");
    let (status, body) = get(
        &srv,
        &format!("/api/query?start={t}&end={}&m=sum:m", t + 60),
    );
    assert_eq!(status, 200);
    // At 30 s: A = 15 and B interpolates between 20 and 10 to 15, so the
    // sum is 30 (the docs' table prints 25, which its own formula refutes).
    assert_eq!(
        body,
        format!(
            r#"[{{"metric":"m","tags":{{}},"aggregateTags":["s"],"dps":{{"{t}":10,"{}":20,"{}":30,"{}":30,"{}":20,"{}":20,"{}":20}}}}]"#,
            t + 10,
            t + 20,
            t + 30,
            t + 40,
            t + 50,
            t + 60
        )
    );
}

#[test]
fn errors_and_empty_results() {
    let srv = server_with_two_hosts();
    assert_eq!(
        get(&srv, "/api/query?start=1356998400&m=sum:nope"),
        (
            400,
            r#"{"error":{"code":400,"message":"No such name for 'metrics': 'nope'"}}"#.to_string()
        )
    );
    let (status, body) = get(&srv, "/api/query?start=1356998400&m=bogus:sys.cpu.user");
    assert_eq!(status, 400);
    assert!(
        body.contains("No such aggregation function: bogus"),
        "{body}"
    );
    let (status, body) = get(&srv, "/api/query?m=sum:sys.cpu.user");
    assert_eq!(status, 400);
    assert!(
        body.contains("Missing parameter <code>start</code>"),
        "{body}"
    );
    let (status, body) = get(
        &srv,
        "/api/query?start=1356998460&end=1356998400&m=sum:sys.cpu.user",
    );
    assert_eq!(status, 400);
    assert!(
        body.contains("must be greater than the start time"),
        "{body}"
    );
    // Data exists, but not in range: an empty array.
    assert_eq!(
        get(&srv, "/api/query?start=1456998400&m=sum:sys.cpu.user"),
        (200, "[]".to_string())
    );
    // Methods other than GET/POST/DELETE.
    assert_eq!(http(srv.addr, "PUT", "/api/query", &[], b"{}").status, 405);
}

#[test]
fn last_point_per_series() {
    let srv = server_with_two_hosts();
    let (status, body) = get(
        &srv,
        "/api/query/last?timeseries=sys.cpu.user%7Bhost=web02%7D&resolve",
    );
    assert_eq!(status, 200);
    assert_eq!(
        body,
        r#"[{"metric":"sys.cpu.user","tags":{"host":"web02"},"timestamp":1356998460000,"tsuid":"000001000001000002","value":"4"}]"#
    );
}

/// `/api/query` delete (DELETE, `"delete":true`, GET + method_override):
/// answers with the points it read, then removes every row (whole hours)
/// of the matching series, stored or still buffered in memory.
#[test]
fn delete_query_removes_whole_rows_and_returns_the_data() {
    let h = 1356998400u64; // an hour boundary
    let srv = TestServer::start(&[
        ("tsd.core.auto_create_metrics", "true"),
        ("tsd.http.query.allow_delete", "true"),
    ]);
    let put = |lines: String| assert_eq!(telnet(srv.addr, lines.as_bytes()), "");
    put(format!(
        "put sys.cpu.user {h} 1 host=web01\n\
         put sys.cpu.user {} 2 host=web01\n\
         put sys.cpu.user {h} 3 host=web02\n\
         put sys.cpu.sys {h} 9 host=web01\n",
        h + 60
    ));
    // These rows are in the store; the next points stay in memory.
    srv.state.db.flush_all().unwrap();
    put(format!(
        "put sys.cpu.user {} 4 host=web01\n\
         put sys.cpu.user {} 5 host=web02\n\
         put sys.cpu.user {} 6 host=web01\n",
        h + 120,
        h + 3630,
        h + 7200
    ));
    assert!(srv.state.db.buffered_points() > 0);
    // The range starts after the first point: it is not returned, but its
    // row goes all the same.
    let r = http(
        srv.addr,
        "DELETE",
        &format!(
            "/api/query?start={}&end={}&m=sum:sys.cpu.user%7Bhost=*%7D",
            h + 30,
            h + 3660
        ),
        &[],
        b"",
    );
    assert_eq!(
        (r.status, r.text()),
        (
            200,
            format!(
                r#"[{{"metric":"sys.cpu.user","tags":{{"host":"web01"}},"aggregateTags":[],"dps":{{"{}":2,"{}":4}}}},{{"metric":"sys.cpu.user","tags":{{"host":"web02"}},"aggregateTags":[],"dps":{{"{}":5}}}}]"#,
                h + 60,
                h + 120,
                h + 3630
            )
        )
    );
    let all = format!(
        "/api/query?start={h}&end={}&m=sum:sys.cpu.user%7Bhost=*%7D",
        h + 10800
    );
    // Only the point of the hour outside the range is left; the other
    // metric is untouched.
    assert_eq!(
        get(&srv, &all),
        (
            200,
            format!(
                r#"[{{"metric":"sys.cpu.user","tags":{{"host":"web01"}},"aggregateTags":[],"dps":{{"{}":6}}}}]"#,
                h + 7200
            )
        )
    );
    assert_eq!(
        get(&srv, &format!("/api/query?start={h}&m=sum:sys.cpu.sys")).1,
        format!(
            r#"[{{"metric":"sys.cpu.sys","tags":{{"host":"web01"}},"aggregateTags":[],"dps":{{"{h}":9}}}}]"#
        )
    );
    // Still gone once everything buffered has been flushed.
    srv.state.db.flush_all().unwrap();
    assert_eq!(get(&srv, &all).1.matches("dps").count(), 1);
    // JSON "delete": true.
    let body = format!(
        r#"{{"start":{h},"end":{},"delete":true,"queries":[{{"aggregator":"sum","metric":"sys.cpu.user"}}]}}"#,
        h + 10800
    );
    let r = http(
        srv.addr,
        "POST",
        "/api/query",
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    );
    assert_eq!(r.status, 200);
    assert!(
        r.text().contains(&format!(r#""{}":6"#, h + 7200)),
        "{}",
        r.text()
    );
    assert_eq!(get(&srv, &all), (200, "[]".into()));
    // GET with method_override=delete.
    let (s, t) = get(
        &srv,
        &format!("/api/query?start={h}&m=sum:sys.cpu.sys&method_override=delete"),
    );
    assert_eq!((s, t.contains(r#":9}"#)), (200, true), "{t}");
    assert_eq!(
        get(&srv, &format!("/api/query?start={h}&m=sum:sys.cpu.sys")),
        (200, "[]".into())
    );
    // The series stay known.
    assert_eq!(get(&srv, "/api/search/lookup?m=sys.cpu.user").0, 200);
}

#[test]
fn delete_query_is_refused_unless_enabled() {
    let srv = server_with_two_hosts();
    let r = http(
        srv.addr,
        "DELETE",
        "/api/query?start=1356998400&m=sum:sys.cpu.user",
        &[],
        b"",
    );
    assert_eq!(
        (r.status, r.text()),
        (
            400,
            r#"{"error":{"code":400,"message":"Bad request","details":"Deleting data is not enabled (tsd.http.query.allow_delete=false)"}}"#
                .into()
        )
    );
    // GET + method_override=delete is then an ordinary query.
    let (s, t) = get(
        &srv,
        "/api/query?start=1356998400&m=sum:sys.cpu.user&method_override=delete",
    );
    assert_eq!((s, t.contains("dps")), (200, true), "{t}");
    // Nothing was deleted.
    assert!(
        get(&srv, "/api/query?start=1356998400&m=sum:sys.cpu.user")
            .1
            .contains("dps")
    );
}

/// `padding` (query-string flag or JSON): each result also carries the
/// nearest point before `start` and after `end`, when there is one, even
/// in the neighbouring hour.
#[test]
fn padding_adds_the_neighbouring_points() {
    let h = 1356998400u64;
    let srv = TestServer::start(&[("tsd.core.auto_create_metrics", "true")]);
    let lines: String = [
        (h - 30, 1), // previous hour
        (h + 60, 2),
        (h + 120, 3),
        (h + 180, 4),
        (h + 240, 5),
        (h + 3700, 6), // next hour
    ]
    .iter()
    .map(|(t, v)| format!("put sys.cpu.user {t} {v} host=web01\n"))
    .collect();
    assert_eq!(telnet(srv.addr, lines.as_bytes()), "");
    let q = |extra: &str, s: u64, e: u64| {
        get(
            &srv,
            &format!("/api/query?start={s}&end={e}&m=sum:sys.cpu.user{extra}"),
        )
    };
    let dps = |pts: &[(u64, i32)]| {
        let body: Vec<String> = pts.iter().map(|(t, v)| format!(r#""{t}":{v}"#)).collect();
        format!(
            r#"[{{"metric":"sys.cpu.user","tags":{{"host":"web01"}},"aggregateTags":[],"dps":{{{}}}}}]"#,
            body.join(",")
        )
    };
    assert_eq!(
        q("", h + 120, h + 180).1,
        dps(&[(h + 120, 3), (h + 180, 4)])
    );
    assert_eq!(
        q("&padding", h + 120, h + 180).1,
        dps(&[(h + 60, 2), (h + 120, 3), (h + 180, 4), (h + 240, 5)])
    );
    // The neighbours may lie in the hours before and after.
    assert_eq!(
        q("&padding", h + 60, h + 240).1,
        dps(&[
            (h - 30, 1),
            (h + 60, 2),
            (h + 120, 3),
            (h + 180, 4),
            (h + 240, 5),
            (h + 3700, 6)
        ])
    );
    // Nothing in the range: just the neighbours.
    assert_eq!(
        q("&padding", h + 250, h + 260).1,
        dps(&[(h + 240, 5), (h + 3700, 6)])
    );
    // JSON form.
    let body = format!(
        r#"{{"start":{},"end":{},"padding":true,"queries":[{{"aggregator":"sum","metric":"sys.cpu.user"}}]}}"#,
        h + 120,
        h + 180
    );
    let r = http(
        srv.addr,
        "POST",
        "/api/query",
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    );
    assert_eq!(
        r.text(),
        dps(&[(h + 60, 2), (h + 120, 3), (h + 180, 4), (h + 240, 5)])
    );
}

#[test]
fn a_renamed_name_gets_a_new_uid_on_its_next_point() {
    let srv = TestServer::start(&[("tsd.core.auto_create_metrics", "true")]);
    assert_eq!(telnet(srv.addr, b"put m 1356998400 1 host=web01\n"), "");
    let r = http(
        srv.addr,
        "GET",
        "/api/uid/rename?tagv=web01&name=web02",
        &[],
        b"",
    );
    assert_eq!(
        (r.status, r.text()),
        (200, r#"{"result":"true"}"#.to_string())
    );
    // As OpenTSDB: the old name is free again and gets a new UID; the
    // earlier point now belongs to web02.
    assert_eq!(
        telnet(
            srv.addr,
            b"put m 1356998460 2 host=web01\nput m 1356998520 3 host=web02\n"
        ),
        ""
    );
    let (status, body) = get(
        &srv,
        "/api/query?start=1356998400&end=1356998520&m=sum:m%7Bhost=*%7D&show_tsuids",
    );
    assert_eq!(status, 200);
    assert_eq!(
        body,
        r#"[{"metric":"m","tags":{"host":"web02"},"aggregateTags":[],"tsuids":["000001000001000001"],"dps":{"1356998400":1,"1356998520":3}},{"metric":"m","tags":{"host":"web01"},"aggregateTags":[],"tsuids":["000001000001000002"],"dps":{"1356998460":2}}]"#
    );
}

#[test]
fn the_configured_timezone_reads_absolute_dates() {
    let srv = TestServer::start(&[
        ("tsd.core.auto_create_metrics", "true"),
        ("tsd.core.timezone", "America/New_York"),
    ]);
    telnet(srv.addr, b"put tz.m 1356998400 1 host=a\n");
    // 2013-01-01 00:00 UTC is 2012-12-31 19:00 in New York.
    let (status, body) = get(
        &srv,
        "/api/query?start=2012/12/31-19:00:00&end=2012/12/31-19:00:01&m=sum:tz.m",
    );
    assert_eq!(
        (status, body.contains(r#""1356998400":1"#)),
        (200, true),
        "{body}"
    );
}

/// OpenTSDB 2.4.1 refuses to start on an unknown `tsd.core.timezone`
/// (`DateTime.setDefaultTimezone`); rtsdb used to fall back to UTC.
#[test]
fn an_unknown_timezone_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = rtsdb::config::Config::default();
    config.set(
        rtsdb::config::DATA_DIR_KEY,
        &dir.path().display().to_string(),
    );
    config.set("tsd.core.timezone", "Mars/Olympus_Mons");
    let ctx = rtsdb::cli::Context { config };
    let e = rtsdb::cli::tsd::build_state(&ctx).err().unwrap();
    assert_eq!(
        e.to_string(),
        "config key tsd.core.timezone = 'Mars/Olympus_Mons': Invalid timezone name"
    );
}
