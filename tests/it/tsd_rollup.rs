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
    let layout = *db.store().layout();
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
            out.push((
                metric.clone(),
                rk.base_time,
                tags.clone(),
                c.qualifier,
                c.value,
            ));
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
        vec![(
            user.clone(),
            1356998400,
            tags(WEB01),
            vec![0, 0, 0],
            vec![0x2A]
        )]
    );
    let agg = tags(&[("host", "web01"), ("_aggregate", "SUM")]);
    assert_eq!(
        cells(&srv, "tsdb-agg"),
        vec![(
            user.clone(),
            1356998400,
            agg.clone(),
            vec![0, 0],
            vec![0x2A]
        )]
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
        vec![(
            user.clone(),
            1356998400,
            tags(WEB01),
            vec![0, 0, 0],
            vec![0x2A]
        )]
    );
    // httpAddSingleGroupByPoint
    let (s, _) = post(&srv, "", &point(r#""groupByAggregator":"sum","#));
    assert_eq!(s, 204);
    let agg = tags(&[("host", "web01"), ("_aggregate", "SUM")]);
    assert_eq!(
        cells(&srv, "tsdb-agg"),
        vec![(
            user.clone(),
            1356998400,
            agg.clone(),
            vec![0, 0],
            vec![0x2A]
        )]
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
    let (s, t) = post(
        &srv,
        "?sync&summary",
        &point(r#""interval":"1h","aggregator":"min","#),
    );
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
    assert_eq!(
        details(r#""interval":"","aggregator":"sum","#),
        "Missing interval"
    );
    assert_eq!(details(r#""interval":"1h","#), "Missing aggregator");
    assert_eq!(
        details(r#""interval":"1h","aggregator":"","#),
        "Missing aggregator"
    );
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
    assert_eq!(
        (s, t.as_str()),
        (
            400,
            r#"{"error":{"code":400,"message":"No datapoints found in content"}}"#
        )
    );
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
    let e = rtsdb::db::DbOptions::from_config(&c)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Rollups were enabled but 'tsd.rollups.config' is null or empty."),
        "{e}"
    );
    c.set(
        "tsd.rollups.config",
        r#"{"aggregationIds":{"sum":0},"intervals":[]}"#,
    );
    let e = rtsdb::db::DbOptions::from_config(&c)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Rollup config given but no intervals were found."),
        "{e}"
    );
    // A value ending in .json is a file.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rollups.json");
    c.set("tsd.rollups.config", &file.display().to_string());
    let e = rtsdb::db::DbOptions::from_config(&c)
        .unwrap_err()
        .to_string();
    assert!(e.contains("Failed to open conf file: "), "{e}");
    std::fs::write(&file, CONFIG).unwrap();
    let o = rtsdb::db::DbOptions::from_config(&c).unwrap();
    assert_eq!(o.write.rollups.unwrap().config.intervals.len(), 3);
    // The rollup tables' block cache budget is added to the engine's.
    assert_eq!(o.store.engine.rollup_cache_bytes, 64 << 20);
    c.set("tsd.rollups.cache_mb", "lots");
    let e = rtsdb::db::DbOptions::from_config(&c)
        .unwrap_err()
        .to_string();
    assert!(e.contains("tsd.rollups.cache_mb"), "{e}");
    c.set("tsd.rollups.cache_mb", "0");
    let o = rtsdb::db::DbOptions::from_config(&c).unwrap();
    assert_eq!(o.store.engine.rollup_cache_bytes, 0);
    // /api/config lists the keys.
    let srv = server(&[]);
    let (_, t) = get(&srv, "/api/config");
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    assert_eq!(v["tsd.rollups.enable"], "true");
    assert_eq!(v["tsd.rollups.agg_tag_key"], "_aggregate");
    assert_eq!(v["tsd.rollups.auto"], "false");
    assert_eq!(v["tsd.rollups.cache_mb"], "64");
}

/// `TestTsdbQueryRollup`'s intervals, with a default one added (rtsdb, as
/// OpenTSDB's TSDB constructor, refuses a configuration without one).
const QUERY_CONFIG: &str = r#"{"aggregationIds":{"sum":0,"count":1,"max":2,"min":3},
 "intervals":[
  {"table":"tsdb","preAggregationTable":"tsdb-agg","interval":"1m","rowSpan":"1h","defaultInterval":true},
  {"table":"tsdb-rollup-10m","preAggregationTable":"tsdb-rollup-agg-10m","interval":"10m","rowSpan":"6h"},
  {"table":"tsdb-rollup-1h","preAggregationTable":"tsdb-rollup-agg-1h","interval":"1h","rowSpan":"1d"},
  {"table":"tsdb-rollup-1d","preAggregationTable":"tsdb-rollup-agg-1d","interval":"1d","rowSpan":"1n"}]}"#;

const START: i64 = 1356998400;

fn query_server() -> TestServer {
    TestServer::start(&[
        ("tsd.rollups.enable", "true"),
        ("tsd.rollups.config", QUERY_CONFIG),
        ("tsd.core.auto_create_metrics", "true"),
    ])
}

/// `storeLongRollup`: `i` = 600, 1200, ... for host=web01 every 10
/// minutes from START through `end`, and the same values backwards for
/// host=web02.
fn store_long_rollup(srv: &TestServer, end: i64, agg: &str) {
    let mut pts = Vec::new();
    let mut ts = START;
    let mut i = 0;
    while ts <= end {
        i += 600;
        pts.push(format!(
            r#"{{"metric":"sys.cpu.user","timestamp":{ts},"value":{i},"interval":"10m","aggregator":"{agg}","tags":{{"host":"web01"}}}}"#
        ));
        ts += 600;
    }
    ts = START;
    while ts <= end {
        i -= 600;
        pts.push(format!(
            r#"{{"metric":"sys.cpu.user","timestamp":{ts},"value":{i},"interval":"10m","aggregator":"{agg}","tags":{{"host":"web02"}}}}"#
        ));
        ts += 600;
    }
    let (s, t) = post(srv, "", &format!("[{}]", pts.join(",")));
    assert_eq!(s, 204, "{t}");
}

/// `storeCount`: `value` at every 10 minutes for both hosts.
fn store_count(srv: &TestServer, end: i64, value: i64) {
    let mut pts = Vec::new();
    for host in ["web01", "web02"] {
        let mut ts = START;
        while ts <= end {
            pts.push(format!(
                r#"{{"metric":"sys.cpu.user","timestamp":{ts},"value":{value},"interval":"10m","aggregator":"count","tags":{{"host":"{host}"}}}}"#
            ));
            ts += 600;
        }
    }
    let (s, t) = post(srv, "", &format!("[{}]", pts.join(",")));
    assert_eq!(s, 204, "{t}");
}

/// The points of the only result of `m` over `setQuery`'s range.
fn dps(srv: &TestServer, m: &str, extra: &str) -> Vec<(i64, serde_json::Value)> {
    let (s, t) = get(
        srv,
        &format!("/api/query?start=1356998400&end=1357041600&m={m}{extra}"),
    );
    assert_eq!(s, 200, "{t}");
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    let results = v.as_array().unwrap();
    if results.is_empty() {
        return Vec::new();
    }
    assert_eq!(results.len(), 1, "{t}");
    assert_eq!(results[0]["metric"], "sys.cpu.user", "{t}");
    let mut out: Vec<(i64, serde_json::Value)> = results[0]["dps"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.parse().unwrap(), v.clone()))
        .collect();
    out.sort_by_key(|p| p.0);
    out
}

#[test]
fn queries_read_the_rollup_table_of_their_downsampler() {
    let srv = query_server();
    store_long_rollup(&srv, 1357041600, "sum");
    // run10mSumLongSingleTS: 73 doubles (never integers from rollups).
    let got = dps(&srv, "sum:10m-sum:sys.cpu.user{host=web01}", "");
    assert_eq!(got.len(), 73);
    for (k, (ts, v)) in got.iter().enumerate() {
        assert_eq!(*ts, START + 600 * k as i64);
        assert_eq!(v.as_f64().unwrap(), 600.0 * (k + 1) as f64);
        assert!(v.is_f64(), "{v}");
    }
    // run30mSumLongSingleTS: 30 minutes summed from 10-minute rollups.
    let got = dps(&srv, "sum:30m-sum:sys.cpu.user{host=web01}", "");
    assert_eq!(got[0], (START, serde_json::json!(3600.0)));
    assert_eq!(got[1], (START + 1800, serde_json::json!(9000.0)));
    assert_eq!(got.len(), 25);
    // run10mZimSumLongSingleTS: zimsum reads the sum column.
    let got = dps(&srv, "zimsum:10m-zimsum:sys.cpu.user{host=web01}", "");
    assert_eq!(got.len(), 73);
    // Group by both hosts: 600·(k+1) + (43800 − 600·(k+1)) at every step.
    let got = dps(&srv, "sum:10m-sum:sys.cpu.user", "");
    assert_eq!(got.len(), 73);
    assert!(
        got.iter().all(|p| p.1 == serde_json::json!(43800.0)),
        "{got:?}"
    );
    // run10mMaxLongSingleTSNotFound: nothing, and no fallback by default.
    assert!(dps(&srv, "sum:10m-max:sys.cpu.user{host=web01}", "").is_empty());
    // run15mSumLongSingleTS: 15m matches no rollup: raw points (none here).
    assert!(dps(&srv, "sum:15m-sum:sys.cpu.user{host=web01}", "").is_empty());
    // 1h reads the 1h table first: empty, and ROLLUP_NOFALLBACK stops there;
    // ROLLUP_FALLBACK goes on to the 10m table.
    assert!(dps(&srv, "sum:1h-sum:sys.cpu.user{host=web01}", "").is_empty());
    let got = dps(
        &srv,
        "sum:1h-sum:rollup_fallback:sys.cpu.user{host=web01}",
        "",
    );
    assert_eq!(got.len(), 13);
    assert_eq!(got[0].1, serde_json::json!(12600.0));
    // The same through a JSON query with rollupUsage.
    let (s, t) = req(
        &srv,
        "POST",
        "/api/query",
        r#"{"start":1356998400,"end":1357041600,"queries":[{"metric":"sys.cpu.user","aggregator":"sum","downsample":"1h-sum","rollupUsage":"ROLLUP_FALLBACK","tags":{"host":"web01"}}]}"#,
    );
    assert_eq!(s, 200, "{t}");
    assert!(t.contains(r#""1356998400":12600.0"#), "{t}");
}

#[test]
fn avg_is_sum_over_count_and_needs_both() {
    let srv = query_server();
    store_long_rollup(&srv, 1357041600, "sum");
    // run10mAvgLongSingleTSMissingCount
    assert!(dps(&srv, "sum:10m-avg:sys.cpu.user{host=web01}", "").is_empty());
    store_count(&srv, 1357041600, 2);
    // run10mAvgLongSingleTS: 300, 600, ...
    let got = dps(&srv, "sum:10m-avg:sys.cpu.user{host=web01}", "");
    assert_eq!(got.len(), 73);
    for (k, (_, v)) in got.iter().enumerate() {
        assert_eq!(v.as_f64().unwrap(), 300.0 * (k + 1) as f64);
    }
    // 30 minutes: (600+1200+1800) / 6.
    let got = dps(&srv, "sum:30m-avg:sys.cpu.user{host=web01}", "");
    assert_eq!(got[0].1, serde_json::json!(600.0));
    // count reads the count column and adds it up per bucket.
    let got = dps(&srv, "sum:30m-count:sys.cpu.user{host=web01}", "");
    assert_eq!(got[0].1, serde_json::json!(6.0));
}

#[test]
fn rollup_usage_raw_and_fallback_raw_read_raw_points() {
    let srv = query_server();
    store_long_rollup(&srv, 1357041600, "sum");
    let mut lines = String::new();
    for k in 0..73 {
        lines.push_str(&format!(
            "put sys.cpu.user {} 7 host=web01\n",
            START + 600 * k
        ));
    }
    assert_eq!(telnet(srv.addr, lines.as_bytes()), "");
    srv.state.db().flush_all().unwrap();
    let raw = dps(&srv, "sum:10m-sum:rollup_raw:sys.cpu.user{host=web01}", "");
    assert_eq!(raw.len(), 73);
    assert_eq!(raw[0].1, serde_json::json!(7.0));
    // No max column: ROLLUP_FALLBACK_RAW answers from raw points.
    assert!(dps(&srv, "sum:10m-max:sys.cpu.user{host=web01}", "").is_empty());
    let got = dps(
        &srv,
        "sum:10m-max:rollup_fallback_raw:sys.cpu.user{host=web01}",
        "",
    );
    assert_eq!(got.len(), 73);
    assert_eq!(got[5].1, serde_json::json!(7.0));
    // Rollups win over raw points when they hold something.
    let got = dps(&srv, "sum:10m-sum:sys.cpu.user{host=web01}", "");
    assert_eq!(got[0].1, serde_json::json!(600.0));
}

/// `TsdbQuery.transformRollupQueryToDownSampler` (2.4.1): falling back to
/// raw points downsamples them at the last rollup interval tried, with
/// the rollup aggregator, not at the interval the query asked for.
#[test]
fn fallback_to_raw_downsamples_at_the_rollup_interval_tried() {
    let srv = query_server();
    // 10m sums only: no max column anywhere, no 1h rollups.
    store_long_rollup(&srv, 1357041600, "sum");
    let mut lines = String::new();
    for k in 0..73 {
        lines.push_str(&format!(
            "put sys.cpu.user {} {} host=web01\n",
            START + 600 * k,
            k % 6
        ));
    }
    assert_eq!(telnet(srv.addr, lines.as_bytes()), "");
    srv.state.db().flush_all().unwrap();
    // As asked, over raw points: 2-hour buckets.
    let raw = dps(&srv, "sum:2h-max:rollup_raw:sys.cpu.user{host=web01}", "");
    assert_eq!(raw.len(), 7, "{raw:?}");
    // 2h matches 1h first: empty, so ROLLUP_FALLBACK_RAW reads raw points
    // downsampled at 1h-max: 13 hourly points (00:00 ... 12:00).
    let got = dps(
        &srv,
        "sum:2h-max:rollup_fallback_raw:sys.cpu.user{host=web01}",
        "",
    );
    assert_eq!(got.len(), 13, "{got:?}");
    assert_eq!((got[1].0, got[1].1.as_f64()), (START + 3600, Some(5.0)));
    assert_eq!(
        (got[12].0, got[12].1.as_f64()),
        (START + 12 * 3600, Some(0.0))
    );
    // ROLLUP_FALLBACK tries 1h, then 10m (no max cells either), then the
    // default interval, which is raw points at the last one tried: 10m.
    let got = dps(
        &srv,
        "sum:2h-max:rollup_fallback:sys.cpu.user{host=web01}",
        "",
    );
    assert_eq!(got.len(), 73, "{got:?}");
    assert_eq!((got[4].0, got[4].1.as_f64()), (START + 2400, Some(4.0)));
    // The same through a JSON query: the fill policy is kept.
    let (s, t) = req(
        &srv,
        "POST",
        "/api/query",
        r#"{"start":1356998400,"end":1357045200,"queries":[{"metric":"sys.cpu.user","aggregator":"sum","downsample":"2h-max-zero","rollupUsage":"ROLLUP_FALLBACK_RAW","tags":{"host":"web01"}}],"showQuery":true}"#,
    );
    assert_eq!(s, 200, "{t}");
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    let dps = v[0]["dps"].as_object().unwrap();
    // 00:00 through 13:00 hourly, 13:00 filled with zero.
    assert_eq!(dps.len(), 14, "{t}");
    assert_eq!(dps["1357045200"].as_f64(), Some(0.0), "{t}");
    // The query echoed is the one asked.
    assert_eq!(v[0]["query"]["downsample"], "2h-max-zero", "{t}");
}

/// A database with `tsd.rollups.auto` on and [`QUERY_CONFIG`]'s intervals.
fn auto_db(dir: &std::path::Path) -> std::sync::Arc<rtsdb::db::Db> {
    auto_db_with(dir, &[])
}

/// [`auto_db`] with `extra` settings.
fn auto_db_with(dir: &std::path::Path, extra: &[(&str, &str)]) -> std::sync::Arc<rtsdb::db::Db> {
    let mut c = rtsdb::config::Config::default();
    c.set(rtsdb::config::DATA_DIR_KEY, &dir.display().to_string());
    c.set("tsd.core.auto_create_metrics", "true");
    c.set("tsd.rollups.enable", "true");
    c.set("tsd.rollups.auto", "true");
    c.set("tsd.rollups.config", QUERY_CONFIG);
    for (k, v) in extra {
        c.set(k, v);
    }
    rtsdb::db::Db::open(&rtsdb::db::DbOptions::from_config(&c).unwrap()).unwrap()
}

fn append(db: &rtsdb::db::Db, host: &str, points: &[(i64, rtsdb::model::Value)]) {
    let mut key = String::new();
    let batch: Vec<rtsdb::db::PendingPoint> = points
        .iter()
        .map(|&(ts, value)| {
            let (series, ts) = db
                .resolve("m", ts, value, &[("host", host)], &mut key)
                .unwrap();
            rtsdb::db::PendingPoint { series, ts, value }
        })
        .collect();
    db.append(&batch).unwrap();
}

/// `(timestamp, value)` of every result of a query, in result order.
fn run(db: &rtsdb::db::Db, qs: &str) -> Vec<Vec<(String, f64)>> {
    let ctx = rtsdb::query::QueryContext::new(db, &Default::default());
    let q = rtsdb::query::parse_get(qs).unwrap();
    dps_of(&rtsdb::query::execute(&ctx, &q, None).unwrap().to_json())
}

/// `(timestamp, value)` of every result of a query's JSON answer, in
/// result order (a value that is not a number as NaN).
fn dps_of(json: &str) -> Vec<Vec<(String, f64)>> {
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r["dps"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_f64().unwrap_or(f64::NAN)))
                .collect()
        })
        .collect()
}

/// Runs `qs` as a delete query as `/api/query` does: the rows it
/// selected are deleted once it answered.
fn delete(db: &rtsdb::db::Db, qs: &str) {
    let mut ctx = rtsdb::query::QueryContext::new(db, &Default::default());
    ctx.allow_delete = true;
    let mut q = rtsdb::query::parse_get(qs).unwrap();
    q.delete = true;
    match rtsdb::query::execute(&ctx, &q, None) {
        Ok(r) => {
            for d in &r.deletions {
                db.delete_rows(&d.tsuids, d.start_ms, d.end_ms).unwrap();
            }
        }
        // A host without points: nothing to delete.
        Err(rtsdb::query::QueryError::NoSuchName(_)) => {}
        Err(e) => panic!("{qs}: {e}"),
    }
}

fn assert_close(a: &[Vec<(String, f64)>], b: &[Vec<(String, f64)>], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: {a:?} vs {b:?}");
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.len(), y.len(), "{what}: {x:?} vs {y:?}");
        for (p, q) in x.iter().zip(y) {
            assert_eq!(p.0, q.0, "{what}");
            let tol = 1e-9 * p.1.abs().max(q.1.abs()).max(1.0);
            assert!((p.1 - q.1).abs() <= tol, "{what}: {p:?} vs {q:?}");
        }
    }
}

#[test]
fn auto_rollups_are_stored_as_hours_are_sealed_and_queries_read_them() {
    use rtsdb::model::Value;
    let dir = tempfile::tempdir().unwrap();
    let db = auto_db(dir.path());
    // 00:00:10 → 3, 00:20:00 → 5.5, 01:00:00 → -2.
    append(
        &db,
        "web01",
        &[
            (START + 10, Value::Int(3)),
            (START + 1200, Value::Float(5.5)),
            (START + 3600, Value::Int(-2)),
        ],
    );
    db.flush_all().unwrap();
    let table = |name: &str| -> Vec<(Vec<u8>, Vec<u8>)> {
        db.rollup_table()
            .scan(name, &[], &[])
            .flat_map(|r| r.unwrap().1.cells)
            .map(|c| (c.qualifier, c.value))
            .collect()
    };
    let mut hour = table("tsdb-rollup-1h");
    hour.sort();
    let f = |v: f32| v.to_bits().to_be_bytes().to_vec();
    assert_eq!(
        hour,
        vec![
            (vec![0, 0x00, 0x0B], f(8.5)),     // sum of 00:00
            (vec![0, 0x00, 0x10], vec![0xFE]), // sum of 01:00 (offset 1)
            (vec![1, 0x00, 0x00], vec![2]),    // count
            (vec![1, 0x00, 0x10], vec![1]),
            (vec![2, 0x00, 0x0B], f(5.5)), // max
            (vec![2, 0x00, 0x10], vec![0xFE]),
            (vec![3, 0x00, 0x00], vec![3]), // min
            (vec![3, 0x00, 0x10], vec![0xFE]),
        ]
    );
    assert_eq!(table("tsdb-rollup-10m").len(), 12);
    assert_eq!(table("tsdb-rollup-1d").len(), 4);
    // A late point in the sealed first hour recomputes its intervals.
    append(&db, "web01", &[(START + 1800, Value::Int(10))]);
    db.flush_all().unwrap();
    let qs = |m: &str| format!("start={START}&end={}&m={m}", START + 7200);
    assert_eq!(
        run(&db, &qs("sum:1h-sum:m")),
        vec![vec![
            ("1356998400".to_string(), 18.5),
            ("1357002000".to_string(), -2.0)
        ]]
    );
    assert_eq!(
        run(&db, &qs("sum:1d-count:m")),
        vec![vec![("1356998400".to_string(), 4.0)]]
    );
    // The answer is the rollup table's: a cell written over it shows.
    db.write_rollup(
        &rtsdb::db::RollupPoint {
            metric: "m",
            timestamp: START,
            value: Value::Int(12345),
            tags: vec![("host", "web01")],
            interval: Some("1h"),
            aggregator: Some("sum"),
            group_by: None,
            is_groupby: false,
        },
        rtsdb::store::Durability::Process,
    )
    .unwrap();
    assert_eq!(run(&db, &qs("sum:1h-sum:m"))[0][0].1, 12345.0);
    assert_eq!(run(&db, &qs("sum:1h-sum:rollup_raw:m"))[0][0].1, 18.5);
    db.close().unwrap();
}

/// Rollup queries merging several series answer as the same queries over
/// raw points: with every series on one grid (folded by the read threads:
/// buckets of 5 h and 7 h reaching across rows and the read threads'
/// day-aligned slices; buckets of 1 h, 2 h, 3 h, 30 min and 1 d, whole
/// buckets within rows, folded row by row) and with a series missing
/// hours (read through the pipelines, which interpolate).
#[test]
fn grouped_rollup_queries_answer_as_raw_points() {
    grouped_rollup_queries_answer_as_raw_points_with(&[]);
}

/// The same in a salted store: each salt bucket is a range of its own,
/// so a row's series is less often the one after the last row's.
#[test]
fn grouped_rollup_queries_answer_as_raw_points_when_salted() {
    grouped_rollup_queries_answer_as_raw_points_with(&[
        ("tsd.storage.salt.width", "1"),
        ("tsd.storage.salt.buckets", "3"),
    ]);
}

fn grouped_rollup_queries_answer_as_raw_points_with(extra: &[(&str, &str)]) {
    use rtsdb::model::Value;
    let dir = tempfile::tempdir().unwrap();
    let db = auto_db_with(dir.path(), extra);
    const DAYS: i64 = 6;
    for (h, host) in ["a", "b", "c"].iter().enumerate() {
        let points: Vec<(i64, Value)> = (0..DAYS * 24 * 6)
            .map(|k| (START + k * 600, k))
            .filter(|&(ts, _)| {
                // Host c has no points for three hours of day 2 and one of day 4.
                *host != "c"
                    || !((START + 2 * 86_400 + 3600..START + 2 * 86_400 + 4 * 3600).contains(&ts)
                        || (START + 4 * 86_400..START + 4 * 86_400 + 3600).contains(&ts))
            })
            .map(|(ts, k)| {
                (
                    ts,
                    Value::Float(((k * 7 + h as i64 * 13) % 31) as f64 * 0.25 - 3.0),
                )
            })
            .collect();
        append(&db, host, &points);
    }
    db.flush_all().unwrap();
    let end = START + DAYS * 86_400 - 1;
    for m in [
        "sum:1h-avg:m{host=a|b}",
        "sum:5h-avg:m{host=a|b}",
        "avg:7h-sum:m{host=a|b}",
        "max:5h-min:m{host=a|b}",
        "min:5h-max:m{host=a|b}",
        "count:7h-count:m{host=a|b}",
        "sum:5h-sum:m{host=*}",
        "sum:2h-avg:m{host=a|b}",
        "count:3h-count:m{host=a|b}",
        "avg:30m-sum:m{host=a|b}",
        "max:1d-min:m{host=a|b}",
        "min:2h-max:m{host=*}",
        // Host c's missing hours: the group is not on one grid.
        "sum:1h-avg:m",
        "sum:2h-avg:m",
        "avg:5h-sum:m",
        "max:1h-max:m",
        "min:1h-min:m{host=a|b}",
        "count:1h-sum:m{host=a|b}",
        "avg:1h-count:m{host=a|b}",
    ] {
        let qs = format!("start={START}&end={end}&m={m}");
        let rolled = run(&db, &qs);
        let raw = run(
            &db,
            &qs.replace("-avg:m", "-avg:rollup_raw:m")
                .replace("-sum:m", "-sum:rollup_raw:m")
                .replace("-min:m", "-min:rollup_raw:m")
                .replace("-max:m", "-max:rollup_raw:m")
                .replace("-count:m", "-count:rollup_raw:m"),
        );
        assert!(!rolled.is_empty() && !rolled[0].is_empty(), "{m}");
        assert_close(&rolled, &raw, m);
    }
    db.close().unwrap();
}

/// `tsd.rollups.auto` and delete queries through `/api/query`: after a
/// delete, every rollup query answers as the same query over the raw
/// points left, for intervals inside the deleted hours (gone) and across
/// their edges (recomputed), and the rollup rows of a fully deleted
/// series are gone.
#[test]
fn a_delete_query_recomputes_the_auto_rollups_of_what_it_deleted() {
    let srv = TestServer::start(&[
        ("tsd.rollups.enable", "true"),
        ("tsd.rollups.config", QUERY_CONFIG),
        ("tsd.rollups.auto", "true"),
        ("tsd.core.auto_create_metrics", "true"),
        ("tsd.http.query.allow_delete", "true"),
    ]);
    // Six hours of points every 5 minutes on two hosts.
    let mut body = Vec::new();
    for (h, host) in ["web01", "web02"].iter().enumerate() {
        for k in 0..72i64 {
            body.push(format!(
                r#"{{"metric":"m","timestamp":{},"value":{},"tags":{{"host":"{host}"}}}}"#,
                START + k * 300,
                k * (h as i64 + 1) % 13
            ));
        }
    }
    let (s, t) = req(&srv, "POST", "/api/put", &format!("[{}]", body.join(",")));
    assert_eq!(s, 204, "{t}");
    srv.state.db().flush_all().unwrap();
    let end = START + 6 * 3600;
    // Each series' (timestamp, value) pairs: rollups answer doubles
    // where raw points may answer integers.
    let answer = |m: &str| -> Vec<Vec<(String, f64)>> {
        let (s, t) = get(&srv, &format!("/api/query?start={START}&end={end}&m={m}"));
        assert_eq!(s, 200, "{t}");
        dps_of(&t)
    };
    let agree = |what: &str| {
        for iv in ["10m", "1h", "2h", "1d"] {
            for agg in ["sum", "avg", "min", "max", "count"] {
                let m = format!("none:{iv}-{agg}:");
                let rolled = answer(&format!("{m}m"));
                let raw = answer(&format!("{m}rollup_raw:m"));
                assert_close(&rolled, &raw, &format!("{what}: {m}"));
            }
        }
    };
    agree("before the delete");
    let web01_hours = |srv: &TestServer| -> Vec<String> {
        let (s, t) = get(
            srv,
            &format!("/api/query?start={START}&end={end}&m=sum:1h-count:m%7Bhost=web01%7D"),
        );
        assert_eq!(s, 200, "{t}");
        let v: serde_json::Value = serde_json::from_str(&t).unwrap();
        v[0]["dps"].as_object().unwrap().keys().cloned().collect()
    };
    assert_eq!(web01_hours(&srv).len(), 6);
    // Hours 01:00 and 02:00 of web01 (every row the range touches), and
    // all of web02.
    let (s, t) = get(
        &srv,
        &format!(
            "/api/query?start={}&end={}&m=sum:m%7Bhost=web01%7D&method_override=delete",
            START + 3600 + 600,
            START + 2 * 3600 + 60
        ),
    );
    assert_eq!(s, 200, "{t}");
    let (s, t) = req(
        &srv,
        "DELETE",
        &format!("/api/query?start={START}&end={end}&m=sum:m%7Bhost=web02%7D"),
        "",
    );
    assert_eq!(s, 200, "{t}");
    agree("after the deletes");
    let hours = web01_hours(&srv);
    assert_eq!(hours.len(), 4, "{hours:?}");
    assert!(!hours.contains(&(START + 3600).to_string()), "{hours:?}");
    // The day's row of web01 holds the hours left; web02 has no rollup
    // row left.
    let tables = |host: &str| -> usize {
        let db = srv.state.db();
        let layout = *db.store().layout();
        ["tsdb-rollup-10m", "tsdb-rollup-1h", "tsdb-rollup-1d"]
            .iter()
            .flat_map(|table| db.rollup_table().scan(table, &[], &[]).map(|r| r.unwrap()))
            .filter(|(key, _)| {
                let k = layout.parse_row_key(key).unwrap();
                let tagv = db
                    .uids()
                    .get_name(rtsdb::model::UidKind::TagValue, k.tsuid.tags[0].1)
                    .unwrap();
                &*tagv == host
            })
            .count()
    };
    assert_eq!(tables("web02"), 0);
    assert!(tables("web01") > 0);
}

mod props {
    use super::*;
    use proptest::prelude::*;
    use rtsdb::model::Value;

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            (-1000i64..1000).prop_map(Value::Int),
            (-4000i64..4000).prop_map(|v| Value::Float(v as f64 / 8.0)),
        ]
    }

    /// Points over six hours from START, every 10 s at most.
    fn points() -> impl Strategy<Value = Vec<(i64, Value)>> {
        proptest::collection::btree_map(0i64..2160, value(), 1..60)
            .prop_map(|m| m.into_iter().map(|(k, v)| (START + k * 10, v)).collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        /// Auto rollups answer every downsampled query as raw points do,
        /// also after late points (new and overwritten) for sealed hours.
        #[test]
        fn auto_rollups_match_raw_aggregation_with_late_points(
            first in proptest::collection::vec(points(), 1..4),
            late in proptest::collection::vec(points(), 1..4),
            deletes in proptest::collection::vec((0usize..4, 0i64..6, 0i64..6), 0..3),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let db = auto_db(dir.path());
            for (i, pts) in first.iter().enumerate() {
                append(&db, &format!("h{i}"), pts);
            }
            db.flush_all().unwrap();
            for (i, pts) in late.iter().enumerate() {
                append(&db, &format!("h{i}"), pts);
            }
            db.flush_all().unwrap();
            // Delete queries of whole hours of one host: what they
            // leave is what the rollups hold.
            for &(host, a, b) in &deletes {
                let (a, b) = (a.min(b), a.max(b));
                let q = format!(
                    "start={}&end={}&m=sum:m{{host=h{host}}}",
                    START + a * 3600,
                    START + b * 3600 + 1,
                );
                delete(&db, &q);
            }
            let end = START + 6 * 3600;
            for iv in ["10m", "1h", "2h", "1d"] {
                for agg in ["sum", "avg", "min", "max", "count"] {
                    for group in ["sum", "none"] {
                        let m = format!("start={START}&end={end}&m={group}:{iv}-{agg}");
                        let rolled = run(&db, &format!("{m}:m"));
                        let raw = run(&db, &format!("{m}:rollup_raw:m"));
                        assert_close(&rolled, &raw, &m);
                        prop_assert!(!raw.is_empty() || !deletes.is_empty());
                    }
                }
            }
            db.close().unwrap();
        }
    }
}

/// Figures, not a check: a 30-day `1h-avg` query over 1,000 series from
/// raw points and from auto rollups (same numbers, within float
/// rounding), and the bytes the rollups add on disk per raw point.
/// `RTSDB_BENCH_STEP` sets the seconds between raw points (default 60).
/// `cargo test --release --test it -- --ignored rollup_bench --nocapture`
///
/// Query-only mode, to time queries again without loading again:
/// `RTSDB_BENCH_DIR=D` keeps the loaded store (auto rollups on) in
/// `D/step-<STEP>/store` as closed (the rewritten rollup rows not merged
/// yet) and `D/step-<STEP>/settled` compacted, both made by the first run;
/// later runs copy each into a temporary directory, open the copy and time
/// the queries (`RTSDB_BENCH_STATE=reopened` or `settled`: that one
/// only). `RTSDB_BENCH_ROUNDS` (default 5) sets the timed runs of each
/// query, raw and rollup alternating, whose medians are printed;
/// `RTSDB_BENCH_ONLY=rollup` (or `raw`) runs that side alone, and
/// `RTSDB_BENCH_QUERY=flat` (or `host`) that query alone, for a profiler;
/// `RTSDB_BENCH_ROLLUP_CACHE_MB` sets `tsd.rollups.cache_mb`.
#[test]
#[ignore]
fn rollup_bench_30_days_of_1000_series_at_1h_avg() {
    use rtsdb::model::Value;
    use std::time::Instant;
    const SERIES: usize = 1000;
    const DAYS: i64 = 30;
    let env = |k: &str| std::env::var(k).ok().filter(|s| !s.is_empty());
    let step: i64 = env("RTSDB_BENCH_STEP")
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let rounds: usize = env("RTSDB_BENCH_ROUNDS")
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
        .max(1);
    let only = env("RTSDB_BENCH_ONLY");
    let kept =
        env("RTSDB_BENCH_DIR").map(|d| std::path::PathBuf::from(d).join(format!("step-{step}")));
    let config = r#"{"aggregationIds":{"sum":0,"count":1,"max":2,"min":3},
     "intervals":[
      {"table":"tsdb","preAggregationTable":"tsdb-agg","interval":"1m","rowSpan":"1h","defaultInterval":true},
      {"table":"tsdb-rollup-1h","preAggregationTable":"tsdb-rollup-agg-1h","interval":"1h","rowSpan":"1d"}]}"#;
    let open = |dir: &std::path::Path, auto: bool| {
        let mut c = rtsdb::config::Config::default();
        c.set(rtsdb::config::DATA_DIR_KEY, &dir.display().to_string());
        c.set("tsd.core.auto_create_metrics", "true");
        c.set("tsd.rollups.enable", "true");
        c.set("tsd.rollups.auto", if auto { "true" } else { "false" });
        c.set("tsd.rollups.config", config);
        if let Some(mb) = env("RTSDB_BENCH_ROLLUP_CACHE_MB") {
            c.set("tsd.rollups.cache_mb", &mb);
        }
        rtsdb::db::Db::open(&rtsdb::db::DbOptions::from_config(&c).unwrap()).unwrap()
    };
    let dir_bytes = |dir: &std::path::Path| -> u64 {
        fn walk(p: &std::path::Path) -> u64 {
            std::fs::read_dir(p)
                .map(|rd| {
                    rd.flatten()
                        .map(|e| {
                            let m = e.metadata().unwrap();
                            if m.is_dir() { walk(&e.path()) } else { m.len() }
                        })
                        .sum()
                })
                .unwrap_or(0)
        }
        walk(dir)
    };
    let ingest = |db: &rtsdb::db::Db| -> (u64, f64) {
        let t0 = Instant::now();
        let mut key = String::new();
        let hosts: Vec<String> = (0..SERIES).map(|h| format!("host{h:04}")).collect();
        let mut n = 0u64;
        for hour in 0..DAYS * 24 {
            let mut batch = Vec::with_capacity(SERIES * (3600 / step) as usize);
            for (h, host) in hosts.iter().enumerate() {
                let mut ts = START + hour * 3600;
                while ts < START + (hour + 1) * 3600 {
                    let v = Value::Float(((ts / step + h as i64) % 97) as f64 * 0.5);
                    let (series, t) = db
                        .resolve("bench.cpu", ts, v, &[("host", host)], &mut key)
                        .unwrap();
                    batch.push(rtsdb::db::PendingPoint {
                        series,
                        ts: t,
                        value: v,
                    });
                    ts += step;
                }
            }
            n += batch.len() as u64;
            let a = db.append(&batch).unwrap();
            db.throttle_blocking(a);
        }
        db.flush_all().unwrap();
        (n, t0.elapsed().as_secs_f64())
    };
    // The dashboard query: every series merged into one line; and the
    // same per host (1,000 lines out).
    let qs = format!(
        "start={START}&end={}&m=sum:1h-avg:bench.cpu",
        START + DAYS * 86_400 - 1
    );
    let per_host = qs.replace("bench.cpu", "bench.cpu%7Bhost=*%7D");
    let raw_of = |q: &str| q.replace("1h-avg:", "1h-avg:rollup_raw:");
    let time = |db: &rtsdb::db::Db, q: &str| {
        let t0 = Instant::now();
        std::hint::black_box(run(db, q));
        t0.elapsed().as_secs_f64() * 1000.0
    };
    let median = |mut t: Vec<f64>| {
        t.sort_by(f64::total_cmp);
        t.get(t.len() / 2).copied().unwrap_or(f64::NAN)
    };
    // Raw and rollup runs of one query alternate, so a change of the
    // machine's load falls on both alike.
    let pair = |db: &rtsdb::db::Db, q: &str| -> (f64, f64) {
        let (mut raw, mut rolled) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            if only.as_deref() != Some("rollup") {
                raw.push(time(db, &raw_of(q)));
            }
            if only.as_deref() != Some("raw") {
                rolled.push(time(db, q));
            }
        }
        (median(raw), median(rolled))
    };
    let which = env("RTSDB_BENCH_QUERY");
    let timings = |db: &rtsdb::db::Db| {
        let nothing = (f64::NAN, f64::NAN);
        let (raw, rollup) = match which.as_deref() {
            Some("host") => nothing,
            _ => pair(db, &qs),
        };
        let (host_raw, host_rollup) = match which.as_deref() {
            Some("flat") => nothing,
            _ => pair(db, &per_host),
        };
        (raw, rollup, host_raw, host_rollup)
    };
    let check = |db: &rtsdb::db::Db| {
        let rolled = run(db, &per_host);
        let raw = run(db, &raw_of(&per_host));
        assert_eq!(rolled.len(), SERIES);
        assert_eq!(rolled[0].len(), (DAYS * 24) as usize);
        assert_close(&rolled, &raw, "30 days 1h-avg per host");
        assert_close(&run(db, &qs), &run(db, &raw_of(&qs)), "30 days 1h-avg");
    };
    let report = |what: &str, (raw, rollup, host_raw, host_rollup): (f64, f64, f64, f64)| {
        println!(
            "{what}:\n  \
             30-day sum:1h-avg over {SERIES} series: raw {raw:.1} ms, rollup {rollup:.1} ms: {:.1}x faster\n  \
             the same grouped by host ({SERIES} series out): raw {host_raw:.1} ms, rollup {host_rollup:.1} ms: {:.1}x",
            raw / rollup,
            host_raw / host_rollup,
        );
    };
    if let Some(kept) = kept {
        let (as_closed, settled) = (kept.join("store"), kept.join("settled"));
        if !kept.join("loaded").exists() {
            std::fs::create_dir_all(&as_closed).unwrap();
            let db = open(&as_closed, true);
            let (points, s) = ingest(&db);
            db.close().unwrap();
            drop(db);
            std::fs::create_dir_all(&settled).unwrap();
            copy_dir(&as_closed, &settled);
            let db = open(&settled, true);
            db.store().compact().unwrap();
            db.close().unwrap();
            drop(db);
            std::fs::write(kept.join("loaded"), format!("{points}\n")).unwrap();
            println!(
                "loaded {points} raw points into {} in {s:.1} s",
                kept.display()
            );
        }
        println!(
            "rollup bench (query-only, {}): {SERIES} series x {DAYS} days, a point every {step}s, \
             medians of {rounds} runs",
            kept.display()
        );
        let state = env("RTSDB_BENCH_STATE");
        for (name, what) in [
            ("reopened", "reopened (rows as the close left them)"),
            ("settled", "settled (compacted)"),
        ] {
            if state.as_deref().is_some_and(|s| s != name) {
                continue;
            }
            let copy = tempfile::tempdir().unwrap();
            copy_dir(
                &kept.join(if name == "settled" {
                    "settled"
                } else {
                    "store"
                }),
                copy.path(),
            );
            let db = open(copy.path(), true);
            if only.is_none() {
                check(&db);
            }
            report(what, timings(&db));
            db.close().unwrap();
        }
        return;
    }
    // Auto off: raw points only, for the bytes rollups add.
    let off_dir = tempfile::tempdir().unwrap();
    let off = open(off_dir.path(), false);
    let (points, off_s) = ingest(&off);
    // Bytes compared settled on both sides (the rollups' side is
    // compacted below before it closes).
    off.store().compact().unwrap();
    off.close().unwrap();
    drop(off);
    let off_bytes = dir_bytes(off_dir.path());
    drop(off_dir);
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), true);
    let (_, on_s) = ingest(&db);
    let rollup_cells: u64 = db
        .rollup_table()
        .scan("tsdb-rollup-1h", &[], &[])
        .map(|r| r.unwrap().1.cells.len() as u64)
        .sum();
    let logical: u64 = db
        .rollup_table()
        .scan_all()
        .map(|r| {
            let (k, v) = r.unwrap();
            (k.len() + v.len()) as u64
        })
        .sum();
    check(&db);
    // As ingested: recent rows still in the engine's memtables, a rollup
    // row there once per hour it was rewritten in (24 versions of a day's
    // row, each read past).
    let fresh = timings(&db);
    // Settled, as benches/query.rs measures: every table merged, as the
    // engine's own compactions leave rows once they are older than what
    // it is writing now (a 30-day dashboard reads mostly such rows).
    let t0 = Instant::now();
    db.store().compact().unwrap();
    let compact_s = t0.elapsed().as_secs_f64();
    let settled = timings(&db);
    db.close().unwrap();
    drop(db);
    let on_bytes = dir_bytes(dir.path());
    println!(
        "rollup bench: {SERIES} series x {DAYS} days, a point every {step}s: {points} raw points\n\
         ingest + flush: {off_s:.1} s with auto rollups off, {on_s:.1} s on"
    );
    report("as ingested", fresh);
    report(
        &format!("settled (after a {compact_s:.1} s compaction)"),
        settled,
    );
    println!(
        "rollup cells {rollup_cells} ({logical} bytes as keys + values, {:.3} per raw point)\n\
         data dir after close: {off_bytes} bytes auto off, {on_bytes} bytes auto on: {:.3} extra bytes per raw point",
        logical as f64 / points as f64,
        (on_bytes as f64 - off_bytes as f64) / points as f64,
    );
}

/// Copies the directory tree `from` into the existing directory `to`.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

#[test]
fn retention_applies_to_rollup_rows() {
    let srv = TestServer::start(&[
        ("tsd.rollups.enable", "true"),
        ("tsd.rollups.config", QUERY_CONFIG),
        ("tsd.core.auto_create_metrics", "true"),
        ("tsd.storage.ttl", "2d"),
    ]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let hour = |ts: i64| ts - ts % 3600;
    let old = hour(now - 3 * 86_400);
    let recent = hour(now - 2 * 3600);
    for (ts, v) in [(old, 1), (recent, 2)] {
        let (s, t) = post(
            &srv,
            "",
            &format!(
                r#"{{"metric":"m","timestamp":{ts},"value":{v},"interval":"1h","aggregator":"sum","tags":{{"host":"a"}}}}"#
            ),
        );
        assert_eq!(s, 204, "{t}");
    }
    let (s, t) = get(&srv, "/api/query?start=5d-ago&m=sum:1h-sum:m");
    assert_eq!(s, 200, "{t}");
    assert_eq!(
        t,
        format!(
            r#"[{{"metric":"m","tags":{{"host":"a"}},"aggregateTags":[],"dps":{{"{recent}":2.0}}}}]"#
        )
    );
}

#[test]
fn scan_dumps_rollup_tables_and_import_reads_them_back() {
    use crate::common::tsdb;
    let dir = tempfile::tempdir().unwrap();
    let (store, copy) = (dir.path().join("store"), dir.path().join("copy"));
    let json = dir.path().join("rollups.json");
    std::fs::write(&json, CONFIG).unwrap();
    let conf = dir.path().join("opentsdb.conf");
    std::fs::write(
        &conf,
        format!(
            "tsd.rollups.enable = true\ntsd.rollups.config = {}\ntsd.core.auto_create_metrics = true\n",
            json.display()
        ),
    )
    .unwrap();
    let lines = dir.path().join("rollups.txt");
    std::fs::write(
        &lines,
        "rollup 1h-sum sys.cpu.user 1356998400 42 host=web01\n\
         rollup 1h-max sys.cpu.user 1357880400 1.5 host=web01\n\
         rollup 1h-sum:sum sys.cpu.user 1356998400 7 host=web02\n\
         rollup sum sys.cpu.user 1356998460 8 host=web02\n",
    )
    .unwrap();
    let c = conf.to_str().unwrap();
    let r = tsdb(&store, &["--config", c, "import", lines.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let scan = |dir: &std::path::Path, table: &str, import: bool| {
        let mut args = vec!["--config", c, "scan", "--rollup-table", table];
        if import {
            args.push("--import");
        }
        args.extend(["1356998400", "1357995600", "sum", "sys.cpu.user"]);
        let r = tsdb(dir, &args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.stdout
    };
    assert_eq!(
        scan(&store, "tsdb-rollup-1h", true),
        "rollup 1h-sum sys.cpu.user 1356998400 42 host=web01\n\
         rollup 1h-max sys.cpu.user 1357880400 1.5 host=web01\n"
    );
    let dump = scan(&store, "tsdb-rollup-1h", false);
    assert!(
        dump.contains("  [2, 15, 91]\t[63, -64, 0, 0]\tmax\t1.5\t1357880400\t("),
        "{dump}"
    );
    let agg = scan(&store, "tsdb-rollup-agg-1h", true);
    assert_eq!(
        agg,
        "rollup 1h-sum:SUM sys.cpu.user 1356998400 7 host=web02 _aggregate=SUM\n"
    );
    assert_eq!(
        scan(&store, "tsdb-agg", true),
        "rollup SUM sys.cpu.user 1356998460 8 host=web02 _aggregate=SUM\n"
    );
    // The dumps import into another store as they were.
    let all: String = ["tsdb-rollup-1h", "tsdb-rollup-agg-1h", "tsdb-agg"]
        .iter()
        .map(|t| scan(&store, t, true))
        .collect();
    let again = dir.path().join("again.txt");
    std::fs::write(&again, &all).unwrap();
    let r = tsdb(&copy, &["--config", c, "import", again.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    for t in ["tsdb-rollup-1h", "tsdb-rollup-agg-1h", "tsdb-agg"] {
        assert_eq!(scan(&copy, t, true), scan(&store, t, true), "{t}");
    }
    // fsck reads every rollup row; a cell whose aggregator id the
    // configuration no longer maps is reported.
    let r = tsdb(&store, &["--config", c, "fsck", "--full-scan"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("\nRollup Rows Processed: 3\n"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("\nTotal Errors: 0\n"), "{}", r.stdout);
    std::fs::write(&json, CONFIG.replace(r#""max":2,"#, "")).unwrap();
    let r = tsdb(&store, &["--config", c, "fsck", "--full-scan"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains("in tsdb-rollup-1h: cell [2, 15, 91]: aggregator id 2 is not configured"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("\nUnreadable Rollup Rows or Cells: 1\n"),
        "{}",
        r.stdout
    );
    std::fs::write(&json, CONFIG).unwrap();
    // A bad line names itself.
    std::fs::write(&lines, "rollup 13m-sum sys.cpu.user 1356998400 1 host=a\n").unwrap();
    let r = tsdb(&store, &["--config", c, "import", lines.to_str().unwrap()]);
    assert_ne!(r.code, 0);
    assert!(
        r.stderr
            .contains("No such rollup: No rollups configured for the interval: 13m"),
        "{}",
        r.stderr
    );
    let r = tsdb(
        &store,
        &[
            "--config",
            c,
            "scan",
            "--rollup-table",
            "nope",
            "1356998400",
            "sum",
            "sys.cpu.user",
        ],
    );
    assert_eq!(r.code, 1);
    assert!(
        r.stderr
            .contains("No such rollup table in tsd.rollups.config: nope"),
        "{}",
        r.stderr
    );
}

/// The rollup and histogram figures of `/api/stats` and `/metrics`
/// (2.4.1 counts these points, `rollup_dps` and `raw_histograms`, but does
/// not report them: rtsdb does, in `tsd.rpc.received`'s shape).
#[test]
fn rollup_and_histogram_points_are_counted_in_stats_and_metrics() {
    let srv = server(&[
        (
            "tsd.core.histograms.config",
            r#"{"net.opentsdb.core.SimpleHistogramDecoder": 42}"#,
        ),
        ("tsd.core.auto_create_metrics", "true"),
    ]);
    let stat = |name: &str, tag: Option<(&str, &str)>| -> u64 {
        let (_, body) = get(&srv, "/api/stats");
        let stats: serde_json::Value = serde_json::from_str(&body).unwrap();
        stats
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["metric"] == name && tag.is_none_or(|(k, v)| s["tags"][k] == v))
            .unwrap_or_else(|| panic!("no {name} {tag:?} in {body}"))["value"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    let received = |t| stat("tsd.rpc.received", Some(("type", t)));
    assert_eq!(received("rollup"), 0);
    assert_eq!(received("histogram"), 0);
    // Two points over HTTP, one refused; one telnet line.
    let (s, t) = post(
        &srv,
        "?details",
        r#"[{"metric":"sys.cpu.user","timestamp":1356998400,"value":1,"interval":"1h","aggregator":"sum","tags":{"host":"web01"}},
            {"metric":"sys.cpu.user","timestamp":1356998400,"value":1,"interval":"3h","aggregator":"sum","tags":{"host":"web01"}}]"#,
    );
    assert_eq!(s, 400, "{t}");
    assert_eq!(
        telnet(
            srv.addr,
            b"rollup 1h-sum sys.cpu.user 1356998400 5 host=web02\n"
        ),
        ""
    );
    assert_eq!(received("rollup"), 3);
    assert_eq!(stat("tsd.rollup.stored", Some(("type", "written"))), 2);
    assert_eq!(stat("tsd.rollup.stored", Some(("type", "computed"))), 0);
    assert_eq!(stat("tsd.rollup.errors", Some(("type", "computed"))), 0);
    let r = crate::common::json_http(
        srv.addr,
        "POST",
        "/api/histogram",
        r#"[{"metric":"sys.cpu.user","timestamp":1356998400,"overflow":1,"buckets":{"0,1":42,"1,5":24},"tags":{"host":"web01"}}]"#,
    );
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(received("histogram"), 1);
    assert_eq!(stat("tsd.histogram.stored", None), 1);
    let (s, metrics) = get(&srv, "/metrics");
    assert_eq!(s, 200);
    for line in [
        "tsd_rpc_received{type=\"rollup\",host=",
        "tsd_rpc_received{type=\"histogram\",host=",
        "tsd_rollup_stored{type=\"written\",host=",
        "tsd_histogram_stored{host=",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
}
