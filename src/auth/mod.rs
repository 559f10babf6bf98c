//! Authentication and roles (docs/security.md): users with tokens and
//! roles kept in a users file, and the checks the server makes with them.
//! Off unless `tsd.core.authentication.enable` is set.
//!
//! - [`role`]: the roles `read`, `write`, `admin` and sets of them.
//! - [`token`]: tokens (`rt_<id>_<secret>`), their argon2id hashes.
//! - [`users`]: the users file (docs/format/users.md), read and written.
//! - [`credentials`]: credentials as HTTP headers, InfluxDB parameters
//!   and telnet `auth` lines carry them, parsed without a server.
//! - [`check`]: [`Authenticator`], credentials checked against the file
//!   with a cache of verified tokens, the file reloaded when it changes.
//!
//! Failed authentications and admin actions are logged through `tracing`
//! under the target [`AUDIT_TARGET`], so they can be kept apart from the
//! rest (`RUST_LOG=rtsdb::audit=info`; docs/security.md).

pub mod check;
pub mod credentials;
pub mod options;
pub mod role;
pub mod token;
pub mod users;

use std::path::Path;

use thiserror::Error;

pub use check::{Authenticator, Principal, Quick, Refusal};
pub use credentials::{CredentialError, Credentials};
pub use options::AuthOptions;
pub use role::{Need, Role, Roles};
pub use token::Token;
pub use users::{DEFAULT_TENANT, User, Users};

/// The `tracing` target of the audit log.
pub const AUDIT_TARGET: &str = "rtsdb::audit";

/// Why a users-file operation failed.
#[derive(Debug, Error)]
pub enum AuthError {
    #[error("unknown role {0:?} (roles: read, write, admin)")]
    BadRole(String),
    #[error("a user needs at least one role")]
    NoRoles,
    #[error("bad user name {0:?}: 1 to 64 of A-Z a-z 0-9 . _ -")]
    BadName(String),
    #[error("bad tenant {0:?}: 1 to 64 of A-Z a-z 0-9 . _ -")]
    BadTenant(String),
    #[error("user {0:?} exists already")]
    Exists(String),
    #[error("no user {0:?}")]
    NoSuchUser(String),
    #[error("{path}: {cause}")]
    Io { path: String, cause: std::io::Error },
    #[error("users file {path}: {why}")]
    BadFile { path: String, why: String },
    #[error("no random bytes from the system: {0}")]
    Random(String),
    #[error("hashing a token: {0}")]
    Hash(String),
}

impl AuthError {
    fn io(path: &Path, cause: std::io::Error) -> AuthError {
        AuthError::Io {
            path: path.display().to_string(),
            cause,
        }
    }
}
