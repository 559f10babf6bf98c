//! `/logs` (OpenTSDB's `LogsRpc`): the server's recent log lines, newest
//! first, as text or (`?json`) a JSON array; `?level=` (with an optional
//! `&logger=`) changes what is logged from then on.

use super::{Call, Reply, legacy_bad_request};
use crate::tsd::logs::{LevelError, LogRing, ring};

/// What a legacy reply's first byte makes OpenTSDB call it.
const SNIFFED_TEXT: &str = "text/plain";
const SNIFFED_JSON: &str = "application/json";

pub(super) fn http(c: &Call) -> Reply {
    let q = &c.query;
    let Some(ring) = ring() else {
        return legacy_bad_request(q, &LevelError::NotInstalled.to_string());
    };
    if q.has("json") {
        let lines: Vec<String> = ring.lines().iter().map(|l| l.format()).collect();
        return Reply::new(
            200,
            SNIFFED_JSON,
            serde_json::to_string(&lines).expect("strings"),
        );
    }
    if q.has("level") {
        let level = q.get("level").unwrap_or("");
        return match ring.set_level(level, q.get("logger")) {
            Ok(n) => {
                tracing::info!(level, logger = q.get("logger"), "log level changed");
                Reply::new(
                    200,
                    SNIFFED_TEXT,
                    format!(
                        "Set the log level to {} on {n} logger{}.\n",
                        LogRing::level_name(level).unwrap_or_default(),
                        if n > 1 { "s" } else { "" }
                    ),
                )
            }
            Err(e) => legacy_bad_request(q, &e.to_string()),
        };
    }
    let mut text = String::new();
    for l in ring.lines() {
        text.push_str(&l.format());
        text.push('\n');
    }
    Reply::new(200, SNIFFED_TEXT, text)
}
