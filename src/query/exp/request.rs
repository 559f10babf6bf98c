//! The `/api/query/exp` request (OpenTSDB 2.4.1's `query.pojo` classes):
//! reading the JSON with Jackson's coercions, `Query.validate` with its
//! exact messages, and the query echoed back in the response.
//!
//! 2.4.1 reads the body into builders that set their fields directly, so
//! ids are only checked by `validate()`, and every failure there is an
//! `IllegalArgumentException` the HTTP layer answers with a 500. A
//! malformed request is the client's mistake: we answer 400 with the same
//! message (the wrapper's, e.g. `Invalid metric at index 0`) and put the
//! underlying reason, which 2.4.1 only shows in its stack trace, in
//! `details`.

use serde_json::{Map, Value as Json};

use super::expr::Script;
use crate::model::java::{double_to_string, hashmap_order};
use crate::model::time::parse_duration;
use crate::protocol::jackson;
use crate::query::Aggregator;
use crate::query::error::QueryError;
use crate::query::filter::{FilterSpec, TagFilter};
use crate::query::request::parse_time;

/// `FillPolicy` as the expression classes use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FillKind {
    None,
    Zero,
    Nan,
    Null,
    Scalar,
}

impl FillKind {
    fn parse(s: &str) -> Option<FillKind> {
        Some(match s.to_ascii_lowercase().as_str() {
            "none" => FillKind::None,
            "zero" => FillKind::Zero,
            "nan" => FillKind::Nan,
            "null" => FillKind::Null,
            "scalar" => FillKind::Scalar,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            FillKind::None => "none",
            FillKind::Zero => "zero",
            FillKind::Nan => "nan",
            FillKind::Null => "null",
            FillKind::Scalar => "scalar",
        }
    }
}

/// `NumericFillPolicy`: a policy and the value it substitutes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NumericFill {
    pub policy: FillKind,
    pub value: f64,
}

impl NumericFill {
    pub const ZERO: NumericFill = NumericFill {
        policy: FillKind::Zero,
        value: 0.0,
    };
    pub const NAN: NumericFill = NumericFill {
        policy: FillKind::Nan,
        value: f64::NAN,
    };

    /// `NumericFillPolicy.validate`: a missing policy follows from the
    /// value; a value that contradicts the policy is refused.
    fn build(policy: Option<FillKind>, value: f64) -> Result<NumericFill, String> {
        let policy = match policy {
            None if value == 0.0 => FillKind::Zero,
            None if value.is_nan() => FillKind::Nan,
            None => FillKind::Scalar,
            Some(p) => p,
        };
        let value = match policy {
            FillKind::None | FillKind::Nan => {
                if value != 0.0 && !value.is_nan() {
                    return Err("The value for NONE and NAN must be NaN".into());
                }
                f64::NAN
            }
            FillKind::Zero => {
                if value != 0.0 {
                    return Err("The value for ZERO must be 0".into());
                }
                0.0
            }
            FillKind::Null => {
                if value != 0.0 && !value.is_nan() {
                    return Err("The value for NULL must be 0".into());
                }
                f64::NAN
            }
            FillKind::Scalar => value,
        };
        Ok(NumericFill { policy, value })
    }
}

/// `VariableIterator.SetOperator`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetOperator {
    Union,
    Intersection,
}

impl SetOperator {
    fn name(self) -> &'static str {
        match self {
            SetOperator::Union => "union",
            SetOperator::Intersection => "intersection",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Downsampler {
    pub interval: Option<String>,
    pub aggregator: Option<String>,
    pub fill_policy: Option<NumericFill>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Timespan {
    pub start: Option<String>,
    pub end: Option<String>,
    pub timezone: Option<String>,
    pub downsampler: Option<Downsampler>,
    pub aggregator: Option<String>,
    pub rate: bool,
}

#[derive(Debug, Clone)]
pub struct Filter {
    pub id: Option<String>,
    pub tags: Option<Vec<TagFilter>>,
    pub explicit_tags: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    pub metric: Option<String>,
    pub id: Option<String>,
    pub filter: Option<String>,
    /// Parsed and checked, then unused: 2.4.1's `QueryExecutor` never
    /// applies a metric's time offset.
    pub time_offset: Option<String>,
    pub aggregator: Option<String>,
    pub fill_policy: Option<NumericFill>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Join {
    pub operator: Option<SetOperator>,
    pub use_query_tags: bool,
    pub include_agg_tags: bool,
}

impl Join {
    /// What `Expression.validate` sets when the request has no join.
    const DEFAULT: Join = Join {
        operator: Some(SetOperator::Union),
        use_query_tags: false,
        include_agg_tags: true,
    };
}

#[derive(Debug, Clone, PartialEq)]
pub struct Expression {
    pub id: Option<String>,
    pub expr: Option<String>,
    pub join: Option<Join>,
    pub fill_policy: Option<NumericFill>,
    /// Set by validation.
    pub script: Option<Script>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    pub id: Option<String>,
    pub alias: Option<String>,
}

/// The whole request (`query.pojo.Query`).
#[derive(Debug, Clone)]
pub struct ExpQuery {
    pub name: Option<String>,
    pub time: Option<Timespan>,
    pub filters: Option<Vec<Filter>>,
    pub metrics: Option<Vec<Metric>>,
    pub expressions: Option<Vec<Expression>>,
    pub outputs: Option<Vec<Output>>,
}

fn bad(message: impl Into<String>, details: impl Into<String>) -> QueryError {
    let details = details.into();
    QueryError::BadRequest {
        message: message.into(),
        details: (!details.is_empty()).then_some(details),
    }
}

/// A value Jackson could not map onto the field at `path`.
fn mapping(path: &str, e: impl std::fmt::Display) -> QueryError {
    bad("Unable to parse the given JSON", format!("{path}: {e}"))
}

fn field<'a>(o: &'a Map<String, Json>, name: &str) -> Option<&'a Json> {
    o.get(name).filter(|v| !v.is_null())
}

fn string(o: &Map<String, Json>, name: &str, path: &str) -> Result<Option<String>, QueryError> {
    match o.get(name) {
        None => Ok(None),
        Some(v) => jackson::string_opt(v).map_err(|e| mapping(&format!("{path}.{name}"), e)),
    }
}

fn boolean(
    o: &Map<String, Json>,
    name: &str,
    path: &str,
    default: bool,
) -> Result<bool, QueryError> {
    match o.get(name) {
        None => Ok(default),
        Some(v) => jackson::boolean(v).map_err(|e| mapping(&format!("{path}.{name}"), e)),
    }
}

fn object<'a>(v: &'a Json, path: &str) -> Result<&'a Map<String, Json>, QueryError> {
    v.as_object()
        .ok_or_else(|| mapping(path, format!("expected an object, got {v}")))
}

/// A list field: `null` or absent is no list; a single object is read as
/// a one-element list only if it is an array (Jackson's default).
fn list<'a>(o: &'a Map<String, Json>, name: &str) -> Result<Option<&'a Vec<Json>>, QueryError> {
    match field(o, name) {
        None => Ok(None),
        Some(Json::Array(a)) => Ok(Some(a)),
        Some(v) => Err(mapping(name, format!("expected an array, got {v}"))),
    }
}

/// A `double` field as Jackson reads it: a number, or a string holding
/// one (`"NaN"` and `"Infinity"` included); `null` is 0.
fn double(v: &Json, path: &str) -> Result<f64, QueryError> {
    match v {
        Json::Null => Ok(0.0),
        Json::Number(n) => Ok(n.as_f64().unwrap_or(0.0)),
        Json::String(s) => {
            let t = s.trim();
            match t {
                "" => Ok(0.0),
                "NaN" => Ok(f64::NAN),
                "Infinity" | "+Infinity" => Ok(f64::INFINITY),
                "-Infinity" => Ok(f64::NEG_INFINITY),
                _ => crate::model::java::parse_double(t)
                    .map_err(|_| mapping(path, format!("not a valid Double value: \"{s}\""))),
            }
        }
        Json::Bool(_) | Json::Array(_) | Json::Object(_) => {
            Err(mapping(path, format!("not a valid Double value: {v}")))
        }
    }
}

fn fill_policy(v: Option<&Json>, path: &str) -> Result<Option<NumericFill>, QueryError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let o = object(v, path)?;
    let policy = match string(o, "policy", path)? {
        None => None,
        Some(p) => Some(FillKind::parse(&p).ok_or_else(|| {
            mapping(
                &format!("{path}.policy"),
                format!("Unrecognized fill policy: {p}"),
            )
        })?),
    };
    let value = match o.get("value") {
        None => 0.0,
        Some(v) => double(v, &format!("{path}.value"))?,
    };
    NumericFill::build(policy, value)
        .map(Some)
        .map_err(|e| bad(e, format!("{path}: invalid fill policy")))
}

/// Parses the request body (`JSON.parseToObject(content, Query.class)`).
pub fn parse(body: &[u8]) -> Result<ExpQuery, QueryError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(bad("Incoming data was null or empty", ""));
    }
    let root: Json = serde_json::from_slice(body)
        .map_err(|e| bad("Unable to parse the given JSON", e.to_string()))?;
    let o = object(&root, "query")?;
    let time = match field(o, "time") {
        None => None,
        Some(v) => {
            let t = object(v, "time")?;
            let downsampler = match field(t, "downsampler") {
                None => None,
                Some(d) => {
                    let d = object(d, "time.downsampler")?;
                    let p = "time.downsampler";
                    Some(Downsampler {
                        interval: string(d, "interval", p)?,
                        aggregator: string(d, "aggregator", p)?,
                        fill_policy: fill_policy(
                            d.get("fillPolicy"),
                            "time.downsampler.fillPolicy",
                        )?,
                    })
                }
            };
            Some(Timespan {
                start: string(t, "start", "time")?,
                end: string(t, "end", "time")?,
                timezone: string(t, "timezone", "time")?,
                downsampler,
                aggregator: string(t, "aggregator", "time")?,
                rate: boolean(t, "rate", "time", false)?,
            })
        }
    };
    let filters = match list(o, "filters")? {
        None => None,
        Some(a) => {
            let mut out = Vec::with_capacity(a.len());
            for (i, f) in a.iter().enumerate() {
                let p = format!("filters[{i}]");
                let fo = object(f, &p)?;
                let tags = match list(fo, "tags")? {
                    None => None,
                    Some(ts) => {
                        let mut tags = Vec::with_capacity(ts.len());
                        for (j, t) in ts.iter().enumerate() {
                            let tp = format!("{p}.tags[{j}]");
                            // Absent members are nulls to the builder, so
                            // its own messages name them.
                            let mut t = t.clone();
                            if let Json::Object(m) = &mut t {
                                for k in ["type", "tagk", "filter"] {
                                    m.entry(k).or_insert(Json::Null);
                                }
                            }
                            let spec: FilterSpec =
                                serde_json::from_value(t).map_err(|e| mapping(&tp, e))?;
                            if spec.kind.is_empty() {
                                return Err(bad("The filter type cannot be null or empty", tp));
                            }
                            if spec.tagk.is_empty() {
                                return Err(bad("The tagk cannot be null or empty", tp));
                            }
                            tags.push(TagFilter::from_spec(&spec).map_err(|e| bad(e, tp))?);
                        }
                        Some(tags)
                    }
                };
                out.push(Filter {
                    id: string(fo, "id", &p)?,
                    tags,
                    explicit_tags: boolean(fo, "explicitTags", &p, false)?,
                });
            }
            Some(out)
        }
    };
    let metrics = match list(o, "metrics")? {
        None => None,
        Some(a) => {
            let mut out = Vec::with_capacity(a.len());
            for (i, m) in a.iter().enumerate() {
                let p = format!("metrics[{i}]");
                let mo = object(m, &p)?;
                out.push(Metric {
                    metric: string(mo, "metric", &p)?,
                    id: string(mo, "id", &p)?,
                    filter: string(mo, "filter", &p)?,
                    time_offset: string(mo, "timeOffset", &p)?,
                    aggregator: string(mo, "aggregator", &p)?,
                    fill_policy: fill_policy(mo.get("fillPolicy"), &format!("{p}.fillPolicy"))?,
                });
            }
            Some(out)
        }
    };
    let expressions = match list(o, "expressions")? {
        None => None,
        Some(a) => {
            let mut out = Vec::with_capacity(a.len());
            for (i, e) in a.iter().enumerate() {
                let p = format!("expressions[{i}]");
                let eo = object(e, &p)?;
                let join = match field(eo, "join") {
                    None => None,
                    Some(j) => {
                        let jp = format!("{p}.join");
                        let jo = object(j, &jp)?;
                        let operator = match string(jo, "operator", &jp)? {
                            None => None,
                            Some(s) => Some(match s.to_ascii_lowercase().as_str() {
                                "union" => SetOperator::Union,
                                "intersection" => SetOperator::Intersection,
                                _ => {
                                    return Err(mapping(
                                        &format!("{jp}.operator"),
                                        format!("Unrecognized set operator: {s}"),
                                    ));
                                }
                            }),
                        };
                        Some(Join {
                            operator,
                            use_query_tags: boolean(jo, "useQueryTags", &jp, false)?,
                            include_agg_tags: boolean(jo, "includeAggTags", &jp, true)?,
                        })
                    }
                };
                out.push(Expression {
                    id: string(eo, "id", &p)?,
                    expr: string(eo, "expr", &p)?,
                    join,
                    fill_policy: fill_policy(eo.get("fillPolicy"), &format!("{p}.fillPolicy"))?,
                    script: None,
                });
            }
            Some(out)
        }
    };
    let outputs = match list(o, "outputs")? {
        None => None,
        Some(a) => {
            let mut out = Vec::with_capacity(a.len());
            for (i, x) in a.iter().enumerate() {
                let p = format!("outputs[{i}]");
                let xo = object(x, &p)?;
                out.push(Output {
                    id: string(xo, "id", &p)?,
                    alias: string(xo, "alias", &p)?,
                });
            }
            Some(out)
        }
    };
    Ok(ExpQuery {
        name: string(o, "name", "query")?,
        time,
        filters,
        metrics,
        expressions,
        outputs,
    })
}

/// `Query.validateId`: letters and digits only, not a lone digit.
pub fn validate_id(id: Option<&str>) -> Result<(), String> {
    let id = id
        .filter(|i| !i.is_empty())
        .ok_or("The ID cannot be null or empty")?;
    // Java's Character.isLetterOrDigit over UTF-16 units; for the BMP
    // this is Unicode's alphanumeric test.
    if let Some(c) = id.chars().find(|c| !c.is_alphanumeric()) {
        return Err(format!("Invalid id (\"{id}\"): illegal character: {c}"));
    }
    let mut chars = id.chars();
    if let (Some(c), None) = (chars.next(), chars.next())
        && c.is_ascii_digit()
    {
        return Err("The ID cannot be an integer".into());
    }
    Ok(())
}

/// A Java `String.valueOf` of an optional id (`null` when absent).
fn show(id: &Option<String>) -> &str {
    id.as_deref().unwrap_or("null")
}

/// `Aggregators.get(name.toLowerCase())`.
fn aggregator_exists(name: &str) -> bool {
    Aggregator::by_name(&name.to_lowercase()).is_some()
}

impl Timespan {
    fn validate(&self, now_ms: u64) -> Result<(), String> {
        let start = self
            .start
            .as_deref()
            .filter(|s| !s.is_empty())
            .ok_or("missing or empty start")?;
        // Only the syntax is checked here; the zone and the range are the
        // sub-query's business (TSQuery.validateAndSetQuery).
        let utc = chrono_tz::Tz::UTC;
        parse_time(start, now_ms, utc).map_err(|e| e.message())?;
        if let Some(end) = self.end.as_deref().filter(|e| !e.is_empty()) {
            parse_time(end, now_ms, utc).map_err(|e| e.message())?;
        }
        if let Some(d) = &self.downsampler {
            let interval = d
                .interval
                .as_deref()
                .filter(|i| !i.is_empty())
                .ok_or("Missing or empty interval")?;
            parse_duration(interval).map_err(|e| e.to_string())?;
            let agg = d
                .aggregator
                .as_deref()
                .filter(|a| !a.is_empty())
                .ok_or("Missing or empty aggregator")?;
            if !aggregator_exists(agg) {
                return Err("Invalid aggregator".into());
            }
        }
        let agg = self
            .aggregator
            .as_deref()
            .filter(|a| !a.is_empty())
            .ok_or("Missing or empty aggregator")?;
        if !aggregator_exists(agg) {
            return Err("Invalid aggregator".into());
        }
        Ok(())
    }
}

impl Metric {
    fn validate(&self, now_ms: u64) -> Result<(), String> {
        if self.metric.as_deref().is_none_or(str::is_empty) {
            return Err("missing or empty metric".into());
        }
        if self.id.as_deref().is_none_or(str::is_empty) {
            return Err("missing or empty id".into());
        }
        validate_id(self.id.as_deref())?;
        if let Some(off) = &self.time_offset {
            parse_time(off, now_ms, chrono_tz::Tz::UTC).map_err(|e| e.message())?;
        }
        if let Some(a) = self.aggregator.as_deref().filter(|a| !a.is_empty())
            && !aggregator_exists(a)
        {
            return Err("Invalid aggregator".into());
        }
        Ok(())
    }
}

impl Filter {
    fn validate(&self) -> Result<(), String> {
        if self.id.as_deref().is_none_or(str::is_empty) {
            return Err("Missing or empty id".into());
        }
        validate_id(self.id.as_deref())
    }
}

impl Expression {
    fn validate(&mut self) -> Result<(), String> {
        if self.id.as_deref().is_none_or(str::is_empty) {
            return Err("missing or empty id".into());
        }
        validate_id(self.id.as_deref())?;
        let expr = self
            .expr
            .as_deref()
            .filter(|e| !e.is_empty())
            .ok_or("missing or empty expr")?;
        self.script = Some(Script::parse(expr).map_err(|e| e.to_string())?);
        if self.join.is_none() {
            self.join = Some(Join::DEFAULT);
        }
        Ok(())
    }

    /// The variables as `Expression.getVariables()` (a `HashSet`) iterates.
    pub fn variables_in_set_order(&self) -> Vec<&str> {
        match &self.script {
            None => Vec::new(),
            Some(s) => {
                let vars: Vec<&str> = s.variables().iter().map(String::as_str).collect();
                hashmap_order(&vars, 16)
            }
        }
    }
}

/// `Validatable.validateCollection`: the first failure, as
/// `Invalid <what> at index <i>`.
fn each<T>(
    items: &mut [T],
    what: &str,
    mut f: impl FnMut(&mut T) -> Result<(), String>,
) -> Result<(), QueryError> {
    for (i, item) in items.iter_mut().enumerate() {
        f(item).map_err(|e| bad(format!("Invalid {what} at index {i}"), e))?;
    }
    Ok(())
}

impl ExpQuery {
    /// `Query.validate`, in its order.
    pub fn validate(&mut self, now_ms: u64) -> Result<(), QueryError> {
        let time = self.time.as_ref().ok_or_else(|| bad("missing time", ""))?;
        time.validate(now_ms).map_err(|e| bad("Invalid time", e))?;
        let metrics = self
            .metrics
            .as_mut()
            .filter(|m| !m.is_empty())
            .ok_or_else(|| bad("missing or empty metrics", ""))?;
        let mut variable_ids: Vec<Option<String>> = Vec::new();
        for m in metrics.iter() {
            if variable_ids.contains(&m.id) {
                return Err(bad(format!("duplicated metric id: {}", show(&m.id)), ""));
            }
            variable_ids.push(m.id.clone());
        }
        if let Some(filters) = &self.filters {
            let mut ids: Vec<&Option<String>> = Vec::new();
            for f in filters {
                if ids.contains(&&f.id) {
                    return Err(bad(format!("duplicated filter id: {}", show(&f.id)), ""));
                }
                ids.push(&f.id);
            }
        }
        if let Some(exps) = &self.expressions {
            for e in exps {
                if variable_ids.contains(&e.id) {
                    return Err(bad(
                        format!("Duplicated variable or expression id: {}", show(&e.id)),
                        "",
                    ));
                }
                variable_ids.push(e.id.clone());
            }
        }
        each(metrics, "metric", |m| m.validate(now_ms))?;
        if let Some(filters) = self.filters.as_mut() {
            each(filters, "filter", |f| f.validate())?;
        }
        if let Some(exps) = self.expressions.as_mut() {
            each(exps, "expression", Expression::validate)?;
        }
        // validateFilters: only when the request has a filter list.
        if let Some(filters) = &self.filters {
            for m in self.metrics.iter().flatten() {
                if let Some(f) = m.filter.as_deref().filter(|f| !f.is_empty())
                    && !filters.iter().any(|x| x.id.as_deref() == Some(f))
                {
                    return Err(bad(
                        format!("unrecognized filter id {f} in metric {}", show(&m.id)),
                        "",
                    ));
                }
            }
        }
        for e in self.expressions.iter().flatten() {
            for var in e.variables_in_set_order() {
                if !variable_ids.iter().any(|v| v.as_deref() == Some(var)) {
                    return Err(bad(
                        format!("Expression [{}] was missing input {var}", show(&e.expr)),
                        "",
                    ));
                }
            }
        }
        Ok(())
    }

    /// The request as 2.4.1 echoes it under `"query"`: Jackson's bean
    /// serialization of the validated objects (nulls included, defaults
    /// filled in by validation), members in its order.
    pub fn echo(&self, out: &mut String) {
        out.push_str("{\"name\":");
        opt_str(out, &self.name);
        out.push_str(",\"time\":");
        match &self.time {
            None => out.push_str("null"),
            Some(t) => {
                out.push_str("{\"start\":");
                opt_str(out, &t.start);
                out.push_str(",\"end\":");
                opt_str(out, &t.end);
                out.push_str(",\"timezone\":");
                opt_str(out, &t.timezone);
                out.push_str(",\"downsampler\":");
                match &t.downsampler {
                    None => out.push_str("null"),
                    Some(d) => {
                        out.push_str("{\"interval\":");
                        opt_str(out, &d.interval);
                        out.push_str(",\"aggregator\":");
                        opt_str(out, &d.aggregator);
                        out.push_str(",\"fillPolicy\":");
                        fill_json(out, &d.fill_policy);
                        out.push('}');
                    }
                }
                out.push_str(",\"aggregator\":");
                opt_str(out, &t.aggregator);
                out.push_str(",\"rate\":");
                out.push_str(if t.rate { "true" } else { "false" });
                out.push('}');
            }
        }
        out.push_str(",\"filters\":");
        list_json(out, self.filters.as_deref(), |out, f| {
            out.push_str("{\"id\":");
            opt_str(out, &f.id);
            out.push_str(",\"tags\":");
            list_json(out, f.tags.as_deref(), |out, t| {
                out.push_str("{\"tagk\":");
                str_json(out, &t.tagk);
                out.push_str(",\"filter\":");
                str_json(out, &t.filter);
                out.push_str(",\"group_by\":");
                out.push_str(if t.group_by { "true" } else { "false" });
                out.push_str(",\"type\":");
                str_json(out, t.kind.name());
                out.push('}');
            });
            out.push_str(",\"explicitTags\":");
            out.push_str(if f.explicit_tags { "true" } else { "false" });
            out.push('}');
        });
        out.push_str(",\"metrics\":");
        list_json(out, self.metrics.as_deref(), |out, m| {
            out.push_str("{\"metric\":");
            opt_str(out, &m.metric);
            out.push_str(",\"id\":");
            opt_str(out, &m.id);
            out.push_str(",\"filter\":");
            opt_str(out, &m.filter);
            out.push_str(",\"aggregator\":");
            opt_str(out, &m.aggregator);
            out.push_str(",\"fillPolicy\":");
            fill_json(out, &m.fill_policy);
            out.push_str(",\"timeOffset\":");
            opt_str(out, &m.time_offset);
            out.push('}');
        });
        out.push_str(",\"expressions\":");
        list_json(out, self.expressions.as_deref(), |out, e| {
            out.push_str("{\"id\":");
            opt_str(out, &e.id);
            out.push_str(",\"expr\":");
            opt_str(out, &e.expr);
            out.push_str(",\"join\":");
            match &e.join {
                None => out.push_str("null"),
                Some(j) => {
                    out.push_str("{\"operator\":");
                    match j.operator {
                        None => out.push_str("null"),
                        Some(o) => str_json(out, o.name()),
                    }
                    // Properties with a getter but no field of that name
                    // come after the others; the documented example shows
                    // them in name order (Metric's fillPolicy, timeOffset).
                    out.push_str(",\"includeAggTags\":");
                    out.push_str(if j.include_agg_tags { "true" } else { "false" });
                    out.push_str(",\"useQueryTags\":");
                    out.push_str(if j.use_query_tags { "true" } else { "false" });
                    out.push('}');
                }
            }
            out.push_str(",\"fillPolicy\":");
            fill_json(out, &e.fill_policy);
            out.push('}');
        });
        out.push_str(",\"outputs\":");
        list_json(out, self.outputs.as_deref(), |out, o| {
            out.push_str("{\"id\":");
            opt_str(out, &o.id);
            out.push_str(",\"alias\":");
            opt_str(out, &o.alias);
            out.push('}');
        });
        out.push('}');
    }
}

pub(super) fn str_json(out: &mut String, s: &str) {
    out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into()));
}

fn opt_str(out: &mut String, s: &Option<String>) {
    match s {
        None => out.push_str("null"),
        Some(s) => str_json(out, s),
    }
}

/// A double as Jackson writes it (`Double.toString`; NaN and infinities
/// quoted, as `QUOTE_NON_NUMERIC_NUMBERS` does).
pub(super) fn double_json(out: &mut String, d: f64) {
    if d.is_finite() {
        out.push_str(&double_to_string(d));
    } else {
        out.push('"');
        out.push_str(&double_to_string(d));
        out.push('"');
    }
}

fn fill_json(out: &mut String, f: &Option<NumericFill>) {
    match f {
        None => out.push_str("null"),
        Some(f) => {
            out.push_str("{\"policy\":");
            str_json(out, f.policy.name());
            out.push_str(",\"value\":");
            double_json(out, f.value);
            out.push('}');
        }
    }
}

fn list_json<T>(out: &mut String, items: Option<&[T]>, mut each: impl FnMut(&mut String, &T)) {
    match items {
        None => out.push_str("null"),
        Some(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                each(out, item);
            }
            out.push(']');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000_000;

    fn check(body: &str) -> Result<ExpQuery, QueryError> {
        let mut q = parse(body.as_bytes())?;
        q.validate(NOW)?;
        Ok(q)
    }

    fn err(body: &str) -> (String, String) {
        let e = check(body).unwrap_err();
        (e.message(), e.details().unwrap_or("").to_string())
    }

    const TIME: &str = r#""time":{"start":"1h-ago","aggregator":"sum"}"#;

    #[test]
    fn validation_messages_in_order() {
        assert_eq!(err("{}").0, "missing time");
        assert_eq!(
            err(r#"{"time":{"aggregator":"sum"}}"#),
            ("Invalid time".into(), "missing or empty start".into())
        );
        assert_eq!(
            err(r#"{"time":{"start":"1h-ago"}}"#),
            ("Invalid time".into(), "Missing or empty aggregator".into())
        );
        assert_eq!(
            err(r#"{"time":{"start":"1h-ago","aggregator":"nope"}}"#),
            ("Invalid time".into(), "Invalid aggregator".into())
        );
        assert_eq!(
            err(
                r#"{"time":{"start":"1h-ago","aggregator":"sum","downsampler":{"interval":"1m"}}}"#
            ),
            ("Invalid time".into(), "Missing or empty aggregator".into())
        );
        assert_eq!(err(&format!("{{{TIME}}}")).0, "missing or empty metrics");
        assert_eq!(
            err(&format!(
                r#"{{{TIME},"metrics":[{{"id":"a","metric":"m"}},{{"id":"a","metric":"n"}}]}}"#
            ))
            .0,
            "duplicated metric id: a"
        );
        assert_eq!(
            err(&format!(
                r#"{{{TIME},"metrics":[{{"id":"a","metric":"m"}}],"filters":[{{"id":"f"}},{{"id":"f"}}]}}"#
            ))
            .0,
            "duplicated filter id: f"
        );
        assert_eq!(
            err(&format!(
                r#"{{{TIME},"metrics":[{{"id":"a","metric":"m"}}],"expressions":[{{"id":"a","expr":"a"}}]}}"#
            ))
            .0,
            "Duplicated variable or expression id: a"
        );
        assert_eq!(
            err(&format!(r#"{{{TIME},"metrics":[{{"id":"a"}}]}}"#)),
            (
                "Invalid metric at index 0".into(),
                "missing or empty metric".into()
            )
        );
        assert_eq!(
            err(&format!(
                r#"{{{TIME},"metrics":[{{"id":"a_b","metric":"m"}}]}}"#
            ))
            .1,
            "Invalid id (\"a_b\"): illegal character: _"
        );
        assert_eq!(
            err(&format!(
                r#"{{{TIME},"metrics":[{{"id":"1","metric":"m"}}]}}"#
            ))
            .1,
            "The ID cannot be an integer"
        );
        assert_eq!(
            err(&format!(
                r#"{{{TIME},"metrics":[{{"id":"a","metric":"m"}}],"filters":[{{"tags":[]}}]}}"#
            )),
            (
                "Invalid filter at index 0".into(),
                "Missing or empty id".into()
            )
        );
        assert_eq!(
            err(&format!(
                r#"{{{TIME},"metrics":[{{"id":"a","metric":"m"}}],"expressions":[{{"id":"e","expr":"a +"}}]}}"#
            ))
            .0,
            "Invalid expression at index 0"
        );
        assert_eq!(
            err(&format!(
                r#"{{{TIME},"metrics":[{{"id":"a","metric":"m","filter":"g"}}],"filters":[{{"id":"f"}}]}}"#
            ))
            .0,
            "unrecognized filter id g in metric a"
        );
        assert_eq!(
            err(&format!(
                r#"{{{TIME},"metrics":[{{"id":"a","metric":"m"}}],"expressions":[{{"id":"e","expr":"a + b"}}]}}"#
            ))
            .0,
            "Expression [a + b] was missing input b"
        );
    }

    #[test]
    fn fill_policies_as_numeric_fill_policy_builds_them() {
        let fill = |json: &str| fill_policy(Some(&serde_json::from_str(json).unwrap()), "f");
        assert_eq!(
            fill(r#"{"policy":"zero"}"#).unwrap(),
            Some(NumericFill::ZERO)
        );
        let s = fill(r#"{"policy":"scalar","value":"1"}"#).unwrap().unwrap();
        assert_eq!((s.policy, s.value), (FillKind::Scalar, 1.0));
        assert!(fill(r#"{"policy":"nan"}"#).unwrap().unwrap().value.is_nan());
        assert_eq!(
            fill(r#"{"value":42}"#).unwrap().unwrap().policy,
            FillKind::Scalar
        );
        assert_eq!(
            fill(r#"{"policy":"nan","value":1}"#).unwrap_err().message(),
            "The value for NONE and NAN must be NaN"
        );
        assert_eq!(
            fill(r#"{"policy":"zero","value":1}"#)
                .unwrap_err()
                .message(),
            "The value for ZERO must be 0"
        );
        assert!(
            fill(r#"{"policy":"sometimes"}"#)
                .unwrap_err()
                .details()
                .unwrap()
                .contains("Unrecognized fill policy: sometimes")
        );
    }

    #[test]
    fn echo_is_jacksons_bean_order_with_defaults() {
        let q = check(&format!(
            r#"{{{TIME},"metrics":[{{"id":"a","metric":"m","fillPolicy":{{"policy":"nan"}}}}],
               "expressions":[{{"id":"e","expr":"a * 2"}}]}}"#
        ))
        .unwrap();
        let mut s = String::new();
        q.echo(&mut s);
        assert_eq!(
            s,
            r#"{"name":null,"time":{"start":"1h-ago","end":null,"timezone":null,"downsampler":null,"aggregator":"sum","rate":false},"filters":null,"metrics":[{"metric":"m","id":"a","filter":null,"aggregator":null,"fillPolicy":{"policy":"nan","value":"NaN"},"timeOffset":null}],"expressions":[{"id":"e","expr":"a * 2","join":{"operator":"union","includeAggTags":true,"useQueryTags":false},"fillPolicy":null}],"outputs":null}"#
        );
    }

    #[test]
    fn filter_builder_messages() {
        let e = |tags: &str| {
            err(&format!(
                r#"{{{TIME},"metrics":[{{"id":"a","metric":"m"}}],"filters":[{{"id":"f","tags":[{tags}]}}]}}"#
            ))
            .0
        };
        assert_eq!(
            e(r#"{"tagk":"host","filter":"*"}"#),
            "The filter type cannot be null or empty"
        );
        assert_eq!(
            e(r#"{"type":"wildcard","filter":"*"}"#),
            "The tagk cannot be null or empty"
        );
        assert_eq!(
            e(r#"{"type":"nope","tagk":"host","filter":"*"}"#),
            "Could not find a tag value filter of the type: nope"
        );
    }

    #[test]
    fn ids() {
        assert!(validate_id(Some("abc1")).is_ok());
        assert!(validate_id(Some("a")).is_ok());
        assert!(validate_id(Some("1")).is_err());
        assert!(validate_id(Some("a.b")).is_err());
        assert!(validate_id(Some("")).is_err());
    }
}
