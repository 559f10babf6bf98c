//! What PromQL computes with: label sets, samples, instant vectors,
//! range vectors, and Prometheus' stale marker.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, OnceLock};

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

/// A float as Go's `strconv.FormatFloat(v, 'f', -1, 64)` writes it, which
/// is how Prometheus writes a scalar's value and a `count_values` label:
/// the shortest digits that read back the same, never an exponent; `NaN`,
/// `+Inf`, `-Inf`, and `-0` for negative zero.
pub fn format_float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        // Rust's Display is the shortest round-trip digits in plain
        // notation, as Go's 'f' with precision -1.
        format!("{v}")
    }
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
///
/// Shared and hashed once: the evaluator copies a series' labels into
/// every step's vector and looks label sets up in maps at every step, so
/// a clone is a reference count and a hash is one stored number.
#[derive(Clone)]
pub struct Labels(Arc<LabelsInner>);

#[derive(Clone)]
struct LabelsInner {
    labels: Vec<Label>,
    hash: u64,
    /// The set without `__name__`, built the first time it is asked for:
    /// most functions and operators drop the name of every series at
    /// every step, and sharing one set keeps that a reference count
    /// (and keeps later map lookups of it a pointer comparison).
    unnamed: OnceLock<Labels>,
}

impl LabelsInner {
    fn new(labels: Vec<Label>) -> LabelsInner {
        let hash = hash_labels(&labels);
        LabelsInner {
            labels,
            hash,
            unnamed: OnceLock::new(),
        }
    }
}

/// A hash of the names and values with separators no label contains
/// (0xff is not UTF-8), so that `a="bc"` and `ab="c"` differ.
fn hash_labels(labels: &[Label]) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for l in labels {
        h.update(l.name.as_bytes());
        h.update(&[0xff]);
        h.update(l.value.as_bytes());
        h.update(&[0xff]);
    }
    h.digest()
}

impl Default for Labels {
    fn default() -> Self {
        Labels::from_sorted(Vec::new())
    }
}

impl fmt::Debug for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.labels.iter()).finish()
    }
}

impl PartialEq for Labels {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || (self.0.hash == other.0.hash && self.0.labels == other.0.labels)
    }
}

impl Eq for Labels {}

impl PartialOrd for Labels {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Labels {
    /// Label by label, name then value, a prefix first: the order of
    /// Prometheus' `labels.Compare`, which sorts a range query's answer.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.labels.cmp(&other.0.labels)
    }
}

impl Hash for Labels {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.0.hash);
    }
}

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
        // A stable sort keeps equal names in the order given; keep the
        // last of each run.
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v.reverse();
        v.dedup_by(|a, b| a.name == b.name);
        v.reverse();
        Labels::from_sorted(v)
    }

    /// Labels from a list already sorted by name, each name once, no
    /// empty value (the caller's promise; the evaluator builds such lists
    /// by filtering sorted labels).
    pub fn from_sorted(labels: Vec<Label>) -> Labels {
        Labels(Arc::new(LabelsInner::new(labels)))
    }

    pub fn iter(&self) -> impl Iterator<Item = &Label> {
        self.0.labels.iter()
    }

    pub fn len(&self) -> usize {
        self.0.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.labels.is_empty()
    }

    /// The value of `name`, or "" when the series has no such label (as
    /// Prometheus' `Labels.Get`).
    pub fn get(&self, name: &str) -> &str {
        let v = &self.0.labels;
        v.binary_search_by(|l| l.name.as_str().cmp(name))
            .map(|i| v[i].value.as_str())
            .unwrap_or("")
    }

    /// Whether the series has label `name`.
    pub fn has(&self, name: &str) -> bool {
        self.0
            .labels
            .binary_search_by(|l| l.name.as_str().cmp(name))
            .is_ok()
    }

    /// The metric name, "" when there is none.
    pub fn metric_name(&self) -> &str {
        self.get(METRIC_NAME)
    }

    /// Sets `name` to `value`; an empty value removes the label.
    pub fn set(&mut self, name: &str, value: &str) {
        let pos = self
            .0
            .labels
            .binary_search_by(|l| l.name.as_str().cmp(name));
        match pos {
            Ok(i) if value.is_empty() => {
                self.edit(|v| {
                    v.remove(i);
                });
            }
            Ok(i) if self.0.labels[i].value == value => {}
            Ok(i) => self.edit(|v| v[i].value = value.to_string()),
            Err(_) if value.is_empty() => {}
            Err(i) => self.edit(|v| {
                v.insert(
                    i,
                    Label {
                        name: name.to_string(),
                        value: value.to_string(),
                    },
                )
            }),
        }
    }

    /// Removes `name` if present.
    pub fn remove(&mut self, name: &str) {
        if let Ok(i) = self
            .0
            .labels
            .binary_search_by(|l| l.name.as_str().cmp(name))
        {
            self.edit(|v| {
                v.remove(i);
            });
        }
    }

    /// These labels without `__name__`.
    pub fn without_name(&self) -> Labels {
        if !self.has(METRIC_NAME) {
            return self.clone();
        }
        self.0
            .unnamed
            .get_or_init(|| self.filter(|n| n != METRIC_NAME))
            .clone()
    }

    /// Only the labels whose names are in `names` (Prometheus'
    /// `Builder.Keep`).
    pub fn keep(&self, names: &[String]) -> Labels {
        self.filter(|n| names.iter().any(|k| k == n))
    }

    /// The labels whose names are not in `names` (Prometheus'
    /// `Builder.Del`).
    pub fn drop_names(&self, names: &[String]) -> Labels {
        self.filter(|n| !names.iter().any(|k| k == n))
    }

    /// The labels whose name passes `pred`; the same shared set when all
    /// pass.
    pub fn filter(&self, pred: impl Fn(&str) -> bool) -> Labels {
        if self.0.labels.iter().all(|l| pred(&l.name)) {
            return self.clone();
        }
        Labels::from_sorted(
            self.0
                .labels
                .iter()
                .filter(|l| pred(&l.name))
                .cloned()
                .collect(),
        )
    }

    fn edit(&mut self, f: impl FnOnce(&mut Vec<Label>)) {
        let inner = Arc::make_mut(&mut self.0);
        f(&mut inner.labels);
        inner.hash = hash_labels(&inner.labels);
        // Derived from the labels before the edit.
        inner.unnamed = OnceLock::new();
    }
}

impl fmt::Display for Labels {
    /// `{a="b", c="d"}` as Prometheus prints a label set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, l) in self.0.labels.iter().enumerate() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn floats_as_go_formats_them() {
        assert_eq!(format_float(1.0), "1");
        assert_eq!(format_float(0.1), "0.1");
        assert_eq!(format_float(1e21), "1000000000000000000000");
        assert_eq!(format_float(1.5e-7), "0.00000015");
        assert_eq!(format_float(-0.0), "-0");
        assert_eq!(format_float(f64::INFINITY), "+Inf");
        assert_eq!(format_float(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_float(f64::NAN), "NaN");
    }

    #[test]
    fn labels_stay_sorted_unique_and_hash_with_their_content() {
        let l = Labels::from_pairs([("b", "1"), ("a", "x"), ("b", "2"), ("c", "")]);
        assert_eq!(l.to_string(), "{a=\"x\", b=\"2\"}");
        let mut m = l.clone();
        m.set("c", "3");
        m.remove("a");
        m.set("b", "2");
        let fresh = Labels::from_pairs([("c", "3"), ("b", "2")]);
        assert_eq!(m, fresh);
        let set: HashSet<Labels> = [m.clone(), fresh].into_iter().collect();
        assert_eq!(set.len(), 1, "equal label sets hash alike");
        // The clone taken before the edits is unchanged.
        assert_eq!(l.get("a"), "x");
        assert!(l < m, "a sorts before b");
        assert_eq!(m.keep(&["c".to_string()]), Labels::from_pairs([("c", "3")]));
        assert_eq!(m.drop_names(&["c".to_string()]).to_string(), "{b=\"2\"}");
        assert!(!Labels::from_pairs([("a", "bc")]).eq(&Labels::from_pairs([("ab", "c")])));
    }
}
