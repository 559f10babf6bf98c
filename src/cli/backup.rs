//! `tsdb backup` and `tsdb restore` (rtsdb's own; OpenTSDB operators
//! use HBase snapshots). docs/backup.md.
//!
//! A running TSD holds its store's lock, so `tsdb backup` asks it over
//! HTTP (`POST /api/backup`, enabled by `tsd.backup.enable`); with no
//! TSD on the store it opens the store itself. A TSD with TLS is reached
//! with `--ca-file`, one with authentication on with `--token` (an admin's;
//! `cli::tsd_client`). Either way the backup is
//! [`Db::backup`](crate::db::Db::backup)'s.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use clap::Args;

use super::Context;
use super::tsd_client::TsdClient;
use crate::db::{self, DbError, backup_destination};
use crate::store::{StoreError, StoreHeader};
use crate::tsd::TsdOptions;

#[derive(Debug, Args)]
pub struct BackupArgs {
    /// Where to write the backup: a new or empty directory. Without it, a
    /// new directory named after the current time in tsd.backup.dir.
    /// Through a TSD, it must lie inside the TSD's tsd.backup.dir.
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Same as DIR.
    #[arg(long, value_name = "DIR", conflicts_with = "dir")]
    pub to: Option<PathBuf>,
    /// Ask the TSD at HOST:PORT. Default: the store's own when a TSD holds
    /// it (tsd.network.bind and tsd.network.port), else no TSD: the store
    /// in --data-dir is opened directly.
    #[arg(long, value_name = "HOST:PORT")]
    pub tsd: Option<String>,
    /// Talk to the TSD over TLS, trusting this CA certificate (PEM).
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// A token of a user with the admin role, for a TSD with
    /// authentication on (default: $RTSDB_TOKEN).
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// A backup directory (made by `tsdb backup` or `POST /api/backup`).
    #[arg(value_name = "BACKUP")]
    pub backup: PathBuf,
    /// The data directory to restore into: new or empty (default: --data-dir).
    #[arg(value_name = "DATA_DIR")]
    pub data_dir: Option<PathBuf>,
}

pub(crate) fn run_backup(
    ctx: &Context,
    args: BackupArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<i32> {
    let requested = match args.dir.or(args.to) {
        // The TSD runs elsewhere: it gets the path this shell means.
        Some(d) => Some(std::path::absolute(&d).with_context(|| d.display().to_string())?),
        None => None,
    };
    let options = TsdOptions::from_config(&ctx.config)?;
    let client = TsdClient::new(args.ca_file.as_deref(), args.token)?;
    if let Some(addr) = &args.tsd {
        return through_tsd(&client, addr, requested.as_deref(), out, err);
    }
    let data_dir = ctx.config.data_dir();
    if StoreHeader::read(&data_dir)?.is_none() {
        bail!("no store in {}", data_dir.display());
    }
    let db = match ctx.open_db() {
        Ok(db) => db,
        Err(e) if held_by_a_tsd(&e) => {
            let addr = tsd_address(&options);
            return through_tsd(&client, &addr, requested.as_deref(), out, err);
        }
        Err(e) => return Err(e),
    };
    let dest = match requested {
        Some(d) => d,
        None => backup_destination(&options.backup.root, None)?,
    };
    let made = db.backup(&dest);
    db.close()?;
    print_backup(&made?.to_json(), out)?;
    Ok(0)
}

pub(crate) fn run_restore(
    ctx: &Context,
    args: RestoreArgs,
    out: &mut dyn Write,
) -> anyhow::Result<i32> {
    let mut opts = ctx.db_options()?;
    if let Some(d) = args.data_dir {
        opts.data_dir = d;
    }
    let r = db::restore(&args.backup, &opts)?;
    writeln!(
        out,
        "restored {} into {}: {} files, {} bytes, {} points replayed from its write-ahead log",
        args.backup.display(),
        r.dir.display(),
        r.files,
        r.bytes,
        r.points_replayed
    )?;
    Ok(0)
}

/// Whether opening the store failed because another process (a TSD)
/// holds it.
fn held_by_a_tsd(e: &anyhow::Error) -> bool {
    let Some(DbError::Open { cause, .. }) = e.downcast_ref::<DbError>() else {
        return false;
    };
    matches!(**cause, DbError::Store(StoreError::Locked(_)))
}

/// Where the store's TSD listens, as its configuration says.
fn tsd_address(o: &TsdOptions) -> String {
    let host = match o.bind.as_str() {
        "" | "0.0.0.0" => "127.0.0.1",
        "::" | "[::]" => "[::1]",
        h => h,
    };
    format!("{host}:{}", o.port)
}

fn print_backup(b: &serde_json::Value, out: &mut dyn Write) -> anyhow::Result<()> {
    let tables: Vec<String> = b["tables"]
        .as_object()
        .map(|t| t.iter().map(|(k, v)| format!("{k} {v}")).collect())
        .unwrap_or_default();
    writeln!(
        out,
        "backup written to {}: {} bytes ({} entries; {} WAL segments, {} bytes) in {} ms, flushes paused {} ms",
        b["path"].as_str().unwrap_or("?"),
        b["bytes"],
        tables.join(", "),
        b["walSegments"],
        b["walBytes"],
        b["durationMs"],
        b["pausedMs"]
    )?;
    Ok(())
}

/// `POST /api/backup` on the TSD at `addr`; prints what it made, or its
/// error message.
fn through_tsd(
    client: &TsdClient,
    addr: &str,
    dir: Option<&Path>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<i32> {
    let mut target = "/api/backup".to_string();
    if let Some(d) = dir {
        target.push_str("?dir=");
        target.push_str(&percent_encode(&d.display().to_string()));
    }
    let (status, body) = client
        .post(addr, &target)
        .with_context(|| format!("asking the TSD at {addr} for a backup"))?;
    let json: serde_json::Value = serde_json::from_str(&body).unwrap_or(serde_json::Value::Null);
    if status == 200 {
        print_backup(&json, out)?;
        return Ok(0);
    }
    let message = json["error"]["message"]
        .as_str()
        .map(str::to_string)
        .unwrap_or(body);
    if status == 404 {
        writeln!(
            err,
            "the TSD at {addr} does not serve backups: set tsd.backup.enable = true in its configuration"
        )?;
    } else {
        writeln!(err, "backup failed ({status}): {message}")?;
    }
    Ok(1)
}

/// Escapes everything but unreserved characters and `/` for a query value.
fn percent_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_travel_in_a_query_string() {
        assert_eq!(percent_encode("/a b/ü&x=1"), "/a%20b/%C3%BC%26x%3D1");
        let pairs = crate::query::request::query_pairs(&percent_encode("/a b/ü&x=1"));
        assert_eq!(pairs, vec![("/a b/ü&x=1".to_string(), String::new())]);
    }
}
