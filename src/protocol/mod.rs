//! Client protocols as text: what a line or a value sent by a client
//! means, before the write path resolves its series. Pure parsing, no
//! I/O; the server (`tsd`) and `tsdb import` both use it, as
//! VictoriaMetrics keeps its `lib/protoparser/opentsdb`.
//!
//! - [`telnet`]: framing, word splitting and the `put` line parser.
//! - [`jackson`]: JSON values coerced as OpenTSDB's Jackson reads them.
//! - `put_json`: the `/api/put` JSON body, read as it arrives into compact
//!   decoded points.
//! - [`remote_write`]: Prometheus remote write 1.0 and 2.0 bodies (snappy,
//!   protobuf) decoded into series, samples and metadata.
//! - [`influx`]: InfluxDB line protocol bodies.
//! - [`graphite`]: Graphite plaintext lines, tags and path templates.
//! - [`otlp`]: OpenTelemetry metrics (OTLP/HTTP, protobuf and JSON) decoded
//!   and mapped onto remote write's series.

pub mod graphite;
pub mod influx;
pub mod jackson;
pub mod otlp;
pub(crate) mod put_json;
pub mod remote_write;
pub mod telnet;

use crate::model::Value;

/// Why a point was refused, in OpenTSDB's exception classes: each maps to
/// its own telnet prefix and HTTP message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PointError {
    /// `IllegalArgumentException`: telnet `put: illegal argument: <msg>`,
    /// HTTP the message itself.
    IllegalArgument(String),
    /// `NumberFormatException`: telnet `put: invalid value: <msg>`, HTTP
    /// `Unable to parse value to a number`.
    InvalidValue(String),
    /// `NoSuchUniqueName`: telnet `put: unknown metric: <msg>`, HTTP
    /// `Unknown metric`.
    UnknownName(String),
    /// The TSD cannot store points now (a full disk, a failed engine, a
    /// removed data directory): the message names the cause. Telnet
    /// `put: HBase error: <msg>` as for other storage trouble, but always
    /// sent; HTTP `Storage exception: <msg>` as [`PointError::Storage`].
    Unavailable(String),
    /// The points are in the TSD's write-ahead log, but the shared storage
    /// of a cluster could not take them now (every replica of a shard
    /// down, ClickHouse's tables read-only without ZooKeeper, no endpoint
    /// reachable), so a `sync` put cannot be acknowledged: the points stay
    /// logged and buffered and are written once the storage is back. HTTP
    /// answers the request 503 (docs/scale-out.md, "What happens on each
    /// fault"); the message names the cause. Telnet never waits for the
    /// store, so it never sees this.
    StorageDown(String),
    /// Anything else (storage trouble, running out of UIDs, shutdown):
    /// telnet `put: HBase error: <msg>`, HTTP `Storage exception: <msg>`.
    /// OpenTSDB 2.4.1 meets these in the deferred of `addPoint`, whose
    /// errback (`PutErrback`) writes `Storage exception: ` and the message;
    /// its `Unexpected exception` is for a synchronous `RuntimeException`,
    /// which has no counterpart here.
    Storage(String),
    /// `NoSuchRollupForIntervalException` (a `NoSuchElementException`):
    /// telnet `rollup: No such rollup: <msg>`; over HTTP it is none of the
    /// classes `processDataPoint` names, so `Unexpected exception`.
    NoSuchRollup(String),
}

impl PointError {
    /// The telnet error line of a `put` (without the trailing newline).
    pub fn telnet_line(&self) -> String {
        self.telnet_line_of("put")
    }

    /// The telnet error line of `command` (`put`, `histogram`): OpenTSDB
    /// starts each line with the name of the data point type.
    pub fn telnet_line_of(&self, command: &str) -> String {
        match self {
            PointError::IllegalArgument(m) => format!("{command}: illegal argument: {m}"),
            PointError::InvalidValue(m) => format!("{command}: invalid value: {m}"),
            PointError::UnknownName(m) => format!("{command}: unknown metric: {m}"),
            PointError::Storage(m) | PointError::Unavailable(m) | PointError::StorageDown(m) => {
                format!("{command}: HBase error: {m}")
            }
            PointError::NoSuchRollup(m) => format!("{command}: No such rollup: {m}"),
        }
    }

    /// The exception's own message, whatever its kind.
    pub fn message(&self) -> &str {
        match self {
            PointError::IllegalArgument(m)
            | PointError::InvalidValue(m)
            | PointError::UnknownName(m)
            | PointError::Storage(m)
            | PointError::Unavailable(m)
            | PointError::StorageDown(m)
            | PointError::NoSuchRollup(m) => m,
        }
    }

    /// The per-point `error` of `/api/put` details.
    pub fn http_message(&self) -> String {
        match self {
            PointError::IllegalArgument(m) => m.clone(),
            PointError::InvalidValue(_) => "Unable to parse value to a number".into(),
            PointError::UnknownName(_) => "Unknown metric".into(),
            PointError::Storage(m) | PointError::Unavailable(m) | PointError::StorageDown(m) => {
                format!("Storage exception: {m}")
            }
            PointError::NoSuchRollup(_) => "Unexpected exception".into(),
        }
    }
}

/// Parses a point's value text as `PutDataPointRpc` does: integer text
/// through `Tags.parseLong`, anything with `.`/`e`/`E` through
/// `Double.parseDouble` (stored on 4 bytes when exact as a float).
pub fn parse_value(text: &str) -> Result<Value, PointError> {
    use crate::model::java::{looks_like_integer, parse_double, parse_long};
    if looks_like_integer(text) {
        parse_long(text)
            .map(Value::Int)
            .map_err(PointError::InvalidValue)
    } else {
        parse_double(text)
            .map(Value::Float)
            .map_err(PointError::InvalidValue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_as_put_data_point_rpc() {
        assert_eq!(
            parse_value("NaN").unwrap_err(),
            PointError::InvalidValue("Invalid character 'N' in NaN".into())
        );
        assert_eq!(parse_value("1.5").unwrap(), Value::Float(1.5));
        assert_eq!(parse_value("42").unwrap(), Value::Int(42));
    }
}
