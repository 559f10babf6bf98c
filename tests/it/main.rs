//! The integration tests, as one binary: one link of the crate instead of
//! one per file. Each module is a former `tests/<name>.rs`; run one with
//! `cargo test --test it <name>::`.

#[path = "../common/mod.rs"]
mod common;

mod auth;
mod backup;
mod cli;
mod cluster;
mod cluster_faults;
mod cluster_ops;
mod cluster_script;
mod crash;
mod fsck;
mod import;
mod ingest_graphite;
mod ingest_influx;
mod ingest_otlp;
mod limits;
mod never_panic;
mod prom_api;
mod prom_clients;
mod prom_common;
mod prom_diff;
mod prom_hardening;
mod prom_write;
mod query_cache_props;
mod query_props;
mod query_semantics;
mod query_threads;
mod salvage;
mod store_header;
mod stored_format;
mod tls;
mod tsd_annotation;
mod tsd_body;
mod tsd_crash;
mod tsd_discovery;
mod tsd_diskfull;
mod tsd_exp;
mod tsd_fuzz;
mod tsd_gexp;
mod tsd_grafana;
mod tsd_graph;
mod tsd_histogram;
mod tsd_http;
mod tsd_load;
mod tsd_page;
mod tsd_query;
mod tsd_query_cache;
mod tsd_rollup;
mod tsd_rollup_crash;
mod tsd_search;
mod tsd_stats;
mod tsd_telnet;
mod tsd_tree;
mod tsd_tree_docs;
mod tsd_uid;
mod uid_concurrency;
mod wal_damage;
