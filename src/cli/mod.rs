//! The `tsdb` command line: OpenTSDB's tools with their arguments and
//! output formats, over the embedded store.

pub(crate) mod auth;
pub(crate) mod backup;
pub(crate) mod fsck;
pub(crate) mod import;
pub(crate) mod query;
pub(crate) mod query_args;
pub(crate) mod scan;
pub(crate) mod search;
pub(crate) mod tsd;
pub(crate) mod tsd_client;
pub(crate) mod uid;
pub(crate) mod uid_fsck;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Parser, Subcommand};

use crate::config::{Config, DATA_DIR_KEY};
use crate::db::{Db, DbOptions};

#[derive(Debug, Parser)]
#[command(
    name = "tsdb",
    version,
    about = "rtsdb: an OpenTSDB-compatible time series database"
)]
pub struct Cli {
    /// Directory of the embedded store (config key tsd.storage.data_dir).
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// OpenTSDB config file (default: ./opentsdb.conf, /etc/opentsdb.conf, ...).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Log more.
    #[arg(short, long, global = true)]
    pub verbose: bool,
    /// OpenTSDB's common tool options, kept so scripts run unchanged: the
    /// data table name (tsd.storage.hbase.data_table).
    #[arg(long, global = true, value_name = "TABLE")]
    pub table: Option<String>,
    /// The UID table name (tsd.storage.hbase.uid_table).
    #[arg(long, global = true, value_name = "TABLE")]
    pub uidtable: Option<String>,
    /// ZooKeeper quorum (tsd.storage.hbase.zk_quorum; unused by the
    /// embedded store).
    #[arg(long, global = true, value_name = "SPEC")]
    pub zkquorum: Option<String>,
    /// ZooKeeper base path (tsd.storage.hbase.zk_basedir; unused by the
    /// embedded store).
    #[arg(long, global = true, value_name = "PATH")]
    pub zkbasedir: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Look up, assign, rename and delete UIDs (OpenTSDB's `tsdb uid`).
    Uid(uid::UidArgs),
    /// Assign UIDs to metric names: same as `uid assign metrics <names>`.
    Mkmetric {
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Dump raw rows of a query's series (OpenTSDB's `tsdb scan`).
    Scan(scan::ScanArgs),
    /// Import files of put lines without `put` (OpenTSDB's `tsdb import`).
    Import(import::ImportArgs),
    /// Run a query from the command line (OpenTSDB's `tsdb query`).
    Query(query::QueryArgs),
    /// Find series by metric and tags (OpenTSDB's `tsdb search lookup`).
    Search(search::SearchArgs),
    /// Check data rows for errors and optionally fix them (OpenTSDB's `tsdb fsck`).
    Fsck(fsck::FsckArgs),
    /// Run the TSD: telnet and HTTP on one port (OpenTSDB's `tsdb tsd`).
    Tsd(tsd::TsdArgs),
    /// Back up the store, through its TSD if one runs (docs/backup.md).
    Backup(backup::BackupArgs),
    /// Restore a backup into a new data directory.
    Restore(backup::RestoreArgs),
    /// Print version information.
    Version,
    /// Users, roles and tokens for tsd.core.authentication (docs/security.md).
    Auth(auth::AuthArgs),
}

/// The wall clock in milliseconds: "now" for relative dates and open ends.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A row counter on stderr for long scans, only when a person watches
/// (stderr is a terminal); scripts and pipes see nothing.
pub(crate) fn row_progress(what: &str) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal().then(|| {
        let pb = indicatif::ProgressBar::new_spinner();
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {msg}: {pos} rows ({per_sec}, {elapsed})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        pb.set_message(what.to_string());
        pb
    })
}

/// What every command needs: the configuration, and a database opened
/// from it.
pub struct Context {
    pub config: Config,
}

impl Context {
    pub fn from_cli(cli: &Cli) -> anyhow::Result<Context> {
        let mut config = Config::load(cli.config.as_deref())?;
        if let Some(dir) = &cli.data_dir {
            config.set(DATA_DIR_KEY, &dir.display().to_string());
        }
        // `CliOptions.overrideConfig`: each common option sets its key.
        for (key, value) in [
            ("tsd.storage.hbase.data_table", &cli.table),
            ("tsd.storage.hbase.uid_table", &cli.uidtable),
            ("tsd.storage.hbase.zk_quorum", &cli.zkquorum),
            ("tsd.storage.hbase.zk_basedir", &cli.zkbasedir),
        ] {
            if let Some(v) = value {
                config.set(key, v);
            }
        }
        Ok(Context { config })
    }

    /// The database's options from the configuration.
    pub fn db_options(&self) -> anyhow::Result<DbOptions> {
        Ok(DbOptions::from_config(&self.config)?)
    }

    /// Opens the database the configuration names.
    pub fn open_db(&self) -> anyhow::Result<Arc<Db>> {
        Ok(Db::open(&self.db_options()?)?)
    }
}

/// Runs a parsed command line; returns the process exit code.
pub fn run(cli: Cli, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<i32> {
    let ctx = Context::from_cli(&cli)?;
    match cli.command {
        Command::Uid(args) => uid::run(&ctx, args, out, err),
        Command::Mkmetric { names } => {
            let mut args = vec!["assign".to_string(), "metrics".to_string()];
            args.extend(names);
            uid::run(
                &ctx,
                uid::UidArgs {
                    idwidth: None,
                    ignore_case: false,
                    args,
                },
                out,
                err,
            )
        }
        Command::Scan(args) => scan::run(&ctx, args, out, err),
        Command::Fsck(args) => fsck::run(&ctx, args, out, err),
        Command::Search(args) => search::run(&ctx, args, out, err),
        Command::Query(args) => query::run(&ctx, args, out, err),
        Command::Import(args) => import::run(&ctx, args, out, err),
        Command::Tsd(args) => tsd::run(ctx, args, out),
        Command::Backup(args) => backup::run_backup(&ctx, args, out, err),
        Command::Restore(args) => backup::run_restore(&ctx, args, out),
        Command::Auth(args) => auth::run(&ctx, args, out, err),
        Command::Version => {
            writeln!(out, "{}", version_lines())?;
            Ok(0)
        }
    }
}

/// OpenTSDB's two `version` lines, with rtsdb's own build facts.
pub fn version_lines() -> String {
    crate::version::version_lines()
}
