//! The users file (`tsd.core.authentication.users_file`, default `users`
//! in the data directory): one JSON document listing each user's name,
//! id, tenant, roles and the argon2id hash of its token's secret. Its
//! layout is docs/format/users.md. The `tsdb auth` commands change it
//! (written whole to a temporary file, then renamed over the old one, so
//! a TSD polling it never reads half a file); TSDs only read it.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::token::Token;
use super::{AuthError, Role, Roles};

/// The version written in the file; a reader refuses a newer one.
pub const USERS_FORMAT_VERSION: u32 = 1;
const FORMAT_NAME: &str = "rtsdb-users";
/// The tenant of users created without `--tenant` (tenants are not
/// isolated yet; the field is kept so they can be).
pub const DEFAULT_TENANT: &str = "default";
const MAX_NAME_LEN: usize = 64;

/// One user as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub name: String,
    /// Unique, never reused: the first part of the user's token.
    pub id: u64,
    #[serde(default = "default_tenant")]
    pub tenant: String,
    #[serde(with = "role_names")]
    pub roles: Roles,
    /// argon2id PHC string of the token's secret.
    pub hash: String,
    /// When the user was created or its token last rotated, RFC 3339.
    #[serde(default)]
    pub issued: String,
}

fn default_tenant() -> String {
    DEFAULT_TENANT.to_string()
}

mod role_names {
    use super::{Role, Roles};
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(roles: &Roles, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(roles.iter().map(Role::name))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Roles, D::Error> {
        let names = Vec::<String>::deserialize(d)?;
        names
            .iter()
            .map(|n| Role::parse(n).map_err(serde::de::Error::custom))
            .collect()
    }
}

#[derive(Serialize, Deserialize)]
struct FileForm {
    format: String,
    version: u32,
    next_id: u64,
    users: Vec<User>,
}

/// Every user, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Users {
    next_id: u64,
    by_name: BTreeMap<String, User>,
}

/// A name a user may have: 1 to 64 of `A-Z a-z 0-9 . _ -` (no `:`,
/// which Basic credentials split on, no spaces, which telnet splits on).
pub fn check_name(name: &str) -> Result<(), AuthError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(AuthError::BadName(name.to_string()))
    }
}

impl Users {
    /// Reads the file; a missing file is no users.
    pub fn load(path: &Path) -> Result<Users, AuthError> {
        let text = match std::fs::read(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Users::default()),
            Err(e) => return Err(AuthError::io(path, e)),
        };
        Users::parse(&text).map_err(|why| AuthError::BadFile {
            path: path.display().to_string(),
            why,
        })
    }

    /// Reads the file's bytes; the error says what is wrong.
    pub fn parse(text: &[u8]) -> Result<Users, String> {
        let form: FileForm = serde_json::from_slice(text).map_err(|e| e.to_string())?;
        if form.format != FORMAT_NAME {
            return Err(format!("not a users file (format {:?})", form.format));
        }
        if form.version > USERS_FORMAT_VERSION {
            return Err(format!(
                "version {} is newer than this build reads ({USERS_FORMAT_VERSION})",
                form.version
            ));
        }
        let mut users = Users {
            next_id: form.next_id,
            by_name: BTreeMap::new(),
        };
        let mut ids = std::collections::HashSet::new();
        for u in form.users {
            check_name(&u.name).map_err(|e| e.to_string())?;
            if !ids.insert(u.id) {
                return Err(format!("user id {} appears twice", u.id));
            }
            users.next_id = users.next_id.max(u.id + 1);
            if users.by_name.insert(u.name.clone(), u).is_some() {
                return Err("a user name appears twice".into());
            }
        }
        Ok(users)
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let form = FileForm {
            format: FORMAT_NAME.into(),
            version: USERS_FORMAT_VERSION,
            next_id: self.next_id,
            users: self.by_name.values().cloned().collect(),
        };
        let mut out = serde_json::to_vec_pretty(&form).unwrap_or_default();
        out.push(b'\n');
        out
    }

    /// Writes the file whole: a temporary file beside it (readable by its
    /// owner only: it holds hashes), synced, then renamed over it.
    pub fn save(&self, path: &Path) -> Result<(), AuthError> {
        let tmp = path.with_extension("tmp");
        let write = || -> std::io::Result<()> {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
            let mut opts = std::fs::OpenOptions::new();
            opts.write(true).create(true).truncate(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
            let mut f = opts.open(&tmp)?;
            f.write_all(&self.to_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        };
        write().map_err(|e| AuthError::io(path, e))
    }

    pub fn get(&self, name: &str) -> Option<&User> {
        self.by_name.get(name)
    }

    /// Every user, by name.
    pub fn iter(&self) -> impl Iterator<Item = &User> {
        self.by_name.values()
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Creates a user; returns its token, which is not kept.
    pub fn add(&mut self, name: &str, roles: Roles, tenant: &str) -> Result<Token, AuthError> {
        check_name(name)?;
        check_name(tenant).map_err(|_| AuthError::BadTenant(tenant.to_string()))?;
        if roles.is_empty() {
            return Err(AuthError::NoRoles);
        }
        if self.by_name.contains_key(name) {
            return Err(AuthError::Exists(name.to_string()));
        }
        let id = self.next_id.max(1);
        let token = Token::generate(id)?;
        self.by_name.insert(
            name.to_string(),
            User {
                name: name.to_string(),
                id,
                tenant: tenant.to_string(),
                roles,
                hash: token.hash()?,
                issued: now(),
            },
        );
        self.next_id = id + 1;
        Ok(token)
    }

    /// Removes a user; its token stops working when TSDs reload the file.
    pub fn remove(&mut self, name: &str) -> Result<User, AuthError> {
        self.by_name
            .remove(name)
            .ok_or_else(|| AuthError::NoSuchUser(name.to_string()))
    }

    /// A new token for a user, under a new id, so that the old token's
    /// cached verifications cannot match it either.
    pub fn rotate(&mut self, name: &str) -> Result<Token, AuthError> {
        let id = self.next_id.max(1);
        let user = self
            .by_name
            .get_mut(name)
            .ok_or_else(|| AuthError::NoSuchUser(name.to_string()))?;
        let token = Token::generate(id)?;
        user.hash = token.hash()?;
        user.id = id;
        user.issued = now();
        self.next_id = id + 1;
        Ok(token)
    }
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_survive_a_save_and_load_and_tokens_match_their_user_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users");
        let mut users = Users::load(&path).unwrap();
        assert!(users.is_empty());
        let a = users
            .add("alice", Roles::parse_list("read,write").unwrap(), "default")
            .unwrap();
        let b = users
            .add("bob", Roles::parse_list("admin").unwrap(), "ops")
            .unwrap();
        assert_ne!(a.id, b.id);
        assert!(matches!(
            users.add("alice", Roles::parse_list("read").unwrap(), "default"),
            Err(AuthError::Exists(_))
        ));
        users.save(&path).unwrap();
        let back = Users::load(&path).unwrap();
        assert_eq!(back, users);
        assert!(a.verify(&back.get("alice").unwrap().hash));
        assert!(!a.verify(&back.get("bob").unwrap().hash));
        assert_eq!(back.get("bob").unwrap().tenant, "ops");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn a_rotated_token_has_a_new_id_and_the_old_one_no_longer_verifies() {
        let mut users = Users::default();
        let old = users
            .add("c", Roles::parse_list("read").unwrap(), "default")
            .unwrap();
        let new = users.rotate("c").unwrap();
        assert_ne!(old.id, new.id);
        let u = users.get("c").unwrap();
        assert_eq!(u.id, new.id);
        assert!(new.verify(&u.hash) && !old.verify(&u.hash));
        users.remove("c").unwrap();
        assert!(matches!(users.rotate("c"), Err(AuthError::NoSuchUser(_))));
        // Ids are never reused, even after a removal.
        let d = users
            .add("d", Roles::parse_list("read").unwrap(), "default")
            .unwrap();
        assert!(d.id > new.id);
    }

    #[test]
    fn bad_files_and_names_are_refused_with_a_reason() {
        assert!(Users::parse(b"{}").is_err());
        assert!(
            Users::parse(br#"{"format":"rtsdb-users","version":9,"next_id":1,"users":[]}"#)
                .unwrap_err()
                .contains("newer")
        );
        let dup = br#"{"format":"rtsdb-users","version":1,"next_id":1,"users":[
            {"name":"a","id":1,"roles":["read"],"hash":"x"},
            {"name":"b","id":1,"roles":["read"],"hash":"y"}]}"#;
        assert!(Users::parse(dup).unwrap_err().contains("twice"));
        for bad in ["", "a b", "a:b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
