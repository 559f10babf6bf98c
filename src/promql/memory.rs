//! An in-memory [`Storage`]: series held in a vector, matched by
//! scanning. For tests of the evaluator and of the HTTP API, where the
//! answer must not depend on the database.

use std::collections::{BTreeSet, HashMap};

use promql_parser::label::Matcher;

use super::error::PromError;
use super::storage::{Storage, StoredSeries};
use super::value::{Labels, Sample};

/// Series and their samples, kept in memory.
#[derive(Debug, Clone, Default)]
pub struct MemoryStorage {
    series: Vec<StoredSeries>,
    /// Where each series is in `series`.
    index: HashMap<Labels, usize>,
}

impl MemoryStorage {
    pub fn new() -> MemoryStorage {
        MemoryStorage::default()
    }

    /// Adds samples to the series `labels` (created if new); samples are
    /// kept in time order, a second sample at a time replacing the
    /// first (the last write wins, as in the database).
    pub fn add(&mut self, labels: Labels, samples: impl IntoIterator<Item = Sample>) {
        let i = match self.index.get(&labels) {
            Some(&i) => i,
            None => {
                self.index.insert(labels.clone(), self.series.len());
                self.series.push(StoredSeries {
                    labels,
                    samples: Vec::new(),
                });
                self.series.len() - 1
            }
        };
        let s = &mut self.series[i].samples;
        for sample in samples {
            match s.binary_search_by_key(&sample.t, |x| x.t) {
                Ok(j) => s[j] = sample,
                Err(j) => s.insert(j, sample),
            }
        }
    }

    /// Adds a series from `(name, value)` pairs and `(ms, value)` points.
    pub fn add_series(&mut self, labels: &[(&str, &str)], points: &[(i64, f64)]) {
        self.add(
            Labels::from_pairs(labels.iter().copied()),
            points.iter().map(|&(t, v)| Sample { t, v }),
        );
    }

    fn matching<'a>(
        &'a self,
        matchers: &'a [Matcher],
        start_ms: i64,
        end_ms: i64,
    ) -> impl Iterator<Item = (&'a StoredSeries, &'a [Sample])> + 'a {
        self.series.iter().filter_map(move |s| {
            if !matchers.iter().all(|m| m.is_match(s.labels.get(&m.name))) {
                return None;
            }
            let from = s.samples.partition_point(|x| x.t < start_ms);
            let to = s.samples.partition_point(|x| x.t <= end_ms);
            (from < to).then(|| (s, &s.samples[from..to]))
        })
    }

    fn labels_of(&self, sets: &[Vec<Matcher>], start_ms: i64, end_ms: i64) -> BTreeSet<Labels> {
        let mut out = BTreeSet::new();
        if sets.is_empty() {
            out.extend(
                self.matching(&[], start_ms, end_ms)
                    .map(|(s, _)| s.labels.clone()),
            );
        }
        for set in sets {
            out.extend(
                self.matching(set, start_ms, end_ms)
                    .map(|(s, _)| s.labels.clone()),
            );
        }
        out
    }
}

impl Storage for MemoryStorage {
    fn select(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<StoredSeries>, PromError> {
        let mut out: Vec<StoredSeries> = self
            .matching(matchers, start_ms, end_ms)
            .map(|(s, samples)| StoredSeries {
                labels: s.labels.clone(),
                samples: samples.to_vec(),
            })
            .collect();
        out.sort_by(|a, b| a.labels.cmp(&b.labels));
        Ok(out)
    }

    fn series(
        &self,
        sets: &[Vec<Matcher>],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<Labels>, PromError> {
        Ok(self.labels_of(sets, start_ms, end_ms).into_iter().collect())
    }

    fn label_names(
        &self,
        sets: &[Vec<Matcher>],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<String>, PromError> {
        let names: BTreeSet<String> = self
            .labels_of(sets, start_ms, end_ms)
            .iter()
            .flat_map(|l| l.iter().map(|x| x.name.clone()).collect::<Vec<_>>())
            .collect();
        Ok(names.into_iter().collect())
    }

    fn label_values(
        &self,
        name: &str,
        sets: &[Vec<Matcher>],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<String>, PromError> {
        let values: BTreeSet<String> = self
            .labels_of(sets, start_ms, end_ms)
            .iter()
            .map(|l| l.get(name).to_string())
            .filter(|v| !v.is_empty())
            .collect();
        Ok(values.into_iter().collect())
    }
}
