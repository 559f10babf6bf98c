//! A small store for the checkers' unit tests: one series of ten integer
//! points in one row, in a temporary directory, read back as `run` reads
//! it and checked as `run` checks it.

use tempfile::TempDir;

use super::FsckArgs;
use super::report::FsckReport;
use super::rows::check_row;
use crate::codec::row::{Cell, RowCells};
use crate::model::{NameRules, Timestamp, Tsuid, UidKind, Value};
use crate::storage::KeyRead;
use crate::store::{Durability, Store, StoreOptions};
use crate::uid::{AutoCreate, UidTable};

/// The row's base time: its points are at `BASE + 10 * i` s, value `i`.
pub(super) const BASE: u32 = 1_356_998_400;

pub(super) struct Fixture {
    _dir: TempDir,
    pub(super) store: Store,
    pub(super) table: UidTable,
    /// The key of the one data row.
    pub(super) key: Vec<u8>,
}

impl Fixture {
    pub(super) fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let table = UidTable::new(
            store.uid_store(),
            AutoCreate {
                metrics: true,
                tagks: true,
                tagvs: true,
            },
            NameRules::default(),
        );
        let m = table.get_or_create_id(UidKind::Metric, "sys.cpu").unwrap();
        let k = table.get_or_create_id(UidKind::TagKey, "host").unwrap();
        let v = table.get_or_create_id(UidKind::TagValue, "web01").unwrap();
        let tsuid = Tsuid::new(m, vec![(k, v)]).unwrap();
        let points: Vec<_> = (0..10)
            .map(|i| (Timestamp::Seconds(BASE + i * 10), Value::Int(i as i64)))
            .collect();
        store.put_points(&tsuid, &points, Durability::Sync).unwrap();
        let key = store.layout().row_key(&tsuid, BASE);
        Fixture {
            _dir: dir,
            store,
            table,
            key,
        }
    }

    /// Adds `cells` to the row after those it holds (a later write).
    pub(super) fn add_cells(&self, cells: Vec<Cell>) {
        let mut row = self.row().unwrap();
        row.cells.extend(cells);
        self.store
            .write_row(&self.key, &row, Durability::Sync)
            .unwrap();
    }

    pub(super) fn row(&self) -> Option<RowCells> {
        self.store.get_row(&self.key).unwrap()
    }

    pub(super) fn read(&self, key: &[u8]) -> KeyRead {
        self.store.read_row_versions(&[key]).unwrap().remove(0)
    }

    /// What checking the row at `key` with `args` counts and prints.
    pub(super) fn check_key(&self, key: &[u8], args: &FsckArgs) -> (FsckReport, String) {
        let mut report = FsckReport::default();
        let mut out = Vec::new();
        let read = self.read(key);
        check_row(
            &self.store,
            &self.table,
            args,
            key,
            &read,
            &mut report,
            &mut out,
        )
        .unwrap();
        (report, String::from_utf8(out).unwrap())
    }

    pub(super) fn check(&self, args: &FsckArgs) -> (FsckReport, String) {
        self.check_key(&self.key, args)
    }
}

/// `--fix` and whatever `more` sets.
pub(super) fn fixing(more: impl FnOnce(&mut FsckArgs)) -> FsckArgs {
    let mut a = FsckArgs {
        fix: true,
        ..Default::default()
    };
    more(&mut a);
    a
}

/// The qualifier of a single point `offset_s` into its row with `flags`.
pub(super) fn qualifier(offset_s: u16, flags: u8) -> Vec<u8> {
    ((offset_s << 4) | u16::from(flags)).to_be_bytes().to_vec()
}
