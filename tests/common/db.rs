//! A database in memory with names, series index and query entry points.

use rtsdb::codec::row::DuplicatePolicy;
use rtsdb::codec::row_key::KeyLayout;
use rtsdb::index::SeriesIndex;
use rtsdb::model::Tsuid;
use rtsdb::model::{NameRules, Timestamp, UidKind, Value};
use rtsdb::query::{self, QueryContext, QueryError};
use rtsdb::storage::Durability;
use rtsdb::store::Store;
use rtsdb::uid::{AutoCreate, UidTable};

pub const T: u64 = 1356998400;

pub struct Db {
    pub store: Store,
    pub uids: UidTable,
    pub index: SeriesIndex,
}

impl Db {
    pub fn new() -> Db {
        let store = Store::in_memory(KeyLayout::default(), DuplicatePolicy::LastWriteWins);
        let uids = UidTable::new(
            &store,
            AutoCreate {
                metrics: true,
                tagks: true,
                tagvs: true,
            },
            NameRules::default(),
        );
        let index = SeriesIndex::open(&store).unwrap();
        Db { store, uids, index }
    }

    pub fn tsuid(&self, metric: &str, tags: &[(&str, &str)]) -> Tsuid {
        let m = self.uids.get_or_create_id(UidKind::Metric, metric).unwrap();
        let pairs = tags
            .iter()
            .map(|(k, v)| {
                (
                    self.uids.get_or_create_id(UidKind::TagKey, k).unwrap(),
                    self.uids.get_or_create_id(UidKind::TagValue, v).unwrap(),
                )
            })
            .collect();
        Tsuid::new(m, pairs).unwrap()
    }

    /// Writes points (seconds offsets from `T`) as the write path would.
    pub fn put(&self, metric: &str, tags: &[(&str, &str)], points: &[(u64, Value)]) -> Tsuid {
        let t = self.tsuid(metric, tags);
        let pts: Vec<(Timestamp, Value)> = points
            .iter()
            .map(|&(s, v)| (Timestamp::Seconds((T + s) as u32), v))
            .collect();
        self.store
            .put_points(&t, &pts, Durability::Process)
            .unwrap();
        for (ts, _) in &pts {
            self.index.add_at(&t, ts.base_time().unwrap()).unwrap();
        }
        t
    }

    pub fn ints(&self, metric: &str, tags: &[(&str, &str)], points: &[(u64, i64)]) -> Tsuid {
        let p: Vec<(u64, Value)> = points.iter().map(|&(t, v)| (t, Value::Int(v))).collect();
        self.put(metric, tags, &p)
    }

    pub fn ctx(&self) -> QueryContext<'_> {
        let mut c = QueryContext::new(&self.store, &self.uids, &self.index);
        c.now_ms = (T + 86_400) * 1000;
        c
    }

    pub fn get(&self, qs: &str) -> Result<String, QueryError> {
        let q = query::parse_get(qs)?;
        Ok(query::execute(&self.ctx(), &q)?.to_json())
    }

    pub fn post(&self, body: &str) -> Result<String, QueryError> {
        let q = query::parse_post(body.as_bytes())?;
        Ok(query::execute(&self.ctx(), &q)?.to_json())
    }

    pub fn get_value(&self, qs: &str) -> serde_json::Value {
        serde_json::from_str(&self.get(qs).unwrap()).unwrap()
    }
}
