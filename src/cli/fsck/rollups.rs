//! `tsdb fsck`'s check of the rollup and pre-aggregate tables
//! (docs/format/rollup.md): rows and cells that cannot be read back are
//! reported; nothing is fixed, since rollups are derived data, written
//! again from their source.

use std::io::Write;

use super::report::FsckReport;
use crate::codec::column;
use crate::codec::row_key::KeyLayout;
use crate::db::Db;
use crate::model::uid::{hex_upper, java_byte_array};
use crate::rollup::codec;
use crate::rollup::{RollupInterval, RollupSettings};
use crate::store::rollup_table::split_key;

/// Reads every row of the rollup and pre-aggregate tables and reports
/// those that cannot be read back (see [`check_rollup_row`]).
pub(super) fn check_rollups(
    db: &Db,
    r: &mut FsckReport,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let layout = *db.store().layout();
    let settings = db.rollup_settings();
    for item in db.rollup_table().scan_all() {
        let (key, value) = item?;
        check_rollup_row(&layout, settings, &key, &value, r, out)?;
    }
    Ok(())
}

/// Checks one row of the rollup table: a key without a table name or a
/// row key, a value that does not decode, a cell whose aggregator id is
/// not configured, whose offset lies past its row, or whose value does
/// not match its flags is reported as `Rollup row KEY: why`.
fn check_rollup_row(
    layout: &KeyLayout,
    settings: Option<&RollupSettings>,
    key: &[u8],
    value: &[u8],
    r: &mut FsckReport,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    r.rollup_rows += 1;
    let hex = hex_upper(key);
    let mut bad = |why: String, out: &mut dyn Write| -> std::io::Result<()> {
        r.bad_rollups += 1;
        writeln!(out, "Rollup row {hex}: {why}")
    };
    let Some((table, row_key)) = split_key(key) else {
        bad("no table name".into(), out)?;
        return Ok(());
    };
    let parsed = match layout.parse_row_key(row_key) {
        Ok(k) => k,
        Err(e) => {
            bad(format!("in {table}: {e}"), out)?;
            return Ok(());
        }
    };
    let cells = match crate::rollup::columns::decode(value) {
        Ok(c) => c,
        Err(e) => {
            bad(format!("in {table}: {e}"), out)?;
            return Ok(());
        }
    };
    let interval = settings.and_then(|s| {
        s.config
            .intervals
            .iter()
            .find(|i| i.table == table || i.pre_agg_table == table)
    });
    for c in &cells.cells {
        if let Some(why) =
            cell_problem(&c.qualifier, &c.value, parsed.base_time, interval, settings)
        {
            bad(
                format!("in {table}: cell {}: {why}", java_byte_array(&c.qualifier)),
                out,
            )?;
        }
    }
    Ok(())
}

/// What is wrong with one cell of a rollup row based at `base_time`, if
/// anything: a 2-byte qualifier is a raw point's, a 3-byte one a rollup
/// cell of `interval` (unknown when the configuration no longer names its
/// table: then it is not checked).
fn cell_problem(
    qualifier: &[u8],
    value: &[u8],
    base_time: u32,
    interval: Option<&RollupInterval>,
    settings: Option<&RollupSettings>,
) -> Option<String> {
    match (qualifier.len(), interval) {
        (2, _) => column::decode_single(qualifier, value)
            .err()
            .map(|e| e.to_string()),
        (3, Some(iv)) => match codec::decode_cell(qualifier, value, base_time, iv) {
            Err(e) => Some(e.to_string()),
            Ok(cell) if (cell.timestamp - base_time) / iv.interval_seconds >= iv.intervals => Some(
                format!("offset past the {} intervals of a row", iv.intervals),
            ),
            Ok(cell)
                if settings
                    .and_then(|s| s.config.aggregator_for(cell.aggregator_id))
                    .is_none() =>
            {
                Some(format!(
                    "aggregator id {} is not configured",
                    cell.aggregator_id
                ))
            }
            Ok(_) => None,
        },
        // A table the configuration no longer names: its cells'
        // intervals are unknown.
        (3, None) => None,
        (n, _) => Some(format!("qualifier of {n} bytes")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::row::{Cell, RowCells};

    fn check(key: &[u8], value: &[u8]) -> (FsckReport, String) {
        let layout = KeyLayout::default();
        let (mut r, mut out) = (FsckReport::default(), Vec::new());
        check_rollup_row(&layout, None, key, value, &mut r, &mut out).unwrap();
        (r, String::from_utf8(out).unwrap())
    }

    /// A key of table `agg` for the row of metric 1, tag 1=1, at 0.
    fn key() -> Vec<u8> {
        let mut k = vec![3, b'a', b'g', b'g'];
        k.extend_from_slice(&[0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1]);
        k
    }

    fn value(cells: Vec<Cell>) -> Vec<u8> {
        RowCells { cells }.encode()
    }

    #[test]
    fn a_row_that_reads_back_is_counted_only() {
        let v = value(vec![Cell::new(vec![0, 0], vec![1])]);
        let (r, out) = check(&key(), &v);
        assert_eq!((r.rollup_rows, r.bad_rollups), (1, 0));
        assert_eq!(out, "");
    }

    #[test]
    fn keys_that_do_not_parse_are_reported() {
        let v = value(vec![Cell::new(vec![0, 0], vec![1])]);
        let (r, out) = check(&[], &v);
        assert_eq!((r.rollup_rows, r.bad_rollups), (1, 1));
        assert_eq!(out, "Rollup row : no table name\n");
        let short = [3, b'a', b'g', b'g', 0, 1];
        let (r, out) = check(&short, &v);
        assert_eq!(r.bad_rollups, 1);
        assert_eq!(
            out,
            "Rollup row 036167670001: in agg: row key of 2 bytes does not fit the layout (prefix 7 bytes, tag pair 6 bytes)\n"
        );
    }

    #[test]
    fn a_value_that_does_not_decode_is_reported() {
        let (r, out) = check(&key(), &[0xEE, 0]);
        assert_eq!(r.bad_rollups, 1);
        assert!(
            out.starts_with(&format!("Rollup row {}: in agg: ", hex_upper(&key()))),
            "{out}"
        );
    }

    #[test]
    fn each_bad_cell_is_reported_and_a_table_not_configured_is_not_read() {
        let v = value(vec![
            // A float in 2 bytes.
            Cell::new(vec![0, 0x0B], vec![0, 0]),
            // A rollup cell of a table the configuration does not name.
            Cell::new(vec![1, 0, 0], vec![1]),
            Cell::new(vec![0, 0, 0, 0], vec![1]),
        ]);
        let (r, out) = check(&key(), &v);
        assert_eq!((r.rollup_rows, r.bad_rollups), (1, 2));
        let lines: Vec<&str> = out.lines().collect();
        let hex = hex_upper(&key());
        assert_eq!(lines.len(), 2, "{out}");
        assert!(
            lines[0].starts_with(&format!("Rollup row {hex}: in agg: cell [0, 11]: ")),
            "{out}"
        );
        assert_eq!(
            lines[1],
            format!("Rollup row {hex}: in agg: cell [0, 0, 0, 0]: qualifier of 4 bytes")
        );
    }
}
