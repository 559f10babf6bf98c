//! The authentication settings, built once from the configuration.

use std::path::PathBuf;

use crate::config::Config;

/// `tsd.core.authentication.*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthOptions {
    /// `tsd.core.authentication.enable` (OpenTSDB's key): off by default,
    /// so OpenTSDB setups run unchanged.
    pub enabled: bool,
    /// `tsd.core.authentication.users_file` ("": `users` in the data
    /// directory).
    pub users_file: PathBuf,
    /// `tsd.core.authentication.open_version`: `/api/version` (and telnet
    /// `version`) answered without credentials, for health checks.
    pub open_version: bool,
}

impl AuthOptions {
    pub fn from_config(c: &Config) -> AuthOptions {
        AuthOptions {
            enabled: c.get_bool("tsd.core.authentication.enable"),
            users_file: match c.get_string("tsd.core.authentication.users_file").trim() {
                "" => c.data_dir().join("users"),
                f => PathBuf::from(f),
            },
            open_version: c.get_bool("tsd.core.authentication.open_version"),
        }
    }
}
