//! `/q`: OpenTSDB's graph endpoint (`GraphHandler`, `Plot`). The `m=` and
//! `tsuid=` sub-queries are parsed and run by `crate::query` exactly as
//! `/api/query` runs them; this module adds what `/q` does around that:
//! its own reading of `start`/`end`/`tz`, the plot options ([`params`]),
//! the three answers — `&ascii` lines and the `&json` summary
//! ([`plot`]), and a PNG drawn in-process by [`crate::render`] — and
//! the cache ([`cache`]).

mod cache;
mod params;
mod plot;

use std::sync::Arc;
use std::time::Instant;

use chrono_tz::Tz;
use hyper::body::Incoming;

pub(crate) use cache::GraphCache;

use super::query::blocking;
use super::{Call, Query, Reply, legacy_bad_request, legacy_internal_error, make_page};
use crate::model::UidKind;
use crate::model::java::hashmap_order;
use crate::query::request::{parse_time, query_pairs};
use crate::query::{self, QueryContext, QueryError, TsQuery};
use crate::render::options::PlotParams;
use crate::render::plot::{InfiniteValue, Note, Plot, PlotSeries};
use crate::render::{png, smooth};
use crate::tsd::TsdState;
use crate::tsd::stats::ShownQuery;
use cache::{Kind, max_age, now_s, stale};
use plot::Summary;

pub(crate) const PNG_TYPE: &str = "image/png";
/// `sendFile` of a `.txt` file: OpenTSDB names no charset.
const ASCII_TYPE: &str = "text/plain";
/// `sendReply` on a legacy path sniffs the body: `{` is JSON.
const SNIFFED_JSON: &str = "application/json";

/// The `/q` options of `opentsdb.conf`.
#[derive(Debug, Clone, Default)]
pub struct GraphOptions {
    /// `tsd.http.cachedir`: where results are kept; in memory when empty.
    pub cachedir: Option<std::path::PathBuf>,
    /// `tsd.gnuplot.options.allowlist` (`;`-separated, URL-encoded): when
    /// set, the only `o=` values accepted. In 2.4.1 `o=` is read only
    /// when this is set; without it every series gets no options.
    pub options_allowlist: Option<Vec<String>>,
}

impl GraphOptions {
    pub fn from_config(c: &crate::config::Config) -> GraphOptions {
        let dir = c.get_string("tsd.http.cachedir").trim();
        let allow = c.get_string("tsd.gnuplot.options.allowlist");
        GraphOptions {
            cachedir: (!dir.is_empty()).then(|| dir.into()),
            options_allowlist: (!allow.trim().is_empty()).then(|| {
                allow
                    .split(';')
                    .map(|a| {
                        params::java_url_decode(a.trim()).unwrap_or_else(|_| a.trim().to_string())
                    })
                    .collect()
            }),
        }
    }
}

/// Why `/q` refused or failed, as `GraphHandler` reports it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum GraphError {
    /// A 400 page (`{"err":..}` with `&json`).
    #[error("{0}")]
    BadRequest(String),
    /// A 500 page: OpenTSDB's runtime exceptions.
    #[error("{0}")]
    Internal(String),
}

impl GraphError {
    /// The status of the page `route` answers this error with.
    fn status(&self) -> u16 {
        match self {
            GraphError::BadRequest(_) => 400,
            GraphError::Internal(_) => 500,
        }
    }
}

impl From<params::ParamError> for GraphError {
    fn from(e: params::ParamError) -> Self {
        GraphError::BadRequest(e.0)
    }
}

impl From<QueryError> for GraphError {
    fn from(e: QueryError) -> Self {
        match e {
            QueryError::BadRequest { message, .. } => GraphError::BadRequest(message),
            // Not an IllegalArgumentException: `GraphHandler` lets it
            // through to the generic 500.
            QueryError::NoSuchName(m) => {
                GraphError::Internal(format!("net.opentsdb.uid.NoSuchUniqueName: {m}"))
            }
            other => GraphError::Internal(other.to_string()),
        }
    }
}

/// Which answer was asked for; `ascii` wins over `json`, `json` over `png`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Output {
    Ascii,
    Json,
    Png,
}

/// The route.
pub(super) async fn route(c: Call, _body: Incoming) -> Reply {
    let output = if c.query.has("ascii") {
        Output::Ascii
    } else if c.query.has("json") {
        Output::Json
    } else if c.query.has("png") {
        Output::Png
    } else {
        return redirect(&c);
    };
    let started = Instant::now();
    let raw = c.head.uri.query().unwrap_or("").to_string();
    blocking(&c.state, move |st| {
        let pairs = query_pairs(&raw);
        let q = Query(pairs);
        match graph(st, &q.0, output, started) {
            Ok(r) => r,
            Err(GraphError::BadRequest(m)) => {
                tracing::warn!(error = %m, "bad /q request");
                legacy_bad_request(&q, &m)
            }
            Err(GraphError::Internal(m)) => {
                tracing::error!(error = %m, "/q failed");
                legacy_internal_error(&q, &m)
            }
        }
    })
    .await
}

/// Without an output flag `/q` sends the browser to the page, with the
/// query in the fragment (where the page at `/` reads it).
fn redirect(c: &Call) -> Reply {
    let uri = c
        .head
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let location = if uri.len() < 4 {
        "/".to_string()
    } else {
        format!("/#{}", &uri[3..])
    };
    Reply::html(
        200,
        format!(
            "<html></head><meta http-equiv=\"refresh\" content=\"0; url={location}\"></head></html>"
        ),
    )
    .with_header("Location", location)
}

fn first<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// `DateTime.isRelativeDate`.
fn relative(s: Option<&str>) -> bool {
    s.is_some_and(|s| s.to_lowercase().ends_with("-ago"))
}

/// `doGraph`.
fn graph(
    st: &TsdState,
    pairs: &[(String, String)],
    output: Output,
    started: Instant,
) -> Result<Reply, GraphError> {
    let key = cache::key(pairs);
    // An unknown zone is GMT to Java's `TimeZone.getTimeZone`.
    let tz: Tz = match first(pairs, "tz") {
        Some(t) => t.parse().unwrap_or(Tz::UTC),
        None => st.options.query.default_tz,
    };
    let now_ms = chrono::Utc::now().timestamp_millis().max(0) as u64;
    let now = (now_ms / 1000) as i64;
    let start_s = match first(pairs, "start").filter(|s| !s.is_empty()) {
        None => {
            return Err(GraphError::BadRequest(
                "Missing parameter <code>start</code>".into(),
            ));
        }
        Some(s) => parse_time(s, now_ms, tz)? / 1000,
    };
    let end_s = match first(pairs, "end").filter(|s| !s.is_empty()) {
        None => now,
        Some(e) => parse_time(e, now_ms, tz)? / 1000,
    };
    let age = max_age(
        start_s,
        end_s,
        now,
        relative(first(pairs, "start")) || relative(first(pairs, "end")),
    );
    let nocache = pairs.iter().any(|(k, _)| k == "nocache");
    let timing = || started.elapsed().as_millis() as u64;
    if !nocache && let Some(hit) = cache_hit(st, &key, output, end_s, age, timing) {
        st.stats
            .graphs_cached
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return Ok(hit);
    }

    // The sub-queries, parsed as `/api/query` parses `m=` and `tsuid=`;
    // the range is the one read above.
    let raw: String = pairs
        .iter()
        .filter(|(k, _)| k == "m" || k == "tsuid" || k == "start")
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect::<Vec<_>>()
        .join("&");
    let mut tsq: TsQuery = query::parse_get(&raw)?;
    tsq.start = Some(start_s.to_string());
    tsq.end = Some(end_s.to_string());
    tsq.timezone = None;
    tsq.no_annotations = pairs.iter().any(|(k, _)| k == "no_annotations");
    tsq.global_annotations = pairs.iter().any(|(k, _)| k == "global_annotations");
    tsq.validate(now_ms, tz)?;
    let options = series_options(st, pairs, tsq.queries.len())?;
    let params = PlotParams::parse(pairs)?;
    if start_s >= end_s {
        return Err(GraphError::BadRequest(format!(
            "start time ({start_s}) is greater than or equal to end time: {end_s}"
        )));
    }

    let db = &st.db;
    // Listed in `/api/stats/query` while its sub-queries read, and
    // cancellable from there.
    let watched = st
        .queries
        .start(ShownQuery::Parsed(Arc::new(tsq.clone())), String::new());
    let mut ctx = QueryContext::new(db, &st.options.query).with_progress(watched.progress.clone());
    ctx.now_ms = now_ms;
    let mut series = Vec::new();
    let mut notes = Vec::new();
    let mut summary = Summary::default();
    for (i, sub) in tsq.queries.iter().enumerate() {
        let mut one = tsq.clone();
        one.queries = vec![sub.clone()];
        one.global_annotations = false;
        one.show_stats = true;
        let res = match query::execute(&ctx, &one, None) {
            Ok(res) => res,
            Err(e) => {
                let message = e.message();
                let answered = GraphError::from(e);
                st.queries
                    .finish(watched.id, answered.status(), Some(message));
                return Err(answered);
            }
        };
        let mut etags = None;
        for r in &res.results {
            if r.stats.is_some() && etags.is_none() {
                summary.points += r
                    .stats
                    .as_ref()
                    .and_then(|s| s.get("rawDatapoints"))
                    .and_then(|v| v.as_u64())
                    .unwrap_or(0);
            }
            // 2.4.1 keeps the aggregated tags of each sub-query's last result.
            etags = Some(in_uid_order(&ctx, r.aggregate_tags.clone()));
            notes.extend(r.annotations.iter().map(|a| Note {
                start_s: a.start_ms() / 1000,
                text: a.description.clone(),
            }));
            series.push(PlotSeries {
                metric: r.metric.clone(),
                tags: java_tag_order(&ctx, &r.tags),
                points: r.dps.clone(),
                right_axis: options[i].contains("x1y2"),
            });
        }
        summary.etags.push(etags);
    }
    st.queries.finish(watched.id, 200, None);
    if let Some(first) = summary.etags.first_mut()
        && first.is_none()
    {
        // 1.0 sent `[]` for the first sub-query even without results.
        *first = Some(Vec::new());
    }
    if !tsq.no_annotations && tsq.global_annotations {
        let globals = ctx
            .source
            .global_annotations((start_s * 1000) as u64, (end_s * 1000) as u64)
            .map_err(|e| GraphError::Internal(e.to_string()))?;
        notes.extend(globals.iter().map(|a| Note {
            start_s: a.start_ms() / 1000,
            text: a.description.clone(),
        }));
    }
    notes.sort_by_key(|n| n.start_s);
    st.stats
        .graphs_made
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);

    let internal = |e: InfiniteValue| GraphError::Internal(e.to_string());
    if output == Output::Ascii {
        let text = plot::ascii(&series).map_err(internal)?;
        st.graphs.put(&key, Kind::Text, text.as_bytes());
        return Ok(file_reply(ASCII_TYPE, text.into_bytes(), age, 0));
    }
    let plot = Plot {
        start_s,
        end_s,
        tz,
        params,
        series,
        notes,
    };
    summary.plotted = plot.plotted_points().map_err(internal)?;
    // gnuplot runs only for pictures (and `&json`, which counts its
    // points); with no series OpenTSDB plots `0`, without `smooth`.
    if let Some(why) = plot
        .params
        .smoothing()
        .filter(|_| !plot.series.is_empty())
        .and_then(smooth::refusal)
    {
        // `GraphHandler` wraps gnuplot's stderr in `<pre>`; the script's
        // file name and line that gnuplot puts first are OpenTSDB's own.
        return Err(GraphError::BadRequest(format!("<pre>{why}</pre>")));
    }
    let picture = png::render(&plot).map_err(|e| GraphError::Internal(e.to_string()))?;
    st.graphs.put(&key, Kind::Png, &picture);
    if output == Output::Json {
        let json = summary.to_json(timing(), false);
        st.graphs.put(&key, Kind::Json, json.as_bytes());
        return Ok(Reply::new(200, SNIFFED_JSON, json));
    }
    Ok(file_reply(PNG_TYPE, picture, age, 0))
}

/// Percent-encodes a decoded value again for `query::parse_get`.
fn encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~*:{},|=/!".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The `o=` of each sub-query: read only when an allow-list is set, as
/// in 2.4.1, and then one per `m=`.
fn series_options(
    st: &TsdState,
    pairs: &[(String, String)],
    nqueries: usize,
) -> Result<Vec<String>, GraphError> {
    let Some(allow) = &st.options.graph.options_allowlist else {
        return Ok(vec![String::new(); nqueries]);
    };
    let given: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| k == "o")
        .map(|(_, v)| v.clone())
        .collect();
    for (i, o) in given.iter().enumerate() {
        if !allow.contains(o) {
            return Err(GraphError::BadRequest(format!(
                "Query option at index {i} was not in the allow list."
            )));
        }
    }
    if given.len() != nqueries {
        return Err(GraphError::BadRequest(format!(
            "{} `o' parameters, but {nqueries} `m' parameters.",
            given.len()
        )));
    }
    Ok(given)
}

/// Tag keys sorted by their UIDs (how OpenTSDB holds them), then as a
/// `HashMap` of that size iterates them.
fn java_tag_order(
    ctx: &QueryContext,
    tags: &std::collections::BTreeMap<String, String>,
) -> Vec<(String, String)> {
    let keys = in_uid_order(ctx, tags.keys().cloned().collect());
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    hashmap_order(&refs, refs.len())
        .into_iter()
        .map(|k| (k.to_string(), tags[k].clone()))
        .collect()
}

fn in_uid_order(ctx: &QueryContext, mut keys: Vec<String>) -> Vec<String> {
    keys.sort_by_cached_key(|k| ctx.uids.get_id(UidKind::TagKey, k).ok());
    keys
}

/// `sendFile`: the bytes with how long they may be reused and how old
/// they are.
fn file_reply(content_type: &'static str, body: Vec<u8>, max_age: i64, age: i64) -> Reply {
    Reply::new(200, content_type, body)
        .with_header("Age", age.to_string())
        .with_header("Cache-Control", format!("max-age={max_age}"))
}

/// `isDiskCacheHit`, rule for rule (including 2.4.1's reading of its own
/// "negative" entry: a summary that plotted something, without the
/// picture or text asked for).
fn cache_hit(
    st: &TsdState,
    key: &str,
    output: Output,
    end_s: i64,
    age: i64,
    timing: impl Fn() -> u64,
) -> Option<Reply> {
    let now = now_s();
    let kind = if output == Output::Ascii {
        Kind::Text
    } else {
        Kind::Png
    };
    let summary = || {
        st.graphs
            .get(key, Kind::Json)
            .filter(|e| !stale(e.made_s, end_s, age, now))
            .and_then(|e| Summary::from_json(&e.bytes))
    };
    let cached_json = |s: Option<Summary>| {
        let body = match s {
            Some(s) => s.to_json(timing(), true),
            None => {
                let keys = hashmap_order(&["timing", "cachehit"], 16);
                let parts: Vec<String> = keys
                    .iter()
                    .map(|k| match *k {
                        "timing" => format!("\"timing\":{}", timing()),
                        _ => "\"cachehit\":\"disk\"".to_string(),
                    })
                    .collect();
                format!("{{{}}}", parts.join(","))
            }
        };
        Reply::new(200, SNIFFED_JSON, body)
    };
    if let Some(e) = st.graphs.get(key, kind) {
        if stale(e.made_s, end_s, age, now) {
            return None;
        }
        return Some(match output {
            Output::Json => cached_json(summary()),
            Output::Png => file_reply(PNG_TYPE, e.bytes, age, now - e.made_s),
            Output::Ascii => file_reply(ASCII_TYPE, e.bytes, age, now - e.made_s),
        });
    }
    let s = summary().filter(|s| s.plotted != 0)?;
    Some(match output {
        Output::Json => cached_json(Some(s)),
        Output::Png => Reply::text(200, " "),
        Output::Ascii => Reply::html(
            200,
            make_page(
                "TSDB Query",
                "No results",
                "Sorry, your query didn't return anything.<br/><small>(served from disk cache)</small>",
            ),
        ),
    })
}

/// The cache of a server.
pub(crate) fn new_cache(options: &GraphOptions) -> Arc<GraphCache> {
    Arc::new(GraphCache::new(options.cachedir.clone()))
}
