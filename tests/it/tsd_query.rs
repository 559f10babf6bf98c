//! /api/query delete against a real TSD, with rows both flushed to the
//! store and still buffered (it needs the server's write path, so it is not
//! a case file; the other /api/query checks are in
//! `tests/compat/query/*.case`).

use crate::common;

use common::{Backend, Tsds, get, http, on_both_backends, telnet};

on_both_backends!(delete_query_removes_whole_rows_and_returns_the_data);

/// `/api/query` delete (DELETE, `"delete":true`, GET + method_override):
/// answers with the points it read, then removes every row (whole hours)
/// of the matching series, stored or still buffered in memory. On the
/// cluster the deletes go to the writer (whose buffer holds points) and
/// the reads to the other TSD.
fn delete_query_removes_whole_rows_and_returns_the_data(backend: Backend) {
    let h = 1356998400u64; // an hour boundary
    let Some(t) = Tsds::start(
        backend,
        &[
            ("tsd.core.auto_create_metrics", "true"),
            ("tsd.http.query.allow_delete", "true"),
        ],
    ) else {
        return;
    };
    let srv = t.writer();
    let put = |lines: String| assert_eq!(telnet(srv.addr, lines.as_bytes()), "");
    put(format!(
        "put sys.cpu.user {h} 1 host=web01\n\
         put sys.cpu.user {} 2 host=web01\n\
         put sys.cpu.user {h} 3 host=web02\n\
         put sys.cpu.sys {h} 9 host=web01\n",
        h + 60
    ));
    // These rows are in the store; the next points stay in memory.
    srv.state.db().flush_all().unwrap();
    put(format!(
        "put sys.cpu.user {} 4 host=web01\n\
         put sys.cpu.user {} 5 host=web02\n\
         put sys.cpu.user {} 6 host=web01\n",
        h + 120,
        h + 3630,
        h + 7200
    ));
    // The embedded store keeps these points buffered until their hours are
    // sealed; a cluster TSD writes its buffer to ClickHouse every flush tick,
    // which a loaded machine can reach before this line, so there the delete
    // may meet them buffered or stored: it must remove them either way.
    if backend == Backend::Embedded {
        assert!(srv.state.db().buffered_points() > 0);
    }
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
        get(t.reader(), &all),
        (
            200,
            format!(
                r#"[{{"metric":"sys.cpu.user","tags":{{"host":"web01"}},"aggregateTags":[],"dps":{{"{}":6}}}}]"#,
                h + 7200
            )
        )
    );
    assert_eq!(
        get(
            t.reader(),
            &format!("/api/query?start={h}&m=sum:sys.cpu.sys")
        )
        .1,
        format!(
            r#"[{{"metric":"sys.cpu.sys","tags":{{"host":"web01"}},"aggregateTags":[],"dps":{{"{h}":9}}}}]"#
        )
    );
    // Still gone once everything buffered has been flushed.
    srv.state.db().flush_all().unwrap();
    assert_eq!(get(t.reader(), &all).1.matches("dps").count(), 1);
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
    assert_eq!(get(t.reader(), &all), (200, "[]".into()));
    // GET with method_override=delete.
    let (s, text) = get(
        srv,
        &format!("/api/query?start={h}&m=sum:sys.cpu.sys&method_override=delete"),
    );
    assert_eq!((s, text.contains(r#":9}"#)), (200, true), "{text}");
    assert_eq!(
        get(
            t.reader(),
            &format!("/api/query?start={h}&m=sum:sys.cpu.sys")
        ),
        (200, "[]".into())
    );
    // The series stay known.
    assert_eq!(get(t.reader(), "/api/search/lookup?m=sys.cpu.user").0, 200);
}

/// OpenTSDB 2.4.1 refuses to start on an unknown `tsd.core.timezone`
/// (`DateTime.setDefaultTimezone`); rtsdb used to fall back to UTC.
/// Not a backend test: the TSD stops before it opens any store.
#[test]
fn an_unknown_timezone_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = rtsdb::config::Config::default();
    config.set(
        rtsdb::config::DATA_DIR_KEY,
        &dir.path().display().to_string(),
    );
    config.set("tsd.core.timezone", "Mars/Olympus_Mons");
    let e = rtsdb::tsd::TsdState::open(config).err().unwrap();
    assert_eq!(
        e.to_string(),
        "config key tsd.core.timezone = 'Mars/Olympus_Mons': Invalid timezone name"
    );
}
