//! The write path's parts, orchestrated by [`crate::db::Db`]:
//!
//! - [`series`]: a point's names checked and resolved to its TSUID, once
//!   per series.
//! - [`wal`]: every point is logged before it is acknowledged.
//! - [`limits`]: cardinality limits on new series.
//! - [`rules`]: which names a series may have, by the protocol that
//!   wrote it (OpenTSDB's put rules, Prometheus' data model).
//! - [`buffer`]: points wait in memory per series and hour; whole rows are
//!   written to the store when the hour is sealed.

pub(crate) mod buffer;
pub(crate) mod limits;
pub(crate) mod rules;
pub(crate) mod series;
pub(crate) mod wal;

pub(crate) use rules::SeriesRules;
pub use series::Series;
pub(crate) use series::SeriesCache;
pub(crate) use series::SeriesMemo;
pub(crate) use series::TagsKey;
pub(crate) use wal::{Appended, PendingPoint};
