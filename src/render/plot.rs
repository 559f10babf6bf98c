//! What one picture shows ([`Plot`]): its time range and zone, its
//! options, one [`PlotSeries`] per line and the annotations ([`Note`]);
//! and which points are drawn (NaN skipped, infinity refused as OpenTSDB
//! refuses it).

use chrono_tz::Tz;

use super::options::PlotParams;
use crate::model::Value;
use crate::model::java::{double_to_string, map_to_string};

/// One plotted line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PlotSeries {
    pub metric: String,
    /// In the order OpenTSDB's tag map iterates (a `HashMap` filled in
    /// tag key UID order).
    pub tags: Vec<(String, String)>,
    /// Timestamps in ms, within the query's range.
    pub points: Vec<(i64, Value)>,
    /// On the right-hand axis (`o=axis x1y2`).
    pub right_axis: bool,
}

impl PlotSeries {
    /// Gnuplot's title: `metric{k=v, ...}` (`Map.toString`).
    pub(crate) fn title(&self) -> String {
        format!(
            "{}{}",
            self.metric,
            map_to_string(self.tags.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        )
    }
}

/// An annotation's place and text on the chart.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Note {
    pub start_s: i64,
    pub text: String,
}

/// Everything one picture shows.
#[derive(Debug, Clone)]
pub(crate) struct Plot {
    pub start_s: i64,
    pub end_s: i64,
    pub tz: Tz,
    pub params: PlotParams,
    pub series: Vec<PlotSeries>,
    pub notes: Vec<Note>,
}

/// A value OpenTSDB refuses to plot (`IllegalStateException`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("Infinity found in datapoints #{series}: {value}")]
pub(crate) struct InfiniteValue {
    pub series: usize,
    pub value: String,
}

/// A point as plotted: NaN is skipped, infinity refused.
pub(crate) fn plotted(i: usize, v: Value) -> Result<Option<f64>, InfiniteValue> {
    match v {
        Value::Int(n) => Ok(Some(n as f64)),
        Value::Float(f) if f.is_nan() => Ok(None),
        Value::Float(f) if f.is_infinite() => Err(InfiniteValue {
            series: i,
            value: double_to_string(f),
        }),
        Value::Float(f) => Ok(Some(f)),
    }
}

impl Plot {
    /// `Plot.dumpToFiles`' count: the points drawn within the range.
    pub(crate) fn plotted_points(&self) -> Result<u64, InfiniteValue> {
        let mut n = 0;
        for (i, s) in self.series.iter().enumerate() {
            for &(ts, v) in &s.points {
                let secs = ts / 1000;
                if plotted(i, v)?.is_some() && secs >= self.start_s && secs <= self.end_s {
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    /// The points of series `i` to draw, in seconds.
    pub(crate) fn xy(&self, i: usize) -> Vec<(f64, f64)> {
        self.series[i]
            .points
            .iter()
            .filter_map(|&(ts, v)| {
                plotted(i, v)
                    .ok()
                    .flatten()
                    .map(|y| ((ts / 1000) as f64, y))
            })
            .collect()
    }
}
