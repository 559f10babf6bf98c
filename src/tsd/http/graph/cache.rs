//! The `/q` result cache, with `GraphHandler`'s rules: results are kept
//! by query (the query string less the output flags) and reused while
//! they can still be right — forever once the query's end lies in the
//! past and the result was made after it, else for a share of the span
//! (`max_age`). Entries live in `tsd.http.cachedir` when it is set (as
//! `<key>.png`, `.txt`, `.json`), else in memory.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

/// The most results the memory cache keeps; the oldest go first.
const MEMORY_ENTRIES: usize = 512;
/// Shorter files cannot be a whole PNG (or a useful text answer):
/// `GraphHandler` ignores them.
const MIN_CACHED_BYTES: usize = 21;
/// `Const.MAX_TIMESPAN`: past this, no TSD still writes to a row.
const MAX_TIMESPAN: i64 = 3600;

/// What a cached result is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Kind {
    Png,
    Text,
    Json,
}

impl Kind {
    fn suffix(self) -> &'static str {
        match self {
            Kind::Png => "png",
            Kind::Text => "txt",
            Kind::Json => "json",
        }
    }
}

/// A cached result and when it was made (epoch seconds).
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub made_s: i64,
    pub bytes: Vec<u8>,
}

/// The cache of one server.
#[derive(Debug)]
pub(crate) struct GraphCache {
    dir: Option<PathBuf>,
    memory: Mutex<HashMap<(String, Kind), Entry>>,
}

impl GraphCache {
    /// A cache in `dir`, or in memory when `None`.
    pub(crate) fn new(dir: Option<PathBuf>) -> GraphCache {
        GraphCache {
            dir,
            memory: Mutex::new(HashMap::new()),
        }
    }

    /// The entry, if there is one that is long enough to be whole.
    pub(super) fn get(&self, key: &str, kind: Kind) -> Option<Entry> {
        let entry = match &self.dir {
            Some(dir) => {
                let path = dir.join(format!("{key}.{}", kind.suffix()));
                let bytes = std::fs::read(&path).ok()?;
                let made = std::fs::metadata(&path).ok()?.modified().ok()?;
                Entry {
                    made_s: epoch_s(made),
                    bytes,
                }
            }
            None => self.memory.lock().get(&(key.to_string(), kind))?.clone(),
        };
        if entry.bytes.len() < MIN_CACHED_BYTES && kind != Kind::Json {
            tracing::warn!(
                key,
                kind = kind.suffix(),
                "cached result too small to be valid; ignoring it"
            );
            return None;
        }
        Some(entry)
    }

    /// Keeps `bytes` as the `kind` result of `key`. A failure to write
    /// only costs a later recomputation, so it is logged, not returned.
    pub(super) fn put(&self, key: &str, kind: Kind, bytes: &[u8]) {
        match &self.dir {
            Some(dir) => {
                let path = dir.join(format!("{key}.{}", kind.suffix()));
                // Written aside and renamed, so a reader never sees half.
                let tmp = dir.join(format!(".{key}.{}.tmp", kind.suffix()));
                let written = std::fs::create_dir_all(dir)
                    .and_then(|_| std::fs::write(&tmp, bytes))
                    .and_then(|_| std::fs::rename(&tmp, &path));
                if let Err(e) = written {
                    tracing::error!(path = %path.display(), error = %e, "failed to write a cached graph");
                }
            }
            None => {
                let mut m = self.memory.lock();
                if m.len() >= MEMORY_ENTRIES
                    && let Some(oldest) = m
                        .iter()
                        .min_by_key(|(_, e)| e.made_s)
                        .map(|(k, _)| k.clone())
                {
                    m.remove(&oldest);
                }
                m.insert(
                    (key.to_string(), kind),
                    Entry {
                        made_s: now_s(),
                        bytes: bytes.to_vec(),
                    },
                );
            }
        }
    }
}

fn epoch_s(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

pub(super) fn now_s() -> i64 {
    epoch_s(SystemTime::now())
}

/// The cache key of a query: its parameters less those that only pick the
/// output format (`png`, `json`, `ascii`) and `ignore` (a cache-buster
/// OpenTSDB's own page adds), independent of the parameters' order.
pub(super) fn key(pairs: &[(String, String)]) -> String {
    let mut by_name: Vec<(&str, Vec<&str>)> = Vec::new();
    for (k, v) in pairs {
        if matches!(k.as_str(), "png" | "json" | "ascii" | "ignore") {
            continue;
        }
        match by_name.iter_mut().find(|(n, _)| n == k) {
            Some((_, vs)) => vs.push(v),
            None => by_name.push((k, vec![v])),
        }
    }
    by_name.sort();
    let mut text = String::new();
    for (k, vs) in by_name {
        text.push_str(k);
        for v in vs {
            text.push('\u{1}');
            text.push_str(v);
        }
        text.push('\u{2}');
    }
    // Only names cache entries: a build that hashed otherwise would just
    // miss the old files, which `max_age` ages out anyway.
    format!(
        "{:016x}",
        crate::model::hash::hash_bytes(0, text.as_bytes())
    )
}

/// `computeMaxAge`: how long (s) a result may be served again. A range
/// reaching into the future is never reused; one that ended over an hour
/// ago, given in absolute times, for a day; anything else for ~0.1% of
/// its span.
pub(super) fn max_age(start_s: i64, end_s: i64, now_s: i64, relative: bool) -> i64 {
    if end_s > now_s {
        0
    } else if end_s < now_s - MAX_TIMESPAN && !relative {
        86400
    } else {
        // Java's `(int) (end - start) >> 10`.
        i64::from((end_s - start_s) as i32 >> 10)
    }
}

/// `staleCacheFile`: whether a result made at `made_s` may not be served
/// for a query ending at `end_s`.
pub(super) fn stale(made_s: i64, end_s: i64, max_age: i64, now_s: i64) -> bool {
    if made_s <= 0 {
        return true;
    }
    let staleness = now_s - made_s;
    if staleness < 0 {
        // Made "in the future": play safe.
        return true;
    }
    if 0 < end_s && end_s < now_s {
        // Made before the end: it holds a partial result.
        return made_s < end_s;
    }
    staleness > max_age
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn key_ignores_output_flags_and_order() {
        let a = key(&pairs(&[("start", "1h-ago"), ("m", "sum:x"), ("png", "")]));
        let b = key(&pairs(&[
            ("m", "sum:x"),
            ("ascii", ""),
            ("start", "1h-ago"),
        ]));
        assert_eq!(a, b);
        let c = key(&pairs(&[("m", "sum:y"), ("start", "1h-ago")]));
        assert_ne!(a, c);
        // The order of repeated parameters matters (it orders the plot).
        let d = key(&pairs(&[("m", "a"), ("m", "b"), ("start", "1")]));
        let e = key(&pairs(&[("m", "b"), ("m", "a"), ("start", "1")]));
        assert_ne!(d, e);
    }

    #[test]
    fn max_age_follows_graph_handler() {
        let now = 1_000_000;
        assert_eq!(max_age(now - 3600, now + 1, now, false), 0);
        assert_eq!(max_age(now - 86400, now - 7200, now, false), 86400);
        assert_eq!(
            max_age(now - 86400, now - 7200, now, true),
            (86400 - 7200) >> 10
        );
        assert_eq!(max_age(now - 3600, now, now, false), 3600 >> 10);
    }

    #[test]
    fn stale_rules() {
        let now = 1_000_000;
        // Past end: fresh only if made after the end.
        assert!(!stale(now - 10, now - 100, 0, now));
        assert!(stale(now - 200, now - 100, 86400, now));
        // End now or later: fresh for max_age.
        assert!(!stale(now - 3, now, 5, now));
        assert!(stale(now - 6, now, 5, now));
        assert!(stale(now + 5, now, 5, now));
    }

    #[test]
    fn memory_and_dir_caches_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        for cache in [
            GraphCache::new(None),
            GraphCache::new(Some(dir.path().join("c"))),
        ] {
            assert!(cache.get("k", Kind::Png).is_none());
            cache.put("k", Kind::Png, b"short");
            assert!(cache.get("k", Kind::Png).is_none(), "too small to be whole");
            let body = vec![7u8; 64];
            cache.put("k", Kind::Png, &body);
            let e = cache.get("k", Kind::Png).unwrap();
            assert_eq!(e.bytes, body);
            assert!((e.made_s - now_s()).abs() <= 2);
            assert!(cache.get("k", Kind::Text).is_none());
        }
    }
}
