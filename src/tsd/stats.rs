//! Counters shared by the telnet and HTTP sides, and the `stats` report
//! in OpenTSDB's shapes: telnet lines in `put` format, `/api/stats` JSON.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::model::UidKind;

use super::TsdState;

#[derive(Debug, Default)]
pub struct ServerStats {
    pub connections_open: AtomicU64,
    pub connections_total: AtomicU64,
    pub connections_rejected: AtomicU64,
    pub connections_idle_closed: AtomicU64,
    pub exceptions: AtomicU64,
    pub rpc_telnet: AtomicU64,
    pub rpc_http: AtomicU64,
    pub telnet_puts: AtomicU64,
    pub http_puts: AtomicU64,
    pub invalid_values: AtomicU64,
    pub illegal_arguments: AtomicU64,
    pub unknown_metrics: AtomicU64,
    pub storage_errors: AtomicU64,
    pub http_errors: AtomicU64,
}

pub fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
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

pub fn hostname() -> String {
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

/// Every figure the TSD reports.
pub fn collect(state: &TsdState) -> Vec<Stat> {
    let s = &state.stats;
    let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let w = state.writer.stats();
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
    ];
    let uids = state.writer.uids();
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
        stat("datapoints.buffered", state.writer.buffered_points(), None),
        stat("datapoints.replayed", g(&w.points_replayed), None),
        stat("storage.rows_written", g(&w.rows_written), None),
        stat("storage.flush_errors", g(&w.flush_errors), None),
        stat(
            "wal.bytes_written",
            state.writer.wal().bytes_written(),
            None,
        ),
        stat("wal.syncs", state.writer.wal().syncs(), None),
        stat("series.count", state.writer.series().len(), None),
    ]);
    out
}

fn host_tags(state: &TsdState) -> Vec<(&'static str, String)> {
    let mut t = vec![("host", state.hostname.clone())];
    if state.config.stats_with_port {
        t.push(("port", state.port.load(Ordering::Relaxed).to_string()));
    }
    t
}

/// Telnet `stats` / legacy `/stats` lines.
pub fn lines(state: &TsdState, now_s: u64) -> Vec<String> {
    let extra = host_tags(state);
    collect(state)
        .into_iter()
        .map(|s| {
            let mut line = format!("tsd.{} {now_s} {}", s.name, s.value);
            if let Some((k, v)) = &s.tag {
                line.push_str(&format!(" {k}={v}"));
            }
            for (k, v) in &extra {
                line.push_str(&format!(" {k}={v}"));
            }
            line
        })
        .collect()
}

/// `/api/stats`: `[{"metric":..,"timestamp":..,"value":"..","tags":{..}}]`.
pub fn json(state: &TsdState, now_s: u64) -> serde_json::Value {
    let extra = host_tags(state);
    serde_json::Value::Array(
        collect(state)
            .into_iter()
            .map(|s| {
                let mut tags = serde_json::Map::new();
                if let Some((k, v)) = s.tag {
                    tags.insert(k.into(), v.into());
                }
                for (k, v) in &extra {
                    tags.insert((*k).into(), v.clone().into());
                }
                serde_json::json!({
                    "metric": format!("tsd.{}", s.name),
                    "timestamp": now_s,
                    "value": s.value,
                    "tags": tags,
                })
            })
            .collect(),
    )
}
