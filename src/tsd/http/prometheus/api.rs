//! The Prometheus query API under `/prometheus/api/v1/`: `query`,
//! `query_range`, `series`, `labels`, `label/<name>/values`, `metadata`,
//! `status/buildinfo`, `status/tsdb`, `query_exemplars`, `format_query`, answered in
//! Prometheus 2.42's JSON and error shapes and status codes. Parameters
//! are read in `api_params.rs`, answers written in `api_json.rs`; the
//! series come from the database through [`crate::promql::source`], and
//! queries are evaluated by [`crate::promql::Engine`] on the blocking
//! pool (they are CPU-bound and read storage), listed in
//! `/api/stats/query` and stopped by its cancel.

use std::sync::Arc;
use std::time::Duration;

use hyper::Method;
use hyper::body::Incoming;
use hyper::http::request::Parts;

use super::super::body::read_whole;
use super::super::cardinality;
use super::super::query::{blocking, context};
use super::super::reply::Reply;
use super::api_json as json;
use super::api_params::{self as params, Form, MAX_TIME_MS, MIN_TIME_MS};
use super::metadata::MetadataStore;
use crate::promql::engine::parse_query;
use crate::promql::source::{DbStorage, SourceLimits};
use crate::promql::{Engine, EngineOptions, ErrorKind, PromError, Storage};
use crate::tsd::TsdState;
use crate::tsd::stats::{ShownQuery, Watched};

/// Prometheus answers JSON with this content type, without a charset.
const JSON: &str = "application/json";
/// Go's `http.NotFound` and httprouter's 405 are plain text.
const TEXT: &str = "text/plain; charset=utf-8";

/// The version `status/buildinfo` reports. Grafana reads it to choose
/// which Prometheus features it uses (e.g. the label values and series
/// calls with `match[]`, range-query alignment); rtsdb answers PromQL as
/// 2.42 does, so it says 2.42.0 to get exactly the requests 2.42 gets.
const PROMETHEUS_VERSION: &str = "2.42.0";

/// 2.42's cap on a range query's steps per series.
const MAX_POINTS_PER_SERIES: i128 = 11_000;

/// `/prometheus<sub>` for every `sub` but the remote-write path.
pub(super) async fn route(state: &Arc<TsdState>, head: Parts, body: Incoming, sub: &str) -> Reply {
    let Some(endpoint) = sub.strip_prefix("/api/v1/").map(Endpoint::of) else {
        return not_found();
    };
    let Some(endpoint) = endpoint else {
        return not_found();
    };
    let method = head.method.clone();
    // Prometheus answers OPTIONS on every API path with no content (CORS
    // preflight).
    if method == Method::OPTIONS {
        return Reply::new(204, JSON, Vec::new());
    }
    let get_only = matches!(
        endpoint,
        Endpoint::LabelValues(_) | Endpoint::Metadata | Endpoint::BuildInfo | Endpoint::StatusTsdb
    );
    if !(method == Method::GET || (method == Method::POST && !get_only)) {
        return Reply::new(405, TEXT, "Method Not Allowed\n").with_header(
            "Allow",
            if get_only {
                "GET, OPTIONS"
            } else {
                "GET, POST, OPTIONS"
            },
        );
    }
    let body = if method == Method::POST && is_form(&head) {
        match read_whole(state, &head, body).await {
            Ok((bytes, _held)) => Some(bytes),
            Err(refused) => return body_refused(refused),
        }
    } else {
        None
    };
    let form = Form::new(head.uri.query(), body.as_deref());
    blocking(state, move |st| answer(st, &endpoint, &form)).await
}

/// Whether the request carries a form body Go's `ParseForm` reads.
fn is_form(head: &Parts) -> bool {
    head.headers
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| {
            t.trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        })
}

/// A body the body limits refused, in Prometheus' error shape with the
/// status the limits chose (413 too large, 503 over the budget…).
fn body_refused(refused: Reply) -> Reply {
    let message = serde_json::from_slice::<serde_json::Value>(&refused.body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| "error reading the request body".to_string());
    Reply::new(
        refused.status,
        JSON,
        json::error("bad_data", &format!("error parsing form values: {message}")),
    )
}

/// The API paths served here.
#[derive(Debug, Clone, PartialEq)]
enum Endpoint {
    Query,
    QueryRange,
    Series,
    Labels,
    /// `label/<name>/values`, the name percent-decoded.
    LabelValues(String),
    Metadata,
    BuildInfo,
    /// `status/tsdb`: the series index's cardinality.
    StatusTsdb,
    QueryExemplars,
    FormatQuery,
}

impl Endpoint {
    /// The endpoint of a path below `/api/v1/`, if it is one.
    fn of(path: &str) -> Option<Endpoint> {
        Some(match path {
            "query" => Endpoint::Query,
            "query_range" => Endpoint::QueryRange,
            "series" => Endpoint::Series,
            "labels" => Endpoint::Labels,
            "metadata" => Endpoint::Metadata,
            "status/buildinfo" => Endpoint::BuildInfo,
            "status/tsdb" => Endpoint::StatusTsdb,
            "query_exemplars" => Endpoint::QueryExemplars,
            "format_query" => Endpoint::FormatQuery,
            _ => {
                let name = path.strip_prefix("label/")?.strip_suffix("/values")?;
                if name.is_empty() || name.contains('/') {
                    return None;
                }
                let decoded = params::form_pairs(&format!("n={}", name.replace('+', "%2B")));
                Endpoint::LabelValues(decoded.into_iter().next()?.1)
            }
        })
    }
}

/// An API error: Prometheus' `errorType` and message.
struct ApiError {
    kind: ErrorKind,
    message: String,
}

impl ApiError {
    fn bad_data(message: impl Into<String>) -> ApiError {
        ApiError {
            kind: ErrorKind::BadData,
            message: message.into(),
        }
    }

    /// 2.42's `invalidParamError`: bad_data naming the parameter.
    fn param(name: &str, message: impl std::fmt::Display) -> ApiError {
        ApiError::bad_data(format!("invalid parameter \"{name}\": {message}"))
    }

    /// The HTTP status 2.42 answers with (`respondError`): a canceled
    /// query is a 503 there, as a timeout (the client has gone anyway).
    fn status(&self) -> u16 {
        match self.kind {
            ErrorKind::BadData => 400,
            ErrorKind::Execution => 422,
            ErrorKind::Timeout | ErrorKind::Canceled => 503,
            ErrorKind::Internal => 500,
        }
    }

    fn reply(&self) -> Reply {
        Reply::new(
            self.status(),
            JSON,
            json::error(self.kind.as_str(), &self.message),
        )
    }
}

impl From<PromError> for ApiError {
    fn from(e: PromError) -> ApiError {
        ApiError {
            kind: e.kind,
            message: e.message,
        }
    }
}

/// What a successful call answers: its `data` as JSON (none: 204, as
/// 2.42 answers a call with no data), and warnings.
struct Answer {
    data: Option<String>,
    warnings: Vec<String>,
}

impl Answer {
    fn data(data: String) -> Answer {
        Answer {
            data: Some(data),
            warnings: Vec::new(),
        }
    }
}

/// Answers a call on the blocking pool.
fn answer(st: &TsdState, endpoint: &Endpoint, form: &Form) -> Reply {
    let answered = match endpoint {
        Endpoint::Query => query(st, form),
        Endpoint::QueryRange => query_range(st, form),
        Endpoint::Series => series(st, form),
        Endpoint::Labels => labels(st, form),
        Endpoint::LabelValues(name) => label_values(st, name, form),
        Endpoint::Metadata => metadata(&st.metadata, form),
        Endpoint::BuildInfo => Ok(Answer::data(build_info())),
        Endpoint::StatusTsdb => status_tsdb(st, form),
        Endpoint::QueryExemplars => query_exemplars(form),
        Endpoint::FormatQuery => format_query(form),
    };
    match answered {
        Ok(Answer {
            data: Some(data),
            warnings,
        }) => Reply::new(200, JSON, json::success(&data, &warnings)),
        Ok(Answer { data: None, .. }) => Reply::new(204, JSON, Vec::new()),
        Err(e) => e.reply(),
    }
}

/// The engine for one request: 2.42's defaults, its timeout lowered to
/// the request's `timeout` when that is shorter.
fn engine(form: &Form) -> Result<Engine, ApiError> {
    let mut options = EngineOptions::default();
    let t = form.value("timeout");
    if !t.is_empty() {
        let ns = params::parse_duration(t).map_err(|e| ApiError::param("timeout", e))?;
        let asked = Duration::from_nanos(u64::try_from(ns).unwrap_or(0));
        options.timeout = options.timeout.min(asked);
    }
    Ok(Engine::new(options))
}

/// Runs `f` with the database as PromQL's storage, bounded as the engine
/// bounds its samples (and by OpenTSDB's data point limit when set), its
/// reads reported to the watched query `w` when there is one.
fn with_storage<T>(
    st: &TsdState,
    w: Option<&Watched>,
    max_samples: usize,
    f: impl FnOnce(&dyn Storage) -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    let ctx = match w {
        Some(w) => context(st).with_progress(w.progress.clone()),
        None => context(st),
    };
    let limits = SourceLimits::new(max_samples, ctx.limits.max_data_points);
    let storage = DbStorage::new(&ctx, limits);
    f(&storage)
}

/// Runs the query `shown` as `f`, listed in `/api/stats/query` while it
/// runs (and cancellable from there), its outcome recorded there.
fn watched<T>(
    st: &TsdState,
    shown: serde_json::Value,
    f: impl FnOnce(&Watched) -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    let w = st.queries.start(ShownQuery::Json(shown), String::new());
    let done = f(&w);
    match &done {
        Ok(_) => st.queries.finish(w.id, 200, None),
        Err(e) => st.queries.finish(w.id, e.status(), Some(e.message.clone())),
    }
    done
}

/// `status/tsdb`: the series index's cardinality in 2.42's shape, lists
/// cut to `limit` (10 by default).
fn status_tsdb(st: &TsdState, form: &Form) -> Result<Answer, ApiError> {
    let raw = form.value("limit");
    let limit = cardinality::parse_top_n((!raw.is_empty()).then_some(raw))
        .map_err(|e| ApiError::param("limit", e))?;
    let (counted, _) = st.cardinality.get(&st.db, limit).map_err(|e| ApiError {
        kind: ErrorKind::Internal,
        message: e.to_string(),
    })?;
    Ok(Answer::data(
        cardinality::prometheus_status(&counted, limit).to_string(),
    ))
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// `query`: an instant query at `time` (now by default). A `step` (sent
/// by vmalert) and other parameters are ignored, as 2.42 ignores them.
fn query(st: &TsdState, form: &Form) -> Result<Answer, ApiError> {
    let time =
        params::parse_time_param(form, "time", now_ms()).map_err(|e| ApiError::param("time", e))?;
    let engine = engine(form)?;
    let q = form.value("query");
    let max = engine.options.max_samples;
    let shown = serde_json::json!({"promql": q, "time": time});
    let value = watched(st, shown, |w| {
        let engine = engine.watching(w.progress.clone());
        with_storage(st, Some(w), max, |s| {
            engine.instant(s, q, time).map_err(|e| match e.kind {
                // 2.42 reports a query it cannot parse as a bad parameter.
                ErrorKind::BadData => ApiError::param("query", e.message),
                _ => e.into(),
            })
        })
    })?;
    Ok(Answer::data(json::query_data(&value)))
}

/// `query_range`: the query at every `step` from `start` to `end`, both
/// required, with 2.42's checks in its order.
fn query_range(st: &TsdState, form: &Form) -> Result<Answer, ApiError> {
    let start = params::parse_time(form.value("start")).map_err(|e| ApiError::param("start", e))?;
    let end = params::parse_time(form.value("end")).map_err(|e| ApiError::param("end", e))?;
    if end < start {
        return Err(ApiError::param(
            "end",
            "end timestamp must not be before start time",
        ));
    }
    let step_ns =
        params::parse_duration(form.value("step")).map_err(|e| ApiError::param("step", e))?;
    if step_ns <= 0 {
        return Err(ApiError::param(
            "step",
            "zero or negative query resolution step widths are not accepted. Try a positive integer",
        ));
    }
    let span_ns = (i128::from(end) - i128::from(start)) * 1_000_000;
    if span_ns / i128::from(step_ns) > MAX_POINTS_PER_SERIES {
        return Err(ApiError::bad_data(
            "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)",
        ));
    }
    // The engine counts in ms: a step under 1 ms (which 2.42 takes but
    // cannot mean more than one point per ms) is 1 ms.
    let step_ms = (step_ns / 1_000_000).max(1);
    let engine = engine(form)?;
    let q = form.value("query");
    let max = engine.options.max_samples;
    let shown = serde_json::json!({"promql": q, "start": start, "end": end, "step": step_ms});
    let value = watched(st, shown, |w| {
        let engine = engine.watching(w.progress.clone());
        with_storage(st, Some(w), max, |s| {
            engine.range(s, q, start, end, step_ms).map_err(Into::into)
        })
    })?;
    Ok(Answer::data(json::query_data(&value)))
}

/// `start` and `end` of the metadata calls: the whole time line by
/// default.
fn time_range(form: &Form) -> Result<(i64, i64), ApiError> {
    let start = params::parse_time_param(form, "start", MIN_TIME_MS)
        .map_err(|e| ApiError::param("start", e))?;
    let end = params::parse_time_param(form, "end", MAX_TIME_MS)
        .map_err(|e| ApiError::param("end", e))?;
    Ok((start, end))
}

/// `limit`: newer Prometheus (2.42 has none) cuts the answer to it and
/// says so in a warning; rtsdb follows that.
fn limited<T>(mut items: Vec<T>, limit: usize) -> (Vec<T>, Vec<String>) {
    if limit > 0 && items.len() > limit {
        items.truncate(limit);
        return (items, vec!["results truncated due to limit".to_string()]);
    }
    (items, Vec::new())
}

fn limit(form: &Form) -> Result<usize, ApiError> {
    params::parse_limit(form.value("limit")).map_err(|e| ApiError::param("limit", e))
}

/// `series`: the label sets of the series any `match[]` selects.
fn series(st: &TsdState, form: &Form) -> Result<Answer, ApiError> {
    let selectors = form.values("match[]");
    if selectors.is_empty() {
        return Err(ApiError::bad_data("no match[] parameter provided"));
    }
    let (start, end) = time_range(form)?;
    let sets = params::parse_matchers(&selectors).map_err(|e| ApiError::param("match[]", e))?;
    let limit = limit(form)?;
    let found = with_storage(st, None, EngineOptions::default().max_samples, |s| {
        Ok(s.series(&sets, start, end)?)
    })?;
    let (found, warnings) = limited(found, limit);
    Ok(Answer {
        data: Some(json::label_sets(&found)),
        warnings,
    })
}

/// `labels`: label names, of the series `match[]` selects or of all.
fn labels(st: &TsdState, form: &Form) -> Result<Answer, ApiError> {
    let (start, end) = time_range(form)?;
    let sets = params::parse_matchers(&form.values("match[]")).map_err(ApiError::bad_data)?;
    let limit = limit(form)?;
    let names = with_storage(st, None, EngineOptions::default().max_samples, |s| {
        Ok(s.label_names(&sets, start, end)?)
    })?;
    let (names, warnings) = limited(names, limit);
    Ok(Answer {
        data: Some(json::strings(&names)),
        warnings,
    })
}

/// `label/<name>/values`: the values of one label (`__name__`: the
/// metric names).
fn label_values(st: &TsdState, name: &str, form: &Form) -> Result<Answer, ApiError> {
    if !crate::model::name::is_prometheus_label_name(name) {
        return Err(ApiError::bad_data(format!(
            "invalid label name: {}",
            params::go_quote(name)
        )));
    }
    let (start, end) = time_range(form)?;
    let sets = params::parse_matchers(&form.values("match[]")).map_err(ApiError::bad_data)?;
    let limit = limit(form)?;
    let values = with_storage(st, None, EngineOptions::default().max_samples, |s| {
        Ok(s.label_values(name, &sets, start, end)?)
    })?;
    let (values, warnings) = limited(values, limit);
    Ok(Answer {
        data: Some(json::strings(&values)),
        warnings,
    })
}

/// `metadata`: what remote write told of each metric (type, help,
/// unit), by metric name; `metric` picks one, `limit` counts metrics
/// (2.42: a negative one is none).
fn metadata(store: &MetadataStore, form: &Form) -> Result<Answer, ApiError> {
    let limit = match form.value("limit") {
        "" => None,
        s => {
            let n: i64 = s
                .parse()
                .map_err(|_| ApiError::bad_data("limit must be a number"))?;
            usize::try_from(n).ok()
        }
    };
    let metric = Some(form.value("metric")).filter(|m| !m.is_empty());
    let mut out = String::from("{");
    for (i, (name, entries)) in store.list(metric, limit).iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        json::string(&mut out, name);
        out.push_str(":[");
        for (j, m) in entries.iter().enumerate() {
            if j > 0 {
                out.push(',');
            }
            out.push_str("{\"type\":");
            json::string(&mut out, &m.kind);
            out.push_str(",\"help\":");
            json::string(&mut out, &m.help);
            out.push_str(",\"unit\":");
            json::string(&mut out, &m.unit);
            out.push('}');
        }
        out.push(']');
    }
    out.push('}');
    Ok(Answer::data(out))
}

/// `status/buildinfo`: 2.42's fields, its version (see
/// [`PROMETHEUS_VERSION`]) and rtsdb's own build in `revision`.
fn build_info() -> String {
    let revision = format!("rtsdb {}", env!("CARGO_PKG_VERSION"));
    let mut out = String::from("{\"version\":");
    json::string(&mut out, PROMETHEUS_VERSION);
    out.push_str(",\"revision\":");
    json::string(&mut out, &revision);
    out.push_str(",\"branch\":\"\",\"buildUser\":\"\",\"buildDate\":\"\",\"goVersion\":\"\"}");
    out
}

/// `query_exemplars`: rtsdb keeps no exemplars, so after 2.42's checks
/// of the parameters and the query the answer is empty; a query without
/// a selector has no data at all (2.42: 204).
fn query_exemplars(form: &Form) -> Result<Answer, ApiError> {
    let (start, end) = time_range(form)?;
    if end < start {
        return Err(ApiError::bad_data(
            "end timestamp must not be before start timestamp",
        ));
    }
    let expr = parse_query(form.value("query")).map_err(|e| ApiError::bad_data(e.message))?;
    let mut finder = SelectorFinder(false);
    let _ = promql_parser::util::walk_expr(&mut finder, &expr);
    if !finder.0 {
        return Ok(Answer {
            data: None,
            warnings: Vec::new(),
        });
    }
    Ok(Answer::data("[]".to_string()))
}

/// Whether an expression selects series (2.42's `ExtractSelectors`).
struct SelectorFinder(bool);

impl promql_parser::util::ExprVisitor for SelectorFinder {
    type Error = std::convert::Infallible;

    fn pre_visit(&mut self, e: &promql_parser::parser::Expr) -> Result<bool, Self::Error> {
        use promql_parser::parser::Expr;
        if matches!(e, Expr::VectorSelector(_) | Expr::MatrixSelector(_)) {
            self.0 = true;
            return Ok(false);
        }
        Ok(true)
    }
}

/// `format_query`: the query pretty-printed (promql-parser's `prettify`),
/// parsed as queries are (2.42's function set).
fn format_query(form: &Form) -> Result<Answer, ApiError> {
    let expr = parse_query(form.value("query")).map_err(|e| ApiError::param("query", e.message))?;
    let mut out = String::new();
    json::string(&mut out, &expr.prettify());
    Ok(Answer::data(out))
}

/// An unknown path: Go's `http.NotFound`, as Prometheus answers it.
fn not_found() -> Reply {
    Reply::new(404, TEXT, "404 page not found\n")
}

#[cfg(test)]
mod tests {
    use super::super::metadata::MetricMetadata;
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(Endpoint::of("query"), Some(Endpoint::Query));
        assert_eq!(Endpoint::of("status/buildinfo"), Some(Endpoint::BuildInfo));
        assert_eq!(Endpoint::of("status/tsdb"), Some(Endpoint::StatusTsdb));
        assert_eq!(
            Endpoint::of("label/__name__/values"),
            Some(Endpoint::LabelValues("__name__".into()))
        );
        assert_eq!(
            Endpoint::of("label/a%2Eb/values"),
            Some(Endpoint::LabelValues("a.b".into()))
        );
        assert_eq!(Endpoint::of("label//values"), None);
        assert_eq!(Endpoint::of("label/a/b/values"), None);
        assert_eq!(Endpoint::of("targets"), None);
    }

    #[test]
    fn limits_truncate_with_a_warning() {
        assert_eq!(limited(vec![1, 2, 3], 0), (vec![1, 2, 3], vec![]));
        assert_eq!(limited(vec![1, 2, 3], 3), (vec![1, 2, 3], vec![]));
        assert_eq!(
            limited(vec![1, 2, 3], 2),
            (
                vec![1, 2],
                vec!["results truncated due to limit".to_string()]
            )
        );
    }

    #[test]
    fn metadata_by_metric_with_a_limit() {
        let store = MetadataStore::default();
        let md = |kind: &str, help: &str| MetricMetadata {
            kind: kind.into(),
            help: help.into(),
            unit: String::new(),
        };
        store.record("up", md("gauge", "1 if <up>"));
        store.record("a_total", md("counter", "a"));
        let data = |q: &str| {
            metadata(&store, &Form::new(Some(q), None))
                .map(|a| a.data.unwrap_or_default())
                .map_err(|e| (e.status(), e.message))
        };
        assert_eq!(
            data(""),
            Ok(r#"{"a_total":[{"type":"counter","help":"a","unit":""}],"up":[{"type":"gauge","help":"1 if \u003cup\u003e","unit":""}]}"#.to_string())
        );
        assert_eq!(
            data("metric=up&limit=-1"),
            Ok(r#"{"up":[{"type":"gauge","help":"1 if \u003cup\u003e","unit":""}]}"#.to_string())
        );
        assert_eq!(data("limit=1").map(|d| d.matches("type").count()), Ok(1));
        assert_eq!(data("limit=0"), Ok("{}".to_string()));
        assert_eq!(data("metric=nope"), Ok("{}".to_string()));
        assert_eq!(
            data("limit=x"),
            Err((400, "limit must be a number".to_string()))
        );
    }

    #[test]
    fn error_statuses() {
        let s = |kind| {
            ApiError {
                kind,
                message: String::new(),
            }
            .status()
        };
        assert_eq!(s(ErrorKind::BadData), 400);
        assert_eq!(s(ErrorKind::Execution), 422);
        assert_eq!(s(ErrorKind::Timeout), 503);
        assert_eq!(s(ErrorKind::Canceled), 503);
        assert_eq!(s(ErrorKind::Internal), 500);
    }
}
