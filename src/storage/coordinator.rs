//! Cluster-wide coordination the storage layer needs from outside the
//! engine: a mutex per name (read-modify-write of one key by several TSDs)
//! and a write-once record (the store layout). ClickHouse has no
//! compare-and-set of its own, so `increment` and `compare_and_set` on it
//! take [`Coordinator::lock`]; ZooKeeper implements this trait in a
//! cluster, [`LocalCoordinator`] inside one process (tests, one TSD).

use super::Result;
use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Locks and write-once records shared by every TSD of a cluster.
pub trait Coordinator: Send + Sync {
    /// Holds the cluster-wide mutex `name` until the guard drops.
    fn lock(&self, name: &str) -> Result<Box<dyn std::any::Any + Send>>;
    /// The bytes at `name`, atomically created with `init` if absent (the layout record).
    fn get_or_create(&self, name: &str, init: &[u8]) -> Result<Vec<u8>>;
    /// Moves the cluster-wide change counter `name`: every TSD's next
    /// [`generation`](Self::generation) of it differs from before.
    fn bump(&self, name: &str) -> Result<()>;
    /// The change counter `name` as of now (0 before its first bump): a
    /// bump any TSD saw acknowledged before this call began is counted.
    fn generation(&self, name: &str) -> Result<u64>;
    /// Moves every counter of `names` at once (one ZooKeeper transaction):
    /// a TSD that saw none of them move before sees all of them after.
    fn bump_all(&self, names: &[String]) -> Result<()> {
        names.iter().try_for_each(|n| self.bump(n))
    }
    /// The counter `name` as this process's watch last saw it, without
    /// asking anyone: `None` while no watch vouches for it (disconnected,
    /// not watching). Another TSD's bump shows here one notification after
    /// it was acknowledged; after a [`fence`](Self::fence) that returned
    /// `true`, every bump acknowledged before the fence (and
    /// [`settle`](Self::settle)d) does. Values compare only for equality.
    fn watched(&self, name: &str) -> Option<u64> {
        let _ = name;
        None
    }
    /// Makes [`watched`](Self::watched) count every bump another process
    /// acknowledged, after its [`settle`](Self::settle), before this call
    /// began; `false` when it cannot (no watch): `watched` values must not
    /// be relied on then. May reuse a fence begun within a short lease
    /// instead of asking ZooKeeper (docs/scale-out.md "The read cache").
    fn fence(&self) -> bool {
        false
    }
    /// Waits, before this process acknowledges a write whose bumps it just
    /// made, until every other process's next [`fence`](Self::fence)
    /// counts them (the lease a fence may be reused for). Returns at once
    /// when this process bumped nothing lately.
    fn settle(&self) {}
}

/// A [`Coordinator`] whose locks and records live in this process only:
/// right for tests and for a single TSD, wrong for two TSDs (they would
/// not see each other's locks).
#[derive(Default, Clone)]
pub struct LocalCoordinator {
    inner: Arc<LocalInner>,
}

#[derive(Default)]
struct LocalInner {
    held: Mutex<HashSet<String>>,
    released: Condvar,
    records: Mutex<HashMap<String, Vec<u8>>>,
    generations: Mutex<HashMap<String, u64>>,
}

/// Releases its name when dropped and wakes the waiters.
struct LocalGuard {
    inner: Arc<LocalInner>,
    name: String,
}

impl Drop for LocalGuard {
    fn drop(&mut self) {
        self.inner.held.lock().remove(&self.name);
        self.inner.released.notify_all();
    }
}

impl LocalCoordinator {
    pub fn new() -> LocalCoordinator {
        LocalCoordinator::default()
    }
}

impl Coordinator for LocalCoordinator {
    fn lock(&self, name: &str) -> Result<Box<dyn std::any::Any + Send>> {
        let mut held = self.inner.held.lock();
        while held.contains(name) {
            self.inner.released.wait(&mut held);
        }
        held.insert(name.to_string());
        Ok(Box::new(LocalGuard {
            inner: self.inner.clone(),
            name: name.to_string(),
        }))
    }

    fn get_or_create(&self, name: &str, init: &[u8]) -> Result<Vec<u8>> {
        Ok(self
            .inner
            .records
            .lock()
            .entry(name.to_string())
            .or_insert_with(|| init.to_vec())
            .clone())
    }

    fn bump(&self, name: &str) -> Result<()> {
        *self
            .inner
            .generations
            .lock()
            .entry(name.to_string())
            .or_default() += 1;
        Ok(())
    }

    fn generation(&self, name: &str) -> Result<u64> {
        Ok(self
            .inner
            .generations
            .lock()
            .get(name)
            .copied()
            .unwrap_or(0))
    }

    /// In one process every bump is seen at once: the counter itself.
    fn watched(&self, name: &str) -> Option<u64> {
        self.generation(name).ok()
    }

    fn fence(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn lock_excludes_other_holders_of_the_same_name() {
        let c = LocalCoordinator::new();
        let inside = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (c, inside) = (c.clone(), inside.clone());
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        let _g = c.lock("n").unwrap();
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0);
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // Another name is independent of a held one.
        let _a = c.lock("a").unwrap();
        let _b = c.lock("b").unwrap();
    }

    #[test]
    fn get_or_create_keeps_the_first_value() {
        let c = LocalCoordinator::new();
        assert_eq!(c.get_or_create("layout", b"one").unwrap(), b"one");
        assert_eq!(c.get_or_create("layout", b"two").unwrap(), b"one");
    }

    #[test]
    fn generations_move_on_each_bump() {
        let c = LocalCoordinator::new();
        assert_eq!(c.generation("index").unwrap(), 0);
        c.bump("index").unwrap();
        c.bump("index").unwrap();
        assert_eq!(c.generation("index").unwrap(), 2);
        assert_eq!(c.generation("other").unwrap(), 0);
    }
}
