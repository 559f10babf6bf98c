//! Seeing what runs and what grows, against a real TSD: long queries of
//! `/api/query`, `/api/query/exp`, `/q` and PromQL's `query` and
//! `query_range` listed in `/api/stats/query` with their points read,
//! cancelled by `DELETE /api/stats/query?id=`, their clients answered
//! with the cancellation error; `/api/stats/cardinality` exact on a small
//! known data set; and `/prometheus/api/v1/status/tsdb` against a real
//! Prometheus 2.42 given the same series by remote write. Reads and the
//! stats calls go to the reader TSD (on the cluster, not the one that
//! took the writes: the query runs, and is listed, where it is asked).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common;
use crate::prom_common as pc;

use common::{Backend, HttpResponse, Tsds, http, on_both_backends, telnet};
use rtsdb::db::PendingPoint;
use rtsdb::model::Value;
use serde_json::{Value as Json, json};

on_both_backends!(
    cancelled_queries_answer_their_clients,
    cardinality_of_a_known_data_set,
    status_tsdb_matches_prometheus,
);

/// 2015-01-01T00:00:00Z, an hour boundary.
const T0: i64 = 1_420_070_400;
/// Series of `slow`, each a point a second over [`SPAN_S`].
const SERIES: usize = 50;
const SPAN_S: i64 = 4 * 3600;

/// `slow{host=hNN}`: 720,000 points written through the database's
/// write path (quicker than any protocol), made visible to the reader.
fn slow_data(tsds: &Tsds) {
    let db = tsds.writer().state.db();
    let mut key = String::new();
    for h in 0..SERIES {
        let host = format!("h{h:02}");
        let mut batch = Vec::with_capacity(SPAN_S as usize);
        for t in 0..SPAN_S {
            let value = Value::Int((t * 7 + h as i64) % 1000);
            let (series, ts) = db
                .resolve("slow", T0 + t, value, &[("host", &host)], &mut key)
                .unwrap();
            batch.push(PendingPoint { series, ts, value });
        }
        db.append(&batch).unwrap();
    }
    tsds.settle();
}

/// A request that runs long on [`slow_data`] and how its cancellation
/// must be answered.
struct SlowRequest {
    what: &'static str,
    method: &'static str,
    path: String,
    headers: Vec<(&'static str, &'static str)>,
    body: String,
    /// The status and a part of the body the cancelled request answers.
    status: u16,
    says: &'static str,
}

fn get_json(addr: SocketAddr, path: &str) -> Json {
    let r = http(addr, "GET", path, &[], b"");
    assert_eq!(r.status, 200, "GET {path}: {}", r.text());
    r.json()
}

/// Sends `req` on a thread, waits to see it running in
/// `/api/stats/query` with points read, cancels it, and checks what its
/// client got and what the list says afterwards.
fn cancel_while_running(addr: SocketAddr, req: SlowRequest) {
    let SlowRequest {
        what,
        method,
        path,
        headers,
        body,
        status,
        says,
    } = req;
    let client = std::thread::spawn(move || {
        let started = Instant::now();
        let r = http(addr, method, &path, &headers, body.as_bytes());
        (r, started.elapsed())
    });
    let seen_by = Instant::now() + Duration::from_secs(120);
    let running = loop {
        let list = get_json(addr, "/api/stats/query");
        let found = list["running"]
            .as_array()
            .and_then(|r| r.first())
            .filter(|r| r["pointsRead"].as_u64().unwrap_or(0) > 0)
            .cloned();
        if let Some(r) = found {
            break r;
        }
        assert!(
            !client.is_finished(),
            "{what}: the query ended before it was seen running: {:?}",
            client.join().map(|(r, _)| r.text())
        );
        assert!(Instant::now() < seen_by, "{what}: never seen running");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(running["tenant"], "default", "{what}: {running}");
    assert_eq!(running["user"], "", "{what}: {running}");
    assert_eq!(running["cancelled"], false, "{what}: {running}");
    assert!(running["queryStart"].as_u64().unwrap() > 0, "{running}");
    let id = running["id"].as_u64().expect("an id");

    let asked = Instant::now();
    let r = http(
        addr,
        "DELETE",
        &format!("/api/stats/query?id={id}"),
        &[],
        b"",
    );
    assert_eq!(
        (r.status, r.json()),
        (200, json!({"id": id, "cancelled": true})),
        "{what}"
    );
    let (answer, _) = client.join().expect("the client thread");
    let stopped_in = asked.elapsed();
    // Promptly: the read loops look at the flag every few thousand
    // points and PromQL at every step (a debug build on a busy machine).
    assert!(
        stopped_in < Duration::from_secs(20),
        "{what}: took {stopped_in:?} to stop"
    );
    assert_eq!(answer.status, status, "{what}: {}", answer.text());
    assert!(
        answer.text().contains(says),
        "{what}: {} does not say {says:?}",
        answer.text()
    );

    let list = get_json(addr, "/api/stats/query");
    assert!(
        !list["running"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == id),
        "{what}: still listed running: {list}"
    );
    let done = list["completed"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("{what}: not among the completed"))
        .clone();
    let outcome = json!([done["cancelled"], done["httpResponse"], done["exception"]]);
    assert_eq!(done["cancelled"], true, "{what}: {outcome}");
    assert_eq!(done["httpResponse"]["code"], status, "{what}: {outcome}");
    assert!(done["pointsRead"].as_u64().unwrap() > 0, "{what}");
    // A finished query cannot be cancelled again.
    let again = http(
        addr,
        "DELETE",
        &format!("/api/stats/query?id={id}"),
        &[],
        b"",
    );
    assert_eq!(again.status, 400, "{what}: {}", again.text());
}

/// Sub-queries that each read every point of `slow` (distinct by their
/// downsampling, so none is answered from another's work).
fn many_subqueries(n: usize) -> Vec<String> {
    (1..=n).map(|k| format!("sum:{k}m-avg:slow")).collect()
}

fn cancelled_queries_answer_their_clients(backend: Backend) {
    let Some(tsds) = Tsds::start(
        backend,
        &[
            ("tsd.core.auto_create_metrics", "true"),
            // Every sub-query read, none answered from the result cache.
            ("tsd.query.cache.max_bytes", "0"),
        ],
    ) else {
        return;
    };
    slow_data(&tsds);
    let addr = tsds.reader().addr;
    let (start, end) = (T0, T0 + SPAN_S - 1);
    let json_type = ("Content-Type", "application/json");
    let form_type = ("Content-Type", "application/x-www-form-urlencoded");

    let queries: Vec<Json> = many_subqueries(300)
        .iter()
        .map(|m| {
            let (agg, rest) = m.split_once(':').unwrap();
            let (ds, metric) = rest.split_once(':').unwrap();
            json!({"aggregator": agg, "downsample": ds, "metric": metric})
        })
        .collect();
    let metrics: Vec<Json> = (0..100)
        .map(|i| json!({"id": format!("a{i}"), "metric": "slow", "fillPolicy": {"policy": "nan"}}))
        .collect();
    let sum: Vec<String> = (0..100).map(|i| format!("a{i}")).collect();
    let cases = [
        SlowRequest {
            what: "/api/query",
            method: "POST",
            path: "/api/query".into(),
            headers: vec![json_type],
            body: json!({"start": start, "end": end, "queries": queries}).to_string(),
            status: 503,
            says: "The query was cancelled",
        },
        SlowRequest {
            what: "/api/query/exp",
            method: "POST",
            path: "/api/query/exp".into(),
            headers: vec![json_type],
            body: json!({
                "time": {"start": start, "end": end, "aggregator": "sum"},
                "metrics": metrics,
                "expressions": [{"id": "e", "expr": sum.join(" + ")}],
                "outputs": [{"id": "e"}],
            })
            .to_string(),
            status: 503,
            says: "The query was cancelled",
        },
        SlowRequest {
            what: "/q",
            method: "GET",
            path: format!(
                "/q?start={start}&end={end}&ascii&{}",
                many_subqueries(100)
                    .iter()
                    .map(|m| format!("m={m}"))
                    .collect::<Vec<_>>()
                    .join("&")
            ),
            headers: Vec::new(),
            body: String::new(),
            // `/q` answers a failed query with its legacy 500 page.
            status: 500,
            says: "The query was cancelled",
        },
        SlowRequest {
            what: "PromQL query",
            method: "POST",
            path: "/prometheus/api/v1/query".into(),
            headers: vec![form_type],
            body: format!(
                "query=max_over_time(quantile_over_time(0.5,slow[1h])[3h:1s])&time={}",
                T0 + SPAN_S
            ),
            status: 503,
            says: r#""errorType":"canceled""#,
        },
        SlowRequest {
            what: "PromQL query_range",
            method: "POST",
            path: "/prometheus/api/v1/query_range".into(),
            headers: vec![form_type],
            body: format!(
                "query=quantile_over_time(0.5,slow[1h])&start={}&end={}&step=1",
                T0 + 3600,
                T0 + SPAN_S - 1
            ),
            status: 503,
            says: r#""errorType":"canceled""#,
        },
    ];
    for case in cases {
        cancel_while_running(addr, case);
    }
    // What cannot be cancelled is refused clearly.
    let r = http(addr, "DELETE", "/api/stats/query", &[], b"");
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("id"), "{}", r.text());
    let r = http(addr, "DELETE", "/api/stats/query?id=x", &[], b"");
    assert_eq!(r.status, 400, "{}", r.text());
    let r = http(addr, "DELETE", "/api/stats/query?id=999999", &[], b"");
    assert_eq!(r.status, 404, "{}", r.text());
    // The TSD goes on answering.
    let r = http(
        addr,
        "GET",
        &format!("/api/query?start={start}&end={end}&m=sum:4h-count:slow"),
        &[],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()[0]["dps"][T0.to_string()].as_f64(),
        Some((SERIES as i64 * SPAN_S) as f64)
    );
}

/// `cpu` 4 series, `mem` 2, `disk` 1, over telnet.
fn known_data(tsds: &Tsds) {
    let lines = "put cpu 1420070400 1 host=a dc=x\n\
                 put cpu 1420070400 1 host=b dc=x\n\
                 put cpu 1420070400 1 host=c dc=x\n\
                 put cpu 1420070400 1 host=d dc=y\n\
                 put mem 1420070400 1 host=a\n\
                 put mem 1420070400 1 host=b\n\
                 put disk 1420070400 1 host=a dev=sda\n";
    assert_eq!(telnet(tsds.writer().addr, lines.as_bytes()), "");
    tsds.settle();
}

fn cardinality_of_a_known_data_set(backend: Backend) {
    let Some(tsds) = Tsds::start(backend, &[("tsd.core.auto_create_metrics", "true")]) else {
        return;
    };
    known_data(&tsds);
    let addr = tsds.reader().addr;
    let mut all = get_json(addr, "/api/stats/cardinality?topN=10");
    let o = all.as_object_mut().unwrap();
    assert!(o.remove("computedAt").unwrap().as_u64().unwrap() > 0);
    // Series new to this TSD: all of them, in this hour.
    let arrived = o.remove("newSeriesByMetric").unwrap();
    assert_eq!(
        all,
        json!({
            "tenant": "default",
            "topN": 10,
            "totalSeries": 7,
            "metrics": 3,
            "tagPairs": 7,
            "seriesByMetric": [
                {"metric": "cpu", "series": 4},
                {"metric": "mem", "series": 2},
                {"metric": "disk", "series": 1},
            ],
            "seriesByTagKey": [
                {"tagk": "host", "series": 7, "values": 4},
                {"tagk": "dc", "series": 4, "values": 2},
                {"tagk": "dev", "series": 1, "values": 1},
            ],
            "seriesByTagPair": [
                {"tagk": "dc", "tagv": "x", "series": 3},
                {"tagk": "host", "tagv": "a", "series": 3},
                {"tagk": "host", "tagv": "b", "series": 2},
                {"tagk": "dc", "tagv": "y", "series": 1},
                {"tagk": "dev", "tagv": "sda", "series": 1},
                {"tagk": "host", "tagv": "c", "series": 1},
                {"tagk": "host", "tagv": "d", "series": 1},
            ],
        })
    );
    let arrived = arrived.as_array().unwrap();
    let totals: Vec<(&str, u64)> = arrived
        .iter()
        .map(|a| (a["metric"].as_str().unwrap(), a["total"].as_u64().unwrap()))
        .collect();
    assert_eq!(totals, [("cpu", 4), ("mem", 2), ("disk", 1)]);
    for a in arrived {
        let hours = a["hours"].as_array().unwrap();
        assert_eq!(hours.len(), 1, "{a}");
        assert_eq!(hours[0]["series"], a["total"]);
        let hour = hours[0]["hour"].as_u64().unwrap();
        assert_eq!(hour % 3600, 0);
        let now = chrono::Utc::now().timestamp() as u64;
        assert!(hour <= now && now < hour + 2 * 3600, "{a}");
    }

    // Cut to the top 2.
    let top = get_json(addr, "/api/stats/cardinality?topN=2");
    assert_eq!(
        top["seriesByMetric"],
        json!([{"metric": "cpu", "series": 4}, {"metric": "mem", "series": 2}])
    );
    assert_eq!(top["seriesByTagPair"].as_array().unwrap().len(), 2);
    assert_eq!(top["newSeriesByMetric"].as_array().unwrap().len(), 2);
    assert_eq!(top["totalSeries"], 7);
    // A bad topN is the client's error, in OpenTSDB's shape.
    for bad in ["0", "x", "10001"] {
        let r = http(
            addr,
            "GET",
            &format!("/api/stats/cardinality?topN={bad}"),
            &[],
            b"",
        );
        assert_eq!(r.status, 400, "{}", r.text());
        assert_eq!(r.json()["error"]["code"], 400);
    }
}

/// `up_a` on three instances of two jobs and `up_b` on one: every list
/// of `status/tsdb` shorter than its limit of 10, so the lists compare
/// whole (ties in any order).
fn prometheus_series() -> Vec<pc::PushSeries> {
    let now = chrono::Utc::now().timestamp_millis();
    [
        ("up_a", "x", "1"),
        ("up_a", "x", "2"),
        ("up_a", "y", "3"),
        ("up_b", "x", "1"),
    ]
    .iter()
    .map(|&(name, job, inst)| pc::PushSeries {
        labels: vec![
            ("__name__".into(), name.into()),
            ("job".into(), job.into()),
            ("inst".into(), inst.into()),
        ],
        samples: vec![(now, 1.0)],
    })
    .collect()
}

/// A `status/tsdb` list as (name, value) pairs, largest first, ties by
/// name.
fn sorted_list(v: &Json) -> Vec<(String, u64)> {
    let mut l: Vec<(String, u64)> = v
        .as_array()
        .unwrap_or_else(|| panic!("a list: {v}"))
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["value"].as_u64().unwrap(),
            )
        })
        .collect();
    l.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    l
}

fn keys(v: &Json) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

fn status_tsdb_matches_prometheus(backend: Backend) {
    let test = "status_tsdb_matches_prometheus";
    let Some(bin) = pc::binary(pc::PROMETHEUS, test) else {
        return;
    };
    let Some(tsds) = Tsds::start(backend, pc::TSD_SETTINGS) else {
        return;
    };
    let prom = pc::Prometheus::start(&bin, |_| "global:\n  scrape_interval: 1h\n".into());
    let agent = pc::agent(Duration::from_secs(30));
    let body = pc::encode_write(&prometheus_series());
    let (s, t) = pc::push(&agent, &format!("{}/api/v1/write", prom.url()), &body);
    assert_eq!(s, 204, "Prometheus: {t}\n{}", prom.log_tail());
    let (s, t) = pc::push(
        &agent,
        &format!("http://{}/api/v1/write", tsds.writer().addr),
        &body,
    );
    assert_eq!(s, 204, "rtsdb: {t}");
    tsds.settle();

    let (s, theirs) = pc::get_json(&agent, &format!("{}/api/v1/status/tsdb", prom.url()), &[]);
    assert_eq!(s, 200, "Prometheus: {theirs}");
    let ours = get_json(tsds.reader().addr, "/prometheus/api/v1/status/tsdb");
    assert_eq!(ours["status"], "success", "{ours}");
    let (theirs, ours) = (&theirs["data"], &ours["data"]);
    assert_eq!(
        keys(ours),
        keys(theirs),
        "rtsdb {ours}\nPrometheus {theirs}"
    );
    assert_eq!(keys(&ours["headStats"]), keys(&theirs["headStats"]));
    for k in ["numSeries", "numLabelPairs"] {
        assert_eq!(ours["headStats"][k], theirs["headStats"][k], "{k}");
    }
    for list in [
        "seriesCountByMetricName",
        "labelValueCountByLabelName",
        "memoryInBytesByLabelName",
        "seriesCountByLabelValuePair",
    ] {
        assert_eq!(
            sorted_list(&ours[list]),
            sorted_list(&theirs[list]),
            "{list}: rtsdb {ours}\nPrometheus {theirs}"
        );
    }
    // `limit` cuts every list.
    let cut = get_json(tsds.reader().addr, "/prometheus/api/v1/status/tsdb?limit=1");
    assert_eq!(
        cut["data"]["seriesCountByLabelValuePair"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        cut["data"]["seriesCountByMetricName"],
        json!([{"name": "up_a", "value": 3}])
    );
    let r: HttpResponse = http(
        tsds.reader().addr,
        "GET",
        "/prometheus/api/v1/status/tsdb?limit=0",
        &[],
        b"",
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["errorType"], "bad_data");
}
