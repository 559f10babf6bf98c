//! The local cluster `scripts/with-cluster cargo test` starts for the cluster tests: every
//! member the conf names answers, and each test gets a database and a
//! ZooKeeper base path of its own. Skipped without `RTSDB_TEST_CLUSTER`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::common::cluster_settings;

fn ask(addr: &str, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("{addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn setting<'a>(settings: &'a [(String, String)], key: &str) -> &'a str {
    settings
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("the cluster conf sets {key}"))
}

#[test]
fn every_member_of_the_test_cluster_answers() {
    let Some(settings) = cluster_settings("members") else {
        return;
    };
    assert_eq!(setting(&settings, "tsd.storage.backend"), "clickhouse");
    let quorum: Vec<&str> = setting(&settings, "tsd.storage.zk_quorum")
        .split(',')
        .collect();
    assert_eq!(quorum.len(), 3, "a 3-member ensemble");
    for member in quorum {
        assert_eq!(ask(member, b"ruok"), "imok", "{member}");
    }
    let endpoints: Vec<&str> = setting(&settings, "tsd.storage.clickhouse.endpoints")
        .split(',')
        .collect();
    assert_eq!(endpoints.len(), 4, "2 shards x 2 replicas");
    for endpoint in endpoints {
        let addr = endpoint.strip_prefix("http://").expect("http endpoints");
        let reply = ask(addr, b"GET /ping HTTP/1.0\r\n\r\n");
        assert!(
            reply.starts_with("HTTP/1.0 200") && reply.ends_with("Ok.\n"),
            "{endpoint}: {reply}"
        );
        // The cluster the conf names spans both shards and both replicas.
        let cluster = setting(&settings, "tsd.storage.clickhouse.cluster");
        let sql = format!("SELECT count() FROM system.clusters WHERE cluster = '{cluster}'");
        let request = format!(
            "POST / HTTP/1.0\r\nContent-Length: {}\r\n\r\n{sql}",
            sql.len()
        );
        let reply = ask(addr, request.as_bytes());
        assert!(reply.ends_with("\r\n\r\n4\n"), "{endpoint}: {reply}");
    }
}

#[test]
fn each_test_gets_its_own_database_and_base_path() {
    let (Some(a), Some(b)) = (cluster_settings("one"), cluster_settings("one")) else {
        return;
    };
    for key in ["tsd.storage.clickhouse.database", "tsd.storage.zk_basedir"] {
        assert_ne!(setting(&a, key), setting(&b, key), "{key}");
    }
    assert!(setting(&a, "tsd.storage.zk_basedir").starts_with('/'));
}
