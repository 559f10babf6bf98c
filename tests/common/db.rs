//! A database in a temporary directory with the query entry points, for
//! tests that call the query library directly.

use std::sync::Arc;

use rtsdb::db::DbOptions;
use rtsdb::db::PendingPoint;
use rtsdb::model::Value;
use rtsdb::query::{self, QueryContext, QueryError};
use rtsdb::uid::{AutoCreate, UidTable};

pub const T: u64 = 1356998400;

pub struct Db {
    pub db: Arc<rtsdb::db::Db>,
    _dir: tempfile::TempDir,
}

impl Db {
    pub fn new() -> Db {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = DbOptions::new(dir.path());
        opts.auto_create = AutoCreate {
            metrics: true,
            tagks: true,
            tagvs: true,
        };
        Db {
            db: rtsdb::db::Db::open(&opts).unwrap(),
            _dir: dir,
        }
    }

    pub fn uids(&self) -> &UidTable {
        self.db.uids()
    }

    /// Writes points (seconds offsets from `T`) through the write path;
    /// they are read back merged from the write buffer.
    pub fn put(&self, metric: &str, tags: &[(&str, &str)], points: &[(u64, Value)]) {
        let mut key = String::new();
        let mut batch = Vec::with_capacity(points.len());
        for &(s, value) in points {
            let (series, ts) = self
                .db
                .resolve(metric, (T + s) as i64, value, tags, &mut key)
                .unwrap();
            batch.push(PendingPoint { series, ts, value });
        }
        self.db.append(&batch).unwrap();
    }

    pub fn ints(&self, metric: &str, tags: &[(&str, &str)], points: &[(u64, i64)]) {
        let p: Vec<(u64, Value)> = points.iter().map(|&(t, v)| (t, Value::Int(v))).collect();
        self.put(metric, tags, &p)
    }

    pub fn ctx(&self) -> QueryContext<'_> {
        let mut c = QueryContext::new(&self.db, &Default::default());
        c.now_ms = (T + 86_400) * 1000;
        c
    }

    pub fn get(&self, qs: &str) -> Result<String, QueryError> {
        let q = query::parse_get(qs)?;
        Ok(query::execute(&self.ctx(), &q, None)?.to_json())
    }

    pub fn post(&self, body: &str) -> Result<String, QueryError> {
        let q = query::parse_post(body.as_bytes())?;
        Ok(query::execute(&self.ctx(), &q, None)?.to_json())
    }

    pub fn get_value(&self, qs: &str) -> serde_json::Value {
        serde_json::from_str(&self.get(qs).unwrap()).unwrap()
    }
}
