//! [`ZkCoordinator`]: the storage layer's cluster-wide locks and
//! write-once records, over ZooKeeper.
//!
//! A lock is ZooKeeper's lock recipe: each contender creates an ephemeral
//! sequential znode under the lock's directory and waits for the one just
//! before it to go; the lowest holds the lock. Ephemeral, so a TSD that
//! dies (its session expires) releases what it held. A record is created
//! only if absent: the first TSD's bytes win and every later one reads
//! them. A change counter is a znode whose data version counts the
//! writes to it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use zookeeper_client as zk;

use super::client::{TreeWatch, ZkClient};
use super::names::Layout;
use super::uid::create_with_parents;
use crate::storage::Result;
use crate::storage::coordinator::Coordinator;

/// A [`Coordinator`] every TSD of a cluster shares through ZooKeeper.
pub struct ZkCoordinator {
    zk: Arc<ZkClient>,
    layout: Layout,
    /// Every change counter as the watch on their directory saw them
    /// ([`Coordinator::watched`]).
    watched: Arc<TreeWatch>,
    /// When the last fence that succeeded began; its lock is held while
    /// fencing, so queries arriving together share one round trip.
    fenced: Mutex<Option<Instant>>,
    /// When this process's last bump returned ([`Coordinator::settle`]).
    bumped: Mutex<Option<Instant>>,
}

/// How long a process holds the acknowledgement of a write after the
/// bumps that announce it ([`Coordinator::settle`]).
pub const SETTLE: Duration = Duration::from_millis(25);
/// How long a fence vouches for the watched counters
/// ([`Coordinator::fence`]): below [`SETTLE`], with a fifth to spare for
/// two machines' monotonic clocks running at different rates
/// (docs/scale-out.md "The read cache" has the argument).
pub const LEASE: Duration = Duration::from_millis(20);

impl ZkCoordinator {
    /// Starts watching the change counters at once, so that by a TSD's
    /// first query the watch is usually set.
    pub fn new(zk: Arc<ZkClient>) -> ZkCoordinator {
        let layout = Layout::new(&zk.options().basedir);
        let watched = zk.watch_tree(layout.generations());
        ZkCoordinator {
            zk,
            layout,
            watched,
            fenced: Mutex::new(None),
            bumped: Mutex::new(None),
        }
    }

    /// A bump returned (or failed, and may have been applied all the same).
    fn bumped_now(&self) {
        *self.bumped.lock() = Some(Instant::now());
    }
}

/// Holds a lock; dropping it deletes the contender's znode.
struct ZkLockGuard {
    lock: Option<zk::OwnedLockClient>,
    zk: Arc<ZkClient>,
}

impl Drop for ZkLockGuard {
    fn drop(&mut self) {
        if let Some(lock) = self.lock.take() {
            // The client deletes the znode from a task of its runtime,
            // which only exists there.
            self.zk.spawn(async move { drop(lock) });
        }
    }
}

impl Coordinator for ZkCoordinator {
    fn lock(&self, name: &str) -> Result<Box<dyn std::any::Any + Send>> {
        let dir = self.layout.lock_dir(name);
        let limit = self.zk.options().lock_timeout;
        let lock = self.zk.run_within(&format!("lock {dir}"), limit, |c| {
            let dir = dir.clone();
            async move {
                let prefix = zk::LockPrefix::new_curator(&dir, "lock-")?;
                let options = zk::LockOptions::new(zk::Acls::anyone_all()).with_ancestor_options(
                    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
                )?;
                Ok(c.lock(prefix, b"", options).await?.into_owned())
            }
        })?;
        Ok(Box::new(ZkLockGuard {
            lock: Some(lock),
            zk: self.zk.clone(),
        }))
    }

    fn get_or_create(&self, name: &str, init: &[u8]) -> Result<Vec<u8>> {
        let path = self.layout.record(name);
        if let Some((dir, _)) = path.rsplit_once('/') {
            create_with_parents(&self.zk, dir.to_string(), Vec::new())?;
        }
        let init = init.to_vec();
        Ok(self.zk.run(&format!("create or read {path}"), |c| {
            let (path, init) = (path.clone(), init.clone());
            async move {
                loop {
                    match c
                        .create(
                            &path,
                            &init,
                            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
                        )
                        .await
                    {
                        Ok(_) => return Ok(init),
                        Err(zk::Error::NodeExists) => match c.get_data(&path).await {
                            Ok((data, _)) => return Ok(data),
                            // Removed by hand in between: create again.
                            Err(zk::Error::NoNode) => {}
                            Err(e) => return Err(e),
                        },
                        Err(e) => return Err(e),
                    }
                }
            }
        })?)
    }

    fn bump(&self, name: &str) -> Result<()> {
        let path = self.layout.generation(name);
        loop {
            let p = path.clone();
            let written = self.zk.run(&format!("bump {path}"), |c| {
                let p = p.clone();
                async move {
                    match c.set_data(&p, b"", None).await {
                        Ok(_) => Ok(true),
                        Err(zk::Error::NoNode) => Ok(false),
                        Err(e) => Err(e),
                    }
                }
            });
            self.bumped_now();
            if written? {
                return Ok(());
            }
            // The first bump of the name anywhere: create it, then write.
            create_with_parents(&self.zk, path.clone(), Vec::new())?;
        }
    }

    fn bump_all(&self, names: &[String]) -> Result<()> {
        let paths: Arc<Vec<String>> =
            Arc::new(names.iter().map(|n| self.layout.generation(n)).collect());
        loop {
            let p = paths.clone();
            let missing = self.zk.run("bump change counters", |c| {
                let p = p.clone();
                async move {
                    let mut m = c.new_multi_writer();
                    for path in p.iter() {
                        m.add_set_data(path, b"", None)?;
                    }
                    match m.commit().await {
                        Ok(_) => Ok(None),
                        Err(zk::MultiWriteError::OperationFailed {
                            index,
                            source: zk::Error::NoNode,
                        }) => Ok(Some(index)),
                        Err(zk::MultiWriteError::OperationFailed { source, .. })
                        | Err(zk::MultiWriteError::RequestFailed { source }) => Err(source),
                    }
                }
            });
            self.bumped_now();
            match missing? {
                None => return Ok(()),
                // A counter's first bump anywhere: create it, then write
                // them all (nothing of a failed transaction was applied).
                Some(i) => create_with_parents(&self.zk, paths[i].clone(), Vec::new())?,
            }
        }
    }

    fn watched(&self, name: &str) -> Option<u64> {
        self.watched.value(&self.layout.generation(name))
    }

    /// A lease: a fence begun less than [`LEASE`] ago vouches for the
    /// watched values, since every other process holds a write's
    /// acknowledgement [`SETTLE`] (longer) after its bump. Say B's last
    /// fence began at f and a query on B begins at q < f + LEASE, after
    /// A acknowledged at a: A's bump returned at c <= a - SETTLE, so
    /// c < q - LEASE < f, and the fence, begun after the bump committed,
    /// counts it.
    fn fence(&self) -> bool {
        let mut fenced = self.fenced.lock();
        if fenced.is_some_and(|f| f.elapsed() < LEASE) {
            return self.watched.is_live();
        }
        let began = Instant::now();
        let ok = self.zk.fence(&self.watched, &self.layout.generations());
        tracing::debug!(
            micros = began.elapsed().as_micros() as u64,
            ok,
            "fenced the watched change counters"
        );
        *fenced = ok.then_some(began);
        ok
    }

    fn settle(&self) {
        let Some(bumped) = *self.bumped.lock() else {
            return;
        };
        let left = SETTLE.saturating_sub(bumped.elapsed());
        if !left.is_zero() {
            std::thread::sleep(left);
        }
    }

    fn generation(&self, name: &str) -> Result<u64> {
        let path = self.layout.generation(name);
        Ok(self.zk.run(&format!("sync and read {path}"), |c| {
            let p = path.clone();
            async move {
                // Sent together: the member answers the read only once it
                // caught up with the leader (`sync`), so a bump another TSD
                // had acknowledged is seen, for one round trip.
                let synced = c.sync(&p);
                let stat = c.check_stat(&p);
                match synced.await {
                    Ok(()) | Err(zk::Error::NoNode) => {}
                    Err(e) => return Err(e),
                }
                Ok(stat.await?.map_or(0, |s| s.version as u64 + 1))
            }
        })?)
    }
}
