//! The commands both protocols serve, one implementation each, as
//! OpenTSDB's `RpcManager` shares one RPC object per command between its
//! telnet and HTTP maps. Each module answers its command over telnet
//! (`telnet`) and over HTTP at `/api/<x>` and legacy `/<x>` (`http`); each
//! protocol keeps its own output format.
//!
//! [`Serve`] says in which configurations a command exists, for the
//! telnet command table (`super::telnet`) and the HTTP route table
//! (`super::http::routes`) alike.

pub(crate) mod aggregators;
pub(crate) mod config;
pub(crate) mod diediedie;
pub(crate) mod dropcaches;
pub(crate) mod histogram;
pub(crate) mod stats;
pub(crate) mod version;

use super::TsdOptions;

/// What a telnet command asks of its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum After {
    Continue,
    Close,
    /// Stop the whole server (`diediedie`).
    Shutdown,
}

/// When a command or endpoint is registered
/// (`RpcManager.initializeBuiltinRpcs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Serve {
    Always,
    /// Not in `tsd.mode=ro`.
    Writes,
    /// Not in `tsd.mode=wo`.
    Reads,
    /// Unless `tsd.no_diediedie`.
    DieDieDie,
    /// With `tsd.backup.enable` (rtsdb's `/api/backup`).
    Backups,
}

impl Serve {
    pub(crate) fn on(self, o: &TsdOptions) -> bool {
        match self {
            Serve::Always => true,
            Serve::Writes => o.mode.writes(),
            Serve::Reads => o.mode.reads(),
            Serve::DieDieDie => !o.no_diediedie,
            Serve::Backups => o.backup.enabled,
        }
    }
}
