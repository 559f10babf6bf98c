//! Every example on OpenTSDB 2.4's `/api/tree` documentation pages
//! (opentsdb.net `docs/source/api_http/tree/{index,branch,collisions,
//! notmatched,rule,rules,test}.rst`), sent through the HTTP API to a TSD
//! holding the data the example implies, and checked against the
//! documented response.
//!
//! Several examples disagree with 2.4.1's `TreeRpc`, which is what clients
//! talk to, so the code decides and each such case says why:
//! - query string parameter names are case-sensitive in 2.4.1
//!   (`HttpQuery.getQueryStringParam`), and `TreeRpc` reads `treeid`,
//!   `branch`: the pages' `treeId=`, `tree=` and `branchid=` are not
//!   seen. Each example is sent as written (and answered as 2.4.1 does)
//!   and then with the parameter the code reads.
//! - a tree created from a JSON body is stored with the `created` the
//!   body gave (0); the pages show other timestamps.
//! - the pages' sample values (`"Network"` for a tree named `Network
//!   Tree`, a rule fetched at level 0 shown at level 1, three-byte TSUIDs)
//!   are not what the code produces; the tests assert what it does
//!   produce for the same request.
//! - 2.4.1 never stores not-matched entries, its `Branch` has no
//!   `numLeaves`/`numBranches`, and it writes a tree's `enabled` before
//!   `rules`: see the tests below.

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

/// A successful JSON answer, parsed.
fn ok(srv: &TestServer, method: &str, path: &str, body: &str) -> Value {
    let (s, t) = req(srv, method, path, body);
    assert_eq!(s, 200, "{method} {path}: {t}");
    v(&t)
}

/// `value` with every `"created"` field taken out, for comparing answers
/// whose creation time is the clock's.
fn without_created(mut value: Value) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.remove("created");
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut value);
    value
}

/// Settings under which new series get TSMeta and go through the
/// enabled trees.
const PROCESSING: &[(&str, &str)] = &[
    ("tsd.core.auto_create_metrics", "true"),
    ("tsd.core.meta.enable_realtime_ts", "true"),
    ("tsd.core.meta.enable_tsuid_tracking", "true"),
    ("tsd.core.tree.enable_processing", "true"),
];

/// Stops and restarts the TSD on the same data: closing the database
/// finishes the tree processing of the series written so far, so what
/// follows sees it without waiting on a clock.
fn restart(mut srv: TestServer, settings: &[(&str, &str)]) -> TestServer {
    srv.stop();
    let dir = std::mem::replace(&mut srv.dir, tempfile::tempdir().unwrap());
    drop(srv);
    TestServer::start_in(dir, settings)
}

fn put(srv: &TestServer, points: Value) {
    let r = post_put(srv.addr, "?sync", &points.to_string());
    assert_eq!(r.status, 204, "{}", r.text());
}

/// The rule object of the pages' examples: every field present, the
/// unset ones empty.
fn rule(tree: i32, level: i32, order: i32, kind: &str, fields: Value) -> Value {
    let mut r = json!({"type":kind,"field":"","regex":"","separator":"","description":"",
        "notes":"","level":level,"order":order,"treeId":tree,"customField":"",
        "regexGroupIdx":0,"displayFormat":""});
    for (k, val) in fields.as_object().unwrap() {
        r[k] = val.clone();
    }
    r
}

// ---------------------------------------------------------------- index.rst

/// `/api/tree`: "Example GET All Trees Query", "Example GET Single Tree",
/// "Example POST Create Request", "Example POST Edit Request", "Example
/// DELETE Request".
#[test]
fn tree_page_examples() {
    let srv = TestServer::start(&[]);
    // The two trees of the "GET All Trees" example, with their rules.
    ok(
        &srv,
        "POST",
        "/api/tree",
        r#"{"name":"Test Tree","description":"My Description","notes":"Details","enabled":true}"#,
    );
    ok(
        &srv,
        "POST",
        "/api/tree",
        r#"{"name":"2nd Tree","description":"Other Tree"}"#,
    );
    for (tree, host_desc, metric_notes) in [(1, "Hostname rule", "Metric rule"), (2, "", "")] {
        let rules = json!([
            {"treeId":tree,"level":0,"order":0,"type":"TAGK","field":"host","description":host_desc},
            {"treeId":tree,"level":1,"order":0,"type":"METRIC","notes":metric_notes},
        ]);
        assert_eq!(
            req(&srv, "POST", "/api/tree/rules", &rules.to_string()),
            (204, String::new())
        );
    }
    let first = json!({
        "name":"Test Tree","description":"My Description","notes":"Details",
        "rules":{
            "0":{"0":rule(1, 0, 0, "TAGK", json!({"field":"host","description":"Hostname rule"}))},
            "1":{"0":rule(1, 1, 0, "METRIC", json!({"notes":"Metric rule"}))}},
        "treeId":1,"strictMatch":false,"storeFailures":false,"enabled":true});
    let second = json!({
        "name":"2nd Tree","description":"Other Tree","notes":"",
        "rules":{
            "0":{"0":rule(2, 0, 0, "TAGK", json!({"field":"host"}))},
            "1":{"0":rule(2, 1, 0, "METRIC", json!({}))}},
        "treeId":2,"strictMatch":false,"storeFailures":false,"enabled":false});

    // GET all trees: `http://localhost:4242/api/tree`. The trees were
    // created from JSON bodies, so 2.4.1 stored `created` as 0.
    let all = ok(&srv, "GET", "/api/tree", "");
    for t in all.as_array().unwrap() {
        assert_eq!(t["created"], 0, "{t}");
    }
    assert_eq!(without_created(all), json!([first, second]));

    // GET one tree: the page's URL `/api/treeId?tree=1` names no endpoint;
    // the response it shows is tree 2's, which `treeid=2` fetches.
    assert_eq!(
        get(&srv, "/api/treeId?tree=1"),
        (404, err(404, "Endpoint not found"))
    );
    let one = ok(&srv, "GET", "/api/tree?treeid=2", "");
    assert_eq!(one["created"], 0);
    assert_eq!(without_created(one), second);
    // A parameter given twice counts with its last value, as 2.4.1's
    // `getQueryStringParam` reads it.
    assert_eq!(
        ok(&srv, "GET", "/api/tree?treeid=1&treeid=2", "")["name"],
        "2nd Tree"
    );
    // A tree that does not exist: 404 with a message, as the page says.
    assert_eq!(
        get(&srv, "/api/tree?treeid=9"),
        (404, err(404, "Unable to locate tree: 9"))
    );

    // POST create: `?name=Network%20Tree&method_override=post`. The page
    // shows the name as "Network"; 2.4.1 stores the name given. From the
    // query string, `created` is the time of creation.
    let before = chrono::Utc::now().timestamp();
    let created = ok(
        &srv,
        "GET",
        "/api/tree?name=Network%20Tree&method_override=post",
        "",
    );
    let after = chrono::Utc::now().timestamp();
    let at = created["created"].as_i64().unwrap();
    assert!((before..=after).contains(&at), "{created}");
    assert_eq!(
        without_created(created),
        json!({"name":"Network Tree","description":"","notes":"","rules":null,
               "treeId":3,"strictMatch":false,"storeFailures":false,"enabled":false})
    );

    // POST edit, as written: `treeId=3` is not `treeid`, so 2.4.1 takes
    // it for a new tree without a name.
    let m = "Tree was missing the name";
    assert_eq!(
        get(
            &srv,
            "/api/tree?treeId=3&description=Network%20Device%20Information&method_override=post"
        ),
        (400, err_details(400, m, m))
    );
    let edited = ok(
        &srv,
        "GET",
        "/api/tree?treeid=3&description=Network%20Device%20Information&method_override=post",
        "",
    );
    assert_eq!(edited["created"], at);
    // The page lists `enabled` last; 2.4.1's Jackson writes the properties
    // backed by fields (name, description, notes, enabled, rules, created)
    // before the getter-only ones (treeId, strictMatch, storeFailures).
    assert_eq!(
        get(&srv, "/api/tree?treeid=3").1,
        format!(
            concat!(
                r#"{{"name":"Network Tree","description":"Network Device Information","#,
                r#""notes":"","enabled":false,"rules":null,"created":{},"treeId":3,"#,
                r#""strictMatch":false,"storeFailures":false}}"#
            ),
            at
        )
    );
    assert_eq!(
        without_created(edited),
        json!({"name":"Network Tree","description":"Network Device Information","notes":"",
               "rules":null,"treeId":3,"strictMatch":false,"storeFailures":false,"enabled":false})
    );
    // "if no changes were present ... the response will be a 304".
    assert_eq!(
        get(&srv, "/api/tree?treeid=3&method_override=post"),
        (304, String::new())
    );

    // DELETE, as written: `tree=1` is not `treeid`; tree 0 is no valid ID.
    let m = "Invalid Tree ID";
    assert_eq!(
        get(&srv, "/api/tree?tree=1&method_override=delete"),
        (400, err_details(400, m, m))
    );
    // With the tree ID: 204 without a body; the definition stays...
    assert_eq!(
        get(&srv, "/api/tree?treeid=1&method_override=delete"),
        (204, String::new())
    );
    assert_eq!(
        ok(&srv, "GET", "/api/tree?treeid=1", "")["name"],
        "Test Tree"
    );
    // ... unless `definition=true`; then the tree is gone: 404.
    assert_eq!(
        get(
            &srv,
            "/api/tree?treeid=1&definition=true&method_override=delete"
        ),
        (204, String::new())
    );
    assert_eq!(
        get(&srv, "/api/tree?treeid=1"),
        (404, err(404, "Unable to locate tree: 1"))
    );
    assert_eq!(
        get(&srv, "/api/tree?treeid=1&method_override=delete"),
        (404, err(404, "Unable to locate tree: 1"))
    );
}

// --------------------------------------------------------------- branch.rst

/// `/api/tree/branch`: "Example Root GET Query" and "Example Branch GET
/// Query", on a tree whose rules put `sys.cpu.0.user` at ROOT / sys / cpu
/// as the leaf "user" and `sys.cpu.mboard.temp` under ROOT / sys / cpu /
/// mboard, as the pages' responses show. Branch IDs are the tree ID and
/// the Java `String.hashCode` of each name ("sys" = 0001BECD, "cpu" =
/// 000181A8), so they match the page's byte for byte.
#[test]
fn branch_page_examples() {
    let srv = TestServer::start(PROCESSING);
    ok(
        &srv,
        "POST",
        "/api/tree",
        r#"{"name":"Docs","enabled":true}"#,
    );
    let rules = json!([
        {"treeId":1,"level":0,"order":0,"type":"METRIC","regex":"^(sys)\\..*"},
        {"treeId":1,"level":1,"order":0,"type":"METRIC","regex":"^sys\\.(cpu)\\..*"},
        {"treeId":1,"level":2,"order":0,"type":"METRIC","regex":"^sys\\.cpu\\.(mboard)\\..*"},
        {"treeId":1,"level":2,"order":1,"type":"METRIC","regex":"^sys\\.cpu\\.[0-9]+\\.(user)$"},
        {"treeId":1,"level":3,"order":0,"type":"METRIC","regex":"^sys\\.cpu\\.mboard\\.(.*)$"},
    ]);
    assert_eq!(
        req(&srv, "POST", "/api/tree/rules", &rules.to_string()),
        (204, String::new())
    );
    // The leaf's TSUID on the page is 000001000001000001: the first metric,
    // tag key and tag value.
    put(
        &srv,
        json!([{"metric":"sys.cpu.0.user","timestamp":1356998400,"value":1,"tags":{"host":"web01"}}]),
    );
    put(
        &srv,
        json!([{"metric":"sys.cpu.mboard.temp","timestamp":1356998400,"value":1,"tags":{"host":"web01"}}]),
    );
    let srv = restart(srv, PROCESSING);

    // Root: `?treeid=1`. Byte for byte the page's response, in its order.
    assert_eq!(
        get(&srv, "/api/tree/branch?treeid=1"),
        (
            200,
            concat!(
                r#"{"leaves":null,"branches":[{"leaves":null,"branches":null,"#,
                r#""path":{"0":"ROOT","1":"sys"},"treeId":1,"displayName":"sys","#,
                r#""branchId":"00010001BECD","depth":1}],"path":{"0":"ROOT"},"treeId":1,"#,
                r#""displayName":"ROOT","branchId":"0001","depth":0}"#
            )
            .into()
        )
    );

    // A branch, as written: `branchid` is not the `branch` parameter 2.4.1
    // reads, and without it or a tree ID the request is refused.
    assert_eq!(
        get(&srv, "/api/tree/branch?branchid=00010001BECD000181A8"),
        (400, err(400, "Missing or invalid branch and tree IDs"))
    );
    let expected = json!({
        "leaves":[{"metric":"sys.cpu.0.user","tags":{"host":"web01"},
                   "tsuid":"000001000001000001","displayName":"user"}],
        "branches":[{"leaves":null,"branches":null,
                     "path":{"0":"ROOT","1":"sys","2":"cpu","3":"mboard"},"treeId":1,
                     "displayName":"mboard","branchId":"00010001BECD000181A8BF992A99",
                     "depth":3}],
        "path":{"0":"ROOT","1":"sys","2":"cpu"},"treeId":1,"displayName":"cpu",
        "branchId":"00010001BECD000181A8","depth":2});
    // Byte for byte the page's response, in its order.
    let printed = concat!(
        r#"{"leaves":[{"metric":"sys.cpu.0.user","tags":{"host":"web01"},"#,
        r#""tsuid":"000001000001000001","displayName":"user"}],"#,
        r#""branches":[{"leaves":null,"branches":null,"#,
        r#""path":{"0":"ROOT","1":"sys","2":"cpu","3":"mboard"},"treeId":1,"#,
        r#""displayName":"mboard","branchId":"00010001BECD000181A8BF992A99","depth":3}],"#,
        r#""path":{"0":"ROOT","1":"sys","2":"cpu"},"treeId":1,"displayName":"cpu","#,
        r#""branchId":"00010001BECD000181A8","depth":2}"#
    );
    assert_eq!(v(printed), expected);
    assert_eq!(
        get(&srv, "/api/tree/branch?branch=00010001BECD000181A8"),
        (200, printed.into())
    );
    // "If used in combination with a branchId, the tree ID will be ignored."
    assert_eq!(
        ok(
            &srv,
            "GET",
            "/api/tree/branch?treeid=2&branch=00010001BECD000181A8",
            ""
        ),
        expected
    );
    // "If the requested tree or branch did not exist ... a 404".
    assert_eq!(
        get(&srv, "/api/tree/branch?treeid=2"),
        (404, err(404, "Unable to locate branch '0002' for tree '2'"))
    );
    assert_eq!(
        get(&srv, "/api/tree/branch?branch=00010001BECD000181A9"),
        (
            404,
            err(
                404,
                "Unable to locate branch '00010001BECD000181A9' for tree '1'"
            )
        )
    );
    // "the branch endpoint only supports the GET verb".
    assert_eq!(
        get(&srv, "/api/tree/branch?treeid=1&method_override=post"),
        (400, err(400, "Unsupported HTTP request method"))
    );
}

// ---------------------------------------------- collisions.rst, notmatched.rst

/// `/api/tree/collisions`: "Example Request". The page's three-byte TSUIDs
/// name no series; two real series whose leaves collide (every metric of
/// a host becomes the leaf "sys") give a recorded collision, keyed by the
/// series left out, valued by the leaf's series.
#[test]
fn collisions_page_example() {
    let srv = TestServer::start(PROCESSING);
    ok(
        &srv,
        "POST",
        "/api/tree",
        r#"{"name":"Colliding","enabled":true,"storeFailures":true}"#,
    );
    let rules = r#"[{"treeId":1,"level":0,"order":0,"type":"TAGK","field":"host"},
                    {"treeId":1,"level":1,"order":0,"type":"METRIC","regex":"^(sys)\\..*"}]"#;
    assert_eq!(req(&srv, "POST", "/api/tree/rules", rules).0, 204);
    put(
        &srv,
        json!([{"metric":"sys.a","timestamp":1356998400,"value":1,"tags":{"host":"h"}}]),
    );
    let srv = restart(srv, PROCESSING);
    put(
        &srv,
        json!([{"metric":"sys.b","timestamp":1356998400,"value":1,"tags":{"host":"h"}}]),
    );
    let srv = restart(srv, PROCESSING);

    // As written, `treeId` is not the required `treeid`.
    assert_eq!(
        get(&srv, "/api/tree/collisions?treeId=1&tsuids=010101,020202"),
        (400, err(400, "Missing parameter <code>treeid</code>"))
    );
    // The page's TSUIDs collided with nothing: only collisions found are
    // returned.
    assert_eq!(
        get(&srv, "/api/tree/collisions?treeid=1&tsuids=010101,020202"),
        (200, "{}".into())
    );
    assert_eq!(
        get(
            &srv,
            "/api/tree/collisions?treeid=1&tsuids=000002000001000001,000001000001000001"
        ),
        (200, r#"{"000002000001000001":"000001000001000001"}"#.into())
    );
    // Without TSUIDs: all of the tree's collisions.
    assert_eq!(
        get(&srv, "/api/tree/collisions?treeid=1"),
        (200, r#"{"000002000001000001":"000001000001000001"}"#.into())
    );
    // "If the requested tree did not exist ... a 404"; "invalid data ... 400".
    assert_eq!(
        get(&srv, "/api/tree/collisions?treeid=2&tsuids=010101"),
        (404, err(404, "Unable to locate tree: 2"))
    );
    let m = "contains illegal character for hexBinary: zz";
    assert_eq!(
        get(&srv, "/api/tree/collisions?treeid=1&tsuids=zz"),
        (400, err_details(400, m, m))
    );
    // An odd count of hex digits: 2.4.1's column name is one byte short of
    // the padded UID and the request fails (a 500 there); rtsdb refuses it
    // as the client's error. Illegal characters are found first.
    let m = "TSUID has an odd number of hex digits: 00000200000100000";
    assert_eq!(
        get(
            &srv,
            "/api/tree/collisions?treeid=1&tsuids=00000200000100000,000002000001000001"
        ),
        (400, err_details(400, m, m))
    );
    assert_eq!(
        get(&srv, "/api/tree/notmatched?treeid=1&tsuids=010"),
        (
            400,
            err_details(
                400,
                "TSUID has an odd number of hex digits: 010",
                "TSUID has an odd number of hex digits: 010"
            )
        )
    );
    let m = "contains illegal character for hexBinary: 0zzz";
    assert_eq!(
        get(&srv, "/api/tree/collisions?treeid=1&tsuids=zzz,010"),
        (400, err_details(400, m, m))
    );
}

/// `/api/tree/notmatched`: "Example Request". The page describes a
/// series that fails a level of a `strictMatch` tree as recorded (with
/// `storeFailures`) and shows "Failed rule 0:0" messages. 2.4.1's
/// `TreeBuilder` records one only when the tree object already holds
/// not-matched entries, which a tree loaded from storage never does: the
/// series is left out of the tree and logged, and the endpoint answers an
/// empty map. The code decides; `/api/tree/test` shows why the series
/// failed (`[tree:level:order:type]` of each rule that did not match).
#[test]
fn notmatched_page_example() {
    let srv = TestServer::start(PROCESSING);
    ok(
        &srv,
        "POST",
        "/api/tree",
        r#"{"name":"Strict","enabled":true,"strictMatch":true,"storeFailures":true}"#,
    );
    let rules = r#"[{"treeId":1,"level":0,"order":0,"type":"TAGK","field":"host"},
                    {"treeId":1,"level":1,"order":0,"type":"TAGK","field":"dc"},
                    {"treeId":1,"level":1,"order":1,"type":"TAGK","field":"rack"}]"#;
    assert_eq!(req(&srv, "POST", "/api/tree/rules", rules).0, 204);
    // Matches every level.
    put(
        &srv,
        json!([{"metric":"sys.a","timestamp":1356998400,"value":1,"tags":{"host":"h","dc":"lga"}}]),
    );
    let srv = restart(srv, PROCESSING);
    // Fails level 1: neither `dc` nor `rack`.
    put(
        &srv,
        json!([{"metric":"sys.b","timestamp":1356998400,"value":1,"tags":{"host":"h"}}]),
    );
    let srv = restart(srv, PROCESSING);

    assert_eq!(
        get(&srv, "/api/tree/notmatched?treeId=1&tsuids=010101,020202"),
        (400, err(400, "Missing parameter <code>treeid</code>"))
    );
    assert_eq!(
        get(&srv, "/api/tree/notmatched?treeid=1&tsuids=010101,020202"),
        (200, "{}".into())
    );
    // The failing series, sys.b{host=h}, is 000002000001000001.
    let failed = "000002000001000001";
    assert_eq!(
        get(
            &srv,
            &format!("/api/tree/notmatched?treeid=1&tsuids={failed}")
        ),
        (200, "{}".into())
    );
    assert_eq!(
        get(&srv, "/api/tree/notmatched?treeid=1"),
        (200, "{}".into())
    );
    // It is not in the tree; the matching series is.
    let root = ok(&srv, "GET", "/api/tree/branch?treeid=1", "");
    let h = ok(
        &srv,
        "GET",
        &format!(
            "/api/tree/branch?branch={}",
            root["branches"][0]["branchId"].as_str().unwrap()
        ),
        "",
    );
    // ROOT / h holds the one leaf, "lga": sys.a's.
    let leaves = h["leaves"].as_array().unwrap_or_else(|| panic!("{h}"));
    assert_eq!(leaves.len(), 1, "{h}");
    assert_eq!(
        (&leaves[0]["displayName"], &leaves[0]["metric"]),
        (&json!("lga"), &json!("sys.a")),
        "{h}"
    );
    let tested = ok(
        &srv,
        "GET",
        &format!("/api/tree/test?treeid=1&tsuids={failed}"),
        "",
    );
    let messages = tested[failed]["messages"]
        .as_array()
        .unwrap_or_else(|| panic!("{tested}"));
    assert!(
        messages.iter().any(|m| m
            .as_str()
            .unwrap()
            .starts_with("TSUID failed to match one or more rule levels, will not add: ")),
        "{tested}"
    );
    assert_eq!(
        get(&srv, "/api/tree/notmatched?treeid=3"),
        (404, err(404, "Unable to locate tree: 3"))
    );
}

// ----------------------------------------------------------------- rule.rst

/// The rule.rst "Example Response", as printed.
const SPLIT_RULE: &str = r#"{"type":"METRIC","field":"","regex":"","separator":"\\.","description":"Split the metric on periods","notes":"","level":1,"order":0,"treeId":1,"customField":"","regexGroupIdx":0,"displayFormat":""}"#;

/// `/api/tree/rule`: "Example GET Query", "Example Query String Request",
/// "Example Content Request", "Example DELETE Request".
#[test]
fn rule_page_examples() {
    let srv = TestServer::start(&[]);
    ok(&srv, "POST", "/api/tree", r#"{"name":"Rules"}"#);
    let split = rule(
        1,
        1,
        0,
        "METRIC",
        json!({"separator":"\\.","description":"Split the metric on periods"}),
    );

    // Content request: the page's body, answered with the page's response.
    let body = r#"{
        "type": "METRIC",
        "separator": "\\.",
        "description": "Split the metric on periods",
        "level": 1,
        "order": 0,
        "treeId": 1
    }"#;
    let (s, t) = req(&srv, "POST", "/api/tree/rule", body);
    assert_eq!(s, 200, "{t}");
    // In the page's field order, too.
    assert_eq!(t, SPLIT_RULE);
    assert_eq!(v(SPLIT_RULE), split);
    // Posting it again changes nothing: 304.
    assert_eq!(
        req(&srv, "POST", "/api/tree/rule", body),
        (304, String::new())
    );

    // GET, as written: `treeId` is not the required `treeid`.
    assert_eq!(
        get(&srv, "/api/tree/rule?treeId=1&level=0&order=0"),
        (400, err(400, "Missing parameter <code>treeid</code>"))
    );
    // The page shows the level 1 rule; level 0 has none yet: 404.
    assert_eq!(
        get(&srv, "/api/tree/rule?treeid=1&level=0&order=0"),
        (404, err(404, "Unable to locate rule: [1:0:0:null]"))
    );
    assert_eq!(
        ok(&srv, "GET", "/api/tree/rule?treeid=1&level=1&order=0", ""),
        split
    );

    // Query string request, as written, then with `treeid`. The separator
    // is `\.`, percent-encoded as a client sends it.
    assert_eq!(
        get(
            &srv,
            "/api/tree/rule?treeId=1&level=0&order=0&type=METRIC&separator=%5C.&method_override=post"
        ),
        (400, err(400, "Missing parameter <code>treeid</code>"))
    );
    assert_eq!(
        ok(
            &srv,
            "GET",
            "/api/tree/rule?treeid=1&level=0&order=0&type=METRIC&separator=%5C.&method_override=post",
            ""
        ),
        rule(1, 0, 0, "METRIC", json!({"separator":"\\."}))
    );
    // "If invalid data was supplied a 400".
    assert_eq!(
        get(
            &srv,
            "/api/tree/rule?treeid=1&level=0&order=0&type=BOGUS&method_override=post"
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
    // "If the requested tree ... did not exist ... a 404".
    assert_eq!(
        get(&srv, "/api/tree/rule?treeid=5&level=0&order=0"),
        (404, err(404, "Unable to locate tree: 5"))
    );

    // DELETE, as written, then with `treeid`: 204, and the rule is gone.
    assert_eq!(
        get(
            &srv,
            "/api/tree/rule?treeId=1&level=0&order=0&method_override=delete"
        ),
        (400, err(400, "Missing parameter <code>treeid</code>"))
    );
    assert_eq!(
        get(
            &srv,
            "/api/tree/rule?treeid=1&level=0&order=0&method_override=delete"
        ),
        (204, String::new())
    );
    assert_eq!(
        get(
            &srv,
            "/api/tree/rule?treeid=1&level=0&order=0&method_override=delete"
        ),
        (404, err(404, "Unable to locate rule: [1:0:0:null]"))
    );
    let tree = ok(&srv, "GET", "/api/tree?treeid=1", "");
    assert_eq!(tree["rules"], json!({"1":{"0":split}}));
}

// ---------------------------------------------------------------- rules.rst

/// `/api/tree/rules`: "Example POST Request" (which the page gives as a
/// `/api/tree/rule` query string), "Example Content Request", "Example
/// DELETE Request".
#[test]
fn rules_page_examples() {
    let srv = TestServer::start(&[]);
    ok(&srv, "POST", "/api/tree", r#"{"name":"Bulk"}"#);

    // The POST example is the single-rule endpoint with `separator=.`.
    assert_eq!(
        get(
            &srv,
            "/api/tree/rule?treeId=1&level=0&order=0&type=METRIC&separator=.&method_override=post"
        ),
        (400, err(400, "Missing parameter <code>treeid</code>"))
    );
    assert_eq!(
        ok(
            &srv,
            "GET",
            "/api/tree/rule?treeid=1&level=0&order=0&type=METRIC&separator=.&method_override=post",
            ""
        ),
        rule(1, 0, 0, "METRIC", json!({"separator":"."}))
    );

    // The content example as printed lacks a comma after "department": not
    // JSON, so 400.
    let printed = r#"[
        {"treeId": 1, "level": 0, "order": 0, "type": "METRIC",
         "description": "Metric split rule", "split": "\\."},
        {"treeId": 1, "level": 0, "order": 1, "type": "tagk", "field": "fqdn",
         "description": "Hostname for the device"},
        {"treeId": 1, "level": 1, "order": 0, "type": "tagk", "field": "department"
         "description": "Department that owns the device"}
    ]"#;
    let (s, t) = req(&srv, "POST", "/api/tree/rules", printed);
    assert_eq!(s, 400, "{t}");
    assert_eq!(v(&t)["error"]["message"], "Unable to parse the given JSON");
    // With the comma: 204 without a body. Rule types are read ignoring
    // case, and the unknown "split" is ignored (`TreeRule` ignores unknown
    // properties), so POST merges into the stored 0:0 rule and keeps its
    // separator.
    let fixed = printed.replace(
        r#""department"
"#,
        r#""department",
"#,
    );
    assert_eq!(
        req(&srv, "POST", "/api/tree/rules", &fixed),
        (204, String::new())
    );
    let merged = json!({
        "0":{"0":rule(1, 0, 0, "METRIC", json!({"separator":".","description":"Metric split rule"})),
             "1":rule(1, 0, 1, "TAGK", json!({"field":"fqdn","description":"Hostname for the device"}))},
        "1":{"0":rule(1, 1, 0, "TAGK",
                      json!({"field":"department","description":"Department that owns the device"}))}});
    assert_eq!(ok(&srv, "GET", "/api/tree?treeid=1", "")["rules"], merged);
    // PUT replaces the whole set: 0:0 loses its separator.
    assert_eq!(
        req(&srv, "PUT", "/api/tree/rules", &fixed),
        (204, String::new())
    );
    let mut replaced = merged.clone();
    replaced["0"]["0"]["separator"] = json!("");
    assert_eq!(ok(&srv, "GET", "/api/tree?treeid=1", "")["rules"], replaced);
    // Rules of different trees in one request: 400.
    assert_eq!(
        req(
            &srv,
            "POST",
            "/api/tree/rules",
            r#"[{"treeId":1,"level":0,"order":0,"type":"METRIC"},{"treeId":2,"level":0,"order":0,"type":"METRIC"}]"#
        ),
        (400, err(400, "All rules must belong to the same tree"))
    );
    // "GET verb is not supported for this endpoint".
    assert_eq!(
        get(&srv, "/api/tree/rules?treeid=1"),
        (400, err(400, "Unsupported HTTP request method"))
    );

    // DELETE, as written: `treeId` is not read, and tree 0 is no valid ID.
    let m = "Invalid Tree ID";
    assert_eq!(
        get(&srv, "/api/tree/rules?treeId=1&method_override=delete"),
        (400, err_details(400, m, m))
    );
    assert_eq!(
        get(&srv, "/api/tree/rules?treeid=1&method_override=delete"),
        (204, String::new())
    );
    assert_eq!(
        ok(&srv, "GET", "/api/tree?treeid=1", "")["rules"],
        Value::Null
    );
    // "If a tree does not have any rules, the DELETE request will still
    // return a 204"; a tree that does not exist is a 404.
    assert_eq!(
        get(&srv, "/api/tree/rules?treeid=1&method_override=delete"),
        (204, String::new())
    );
    assert_eq!(
        get(&srv, "/api/tree/rules?treeid=4&method_override=delete"),
        (404, err(404, "Unable to locate tree: 4"))
    );
}

// ----------------------------------------------------------------- test.rst

/// `/api/tree/test`: "Example Request" and "Example Error Response": the
/// series `sys.cpu.0{host=web-01.lga.mysite.com,type=user}` (TSUID
/// 000001000001000001000002000002) through a tree of a host level and a
/// metric level, and a TSUID with no TSMeta.
#[test]
fn test_page_examples() {
    let srv = TestServer::start(&[
        ("tsd.core.auto_create_metrics", "true"),
        ("tsd.core.meta.enable_realtime_ts", "true"),
        ("tsd.core.meta.enable_tsuid_tracking", "true"),
    ]);
    ok(&srv, "POST", "/api/tree", r#"{"name":"Test"}"#);
    let rules = r#"[{"treeId":1,"level":0,"order":0,"type":"TAGK","field":"host"},
                    {"treeId":1,"level":1,"order":0,"type":"METRIC"}]"#;
    assert_eq!(req(&srv, "POST", "/api/tree/rules", rules).0, 204);
    put(
        &srv,
        json!([{"metric":"sys.cpu.0","timestamp":1368979404,"value":1,
                "tags":{"host":"web-01.lga.mysite.com","type":"user"}}]),
    );

    let tsuid = "000001000001000001000002000002";
    // As written, `treeId` is not the required `treeid`.
    assert_eq!(
        get(&srv, &format!("/api/tree/test?treeId=1&tsuids={tsuid}")),
        (400, err(400, "Missing parameter <code>treeid</code>"))
    );
    let r = ok(
        &srv,
        "GET",
        &format!("/api/tree/test?treeid=1&tsuids={tsuid}"),
        "",
    );
    let uid = |uid: &str, kind: &str, name: &str| {
        json!({"uid":uid,"type":kind,"name":name,"description":"","notes":"",
               "custom":null,"displayName":""})
    };
    // The UIDs' and the TSMeta's creation times are the clock's (the page
    // shows 1368979404 and 0); everything else is the page's, except that
    // 2.4.1's `Branch` has no `numLeaves` / `numBranches` properties (the
    // page shows them on both branches; no getter in the code writes them).
    assert_eq!(
        without_created(r),
        json!({tsuid: {
            "messages":[
                "Processing rule: [1:0:0:TAGK]",
                "Matched tagk [host] for rule: [1:0:0:TAGK]",
                "Processing rule: [1:1:0:METRIC]",
                format!("Depth [3] Adding leaf [name: sys.cpu.0 tsuid: {tsuid}] to parent branch [Name: [web-01.lga.mysite.com]]"),
            ],
            "meta":{
                "tsuid":tsuid,
                "metric":uid("000001", "METRIC", "sys.cpu.0"),
                "tags":[uid("000001", "TAGK", "host"),
                        uid("000001", "TAGV", "web-01.lga.mysite.com"),
                        uid("000002", "TAGK", "type"),
                        uid("000002", "TAGV", "user")],
                "description":"","notes":"","units":"","retention":0,"max":"NaN","min":"NaN",
                "displayName":"","lastReceived":0,"totalDatapoints":0,"dataType":""},
            "branch":{
                "leaves":null,
                "branches":[{
                    "leaves":[{"metric":"","tags":null,"tsuid":tsuid,"displayName":"sys.cpu.0"}],
                    "branches":null,
                    "path":{"0":"ROOT","1":"web-01.lga.mysite.com"},
                    "treeId":1,"displayName":"web-01.lga.mysite.com","branchId":"0001247F7202",
                    "depth":1}],
                "path":{"0":"ROOT"},"treeId":1,"displayName":"ROOT","branchId":"0001",
                "depth":0}}})
    );

    // The error example: no TSMeta for the TSUID.
    let missing = "000001000001000001000002000003";
    assert_eq!(
        ok(
            &srv,
            "GET",
            &format!("/api/tree/test?treeid=1&tsuids={missing}"),
            ""
        ),
        json!({missing: {"branch":null,"messages":["Unable to locate TSUID meta data"],"meta":null}})
    );
    // Nothing was stored: the tree has no root branch.
    assert_eq!(get(&srv, "/api/tree/branch?treeid=1").0, 404);
    // "If the requested tree did not exist ... a 404"; no TSUIDs: 400.
    assert_eq!(
        get(&srv, &format!("/api/tree/test?treeid=2&tsuids={tsuid}")),
        (404, err(404, "Unable to locate tree: 2"))
    );
    assert_eq!(
        get(&srv, "/api/tree/test?treeid=1"),
        (400, err(400, "Missing or empty TSUID list"))
    );
}
