//! `tsdb scan`: dumps the raw rows of a query's series as OpenTSDB's
//! `DumpSeries` does, or in `tsdb import` format (`--import`), optionally
//! deleting them (`--delete`).

use std::io::Write;
use std::sync::Arc;

use clap::Args;

use super::query_args::{self, CliSubQuery};
use super::{Context, now_ms};
use crate::codec::column;
use crate::codec::compressed;
use crate::codec::qualifier::{self, CellKind, FLAG_FLOAT, StoredPoint};
use crate::codec::row::Cell;
use crate::codec::row_key::RowKey;
use crate::db::Db;
use crate::model::java;
use crate::model::row_span::row_base_clamped;
use crate::model::uid::java_byte_array;
use crate::model::{Tsuid, Uid, UidKind, Value};
use crate::store::Durability;
use crate::uid::UidTable;

#[derive(Debug, Args)]
pub struct ScanArgs {
    /// Print rows in `tsdb import` format.
    #[arg(long)]
    pub import: bool,
    /// Delete every matching row (whole hours) after printing it; implies --import.
    #[arg(long)]
    pub delete: bool,
    /// Dump the rows of this rollup or pre-aggregate table of
    /// `tsd.rollups.config` instead of the data table; `--import` prints
    /// `rollup` lines that `tsdb import` reads back.
    #[arg(long, value_name = "TABLE")]
    pub rollup_table: Option<String>,
    // The usage text as help (a doc comment would be read as rustdoc links).
    #[arg(
        allow_hyphen_values = true,
        help = "START-DATE [END-DATE] <aggregator> <metric> [tagk=tagv ...] [more queries]"
    )]
    pub query: Vec<String>,
}

/// How a tag filter of the CLI grammar matches a row's tag value.
enum TagMatch {
    Any,
    Uids(Vec<Uid>),
    /// Case-insensitive wildcard (`web*`), OpenTSDB's `iwildcard`.
    Wildcard(String),
}

struct RowFilter {
    metric: Uid,
    tags: Vec<(Uid, TagMatch)>,
}

pub(crate) fn run(
    ctx: &Context,
    a: ScanArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<i32> {
    let q = match query_args::parse(&a.query, now_ms()) {
        Ok(q) => q,
        Err(e) => {
            writeln!(
                err,
                "{e}\nUsage: scan [--delete|--import] START-DATE [END-DATE] query [queries...]"
            )?;
            return Ok(2);
        }
    };
    let db = ctx.open_db()?;
    let table = db.uids();
    let import = a.import || a.delete;
    let start_s = q.start_ms / 1000;
    let end_s = q.end_ms.unwrap_or_else(now_ms) / 1000;
    let rollup = match &a.rollup_table {
        None => None,
        Some(name) => {
            let found = db.rollup_settings().and_then(|r| {
                r.config
                    .intervals
                    .iter()
                    .find(|i| &i.table == name || &i.pre_agg_table == name)
                    .map(|i| (r, i))
            });
            match found {
                Some(f) if !a.delete => Some((name.as_str(), f)),
                Some(_) => {
                    writeln!(err, "--delete does not apply to rollup tables")?;
                    return Ok(2);
                }
                None => {
                    writeln!(err, "No such rollup table in tsd.rollups.config: {name}")?;
                    return Ok(1);
                }
            }
        }
    };
    for sub in &q.queries {
        let filter = match resolve(table, sub) {
            Ok(f) => f,
            Err(e) => {
                writeln!(err, "{e}")?;
                return Ok(1);
            }
        };
        match rollup {
            Some((name, (settings, interval))) => dump_rollups(
                &db,
                RollupScan {
                    name,
                    settings,
                    interval,
                },
                &filter,
                (start_s, end_s),
                import,
                out,
            )?,
            None => dump(&db, &filter, start_s, end_s, import, a.delete, out)?,
        }
    }
    Ok(0)
}

/// The rollup table `tsdb scan --rollup-table` dumps.
struct RollupScan<'a> {
    name: &'a str,
    settings: &'a crate::rollup::RollupSettings,
    interval: &'a crate::rollup::RollupInterval,
}

/// Prints the rows of a rollup table: as `DumpSeries` prints data rows
/// (each cell with its aggregator), or as `rollup` lines.
fn dump_rollups(
    db: &crate::db::Db,
    t: RollupScan,
    filter: &RowFilter,
    (start_s, end_s): (u64, u64),
    import: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    use crate::rollup::codec;
    let uids = db.uids();
    let layout = *db.store().layout();
    let clamp = |s: u64| s.min(u32::MAX as u64) as u32;
    let first = codec::base_time(clamp(start_s), t.interval);
    let stop = codec::next_base_time(codec::base_time(clamp(end_s), t.interval), t.interval);
    let buckets: Vec<Option<u32>> = if layout.salt.enabled() {
        (0..layout.salt.buckets).map(Some).collect()
    } else {
        vec![None]
    };
    let pre_agg = t.interval.pre_agg_table == t.name;
    for b in buckets {
        let from = layout.scan_prefix(b, filter.metric, first);
        let to = layout.scan_prefix(b, filter.metric, stop.min(u32::MAX as u64) as u32);
        for item in db.rollup_table().scan(t.name, &from, &to) {
            let (raw_key, cells) = item?;
            let key = layout.parse_row_key(&raw_key)?;
            if !row_matches(uids, filter, &key) {
                continue;
            }
            let metric = uids
                .get_name(UidKind::Metric, key.tsuid.metric)?
                .to_string();
            let tags = tag_pairs(uids, &key)?;
            let base = key.base_time;
            if !import {
                writeln!(
                    out,
                    "{} {metric} {base} ({}) {}",
                    java_byte_array(&raw_key),
                    java::date_to_string(base as i64 * 1000),
                    java::map_to_string(tags.iter().map(|(k, v)| (&**k, &**v)))
                )?;
            }
            let group_by = tags
                .iter()
                .find(|(k, _)| **k == *t.settings.agg_tag_key)
                .map(|(_, v)| v.to_string())
                .filter(|_| pre_agg);
            let tag_text: String = tags.iter().map(|(k, v)| format!(" {k}={v}")).collect();
            for cell in cells.sorted() {
                // A raw pre-aggregate: a data point's qualifier.
                let (agg, ts, value) = if cell.qualifier.len() == 2 {
                    let p = column::decode_single(&cell.qualifier, &cell.value)?;
                    (None, p.timestamp(base).raw(), p.value)
                } else {
                    let c = codec::decode_cell(&cell.qualifier, &cell.value, base, t.interval)?;
                    let name = t
                        .settings
                        .config
                        .aggregator_for(c.aggregator_id)
                        .unwrap_or("?");
                    (Some(name.to_string()), c.timestamp as u64, c.value)
                };
                let text = match value {
                    Value::Int(i) => i.to_string(),
                    Value::Float(f) => java::double_to_string(f),
                };
                if import {
                    let spec = match (&agg, &group_by) {
                        (Some(a), Some(g)) => format!("{}-{a}:{g}", t.interval.interval),
                        (Some(a), None) => format!("{}-{a}", t.interval.interval),
                        (None, Some(g)) => g.clone(),
                        (None, None) => continue,
                    };
                    writeln!(out, "rollup {spec} {metric} {ts} {text}{tag_text}")?;
                } else {
                    writeln!(
                        out,
                        "  {}\t{}\t{}\t{text}\t{ts}\t({})",
                        java_byte_array(&cell.qualifier),
                        java_byte_array(&cell.value),
                        agg.as_deref().unwrap_or("raw"),
                        java::date_to_string(ts as i64 * 1000)
                    )?;
                }
            }
        }
    }
    Ok(())
}

fn resolve(table: &UidTable, q: &CliSubQuery) -> Result<RowFilter, crate::uid::UidTableError> {
    let metric = table.get_id(UidKind::Metric, &q.metric)?;
    let mut tags = Vec::new();
    for (k, v) in &q.tags {
        let key = table.get_id(UidKind::TagKey, k)?;
        let m = if v == "*" {
            TagMatch::Any
        } else if v.contains('*') {
            TagMatch::Wildcard(v.to_lowercase())
        } else {
            let mut uids = Vec::new();
            for part in v.split('|').filter(|p| !p.is_empty()) {
                uids.push(table.get_id(UidKind::TagValue, part)?);
            }
            TagMatch::Uids(uids)
        };
        tags.push((key, m));
    }
    Ok(RowFilter { metric, tags })
}

fn wildcard_match(pattern: &str, value: &str) -> bool {
    let value = value.to_lowercase();
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !value.starts_with(first) || !value.ends_with(last) || value.len() < first.len() + last.len()
    {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for p in &parts[1..parts.len() - 1] {
        match rest.find(p) {
            Some(i) => rest = &rest[i + p.len()..],
            None => return false,
        }
    }
    true
}

fn row_matches(table: &UidTable, filter: &RowFilter, key: &RowKey) -> bool {
    filter.tags.iter().all(|(k, m)| {
        let Some((_, v)) = key.tsuid.tags.iter().find(|(tk, _)| tk == k) else {
            return false;
        };
        match m {
            TagMatch::Any => true,
            TagMatch::Uids(uids) => uids.contains(v),
            TagMatch::Wildcard(p) => table
                .get_name(UidKind::TagValue, *v)
                .map(|name| wildcard_match(p, &name))
                .unwrap_or(false),
        }
    })
}

type TagPair = (Arc<str>, Arc<str>);

/// Tag names of a row in the order OpenTSDB prints its tag map.
fn tag_pairs(table: &UidTable, key: &RowKey) -> Result<Vec<TagPair>, crate::uid::UidTableError> {
    let mut pairs = Vec::new();
    for (k, v) in &key.tsuid.tags {
        pairs.push((
            table.get_name(UidKind::TagKey, *k)?,
            table.get_name(UidKind::TagValue, *v)?,
        ));
    }
    let keys: Vec<&str> = pairs.iter().map(|(k, _)| &**k).collect();
    let order = java::hashmap_order(&keys, pairs.len());
    Ok(order
        .iter()
        .map(|k| {
            pairs
                .iter()
                .find(|(pk, _)| &**pk == *k)
                .cloned()
                .unwrap_or_default()
        })
        .collect())
}

#[allow(clippy::too_many_arguments)]
fn dump(
    db: &Db,
    filter: &RowFilter,
    start_s: u64,
    end_s: u64,
    import: bool,
    delete: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let (store, table) = (db.store(), &**db.uids());
    let (start_base, end_base) = (row_base_clamped(start_s), row_base_clamped(end_s));
    let layout = *store.layout();
    let mut to_delete = Vec::new();
    let mut deleted_series: Vec<Tsuid> = Vec::new();
    let progress = super::row_progress("scan");
    for item in store.scan_metric_rows(filter.metric, start_base, end_base) {
        if let Some(pb) = &progress {
            pb.inc(1);
        }
        let (raw_key, cells) = item?;
        let key = layout.parse_row_key(&raw_key)?;
        if !row_matches(table, filter, &key) {
            continue;
        }
        let metric = table
            .get_name(UidKind::Metric, key.tsuid.metric)
            .map(|m| m.to_string())
            .unwrap_or_else(|e| e.to_string());
        let tags = tag_pairs(table, &key);
        let base = key.base_time;
        if !import {
            let tag_text = match &tags {
                Ok(t) => java::map_to_string(t.iter().map(|(k, v)| (&**k, &**v))),
                Err(e) => format!("net.opentsdb.uid.NoSuchUniqueId: {e}"),
            };
            writeln!(
                out,
                "{} {metric} {base} ({}) {tag_text}",
                java_byte_array(&raw_key),
                java::date_to_string(base as i64 * 1000)
            )?;
        }
        let import_tags: String = match &tags {
            Ok(t) => t.iter().map(|(k, v)| format!(" {k}={v}")).collect(),
            Err(e) => return Err(anyhow::anyhow!("{e}")),
        };
        for cell in cells.sorted() {
            let line = format_cell(cell, base, &metric, import, &import_tags)?;
            if !line.is_empty() {
                if import {
                    writeln!(out, "{line}")?;
                } else {
                    writeln!(out, "  {line}")?;
                }
            }
        }
        if delete {
            to_delete.push(raw_key);
            deleted_series.push(key.tsuid);
        }
    }
    if let Some(pb) = progress {
        pb.finish_and_clear();
    }
    // A dump writes nothing, so it runs on a full disk.
    if !delete {
        return Ok(());
    }
    // Every row of these series in the range goes: their computed
    // rollups lose those hours first (docs/rollups.md).
    deleted_series.sort();
    deleted_series.dedup();
    db.roll_up_deleted(&deleted_series, start_base, end_base)?;
    for key in to_delete {
        store.delete_row(&key, Durability::Process)?;
    }
    store.sync()?;
    Ok(())
}

fn raw_point(p: &StoredPoint, base: u32) -> String {
    let ts = p.timestamp(base);
    let offset = if p.millis {
        p.offset_ms
    } else {
        p.offset_ms / 1000
    };
    format!(
        "{}\t{}\t{offset}\t{}\t{}\t({})",
        java_byte_array(&p.qualifier()),
        java_byte_array(&p.value_bytes()),
        if p.flags & FLAG_FLOAT == 0 { "l" } else { "f" },
        ts.raw(),
        java::date_to_string(ts.as_millis() as i64)
    )
}

fn import_point(p: &StoredPoint, base: u32, metric: &str, tags: &str) -> String {
    let value = match p.value {
        Value::Int(i) => i.to_string(),
        Value::Float(f) => java::double_to_string(f),
    };
    format!("{metric} {} {value}{tags}", p.timestamp(base).raw())
}

fn format_cell(
    cell: &Cell,
    base: u32,
    metric: &str,
    import: bool,
    tags: &str,
) -> anyhow::Result<String> {
    let q = &cell.qualifier;
    let kind = CellKind::of(q);
    if !kind.holds_points() {
        if import {
            return Ok(String::new());
        }
        if kind == CellKind::Annotation {
            // OpenTSDB computes this line's offset and time by reading the
            // annotation qualifier as if it were a data-point qualifier,
            // which prints nonsense; rtsdb prints the real offset and time.
            let offset_ms = qualifier::object_offset_ms(q).unwrap_or(0) as u64;
            let ts_ms = base as u64 * 1000 + offset_ms;
            return Ok(format!(
                "{}\t{}\t{}\t{}\t{ts_ms}\t({})",
                java_byte_array(q),
                java_byte_array(&cell.value),
                offset_ms / 1000,
                String::from_utf8_lossy(&cell.value),
                java::date_to_string(ts_ms as i64)
            ));
        }
        return Ok(format!(
            "{}\t[Not a data point]",
            java_byte_array(&cell.value)
        ));
    }
    let mut points = Vec::new();
    match kind {
        CellKind::Single => {
            let p = column::decode_single(q, &cell.value)?;
            return Ok(if import {
                import_point(&p, base, metric, tags)
            } else {
                raw_point(&p, base)
            });
        }
        CellKind::Append => {
            column::decode_append(&cell.value, &mut points)?;
            points.sort_by_key(|p| p.offset_ms);
        }
        CellKind::Compressed => compressed::decode(&cell.value, &mut points)?,
        _ => column::decode_compacted(q, &cell.value, &mut points)?,
    }
    if import {
        return Ok(points
            .iter()
            .map(|p| import_point(p, base, metric, tags))
            .collect::<Vec<_>>()
            .join("\n"));
    }
    let mut s = format!(
        "{}\t{} = {} values:",
        java_byte_array(q),
        java_byte_array(&cell.value),
        points.len()
    );
    for p in &points {
        s.push_str("\n    ");
        s.push_str(&raw_point(p, base));
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::{format_cell, wildcard_match};
    use crate::codec::row::Cell;

    #[test]
    fn wildcards() {
        assert!(wildcard_match("web*", "WEB01"));
        assert!(wildcard_match("*01", "web01"));
        assert!(wildcard_match("w*b*1", "web01"));
        assert!(!wildcard_match("db*", "web01"));
    }

    #[test]
    fn cells_printed_by_their_cell_kind() {
        let base = 1356998400;
        let line = |q: Vec<u8>, v: Vec<u8>| format_cell(&Cell::new(q, v), base, "m", false, "");
        // An append column on a 5-byte qualifier is read, as Fsck reads it.
        let append5 = line(vec![0x05, 0, 0, 0, 0], vec![0x00, 0x10, 0x2A]).unwrap();
        assert!(
            append5.ends_with(
                "= 1 values:\n    [0, 16]\t[42]\t1\tl\t1356998401\t(Tue Jan 01 00:00:01 UTC 2013)"
            ),
            "{append5}"
        );
        // An annotation prefix on 7 bytes is no annotation.
        let odd7 = line(vec![0x01, 0, 0, 0, 0, 0, 0], b"{}".to_vec()).unwrap();
        assert_eq!(odd7, "[123, 125]\t[Not a data point]");
        // Nor is a 1-byte qualifier a data point.
        let short = line(vec![0x01], b"{}".to_vec()).unwrap();
        assert_eq!(short, "[123, 125]\t[Not a data point]");
    }
}
