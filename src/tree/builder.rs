//! OpenTSDB's `TreeBuilder`: one series (its TSMeta: metric, tags and
//! their UIDMeta custom fields) through one tree's rules, level by level,
//! giving the path of branches it belongs under and the leaf that names
//! it, or the rules it failed.
//!
//! How a level names a branch (`processRuleset`): its rules are tried in
//! order until one gives a display name. A rule reads the metric, a tag's
//! value (TAGK, by tag key), or a custom field of the metric's, a tag
//! key's or a tag value's UIDMeta; it then keeps a regex group, or splits
//! on a separator (each piece becomes one level, the same rule going on
//! until the pieces run out), or takes the value whole; the display
//! format may wrap it (`{ovalue}`, `{value}`, `{tsuid}`, `{tag_name}`).
//! The last name becomes the leaf (it names the series inside its parent
//! branch); a level that names nothing is skipped, and recorded as not
//! matched. The recursion and its messages follow 2.4.1 step by step,
//! because `/api/tree/test` shows them to users.
//!
//! Pure logic: storing the result is the caller's (`Db`'s) business.

use std::collections::BTreeMap;

use regex::Regex;

use super::{
    BranchJson, Leaf, Result, RuleType, StoredBranch, StoredLeaf, Tree, TreeError, TreeRule,
    branch_id, compare_ignore_case, leaf_hash, to_hex,
};
use crate::meta::{TsMeta, UidMeta};

/// Levels one series may descend (rule levels plus separator pieces).
/// OpenTSDB has no bound; its recursion would overflow the stack on a
/// name of thousands of pieces, rtsdb refuses the series instead.
pub const MAX_DEPTH: i32 = 512;

/// The display name and path of a tree's root branch.
pub const ROOT_NAME: &str = "ROOT";

/// The root branch a tree starts with.
pub fn new_root() -> StoredBranch {
    StoredBranch {
        path: BTreeMap::from([(0, ROOT_NAME.to_string())]),
        display_name: ROOT_NAME.to_string(),
    }
}

/// One branch on the way down, with what processing put in it.
#[derive(Debug, Clone, PartialEq)]
pub struct PathBranch {
    pub id: Vec<u8>,
    pub branch: StoredBranch,
    pub leaves: Vec<StoredLeaf>,
}

/// What processing one series gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Strict matching failed on these rules (`[tree:level:order:TYPE]`,
    /// space separated).
    NotMatched(String),
    /// No branch came out of the rules.
    Nothing,
    /// The branches from the root's child down, each with its leaves.
    Path(Vec<PathBranch>),
}

/// The result of [`TreeBuilder::process`].
#[derive(Debug, Clone)]
pub struct Processed {
    pub outcome: Outcome,
    /// Step by step, as `/api/tree/test` reports it.
    pub messages: Vec<String>,
    /// The root with the path the series took (for `/api/tree/test`).
    pub root: BranchJson,
}

/// A tree's rules, compiled once for many series.
pub struct TreeBuilder<'t> {
    tree: &'t Tree,
    regexes: BTreeMap<(i32, i32), Regex>,
    separators: BTreeMap<(i32, i32), Separator>,
    max_level: i32,
}

/// A rule's separator: Java's `String.split` takes it as a regex; one
/// Rust's regex cannot compile (Java-only syntax) splits literally.
enum Separator {
    Regex(Regex),
    Literal(String),
}

impl<'t> TreeBuilder<'t> {
    pub fn new(tree: &'t Tree) -> Result<TreeBuilder<'t>> {
        let mut regexes = BTreeMap::new();
        let mut separators = BTreeMap::new();
        // Keyed by the rule's own level and order, which processing reads.
        for rule in tree.rules.values().flat_map(|o| o.values()) {
            let key = (rule.level, rule.order);
            if let Some(re) = rule.compiled_regex()? {
                regexes.insert(key, re);
            }
            if !rule.separator.is_empty() {
                let sep = Regex::new(&rule.separator)
                    .map(Separator::Regex)
                    .unwrap_or_else(|_| Separator::Literal(rule.separator.clone()));
                separators.insert(key, sep);
            }
        }
        Ok(TreeBuilder {
            tree,
            regexes,
            separators,
            max_level: tree.rules.keys().next_back().copied().unwrap_or(0),
        })
    }

    /// Runs one series through the rules, starting from `root` (the stored
    /// root branch, or a new one).
    pub fn process(&self, meta: &TsMeta, root: &StoredBranch) -> Result<Processed> {
        let mut run = Run {
            b: self,
            meta,
            nodes: vec![Node {
                name: root.display_name.clone(),
                path: Some(root.path.clone()),
                leaves: None,
                children: None,
            }],
            current: None,
            splits: None,
            split_idx: 0,
            rule_idx: 0,
            rule: None,
            not_matched: None,
            messages: Vec::new(),
        };
        run.process_ruleset(0, 1)?;
        let tree_id = self.tree.tree_id;
        let outcome = match (&run.not_matched, run.current) {
            (Some(nm), _) if !nm.is_empty() && self.tree.def.strict_match => {
                let m = format!(
                    "TSUID failed to match one or more rule levels, will not add: {}",
                    meta.tsuid
                );
                run.messages.push(m);
                Outcome::NotMatched(nm.clone())
            }
            (_, None) => {
                tracing::warn!(tsuid = %meta.tsuid, tree_id, "processing resulted in a null branch");
                Outcome::Nothing
            }
            (_, Some(first)) => {
                let mut path = Vec::new();
                let mut parent_path = root.path.clone();
                let mut at = Some(first);
                while let Some(i) = at {
                    let node = &run.nodes[i];
                    let mut p = parent_path.clone();
                    // `compileBranchId`: the branch's own name ends its path.
                    if p.values().next_back() != Some(&node.name) {
                        let depth = p.keys().next_back().map_or(0, |d| d + 1);
                        p.insert(depth, node.name.clone());
                    }
                    path.push(PathBranch {
                        id: branch_id(tree_id, &p),
                        branch: StoredBranch {
                            path: p.clone(),
                            display_name: node.name.clone(),
                        },
                        leaves: node.leaves.clone().unwrap_or_default(),
                    });
                    parent_path = p;
                    at = node.children.as_ref().and_then(|c| c.first().copied());
                }
                Outcome::Path(path)
            }
        };
        // A leaf hung on the root itself (a tree of one level) shows in
        // the test view only: OpenTSDB then has no branch to store.
        let root_leaves = run.nodes[0].leaves.as_ref().map(|l| {
            l.iter()
                .map(|l| Leaf {
                    display_name: l.display_name.clone(),
                    tsuid: l.tsuid.clone(),
                    metric: String::new(),
                    tags: None,
                })
                .collect()
        });
        let mut root_json = BranchJson {
            tree_id,
            path: root.path.clone(),
            display_name: root.display_name.clone(),
            leaves: root_leaves,
            branches: None,
        };
        if let Outcome::Path(p) = &outcome {
            // The test view hangs the path under the root.
            let mut child: Option<BranchJson> = None;
            for pb in p.iter().rev() {
                let leaves = (!pb.leaves.is_empty()).then(|| {
                    pb.leaves
                        .iter()
                        .map(|l| Leaf {
                            display_name: l.display_name.clone(),
                            tsuid: l.tsuid.clone(),
                            metric: String::new(),
                            tags: None,
                        })
                        .collect()
                });
                child = Some(BranchJson {
                    tree_id,
                    path: pb.branch.path.clone(),
                    display_name: pb.branch.display_name.clone(),
                    leaves,
                    branches: child.map(|c| vec![c]),
                });
            }
            root_json.branches = child.map(|c| vec![c]);
        }
        Ok(Processed {
            outcome,
            messages: run.messages,
            root: root_json.sorted(),
        })
    }
}

/// A branch under construction (OpenTSDB's `Branch` objects are shared
/// between recursion frames; here they live in one arena, by index).
struct Node {
    name: String,
    path: Option<BTreeMap<i32, String>>,
    leaves: Option<Vec<StoredLeaf>>,
    /// Kept sorted by name ignoring case, one per name (a `TreeSet`).
    children: Option<Vec<usize>>,
}

/// The state of one `processTimeseriesMeta`.
struct Run<'b, 't> {
    b: &'b TreeBuilder<'t>,
    meta: &'b TsMeta,
    nodes: Vec<Node>,
    current: Option<usize>,
    splits: Option<Vec<String>>,
    split_idx: usize,
    rule_idx: i32,
    rule: Option<&'t TreeRule>,
    not_matched: Option<String>,
    messages: Vec<String>,
}

impl<'t> Run<'_, 't> {
    fn name(&self, i: Option<usize>) -> &str {
        i.map_or("", |i| &self.nodes[i].name)
    }

    /// `Branch.toString`.
    fn describe(&self, i: usize) -> String {
        let n = &self.nodes[i];
        match &n.path {
            None => format!("Name: [{}]", n.name),
            Some(p) => {
                let mut p = p.clone();
                if p.values().next_back() != Some(&n.name) {
                    let depth = p.keys().next_back().map_or(0, |d| d + 1);
                    p.insert(depth, n.name.clone());
                }
                format!(
                    "ID: [{}] Name: [{}]",
                    to_hex(&branch_id(self.b.tree.tree_id, &p)),
                    n.name
                )
            }
        }
    }

    fn rule(&self) -> &'t TreeRule {
        self.rule.expect("a rule is being processed")
    }

    fn label(&self) -> String {
        self.rule().label()
    }

    fn new_node(&mut self) -> usize {
        self.nodes.push(Node {
            name: String::new(),
            path: None,
            leaves: None,
            children: None,
        });
        self.nodes.len() - 1
    }

    /// `processRuleset`: whether processing reached the last level.
    fn process_ruleset(&mut self, parent: usize, mut depth: i32) -> Result<bool> {
        if self.rule_idx > self.b.max_level {
            return Ok(true);
        }
        if depth > MAX_DEPTH {
            return Err(TreeError::Invalid(format!(
                "Processing TSUID {} went deeper than {MAX_DEPTH} levels",
                self.meta.tsuid
            )));
        }
        let previous = self.current;
        let node = self.new_node();
        self.current = Some(node);
        let Some(level) = self.fetch_rule_level() else {
            return Ok(true);
        };
        for rule in level.values() {
            self.rule = Some(rule);
            self.messages
                .push(format!("Processing rule: {}", rule.label()));
            match rule.kind {
                Some(RuleType::Metric) => self.parse_metric_rule()?,
                Some(RuleType::Tagk) => self.parse_tagk_rule()?,
                Some(RuleType::MetricCustom) => self.parse_metric_custom_rule()?,
                Some(RuleType::TagkCustom) => self.parse_tagk_custom_rule()?,
                Some(RuleType::TagvCustom) => self.parse_tagv_custom_rule()?,
                None => {
                    return Err(TreeError::Invalid(format!(
                        "Unkown rule type: {}",
                        rule.label()
                    )));
                }
            }
            if !self.name(self.current).is_empty() {
                break;
            }
        }
        if self.name(self.current).is_empty() {
            let label = self.label();
            match &mut self.not_matched {
                None => self.not_matched = Some(label),
                Some(nm) => {
                    nm.push(' ');
                    nm.push_str(&label);
                }
            }
        }
        match &self.splits {
            Some(s) if self.split_idx >= s.len() => {
                self.splits = None;
                self.split_idx = 0;
                self.rule_idx += 1;
            }
            Some(_) => {}
            None => self.rule_idx += 1,
        }
        depth += 1;
        let current = self.current.expect("set above");
        let complete = self.process_ruleset(current, depth)?;
        if complete {
            if self.name(self.current).is_empty() {
                self.current = previous;
                return Ok(true);
            }
            if self.nodes[parent].name.is_empty() {
                self.messages.push(format!(
                    "Depth [{depth}] Parent branch was empty, rolling back"
                ));
                return Ok(true);
            }
            let leaf = StoredLeaf {
                display_name: self.name(self.current).to_string(),
                tsuid: self.meta.tsuid.clone(),
            };
            self.add_leaf(parent, leaf.clone());
            let parent_text = self.describe(parent);
            self.messages.push(format!(
                "Depth [{depth}] Adding leaf [name: {} tsuid: {}] to parent branch [{parent_text}]",
                leaf.display_name, leaf.tsuid
            ));
            self.current = previous;
            return Ok(false);
        }
        let cur = self.current.expect("a frame's branch");
        if self.name(previous).is_empty() && !self.nodes[cur].name.is_empty() {
            if depth > 2 {
                let text = self.describe(cur);
                self.messages.push(format!(
                    "Depth [{depth}] Skipping a non-matched branch, returning: {text}"
                ));
            }
            return Ok(false);
        }
        if self.nodes[cur].name.is_empty() {
            self.messages
                .push(format!("Depth [{depth}] Branch was empty"));
            self.current = previous;
            return Ok(false);
        }
        if self.nodes[cur].name == self.name(previous) {
            self.messages
                .push(format!("Depth [{depth}] Current was the same as previous"));
            return Ok(false);
        }
        self.add_child(parent, cur);
        let (c, p) = (self.describe(cur), self.describe(parent));
        self.messages
            .push(format!("Depth [{depth}] Adding branch: {c} to parent: {p}"));
        self.current = previous;
        Ok(false)
    }

    fn fetch_rule_level(&mut self) -> Option<&'t BTreeMap<i32, TreeRule>> {
        while self.rule_idx <= self.b.max_level {
            if let Some(level) = self.b.tree.rules.get(&self.rule_idx) {
                return Some(level);
            }
            self.rule_idx += 1;
        }
        None
    }

    /// `Branch.addLeaf`: one leaf per name hash; another series under the
    /// same name is a collision (recorded when the leaf is stored).
    fn add_leaf(&mut self, branch: usize, leaf: StoredLeaf) {
        let leaves = self.nodes[branch].leaves.get_or_insert_with(Vec::new);
        let hash = leaf_hash(&leaf.display_name);
        if let Some(existing) = leaves.iter().find(|l| leaf_hash(&l.display_name) == hash) {
            if existing.tsuid != leaf.tsuid {
                tracing::warn!(tsuid = %leaf.tsuid, existing = %existing.tsuid, name = %existing.display_name, "leaf collision");
            }
            return;
        }
        leaves.push(leaf);
    }

    /// `Branch.addChild` into a set ordered by name ignoring case.
    fn add_child(&mut self, parent: usize, child: usize) {
        let name = self.nodes[child].name.clone();
        let names: Vec<String> = self.nodes[parent]
            .children
            .iter()
            .flatten()
            .map(|&c| self.nodes[c].name.clone())
            .collect();
        match names.binary_search_by(|n| compare_ignore_case(n, &name)) {
            Ok(_) => {}
            Err(at) => self.nodes[parent]
                .children
                .get_or_insert_with(Vec::new)
                .insert(at, child),
        }
    }

    fn parse_metric_rule(&mut self) -> Result<()> {
        let metric = self.meta.metric.name.clone();
        if metric.is_empty() {
            return Err(TreeError::Invalid(
                "Timeseries metric name was null or empty".into(),
            ));
        }
        self.process_parsed_value(&metric)
    }

    fn tags(&self) -> Result<&'_ [UidMeta]> {
        if self.meta.tags.is_empty() {
            return Err(TreeError::Invalid(
                "Tags for the timeseries meta were null".into(),
            ));
        }
        Ok(&self.meta.tags)
    }

    fn parse_tagk_rule(&mut self) -> Result<()> {
        let field = self.rule().field.clone();
        let mut found = false;
        let mut value = String::new();
        for m in self.tags()? {
            if m.kind == "TAGK" && m.name == field {
                found = true;
            } else if m.kind == "TAGV" && found {
                value = m.name.clone();
                break;
            }
        }
        if !found || value.is_empty() {
            let label = self.label();
            self.messages
                .push(format!("No match on tagk [{field}] for rule: {label}"));
            return Ok(());
        }
        let label = self.label();
        self.messages
            .push(format!("Matched tagk [{field}] for rule: {label}"));
        self.process_parsed_value(&value)
    }

    /// The custom field of a UIDMeta, processed if present.
    fn parse_custom(&mut self, custom: Option<String>) -> Result<()> {
        let (cf, label) = (self.rule().custom_field.clone(), self.label());
        match custom {
            Some(v) => {
                self.process_parsed_value(&v)?;
                self.messages
                    .push(format!("Matched custom tag [{cf}] for rule: {label}"));
            }
            None => self
                .messages
                .push(format!("No match on custom tag [{cf}] for rule: {label}")),
        }
        Ok(())
    }

    fn custom_of(&self, m: &UidMeta) -> Option<String> {
        m.custom
            .as_ref()
            .and_then(|c| c.get(&self.rule().custom_field).cloned())
    }

    fn parse_metric_custom_rule(&mut self) -> Result<()> {
        let v = self.custom_of(&self.meta.metric);
        self.parse_custom(v)
    }

    fn parse_tagk_custom_rule(&mut self) -> Result<()> {
        self.parse_tag_custom("TAGK", "tagk")
    }

    fn parse_tagv_custom_rule(&mut self) -> Result<()> {
        self.parse_tag_custom("TAGV", "tagv")
    }

    /// TAGK_CUSTOM / TAGV_CUSTOM: the UIDMeta of the tag key (or value)
    /// named by the rule's field, then its custom field.
    fn parse_tag_custom(&mut self, kind: &str, word: &str) -> Result<()> {
        if self.meta.tags.is_empty() {
            return Err(TreeError::Invalid(
                "Timeseries meta data was missing tags".into(),
            ));
        }
        let field = self.rule().field.clone();
        let label = self.label();
        let Some(m) = self
            .meta
            .tags
            .iter()
            .find(|m| m.kind == kind && m.name == field)
        else {
            self.messages
                .push(format!("No match on {word} [{field}] for rule: {label}"));
            return Ok(());
        };
        self.messages
            .push(format!("Matched {word} [{field}] for rule: {label}"));
        let v = self.custom_of(m);
        self.parse_custom(v)
    }

    fn key(&self) -> (i32, i32) {
        let r = self.rule();
        (r.level, r.order)
    }

    fn process_parsed_value(&mut self, value: &str) -> Result<()> {
        let key = self.key();
        if self.b.regexes.contains_key(&key) {
            self.process_regex_rule(value);
        } else if self.b.separators.contains_key(&key) {
            self.process_split(value)?;
        } else {
            self.set_current_name(value, value);
        }
        Ok(())
    }

    fn process_split(&mut self, value: &str) -> Result<()> {
        if self.splits.is_none() {
            if value.is_empty() {
                return Err(TreeError::Invalid(format!(
                    "Value was empty for rule: {}",
                    self.label()
                )));
            }
            let splits = match &self.b.separators[&self.key()] {
                Separator::Regex(re) => java_split(value, re),
                Separator::Literal(sep) => literal_split(value, sep),
            };
            if splits.is_empty() {
                let label = self.label();
                self.messages.push(format!(
                    "Separator did not match, created an empty list on rule: {label}"
                ));
                self.splits = Some(splits);
                self.split_idx = 1;
                return Ok(());
            }
            let first = splits[0].clone();
            self.splits = Some(splits);
            self.split_idx = 0;
            self.set_current_name(value, &first);
            self.split_idx += 1;
        } else {
            let piece = self
                .splits
                .as_ref()
                .and_then(|s| s.get(self.split_idx).cloned())
                .unwrap_or_default();
            self.set_current_name(value, &piece);
            self.split_idx += 1;
        }
        Ok(())
    }

    fn process_regex_rule(&mut self, value: &str) {
        let re = &self.b.regexes[&self.key()];
        let Some(caps) = re.captures(value) else {
            return;
        };
        let groups = caps.len() - 1;
        let idx = self.rule().regex_group_idx;
        let label = self.label();
        if groups as i64 > idx as i64 {
            match caps.get(idx as usize + 1).map(|m| m.as_str()) {
                Some(extracted) if !extracted.is_empty() => {
                    let extracted = extracted.to_string();
                    self.set_current_name(value, &extracted);
                }
                _ => self.messages.push(format!(
                    "Extracted value for rule {label} was null or empty"
                )),
            }
        } else {
            self.messages.push(format!(
                "Regex group index [{idx}] for rule {label} was out of bounds [{groups}]"
            ));
        }
    }

    fn set_current_name(&mut self, original: &str, extracted: &str) {
        let rule = self.rule();
        let cur = self.current.expect("a frame's branch");
        if rule.display_format.is_empty() {
            self.nodes[cur].name = extracted.to_string();
            return;
        }
        let mut f = rule
            .display_format
            .replace("{ovalue}", original)
            .replace("{value}", extracted)
            .replace("{tsuid}", &self.meta.tsuid);
        if f.contains("{tag_name}") {
            let name = match rule.kind {
                Some(RuleType::Tagk) => rule.field.as_str(),
                Some(RuleType::MetricCustom | RuleType::TagkCustom | RuleType::TagvCustom) => {
                    rule.custom_field.as_str()
                }
                _ => {
                    let m = format!(
                        "Display rule {} was of the wrong type to match on {{tag_name}}",
                        rule.label()
                    );
                    tracing::warn!("{m}");
                    self.messages.push(m);
                    ""
                }
            };
            f = f.replace("{tag_name}", name);
        }
        self.nodes[cur].name = f;
    }
}

/// Java's `String.split(regex)`: a zero-width match at the start makes no
/// leading empty piece, and trailing empty pieces are dropped.
fn java_split(s: &str, re: &Regex) -> Vec<String> {
    let mut parts = Vec::new();
    let mut index = 0;
    let mut any = false;
    for m in re.find_iter(s) {
        if index == 0 && m.start() == 0 && m.end() == 0 {
            continue;
        }
        parts.push(s[index..m.start()].to_string());
        index = m.end();
        any = true;
    }
    if !any {
        return vec![s.to_string()];
    }
    parts.push(s[index..].to_string());
    while parts.last().is_some_and(String::is_empty) {
        parts.pop();
    }
    parts
}

fn literal_split(s: &str, sep: &str) -> Vec<String> {
    let mut parts: Vec<String> = s.split(sep).map(str::to_string).collect();
    while parts.last().is_some_and(String::is_empty) {
        parts.pop();
    }
    parts
}

#[cfg(test)]
mod tests;
