//! OpenTSDB's trees (`src/tree/` of 2.4.1): a hierarchy of branches and
//! leaves built from each series' metric and tag names by a tree's rules,
//! browsed through `/api/tree/branch`.
//!
//! - [`Tree`]: a definition (name, flags, `created`) and its rules, by
//!   level then order.
//! - [`TreeRule`]: one rule: what it reads (metric, a tag value, a custom
//!   meta field), how it cuts it (regex group, separator) and how it names
//!   the branch (display format).
//! - Branch ids ([`branch_id`]) and leaf columns ([`leaf_hash`]) as OpenTSDB computes them
//!   (`String.hashCode` of display names).
//! - [`builder`]: TreeBuilder: one TSMeta through one tree's rules.
//!
//! Trees persist through a [`TreeStore`] (the embedded one is
//! `crate::store::tree_table`, layout in docs/format/tree.md), so they can
//! live in another engine, as the meta objects do.

pub mod builder;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::java::string_hash_code;
use crate::storage::StorageError;

/// Width of a tree id at the front of every row key.
pub const TREE_ID_WIDTH: usize = 2;
/// The highest tree id (two bytes).
pub const MAX_TREE_ID: i32 = 65535;

#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("corrupt tree cell: {0}")]
    Corrupt(String),
    /// Bad input, with OpenTSDB's `IllegalArgumentException` message.
    #[error("{0}")]
    Invalid(String),
    /// Nothing to write (OpenTSDB's `IllegalStateException`, HTTP 304).
    #[error("{0}")]
    NotModified(String),
}

pub type Result<T> = std::result::Result<T, TreeError>;

fn invalid(msg: &str) -> TreeError {
    TreeError::Invalid(msg.to_string())
}

/// Refuses ids outside 1..=65535 with OpenTSDB's message.
pub fn check_tree_id(tree_id: i32) -> Result<u16> {
    if !(1..=MAX_TREE_ID).contains(&tree_id) {
        return Err(invalid("Invalid Tree ID"));
    }
    Ok(tree_id as u16)
}

/// The two bytes of a tree id (`Tree.idToBytes`).
pub fn id_to_bytes(tree_id: u16) -> [u8; 2] {
    tree_id.to_be_bytes()
}

/// The tree id at the front of a row key (`Tree.bytesToId`).
pub fn bytes_to_id(row: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes([*row.first()?, *row.get(1)?]))
}

/// Upper-case hex, as OpenTSDB prints branch ids and TSUIDs.
pub fn to_hex(bytes: &[u8]) -> String {
    crate::model::uid::hex_upper(bytes)
}

/// A rule's type (`TreeRule.TreeRuleType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RuleType {
    #[serde(rename = "METRIC")]
    Metric,
    #[serde(rename = "METRIC_CUSTOM")]
    MetricCustom,
    #[serde(rename = "TAGK")]
    Tagk,
    #[serde(rename = "TAGK_CUSTOM")]
    TagkCustom,
    #[serde(rename = "TAGV_CUSTOM")]
    TagvCustom,
}

impl RuleType {
    /// `TreeRule.stringToType`: case-insensitive names.
    pub fn parse(s: &str) -> Result<RuleType> {
        if s.is_empty() {
            return Err(invalid("Rule type was empty"));
        }
        Ok(match s.to_lowercase().as_str() {
            "metric" => RuleType::Metric,
            "metric_custom" => RuleType::MetricCustom,
            "tagk" => RuleType::Tagk,
            "tagk_custom" => RuleType::TagkCustom,
            "tagv_custom" => RuleType::TagvCustom,
            _ => return Err(invalid("Unrecognized rule type")),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            RuleType::Metric => "METRIC",
            RuleType::MetricCustom => "METRIC_CUSTOM",
            RuleType::Tagk => "TAGK",
            RuleType::TagkCustom => "TAGK_CUSTOM",
            RuleType::TagvCustom => "TAGV_CUSTOM",
        }
    }
}

/// One rule. Serialized the same way to storage and to clients, in
/// Jackson's property order (fields with a matching getter first, in
/// declaration order, then the getter-only properties).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TreeRule {
    #[serde(rename = "type")]
    pub kind: Option<RuleType>,
    #[serde(default)]
    pub field: String,
    #[serde(default)]
    pub regex: String,
    #[serde(default)]
    pub separator: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub notes: String,
    #[serde(default)]
    pub level: i32,
    #[serde(default)]
    pub order: i32,
    #[serde(rename = "treeId", default)]
    pub tree_id: i32,
    #[serde(rename = "customField", default)]
    pub custom_field: String,
    #[serde(rename = "regexGroupIdx", default)]
    pub regex_group_idx: i32,
    #[serde(rename = "displayFormat", default)]
    pub display_format: String,
}

/// The fields of a [`TreeRule`] a request may change, as OpenTSDB's
/// setters track them (a field is changed when set to a value other than
/// the one it holds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuleChanges {
    pub kind: bool,
    pub field: bool,
    pub custom_field: bool,
    pub regex: bool,
    pub separator: bool,
    pub description: bool,
    pub notes: bool,
    pub regex_group_idx: bool,
    pub display_format: bool,
    pub level: bool,
    pub order: bool,
}

impl RuleChanges {
    fn any(&self) -> bool {
        self.kind
            || self.field
            || self.custom_field
            || self.regex
            || self.separator
            || self.description
            || self.notes
            || self.regex_group_idx
            || self.display_format
            || self.level
            || self.order
    }
}

/// A rule as a request gives it: the values and which of them were set.
#[derive(Debug, Clone)]
pub struct RuleEdit {
    pub rule: TreeRule,
    pub changed: RuleChanges,
}

impl TreeRule {
    pub fn new(tree_id: i32) -> TreeRule {
        TreeRule {
            kind: None,
            field: String::new(),
            regex: String::new(),
            separator: String::new(),
            description: String::new(),
            notes: String::new(),
            level: 0,
            order: 0,
            tree_id,
            custom_field: String::new(),
            regex_group_idx: 0,
            display_format: String::new(),
        }
    }

    /// `[tree:level:order:TYPE]`, as OpenTSDB names a rule in messages.
    pub fn label(&self) -> String {
        format!(
            "[{}:{}:{}:{}]",
            self.tree_id,
            self.level,
            self.order,
            self.kind.map_or("null", RuleType::name)
        )
    }

    /// The compiled regex, `None` when the rule has none. Java's
    /// `Pattern` and Rust's `regex` agree on the common syntax; a pattern
    /// only Java takes (look-around, back references) is refused when the
    /// rule is set, with the compiler's message.
    pub fn compiled_regex(&self) -> Result<Option<regex::Regex>> {
        compile_regex(&self.regex)
    }

    /// `TreeRule.validateRule`, run on the rule about to be stored.
    pub fn validate(&self) -> Result<()> {
        let Some(kind) = self.kind else {
            return Err(invalid("Missing rule type"));
        };
        let needs_custom = matches!(
            kind,
            RuleType::MetricCustom | RuleType::TagkCustom | RuleType::TagvCustom
        );
        if (needs_custom || kind == RuleType::Tagk) && self.field.is_empty() {
            return Err(TreeError::Invalid(format!(
                "Missing field name required for {} rule",
                kind.name()
            )));
        }
        if needs_custom && self.custom_field.is_empty() {
            return Err(TreeError::Invalid(format!(
                "Missing custom field name required for {} rule",
                kind.name()
            )));
        }
        // OpenTSDB's test reads `regex != null || !regex.isEmpty()`, which
        // always holds: a negative index is refused with or without regex.
        if self.regex_group_idx < 0 {
            return Err(invalid("Invalid regex group index. Cannot be less than 0"));
        }
        Ok(())
    }

    /// `TreeRule.copyChanges`: applies `edit` onto this stored rule, every
    /// field when `overwrite`, else only the fields the edit changed to a
    /// different value. Whether anything changed.
    pub fn apply(&mut self, edit: &RuleEdit, overwrite: bool) -> bool {
        let (e, c) = (&edit.rule, &edit.changed);
        let mut changed = false;
        macro_rules! copy {
            ($f:ident) => {
                if overwrite || (c.$f && self.$f != e.$f) {
                    self.$f = e.$f.clone();
                    changed = true;
                }
            };
        }
        copy!(kind);
        copy!(field);
        copy!(custom_field);
        // setRegex marks a change only when the text differs.
        if (overwrite || c.regex) && self.regex != e.regex {
            self.regex = e.regex.clone();
            changed = true;
        }
        copy!(separator);
        copy!(description);
        copy!(notes);
        copy!(regex_group_idx);
        copy!(display_format);
        changed
    }
}

/// Compiles a rule's regex (`None` for an empty one).
pub fn compile_regex(regex: &str) -> Result<Option<regex::Regex>> {
    if regex.is_empty() {
        return Ok(None);
    }
    regex::Regex::new(regex)
        .map(Some)
        .map_err(|e| TreeError::Invalid(e.to_string()))
}

impl RuleEdit {
    /// An empty edit of rule (tree, level, order).
    pub fn new(tree_id: i32) -> RuleEdit {
        RuleEdit {
            rule: TreeRule::new(tree_id),
            changed: RuleChanges::default(),
        }
    }

    pub fn set_kind(&mut self, kind: RuleType) {
        if self.rule.kind != Some(kind) {
            self.rule.kind = Some(kind);
            self.changed.kind = true;
        }
    }

    pub fn set_field(&mut self, v: String) {
        set_text(&mut self.rule.field, &mut self.changed.field, v);
    }

    pub fn set_custom_field(&mut self, v: String) {
        set_text(
            &mut self.rule.custom_field,
            &mut self.changed.custom_field,
            v,
        );
    }

    /// `setRegex` compiles the pattern at once: a bad one is refused here.
    pub fn set_regex(&mut self, v: String) -> Result<()> {
        if self.rule.regex != v {
            compile_regex(&v)?;
            self.rule.regex = v;
            self.changed.regex = true;
        }
        Ok(())
    }

    pub fn set_separator(&mut self, v: String) {
        set_text(&mut self.rule.separator, &mut self.changed.separator, v);
    }

    pub fn set_description(&mut self, v: String) {
        set_text(&mut self.rule.description, &mut self.changed.description, v);
    }

    pub fn set_notes(&mut self, v: String) {
        set_text(&mut self.rule.notes, &mut self.changed.notes, v);
    }

    pub fn set_display_format(&mut self, v: String) {
        set_text(
            &mut self.rule.display_format,
            &mut self.changed.display_format,
            v,
        );
    }

    pub fn set_regex_group_idx(&mut self, v: i32) {
        if self.rule.regex_group_idx != v {
            self.rule.regex_group_idx = v;
            self.changed.regex_group_idx = true;
        }
    }

    pub fn set_level(&mut self, v: i32) -> Result<()> {
        if v < 0 {
            return Err(invalid("Negative levels are not allowed"));
        }
        if self.rule.level != v {
            self.rule.level = v;
            self.changed.level = true;
        }
        Ok(())
    }

    /// OpenTSDB's `setOrder` checks the level, not the order, so a
    /// negative order gets as far as storage, which refuses it.
    pub fn set_order(&mut self, v: i32) {
        if self.rule.order != v {
            self.rule.order = v;
            self.changed.order = true;
        }
    }

    pub fn has_changes(&self) -> bool {
        self.changed.any()
    }
}

fn set_text(field: &mut String, changed: &mut bool, v: String) {
    if *field != v {
        *field = v;
        *changed = true;
    }
}

/// `TreeRule.fetchRule`/`deleteRule` argument checks.
pub fn check_rule_position(level: i32, order: i32) -> Result<()> {
    if level < 0 {
        return Err(invalid("Invalid rule level"));
    }
    if order < 0 {
        return Err(invalid("Invalid rule order"));
    }
    Ok(())
}

/// Rules by level, then order.
pub type Rules = BTreeMap<i32, BTreeMap<i32, TreeRule>>;

/// The stored part of a tree definition (its `tree` cell), in the field
/// order OpenTSDB writes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeDefinition {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub notes: String,
    #[serde(rename = "strictMatch", default)]
    pub strict_match: bool,
    #[serde(default)]
    pub created: i64,
    #[serde(default)]
    pub enabled: bool,
    #[serde(rename = "storeFailures", default)]
    pub store_failures: bool,
}

/// A tree: its id, definition and rules.
#[derive(Debug, Clone, PartialEq)]
pub struct Tree {
    pub tree_id: u16,
    pub def: TreeDefinition,
    pub rules: Rules,
}

/// A tree as the HTTP API writes it, in Jackson's property order
/// (`rules` is `null` when the tree has none).
#[derive(Serialize)]
struct TreeJson<'a> {
    name: &'a str,
    description: &'a str,
    notes: &'a str,
    enabled: bool,
    rules: Option<&'a Rules>,
    created: i64,
    #[serde(rename = "treeId")]
    tree_id: u16,
    #[serde(rename = "strictMatch")]
    strict_match: bool,
    #[serde(rename = "storeFailures")]
    store_failures: bool,
}

impl Serialize for Tree {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let d = &self.def;
        TreeJson {
            name: &d.name,
            description: &d.description,
            notes: &d.notes,
            enabled: d.enabled,
            rules: (!self.rules.is_empty()).then_some(&self.rules),
            created: d.created,
            tree_id: self.tree_id,
            strict_match: d.strict_match,
            store_failures: d.store_failures,
        }
        .serialize(s)
    }
}

impl Tree {
    pub fn rule(&self, level: i32, order: i32) -> Option<&TreeRule> {
        self.rules.get(&level)?.get(&order)
    }
}

/// A tree definition as a request gives it (`parseTreeV1` and the query
/// string): each field set, or not.
#[derive(Debug, Clone, Default)]
pub struct TreeEdit {
    /// 0 when absent (create a new tree).
    pub tree_id: i32,
    pub name: Option<String>,
    pub description: Option<String>,
    pub notes: Option<String>,
    pub strict_match: Option<bool>,
    pub enabled: Option<bool>,
    pub store_failures: Option<bool>,
}

impl TreeEdit {
    /// OpenTSDB's setters mark a text changed only when it differs from
    /// the empty default, and a flag changed whenever it is set.
    pub fn has_changes(&self) -> bool {
        let text = |t: &Option<String>| t.as_deref().is_some_and(|s| !s.is_empty());
        text(&self.name)
            || text(&self.description)
            || text(&self.notes)
            || self.strict_match.is_some()
            || self.enabled.is_some()
            || self.store_failures.is_some()
    }

    /// The definition a new tree gets from this edit.
    pub fn to_new(&self, created: i64) -> TreeDefinition {
        let mut def = TreeDefinition {
            created,
            ..Default::default()
        };
        self.apply(&mut def, true);
        def
    }

    /// `Tree.copyChanges`: every field when `overwrite` (PUT), else only
    /// the ones set.
    pub fn apply(&self, def: &mut TreeDefinition, overwrite: bool) {
        let text = |t: &Option<String>| t.clone().filter(|s| !s.is_empty());
        if let Some(v) = text(&self.name).or(overwrite.then(String::new)) {
            def.name = v;
        }
        if let Some(v) = text(&self.description).or(overwrite.then(String::new)) {
            def.description = v;
        }
        if let Some(v) = text(&self.notes).or(overwrite.then(String::new)) {
            def.notes = v;
        }
        if let Some(v) = self.strict_match.or(overwrite.then_some(false)) {
            def.strict_match = v;
        }
        if let Some(v) = self.enabled.or(overwrite.then_some(false)) {
            def.enabled = v;
        }
        if let Some(v) = self.store_failures.or(overwrite.then_some(false)) {
            def.store_failures = v;
        }
    }
}

/// A branch as stored in its `branch` cell: its path (depth → display
/// name, its own name last) and display name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredBranch {
    pub path: BTreeMap<i32, String>,
    #[serde(rename = "displayName")]
    pub display_name: String,
}

/// `Branch.compileBranchId`: the tree id, then the 4-byte
/// `String.hashCode` of every name on the path below the root.
pub fn branch_id(tree_id: u16, path: &BTreeMap<i32, String>) -> Vec<u8> {
    let mut id = id_to_bytes(tree_id).to_vec();
    for (depth, name) in path {
        if *depth != 0 {
            id.extend_from_slice(&string_hash_code(name).to_be_bytes());
        }
    }
    id
}

/// `Branch.stringToId`: hex of at least 4 digits, an odd count padded
/// with a leading 0.
pub fn parse_branch_id(hex: &str) -> Result<Vec<u8>> {
    if hex.is_empty() {
        return Err(invalid("Branch ID was empty"));
    }
    if hex.len() < 4 {
        return Err(invalid("Branch ID was too short"));
    }
    let padded = if hex.len() % 2 == 1 {
        format!("0{hex}")
    } else {
        hex.to_string()
    };
    let digit = |c: u8| (c as char).to_digit(16);
    padded
        .as_bytes()
        .chunks(2)
        .map(|p| match (digit(p[0]), digit(p[1])) {
            (Some(h), Some(l)) => Ok((h * 16 + l) as u8),
            // DatatypeConverter.parseHexBinary's message.
            _ => Err(TreeError::Invalid(format!(
                "contains illegal character for hexBinary: {padded}"
            ))),
        })
        .collect()
}

/// A stored branch with its direct children and its leaves.
#[derive(Debug, Clone, PartialEq)]
pub struct BranchCells {
    pub branch: StoredBranch,
    pub children: Vec<StoredBranch>,
    pub leaves: Vec<StoredLeaf>,
}

/// A leaf as stored in its `leaf:` cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredLeaf {
    #[serde(rename = "displayName")]
    pub display_name: String,
    pub tsuid: String,
}

/// The 4 bytes after `leaf:` in a leaf's qualifier: the display name's
/// `String.hashCode` (two leaves of one branch with one name collide).
pub fn leaf_hash(display_name: &str) -> [u8; 4] {
    string_hash_code(display_name).to_be_bytes()
}

/// A leaf as the HTTP API writes it (`metric` empty and `tags` null
/// unless its UIDs were resolved, as `/api/tree/branch` does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leaf {
    pub display_name: String,
    pub tsuid: String,
    pub metric: String,
    /// Tag pairs in the TSUID's order; `None` when not resolved.
    pub tags: Option<Vec<(String, String)>>,
}

/// Jackson's order for Leaf: `metric, tags, tsuid, displayName`; `tags`
/// is a `java.util.HashMap` sized for the pairs, written in its order.
impl Serialize for Leaf {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        struct Tags<'a>(&'a [(String, String)]);
        impl Serialize for Tags<'_> {
            fn serialize<S: serde::Serializer>(
                &self,
                s: S,
            ) -> std::result::Result<S::Ok, S::Error> {
                let keys: Vec<&str> = self.0.iter().map(|(k, _)| k.as_str()).collect();
                let order = crate::model::java::hashmap_order(&keys, self.0.len());
                let mut m = s.serialize_map(Some(order.len()))?;
                for k in order {
                    let v = &self.0.iter().find(|(kk, _)| kk == k).expect("key").1;
                    m.serialize_entry(k, v)?;
                }
                m.end()
            }
        }
        let mut m = s.serialize_map(Some(4))?;
        m.serialize_entry("metric", &self.metric)?;
        m.serialize_entry("tags", &self.tags.as_deref().map(Tags))?;
        m.serialize_entry("tsuid", &self.tsuid)?;
        m.serialize_entry("displayName", &self.display_name)?;
        m.end()
    }
}

/// A branch as the HTTP API writes it: `/api/tree/branch` (children
/// without their own children or leaves) and `/api/tree/test` (the root
/// and the one path a series took).
#[derive(Debug, Clone, PartialEq)]
pub struct BranchJson {
    pub tree_id: u16,
    /// Depth → name, this branch's own name last.
    pub path: BTreeMap<i32, String>,
    pub display_name: String,
    /// `null` when the branch has none.
    pub leaves: Option<Vec<Leaf>>,
    pub branches: Option<Vec<BranchJson>>,
}

impl BranchJson {
    /// Sorts (and folds) leaves and children as OpenTSDB's `TreeSet`s do:
    /// by display name ignoring case, one entry per name.
    pub fn sorted(mut self) -> BranchJson {
        if let Some(l) = &mut self.leaves {
            l.sort_by(|a, b| compare_ignore_case(&a.display_name, &b.display_name));
            l.dedup_by(|a, b| compare_ignore_case(&a.display_name, &b.display_name).is_eq());
        }
        if let Some(b) = self.branches.take() {
            let mut b: Vec<BranchJson> = b.into_iter().map(BranchJson::sorted).collect();
            b.sort_by(|x, y| compare_ignore_case(&x.display_name, &y.display_name));
            b.dedup_by(|x, y| compare_ignore_case(&x.display_name, &y.display_name).is_eq());
            self.branches = Some(b);
        }
        self
    }
}

/// Jackson's order for Branch: the properties backed by fields
/// (`leaves, branches, path`), then the getters.
impl Serialize for BranchJson {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(7))?;
        m.serialize_entry("leaves", &self.leaves)?;
        m.serialize_entry("branches", &self.branches)?;
        m.serialize_entry("path", &self.path)?;
        m.serialize_entry("treeId", &self.tree_id)?;
        m.serialize_entry("displayName", &self.display_name)?;
        m.serialize_entry("branchId", &to_hex(&branch_id(self.tree_id, &self.path)))?;
        m.serialize_entry("depth", &self.path.keys().next_back().copied().unwrap_or(0))?;
        m.end()
    }
}

/// `String.compareToIgnoreCase`, which orders OpenTSDB's branch and leaf
/// sets (and decides that two names differing in case are one branch).
pub fn compare_ignore_case(a: &str, b: &str) -> std::cmp::Ordering {
    let fold = |c: u16| -> u16 {
        let up = char::from_u32(c as u32)
            .map(|ch| ch.to_uppercase().next().unwrap_or(ch))
            .unwrap_or('\0');
        let low = up.to_lowercase().next().unwrap_or(up);
        if (low as u32) <= 0xFFFF {
            low as u16
        } else {
            c
        }
    };
    let (mut x, mut y) = (a.encode_utf16(), b.encode_utf16());
    loop {
        match (x.next(), y.next()) {
            (None, None) => return std::cmp::Ordering::Equal,
            (None, Some(_)) => return std::cmp::Ordering::Less,
            (Some(_), None) => return std::cmp::Ordering::Greater,
            (Some(p), Some(q)) => {
                if p != q {
                    let (fp, fq) = (fold(p), fold(q));
                    if fp != fq {
                        return fp.cmp(&fq);
                    }
                }
            }
        }
    }
}

/// Tree rows: what the tree processing and `/api/tree` read and write.
///
/// Tree ids are 1..=65535, branch ids as [`branch_id`] builds them,
/// series by their TSUID bytes. Each method is atomic on its own; the
/// "if absent" writes are atomic against each other within one process
/// (OpenTSDB uses HBase compare-and-set for them), which is what keeps
/// the first leaf of a name and records a later one as a collision.
pub trait TreeStore: Send + Sync {
    /// Every tree with a definition, by id.
    fn trees(&self) -> Result<Vec<Tree>>;

    /// One tree (`None` if it has no definition).
    fn tree(&self, tree_id: u16) -> Result<Option<Tree>>;

    /// Writes a tree's definition, replacing what was stored.
    fn put_definition(&self, tree_id: u16, def: &TreeDefinition) -> Result<()>;

    /// Stores a new tree under the next id (one more than the highest in
    /// use), atomically against other creations: its id, or `None` when
    /// all 65535 are taken.
    fn create_tree(&self, def: &TreeDefinition) -> Result<Option<u16>>;

    /// Writes a rule at its tree, level and order, replacing what was
    /// stored.
    fn put_rule(&self, rule: &TreeRule) -> Result<()>;

    fn delete_rule(&self, tree_id: u16, level: i32, order: i32) -> Result<()>;

    /// Deletes every rule of a tree.
    fn delete_rules(&self, tree_id: u16) -> Result<()>;

    /// The stored branch `id`, without children or leaves.
    fn branch(&self, id: &[u8]) -> Result<Option<StoredBranch>>;

    /// The branch `id`, its direct children and its leaves' cells.
    fn branch_with_children(&self, id: &[u8]) -> Result<Option<BranchCells>>;

    /// Stores a branch unless one is stored under `id`; whether it wrote.
    fn put_branch_if_absent(&self, id: &[u8], branch: &StoredBranch) -> Result<bool>;

    /// Stores a leaf in branch `id` unless a leaf of the same name hash is
    /// there: `None` when written, else the leaf found.
    fn put_leaf_if_absent(&self, id: &[u8], leaf: &StoredLeaf) -> Result<Option<StoredLeaf>>;

    /// Records collisions: (TSUID bytes not added, the TSUID that holds
    /// the leaf).
    fn put_collisions(&self, tree_id: u16, collisions: &[(Vec<u8>, String)]) -> Result<()>;

    /// Records series that failed strict matching, with the rules missed.
    fn put_not_matched(&self, tree_id: u16, not_matched: &[(Vec<u8>, String)]) -> Result<()>;

    /// Recorded collisions, all or those of `tsuids`.
    fn collisions(
        &self,
        tree_id: u16,
        tsuids: Option<&[Vec<u8>]>,
    ) -> Result<Vec<(Vec<u8>, String)>>;

    /// Recorded not-matched series, all or those of `tsuids`.
    fn not_matched(
        &self,
        tree_id: u16,
        tsuids: Option<&[Vec<u8>]>,
    ) -> Result<Vec<(Vec<u8>, String)>>;

    /// `Tree.deleteTree`: deletes a tree's branches, leaves, collisions
    /// and not-matched entries, and its definition and rules when
    /// `definition`. The number of cells deleted.
    fn delete_tree(&self, tree_id: u16, definition: bool) -> Result<u64>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branch_ids_hash_each_name_below_the_root() {
        let mut path = BTreeMap::new();
        path.insert(0, "ROOT".to_string());
        assert_eq!(to_hex(&branch_id(1, &path)), "0001");
        path.insert(1, "sys".to_string());
        // "sys".hashCode() = 114381 = 0x0001BECD (OpenTSDB's docs example).
        assert_eq!(to_hex(&branch_id(1, &path)), "00010001BECD");
        path.insert(2, "cpu".to_string());
        assert_eq!(to_hex(&branch_id(1, &path)), "00010001BECD000181A8");
    }

    #[test]
    fn branch_id_text() {
        assert_eq!(parse_branch_id("0001").unwrap(), vec![0, 1]);
        assert_eq!(parse_branch_id("00101").unwrap(), vec![0, 1, 1]);
        assert!(
            matches!(parse_branch_id("01"), Err(TreeError::Invalid(m)) if m == "Branch ID was too short")
        );
        assert!(parse_branch_id("00zz").is_err());
    }

    #[test]
    fn rule_validation_messages() {
        let mut r = TreeRule::new(1);
        assert_eq!(r.validate().unwrap_err().to_string(), "Missing rule type");
        r.kind = Some(RuleType::Tagk);
        assert_eq!(
            r.validate().unwrap_err().to_string(),
            "Missing field name required for TAGK rule"
        );
        r.kind = Some(RuleType::TagvCustom);
        r.field = "host".into();
        assert_eq!(
            r.validate().unwrap_err().to_string(),
            "Missing custom field name required for TAGV_CUSTOM rule"
        );
        r.kind = Some(RuleType::Metric);
        r.regex_group_idx = -1;
        assert_eq!(
            r.validate().unwrap_err().to_string(),
            "Invalid regex group index. Cannot be less than 0"
        );
        assert_eq!(
            RuleType::parse("TagK_Custom").unwrap(),
            RuleType::TagkCustom
        );
        assert_eq!(
            RuleType::parse("x").unwrap_err().to_string(),
            "Unrecognized rule type"
        );
    }

    #[test]
    fn rule_json_is_jacksons() {
        let mut r = TreeRule::new(1);
        r.kind = Some(RuleType::Metric);
        r.separator = "\\.".into();
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"type":"METRIC","field":"","regex":"","separator":"\\.","description":"","notes":"","level":0,"order":0,"treeId":1,"customField":"","regexGroupIdx":0,"displayFormat":""}"#
        );
    }

    #[test]
    fn ignore_case_order() {
        use std::cmp::Ordering::*;
        assert_eq!(compare_ignore_case("Web", "web"), Equal);
        assert_eq!(compare_ignore_case("a", "B"), Less);
        assert_eq!(compare_ignore_case("b", "A"), Greater);
    }
}
