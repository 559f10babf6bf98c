//! The `tsdb` binary run as users run it, over a data directory.

use std::path::Path;
use std::process::Command;

/// What one `tsdb` run printed and how it exited.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `tsdb --data-dir DIR ARGS...` with warnings-only logging.
pub fn tsdb(dir: &Path, args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .arg("--data-dir")
        .arg(dir)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}
