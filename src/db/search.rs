//! `Db::search`: the `/api/search` types OpenTSDB leaves to a plugin,
//! answered from the series index, the UID table, meta objects and
//! annotations (query language: [`crate::search`]).

use std::time::Instant;

use super::Db;
use crate::meta::{TsMeta, UidMeta, ts_meta_of, uid_meta_of};
use crate::model::annotation::Annotation;
use crate::model::{Tsuid, UidKind};
use crate::search::{Document, SearchExpr, SearchType};

/// A search as `SearchQuery` carries it.
#[derive(Debug, Clone)]
pub struct SearchRequest {
    pub kind: SearchType,
    pub expr: SearchExpr,
    /// Results per page; zero or less: all.
    pub limit: i64,
    /// Results skipped before the page.
    pub start_index: usize,
}

/// A series as `tsmeta_summary` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesSummary {
    pub tsuid: String,
    pub metric: String,
    pub tags: Vec<(String, String)>,
}

/// One page of results.
#[derive(Debug, Clone)]
pub enum SearchHits {
    TsMeta(Vec<TsMeta>),
    Summaries(Vec<SeriesSummary>),
    Tsuids(Vec<String>),
    UidMeta(Vec<UidMeta>),
    Annotations(Vec<Annotation>),
}

#[derive(Debug, Clone)]
pub struct SearchResults {
    pub hits: SearchHits,
    /// Matches before paging.
    pub total: usize,
    /// Milliseconds taken.
    pub time_ms: f32,
}

/// A series found in the index with its names.
struct NamedSeries {
    tsuid: Tsuid,
    hex: String,
    summary: SeriesSummary,
}

impl Db {
    /// Searches `req.kind` objects: series for `tsmeta` (those with a
    /// stored TSMeta, as a search index holds only stored objects),
    /// `tsmeta_summary` and `tsuids` (every indexed series); UIDs with a
    /// name for `uidmeta`; every stored annotation for `annotation`.
    /// Results come in a stable order (TSUID, kind then name, start
    /// time), paged by `start_index` and `limit`.
    pub fn search(&self, req: &SearchRequest) -> super::Result<SearchResults> {
        let started = Instant::now();
        let page = |total: usize| {
            let from = req.start_index.min(total);
            let to = if req.limit > 0 {
                (from + req.limit as usize).min(total)
            } else {
                total
            };
            from..to
        };
        let (hits, total) = match req.kind {
            SearchType::TsMeta | SearchType::TsMetaSummary | SearchType::Tsuids => {
                let widths = self.store.widths();
                let mut found = Vec::new();
                for series in self.named_series() {
                    let bytes = series.tsuid.to_bytes(&widths);
                    let fields = self.meta.ts_fields(&bytes)?;
                    if req.kind == SearchType::TsMeta && fields.is_none() {
                        continue;
                    }
                    let mut doc = Document::new()
                        .field("tsuid", &series.hex)
                        .field("metric", &series.summary.metric);
                    for (k, v) in &series.summary.tags {
                        doc = doc.field(k, v);
                    }
                    if let Some(f) = &fields {
                        doc = doc
                            .field("description", &f.description)
                            .field("notes", &f.notes)
                            .field("displayName", &f.display_name)
                            .field("units", &f.units)
                            .field("dataType", &f.data_type);
                    }
                    if req.expr.matches(&doc) {
                        found.push((series, bytes));
                    }
                }
                let total = found.len();
                let range = page(total);
                let page = found.into_iter().skip(range.start).take(range.len());
                let hits = match req.kind {
                    SearchType::TsMeta => {
                        let mut out = Vec::new();
                        for (s, bytes) in page {
                            if let Some(m) = ts_meta_of(&*self.meta, self.uids(), &s.tsuid, &bytes)?
                            {
                                out.push(m);
                            }
                        }
                        SearchHits::TsMeta(out)
                    }
                    SearchType::TsMetaSummary => {
                        SearchHits::Summaries(page.map(|(s, _)| s.summary).collect())
                    }
                    _ => SearchHits::Tsuids(page.map(|(s, _)| s.hex).collect()),
                };
                (hits, total)
            }
            SearchType::UidMeta => {
                let mut found = Vec::new();
                for kind in UidKind::ALL {
                    let mut names = self.uids().scan_reverse(kind)?;
                    names.sort_by(|a, b| a.1.cmp(&b.1));
                    for (uid, name) in names {
                        let f = self.meta.uid_meta(kind, uid)?.unwrap_or_default();
                        let doc = Document::new()
                            .field("name", &name)
                            .field("type", kind.type_name())
                            .field("uid", &uid.to_hex(self.uids().width(kind)))
                            .field("description", &f.description)
                            .field("notes", &f.notes)
                            .field("displayName", &f.display_name);
                        if req.expr.matches(&doc) {
                            found.push((kind, uid));
                        }
                    }
                }
                let total = found.len();
                let mut out = Vec::new();
                for (kind, uid) in found
                    .into_iter()
                    .skip(page(total).start)
                    .take(page(total).len())
                {
                    out.push(uid_meta_of(&*self.meta, self.uids(), kind, uid)?);
                }
                (SearchHits::UidMeta(out), total)
            }
            SearchType::Annotation => {
                let mut found: Vec<Annotation> = self
                    .store
                    .all_annotations()?
                    .into_iter()
                    .filter(|a| {
                        let mut doc = Document::new()
                            .field("description", &a.description)
                            .field("notes", &a.notes)
                            .field("tsuid", &a.tsuid);
                        for (k, v) in a.custom.iter().flatten() {
                            doc = doc.field(k, v);
                        }
                        req.expr.matches(&doc)
                    })
                    .collect();
                found.sort_by(|a, b| (a.start_ms(), &a.tsuid).cmp(&(b.start_ms(), &b.tsuid)));
                let total = found.len();
                let range = page(total);
                let out = found
                    .into_iter()
                    .skip(range.start)
                    .take(range.len())
                    .collect();
                (SearchHits::Annotations(out), total)
            }
        };
        Ok(SearchResults {
            hits,
            total,
            time_ms: started.elapsed().as_secs_f32() * 1000.0,
        })
    }

    /// Every indexed series whose names resolve, by TSUID.
    fn named_series(&self) -> Vec<NamedSeries> {
        let widths = self.store.widths();
        let mut out = Vec::new();
        for metric in self.index.metrics() {
            let Ok(metric_name) = self.uids().get_name(UidKind::Metric, metric) else {
                continue;
            };
            'series: for tsuid in self.index.series_of(metric) {
                let mut tags = Vec::with_capacity(tsuid.tags.len());
                for (k, v) in &tsuid.tags {
                    let (Ok(k), Ok(v)) = (
                        self.uids().get_name(UidKind::TagKey, *k),
                        self.uids().get_name(UidKind::TagValue, *v),
                    ) else {
                        continue 'series;
                    };
                    tags.push((k.to_string(), v.to_string()));
                }
                let hex = tsuid.to_hex(&widths);
                out.push(NamedSeries {
                    summary: SeriesSummary {
                        tsuid: hex.clone(),
                        metric: metric_name.to_string(),
                        tags,
                    },
                    hex,
                    tsuid,
                });
            }
        }
        out.sort_by(|a, b| a.hex.cmp(&b.hex));
        out
    }
}
