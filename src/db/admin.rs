//! Maintenance verbs: rebuilding the series index, dropping caches
//! (`dropcaches`, UID renames).

use std::collections::HashMap;

use super::Db;
use crate::index::RebuildStats;
use crate::meta::{Counting, TsMetaFields};
use crate::model::{Uid, UidKind};

/// What [`Db::sync_meta`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MetaSynced {
    pub index: RebuildStats,
    /// TSMeta objects stored for series that had none.
    pub ts_created: u64,
    /// TSMeta objects whose `created` was set.
    pub ts_updated: u64,
    /// UIDMeta objects whose `created` was set (stored if there was none).
    pub uid_updated: u64,
}

/// A `created` time MetaSync corrects: unset, or more than an hour after
/// the oldest data (within the hour it is probably accurate).
fn needs_created(created: u64, oldest: u64) -> bool {
    created == 0 || created > oldest + 3600
}

impl Db {
    /// Deletes a name (`tsdb uid delete`): its forward and reverse
    /// mappings through the UID store, then its UIDMeta through the meta
    /// store. The UIDMeta is deleted here, for every backend, because the
    /// two may live apart: on a cluster the mappings are in ZooKeeper and
    /// the UIDMeta in ClickHouse. Data rows stay, as in OpenTSDB. The UID
    /// is never handed out again, so a UIDMeta left by a crash between the
    /// two steps names no live UID (`uid fsck` ignores meta cells).
    pub fn delete_uid(&self, kind: UidKind, name: &str) -> super::Result<Uid> {
        let uid = self.uids().delete(kind, name)?;
        self.meta.delete_uid_meta(kind, uid)?;
        Ok(uid)
    }

    /// Recreates the series index from the data rows (`tsdb uid
    /// metasync`): drops every entry, then records each series found.
    pub fn rebuild_index(&self) -> super::Result<RebuildStats> {
        let (found, stats) = self.store.scan_series()?;
        self.index.replace_all(&found)?;
        self.epochs.bump_all();
        Ok(stats)
    }

    /// `tsdb uid metasync`, as OpenTSDB's `MetaSync`: rebuilds the series
    /// index from the data rows; stores a TSMeta for every series that has
    /// none (`created`: the hour of its oldest row; its counter set to 1
    /// if it has none, as OpenTSDB's first increment does); sets a TSMeta's
    /// or a UIDMeta's `created` to the oldest data using it when unset or
    /// more than an hour later (storing the UIDMeta of a named UID that
    /// had none). With `tsd.core.tree.enable_processing`, each TSMeta
    /// created goes through the enabled trees.
    pub fn sync_meta(&self) -> super::Result<MetaSynced> {
        let (found, index) = self.store.scan_series()?;
        self.index.replace_all(&found)?;
        self.epochs.bump_all();
        let mut done = MetaSynced {
            index,
            ..Default::default()
        };
        let widths = self.store.widths();
        let mut oldest_of_uid: HashMap<(UidKind, Uid), u64> = HashMap::new();
        for (tsuid, hours) in &found {
            let oldest = hours.first as u64;
            let bytes = tsuid.to_bytes(&widths);
            match self.meta.ts_fields(&bytes)? {
                None => {
                    let fields = TsMetaFields::new(tsuid.to_hex(&widths), oldest);
                    self.meta.put_ts_fields(&bytes, &fields)?;
                    if self.meta.counters(&bytes)?.0 == 0 {
                        self.meta
                            .add_counters(&[(bytes.clone(), 1, 0)], Counting::Increment)?;
                    }
                    done.ts_created += 1;
                    // As OpenTSDB's MetaSync, a new TSMeta goes through
                    // the trees (processed with the queue of new series).
                    self.queue_for_trees(tsuid);
                }
                Some(mut fields) if needs_created(fields.created, oldest) => {
                    fields.created = oldest;
                    self.meta.put_ts_fields(&bytes, &fields)?;
                    done.ts_updated += 1;
                }
                Some(_) => {}
            }
            let uids = std::iter::once((UidKind::Metric, tsuid.metric)).chain(
                tsuid
                    .tags
                    .iter()
                    .flat_map(|(k, v)| [(UidKind::TagKey, *k), (UidKind::TagValue, *v)]),
            );
            for key in uids {
                oldest_of_uid
                    .entry(key)
                    .and_modify(|t| *t = (*t).min(oldest))
                    .or_insert(oldest);
            }
        }
        for ((kind, uid), oldest) in oldest_of_uid {
            // Only names that still exist have a UIDMeta to speak of.
            if self.uids().get_name(kind, uid).is_err() {
                continue;
            }
            let mut fields = self.meta.uid_meta(kind, uid)?.unwrap_or_default();
            if needs_created(fields.created, oldest) {
                fields.created = oldest;
                self.meta.put_uid_meta(kind, uid, &fields)?;
                done.uid_updated += 1;
            }
        }
        // The TSMeta created above, through the trees now rather than at
        // the next flusher tick: a command may exit before that.
        self.process_tree_queue();
        Ok(done)
    }

    /// `dropcaches`: forgets cached UID mappings and cached series names,
    /// saving the series' point counters first so they are not lost with
    /// the forgotten entries.
    pub fn drop_caches(&self) {
        self.uids().drop_caches();
        self.forget_series_names();
    }

    /// Forgets cached name→series mappings (after a UID rename, so the
    /// new name resolves afresh), saving the point counters first.
    pub fn forget_series_names(&self) {
        if let Err(e) = self.persist_counters() {
            tracing::error!(error = %e, "saving series counters failed before forgetting names");
        }
        self.series.forget_names();
        // Names in cached answers may be the old ones.
        self.epochs.bump_all();
    }
}
