//! Input a store cannot hold and limits an operator sets: refused on every
//! write path with a clear error, never accepted and then stuck.

use crate::common;

use common::{TestServer, get, post_put, telnet};

/// The last second a row key's 4-byte base time can hold is 4294967295;
/// a millisecond timestamp past it (9999999999999 is 2286-11-20) used to
/// be accepted, could never be flushed, and stopped the store opening.
#[test]
fn a_timestamp_past_the_last_row_is_refused_on_every_write_path() {
    let mut srv = TestServer::start(&[("tsd.core.auto_create_metrics", "true")]);
    let reason = "bad timestamp=9999999999999 when trying to add value=[1]/0 to metric=m, tags={a=b}: \
                  its second 9999999999 is past 4294967295, the last a row key can hold (2106-02-07T06:28:15Z)";
    assert_eq!(
        telnet(
            srv.addr,
            b"put m 1356998400 1 a=b\nput m 9999999999999 1 a=b\nversion\n"
        )
        .lines()
        .next()
        .unwrap(),
        format!("put: illegal argument: {reason}")
    );

    let r = post_put(
        srv.addr,
        "?sync&details",
        r#"{"metric":"m","timestamp":9999999999999,"value":1,"tags":{"a":"b"}}"#,
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["failed"], 1);
    assert_eq!(r.json()["success"], 0);
    assert_eq!(r.json()["errors"][0]["error"], reason);

    let r = common::json_http(
        srv.addr,
        "POST",
        "/api/annotation",
        r#"{"startTime":9999999999999,"description":"d"}"#,
    );
    assert_eq!(r.status, 400, "{}", r.text());

    // Nothing unstorable got in: the store opens again and holds the
    // one good point.
    let dir = std::mem::replace(&mut srv.dir, tempfile::tempdir().unwrap());
    srv.stop();
    drop(srv);
    let srv = TestServer::start_in(dir, &[]);
    assert_eq!(srv.point_count("m"), 1);
    let (status, _) = get(&srv, "/api/query?start=1356998000&m=sum:m");
    assert_eq!(status, 200);
}

/// OpenTSDB assigns UIDs asynchronously, so running out of them reaches
/// `/api/put` through its storage errback: `Storage exception: <message>`,
/// not a bare `Unexpected exception` that names nothing.
#[test]
fn running_out_of_uids_says_so_over_http_and_telnet() {
    let srv = TestServer::start(&[
        ("tsd.core.auto_create_metrics", "true"),
        ("tsd.storage.uid.width.tagv", "1"),
    ]);
    let points: Vec<String> = (0..256)
        .map(|i| {
            format!(r#"{{"metric":"m","timestamp":1356998400,"value":1,"tags":{{"a":"v{i}"}}}}"#)
        })
        .collect();
    let r = post_put(srv.addr, "?details", &format!("[{}]", points.join(",")));
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["success"], 255);
    assert_eq!(r.json()["failed"], 1);
    let msg = "All Unique IDs for tagv on 1 bytes are already assigned!";
    assert_eq!(
        r.json()["errors"][0]["error"],
        format!("Storage exception: {msg}")
    );
    assert_eq!(
        telnet(srv.addr, b"put m 1356998400 1 a=another\nversion\n")
            .lines()
            .next()
            .unwrap(),
        format!("put: HBase error: {msg}")
    );
}

fn stat(srv: &TestServer, limit: &str) -> u64 {
    let (_, body) = get(srv, "/api/stats");
    let stats: serde_json::Value = serde_json::from_str(&body).unwrap();
    stats
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["metric"] == "tsd.series.refused" && s["tags"]["limit"] == limit)
        .unwrap_or_else(|| panic!("no tsd.series.refused for {limit} in {body}"))["value"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// New series beyond the hourly limit are refused with a message naming
/// the limit and counted; points of known series still pass.
#[test]
fn new_series_beyond_the_hourly_limit_are_refused_and_counted() {
    let srv = TestServer::start(&[
        ("tsd.core.auto_create_metrics", "true"),
        ("tsd.storage.series.max_new_per_hour", "3"),
    ]);
    let out = telnet(
        srv.addr,
        b"put m 1356998400 1 h=a\nput m 1356998400 1 h=b\nput m 1356998400 1 h=c\n\
          put m 1356998400 1 h=d\nput m 1356998401 2 h=a\nversion\n",
    );
    let first = out.lines().next().unwrap();
    assert_eq!(
        first,
        "put: illegal argument: too many series: 3 new series were created this hour, the limit \
         (tsd.storage.series.max_new_per_hour); refusing new series metric=m, tags={h=d}"
    );
    assert_eq!(stat(&srv, "tsd.storage.series.max_new_per_hour"), 1);
    // h=a got its second point; h=d none.
    assert_eq!(srv.point_count("m"), 4);
    let r = post_put(
        srv.addr,
        "?details",
        r#"[{"metric":"m","timestamp":1356998402,"value":1,"tags":{"h":"e"}},
            {"metric":"m","timestamp":1356998402,"value":1,"tags":{"h":"b"}}]"#,
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["success"], 1);
    assert!(
        r.json()["errors"][0]["error"]
            .as_str()
            .unwrap()
            .starts_with("too many series: 3 new series were created this hour"),
        "{}",
        r.text()
    );
    assert_eq!(stat(&srv, "tsd.storage.series.max_new_per_hour"), 2);
}

/// The total limit counts the series the store held when it opened.
#[test]
fn the_total_series_limit_survives_a_restart() {
    let mut srv = TestServer::start(&[("tsd.core.auto_create_metrics", "true")]);
    telnet(
        srv.addr,
        b"put m 1356998400 1 h=a\nput m 1356998400 1 h=b\nversion\n",
    );
    let dir = std::mem::replace(&mut srv.dir, tempfile::tempdir().unwrap());
    srv.stop();
    drop(srv);
    let srv = TestServer::start_in(dir, &[("tsd.storage.series.max_total", "3")]);
    let out = telnet(
        srv.addr,
        b"put m 1356998401 1 h=a\nput m 1356998400 1 h=c\nput m 1356998400 1 h=d\nversion\n",
    );
    assert!(
        out.starts_with(
            "put: illegal argument: too many series: the store holds 3 series, its limit \
             (tsd.storage.series.max_total); refusing new series metric=m, tags={h=d}"
        ),
        "{out}"
    );
    assert_eq!(stat(&srv, "tsd.storage.series.max_total"), 1);
    assert_eq!(srv.point_count("m"), 4);
}
