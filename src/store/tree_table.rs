//! The embedded [`TreeStore`]: OpenTSDB's `tsdb-tree` table (section 5.8
//! of the map) as the `tsdb-tree` keyspace, one engine entry per HBase
//! cell. Format: docs/format/tree.md.
//!
//! Rows are OpenTSDB's: the tree id (2 bytes) holds the definition
//! (`tree`), the rules (`tree_rule:<level>:<order>`) and the root branch
//! (`branch`); `<id> 01` the collisions (`tree_collision:<TSUID>`),
//! `<id> 02` the not-matched series (`tree_not_matched:<TSUID>`); a branch
//! row is the tree id then 4 bytes per name on its path, holding `branch`
//! and its leaves (`leaf:<name hash>`).
//!
//! Rows and qualifiers are arbitrary bytes, so an engine key is the row
//! with each 00 written as `00 FF`, then `00 01`, then the qualifier:
//! keys sort as HBase sorts (row, then qualifier), a row sorts before the
//! rows it prefixes, and every cell of a tree starts with its escaped id.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::storage::{KvStore, ScanRange, Table, WriteBatch, prefix_end};
use crate::tree::{
    BranchCells, Result, StoredBranch, StoredLeaf, Tree, TreeDefinition, TreeError, TreeRule,
    TreeStore, bytes_to_id, id_to_bytes,
};

pub(crate) const TREE_QUALIFIER: &[u8] = b"tree";
pub(crate) const RULE_PREFIX: &[u8] = b"tree_rule:";
pub(crate) const BRANCH_QUALIFIER: &[u8] = b"branch";
pub(crate) const LEAF_PREFIX: &[u8] = b"leaf:";
pub(crate) const COLLISION_PREFIX: &[u8] = b"tree_collision:";
pub(crate) const NOT_MATCHED_PREFIX: &[u8] = b"tree_not_matched:";
const COLLISION_ROW_SUFFIX: u8 = 0x01;
const NOT_MATCHED_ROW_SUFFIX: u8 = 0x02;
/// Cells deleted per write batch when purging a tree.
const DELETE_BATCH: usize = 10_000;

/// The escaped row: the start of every key of the row and of the rows it
/// prefixes.
pub(crate) fn row_prefix(row: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(row.len() + 4);
    for &b in row {
        k.push(b);
        if b == 0 {
            k.push(0xFF);
        }
    }
    k
}

/// The start of every key of exactly this row.
fn row_cells(row: &[u8]) -> Vec<u8> {
    let mut k = row_prefix(row);
    k.extend_from_slice(&[0, 1]);
    k
}

/// The engine key of one cell.
pub(crate) fn cell_key(row: &[u8], qualifier: &[u8]) -> Vec<u8> {
    let mut k = row_cells(row);
    k.extend_from_slice(qualifier);
    k
}

/// Splits an engine key into (row, qualifier); `None` if it is not one.
pub(crate) fn split_key(key: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let mut row = Vec::with_capacity(key.len());
    let mut i = 0;
    while i < key.len() {
        if key[i] == 0 {
            match key.get(i + 1)? {
                0xFF => row.push(0),
                1 => return Some((row, &key[i + 2..])),
                _ => return None,
            }
            i += 2;
        } else {
            row.push(key[i]);
            i += 1;
        }
    }
    None
}

fn rule_qualifier(level: i32, order: i32) -> Vec<u8> {
    let mut q = RULE_PREFIX.to_vec();
    q.extend_from_slice(format!("{level}:{order}").as_bytes());
    q
}

fn decode<T: serde::de::DeserializeOwned>(what: &str, v: &[u8]) -> Result<T> {
    serde_json::from_slice(v).map_err(|e| TreeError::Corrupt(format!("{what}: {e}")))
}

pub(crate) struct KvTreeStore {
    kv: Arc<dyn KvStore>,
    /// Makes the "if absent" writes atomic (HBase's compare-and-set).
    cas: Mutex<()>,
}

impl KvTreeStore {
    pub(crate) fn new(kv: Arc<dyn KvStore>) -> KvTreeStore {
        KvTreeStore {
            kv,
            cas: Mutex::new(()),
        }
    }

    /// Every cell of one row, in qualifier order.
    fn row(&self, row: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let prefix = row_cells(row);
        let mut cells = Vec::new();
        for item in self.kv.scan(Table::Tree, &ScanRange::prefix(&prefix)) {
            let (k, v) = item?;
            cells.push((k[prefix.len()..].to_vec(), v));
        }
        Ok(cells)
    }

    fn tree_from_row(tree_id: u16, cells: &[(Vec<u8>, Vec<u8>)]) -> Result<Option<Tree>> {
        let mut def = None;
        let mut rules = crate::tree::Rules::new();
        for (q, v) in cells {
            if q == TREE_QUALIFIER {
                def = Some(decode::<TreeDefinition>("tree definition", v)?);
            } else if q.len() > RULE_PREFIX.len() && q.starts_with(RULE_PREFIX) {
                let rule: TreeRule = decode("tree rule", v)?;
                rules
                    .entry(rule.level)
                    .or_default()
                    .insert(rule.order, rule);
            }
        }
        Ok(def.map(|def| Tree {
            tree_id,
            def,
            rules,
        }))
    }

    fn put(&self, row: &[u8], qualifier: &[u8], value: Vec<u8>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put(Table::Tree, cell_key(row, qualifier), value);
        Ok(self.kv.write(b)?)
    }

    fn failure_row(tree_id: u16, suffix: u8) -> Vec<u8> {
        let mut row = id_to_bytes(tree_id).to_vec();
        row.push(suffix);
        row
    }

    fn put_failures(
        &self,
        tree_id: u16,
        suffix: u8,
        prefix: &[u8],
        entries: &[(Vec<u8>, String)],
    ) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let row = Self::failure_row(tree_id, suffix);
        let mut b = WriteBatch::new();
        for (tsuid, value) in entries {
            let mut q = prefix.to_vec();
            q.extend_from_slice(tsuid);
            b.put(Table::Tree, cell_key(&row, &q), value.as_bytes().to_vec());
        }
        Ok(self.kv.write(b)?)
    }

    fn failures(
        &self,
        tree_id: u16,
        suffix: u8,
        prefix: &[u8],
        tsuids: Option<&[Vec<u8>]>,
    ) -> Result<Vec<(Vec<u8>, String)>> {
        let row = Self::failure_row(tree_id, suffix);
        let text = |v: &[u8]| v.iter().map(|&b| b as char).collect::<String>();
        let mut out = Vec::new();
        match tsuids.filter(|t| !t.is_empty()) {
            Some(tsuids) => {
                for tsuid in tsuids {
                    let mut q = prefix.to_vec();
                    q.extend_from_slice(tsuid);
                    if let Some(v) = self.kv.get(Table::Tree, &cell_key(&row, &q))? {
                        out.push((tsuid.clone(), text(&v)));
                    }
                }
            }
            None => {
                for (q, v) in self.row(&row)? {
                    if q.len() > prefix.len() && q.starts_with(prefix) {
                        out.push((q[prefix.len()..].to_vec(), text(&v)));
                    }
                }
            }
        }
        Ok(out)
    }
}

impl TreeStore for KvTreeStore {
    fn trees(&self) -> Result<Vec<Tree>> {
        let mut trees = Vec::new();
        let mut next: u32 = 1;
        // One short scan per tree: find the next tree id with any row,
        // read its definition row, skip its branches.
        while next <= crate::tree::MAX_TREE_ID as u32 {
            let start = row_prefix(&id_to_bytes(next as u16));
            let first = self
                .kv
                .scan(Table::Tree, &ScanRange::new(start, Vec::new()).limit(1))
                .next()
                .transpose()?;
            let Some((key, _)) = first else { break };
            let Some(id) = split_key(&key).and_then(|(row, _)| bytes_to_id(&row)) else {
                break;
            };
            let cells = self.row(&id_to_bytes(id))?;
            if let Some(tree) = Self::tree_from_row(id, &cells)? {
                trees.push(tree);
            }
            next = id as u32 + 1;
        }
        Ok(trees)
    }

    fn tree(&self, tree_id: u16) -> Result<Option<Tree>> {
        let cells = self.row(&id_to_bytes(tree_id))?;
        Self::tree_from_row(tree_id, &cells)
    }

    fn put_definition(&self, tree_id: u16, def: &TreeDefinition) -> Result<()> {
        let json = serde_json::to_vec(def).expect("json");
        self.put(&id_to_bytes(tree_id), TREE_QUALIFIER, json)
    }

    fn create_tree(&self, def: &TreeDefinition) -> Result<Option<u16>> {
        let _g = self.cas.lock();
        let max = self.trees()?.iter().map(|t| t.tree_id).max().unwrap_or(0);
        let Some(id) = max.checked_add(1) else {
            return Ok(None);
        };
        self.put_definition(id, def)?;
        Ok(Some(id))
    }

    fn put_rule(&self, rule: &TreeRule) -> Result<()> {
        let tree_id = crate::tree::check_tree_id(rule.tree_id)?;
        let json = serde_json::to_vec(rule).expect("json");
        self.put(
            &id_to_bytes(tree_id),
            &rule_qualifier(rule.level, rule.order),
            json,
        )
    }

    fn delete_rule(&self, tree_id: u16, level: i32, order: i32) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(
            Table::Tree,
            cell_key(&id_to_bytes(tree_id), &rule_qualifier(level, order)),
        );
        Ok(self.kv.write(b)?)
    }

    fn delete_rules(&self, tree_id: u16) -> Result<()> {
        let row = id_to_bytes(tree_id);
        let mut b = WriteBatch::new();
        for (q, _) in self.row(&row)? {
            if q.len() > RULE_PREFIX.len() && q.starts_with(RULE_PREFIX) {
                b.delete(Table::Tree, cell_key(&row, &q));
            }
        }
        Ok(self.kv.write(b)?)
    }

    fn branch(&self, id: &[u8]) -> Result<Option<StoredBranch>> {
        self.kv
            .get(Table::Tree, &cell_key(id, BRANCH_QUALIFIER))?
            .map(|v| decode("branch", &v))
            .transpose()
    }

    fn branch_with_children(&self, id: &[u8]) -> Result<Option<BranchCells>> {
        let mut branch = None;
        let mut leaves = Vec::new();
        for (q, v) in self.row(id)? {
            if q == BRANCH_QUALIFIER {
                branch = Some(decode::<StoredBranch>("branch", &v)?);
            } else if q.len() > LEAF_PREFIX.len() && q.starts_with(LEAF_PREFIX) {
                leaves.push(decode::<StoredLeaf>("leaf", &v)?);
            }
        }
        let Some(branch) = branch else {
            return Ok(None);
        };
        // Children are the rows of exactly 4 more bytes; each child's own
        // subtree is skipped with one seek.
        let mut children = Vec::new();
        let prefix = row_prefix(id);
        let end = prefix_end(&prefix);
        let mut start = row_cells(id);
        start.push(0xFF);
        loop {
            let item = self
                .kv
                .scan(
                    Table::Tree,
                    &ScanRange::new(start.clone(), end.clone()).limit(1),
                )
                .next()
                .transpose()?;
            let Some((key, _)) = item else { break };
            let Some((row, _)) = split_key(&key) else {
                break;
            };
            if row.len() == id.len() + 4 {
                if let Some(v) = self
                    .kv
                    .get(Table::Tree, &cell_key(&row, BRANCH_QUALIFIER))?
                {
                    children.push(decode::<StoredBranch>("branch", &v)?);
                }
                start = prefix_end(&row_prefix(&row));
            } else {
                // A deeper row under a child without its own branch cell:
                // skip to the next possible child.
                let child = &row[..(id.len() + 4).min(row.len())];
                start = prefix_end(&row_prefix(child));
            }
            if start.is_empty() {
                break;
            }
        }
        Ok(Some(BranchCells {
            branch,
            children,
            leaves,
        }))
    }

    fn put_branch_if_absent(&self, id: &[u8], branch: &StoredBranch) -> Result<bool> {
        let key = cell_key(id, BRANCH_QUALIFIER);
        let _g = self.cas.lock();
        if self.kv.get(Table::Tree, &key)?.is_some() {
            return Ok(false);
        }
        let mut b = WriteBatch::new();
        b.put(Table::Tree, key, serde_json::to_vec(branch).expect("json"));
        self.kv.write(b)?;
        Ok(true)
    }

    fn put_leaf_if_absent(&self, id: &[u8], leaf: &StoredLeaf) -> Result<Option<StoredLeaf>> {
        let mut q = LEAF_PREFIX.to_vec();
        q.extend_from_slice(&crate::tree::leaf_hash(&leaf.display_name));
        let key = cell_key(id, &q);
        let _g = self.cas.lock();
        if let Some(v) = self.kv.get(Table::Tree, &key)? {
            return Ok(Some(decode("leaf", &v)?));
        }
        let mut b = WriteBatch::new();
        b.put(Table::Tree, key, serde_json::to_vec(leaf).expect("json"));
        self.kv.write(b)?;
        Ok(None)
    }

    fn put_collisions(&self, tree_id: u16, collisions: &[(Vec<u8>, String)]) -> Result<()> {
        self.put_failures(tree_id, COLLISION_ROW_SUFFIX, COLLISION_PREFIX, collisions)
    }

    fn put_not_matched(&self, tree_id: u16, not_matched: &[(Vec<u8>, String)]) -> Result<()> {
        self.put_failures(
            tree_id,
            NOT_MATCHED_ROW_SUFFIX,
            NOT_MATCHED_PREFIX,
            not_matched,
        )
    }

    fn collisions(
        &self,
        tree_id: u16,
        tsuids: Option<&[Vec<u8>]>,
    ) -> Result<Vec<(Vec<u8>, String)>> {
        self.failures(tree_id, COLLISION_ROW_SUFFIX, COLLISION_PREFIX, tsuids)
    }

    fn not_matched(
        &self,
        tree_id: u16,
        tsuids: Option<&[Vec<u8>]>,
    ) -> Result<Vec<(Vec<u8>, String)>> {
        self.failures(tree_id, NOT_MATCHED_ROW_SUFFIX, NOT_MATCHED_PREFIX, tsuids)
    }

    fn delete_tree(&self, tree_id: u16, definition: bool) -> Result<u64> {
        let prefix = row_prefix(&id_to_bytes(tree_id));
        let mut deleted = 0u64;
        let mut b = WriteBatch::new();
        for item in self.kv.scan(Table::Tree, &ScanRange::prefix(&prefix)) {
            let (key, _) = item?;
            let Some((_, q)) = split_key(&key) else {
                continue;
            };
            let starts = |p: &[u8]| q.len() > p.len() && q.starts_with(p);
            let purge = q == BRANCH_QUALIFIER
                || starts(LEAF_PREFIX)
                || starts(COLLISION_PREFIX)
                || starts(NOT_MATCHED_PREFIX)
                || (definition && (q == TREE_QUALIFIER || starts(RULE_PREFIX)));
            if purge {
                b.delete(Table::Tree, key.clone());
                deleted += 1;
                if b.len() >= DELETE_BATCH {
                    self.kv.write(std::mem::take(&mut b))?;
                }
            }
        }
        self.kv.write(b)?;
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::memory::MemoryStore;
    use std::collections::BTreeMap;

    fn store() -> KvTreeStore {
        KvTreeStore::new(Arc::new(MemoryStore::default()))
    }

    #[test]
    fn keys_escape_rows_and_keep_hbase_order() {
        let k = cell_key(&[0, 1], b"tree");
        assert_eq!(k, b"\x00\xFF\x01\x00\x01tree");
        assert_eq!(split_key(&k), Some((vec![0, 1], &b"tree"[..])));
        // A row sorts before the rows it prefixes, whatever follows.
        let parent = cell_key(&[0, 1], b"leaf:\xFF\xFF\xFF\xFF");
        let child_zero = cell_key(&[0, 1, 0, 0, 0, 0], b"branch");
        let child_one = cell_key(&[0, 1, 1, 0, 0, 0], b"branch");
        assert!(parent < child_zero && child_zero < child_one);
        assert!(cell_key(&[0, 1, 0xFF], b"a") < cell_key(&[0, 2], b"a"));
    }

    fn branch(path: &[&str]) -> (Vec<u8>, StoredBranch) {
        let path: BTreeMap<i32, String> = path
            .iter()
            .enumerate()
            .map(|(i, n)| (i as i32, n.to_string()))
            .collect();
        let b = StoredBranch {
            display_name: path.values().next_back().unwrap().clone(),
            path,
        };
        (crate::tree::branch_id(1, &b.path), b)
    }

    #[test]
    fn qualifiers_are_opentsdbs() {
        // TestLeaf.columnQualifier: "leaf:" + "Leaf".hashCode().
        let mut q = LEAF_PREFIX.to_vec();
        q.extend_from_slice(&crate::tree::leaf_hash("Leaf"));
        assert_eq!(crate::tree::to_hex(&q), "6C6561663A0024137E");
        // TestTreeRule.getQualifier.
        assert_eq!(rule_qualifier(1, 2), b"tree_rule:1:2");
    }

    #[test]
    fn trees_branches_leaves_and_purge() {
        let s = store();
        for id in [1u16, 3] {
            s.put_definition(
                id,
                &TreeDefinition {
                    name: format!("t{id}"),
                    ..Default::default()
                },
            )
            .unwrap();
        }
        let mut rule = TreeRule::new(1);
        rule.kind = Some(crate::tree::RuleType::Metric);
        rule.level = 1;
        s.put_rule(&rule).unwrap();
        let (root_id, root) = branch(&["ROOT"]);
        let (sys_id, sys) = branch(&["ROOT", "sys"]);
        let (cpu_id, cpu) = branch(&["ROOT", "sys", "cpu"]);
        let (mem_id, mem) = branch(&["ROOT", "mem"]);
        assert!(s.put_branch_if_absent(&root_id, &root).unwrap());
        assert!(!s.put_branch_if_absent(&root_id, &root).unwrap());
        for (id, b) in [(&sys_id, &sys), (&cpu_id, &cpu), (&mem_id, &mem)] {
            s.put_branch_if_absent(id, b).unwrap();
        }
        let leaf = StoredLeaf {
            display_name: "user".into(),
            tsuid: "000001000001000001".into(),
        };
        assert_eq!(s.put_leaf_if_absent(&cpu_id, &leaf).unwrap(), None);
        let other = StoredLeaf {
            tsuid: "000001000001000002".into(),
            ..leaf.clone()
        };
        assert_eq!(
            s.put_leaf_if_absent(&cpu_id, &other).unwrap(),
            Some(leaf.clone())
        );

        assert_eq!(s.create_tree(&TreeDefinition::default()).unwrap(), Some(4));
        s.put_definition(u16::MAX, &TreeDefinition::default())
            .unwrap();
        assert_eq!(s.create_tree(&TreeDefinition::default()).unwrap(), None);
        let trees = s.trees().unwrap();
        assert_eq!(
            trees.iter().map(|t| t.tree_id).collect::<Vec<_>>(),
            [1, 3, 4, u16::MAX]
        );
        assert_eq!(trees[0].rule(1, 0), Some(&rule));

        let BranchCells {
            branch: b,
            children,
            leaves,
        } = s.branch_with_children(&root_id).unwrap().unwrap();
        assert_eq!(b, root);
        // Only direct children, in key order; cpu (a grandchild) is not one.
        let names: Vec<&str> = children.iter().map(|c| c.display_name.as_str()).collect();
        assert_eq!(names.len(), 2);
        assert!(names.contains(&"sys") && names.contains(&"mem"));
        assert!(leaves.is_empty());
        let BranchCells {
            children, leaves, ..
        } = s.branch_with_children(&cpu_id).unwrap().unwrap();
        assert!(children.is_empty());
        assert_eq!(leaves, vec![leaf]);

        s.put_collisions(1, &[(vec![0, 0, 1, 0, 0, 1, 0, 0, 2], "X".into())])
            .unwrap();
        assert_eq!(s.collisions(1, None).unwrap().len(), 1);
        assert_eq!(s.collisions(1, Some(&[vec![9]])).unwrap().len(), 0);

        // Branches go, the definition stays; then everything goes.
        assert_eq!(s.delete_tree(1, false).unwrap(), 6);
        assert!(s.tree(1).unwrap().is_some());
        assert!(s.branch(&root_id).unwrap().is_none());
        assert_eq!(s.delete_tree(1, true).unwrap(), 2);
        assert!(s.tree(1).unwrap().is_none());
        assert_eq!(s.trees().unwrap().len(), 3);
    }
}
