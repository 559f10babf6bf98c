//! The data model: UIDs, names, series identities, data points. No I/O
//! here.

pub mod aggregator;
pub mod annotation;
pub(crate) mod hash;
pub(crate) mod java;
pub mod name;
pub mod point;
pub mod row_span;
pub mod time;
pub mod tsuid;
pub mod uid;

pub use aggregator::Aggregator;
pub use annotation::Annotation;
pub use name::{InvalidName, NameRules};
pub use point::{DataPoint, Tags, Timestamp, Value};
pub use tsuid::{Tsuid, TsuidBytes, TsuidError};
pub use uid::{Uid, UidError, UidKind, UidWidth, UidWidths};
