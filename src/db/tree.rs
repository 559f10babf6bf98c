//! Trees: the database side of OpenTSDB's `/api/tree`, of
//! `TSDB.processTSMetaThroughTrees` and of `tsdb uid treesync` /
//! `treepurge`. The rules and the building are `crate::tree`'s; here a
//! series' TSMeta is loaded, run through a tree and the result stored
//! through the [`TreeStore`].
//!
//! With `tsd.core.tree.enable_processing`, every series whose TSMeta is
//! created as points arrive (`tsd.core.meta.enable_realtime_ts` with
//! tracking) goes through every enabled tree, as OpenTSDB's `TSMeta`
//! does after storing a new one. Not on the put path: the TSUID is queued
//! and the flusher thread processes the queue on its next tick (and at
//! close), so a put never waits for tree rows. The queue lives in memory:
//! series queued when the process is killed reach the trees with the next
//! `tsdb uid treesync` (OpenTSDB's processing is as asynchronous, and as
//! lost in a crash).

use super::{Db, Result};
use crate::meta::{self, MetaError, TsMeta};
use crate::model::Tsuid;
use crate::tree::builder::{Outcome, Processed, TreeBuilder, new_root};
use crate::tree::{Tree, TreeError, TreeStore, id_to_bytes};
use crate::uid::UidTableError;

/// What one run over many series keeps: the roots loaded and the
/// branches known to be stored.
#[derive(Default)]
struct Batch {
    roots: std::collections::HashMap<u16, crate::tree::StoredBranch>,
    branches: std::collections::HashSet<Vec<u8>>,
}

/// What [`Db::sync_trees`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreesSynced {
    /// Enabled trees the series went through.
    pub trees: usize,
    /// Series with a TSMeta processed (each through every enabled tree).
    pub series: u64,
    /// Leaves written (a series already in a tree adds none).
    pub leaves: u64,
    /// Series not added to a tree because another series held its leaf.
    pub collisions: u64,
    /// Series a strict tree left out.
    pub not_matched: u64,
}

/// One series through `/api/tree/test`.
#[derive(Debug)]
pub enum TreeTest {
    /// The TSUID has no stored TSMeta.
    NoMeta,
    /// A UID of the TSUID has no name.
    MissingName(String),
    /// The processing, and the TSMeta it read.
    Done(Box<(Processed, TsMeta)>),
}

impl Db {
    /// Tree definitions, rules, branches and leaves.
    pub fn trees(&self) -> &dyn TreeStore {
        &*self.trees
    }

    /// The TSMeta of a series as tree rules read it (with its UIDMeta
    /// custom fields); `None` without a stored TSMeta.
    fn tree_meta(&self, tsuid: &Tsuid) -> Result<Option<TsMeta>> {
        let bytes = tsuid.to_bytes(&self.store.widths());
        Ok(meta::ts_meta_of(&*self.meta, self.uids(), tsuid, &bytes)?)
    }

    /// The tree's stored root branch, or a new one (stored unless only
    /// testing), as `TreeBuilder.loadOrInitializeRoot`.
    fn tree_root(&self, tree_id: u16, store: bool) -> Result<crate::tree::StoredBranch> {
        let id = id_to_bytes(tree_id);
        if let Some(root) = self.trees.branch(&id)? {
            return Ok(root);
        }
        let root = new_root();
        if store {
            self.trees.put_branch_if_absent(&id, &root)?;
            tracing::info!(tree_id, "initialized the root branch of a tree");
        }
        Ok(root)
    }

    /// Runs one series through one tree and stores what came out: the
    /// branches on its path and its leaf (each only if absent), and, if
    /// the tree stores failures, a collision when another series holds
    /// the leaf's name.
    fn process_through(
        &self,
        builder: &TreeBuilder,
        tree: &Tree,
        meta: &TsMeta,
        batch: &mut Batch,
        done: &mut TreesSynced,
    ) -> Result<()> {
        let root = match batch.roots.get(&tree.tree_id) {
            Some(root) => root.clone(),
            None => {
                let root = self.tree_root(tree.tree_id, true)?;
                batch.roots.insert(tree.tree_id, root.clone());
                root
            }
        };
        let processed = builder.process(meta, &root)?;
        match processed.outcome {
            Outcome::Path(path) => {
                let mut collisions = Vec::new();
                for b in &path {
                    // OpenTSDB's `processed_branches`: a branch stored (or
                    // found) earlier in this batch is not written again.
                    if !batch.branches.contains(&b.id) {
                        self.trees.put_branch_if_absent(&b.id, &b.branch)?;
                        batch.branches.insert(b.id.clone());
                    }
                    for leaf in &b.leaves {
                        match self.trees.put_leaf_if_absent(&b.id, leaf)? {
                            None => done.leaves += 1,
                            Some(existing) if existing.tsuid != leaf.tsuid => {
                                tracing::warn!(tree_id = tree.tree_id, tsuid = %leaf.tsuid, existing = %existing.tsuid, name = %leaf.display_name, "leaf collision");
                                done.collisions += 1;
                                if let Some(bytes) = crate::model::uid::parse_hex(&leaf.tsuid) {
                                    collisions.push((bytes, existing.tsuid));
                                }
                            }
                            Some(_) => {}
                        }
                    }
                }
                if tree.def.store_failures && !collisions.is_empty() {
                    self.trees.put_collisions(tree.tree_id, &collisions)?;
                }
            }
            // OpenTSDB 2.4.1 records a not-matched series only when the
            // tree object already holds not-matched entries, which a tree
            // loaded from storage never does: it is logged, not stored.
            Outcome::NotMatched(rules) => {
                tracing::debug!(tree_id = tree.tree_id, tsuid = %meta.tsuid, %rules, "series did not match the tree's rules");
                done.not_matched += 1;
            }
            Outcome::Nothing => {}
        }
        Ok(())
    }

    /// The enabled trees, each with its compiled rules.
    fn enabled_trees(&self) -> Result<Vec<Tree>> {
        Ok(self
            .trees
            .trees()?
            .into_iter()
            .filter(|t| t.def.enabled)
            .collect())
    }

    /// Runs series through every enabled tree (those without a stored
    /// TSMeta are skipped, as OpenTSDB only processes TSMeta objects).
    fn process_series(&self, series: &[Tsuid]) -> Result<TreesSynced> {
        let trees = self.enabled_trees()?;
        let mut done = TreesSynced {
            trees: trees.len(),
            ..Default::default()
        };
        if trees.is_empty() {
            return Ok(done);
        }
        let builders = trees
            .iter()
            .map(TreeBuilder::new)
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let mut batch = Batch::default();
        for tsuid in series {
            let meta = match self.tree_meta(tsuid) {
                Ok(Some(m)) => m,
                Ok(None) => continue,
                // A UID renamed away or deleted: nothing to name the
                // series by (OpenTSDB logs and skips it too).
                Err(e) => {
                    tracing::warn!(error = %e, "skipping a series whose TSMeta cannot be loaded");
                    continue;
                }
            };
            done.series += 1;
            for (tree, builder) in trees.iter().zip(&builders) {
                if let Err(e) = self.process_through(builder, tree, &meta, &mut batch, &mut done) {
                    match e {
                        super::DbError::Tree(TreeError::Invalid(msg)) => {
                            tracing::warn!(tree_id = tree.tree_id, tsuid = %meta.tsuid, %msg, "tree processing failed for a series");
                        }
                        e => return Err(e),
                    }
                }
            }
        }
        Ok(done)
    }

    /// Queues a series whose TSMeta was just created, for the trees.
    pub(super) fn queue_for_trees(&self, tsuid: &Tsuid) {
        if self.opts.tree_processing {
            self.tree_queue.lock().push(tsuid.clone());
        }
    }

    /// Processes the queued new series (flusher tick, close).
    pub(super) fn process_tree_queue(&self) {
        let queued = std::mem::take(&mut *self.tree_queue.lock());
        if queued.is_empty() {
            return;
        }
        match self.process_series(&queued) {
            Ok(done) => tracing::debug!(?done, "processed new series through trees"),
            Err(e) => {
                tracing::error!(error = %e, series = queued.len(), "tree processing of new series failed");
            }
        }
    }

    /// `tsdb uid treesync`: every series with a TSMeta through every
    /// enabled tree.
    pub fn sync_trees(&self) -> Result<TreesSynced> {
        let mut series = Vec::new();
        for metric in self.index.metrics() {
            series.extend(self.index.series_of(metric));
        }
        series.sort();
        self.process_series(&series)
    }

    /// `tsdb uid treepurge` and `DELETE /api/tree`: deletes a tree's
    /// branches, leaves and failures, and with `definition` the tree
    /// itself. `None` if there is no such tree.
    pub fn purge_tree(&self, tree_id: u16, definition: bool) -> Result<Option<u64>> {
        if self.trees.tree(tree_id)?.is_none() {
            return Ok(None);
        }
        Ok(Some(self.trees.delete_tree(tree_id, definition)?))
    }

    /// `/api/tree/test`: series through one tree without storing anything.
    pub fn test_tree(&self, tree: &Tree, tsuids: &[Tsuid]) -> Result<Vec<TreeTest>> {
        let builder = TreeBuilder::new(tree)?;
        let root = self.tree_root(tree.tree_id, false)?;
        let mut out = Vec::with_capacity(tsuids.len());
        for tsuid in tsuids {
            let meta = match self.tree_meta(tsuid) {
                Ok(Some(m)) => m,
                Ok(None) => {
                    out.push(TreeTest::NoMeta);
                    continue;
                }
                Err(super::DbError::Meta(MetaError::Uid(e @ UidTableError::NoSuchId { .. }))) => {
                    out.push(TreeTest::MissingName(e.to_string()));
                    continue;
                }
                Err(e) => return Err(e),
            };
            let processed = builder.process(&meta, &root)?;
            out.push(TreeTest::Done(Box::new((processed, meta))));
        }
        Ok(out)
    }

    /// `/api/tree/branch`: a branch with its children and its leaves,
    /// each leaf with the names of its metric and tags (a leaf whose UIDs
    /// no longer resolve is left out, as OpenTSDB does).
    pub fn tree_branch(&self, id: &[u8]) -> Result<Option<crate::tree::BranchJson>> {
        let Some(tree_id) = crate::tree::bytes_to_id(id) else {
            return Ok(None);
        };
        let Some(crate::tree::BranchCells {
            branch,
            children,
            leaves,
        }) = self.trees.branch_with_children(id)?
        else {
            return Ok(None);
        };
        let widths = self.store.widths();
        let uids = self.uids();
        let mut out_leaves = Vec::new();
        for leaf in leaves {
            let Ok(tsuid) = Tsuid::parse_hex(&leaf.tsuid, &widths) else {
                tracing::warn!(tsuid = %leaf.tsuid, "skipping a leaf with an invalid TSUID");
                continue;
            };
            let names = (|| -> std::result::Result<_, UidTableError> {
                let metric = uids.get_name(crate::model::UidKind::Metric, tsuid.metric)?;
                let mut tags = Vec::new();
                for (k, v) in &tsuid.tags {
                    tags.push((
                        uids.get_name(crate::model::UidKind::TagKey, *k)?
                            .to_string(),
                        uids.get_name(crate::model::UidKind::TagValue, *v)?
                            .to_string(),
                    ));
                }
                Ok((metric.to_string(), tags))
            })();
            match names {
                Ok((metric, tags)) => out_leaves.push(crate::tree::Leaf {
                    display_name: leaf.display_name,
                    tsuid: leaf.tsuid,
                    metric,
                    tags: Some(tags),
                }),
                Err(e) => {
                    tracing::warn!(error = %e, tsuid = %leaf.tsuid, "skipping a leaf whose UIDs do not resolve");
                }
            }
        }
        let children = children
            .into_iter()
            .map(|c| crate::tree::BranchJson {
                tree_id,
                path: c.path,
                display_name: c.display_name,
                leaves: None,
                branches: None,
            })
            .collect::<Vec<_>>();
        Ok(Some(
            crate::tree::BranchJson {
                tree_id,
                path: branch.path,
                display_name: branch.display_name,
                leaves: (!out_leaves.is_empty()).then_some(out_leaves),
                branches: (!children.is_empty()).then_some(children),
            }
            .sorted(),
        ))
    }
}
