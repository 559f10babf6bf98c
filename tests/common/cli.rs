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

/// The command line over one backend's store: a data directory, and on
/// the cluster a conf file naming a database of its own (dropped at the
/// end, after the directory).
pub struct Cli {
    dir: tempfile::TempDir,
    /// `--config` on the cluster.
    conf: Option<std::path::PathBuf>,
    _database: Option<super::backend::ClusterDatabase>,
}

impl Cli {
    /// `None` on the cluster backend when no test cluster was started
    /// (after saying the test is skipped).
    pub fn new(backend: super::backend::Backend) -> Option<Cli> {
        let dir = tempfile::tempdir().unwrap();
        if backend == super::backend::Backend::Embedded {
            return Some(Cli {
                dir,
                conf: None,
                _database: None,
            });
        }
        let name = std::thread::current().name().unwrap_or("cli").to_string();
        let settings = super::cluster::cluster_settings(&name)?;
        let mut text: String = settings
            .iter()
            .map(|(k, v)| format!("{k} = {v}\n"))
            .collect();
        // Each command is a process of its own: with UIDs reserved in
        // blocks each would start a new block, and the UIDs the commands
        // print would differ from the embedded store's.
        text.push_str("tsd.storage.zk_uid_block = 1\n");
        let conf = dir.path().join("cluster.conf");
        std::fs::write(&conf, text).unwrap();
        Some(Cli {
            _database: Some(super::backend::ClusterDatabase::of(&settings)),
            conf: Some(conf),
            dir,
        })
    }

    /// The data directory (on the cluster: the WAL and the lock only).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `--config FILE` on the cluster, nothing on the embedded store.
    pub fn config_args(&self) -> Vec<&str> {
        match &self.conf {
            Some(c) => vec!["--config", c.to_str().unwrap()],
            None => Vec::new(),
        }
    }

    /// Opens the database the commands run on, in this process, as the
    /// commands open it (the conf on the cluster, the data directory on
    /// both): to write what the commands are then to read. Drop it before
    /// running a command, which takes the data directory's lock.
    pub fn open_db(&self) -> std::sync::Arc<rtsdb::db::Db> {
        let mut config = rtsdb::config::Config::load(self.conf.as_deref()).unwrap();
        config.set(
            rtsdb::config::DATA_DIR_KEY,
            &self.dir.path().display().to_string(),
        );
        let opts = rtsdb::db::DbOptions::from_config(&config).unwrap();
        rtsdb::db::Db::open(&opts).unwrap()
    }

    /// Runs `tsdb [--config FILE] --data-dir DIR ARGS...`.
    pub fn tsdb(&self, args: &[&str]) -> Run {
        let mut all = self.config_args();
        all.extend_from_slice(args);
        tsdb(self.dir(), &all)
    }
}
