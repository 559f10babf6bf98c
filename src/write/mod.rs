//! The write path's parts, orchestrated by [`crate::db::Db`]:
//!
//! - [`series`]: a point's names checked and resolved to its TSUID, once
//!   per series.
//! - [`wal`]: every point is logged before it is acknowledged.
//! - [`buffer`]: points wait in memory per series and hour; whole rows are
//!   written to the store when the hour is sealed.

pub mod buffer;
pub mod series;
pub mod wal;

pub use series::{Series, SeriesCache};
pub use wal::{Appended, PendingPoint, Wal, WalOptions};
