//! The counters one sub-query run keeps, reported by `showStats` and
//! `showSummary` and logged.

/// Counters reported by `showStats`/`showSummary` and the log.
#[derive(Debug, Clone, Default)]
pub(super) struct SubStats {
    pub(super) series: u64,
    pub(super) raw_points: u64,
    pub(super) rows: u64,
    pub(super) bytes: u64,
    /// Series skipped because a tag UID no longer resolves to a name.
    pub(super) unresolved: u64,
    pub(super) output_points: u64,
    pub(super) storage_ms: f64,
    pub(super) aggregation_ms: f64,
}

impl SubStats {
    pub(super) fn add(&mut self, o: &SubStats) {
        self.series += o.series;
        self.raw_points += o.raw_points;
        self.rows += o.rows;
        self.bytes += o.bytes;
        self.unresolved += o.unresolved;
        self.output_points += o.output_points;
        self.storage_ms += o.storage_ms;
        self.aggregation_ms += o.aggregation_ms;
    }

    /// The counters as `showStats` prints them for sub-query `index`.
    pub(super) fn to_json(&self, index: usize) -> serde_json::Value {
        serde_json::json!({
            "queryIndex": index,
            "datapoints": self.output_points,
            "rawDatapoints": self.raw_points,
            "rowsRead": self.rows,
            "bytesRead": self.bytes,
            "seriesMatched": self.series,
            "unresolvedSeries": self.unresolved,
            "storageTime": self.storage_ms,
            "aggregationTime": self.aggregation_ms,
        })
    }
}
