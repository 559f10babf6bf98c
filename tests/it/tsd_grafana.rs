//! Grafana's OpenTSDB datasource against a real TSD: the requests it makes
//! at startup, for template variables and for panels, with exact bodies;
//! and the stats endpoints (/api/stats/query, /metrics).

use crate::common;

use common::{Backend, Tsds, http, on_both_backends, post_put};
use serde_json::json;

on_both_backends!(
    grafana_startup_variables_and_panels,
    stats_query_and_prometheus_metrics,
);

fn post(srv: &Tsds, path: &str, body: &str) -> (u16, String) {
    srv.req("POST", path, body)
}

fn get(srv: &Tsds, path: &str) -> (u16, String) {
    srv.req("GET", path, "")
}

/// Points written through the writer; `None` when the backend is not
/// there.
fn seeded(backend: Backend) -> Option<Tsds> {
    let tsds = Tsds::start(backend, &[("tsd.core.auto_create_metrics", "true")])?;
    let srv = tsds.writer();
    let mut pts = Vec::new();
    for (i, host) in ["web01", "web02"].iter().enumerate() {
        for t in 0..3i64 {
            pts.push(
                json!({"metric":"sys.cpu.user","timestamp":1356998400 + t * 60,
                "value": (i as i64 + 1) * 10 + t,"tags":{"host":host,"dc":"lga"}}),
            );
        }
    }
    pts.push(
        json!({"metric":"sys.mem.free","timestamp":1356998400,"value":1,"tags":{"host":"web01"}}),
    );
    assert_eq!(post_put(srv.addr, "", &json!(pts).to_string()).status, 204);
    Some(tsds)
}

fn grafana_startup_variables_and_panels(backend: Backend) {
    let Some(srv) = seeded(backend) else {
        return;
    };
    // Metric name completion: empty q, big max.
    assert_eq!(
        get(&srv, "/api/suggest?type=metrics&q=&max=1000"),
        (200, r#"["sys.cpu.user","sys.mem.free"]"#.into())
    );
    assert_eq!(
        get(&srv, "/api/suggest?type=tagk&q=ho"),
        (200, r#"["host"]"#.into())
    );
    assert_eq!(
        get(&srv, "/api/suggest?type=tagv&q=&max=1000"),
        (200, r#"["lga","web01","web02"]"#.into())
    );
    // tag_values(sys.cpu.user, host): a lookup; Grafana reads results[].tags.
    let (s, t) = get(&srv, "/api/search/lookup?m=sys.cpu.user{host=*}&limit=3000");
    assert_eq!(s, 200);
    let mut v: serde_json::Value = serde_json::from_str(&t).unwrap();
    v.as_object_mut().unwrap().remove("time");
    assert_eq!(
        v,
        json!({"type":"LOOKUP","metric":"sys.cpu.user","tags":[{"key":"host","value":"*"}],
               "limit":3000,"startIndex":0,"totalResults":2,"results":[
                 {"tsuid":"000001000001000001000002000002","metric":"sys.cpu.user","tags":{"dc":"lga","host":"web01"}},
                 {"tsuid":"000001000001000003000002000002","metric":"sys.cpu.user","tags":{"dc":"lga","host":"web02"}}]})
    );
    // tag_names(sys.cpu.user): Grafana 7+ asks lookup with just the metric.
    let (_, t) = get(&srv, "/api/search/lookup?m=sys.cpu.user&limit=1000");
    assert!(t.contains(r#""totalResults":2"#), "{t}");
    // Aggregators and filters for the query editor.
    assert_eq!(
        get(&srv, "/api/aggregators"),
        (
            200,
            r#"["sum","min","max","avg","none","median","mult","dev","diff","count","zimsum","mimmin","mimmax","first","last","pfsum","squareSum","p999","p99","p95","p90","p75","p50","ep999r3","ep99r3","ep95r3","ep90r3","ep75r3","ep50r3","ep999r7","ep99r7","ep95r7","ep90r7","ep75r7","ep50r7"]"#
                .into()
        )
    );
    let (s, t) = get(&srv, "/api/config/filters");
    assert_eq!(s, 200);
    let f: serde_json::Value = serde_json::from_str(&t).unwrap();
    assert_eq!(f.as_object().unwrap().len(), 7);
    assert!(
        f["wildcard"]["examples"]
            .as_str()
            .unwrap()
            .starts_with("host=wildcard(web*)")
    );
    // A panel: filters with groupBy, downsample, ms timestamps, showQuery,
    // globalAnnotations as Grafana sends them.
    let panel = r#"{"start":1356998400000,"end":1356998580000,"queries":[{"metric":"sys.cpu.user","aggregator":"sum","downsample":"1m-avg","filters":[{"type":"wildcard","tagk":"host","filter":"*","groupBy":true}]}],"msResolution":true,"globalAnnotations":true,"showQuery":true}"#;
    let (s, t) = post(&srv, "/api/query", panel);
    assert_eq!(s, 200, "{t}");
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 2);
    assert_eq!(arr[0]["metric"], "sys.cpu.user");
    assert_eq!(arr[0]["tags"], json!({"dc":"lga","host":"web01"}));
    assert_eq!(arr[0]["aggregateTags"], json!([]));
    assert_eq!(
        arr[0]["dps"],
        json!({"1356998400000":10.0,"1356998460000":11.0,"1356998520000":12.0})
    );
    assert_eq!(arr[1]["tags"]["host"], "web02");
    assert_eq!(arr[0]["query"]["metric"], "sys.cpu.user");
    assert_eq!(arr[0]["query"]["aggregator"], "sum");
    assert_eq!(arr[0]["query"]["downsample"], "1m-avg");
    assert_eq!(
        arr[0]["query"]["filters"],
        json!([{"tagk":"host","filter":"*","group_by":true,"type":"wildcard"}])
    );
    // Exact body of a simpler panel: no group by, seconds, arrays.
    let (s, t) = get(
        &srv,
        "/api/query?start=1356998400&end=1356998580&m=sum:sys.cpu.user%7Bdc=lga%7D&arrays",
    );
    assert_eq!(s, 200);
    assert_eq!(
        t,
        r#"[{"metric":"sys.cpu.user","tags":{"dc":"lga"},"aggregateTags":["host"],"dps":[[1356998400,30],[1356998460,32],[1356998520,34]]}]"#
    );
    // The same through POST with arrays-free output.
    let (_, t) = post(
        &srv,
        "/api/query",
        r#"{"start":1356998400,"end":1356998580,"queries":[{"metric":"sys.cpu.user","aggregator":"max","tags":{}}]}"#,
    );
    assert_eq!(
        t,
        r#"[{"metric":"sys.cpu.user","tags":{"dc":"lga"},"aggregateTags":["host"],"dps":{"1356998400":20,"1356998460":21,"1356998520":22}}]"#
    );
}

fn stats_query_and_prometheus_metrics(backend: Backend) {
    let Some(srv) = seeded(backend) else {
        return;
    };
    assert_eq!(
        get(&srv, "/api/stats/query"),
        (200, r#"{"completed":[],"running":[]}"#.into())
    );
    let (s, _) = get(&srv, "/api/query?start=1356998400&m=sum:sys.cpu.user");
    assert_eq!(s, 200);
    let (s, _) = get(&srv, "/api/query?start=1356998400&m=sum:no.such.metric");
    assert_eq!(s, 400);
    let (s, t) = get(&srv, "/api/stats/query");
    assert_eq!(s, 200);
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    assert_eq!(v["running"], json!([]));
    let done = v["completed"].as_array().unwrap();
    assert_eq!(done.len(), 2);
    assert_eq!(
        done[0]["httpResponse"],
        json!({"code":200,"reasonPhrase":"OK"})
    );
    assert_eq!(done[0]["exception"], "null");
    assert_eq!(done[0]["query"]["start"], "1356998400");
    assert_eq!(done[0]["query"]["queries"][0]["metric"], "sys.cpu.user");
    assert!(done[0]["stats"]["totalTime"].as_f64().unwrap() >= 0.0);
    assert!(done[0]["queryStartTimestamp"].as_u64().unwrap() > 1_600_000_000_000);
    assert_eq!(done[1]["httpResponse"]["code"], 400);
    assert_eq!(
        done[1]["exception"],
        "No such name for 'metrics': 'no.such.metric'"
    );
    // Only the last 256 are kept.
    for _ in 0..260 {
        get(&srv, "/api/query?start=1h-ago&m=sum:no.such.metric");
    }
    let (_, t) = get(&srv, "/api/stats/query");
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    assert_eq!(v["completed"].as_array().unwrap().len(), 256);

    // /metrics carries /api/stats' figures: those of the TSD asked (the
    // writer, which took the points).
    let w = srv.writer();
    let r = http(w.addr, "GET", "/metrics", &[], b"");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let text = r.text();
    // The host tag every figure carries, as /api/stats reports it.
    let (_, stats) = common::get(w, "/api/stats");
    let stats: serde_json::Value = serde_json::from_str(&stats).unwrap();
    let host = stats[0]["tags"]["host"].as_str().unwrap().to_string();
    assert!(text.contains("# TYPE tsd_rpc_received untyped\n"), "{text}");
    assert!(
        text.contains(&format!(
            "tsd_uid_cache_hit{{kind=\"metrics\",host=\"{host}\"}} "
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("tsd_datapoints_added{{host=\"{host}\"}} 7\n")),
        "{text}"
    );
    // Every sample line is `name{labels} value`, one TYPE per name.
    let mut seen = std::collections::HashSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            assert!(
                seen.insert(rest.split(' ').next().unwrap().to_string()),
                "{line}"
            );
            continue;
        }
        let (name, value) = line.rsplit_once(' ').unwrap();
        assert!(value.parse::<f64>().is_ok(), "{line}");
        let metric = name.split('{').next().unwrap();
        assert!(
            metric
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{line}"
        );
        assert!(seen.contains(metric), "{line}");
    }
    let stats: serde_json::Value = serde_json::from_str(&common::get(w, "/api/stats").1).unwrap();
    let samples = text.lines().filter(|l| !l.starts_with('#')).count();
    assert_eq!(samples, stats.as_array().unwrap().len());
}
