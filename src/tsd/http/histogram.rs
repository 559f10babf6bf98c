//! `POST /api/histogram` (`HistogramDataPointRpc`, OpenTSDB 2.4): a JSON
//! histogram point or a list of them, each checked and written on its
//! own, answered as `/api/put` answers (`summary`, `details`, `sync`,
//! `sync_timeout`; the same reply code). Off (503) unless
//! `tsd.core.histograms.config` is set.

use hyper::Method;
use hyper::body::Incoming;

use super::super::rpc::histogram::{DISABLED, JsonHistogram, check_json};
use super::put::{Logged, PutFlags, answer};
use super::{Call, Reply, method_not_allowed, read_body};

/// The points of a body: one object or an array of them
/// (`parsePutV1`).
fn parse_points(body: &[u8]) -> Result<Vec<JsonHistogram>, Reply> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(Reply::error(
            400,
            "Missing message content",
            "Supply valid JSON formatted data in the body of your request",
        ));
    }
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    let parsed = if first == Some(&b'{') {
        serde_json::from_slice::<JsonHistogram>(body).map(|p| vec![p])
    } else {
        serde_json::from_slice::<Vec<JsonHistogram>>(body)
    };
    parsed.map_err(|e| Reply::error(400, "Unable to parse the given JSON", &e.to_string()))
}

pub(super) async fn route(c: Call, body: Incoming) -> Reply {
    // 2.4.1 checks the configuration before the method.
    let Some(codecs) = c.state.db.histogram_codecs().cloned() else {
        return Reply::error(503, DISABLED, "");
    };
    if c.method != Method::POST {
        return method_not_allowed(&c.method);
    }
    let flags = PutFlags::of(&c.query);
    let body = match read_body(&c, body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let points = match parse_points(&body) {
        Ok(p) => p,
        Err(r) => return r,
    };
    if points.is_empty() {
        return Reply::error(400, "No datapoints found in content", "");
    }
    let state = &c.state;
    state
        .stats
        .histogram_points
        .fetch_add(points.len() as u64, std::sync::atomic::Ordering::Relaxed);
    let mut logged = Logged::default();
    logged.outcome.keep_errors = flags.details;
    let mut good = Vec::with_capacity(points.len());
    let mut key = String::new();
    for p in &points {
        match check_json(state, &codecs, p, &mut key) {
            Ok(h) => good.push(h),
            Err(msg) => {
                logged.outcome.failed += 1;
                if flags.details {
                    logged.outcome.errors.push((p.to_json(), msg));
                }
            }
        }
    }
    if !good.is_empty() {
        match state.db.append_histograms(&good) {
            Ok(a) => {
                logged.accepted += good.len() as u64;
                state.db.throttle(a).await;
                logged.last = Some(a);
            }
            Err(e) => {
                state.stats.count_error(&e);
                logged.outcome.failed += good.len() as u64;
                logged
                    .outcome
                    .write_errors
                    .push(("null".into(), e.http_message()));
            }
        }
    }
    answer(state, flags, Ok(logged)).await
}
