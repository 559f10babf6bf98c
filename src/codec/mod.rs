//! Byte formats of the data table, each described in docs/format/.
//! Pure functions over bytes; no storage access.

pub mod column;
pub mod compressed;
pub mod qualifier;
pub mod row;
pub mod row_key;
pub mod varint;

pub use column::ColumnError;
pub use qualifier::{CellKind, QualifierError, StoredPoint};
pub use row::{Cell, DecodedRow, DuplicatePolicy, RowCells, RowEncoding};
pub use row_key::{KeyError, KeyLayout, RowKey, Salt};
