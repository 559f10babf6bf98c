//! `/api/search/{tsmeta,tsmeta_summary,tsuids,uidmeta,annotation}`, which
//! OpenTSDB serves only through a search plugin, answered from rtsdb's own
//! index, UIDs, meta and annotations in `SearchQuery`'s shape. On the
//! cluster the data goes in through one TSD and every search is asked of
//! another, with the same answers.

use crate::common::{Backend, Tsds, err, on_both_backends, post_put};
use serde_json::{Value, json};

on_both_backends!(
    series_searches_by_metric_tag_and_wildcard_with_paging,
    tsmeta_searches_stored_tsmeta_objects,
    uidmeta_and_annotation_searches,
    bad_search_requests,
);

/// The test's TSDs with three series written through the writer; `None`
/// when the backend is not there.
fn server(backend: Backend) -> Option<Tsds> {
    let tsds = Tsds::start(backend, &[("tsd.core.auto_create_metrics", "true")])?;
    let srv = tsds.writer();
    let pts = json!([
        {"metric":"sys.cpu.user","timestamp":1356998400,"value":1,"tags":{"host":"web01","dc":"lga"}},
        {"metric":"sys.cpu.user","timestamp":1356998400,"value":2,"tags":{"host":"web02","dc":"lga"}},
        {"metric":"sys.mem.free","timestamp":1356998400,"value":3,"tags":{"host":"web01"}},
    ]);
    assert_eq!(post_put(srv.addr, "?sync", &pts.to_string()).status, 204);
    Some(tsds)
}

/// Status and body of a request, sent where [`Tsds::route`] says: reads
/// to the reader, changes to the writer.
fn req(srv: &Tsds, method: &str, path: &str, body: &str) -> (u16, String) {
    srv.req(method, path, body)
}

fn get(srv: &Tsds, path: &str) -> (u16, String) {
    srv.req("GET", path, "")
}

fn search(srv: &Tsds, path: &str) -> Value {
    let (s, t) = get(srv, path);
    assert_eq!(s, 200, "{path}: {t}");
    let mut v: Value = serde_json::from_str(&t).unwrap();
    assert!(v["time"].as_f64().unwrap() >= 0.0, "{t}");
    v["time"] = json!(0);
    v
}

/// TSUIDs in this data: sys.cpu.user{host=web01,dc=lga}, {host=web02,dc=lga}
/// and sys.mem.free{host=web01} (host is tag key 1, dc 2).
const CPU1: &str = "000001000001000001000002000002";
const CPU2: &str = "000001000001000003000002000002";
const MEM: &str = "000002000001000001";

fn series_searches_by_metric_tag_and_wildcard_with_paging(backend: Backend) {
    let Some(srv) = server(backend) else {
        return;
    };
    let v = search(&srv, "/api/search/tsmeta_summary?query=host:web01");
    assert_eq!(
        v,
        json!({"type":"TSMETA_SUMMARY","query":"host:web01","metric":"*","limit":25,"time":0,
               "results":[
                 {"tsuid":CPU1,"metric":"sys.cpu.user","tags":{"dc":"lga","host":"web01"}},
                 {"tsuid":MEM,"metric":"sys.mem.free","tags":{"host":"web01"}}],
               "startIndex":0,"totalResults":2})
    );
    let v = search(&srv, "/api/search/tsuids?query=metric:sys.cpu.*");
    assert_eq!(
        (v["results"].clone(), v["totalResults"].clone()),
        (json!([CPU1, CPU2]), json!(2))
    );
    // Paging: the total counts every match.
    let v = search(
        &srv,
        "/api/search/tsuids?query=sys.cpu.*&limit=1&start_index=1",
    );
    assert_eq!(
        (
            v["results"].clone(),
            v["totalResults"].clone(),
            v["startIndex"].clone(),
            v["limit"].clone()
        ),
        (json!([CPU2]), json!(2), json!(1), json!(1))
    );
    // Bare terms match any field, whole or a dotted part; AND / OR.
    let v = search(&srv, "/api/search/tsuids?query=cpu%20AND%20web02");
    assert_eq!(v["results"], json!([CPU2]));
    let v = search(
        &srv,
        "/api/search/tsuids?query=host:web02%20OR%20metric:sys.mem.free",
    );
    assert_eq!(v["results"], json!([CPU2, MEM]));
    let v = search(&srv, "/api/search/tsuids?query=nothing");
    assert_eq!(
        (v["results"].clone(), v["totalResults"].clone()),
        (json!([]), json!(0))
    );
    // POST takes the SearchQuery object.
    let (s, t) = req(
        &srv,
        "POST",
        "/api/search/tsuids",
        r#"{"query":"dc:lga","limit":"1","startIndex":0}"#,
    );
    assert_eq!(s, 200, "{t}");
    let v: Value = serde_json::from_str(&t).unwrap();
    assert_eq!(
        (v["results"].clone(), v["totalResults"].clone()),
        (json!([CPU1]), json!(2))
    );
}

fn tsmeta_searches_stored_tsmeta_objects(backend: Backend) {
    let Some(srv) = server(backend) else {
        return;
    };
    // No TSMeta stored yet (real-time meta is off): nothing to find.
    let v = search(&srv, "/api/search/tsmeta?query=*");
    assert_eq!(v["totalResults"], 0);
    let (s, t) = req(
        &srv,
        "GET",
        "/api/uid/tsmeta?m=sys.cpu.user%7Bhost=web02,dc=lga%7D&create=true&method_override=post&description=Second%20web%20server",
        "",
    );
    assert_eq!(s, 200, "{t}");
    let v = search(&srv, "/api/search/tsmeta?query=description:second");
    assert_eq!(v["totalResults"], 1, "{v}");
    let meta = &v["results"][0];
    assert_eq!(meta["tsuid"], CPU2);
    assert_eq!(meta["description"], "Second web server");
    assert_eq!(meta["metric"]["name"], "sys.cpu.user");
    // The same object /api/uid/tsmeta gives.
    let (_, t) = get(&srv, &format!("/api/uid/tsmeta?tsuid={CPU2}"));
    let direct: Value = serde_json::from_str(&t).unwrap();
    assert_eq!(meta, &direct);
}

fn uidmeta_and_annotation_searches(backend: Backend) {
    let Some(srv) = server(backend) else {
        return;
    };
    let v = search(
        &srv,
        "/api/search/uidmeta?query=type:TAGV%20AND%20name:web*",
    );
    let names: Vec<&str> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["web01", "web02"]);
    assert_eq!(v["results"][0]["type"], "TAGV");
    let v = search(&srv, "/api/search/uidmeta?query=sys.mem.free");
    assert_eq!(v["results"][0]["uid"], "000002", "{v}");
    assert_eq!(v["totalResults"], 1, "{v}");

    for body in [
        format!(
            r#"{{"tsuid":"{CPU1}","startTime":1356998400,"description":"Deploy web01","notes":"rolled back"}}"#
        ),
        r#"{"startTime":1356998460,"description":"Network maintenance","custom":{"owner":"ops"}}"#
            .to_string(),
    ] {
        assert_eq!(req(&srv, "POST", "/api/annotation", &body).0, 200);
    }
    let v = search(&srv, "/api/search/annotation?query=deploy");
    assert_eq!(
        v["results"],
        json!([{"tsuid":CPU1,"description":"Deploy web01","notes":"rolled back","endTime":0,"startTime":1356998400}])
    );
    let v = search(&srv, "/api/search/annotation?query=owner:ops");
    assert_eq!(v["results"][0]["description"], "Network maintenance");
    let v = search(&srv, "/api/search/annotation?query=*");
    assert_eq!(v["totalResults"], 2);
}

fn bad_search_requests(backend: Backend) {
    let Some(srv) = server(backend) else {
        return;
    };
    assert_eq!(
        get(&srv, "/api/search/tsuids?query=a%20AND"),
        (
            400,
            err_d("Unable to parse query", "the query ends with an operator")
        )
    );
    assert_eq!(
        get(&srv, "/api/search/tsuids?query=x&limit=ten"),
        (400, err(400, "Unable to convert 'limit' to a valid number"))
    );
    assert_eq!(
        get(&srv, "/api/search/tsuids?query=x&start_index=-x"),
        (
            400,
            err(400, "Unable to convert 'start_index' to a valid number")
        )
    );
    assert_eq!(
        get(&srv, "/api/search/uidmeta"),
        (400, err(400, "Missing parameter <code>query</code>"))
    );
    let (s, _) = req(&srv, "POST", "/api/search/tsmeta", "{not json");
    assert_eq!(s, 400);
}

fn err_d(message: &str, details: &str) -> String {
    format!(
        r#"{{"error":{{"code":400,"message":{},"details":{}}}}}"#,
        json!(message),
        json!(details)
    )
}
