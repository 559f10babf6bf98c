//! `/api/query`'s result cache through a running TSD: hits on repeats and
//! sliding windows, invalidation by late points, deletes and renames,
//! `nocache`, counters in `/api/stats` and `/metrics`, the memory bound.

use crate::common;

use common::server::{TestServer, get, req};

const SERIES: usize = 20;

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Writes `m` for hosts h0.. every 10 s over `[from, to]` (seconds).
fn load(srv: &TestServer, metric: &str, from: u64, to: u64) {
    let mut pts = Vec::new();
    let mut t = from - from % 10;
    while t <= to {
        for h in 0..SERIES {
            pts.push(serde_json::json!({
                "metric": metric, "timestamp": t, "value": (t / 10 % 97) as usize + h,
                "tags": {"host": format!("h{h}"), "dc": if h % 2 == 0 { "a" } else { "b" }}
            }));
        }
        t += 10;
    }
    let (status, body) = req(
        srv,
        "POST",
        "/api/put?sync",
        &serde_json::Value::from(pts).to_string(),
    );
    assert_eq!(status, 204, "{body}");
}

/// `tsd.query.cache.<name>` from `/api/stats`.
fn stat(srv: &TestServer, name: &str) -> u64 {
    let (_, body) = get(srv, "/api/stats");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let want = format!("tsd.query.cache.{name}");
    let value = &v
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["metric"] == want.as_str())
        .unwrap_or_else(|| panic!("no {want} in {body}"))["value"];
    match value {
        serde_json::Value::String(s) => s.parse().unwrap(),
        v => v.as_u64().unwrap(),
    }
}

fn query(srv: &TestServer, qs: &str) -> String {
    let (status, body) = get(srv, &format!("/api/query?{qs}"));
    assert_eq!(status, 200, "{qs}: {body}");
    body
}

/// The answer through the cache, checked against the uncached one.
fn cached(srv: &TestServer, qs: &str) -> String {
    let a = query(srv, qs);
    let b = query(srv, &format!("{qs}&nocache"));
    assert_eq!(a, b, "{qs}");
    a
}

struct Setup {
    srv: TestServer,
    /// Query window end (s): data runs up to it.
    end: u64,
}

fn setup(settings: &[(&str, &str)]) -> Setup {
    setup_at(settings, now_s() - 120)
}

fn setup_at(settings: &[(&str, &str)], end: u64) -> Setup {
    let mut all = vec![("tsd.core.auto_create_metrics", "true")];
    all.extend_from_slice(settings);
    let srv = TestServer::start(&all);
    load(&srv, "cache.m", end - 7200, end);
    Setup { srv, end }
}

fn window(start: u64, end: u64, m: &str) -> String {
    format!("start={start}&end={end}&m={m}")
}

#[test]
fn a_repeat_is_a_hit_and_a_sliding_window_reuses_the_entry() {
    repeat_and_slide("sum:1m-avg:cache.m{dc=*}");
}

#[test]
fn a_rate_is_cached_too() {
    repeat_and_slide("sum:rate{counter}:cache.m{dc=*}");
}

fn repeat_and_slide(m: &str) {
    // Data up to 30 s ago: the new points land after the settled part
    // (tsd.query.cache.settle_ms, 60 s), as a live feed's do.
    // The window must not cross an hour as it slides (its scan would
    // start an hour later: another entry): start it past the hour then,
    // a few minutes ahead of now.
    let mut end = now_s() - 30;
    if (end - 3600) % 3600 > 3000 {
        end += 3600 - (end - 3600) % 3600 + 10;
    }
    let Setup { srv, end } = setup_at(&[], end);
    let first = cached(&srv, &window(end - 3600, end, m));
    assert_eq!((stat(&srv, "hits"), stat(&srv, "misses")), (0, 1));
    assert_eq!(cached(&srv, &window(end - 3600, end, m)), first);
    assert_eq!(stat(&srv, "hits"), 1);
    // The window slides while the tail is written: still a hit.
    load(&srv, "cache.m", end + 10, end + 60);
    let slid = cached(&srv, &window(end - 3600 + 60, end + 60, m));
    assert_ne!(slid, first);
    assert_eq!((stat(&srv, "hits"), stat(&srv, "misses")), (2, 1));
    assert!(stat(&srv, "entries") >= 1 && stat(&srv, "bytes") > 0);
}

/// A counter's rate without a downsampler: cached point by point, each
/// rate resuming from the last point before the settled boundary.
const RATE: &str = "sum:rate{counter}:cache.m";

#[test]
fn a_late_point_invalidates() {
    late_point_invalidates("sum:1m-avg:cache.m");
}

#[test]
fn a_late_point_invalidates_a_rate() {
    late_point_invalidates(RATE);
}

fn late_point_invalidates(m: &str) {
    let Setup { srv, end } = setup(&[]);
    let qs = window(end - 3600, end, m);
    let before = cached(&srv, &qs);
    cached(&srv, &qs);
    assert_eq!(stat(&srv, "hits"), 1);
    let late = serde_json::json!({"metric": "cache.m", "timestamp": end - 1800,
        "value": 1_000_000, "tags": {"host": "h3", "dc": "b"}});
    assert_eq!(req(&srv, "POST", "/api/put?sync", &late.to_string()).0, 204);
    let after = cached(&srv, &qs);
    assert_ne!(after, before, "the late point is in the answer");
    assert_eq!((stat(&srv, "hits"), stat(&srv, "misses")), (1, 2));
}

#[test]
fn a_delete_invalidates() {
    delete_invalidates("sum:1m-avg:cache.m");
}

#[test]
fn a_delete_invalidates_a_rate() {
    delete_invalidates(RATE);
}

fn delete_invalidates(m: &str) {
    let Setup { srv, end } = setup(&[("tsd.http.query.allow_delete", "true")]);
    let qs = window(end - 3600, end, m);
    let before = cached(&srv, &qs);
    cached(&srv, &qs);
    let (status, body) = req(
        &srv,
        "DELETE",
        &format!(
            "/api/query?start={}&end={}&m=sum:cache.m{{host=h1}}",
            end - 3600,
            end - 3000
        ),
        "",
    );
    assert_eq!(status, 200, "{body}");
    let after = cached(&srv, &qs);
    assert_ne!(after, before, "h1's deleted hour is gone from the answer");
    assert_eq!((stat(&srv, "hits"), stat(&srv, "misses")), (1, 2));
}

#[test]
fn a_rename_invalidates() {
    rename_invalidates("sum:1m-avg:cache.m{host=*}");
}

#[test]
fn a_rename_invalidates_a_rate() {
    rename_invalidates("sum:rate{counter}:cache.m{host=*}");
}

fn rename_invalidates(m: &str) {
    let Setup { srv, end } = setup(&[]);
    let qs = window(end - 3600, end, m);
    cached(&srv, &qs);
    cached(&srv, &qs);
    let (status, body) = req(&srv, "POST", "/api/uid/rename?tagv=h7&name=h7-renamed", "");
    assert_eq!(status, 200, "{body}");
    let after = cached(&srv, &qs);
    assert!(after.contains("\"h7-renamed\"") && !after.contains("\"h7\""));
    assert_eq!((stat(&srv, "hits"), stat(&srv, "misses")), (1, 2));
}

#[test]
fn nocache_bypasses_by_query_string_and_json() {
    let Setup { srv, end } = setup(&[]);
    let qs = window(end - 3600, end, "avg:1m-avg:cache.m");
    query(&srv, &format!("{qs}&nocache"));
    let body = serde_json::json!({"start": end - 3600, "end": end, "noCache": true,
        "queries": [{"aggregator": "avg", "metric": "cache.m", "downsample": "1m-avg"}]});
    let (status, _) = req(&srv, "POST", "/api/query", &body.to_string());
    assert_eq!(status, 200);
    assert_eq!(stat(&srv, "bypassed"), 2);
    assert_eq!(
        (
            stat(&srv, "hits"),
            stat(&srv, "misses"),
            stat(&srv, "entries")
        ),
        (0, 0, 0)
    );
    // Without the flag the same POST is cached.
    let body = body.to_string().replace("\"noCache\":true,", "");
    req(&srv, "POST", "/api/query", &body);
    req(&srv, "POST", "/api/query", &body);
    assert_eq!((stat(&srv, "hits"), stat(&srv, "misses")), (1, 1));
}

#[test]
fn counters_show_in_metrics() {
    let Setup { srv, end } = setup(&[]);
    let qs = window(end - 3600, end, "sum:1m-avg:cache.m");
    cached(&srv, &qs);
    query(&srv, &qs);
    let (status, text) = get(&srv, "/metrics");
    assert_eq!(status, 200);
    for (name, at_least) in [("hits", 1), ("misses", 1), ("bypassed", 1), ("entries", 1)] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("tsd_query_cache_{name}{{")))
            .unwrap_or_else(|| panic!("no tsd_query_cache_{name} in {text}"));
        let v: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(v >= at_least, "{line}");
    }
    assert!(text.contains("tsd_query_cache_evictions{") && text.contains("tsd_query_cache_bytes{"));
}

#[test]
fn the_memory_bound_evicts() {
    // Two entries' worth, measured on a server with room for both, over
    // the same data and windows as the bounded one. The window lies an
    // hour back, wholly settled, so the entries do not depend on when
    // they are made.
    let end = now_s() - 3720;
    let q1 = window(end - 3600, end, "sum:1m-avg:cache.m{dc=*}");
    let q2 = window(end - 3600, end, "max:1m-max:cache.m{host=*}");
    let Setup { srv, .. } = setup_at(&[], end);
    query(&srv, &q1);
    let b1 = stat(&srv, "bytes");
    query(&srv, &q2);
    let both = stat(&srv, "bytes");
    assert_eq!((stat(&srv, "entries"), stat(&srv, "evictions")), (2, 0));
    drop(srv);
    let bound = (both - 1).to_string();
    let Setup { srv, .. } = setup_at(&[("tsd.query.cache.max_bytes", &bound)], end);
    query(&srv, &q1);
    assert_eq!(stat(&srv, "bytes"), b1);
    query(&srv, &q2);
    assert_eq!(
        stat(&srv, "evictions"),
        1,
        "q1, the least recently used, goes"
    );
    assert_eq!(stat(&srv, "entries"), 1);
    assert_eq!(stat(&srv, "bytes"), both - b1);
    // The survivor is q2: it hits, q1 misses.
    query(&srv, &q2);
    assert_eq!(stat(&srv, "hits"), 1);
    drop(srv);
    // 0 turns the cache off.
    let Setup { srv, end } = setup(&[("tsd.query.cache.max_bytes", "0")]);
    let qs = window(end - 3600, end, "sum:1m-avg:cache.m");
    query(&srv, &qs);
    query(&srv, &qs);
    assert_eq!(
        (
            stat(&srv, "hits"),
            stat(&srv, "misses"),
            stat(&srv, "entries")
        ),
        (0, 0, 0)
    );
}

#[test]
fn a_rename_by_the_tsdb_command_is_seen_after_restart() {
    // `tsdb uid rename` is another process over a store the TSD holds
    // locked: it runs while the TSD is stopped, and the cache (memory
    // only) starts empty with the next TSD.
    let Setup { mut srv, end } = setup(&[]);
    let qs = window(end - 3600, end, "sum:1m-avg:cache.m{host=*}");
    cached(&srv, &qs);
    srv.stop();
    let dir = std::mem::replace(&mut srv.dir, tempfile::tempdir().unwrap());
    drop(srv);
    let r = common::tsdb(dir.path(), &["uid", "rename", "tagv", "h7", "h7-renamed"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let srv = TestServer::start_in(dir, &[]);
    let after = cached(&srv, &qs);
    assert!(after.contains("\"h7-renamed\"") && !after.contains("\"h7\""));
    assert_eq!((stat(&srv, "hits"), stat(&srv, "misses")), (0, 1));
}

#[test]
fn an_annotation_invalidates() {
    let Setup { srv, end } = setup(&[]);
    let qs = window(end - 3600, end, "sum:1m-avg:cache.m{host=h3}");
    let before = cached(&srv, &qs);
    cached(&srv, &qs);
    // h3's TSUID, then a note on it inside the window.
    let (_, body) = get(&srv, &format!("/api/query?{qs}&show_tsuids&nocache"));
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let tsuid = v[0]["tsuids"][0].as_str().unwrap().to_string();
    let note = serde_json::json!({"tsuid": tsuid, "startTime": end - 600, "description": "deploy"});
    let (status, body) = req(&srv, "POST", "/api/annotation", &note.to_string());
    assert_eq!(status, 200, "{body}");
    let after = cached(&srv, &qs);
    assert!(
        after.contains("\"deploy\"") && !before.contains("deploy"),
        "{after}"
    );
    assert_eq!((stat(&srv, "hits"), stat(&srv, "misses")), (1, 2));
}

#[test]
fn a_settled_window_is_answered_again_until_a_late_point() {
    settled_window_answered_again("sum:1m-avg:cache.m{dc=*}");
    settled_window_answered_again("sum:rate{counter}:cache.m{dc=*}");
}

/// A window whose rows all lie before the settled boundary: a repeat
/// reads nothing and hands out the kept answer, until a late point
/// inside it or a rename.
fn settled_window_answered_again(m: &str) {
    let Setup { srv, end } = setup(&[]);
    let qs = window(end - 7200 + 60, end - 3600 - 300, m);
    let first = cached(&srv, &qs);
    assert_eq!(cached(&srv, &qs), first);
    assert_eq!(cached(&srv, &qs), first);
    assert_eq!((stat(&srv, "hits"), stat(&srv, "misses")), (2, 1));
    let late = serde_json::json!({"metric": "cache.m", "timestamp": end - 5000,
        "value": 1_000_000, "tags": {"host": "h3", "dc": "b"}});
    assert_eq!(req(&srv, "POST", "/api/put?sync", &late.to_string()).0, 204);
    let after = cached(&srv, &qs);
    assert_ne!(after, first, "the late point is in the answer");
    assert_eq!(cached(&srv, &qs), after);
    assert_eq!((stat(&srv, "hits"), stat(&srv, "misses")), (3, 2));
    let (status, body) = req(&srv, "POST", "/api/uid/rename?tagv=b&name=b-renamed", "");
    assert_eq!(status, 200, "{body}");
    let renamed = cached(&srv, &qs);
    assert!(
        renamed.contains("\"b-renamed\"") && !renamed.contains("\"b\""),
        "{renamed}"
    );
    assert_eq!((stat(&srv, "hits"), stat(&srv, "misses")), (3, 3));
}
