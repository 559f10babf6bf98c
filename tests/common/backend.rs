//! One test body, both backends: the TSD integration tests run on the
//! embedded store and on the ClickHouse cluster, with the same assertions
//! (the cluster must answer what the embedded store answers).
//!
//! A test body takes a [`Backend`] and starts [`Tsds`]: on the embedded
//! store one TSD plays both roles; on the cluster two TSDs share one
//! database (and ZooKeeper base path), writes go to [`Tsds::writer`] (A)
//! and reads to [`Tsds::reader`] (B). [`on_both_backends!`] turns the body
//! into two tests, `NAME::embedded` and `NAME::cluster`, so
//! `cargo test --test it cluster` runs every cluster test.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::cluster::{as_pairs, cluster_settings, drop_test_database};
use super::server::TestServer;

/// Where a test's TSDs keep their data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// One TSD on the embedded store.
    Embedded,
    /// Two TSDs on the shared test cluster (`RTSDB_TEST_CLUSTER`).
    Cluster,
}

/// The TSDs of one test: one on the embedded store, two on the cluster.
pub struct Tsds {
    /// Always there but while [`restart`](Self::restart) swaps it.
    writer: Option<TestServer>,
    /// The second TSD on the cluster; `None` on the embedded store, where
    /// the writer reads too.
    reader: Option<TestServer>,
    /// Every setting both TSDs were started with (to restart them).
    settings: Vec<(String, String)>,
    /// Dropped last: the cluster database goes once the TSDs have stopped.
    database: Option<ClusterDatabase>,
}

impl Tsds {
    /// Starts the test's TSDs with `settings` on `backend`. `None` on the
    /// cluster backend when no test cluster was started (after saying
    /// the test is skipped): the test then returns without checking
    /// anything, as the printed line says.
    pub fn start(backend: Backend, settings: &[(&str, &str)]) -> Option<Tsds> {
        let mut all: Vec<(String, String)> = Vec::new();
        let mut database = None;
        if backend == Backend::Cluster {
            let name = std::thread::current().name().unwrap_or("tsds").to_string();
            let cluster = cluster_settings(&name)?;
            database = Some(ClusterDatabase::of(&cluster));
            all.extend(cluster);
            // UIDs in blocks of one: answers name UIDs, and a UID from a
            // block depends on which TSD (and which start of it) reserved
            // the block; with blocks of one they follow the order of first
            // use across the cluster, as on the embedded store.
            all.push(("tsd.storage.zk_uid_block".into(), "1".into()));
        }
        all.extend(settings.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let writer = TestServer::start(&as_pairs(&all));
        let reader = database
            .is_some()
            .then(|| TestServer::start(&as_pairs(&all)));
        Some(Tsds {
            writer: Some(writer),
            reader,
            settings: all,
            database,
        })
    }

    pub fn backend(&self) -> Backend {
        if self.reader.is_some() {
            Backend::Cluster
        } else {
            Backend::Embedded
        }
    }

    /// The TSD writes go to (A).
    pub fn writer(&self) -> &TestServer {
        self.writer.as_ref().expect("the writer runs")
    }

    /// The TSD reads go to (B on the cluster). What the writer accepted is
    /// made visible to it first ([`settle`](Self::settle)).
    pub fn reader(&self) -> &TestServer {
        self.settle();
        self.reader.as_ref().unwrap_or_else(|| self.writer())
    }

    /// On the cluster, writes out what the writer holds in memory, so a
    /// read on the reader sees everything the writer acknowledged: the
    /// buffered points (what its flusher writes every tick) and the
    /// per-series counters (every 10 s), done now. Nothing to do on the
    /// embedded store: its reads merge what is in memory.
    pub fn settle(&self) {
        if self.reader.is_some() {
            let db = self.writer().state.db();
            db.flush_all().unwrap();
            db.persist_counters().unwrap();
        }
    }

    /// The TSD an HTTP request goes to: the writer when it changes what
    /// is stored ([`changes_data`]), else the reader.
    pub fn route(&self, method: &str, path: &str, body: &str) -> &TestServer {
        if changes_data(method, path, body) {
            self.writer()
        } else {
            self.reader()
        }
    }

    /// Status and body text of a request with a JSON body, sent where
    /// [`route`](Self::route) says.
    pub fn req(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        super::server::req(self.route(method, path, body), method, path, body)
    }

    /// Stops every TSD and starts them again on the same data directories
    /// (on the cluster, the same database): what a restart keeps.
    pub fn restart(&mut self) {
        let settings = as_pairs(&self.settings);
        // Each stops (and lets go of its data directory) before it starts.
        let restart = |srv: TestServer| {
            let mut srv = srv;
            srv.stop();
            let dir = std::mem::replace(&mut srv.dir, tempfile::tempdir().unwrap());
            drop(srv);
            TestServer::start_in(dir, &settings)
        };
        self.writer = self.writer.take().map(restart);
        self.reader = self.reader.take().map(restart);
    }
}

/// Whether an HTTP request changes what is stored (points, names, meta,
/// annotations, trees, deletes), as opposed to only reading it. The
/// query string's `method_override` counts as the method, as OpenTSDB
/// reads it.
pub fn changes_data(method: &str, path: &str, body: &str) -> bool {
    let (route, query) = path.split_once('?').unwrap_or((path, ""));
    let method = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("method_override="))
        .unwrap_or(method)
        .to_ascii_uppercase();
    // Writes whatever the method: a put, a UID assignment or rename.
    if [
        "/api/put",
        "/api/uid/assign",
        "/api/uid/rename",
        "/api/rollup",
        "/api/histogram",
    ]
    .iter()
    .any(|p| route.starts_with(p))
    {
        return true;
    }
    // Prometheus' APIs: remote write writes; every other call (GET or a
    // POSTed form, as Grafana sends queries) only reads.
    if route == "/api/v1/write" || route == "/prometheus/api/v1/write" {
        return true;
    }
    if route.starts_with("/prometheus/") {
        return false;
    }
    // Reads whatever the method, but for a query's delete.
    if [
        "/api/query",
        "/api/search",
        "/api/suggest",
        "/suggest",
        "/q",
    ]
    .iter()
    .any(|p| route == *p || route.starts_with(&format!("{p}/")))
    {
        let delete = method == "DELETE"
            || body.replace(' ', "").contains("\"delete\":true")
            || query.split('&').any(|kv| kv == "delete=true");
        return route.starts_with("/api/query") && delete;
    }
    !matches!(method.as_str(), "GET" | "HEAD" | "OPTIONS")
}

/// Turns test bodies `fn NAME(backend: Backend)` into two tests each,
/// `NAME::embedded` and `NAME::cluster`.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn embedded() {
                    super::$name($crate::common::Backend::Embedded)
                }

                #[test]
                fn cluster() {
                    super::$name($crate::common::Backend::Cluster)
                }
            }
        )*
    };
}
pub(crate) use on_both_backends;

/// A test's ClickHouse database, dropped from the whole cluster at the
/// end of the test: a test run creates many, and every replicated table
/// keeps ClickHouse and ZooKeeper busy while it exists.
pub struct ClusterDatabase {
    /// `host:port` of the first ClickHouse endpoint.
    endpoint: String,
    cluster: String,
    database: String,
}

impl ClusterDatabase {
    /// The database [`cluster_settings`] named.
    pub fn of(settings: &[(String, String)]) -> ClusterDatabase {
        let value = |key: &str| {
            settings
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("the cluster settings have no {key}"))
        };
        let endpoints = value("tsd.storage.clickhouse.endpoints");
        let endpoint = endpoints.split(',').next().unwrap_or_default().trim();
        ClusterDatabase {
            endpoint: endpoint.trim_start_matches("http://").to_string(),
            cluster: value("tsd.storage.clickhouse.cluster"),
            database: value("tsd.storage.clickhouse.database"),
        }
    }
}

impl Drop for ClusterDatabase {
    fn drop(&mut self) {
        drop_test_database(&self.endpoint, &self.cluster, &self.database);
    }
}
