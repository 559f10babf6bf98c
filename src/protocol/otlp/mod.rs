//! OpenTelemetry metrics over OTLP/HTTP: an
//! `ExportMetricsServiceRequest` body, protobuf or OTLP/JSON, decoded
//! ([`decode`]) and turned into Prometheus-model series ([`translate`],
//! `map.rs`), and the answers an OTLP/HTTP receiver sends, in the
//! request's encoding ([`Encoding::response`], [`Encoding::status`]).
//! Pure parsing, no I/O; the body arrives here inflated (gzip is the
//! server's business).
//!
//! - `proto`: the messages, declared by hand for prost and serde.
//! - `json`: OTLP/JSON's scalars (64-bit integers as strings, …).
//! - `names`: the OpenTelemetry → Prometheus naming convention.
//! - `map`: metrics to series, attributes to tags, deltas to cumulative.

mod json;
mod map;
mod names;
pub mod proto;

pub use map::{
    DeltaState, INSTANCE, JOB, MappingOptions, Refusal, Selection, Translated, translate,
};
pub use names::{Shape, label_name, metric_name};

use prost::Message as _;
use thiserror::Error;

/// A body's encoding, from its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// `application/x-protobuf`.
    Protobuf,
    /// `application/json`.
    Json,
}

/// A body that is no `ExportMetricsServiceRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OtlpError {
    #[error("the body is not a protobuf ExportMetricsServiceRequest: {0}")]
    NotProtobuf(String),
    #[error("the body is not an OTLP/JSON ExportMetricsServiceRequest: {0}")]
    NotJson(String),
}

impl Encoding {
    /// The encoding a `Content-Type` names (parameters such as `charset`
    /// ignored); `None` for any other type (answered 415).
    pub fn of_content_type(header: &str) -> Option<Encoding> {
        let media = header.split(';').next().unwrap_or("").trim();
        if media.eq_ignore_ascii_case("application/x-protobuf") {
            Some(Encoding::Protobuf)
        } else if media.eq_ignore_ascii_case("application/json") {
            Some(Encoding::Json)
        } else {
            None
        }
    }

    /// The `Content-Type` of answers in this encoding.
    pub fn content_type(self) -> &'static str {
        match self {
            Encoding::Protobuf => "application/x-protobuf",
            Encoding::Json => "application/json",
        }
    }

    /// An `ExportMetricsServiceResponse`: empty when nothing was refused,
    /// else `partial_success` with the refused data points and why.
    pub fn response(self, rejected: u64, message: &str) -> Vec<u8> {
        let partial =
            (rejected > 0 || !message.is_empty()).then(|| proto::ExportMetricsPartialSuccess {
                rejected_data_points: i64::try_from(rejected).unwrap_or(i64::MAX),
                error_message: message.to_string(),
            });
        match self {
            Encoding::Protobuf => proto::ExportMetricsServiceResponse {
                partial_success: partial,
            }
            .encode_to_vec(),
            Encoding::Json => {
                let body = match partial {
                    None => serde_json::json!({}),
                    Some(p) => serde_json::json!({
                        "partialSuccess": {
                            // int64 is a string in OTLP/JSON.
                            "rejectedDataPoints": p.rejected_data_points.to_string(),
                            "errorMessage": p.error_message,
                        }
                    }),
                };
                body.to_string().into_bytes()
            }
        }
    }

    /// A `google.rpc.Status` (an error answer's body) of gRPC `code`.
    pub fn status(self, code: i32, message: &str) -> Vec<u8> {
        match self {
            Encoding::Protobuf => proto::Status {
                code,
                message: message.to_string(),
            }
            .encode_to_vec(),
            Encoding::Json => serde_json::json!({ "code": code, "message": message })
                .to_string()
                .into_bytes(),
        }
    }
}

/// Decodes an (inflated) request body.
pub fn decode(
    body: &[u8],
    encoding: Encoding,
) -> Result<proto::ExportMetricsServiceRequest, OtlpError> {
    match encoding {
        Encoding::Protobuf => proto::ExportMetricsServiceRequest::decode(body)
            .map_err(|e| OtlpError::NotProtobuf(e.to_string())),
        Encoding::Json => {
            serde_json::from_slice(body).map_err(|e| OtlpError::NotJson(e.to_string()))
        }
    }
}

#[cfg(test)]
mod tests;
