//! Errors in Prometheus' terms: the HTTP API answers each kind with the
//! `errorType` and status code Prometheus 2.42 gives it.

use thiserror::Error;

/// Which of Prometheus' error types an error is (`errorType` in the
/// API's answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is wrong: a query that does not parse, a bad parameter,
    /// an unknown function (400).
    BadData,
    /// The query is right but cannot be evaluated: many-to-many matching,
    /// too many samples, duplicate series after an operation (422).
    Execution,
    /// The query ran out of time (503).
    Timeout,
    /// The client went away or the query was cancelled (499 in the API).
    Canceled,
    /// Reading the store failed (500).
    Internal,
}

impl ErrorKind {
    /// The `errorType` string of Prometheus' JSON answer.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::BadData => "bad_data",
            ErrorKind::Execution => "execution",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Canceled => "canceled",
            ErrorKind::Internal => "internal",
        }
    }
}

/// A PromQL error: its kind and the message Prometheus would give.
#[derive(Debug, Clone, PartialEq, Error)]
#[error("{message}")]
pub struct PromError {
    pub kind: ErrorKind,
    pub message: String,
}

/// Prometheus 2.42's message when a query would hold more samples than
/// `--query.max-samples` allows (an `execution` error).
pub const TOO_MANY_SAMPLES: &str =
    "query processing would load too many samples into memory in query execution";

impl PromError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        PromError {
            kind,
            message: message.into(),
        }
    }

    pub fn bad_data(message: impl Into<String>) -> Self {
        PromError::new(ErrorKind::BadData, message)
    }

    /// The `execution` error past `--query.max-samples`.
    pub fn too_many_samples() -> Self {
        Self::execution(TOO_MANY_SAMPLES)
    }

    pub fn execution(message: impl Into<String>) -> Self {
        PromError::new(ErrorKind::Execution, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        PromError::new(ErrorKind::Internal, message)
    }
}
