//! `tsdb uid` and `tsdb mkmetric`, with OpenTSDB's `UidManager` argument
//! grammar, output lines (`metrics sys.cpu.0: [0, 0, 1]`) and exit codes.

use std::io::Write;

use clap::Args;
use regex::RegexBuilder;

use super::Context;
use crate::model::uid::java_byte_array;
use crate::model::{Uid, UidKind};
use crate::uid::{UidTable, UidTableError, keys};

#[derive(Debug, Args)]
pub struct UidArgs {
    /// Number of bytes UIDs are encoded on; must match the store.
    #[arg(long, value_name = "N")]
    pub idwidth: Option<u8>,
    /// Ignore case distinctions when matching a regexp (grep).
    #[arg(short = 'i', long = "ignore-case")]
    pub ignore_case: bool,
    // The usage text as help (a doc comment would be read as rustdoc links).
    #[arg(
        allow_hyphen_values = true,
        help = "grep [kind] <RE> | assign <kind> <name>... | rename <kind> <name> <newname> | delete <kind> <name> | fsck [fix] [delete_unknown] | metasync | metapurge | treesync | treepurge <id> [definition] | [kind] <name> | [kind] <id>"
    )]
    pub args: Vec<String>,
}

const USAGE: &str = "Usage: uid <subcommand> args
Sub commands:
  grep [kind] <RE>: Finds matching IDs.
  assign <kind> <name> [names]: Assign an ID for the given name(s).
  rename <kind> <name> <newname>: Renames this UID.
  delete <kind> <name>: Deletes this UID.
  fsck: [fix] [delete_unknown] Checks the consistency of UIDs.
        fix            - Fix errors. By default errors are logged.
        delete_unknown - Remove columns with unknown qualifiers.
                         The \"fix\" flag must be supplied as well.

  [kind] <name>: Lookup the ID of this name.
  [kind] <ID>: Lookup the name of this ID.
  metasync: Creates missing TSMeta and UIDMeta objects from the data.
  metapurge: Deletes every TSMeta and UIDMeta object.
  treesync: Runs every series with a TSMeta through the enabled trees
            (needs tsd.core.tree.enable_processing = true).
  treepurge <id> [definition]: Deletes a tree's branches and leaves;
            with \"true\" as definition, the tree and its rules too.

Example values for [kind]: metrics, tagk (tag name), tagv (tag value).";

fn usage(err: &mut dyn Write, msg: &str) -> anyhow::Result<i32> {
    writeln!(err, "{msg}\n{USAGE}")?;
    Ok(2)
}

fn kind_of(name: &str, err: &mut dyn Write) -> anyhow::Result<Option<UidKind>> {
    match UidKind::parse(name) {
        Some(k) => Ok(Some(k)),
        None => {
            writeln!(
                err,
                "Invalid UID kind '{name}': must be one of metrics, tagk, tagv"
            )?;
            Ok(None)
        }
    }
}

pub(crate) fn run(
    ctx: &Context,
    mut a: UidArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<i32> {
    // OpenTSDB's ArgP takes options anywhere on the line (`uid grep x -i`).
    let mut rest = Vec::new();
    let mut words = std::mem::take(&mut a.args).into_iter();
    while let Some(w) = words.next() {
        match w.as_str() {
            "-i" | "--ignore-case" => a.ignore_case = true,
            "--idwidth" => match words.next().map(|n| n.parse()) {
                Some(Ok(n)) => a.idwidth = Some(n),
                _ => return usage(err, "Invalid --idwidth"),
            },
            _ => match w.strip_prefix("--idwidth=") {
                Some(n) => match n.parse() {
                    Ok(n) => a.idwidth = Some(n),
                    Err(_) => return usage(err, "Invalid --idwidth"),
                },
                None => rest.push(w),
            },
        }
    }
    a.args = rest;
    if a.args.is_empty() {
        return usage(err, "Not enough arguments");
    }
    if a.idwidth == Some(0) {
        return usage(err, "Negative or 0 --idwidth");
    }
    let mut ctx_cfg = ctx.config.clone();
    if let Some(w) = a.idwidth {
        // OpenTSDB's --idwidth applies to every kind; the store checks it
        // against the widths it was created with.
        for k in ["metric", "tagk", "tagv"] {
            ctx_cfg.set(&format!("tsd.storage.uid.width.{k}"), &w.to_string());
        }
    }
    let ctx = Context { config: ctx_cfg };
    let db = ctx.open_db()?;
    let store: &crate::store::Store = db.store();
    let table: &crate::uid::UidTable = db.uids();
    let args = &a.args;
    let n = args.len();
    match args[0].as_str() {
        "grep" => {
            if !(2..=3).contains(&n) {
                return usage(err, "Wrong number of arguments");
            }
            let kind = if n == 3 {
                match kind_of(&args[1], err)? {
                    Some(k) => Some(k),
                    None => return Ok(2),
                }
            } else {
                None
            };
            grep(table, kind, &args[n - 1], a.ignore_case, out, err)
        }
        "assign" => {
            if n < 3 {
                return usage(err, "Wrong number of arguments");
            }
            let Some(kind) = kind_of(&args[1], err)? else {
                return Ok(2);
            };
            for name in &args[2..] {
                match table.assign(kind, name) {
                    Ok(a) => print_mapping(out, &args[1], name, a.uid(), table, kind)?,
                    Err(e) => {
                        writeln!(err, "{e}")?;
                        return Ok(3);
                    }
                }
            }
            Ok(0)
        }
        "metasync" => {
            // OpenTSDB's MetaSync; rtsdb's series index is rebuilt from the
            // data rows on the way (`Db::sync_meta`).
            let started = std::time::Instant::now();
            let done = db.sync_meta()?;
            store.sync()?;
            writeln!(out, "Rebuilt the series index: {:?}", done.index)?;
            writeln!(
                out,
                "Created {} TSMeta objects, set the created time of {} TSMeta and {} UIDMeta objects",
                done.ts_created, done.ts_updated, done.uid_updated
            )?;
            writeln!(
                out,
                "Completed meta data synchronization in [{}] seconds",
                started.elapsed().as_secs()
            )?;
            Ok(0)
        }
        "metapurge" => {
            let started = std::time::Instant::now();
            let stats = db.meta().purge()?;
            store.sync()?;
            writeln!(
                out,
                "Deleted {} UIDMeta cells and {} TSMeta rows",
                stats.uid_meta, stats.ts_rows
            )?;
            writeln!(
                out,
                "Completed meta data purge in [{}] seconds",
                started.elapsed().as_secs()
            )?;
            Ok(0)
        }
        "treesync" => {
            // As OpenTSDB's UidManager: nothing to do, successfully, when
            // tree processing is off.
            if !ctx.config.get_bool("tsd.core.tree.enable_processing") {
                tracing::warn!("Tree processing is disabled");
                return Ok(0);
            }
            let started = std::time::Instant::now();
            let done = db.sync_trees()?;
            store.sync()?;
            if done.trees == 0 {
                tracing::warn!("No enabled trees were found");
            }
            writeln!(
                out,
                "Processed {} series through {} enabled trees: {} leaves added, {} collisions, {} not matched",
                done.series, done.trees, done.leaves, done.collisions, done.not_matched
            )?;
            writeln!(
                out,
                "Completed tree synchronization in [{}] seconds",
                started.elapsed().as_secs()
            )?;
            Ok(0)
        }
        "treepurge" => {
            if n < 2 {
                return usage(err, "Wrong number of arguments");
            }
            // OpenTSDB parses the id with Integer.parseInt and reports a
            // bad one (or one out of range) as an unexpected error, code 3.
            let tree_id = match crate::model::java::parse_int(&args[1])
                .and_then(|id| crate::tree::check_tree_id(id).map_err(|e| e.to_string()))
            {
                Ok(id) => id,
                Err(e) => {
                    writeln!(err, "Unexpected exception: {e}")?;
                    return Ok(3);
                }
            };
            let definition = args.get(2).is_some_and(|a| a.to_lowercase() == "true");
            let started = std::time::Instant::now();
            let deleted = db.trees().delete_tree(tree_id, definition)?;
            store.sync()?;
            writeln!(
                out,
                "Deleted {deleted} cells of tree {tree_id}{}",
                if definition {
                    ", its definition and rules included"
                } else {
                    ""
                }
            )?;
            writeln!(
                out,
                "Completed tree deletion in [{}] seconds",
                started.elapsed().as_secs()
            )?;
            Ok(0)
        }
        "fsck" => {
            let fix = args[1..].iter().any(|a| a == "fix");
            let delete_unknown = args[1..].iter().any(|a| a == "delete_unknown");
            let errors = super::uid_fsck::run(&db, fix, delete_unknown, out)?;
            // OpenTSDB exits with the error count; keep a non-zero code for
            // counts that are multiples of 256.
            Ok(errors.min(255) as i32)
        }
        "rename" => {
            if n != 4 {
                return usage(err, "Wrong number of arguments");
            }
            let Some(kind) = kind_of(&args[1], err)? else {
                return Ok(2);
            };
            match table.rename(kind, &args[2], &args[3]) {
                Ok(_) => {
                    writeln!(out, "{} {} -> {}", args[1], args[2], args[3])?;
                    Ok(0)
                }
                Err(e @ UidTableError::NoSuchName { .. }) => {
                    writeln!(err, "{e}")?;
                    Ok(1)
                }
                Err(e) => {
                    writeln!(err, "{e}")?;
                    Ok(3)
                }
            }
        }
        "delete" => {
            if n != 3 {
                return usage(err, "Wrong number of arguments");
            }
            let Some(kind) = kind_of(&args[1], err)? else {
                return Ok(2);
            };
            match db.delete_uid(kind, &args[2]) {
                Ok(_) => {
                    writeln!(err, "UID {} {} deleted.", args[1], args[2])?;
                    Ok(0)
                }
                Err(e @ crate::db::DbError::Uid(UidTableError::NoSuchName { .. })) => {
                    writeln!(err, "{e}")?;
                    Ok(1)
                }
                Err(e) => {
                    writeln!(err, "{e}")?;
                    Ok(4)
                }
            }
        }
        _ => {
            if !(1..=2).contains(&n) {
                return usage(err, "Wrong number of arguments");
            }
            let kind = if n == 2 {
                match kind_of(&args[0], err)? {
                    Some(k) => Some((k, args[0].as_str())),
                    None => return Ok(2),
                }
            } else {
                None
            };
            let target = &args[n - 1];
            // As OpenTSDB: anything that parses as a decimal long is an ID.
            match target.parse::<i64>() {
                Ok(id) => lookup_id(table, store, kind, id, out, err),
                Err(_) => lookup_name(table, store, kind, target, out, err),
            }
        }
    }
}

fn print_mapping(
    out: &mut dyn Write,
    kind_word: &str,
    name: &str,
    uid: Uid,
    table: &UidTable,
    kind: UidKind,
) -> std::io::Result<()> {
    writeln!(
        out,
        "{kind_word} {name}: {}",
        java_byte_array(&uid.to_bytes(table.width(kind)))
    )
}

/// Prints each cell of `row` in `family` of the UID table as the cell's
/// qualifier (a kind's word) followed by `rest(value)`, in qualifier
/// order, as `uid` does for a name or ID given without a kind. `mappings`
/// are the row's name/ID cells as the UID table resolves them (on a
/// cluster they live in ZooKeeper, not in the stored table; on the
/// embedded store they are the stored cells again). Returns whether the
/// row had any cell.
fn print_row_cells(
    store: &crate::store::Store,
    row: &[u8],
    family: &[u8],
    mappings: Vec<(&'static str, Vec<u8>)>,
    out: &mut dyn Write,
    rest: impl Fn(&[u8]) -> String,
) -> anyhow::Result<bool> {
    let prefix = keys::cell_key(row, family, b"");
    let mut cells: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = mappings
        .into_iter()
        .map(|(q, v)| (q.as_bytes().to_vec(), v))
        .collect();
    for item in store.scan_uid_cells(&prefix) {
        let (key, value) = item?;
        if let Some((r, _, qualifier)) = keys::split_cell_key(&key)
            && r == row
        {
            cells.insert(qualifier.to_vec(), value);
        }
    }
    for (qualifier, value) in &cells {
        writeln!(
            out,
            "{} {}",
            String::from_utf8_lossy(qualifier),
            rest(value)
        )?;
    }
    Ok(!cells.is_empty())
}

fn lookup_name(
    table: &UidTable,
    store: &crate::store::Store,
    kind: Option<(UidKind, &str)>,
    name: &str,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<i32> {
    if let Some((kind, word)) = kind {
        return match table.get_id(kind, name) {
            Ok(uid) => {
                print_mapping(out, word, name, uid, table, kind)?;
                Ok(0)
            }
            Err(e) => {
                writeln!(err, "{e}")?;
                Ok(1)
            }
        };
    }
    // Without a kind: every cell of the name's row in family `id`.
    let mappings = UidKind::ALL
        .into_iter()
        .filter_map(|k| {
            let uid = table.get_id(k, name).ok()?;
            Some((k.qualifier(), uid.to_bytes(table.width(k))))
        })
        .collect();
    let found = print_row_cells(
        store,
        name.as_bytes(),
        keys::FAMILY_ID,
        mappings,
        out,
        |uid| format!("{name}: {}", java_byte_array(uid)),
    )?;
    if !found {
        writeln!(err, "No such name: {name}")?;
    }
    Ok(if found { 0 } else { 1 })
}

fn lookup_id(
    table: &UidTable,
    store: &crate::store::Store,
    kind: Option<(UidKind, &str)>,
    id: i64,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<i32> {
    let widths: Vec<UidKind> = match kind {
        Some((k, _)) => vec![k],
        None => UidKind::ALL.to_vec(),
    };
    let width = table.width(widths[0]);
    let too_large = id < 0 || (id as u64) > width.max_id();
    if too_large {
        writeln!(
            err,
            "{id} is too large to fit on {} bytes.  Maybe you forgot to adjust --idwidth?",
            width.bytes()
        )?;
        return Ok(1);
    }
    let bytes = (id as u64).to_be_bytes()[8 - width.bytes()..].to_vec();
    if let Some((kind, word)) = kind {
        let result = Uid::from_bytes(&bytes, width)
            .map_err(|_| UidTableError::NoSuchId {
                kind,
                bytes: bytes.clone(),
            })
            .and_then(|uid| table.get_name(kind, uid));
        return match result {
            Ok(name) => {
                writeln!(out, "{word} {name}: {}", java_byte_array(&bytes))?;
                Ok(0)
            }
            Err(e) => {
                writeln!(err, "{e}")?;
                Ok(1)
            }
        };
    }
    // Without a kind: every cell of the ID's row in family `name`.
    let mappings = UidKind::ALL
        .into_iter()
        .filter(|&k| table.width(k).bytes() == bytes.len())
        .filter_map(|k| {
            let uid = Uid::from_bytes(&bytes, table.width(k)).ok()?;
            Some((
                k.qualifier(),
                table.get_name(k, uid).ok()?.as_bytes().to_vec(),
            ))
        })
        .collect();
    let found = print_row_cells(store, &bytes, keys::FAMILY_NAME, mappings, out, |name| {
        format!(
            "{}: {}",
            String::from_utf8_lossy(name),
            java_byte_array(&bytes)
        )
    })?;
    if !found {
        writeln!(err, "No such unique ID: {}", java_byte_array(&bytes))?;
    }
    Ok(if found { 0 } else { 1 })
}

fn grep(
    table: &UidTable,
    kind: Option<UidKind>,
    pattern: &str,
    ignore_case: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<i32> {
    let re = match RegexBuilder::new(pattern)
        .case_insensitive(ignore_case)
        .build()
    {
        Ok(re) => re,
        Err(e) => {
            writeln!(err, "Invalid regular expression '{pattern}': {e}")?;
            return Ok(2);
        }
    };
    // In HBase's order, as OpenTSDB's scan of the UID table prints them:
    // by name (the row key), then by kind (the qualifier). Read through
    // the UID table's store, so it is the same on every backend.
    let mut found = Vec::new();
    for k in [UidKind::Metric, UidKind::TagKey, UidKind::TagValue] {
        if kind.is_some_and(|want| want != k) {
            continue;
        }
        for (name, uid) in table.scan_forward(k, b"")? {
            // HBase's KeyRegexpFilter: `find` semantics on the row key.
            if re.is_match(&name) {
                found.push((name, k, uid));
            }
        }
    }
    found.sort_by(|a, b| (a.0.as_bytes(), a.1.qualifier()).cmp(&(b.0.as_bytes(), b.1.qualifier())));
    for (name, k, uid) in &found {
        writeln!(
            out,
            "{} {name}: {}",
            k.qualifier(),
            java_byte_array(&uid.to_bytes(table.width(*k)))
        )?;
    }
    Ok(if found.is_empty() { 1 } else { 0 })
}
