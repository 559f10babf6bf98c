//! What PromQL computes with: label sets, samples, instant vectors,
//! range vectors, and Prometheus' stale marker.

use std::fmt;

/// The label that holds a series' metric name.
pub const METRIC_NAME: &str = "__name__";

/// The bits of Prometheus' stale marker: a NaN that says "this series
/// ended here" (a scrape target went away, a rule stopped producing it).
/// Stored as written; a selector that meets it sees no sample.
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

/// The stale marker as a float.
pub fn stale_nan() -> f64 {
    f64::from_bits(STALE_NAN_BITS)
}

/// Whether `v` is the stale marker (compared by bits: every other NaN is
/// an ordinary value).
pub fn is_stale_nan(v: f64) -> bool {
    v.to_bits() == STALE_NAN_BITS
}

/// One label.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Label {
    pub name: String,
    pub value: String,
}

/// A series' labels, sorted by name (byte order, as Prometheus sorts
/// them), each name once, no empty value; `__name__` is one of them when
/// the series has a name.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Labels(Vec<Label>);

impl Labels {
    /// Labels from pairs in any order; empty values are dropped (an empty
    /// label is the same as no label in Prometheus); a name given twice
    /// keeps its last value.
    pub fn from_pairs<N: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (N, V)>,
    ) -> Labels {
        let mut v: Vec<Label> = pairs
            .into_iter()
            .map(|(n, v)| Label {
                name: n.into(),
                value: v.into(),
            })
            .filter(|l| !l.value.is_empty())
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        // Keep the last of equal names: dedup_by keeps the first, so walk
        // reversed runs.
        v.reverse();
        v.dedup_by(|a, b| a.name == b.name);
        v.reverse();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        Labels(v)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Label> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value of `name`, or "" when the series has no such label (as
    /// Prometheus' `Labels.Get`).
    pub fn get(&self, name: &str) -> &str {
        self.0
            .binary_search_by(|l| l.name.as_str().cmp(name))
            .map(|i| self.0[i].value.as_str())
            .unwrap_or("")
    }

    /// The metric name, "" when there is none.
    pub fn metric_name(&self) -> &str {
        self.get(METRIC_NAME)
    }

    /// Sets `name` to `value`; an empty value removes the label.
    pub fn set(&mut self, name: &str, value: &str) {
        match self.0.binary_search_by(|l| l.name.as_str().cmp(name)) {
            Ok(i) if value.is_empty() => {
                self.0.remove(i);
            }
            Ok(i) => self.0[i].value = value.to_string(),
            Err(_) if value.is_empty() => {}
            Err(i) => self.0.insert(
                i,
                Label {
                    name: name.to_string(),
                    value: value.to_string(),
                },
            ),
        }
    }

    /// Removes `name` if present.
    pub fn remove(&mut self, name: &str) {
        if let Ok(i) = self.0.binary_search_by(|l| l.name.as_str().cmp(name)) {
            self.0.remove(i);
        }
    }

    /// These labels without `__name__`.
    pub fn without_name(&self) -> Labels {
        let mut l = self.clone();
        l.remove(METRIC_NAME);
        l
    }
}

impl fmt::Display for Labels {
    /// `{a="b", c="d"}` as Prometheus prints a label set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, l) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}={:?}", l.name, l.value)?;
        }
        f.write_str("}")
    }
}

/// One sample: a time in epoch milliseconds and a value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub t: i64,
    pub v: f64,
}

/// One element of an instant vector: a series and its sample at the
/// evaluation time (`t` is the evaluation time, except where Prometheus
/// keeps the stored sample's own, as `timestamp()` reads it).
#[derive(Debug, Clone, PartialEq)]
pub struct VectorSample {
    pub labels: Labels,
    pub t: i64,
    pub v: f64,
}

/// One series of a range vector or of a range query's answer: its labels
/// and its samples in time order.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub labels: Labels,
    pub samples: Vec<Sample>,
}

/// What a query evaluates to, as the HTTP API reports it (`resultType`).
#[derive(Debug, Clone, PartialEq)]
pub enum QueryValue {
    Scalar(Sample),
    String { t: i64, value: String },
    Vector(Vec<VectorSample>),
    Matrix(Vec<Series>),
}
