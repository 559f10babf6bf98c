//! Rollups and pre-aggregates through HTTP and telnet: OpenTSDB 2.4.1's
//! `TestRollupRpc` (inputs, stored cells and error texts) and its rollup
//! query tests, plus rtsdb's own computed rollups (`tsd.rollups.auto`).

use crate::common::{TestServer, get, req, telnet};

/// `TestRollupRpc`'s configuration (1m default in `tsdb`/`tsdb-agg`, 1h
/// and 1d rolled into month rows), with `avg` mapped too so the derived
/// aggregator checks can be reached.
pub const CONFIG: &str = r#"{"aggregationIds":{"sum":0,"count":1,"max":2,"min":3,"avg":4},
 "intervals":[
  {"table":"tsdb","preAggregationTable":"tsdb-agg","interval":"1m","rowSpan":"1h","defaultInterval":true},
  {"table":"tsdb-rollup-1h","preAggregationTable":"tsdb-rollup-agg-1h","interval":"1h","rowSpan":"1n"},
  {"table":"tsdb-rollup-1d","preAggregationTable":"tsdb-rollup-agg-1d","interval":"1d","rowSpan":"1n"}]}"#;

/// A TSD with rollups on and `sys.cpu.user`, `sys.cpu.nice` known (metrics
/// are not created on write, as in OpenTSDB's default).
fn server(extra: &[(&str, &str)]) -> TestServer {
    let mut settings = vec![
        ("tsd.rollups.enable", "true"),
        ("tsd.rollups.config", CONFIG),
    ];
    settings.extend_from_slice(extra);
    let srv = TestServer::start(&settings);
    let (s, t) = req(
        &srv,
        "POST",
        "/api/uid/assign",
        r#"{"metric":["sys.cpu.user","sys.cpu.nice"]}"#,
    );
    assert_eq!(s, 200, "{t}");
    srv
}

/// Every cell of `table`: (metric name, row base time, tags, qualifier, value).
type StoredCell = (String, u32, Vec<(String, String)>, Vec<u8>, Vec<u8>);

fn cells(srv: &TestServer, table: &str) -> Vec<StoredCell> {
    let db = srv.state.db();
    let layout = db.store().layout().clone();
    let uids = db.uids();
    let mut out = Vec::new();
    for r in db.rollup_table().scan(table, &[], &[]) {
        let (key, row) = r.unwrap();
        let rk = layout.parse_row_key(&key).unwrap();
        let name = |k, u| uids.get_name(k, u).unwrap().to_string();
        use rtsdb::model::UidKind::*;
        let metric = name(Metric, rk.tsuid.metric);
        let mut tags: Vec<(String, String)> = rk
            .tsuid
            .tags
            .iter()
            .map(|(k, v)| (name(TagKey, *k), name(TagValue, *v)))
            .collect();
        tags.sort();
        for c in row.cells {
            out.push((metric.clone(), rk.base_time, tags.clone(), c.qualifier, c.value));
        }
    }
    out
}

fn tags(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    v.sort();
    v
}

const WEB01: &[(&str, &str)] = &[("host", "web01")];

#[test]
fn telnet_rollups_land_where_opentsdb_puts_them() {
    let srv = server(&[]);
    // execute, executeAggOnly, executeRollupWithAgg: no answer, one cell.
    let out = telnet(
        srv.addr,
        b"rollup 1h-sum sys.cpu.user 1356998400 42 host=web01\n\
          rollup sum sys.cpu.user 1356998400 42 host=web01\n\
          rollup 1h-sum:sum sys.cpu.user 1356998400 42 host=web01\n",
    );
    assert_eq!(out, "");
    let user = "sys.cpu.user".to_string();
    assert_eq!(
        cells(&srv, "tsdb-rollup-1h"),
        vec![(user.clone(), 1356998400, tags(WEB01), vec![0, 0, 0], vec![0x2A])]
    );
    let agg = tags(&[("host", "web01"), ("_aggregate", "SUM")]);
    assert_eq!(
        cells(&srv, "tsdb-agg"),
        vec![(user.clone(), 1356998400, agg.clone(), vec![0, 0], vec![0x2A])]
    );
    assert_eq!(
        cells(&srv, "tsdb-rollup-agg-1h"),
        vec![(user.clone(), 1356998400, agg, vec![0, 0, 0], vec![0x2A])]
    );
    // Later in the month: the same month row, offset 10 days and 5 hours
    // in hours (245 << 4), a float of 4 bytes (flags 0xB).
    telnet(
        srv.addr,
        b"rollup 1h-max sys.cpu.user 1357880400 1.5 host=web01\n",
    );
    let c = cells(&srv, "tsdb-rollup-1h");
    assert_eq!(c.len(), 2, "{c:?}");
    assert_eq!(c[1].3, vec![2, 0x0F, 0x5B]);
    assert_eq!(c[1].4, 1.5f32.to_bits().to_be_bytes().to_vec());
}

#[test]
fn telnet_rollup_errors_are_opentsdbs() {
    let srv = server(&[]);
    let cases: &[(&str, &str)] = &[
        // executeBadValue
        (
            "rollup 10-msum sys.cpu.user 1365465600 notanum host=web01",
            "rollup: invalid value: ",
        ),
        // executeMissingMetric
        (
            "rollup 1h-sum  1365465600 42 host=web01",
            "rollup: illegal argument: empty metric name\n",
        ),
        // executeUnknownMetric
        (
            "rollup 1h-sum sys.cpu.nouid 1365465600 42 host=web01",
            "rollup: unknown metric: No such name for 'metrics': 'sys.cpu.nouid'\n",
        ),
        // executeShortArray
        (
            "rollup 1h-sum sys.cpu.user 1365465600 42",
            "rollup: illegal argument: not enough arguments (need least 7, got 4)\n",
        ),
        // executeMissingInterval
        (
            "rollup  sys.cpu.user 1365465600 42 host=web01",
            "rollup: illegal argument: Missing interval or aggregator\n",
        ),
        // executeUnknownInterval
        (
            "rollup 13m-sum sys.cpu.user 1365465600 42 host=web01",
            "rollup: No such rollup: No rollups configured for the interval: 13m\n",
        ),
        // executeMissingAggregator
        (
            "rollup sys.cpu.user 1365465600 42 host=web01",
            "rollup: illegal argument: not enough arguments (need least 7, got 4)\n",
        ),
        // executeMissingTags
        (
            "rollup 1h-sum sys.cpu.user 1365465600 42 ",
            "rollup: illegal argument: Need at least one tag (metric=sys.cpu.user, tags={})\n",
        ),
        (
            "rollup 1h-nosuchagg sys.cpu.user 1365465600 42 host=web01",
            "rollup: illegal argument: No ID found mapping to aggregator: nosuchagg\n",
        ),
        (
            "rollup 1h-avg sys.cpu.user 1365465600 42 host=web01",
            "rollup: illegal argument: Derived rollup aggregations are not allowed AVG with metric sys.cpu.user {host=web01}\n",
        ),
        (
            "rollup avg sys.cpu.user 1365465600 42 host=web01",
            "rollup: illegal argument: Derived group by aggregations are not allowed avg with metric sys.cpu.user {_aggregate=AVG, host=web01}\n",
        ),
        (
            "rollup nosuchagg sys.cpu.user 1365465600 42 host=web01",
            "rollup: illegal argument: Invalid group by aggregator nosuchagg with metric sys.cpu.user {_aggregate=NOSUCHAGG, host=web01}\n",
        ),
        (
            "rollup 1h-sum:sum sys.cpu.user 1365465600 42 host=web01 _aggregate=max",
            "rollup: illegal argument: Given tag value for _aggregate of max did not match the group by aggregator of sum for sys.cpu.user {_aggregate=max, host=web01}\n",
        ),
        (
            "rollup 1h-sum sys.cpu.user 1365465600123 42 host=web01",
            "rollup: illegal argument: bad timestamp=1365465600123 when trying to add value=[42]/0 to metric=sys.cpu.user, tags={host=web01}\n",
        ),
    ];
    for (line, want) in cases {
        let out = telnet(srv.addr, format!("{line}\n").as_bytes());
        assert!(out.starts_with(want), "{line}: {out:?}");
    }
    for t in ["tsdb-rollup-1h", "tsdb-agg", "tsdb-rollup-agg-1h"] {
        assert!(cells(&srv, t).is_empty(), "{t}");
    }
    // executeRollupsDisabled
    let off = TestServer::start(&[("tsd.core.auto_create_metrics", "true")]);
    let out = telnet(
        off.addr,
        b"rollup 1h-sum sys.cpu.user 1365465600 42 host=web01\n",
    );
    assert_eq!(
        out,
        "rollup: illegal argument: No rollup or aggregations were configured\n"
    );
}

fn post(srv: &TestServer, query: &str, body: &str) -> (u16, String) {
    req(srv, "POST", &format!("/api/rollup{query}"), body)
}

fn point(extra: &str) -> String {
    format!(
        r#"{{"metric":"sys.cpu.user","timestamp":1356998400,"value":42,{extra}"tags":{{"host":"web01"}}}}"#
    )
}

#[test]
fn http_rollups_land_where_opentsdb_puts_them() {
    let srv = server(&[]);
    // httpAddSingleRollupPoint
    let (s, t) = post(&srv, "", &point(r#""interval":"1h","aggregator":"sum","#));
    assert_eq!((s, t.as_str()), (204, ""));
    let user = "sys.cpu.user".to_string();
    assert_eq!(
        cells(&srv, "tsdb-rollup-1h"),
        vec![(user.clone(), 1356998400, tags(WEB01), vec![0, 0, 0], vec![0x2A])]
    );
    // httpAddSingleGroupByPoint
    let (s, _) = post(&srv, "", &point(r#""groupByAggregator":"sum","#));
    assert_eq!(s, 204);
    let agg = tags(&[("host", "web01"), ("_aggregate", "SUM")]);
    assert_eq!(
        cells(&srv, "tsdb-agg"),
        vec![(user.clone(), 1356998400, agg.clone(), vec![0, 0], vec![0x2A])]
    );
    // httpAddSingleRollupAndGroupByPoint
    let (s, _) = post(
        &srv,
        "",
        &point(r#""interval":"1h","aggregator":"sum","groupByAggregator":"sum","#),
    );
    assert_eq!(s, 204);
    assert_eq!(
        cells(&srv, "tsdb-rollup-agg-1h"),
        vec![(user.clone(), 1356998400, agg, vec![0, 0, 0], vec![0x2A])]
    );
    // httpAddTwoRollupPoints
    let two = format!(
        "[{},{}]",
        point(r#""interval":"1d","aggregator":"sum","#),
        point(r#""interval":"1d","aggregator":"sum","#)
            .replace("sys.cpu.user", "sys.cpu.nice")
            .replace("42", "24")
    );
    let (s, _) = post(&srv, "?summary", &two);
    assert_eq!(s, 200);
    let c = cells(&srv, "tsdb-rollup-1d");
    assert_eq!(c.len(), 2, "{c:?}");
    assert!(c.iter().any(|c| c.0 == "sys.cpu.nice" && c.4 == vec![0x18]));
    // httpAddTwoRollupPointsOneGoodOneBad
    let bad = format!(
        "[{},{}]",
        point(r#""interval":"1h","aggregator":"max","#),
        point(r#""interval":"1h","aggregator":"max","#).replace("sys.cpu.user", "sys.cpu.nouid")
    );
    let (s, t) = post(&srv, "", &bad);
    assert_eq!(s, 400);
    assert_eq!(
        t,
        r#"{"error":{"code":400,"message":"One or more data points had errors","details":"Please see the TSD logs or append \"details\" to the put request"}}"#
    );
    assert_eq!(cells(&srv, "tsdb-rollup-1h").len(), 2);
    // sync writes are acknowledged once on disk.
    let (s, t) = post(&srv, "?sync&summary", &point(r#""interval":"1h","aggregator":"min","#));
    assert_eq!((s, t.as_str()), (200, r#"{"failed":0,"success":1}"#));
}

#[test]
fn http_rollup_errors_are_opentsdbs() {
    let srv = server(&[]);
    let details = |extra: &str| {
        let body = point(extra);
        let (s, t) = post(&srv, "?details", &body);
        assert_eq!(s, 400, "{t}");
        let v: serde_json::Value = serde_json::from_str(&t).unwrap();
        assert_eq!(v["failed"], 1, "{t}");
        assert_eq!(v["success"], 0, "{t}");
        v["errors"][0]["error"].as_str().unwrap().to_string()
    };
    // httpMissingInterval, httpEmptyInterval, httpMissingAggregator,
    // httpEmptyAggregator, httpInvalidAggregator
    assert_eq!(details(r#""aggregator":"sum","#), "Missing interval");
    assert_eq!(details(r#""interval":"","aggregator":"sum","#), "Missing interval");
    assert_eq!(details(r#""interval":"1h","#), "Missing aggregator");
    assert_eq!(details(r#""interval":"1h","aggregator":"","#), "Missing aggregator");
    assert_eq!(
        details(r#""interval":"1h","aggregator":"nosuchagg","#),
        "No ID found mapping to aggregator: nosuchagg"
    );
    // A NoSuchRollupForIntervalException is none of the classes the HTTP
    // path names.
    assert_eq!(
        details(r#""interval":"13m","aggregator":"sum","#),
        "Unexpected exception"
    );
    assert_eq!(
        details(r#""interval":"1h","aggregator":"sum","groupByAggregator":"","#),
        "Cannot write a group by data point without specifying the aggregation function. Metric=sys.cpu.user tags={host=web01}"
    );
    assert_eq!(
        details(r#""interval":"1h","aggregator":"avg","#),
        "Derived rollup aggregations are not allowed AVG with metric sys.cpu.user {host=web01}"
    );
    // httpNSUNMetric
    let (s, t) = post(
        &srv,
        "?details",
        &point(r#""interval":"1h","aggregator":"sum","#).replace("sys.cpu.user", "sys.cpu.nouid"),
    );
    assert_eq!(s, 400);
    assert!(t.contains(r#""error":"Unknown metric""#), "{t}");
    assert!(
        t.contains(r#""datapoint":{"metric":"sys.cpu.nouid","timestamp":1356998400,"value":"42","tags":{"host":"web01"},"interval":"1h","aggregator":"sum"}"#),
        "{t}"
    );
    // The put path's envelope errors.
    assert_eq!(post(&srv, "", "").0, 400);
    let (s, t) = post(&srv, "", "[]");
    assert_eq!((s, t.as_str()), (400, r#"{"error":{"code":400,"message":"No datapoints found in content"}}"#));
    let (s, t) = post(&srv, "", "{");
    assert_eq!(s, 400);
    assert!(t.contains("Unable to parse the given JSON"), "{t}");
    let (s, t) = get(&srv, "/api/rollup");
    assert_eq!(s, 405, "{t}");
    for t in ["tsdb-rollup-1h", "tsdb-agg", "tsdb-rollup-agg-1h"] {
        assert!(cells(&srv, t).is_empty(), "{t}");
    }
}

#[test]
fn a_bad_rollup_config_is_refused_at_start() {
    use rtsdb::config::Config;
    let mut c = Config::default();
    c.set("tsd.rollups.enable", "true");
    let e = rtsdb::db::DbOptions::from_config(&c).unwrap_err().to_string();
    assert!(
        e.contains("Rollups were enabled but 'tsd.rollups.config' is null or empty."),
        "{e}"
    );
    c.set("tsd.rollups.config", r#"{"aggregationIds":{"sum":0},"intervals":[]}"#);
    let e = rtsdb::db::DbOptions::from_config(&c).unwrap_err().to_string();
    assert!(e.contains("Rollup config given but no intervals were found."), "{e}");
    // A value ending in .json is a file.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rollups.json");
    c.set("tsd.rollups.config", &file.display().to_string());
    let e = rtsdb::db::DbOptions::from_config(&c).unwrap_err().to_string();
    assert!(e.contains("Failed to open conf file: "), "{e}");
    std::fs::write(&file, CONFIG).unwrap();
    let o = rtsdb::db::DbOptions::from_config(&c).unwrap();
    assert_eq!(o.write.rollups.unwrap().config.intervals.len(), 3);
    // /api/config lists the keys.
    let srv = server(&[]);
    let (_, t) = get(&srv, "/api/config");
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    assert_eq!(v["tsd.rollups.enable"], "true");
    assert_eq!(v["tsd.rollups.agg_tag_key"], "_aggregate");
    assert_eq!(v["tsd.rollups.auto"], "false");
}
