//! Where UID mappings live: the narrow interface [`super::UidTable`] persists
//! through, so UID assignment can be served by another engine than the
//! data rows (the embedded one is `crate::store::uid_table::KvUidStore`,
//! over the store's `tsdb-uid` table; a ZooKeeper one would keep the
//! counters and mappings as znodes).
//!
//! [`super::UidTable`] keeps what is the same for every engine: name rules,
//! the auto-create policy, both caches and their coherence, the per-kind
//! lock that orders assignment, rename and delete within one process.
//! An implementation keeps only the mappings, and must stay correct when
//! several processes (several TSDs over one ZooKeeper) use it at once:
//! the per-process lock does not extend to them.
//!
//! # What every implementation guarantees
//!
//! - **Mappings come in pairs.** A forward mapping (name → UID) is only
//!   ever visible together with its reverse mapping (UID → name): a
//!   reader that finds `name → uid` also finds `uid → name`. The opposite
//!   may briefly not hold (a reverse mapping written first by a
//!   compare-and-set engine), never for a name [`forward`] returns.
//! - **A UID is handed out once.** [`allocate`] never returns
//!   [`Assigned::New`] with a UID any caller has seen before, including
//!   UIDs of deleted names; the counter ([`max_id`]) only grows.
//! - **A name has one UID.** Two concurrent [`allocate`]s of one name,
//!   in one process or in two, both end up with the same UID: one gets
//!   `New`, the other `Existing`.
//! - **Writes are durable by [`sync`].** Each mutating call is atomic on
//!   its own (after a crash all of it or none of it is visible, except as
//!   described for compare-and-set engines below) and survives a process
//!   crash once it returns; [`sync`] makes it survive a power loss.
//!
//!
//! A new engine should pass `conformance::run` (in this file, for
//! tests), as the embedded one does.
//!
//! [`forward`]: UidStore::forward
//! [`allocate`]: UidStore::allocate
//! [`max_id`]: UidStore::max_id
//! [`sync`]: UidStore::sync

use super::{Assigned, Result};
use crate::model::{Uid, UidKind, UidWidths};

/// A lazily read scan of forward mappings.
pub type ForwardScan<'a> = Box<dyn Iterator<Item = Result<(String, Uid)>> + 'a>;

/// The persistence of UID mappings. See the [module docs](self) for the
/// guarantees every method relies on.
pub trait UidStore: Send + Sync {
    /// Byte width of the UIDs of each kind, fixed for the store's life.
    fn widths(&self) -> UidWidths;

    /// The UID `name` maps to, if any. A stored value that is not a UID
    /// of the kind's width is `UidTableError::Corrupt`.
    fn forward(&self, kind: UidKind, name: &str) -> Result<Option<Uid>>;

    /// The name `uid` maps to, if any (`Corrupt` if it is not UTF-8).
    fn reverse(&self, kind: UidKind, uid: Uid) -> Result<Option<String>>;

    /// [`UidStore::forward`] as of the latest change anywhere, for a
    /// mapping that may have changed ([`UidStore::remote_changes`] moved):
    /// a shared engine whose members may lag reads from an up-to-date one.
    fn forward_latest(&self, kind: UidKind, name: &str) -> Result<Option<Uid>> {
        self.forward(kind, name)
    }

    /// [`UidStore::reverse`] as of the latest change anywhere (see
    /// [`UidStore::forward_latest`]).
    fn reverse_latest(&self, kind: UidKind, uid: Uid) -> Result<Option<String>> {
        self.reverse(kind, uid)
    }

    /// The highest UID handed out for `kind` so far (0 before the first).
    /// An engine that reserves UIDs in blocks for each process counts the
    /// reserved ones too; either way the counter only grows.
    fn max_id(&self, kind: UidKind) -> Result<u64>;

    /// Gives `name` (already validated) a UID unless it has one.
    ///
    /// Returns `Existing` with the stored UID if `name` is mapped (maybe
    /// by a concurrent caller that just won), else `New` with
    /// `max_id + 1`, after bumping the counter and writing the reverse and
    /// forward mappings; `Exhausted` when the kind's width has no UID
    /// left (nothing is written then).
    ///
    /// Atomicity: the embedded engine writes counter, reverse and forward
    /// mapping in one atomic batch under a per-kind lock. An engine with
    /// only compare-and-set and counters (ZooKeeper, HBase) honours the
    /// same contract as OpenTSDB's `UniqueId` does: increment the counter
    /// (the UID is then burnt whatever happens), create the reverse
    /// mapping only if absent, then create the forward mapping only if
    /// absent; if that last step loses, return `Existing` with the
    /// winner's UID. A crash or a lost race leaves an unused reverse
    /// mapping, which `tsdb uid fsck` reports and repairs; it never leaves
    /// a forward mapping without its reverse.
    fn allocate(&self, kind: UidKind, name: &str) -> Result<Assigned>;

    /// Moves the UID of `old` to `new` (already validated): the reverse
    /// mapping names `new`, `new` maps to the UID and `old` maps to
    /// nothing, in one atomic step. Fails with `NoSuchName` if `old` is
    /// unmapped and `RenameTargetExists` if `new` is mapped, checked
    /// atomically with the write (a compare-and-set engine creates the
    /// new forward mapping only if absent before it touches the rest).
    /// Returns the UID.
    fn rename(&self, kind: UidKind, old: &str, new: &str) -> Result<Uid>;

    /// Removes `name`'s forward and reverse mappings, and whatever the
    /// engine keeps attached to the UID in the same place (the embedded
    /// engine's UIDMeta cell), in one atomic step; `NoSuchName` if `name`
    /// is unmapped. The counter is untouched, so the UID is not reused.
    /// Returns the UID it had.
    fn delete(&self, kind: UidKind, name: &str) -> Result<Uid>;

    /// Forward mappings of `kind` whose name starts with `prefix`, in
    /// byte order of the name, read lazily (a caller taking the first few
    /// must not make the engine read every name). Entries that are not
    /// well-formed mappings are skipped (fsck reports them).
    fn scan_forward<'a>(&'a self, kind: UidKind, prefix: &[u8]) -> ForwardScan<'a>;

    /// Every well-formed reverse mapping of `kind`, in any order.
    fn scan_reverse(&self, kind: UidKind) -> Result<Vec<(Uid, String)>>;

    /// Makes every write so far durable on stable storage.
    fn sync(&self) -> Result<()>;

    /// A number that moves whenever another process may have renamed or
    /// deleted a mapping of `kind` (or this process may have missed such
    /// a change, as after a lost connection). [`super::UidTable`] drops
    /// its cached mappings of the kind when it moves, so a rename on one
    /// TSD is seen by the others. An engine only one process writes
    /// never moves it.
    fn remote_changes(&self, _kind: UidKind) -> u64 {
        0
    }
}

#[cfg(test)]
pub(crate) mod conformance {
    //! Behaviour every [`UidStore`] must show; run against each engine
    //! (a fresh, empty one).
    use std::sync::Arc;

    use super::*;
    use crate::uid::UidTableError;

    pub(crate) fn run(store: Arc<dyn UidStore>) {
        let k = UidKind::TagValue;
        let is_new = |a: Assigned| matches!(a, Assigned::New(_));
        assert_eq!(store.max_id(k).unwrap(), 0);
        let a = store.allocate(k, "a").unwrap();
        assert!(is_new(a));
        assert_eq!(a.uid().id(), 1);
        assert_eq!(store.allocate(k, "a").unwrap(), Assigned::Existing(a.uid()));
        assert_eq!(store.forward(k, "a").unwrap(), Some(a.uid()));
        assert_eq!(store.reverse(k, a.uid()).unwrap().as_deref(), Some("a"));
        // Kinds are independent.
        assert_eq!(store.forward(UidKind::Metric, "a").unwrap(), None);

        let b = store.allocate(k, "b").unwrap().uid();
        assert!(matches!(
            store.rename(k, "a", "b"),
            Err(UidTableError::RenameTargetExists { .. })
        ));
        assert!(matches!(
            store.rename(k, "nope", "c"),
            Err(UidTableError::NoSuchName { .. })
        ));
        assert_eq!(store.rename(k, "a", "a2").unwrap(), a.uid());
        assert_eq!(store.forward(k, "a").unwrap(), None);
        assert_eq!(store.reverse(k, a.uid()).unwrap().as_deref(), Some("a2"));

        assert_eq!(store.delete(k, "b").unwrap(), b);
        assert_eq!(store.reverse(k, b).unwrap(), None);
        assert!(store.delete(k, "b").is_err());
        // Deleted UIDs are not handed out again.
        assert_eq!(store.allocate(k, "b").unwrap().uid().id(), 3);
        assert_eq!(store.max_id(k).unwrap(), 3);

        let names: Vec<String> = store.scan_forward(k, b"").map(|r| r.unwrap().0).collect();
        assert_eq!(names, vec!["a2", "b"]);
        assert_eq!(store.scan_forward(k, b"a").count(), 1);
        assert_eq!(store.scan_reverse(k).unwrap().len(), 2);

        // Concurrent allocations: one UID per name, none handed out twice.
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let s = store.clone();
                std::thread::spawn(move || {
                    (0..50)
                        .map(|i| s.allocate(UidKind::Metric, &format!("m{i}")).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let results: Vec<Vec<Assigned>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        for i in 0..50 {
            let uids: Vec<Uid> = results.iter().map(|r| r[i].uid()).collect();
            assert!(uids.iter().all(|u| *u == uids[0]), "m{i}: {uids:?}");
            assert_eq!(results.iter().filter(|r| is_new(r[i])).count(), 1);
        }
        assert_eq!(store.max_id(UidKind::Metric).unwrap(), 50);
        store.sync().unwrap();
    }
}
