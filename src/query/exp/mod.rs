//! `POST /api/query/exp`: expressions across metrics, computed and
//! rendered as OpenTSDB 2.4.1 computes and renders them.
//!
//! - [`request`]: the request objects (`query.pojo`), validation with
//!   2.4.1's messages, and the query echoed in the response.
//! - [`expr`]: the expression language (JEXL 2.1.1 as 2.4.1 uses it).
//! - [`run`]: sub-queries through the `/api/query` engine, joins, fill
//!   policies, evaluation and the response.
//!
//! The HTTP layer calls [`prepare`] with the body, registers the planned
//! query for `/api/stats/query`, then [`Prepared::run`] (or [`execute`]
//! for both at once), and answers 200 with the returned JSON or the
//! [`QueryError`](crate::query::QueryError) in OpenTSDB's error shape.

pub mod expr;
pub mod request;
pub mod run;

pub use run::{Prepared, execute, prepare};
