//! The first byte of a rollup qualifier: the aggregator's id and the
//! bit OpenTSDB reserves for compacted columns (docs/format/rollup.md).
//! Apart from [`super::codec`] so that the columnar layout of rtsdb's own
//! rollup rows ([`super::columns`]), which the codec reads, can split that
//! byte too without the two using each other.

/// Bit of the aggregator byte marking a compacted rollup column (OpenTSDB
/// reads it, never writes it; neither does rtsdb).
pub const COMPACTED_MASK: u8 = 0x80;
/// The aggregator id bits of the first qualifier byte.
pub const AGGREGATOR_MASK: u8 = 0x7F;
