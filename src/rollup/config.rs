//! `tsd.rollups.config`: the rollup intervals (each with its rollup table,
//! pre-aggregate table, row span and default flag) and the aggregator ids
//! of rollup qualifiers, checked at start with OpenTSDB 2.4.1's messages
//! (`RollupConfig`, `RollupInterval`, the rollup part of `TSDB`'s
//! constructor).

use std::collections::BTreeMap;

use serde::Deserialize;
use thiserror::Error;

use crate::model::time::parse_duration;
use crate::protocol::jackson;

/// More intervals than this in one row do not fit the qualifier's 12 bits
/// of offset (OpenTSDB's `MAX_INTERVALS`; its message says 14 bits).
const MAX_INTERVALS: u32 = 7774;
/// Fewer than this in one row make rows too small to be worth a row.
const MIN_INTERVALS: u32 = 12;
const SECONDS_IN_HOUR: u32 = 3600;
const SECONDS_IN_DAY: u32 = 86_400;
/// A month and a year as OpenTSDB bounds them: 32 and 366 days.
const MAX_SECONDS_IN_MONTH: u32 = 86_400 * 32;
const MAX_SECONDS_IN_YEAR: u32 = 86_400 * 366;

/// A configuration refused at start, with OpenTSDB's message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0}")]
pub struct RollupConfigError(pub String);

fn refuse<T>(msg: impl Into<String>) -> Result<T, RollupConfigError> {
    Err(RollupConfigError(msg.into()))
}

/// The unit of a row span: rows start at the hour (times a multiplier),
/// the UTC day, the first of the month or the first of the year.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanUnit {
    Hour,
    Day,
    Month,
    Year,
}

/// One configured interval (`RollupInterval`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollupInterval {
    /// Table of rollups of raw data (`table`).
    pub table: String,
    /// Table of rolled-up pre-aggregates (`preAggregationTable`).
    pub pre_agg_table: String,
    /// As configured, e.g. `1h`: what `/api/rollup` and `rollup` name.
    pub interval: String,
    /// As configured, e.g. `1d`.
    pub row_span: String,
    pub span_unit: SpanUnit,
    /// The multiplier of an hourly span (`2h` → 2); 1 otherwise.
    pub span_multiplier: u32,
    pub interval_seconds: u32,
    /// Intervals in one row (at most, for months and years).
    pub intervals: u32,
    pub default_interval: bool,
}

/// `RollupInterval.Builder` as Jackson fills it: unknown fields ignored.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct IntervalJson {
    #[serde(default, deserialize_with = "jackson::string_opt")]
    table: Option<String>,
    #[serde(default, deserialize_with = "jackson::string_opt")]
    pre_aggregation_table: Option<String>,
    #[serde(default, deserialize_with = "jackson::string_opt")]
    interval: Option<String>,
    #[serde(default, deserialize_with = "jackson::string_opt")]
    row_span: Option<String>,
    #[serde(default, deserialize_with = "jackson::boolean")]
    default_interval: bool,
    #[serde(default, deserialize_with = "jackson::string_opt")]
    delay_sla: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfigJson {
    aggregation_ids: Option<BTreeMap<String, i64>>,
    intervals: Option<Vec<IntervalJson>>,
}

/// `DateTime.getDurationUnits`: what follows the digits.
fn duration_units(s: &str) -> Result<&str, RollupConfigError> {
    let digits = s.bytes().take_while(|b| b.is_ascii_digit()).count();
    if s.is_empty() || digits == s.len() {
        return refuse(format!(
            "Invalid duration, must have an integer and unit: {s}"
        ));
    }
    Ok(&s[digits..])
}

/// `DateTime.getDurationInterval`: the digits.
fn duration_count(s: &str) -> Result<u32, RollupConfigError> {
    let digits = s.bytes().take_while(|b| b.is_ascii_digit()).count();
    s[..digits]
        .parse::<u32>()
        .or_else(|_| refuse(format!("Invalid duration (number): {s}")))
}

impl RollupInterval {
    fn from_json(j: IntervalJson) -> Result<RollupInterval, RollupConfigError> {
        let row_span = j.row_span.unwrap_or_default();
        if row_span.is_empty() {
            return refuse("Duration cannot be null or empty");
        }
        let units = duration_units(&row_span)?;
        if units.len() > 1 {
            return refuse("Milliseconds are not supported");
        }
        let unit = units.as_bytes()[0];
        let multiplier = duration_count(&row_span)?;
        let table = j.table.unwrap_or_default();
        if table.is_empty() {
            return refuse("The rollup table cannot be null or empty");
        }
        let pre_agg_table = j.pre_aggregation_table.unwrap_or_default();
        if pre_agg_table.is_empty() {
            return refuse("The pre-aggregate rollup table cannot be null or empty");
        }
        if unit != b'h' && multiplier > 1 {
            return refuse("Multipliers are only usable with the 'h' unit");
        } else if unit == b'h' && multiplier > 1 && multiplier % 2 != 0 {
            return refuse("The multiplier must be 1 or an even value");
        }
        let interval = j.interval.unwrap_or_default();
        if interval.is_empty() {
            return refuse("Cannot parse null or empty duration");
        }
        let ms = parse_duration(&interval).map_err(|e| RollupConfigError(e.to_string()))?;
        let interval_seconds = ms / 1000;
        if interval_seconds >= i32::MAX as u64 {
            return refuse(format!("Interval is too big: {interval_seconds}"));
        }
        let interval_seconds = interval_seconds as u32;
        if let Some(sla) = j.delay_sla.filter(|s| !s.is_empty()) {
            let ms = parse_duration(&sla).map_err(|e| RollupConfigError(e.to_string()))?;
            if ms < 1000 {
                return refuse("Milliseconds are not supported as the maximum delay");
            }
        }
        let (span_unit, span) = match unit {
            b'h' => (SpanUnit::Hour, SECONDS_IN_HOUR),
            b'd' => (SpanUnit::Day, SECONDS_IN_DAY),
            b'n' => (SpanUnit::Month, MAX_SECONDS_IN_MONTH),
            b'y' => (SpanUnit::Year, MAX_SECONDS_IN_YEAR),
            // OpenTSDB's spelling.
            other => return refuse(format!("Unrecogznied span '{}'", other as char)),
        };
        let span = span.saturating_mul(multiplier.max(1));
        if interval_seconds >= span {
            return refuse(format!(
                "Interval [{interval_seconds}] is too large for the span [{}]",
                unit as char
            ));
        }
        // A sub-second interval parses to 0 seconds; OpenTSDB would divide
        // by zero here.
        if interval_seconds == 0 {
            return refuse(format!("Interval is too small: {interval}"));
        }
        let intervals = span / interval_seconds;
        if intervals > MAX_INTERVALS {
            return refuse(format!(
                "Too many intervals [{intervals}] in the span. Must be smaller than [{MAX_INTERVALS}] to fit in 14 bits"
            ));
        }
        if intervals < MIN_INTERVALS {
            return refuse(format!(
                "Not enough intervals [{intervals}] for the span. Must be at least [{MIN_INTERVALS}]"
            ));
        }
        Ok(RollupInterval {
            table,
            pre_agg_table,
            interval,
            row_span,
            span_unit,
            span_multiplier: multiplier.max(1),
            interval_seconds,
            intervals,
            default_interval: j.default_interval,
        })
    }

    /// The longest a row of this interval can span, in seconds (a month
    /// as 31 days, a year as 366).
    pub fn max_row_span_s(&self) -> u64 {
        match self.span_unit {
            SpanUnit::Hour => 3600 * self.span_multiplier as u64,
            SpanUnit::Day => 86_400,
            SpanUnit::Month => 31 * 86_400,
            SpanUnit::Year => 366 * 86_400,
        }
    }

    /// OpenTSDB's `toString`, used in its messages.
    fn describe(&self) -> String {
        format!(
            "table={}, preAggTable={}, rowSpan={}, isDefaultInterval={}, interval={}",
            self.table, self.pre_agg_table, self.row_span, self.default_interval, self.interval
        )
    }
}

/// The parsed `tsd.rollups.config`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollupConfig {
    /// In configuration order; interval strings are unique.
    pub intervals: Vec<RollupInterval>,
    /// Lower-case aggregator name → id (0 to 127).
    pub aggregation_ids: BTreeMap<String, u8>,
}

impl RollupConfig {
    /// Parses and checks the JSON of `tsd.rollups.config`, in OpenTSDB's
    /// order; `is_aggregator` says whether a lower-case name is one.
    pub fn parse(
        json: &str,
        is_aggregator: impl Fn(&str) -> bool,
    ) -> Result<RollupConfig, RollupConfigError> {
        let j: ConfigJson = serde_json::from_str(json)
            .map_err(|e| RollupConfigError(format!("Unable to parse the rollup config: {e}")))?;
        let raw_intervals = j.intervals.unwrap_or_default();
        if raw_intervals.is_empty() {
            return refuse("Rollup config given but no intervals were found.");
        }
        let ids = j.aggregation_ids.unwrap_or_default();
        if ids.is_empty() {
            return refuse("Rollup config given but no aggegation ID mappings found.");
        }
        let mut intervals: Vec<RollupInterval> = Vec::new();
        let mut defaults = 0;
        for raw in raw_intervals {
            let i = RollupInterval::from_json(raw)?;
            if intervals.iter().any(|o| o.interval == i.interval) {
                return refuse(format!(
                    "Only one interval of each type can be configured: {}",
                    i.describe()
                ));
            }
            if i.default_interval {
                defaults += 1;
                if defaults > 1 {
                    return refuse(format!(
                        "Multiple default intervals configured. Only one is allowed: {}",
                        i.describe()
                    ));
                }
            }
            intervals.push(i);
        }
        let mut aggregation_ids = BTreeMap::new();
        let mut seen_ids = std::collections::BTreeSet::new();
        for (name, id) in ids {
            if !(0..=127).contains(&id) {
                return refuse(format!(
                    "ID for aggregator must be between 0 and 127: {name}={id}"
                ));
            }
            let agg = name.to_lowercase();
            if !seen_ids.insert(id) {
                return refuse(format!(
                    "Multiple mappings for the ID '{id}' are not allowed."
                ));
            }
            if !is_aggregator(&agg) {
                return refuse(format!("No such aggregator found for {agg}"));
            }
            aggregation_ids.insert(agg, id as u8);
        }
        if !intervals.iter().any(|i| i.default_interval) {
            return refuse("None of the rollup intervals were marked as the \"default\".");
        }
        Ok(RollupConfig {
            intervals,
            aggregation_ids,
        })
    }

    /// `getRollupInterval(String)`.
    pub fn interval(&self, interval: &str) -> Result<&RollupInterval, RollupConfigError> {
        if interval.is_empty() {
            return refuse("Interval cannot be null or empty");
        }
        self.intervals
            .iter()
            .find(|i| i.interval == interval)
            .ok_or_else(|| {
                RollupConfigError(format!(
                    "No rollups configured for the interval: {interval}"
                ))
            })
    }

    /// The interval marked `defaultInterval` (checked at parse).
    pub fn default_interval(&self) -> &RollupInterval {
        self.intervals
            .iter()
            .find(|i| i.default_interval)
            .expect("checked at parse")
    }

    /// `getIdForAggregator`.
    pub fn id_for(&self, aggregator: &str) -> Result<u8, RollupConfigError> {
        if aggregator.is_empty() {
            return refuse("Aggregator cannot be null or empty.");
        }
        self.aggregation_ids
            .get(&aggregator.to_lowercase())
            .copied()
            .ok_or_else(|| {
                RollupConfigError(format!("No ID found mapping to aggregator: {aggregator}"))
            })
    }

    /// `getAggregatorForId`.
    pub fn aggregator_for(&self, id: u8) -> Option<&str> {
        self.aggregation_ids
            .iter()
            .find(|(_, v)| **v == id)
            .map(|(k, _)| k.as_str())
    }

    /// `getRollupInterval(long, String)`: the intervals whose length
    /// divides `seconds`, longest first (an exact match is the longest).
    pub fn best_matches(&self, seconds: u64) -> Vec<&RollupInterval> {
        let mut v: Vec<&RollupInterval> = self
            .intervals
            .iter()
            .filter(|i| seconds > 0 && seconds.is_multiple_of(i.interval_seconds as u64))
            .collect();
        v.sort_by_key(|i| std::cmp::Reverse(i.interval_seconds));
        v.dedup_by_key(|i| i.interval_seconds);
        v
    }

    /// Every table name the configuration uses, each once.
    pub fn tables(&self) -> Vec<&str> {
        let mut v: Vec<&str> = Vec::new();
        for i in &self.intervals {
            for t in [i.table.as_str(), i.pre_agg_table.as_str()] {
                if !v.contains(&t) {
                    v.push(t);
                }
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_agg(s: &str) -> bool {
        ["sum", "count", "min", "max", "avg", "dev"].contains(&s)
    }

    const GOOD: &str = r#"{"aggregationIds":{"sum":0,"count":1,"min":2,"max":3},
      "intervals":[
        {"table":"tsdb","preAggregationTable":"tsdb-agg","interval":"1m","rowSpan":"1h","defaultInterval":true},
        {"table":"tsdb-rollup-1h","preAggregationTable":"tsdb-rollup-agg-1h","interval":"1h","rowSpan":"1n"},
        {"table":"tsdb-rollup-1d","preAggregationTable":"tsdb-rollup-agg-1d","interval":"1d","rowSpan":"1y"}]}"#;

    #[test]
    fn a_good_config_parses() {
        let c = RollupConfig::parse(GOOD, is_agg).unwrap();
        assert_eq!(c.intervals.len(), 3);
        assert_eq!(c.default_interval().interval, "1m");
        let h = c.interval("1h").unwrap();
        assert_eq!(h.interval_seconds, 3600);
        assert_eq!(h.intervals, 768);
        assert_eq!(h.span_unit, SpanUnit::Month);
        assert_eq!(c.interval("1m").unwrap().intervals, 60);
        assert_eq!(c.interval("1d").unwrap().intervals, 366);
        assert_eq!(c.id_for("SUM").unwrap(), 0);
        assert_eq!(c.aggregator_for(3), Some("max"));
        assert_eq!(
            c.interval("13m").unwrap_err().0,
            "No rollups configured for the interval: 13m"
        );
        assert_eq!(
            c.id_for("avg").unwrap_err().0,
            "No ID found mapping to aggregator: avg"
        );
        let m: Vec<&str> = c
            .best_matches(7200)
            .iter()
            .map(|i| i.interval.as_str())
            .collect();
        assert_eq!(m, ["1h", "1m"]);
        assert!(c.best_matches(90).is_empty());
        assert_eq!(c.tables().len(), 6);
    }

    fn refused(json: &str) -> String {
        RollupConfig::parse(json, is_agg).unwrap_err().0
    }

    fn one(interval: &str) -> String {
        format!(r#"{{"aggregationIds":{{"sum":0}},"intervals":[{interval}]}}"#)
    }

    #[test]
    fn bad_configs_are_refused_with_opentsdbs_messages() {
        // TestRollupConfig / TestRollupInterval.
        assert_eq!(
            refused(r#"{"aggregationIds":{"sum":0},"intervals":[]}"#),
            "Rollup config given but no intervals were found."
        );
        assert_eq!(
            refused(&one(r#"{"table":"a","preAggregationTable":"b","interval":"1h","rowSpan":"1d","defaultInterval":true}"#).replace(r#"{"sum":0}"#, "{}")),
            "Rollup config given but no aggegation ID mappings found."
        );
        let iv = |t: &str, p: &str, i: &str, s: &str| {
            refused(&one(&format!(
                r#"{{"table":"{t}","preAggregationTable":"{p}","interval":"{i}","rowSpan":"{s}","defaultInterval":true}}"#
            )))
        };
        assert_eq!(
            iv("", "b", "1h", "1d"),
            "The rollup table cannot be null or empty"
        );
        assert_eq!(
            iv("a", "", "1h", "1d"),
            "The pre-aggregate rollup table cannot be null or empty"
        );
        assert_eq!(iv("a", "b", "1h", "1ms"), "Milliseconds are not supported");
        assert_eq!(
            iv("a", "b", "1h", "2d"),
            "Multipliers are only usable with the 'h' unit"
        );
        assert_eq!(
            iv("a", "b", "1m", "3h"),
            "The multiplier must be 1 or an even value"
        );
        assert_eq!(
            iv("a", "b", "1d", "1d"),
            "Interval [86400] is too large for the span [d]"
        );
        assert_eq!(
            iv("a", "b", "1s", "1d"),
            "Too many intervals [86400] in the span. Must be smaller than [7774] to fit in 14 bits"
        );
        assert_eq!(
            iv("a", "b", "6h", "1d"),
            "Not enough intervals [4] for the span. Must be at least [12]"
        );
        assert_eq!(iv("a", "b", "1m", "1w"), "Unrecogznied span 'w'");
        let two = r#"{"aggregationIds":{"sum":0},"intervals":[
            {"table":"a","preAggregationTable":"b","interval":"1h","rowSpan":"1d","defaultInterval":true},
            {"table":"c","preAggregationTable":"d","interval":"1h","rowSpan":"1n"}]}"#;
        assert!(
            refused(two).starts_with("Only one interval of each type can be configured: table=c")
        );
        let defaults = two.replace(
            r#""interval":"1h","rowSpan":"1n"}"#,
            r#""interval":"1m","rowSpan":"1h","defaultInterval":true}"#,
        );
        assert!(
            refused(&defaults)
                .starts_with("Multiple default intervals configured. Only one is allowed: table=c")
        );
        let no_default = two
            .replace(r#","defaultInterval":true"#, "")
            .replace(r#""1h","rowSpan":"1n""#, r#""1m","rowSpan":"1h""#);
        assert_eq!(
            refused(&no_default),
            "None of the rollup intervals were marked as the \"default\"."
        );
        let ok = r#"{"table":"a","preAggregationTable":"b","interval":"1m","rowSpan":"1h","defaultInterval":true}"#;
        assert_eq!(
            refused(&one(ok).replace(r#""sum":0"#, r#""sum":128"#)),
            "ID for aggregator must be between 0 and 127: sum=128"
        );
        assert_eq!(
            refused(&one(ok).replace(r#""sum":0"#, r#""sum":0,"max":0"#)),
            "Multiple mappings for the ID '0' are not allowed."
        );
        assert_eq!(
            refused(&one(ok).replace(r#""sum":0"#, r#""nosuchagg":1"#)),
            "No such aggregator found for nosuchagg"
        );
    }
}
