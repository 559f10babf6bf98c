//! /api/uid/* against a real TSD: assign, rename, uidmeta and tsmeta with
//! their success, not-found, no-change and bad-input answers.

use crate::common;

use common::{Backend, TestServer, Tsds, err, on_both_backends, post_put, req};

on_both_backends!(
    assign_mixed_success_and_errors,
    rename_results,
    uidmeta_crud,
    tsmeta_crud_and_counters,
    realtime_meta_and_counters,
);
use serde_json::json;

fn assign_mixed_success_and_errors(backend: Backend) {
    let Some(tsds) = Tsds::start(backend, &[]) else {
        return;
    };
    assert_eq!(
        tsds.req(
            "GET",
            "/api/uid/assign?metric=sys.cpu.0,sys.cpu.1&tagk=host",
            ""
        ),
        (
            200,
            r#"{"metric":{"sys.cpu.0":"000001","sys.cpu.1":"000002"},"tagk":{"host":"000001"}}"#
                .into()
        )
    );
    assert_eq!(
        tsds.req(
            "POST",
            "/api/uid/assign",
            r#"{"metric":["sys.cpu.1","illegal!character","sys.cpu.2"],"tagv":["web01"]}"#
        ),
        (
            400,
            r#"{"metric":{"sys.cpu.2":"000003"},"metric_errors":{"illegal!character":"Invalid metric (\"illegal!character\"): illegal character: !","sys.cpu.1":"Name already exists with UID: 000002"},"tagv":{"web01":"000001"}}"#
                .into()
        )
    );
    // Keys in the order of OpenTSDB's HashMap: tagv_errors, metric, tagk,
    // tagk_errors, metric_errors, tagv.
    assert_eq!(
        tsds.req(
            "GET",
            "/api/uid/assign?tagv=web01,web02&tagk=host,dc&metric=m.1",
            ""
        ),
        (
            400,
            r#"{"tagv_errors":{"web01":"Name already exists with UID: 000001"},"metric":{"m.1":"000004"},"tagk":{"dc":"000002"},"tagk_errors":{"host":"Name already exists with UID: 000001"},"tagv":{"web02":"000002"}}"#
                .into()
        )
    );
    assert_eq!(
        tsds.req("GET", "/api/uid/assign", ""),
        (400, err(400, "Missing values to assign UIDs"))
    );
    assert_eq!(
        tsds.req("POST", "/api/uid/assign", "{}"),
        (400, err(400, "Missing values to assign UIDs"))
    );
    assert_eq!(tsds.req("POST", "/api/uid/assign", "{bad").0, 400);
    assert_eq!(tsds.req("DELETE", "/api/uid/assign?metric=x", "").0, 405);
    assert_eq!(
        tsds.req("GET", "/api/uid/nope", ""),
        (
            501,
            err(501, "Other UID endpoints have not been implemented yet")
        )
    );
}

fn rename_results(backend: Backend) {
    let Some(tsds) = Tsds::start(backend, &[]) else {
        return;
    };
    tsds.req("GET", "/api/uid/assign?metric=a,b", "");
    assert_eq!(
        tsds.req("GET", "/api/uid/rename?metric=a&name=c", ""),
        (200, r#"{"result":"true"}"#.into())
    );
    assert_eq!(
        tsds.req("GET", "/api/suggest?type=metrics", "").1,
        r#"["b","c"]"#
    );
    assert_eq!(
        tsds.req("POST", "/api/uid/rename", r#"{"metric":"c","name":"b"}"#),
        (
            400,
            r#"{"result":"false","error":"When trying rename(\"c\", \"b\") on UniqueId(tsdb-uid, metrics, 3): new name already assigned ID=[0, 0, 2]"}"#
                .into()
        )
    );
    assert_eq!(
        tsds.req("GET", "/api/uid/rename?tagk=nope&name=x", ""),
        (
            400,
            r#"{"result":"false","error":"No such name for 'tagk': 'nope'"}"#.into()
        )
    );
    assert_eq!(
        tsds.req("GET", "/api/uid/rename?metric=c", ""),
        (400, err(400, "Missing necessary values to rename UID"))
    );
}

fn uidmeta_crud(backend: Backend) {
    let Some(tsds) = Tsds::start(backend, &[]) else {
        return;
    };
    tsds.req("GET", "/api/uid/assign?metric=sys.cpu.0", "");
    // Default object for a UID without meta.
    let default = r#"{"uid":"000001","type":"METRIC","name":"sys.cpu.0","description":"","notes":"","created":0,"custom":null,"displayName":""}"#;
    assert_eq!(
        tsds.req("GET", "/api/uid/uidmeta?uid=000001&type=metric", ""),
        (200, default.into())
    );
    // Not found.
    assert_eq!(
        tsds.req("GET", "/api/uid/uidmeta?uid=000002&type=metrics", ""),
        (404, err(404, "Could not find the requested UID"))
    );
    // POST merges. As in OpenTSDB (whose setters flag a field changed when
    // it differs from the empty default), repeating it writes again (200);
    // only a request that sets no user field, or sets them empty, is a 304.
    let body = r#"{"uid":"000001","type":"METRIC","description":"CPU","custom":{"owner":"ops"}}"#;
    let updated = r#"{"uid":"000001","type":"METRIC","name":"sys.cpu.0","description":"CPU","notes":"","created":0,"custom":{"owner":"ops"},"displayName":""}"#;
    assert_eq!(
        tsds.req("POST", "/api/uid/uidmeta", body),
        (200, updated.into())
    );
    assert_eq!(
        tsds.req("POST", "/api/uid/uidmeta", body),
        (200, updated.into())
    );
    assert_eq!(
        tsds.req(
            "POST",
            "/api/uid/uidmeta",
            r#"{"uid":"000001","type":"metric","notes":""}"#
        ),
        (304, String::new())
    );
    // ... even for a UID that does not exist (the change check comes first).
    assert_eq!(
        tsds.req(
            "POST",
            "/api/uid/uidmeta",
            r#"{"uid":"0000FF","type":"metric"}"#
        ),
        (304, String::new())
    );
    // QS form of POST via method_override.
    let (s, t) = tsds.req(
        "GET",
        "/api/uid/uidmeta?uid=000001&type=metric&display_name=CPU%200&method_override=post",
        "",
    );
    assert_eq!(s, 200);
    assert!(
        t.contains(r#""description":"CPU""#) && t.contains(r#""displayName":"CPU 0""#),
        "{t}"
    );
    // Stored: a fresh GET sees it.
    assert!(
        tsds.req("GET", "/api/uid/uidmeta?uid=000001&type=METRIC", "")
            .1
            .contains("CPU 0")
    );
    // PUT replaces: fields not given go back to defaults.
    let (s, t) = tsds.req(
        "PUT",
        "/api/uid/uidmeta",
        r#"{"uid":"000001","type":"metric","notes":"n"}"#,
    );
    assert_eq!(s, 200);
    assert_eq!(
        t,
        r#"{"uid":"000001","type":"METRIC","name":"sys.cpu.0","description":"","notes":"n","created":0,"custom":null,"displayName":""}"#
    );
    // DELETE: 204, then the default object again.
    assert_eq!(
        tsds.req(
            "DELETE",
            "/api/uid/uidmeta",
            r#"{"uid":"000001","type":"metric"}"#
        ),
        (204, String::new())
    );
    assert_eq!(
        tsds.req("GET", "/api/uid/uidmeta?uid=000001&type=metric", ""),
        (200, default.into())
    );
    // Bad input.
    assert_eq!(
        tsds.req("GET", "/api/uid/uidmeta?type=metric", ""),
        (400, err(400, "Missing parameter <code>uid</code>"))
    );
    assert_eq!(
        tsds.req("GET", "/api/uid/uidmeta?uid=000001", ""),
        (400, err(400, "Missing parameter <code>type</code>"))
    );
    assert_eq!(
        tsds.req("GET", "/api/uid/uidmeta?uid=000001&type=foo", ""),
        (400, err(400, "Invalid type requested: foo"))
    );
    assert_eq!(
        tsds.req(
            "POST",
            "/api/uid/uidmeta",
            r#"{"uid":"000001","type":"foo","notes":"x"}"#
        ),
        (
            400,
            r#"{"error":{"code":400,"message":"Unable to parse the given JSON","details":"Invalid type requested: foo"}}"#.into()
        )
    );
    // The query-string forms require both parameters.
    assert_eq!(
        tsds.req(
            "GET",
            "/api/uid/uidmeta?type=metric&notes=x&method_override=post",
            ""
        ),
        (400, err(400, "Missing parameter <code>uid</code>"))
    );
    assert_eq!(
        tsds.req("DELETE", "/api/uid/uidmeta", r#"{"uid":"000001"}"#),
        (
            400,
            r#"{"error":{"code":400,"message":"Unable to delete UIDMeta information","details":"Missing type"}}"#.into()
        )
    );
    assert_eq!(
        tsds.req("GET", "/api/uid/uidmeta?uid=zz&type=metric", ""),
        (400, err(400, "Invalid UID: zz"))
    );
    assert_eq!(
        tsds.req("POST", "/api/uid/uidmeta", r#"{"type":"metric"}"#),
        (400, err(400, "Missing UID"))
    );
    assert_eq!(
        tsds.req(
            "POST",
            "/api/uid/uidmeta",
            r#"{"uid":"000001","custom":1,"type":"metric"}"#
        )
        .0,
        400
    );
    assert_eq!(tsds.req("PATCH", "/api/uid/uidmeta", "").0, 405);
}

fn tsmeta_crud_and_counters(backend: Backend) {
    let Some(tsds) = Tsds::start(backend, &[("tsd.core.auto_create_metrics", "true")]) else {
        return;
    };
    let srv = tsds.writer();
    let pts = json!([
        {"metric":"sys.cpu.user","timestamp":1356998400,"value":1,"tags":{"host":"web01"}},
        {"metric":"sys.cpu.user","timestamp":1356998401,"value":2,"tags":{"host":"web01"}},
        {"metric":"sys.cpu.user","timestamp":1356998402,"value":3,"tags":{"host":"web01"}},
    ]);
    assert_eq!(post_put(srv.addr, "", &pts.to_string()).status, 204);
    let tsuid = "000001000001000001";
    // No TSMeta yet.
    assert_eq!(
        tsds.req("GET", &format!("/api/uid/tsmeta?tsuid={tsuid}"), ""),
        (404, err(404, "Could not find Timeseries meta data"))
    );
    assert_eq!(
        tsds.req(
            "POST",
            "/api/uid/tsmeta",
            &format!(r#"{{"tsuid":"{tsuid}","units":"%"}}"#)
        ),
        (400, err(400, "Requested TSMeta did not exist"))
    );
    // By m= without create=true: BadRequestException's default 400.
    assert_eq!(
        tsds.req(
            "GET",
            "/api/uid/tsmeta?m=sys.cpu.user%7Bhost=web01%7D&method_override=post&units=%25",
            ""
        ),
        (
            400,
            err(
                400,
                "Could not find TSMeta, specify \"create=true\" to create a new one."
            )
        )
    );
    assert_eq!(
        tsds.req("GET", "/api/uid/tsmeta?m=sys.cpu.user", "").1,
        "[]"
    );
    // create=true with m=.
    let (s, t) = tsds.req(
        "GET",
        "/api/uid/tsmeta?m=sys.cpu.user%7Bhost=web01%7D&create=true&method_override=post&units=%25",
        "",
    );
    assert_eq!(s, 200, "{t}");
    let mut v: serde_json::Value = serde_json::from_str(&t).unwrap();
    let created = v["created"].as_u64().unwrap();
    assert!(created > 1_600_000_000, "{t}");
    v["created"] = json!(0);
    let uidmeta = |uid: &str, kind: &str, name: &str| json!({"uid":uid,"type":kind,"name":name,"description":"","notes":"","created":0,"custom":null,"displayName":""});
    assert_eq!(
        v,
        json!({"tsuid":tsuid,"metric":uidmeta("000001","METRIC","sys.cpu.user"),
               "tags":[uidmeta("000001","TAGK","host"),uidmeta("000001","TAGV","web01")],
               "description":"","notes":"","created":0,"units":"%","retention":0,
               "max":"NaN","min":"NaN","displayName":"","dataType":"",
               "lastReceived":0,"totalDatapoints":0})
    );
    // Field order of the object.
    assert!(
        t.starts_with(r#"{"tsuid":"000001000001000001","metric":{"uid":"000001","type":"METRIC""#),
        "{t}"
    );
    // TSMeta is NON_NULL in Jackson: an unset `custom` is left out.
    assert!(
        t.contains(r#""created":"#) && !t.contains(r#""custom":null,"units""#),
        "{t}"
    );
    assert!(
        t.contains(r#""max":"NaN","min":"NaN","displayName":"","dataType":"","lastReceived":"#),
        "{t}"
    );
    // More points: without tsd.core.meta.enable_tsuid_tracking (off by
    // default, as in OpenTSDB) nothing counts them.
    let more =
        json!({"metric":"sys.cpu.user","timestamp":1356998403,"value":4,"tags":{"host":"web01"}});
    assert_eq!(post_put(srv.addr, "", &more.to_string()).status, 204);
    let (s, t) = tsds.req("GET", &format!("/api/uid/tsmeta?tsuid={tsuid}"), "");
    assert_eq!(s, 200);
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    assert_eq!(v["totalDatapoints"], 0);
    assert_eq!(v["units"], "%");
    // POST merge; a POST that sets no user field → 304.
    let body =
        format!(r#"{{"tsuid":"{tsuid}","description":"user CPU","max":100,"retention":"7"}}"#);
    let (s, t) = tsds.req("POST", "/api/uid/tsmeta", &body);
    assert_eq!(s, 200, "{t}");
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    assert_eq!(
        (
            v["description"].clone(),
            v["max"].clone(),
            v["retention"].clone(),
            v["units"].clone()
        ),
        (json!("user CPU"), json!(100.0), json!(7), json!("%"))
    );
    assert_eq!(
        tsds.req(
            "POST",
            "/api/uid/tsmeta",
            &format!(r#"{{"tsuid":"{tsuid}","units":""}}"#)
        ),
        (304, String::new())
    );
    // GET by m= gives an array.
    let (s, t) = tsds.req("GET", "/api/uid/tsmeta?m=sys.cpu.user%7Bhost=*%7D", "");
    assert_eq!(s, 200);
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert_eq!(v[0]["tsuid"], tsuid);
    // PUT resets what it does not give.
    let (s, t) = tsds.req(
        "PUT",
        "/api/uid/tsmeta",
        &format!(r#"{{"tsuid":"{tsuid}","notes":"x"}}"#),
    );
    assert_eq!(s, 200);
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    assert_eq!(
        (v["units"].clone(), v["max"].clone(), v["notes"].clone()),
        (json!(""), json!("NaN"), json!("x"))
    );
    assert_eq!(v["created"].as_u64(), Some(created));
    // The TSMeta survives a restart.
    let mut tsds = tsds;
    tsds.restart();
    let (s, t) = tsds.req("GET", &format!("/api/uid/tsmeta?tsuid={tsuid}"), "");
    assert_eq!(s, 200);
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    assert_eq!(
        (v["totalDatapoints"].clone(), v["notes"].clone()),
        (json!(0), json!("x"))
    );
    // DELETE → 204, then 404.
    assert_eq!(
        tsds.req("DELETE", &format!("/api/uid/tsmeta?tsuid={tsuid}"), ""),
        (204, String::new())
    );
    assert_eq!(
        tsds.req("GET", &format!("/api/uid/tsmeta?tsuid={tsuid}"), "")
            .0,
        404
    );
    // Bad input.
    assert_eq!(
        tsds.req("GET", "/api/uid/tsmeta", ""),
        (400, err(400, "Missing parameter <code>m</code>"))
    );
    assert_eq!(
        tsds.req("GET", "/api/uid/tsmeta?m=nope", ""),
        (
            404,
            r#"{"error":{"code":404,"message":"Unable to find one of the UIDs","details":"No such name for 'metrics': 'nope'"}}"#.into()
        )
    );
    assert_eq!(
        tsds.req("DELETE", "/api/uid/tsmeta", ""),
        (
            400,
            r#"{"error":{"code":400,"message":"Unable to delete TSMeta information","details":"Missing UID"}}"#.into()
        )
    );
    assert_eq!(tsds.req("GET", "/api/uid/tsmeta?tsuid=XYZ", "").0, 400);
    assert_eq!(
        tsds.req("GET", "/api/uid/tsmeta?tsuid=0000010000", "").0,
        400
    );
    assert_eq!(
        tsds.req(
            "POST",
            "/api/uid/tsmeta?create=true&m=nope%7Bhost=web01%7D",
            ""
        ),
        (404, err(404, "No such name for 'metrics': 'nope'"))
    );
    assert_eq!(
        tsds.req(
            "POST",
            "/api/uid/tsmeta?create=true",
            &format!(r#"{{"tsuid":"{tsuid}","max":"lots"}}"#)
        ),
        (400, err(400, "Unable to parse the given JSON"))
    );
    assert_eq!(
        tsds.req(
            "GET",
            &format!("/api/uid/tsmeta?tsuid={tsuid}&max=lots&method_override=post"),
            ""
        ),
        (400, err(400, "Unable to parse 'max' value"))
    );
    assert_eq!(
        tsds.req("POST", "/api/uid/tsmeta", "{}"),
        (400, err(400, "Missing parameter <code>m</code>"))
    );
}

/// `tsd.core.meta.*` as OpenTSDB applies them: real-time UIDMeta for new
/// names; tracking marks a series (`ts_ctr` = 1, last received); with
/// real-time TSMeta a series' TSMeta is created by its first point; with
/// incrementing too, every point counts, across restarts.
fn realtime_meta_and_counters(backend: Backend) {
    let put = |tsds: &Tsds, metric: &str, n: u64| {
        let pts: Vec<serde_json::Value> = (0..n)
            .map(|i| json!({"metric":metric,"timestamp":1356998400 + i,"value":i,"tags":{"host":"web01"}}))
            .collect();
        let r = post_put(tsds.writer().addr, "", &json!(pts).to_string());
        assert_eq!(r.status, 204);
    };
    let tsmeta = |tsds: &Tsds, tsuid: &str| {
        let (s, t) = tsds.req("GET", &format!("/api/uid/tsmeta?tsuid={tsuid}"), "");
        (
            s,
            serde_json::from_str::<serde_json::Value>(&t).unwrap_or_default(),
        )
    };

    // Real-time UIDMeta only: every new name has a UIDMeta with `created`;
    // no TSMeta, no counter.
    let Some(tsds) = Tsds::start(
        backend,
        &[
            ("tsd.core.auto_create_metrics", "true"),
            ("tsd.core.meta.enable_realtime_uid", "true"),
        ],
    ) else {
        return;
    };
    put(&tsds, "m.uid", 2);
    for (uid, kind) in [("000001", "metric"), ("000001", "tagk"), ("000001", "tagv")] {
        let (s, t) = tsds.req(
            "GET",
            &format!("/api/uid/uidmeta?uid={uid}&type={kind}"),
            "",
        );
        assert_eq!(s, 200, "{t}");
        let v: serde_json::Value = serde_json::from_str(&t).unwrap();
        assert!(v["created"].as_u64().unwrap() > 1_600_000_000, "{t}");
    }
    assert_eq!(tsmeta(&tsds, "000001000001000001").0, 404);
    drop(tsds);

    // Tracking alone marks the series: ts_ctr is 1 however many points,
    // and no TSMeta is created (create=true shows the mark).
    let tsds = Tsds::start(
        backend,
        &[
            ("tsd.core.auto_create_metrics", "true"),
            ("tsd.core.meta.enable_tsuid_tracking", "true"),
        ],
    )
    .unwrap();
    put(&tsds, "m.track", 3);
    assert_eq!(tsmeta(&tsds, "000001000001000001").0, 404);
    let (s, t) = tsds.req(
        "GET",
        "/api/uid/tsmeta?m=m.track%7Bhost=web01%7D&create=true&method_override=post",
        "",
    );
    assert_eq!(s, 200, "{t}");
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    assert_eq!(v["totalDatapoints"], 1, "{t}");
    assert!(v["lastReceived"].as_u64().unwrap() > 1_600_000_000, "{t}");
    // The UIDMeta of a name assigned without real-time UIDMeta has none.
    let (_, t) = tsds.req("GET", "/api/uid/uidmeta?uid=000001&type=metric", "");
    assert!(t.contains(r#""created":0"#), "{t}");
    drop(tsds);

    // Tracking with real-time TSMeta: the first point creates the TSMeta;
    // without incrementing the counter stays a mark.
    let tsds = Tsds::start(
        backend,
        &[
            ("tsd.core.auto_create_metrics", "true"),
            ("tsd.core.meta.enable_tsuid_tracking", "true"),
            ("tsd.core.meta.enable_realtime_ts", "true"),
        ],
    )
    .unwrap();
    put(&tsds, "m.rt", 3);
    let (s, v) = tsmeta(&tsds, "000001000001000001");
    assert_eq!(s, 200, "{v}");
    assert!(v["created"].as_u64().unwrap() > 1_600_000_000, "{v}");
    assert_eq!(v["totalDatapoints"], 1, "{v}");
    assert_eq!(v["metric"]["name"], "m.rt", "{v}");
    drop(tsds);

    // And with incrementing: every point counts, across a restart.
    let settings = [
        ("tsd.core.auto_create_metrics", "true"),
        ("tsd.core.meta.enable_tsuid_tracking", "true"),
        ("tsd.core.meta.enable_realtime_ts", "true"),
        ("tsd.core.meta.enable_tsuid_incrementing", "true"),
    ];
    let mut tsds = Tsds::start(backend, &settings).unwrap();
    put(&tsds, "m.inc", 3);
    let (s, v) = tsmeta(&tsds, "000001000001000001");
    assert_eq!((s, v["totalDatapoints"].clone()), (200, json!(3)), "{v}");
    let created = v["created"].clone();
    tsds.restart();
    put(&tsds, "m.inc", 5);
    let (s, v) = tsmeta(&tsds, "000001000001000001");
    assert_eq!(s, 200, "{v}");
    // Points 0..5 again: 3 + 5 points received, the TSMeta kept.
    assert_eq!(v["totalDatapoints"], 8, "{v}");
    assert_eq!(v["created"], created, "{v}");
}

/// `tsdb uid metasync` stores the TSMeta a series lacks and the UIDMeta of
/// its names, `created` being the hour of the oldest data (OpenTSDB's
/// MetaSync), and marks the series' counter. Embedded only: it runs the
/// command line on the stopped TSD's data directory.
#[test]
fn metasync_dates_meta_by_the_oldest_data() {
    let mut srv = TestServer::start(&[("tsd.core.auto_create_metrics", "true")]);
    let pts = json!([
        {"metric":"m.sync","timestamp":1356998400 + 7300,"value":1,"tags":{"host":"web01"}},
        {"metric":"m.sync","timestamp":1356998400 + 10,"value":2,"tags":{"host":"web01"}},
    ]);
    assert_eq!(post_put(srv.addr, "?sync", &pts.to_string()).status, 204);
    srv.stop();
    let dir = std::mem::replace(&mut srv.dir, tempfile::tempdir().unwrap());
    drop(srv);
    let r = crate::common::tsdb(dir.path(), &["uid", "metasync"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let srv = TestServer::start_in(dir, &[]);
    let (s, t) = req(&srv, "GET", "/api/uid/tsmeta?tsuid=000001000001000001", "");
    assert_eq!(s, 200, "{t}");
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    assert_eq!(
        (v["created"].clone(), v["totalDatapoints"].clone()),
        (json!(1356998400), json!(1)),
        "{t}"
    );
    assert_eq!(v["metric"]["created"], 1356998400, "{t}");
    assert_eq!(v["tags"][1]["created"], 1356998400, "{t}");
}
