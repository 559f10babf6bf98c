//! Records build facts for `version` and `/api/version`: git revision,
//! repository status, build time, user, host and branch.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let full = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let short = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let branch = git(&["rev-parse", "--abbrev-ref", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let status = match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(s) if s.is_empty() => "MINT",
        Some(_) => "MODIFIED",
        None => "UNKNOWN",
    };
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("USERNAME"))
        .unwrap_or_else(|_| "unknown".into());
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| git(&["config", "--get", "user.email"]).map(|_| "localhost".into()))
        .unwrap_or_else(|| "localhost".into());
    let repo = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    println!("cargo:rustc-env=RTSDB_GIT_SHORT={short}");
    println!("cargo:rustc-env=RTSDB_GIT_FULL={full}");
    println!("cargo:rustc-env=RTSDB_GIT_BRANCH={branch}");
    println!("cargo:rustc-env=RTSDB_REPO_STATUS={status}");
    println!("cargo:rustc-env=RTSDB_BUILD_TIMESTAMP={secs}");
    println!("cargo:rustc-env=RTSDB_BUILD_USER={user}");
    println!("cargo:rustc-env=RTSDB_BUILD_HOST={host}");
    println!("cargo:rustc-env=RTSDB_BUILD_REPO={repo}");
    // Rebuild the facts when HEAD moves (worktrees keep HEAD in their own
    // git dir) or the index changes.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        println!("cargo:rerun-if-changed={dir}/index");
        if let (Some(common), Some(r)) = (
            git(&["rev-parse", "--git-common-dir"]),
            git(&["symbolic-ref", "-q", "HEAD"]),
        ) {
            println!("cargo:rerun-if-changed={common}/{r}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
