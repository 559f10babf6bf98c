//! The local cluster `scripts/with-cluster cargo test` starts (`scripts/cluster up`), for
//! tests that run rtsdb on the ClickHouse + ZooKeeper backend. The cluster
//! is shared by the whole run; each test gets its own ClickHouse database
//! and ZooKeeper base path, so tests never see each other's data.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The conf `scripts/cluster up` printed, from `RTSDB_TEST_CLUSTER`.
pub const CLUSTER_ENV: &str = "RTSDB_TEST_CLUSTER";

/// Settings that put one test on the cluster, with a database and a base
/// path of its own (`test` names them; anything will do). `None`, after
/// printing why, when no cluster was started: the test then passes
/// without checking anything, as its printed line says.
pub fn cluster_settings(test: &str) -> Option<Vec<(String, String)>> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let Ok(path) = std::env::var(CLUSTER_ENV) else {
        // Straight to stderr, once per test binary: the test harness
        // would hide a passing test's own output, and the skip must be
        // seen.
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "cluster tests ({test} and the others): skipped: {CLUSTER_ENV} not set (run scripts/with-cluster cargo test)"
            );
        });
        return None;
    };
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{CLUSTER_ENV}={path}: cannot read it: {e}"));
    let mut settings = rtsdb::config::parse_properties(&text);
    let unique = format!(
        "{}_{}_{}",
        test.chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect::<String>(),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    for (key, value) in &mut settings {
        match key.as_str() {
            "tsd.storage.clickhouse.database" => *value = format!("{value}_test_{unique}"),
            "tsd.storage.zk_basedir" => *value = format!("{value}-test/{unique}"),
            _ => {}
        }
    }
    Some(settings)
}

/// [`cluster_settings`] as the `&[(&str, &str)]` `TestServer::start` takes.
pub fn as_pairs(settings: &[(String, String)]) -> Vec<(&str, &str)> {
    settings
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// Drops a test's database on every server of the cluster, best effort
/// (the cluster itself goes at the end of the run): `endpoint` is one
/// ClickHouse HTTP `host:port`.
pub fn drop_test_database(endpoint: &str, cluster: &str, database: &str) {
    use std::io::{Read, Write};
    let sql = format!("DROP DATABASE IF EXISTS {database} ON CLUSTER {cluster}");
    if let Ok(mut s) = std::net::TcpStream::connect(endpoint) {
        let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(60)));
        let _ = write!(
            s,
            "POST / HTTP/1.1\r\nHost: ch\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{sql}",
            sql.len()
        );
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
    }
}
