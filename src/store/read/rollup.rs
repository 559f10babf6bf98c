//! The second thing a query reads: the rollup tables ([`RollupSource`]),
//! read in time slices, one per read thread, each slice's rows handed to
//! a [`RollupRowSink`] on the thread reading it. The database implements
//! the source over its rollup tables; the query engine either folds rows
//! into its groups as they come (its own sinks) or takes each series'
//! slots in time order ([`RollupSource::read_rollups`]).

use crate::codec::row::RowError;
use crate::model::{Tsuid, Uid};
use crate::rollup::codec::{RollupColumns, RollupSlot, SlotReader};
use crate::rollup::{RollupInterval, RollupSettings};

/// What a rollup read went through.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RollupReadStats {
    pub rows: u64,
    /// Cells of the columns read, in the time range.
    pub cells: u64,
}

/// One time slice of a rollup read: the rows whose base time lies in
/// `[from, to)` (seconds), read by one thread. A slice starts at a row's
/// base time, so each row is in exactly one slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RollupSlice {
    pub from: u64,
    pub to: u64,
}

/// One rollup row read from its table: its base time (seconds) and its
/// encoded cells (docs/format/rollup.md).
#[derive(Debug, Clone, Copy)]
pub struct RollupRow<'a> {
    pub base: u32,
    pub cells: &'a [u8],
}

/// Takes the rows of one [`RollupSlice`], on the thread reading it, and
/// reads their cells (with a [`SlotReader`] or a
/// [`DenseReader`](crate::rollup::codec::DenseReader)).
pub trait RollupRowSink: Send {
    /// One row of `tsuids[i]` (a series' rows come in time order): reads
    /// its cells of the columns the sink reads with timestamps in
    /// `[start_s, end_s]`, and returns how many it read.
    fn row(
        &mut self,
        i: usize,
        row: RollupRow<'_>,
        start_s: u32,
        end_s: u32,
    ) -> Result<u64, RowError>;
}

/// What a query reads from the rollup tables.
pub trait RollupSource: Sync {
    fn rollup_settings(&self) -> Option<&RollupSettings>;

    /// The default interval's pre-aggregate table read as data rows
    /// ([`PreAggregates`](super::pre_aggregates::PreAggregates)), when
    /// rollups are configured: what a sub-query asking for pre-aggregates
    /// reads when no rollup interval answers it.
    fn pre_aggregates(&self) -> Option<&dyn super::SeriesSource> {
        None
    }

    /// The time slices a read of `interval`'s rows from the one holding
    /// `start_s` through the one holding `end_s` is cut into, in time
    /// order: one per read thread (as the raw path reads runs of series
    /// on every core).
    fn rollup_slices(
        &self,
        interval: &RollupInterval,
        start_s: u32,
        end_s: u32,
    ) -> Vec<RollupSlice>;

    /// Reads the rows that `table` holds for the series `tsuids` with
    /// timestamps in `[start_s, end_s]`: the rows of `slices[k]` (of
    /// [`rollup_slices`](Self::rollup_slices)) go to `sinks[k]`, each
    /// slice on its own thread.
    #[allow(clippy::too_many_arguments)]
    fn read_rollup_slices(
        &self,
        table: &str,
        metric: Uid,
        tsuids: &[Tsuid],
        start_s: u32,
        end_s: u32,
        slices: &[RollupSlice],
        sinks: &mut [&mut dyn RollupRowSink],
    ) -> Result<RollupReadStats, String>;

    /// Hands over the cells of `columns` that `table` (of `interval`)
    /// holds for the series `tsuids`, from the row holding `start_s`
    /// through the one holding `end_s`: `f(i, slots)` gets slots of
    /// `tsuids[i]` in time order, in several calls (one per row read),
    /// each later than the one before for that series.
    #[allow(clippy::too_many_arguments)]
    fn read_rollups(
        &self,
        table: &str,
        interval: &RollupInterval,
        metric: Uid,
        tsuids: &[Tsuid],
        columns: RollupColumns,
        start_s: u32,
        end_s: u32,
        f: &mut dyn FnMut(usize, &[RollupSlot]),
    ) -> Result<RollupReadStats, String> {
        let slices = self.rollup_slices(interval, start_s, end_s);
        let mut parts: Vec<HeldSlots> = slices
            .iter()
            .map(|_| HeldSlots {
                reader: SlotReader::new(columns, interval),
                slots: Vec::new(),
                rows: Vec::new(),
            })
            .collect();
        let mut sinks: Vec<&mut dyn RollupRowSink> = parts
            .iter_mut()
            .map(|p| p as &mut dyn RollupRowSink)
            .collect();
        let read =
            self.read_rollup_slices(table, metric, tsuids, start_s, end_s, &slices, &mut sinks)?;
        // Slices in time order, each row by row: each series' slots
        // arrive in time order.
        for part in &parts {
            let mut at = 0;
            for &(i, end) in &part.rows {
                if end > at {
                    f(i, &part.slots[at..end]);
                }
                at = end;
            }
        }
        Ok(read)
    }
}

/// The sink of [`RollupSource::read_rollups`]: holds one slice's slots
/// until the read ends, so that they can be handed over in time order
/// once every slice is read (its job is to keep slots, where the query
/// engine's folding sink, `SliceRows` in `query/rollup.rs`, folds each
/// row into its buckets as it is read and keeps nothing per row). Every
/// row's slots go in one vector (no vector per series to grow), each
/// row's series and end beside it.
struct HeldSlots {
    reader: SlotReader,
    slots: Vec<RollupSlot>,
    rows: Vec<(usize, usize)>,
}

impl RollupRowSink for HeldSlots {
    fn row(
        &mut self,
        i: usize,
        row: RollupRow<'_>,
        start_s: u32,
        end_s: u32,
    ) -> Result<u64, RowError> {
        let cells = self.reader.lay_out(row.cells, row.base, start_s, end_s)?;
        self.reader.drain(|_, s| self.slots.push(s));
        self.rows.push((i, self.slots.len()));
        Ok(cells)
    }
}
