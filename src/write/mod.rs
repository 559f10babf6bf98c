//! The write path's parts, orchestrated by [`crate::db::Db`]:
//!
//! - [`line`]: the put-line parser shared by telnet and `tsdb import`.
//! - [`series`]: a point's names checked and resolved to its TSUID, once
//!   per series.
//! - [`wal`]: every point is logged before it is acknowledged.
//! - [`buffer`]: points wait in memory per series and hour; whole rows are
//!   written to the store when the hour is sealed.

pub mod buffer;
pub mod line;
pub mod series;
pub mod wal;

pub use series::{PointError, Series, SeriesCache, parse_value};
pub use wal::{Appended, PendingPoint, Wal, WalOptions};
