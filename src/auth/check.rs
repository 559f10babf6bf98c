//! [`Authenticator`]: who a request's credentials name, and whether the
//! token is right. The users file is read at start and read again when
//! its modification time, size or inode change (looked at no more than
//! once a second, on the next check), so `tsdb auth` changes reach a
//! running TSD without a restart.
//!
//! A token's first verification is one argon2id hash (tens of
//! milliseconds by design; at most [`MAX_VERIFYING`] at once, so a flood
//! of wrong tokens holds a bounded amount of memory and CPU). A verified
//! token's secret is remembered as a keyed SipHash digest (key random per
//! process) per user id, so later requests cost a map lookup and one
//! constant-time comparison of 16 bytes. A reload forgets every digest.

use std::collections::HashMap;
use std::hash::Hasher;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use parking_lot::{Condvar, Mutex, RwLock};
use siphasher::sip128::{Hasher128, SipHasher13};
use subtle::ConstantTimeEq;

use super::credentials::Credentials;
use super::token::Token;
use super::users::{User, Users};
use super::{AUDIT_TARGET, AuthError, Roles};

/// argon2 verifications run at once; more wait their turn.
pub const MAX_VERIFYING: usize = 2;
/// How often the users file is looked at, at most.
const POLL_EVERY: Duration = Duration::from_secs(1);

/// A user whose credentials were verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    pub id: u64,
    pub tenant: String,
    pub roles: Roles,
}

/// Why credentials were refused. Clients are told only that they failed;
/// the audit log gets the reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not a token of ours.
    Malformed,
    /// No user has the token's id (removed, rotated, or made up).
    UnknownUser,
    /// The name sent with the token is not its user's.
    WrongName,
    /// The secret does not match the user's hash.
    WrongSecret,
}

impl Refusal {
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Malformed => "malformed token",
            Refusal::UnknownUser => "no user with the token's id",
            Refusal::WrongName => "name does not match the token's user",
            Refusal::WrongSecret => "wrong token secret",
        }
    }
}

/// What a check that may not hash found.
#[derive(Debug)]
pub enum Quick {
    Known(Arc<Principal>),
    Refused(Refusal),
    /// Right shape, not verified before: needs [`Authenticator::verify`].
    NeedsHash,
}

struct Entry {
    principal: Arc<Principal>,
    hash: String,
}

#[derive(Default)]
struct Loaded {
    by_id: HashMap<u64, Entry>,
    /// Modification time, size and inode of the file read.
    stamp: Option<(SystemTime, u64, u64)>,
}

/// Checks credentials against the users file.
pub struct Authenticator {
    path: PathBuf,
    loaded: RwLock<Arc<Loaded>>,
    /// Verified secrets' digests by user id.
    verified: RwLock<HashMap<u64, [u8; 16]>>,
    digest_key: (u64, u64),
    /// Milliseconds since `epoch` of the last look at the file.
    last_poll: AtomicU64,
    epoch: Instant,
    verifying: Mutex<usize>,
    turn: Condvar,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Authenticator {
    /// Reads the users file (missing: no users, every request refused
    /// until one is added).
    pub fn open(path: PathBuf) -> Result<Authenticator, AuthError> {
        let mut key = [0u8; 16];
        getrandom::getrandom(&mut key).map_err(|e| AuthError::Random(e.to_string()))?;
        let half = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
        let a = Authenticator {
            loaded: RwLock::new(Arc::new(Loaded::default())),
            verified: RwLock::new(HashMap::new()),
            digest_key: (half(&key[..8]), half(&key[8..])),
            last_poll: AtomicU64::new(0),
            epoch: Instant::now(),
            verifying: Mutex::new(0),
            turn: Condvar::new(),
            path,
        };
        let stamp = a.stamp();
        let users = Users::load(&a.path)?;
        a.install(&users, stamp);
        tracing::info!(path = %a.path.display(), users = users.len(), "authentication on");
        Ok(a)
    }

    /// The users file this reads.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    fn stamp(&self) -> Option<(SystemTime, u64, u64)> {
        let m = std::fs::metadata(&self.path).ok()?;
        #[cfg(unix)]
        let ino = std::os::unix::fs::MetadataExt::ino(&m);
        #[cfg(not(unix))]
        let ino = 0;
        Some((m.modified().ok()?, m.len(), ino))
    }

    fn install(&self, users: &Users, stamp: Option<(SystemTime, u64, u64)>) {
        let by_id = users.iter().map(|u: &User| (u.id, entry(u))).collect();
        *self.loaded.write() = Arc::new(Loaded { by_id, stamp });
        self.verified.write().clear();
    }

    /// Reads the file again if it changed since it was read; at most once
    /// per [`POLL_EVERY`]. A file that does not parse is logged and the
    /// users read before stay in force.
    pub fn poll(&self) {
        let now = self.epoch.elapsed().as_millis() as u64;
        let last = self.last_poll.load(Ordering::Relaxed);
        if now.saturating_sub(last) < POLL_EVERY.as_millis() as u64 && last != 0 {
            return;
        }
        if self
            .last_poll
            .compare_exchange(last, now.max(1), Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        self.reload_if_changed();
    }

    /// Reads the file again now if its stamp changed.
    pub fn reload_if_changed(&self) {
        let stamp = self.stamp();
        if stamp == self.loaded.read().stamp {
            return;
        }
        match Users::load(&self.path) {
            Ok(users) => {
                self.install(&users, stamp);
                tracing::info!(target: AUDIT_TARGET, path = %self.path.display(), users = users.len(), "users file reloaded");
            }
            Err(e) => {
                tracing::warn!(target: AUDIT_TARGET, error = %e, "users file changed but cannot be read; the users read before stay in force")
            }
        }
    }

    fn digest(&self, secret: &[u8]) -> [u8; 16] {
        let mut h = SipHasher13::new_with_keys(self.digest_key.0, self.digest_key.1);
        h.write(secret);
        h.finish128().as_bytes()
    }

    /// Everything but the hash: the user the token names, and whether this
    /// very secret was verified before.
    pub fn quick(&self, creds: &Credentials) -> Quick {
        self.poll();
        let Some(token) = Token::parse(&creds.token) else {
            return Quick::Refused(Refusal::Malformed);
        };
        let loaded = self.loaded.read().clone();
        let Some(entry) = loaded.by_id.get(&token.id) else {
            return Quick::Refused(Refusal::UnknownUser);
        };
        if let Some(name) = &creds.name
            && !bool::from(name.as_bytes().ct_eq(entry.principal.name.as_bytes()))
        {
            return Quick::Refused(Refusal::WrongName);
        }
        let known = self.verified.read().get(&token.id).copied();
        match known {
            Some(d) if bool::from(d.ct_eq(&self.digest(token.secret()))) => {
                Quick::Known(entry.principal.clone())
            }
            _ => Quick::NeedsHash,
        }
    }

    /// The whole check: [`Authenticator::quick`], then, for a secret not
    /// verified before, argon2 (blocking: call it off an async runtime's
    /// worker threads).
    pub fn verify(&self, creds: &Credentials) -> Result<Arc<Principal>, Refusal> {
        match self.quick(creds) {
            Quick::Known(p) => return Ok(p),
            Quick::Refused(r) => return Err(r),
            Quick::NeedsHash => {}
        }
        let token = Token::parse(&creds.token).ok_or(Refusal::Malformed)?;
        let loaded = self.loaded.read().clone();
        let entry = loaded.by_id.get(&token.id).ok_or(Refusal::UnknownUser)?;
        let ok = {
            let _turn = self.take_turn();
            token.verify(&entry.hash)
        };
        if !ok {
            return Err(Refusal::WrongSecret);
        }
        // Only if the users read are still the ones checked against: a
        // reload in between cleared the cache, and this user may be gone.
        if Arc::ptr_eq(&loaded, &self.loaded.read()) {
            self.verified
                .write()
                .insert(token.id, self.digest(token.secret()));
        }
        Ok(entry.principal.clone())
    }

    fn take_turn(&self) -> Turn<'_> {
        let mut n = self.verifying.lock();
        while *n >= MAX_VERIFYING {
            self.turn.wait(&mut n);
        }
        *n += 1;
        Turn(self)
    }
}

/// One of the [`MAX_VERIFYING`] places, given back on drop.
struct Turn<'a>(&'a Authenticator);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        *self.0.verifying.lock() -= 1;
        self.0.turn.notify_one();
    }
}

fn entry(u: &User) -> Entry {
    Entry {
        principal: Arc::new(Principal {
            name: u.name.clone(),
            id: u.id,
            tenant: u.tenant.clone(),
            roles: u.roles,
        }),
        hash: u.hash.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Role;

    fn creds(name: Option<&str>, token: &Token) -> Credentials {
        Credentials {
            name: name.map(String::from),
            token: token.reveal(),
        }
    }

    #[test]
    fn a_verified_token_is_known_without_hashing_and_a_wrong_one_never_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users");
        let mut users = Users::default();
        let t = users
            .add("alice", Roles::parse_list("read").unwrap(), "default")
            .unwrap();
        users.save(&path).unwrap();
        let a = Authenticator::open(path.clone()).unwrap();
        assert!(matches!(a.quick(&creds(None, &t)), Quick::NeedsHash));
        let p = a.verify(&creds(Some("alice"), &t)).unwrap();
        assert!(p.roles.has(Role::Read) && !p.roles.has(Role::Write));
        assert!(matches!(a.quick(&creds(None, &t)), Quick::Known(_)));
        assert_eq!(
            a.verify(&creds(Some("bob"), &t)).unwrap_err(),
            Refusal::WrongName
        );
        // Same id, another secret: not the cached one, and argon2 says no.
        let forged = Token::parse(&format!("rt_{}_{}", t.id, "0".repeat(64))).unwrap();
        assert!(matches!(a.quick(&creds(None, &forged)), Quick::NeedsHash));
        assert_eq!(
            a.verify(&creds(None, &forged)).unwrap_err(),
            Refusal::WrongSecret
        );
        assert_eq!(
            a.verify(&creds(None, &Token::generate(99).unwrap()))
                .unwrap_err(),
            Refusal::UnknownUser
        );
        let junk = Credentials {
            name: None,
            token: "junk".into(),
        };
        assert_eq!(a.verify(&junk).unwrap_err(), Refusal::Malformed);
    }

    #[test]
    fn a_changed_file_is_read_again_and_forgets_what_was_verified() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users");
        let mut users = Users::default();
        let t = users
            .add("alice", Roles::parse_list("read").unwrap(), "default")
            .unwrap();
        users.save(&path).unwrap();
        let a = Authenticator::open(path.clone()).unwrap();
        a.verify(&creds(None, &t)).unwrap();
        users.remove("alice").unwrap();
        users.save(&path).unwrap();
        a.reload_if_changed();
        assert_eq!(
            a.verify(&creds(None, &t)).unwrap_err(),
            Refusal::UnknownUser
        );
        // A broken file leaves the users read before in force.
        let u = users
            .add("bob", Roles::parse_list("write").unwrap(), "default")
            .unwrap();
        users.save(&path).unwrap();
        a.reload_if_changed();
        std::fs::write(&path, b"{ not json").unwrap();
        a.reload_if_changed();
        assert_eq!(a.verify(&creds(None, &u)).unwrap().name, "bob");
    }
}
