//! Acceptance tests for /api/query semantics (spec sections 1.2, 4, 10),
//! run against the query library over an in-memory store with known data.

mod common;

use common::{Db, T};
use rtsdb::model::{UidKind, Value};
use rtsdb::query::{self, QueryError};
use serde_json::json;

fn dps(db: &Db, qs: &str) -> String {
    let out = db.get_value(qs);
    out[0]["dps"].to_string()
}

fn err(r: Result<String, QueryError>) -> (u16, String) {
    let e = r.unwrap_err();
    (e.status(), e.message())
}

#[test]
fn worked_interpolation_example() {
    let db = Db::new();
    db.ints("m", &[("id", "a")], &[(10, 5), (30, 15), (50, 5)]);
    db.ints(
        "m",
        &[("id", "b")],
        &[(0, 10), (20, 20), (40, 10), (60, 20)],
    );
    let body = db
        .get(&format!("start={T}&end={}&m=sum:m", T + 60))
        .unwrap();
    // The docs list 25 at 30 s; OpenTSDB's LERP (section 4.3's formula, and
    // the code) gives B(30) = 15, so 15 + 15 = 30.
    assert_eq!(
        body,
        format!(
            r#"[{{"metric":"m","tags":{{}},"aggregateTags":["id"],"dps":{{"{}":10,"{}":20,"{}":30,"{}":30,"{}":20,"{}":20,"{}":20}}}}]"#,
            T,
            T + 10,
            T + 20,
            T + 30,
            T + 40,
            T + 50,
            T + 60
        )
    );
}

fn two_hosts() -> Db {
    let db = Db::new();
    db.ints(
        "sys.cpu.user",
        &[("host", "web01"), ("dc", "lga")],
        &[(0, 1), (60, 2)],
    );
    db.ints(
        "sys.cpu.user",
        &[("host", "web02"), ("dc", "lga")],
        &[(0, 3), (60, 4)],
    );
    db
}

#[test]
fn section_4_8_examples() {
    let db = two_hosts();
    let base = format!("start={T}&end={}", T + 60);
    let v = db.get_value(&format!("{base}&m=sum:sys.cpu.user{{host=*}}"));
    assert_eq!(v.as_array().unwrap().len(), 2);
    assert_eq!(v[0]["tags"], json!({"host":"web01","dc":"lga"}));
    assert_eq!(v[0]["aggregateTags"], json!([]));
    assert_eq!(v[1]["tags"]["host"], "web02");
    let v = db.get_value(&format!("{base}&m=sum:sys.cpu.user"));
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert_eq!(v[0]["tags"], json!({"dc":"lga"}));
    assert_eq!(v[0]["aggregateTags"], json!(["host"]));
    assert_eq!(
        v[0]["dps"],
        json!({T.to_string(): 4, (T + 60).to_string(): 6})
    );
    assert_eq!(
        dps(
            &db,
            &format!("{base}&m=sum:sys.cpu.user{{host=web01}}&arrays")
        ),
        format!("[[{T},1],[{},2]]", T + 60)
    );
    assert_eq!(
        db.get(&format!("start={}&m=sum:sys.cpu.user", T + 7200))
            .unwrap(),
        "[]"
    );
    assert_eq!(
        err(db.get(&format!("{base}&m=sum:nope"))),
        (400, "No such name for 'metrics': 'nope'".into())
    );
}

#[test]
fn each_aggregator() {
    let db = Db::new();
    db.ints("m", &[("h", "a")], &[(0, 1), (10, 2)]);
    db.ints("m", &[("h", "b")], &[(0, 3), (10, 6)]);
    let cases: &[(&str, &str)] = &[
        ("sum", "4,8"),
        ("zimsum", "4,8"),
        ("pfsum", "4,8"),
        ("min", "1,2"),
        ("mimmin", "1,2"),
        ("max", "3,6"),
        ("mimmax", "3,6"),
        ("avg", "2,4"),
        ("dev", "1,2"),
        ("count", "2,2"),
        ("median", "3,6"),
        ("mult", "3,12"),
        ("diff", "2,4"),
        ("squareSum", "10,40"),
        ("first", "1,2"),
        ("last", "3,6"),
        ("p50", "2,4"),
        ("p99", "3,6"),
        ("ep50r3", "1,2"),
        ("ep50r7", "2,4"),
    ];
    for (agg, want) in cases {
        let (a, b) = want.split_once(',').unwrap();
        assert_eq!(
            dps(&db, &format!("start={T}&end={}&m={agg}:m", T + 10)),
            format!(r#"{{"{T}":{a},"{}":{b}}}"#, T + 10),
            "aggregator {agg}"
        );
    }
    // Float inputs: double math, Java formatting.
    let db = Db::new();
    db.put("f", &[("h", "a")], &[(0, Value::Float(1.5))]);
    db.put("f", &[("h", "b")], &[(0, Value::Float(2.0))]);
    assert_eq!(
        dps(&db, &format!("start={T}&m=avg:f")),
        format!(r#"{{"{T}":1.75}}"#)
    );
    assert_eq!(
        dps(&db, &format!("start={T}&m=dev:f")),
        format!(r#"{{"{T}":0.25}}"#)
    );
    // `none`: one output per series.
    let db = two_hosts();
    let v = db.get_value(&format!("start={T}&m=none:sys.cpu.user"));
    assert_eq!(v.as_array().unwrap().len(), 2);
    assert_eq!(v[1]["dps"][(T + 60).to_string()], 4);
}

#[test]
fn downsampled_values_are_doubles_and_fill_policies() {
    let db = Db::new();
    db.ints("m", &[("h", "a")], &[(0, 1), (30, 2), (120, 5)]);
    let q = |ds: &str| dps(&db, &format!("start={T}&end={}&m=sum:{ds}:m", T + 180));
    let (t1, t2, t3) = (T + 60, T + 120, T + 180);
    assert_eq!(q("1m-sum"), format!(r#"{{"{T}":3.0,"{t2}":5.0}}"#));
    assert_eq!(q("1m-sum-none"), format!(r#"{{"{T}":3.0,"{t2}":5.0}}"#));
    assert_eq!(
        q("1m-sum-nan"),
        format!(r#"{{"{T}":3.0,"{t1}":"NaN","{t2}":5.0,"{t3}":"NaN"}}"#)
    );
    assert_eq!(
        q("1m-sum-null"),
        format!(r#"{{"{T}":3.0,"{t1}":null,"{t2}":5.0,"{t3}":null}}"#)
    );
    assert_eq!(
        q("1m-sum-zero"),
        format!(r#"{{"{T}":3.0,"{t1}":0.0,"{t2}":5.0,"{t3}":0.0}}"#)
    );
    assert_eq!(q("1m-count"), format!(r#"{{"{T}":2.0,"{t2}":1.0}}"#));
    // `0all`: one bucket at the query start; the end is exclusive.
    assert_eq!(
        dps(&db, &format!("start={T}&end={}&m=sum:0all-sum:m", T + 120)),
        format!(r#"{{"{T}":3.0}}"#)
    );
    // Calendar days in a zone (JSON only).
    let body = format!(
        r#"{{"start":{T},"end":{},"timezone":"Asia/Kolkata","queries":[{{"aggregator":"sum","metric":"m","downsample":"1dc-sum"}}]}}"#,
        T + 180
    );
    let v: serde_json::Value = serde_json::from_str(&db.post(&body).unwrap()).unwrap();
    // Midnight in Kolkata is 18:30 UTC the day before: that bucket lies
    // before the start, so the series is listed with no points (as
    // OpenTSDB does for a series with rows but nothing in range).
    assert_eq!(
        v,
        json!([{"metric":"m","tags":{"h":"a"},"aggregateTags":[],"dps":{}}])
    );
    let body = body.replace(
        &format!(r#""start":{T}"#),
        &format!(r#""start":{}"#, T - 19800),
    );
    let v: serde_json::Value = serde_json::from_str(&db.post(&body).unwrap()).unwrap();
    assert_eq!(v[0]["dps"], json!({(T - 19800).to_string(): 8.0}));
}

#[test]
fn rate_with_counter_wrap_and_drop_resets() {
    let db = Db::new();
    db.ints("c", &[("h", "a")], &[(0, 90), (10, 10), (20, 30)]);
    let q = |r: &str| dps(&db, &format!("start={T}&end={}&m=sum:{r}:c", T + 20));
    assert_eq!(
        q("rate"),
        format!(r#"{{"{}":-8.0,"{}":2.0}}"#, T + 10, T + 20)
    );
    assert_eq!(
        q("rate{counter,100}"),
        format!(r#"{{"{}":2.0,"{}":2.0}}"#, T + 10, T + 20)
    );
    assert_eq!(
        q("rate{counter,100,1}"),
        format!(r#"{{"{}":0.0,"{}":2.0}}"#, T + 10, T + 20)
    );
    assert_eq!(
        q("rate{dropcounter,100}"),
        format!(r#"{{"{}":2.0}}"#, T + 20)
    );
    // JSON form.
    let body = format!(
        r#"{{"start":{T},"end":{},"queries":[{{"aggregator":"sum","metric":"c","rate":true,"rateOptions":{{"counter":true,"counterMax":100,"dropResets":true}}}}]}}"#,
        T + 20
    );
    let v: serde_json::Value = serde_json::from_str(&db.post(&body).unwrap()).unwrap();
    assert_eq!(v[0]["dps"], json!({(T + 20).to_string(): 2.0}));
}

fn hosts_db() -> Db {
    let db = Db::new();
    for h in ["web01", "web02", "db01", "WEB03", "xweb01y"] {
        db.ints("m", &[("host", h), ("dc", "lga")], &[(0, 1)]);
    }
    db.ints("m", &[("dc", "lga")], &[(0, 1)]);
    db
}

fn hosts(db: &Db, filter: &str) -> Vec<String> {
    let body = format!(
        r#"{{"start":{T},"queries":[{{"aggregator":"none","metric":"m","filters":[{filter}]}}]}}"#
    );
    let v: serde_json::Value = serde_json::from_str(&db.post(&body).unwrap()).unwrap();
    let mut out: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["tags"]["host"].as_str().unwrap_or("-").to_string())
        .collect();
    out.sort();
    out
}

#[test]
fn every_filter_type_and_quirk() {
    let db = hosts_db();
    let f = |t: &str, v: &str| format!(r#"{{"type":"{t}","tagk":"host","filter":"{v}"}}"#);
    assert_eq!(
        hosts(&db, &f("literal_or", "web01|db01")),
        ["db01", "web01"]
    );
    assert_eq!(hosts(&db, &f("iliteral_or", "web03")), ["WEB03"]);
    // not_* pass series lacking the key ("-").
    assert_eq!(
        hosts(&db, &f("not_literal_or", "web01|web02")),
        ["-", "WEB03", "db01", "xweb01y"]
    );
    assert_eq!(
        hosts(&db, &f("not_iliteral_or", "WEB01|web03")),
        ["-", "db01", "web02", "xweb01y"]
    );
    assert_eq!(hosts(&db, &f("wildcard", "web*")), ["web01", "web02"]);
    assert_eq!(
        hosts(&db, &f("iwildcard", "web*")),
        ["WEB03", "web01", "web02"]
    );
    // Unanchored without a leading or trailing `*`.
    assert_eq!(hosts(&db, &f("wildcard", "web*1")), ["web01", "xweb01y"]);
    assert_eq!(
        hosts(&db, &f("wildcard", "*")),
        ["WEB03", "db01", "web01", "web02", "xweb01y"]
    );
    // regexp is a substring match (find()).
    assert_eq!(
        hosts(&db, &f("regexp", "eb0")),
        ["web01", "web02", "xweb01y"]
    );
    assert_eq!(hosts(&db, &f("regexp", "^web0[12]$")), ["web01", "web02"]);
    // Two literal_or filters on one key are OR-ed.
    let two = format!("{},{}", f("literal_or", "web01"), f("literal_or", "db01"));
    assert_eq!(hosts(&db, &two), ["db01", "web01"]);
    // Other filters on one key are AND-ed.
    let and = format!("{},{}", f("wildcard", "web*"), f("regexp", "2$"));
    assert_eq!(hosts(&db, &and), ["web02"]);
    // Legacy `host=web*` is a case-insensitive wildcard, grouped.
    let v = db.get_value(&format!("start={T}&m=sum:m{{host=web*}}"));
    assert_eq!(v.as_array().unwrap().len(), 3);
    // The second braces filter without grouping.
    let v = db.get_value(&format!("start={T}&m=sum:m{{}}{{host=web01|web02}}"));
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert_eq!(v[0]["aggregateTags"], json!(["host"]));
    assert_eq!(v[0]["dps"][T.to_string()], 2);
}

#[test]
fn group_by_order_follows_tag_value_uids() {
    let db = Db::new();
    // UIDs in write order: zeta gets 1, alpha 2.
    db.ints("m", &[("host", "zeta")], &[(0, 1)]);
    db.ints("m", &[("host", "alpha")], &[(0, 2)]);
    let v = db.get_value(&format!("start={T}&m=sum:m{{host=*}}"));
    assert_eq!(v[0]["tags"]["host"], "zeta");
    assert_eq!(v[1]["tags"]["host"], "alpha");
    // Literal alternatives group by each value.
    let v = db.get_value(&format!("start={T}&m=sum:m{{host=alpha|zeta}}"));
    assert_eq!(v.as_array().unwrap().len(), 2);
}

#[test]
fn aggregate_tags_as_compute_tags_does() {
    let db = Db::new();
    db.ints("m", &[("host", "a"), ("dc", "x")], &[(0, 1)]);
    db.ints("m", &[("host", "b"), ("dc", "x")], &[(0, 1)]);
    db.ints("m", &[("host", "c")], &[(0, 1)]);
    let v = db.get_value(&format!("start={T}&m=sum:m"));
    // `dc` is missing from one series but has one value: it stays in tags.
    assert_eq!(v[0]["tags"], json!({"dc":"x"}));
    assert_eq!(v[0]["aggregateTags"], json!(["host"]));
    // explicit_tags: only series whose key set is exactly {host}.
    let v = db.get_value(&format!("start={T}&m=sum:explicit_tags:m{{host=*}}"));
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert_eq!(v[0]["tags"], json!({"host":"c"}));
}

#[test]
fn output_options() {
    let db = two_hosts();
    let v = db.get_value(&format!(
        "start={T}&m=sum:sys.cpu.user{{host=web01}}&ms&show_tsuids&show_query&show_summary"
    ));
    assert_eq!(
        v[0]["dps"],
        json!({(T * 1000).to_string(): 1, ((T + 60) * 1000).to_string(): 2})
    );
    assert_eq!(v[0]["tsuids"], json!(["000001000001000001000002000002"]));
    assert_eq!(v[0]["query"]["aggregator"], "sum");
    assert_eq!(v[0]["query"]["filters"][0]["type"], "literal_or");
    assert!(v[1]["statsSummary"]["rawDatapoints"].is_number());
    // tsuid sub-queries sum the listed series.
    let v = db.get_value(&format!(
        "start={T}&tsuid=sum:000001000001000001000002000002,000001000001000003000002000002"
    ));
    assert_eq!(v[0]["dps"][T.to_string()], 4);
    assert_eq!(v[0]["metric"], "sys.cpu.user");
}

#[test]
fn deleted_tag_uids_skip_series_instead_of_failing() {
    let db = two_hosts();
    db.uids.delete(UidKind::TagValue, "web02").unwrap();
    let v = db.get_value(&format!("start={T}&m=sum:sys.cpu.user&show_stats"));
    assert_eq!(v[0]["dps"][T.to_string()], 1);
    assert_eq!(v[0]["stats"]["unresolvedSeries"], 1);
}

#[test]
fn bad_queries_get_opentsdb_errors() {
    let db = two_hosts();
    let s = format!("start={T}");
    let cases: Vec<(String, &str)> = vec![
        (
            format!("{s}&m=nope:sys.cpu.user"),
            "No such aggregation function: nope",
        ),
        (
            format!("{s}&m=sys.cpu.user"),
            "Invalid parameter m=sys.cpu.user (not enough :-separated parts)",
        ),
        (
            format!("{s}&m=sum:sys.cpu.user{{host=web01"),
            "Missing '}' at the end of: sys.cpu.user{host=web01",
        ),
        (
            format!("{s}&m=sum:sys.cpu.user{{host}}"),
            "When parsing tag 'host': invalid tag: host",
        ),
        (
            format!("{s}&m=sum:sys.cpu.user{{host=foo(x)}}"),
            "When parsing tag 'host=foo(x)': Could not find a tag value filter of the type: foo",
        ),
        (
            format!("start={}&end={T}&m=sum:sys.cpu.user", T + 1),
            "End time [1356998400000] must be greater than the start time [1356998401000]",
        ),
        (
            format!("{s}&m=sum:1m:sys.cpu.user"),
            "Invalid downsampling specifier '1m': must provide at least interval and function",
        ),
        (
            format!("{s}&m=sum:1x-avg:sys.cpu.user"),
            "Invalid duration (suffix): 1x",
        ),
        (
            format!("{s}&m=sum:1m-avg-foo:sys.cpu.user"),
            "No such fill policy: 'foo': must be one of: none zero nan null scalar",
        ),
        (
            format!("{s}&m=sum:sys.cpu.user{{nokey=*}}"),
            "No such name for 'tagk': 'nokey'",
        ),
        (
            format!("{s}&m=sum:sys.cpu.user{{host=web09}}"),
            "No such name for 'tagv': 'web09'",
        ),
        (
            format!("{s}&m=sum:rate{{counter,x}}:sys.cpu.user"),
            "Max value of counter was not a number, received 'x'",
        ),
        (
            "m=sum:sys.cpu.user".to_string(),
            "Missing parameter <code>start</code>",
        ),
        (
            "start=1356998400.1234&m=sum:sys.cpu.user".to_string(),
            "Invalid time: 1356998400.1234. Millisecond timestamps must be in the format <seconds>.<ms> where the milliseconds are limited to 3 digits",
        ),
    ];
    for (qs, msg) in cases {
        let (status, m) = err(db.get(&qs));
        assert_eq!((status, m.as_str()), (400, msg), "{qs}");
    }
    // The error body.
    let e = query::parse_get("start=1&m=sum").unwrap_err();
    assert_eq!(
        e.to_json(),
        json!({"error":{"code":400,"message":"Invalid parameter m=sum (not enough :-separated parts)"}})
    );
    // delete is gated by configuration.
    let body = format!(
        r#"{{"start":{T},"delete":true,"queries":[{{"aggregator":"sum","metric":"sys.cpu.user"}}]}}"#
    );
    assert_eq!(err(db.post(&body)), (400, "Bad request".into()));
    // Fill over a huge range is refused, not allocated.
    let (status, _) = err(db.get("start=1&end=4000000000&m=sum:1s-sum-zero:sys.cpu.user"));
    assert_eq!(status, 413);
}

#[test]
fn limits_are_enforced() {
    let db = two_hosts();
    let q = query::parse_get(&format!("start={T}&m=sum:sys.cpu.user")).unwrap();
    let mut ctx = db.ctx();
    ctx.limits.max_data_points = 3;
    let e = query::execute(&ctx, &q).unwrap_err();
    assert_eq!(e.status(), 413);
    assert!(e.message().contains("limit of 3 data points"));
}

#[test]
fn query_last() {
    let db = two_hosts();
    db.put(
        "sys.cpu.user",
        &[("host", "web01"), ("dc", "lga")],
        &[(3700, Value::Float(2.5))],
    );
    let q = query::parse_last_get("timeseries=sys.cpu.user{host=web01}&resolve").unwrap();
    let v = query::execute_last(&db.ctx(), &q).unwrap();
    assert_eq!(
        v,
        json!([{"metric":"sys.cpu.user","tags":{"host":"web01","dc":"lga"},
            "timestamp": (T + 3700) * 1000, "value":"2.5","tsuid":"000001000001000001000002000002"}])
    );
    let q =
        query::parse_last_post(br#"{"queries":[{"tsuids":["000001000001000003000002000002"]}]}"#)
            .unwrap();
    let v = query::execute_last(&db.ctx(), &q).unwrap();
    assert_eq!(v[0]["value"], "4");
    assert_eq!(v[0]["timestamp"], (T + 60) * 1000);
    assert!(v[0].get("metric").is_none());
    // back_scan looks back from now only: nothing within 1 hour of now.
    let q = query::parse_last_get("timeseries=sys.cpu.user{host=web01}&back_scan=1").unwrap();
    assert_eq!(query::execute_last(&db.ctx(), &q).unwrap(), json!([]));
    assert_eq!(
        query::parse_last_get("timeseries=m&back_scan=x")
            .unwrap_err()
            .message(),
        "Unable to parse back_scan parameter"
    );
}
