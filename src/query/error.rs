//! Query errors: each carries the HTTP status OpenTSDB answers with, its
//! message and optional details, rendered as OpenTSDB's error body.

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Error)]
pub enum QueryError {
    /// 400: a malformed or invalid query (`IllegalArgumentException`,
    /// `BadRequestException`).
    #[error("{message}")]
    BadRequest {
        message: String,
        details: Option<String>,
    },
    /// 400: an unknown metric, tag key or tag value (`NoSuchUniqueName`).
    #[error("{0}")]
    NoSuchName(String),
    /// 413: a `tsd.query.limits.*` limit was exceeded.
    #[error("{0}")]
    TooLarge(String),
    /// 408: `tsd.query.timeout` elapsed.
    #[error("{0}")]
    Timeout(String),
    /// 503: an operator cancelled the query (`DELETE /api/stats/query`);
    /// OpenTSDB has no such error, and 503 is what Prometheus 2.42 answers
    /// a cancelled PromQL query with, so both languages agree.
    #[error("{0}")]
    Cancelled(String),
    /// 424: the storage layer failed (OpenTSDB's `HBaseException`).
    #[error("{0}")]
    Storage(String),
    /// 501: a feature this build does not implement.
    #[error("{0}")]
    NotImplemented(String),
}

impl QueryError {
    pub fn bad(message: impl Into<String>) -> QueryError {
        QueryError::BadRequest {
            message: message.into(),
            details: None,
        }
    }

    pub fn status(&self) -> u16 {
        match self {
            QueryError::BadRequest { .. } | QueryError::NoSuchName(_) => 400,
            QueryError::TooLarge(_) => 413,
            QueryError::Timeout(_) => 408,
            QueryError::Cancelled(_) => 503,
            QueryError::Storage(_) => 424,
            QueryError::NotImplemented(_) => 501,
        }
    }

    pub fn message(&self) -> String {
        self.to_string()
    }

    pub fn details(&self) -> Option<&str> {
        match self {
            QueryError::BadRequest { details, .. } => details.as_deref(),
            _ => None,
        }
    }
}

impl From<crate::store::StoreError> for QueryError {
    fn from(e: crate::store::StoreError) -> QueryError {
        QueryError::Storage(e.to_string())
    }
}

impl From<crate::uid::UidTableError> for QueryError {
    fn from(e: crate::uid::UidTableError) -> QueryError {
        match e {
            crate::uid::UidTableError::NoSuchName { .. } => QueryError::NoSuchName(e.to_string()),
            other => QueryError::Storage(other.to_string()),
        }
    }
}
