//! Backups: a consistent copy of a running database, made without
//! stopping writes, that opens as a data directory of its own.
//!
//! Every acknowledged point is, at any moment, either in the store or in
//! a WAL segment still on disk (segments go only once the store holds
//! their points). A backup cuts at one moment and keeps both halves:
//!
//! 1. with the flush lock held (no sealed hour reaches the store, no row
//!    is deleted), the WAL is rotated: the segment being written is
//!    synced and closed, so every segment below the cut is a complete
//!    file holding everything appended before the backup began (appends
//!    and the rotation are ordered by the log's own lock, so appenders
//!    are never held; an append that returned before is below the cut);
//! 2. still under the lock, the engine's snapshot of every table is
//!    taken and the closed segments are hard-linked into the backup
//!    (a segment the flusher removed meanwhile held only points the
//!    store had before the lock, which the snapshot has);
//! 3. the lock is released (it was held for a rotation, a snapshot and a
//!    few links), and the long part runs while writes go on: each link
//!    is replaced by a copy of its own, and the snapshot's tables are
//!    streamed into a new store in the backup, header last.
//!
//! Opening the backup replays its WAL over its store, as after a crash:
//! points logged in a segment and already stored are written again with
//! the same values. Deletes logged before the cut replay too.

use std::fs::{self, File};
use std::io;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use thiserror::Error;

use super::{Db, DbOptions};
use crate::store::WAL_DIR;
use crate::store::header::HEADER_FILE;
use crate::store::snapshot::CopiedTables;
use crate::store::{StoreError, StoreHeader};
use crate::write::wal::{self, WalError};

#[derive(Debug, Error)]
pub enum BackupError {
    /// The destination holds files already: a backup never mixes with
    /// (or overwrites) anything.
    #[error(
        "backup destination {} exists and is not empty; give a new or empty directory",
        path.display()
    )]
    NotEmpty { path: PathBuf },
    /// A destination asked for over the network that is not inside the
    /// configured backup directory.
    #[error(
        "backup destination {} is not inside the backup directory {} (tsd.backup.dir)",
        path.display(),
        root.display()
    )]
    OutsideRoot { path: PathBuf, root: PathBuf },
    #[error("backup destination {}: {cause}", path.display())]
    Io { path: PathBuf, cause: io::Error },
    /// The WAL could not be cut (it cannot be written now).
    #[error("backup: {0}")]
    Wal(#[from] WalError),
    #[error("backup: {0}")]
    Store(#[from] StoreError),
    /// A directory to restore from that holds no complete backup.
    #[error(
        "{} is not a backup: it holds no store header (a backup that did not finish has none)",
        path.display()
    )]
    NotABackup { path: PathBuf },
    /// The restored copy did not open.
    #[error(transparent)]
    Db(Box<super::DbError>),
}

type Result<T> = std::result::Result<T, BackupError>;

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> BackupError + '_ {
    move |cause| BackupError::Io {
        path: path.to_path_buf(),
        cause,
    }
}

/// What [`Db::backup`] made.
#[derive(Debug, Clone)]
pub struct Backup {
    /// The backup's directory: a data directory of its own.
    pub dir: PathBuf,
    /// Entries copied from each table of the store.
    pub tables: CopiedTables,
    /// WAL segments copied (replayed when the backup is opened).
    pub wal_segments: usize,
    /// Bytes of WAL copied.
    pub wal_bytes: u64,
    /// Bytes the backup takes on disk.
    pub bytes: u64,
    /// How long the flusher was held (rotation, snapshot, links).
    pub paused: Duration,
    pub elapsed: Duration,
}

impl Backup {
    /// What `POST /api/backup` answers and `tsdb backup` prints.
    pub fn to_json(&self) -> serde_json::Value {
        let tables: serde_json::Map<String, serde_json::Value> = self
            .tables
            .entries
            .iter()
            .map(|(t, n)| (t.to_string(), (*n).into()))
            .collect();
        serde_json::json!({
            "path": self.dir.display().to_string(),
            "bytes": self.bytes,
            "tables": tables,
            "walSegments": self.wal_segments,
            "walBytes": self.wal_bytes,
            "pausedMs": self.paused.as_millis() as u64,
            "durationMs": self.elapsed.as_millis() as u64,
        })
    }
}

impl Db {
    /// Writes a consistent copy of the database into `dest`, which must
    /// be absent or an empty directory, while writes go on: every point
    /// acknowledged before the call is in it (see the module's comment
    /// for how). What it writes is durable when it returns; on an error
    /// it removes what it wrote.
    pub fn backup(&self, dest: &Path) -> Result<Backup> {
        let started = Instant::now();
        let existed = prepare_destination(dest)?;
        match self.backup_into(dest, started) {
            Ok(b) => Ok(b),
            Err(e) => {
                discard(dest, existed);
                Err(e)
            }
        }
    }

    fn backup_into(&self, dest: &Path, started: Instant) -> Result<Backup> {
        let wal_dest = dest.join(WAL_DIR);
        fs::create_dir(&wal_dest).map_err(io_at(&wal_dest))?;
        let (snapshot, kept, paused) = {
            let _flushes = self.flush_lock.lock();
            let held = Instant::now();
            let cut = self.wal.rotate()?;
            let snapshot = self.store.snapshot()?;
            let kept = pin_segments(self.wal.dir(), cut, &wal_dest)?;
            (snapshot, kept, held.elapsed())
        };
        let mut wal_bytes = 0;
        for k in &kept {
            wal_bytes += k.make_own_copy()?;
        }
        sync_dir(&wal_dest)?;
        let tables = snapshot.write_to(dest)?;
        drop(snapshot);
        sync_dir(dest)?;
        let backup = Backup {
            dir: dest.to_path_buf(),
            tables,
            wal_segments: kept.len(),
            wal_bytes,
            bytes: disk_bytes(dest).map_err(io_at(dest))?,
            paused,
            elapsed: started.elapsed(),
        };
        tracing::info!(
            dir = %backup.dir.display(),
            bytes = backup.bytes,
            wal_segments = backup.wal_segments,
            paused_ms = backup.paused.as_millis() as u64,
            elapsed_ms = backup.elapsed.as_millis() as u64,
            "backup written"
        );
        Ok(backup)
    }
}

/// What [`restore`] did.
#[derive(Debug, Clone)]
pub struct Restored {
    pub dir: PathBuf,
    /// Files copied from the backup.
    pub files: usize,
    /// Disk space the restored store takes.
    pub bytes: u64,
    /// Points replayed from the backup's WAL into its store.
    pub points_replayed: u64,
}

/// Brings a backup back: copies `backup` into `opts.data_dir` (absent or
/// an empty directory), then opens the copy, which replays the backup's
/// WAL into its store as after a crash, and closes it, leaving a store
/// with an empty WAL for a TSD to serve. The backup itself is only read,
/// so it can be restored again. (Starting a TSD on a copy of the backup
/// directory does the same.)
pub fn restore(backup: &Path, opts: &DbOptions) -> Result<Restored> {
    if StoreHeader::read(backup)?.is_none() {
        return Err(BackupError::NotABackup {
            path: backup.to_path_buf(),
        });
    }
    let dest = &opts.data_dir;
    let existed = prepare_destination(dest)?;
    let restored = (|| {
        let files = copy_tree(backup, dest)?;
        let db = Db::open(opts).map_err(|e| BackupError::Db(Box::new(e)))?;
        let points_replayed = db
            .stats()
            .points_replayed
            .load(std::sync::atomic::Ordering::Relaxed);
        db.close().map_err(|e| BackupError::Db(Box::new(e)))?;
        drop(db);
        Ok(Restored {
            dir: dest.clone(),
            files,
            bytes: disk_bytes(dest).map_err(io_at(dest))?,
            points_replayed,
        })
    })();
    if restored.is_err() {
        discard(dest, existed);
    }
    restored
}

/// Copies every file under `from` into `to` (which exists), syncing each
/// file and directory; the store header goes last, so a copy that stopped
/// halfway does not open. The store's lock file is not copied. Returns
/// the files copied.
fn copy_tree(from: &Path, to: &Path) -> Result<usize> {
    fn walk(from: &Path, to: &Path, top: bool, files: &mut usize) -> Result<()> {
        for e in fs::read_dir(from).map_err(io_at(from))? {
            let e = e.map_err(io_at(from))?;
            let name = e.file_name();
            if top && (name == crate::store::LOCK_FILE || name == HEADER_FILE) {
                continue;
            }
            let (src, dst) = (e.path(), to.join(&name));
            if e.file_type().map_err(io_at(&src))?.is_dir() {
                fs::create_dir(&dst).map_err(io_at(&dst))?;
                walk(&src, &dst, false, files)?;
            } else {
                copy_synced(&src, &dst)?;
                *files += 1;
            }
        }
        sync_dir(to)
    }
    let mut files = 0;
    walk(from, to, true, &mut files)?;
    copy_synced(&from.join(HEADER_FILE), &to.join(HEADER_FILE))?;
    sync_dir(to)?;
    Ok(files + 1)
}

/// Resolves where a backup asked for over the network goes: `requested`
/// (a relative path lands inside `root`), or a new directory in `root`
/// named after the current time. A destination outside `root` is
/// refused: a request may only write where the operator allowed.
pub fn backup_destination(root: &Path, requested: Option<&Path>) -> Result<PathBuf> {
    let root = std::path::absolute(root).map_err(io_at(root))?;
    let Some(requested) = requested else {
        let name = chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ").to_string();
        return Ok(root.join(name));
    };
    let path = root.join(requested);
    let inside = path.starts_with(&root)
        && path != root
        && !path.components().any(|c| matches!(c, Component::ParentDir));
    if !inside {
        return Err(BackupError::OutsideRoot { path, root });
    }
    Ok(path)
}

/// Checks that `dest` is absent or an empty directory, and creates it.
/// Returns whether it existed.
fn prepare_destination(dest: &Path) -> Result<bool> {
    match fs::read_dir(dest) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(BackupError::NotEmpty {
                    path: dest.to_path_buf(),
                });
            }
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(dest).map_err(io_at(dest))?;
            Ok(false)
        }
        Err(e) if e.kind() == io::ErrorKind::NotADirectory => Err(BackupError::NotEmpty {
            path: dest.to_path_buf(),
        }),
        Err(e) => Err(io_at(dest)(e)),
    }
}

/// Removes what a failed backup wrote (all of `dest`, which was empty or
/// absent before).
fn discard(dest: &Path, existed: bool) {
    let removed = if existed {
        fs::read_dir(dest).and_then(|entries| {
            for e in entries {
                let path = e?.path();
                if path.is_dir() {
                    fs::remove_dir_all(&path)?;
                } else {
                    fs::remove_file(&path)?;
                }
            }
            Ok(())
        })
    } else {
        fs::remove_dir_all(dest)
    };
    if let Err(e) = removed {
        tracing::warn!(dir = %dest.display(), error = %e, "removing a failed backup's files failed");
    }
}

/// A WAL segment taken into the backup.
struct KeptSegment {
    path: PathBuf,
    /// A hard link to the running log's file, not yet a copy.
    linked: bool,
}

impl KeptSegment {
    /// Replaces a link to the running log's file by a copy (closed
    /// segments never change, so the copy equals the file at the cut),
    /// so nothing done to either directory later reaches the other.
    /// Returns the segment's size.
    fn make_own_copy(&self) -> Result<u64> {
        if !self.linked {
            return fs::metadata(&self.path)
                .map(|m| m.len())
                .map_err(io_at(&self.path));
        }
        let tmp = self.path.with_extension("copy");
        let n = copy_synced(&self.path, &tmp)?;
        fs::rename(&tmp, &self.path).map_err(io_at(&self.path))?;
        Ok(n)
    }
}

/// Takes every closed segment of the log in `wal_dir` below `cut` into
/// `dest`: hard links (instant, so the flusher waits as little as
/// possible), or copies where links cannot be made (another file system).
fn pin_segments(wal_dir: &Path, cut: u64, dest: &Path) -> Result<Vec<KeptSegment>> {
    let mut kept = Vec::new();
    for s in wal::list_segments(wal_dir).map_err(io_at(wal_dir))? {
        if s >= cut {
            continue;
        }
        let from = wal::segment_path(wal_dir, s);
        let to = wal::segment_path(dest, s);
        let linked = match fs::hard_link(&from, &to) {
            Ok(()) => true,
            // Removed by the flusher since it was listed: the store had
            // all its points before the flush lock was taken.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(_) => match copy_synced(&from, &to) {
                Ok(_) => false,
                Err(BackupError::Io { cause, .. }) if cause.kind() == io::ErrorKind::NotFound => {
                    continue;
                }
                Err(e) => return Err(e),
            },
        };
        kept.push(KeptSegment { path: to, linked });
    }
    Ok(kept)
}

/// Copies `from` to a new file `to` and syncs it; returns the bytes.
fn copy_synced(from: &Path, to: &Path) -> Result<u64> {
    let mut src = File::open(from).map_err(io_at(from))?;
    let mut dst = File::create_new(to).map_err(io_at(to))?;
    let n = io::copy(&mut src, &mut dst).map_err(io_at(to))?;
    dst.sync_all().map_err(io_at(to))?;
    Ok(n)
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_at(dir))
}

/// Disk space the files under `dir` take (allocated blocks: the engine
/// preallocates its journal sparsely).
fn disk_bytes(dir: &Path) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for e in fs::read_dir(dir)? {
        let e = e?;
        let meta = e.metadata()?;
        total += if meta.is_dir() {
            disk_bytes(&e.path())?
        } else {
            meta.blocks() * 512
        };
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_resolve_inside_the_root() {
        let root = Path::new("/var/backups/tsdb");
        let got = backup_destination(root, Some(Path::new("nightly"))).unwrap();
        assert_eq!(got, root.join("nightly"));
        let got = backup_destination(root, Some(&root.join("a/b"))).unwrap();
        assert_eq!(got, root.join("a/b"));
        let named = backup_destination(root, None).unwrap();
        assert_eq!(named.parent(), Some(root));
        for outside in [
            "/etc/x",
            "../x",
            "a/../../x",
            "/var/backups/tsdb",
            "/var/backups",
        ] {
            let e = backup_destination(root, Some(Path::new(outside))).unwrap_err();
            assert!(
                matches!(e, BackupError::OutsideRoot { .. }),
                "{outside}: {e}"
            );
            assert!(e.to_string().contains("tsd.backup.dir"), "{e}");
        }
    }

    #[test]
    fn a_destination_must_be_new_or_empty() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        fs::create_dir(&empty).unwrap();
        assert!(prepare_destination(&empty).unwrap());
        assert!(!prepare_destination(&dir.path().join("new/deeper")).unwrap());
        assert!(dir.path().join("new/deeper").is_dir());
        fs::write(empty.join("x"), "x").unwrap();
        let e = prepare_destination(&empty).unwrap_err();
        assert!(matches!(e, BackupError::NotEmpty { .. }), "{e}");
        assert!(e.to_string().contains("is not empty"), "{e}");
        let file = dir.path().join("file");
        fs::write(&file, "x").unwrap();
        assert!(matches!(
            prepare_destination(&file),
            Err(BackupError::NotEmpty { .. })
        ));
    }
}
