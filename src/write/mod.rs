//! The write path's parts, orchestrated by [`crate::db::Db`]:
//!
//! - [`series`]: a point's names checked and resolved to its TSUID, once
//!   per series.
//! - [`wal`]: every point is logged before it is acknowledged.
//! - [`limits`]: cardinality limits on new series.
//! - [`buffer`]: points wait in memory per series and hour; whole rows are
//!   written to the store when the hour is sealed.

pub(crate) mod buffer;
pub(crate) mod limits;
pub(crate) mod series;
pub(crate) mod wal;

pub use series::Series;
pub(crate) use series::SeriesCache;
pub(crate) use series::SeriesMemo;
pub(crate) use series::TagsKey;
pub(crate) use wal::{Appended, PendingPoint};
