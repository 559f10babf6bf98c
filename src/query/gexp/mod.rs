//! `/api/query/gexp`: Graphite-style functions over `m`-style sub-queries
//! (`exp=scale(sum:if.bytes_in{host=*},1024)`), as OpenTSDB 2.4.1's
//! `QueryRpc.handleQuery` with expressions, `ExpressionTree` and the
//! function classes compute them.
//!
//! The request is an `/api/query` GET: `start`, `end` and the same flags,
//! plus `exp=` (repeatable). The metric queries inside the expressions
//! are added to the query after its `m=`/`tsuid=` ones and the whole query
//! runs once through the query engine; then each expression is evaluated
//! over the groups of its sub-queries, and only the expressions' series
//! are answered, in `/api/query`'s format.
//!
//! The answer's metric names are *not* the expression text (as the
//! behaviour map `opentsdb.md`, section 1.4, says): a function's series
//! keeps the metric of the series it came from, `alias` names it, and the
//! cross-series functions (`sumSeries`, ...) print the metric with the
//! smallest UID among those they joined (`EDPtoDPS.metricNameAsync`).
//!
//! Kept from 2.4.1 though odd, because its tests assert them or the
//! answers are still usable: `alias` takes absolute values; the top-n
//! functions rank by values stored per position among the series running
//! at a timestamp ([`functions::highest`]); a function given no series
//! argument answers nothing without checking its parameters; a bare
//! parameter before a series argument fails with `Unknown parameter type`.
//!
//! Differences from 2.4.1, each a client's mistake 2.4.1 answers badly or
//! a plain bug that leaves a documented function unusable:
//! - a syntax error or unknown function is a 400 (2.4.1: 500, or a
//!   dropped connection for characters no token accepts);
//! - a metric argument is matched to its own sub-query. 2.4.1 looks the
//!   results up by the metric's position among the expressions' metrics,
//!   which points at the wrong results when the request also has `m=`
//!   parameters and past the end when a metric query repeats;
//! - `timeShift` works and the cross-series functions match points by
//!   timestamp (see [`functions::time_shift`], [`functions::combine`]);
//! - `firstDiff` exists (from 2.5; [`functions::first_diff`]);
//! - a POST is refused with a 400; 2.4.1 runs its JSON query, then fails
//!   on its missing expressions without answering.

pub(crate) mod functions;
pub(crate) mod parser;

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use super::cache::QueryCache;
use super::context::QueryContext;
use super::downsample::FillPolicy;
use super::error::QueryError;
use super::group::Scratch;
use super::output::{QueryResponse, QueryResult};
use super::request::{self, TsQuery, TsSubQuery, ValidQuery};
use super::{engine, results};
use crate::model::{Annotation, Uid, UidKind, Value};
use functions::{Op, Range, Rank};
use parser::{Param, Tree};

/// A `new HashMap<>()`'s expected size: the tag map of a cross-series
/// result is built with it (its iteration order matters to `alias`).
pub(crate) const DEFAULT_MAP_SIZE: usize = 16;

/// The functions 2.4.1's `ExpressionFactory` registers (with their second
/// names), plus `firstDiff` from 2.5. Names are case-sensitive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Function {
    Absolute,
    Alias,
    DiffSeries,
    DivideSeries,
    FirstDiff,
    HighestCurrent,
    HighestMax,
    MovingAverage,
    MultiplySeries,
    Scale,
    SumSeries,
    TimeShift,
}

impl Function {
    pub(crate) fn by_name(name: &str) -> Option<Function> {
        use Function::*;
        Some(match name {
            "absolute" => Absolute,
            "alias" => Alias,
            "diffSeries" | "difference" => DiffSeries,
            "divideSeries" | "divide" => DivideSeries,
            "firstDiff" => FirstDiff,
            "highestCurrent" => HighestCurrent,
            "highestMax" => HighestMax,
            "movingAverage" => MovingAverage,
            "multiplySeries" | "multiply" => MultiplySeries,
            "scale" => Scale,
            "sumSeries" | "sum" => SumSeries,
            "timeShift" | "shift" => TimeShift,
            _ => return None,
        })
    }

    /// The name `writeStringField` prints (`timeshift` in lower case).
    fn label(self) -> &'static str {
        use Function::*;
        match self {
            Absolute => "absolute",
            Alias => "alias",
            DiffSeries => "diffSeries",
            DivideSeries => "divideSeries",
            FirstDiff => "firstDiff",
            HighestCurrent => "highestCurrent",
            HighestMax => "highestMax",
            MovingAverage => "movingAverage",
            MultiplySeries => "multiplySeries",
            Scale => "scale",
            SumSeries => "sumSeries",
            TimeShift => "timeshift",
        }
    }
}

/// The iteration order of a `java.util.HashMap<Integer, _>` created with
/// the default capacity and filled with `keys` in order.
fn int_hashmap_order(keys: &[usize]) -> Vec<usize> {
    let mut cap = DEFAULT_MAP_SIZE;
    for size in 1..=keys.len() {
        if size * 4 > cap * 3 {
            cap *= 2;
        }
    }
    let mut order: Vec<(usize, usize, usize)> = keys
        .iter()
        .enumerate()
        .map(|(i, &k)| ((k ^ (k >> 16)) & (cap - 1), i, k))
        .collect();
    order.sort_unstable();
    order.into_iter().map(|(_, _, k)| k).collect()
}

/// `ExpressionTree.toString()`: the function with its sub-expressions,
/// then its metrics (short names), then for `alias` its parameters. It is
/// part of an error message.
impl fmt::Display for Tree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        let mut metrics: Vec<(usize, &str)> = Vec::new();
        let mut names: Vec<&str> = Vec::new();
        for p in &self.params {
            match p {
                Param::Expression(t) => parts.push(t.to_string()),
                Param::Metric { text, global } => metrics.push((*global, text)),
                Param::Name(n) => names.push(n),
            }
        }
        let keys: Vec<usize> = metrics.iter().map(|m| m.0).collect();
        let cleaned: Vec<String> = int_hashmap_order(&keys)
            .into_iter()
            .filter_map(|k| metrics.iter().find(|m| m.0 == k))
            .map(|m| short_metric(m.1))
            .collect();
        let cleaned = cleaned.join(",");
        if !cleaned.is_empty() {
            parts.push(cleaned);
        }
        let inner = parts.join(",");
        match self.function {
            Function::Alias if !names.is_empty() => write!(f, "alias({inner},{})", names.join(",")),
            other => write!(f, "{}({inner})", other.label()),
        }
    }
}

/// A metric query as `ExpressionTree.clean` shortens it: the tags
/// dropped (from the first `{` to the last `}`), then only what follows
/// the last `:`.
fn short_metric(text: &str) -> String {
    let s = match (text.find('{'), text.rfind('}')) {
        (Some(a), Some(b)) if b > a => format!("{}{}", &text[..a], &text[b + 1..]),
        _ => text.to_string(),
    };
    match s.rfind(':') {
        Some(i) => s[i + 1..].to_string(),
        None => s,
    }
}

/// A tag of a series with its UIDs (the join key of the cross-series
/// functions is made of the UIDs).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TagPair {
    pub k: Uid,
    pub v: Uid,
    pub k_name: String,
    pub v_name: String,
}

/// One series as the functions pass it on: a query's group or a
/// function's result, with what 2.4.1's `DataPoints` would answer.
#[derive(Debug, Clone, Default)]
pub(crate) struct Series {
    /// The name to print; `None` for a cross-series result, named after
    /// `metric_uid` when printed.
    pub metric: Option<String>,
    /// `metricUID()`: `None` for an aliased series (an empty array).
    pub metric_uid: Option<Uid>,
    /// `getTags()`, in tag key UID order (an alias has none).
    pub tags: Vec<(String, String)>,
    /// The expected size the tag `HashMap` was created with.
    pub tags_map_size: usize,
    /// `getTagUids()`: kept by `alias`, sorted by tag key UID.
    pub join_tags: Vec<TagPair>,
    /// `aggregateTags` as printed.
    pub aggregate_tags: Vec<String>,
    /// Their UIDs, sorted.
    pub aggregate_tag_uids: Vec<Uid>,
    pub tsuids: Vec<String>,
    /// `None`: no annotation list (nothing printed); `Some`: a list,
    /// printed even when empty.
    pub annotations: Option<Vec<Annotation>>,
    /// The sub-query whose settings (fill policy, `showQuery`) apply.
    pub query_index: usize,
    pub dps: Vec<(i64, Value)>,
}

/// A failure while evaluating: 2.4.1 answers exceptions thrown after the
/// queries ran with a 400 whose message and details are both the
/// exception's message.
pub(crate) fn failed(message: impl Into<String>) -> QueryError {
    let message = message.into();
    QueryError::BadRequest {
        details: Some(message.clone()),
        message,
    }
}

/// A parsed `/api/query/gexp` request.
#[derive(Debug, Clone)]
pub struct GexpQuery {
    /// The query to run: the `tsuid=`/`m=` sub-queries, then the
    /// expressions' metric queries, duplicates removed.
    pub query: TsQuery,
    expressions: Vec<Tree>,
    /// Each metric query text → its sub-query's index in `query`.
    metric_index: HashMap<String, usize>,
}

/// Parses a gexp query string: `/api/query`'s GET parameters plus `exp=`.
pub fn parse_gexp(qs: &str) -> Result<GexpQuery, QueryError> {
    let mut expressions = Vec::new();
    let mut metric_texts: Vec<String> = Vec::new();
    let query = request::parse_get_with(qs, |pairs| {
        // Every expression is parsed before any of their metric queries.
        let mut count = 0;
        for (k, v) in pairs {
            if k != "exp" {
                continue;
            }
            let tree = parser::parse(v, count).map_err(|e| QueryError::bad(e.to_string()))?;
            let mut metrics = Vec::new();
            tree.metric_queries(&mut metrics);
            count += metrics.len();
            metric_texts.extend(metrics.into_iter().map(String::from));
            expressions.push(tree);
        }
        let mut subs = Vec::with_capacity(metric_texts.len());
        for m in &metric_texts {
            subs.push(request::parse_m_subquery(m)?);
        }
        Ok(subs)
    })?;
    let mut metric_index = HashMap::new();
    for m in metric_texts {
        let sub: TsSubQuery = request::parse_m_subquery(&m)?;
        if let Some(i) = query.queries.iter().position(|q| *q == sub) {
            metric_index.insert(m, i);
        }
    }
    Ok(GexpQuery {
        query,
        expressions,
        metric_index,
    })
}

/// The series of one query result, with the UIDs of its names.
fn input_series(ctx: &QueryContext, r: QueryResult) -> Result<Series, QueryError> {
    let mut join_tags = Vec::with_capacity(r.tags.len());
    for (k, v) in &r.tags {
        join_tags.push(TagPair {
            k: ctx.uids.get_id(UidKind::TagKey, k)?,
            v: ctx.uids.get_id(UidKind::TagValue, v)?,
            k_name: k.clone(),
            v_name: v.clone(),
        });
    }
    join_tags.sort_by_key(|t| t.k);
    let mut aggregate_tag_uids = Vec::with_capacity(r.aggregate_tags.len());
    for k in &r.aggregate_tags {
        aggregate_tag_uids.push(ctx.uids.get_id(UidKind::TagKey, k)?);
    }
    aggregate_tag_uids.sort();
    Ok(Series {
        metric_uid: Some(ctx.uids.get_id(UidKind::Metric, &r.metric)?),
        metric: Some(r.metric),
        tags: join_tags
            .iter()
            .map(|t| (t.k_name.clone(), t.v_name.clone()))
            .collect(),
        tags_map_size: join_tags.len(),
        join_tags,
        aggregate_tags: r.aggregate_tags,
        aggregate_tag_uids,
        tsuids: r.tsuids,
        annotations: (!r.annotations.is_empty()).then_some(r.annotations),
        query_index: r.query_index,
        dps: r.dps,
    })
}

struct Evaluator<'a, 'c> {
    ctx: &'a QueryContext<'c>,
    /// Each sub-query's groups.
    inputs: Vec<Vec<Series>>,
    metric_index: &'a HashMap<String, usize>,
    range: Range,
    scratch: Scratch,
}

impl Evaluator<'_, '_> {
    /// `ExpressionTree.evaluate`: the series arguments in order, then the
    /// function. A bare parameter before the last series argument leaves a
    /// hole 2.4.1 reports as `Unknown parameter type: null`.
    fn evaluate(&mut self, tree: &Tree) -> Result<Vec<Series>, QueryError> {
        let series_params = tree
            .params
            .iter()
            .filter(|p| !matches!(p, Param::Name(_)))
            .count();
        let mut args = Vec::with_capacity(series_params);
        for p in &tree.params[..series_params] {
            match p {
                Param::Expression(t) => args.push(self.evaluate(t)?),
                Param::Metric { text, .. } => {
                    let i =
                        self.metric_index.get(text).copied().ok_or_else(|| {
                            QueryError::Storage(format!("no sub-query for {text}"))
                        })?;
                    args.push(self.inputs.get(i).cloned().unwrap_or_default());
                }
                Param::Name(_) => {
                    return Err(failed(format!(
                        "Unknown parameter type: null in tree: {tree}"
                    )));
                }
            }
        }
        let names: Vec<String> = tree
            .params
            .iter()
            .filter_map(|p| match p {
                Param::Name(n) => Some(n.clone()),
                _ => None,
            })
            .collect();
        let ctx = self.ctx;
        let mut uid_name = |u: Uid| -> Result<String, QueryError> {
            Ok(ctx.uids.get_name(UidKind::TagKey, u)?.to_string())
        };
        use Function::*;
        match tree.function {
            Absolute => Ok(functions::absolute(args)),
            Alias => functions::alias(args, &names),
            Scale => functions::scale(args, &names),
            MovingAverage => functions::moving_average_fn(args, &names, self.range),
            TimeShift => functions::time_shift(args, &names),
            FirstDiff => Ok(functions::first_diff(args)),
            HighestCurrent => {
                functions::highest(args, &names, Rank::Current, self.range, &mut self.scratch)
            }
            HighestMax => {
                functions::highest(args, &names, Rank::Max, self.range, &mut self.scratch)
            }
            SumSeries => functions::combine(args, Op::Sum, &mut uid_name),
            DiffSeries => functions::combine(args, Op::Diff, &mut uid_name),
            MultiplySeries => functions::combine(args, Op::Multiply, &mut uid_name),
            DivideSeries => functions::combine(args, Op::Divide, &mut uid_name),
        }
    }
}

/// Runs a gexp request: the query once, then every expression over its
/// results (through `cache` when there is one). The response holds the
/// expressions' series only.
pub fn execute_gexp(
    ctx: &QueryContext,
    q: &GexpQuery,
    cache: Option<&QueryCache>,
) -> Result<QueryResponse, QueryError> {
    let valid: ValidQuery = q.query.validate(ctx.now_ms, ctx.default_tz)?;
    let mut response = engine::execute(ctx, &q.query, cache)?;
    let mut inputs: Vec<Vec<Series>> = vec![Vec::new(); valid.queries.len()];
    let mut stats: BTreeMap<usize, serde_json::Value> = BTreeMap::new();
    for r in std::mem::take(&mut response.results) {
        if let Some(s) = &r.stats {
            stats.entry(r.query_index).or_insert_with(|| s.clone());
        }
        let i = r.query_index;
        if let Some(slot) = inputs.get_mut(i) {
            slot.push(input_series(ctx, r)?);
        }
    }
    let mut ev = Evaluator {
        ctx,
        inputs,
        metric_index: &q.metric_index,
        range: Range {
            start_ms: valid.start_ms,
            end_ms: valid.end_ms,
        },
        scratch: Scratch::default(),
    };
    let mut computed = Vec::new();
    for tree in &q.expressions {
        computed.extend(ev.evaluate(tree)?);
    }
    let metric_width = ctx.uids.width(UidKind::Metric).bytes();
    let mut results = Vec::with_capacity(computed.len());
    for s in computed {
        let metric = match (s.metric, s.metric_uid) {
            (Some(m), _) => m,
            (None, Some(uid)) => ctx.uids.get_name(UidKind::Metric, uid)?.to_string(),
            // A cross-series result over an aliased series: 2.4.1 looks
            // up the alias's empty metric UID when printing it.
            (None, None) => {
                return Err(failed(format!(
                    "Wrong id.length = 0 which is != {metric_width} required for 'metrics'"
                )));
            }
        };
        let sub = valid.queries.get(s.query_index);
        let nan_as_null = sub
            .and_then(|v| v.downsample.as_ref())
            .is_some_and(|d| d.fill == FillPolicy::Null);
        let query = sub.filter(|_| q.query.show_query).map(results::show_query);
        let (annotations, show_empty) = match s.annotations {
            Some(list) => (list, !q.query.no_annotations),
            None => (Vec::new(), false),
        };
        let mut dps = s.dps;
        dps.retain(|p| p.0 >= valid.start_ms && p.0 <= valid.end_ms);
        results.push(QueryResult {
            metric,
            tags: s.tags.into_iter().collect(),
            aggregate_tags: s.aggregate_tags,
            tsuids: s.tsuids,
            dps,
            nan_as_null,
            query,
            stats: stats.get(&s.query_index).cloned(),
            annotations,
            show_empty_annotations: show_empty,
            query_index: s.query_index,
        });
    }
    response.results = results;
    Ok(response)
}

#[cfg(test)]
mod tests;
