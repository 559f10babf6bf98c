//! [`ZkUidStore`]: UID mappings and counters kept in ZooKeeper, shared by
//! every TSD of a cluster.
//!
//! - **Counters in blocks.** A TSD reserves [`ZkOptions::uid_block`] UIDs
//!   of a kind with one compare-and-set of the kind's `maxid` znode and
//!   hands them out from memory, so a burst of new names pays the counter
//!   round trip once per block, not per name. The counter only grows; a
//!   TSD that stops leaves the rest of its block unused (wasted, never
//!   reused), which is what [`UidStore::max_id`] then counts.
//! - **Mappings in one transaction.** The reverse and forward znodes of a
//!   new name are created in one ZooKeeper `multi`: both or neither exist,
//!   so neither a crash nor a lost race leaks a reverse mapping (better
//!   than OpenTSDB's separate compare-and-sets). Two TSDs racing for one
//!   name: the forward create of one fails, it reads the winner's UID and
//!   keeps its own for its next name.
//! - **Renames and deletes** are one `multi` each, which also writes the
//!   kind's `changes` znode; every TSD watches it and drops its cached
//!   mappings of the kind when it moves ([`UidStore::remote_changes`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use zookeeper_client as zk;

use super::client::{CoordError, ZkClient, ZkOptions};
use super::names::{Layout, hex, unescape};
use crate::model::{Uid, UidKind, UidWidth, UidWidths};
use crate::uid::{Assigned, ForwardScan, Result, UidStore, UidTableError};

const KINDS: [UidKind; 3] = [UidKind::Metric, UidKind::TagKey, UidKind::TagValue];

fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

/// The UIDs of a kind this TSD reserved and has not handed out yet.
#[derive(Debug, Default)]
struct Block {
    /// Next UID of the reserved range `next..=last` (empty when past it).
    next: u64,
    last: u64,
    /// UIDs taken for a name another TSD won: never visible anywhere, so
    /// handed to the next new name.
    returned: Vec<u64>,
}

struct KindState {
    width: UidWidth,
    /// Orders this process's assignments of the kind (as `UidTable`'s
    /// lock does above it): a name another thread is assigning is found
    /// mapped, not raced for with a second UID.
    assign: Mutex<()>,
    block: Mutex<Block>,
    /// Moves when another TSD renamed or deleted a name of the kind.
    changes: Arc<AtomicU64>,
}

/// A [`UidStore`] over ZooKeeper; see the [module docs](self).
pub struct ZkUidStore {
    zk: Arc<ZkClient>,
    layout: Layout,
    widths: UidWidths,
    block_size: u64,
    kinds: [KindState; 3],
}

fn to_uid_err(e: CoordError) -> UidTableError {
    UidTableError::Storage(e.into())
}

impl ZkUidStore {
    /// Opens the UID directories under the client's base path, creating
    /// the counters (at 0) and directories a first TSD finds missing, and
    /// starts watching other TSDs' renames and deletes.
    pub fn open(zk: Arc<ZkClient>, widths: UidWidths) -> Result<ZkUidStore> {
        let options: &ZkOptions = zk.options();
        let layout = Layout::new(&options.basedir);
        let block_size = options.uid_block.max(1);
        for kind in KINDS {
            for (path, data) in [
                (layout.names_root(kind), &b""[..]),
                (layout.ids_root(kind), b""),
                (layout.max_id(kind), b"0"),
                (layout.changes(kind), b""),
            ] {
                create_with_parents(&zk, path, data.to_vec()).map_err(to_uid_err)?;
            }
        }
        let kinds = KINDS.map(|kind| KindState {
            width: widths.of(kind),
            assign: Mutex::new(()),
            block: Mutex::new(Block {
                next: 1,
                last: 0,
                returned: Vec::new(),
            }),
            changes: Arc::new(AtomicU64::new(0)),
        });
        for (kind, state) in KINDS.iter().zip(&kinds) {
            zk.watch_changes(layout.changes(*kind), state.changes.clone());
        }
        Ok(ZkUidStore {
            zk,
            layout,
            widths,
            block_size,
            kinds,
        })
    }

    fn k(&self, kind: UidKind) -> &KindState {
        &self.kinds[kind.index()]
    }

    fn corrupt(kind: UidKind, what: &str, reason: impl Into<String>) -> UidTableError {
        UidTableError::Corrupt {
            kind,
            what: what.to_string(),
            reason: reason.into(),
        }
    }

    fn decode_uid(&self, kind: UidKind, name: &str, data: &[u8]) -> Result<Uid> {
        Uid::from_bytes(data, self.k(kind).width)
            .map_err(|e| Self::corrupt(kind, name, format!("forward znode: {e}")))
    }

    /// Data of `path`, `None` if it does not exist.
    fn get(&self, path: &str) -> Result<Option<(Vec<u8>, zk::Stat)>> {
        let p = path.to_string();
        self.zk
            .run(&format!("read {path}"), |c| {
                let p = p.clone();
                async move {
                    match c.get_data(&p).await {
                        Ok(found) => Ok(Some(found)),
                        Err(zk::Error::NoNode) => Ok(None),
                        Err(e) => Err(e),
                    }
                }
            })
            .map_err(to_uid_err)
    }

    /// Data of `path` as of now: the member this TSD reads from first
    /// catches up with the leader (ZooKeeper's `sync`), so a node another
    /// TSD just wrote is seen. `None` if it does not exist.
    fn get_synced(&self, path: &str) -> Result<Option<Vec<u8>>> {
        let p = path.to_string();
        self.zk
            .run(&format!("sync and read {path}"), |c| {
                let p = p.clone();
                async move {
                    c.sync(&p).await?;
                    match c.get_data(&p).await {
                        Ok((data, _)) => Ok(Some(data)),
                        Err(zk::Error::NoNode) => Ok(None),
                        Err(e) => Err(e),
                    }
                }
            })
            .map_err(to_uid_err)
    }

    /// Data of `path`, read again as of now ([`ZkUidStore::get_synced`])
    /// when the member read first does not have it: a mapping another
    /// TSD just assigned is found (a query on TSD B right after a put on
    /// TSD A), while a mapping that exists costs one read.
    fn get_fresh(&self, path: &str) -> Result<Option<Vec<u8>>> {
        match self.get(path)? {
            Some((data, _)) => Ok(Some(data)),
            None => self.get_synced(path),
        }
    }

    /// The name a reverse mapping at `path` holds.
    fn decode_name(
        &self,
        kind: UidKind,
        path: &str,
        data: Option<Vec<u8>>,
    ) -> Result<Option<String>> {
        data.map(|d| {
            String::from_utf8(d).map_err(|_| Self::corrupt(kind, path, "the name is not UTF-8"))
        })
        .transpose()
    }

    /// [`UidStore::forward`] as of now ([`ZkUidStore::get_synced`]).
    fn forward_synced(&self, kind: UidKind, name: &str) -> Result<Option<Uid>> {
        self.get_synced(&self.layout.forward(kind, name))?
            .map(|data| self.decode_uid(kind, name, &data))
            .transpose()
    }

    /// A UID for a new name: from this TSD's block, reserving a new block
    /// when it is used up.
    fn take_id(&self, kind: UidKind) -> Result<u64> {
        let state = self.k(kind);
        let mut block = state.block.lock();
        if let Some(id) = block.returned.pop() {
            return Ok(id);
        }
        if block.next > block.last {
            let (first, last) = self.reserve(kind)?;
            block.next = first;
            block.last = last;
        }
        let id = block.next;
        block.next += 1;
        Ok(id)
    }

    fn give_back(&self, kind: UidKind, id: u64) {
        self.k(kind).block.lock().returned.push(id);
    }

    /// Moves the kind's counter up by a block (compare-and-set on the
    /// znode's version, retried when another TSD moved it first); returns
    /// the reserved range.
    fn reserve(&self, kind: UidKind) -> Result<(u64, u64)> {
        let width = self.k(kind).width;
        let path = self.layout.max_id(kind);
        loop {
            let (data, stat) = self
                .get(&path)?
                .ok_or_else(|| Self::corrupt(kind, &path, "the counter znode is missing"))?;
            let current = parse_counter(&data)
                .ok_or_else(|| Self::corrupt(kind, &path, "the counter is not a decimal number"))?;
            if current >= width.max_id() {
                return Err(UidTableError::Exhausted {
                    kind,
                    width: width.bytes(),
                });
            }
            let last = current.saturating_add(self.block_size).min(width.max_id());
            let (p, version) = (path.clone(), stat.version);
            let moved = self
                .zk
                .run(&format!("reserve UIDs at {path}"), |c| {
                    let p = p.clone();
                    async move {
                        match c
                            .set_data(&p, last.to_string().as_bytes(), Some(version))
                            .await
                        {
                            Ok(_) => Ok(true),
                            Err(zk::Error::BadVersion) => Ok(false),
                            Err(e) => Err(e),
                        }
                    }
                })
                .map_err(to_uid_err)?;
            if moved {
                tracing::debug!(%kind, first = current + 1, last, "reserved a block of UIDs");
                return Ok((current + 1, last));
            }
        }
    }

    fn parents_of(paths: &[&str]) -> Vec<String> {
        paths
            .iter()
            .filter_map(|p| p.rsplit_once('/').map(|(dir, _)| dir.to_string()))
            .collect()
    }

    fn ensure_dirs(&self, dirs: Vec<String>) -> Result<()> {
        for dir in dirs {
            create_with_parents(&self.zk, dir, Vec::new()).map_err(to_uid_err)?;
        }
        Ok(())
    }

    /// Every child of `dir` (none if it does not exist).
    fn children(&self, dir: &str) -> Result<Vec<String>> {
        let d = dir.to_string();
        self.zk
            .run(&format!("list {dir}"), |c| {
                let d = d.clone();
                async move {
                    match c.list_children(&d).await {
                        Ok(v) => Ok(v),
                        Err(zk::Error::NoNode) => Ok(Vec::new()),
                        Err(e) => Err(e),
                    }
                }
            })
            .map_err(to_uid_err)
    }

    /// The children of each of `dirs`, and the data of each child, in one
    /// pipelined exchange: (child path, data) for the children that still
    /// exist when read.
    fn read_all(&self, dirs: Vec<String>) -> Result<Vec<(String, Vec<u8>)>> {
        let what = format!("read {} directories", dirs.len());
        self.zk
            .run(&what, |c| {
                let dirs = dirs.clone();
                async move {
                    // Requests are sent when their futures are made: make them
                    // all, then wait, so a listing costs one round trip.
                    let listings: Vec<_> = dirs
                        .iter()
                        .map(|d| (d.clone(), c.list_children(d)))
                        .collect();
                    let mut paths = Vec::new();
                    for (dir, listing) in listings {
                        match listing.await {
                            Ok(names) => {
                                paths.extend(names.into_iter().map(|n| format!("{dir}/{n}")))
                            }
                            Err(zk::Error::NoNode) => {}
                            Err(e) => return Err(e),
                        }
                    }
                    let reads: Vec<_> = paths.iter().map(|p| c.get_data(p)).collect();
                    let mut out = Vec::with_capacity(paths.len());
                    for (path, read) in paths.iter().zip(reads) {
                        match read.await {
                            Ok((data, _)) => out.push((path.clone(), data)),
                            Err(zk::Error::NoNode) => {}
                            Err(e) => return Err(e),
                        }
                    }
                    Ok(out)
                }
            })
            .map_err(to_uid_err)
    }

    /// Forward mappings under one two-byte prefix directory whose names
    /// start with `prefix`, sorted by name.
    fn forward_dir(
        &self,
        kind: UidKind,
        prefix_dir: &str,
        prefix: &[u8],
    ) -> Result<Vec<(String, Uid)>> {
        let dir = self.layout.names_prefix_dir(kind, prefix_dir);
        let spread: Vec<String> = self
            .children(&dir)?
            .into_iter()
            .map(|s| format!("{dir}/{s}"))
            .collect();
        let mut out = Vec::new();
        for (path, data) in self.read_all(spread)? {
            let Some(name) = path.rsplit('/').next().and_then(unescape) else {
                continue;
            };
            if !name.as_bytes().starts_with(prefix) {
                continue;
            }
            // Not well-formed: skipped, as the trait asks (fsck reports).
            if let Ok(uid) = Uid::from_bytes(&data, self.k(kind).width) {
                out.push((name, uid));
            }
        }
        out.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        Ok(out)
    }
}

/// The counter's text (decimal, so `zkCli get` shows it).
fn parse_counter(data: &[u8]) -> Option<u64> {
    std::str::from_utf8(data).ok()?.trim().parse().ok()
}

/// Creates `path` with `data` unless it exists, creating missing parents.
pub fn create_with_parents(
    zk: &ZkClient,
    path: String,
    data: Vec<u8>,
) -> super::client::Result<()> {
    let what = format!("create {path}");
    zk.run(&what, |c| {
        let (path, data) = (path.clone(), data.clone());
        async move {
            loop {
                match c.create(&path, &data, &persistent()).await {
                    Ok(_) | Err(zk::Error::NodeExists) => return Ok(()),
                    Err(zk::Error::NoNode) => {
                        let parent = match path.rsplit_once('/') {
                            Some(("", _)) | None => return Err(zk::Error::NoNode),
                            Some((parent, _)) => parent.to_string(),
                        };
                        match c.mkdir(&parent, &persistent()).await {
                            Ok(()) | Err(zk::Error::NodeExists) => {}
                            Err(e) => return Err(e),
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    })
}

/// How a `multi` of this module ended.
enum MultiOutcome {
    Done,
    /// Operation `index` failed with `cause`; nothing was applied.
    Failed {
        index: usize,
        cause: zk::Error,
    },
}

impl ZkUidStore {
    /// Commits `ops` (built by `build`) as one transaction.
    fn multi(
        &self,
        what: &str,
        build: impl Fn(&mut zk::MultiWriter<'_>) -> std::result::Result<(), zk::Error>
        + Send
        + Sync
        + 'static,
    ) -> Result<MultiOutcome> {
        let build = Arc::new(build);
        self.zk
            .run(what, |c| {
                let build = build.clone();
                async move {
                    let mut m = c.new_multi_writer();
                    build(&mut m)?;
                    match m.commit().await {
                        Ok(_) => Ok(MultiOutcome::Done),
                        Err(zk::MultiWriteError::OperationFailed { index, source }) => {
                            Ok(MultiOutcome::Failed {
                                index,
                                cause: source,
                            })
                        }
                        Err(zk::MultiWriteError::RequestFailed { source }) => Err(source),
                    }
                }
            })
            .map_err(to_uid_err)
    }
}

impl UidStore for ZkUidStore {
    fn widths(&self) -> UidWidths {
        self.widths
    }

    fn forward(&self, kind: UidKind, name: &str) -> Result<Option<Uid>> {
        self.get_fresh(&self.layout.forward(kind, name))?
            .map(|data| self.decode_uid(kind, name, &data))
            .transpose()
    }

    fn reverse(&self, kind: UidKind, uid: Uid) -> Result<Option<String>> {
        let path = self.layout.reverse(kind, uid, self.k(kind).width);
        let found = self.get_fresh(&path)?;
        self.decode_name(kind, &path, found)
    }

    /// After a change another TSD made, the member this TSD reads from
    /// may not have it yet (a reconnect can land on a lagging member): the
    /// read follows a `sync`.
    fn forward_latest(&self, kind: UidKind, name: &str) -> Result<Option<Uid>> {
        self.forward_synced(kind, name)
    }

    fn reverse_latest(&self, kind: UidKind, uid: Uid) -> Result<Option<String>> {
        let path = self.layout.reverse(kind, uid, self.k(kind).width);
        let found = self.get_synced(&path)?;
        self.decode_name(kind, &path, found)
    }

    /// The kind's counter: the highest UID handed out or reserved by a
    /// TSD (blocks are reserved whole; see the module docs).
    fn max_id(&self, kind: UidKind) -> Result<u64> {
        let path = self.layout.max_id(kind);
        match self.get(&path)? {
            Some((data, _)) => parse_counter(&data)
                .ok_or_else(|| Self::corrupt(kind, &path, "the counter is not a decimal number")),
            None => Ok(0),
        }
    }

    fn allocate(&self, kind: UidKind, name: &str) -> Result<Assigned> {
        let width = self.k(kind).width;
        let forward = self.layout.forward(kind, name);
        let _assigning = self.k(kind).assign.lock();
        // Read first: taking a UID for a mapped name would reserve
        // counter space for nothing.
        if let Some(existing) = self.forward(kind, name)? {
            return Ok(Assigned::Existing(existing));
        }
        loop {
            let id = self.take_id(kind)?;
            let uid = Uid::new(id, width).map_err(|e| Self::corrupt(kind, name, e.to_string()))?;
            let reverse = self.layout.reverse(kind, uid, width);
            let (f, r, n, bytes) = (
                forward.clone(),
                reverse.clone(),
                name.to_string(),
                uid.to_bytes(width),
            );
            let outcome = self.multi(&format!("assign {kind} '{name}'"), move |m| {
                m.add_create(&r, n.as_bytes(), &persistent())?;
                m.add_create(&f, &bytes, &persistent())
            })?;
            match outcome {
                MultiOutcome::Done => return Ok(Assigned::New(uid)),
                // Another TSD assigned it since the read: its UID wins.
                MultiOutcome::Failed {
                    index: 1,
                    cause: zk::Error::NodeExists,
                } => {
                    self.give_back(kind, id);
                    if let Some(existing) = self.forward_synced(kind, name)? {
                        return Ok(Assigned::Existing(existing));
                    }
                    // Deleted between the two steps: try again.
                }
                MultiOutcome::Failed {
                    cause: zk::Error::NoNode,
                    ..
                } => {
                    // A first name under a new directory.
                    self.give_back(kind, id);
                    self.ensure_dirs(Self::parents_of(&[&forward, &reverse]))?;
                }
                // Our own transaction, applied before its connection broke
                // and sent again by the client.
                MultiOutcome::Failed {
                    index: 0,
                    cause: zk::Error::NodeExists,
                } if self.forward(kind, name)? == Some(uid) => {
                    return Ok(Assigned::New(uid));
                }
                MultiOutcome::Failed { index, cause } => {
                    return Err(Self::corrupt(
                        kind,
                        name,
                        format!(
                            "assigning UID {id}: {} failed: {cause}",
                            if index == 0 { reverse } else { forward }
                        ),
                    ));
                }
            }
        }
    }

    fn rename(&self, kind: UidKind, old: &str, new: &str) -> Result<Uid> {
        let width = self.k(kind).width;
        let old_path = self.layout.forward(kind, old);
        let new_path = self.layout.forward(kind, new);
        loop {
            let Some((data, stat)) = self.get(&old_path)? else {
                return Err(UidTableError::NoSuchName {
                    kind,
                    name: old.to_string(),
                });
            };
            let uid = self.decode_uid(kind, old, &data)?;
            let reverse = self.layout.reverse(kind, uid, width);
            let changes = self.layout.changes(kind);
            let (o, n, r, name) = (
                old_path.clone(),
                new_path.clone(),
                reverse.clone(),
                new.to_string(),
            );
            let outcome = self.multi(&format!("rename {kind} '{old}' to '{new}'"), move |m| {
                m.add_create(&n, &data, &persistent())?;
                m.add_delete(&o, Some(stat.version))?;
                m.add_set_data(&r, name.as_bytes(), None)?;
                m.add_set_data(&changes, b"", None)
            })?;
            match outcome {
                MultiOutcome::Done => return Ok(uid),
                // Our own rename, applied before its connection broke and
                // sent again by the client.
                MultiOutcome::Failed {
                    index: 0,
                    cause: zk::Error::NodeExists,
                } if self.forward(kind, new)? == Some(uid)
                    && self.forward(kind, old)?.is_none() =>
                {
                    return Ok(uid);
                }
                MultiOutcome::Failed {
                    index: 0,
                    cause: zk::Error::NodeExists,
                } => {
                    let existing = self
                        .forward(kind, new)?
                        .map(|u| u.to_bytes(width))
                        .unwrap_or_default();
                    return Err(UidTableError::RenameTargetExists {
                        kind,
                        width: width.bytes(),
                        old: old.to_string(),
                        new: new.to_string(),
                        existing,
                    });
                }
                MultiOutcome::Failed {
                    index: 0,
                    cause: zk::Error::NoNode,
                } => {
                    self.ensure_dirs(Self::parents_of(&[&new_path]))?;
                }
                // `old` changed or went since it was read: read again.
                MultiOutcome::Failed { index: 1, .. } => {}
                MultiOutcome::Failed { index, cause } => {
                    return Err(Self::corrupt(
                        kind,
                        old,
                        format!(
                            "rename to '{new}': step {index} failed: {cause} (is the reverse mapping {reverse} missing?)"
                        ),
                    ));
                }
            }
        }
    }

    fn delete(&self, kind: UidKind, name: &str) -> Result<Uid> {
        let width = self.k(kind).width;
        let forward = self.layout.forward(kind, name);
        loop {
            let Some((data, stat)) = self.get(&forward)? else {
                return Err(UidTableError::NoSuchName {
                    kind,
                    name: name.to_string(),
                });
            };
            let uid = self.decode_uid(kind, name, &data)?;
            let reverse = self.layout.reverse(kind, uid, width);
            let changes = self.layout.changes(kind);
            let (f, r) = (forward.clone(), reverse.clone());
            let outcome = self.multi(&format!("delete {kind} '{name}'"), move |m| {
                m.add_delete(&f, Some(stat.version))?;
                m.add_delete(&r, None)?;
                m.add_set_data(&changes, b"", None)
            })?;
            match outcome {
                MultiOutcome::Done => return Ok(uid),
                // Gone since read, with its reverse mapping: deleted (by
                // this transaction, applied before its connection broke
                // and sent again, or by another TSD at the same moment).
                MultiOutcome::Failed {
                    index: 0,
                    cause: zk::Error::NoNode,
                } if self.forward(kind, name)?.is_none() && self.reverse(kind, uid)?.is_none() => {
                    return Ok(uid);
                }
                // Changed since read: read again.
                MultiOutcome::Failed { index: 0, .. } => {}
                MultiOutcome::Failed {
                    index: 1,
                    cause: zk::Error::NoNode,
                } => {
                    // A forward mapping without its reverse (which this
                    // store never writes): remove what there is.
                    let f = forward.clone();
                    let changes = self.layout.changes(kind);
                    if let MultiOutcome::Done =
                        self.multi(&format!("delete {kind} '{name}'"), move |m| {
                            m.add_delete(&f, Some(stat.version))?;
                            m.add_set_data(&changes, b"", None)
                        })?
                    {
                        return Ok(uid);
                    }
                }
                MultiOutcome::Failed { cause, .. } => {
                    return Err(Self::corrupt(kind, name, format!("delete: {cause}")));
                }
            }
        }
    }

    fn scan_forward<'a>(&'a self, kind: UidKind, prefix: &[u8]) -> ForwardScan<'a> {
        let prefix = prefix.to_vec();
        let want = hex(&prefix[..prefix.len().min(2)]);
        let dirs = match self.children(&self.layout.names_root(kind)) {
            Ok(d) => d,
            Err(e) => return Box::new(std::iter::once(Err(e))),
        };
        // A directory holds names whose first two bytes are its hex: it
        // can match a shorter prefix by starting with it, a longer one
        // only by being its first two bytes.
        let mut dirs: Vec<String> = dirs
            .into_iter()
            .filter(|d| {
                if prefix.len() >= 2 {
                    *d == want
                } else {
                    d.starts_with(&want)
                }
            })
            .collect();
        dirs.sort();
        Box::new(ForwardIter {
            store: self,
            kind,
            prefix,
            dirs: dirs.into(),
            ready: VecDeque::new(),
        })
    }

    fn scan_reverse(&self, kind: UidKind) -> Result<Vec<(Uid, String)>> {
        let root = self.layout.ids_root(kind);
        let dirs: Vec<String> = self
            .children(&root)?
            .into_iter()
            .map(|d| format!("{root}/{d}"))
            .collect();
        let width = self.k(kind).width;
        let mut out = Vec::new();
        for (path, data) in self.read_all(dirs)? {
            let Some(child) = path.rsplit('/').next() else {
                continue;
            };
            let Some(bytes) = crate::model::uid::parse_hex(child) else {
                continue;
            };
            let (Ok(uid), Ok(name)) = (Uid::from_bytes(&bytes, width), String::from_utf8(data))
            else {
                continue;
            };
            out.push((uid, name));
        }
        Ok(out)
    }

    /// ZooKeeper acknowledges a write once a majority logged it to disk.
    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn remote_changes(&self, kind: UidKind) -> u64 {
        self.k(kind).changes.load(Ordering::SeqCst)
    }
}

/// [`UidStore::scan_forward`]: one prefix directory at a time, in order.
struct ForwardIter<'a> {
    store: &'a ZkUidStore,
    kind: UidKind,
    prefix: Vec<u8>,
    dirs: VecDeque<String>,
    ready: VecDeque<(String, Uid)>,
}

impl Iterator for ForwardIter<'_> {
    type Item = Result<(String, Uid)>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.ready.is_empty() {
            let dir = self.dirs.pop_front()?;
            match self.store.forward_dir(self.kind, &dir, &self.prefix) {
                Ok(found) => self.ready.extend(found),
                Err(e) => {
                    self.dirs.clear();
                    return Some(Err(e));
                }
            }
        }
        self.ready.pop_front().map(Ok)
    }
}

/// A kind's UID znodes as stored, for `tsdb uid fsck`: nothing decoded
/// beyond the znode names, so damage is seen rather than skipped.
#[derive(Debug, Default)]
pub struct StoredMappings {
    /// (name, the forward znode's data: the UID's bytes) of each forward
    /// mapping.
    pub forward: Vec<(String, Vec<u8>)>,
    /// (the UID's bytes from the reverse znode's name, its data: the
    /// name) of each reverse mapping.
    pub reverse: Vec<(Vec<u8>, Vec<u8>)>,
    /// The counter znode's data, if it exists.
    pub max_id: Option<Vec<u8>>,
    /// Paths of znodes under the mapping directories that name no
    /// mapping (not escaped as rtsdb escapes names, or not hex).
    pub unknown: Vec<String>,
}

/// Repairs of `tsdb uid fsck fix`, each one ZooKeeper write. They go
/// around the checks of assignment on purpose: they restore what those
/// checks keep true.
impl ZkUidStore {
    /// Every forward and reverse mapping of `kind` and its counter, in
    /// three pipelined exchanges (directories, sub-directories, mappings).
    pub fn stored_mappings(&self, kind: UidKind) -> Result<StoredMappings> {
        let mut out = StoredMappings::default();
        let names_root = self.layout.names_root(kind);
        let prefix_dirs: Vec<String> = self
            .children(&names_root)?
            .into_iter()
            .map(|d| format!("{names_root}/{d}"))
            .collect();
        let spread_dirs: Vec<String> = self
            .read_all(prefix_dirs)?
            .into_iter()
            .map(|(path, _)| path)
            .collect();
        for (path, data) in self.read_all(spread_dirs)? {
            match path.rsplit('/').next().and_then(unescape) {
                Some(name) => out.forward.push((name, data)),
                None => out.unknown.push(path),
            }
        }
        let ids_root = self.layout.ids_root(kind);
        let id_dirs: Vec<String> = self
            .children(&ids_root)?
            .into_iter()
            .map(|d| format!("{ids_root}/{d}"))
            .collect();
        for (path, data) in self.read_all(id_dirs)? {
            match path
                .rsplit('/')
                .next()
                .and_then(crate::model::uid::parse_hex)
            {
                Some(id) => out.reverse.push((id, data)),
                None => out.unknown.push(path),
            }
        }
        out.max_id = self.get(&self.layout.max_id(kind))?.map(|(d, _)| d);
        Ok(out)
    }

    fn reverse_path(&self, kind: UidKind, id: &[u8]) -> Result<String> {
        let width = self.k(kind).width;
        let uid = Uid::from_bytes(id, width)
            .map_err(|e| Self::corrupt(kind, &hex(id), format!("reverse mapping: {e}")))?;
        Ok(self.layout.reverse(kind, uid, width))
    }

    /// Writes the reverse mapping of `id` to `name`, or deletes it
    /// (`None`), and tells other TSDs to drop their cached mappings.
    pub fn repair_reverse(&self, kind: UidKind, id: &[u8], name: Option<&str>) -> Result<()> {
        let path = self.reverse_path(kind, id)?;
        if name.is_some() {
            self.ensure_dirs(Self::parents_of(&[&path]))?;
        }
        let name = name.map(str::to_string);
        loop {
            let (p, n, changes) = (path.clone(), name.clone(), self.layout.changes(kind));
            let outcome = self.multi(&format!("repair {path}"), move |m| {
                match &n {
                    Some(n) => m.add_set_data(&p, n.as_bytes(), None)?,
                    None => m.add_delete(&p, None)?,
                }
                m.add_set_data(&changes, b"", None)
            })?;
            match (outcome, &name) {
                (MultiOutcome::Done, _) => return Ok(()),
                // Already gone: nothing to delete.
                (
                    MultiOutcome::Failed {
                        index: 0,
                        cause: zk::Error::NoNode,
                    },
                    None,
                ) => return Ok(()),
                // Missing: created, then written by the next round.
                (
                    MultiOutcome::Failed {
                        index: 0,
                        cause: zk::Error::NoNode,
                    },
                    Some(n),
                ) => {
                    create_with_parents(&self.zk, path.clone(), n.as_bytes().to_vec())
                        .map_err(to_uid_err)?;
                }
                (MultiOutcome::Failed { cause, .. }, _) => {
                    return Err(Self::corrupt(kind, &path, format!("repair: {cause}")));
                }
            }
        }
    }

    /// Moves the kind's counter up to `to` (never down: a TSD reserving a
    /// block meanwhile is read again).
    pub fn raise_max_id(&self, kind: UidKind, to: u64) -> Result<()> {
        let path = self.layout.max_id(kind);
        loop {
            let (current, version) = match self.get(&path)? {
                Some((data, stat)) => (parse_counter(&data), Some(stat.version)),
                None => (None, None),
            };
            if current.is_some_and(|c| c >= to) {
                return Ok(());
            }
            let p = path.clone();
            let written = self
                .zk
                .run(&format!("raise {path}"), |c| {
                    let p = p.clone();
                    async move {
                        let text = to.to_string();
                        let r = match version {
                            Some(v) => c.set_data(&p, text.as_bytes(), Some(v)).await.map(|_| ()),
                            None => c
                                .create(&p, text.as_bytes(), &persistent())
                                .await
                                .map(|_| ()),
                        };
                        match r {
                            Ok(()) => Ok(true),
                            Err(zk::Error::BadVersion | zk::Error::NodeExists) => Ok(false),
                            Err(e) => Err(e),
                        }
                    }
                })
                .map_err(to_uid_err)?;
            if written {
                return Ok(());
            }
        }
    }

    /// Deletes a znode [`StoredMappings::unknown`] named (`uid fsck fix
    /// delete_unknown`).
    pub fn delete_unknown(&self, path: &str) -> Result<()> {
        let p = path.to_string();
        self.zk
            .run(&format!("delete {path}"), |c| {
                let p = p.clone();
                async move {
                    match c.delete(&p, None).await {
                        Ok(()) | Err(zk::Error::NoNode) => Ok(()),
                        Err(e) => Err(e),
                    }
                }
            })
            .map_err(to_uid_err)
    }
}
