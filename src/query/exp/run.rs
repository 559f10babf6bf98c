//! Running an `/api/query/exp` request as 2.4.1's `QueryExecutor` does:
//! one `/api/query` sub-query per metric (through [`crate::query::execute`],
//! so selection, downsampling, rates and aggregation are the engine's),
//! then per expression a join of its inputs' series by tags
//! (`UnionIterator` / `IntersectionIterator`), a walk over the union of
//! their timestamps (`TimeSyncedIterator`) filling gaps with each input's
//! fill policy, the expression evaluated at every step, and the outputs
//! serialized member by member as its Jackson generator writes them.
//!
//! Where OpenTSDB's documentation and 2.4.1's code disagree, the code is
//! followed:
//! - a union fills a series an input lacks with 0 (the union iterator's
//!   own fill), not with that input's fill policy as the docs say; an
//!   input's fill policy applies to its gaps and NaNs;
//! - the downsampler's `fillPolicy` is validated but not applied, and a
//!   metric's `timeOffset` is parsed but not applied;
//! - `time` has no `rateOptions` (an unknown field, ignored);
//! - `lastTimestamp` stays 0 when an output has a single row;
//! - no `statsSummary` is written (2.4.1 has it commented out).
//!
//! Differences from 2.4.1, each a bug there that breaks a documented
//! feature (the code is followed everywhere else, docs included):
//! - A nested expression read by another one had no fill policy (its copy
//!   dropped it), so a NaN or a gap in it failed the query with a
//!   `NullPointerException`; here it substitutes the inner expression's
//!   own fill policy (NaN unless it sets one).
//! - A nested expression advanced by its own clock, not its reader's, so
//!   inputs with different timestamps came out shifted; here an inner
//!   expression is read like a metric: its value at the step's timestamp,
//!   or its fill value when it has none there.
//! - A series with no point in the range (possible when its hour rows
//!   hold points outside it) failed the query with a
//!   `NullPointerException`; here it is left out.
//! - A filter without a `tags` list failed with a `NullPointerException`;
//!   here it filters nothing.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::rc::Rc;

use super::expr::Script;
use super::request::{self, ExpQuery, Expression, NumericFill, SetOperator, double_json, str_json};
use crate::model::java::hashmap_order;
use crate::model::{Uid, UidKind, UidWidths, Value};
use crate::query::cache::QueryCache;
use crate::query::error::QueryError;
use crate::query::{QueryContext, QueryResult, TsQuery, TsSubQuery};

/// Parses, validates, runs and renders one request: the response body.
/// The metrics' sub-queries go through `cache` when there is one.
pub fn execute(
    ctx: &QueryContext,
    body: &[u8],
    cache: Option<&QueryCache>,
) -> Result<String, QueryError> {
    prepare(ctx, body)?.run(ctx, cache)
}

/// A request read, validated and planned (`QueryExecutor`'s constructor),
/// not yet run.
pub struct Prepared {
    request: ExpQuery,
    plan: Plan,
}

/// Reads and validates a request and plans its sub-queries.
pub fn prepare(ctx: &QueryContext, body: &[u8]) -> Result<Prepared, QueryError> {
    let mut request = request::parse(body)?;
    request.validate(ctx.now_ms)?;
    let plan = Plan::build(ctx, &request)?;
    Ok(Prepared { request, plan })
}

impl Prepared {
    /// The `/api/query` query the metrics run as (what `/api/stats/query`
    /// shows for an expression query, as 2.4.1 registers its `TSQuery`).
    pub fn query(&self) -> &TsQuery {
        &self.plan.query
    }

    /// Runs the sub-queries (through `cache` when there is one) and the
    /// expressions: the response body.
    pub fn run(
        &self,
        ctx: &QueryContext,
        cache: Option<&QueryCache>,
    ) -> Result<String, QueryError> {
        let plan = &self.plan;
        let results = plan.run_metrics(ctx, cache)?;
        plan.check_graph()?;
        let joins = plan.compile(ctx, &results)?;
        let mut out = String::with_capacity(1024);
        plan.serialize(ctx, &self.request, &results, &joins, &mut out)?;
        Ok(out)
    }
}

/// An error raised once the queries run: 2.4.1's `ErrorCB` answers 400
/// with the exception's message as both message and details.
fn runtime(e: QueryError) -> QueryError {
    match e {
        QueryError::NoSuchName(m) => QueryError::BadRequest {
            details: Some(m.clone()),
            message: m,
        },
        QueryError::BadRequest { message, details } => QueryError::BadRequest {
            details: Some(details.unwrap_or_else(|| message.clone())),
            message,
        },
        other => other,
    }
}

fn fail(message: String) -> QueryError {
    runtime(QueryError::bad(message))
}

/// One metric of the request, as its sub-query.
struct MetricPlan {
    id: String,
    sub: TsSubQuery,
    fill: NumericFill,
}

/// One expression of the request.
struct ExprPlan {
    id: String,
    script: Script,
    operator: SetOperator,
    use_query_tags: bool,
    include_agg_tags: bool,
    fill: NumericFill,
}

impl ExprPlan {
    /// Its variables as its `HashSet` of names iterates.
    fn names(&self) -> Vec<&str> {
        let vars: Vec<&str> = self.script.variables().iter().map(String::as_str).collect();
        hashmap_order(&vars, 16)
    }
}

struct Plan {
    query: TsQuery,
    metrics: Vec<MetricPlan>,
    /// Metric positions in the order the sub-queries run
    /// (`HashMap<String, TSSubQuery>` values).
    metric_order: Vec<usize>,
    exprs: Vec<ExprPlan>,
    /// Expression positions as `HashMap<String, ExpressionIterator>`
    /// iterates.
    expr_order: Vec<usize>,
    start_ms: i64,
    end_ms: i64,
}

/// A series read from a metric's results or computed by an expression.
#[derive(Debug, Clone, Default)]
struct SeriesMeta {
    /// Tag key and value UIDs, ordered by key.
    tags: Vec<(Uid, Uid)>,
    /// Aggregated tag keys, ordered.
    agg_tags: Vec<Uid>,
    metrics: BTreeSet<Uid>,
}

/// A metric's results.
struct MetricResult {
    series: Vec<SeriesMeta>,
    points: Vec<Vec<(i64, f64)>>,
    /// `TSSubQuery.getFilterTagKs`.
    query_tagks: Vec<Uid>,
    /// Groups the query returned, empty ones included (`dpsSize`).
    groups: usize,
}

/// An expression's join: its series and where each variable's input is.
struct Joined {
    meta: Vec<SeriesMeta>,
    /// Per output series, per script variable: the input series.
    slots: Vec<Vec<Option<usize>>>,
    timeline: Vec<i64>,
}

impl Plan {
    /// `QueryExecutor`'s constructor: the sub-queries, the expression
    /// iterators and `TSQuery.validateAndSetQuery`.
    fn build(ctx: &QueryContext, q: &ExpQuery) -> Result<Plan, QueryError> {
        let time = q.time.as_ref().expect("validated");
        let mut metrics = Vec::new();
        for m in q.metrics.iter().flatten() {
            let mut sub = TsSubQuery {
                metric: m.metric.clone(),
                aggregator: m.aggregator.clone().or_else(|| time.aggregator.clone()),
                rate: time.rate,
                ..Default::default()
            };
            // The downsampler's fill policy is validated, never applied:
            // 2.4.1 builds the sub-query's downsample as interval-agg only.
            if let Some(d) = &time.downsampler {
                sub.downsample = Some(format!(
                    "{}-{}",
                    d.interval.as_deref().unwrap_or(""),
                    d.aggregator.as_deref().unwrap_or("")
                ));
            }
            if let Some(fid) = m.filter.as_deref().filter(|f| !f.is_empty()) {
                let filters = q.filters.as_deref().unwrap_or(&[]);
                if filters.is_empty() {
                    return Err(QueryError::bad(format!("No filter defined: {fid}")));
                }
                if let Some(f) = filters.iter().find(|f| f.id.as_deref() == Some(fid)) {
                    sub.filters = f.tags.iter().flatten().map(|t| t.to_spec()).collect();
                    sub.explicit_tags = f.explicit_tags;
                }
            }
            metrics.push(MetricPlan {
                id: m.id.clone().unwrap_or_default(),
                sub,
                // A TimeSyncedIterator fills with zero unless told otherwise.
                fill: m.fill_policy.unwrap_or(NumericFill::ZERO),
            });
        }
        let mut exprs = Vec::new();
        for e in q.expressions.iter().flatten() {
            exprs.push(Self::expression(e)?);
        }
        let ids: Vec<&str> = metrics.iter().map(|m| m.id.as_str()).collect();
        let metric_order = positions(&hashmap_order(&ids, ids.len()), &ids);
        let eids: Vec<&str> = exprs.iter().map(|e| e.id.as_str()).collect();
        let expr_order = positions(&hashmap_order(&eids, eids.len()), &eids);
        let query = TsQuery {
            start: time.start.clone(),
            end: time.end.clone().filter(|e| !e.is_empty()),
            timezone: time.timezone.clone(),
            queries: metric_order
                .iter()
                .map(|&i| metrics[i].sub.clone())
                .collect(),
            ..Default::default()
        };
        let valid = query.validate(ctx.now_ms, ctx.default_tz)?;
        Ok(Plan {
            query,
            metrics,
            metric_order,
            exprs,
            expr_order,
            start_ms: valid.start_ms,
            end_ms: valid.end_ms,
        })
    }

    /// `new ExpressionIterator(...)` with the join's settings.
    fn expression(e: &Expression) -> Result<ExprPlan, QueryError> {
        let join = e.join.as_ref().expect("validated");
        let operator = join
            .operator
            .ok_or_else(|| QueryError::bad("The set operator cannot be null"))?;
        let script = e.script.clone().expect("validated");
        if script.variables().is_empty() {
            return Err(QueryError::bad(
                "The expression didn't appear to have any variables",
            ));
        }
        Ok(ExprPlan {
            id: e.id.clone().unwrap_or_default(),
            script,
            operator,
            use_query_tags: join.use_query_tags,
            include_agg_tags: join.include_agg_tags,
            // An ExpressionIterator's own default.
            fill: e.fill_policy.unwrap_or(NumericFill::NAN),
        })
    }

    fn metric(&self, id: &str) -> Option<usize> {
        self.metrics.iter().position(|m| m.id == id)
    }

    fn expr(&self, id: &str) -> Option<usize> {
        self.exprs.iter().position(|e| e.id == id)
    }

    /// Runs every sub-query (all of them, used or not, as 2.4.1 does).
    fn run_metrics(
        &self,
        ctx: &QueryContext,
        cache: Option<&QueryCache>,
    ) -> Result<Vec<MetricResult>, QueryError> {
        let mut results: Vec<Option<MetricResult>> = self.metrics.iter().map(|_| None).collect();
        let mut names = Names::default();
        for &i in &self.metric_order {
            let m = &self.metrics[i];
            let q = TsQuery {
                queries: vec![m.sub.clone()],
                ..self.query.clone()
            };
            let res = crate::query::execute(ctx, &q, cache).map_err(runtime)?;
            let mut query_tagks = Vec::new();
            for f in &m.sub.filters {
                if let Some(k) = ctx.uids.lookup_id(UidKind::TagKey, &f.tagk)?
                    && !query_tagks.contains(&k)
                {
                    query_tagks.push(k);
                }
            }
            query_tagks.sort();
            let groups = res.results.len();
            let mut series = Vec::with_capacity(groups);
            let mut points = Vec::with_capacity(groups);
            for r in res.results {
                if r.dps.is_empty() {
                    continue;
                }
                series.push(names.meta(ctx, &r)?);
                points.push(
                    r.dps
                        .iter()
                        .map(|&(t, v)| {
                            let v = match v {
                                Value::Int(i) => i as f64,
                                Value::Float(f) => f,
                            };
                            (t, v)
                        })
                        .collect(),
                );
            }
            results[i] = Some(MetricResult {
                series,
                points,
                query_tagks,
                groups,
            });
        }
        Ok(results
            .into_iter()
            .map(|r| r.expect("every metric ran"))
            .collect())
    }

    /// The dependency graph of nested expressions, checked edge by edge in
    /// 2.4.1's iteration order so the same expression is named.
    fn check_graph(&self) -> Result<(), QueryError> {
        let mut edges: Vec<Vec<usize>> = vec![Vec::new(); self.exprs.len()];
        for &e in &self.expr_order {
            for var in self.exprs[e].names() {
                let Some(v) = self.expr(var) else { continue };
                if v == e {
                    return Err(fail(format!(
                        "Self referencing expression found: {}",
                        self.exprs[e].id
                    )));
                }
                if reaches(&edges, v, e) {
                    return Err(fail(format!(
                        "Circular reference found: {}",
                        self.exprs[e].id
                    )));
                }
                if !edges[e].contains(&v) {
                    edges[e].push(v);
                }
            }
        }
        Ok(())
    }

    /// The order `ExpressionIterator.compile` sees an expression's inputs:
    /// the `results` map (metrics first, in sub-query order, then nested
    /// expressions), re-hashed into a map sized for the variables.
    fn input_order(&self, e: &ExprPlan) -> Vec<String> {
        let results = self.results_order(e);
        let results: Vec<&str> = results.iter().map(String::as_str).collect();
        hashmap_order(&results, results.len())
            .into_iter()
            .map(String::from)
            .collect()
    }

    /// The inputs as the expression's own `results` map (default capacity)
    /// iterates: the order that numbers them (`setIndex`).
    fn results_order(&self, e: &ExprPlan) -> Vec<String> {
        let names = e.names();
        let mut inserted: Vec<&str> = Vec::new();
        for &m in &self.metric_order {
            let id = self.metrics[m].id.as_str();
            if names.contains(&id) {
                inserted.push(id);
            }
        }
        for n in &names {
            if self.expr(n).is_some() && !inserted.contains(n) {
                inserted.push(n);
            }
        }
        hashmap_order(&inserted, 16)
            .into_iter()
            .map(String::from)
            .collect()
    }

    /// Compiles every expression (its join), inner ones first.
    fn compile(
        &self,
        ctx: &QueryContext,
        results: &[MetricResult],
    ) -> Result<Vec<Joined>, QueryError> {
        let widths = ctx.widths();
        let mut done: Vec<Option<Joined>> = self.exprs.iter().map(|_| None).collect();
        for &e in &self.expr_order {
            self.compile_one(e, results, widths, &mut done)?;
        }
        Ok(done.into_iter().map(|j| j.expect("compiled")).collect())
    }

    fn compile_one(
        &self,
        e: usize,
        results: &[MetricResult],
        widths: UidWidths,
        done: &mut Vec<Option<Joined>>,
    ) -> Result<(), QueryError> {
        if done[e].is_some() {
            return Ok(());
        }
        let ex = &self.exprs[e];
        for var in ex.names() {
            if let Some(inner) = self.expr(var) {
                self.compile_one(inner, results, widths, done)?;
            }
        }
        // compile() looks its inputs up by lower-cased name: a variable
        // with capitals has no input unless its lower-case twin exists.
        for var in ex.names() {
            let lower = var.to_lowercase();
            if !ex.script.variables().contains(&lower) {
                return Err(fail(format!("Missing results for variable {var}")));
            }
        }
        let order = self.input_order(ex);
        let inputs: Vec<Input> = order
            .iter()
            .map(|name| self.input(name, results, done))
            .collect();
        let var_of = |name: &str| {
            ex.script
                .variables()
                .iter()
                .position(|v| v == name)
                .expect("a variable of the script")
        };
        let nvars = ex.script.variables().len();
        let key = |inp: &Input, s: usize| {
            join_key(
                &inp.meta[s],
                ex.use_query_tags,
                ex.include_agg_tags,
                inp.query_tagks,
                widths,
            )
        };
        // Per join key, the input series of each variable.
        let mut joined: BTreeMap<Vec<u8>, Vec<Option<usize>>> = BTreeMap::new();
        // Series that no longer take part (intersections only).
        let mut nulled: Vec<Vec<bool>> = inputs.iter().map(|i| vec![false; i.meta.len()]).collect();
        match ex.operator {
            SetOperator::Union => {
                for inp in &inputs {
                    let v = var_of(&inp.name);
                    for s in 0..inp.meta.len() {
                        joined
                            .entry(key(inp, s))
                            .or_insert_with(|| vec![None; nvars])[v] = Some(s);
                    }
                }
            }
            SetOperator::Intersection => {
                if inputs.iter().all(|i| i.groups == 0) {
                    return self.finish(e, Vec::new(), Vec::new(), Vec::new(), done);
                }
                let mut seen: Vec<(usize, BTreeMap<Vec<u8>, usize>)> = Vec::new();
                for (x, inp) in inputs.iter().enumerate() {
                    let v = var_of(&inp.name);
                    let mut local: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
                    let mut dropped = Vec::new();
                    for s in 0..inp.meta.len() {
                        let k = key(inp, s);
                        local.insert(k.clone(), s);
                        if x == 0 {
                            let mut slot = vec![None; nvars];
                            slot[v] = Some(s);
                            joined.insert(k, slot);
                        } else if let Some(slot) = joined.get_mut(&k) {
                            slot[v] = Some(s);
                        } else {
                            dropped.push(s);
                        }
                    }
                    for s in dropped {
                        nulled[x][s] = true;
                    }
                    if x > 0 {
                        let gone: Vec<Vec<u8>> = joined
                            .keys()
                            .filter(|k| !local.contains_key(*k))
                            .cloned()
                            .collect();
                        for k in gone {
                            for (other, map) in &seen {
                                if let Some(&s) = map.get(&k) {
                                    nulled[*other][s] = true;
                                }
                            }
                            joined.remove(&k);
                        }
                    }
                    seen.push((x, local));
                }
                if inputs.len() > 1 && joined.is_empty() {
                    return Err(fail(format!(
                        "No intersections found: {}",
                        self.describe_intersection(ex, &inputs)
                    )));
                }
            }
        }
        // The steps: every timestamp of every series still iterating (an
        // inner expression is never nulled: 2.4.1's nullIterator is a no-op
        // there).
        let mut timeline: Vec<i64> = Vec::new();
        for (inp, gone) in inputs.iter().zip(&nulled) {
            for (s, &g) in gone.iter().enumerate() {
                if !g || inp.is_expression {
                    merge_into(&mut timeline, inp.timestamps(s));
                }
            }
        }
        // Each output series' meta: tags of the first input (in map order)
        // when present, metrics and aggregated tags of all present.
        let mut meta = Vec::with_capacity(joined.len());
        let mut slots = Vec::with_capacity(joined.len());
        for slot in joined.into_values() {
            let mut m = SeriesMeta::default();
            for (x, inp) in inputs.iter().enumerate() {
                let Some(s) = slot[var_of(&inp.name)] else {
                    continue;
                };
                let sm = &inp.meta[s];
                if x == 0 {
                    m.tags = sm.tags.clone();
                }
                m.metrics.extend(sm.metrics.iter().copied());
                for a in &sm.agg_tags {
                    if !m.agg_tags.contains(a) {
                        m.agg_tags.push(*a);
                    }
                }
            }
            m.agg_tags.sort();
            meta.push(m);
            slots.push(slot);
        }
        self.finish(e, meta, slots, timeline, done)
    }

    fn finish(
        &self,
        e: usize,
        meta: Vec<SeriesMeta>,
        slots: Vec<Vec<Option<usize>>>,
        timeline: Vec<i64>,
        done: &mut [Option<Joined>],
    ) -> Result<(), QueryError> {
        done[e] = Some(Joined {
            meta,
            slots,
            timeline,
        });
        Ok(())
    }

    /// `IntersectionIterator.toString()` as its error message prints it.
    fn describe_intersection(&self, ex: &ExprPlan, inputs: &[Input]) -> String {
        let results = self.results_order(ex);
        let mut s = format!(
            "IntersectionIterator(id={}, useQueryTags={}, includeAggTags={}, index=0, queries={{",
            ex.id, ex.use_query_tags, ex.include_agg_tags
        );
        for (n, inp) in inputs.iter().enumerate() {
            if n > 0 {
                s.push_str(", ");
            }
            let index = results.iter().position(|r| *r == inp.name).unwrap_or(0);
            if inp.is_expression {
                let _ = write!(
                    s,
                    "{}=ExpressionIterator(id={}, index={index})",
                    inp.name, inp.name
                );
            } else {
                let _ = write!(
                    s,
                    "{}=TimeSyncedIterator(id={}, index={index}, dpsSize={})",
                    inp.name, inp.name, inp.groups
                );
            }
        }
        s.push('}');
        s
    }

    fn input<'a>(
        &'a self,
        name: &str,
        results: &'a [MetricResult],
        done: &'a [Option<Joined>],
    ) -> Input<'a> {
        if let Some(m) = self.metric(name) {
            let r = &results[m];
            return Input {
                name: name.to_string(),
                meta: &r.series,
                query_tagks: &r.query_tagks,
                groups: r.groups,
                is_expression: false,
                metric_points: Some(&r.points),
                timeline: &[],
            };
        }
        let e = self.expr(name).expect("validated variable");
        let j = done[e].as_ref().expect("inner expressions compile first");
        Input {
            name: name.to_string(),
            meta: &j.meta,
            // An ExpressionIterator has no query tag keys.
            query_tagks: &[],
            groups: j.meta.len(),
            is_expression: true,
            metric_points: None,
            timeline: &j.timeline,
        }
    }

    /// Writes the response.
    fn serialize(
        &self,
        ctx: &QueryContext,
        q: &ExpQuery,
        results: &[MetricResult],
        joins: &[Joined],
        out: &mut String,
    ) -> Result<(), QueryError> {
        let defaults: Vec<(String, Option<String>)>;
        let outputs: Vec<(&str, Option<&str>)> =
            match q.outputs.as_deref().filter(|o| !o.is_empty()) {
                Some(o) => o
                    .iter()
                    .map(|o| (o.id.as_deref().unwrap_or(""), o.alias.as_deref()))
                    .collect(),
                None => {
                    defaults = if self.exprs.is_empty() {
                        self.metrics.iter().map(|m| (m.id.clone(), None)).collect()
                    } else {
                        self.exprs.iter().map(|e| (e.id.clone(), None)).collect()
                    };
                    defaults
                        .iter()
                        .map(|(i, a)| (i.as_str(), a.as_deref()))
                        .collect()
                }
            };
        let evals = Evaluator {
            plan: self,
            results,
            joins,
            memo: RefCell::new(HashMap::new()),
        };
        let mut names = Names::default();
        out.push_str("{\"outputs\":[");
        let mut first = true;
        for (id, alias) in outputs {
            let mut one = String::new();
            if let Some(e) = self.expr(id) {
                let values = evals.values(e)?;
                self.write_expression(ctx, &mut names, id, alias, &joins[e], &values, &mut one)?;
            } else if let Some(m) = self.metric(id) {
                self.write_metric(ctx, &mut names, id, alias, &results[m], &mut one)?;
            } else {
                // 2.4.1 skips an output that names nothing.
                continue;
            }
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(&one);
        }
        out.push_str("],\"query\":");
        q.echo(out);
        out.push('}');
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn write_expression(
        &self,
        ctx: &QueryContext,
        names: &mut Names,
        id: &str,
        alias: Option<&str>,
        j: &Joined,
        values: &[Vec<f64>],
        out: &mut String,
    ) -> Result<(), QueryError> {
        head(out, id, alias);
        let mut first_ts: Option<i64> = None;
        let mut last_ts = 0i64;
        let mut count = 0u64;
        let mut any = false;
        if !j.meta.is_empty() {
            for (step, &ts) in j.timeline.iter().enumerate() {
                if ts < self.start_ms || ts > self.end_ms {
                    continue;
                }
                if any {
                    out.push(',');
                }
                any = true;
                let _ = write!(out, "[{ts}");
                // 2.4.1 sets the last timestamp only from the second row on.
                if first_ts.is_none() {
                    first_ts = Some(ts);
                } else {
                    last_ts = ts;
                }
                count += 1;
                for series in values {
                    out.push(',');
                    double_json(out, series[step]);
                }
                out.push(']');
            }
        }
        let first_ts = first_ts.filter(|t| *t >= 0).unwrap_or(0);
        let _ = write!(
            out,
            "],\"dpsMeta\":{{\"firstTimestamp\":{first_ts},\"lastTimestamp\":{last_ts},\"setCount\":{count},\"series\":{}}}",
            j.meta.len()
        );
        write_meta(ctx, names, &j.meta, out)?;
        out.push('}');
        Ok(())
    }

    /// A metric named as an output: its groups as a fresh
    /// `TimeSyncedIterator` walks them (gaps as 0, whatever the metric's
    /// fill policy, no range cut, first timestamp even with no data).
    fn write_metric(
        &self,
        ctx: &QueryContext,
        names: &mut Names,
        id: &str,
        alias: Option<&str>,
        r: &MetricResult,
        out: &mut String,
    ) -> Result<(), QueryError> {
        head(out, id, alias);
        let mut timeline: Vec<i64> = Vec::new();
        for pts in &r.points {
            merge_into(&mut timeline, Box::new(pts.iter().map(|p| p.0)));
        }
        let mut cursors = vec![0usize; r.points.len()];
        let mut last_ts = 0i64;
        for (n, &ts) in timeline.iter().enumerate() {
            if n > 0 {
                out.push(',');
            }
            let _ = write!(out, "[{ts}");
            last_ts = ts;
            for (s, pts) in r.points.iter().enumerate() {
                out.push(',');
                let c = &mut cursors[s];
                if *c < pts.len() && pts[*c].0 == ts {
                    double_json(out, pts[*c].1);
                    *c += 1;
                } else {
                    double_json(out, 0.0);
                }
            }
            out.push(']');
        }
        let first_ts = timeline.first().copied().unwrap_or(i64::MAX);
        let _ = write!(
            out,
            "],\"dpsMeta\":{{\"firstTimestamp\":{first_ts},\"lastTimestamp\":{last_ts},\"setCount\":{},\"series\":{}}}",
            timeline.len(),
            r.series.len()
        );
        write_meta(ctx, names, &r.series, out)?;
        out.push('}');
        Ok(())
    }
}

fn head(out: &mut String, id: &str, alias: Option<&str>) {
    out.push_str("{\"id\":");
    str_json(out, id);
    if let Some(a) = alias {
        out.push_str(",\"alias\":");
        str_json(out, a);
    }
    out.push_str(",\"dps\":[");
}

/// `MetaSerializer`: a timestamp column, then per series the metric names
/// of the first series (sorted), its common tags (a `HashMap`'s order) and
/// aggregated tag keys (in UID order).
fn write_meta(
    ctx: &QueryContext,
    names: &mut Names,
    meta: &[SeriesMeta],
    out: &mut String,
) -> Result<(), QueryError> {
    let Some(first) = meta.first() else {
        return Ok(());
    };
    let mut metrics = Vec::new();
    for m in &first.metrics {
        metrics.push(names.name(ctx, UidKind::Metric, *m)?);
    }
    metrics.sort();
    let mut metrics_json = String::from("[");
    for (i, m) in metrics.iter().enumerate() {
        if i > 0 {
            metrics_json.push(',');
        }
        str_json(&mut metrics_json, m);
    }
    metrics_json.push(']');
    out.push_str(",\"meta\":[{\"index\":0,\"metrics\":[\"timestamp\"]}");
    for (i, m) in meta.iter().enumerate() {
        let _ = write!(
            out,
            ",{{\"index\":{},\"metrics\":{metrics_json},\"commonTags\":{{",
            i + 1
        );
        let mut pairs = Vec::with_capacity(m.tags.len());
        for (k, v) in &m.tags {
            pairs.push((
                names.name(ctx, UidKind::TagKey, *k)?,
                names.name(ctx, UidKind::TagValue, *v)?,
            ));
        }
        let keys: Vec<&str> = pairs.iter().map(|p| p.0.as_str()).collect();
        for (n, k) in hashmap_order(&keys, 16).into_iter().enumerate() {
            if n > 0 {
                out.push(',');
            }
            let v = &pairs.iter().find(|p| p.0 == k).expect("a key of pairs").1;
            str_json(out, k);
            out.push(':');
            str_json(out, v);
        }
        out.push_str("},\"aggregatedTags\":[");
        for (n, a) in m.agg_tags.iter().enumerate() {
            if n > 0 {
                out.push(',');
            }
            let name = names.name(ctx, UidKind::TagKey, *a)?;
            str_json(out, &name);
        }
        out.push_str("]}");
    }
    out.push(']');
    Ok(())
}

/// An expression's input: a metric's groups or an inner expression.
struct Input<'a> {
    name: String,
    meta: &'a [SeriesMeta],
    query_tagks: &'a [Uid],
    groups: usize,
    is_expression: bool,
    metric_points: Option<&'a Vec<Vec<(i64, f64)>>>,
    timeline: &'a [i64],
}

impl Input<'_> {
    /// The timestamps of series `s` (an inner expression has a value at
    /// every step of its timeline).
    fn timestamps(&self, s: usize) -> Box<dyn Iterator<Item = i64> + '_> {
        match self.metric_points {
            Some(p) => Box::new(p[s].iter().map(|&(t, _)| t)),
            None => Box::new(self.timeline.iter().copied()),
        }
    }
}

/// `flattenTags`: the bytes an input series joins on.
fn join_key(
    m: &SeriesMeta,
    use_query_tags: bool,
    include_agg_tags: bool,
    query_tagks: &[Uid],
    w: UidWidths,
) -> Vec<u8> {
    // No tags at all: the empty key, aggregated tags or not.
    if m.tags.is_empty() {
        return Vec::new();
    }
    let mut key = Vec::new();
    for (k, v) in &m.tags {
        if use_query_tags && !query_tagks.contains(k) {
            continue;
        }
        k.write_to(w.tagk, &mut key);
        v.write_to(w.tagv, &mut key);
    }
    if include_agg_tags {
        for a in &m.agg_tags {
            a.write_to(w.tagk, &mut key);
        }
    }
    key
}

/// Adds the sorted timestamps `ts` to the sorted, distinct `timeline`.
/// Series of one query mostly share their timestamps: checking that they
/// are all there already is a linear pass, merging only when one is new.
fn merge_into(timeline: &mut Vec<i64>, ts: Box<dyn Iterator<Item = i64> + '_>) {
    let ts: Vec<i64> = ts.collect();
    let mut i = 0;
    let all_there = ts.iter().all(|t| {
        while i < timeline.len() && timeline[i] < *t {
            i += 1;
        }
        i < timeline.len() && timeline[i] == *t
    });
    if all_there {
        return;
    }
    let mut merged = Vec::with_capacity(timeline.len() + ts.len());
    let (mut a, mut b) = (0, 0);
    while a < timeline.len() || b < ts.len() {
        let next = match (timeline.get(a), ts.get(b)) {
            (Some(&x), Some(&y)) if x <= y => {
                a += 1;
                if x == y {
                    b += 1;
                }
                x
            }
            (_, Some(&y)) => {
                b += 1;
                y
            }
            (Some(&x), None) => {
                a += 1;
                x
            }
            (None, None) => break,
        };
        if merged.last() != Some(&next) {
            merged.push(next);
        }
    }
    *timeline = merged;
}

fn reaches(edges: &[Vec<usize>], from: usize, to: usize) -> bool {
    let mut stack = vec![from];
    let mut seen = vec![false; edges.len()];
    while let Some(n) = stack.pop() {
        if n == to {
            return true;
        }
        if !std::mem::replace(&mut seen[n], true) {
            stack.extend(edges[n].iter().copied());
        }
    }
    false
}

fn positions(order: &[&str], ids: &[&str]) -> Vec<usize> {
    let mut taken = vec![false; ids.len()];
    order
        .iter()
        .map(|o| {
            let i = (0..ids.len())
                .find(|&i| !taken[i] && ids[i] == *o)
                .expect("an id of the list");
            taken[i] = true;
            i
        })
        .collect()
}

/// Computes expressions' values on demand, each once.
struct Evaluator<'a> {
    plan: &'a Plan,
    results: &'a [MetricResult],
    joins: &'a [Joined],
    memo: RefCell<HashMap<usize, Rc<Vec<Vec<f64>>>>>,
}

impl Evaluator<'_> {
    /// Per output series, the value at every step of the timeline.
    fn values(&self, e: usize) -> Result<Rc<Vec<Vec<f64>>>, QueryError> {
        if let Some(v) = self.memo.borrow().get(&e) {
            return Ok(v.clone());
        }
        let ex = &self.plan.exprs[e];
        let j = &self.joins[e];
        let vars = ex.script.variables();
        // Per variable: a reader aligned on this timeline.
        let mut sources: Vec<Source> = Vec::with_capacity(vars.len());
        for v in vars {
            sources.push(match self.plan.metric(v) {
                Some(m) => Source::Metric {
                    points: &self.results[m].points,
                    fill: self.plan.metrics[m].fill.value,
                },
                None => {
                    let inner = self.plan.expr(v).expect("validated variable");
                    Source::Expr {
                        timeline: &self.joins[inner].timeline,
                        values: self.values(inner)?,
                        fill: self.plan.exprs[inner].fill.value,
                    }
                }
            });
        }
        let steps = j.timeline.len();
        let mut out: Vec<Vec<f64>> = Vec::with_capacity(j.meta.len());
        let mut bound = vec![0.0; vars.len()];
        for slot in &j.slots {
            let mut cursors = vec![0usize; vars.len()];
            let mut series = Vec::with_capacity(steps);
            for &ts in &j.timeline {
                for (v, src) in sources.iter().enumerate() {
                    bound[v] = match slot[v] {
                        // A union gap is the union's own fill: always 0.
                        None => 0.0,
                        Some(s) => src.value(s, ts, &mut cursors[v]),
                    };
                }
                let result = ex
                    .script
                    .eval(&bound)
                    .map_err(|err| fail(err.0))?
                    .ok_or_else(|| fail(format!("Expression returned no result for {}", ex.id)))?;
                let v = result.to_output().ok_or_else(|| {
                    fail(format!(
                        "Expression returned a result of type: {} for ExpressionIterator(id={}, expression=\"{}\")",
                        result.type_name(),
                        ex.id,
                        ex.script
                    ))
                })?;
                series.push(v);
            }
            out.push(series);
        }
        let out = Rc::new(out);
        self.memo.borrow_mut().insert(e, out.clone());
        Ok(out)
    }
}

/// One variable's input, read at the timeline's steps in order.
enum Source<'a> {
    Metric {
        points: &'a [Vec<(i64, f64)>],
        fill: f64,
    },
    Expr {
        timeline: &'a [i64],
        values: Rc<Vec<Vec<f64>>>,
        fill: f64,
    },
}

impl Source<'_> {
    /// Series `s` at `ts`: its point there, else the fill value; a NaN
    /// also reads as the fill value (`ExpressionIterator.next`).
    fn value(&self, s: usize, ts: i64, cursor: &mut usize) -> f64 {
        let (v, fill) = match self {
            Source::Metric { points, fill } => {
                let p = &points[s];
                while *cursor < p.len() && p[*cursor].0 < ts {
                    *cursor += 1;
                }
                let v = if *cursor < p.len() && p[*cursor].0 == ts {
                    p[*cursor].1
                } else {
                    *fill
                };
                (v, *fill)
            }
            Source::Expr {
                timeline,
                values,
                fill,
            } => {
                while *cursor < timeline.len() && timeline[*cursor] < ts {
                    *cursor += 1;
                }
                let v = if *cursor < timeline.len() && timeline[*cursor] == ts {
                    values[s][*cursor]
                } else {
                    *fill
                };
                (v, *fill)
            }
        };
        if v.is_nan() { fill } else { v }
    }
}

/// UID ↔ name lookups for one request, each done once.
#[derive(Default)]
struct Names {
    ids: HashMap<(UidKind, String), Uid>,
    names: HashMap<(UidKind, Uid), String>,
}

impl Names {
    fn id(&mut self, ctx: &QueryContext, kind: UidKind, name: &str) -> Result<Uid, QueryError> {
        if let Some(u) = self.ids.get(&(kind, name.to_string())) {
            return Ok(*u);
        }
        let u = ctx.uids.get_id(kind, name).map_err(QueryError::from)?;
        self.ids.insert((kind, name.to_string()), u);
        Ok(u)
    }

    fn name(&mut self, ctx: &QueryContext, kind: UidKind, uid: Uid) -> Result<String, QueryError> {
        if let Some(n) = self.names.get(&(kind, uid)) {
            return Ok(n.clone());
        }
        let n = ctx
            .uids
            .get_name(kind, uid)
            .map_err(QueryError::from)?
            .to_string();
        self.names.insert((kind, uid), n.clone());
        Ok(n)
    }

    /// A result group's UIDs: common tags, aggregated tag keys, metric.
    fn meta(&mut self, ctx: &QueryContext, r: &QueryResult) -> Result<SeriesMeta, QueryError> {
        let mut tags = Vec::with_capacity(r.tags.len());
        for (k, v) in &r.tags {
            tags.push((
                self.id(ctx, UidKind::TagKey, k)?,
                self.id(ctx, UidKind::TagValue, v)?,
            ));
        }
        tags.sort();
        let mut agg_tags = Vec::with_capacity(r.aggregate_tags.len());
        for k in &r.aggregate_tags {
            agg_tags.push(self.id(ctx, UidKind::TagKey, k)?);
        }
        agg_tags.sort();
        let mut metrics = BTreeSet::new();
        metrics.insert(self.id(ctx, UidKind::Metric, &r.metric)?);
        Ok(SeriesMeta {
            tags,
            agg_tags,
            metrics,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_flatten_tags() {
        let w = UidWidths {
            metric: crate::model::UidWidth::DEFAULT,
            tagk: crate::model::UidWidth::DEFAULT,
            tagv: crate::model::UidWidth::DEFAULT,
        };
        let u = |n| Uid::new(n, crate::model::UidWidth::DEFAULT).unwrap();
        let m = SeriesMeta {
            tags: vec![(u(1), u(5)), (u(2), u(6))],
            agg_tags: vec![u(3)],
            metrics: BTreeSet::new(),
        };
        assert_eq!(
            join_key(&m, false, true, &[], w),
            vec![0, 0, 1, 0, 0, 5, 0, 0, 2, 0, 0, 6, 0, 0, 3]
        );
        assert_eq!(join_key(&m, false, false, &[], w).len(), 12);
        // Query tags only: the keys the filters named.
        assert_eq!(
            join_key(&m, true, false, &[u(2)], w),
            vec![0, 0, 2, 0, 0, 6]
        );
        assert_eq!(join_key(&m, true, true, &[], w), vec![0, 0, 3]);
        let none = SeriesMeta {
            agg_tags: vec![u(3)],
            ..Default::default()
        };
        assert!(join_key(&none, false, true, &[], w).is_empty());
    }

    #[test]
    fn timelines_merge_sorted_and_distinct() {
        let mut t = Vec::new();
        merge_into(&mut t, Box::new([1, 3, 5].into_iter()));
        merge_into(&mut t, Box::new([3, 5].into_iter()));
        assert_eq!(t, [1, 3, 5]);
        merge_into(&mut t, Box::new([0, 2, 3, 3, 9].into_iter()));
        assert_eq!(t, [0, 1, 2, 3, 5, 9]);
    }

    #[test]
    fn cycles_are_found() {
        let edges = vec![vec![1], vec![2], vec![]];
        assert!(reaches(&edges, 0, 2));
        assert!(!reaches(&edges, 2, 0));
    }
}
