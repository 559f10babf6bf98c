//! Charts as pictures: a set of series with their plot options drawn
//! into PNG bytes ([`png::render`]), as OpenTSDB has gnuplot draw them for
//! `/q`, and gnuplot's smoothings. A library the HTTP layer calls
//! (`tsd::http::graph`); it knows nothing of requests.
//!
//! - [`plot`]: what one picture shows.
//! - [`options`]: the options that shape it.
//! - [`png`]: drawing with `plotters` and encoding the PNG.
//! - [`smooth`]: gnuplot's `smooth` options.

pub(crate) mod options;
pub(crate) mod plot;
pub(crate) mod png;
pub(crate) mod smooth;
