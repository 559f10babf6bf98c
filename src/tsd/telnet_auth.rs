//! Telnet authentication, when `tsd.core.authentication.enable` is on
//! (docs/security.md): a connection starts unauthenticated and must send
//! `auth NAME TOKEN` (or OpenTSDB 2.4's `auth basic NAME TOKEN`), answered
//! `AUTH_SUCCESS.` or `AUTH_FAIL` with CRLF as OpenTSDB 2.4's
//! `AuthenticationChannelHandler` writes them. Before that, every command
//! but `exit` (and `version`, when configured open) gets an error line.
//! Each failed `auth` is logged on the audit target and answered only
//! after a pause that doubles with each failure; after
//! [`MAX_FAILURES`] failures or unauthenticated commands the connection
//! is closed, so a token cannot be guessed at line speed. After a
//! successful `auth`, each command needs its role (`put`, `rollup`,
//! `histogram`: write; `stats`, `version`: read; `dropcaches`,
//! `diediedie`: admin; `help`, other words: any user).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::auth::{AUDIT_TARGET, Credentials, Need, Principal, Role};

use super::TsdState;

/// Failed `auth` lines and commands sent unauthenticated before the
/// connection is closed.
pub(crate) const MAX_FAILURES: u32 = 3;
/// The pause before the first `AUTH_FAIL`; each later one doubles it.
const FIRST_PAUSE: Duration = Duration::from_millis(250);

const SUCCESS: &[u8] = b"AUTH_SUCCESS.\r\n";
const FAIL: &[u8] = b"AUTH_FAIL\r\n";

/// What the gate did with a line.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Allowed: run it as usual.
    Run,
    /// Answered here (auth, or refused).
    Answered,
    /// Too many failures: answered, then close.
    Close,
}

/// A telnet connection's authentication state.
#[derive(Default)]
pub(crate) struct TelnetAuth {
    user: Option<Arc<Principal>>,
    failures: u32,
    /// Whether a missing role was logged already on this connection (a
    /// stream of refused puts is logged once).
    denial_logged: bool,
}

/// What a command needs: `None` for any authenticated user.
fn need(cmd: &str, open_version: bool) -> Option<Need> {
    Some(match cmd {
        "exit" => Need::Open,
        "version" if open_version => Need::Open,
        "put" | "rollup" | "histogram" => Need::Role(Role::Write),
        "stats" | "version" => Need::Role(Role::Read),
        "dropcaches" | "diediedie" => Need::Role(Role::Admin),
        _ => return None,
    })
}

impl TelnetAuth {
    /// Checks one line before it runs; answers `auth` lines and refusals
    /// into `out`.
    pub(crate) async fn check(
        &mut self,
        state: &TsdState,
        line: &str,
        peer: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Gate {
        let Some(auth) = &state.auth else {
            return Gate::Run;
        };
        let cmd = line.split(' ').next().unwrap_or("");
        if cmd == "auth" {
            let words: Vec<&str> = line.split(' ').filter(|w| !w.is_empty()).collect();
            let checked = match Credentials::from_telnet(&words) {
                Err(_) => Err((None, "malformed auth line")),
                Ok(c) => {
                    let a = auth.clone();
                    let name = c.name.clone();
                    match tokio::task::spawn_blocking(move || a.verify(&c)).await {
                        Ok(Ok(p)) => Ok(p),
                        Ok(Err(r)) => Err((name, r.reason())),
                        Err(_) => Err((name, "check failed")),
                    }
                }
            };
            return match checked {
                Ok(p) => {
                    tracing::debug!(user = %p.name, %peer, "telnet connection authenticated");
                    self.user = Some(p);
                    out.extend_from_slice(SUCCESS);
                    Gate::Answered
                }
                Err((name, reason)) => {
                    self.failures += 1;
                    tracing::warn!(target: AUDIT_TARGET, action = "auth.fail", protocol = "telnet", %peer, user = name.as_deref().unwrap_or("-"), reason, failures = self.failures, "authentication failed");
                    tokio::time::sleep(FIRST_PAUSE * (1 << (self.failures - 1).min(4))).await;
                    out.extend_from_slice(FAIL);
                    self.after_failure()
                }
            };
        }
        match (need(cmd, state.options.auth.open_version), &self.user) {
            (Some(Need::Open), _) => Gate::Run,
            (None, Some(_)) => Gate::Run,
            (Some(Need::Role(role)), Some(user)) if user.roles.has(role) => {
                if role == Role::Admin {
                    tracing::info!(target: AUDIT_TARGET, action = "admin", protocol = "telnet", %peer, user = %user.name, command = cmd, "admin command");
                }
                Gate::Run
            }
            (Some(Need::Role(role)), Some(user)) => {
                if !self.denial_logged {
                    self.denial_logged = true;
                    tracing::warn!(target: AUDIT_TARGET, action = "access.denied", protocol = "telnet", %peer, user = %user.name, command = cmd, need = %role, "role missing");
                }
                out.extend_from_slice(
                    format!("{cmd}: permission denied: the {role} role is needed\n").as_bytes(),
                );
                Gate::Answered
            }
            (_, None) => {
                self.failures += 1;
                out.extend_from_slice(
                    b"error: authentication required: send `auth NAME TOKEN` first\n",
                );
                self.after_failure()
            }
        }
    }

    fn after_failure(&self) -> Gate {
        if self.failures >= MAX_FAILURES {
            Gate::Close
        } else {
            Gate::Answered
        }
    }
}
