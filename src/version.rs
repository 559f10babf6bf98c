//! Build facts recorded by `build.rs`, in the shapes OpenTSDB's `version`
//! command and `/api/version` use. Every field OpenTSDB reports is present,
//! as a string.

use chrono::{TimeZone, Utc};

/// The OpenTSDB version whose API rtsdb speaks. `/api/version` reports it
/// because clients compare it to decide which API features to use (a
/// "0.1.0" would read as older than 2.0); rtsdb's own build is told by
/// the revision fields (and the crate version by `tsdb --version`).
pub(crate) const VERSION: &str = "2.4.1";
pub(crate) const SHORT_REVISION: &str = env!("RTSDB_GIT_SHORT");
pub(crate) const FULL_REVISION: &str = env!("RTSDB_GIT_FULL");
pub(crate) const BRANCH: &str = env!("RTSDB_GIT_BRANCH");
pub(crate) const REPO_STATUS: &str = env!("RTSDB_REPO_STATUS");
/// Build time, Unix seconds.
pub(crate) const TIMESTAMP: &str = env!("RTSDB_BUILD_TIMESTAMP");
pub(crate) const USER: &str = env!("RTSDB_BUILD_USER");
pub(crate) const HOST: &str = env!("RTSDB_BUILD_HOST");
pub(crate) const REPO: &str = env!("RTSDB_BUILD_REPO");

/// Build time as OpenTSDB's `BuildData.date` prints it.
pub(crate) fn build_date() -> String {
    let secs: i64 = TIMESTAMP.parse().unwrap_or(0);
    match Utc.timestamp_opt(secs, 0).single() {
        Some(t) => t.format("%Y/%m/%d %H:%M:%S +0000").to_string(),
        None => TIMESTAMP.to_string(),
    }
}

/// The two lines of the telnet `version` command and legacy `/version`
/// (no trailing newline).
pub(crate) fn version_lines() -> String {
    format!(
        "net.opentsdb.tools BuildData built at revision {SHORT_REVISION} ({REPO_STATUS})\nBuilt on {} by {USER}@{HOST}:{REPO}",
        build_date()
    )
}

/// `/api/version`'s fields, in OpenTSDB's order.
pub(crate) fn fields() -> Vec<(&'static str, String)> {
    vec![
        ("version", VERSION.to_string()),
        ("short_revision", SHORT_REVISION.to_string()),
        ("full_revision", FULL_REVISION.to_string()),
        ("timestamp", TIMESTAMP.to_string()),
        ("repo_status", REPO_STATUS.to_string()),
        ("user", USER.to_string()),
        ("host", HOST.to_string()),
        ("repo", REPO.to_string()),
        ("branch", BRANCH.to_string()),
    ]
}

/// `/api/version` as a JSON object of strings.
pub(crate) fn json() -> serde_json::Value {
    serde_json::Value::Object(
        fields()
            .into_iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::String(v)))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_are_present() {
        assert!(!SHORT_REVISION.is_empty());
        assert!(TIMESTAMP.parse::<u64>().is_ok());
        let lines = version_lines();
        assert!(lines.starts_with("net.opentsdb.tools BuildData built at revision "));
        assert_eq!(lines.lines().count(), 2);
        assert_eq!(json().as_object().unwrap().len(), 9);
    }
}
