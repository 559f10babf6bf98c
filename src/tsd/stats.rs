//! Counters shared by the telnet and HTTP sides, and the `stats` report
//! in OpenTSDB's shapes: telnet lines in `put` format, `/api/stats` JSON.
//!
//! The report is built from the counters and the database it describes,
//! not from the server state, which owns the counters.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::db::Db;
use crate::model::UidKind;
use crate::protocol::PointError;
use crate::query::QueryProgress;
use crate::write::limits::{LimitStats, MAX_NEW_PER_HOUR_KEY, MAX_TOTAL_KEY};

#[derive(Debug, Default)]
pub(crate) struct ServerStats {
    pub connections_open: AtomicU64,
    pub connections_total: AtomicU64,
    pub connections_rejected: AtomicU64,
    pub connections_idle_closed: AtomicU64,
    pub exceptions: AtomicU64,
    pub rpc_telnet: AtomicU64,
    pub rpc_http: AtomicU64,
    pub telnet_puts: AtomicU64,
    pub http_puts: AtomicU64,
    /// Samples received by Prometheus remote write (`/api/v1/write`).
    pub remote_write_samples: AtomicU64,
    /// Fields received in InfluxDB line protocol (`/write`, `/api/v2/write`).
    pub influx_points: AtomicU64,
    /// Lines received on the Graphite plaintext port.
    pub graphite_points: AtomicU64,
    /// Rollup and pre-aggregate points received (telnet `rollup` lines,
    /// `/api/rollup` points): 2.4.1's `rollup_dps`.
    pub rollup_points: AtomicU64,
    /// Histogram points received (telnet `histogram` lines,
    /// `/api/histogram` points): 2.4.1's `raw_histograms`.
    pub histogram_points: AtomicU64,
    pub invalid_values: AtomicU64,
    pub illegal_arguments: AtomicU64,
    pub unknown_metrics: AtomicU64,
    pub storage_errors: AtomicU64,
    pub http_errors: AtomicU64,
    /// Bytes of request bodies held now (`tsd.http.request.max_inflight_bytes`).
    pub http_body_bytes: AtomicU64,
    /// Requests refused with a 503 because bodies in flight held the budget.
    pub http_body_rejected: AtomicU64,
    /// `/q` answers computed (`http.graph.requests cache=miss`).
    pub graphs_made: AtomicU64,
    /// `/q` answers served from the cache (`cache=disk`, as OpenTSDB names it).
    pub graphs_cached: AtomicU64,
}

pub(crate) fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl ServerStats {
    /// Counts a refused point (telnet or HTTP) by its kind of error.
    pub(crate) fn count_error(&self, e: &PointError) {
        inc(match e {
            PointError::IllegalArgument(_) | PointError::NoSuchRollup(_) => &self.illegal_arguments,
            PointError::InvalidValue(_) => &self.invalid_values,
            PointError::UnknownName(_) => &self.unknown_metrics,
            PointError::Storage(_) | PointError::Unavailable(_) | PointError::StorageDown(_) => {
                &self.storage_errors
            }
        });
    }
}

/// One figure: `tsd.<name> <ts> <value> [<tag>] host=<host>`.
#[derive(Debug, Clone, PartialEq)]
pub struct Stat {
    pub name: &'static str,
    pub value: String,
    pub tag: Option<(&'static str, String)>,
}

fn stat(name: &'static str, value: impl ToString, tag: Option<(&'static str, &str)>) -> Stat {
    Stat {
        name,
        value: value.to_string(),
        tag: tag.map(|(k, v)| (k, v.to_string())),
    }
}

pub(crate) fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes a
    // NUL-terminated name into it (truncated if needed).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if rc == 0 {
        let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
        let s = String::from_utf8_lossy(&buf[..end]).to_string();
        if !s.is_empty() {
            return s;
        }
    }
    "localhost".into()
}

/// Every figure the TSD reports: its counters and its database's.
pub(crate) fn collect(s: &ServerStats, db: &Db) -> Vec<Stat> {
    let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let w = db.stats();
    let health = db.storage_health();
    let (free_bytes, held_points) = db.disk_state();
    let mut out = vec![
        stat(
            "connectionmgr.connections",
            g(&s.connections_open),
            Some(("type", "open")),
        ),
        stat(
            "connectionmgr.connections",
            g(&s.connections_total),
            Some(("type", "total")),
        ),
        stat(
            "connectionmgr.connections",
            g(&s.connections_rejected),
            Some(("type", "rejected")),
        ),
        stat(
            "connectionmgr.exceptions",
            g(&s.exceptions),
            Some(("type", "unknown")),
        ),
        stat(
            "connectionmgr.exceptions",
            g(&s.connections_idle_closed),
            Some(("type", "timeout")),
        ),
        stat("rpc.received", g(&s.rpc_telnet), Some(("type", "telnet"))),
        stat("rpc.received", g(&s.rpc_http), Some(("type", "http"))),
        stat("rpc.received", g(&s.telnet_puts), Some(("type", "put"))),
        stat("rpc.received", g(&s.http_puts), Some(("type", "http_put"))),
        stat(
            "rpc.received",
            g(&s.remote_write_samples),
            Some(("type", "remote_write")),
        ),
        stat(
            "rpc.received",
            g(&s.influx_points),
            Some(("type", "influx")),
        ),
        stat(
            "rpc.received",
            g(&s.graphite_points),
            Some(("type", "graphite")),
        ),
        // 2.4.1 counts these points (`rollup_dps`, `raw_histograms`) but
        // does not report them; rtsdb does, in the same shape.
        stat(
            "rpc.received",
            g(&s.rollup_points),
            Some(("type", "rollup")),
        ),
        stat(
            "rpc.received",
            g(&s.histogram_points),
            Some(("type", "histogram")),
        ),
        stat(
            "rpc.errors",
            g(&s.invalid_values),
            Some(("type", "invalid_values")),
        ),
        stat(
            "rpc.errors",
            g(&s.illegal_arguments),
            Some(("type", "illegal_arguments")),
        ),
        stat(
            "rpc.errors",
            g(&s.unknown_metrics),
            Some(("type", "unknown_metrics")),
        ),
        stat(
            "rpc.errors",
            g(&s.storage_errors),
            Some(("type", "storage_errors")),
        ),
        stat("http.errors", g(&s.http_errors), None),
        stat("http.body.inflight_bytes", g(&s.http_body_bytes), None),
        stat("http.body.rejected", g(&s.http_body_rejected), None),
        stat(
            "http.graph.requests",
            g(&s.graphs_cached),
            Some(("cache", "disk")),
        ),
        stat(
            "http.graph.requests",
            g(&s.graphs_made),
            Some(("cache", "miss")),
        ),
    ];
    let uids = db.uids();
    for kind in UidKind::ALL {
        let k = kind.qualifier();
        let cs = uids.stats(kind);
        out.push(stat(
            "uid.cache-hit",
            cs.hits.load(Ordering::Relaxed),
            Some(("kind", k)),
        ));
        out.push(stat(
            "uid.cache-miss",
            cs.misses.load(Ordering::Relaxed),
            Some(("kind", k)),
        ));
        out.push(stat(
            "uid.cache-size",
            uids.cache_size(kind),
            Some(("kind", k)),
        ));
        let used = uids.max_id(kind).unwrap_or(0);
        let max = uids.width(kind).max_id();
        out.push(stat("uid.ids-used", used, Some(("kind", k))));
        out.push(stat(
            "uid.ids-available",
            max.saturating_sub(used),
            Some(("kind", k)),
        ));
    }
    out.extend([
        stat("datapoints.added", g(&w.points_added), None),
        stat("datapoints.stored", g(&w.points_stored), None),
        stat("datapoints.buffered", db.buffered_points(), None),
        stat("datapoints.replayed", g(&w.points_replayed), None),
        stat("storage.rows_written", g(&w.rows_written), None),
        stat("storage.checkpoints", g(&w.checkpoints), None),
        stat("storage.flush_errors", g(&w.flush_errors), None),
        stat(
            "rollup.stored",
            g(&w.rollup_points_stored),
            Some(("type", "written")),
        ),
        stat(
            "rollup.stored",
            g(&w.rollup_cells_computed),
            Some(("type", "computed")),
        ),
        stat(
            "rollup.errors",
            g(&w.rollup_errors),
            Some(("type", "computed")),
        ),
        stat("histogram.stored", g(&w.histogram_points_stored), None),
        stat("wal.bytes_written", db.wal().bytes_written(), None),
        stat("wal.syncs", db.wal().syncs(), None),
        stat("wal.unsynced_bytes", db.wal().unsynced_bytes(), None),
        // 0 while the WAL cannot be written (a full disk, a removed data
        // directory) or the engine refuses writes: puts are refused then.
        stat("wal.healthy", u8::from(db.wal().failure().is_none()), None),
        stat("wal.write_errors", db.wal().failed_attempts(), None),
        // What the replay at start had to leave out (its segments are kept
        // in DATA_DIR/wal/damaged/).
        stat(
            "wal.replay.damaged_frames",
            g(&w.replay_damaged_frames),
            None,
        ),
        stat(
            "wal.replay.skipped",
            g(&w.replay_orphaned),
            Some(("reason", "orphaned")),
        ),
        stat(
            "wal.replay.skipped",
            g(&w.replay_unstorable),
            Some(("reason", "unstorable")),
        ),
        stat(
            "storage.healthy",
            u8::from(health.unavailable.is_none()),
            None,
        ),
        stat("storage.reopens", health.reopens, None),
        stat("storage.free_bytes", free_bytes, None),
        stat("storage.held_points", held_points, None),
        stat("series.count", db.series().len(), None),
    ]);
    // Series refused by the cardinality limits, by limit.
    let refused = |f: fn(&LimitStats) -> &AtomicU64| {
        db.series()
            .limiter()
            .map_or(0, |l| f(l.stats()).load(Ordering::Relaxed))
    };
    out.push(stat(
        "series.refused",
        refused(|s| &s.refused_hourly),
        Some(("limit", MAX_NEW_PER_HOUR_KEY)),
    ));
    out.push(stat(
        "series.refused",
        refused(|s| &s.refused_total),
        Some(("limit", MAX_TOTAL_KEY)),
    ));
    out
}

/// The query result cache's figures (docs/query-cache.md).
pub(crate) fn cache(c: &crate::query::CacheStats) -> Vec<Stat> {
    vec![
        stat("query.cache.hits", c.hits, None),
        stat("query.cache.misses", c.misses, None),
        stat("query.cache.evictions", c.evictions, None),
        stat("query.cache.bypassed", c.bypassed, None),
        stat("query.cache.bytes", c.bytes, None),
        stat("query.cache.entries", c.entries, None),
    ]
}

/// Tags every figure carries: `host`, and `port` if
/// `tsd.core.stats_with_port` is set.
pub(crate) fn host_tags(hostname: &str, port: Option<u16>) -> Vec<(&'static str, String)> {
    let mut t = vec![("host", hostname.to_string())];
    if let Some(p) = port {
        t.push(("port", p.to_string()));
    }
    t
}

/// One snapshot of every figure, rendered in each protocol's shape.
#[derive(Debug, Clone)]
pub struct Report {
    pub stats: Vec<Stat>,
    /// See [`host_tags`].
    pub host_tags: Vec<(&'static str, String)>,
    /// When the snapshot was taken, Unix seconds.
    pub now_s: u64,
}

impl Report {
    /// Telnet `stats` / legacy `/stats` lines.
    pub fn lines(&self) -> Vec<String> {
        let now_s = self.now_s;
        self.stats
            .iter()
            .map(|s| {
                let mut line = format!("tsd.{} {now_s} {}", s.name, s.value);
                if let Some((k, v)) = &s.tag {
                    line.push_str(&format!(" {k}={v}"));
                }
                for (k, v) in &self.host_tags {
                    line.push_str(&format!(" {k}={v}"));
                }
                line
            })
            .collect()
    }

    /// `/api/stats`: `[{"metric":..,"timestamp":..,"value":"..","tags":{..}}]`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::Value::Array(
            self.stats
                .iter()
                .map(|s| {
                    let mut tags = serde_json::Map::new();
                    if let Some((k, v)) = &s.tag {
                        tags.insert((*k).into(), v.clone().into());
                    }
                    for (k, v) in &self.host_tags {
                        tags.insert((*k).into(), v.clone().into());
                    }
                    serde_json::json!({
                        "metric": format!("tsd.{}", s.name),
                        "timestamp": self.now_s,
                        "value": s.value,
                        "tags": tags,
                    })
                })
                .collect(),
        )
    }

    /// `/metrics`: the figures of `/api/stats` in Prometheus' text
    /// exposition format. `tsd.uid.cache-hit` becomes `tsd_uid_cache_hit`;
    /// tags become labels; samples of one name are grouped under one
    /// `# TYPE` line.
    pub fn prometheus(&self) -> String {
        fn name(s: &str) -> String {
            format!("tsd_{s}")
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect()
        }
        fn escape(v: &str) -> String {
            v.replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n")
        }
        let mut families: Vec<(String, Vec<String>)> = Vec::new();
        for s in &self.stats {
            let n = name(s.name);
            let mut labels: Vec<String> = Vec::new();
            if let Some((k, v)) = &s.tag {
                labels.push(format!("{k}=\"{}\"", escape(v)));
            }
            for (k, v) in &self.host_tags {
                labels.push(format!("{k}=\"{}\"", escape(v)));
            }
            let sample = format!("{n}{{{}}} {}", labels.join(","), s.value);
            match families.iter_mut().find(|(f, _)| *f == n) {
                Some((_, v)) => v.push(sample),
                None => families.push((n, vec![sample])),
            }
        }
        let mut out = String::new();
        for (n, samples) in families {
            out.push_str(&format!("# TYPE {n} untyped\n"));
            for s in samples {
                out.push_str(&s);
                out.push('\n');
            }
        }
        out
    }
}

/// The query a [`QueryRecord`] shows. A parsed query is kept as it is
/// and turned into JSON only when `/api/stats/query` asks: a small query
/// would otherwise spend a tenth of its time building a JSON value no one
/// reads.
#[derive(Debug, Clone)]
pub(crate) enum ShownQuery {
    Json(serde_json::Value),
    Parsed(std::sync::Arc<crate::query::TsQuery>),
}

impl ShownQuery {
    fn to_value(&self) -> serde_json::Value {
        match self {
            ShownQuery::Json(v) => v.clone(),
            ShownQuery::Parsed(q) => serde_json::to_value(&**q).unwrap_or(serde_json::Value::Null),
        }
    }
}

/// One query seen by `/api/query`, `/api/query/exp`, `/q` or PromQL's
/// `query`/`query_range`, for `/api/stats/query`.
#[derive(Debug, Clone)]
pub(crate) struct QueryRecord {
    pub id: u64,
    pub query: ShownQuery,
    pub remote: String,
    /// Who asked: empty until authentication names users.
    pub user: String,
    /// Whose data it reads: `default` until tenants exist.
    pub tenant: String,
    pub start_ms: u64,
    pub started: std::time::Instant,
    /// Points read so far, and the flag a cancel sets.
    pub progress: Arc<QueryProgress>,
    /// Set once finished: (HTTP status, error message, total ms).
    pub outcome: Option<(u16, Option<String>, f64)>,
}

/// A query being watched: its id in `/api/stats/query` and the progress
/// its run reports to (hand it to `QueryContext::with_progress`).
#[derive(Debug, Clone)]
pub(crate) struct Watched {
    pub id: u64,
    pub progress: Arc<QueryProgress>,
}

/// What `DELETE /api/stats/query?id=` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cancel {
    /// The query was running and is asked to stop.
    Cancelled,
    /// The query has finished already.
    Finished,
    /// No query has that id (or it left the completed list).
    Unknown,
}

/// Running queries and the last [`QueryLog::KEEP`] completed ones.
#[derive(Debug, Default)]
pub(crate) struct QueryLog {
    next: AtomicU64,
    inner: parking_lot::Mutex<QueryLogInner>,
}

#[derive(Debug, Default)]
struct QueryLogInner {
    running: Vec<QueryRecord>,
    completed: std::collections::VecDeque<QueryRecord>,
}

/// The tenant every query belongs to until tenants exist.
pub(crate) const DEFAULT_TENANT: &str = "default";

impl QueryLog {
    /// How many completed queries are kept (OpenTSDB keeps 256).
    pub(crate) const KEEP: usize = 256;

    /// Records a query as running; its id is for [`finish`](Self::finish)
    /// and [`cancel`](Self::cancel), its progress for the run.
    pub(crate) fn start(&self, query: ShownQuery, remote: String) -> Watched {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let progress = Arc::new(QueryProgress::new());
        self.inner.lock().running.push(QueryRecord {
            id,
            query,
            remote,
            user: String::new(),
            tenant: DEFAULT_TENANT.to_string(),
            start_ms: chrono::Utc::now().timestamp_millis().max(0) as u64,
            started: std::time::Instant::now(),
            progress: progress.clone(),
            outcome: None,
        });
        Watched { id, progress }
    }

    pub(crate) fn finish(&self, id: u64, status: u16, error: Option<String>) {
        let mut inner = self.inner.lock();
        let Some(pos) = inner.running.iter().position(|r| r.id == id) else {
            return;
        };
        let mut r = inner.running.remove(pos);
        r.outcome = Some((status, error, r.started.elapsed().as_secs_f64() * 1000.0));
        if inner.completed.len() >= Self::KEEP {
            inner.completed.pop_front();
        }
        inner.completed.push_back(r);
    }

    /// Asks the running query `id` to stop; its run sees that at its next
    /// batch of points (or PromQL step) and answers its client with a
    /// cancellation error, dropping what it held.
    pub(crate) fn cancel(&self, id: u64) -> Cancel {
        let inner = self.inner.lock();
        if let Some(r) = inner.running.iter().find(|r| r.id == id) {
            r.progress.cancel();
            tracing::info!(id, query = %r.query.to_value(), "query cancelled");
            return Cancel::Cancelled;
        }
        if inner.completed.iter().any(|r| r.id == id) {
            Cancel::Finished
        } else {
            Cancel::Unknown
        }
    }

    fn render(r: &QueryRecord) -> serde_json::Value {
        let mut v = serde_json::json!({
            "id": r.id,
            "query": r.query.to_value(),
            "remote": r.remote,
            "user": r.user,
            "tenant": r.tenant,
            "queryStartTimestamp": r.start_ms,
            "executed": 1,
            "pointsRead": r.progress.points_read(),
            "cancelled": r.progress.is_cancelled(),
        });
        let o = v.as_object_mut().expect("object");
        match &r.outcome {
            None => {
                // OpenTSDB names a running query's start `queryStart`.
                o.insert("queryStart".into(), r.start_ms.into());
                o.insert(
                    "elapsed".into(),
                    (r.started.elapsed().as_secs_f64() * 1000.0).into(),
                );
            }
            Some((status, error, ms)) => {
                o.insert(
                    "httpResponse".into(),
                    serde_json::json!({"code": status, "reasonPhrase": reason(*status)}),
                );
                o.insert(
                    "exception".into(),
                    error.clone().unwrap_or_else(|| "null".into()).into(),
                );
                o.insert("stats".into(), serde_json::json!({"totalTime": ms}));
            }
        }
        v
    }

    /// `{"running":[...],"completed":[...]}`, newest completed last.
    pub(crate) fn json(&self) -> serde_json::Value {
        let inner = self.inner.lock();
        serde_json::json!({
            "running": inner.running.iter().map(Self::render).collect::<Vec<_>>(),
            "completed": inner.completed.iter().map(Self::render).collect::<Vec<_>>(),
        })
    }
}

fn reason(status: u16) -> &'static str {
    hyper::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("")
}
