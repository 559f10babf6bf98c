//! The database as PromQL's [`Storage`]: label matchers resolved on the
//! series index through the select-and-read layer of
//! [`crate::query::QueryContext`], samples read through its
//! `SeriesSource`.
