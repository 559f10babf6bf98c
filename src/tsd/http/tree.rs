//! `/api/tree/*` as OpenTSDB 2.4.1's `TreeRpc` answers it: trees
//! (`/api/tree`), one rule (`/rule`), a tree's rules at once (`/rules`),
//! branches (`/branch`), a dry run of series through a tree (`/test`),
//! and the recorded collisions and not-matched series (`/collisions`,
//! `/notmatched`). Each takes a JSON body or the query string, with
//! 2.4.1's validation, messages and status codes. Where 2.4.1 lets an
//! exception escape as a 500 (a malformed rule body, a rule list
//! re-posted unchanged), rtsdb answers 400 with the same message: bad
//! input is the client's error, and no request may make the server fail.

use hyper::Method;
use serde_json::Value;

use super::{Query, Reply, json_text};
use crate::db::TreeTest;
use crate::model::Tsuid;
use crate::model::java::{hashmap_order, parse_int};
use crate::protocol::jackson;
use crate::tree::{
    self, RuleEdit, RuleType, Tree, TreeEdit, TreeError, TreeRule, check_rule_position,
    check_tree_id,
};
use crate::tsd::TsdState;

type Answer = Result<Reply, Reply>;

/// Serializes the read-merge-write of tree definitions and rules: OpenTSDB
/// compares-and-sets them, so two concurrent edits never lose one another;
/// one lock per process does the same for one TSD per store.
static EDITS: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

fn bad(msg: &str) -> Reply {
    Reply::error(400, msg, "")
}

fn bad_with(msg: &str, details: &str) -> Reply {
    Reply::error(400, msg, details)
}

fn unsupported_method() -> Reply {
    bad("Unsupported HTTP request method")
}

fn no_tree(id: impl std::fmt::Display) -> Reply {
    Reply::error(404, &format!("Unable to locate tree: {id}"), "")
}

/// A tree error as `TreeRpc` reports it: bad input (an
/// `IllegalArgumentException`) is a 400 with its message as message and
/// details, nothing to change (`IllegalStateException`) a bare 304.
fn tree_error(e: TreeError) -> Reply {
    match e {
        TreeError::Invalid(m) => bad_with(&m, &m),
        TreeError::NotModified(_) => Reply::empty(304),
        e => Reply::error(500, "Unexpected exception", &e.to_string()),
    }
}

fn db_error(e: crate::db::DbError) -> Reply {
    match e {
        crate::db::DbError::Tree(t) => tree_error(t),
        e => Reply::error(500, "Unexpected exception", &e.to_string()),
    }
}

/// `/api/tree/<rest>`.
pub(super) fn handle(
    state: &TsdState,
    method: &Method,
    rest: &[String],
    q: &Query,
    body: Option<&[u8]>,
) -> Reply {
    let body = super::content(body);
    let r = match rest.first().map(String::as_str).unwrap_or("") {
        "" => handle_tree(state, method, q, body),
        "branch" => handle_branch(state, method, q),
        "rule" => handle_rule(state, method, q, body),
        "rules" => handle_rules(state, method, q, body),
        "test" => handle_test(state, method, q, body),
        "collisions" => handle_failures(state, method, q, body, true),
        "notmatched" => handle_failures(state, method, q, body, false),
        _ => Err(Reply::error(404, "This endpoint is not supported", "")),
    };
    r.unwrap_or_else(|e| e)
}

/// `TreeRpc.parseTreeId`.
fn tree_id_param(q: &Query, required: bool) -> Result<i32, Reply> {
    match q.get("treeid") {
        None if required => Err(bad("Missing parameter <code>treeid</code>")),
        None => Ok(0),
        Some(v) => parse_int(v).map_err(|e| bad_with("Unable to parse 'tree' value", &e)),
    }
}

fn json_body(body: &[u8]) -> Result<Value, Reply> {
    serde_json::from_slice(body)
        .map_err(|e| bad_with("Unable to parse the given JSON", &e.to_string()))
}

/// A JSON object as OpenTSDB reads it into a `HashMap<String, String>`:
/// scalars as their text, `null` left out; arrays and objects refused.
fn string_map(body: &[u8]) -> Result<Vec<(String, String)>, Reply> {
    let Value::Object(m) = json_body(body)? else {
        return Err(bad_with(
            "Unable to parse the given JSON",
            "Expected a JSON object",
        ));
    };
    let mut out = Vec::new();
    for (k, v) in m {
        if matches!(v, Value::Array(_) | Value::Object(_)) {
            return Err(bad_with(
                "Unable to parse the given JSON",
                &format!("Cannot deserialize a String from {v} at \"{k}\""),
            ));
        }
        if let Some(t) = json_text(&v) {
            out.push((k, t));
        }
    }
    Ok(out)
}

fn is_true(v: &str) -> bool {
    v.to_lowercase() == "true"
}

/// `HttpJsonSerializer.parseTreeV1`: keys matched ignoring case.
fn tree_from_body(body: &[u8]) -> Result<TreeEdit, Reply> {
    let mut t = TreeEdit::default();
    for (k, v) in string_map(body)? {
        match k.to_lowercase().as_str() {
            "treeid" => {
                t.tree_id = parse_int(&v).map_err(|_| bad("Unable to parse 'tree' value"))?
            }
            "name" => t.name = Some(v),
            "description" => t.description = Some(v),
            "notes" => t.notes = Some(v),
            "enabled" => t.enabled = Some(is_true(&v)),
            "strictmatch" => t.strict_match = Some(is_true(&v)),
            "storefailures" => t.store_failures = Some(is_true(&v)),
            _ => {}
        }
    }
    Ok(t)
}

/// `TreeRpc.parseTree`: the query string's fields.
fn tree_from_query(q: &Query) -> Result<TreeEdit, Reply> {
    Ok(TreeEdit {
        tree_id: tree_id_param(q, false)?,
        name: q.get("name").map(String::from),
        description: q.get("description").map(String::from),
        notes: q.get("notes").map(String::from),
        strict_match: q.get("strict_match").map(is_true),
        enabled: q.get("enabled").map(is_true),
        store_failures: q.get("store_failures").map(is_true),
    })
}

fn now_s() -> i64 {
    chrono::Utc::now().timestamp()
}

fn tree_json(tree: &Tree) -> Reply {
    Reply::json(200, serde_json::to_vec(tree).expect("json"))
}

fn fetch_tree(state: &TsdState, tree_id: i32) -> Result<Option<Tree>, Reply> {
    let id = check_tree_id(tree_id).map_err(tree_error)?;
    state.db.trees().tree(id).map_err(tree_error)
}

fn existing_tree(state: &TsdState, tree_id: i32) -> Result<Tree, Reply> {
    fetch_tree(state, tree_id)?.ok_or_else(|| no_tree(tree_id))
}

fn handle_tree(state: &TsdState, method: &Method, q: &Query, body: Option<&[u8]>) -> Answer {
    // A tree from the query string is built with `new Tree(id)`, which
    // sets `created` to now; one parsed from a body starts at 0, and
    // 2.4.1 stores a new tree with that.
    let (edit, created) = match body {
        Some(b) => (tree_from_body(b)?, 0),
        None => (tree_from_query(q)?, now_s()),
    };
    let trees = state.db.trees();
    if method == Method::GET {
        if edit.tree_id == 0 {
            let all = trees.trees().map_err(tree_error)?;
            return Ok(Reply::json(200, serde_json::to_vec(&all).expect("json")));
        }
        return Ok(tree_json(&existing_tree(state, edit.tree_id)?));
    }
    if method == Method::POST || method == Method::PUT {
        let overwrite = method == Method::PUT;
        let _edit = EDITS.lock();
        if edit.tree_id > 0 {
            let stored = existing_tree(state, edit.tree_id)?;
            if !edit.has_changes() {
                return Ok(Reply::empty(304));
            }
            let mut def = stored.def.clone();
            edit.apply(&mut def, overwrite);
            trees
                .put_definition(stored.tree_id, &def)
                .map_err(tree_error)?;
            return Ok(tree_json(&existing_tree(state, edit.tree_id)?));
        }
        if edit.name.as_deref().unwrap_or("").is_empty() {
            return Err(bad_with(
                "Tree was missing the name",
                "Tree was missing the name",
            ));
        }
        let Some(id) = trees
            .create_tree(&edit.to_new(created))
            .map_err(tree_error)?
        else {
            // 2.4.1: an IllegalStateException ("Exhausted all Tree IDs"),
            // which the handler answers as "not modified".
            return Ok(Reply::empty(304));
        };
        return Ok(tree_json(&existing_tree(state, id as i32)?));
    }
    if method == Method::DELETE {
        let definition = match body {
            Some(b) => string_map(b)?
                .into_iter()
                .any(|(k, v)| k == "definition" && is_true(&v)),
            None => q.get("definition").is_some_and(is_true),
        };
        let tree = existing_tree(state, edit.tree_id)?;
        state
            .db
            .purge_tree(tree.tree_id, definition)
            .map_err(db_error)?;
        return Ok(Reply::empty(204));
    }
    Err(unsupported_method())
}

fn handle_branch(state: &TsdState, method: &Method, q: &Query) -> Answer {
    if method != Method::GET {
        return Err(unsupported_method());
    }
    let tree_id = tree_id_param(q, false)?;
    let id = match q.get("branch").filter(|b| !b.is_empty()) {
        None => {
            if tree_id < 1 {
                return Err(bad("Missing or invalid branch and tree IDs"));
            }
            if tree_id > tree::MAX_TREE_ID {
                let m = "Missing or invalid tree ID";
                return Err(bad_with(m, m));
            }
            tree::id_to_bytes(tree_id as u16).to_vec()
        }
        Some(hex) => tree::parse_branch_id(hex).map_err(tree_error)?,
    };
    match state.db.tree_branch(&id).map_err(db_error)? {
        Some(b) => Ok(Reply::json(200, serde_json::to_vec(&b).expect("json"))),
        None => Err(Reply::error(
            404,
            &format!(
                "Unable to locate branch '{}' for tree '{}'",
                tree::to_hex(&id),
                tree::bytes_to_id(&id).map_or(0, i32::from)
            ),
            "",
        )),
    }
}

/// A value of a rule body's field, as Jackson coerces it into the
/// setter's type.
fn rule_field(edit: &mut RuleEdit, key: &str, v: &Value) -> Result<(), String> {
    let text = || jackson::string_opt(v.clone()).map_err(|e| e.to_string());
    let int = || -> Result<i32, String> {
        let n = jackson::long(v.clone()).map_err(|e| e.to_string())?;
        i32::try_from(n).map_err(|_| {
            format!("Numeric value ({n}) out of range of int (-2147483648 - 2147483647)")
        })
    };
    let invalid = |e: TreeError| e.to_string();
    match key {
        // Jackson hands `null` to no deserializer: the type stays unset.
        "type" if v.is_null() => {}
        "type" => {
            let kind = RuleType::parse(&text()?.unwrap_or_default()).map_err(invalid)?;
            edit.set_kind(kind);
        }
        "field" => text()?.into_iter().for_each(|t| edit.set_field(t)),
        "customField" => text()?.into_iter().for_each(|t| edit.set_custom_field(t)),
        "regex" => {
            if let Some(t) = text()? {
                edit.set_regex(t).map_err(invalid)?;
            }
        }
        "separator" => text()?.into_iter().for_each(|t| edit.set_separator(t)),
        "description" => text()?.into_iter().for_each(|t| edit.set_description(t)),
        "notes" => text()?.into_iter().for_each(|t| edit.set_notes(t)),
        "displayFormat" => text()?.into_iter().for_each(|t| edit.set_display_format(t)),
        "regexGroupIdx" => edit.set_regex_group_idx(int()?),
        "level" => edit.set_level(int()?).map_err(invalid)?,
        "order" => edit.set_order(int()?),
        "treeId" => edit.rule.tree_id = int()?,
        _ => {}
    }
    Ok(())
}

/// One rule object of a body (`JSON.parseToObject(json, TreeRule.class)`).
fn rule_from_value(v: &Value) -> Result<RuleEdit, Reply> {
    let Value::Object(m) = v else {
        return Err(bad_with(
            "Unable to parse the given JSON",
            "Expected a JSON object",
        ));
    };
    let mut edit = RuleEdit::new(0);
    for (k, v) in m {
        rule_field(&mut edit, k, v).map_err(|e| bad_with("Unable to parse the given JSON", &e))?;
    }
    Ok(edit)
}

/// `TreeRpc.parseRule`: the query string's fields; `treeid`, `level` and
/// `order` are required.
fn rule_from_query(q: &Query) -> Result<RuleEdit, Reply> {
    let mut edit = RuleEdit::new(tree_id_param(q, true)?);
    if let Some(t) = q.get("type") {
        let kind = RuleType::parse(t)
            .map_err(|e| bad_with("Unable to parse the 'type' parameter", &e.to_string()))?;
        edit.set_kind(kind);
    }
    if let Some(v) = q.get("field") {
        edit.set_field(v.into());
    }
    if let Some(v) = q.get("custom_field") {
        edit.set_custom_field(v.into());
    }
    if let Some(v) = q.get("regex") {
        edit.set_regex(v.into())
            .map_err(|e| bad_with("Unable to parse the 'regex' parameter", &e.to_string()))?;
    }
    if let Some(v) = q.get("separator") {
        edit.set_separator(v.into());
    }
    if let Some(v) = q.get("description") {
        edit.set_description(v.into());
    }
    if let Some(v) = q.get("notes") {
        edit.set_notes(v.into());
    }
    if let Some(v) = q.get("regex_group_idx") {
        let n = parse_int(v)
            .map_err(|e| bad_with("Unable to parse the 'regex_group_idx' parameter", &e))?;
        edit.set_regex_group_idx(n);
    }
    if let Some(v) = q.get("display_format") {
        edit.set_display_format(v.into());
    }
    let required = |name: &str| -> Result<i32, Reply> {
        let v = q
            .get(name)
            .ok_or_else(|| bad(&format!("Missing parameter <code>{name}</code>")))?;
        parse_int(v).map_err(|e| bad_with(&format!("Unable to parse the '{name}' parameter"), &e))
    };
    let level = required("level")?;
    edit.set_level(level).map_err(tree_error)?;
    edit.set_order(required("order")?);
    Ok(edit)
}

/// `TreeRule.syncToStorage`: merges the edit into the stored rule (or
/// stores it as a new one), validates and writes it. The stored rule.
fn sync_rule(state: &TsdState, edit: &RuleEdit, overwrite: bool) -> Result<TreeRule, TreeError> {
    let tree_id = check_tree_id(edit.rule.tree_id)?;
    if !edit.has_changes() {
        return Err(TreeError::NotModified(
            "No changes detected in the rule".into(),
        ));
    }
    let (level, order) = (edit.rule.level, edit.rule.order);
    check_rule_position(level, order)?;
    let trees = state.db.trees();
    let stored = trees
        .tree(tree_id)?
        .and_then(|t| t.rule(level, order).cloned());
    let rule = match stored {
        None => edit.rule.clone(),
        Some(mut stored) => {
            if !stored.apply(edit, overwrite) {
                return Err(TreeError::NotModified(
                    "No changes detected in the rule".into(),
                ));
            }
            stored
        }
    };
    rule.validate()?;
    trees.put_rule(&rule)?;
    Ok(rule)
}

fn rule_json(rule: &TreeRule) -> Reply {
    Reply::json(200, serde_json::to_vec(rule).expect("json"))
}

fn handle_rule(state: &TsdState, method: &Method, q: &Query, body: Option<&[u8]>) -> Answer {
    let edit = match body {
        Some(b) => rule_from_value(&json_body(b)?)?,
        None => rule_from_query(q)?,
    };
    let tree = existing_tree(state, edit.rule.tree_id)?;
    let (level, order) = (edit.rule.level, edit.rule.order);
    let missing = || {
        Reply::error(
            404,
            &format!("Unable to locate rule: {}", edit.rule.label()),
            "",
        )
    };
    if method == Method::GET {
        return tree.rule(level, order).map(rule_json).ok_or_else(missing);
    }
    if method == Method::POST || method == Method::PUT {
        let _edit = EDITS.lock();
        let rule = sync_rule(state, &edit, method == Method::PUT).map_err(tree_error)?;
        return Ok(rule_json(&rule));
    }
    if method == Method::DELETE {
        if tree.rule(level, order).is_none() {
            return Err(missing());
        }
        check_rule_position(level, order).map_err(tree_error)?;
        state
            .db
            .trees()
            .delete_rule(tree.tree_id, level, order)
            .map_err(tree_error)?;
        return Ok(Reply::empty(204));
    }
    Err(unsupported_method())
}

fn handle_rules(state: &TsdState, method: &Method, q: &Query, body: Option<&[u8]>) -> Answer {
    let (tree_id, rules) = match body {
        Some(b) => {
            let rules = match json_body(b)? {
                Value::Array(items) => items
                    .iter()
                    .map(rule_from_value)
                    .collect::<Result<Vec<_>, _>>()?,
                Value::Null => Vec::new(),
                _ => {
                    return Err(bad_with(
                        "Unable to parse the given JSON",
                        "Expected a JSON array of rules",
                    ));
                }
            };
            let Some(first) = rules.first() else {
                return Err(bad("Missing tree rules"));
            };
            let tree_id = first.rule.tree_id;
            if rules.iter().any(|r| r.rule.tree_id != tree_id) {
                return Err(bad("All rules must belong to the same tree"));
            }
            (tree_id, Some(rules))
        }
        None => (tree_id_param(q, false)?, None),
    };
    let tree = existing_tree(state, tree_id)?;
    let trees = state.db.trees();
    if method == Method::POST || method == Method::PUT {
        let Some(rules) = rules.filter(|r| !r.is_empty()) else {
            return Err(bad("Missing tree rules"));
        };
        let overwrite = method == Method::PUT;
        let _edit = EDITS.lock();
        if overwrite {
            trees.delete_rules(tree.tree_id).map_err(tree_error)?;
        }
        for rule in &rules {
            sync_rule(state, rule, overwrite).map_err(|e| match e {
                // 2.4.1 lets this escape as a 500; it is the request's fault.
                TreeError::NotModified(m) => bad(&m),
                e => tree_error(e),
            })?;
        }
        return Ok(Reply::empty(204));
    }
    if method == Method::DELETE {
        trees.delete_rules(tree.tree_id).map_err(tree_error)?;
        return Ok(Reply::empty(204));
    }
    Err(unsupported_method())
}

/// `parseTreeTSUIDsListV1` / `parseTSUIDsList`: the tree id (`None` when
/// missing or not an integer) and the TSUIDs, if given.
fn tsuids_request(
    q: &Query,
    body: Option<&[u8]>,
) -> Result<(Option<i32>, Option<Vec<String>>), Reply> {
    let Some(b) = body else {
        let tree_id = tree_id_param(q, true)?;
        let tsuids = q
            .get("tsuids")
            .map(|t| t.split(',').map(String::from).collect());
        return Ok((Some(tree_id), tsuids));
    };
    let Value::Object(m) = json_body(b)? else {
        return Err(bad_with(
            "Unable to parse the given JSON",
            "Expected a JSON object",
        ));
    };
    let tree_id = m
        .get("treeId")
        .and_then(Value::as_i64)
        .and_then(|n| i32::try_from(n).ok());
    let tsuids = match m.get("tsuids") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .map(|v| v.as_str().map(String::from))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| bad("Unable to convert the given data to a list"))?,
        ),
        Some(_) => return Err(bad("Unable to convert the given data to a list")),
    };
    Ok((tree_id, tsuids))
}

/// A JSON object written in a `java.util.HashMap`'s order: `pairs` are
/// (key, JSON text of the value), `expected` the map's initial size.
fn java_map(pairs: Vec<(String, String)>, expected: usize) -> String {
    // A key put twice keeps its place and takes the later value.
    let mut keys: Vec<&str> = Vec::new();
    for (k, _) in &pairs {
        if !keys.contains(&k.as_str()) {
            keys.push(k);
        }
    }
    let order = hashmap_order(&keys, expected);
    let body: Vec<String> = order
        .iter()
        .map(|k| {
            let v = &pairs.iter().rev().find(|(kk, _)| kk == k).expect("key").1;
            format!("{}:{v}", serde_json::to_string(k).expect("json"))
        })
        .collect();
    format!("{{{}}}", body.join(","))
}

fn handle_test(state: &TsdState, method: &Method, q: &Query, body: Option<&[u8]>) -> Answer {
    let (tree_id, tsuids) = tsuids_request(q, body)?;
    let Some(tree_id) = tree_id else {
        return Err(bad("Missing or invalid Tree ID"));
    };
    let tree = existing_tree(state, tree_id)?;
    let Some(tsuids) = tsuids.filter(|t| !t.is_empty()) else {
        return Err(bad("Missing or empty TSUID list"));
    };
    if !(method == Method::GET || method == Method::POST || method == Method::PUT) {
        return Err(unsupported_method());
    }
    let widths = state.db.store().widths();
    let mut parsed = Vec::with_capacity(tsuids.len());
    for t in &tsuids {
        let tsuid = Tsuid::parse_hex(t, &widths).map_err(|e| {
            let m = e.to_string();
            bad_with(&m, &m)
        })?;
        parsed.push(tsuid);
    }
    let results = state.db.test_tree(&tree, &parsed).map_err(db_error)?;
    // 2.4.1 puts the builder's one root object in every result and clears
    // it before each series, so every "branch" shows the path of the last
    // series processed (the documentation promises one per series; the
    // code, which clients see, decides).
    let last_root = results.iter().rev().find_map(|r| match r {
        TreeTest::Done(done) => Some(serde_json::to_string(&done.0.root).expect("json")),
        _ => None,
    });
    let mut pairs = Vec::new();
    for (tsuid, result) in tsuids.iter().zip(results) {
        let (branch, meta, messages) = match result {
            TreeTest::NoMeta => (
                "null".to_string(),
                "null".to_string(),
                vec!["Unable to locate TSUID meta data".to_string()],
            ),
            TreeTest::MissingName(e) => (
                "null".to_string(),
                "null".to_string(),
                vec![format!("TSUID was missing a UID name: {e}")],
            ),
            TreeTest::Done(done) => {
                let (processed, meta) = *done;
                (
                    last_root.clone().unwrap_or_else(|| "null".into()),
                    serde_json::to_string(&meta).expect("json"),
                    processed.messages,
                )
            }
        };
        let inner = java_map(
            vec![
                ("branch".into(), branch),
                ("meta".into(), meta),
                (
                    "messages".into(),
                    serde_json::to_string(&messages).expect("json"),
                ),
            ],
            16,
        );
        pairs.push((tsuid.clone(), inner));
    }
    let n = tsuids.len();
    Ok(Reply::json(200, java_map(pairs, n)))
}

fn handle_failures(
    state: &TsdState,
    method: &Method,
    q: &Query,
    body: Option<&[u8]>,
    collisions: bool,
) -> Answer {
    let (tree_id, tsuids) = tsuids_request(q, body)?;
    let Some(tree_id) = tree_id else {
        return Err(bad("Missing or invalid Tree ID"));
    };
    let tree = existing_tree(state, tree_id)?;
    if !(method == Method::GET || method == Method::POST || method == Method::PUT) {
        return Err(unsupported_method());
    }
    let filter = match &tsuids {
        Some(list) if !list.is_empty() => Some(
            list.iter()
                .map(|t| {
                    // `UniqueId.stringToUid`: an odd count of digits gets a
                    // leading 0.
                    let odd = t.len() % 2 == 1;
                    let padded = if odd { format!("0{t}") } else { t.clone() };
                    let bytes = crate::model::uid::parse_hex(&padded).ok_or_else(|| {
                        let m = format!("contains illegal character for hexBinary: {padded}");
                        bad_with(&m, &m)
                    })?;
                    // 2.4.1 sizes the column name for `len / 2` bytes, so
                    // copying the padded UID into it throws and the request
                    // fails with a 500; it is the client's error.
                    if odd {
                        let m = format!("TSUID has an odd number of hex digits: {t}");
                        return Err(bad_with(&m, &m));
                    }
                    Ok(bytes)
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        _ => None,
    };
    let trees = state.db.trees();
    let found = if collisions {
        trees.collisions(tree.tree_id, filter.as_deref())
    } else {
        trees.not_matched(tree.tree_id, filter.as_deref())
    }
    .map_err(tree_error)?;
    let n = found.len();
    let pairs = found
        .into_iter()
        .map(|(k, v)| (tree::to_hex(&k), serde_json::to_string(&v).expect("json")))
        .collect();
    Ok(Reply::json(200, java_map(pairs, n)))
}
