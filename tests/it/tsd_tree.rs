//! `/api/tree/*` against a real TSD, with OpenTSDB 2.4.1's `TestTreeRpc`
//! cases as facts (status codes, messages), tree processing of new series
//! (`tsd.core.tree.enable_processing`), and `tsdb uid treesync` /
//! `treepurge`.

use crate::common;

use common::{TestServer, err, get, post_put, req};
use serde_json::{Value, json};

fn v(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// OpenTSDB's error body when the message is also the details (an
/// `IllegalArgumentException` turned into a 400).
fn err_details(code: u16, message: &str, details: &str) -> String {
    let s = |t: &str| serde_json::to_string(t).unwrap();
    format!(
        r#"{{"error":{{"code":{code},"message":{},"details":{}}}}}"#,
        s(message),
        s(details)
    )
}

fn create_tree(srv: &TestServer, body: &str) -> Value {
    let (s, t) = req(srv, "POST", "/api/tree", body);
    assert_eq!(s, 200, "{t}");
    v(&t)
}

#[test]
fn trees_are_created_read_edited_and_deleted() {
    let srv = TestServer::start(&[]);
    assert_eq!(req(&srv, "GET", "/api/tree", ""), (200, "[]".into()));
    // From a body, `created` stays 0 (2.4.1 stores the parsed object).
    let t = create_tree(
        &srv,
        r#"{"name":"Test Tree","description":"My Description","notes":"Details","enabled":"true"}"#,
    );
    assert_eq!(
        t,
        json!({"name":"Test Tree","description":"My Description","notes":"Details","enabled":true,
               "rules":null,"created":0,"treeId":1,"strictMatch":false,"storeFailures":false})
    );
    // From the query string, `created` is now.
    let (s, text) = req(&srv, "POST", "/api/tree?name=Second&strict_match=true", "");
    assert_eq!(s, 200, "{text}");
    let t2 = v(&text);
    assert_eq!(
        (t2["treeId"].clone(), t2["strictMatch"].clone()),
        (json!(2), json!(true))
    );
    assert!(t2["created"].as_i64().unwrap() > 1_600_000_000);
    let (s, all) = get(&srv, "/api/tree");
    assert_eq!(s, 200);
    assert_eq!(v(&all).as_array().unwrap().len(), 2);
    // In Jackson's property order.
    assert_eq!(
        get(&srv, "/api/tree?treeid=1").1,
        r#"{"name":"Test Tree","description":"My Description","notes":"Details","enabled":true,"rules":null,"created":0,"treeId":1,"strictMatch":false,"storeFailures":false}"#
    );

    // Errors, as TreeRpc answers them.
    assert_eq!(
        get(&srv, "/api/tree?treeid=3"),
        (404, err(404, "Unable to locate tree: 3"))
    );
    assert_eq!(
        get(&srv, "/api/tree?treeid=65536"),
        (400, err_details(400, "Invalid Tree ID", "Invalid Tree ID"))
    );
    assert_eq!(
        get(&srv, "/api/tree?treeid=abc"),
        (
            400,
            err_details(
                400,
                "Unable to parse 'tree' value",
                "For input string: \"abc\""
            )
        )
    );
    assert_eq!(
        req(&srv, "POST", "/api/tree?description=x", ""),
        (
            400,
            err_details(
                400,
                "Tree was missing the name",
                "Tree was missing the name"
            )
        )
    );
    assert_eq!(
        req(&srv, "POST", "/api/tree", r#"{"treeId":"x","name":"n"}"#),
        (400, err(400, "Unable to parse 'tree' value"))
    );
    assert_eq!(req(&srv, "POST", "/api/tree", "[1]").0, 400);
    assert_eq!(
        req(&srv, "PATCH", "/api/tree?treeid=1", ""),
        (400, err(400, "Unsupported HTTP request method"))
    );
    assert_eq!(
        req(
            &srv,
            "GET",
            "/api/tree?treeid=1&method_override=options",
            ""
        )
        .0,
        405
    );

    // POST edits the fields given; nothing given is "not modified".
    let (s, text) = req(&srv, "POST", "/api/tree?treeid=1&description=Edited", "");
    assert_eq!(s, 200, "{text}");
    let edited = v(&text);
    assert_eq!(
        (edited["description"].clone(), edited["name"].clone()),
        (json!("Edited"), json!("Test Tree"))
    );
    assert_eq!(
        req(&srv, "POST", "/api/tree?treeid=1", ""),
        (304, String::new())
    );
    assert_eq!(
        req(&srv, "POST", "/api/tree?treeid=9&name=x", ""),
        (404, err(404, "Unable to locate tree: 9"))
    );
    // PUT replaces: what is not given is reset.
    let (s, text) = req(
        &srv,
        "PUT",
        "/api/tree",
        r#"{"treeId":1,"name":"Replaced"}"#,
    );
    assert_eq!(s, 200, "{text}");
    let put = v(&text);
    assert_eq!(
        (
            put["name"].clone(),
            put["description"].clone(),
            put["enabled"].clone()
        ),
        (json!("Replaced"), json!(""), json!(false))
    );

    // DELETE keeps the definition unless asked.
    assert_eq!(
        req(&srv, "DELETE", "/api/tree?treeid=1", ""),
        (204, String::new())
    );
    assert_eq!(get(&srv, "/api/tree?treeid=1").0, 200);
    assert_eq!(
        req(
            &srv,
            "DELETE",
            "/api/tree",
            r#"{"treeId":1,"definition":true}"#
        ),
        (204, String::new())
    );
    assert_eq!(get(&srv, "/api/tree?treeid=1").0, 404);
    assert_eq!(
        req(&srv, "DELETE", "/api/tree?treeid=1&definition=true", ""),
        (404, err(404, "Unable to locate tree: 1"))
    );
    assert_eq!(
        req(&srv, "DELETE", "/api/tree", ""),
        (400, err_details(400, "Invalid Tree ID", "Invalid Tree ID"))
    );
    assert_eq!(
        get(&srv, "/api/tree/nope"),
        (404, err(404, "This endpoint is not supported"))
    );
}

#[test]
fn rules_one_at_a_time_and_in_bulk() {
    let srv = TestServer::start(&[]);
    create_tree(&srv, r#"{"name":"Rules"}"#);
    // A new rule from the query string.
    let (s, t) = req(
        &srv,
        "POST",
        "/api/tree/rule?treeid=1&level=1&order=0&type=metric&separator=%5C.&description=Split",
        "",
    );
    assert_eq!(s, 200, "{t}");
    assert_eq!(
        t,
        r#"{"type":"METRIC","field":"","regex":"","separator":"\\.","description":"Split","notes":"","level":1,"order":0,"treeId":1,"customField":"","regexGroupIdx":0,"displayFormat":""}"#
    );
    assert_eq!(get(&srv, "/api/tree/rule?treeid=1&level=1&order=0").1, t);
    // Validation and parameters.
    assert_eq!(
        req(
            &srv,
            "POST",
            "/api/tree/rule?treeid=1&level=0&order=0&type=tagk",
            ""
        ),
        (
            400,
            err_details(
                400,
                "Missing field name required for TAGK rule",
                "Missing field name required for TAGK rule"
            )
        )
    );
    assert_eq!(
        req(
            &srv,
            "POST",
            "/api/tree/rule?treeid=1&level=0&order=0&field=host",
            ""
        ),
        (
            400,
            err_details(400, "Missing rule type", "Missing rule type")
        )
    );
    assert_eq!(
        req(
            &srv,
            "POST",
            "/api/tree/rule?treeid=1&level=0&order=0&type=bogus",
            ""
        ),
        (
            400,
            err_details(
                400,
                "Unable to parse the 'type' parameter",
                "Unrecognized rule type"
            )
        )
    );
    assert_eq!(
        get(&srv, "/api/tree/rule?treeid=1&order=0"),
        (400, err(400, "Missing parameter <code>level</code>"))
    );
    assert_eq!(
        get(&srv, "/api/tree/rule?level=1&order=0"),
        (400, err(400, "Missing parameter <code>treeid</code>"))
    );
    assert_eq!(
        get(&srv, "/api/tree/rule?treeid=1&level=x&order=0"),
        (
            400,
            err_details(
                400,
                "Unable to parse the 'level' parameter",
                "For input string: \"x\""
            )
        )
    );
    assert_eq!(
        get(&srv, "/api/tree/rule?treeid=1&level=2&order=0"),
        (404, err(404, "Unable to locate rule: [1:2:0:null]"))
    );
    assert_eq!(
        get(&srv, "/api/tree/rule?treeid=5&level=1&order=0"),
        (404, err(404, "Unable to locate tree: 5"))
    );
    assert_eq!(
        req(&srv, "POST", "/api/tree/rule?treeid=1&level=0&order=0", "").0,
        304
    );
    assert_eq!(
        req(
            &srv,
            "POST",
            "/api/tree/rule?treeid=1&level=1&order=0&type=metric",
            ""
        )
        .0,
        304,
        "the same values again"
    );
    assert_eq!(
        req(
            &srv,
            "POST",
            "/api/tree/rule?treeid=1&level=0&order=0&regex=(",
            ""
        )
        .0,
        400
    );
    // POST merges into the stored rule, PUT replaces it.
    let (s, t) = req(
        &srv,
        "POST",
        "/api/tree/rule",
        r#"{"treeId":1,"level":"1","order":0,"notes":"kept"}"#,
    );
    assert_eq!(s, 200, "{t}");
    assert_eq!(
        (v(&t)["notes"].clone(), v(&t)["separator"].clone()),
        (json!("kept"), json!("\\."))
    );
    let (s, t) = req(
        &srv,
        "PUT",
        "/api/tree/rule",
        r#"{"treeId":1,"level":1,"order":0,"type":"TAGK","field":"host"}"#,
    );
    assert_eq!(s, 200, "{t}");
    assert_eq!(
        (
            v(&t)["notes"].clone(),
            v(&t)["separator"].clone(),
            v(&t)["type"].clone()
        ),
        (json!(""), json!(""), json!("TAGK"))
    );
    assert_eq!(
        req(
            &srv,
            "POST",
            "/api/tree/rule",
            r#"{"treeId":1,"type":"nope"}"#
        ),
        (
            400,
            err_details(
                400,
                "Unable to parse the given JSON",
                "Unrecognized rule type"
            )
        )
    );
    assert_eq!(
        req(
            &srv,
            "DELETE",
            "/api/tree/rule?treeid=1&level=1&order=0",
            ""
        ),
        (204, String::new())
    );
    assert_eq!(
        req(
            &srv,
            "DELETE",
            "/api/tree/rule?treeid=1&level=1&order=0",
            ""
        )
        .0,
        404
    );

    // Bulk.
    let rules = r#"[{"treeId":1,"level":0,"order":0,"type":"TAGK","field":"host"},
                    {"treeId":1,"level":1,"order":0,"type":"METRIC","separator":"\\."}]"#;
    assert_eq!(
        req(&srv, "POST", "/api/tree/rules", rules),
        (204, String::new())
    );
    let tree = v(&get(&srv, "/api/tree?treeid=1").1);
    assert_eq!(tree["rules"]["0"]["0"]["field"], "host");
    assert_eq!(tree["rules"]["1"]["0"]["separator"], "\\.");
    assert_eq!(
        req(&srv, "POST", "/api/tree/rules", "[]"),
        (400, err(400, "Missing tree rules"))
    );
    assert_eq!(
        req(
            &srv,
            "POST",
            "/api/tree/rules",
            r#"[{"treeId":1,"type":"METRIC"},{"treeId":2,"type":"METRIC"}]"#
        ),
        (400, err(400, "All rules must belong to the same tree"))
    );
    assert_eq!(
        req(&srv, "GET", "/api/tree/rules?treeid=1", ""),
        (400, err(400, "Unsupported HTTP request method"))
    );
    assert_eq!(
        req(&srv, "DELETE", "/api/tree/rules?treeid=4", ""),
        (404, err(404, "Unable to locate tree: 4"))
    );
    // PUT replaces the whole set.
    let one = r#"[{"treeId":1,"level":3,"order":1,"type":"METRIC"}]"#;
    assert_eq!(
        req(&srv, "PUT", "/api/tree/rules", one),
        (204, String::new())
    );
    let tree = v(&get(&srv, "/api/tree?treeid=1").1);
    assert_eq!(
        tree["rules"],
        json!({"3":{"1":v(&get(&srv, "/api/tree/rule?treeid=1&level=3&order=1").1)}})
    );
    assert_eq!(
        req(&srv, "DELETE", "/api/tree/rules?treeid=1", ""),
        (204, String::new())
    );
    assert_eq!(v(&get(&srv, "/api/tree?treeid=1").1)["rules"], Value::Null);
}

const PROCESSING: &[(&str, &str)] = &[
    ("tsd.core.auto_create_metrics", "true"),
    ("tsd.core.meta.enable_realtime_ts", "true"),
    ("tsd.core.meta.enable_tsuid_tracking", "true"),
    ("tsd.core.tree.enable_processing", "true"),
];

/// A tree: host, then the metric split on dots.
fn host_metric_tree(srv: &TestServer, store_failures: bool) {
    create_tree(
        srv,
        &json!({"name":"Hosts","enabled":true,"storeFailures":store_failures}).to_string(),
    );
    let rules = r#"[{"treeId":1,"level":0,"order":0,"type":"TAGK","field":"host"},
                    {"treeId":1,"level":1,"order":0,"type":"METRIC","separator":"\\."}]"#;
    assert_eq!(req(srv, "POST", "/api/tree/rules", rules).0, 204);
}

fn restart(mut srv: TestServer, settings: &[(&str, &str)]) -> TestServer {
    // Closing the database processes series still queued for the trees.
    srv.stop();
    let dir = std::mem::replace(&mut srv.dir, tempfile::tempdir().unwrap());
    drop(srv);
    TestServer::start_in(dir, settings)
}

#[test]
fn new_series_are_processed_through_enabled_trees() {
    let srv = TestServer::start(PROCESSING);
    host_metric_tree(&srv, false);
    let pts = json!([
        {"metric":"sys.cpu.user","timestamp":1356998400,"value":1,"tags":{"host":"web01","dc":"lga"}},
        {"metric":"sys.cpu.system","timestamp":1356998400,"value":2,"tags":{"host":"web01","dc":"lga"}},
    ]);
    assert_eq!(post_put(srv.addr, "", &pts.to_string()).status, 204);
    let srv = restart(srv, PROCESSING);

    let (s, root) = get(&srv, "/api/tree/branch?treeid=1");
    assert_eq!(s, 200, "{root}");
    let root = v(&root);
    assert_eq!(root["displayName"], "ROOT");
    assert_eq!(root["branchId"], "0001");
    assert_eq!(root["depth"], 0);
    assert_eq!(root["leaves"], Value::Null);
    let web01 = &root["branches"][0];
    assert_eq!(web01["displayName"], "web01");
    assert_eq!(web01["path"], json!({"0":"ROOT","1":"web01"}));
    // Down the path: web01 / sys / cpu, whose leaves name both series.
    let mut id = web01["branchId"].as_str().unwrap().to_string();
    for name in ["sys", "cpu"] {
        let (s, b) = get(&srv, &format!("/api/tree/branch?branch={id}"));
        assert_eq!(s, 200, "{b}");
        let b = v(&b);
        assert_eq!(b["branches"][0]["displayName"], name, "{b}");
        id = b["branches"][0]["branchId"].as_str().unwrap().to_string();
    }
    let cpu = v(&get(&srv, &format!("/api/tree/branch?branch={id}")).1);
    assert_eq!(cpu["depth"], 3);
    assert_eq!(cpu["branches"], Value::Null);
    let leaves: Vec<Value> = cpu["leaves"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            assert_eq!(l["tsuid"].as_str().unwrap().len(), 30, "{l}");
            json!([l["displayName"], l["metric"], l["tags"]])
        })
        .collect();
    assert_eq!(
        leaves,
        [
            json!(["system", "sys.cpu.system", {"host":"web01","dc":"lga"}]),
            json!(["user", "sys.cpu.user", {"host":"web01","dc":"lga"}]),
        ],
        "{cpu}"
    );
    assert_eq!(
        get(&srv, "/api/tree/branch?branch=0001DEADBEEF"),
        (
            404,
            err(404, "Unable to locate branch '0001DEADBEEF' for tree '1'")
        )
    );
    assert_eq!(
        get(&srv, "/api/tree/branch"),
        (400, err(400, "Missing or invalid branch and tree IDs"))
    );
    assert_eq!(
        get(&srv, "/api/tree/branch?branch=01"),
        (
            400,
            err_details(400, "Branch ID was too short", "Branch ID was too short")
        )
    );
    assert_eq!(
        req(&srv, "POST", "/api/tree/branch?treeid=1", ""),
        (400, err(400, "Unsupported HTTP request method"))
    );
    assert_eq!(
        get(&srv, "/api/tree/collisions?treeid=1"),
        (200, "{}".into())
    );
}

#[test]
fn collisions_are_recorded_when_failures_are_stored() {
    let srv = TestServer::start(PROCESSING);
    create_tree(
        &srv,
        r#"{"name":"Colliding","enabled":true,"storeFailures":true}"#,
    );
    // Every series of a host gets the leaf name "sys".
    let rules = r#"[{"treeId":1,"level":0,"order":0,"type":"TAGK","field":"host"},
                    {"treeId":1,"level":1,"order":0,"type":"METRIC","regex":"^(sys)\\..*"}]"#;
    assert_eq!(req(&srv, "POST", "/api/tree/rules", rules).0, 204);
    let pts = json!([
        {"metric":"sys.a","timestamp":1356998400,"value":1,"tags":{"host":"h"}},
    ]);
    assert_eq!(post_put(srv.addr, "", &pts.to_string()).status, 204);
    let srv = restart(srv, PROCESSING);
    let pts = json!([
        {"metric":"sys.b","timestamp":1356998400,"value":1,"tags":{"host":"h"}},
    ]);
    assert_eq!(post_put(srv.addr, "", &pts.to_string()).status, 204);
    let srv = restart(srv, PROCESSING);
    assert_eq!(
        get(&srv, "/api/tree/collisions?treeid=1"),
        (200, r#"{"000002000001000001":"000001000001000001"}"#.into())
    );
    assert_eq!(
        get(
            &srv,
            "/api/tree/collisions?treeid=1&tsuids=000001000001000001"
        ),
        (200, "{}".into())
    );
    assert_eq!(
        req(
            &srv,
            "POST",
            "/api/tree/collisions",
            r#"{"treeId":1,"tsuids":["000002000001000001"]}"#
        ),
        (200, r#"{"000002000001000001":"000001000001000001"}"#.into())
    );
    assert_eq!(
        get(&srv, "/api/tree/notmatched?treeid=1"),
        (200, "{}".into())
    );
    assert_eq!(
        get(&srv, "/api/tree/collisions"),
        (400, err(400, "Missing parameter <code>treeid</code>"))
    );
    assert_eq!(
        req(&srv, "POST", "/api/tree/collisions", r#"{"tsuids":[]}"#),
        (400, err(400, "Missing or invalid Tree ID"))
    );
    assert_eq!(
        req(
            &srv,
            "POST",
            "/api/tree/notmatched",
            r#"{"treeId":1,"tsuids":"x"}"#
        ),
        (400, err(400, "Unable to convert the given data to a list"))
    );
    assert_eq!(
        get(&srv, "/api/tree/notmatched?treeid=2"),
        (404, err(404, "Unable to locate tree: 2"))
    );
    assert_eq!(
        req(&srv, "DELETE", "/api/tree/collisions?treeid=1", ""),
        (400, err(400, "Unsupported HTTP request method"))
    );
    // Deleting the branches takes the collisions too.
    assert_eq!(req(&srv, "DELETE", "/api/tree?treeid=1", "").0, 204);
    assert_eq!(
        get(&srv, "/api/tree/collisions?treeid=1"),
        (200, "{}".into())
    );
    assert_eq!(get(&srv, "/api/tree/branch?treeid=1").0, 404);
}

#[test]
fn test_runs_series_through_a_tree_without_storing() {
    let srv = TestServer::start(&[
        ("tsd.core.auto_create_metrics", "true"),
        ("tsd.core.meta.enable_realtime_ts", "true"),
        ("tsd.core.meta.enable_tsuid_tracking", "true"),
    ]);
    host_metric_tree(&srv, false);
    let pts =
        json!([{"metric":"sys.cpu.user","timestamp":1356998400,"value":1,"tags":{"host":"web01"}}]);
    assert_eq!(post_put(srv.addr, "?sync", &pts.to_string()).status, 204);
    let (s, t) = get(
        &srv,
        "/api/tree/test?treeid=1&tsuids=000001000001000001,000009000001000001",
    );
    assert_eq!(s, 200, "{t}");
    let r = v(&t);
    let ok = &r["000001000001000001"];
    assert_eq!(ok["meta"]["tsuid"], "000001000001000001");
    assert_eq!(ok["meta"]["metric"]["name"], "sys.cpu.user");
    assert_eq!(
        ok["messages"],
        json!([
            "Processing rule: [1:0:0:TAGK]",
            "Matched tagk [host] for rule: [1:0:0:TAGK]",
            "Processing rule: [1:1:0:METRIC]",
            "Processing rule: [1:1:0:METRIC]",
            "Processing rule: [1:1:0:METRIC]",
            "Depth [5] Adding leaf [name: user tsuid: 000001000001000001] to parent branch [Name: [cpu]]",
            "Depth [4] Adding branch: Name: [cpu] to parent: Name: [sys]",
            "Depth [3] Adding branch: Name: [sys] to parent: Name: [web01]",
        ]),
        "{t}"
    );
    assert_eq!(ok["branch"]["displayName"], "ROOT");
    assert_eq!(ok["branch"]["branches"][0]["displayName"], "web01");
    assert_eq!(
        ok["branch"]["branches"][0]["branches"][0]["branches"][0]["leaves"][0]["displayName"],
        "user"
    );
    assert_eq!(
        r["000009000001000001"],
        json!({"branch":null,"meta":null,"messages":["Unable to locate TSUID meta data"]})
    );
    // Nothing was stored.
    assert_eq!(get(&srv, "/api/tree/branch?treeid=1").0, 404);
    // The same by POST; errors.
    let (s, _) = req(
        &srv,
        "POST",
        "/api/tree/test",
        r#"{"treeId":1,"tsuids":["000001000001000001"]}"#,
    );
    assert_eq!(s, 200);
    assert_eq!(
        get(&srv, "/api/tree/test?treeid=1"),
        (400, err(400, "Missing or empty TSUID list"))
    );
    assert_eq!(
        req(&srv, "POST", "/api/tree/test", r#"{"tsuids":["01"]}"#),
        (400, err(400, "Missing or invalid Tree ID"))
    );
    assert_eq!(
        get(&srv, "/api/tree/test?treeid=7&tsuids=000001000001000001"),
        (404, err(404, "Unable to locate tree: 7"))
    );
    assert_eq!(
        req(
            &srv,
            "DELETE",
            "/api/tree/test?treeid=1&tsuids=000001000001000001",
            ""
        ),
        (400, err(400, "Unsupported HTTP request method"))
    );
    assert_eq!(get(&srv, "/api/tree/test?treeid=1&tsuids=zz").0, 400);

    // Several series: 2.4.1 shows the last one's path in every result.
    let pts =
        json!([{"metric":"sys.mem","timestamp":1356998400,"value":1,"tags":{"host":"web02"}}]);
    assert_eq!(post_put(srv.addr, "?sync", &pts.to_string()).status, 204);
    let (s, t) = get(
        &srv,
        "/api/tree/test?treeid=1&tsuids=000001000001000001,000002000001000002",
    );
    assert_eq!(s, 200, "{t}");
    let r = v(&t);
    assert_eq!(
        r["000001000001000001"]["branch"],
        r["000002000001000002"]["branch"]
    );
    assert_eq!(
        r["000001000001000001"]["branch"]["branches"][0]["displayName"],
        "web02"
    );
    assert_eq!(
        r["000001000001000001"]["messages"][1],
        "Matched tagk [host] for rule: [1:0:0:TAGK]"
    );

    // A TSUID whose UID lost its name.
    let mut srv = srv;
    srv.stop();
    let dir = std::mem::replace(&mut srv.dir, tempfile::tempdir().unwrap());
    drop(srv);
    let r = common::tsdb(dir.path(), &["uid", "delete", "tagv", "web02"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let srv = TestServer::start_in(dir, &[]);
    assert_eq!(
        get(&srv, "/api/tree/test?treeid=1&tsuids=000002000001000002"),
        (
            200,
            r#"{"000002000001000002":{"meta":null,"messages":["TSUID was missing a UID name: No such unique ID for 'tagv': [0, 0, 2]"],"branch":null}}"#
                .into()
        )
    );
}

#[test]
fn treesync_and_treepurge_on_the_command_line() {
    // Series written with TSMeta but no tree processing.
    let mut srv = TestServer::start(&[
        ("tsd.core.auto_create_metrics", "true"),
        ("tsd.core.meta.enable_realtime_ts", "true"),
        ("tsd.core.meta.enable_tsuid_tracking", "true"),
    ]);
    host_metric_tree(&srv, false);
    let pts = json!([
        {"metric":"sys.cpu.user","timestamp":1356998400,"value":1,"tags":{"host":"web01"}},
        {"metric":"sys.mem","timestamp":1356998400,"value":1,"tags":{"host":"web02"}},
    ]);
    assert_eq!(post_put(srv.addr, "?sync", &pts.to_string()).status, 204);
    srv.stop();
    let dir = std::mem::replace(&mut srv.dir, tempfile::tempdir().unwrap());
    drop(srv);
    let d = dir.path();
    // Off by configuration: nothing done, successfully.
    let r = common::tsdb(d, &["uid", "treesync"]);
    assert_eq!((r.code, r.stdout.as_str()), (0, ""), "{}", r.stderr);
    let conf = d.join("opentsdb.conf");
    std::fs::write(&conf, "tsd.core.tree.enable_processing = true\n").unwrap();
    let conf = conf.to_str().unwrap();
    let r = common::tsdb(d, &["--config", conf, "uid", "treesync"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .starts_with("Processed 2 series through 1 enabled trees: 2 leaves added"),
        "{}",
        r.stdout
    );
    // fsck does not count tree rows as errors.
    let r = common::tsdb(d, &["fsck", "--full-scan"]);
    assert!(r.stdout.contains("\nTotal Errors: 0\n"), "{}", r.stdout);

    let srv = TestServer::start_in(dir, &[]);
    let root = v(&get(&srv, "/api/tree/branch?treeid=1").1);
    let hosts: Vec<&str> = root["branches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["displayName"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, ["web01", "web02"]);
    let mut srv = srv;
    srv.stop();
    let dir = std::mem::replace(&mut srv.dir, tempfile::tempdir().unwrap());
    drop(srv);
    let d = dir.path();
    let r = common::tsdb(d, &["uid", "treepurge"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.starts_with("Wrong number of arguments"),
        "{}",
        r.stderr
    );
    let r = common::tsdb(d, &["uid", "treepurge", "x"]);
    assert_eq!(r.code, 3);
    let r = common::tsdb(d, &["uid", "treepurge", "1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.starts_with("Deleted 8 cells of tree 1\n"),
        "{}",
        r.stdout
    );
    let r = common::tsdb(d, &["uid", "treepurge", "1", "true"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let srv = TestServer::start_in(dir, &[]);
    assert_eq!(get(&srv, "/api/tree"), (200, "[]".into()));
}

#[test]
fn metasync_runs_the_tsmeta_it_creates_through_the_trees() {
    // Series without TSMeta (no real-time meta), and a tree.
    let mut srv = TestServer::start(&[("tsd.core.auto_create_metrics", "true")]);
    host_metric_tree(&srv, false);
    let pts =
        json!([{"metric":"sys.cpu.user","timestamp":1356998400,"value":1,"tags":{"host":"web01"}}]);
    assert_eq!(post_put(srv.addr, "?sync", &pts.to_string()).status, 204);
    srv.stop();
    let dir = std::mem::replace(&mut srv.dir, tempfile::tempdir().unwrap());
    drop(srv);
    let d = dir.path();
    // Nothing to sync yet: no series has a TSMeta.
    let conf = d.join("opentsdb.conf");
    std::fs::write(&conf, "tsd.core.tree.enable_processing = true\n").unwrap();
    let conf = conf.to_str().unwrap();
    let r = common::tsdb(d, &["--config", conf, "uid", "treesync"]);
    assert!(r.stdout.starts_with("Processed 0 series"), "{}", r.stdout);
    let r = common::tsdb(d, &["--config", conf, "uid", "metasync"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let srv = TestServer::start_in(dir, &[]);
    let root = v(&get(&srv, "/api/tree/branch?treeid=1").1);
    assert_eq!(root["branches"][0]["displayName"], "web01", "{root}");
}

/// Figures, not a check: how long tree processing takes for new series
/// (in the background, off the put path) and for `treesync`, and what it
/// costs the appends. `cargo test --release --test it -- --ignored
/// tree_processing_figures --nocapture`.
#[test]
#[ignore]
fn tree_processing_figures() {
    use rtsdb::db::{Db, DbOptions, PendingPoint};
    use rtsdb::model::Value;
    use rtsdb::tree::{RuleType, TreeDefinition, TreeRule};
    use std::time::Instant;

    const SERIES: usize = 20_000;
    let run = |processing: bool| {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = DbOptions::new(dir.path());
        opts.auto_create.metrics = true;
        opts.write.meta.realtime_ts = true;
        opts.write.meta.tsuid_tracking = true;
        opts.write.tree_processing = processing;
        let db = Db::open(&opts).unwrap();
        db.trees()
            .put_definition(
                1,
                &TreeDefinition {
                    name: "bench".into(),
                    enabled: true,
                    ..Default::default()
                },
            )
            .unwrap();
        for (level, kind, field, sep) in [
            (0, RuleType::Tagk, "dc", ""),
            (1, RuleType::Tagk, "host", ""),
            (2, RuleType::Metric, "", "\\."),
        ] {
            let mut r = TreeRule::new(1);
            r.kind = Some(kind);
            r.level = level;
            r.field = field.into();
            r.separator = sep.into();
            db.trees().put_rule(&r).unwrap();
        }
        let mut key = String::new();
        let started = Instant::now();
        for i in 0..SERIES {
            let host = format!("web{:05}", i / 10);
            let dc = format!("dc{}", i % 4);
            let metric = format!("sys.cpu.m{}", i % 10);
            let (series, ts) = db
                .resolve(
                    &metric,
                    1356998400,
                    Value::Int(1),
                    &[("host", &host), ("dc", &dc)],
                    &mut key,
                )
                .unwrap();
            db.append(&[PendingPoint {
                series,
                ts,
                value: Value::Int(1),
            }])
            .unwrap();
        }
        let appended = started.elapsed();
        let started = Instant::now();
        db.flush_all().unwrap();
        let flushed = started.elapsed();
        (db, dir, appended, flushed)
    };
    let (_db, _d, off_append, off_flush) = run(false);
    let (db, _dir, on_append, on_flush) = run(true);
    println!(
        "{SERIES} new series, one point each: appends {:?} without tree processing, {:?} with; \
         flush (rows, counters, and the queued series through 1 tree of 3 levels) {:?} without, {:?} with",
        off_append, on_append, off_flush, on_flush
    );
    let root = db.tree_branch(&[0, 1]).unwrap().unwrap();
    assert_eq!(root.branches.unwrap().len(), 4);
    let started = Instant::now();
    let done = db.sync_trees().unwrap();
    println!(
        "treesync of {} series (all already in the tree): {:?}",
        done.series,
        started.elapsed()
    );
}

#[test]
fn a_running_tsd_processes_new_series_in_the_background() {
    let srv = TestServer::start(PROCESSING);
    host_metric_tree(&srv, false);
    let pts =
        json!([{"metric":"sys.cpu.user","timestamp":1356998400,"value":1,"tags":{"host":"web01"}}]);
    assert_eq!(post_put(srv.addr, "", &pts.to_string()).status, 204);
    // The flusher's next tick takes the queued series through the tree;
    // waited for (not timed): the put did not wait for it.
    let mut found = None;
    for _ in 0..600 {
        let (s, t) = get(&srv, "/api/tree/branch?treeid=1");
        if s == 200 && v(&t)["branches"].is_array() {
            found = Some(v(&t));
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let root = found.expect("the series reached the tree while the TSD ran");
    assert_eq!(root["branches"][0]["displayName"], "web01");
}
