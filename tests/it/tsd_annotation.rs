//! `/api/annotation`, `/api/annotation/bulk` and annotations in query
//! results, against a running TSD: exact status codes and bodies.

use crate::common;

use common::*;

on_both_backends!(
    single_annotation_create_read_merge_replace_delete,
    global_annotations_and_times,
    single_annotation_bad_input,
    bulk_update_and_delete,
    query_results_carry_annotations,
    annotations_lists_global_annotations_in_a_range,
);

const TSUID: &str = "000001000001000001";
const T: u64 = 1356998400;

fn single_annotation_create_read_merge_replace_delete(backend: Backend) {
    let Some(tsds) = Tsds::start(backend, &[]) else {
        return;
    };
    let path = format!("/api/annotation?tsuid={TSUID}&start_time=1369141261");
    assert_eq!(
        tsds.req("GET", &path, ""),
        (404, err(404, "Unable to locate annotation in storage"))
    );
    let body = format!(
        r#"{{"startTime":"1369141261","tsuid":"{TSUID}","description":"Testing Annotations","notes":"details","custom":{{"owner":"jdoe"}},"unknown":1}}"#
    );
    let full = format!(
        r#"{{"tsuid":"{TSUID}","description":"Testing Annotations","notes":"details","custom":{{"owner":"jdoe"}},"endTime":0,"startTime":1369141261}}"#
    );
    assert_eq!(
        tsds.req("POST", "/api/annotation", &body),
        (200, full.clone())
    );
    assert_eq!(tsds.req("GET", &path, ""), (200, full.clone()));
    // GET on the plural lists global annotations, whatever the TSUID
    // (AnnotationRpc.fetchMultipleAnnotations): there are none.
    assert_eq!(
        tsds.req(
            "GET",
            &format!("/api/annotations?tsuid={TSUID}&start_time=1369141261"),
            ""
        ),
        (200, "[]".to_string())
    );
    // Nothing to change: 304, empty.
    let same =
        format!(r#"{{"startTime":1369141261,"tsuid":"{TSUID}","endTime":0,"description":""}}"#);
    assert_eq!(
        tsds.req("POST", "/api/annotation", &same),
        (304, String::new())
    );
    assert_eq!(tsds.req("POST", &path, ""), (304, String::new()));
    // POST merges the fields given (here by query string) ...
    assert_eq!(
        tsds.req(
            "POST",
            &format!("{path}&notes=new+notes&end_time=1369141300"),
            ""
        ),
        (
            200,
            format!(
                r#"{{"tsuid":"{TSUID}","description":"Testing Annotations","notes":"new notes","custom":{{"owner":"jdoe"}},"endTime":1369141300,"startTime":1369141261}}"#
            )
        )
    );
    // ... PUT replaces: fields left out go back to their defaults.
    let put = format!(r#"{{"startTime":1369141261,"tsuid":"{TSUID}","description":"only"}}"#);
    let replaced = format!(
        r#"{{"tsuid":"{TSUID}","description":"only","notes":"","endTime":0,"startTime":1369141261}}"#
    );
    assert_eq!(
        tsds.req("PUT", "/api/annotation", &put),
        (200, replaced.clone())
    );
    assert_eq!(tsds.req("GET", &path, ""), (200, replaced));
    assert_eq!(tsds.req("DELETE", &path, ""), (204, String::new()));
    assert_eq!(
        tsds.req("GET", &path, ""),
        (404, err(404, "Unable to locate annotation in storage"))
    );
    // Deleting what is not there is not an error either.
    assert_eq!(tsds.req("DELETE", &path, ""), (204, String::new()));
}

fn global_annotations_and_times(backend: Backend) {
    let Some(tsds) = Tsds::start(backend, &[]) else {
        return;
    };
    assert_eq!(
        tsds.req(
            "POST",
            "/api/annotation?start_time=1369141261&description=Global",
            ""
        ),
        (
            200,
            r#"{"description":"Global","notes":"","endTime":0,"startTime":1369141261}"#.into()
        )
    );
    assert_eq!(
        tsds.req("GET", "/api/annotation?start_time=2013/05/21-13:01:01", ""),
        (
            200,
            r#"{"description":"Global","notes":"","endTime":0,"startTime":1369141261}"#.into()
        )
    );
    // Milliseconds in a body are kept as such (5-byte qualifier).
    let (st, body) = tsds.req(
        "POST",
        "/api/annotation",
        r#"{"startTime":1369141261500,"description":"ms"}"#,
    );
    assert_eq!(
        (st, body.as_str()),
        (
            200,
            r#"{"description":"ms","notes":"","endTime":0,"startTime":1369141261500}"#
        )
    );
    // Relative times are seconds before now.
    let (st, body) = tsds.req(
        "POST",
        "/api/annotation?start_time=1h-ago&description=rel",
        "",
    );
    assert_eq!(st, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let now = chrono::Utc::now().timestamp();
    let start = v["startTime"].as_i64().unwrap();
    assert!((now - 3600 - start).abs() < 5, "{start}");
}

fn single_annotation_bad_input(backend: Backend) {
    let Some(tsds) = Tsds::start(backend, &[]) else {
        return;
    };
    let missing = (400, err(400, "Missing start time"));
    assert_eq!(tsds.req("GET", "/api/annotation", ""), missing);
    assert_eq!(
        tsds.req("POST", "/api/annotation?description=x", ""),
        missing
    );
    assert_eq!(
        tsds.req("DELETE", "/api/annotation?start_time=", ""),
        missing
    );
    assert_eq!(tsds.req("GET", "/api/annotation?start_time=0", ""), missing);
    assert_eq!(
        tsds.req("GET", "/api/annotation?start_time=abc", ""),
        (400, err(400, "Invalid time: abc"))
    );
    assert_eq!(
        tsds.req("POST", "/api/annotation", r#"{"description":"no start"}"#),
        (400, err(400, "The start timestamp has not been set"))
    );
    assert_eq!(
        tsds.req("DELETE", "/api/annotation", r#"{"description":"no start"}"#),
        (
            400,
            r#"{"error":{"code":400,"message":"Unable to delete Annotation information","details":"The start timestamp has not been set"}}"#.into()
        )
    );
    let (st, body) = tsds.req("POST", "/api/annotation", "{");
    assert_eq!(st, 400);
    assert!(
        body.starts_with(
            r#"{"error":{"code":400,"message":"Unable to parse the given JSON","details":"#
        ),
        "{body}"
    );
    for bad in [
        r#"[1,2]"#,
        r#"{"startTime":"soon"}"#,
        r#"{"startTime":1,"custom":[1]}"#,
        r#"{"startTime":{}}"#,
    ] {
        let (st, _) = tsds.req("POST", "/api/annotation", bad);
        assert_eq!(st, 400, "{bad}");
    }
    let (st, body) = tsds.req(
        "POST",
        "/api/annotation?start_time=1369141261&tsuid=zz&notes=x",
        "",
    );
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("Invalid TSUID 'zz'"), "{body}");
    let (st, _) = tsds.req(
        "GET",
        "/api/annotation?start_time=1369141261&tsuid=0001",
        "",
    );
    assert_eq!(st, 400);
    assert_eq!(
        tsds.req("PATCH", "/api/annotation?start_time=1", ""),
        (
            405,
            r#"{"error":{"code":405,"message":"Method not allowed","details":"The HTTP method [PATCH] is not permitted for this endpoint"}}"#.into()
        )
    );
    // method_override on GET routes like the verb.
    assert_eq!(
        tsds.req(
            "GET",
            "/api/annotation?start_time=1369141261&description=o&method_override=post",
            ""
        )
        .0,
        200
    );
    // Absurd start times are refused, not a panic.
    assert_eq!(
        tsds.req(
            "POST",
            "/api/annotation",
            r#"{"startTime":99999999999999999,"description":"x"}"#
        )
        .0,
        400
    );
}

fn bulk_update_and_delete(backend: Backend) {
    let Some(tsds) = Tsds::start(backend, &[]) else {
        return;
    };
    let body = format!(
        r#"[{{"startTime":1369141261,"tsuid":"{TSUID}","description":"a"}},
            {{"startTime":1369141262,"tsuid":"{TSUID}"}},
            {{"startTime":1369141263,"description":"g"}}]"#
    );
    assert_eq!(
        tsds.req("POST", "/api/annotation/bulk", &body),
        (
            200,
            format!(
                r#"[{{"tsuid":"{TSUID}","description":"a","notes":"","endTime":0,"startTime":1369141261}},{{"description":"g","notes":"","endTime":0,"startTime":1369141263}}]"#
            )
        )
    );
    assert_eq!(
        tsds.req(
            "PUT",
            "/api/annotation/bulk",
            &format!(r#"[{{"startTime":1369141261,"tsuid":"{TSUID}","notes":"n"}}]"#)
        ),
        (
            200,
            format!(
                r#"[{{"tsuid":"{TSUID}","description":"","notes":"n","endTime":0,"startTime":1369141261}}]"#
            )
        )
    );
    // A bad annotation stops the request; the ones before it are written.
    let (st, body) = tsds.req(
        "POST",
        "/api/annotation/bulk",
        r#"[{"startTime":1369141270,"description":"kept"},{"description":"no start"}]"#,
    );
    assert_eq!(
        (st, body.as_str()),
        (
            400,
            r#"{"error":{"code":400,"message":"The start timestamp has not been set","details":"Annotation error: TSUID:  Start: 0  Description: no start"}}"#
        )
    );
    assert_eq!(
        tsds.req("GET", "/api/annotation?start_time=1369141270", "")
            .0,
        200
    );
    assert_eq!(tsds.req("POST", "/api/annotation/bulk", "").0, 400);
    assert_eq!(
        tsds.req("POST", "/api/annotation/bulk", ""),
        (
            400,
            r#"{"error":{"code":400,"message":"Missing message content","details":"Supply valid JSON formatted data in the body of your request"}}"#.into()
        )
    );
    assert_eq!(
        tsds.req("POST", "/api/annotation/bulk", r#"{"startTime":1}"#)
            .0,
        400
    );
    assert_eq!(tsds.req("GET", "/api/annotation/bulk", "").0, 405);

    // Deletes: by query string ...
    assert_eq!(
        tsds.req("DELETE", "/api/annotation/bulk?end_time=1369141269", ""),
        (400, err(400, "Missing parameter <code>start_time</code>"))
    );
    assert_eq!(
        tsds.req("DELETE", "/api/annotation/bulk?start_time=1369141200", ""),
        (
            400,
            err(400, "Missing the TSUIDs or global annotations flag")
        )
    );
    // An empty list in a body is no TSUIDs; an empty `tsuids=` in the
    // query string is one empty TSUID to OpenTSDB.
    assert_eq!(
        tsds.req(
            "DELETE",
            "/api/annotation/bulk",
            r#"{"startTime":"1369141200","tsuids":[]}"#
        ),
        (
            400,
            err(400, "Missing the TSUIDs or global annotations flag")
        )
    );
    assert_eq!(
        tsds.req(
            "DELETE",
            "/api/annotation/bulk?start_time=1369141200&tsuids=",
            ""
        ),
        (400, err(400, "UID was empty"))
    );
    assert_eq!(
        tsds.req(
            "DELETE",
            "/api/annotation/bulk?start_time=1369141300&end_time=1369141200&global",
            ""
        ),
        (
            400,
            err(
                400,
                "The end timestamp cannot be less than the start timestamp"
            )
        )
    );
    assert_eq!(
        tsds.req(
            "DELETE",
            &format!(
                "/api/annotation/bulk?start_time=1369141200&end_time=1369141265&tsuids={TSUID}&global"
            ),
            ""
        ),
        (
            200,
            format!(
                r#"{{"tsuids":["{TSUID}"],"global":true,"startTime":1369141200000,"endTime":1369141265000,"totalDeleted":2}}"#
            )
        )
    );
    // ... or by body, relative times allowed.
    assert_eq!(
        tsds.req("DELETE", "/api/annotation/bulk", r#"{"global":true,"startTime":1369141200,"endTime":"1369141300"}"#),
        (
            200,
            r#"{"tsuids":null,"global":true,"startTime":1369141200000,"endTime":1369141300000,"totalDeleted":1}"#.into()
        )
    );
    assert_eq!(
        tsds.req("DELETE", "/api/annotation/bulk", r#"{"global":true}"#),
        (400, err(400, "Missing the start time value"))
    );
    assert_eq!(
        tsds.req("GET", "/api/annotation?start_time=1369141263", "")
            .0,
        404
    );
}

fn put_points(s: &TestServer) {
    let body = format!(
        r#"[{{"metric":"sys.cpu","timestamp":{T},"value":1,"tags":{{"host":"a"}}}},
            {{"metric":"sys.cpu","timestamp":{},"value":2,"tags":{{"host":"a"}}}},
            {{"metric":"sys.cpu","timestamp":{},"value":3,"tags":{{"host":"a"}}}}]"#,
        T + 10,
        T + 20
    );
    assert_eq!(post_put(s.addr, "", &body).status, 204);
}

fn query_results_carry_annotations(backend: Backend) {
    let Some(tsds) = Tsds::start(backend, &[("tsd.core.auto_create_metrics", "true")]) else {
        return;
    };
    let s = tsds.writer();
    put_points(s);
    for (t, d) in [
        (T + 60, "deploy"),
        (T + 5, "early"),
        (T + 7200, "outside"),
        (T + 3700, "own row"),
    ] {
        let b = format!(r#"{{"tsuid":"{TSUID}","startTime":{t},"description":"{d}"}}"#);
        assert_eq!(tsds.req("POST", "/api/annotation", &b).0, 200);
    }
    let b = format!(r#"{{"startTime":{},"description":"global"}}"#, T + 30);
    assert_eq!(tsds.req("POST", "/api/annotation", &b).0, 200);
    let note = |t: u64, d: &str| {
        format!(
            r#"{{"tsuid":"{TSUID}","description":"{d}","notes":"","endTime":0,"startTime":{t}}}"#
        )
    };
    let dps = format!(r#""dps":{{"{T}":1,"{}":2,"{}":3}}"#, T + 10, T + 20);
    let q = format!("/api/query?start={T}&end={}&m=sum:sys.cpu", T + 3599);
    // Both before and after the buffered points reach the store.
    for flushed in [false, true] {
        if flushed {
            s.state.db().flush_all().unwrap();
        }
        assert_eq!(
            tsds.req("GET", &q, ""),
            (
                200,
                format!(
                    r#"[{{"metric":"sys.cpu","tags":{{"host":"a"}},"aggregateTags":[],"annotations":[{},{}],{dps}}}]"#,
                    note(T + 5, "early"),
                    note(T + 60, "deploy")
                )
            ),
            "flushed: {flushed}"
        );
    }
    assert_eq!(
        tsds.req("GET", &format!("{q}&global_annotations"), ""),
        (
            200,
            format!(
                r#"[{{"metric":"sys.cpu","tags":{{"host":"a"}},"aggregateTags":[],"annotations":[{},{}],"globalAnnotations":[{{"description":"global","notes":"","endTime":0,"startTime":{}}}],{dps}}}]"#,
                note(T + 5, "early"),
                note(T + 60, "deploy"),
                T + 30
            )
        )
    );
    assert_eq!(
        tsds.req("GET", &format!("{q}&no_annotations&global_annotations"), ""),
        (
            200,
            format!(r#"[{{"metric":"sys.cpu","tags":{{"host":"a"}},"aggregateTags":[],{dps}}}]"#)
        )
    );
    let post = format!(
        r#"{{"start":{T},"end":{},"noAnnotations":true,"queries":[{{"aggregator":"sum","metric":"sys.cpu"}}]}}"#,
        T + 3599
    );
    assert!(
        !tsds
            .req("POST", "/api/query", &post)
            .1
            .contains("annotations")
    );
    // A row holding only an annotation reads as no points.
    let (st, body) = tsds.req(
        "GET",
        &format!(
            "/api/query?start={}&end={}&m=sum:sys.cpu",
            T + 3600,
            T + 7199
        ),
        "",
    );
    assert_eq!((st, body.as_str()), (200, "[]"));
    let (st, body) = tsds.req(
        "GET",
        &format!("/api/query?start={T}&end={}&m=sum:sys.cpu&arrays", T + 7199),
        "",
    );
    assert_eq!(st, 200);
    assert!(
        body.contains("own row") && !body.contains("outside"),
        "{body}"
    );
    assert!(
        body.contains(&format!(r#""dps":[[{T},1],[{},2],[{},3]]"#, T + 10, T + 20)),
        "{body}"
    );
}

/// GET `/api/annotations` lists the global annotations of a time range
/// (`AnnotationRpc.fetchMultipleAnnotations`), where `/api/annotation`
/// reads one.
fn annotations_lists_global_annotations_in_a_range(backend: Backend) {
    let Some(tsds) = Tsds::start(backend, &[("tsd.core.auto_create_metrics", "true")]) else {
        return;
    };
    let s = tsds.writer();
    for body in [
        r#"{"startTime":1356998400,"description":"g1"}"#,
        r#"{"startTime":1356998500,"endTime":1356998600,"description":"g2"}"#,
        r#"{"startTime":1357002100,"description":"g3"}"#,
    ] {
        assert_eq!(tsds.req("POST", "/api/annotation", body).0, 200);
    }
    // A series' annotation is not global.
    put_points(s);
    let (st, t) = tsds.req(
        "POST",
        "/api/annotation",
        r#"{"tsuid":"000001000001000001","startTime":1356998450,"description":"local"}"#,
    );
    assert_eq!(st, 200, "{t}");
    let g1 = r#"{"description":"g1","notes":"","endTime":0,"startTime":1356998400}"#;
    let g2 = r#"{"description":"g2","notes":"","endTime":1356998600,"startTime":1356998500}"#;
    let g3 = r#"{"description":"g3","notes":"","endTime":0,"startTime":1357002100}"#;
    assert_eq!(
        tsds.req(
            "GET",
            "/api/annotations?start_time=1356998000&end_time=1356999000",
            ""
        ),
        (200, format!("[{g1},{g2}]"))
    );
    // One that ends after the range's end is left out.
    assert_eq!(
        tsds.req(
            "GET",
            "/api/annotations?start_time=1356998000&end_time=1356998550",
            ""
        ),
        (200, format!("[{g1}]"))
    );
    // No end: up to now.
    assert_eq!(
        tsds.req("GET", "/api/annotations?start_time=1356998450", ""),
        (200, format!("[{g2},{g3}]"))
    );
    assert_eq!(
        tsds.req("GET", "/api/annotations?start_time=1357010000", ""),
        (200, "[]".to_string())
    );
    assert_eq!(
        tsds.req(
            "GET",
            "/api/annotations?start_time=1357010000&end_time=1357000000",
            ""
        ),
        (
            400,
            err(
                400,
                "The end timestamp cannot be less than the start timestamp"
            )
        )
    );
    // The singular endpoint still reads one.
    assert_eq!(
        tsds.req("GET", "/api/annotation?start_time=1356998400", ""),
        (200, g1.to_string())
    );
}

/// OpenTSDB stores an annotation under the TSUID it is given without
/// resolving its UIDs, so one naming UID 0 is stored and read back (bulk
/// and single); `tsdb fsck` then finds its row an orphan, as OpenTSDB's.
/// Embedded only: fsck runs on the stopped TSD's data directory (fsck on
/// the cluster is tested with the cluster's own tools).
#[test]
fn annotations_under_tsuids_with_uid_zero_are_stored() {
    let mut s = TestServer::start(&[]);
    let zero = "000000000001000001";
    let (st, t) = req(
        &s,
        "POST",
        "/api/annotation/bulk",
        &format!(r#"[{{"tsuid":"{zero}","startTime":1356998400,"description":"zero"}}]"#),
    );
    assert_eq!(st, 200, "{t}");
    let one = format!(
        r#"{{"tsuid":"{zero}","description":"zero","notes":"","endTime":0,"startTime":1356998400}}"#
    );
    assert_eq!(t, format!("[{one}]"));
    assert_eq!(
        req(
            &s,
            "GET",
            &format!("/api/annotation?tsuid={zero}&start_time=1356998400"),
            ""
        ),
        (200, one.clone())
    );
    // Odd-length hex is padded as UniqueId.stringToUid pads it.
    assert_eq!(
        req(
            &s,
            "GET",
            "/api/annotation?tsuid=00000000001000001&start_time=1356998400",
            ""
        ),
        (200, one)
    );
    // A length that fits no layout is still refused.
    let (st, t) = req(
        &s,
        "GET",
        "/api/annotation?tsuid=0001&start_time=1356998400",
        "",
    );
    assert_eq!(st, 400, "{t}");
    let (st, t) = req(
        &s,
        "DELETE",
        &format!("/api/annotation/bulk?start_time=1356990000&tsuids={zero}"),
        "",
    );
    assert_eq!(st, 200, "{t}");
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    assert_eq!(v["totalDeleted"], 1, "{t}");
    // Stored again, then checked by fsck: an orphan, not a broken key.
    let body = format!(r#"{{"tsuid":"{zero}","startTime":1356998400,"description":"zero"}}"#);
    assert_eq!(req(&s, "POST", "/api/annotation", &body).0, 200);
    s.stop();
    let dir = std::mem::replace(&mut s.dir, tempfile::tempdir().unwrap());
    drop(s);
    let r = tsdb(dir.path(), &["fsck", "--full-scan"]);
    assert!(
        r.stdout.contains("Orphaned row"),
        "{}{}",
        r.stdout,
        r.stderr
    );
    assert!(!r.stdout.contains("Invalid row key"), "{}", r.stdout);
}
