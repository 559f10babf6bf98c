//! The Prometheus query API under `/prometheus/api/v1/` against a real
//! TSD: series put over telnet and `/api/put` listed by `series`,
//! `labels` and label values (GET and POST form bodies, `match[]`,
//! `start`/`end`, `limit`), `status/buildinfo`, `format_query`,
//! `query_exemplars`, `metadata`, instant and range queries, and 2.42's
//! answers to bad parameters, queries, unknown paths and methods. Reads go to the reader TSD (on the cluster, not the one
//! that took the writes).

use crate::common;

use common::{Backend, HttpResponse, Tsds, http, on_both_backends, post_put, telnet};
use serde_json::{Value, json};

on_both_backends!(
    series_labels_and_values,
    metadata_calls_follow_the_time_range,
    build_info_format_and_exemplars,
    bad_parameters_get_prometheus_errors,
    instant_and_range_queries,
    query_errors_and_limits,
);

const FORM: (&str, &str) = ("Content-Type", "application/x-www-form-urlencoded");

fn get(tsds: &Tsds, path: &str) -> HttpResponse {
    http(tsds.reader().addr, "GET", path, &[], b"")
}

fn post_form(tsds: &Tsds, path: &str, body: &str) -> HttpResponse {
    http(tsds.reader().addr, "POST", path, &[FORM], body.as_bytes())
}

/// Status and JSON body; a JSON answer is `application/json` as 2.42's.
fn answer(r: HttpResponse) -> (u16, Value) {
    assert_eq!(
        r.header("Content-Type"),
        Some("application/json"),
        "{}",
        r.text()
    );
    (r.status, r.json())
}

fn ok(data: Value) -> (u16, Value) {
    (200, json!({"status":"success","data":data}))
}

fn bad(message: &str) -> (u16, Value) {
    (
        400,
        json!({"status":"error","errorType":"bad_data","error":message}),
    )
}

/// `cpu_user` on two hosts and `sys.mem.free` (a name only OpenTSDB's
/// put allows) over telnet, `disk_used` through `/api/put`, all in
/// 2013-01-01's first hour; `None` when the backend is not there.
fn seeded(backend: Backend) -> Option<Tsds> {
    let tsds = Tsds::start(backend, &[("tsd.core.auto_create_metrics", "true")])?;
    let w = tsds.writer();
    let lines = "put cpu_user 1356998400 1 host=web01 dc=lga\n\
                 put cpu_user 1356998460 2 host=web01 dc=lga\n\
                 put cpu_user 1356998400 10 host=web02 dc=sjc\n\
                 put cpu_user 1356998460 20 host=web02 dc=sjc\n\
                 put sys.mem.free 1356998400 512 host=web01\n";
    assert_eq!(telnet(w.addr, lines.as_bytes()), "");
    let put = json!([{"metric":"disk_used","timestamp":1356998700,"value":1.5,
                      "tags":{"host":"web03","mount":"/var"}}]);
    assert_eq!(post_put(w.addr, "", &put.to_string()).status, 204);
    Some(tsds)
}

fn series_labels_and_values(backend: Backend) {
    let Some(tsds) = seeded(backend) else { return };
    let range = "start=1356998000&end=1356999000";
    // Series: sorted by labels, a telnet series' tags as labels.
    let cpu = json!([
        {"__name__":"cpu_user","dc":"lga","host":"web01"},
        {"__name__":"cpu_user","dc":"sjc","host":"web02"}
    ]);
    assert_eq!(
        answer(get(
            &tsds,
            &format!("/prometheus/api/v1/series?match[]=cpu_user&{range}")
        )),
        ok(cpu.clone())
    );
    assert_eq!(
        answer(post_form(
            &tsds,
            "/prometheus/api/v1/series",
            &format!("match%5B%5D=cpu_user&{range}")
        )),
        ok(cpu)
    );
    // Selectors on any label, the name by `__name__`, several match[]
    // merged; a regexp is anchored.
    assert_eq!(
        answer(get(
            &tsds,
            "/prometheus/api/v1/series?match[]=%7Bhost%3D%22web01%22%7D&match[]=%7B__name__%3D%22disk_used%22%7D"
        )),
        ok(json!([
            {"__name__":"cpu_user","dc":"lga","host":"web01"},
            {"__name__":"disk_used","host":"web03","mount":"/var"},
            {"__name__":"sys.mem.free","host":"web01"}
        ]))
    );
    assert_eq!(
        answer(get(
            &tsds,
            "/prometheus/api/v1/series?match[]=%7B__name__%3D~%22cpu%22%7D"
        )),
        ok(json!([]))
    );
    // dc="" selects the series without dc.
    assert_eq!(
        answer(get(
            &tsds,
            "/prometheus/api/v1/series?match[]=%7Bhost%3D~%22web0.%22%2Cdc%3D%22%22%7D"
        )),
        ok(json!([
            {"__name__":"disk_used","host":"web03","mount":"/var"},
            {"__name__":"sys.mem.free","host":"web01"}
        ]))
    );
    // Label names, of all series or of those match[] selects (GET or a
    // POST form body, the query string's values merged in).
    assert_eq!(
        answer(get(&tsds, "/prometheus/api/v1/labels")),
        ok(json!(["__name__", "dc", "host", "mount"]))
    );
    assert_eq!(
        answer(post_form(
            &tsds,
            &format!("/prometheus/api/v1/labels?{range}"),
            "match%5B%5D=cpu_user"
        )),
        ok(json!(["__name__", "dc", "host"]))
    );
    // Values: metric names are `__name__`'s.
    assert_eq!(
        answer(get(&tsds, "/prometheus/api/v1/label/__name__/values")),
        ok(json!(["cpu_user", "disk_used", "sys.mem.free"]))
    );
    assert_eq!(
        answer(get(
            &tsds,
            "/prometheus/api/v1/label/host/values?match[]=cpu_user"
        )),
        ok(json!(["web01", "web02"]))
    );
    assert_eq!(
        answer(get(&tsds, "/prometheus/api/v1/label/zone/values")),
        ok(json!([]))
    );
    // limit: cut, with newer Prometheus' warning.
    assert_eq!(
        answer(get(
            &tsds,
            "/prometheus/api/v1/label/__name__/values?limit=2"
        )),
        (
            200,
            json!({"status":"success","data":["cpu_user","disk_used"],
                   "warnings":["results truncated due to limit"]})
        )
    );
    assert_eq!(
        answer(get(
            &tsds,
            "/prometheus/api/v1/series?match[]=cpu_user&limit=1"
        ))
        .1["data"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
}

fn metadata_calls_follow_the_time_range(backend: Backend) {
    let Some(tsds) = seeded(backend) else { return };
    let names = |range: &str| {
        answer(get(
            &tsds,
            &format!("/prometheus/api/v1/label/__name__/values?{range}"),
        ))
    };
    // disk_used's one sample is at 1356998700, the others' up to
    // 1356998460: in the same hour, told apart by their samples.
    assert_eq!(
        names("start=1356998500&end=1356999000"),
        ok(json!(["disk_used"]))
    );
    assert_eq!(
        names("start=1356998000&end=1356998460"),
        ok(json!(["cpu_user", "sys.mem.free"]))
    );
    assert_eq!(names("start=1356999000&end=1356999900"), ok(json!([])));
    // RFC 3339 times as well as Unix seconds.
    assert_eq!(
        names("start=2013-01-01T00:02:00Z&end=2013-01-01T01:00:00Z"),
        ok(json!(["disk_used"]))
    );
    assert_eq!(
        answer(get(
            &tsds,
            "/prometheus/api/v1/series?match[]=cpu_user&start=1356999000&end=1356999900"
        )),
        ok(json!([]))
    );
    assert_eq!(
        answer(get(
            &tsds,
            "/prometheus/api/v1/labels?start=1356998500&end=1356999000"
        )),
        ok(json!(["__name__", "host", "mount"]))
    );
}

fn build_info_format_and_exemplars(backend: Backend) {
    let Some(tsds) = seeded(backend) else { return };
    let (status, info) = answer(get(&tsds, "/prometheus/api/v1/status/buildinfo"));
    assert_eq!(status, 200);
    assert_eq!(info["data"]["version"], "2.42.0");
    for field in ["revision", "branch", "buildUser", "buildDate", "goVersion"] {
        assert!(info["data"][field].is_string(), "{field} in {info}");
    }
    assert_eq!(
        answer(get(
            &tsds,
            "/prometheus/api/v1/format_query?query=sum(rate(x%5B5m%5D))by(a)"
        )),
        ok(json!("sum by (a) (rate(x[5m]))"))
    );
    assert_eq!(
        answer(get(
            &tsds,
            "/prometheus/api/v1/query_exemplars?query=cpu_user&start=1356998000&end=1356999000"
        )),
        ok(json!([]))
    );
    // No selector, no data: 204 as 2.42.
    let r = get(&tsds, "/prometheus/api/v1/query_exemplars?query=1");
    assert_eq!((r.status, r.body.len()), (204, 0));
    // CORS preflight: 204 on every API path.
    let r = http(
        tsds.reader().addr,
        "OPTIONS",
        "/prometheus/api/v1/query",
        &[],
        b"",
    );
    assert_eq!(r.status, 204);
}

fn bad_parameters_get_prometheus_errors(backend: Backend) {
    let Some(tsds) = seeded(backend) else { return };
    let g = |path: &str| answer(get(&tsds, &format!("/prometheus/api/v1/{path}")));
    assert_eq!(
        g("query?query=up&time=abc"),
        bad(
            "invalid parameter \"time\": Invalid time value for 'time': cannot parse \"abc\" to a valid timestamp"
        )
    );
    assert_eq!(
        g("query?query=up&timeout=soon"),
        bad("invalid parameter \"timeout\": cannot parse \"soon\" to a valid duration")
    );
    assert_eq!(
        g("query_range?query=up&end=10&step=1"),
        bad("invalid parameter \"start\": cannot parse \"\" to a valid timestamp")
    );
    assert_eq!(
        g("query_range?query=up&start=10&end=0&step=1"),
        bad("invalid parameter \"end\": end timestamp must not be before start time")
    );
    assert_eq!(
        g("query_range?query=up&start=0&end=10&step=0"),
        bad(
            "invalid parameter \"step\": zero or negative query resolution step widths are not accepted. Try a positive integer"
        )
    );
    assert_eq!(
        g("query_range?query=up&start=0&end=10&step=1x"),
        bad("invalid parameter \"step\": cannot parse \"1x\" to a valid duration")
    );
    assert_eq!(
        g("query_range?query=up&start=0&end=100000&step=1"),
        bad(
            "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)"
        )
    );
    assert_eq!(g("series"), bad("no match[] parameter provided"));
    assert_eq!(
        g("series?match[]=%7Bjob%3D%22%22%7D").0,
        400,
        "a selector that matches everything"
    );
    assert_eq!(
        g("labels?match[]=%7Bjob%3D~%22.*%22%2Cdc%3D%22%22%7D"),
        bad("match[] must contain at least one non-empty matcher")
    );
    assert_eq!(g("series?match[]=rate(x%5B5m%5D)").0, 400);
    assert_eq!(g("label/a.b/values"), bad("invalid label name: \"a.b\""));
    assert_eq!(
        g("labels?limit=-1"),
        bad("invalid parameter \"limit\": limit must be non-negative")
    );
    assert_eq!(
        g("series?match[]=up&start=x"),
        bad(
            "invalid parameter \"start\": Invalid time value for 'start': cannot parse \"x\" to a valid timestamp"
        )
    );
    assert_eq!(g("format_query?query=sum(").0, 400);
    // Unknown paths and methods: Go's plain-text 404 and httprouter's 405.
    let r = get(&tsds, "/prometheus/api/v1/targets/nope");
    assert_eq!((r.status, r.text().as_str()), (404, "404 page not found\n"));
    let r = get(&tsds, "/prometheus/nope");
    assert_eq!(r.status, 404);
    let r = post_form(&tsds, "/prometheus/api/v1/label/host/values", "");
    assert_eq!(r.status, 405);
    assert_eq!(r.header("Allow"), Some("GET, OPTIONS"));
    let r = http(
        tsds.reader().addr,
        "DELETE",
        "/prometheus/api/v1/labels",
        &[],
        b"",
    );
    assert_eq!(r.status, 405);
    // OpenTSDB's own paths are untouched.
    let r = get(&tsds, "/api/v1/suggest?type=metrics&q=cpu");
    assert_eq!((r.status, r.text().as_str()), (200, r#"["cpu_user"]"#));
}

fn instant_and_range_queries(backend: Backend) {
    let Some(tsds) = seeded(backend) else { return };
    // Grafana's "Save & test": a scalar.
    assert_eq!(
        answer(get(
            &tsds,
            "/prometheus/api/v1/query?query=1%2B1&time=1356998400"
        )),
        ok(json!({"resultType":"scalar","result":[1356998400,"2"]}))
    );
    // A telnet series by its name and labels; ints as floats.
    assert_eq!(
        answer(post_form(
            &tsds,
            "/prometheus/api/v1/query",
            "query=cpu_user%7Bhost%3D%22web01%22%7D&time=1356998460.5"
        )),
        ok(json!({"resultType":"vector","result":[
            {"metric":{"__name__":"cpu_user","dc":"lga","host":"web01"},
             "value":[1356998460.500,"2"]}]}))
    );
    // A name that is no PromQL identifier, by __name__; vmalert's `step`
    // on an instant query is accepted.
    assert_eq!(
        answer(get(
            &tsds,
            "/prometheus/api/v1/query?query=%7B__name__%3D%22sys.mem.free%22%7D&time=1356998460&step=15s&nocache=1"
        )),
        ok(json!({"resultType":"vector","result":[
            {"metric":{"__name__":"sys.mem.free","host":"web01"},"value":[1356998460,"512"]}]}))
    );
    // A float from /api/put, and its value formatted as Go does.
    assert_eq!(
        answer(get(
            &tsds,
            "/prometheus/api/v1/query?query=disk_used%20%2F%201e8&time=1356998700"
        )),
        ok(json!({"resultType":"vector","result":[
            {"metric":{"host":"web03","mount":"/var"},"value":[1356998700,"1.5e-08"]}]}))
    );
    // A range query, step as a duration or seconds; the last step finds
    // the last sample within the 5-minute lookback.
    let expect = ok(json!({"resultType":"matrix","result":[
        {"metric":{"dc":"lga"},"values":[[1356998400,"1"],[1356998460,"2"],[1356998520,"2"]]},
        {"metric":{"dc":"sjc"},"values":[[1356998400,"10"],[1356998460,"20"],[1356998520,"20"]]}]}));
    assert_eq!(
        answer(post_form(
            &tsds,
            "/prometheus/api/v1/query_range",
            "query=sum+by+(dc)+(cpu_user)&start=1356998400&end=1356998520&step=1m"
        )),
        expect
    );
    assert_eq!(
        answer(get(
            &tsds,
            "/prometheus/api/v1/query_range?query=sum%20by%20(dc)%20(cpu_user)&start=2013-01-01T00:00:00Z&end=2013-01-01T00:02:00Z&step=60"
        )),
        expect
    );
    // A string.
    assert_eq!(
        answer(get(
            &tsds,
            "/prometheus/api/v1/query?query=%22a%22&time=1.5"
        )),
        ok(json!({"resultType":"string","result":[1.5,"a"]}))
    );
}

fn query_errors_and_limits(backend: Backend) {
    let Some(tsds) = seeded(backend) else { return };
    let g = |path: &str| answer(get(&tsds, &format!("/prometheus/api/v1/{path}")));
    // A query that does not parse: the parameter named, on instant
    // queries only (as 2.42).
    let (status, body) = g("query?query=sum(&time=1");
    assert_eq!(status, 400);
    assert_eq!(body["errorType"], "bad_data");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("invalid parameter \"query\": ")),
        "{body}"
    );
    assert_eq!(
        g("query_range?query=cpu_user%5B5m%5D&start=0&end=10&step=1"),
        bad(
            "invalid expression type \"range vector\" for range query, must be Scalar or instant Vector"
        )
    );
    // Many-to-many matching is an execution error: 422.
    let (status, body) = g("query?query=cpu_user%20%2B%20on()%20cpu_user&time=1356998460");
    assert_eq!(
        (status, &body["errorType"]),
        (422, &json!("execution")),
        "{body}"
    );
    // metadata: nothing sent by remote write yet.
    assert_eq!(
        answer(get(&tsds, "/prometheus/api/v1/metadata")),
        ok(json!({}))
    );
    assert_eq!(
        answer(get(&tsds, "/prometheus/api/v1/metadata?limit=x")),
        bad("limit must be a number")
    );
    // OpenTSDB's data point limit bounds what a selector may read: 422
    // with Prometheus' message, not an answer held whole.
    drop(tsds);
    let Some(tsds) = Tsds::start(
        backend,
        &[
            ("tsd.core.auto_create_metrics", "true"),
            ("tsd.query.limits.data_points.default", "3"),
        ],
    ) else {
        return;
    };
    let lines: String = (0..10)
        .map(|i| format!("put big 13569984{i}0 {i} host=a\n"))
        .collect();
    assert_eq!(telnet(tsds.writer().addr, lines.as_bytes()), "");
    assert_eq!(
        answer(get(
            &tsds,
            "/prometheus/api/v1/query?query=count_over_time(big%5B1h%5D)&time=1356998500"
        )),
        (
            422,
            json!({"status":"error","errorType":"execution",
                   "error":"query processing would load too many samples into memory in query execution"})
        )
    );
    assert_eq!(
        answer(get(
            &tsds,
            "/prometheus/api/v1/query?query=big&time=1356998400"
        ))
        .0,
        200
    );
}
