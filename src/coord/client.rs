//! The one ZooKeeper session of a process, usable from blocking code.
//!
//! `zookeeper-client` is asynchronous; rtsdb's seams (`UidStore`,
//! `Coordinator`) are called from blocking code, some of it on the TSD's
//! own tokio workers, where blocking on another future of the same
//! runtime could starve it. So the session runs on a small runtime of its
//! own and each request is a task there whose answer comes back over a
//! channel, bounded by the configured timeout: a lost quorum turns into a
//! clear error, never a hang.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use thiserror::Error;
use tokio::runtime::{Handle, Runtime};
use zookeeper_client as zk;

use crate::storage::StorageError;

/// `tsd.storage.zk_quorum`: `host:port,...` of the ensemble.
pub const QUORUM_KEY: &str = "tsd.storage.zk_quorum";
pub const DEFAULT_BASEDIR: &str = "/rtsdb";

/// How to reach ZooKeeper and use it; defaults stated once, here
/// (`db::DbOptions::from_config` reads the `tsd.storage.zk_*` keys that
/// override them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkOptions {
    /// `tsd.storage.zk_quorum`: `host:port,...` of the ensemble.
    pub quorum: String,
    /// `tsd.storage.zk_basedir`: the znode every path of rtsdb sits under.
    pub basedir: String,
    /// `tsd.storage.zk_session_timeout`: how long the ensemble keeps this
    /// TSD's session (its locks) when it stops hearing from it.
    /// Default 10 s: within the 2–20 ticks a default ensemble allows, and
    /// long enough to ride out a leader election.
    pub session_timeout: Duration,
    /// `tsd.storage.zk_timeout`: how long one request may wait for an
    /// answer (a quorum) before it fails. Default 8 s: an election on a loaded machine takes a few seconds.
    pub request_timeout: Duration,
    /// `tsd.storage.zk_lock_timeout`: how long taking a cluster-wide lock
    /// may wait for its holder. Default 30 s.
    pub lock_timeout: Duration,
    /// `tsd.storage.zk_uid_block`: UIDs a TSD reserves per counter
    /// update. Default 64: one counter update per 64 new names of a kind on a
    /// TSD; a crash wastes at most 63 UIDs per kind (docs/cluster.md).
    pub uid_block: u64,
}

impl ZkOptions {
    /// Options for `quorum` with every default.
    pub fn new(quorum: &str) -> ZkOptions {
        ZkOptions {
            quorum: quorum.to_string(),
            basedir: DEFAULT_BASEDIR.to_string(),
            session_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(8),
            lock_timeout: Duration::from_secs(30),
            uid_block: 64,
        }
    }
}

#[derive(Debug, Error)]
pub enum CoordError {
    #[error("cannot reach ZooKeeper at {quorum} ({QUORUM_KEY}): {cause}")]
    Unreachable { quorum: String, cause: String },
    #[error(
        "ZooKeeper at {quorum} did not answer {what} within {} ms: is a majority of the ensemble up?",
        timeout.as_millis()
    )]
    Timeout {
        quorum: String,
        what: String,
        timeout: Duration,
    },
    #[error("ZooKeeper at {quorum}: {what}: {cause}")]
    Failed {
        quorum: String,
        what: String,
        cause: zk::Error,
    },
}

impl From<CoordError> for StorageError {
    fn from(e: CoordError) -> StorageError {
        StorageError::Engine(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, CoordError>;

/// A connected ZooKeeper session and the runtime that drives it. A session
/// the ensemble expired is replaced by a new one on the next request.
pub struct ZkClient {
    /// Taken on drop and shut down in the background: dropping a runtime
    /// blocks, which panics inside another runtime's task.
    runtime: Option<Runtime>,
    handle: Handle,
    options: ZkOptions,
    session: Mutex<zk::Client>,
    /// Each new session goes to the tasks that keep watches.
    sessions: tokio::sync::watch::Sender<zk::Client>,
}

impl ZkClient {
    /// Connects to the quorum, failing with [`CoordError::Unreachable`]
    /// (naming it) when no member answers within the request timeout.
    pub fn connect(options: &ZkOptions) -> Result<Arc<ZkClient>> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("zookeeper")
            .enable_all()
            .build()
            .map_err(|e| CoordError::Unreachable {
                quorum: options.quorum.clone(),
                cause: format!("cannot start the client's runtime: {e}"),
            })?;
        let handle = runtime.handle().clone();
        let client = connect_on(&handle, options)?;
        let (sessions, _) = tokio::sync::watch::channel(client.clone());
        Ok(Arc::new(ZkClient {
            runtime: Some(runtime),
            handle,
            options: options.clone(),
            session: Mutex::new(client),
            sessions,
        }))
    }

    pub fn options(&self) -> &ZkOptions {
        &self.options
    }

    /// The current session's id, as ZooKeeper's `cons` prints it.
    #[cfg(test)]
    pub(crate) fn session_hex(&self) -> String {
        format!("0x{:x}", self.session.lock().session_id().0)
    }

    /// The live session, a new one if the ensemble expired the last.
    fn session(&self) -> Result<zk::Client> {
        let mut current = self.session.lock();
        if matches!(
            current.state(),
            zk::SessionState::Expired | zk::SessionState::Closed | zk::SessionState::AuthFailed
        ) {
            tracing::warn!(quorum = %self.options.quorum, "ZooKeeper session ended; opening a new one");
            *current = connect_on(&self.handle, &self.options)?;
            self.sessions.send_replace(current.clone());
        }
        Ok(current.clone())
    }

    /// Runs `request` against the session, waiting at most the request
    /// timeout. `what` names it in errors.
    ///
    /// A request whose connection broke is sent again (on another member,
    /// or on a new session if the ensemble expired the old one) until the
    /// time is up: ZooKeeper cannot say whether a request lost with its
    /// connection was applied, so every request given here is either
    /// idempotent or its caller recognises its own earlier success (see
    /// `ZkUidStore::allocate`).
    pub fn run<T, F, Fut>(&self, what: &str, request: F) -> Result<T>
    where
        F: Fn(zk::Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, zk::Error>> + Send + 'static,
        T: Send + 'static,
    {
        self.run_within(what, self.options.request_timeout, request)
    }

    /// [`ZkClient::run`] with its own time limit (taking a lock waits for
    /// the holder, longer than a request).
    pub fn run_within<T, F, Fut>(&self, what: &str, limit: Duration, request: F) -> Result<T>
    where
        F: Fn(zk::Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, zk::Error>> + Send + 'static,
        T: Send + 'static,
    {
        let deadline = std::time::Instant::now() + limit;
        let timeout = || CoordError::Timeout {
            quorum: self.options.quorum.clone(),
            what: what.to_string(),
            timeout: limit,
        };
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(timeout());
            }
            let session = match self.session() {
                Ok(s) => s,
                // No member answers yet: the quorum may come back in time.
                Err(CoordError::Unreachable { .. }) => {
                    std::thread::sleep(RETRY_PAUSE.min(left));
                    continue;
                }
                Err(e) => return Err(e),
            };
            let fut = request(session);
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            self.handle.spawn(async move {
                let _ = tx.send(tokio::time::timeout(left, fut).await);
            });
            match rx.recv() {
                Ok(Ok(Ok(v))) => return Ok(v),
                Ok(Ok(Err(cause))) if connection_lost(&cause) => {
                    tracing::debug!(what, error = %cause, "ZooKeeper request lost with its connection; sending it again");
                    std::thread::sleep(RETRY_PAUSE.min(left));
                }
                Ok(Ok(Err(cause))) => {
                    return Err(CoordError::Failed {
                        quorum: self.options.quorum.clone(),
                        what: what.to_string(),
                        cause,
                    });
                }
                Ok(Err(_elapsed)) => return Err(timeout()),
                Err(_) => {
                    return Err(CoordError::Unreachable {
                        quorum: self.options.quorum.clone(),
                        cause: "the client's runtime stopped".to_string(),
                    });
                }
            }
        }
    }

    /// Runs `task` in the background on the client's runtime (dropping a
    /// lock, keeping a watch).
    pub fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.handle.spawn(task);
    }

    /// Keeps a persistent watch on `path` for as long as the client
    /// lives, adding one to `moved` on every change of the node and every
    /// time a session (re)connects: events missed while disconnected are
    /// not redelivered, so a reconnect counts as a change. Disconnection
    /// alone does not count, so caches keep serving while the ensemble is
    /// away.
    pub fn watch_changes(&self, path: String, moved: Arc<AtomicU64>) {
        let mut sessions = self.sessions.subscribe();
        self.spawn(async move {
            loop {
                let client = sessions.borrow_and_update().clone();
                match client.watch(&path, zk::AddWatchMode::Persistent).await {
                    Ok(mut watcher) => {
                        moved.fetch_add(1, Ordering::SeqCst);
                        loop {
                            let event = watcher.changed().await;
                            match (event.event_type, event.session_state) {
                                (zk::EventType::Session, zk::SessionState::Disconnected) => {}
                                (zk::EventType::Session, s) if s.is_terminated() => break,
                                _ => {
                                    moved.fetch_add(1, Ordering::SeqCst);
                                }
                            }
                        }
                    }
                    Err(e) if client.state().is_terminated() => {
                        tracing::debug!(path, error = %e, "watch waits for a new session");
                    }
                    Err(e) => {
                        tracing::warn!(path, error = %e, "cannot watch; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                }
                // The session ended: wait for the next one.
                if sessions.changed().await.is_err() {
                    return;
                }
            }
        });
    }
}

/// What a recursive watch on a tree of change counters has seen, read
/// without a round trip ([`ZkClient::watch_tree`]).
///
/// A counter's value moves on every change of its znode the watch
/// delivered and on every (re)connection of the session (events missed
/// while disconnected are not all redelivered: ZOOKEEPER-4698); while the
/// session is disconnected, or before the watch is first set, there is no
/// value: nothing vouches that the counter did not move.
pub struct TreeWatch {
    /// A watch is set on the live, connected session.
    live: std::sync::atomic::AtomicBool,
    /// Moves on each (re)connection: every value changes.
    epoch: AtomicU64,
    /// Changes delivered per znode path.
    moved: Mutex<std::collections::HashMap<String, u64>>,
    /// Asks the watching task to apply every event already received and
    /// answer whether the watch is live ([`ZkClient::fence`]).
    drains: tokio::sync::mpsc::UnboundedSender<tokio::sync::oneshot::Sender<bool>>,
}

/// Set in every [`TreeWatch::value`], so that no value of a watch equals
/// a counter read from ZooKeeper (a znode version + 1, below 2^31).
const WATCHED_BIT: u64 = 1 << 63;

/// A request of [`ZkClient::fence`] to the watching task.
type Drain = tokio::sync::oneshot::Sender<bool>;

impl TreeWatch {
    /// The value of the counter at `path` as this process knows it now,
    /// `None` while no watch vouches for it. Two values are equal only if
    /// no change of the znode was delivered between them.
    pub fn value(&self, path: &str) -> Option<u64> {
        if !self.live.load(Ordering::SeqCst) {
            return None;
        }
        let epoch = self.epoch.load(Ordering::SeqCst);
        let moved = self.moved.lock().get(path).copied().unwrap_or(0);
        Some(WATCHED_BIT | ((epoch & 0x7f_ffff) << 40) | (moved & ((1 << 40) - 1)))
    }

    /// A watch is set on the live, connected session.
    pub fn is_live(&self) -> bool {
        self.live.load(Ordering::SeqCst)
    }

    fn connected(&self) {
        // The epoch first: a reader that sees `live` sees the new epoch.
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.live.store(true, Ordering::SeqCst);
    }

    fn disconnected(&self) {
        self.live.store(false, Ordering::SeqCst);
    }

    fn changed(&self, path: String) {
        *self.moved.lock().entry(path).or_default() += 1;
    }

    /// Applies one event of the watcher; `false` once its session ended.
    fn apply(&self, event: zk::WatchedEvent) -> bool {
        match (event.event_type, event.session_state) {
            (zk::EventType::Session, zk::SessionState::SyncConnected) => self.connected(),
            (zk::EventType::Session, s) if s.is_terminated() => {
                self.disconnected();
                return false;
            }
            // Disconnected, or connected read-only (not told of every
            // change).
            (zk::EventType::Session, _) => self.disconnected(),
            _ => self.changed(event.path),
        }
        true
    }
}

/// Answers `drains` with `false` (no live watch) until `until` is ready.
async fn refuse_drains<T>(
    drains: &mut tokio::sync::mpsc::UnboundedReceiver<Drain>,
    until: impl Future<Output = T>,
) -> T {
    tokio::pin!(until);
    loop {
        tokio::select! {
            v = &mut until => return v,
            Some(d) = drains.recv() => {
                let _ = d.send(false);
            }
        }
    }
}

impl ZkClient {
    /// Keeps a persistent recursive watch on `path` and every znode under
    /// it for as long as the client lives, recording every change
    /// delivered, every disconnection and every reconnection in the
    /// returned [`TreeWatch`]. `path` need not exist yet.
    pub fn watch_tree(&self, path: String) -> Arc<TreeWatch> {
        let (drains, mut drain_requests) = tokio::sync::mpsc::unbounded_channel::<Drain>();
        let seen = Arc::new(TreeWatch {
            live: Default::default(),
            epoch: Default::default(),
            moved: Default::default(),
            drains,
        });
        let watch = seen.clone();
        let mut sessions = self.sessions.subscribe();
        self.spawn(async move {
            let seen = watch;
            loop {
                let client = sessions.borrow_and_update().clone();
                let set = refuse_drains(
                    &mut drain_requests,
                    client.watch(&path, zk::AddWatchMode::PersistentRecursive),
                )
                .await;
                match set {
                    Ok(mut watcher) => {
                        seen.connected();
                        loop {
                            // Events first: a drain is answered only once
                            // every event already received was applied.
                            tokio::select! {
                                biased;
                                event = watcher.changed() => {
                                    if !seen.apply(event) {
                                        break;
                                    }
                                }
                                Some(d) = drain_requests.recv() => {
                                    let _ = d.send(seen.live.load(Ordering::SeqCst));
                                }
                            }
                        }
                    }
                    Err(e) if client.state().is_terminated() => {
                        seen.disconnected();
                        tracing::debug!(path, error = %e, "watch waits for a new session");
                    }
                    Err(e) => {
                        seen.disconnected();
                        tracing::warn!(path, error = %e, "cannot watch; retrying");
                        refuse_drains(
                            &mut drain_requests,
                            tokio::time::sleep(Duration::from_secs(1)),
                        )
                        .await;
                        continue;
                    }
                }
                if refuse_drains(&mut drain_requests, sessions.changed())
                    .await
                    .is_err()
                {
                    return;
                }
            }
        });
        seen
    }

    /// Makes `watch` current: once this returns `true`, every change of a
    /// watched znode that ZooKeeper committed before the call began is
    /// applied in `watch`. `false` when no watch is live (disconnected,
    /// not set yet, or ZooKeeper did not answer): nothing vouches for the
    /// watched values then.
    ///
    /// One round trip: a `sync` on this process's session (its member
    /// catches up with the leader as of the `sync`), whose answer comes
    /// after every notification that member sent before it (ZooKeeper
    /// sends a session's notifications and replies in order on one
    /// connection, and a member notifies as it applies each change), and
    /// the client queues each notification to the watcher before it
    /// completes a later reply (`zookeeper-client`'s session loop); then
    /// the watching task applies whatever it has received before it
    /// answers the drain request.
    pub fn fence(&self, watch: &TreeWatch, path: &str) -> bool {
        if !watch.live.load(Ordering::SeqCst) {
            return false;
        }
        let p = path.to_string();
        let synced = self.run(&format!("sync {path}"), |c| {
            let p = p.clone();
            async move { c.sync(&p).await }
        });
        if let Err(e) = synced {
            tracing::debug!(error = %e, "fence: ZooKeeper sync failed");
            return false;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        if watch.drains.send(tx).is_err() {
            return false;
        }
        let limit = self.options.request_timeout;
        let (done, answered) = std::sync::mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let _ = done.send(matches!(
                tokio::time::timeout(limit, rx).await,
                Ok(Ok(true))
            ));
        });
        answered.recv().unwrap_or(false)
    }
}

/// Pause before sending a request again after its connection broke.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Errors after which the request may be sent again: the connection or
/// the session went, not the request's own outcome.
fn connection_lost(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::ConnectionLoss
            | zk::Error::SessionExpired
            | zk::Error::ClientClosed
            | zk::Error::NoHosts
            | zk::Error::Timeout
            // I/O errors of the socket (reset by peer, …).
            | zk::Error::Custom(_)
    )
}

impl Drop for ZkClient {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

fn connect_on(handle: &Handle, options: &ZkOptions) -> Result<zk::Client> {
    let unreachable = |cause: String| CoordError::Unreachable {
        quorum: options.quorum.clone(),
        cause,
    };
    let quorum = options.quorum.clone();
    let session_timeout = options.session_timeout;
    let limit = options.request_timeout;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    handle.spawn(async move {
        let connect = zk::Client::connector()
            .with_session_timeout(session_timeout)
            .with_connection_timeout(limit)
            // Every member refusing is an answer: say so at once rather
            // than retry for the whole session timeout.
            .with_fail_eagerly()
            .connect(&quorum);
        let _ = tx.send(tokio::time::timeout(limit, connect).await);
    });
    match rx.recv() {
        Ok(Ok(Ok(client))) => Ok(client),
        Ok(Ok(Err(e))) => Err(unreachable(e.to_string())),
        Ok(Err(_)) => Err(unreachable(format!(
            "no session within {} ms",
            limit.as_millis()
        ))),
        Err(_) => Err(unreachable("the client's runtime stopped".to_string())),
    }
}
