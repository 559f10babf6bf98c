//! Retention: a time-to-live for data rows, per store and optionally per
//! metric. Expired hours disappear in two ways, neither touching points
//! one by one: reads start at the first retained hour, and the storage
//! engine's own compaction drops expired rows (a compaction filter on the
//! data keyspace).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::codec::row_key::KeyLayout;
use crate::model::row_span::row_base_clamped;
use crate::model::time::parse_duration;
use crate::model::{Uid, UidKind};
use crate::uid::UidTable;

/// Config key of the store-wide TTL (`30d`, `12h`, seconds; `0` = keep
/// forever). Per-metric TTLs use `tsd.storage.ttl.<metric name>`.
pub(crate) const TTL_KEY: &str = "tsd.storage.ttl";

#[derive(Debug, Default)]
pub struct Retention {
    default_ttl_s: Option<u64>,
    by_name: BTreeMap<String, u64>,
    /// `by_name` resolved to UIDs once the UID table is available.
    by_metric: RwLock<HashMap<Uid, u64>>,
    /// The longest row span, in seconds, of each rollup table
    /// (`tsd.rollups.config`); others are taken as a year.
    rollup_spans: BTreeMap<String, u64>,
}

/// The row span assumed for a rollup table the configuration does not
/// name (the longest OpenTSDB allows: a leap year).
const UNKNOWN_ROLLUP_SPAN_S: u64 = 366 * 86_400;

fn parse_ttl(key: &str, value: &str) -> Result<Option<u64>, String> {
    let v = value.trim();
    if v.is_empty() || v == "0" {
        return Ok(None);
    }
    if let Ok(secs) = v.parse::<u64>() {
        return Ok(Some(secs));
    }
    parse_duration(v)
        .map(|ms| Some(ms / 1000))
        .map_err(|e| format!("{key} = '{value}': {e}"))
}

impl Retention {
    /// Reads the TTL keys from config entries.
    pub fn from_entries<'a>(
        entries: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> Result<Retention, String> {
        let mut r = Retention::default();
        for (k, v) in entries {
            if k == TTL_KEY {
                r.default_ttl_s = parse_ttl(k, v)?;
            } else if let Some(metric) = k.strip_prefix("tsd.storage.ttl.")
                && let Some(ttl) = parse_ttl(k, v)?
            {
                r.by_name.insert(metric.to_string(), ttl);
            }
        }
        Ok(r)
    }

    /// This retention, knowing the row span of each rollup table.
    pub fn with_rollup_spans(mut self, spans: impl IntoIterator<Item = (String, u64)>) -> Self {
        self.rollup_spans.extend(spans);
        self
    }

    /// Whether a `tsdb-rollup` entry (docs/format/rollup.md) is expired:
    /// its whole row lies before its metric's retention floor.
    pub fn rollup_expired(&self, layout: &KeyLayout, key: &[u8], now_s: u64) -> bool {
        if !self.is_enabled() {
            return false;
        }
        let Some((table, row_key)) = super::rollup_table::split_key(key) else {
            return false;
        };
        let sw = layout.salt.width as usize;
        let mw = layout.widths.metric.bytes();
        let Some(ts) = row_key.get(sw + mw..sw + mw + 4) else {
            return false;
        };
        let Ok(metric) = Uid::from_bytes(&row_key[sw..sw + mw], layout.widths.metric) else {
            return false;
        };
        let base = u32::from_be_bytes([ts[0], ts[1], ts[2], ts[3]]) as u64;
        let span = self
            .rollup_spans
            .get(table)
            .copied()
            .unwrap_or(UNKNOWN_ROLLUP_SPAN_S);
        base + span <= self.floor(metric, now_s) as u64
    }

    pub fn is_enabled(&self) -> bool {
        self.default_ttl_s.is_some() || !self.by_name.is_empty()
    }

    /// Metric names with their own TTL, to resolve to UIDs.
    pub fn metric_names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    /// Follows the metric names of `uids`: resolves the names with their
    /// own TTL that already have a UID, and returns `uids` telling this
    /// retention of every metric UID it assigns from now on.
    pub fn attach(self: &Arc<Self>, uids: UidTable) -> UidTable {
        if self.by_name.is_empty() {
            return uids;
        }
        for name in self.metric_names() {
            if let Ok(Some(uid)) = uids.lookup_id(UidKind::Metric, name) {
                self.set_metric_uid(name, uid);
            }
        }
        let me = self.clone();
        uids.on_new_uid(Box::new(move |kind, name, uid| {
            if kind == UidKind::Metric {
                me.set_metric_uid(name, uid);
            }
        }))
    }

    pub fn set_metric_uid(&self, name: &str, uid: Uid) {
        if let Some(ttl) = self.by_name.get(name) {
            self.by_metric.write().insert(uid, *ttl);
        }
    }

    pub fn ttl(&self, metric: Uid) -> Option<u64> {
        self.by_metric
            .read()
            .get(&metric)
            .copied()
            .or(self.default_ttl_s)
    }

    /// First hour still retained for `metric` at `now_s`: rows whose base
    /// time is below it hold only expired points.
    pub fn floor(&self, metric: Uid, now_s: u64) -> u32 {
        match self.ttl(metric) {
            None => 0,
            Some(ttl) => {
                // A cutoff past 2106 expires every row but the last.
                row_base_clamped(now_s.saturating_sub(ttl))
            }
        }
    }

    /// The base hour below which the rows of every metric are expired at
    /// `now_s`, whatever the metric: the floor of the longest TTL
    /// configured. `None` when some metric is kept forever (no store-wide
    /// TTL): then no stretch of time can be dropped whole, and expired
    /// rows of the metrics with a TTL are only hidden from reads. This is
    /// what a cluster drops whole weekly partitions by: a row written
    /// later into such a stretch, by any metric, is expired as it lands.
    pub fn floor_for_all(&self, now_s: u64) -> Option<u32> {
        let default = self.default_ttl_s?;
        let longest = self.by_name.values().copied().fold(default, u64::max);
        Some(row_base_clamped(now_s.saturating_sub(longest)))
    }

    /// The base time below which every rollup row of every metric is
    /// expired at `now_s`: [`floor_for_all`](Self::floor_for_all) less the
    /// longest row span of the rollup tables configured (a year when none
    /// is), as a row holds points up to its base time plus its span. What
    /// a cluster drops whole weekly partitions of the rollup table by; a
    /// table no longer configured is taken to have had that longest span
    /// (its rows cannot be read without its configuration).
    pub fn rollup_floor_for_all(&self, now_s: u64) -> Option<u32> {
        let floor = self.floor_for_all(now_s)?;
        let span = self
            .rollup_spans
            .values()
            .copied()
            .max()
            .unwrap_or(UNKNOWN_ROLLUP_SPAN_S);
        Some(u64::from(floor).saturating_sub(span) as u32)
    }

    /// Is the data row `key` entirely older than its metric's TTL?
    pub fn expired(&self, layout: &KeyLayout, key: &[u8], now_s: u64) -> bool {
        if !self.is_enabled() {
            return false;
        }
        let sw = layout.salt.width as usize;
        let mw = layout.widths.metric.bytes();
        let Some(ts) = key.get(sw + mw..sw + mw + 4) else {
            return false;
        };
        let Ok(metric) = Uid::from_bytes(&key[sw..sw + mw], layout.widths.metric) else {
            return false; // global annotations, bad keys: fsck's business
        };
        let base = u32::from_be_bytes([ts[0], ts[1], ts[2], ts[3]]);
        base < self.floor(metric, now_s)
    }
}

pub(crate) fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Tsuid;
    use crate::model::UidWidth;

    #[test]
    fn ttl_config_and_floors() {
        let r = Retention::from_entries(
            [
                ("tsd.storage.ttl", "2h"),
                ("tsd.storage.ttl.sys.cpu.user", "86400"),
                ("other", "x"),
            ]
            .into_iter(),
        )
        .unwrap();
        let u = |i| Uid::new(i, UidWidth::DEFAULT).unwrap();
        r.set_metric_uid("sys.cpu.user", u(7));
        let now = 1_357_000_000; // 00:33:20 past 1356998400 + 3600*0
        assert_eq!(r.ttl(u(1)), Some(7200));
        assert_eq!(r.ttl(u(7)), Some(86400));
        // now - 2h = 1356992800 → its hour 1356991200.
        assert_eq!(r.floor(u(1), now), 1_356_991_200);
        let layout = KeyLayout::default();
        let t = Tsuid::new(u(1), vec![(u(1), u(1))]).unwrap();
        assert!(r.expired(&layout, &layout.row_key(&t, 1_356_987_600), now));
        assert!(!r.expired(&layout, &layout.row_key(&t, 1_356_991_200), now));
        // Rollup rows expire once their whole span is past the floor.
        let r = r.with_rollup_spans([("d".to_string(), 86_400)]);
        let rollup = |table: &str, base| {
            crate::store::rollup_table::entry_key(table, &layout.row_key(&t, base))
        };
        assert!(r.rollup_expired(&layout, &rollup("d", 1_356_991_200 - 86_400), now));
        assert!(!r.rollup_expired(&layout, &rollup("d", 1_356_991_200 - 86_399), now));
        assert!(!r.rollup_expired(&layout, &rollup("other", 1_356_991_200 - 86_400), now));
        let t7 = Tsuid::new(u(7), vec![(u(1), u(1))]).unwrap();
        assert!(!r.expired(&layout, &layout.row_key(&t7, 1_356_987_600), now));
        // Every metric's rows are expired below the longest TTL's floor.
        assert_eq!(r.floor_for_all(now), Some(r.floor(u(7), now)));
        let per_metric_only =
            Retention::from_entries([("tsd.storage.ttl.sys.cpu.user", "60")].into_iter()).unwrap();
        assert_eq!(per_metric_only.floor_for_all(now), None);
        assert_eq!(per_metric_only.rollup_floor_for_all(now), None);
        // Rollup rows: a day's span below that floor (the only table).
        assert_eq!(
            r.rollup_floor_for_all(now),
            Some(r.floor(u(7), now) - 86_400)
        );
        assert!(Retention::from_entries([("tsd.storage.ttl", "3x")].into_iter()).is_err());
        assert!(
            !Retention::from_entries([("tsd.storage.ttl", "0")].into_iter())
                .unwrap()
                .is_enabled()
        );
    }

    #[test]
    fn attached_uid_table_resolves_and_follows_metric_names() {
        use crate::codec::row::DuplicatePolicy;
        use crate::model::NameRules;
        use crate::store::Store;
        use crate::uid::AutoCreate;

        let r = Arc::new(
            Retention::from_entries(
                [
                    ("tsd.storage.ttl.old", "60"),
                    ("tsd.storage.ttl.new", "120"),
                ]
                .into_iter(),
            )
            .unwrap(),
        );
        let store = Store::in_memory(KeyLayout::default(), DuplicatePolicy::LastWriteWins);
        let plain = UidTable::new(
            store.uid_store(),
            AutoCreate::default(),
            NameRules::default(),
        );
        let old = plain.assign(UidKind::Metric, "old").unwrap().uid();
        // Names assigned before: resolved when attached.
        let uids = r.attach(UidTable::new(
            store.uid_store(),
            AutoCreate::default(),
            NameRules::default(),
        ));
        assert_eq!(r.ttl(old), Some(60));
        // Names assigned after: through the hook.
        let new = uids.assign(UidKind::Metric, "new").unwrap().uid();
        assert_eq!(r.ttl(new), Some(120));
        let other = uids.assign(UidKind::Metric, "other").unwrap().uid();
        assert_eq!(r.ttl(other), None);
    }
}
