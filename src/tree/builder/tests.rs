//! OpenTSDB 2.4.1's `TestTreeBuilder` scenarios, as facts: its test tree
//! (`TestTree.buildTestRuleSet`) over `sys.cpu.0{host=web-01.lga.mysite.com,
//! type=user}`, and the branch each variation ends in. "rows" counts the
//! root row plus one per stored branch, as the Java tests count them.

use std::collections::BTreeMap;

use super::*;
use crate::meta::{TsMeta, UidMeta};
use crate::tree::{Tree, TreeDefinition, TreeRule};

const TSUID: &str = "0102030405";

fn uid_meta(kind: &'static str, name: &str) -> UidMeta {
    UidMeta {
        uid: String::new(),
        kind,
        name: name.into(),
        description: String::new(),
        notes: String::new(),
        created: 0,
        custom: None,
        display_name: String::new(),
    }
}

fn meta() -> TsMeta {
    TsMeta {
        tsuid: TSUID.into(),
        metric: uid_meta("METRIC", "sys.cpu.0"),
        tags: vec![
            uid_meta("TAGK", "host"),
            uid_meta("TAGV", "web-01.lga.mysite.com"),
            uid_meta("TAGK", "type"),
            uid_meta("TAGV", "user"),
        ],
        description: String::new(),
        notes: String::new(),
        created: 0,
        custom: None,
        units: String::new(),
        retention: 0,
        max: f64::NAN,
        min: f64::NAN,
        display_name: String::new(),
        data_type: String::new(),
        last_received: 0,
        total_datapoints: 0,
    }
}

fn rule(kind: RuleType, level: i32, order: i32, field: &str) -> TreeRule {
    let mut r = TreeRule::new(1);
    r.kind = Some(kind);
    r.level = level;
    r.order = order;
    r.field = field.into();
    r
}

fn add(tree: &mut Tree, r: TreeRule) {
    tree.rules.entry(r.level).or_default().insert(r.order, r);
}

fn test_tree() -> Tree {
    let mut t = Tree {
        tree_id: 1,
        def: TreeDefinition {
            name: "Test Tree".into(),
            enabled: true,
            created: 1356998400,
            ..Default::default()
        },
        rules: BTreeMap::new(),
    };
    let dc = "^.*\\.([a-zA-Z]{3,4})[0-9]{0,1}\\..*\\..*$";
    let service = "^([a-zA-Z]+)(\\-|[0-9])*.*\\..*$";
    for (level, regex) in [(0, dc), (1, service), (2, "")] {
        for (order, field) in [(0, "fqdn"), (1, "host")] {
            let mut r = rule(RuleType::Tagk, level, order, field);
            r.regex = regex.into();
            add(&mut t, r);
        }
    }
    let mut r = rule(RuleType::Metric, 3, 0, "");
    r.separator = "\\.".into();
    add(&mut t, r);
    add(&mut t, rule(RuleType::Tagk, 4, 0, "type"));
    add(&mut t, rule(RuleType::Tagk, 4, 1, "method"));
    let mut r = rule(RuleType::Tagk, 4, 2, "port");
    r.display_format = "Port: {value}".into();
    add(&mut t, r);
    t
}

fn run(tree: &Tree, meta: &TsMeta) -> Processed {
    TreeBuilder::new(tree)
        .unwrap()
        .process(meta, &new_root())
        .unwrap()
}

fn path(p: &Processed) -> &[PathBranch] {
    match &p.outcome {
        Outcome::Path(p) => p,
        other => panic!("no path: {other:?}"),
    }
}

/// (rows as the Java tests count them, the last branch's id, its leaf).
fn result(tree: &Tree, meta: &TsMeta) -> (usize, String, String) {
    let p = run(tree, meta);
    let path = path(&p);
    let last = path.last().unwrap();
    assert_eq!(last.leaves.len(), 1, "{:?}", p.messages);
    (
        path.len() + 1,
        to_hex(&last.id),
        last.leaves[0].display_name.clone(),
    )
}

const DEFAULT_LAST: &str = "00010001A2460001CB54247F72020001BECD000181A800000030";

#[test]
fn defaults() {
    let p = run(&test_tree(), &meta());
    let names: Vec<&str> = path(&p)
        .iter()
        .map(|b| b.branch.display_name.as_str())
        .collect();
    assert_eq!(
        names,
        ["lga", "web", "web-01.lga.mysite.com", "sys", "cpu", "0"]
    );
    assert_eq!(
        result(&test_tree(), &meta()),
        (7, DEFAULT_LAST.into(), "user".into())
    );
    assert_eq!(p.messages[0], "Processing rule: [1:0:0:TAGK]");
    assert!(
        p.messages
            .contains(&"Matched tagk [host] for rule: [1:0:1:TAGK]".to_string())
    );
    // The test view hangs the same path under the root.
    let json = serde_json::to_value(&p.root).unwrap();
    assert_eq!(json["displayName"], "ROOT");
    assert_eq!(json["branchId"], "0001");
    assert_eq!(json["branches"][0]["displayName"], "lga");
    assert_eq!(json["branches"][0]["branchId"], "00010001A246");
    assert_eq!(json["branches"][0]["depth"], 1);
}

fn custom_rule(kind: RuleType, field: &str, custom: &str, order: i32) -> TreeRule {
    let mut r = rule(kind, 0, order, field);
    r.custom_field = custom.into();
    r
}

#[test]
fn unmatched_levels_collapse() {
    // Middle: levels 0 and 1 replaced by custom rules that match nothing.
    let mut t = test_tree();
    add(
        &mut t,
        custom_rule(RuleType::TagvCustom, "host", "owner", 0),
    );
    add(&mut t, custom_rule(RuleType::TagvCustom, "host", "dept", 1));
    let mut r = custom_rule(RuleType::TagkCustom, "host", "owner", 0);
    r.level = 1;
    add(&mut t, r);
    let mut r = custom_rule(RuleType::TagkCustom, "host", "dept", 1);
    r.level = 1;
    add(&mut t, r);
    let (rows, last, _) = result(&t, &meta());
    assert_eq!(
        (rows, last.as_str()),
        (5, "0001247F72020001BECD000181A800000030")
    );
    // End: levels 5 and 6 match nothing.
    let mut t = test_tree();
    for (level, order, custom) in [
        (5, 0, "owner"),
        (5, 1, "dept"),
        (6, 0, "owner"),
        (6, 1, "dept"),
    ] {
        let mut r = custom_rule(RuleType::TagvCustom, "host", custom, order);
        r.level = level;
        add(&mut t, r);
    }
    assert_eq!(result(&t, &meta()).1, DEFAULT_LAST);
}

#[test]
fn odd_tags_take_the_next_value() {
    let mut m = meta();
    m.tags.remove(1);
    let (rows, last, _) = result(&test_tree(), &m);
    assert_eq!(
        (rows, last.as_str()),
        (5, "00010036EBCB0001BECD000181A800000030")
    );
}

#[test]
fn strict_matching() {
    let mut t = test_tree();
    t.def.strict_match = true;
    assert_eq!(result(&t, &meta()).1, DEFAULT_LAST);
    let mut m = meta();
    m.tags[1].name = "foobar".into();
    let p = run(&t, &m);
    assert_eq!(
        p.outcome,
        Outcome::NotMatched("[1:0:1:TAGK] [1:1:1:TAGK]".into())
    );
    assert_eq!(
        p.messages.last().unwrap(),
        "TSUID failed to match one or more rule levels, will not add: 0102030405"
    );
}

#[test]
fn separators() {
    let mut t = test_tree();
    t.rules.get_mut(&3).unwrap().get_mut(&0).unwrap().separator = String::new();
    let (rows, last, _) = result(&t, &meta());
    assert_eq!(
        (rows, last.as_str()),
        (5, "00010001A2460001CB54247F7202CBBF5B09")
    );
    // "." as a regex matches every character: no pieces, level skipped.
    let mut t = test_tree();
    t.rules.get_mut(&3).unwrap().get_mut(&0).unwrap().separator = ".".into();
    let (rows, last, _) = result(&t, &meta());
    assert_eq!((rows, last.as_str()), (4, "00010001A2460001CB54247F7202"));
}

#[test]
fn regex_group_out_of_bounds() {
    let mut t = test_tree();
    t.rules
        .get_mut(&1)
        .unwrap()
        .get_mut(&1)
        .unwrap()
        .regex_group_idx = 42;
    let p = run(&t, &meta());
    assert!(p.messages.contains(
        &"Regex group index [42] for rule [1:1:1:TAGK] was out of bounds [2]".to_string()
    ));
    let (rows, last, _) = result(&t, &meta());
    assert_eq!(
        (rows, last.as_str()),
        (6, "00010001A246247F72020001BECD000181A800000030")
    );
}

fn with_custom(m: &mut UidMeta, owner: &str) {
    m.custom = Some(BTreeMap::from([
        ("owner".to_string(), owner.to_string()),
        ("dc".to_string(), "lga".to_string()),
    ]));
}

#[test]
fn custom_fields() {
    let owner_last = "0001AE805CA50001CB54247F72020001BECD000181A800000030";
    // METRIC_CUSTOM
    let mut t = test_tree();
    add(&mut t, custom_rule(RuleType::MetricCustom, "", "owner", 0));
    let mut m = meta();
    with_custom(&mut m.metric, "John Doe");
    assert_eq!(result(&t, &m).1, owner_last);
    with_custom(&mut m.metric, "");
    assert_eq!(result(&t, &m).1, DEFAULT_LAST);
    // TAGK_CUSTOM, with and without the field naming the tag key.
    let mut m = meta();
    with_custom(&mut m.tags[0], "John Doe");
    let mut t = test_tree();
    add(
        &mut t,
        custom_rule(RuleType::TagkCustom, "host", "owner", 0),
    );
    assert_eq!(result(&t, &m).1, owner_last);
    let mut t = test_tree();
    add(&mut t, custom_rule(RuleType::TagkCustom, "", "owner", 0));
    assert_eq!(result(&t, &m).1, DEFAULT_LAST);
    // TAGV_CUSTOM names the tag value.
    let mut m = meta();
    with_custom(&mut m.tags[1], "John Doe");
    let mut t = test_tree();
    add(
        &mut t,
        custom_rule(RuleType::TagvCustom, "web-01.lga.mysite.com", "owner", 0),
    );
    assert_eq!(result(&t, &m).1, owner_last);
    let mut t = test_tree();
    add(
        &mut t,
        custom_rule(RuleType::TagvCustom, "host", "owner", 0),
    );
    assert_eq!(result(&t, &m).1, DEFAULT_LAST);
}

#[test]
fn display_formats() {
    let cases = [
        (
            "OV: {ovalue}",
            "00010001A24637E140D5",
            "OV: web-01.lga.mysite.com",
        ),
        ("V: {value}", "00010001A24696026FD8", "V: web"),
        (
            "TSUID: {tsuid}",
            "00010001A246E0A07086",
            "TSUID: 0102030405",
        ),
        (
            "TAGNAME: {tag_name}",
            "00010001A2467BFCCB13",
            "TAGNAME: host",
        ),
        (
            "{ovalue}:{value}:{tag_name}:{tsuid}",
            "00010001A246E4592083",
            "web-01.lga.mysite.com:web:host:0102030405",
        ),
    ];
    for (format, id, name) in cases {
        let mut t = test_tree();
        t.rules
            .get_mut(&1)
            .unwrap()
            .get_mut(&1)
            .unwrap()
            .display_format = format.into();
        let p = run(&t, &meta());
        assert_eq!(path(&p).len() + 1, 7);
        let b = &path(&p)[1];
        assert_eq!(
            (to_hex(&b.id).as_str(), b.branch.display_name.as_str()),
            (id, name)
        );
    }
    // {tag_name} on a METRIC rule is emptied; every piece is then named
    // alike and the pieces collapse into one branch.
    let mut t = test_tree();
    t.rules
        .get_mut(&3)
        .unwrap()
        .get_mut(&0)
        .unwrap()
        .display_format = "Wrong: {tag_name}".into();
    let p = run(&t, &meta());
    assert_eq!(path(&p).len() + 1, 5);
    assert_eq!(
        to_hex(&path(&p)[3].id),
        "00010001A2460001CB54247F7202C3165573"
    );
    assert_eq!(path(&p)[3].branch.display_name, "Wrong: ");
    let mut t = test_tree();
    t.rules
        .get_mut(&3)
        .unwrap()
        .get_mut(&0)
        .unwrap()
        .display_format = "OVERRIDE".into();
    let p = run(&t, &meta());
    assert_eq!(path(&p).len() + 1, 5);
    assert_eq!(
        to_hex(&path(&p)[3].id),
        "00010001A2460001CB54247F72024E3D0BCC"
    );
}

#[test]
fn one_level_tree_leaves_nothing_to_store() {
    let mut t = test_tree();
    t.rules.clear();
    add(&mut t, rule(RuleType::Metric, 0, 0, ""));
    let p = run(&t, &meta());
    assert_eq!(p.outcome, Outcome::Nothing);
    // The test view still shows the leaf on the root.
    let json = serde_json::to_value(&p.root).unwrap();
    assert_eq!(json["leaves"][0]["displayName"], "sys.cpu.0");
}

#[test]
fn very_deep_paths_are_refused_not_overflowed() {
    let mut t = test_tree();
    t.rules.clear();
    let mut r = rule(RuleType::Metric, 0, 0, "");
    r.separator = "\\.".into();
    add(&mut t, r);
    let mut m = meta();
    m.metric.name = vec!["a"; 2000].join(".");
    let e = TreeBuilder::new(&t)
        .unwrap()
        .process(&m, &new_root())
        .unwrap_err();
    assert!(e.to_string().contains("deeper than 512 levels"), "{e}");
}

#[test]
fn java_split_rules() {
    let re = |s: &str| Regex::new(s).unwrap();
    assert_eq!(java_split("sys.cpu.0", &re("\\.")), ["sys", "cpu", "0"]);
    assert_eq!(java_split("a..b..", &re("\\.")), ["a", "", "b"]);
    assert_eq!(java_split(".a", &re("\\.")), ["", "a"]);
    assert!(java_split("...", &re("\\.")).is_empty());
    assert_eq!(java_split("abc", &re("x")), ["abc"]);
    assert_eq!(java_split("abc", &re("")), ["a", "b", "c"]);
}
