//! A [`KvStore`] on a ClickHouse cluster (`tsd.storage.backend =
//! clickhouse`; docs/scale-out.md): every logical table is a replicated
//! local table on each server plus a `Distributed` table over them, and
//! each key holds versions.
//!
//! Rows are `(key, series, writer, ver, deleted, value)`:
//! - `writer` is the TSD that wrote the version (empty outside the data
//!   table) and `ver` an increasing version number. The local tables are
//!   `ReplicatedReplacingMergeTree(ver) ORDER BY (key, writer)`: merges
//!   keep the newest version per key and writer, so several TSDs may
//!   rewrite one series-hour row at once without losing each other's cells.
//! - A read takes the newest version of each (key, writer) (`argMax`, so
//!   unmerged parts read right), drops every version older than the newest
//!   tombstone (`deleted = 1`) and, if more than one is left, merges them
//!   in `ver` order through [`DataRows::merge`] (data rows: later cells win
//!   per timestamp). Other tables have one writer, so the newest wins.
//! - `series` is what the `Distributed` table shards by: for data rows
//!   the row key without its base hour ([`DataRows::place`]), so one
//!   series' rows live on one shard; elsewhere the key itself.
//!
//! `increment` and `compare_and_set` are read-modify-writes under a
//! cluster-wide [`Coordinator`] lock, and write a version above the one
//! they read, whatever the clocks say.

mod hour_scan;
mod http;
mod own_rows;
mod read_cache;
mod rowbinary;
mod shards;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::coordinator::Coordinator;
use super::{
    Compaction, Durability, KeyRead, KeyValue, KeyVersion, KvSnapshot, KvStore, Mutation,
    Partitions, Result, RowAppends, ScanIter, ScanRange, StorageError, Table, Versions, WriteBatch,
    counter_value,
};
pub(crate) use http::Endpoint;
use http::Http;
use rowbinary::{Reader, put_string};
use shards::Shards;

/// Keys per `IN (...)` list of a multi-key read: one statement per this
/// many keys keeps the statement text (hex keys) well under ClickHouse's
/// default `max_query_size` of 256 KiB.
const KEYS_PER_READ: usize = 1000;
/// (key, writer) groups fetched per scan page.
const SCAN_PAGE: usize = 20_000;
/// The span of row time one partition of the data and rollup tables
/// holds: a week of base times, so retention drops whole weeks
/// ([`Partitions::drop_before`]).
const PARTITION_SECONDS: u32 = 604_800;

/// Where a store lives: `tsd.storage.clickhouse.*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClickHouseConfig {
    /// `http://host:port` each, tried in order (failover).
    pub endpoints: Vec<String>,
    /// The cluster name in the servers' `remote_servers`.
    pub cluster: String,
    /// The database holding rtsdb's tables (created if absent).
    pub database: String,
    /// Bytes of data rows kept after a read, answered again while no TSD
    /// changed them (`tsd.storage.clickhouse.read_cache_mb`; 0: none).
    pub read_cache_bytes: usize,
}

/// What the store layer knows about data rows that the engine needs.
pub(crate) trait DataRows: Send + Sync {
    /// The part of a data row key that decides its shard (the key without
    /// its base hour, so a series' rows stay on one shard) and the base
    /// hour (which decides its partition; 0 for a key that has none).
    fn place(&self, key: &[u8]) -> (Vec<u8>, u32);
    /// Where a data row key's base hour sits (the length of the salt and
    /// metric before it) and the hour; `None` for a key that has none.
    fn hour(&self, key: &[u8]) -> Option<(usize, u32)>;
    /// The base time of a rollup table's row key (the start of the row's
    /// span, docs/format/rollup.md), which decides its partition; 0 for a
    /// key that has none.
    fn rollup_base(&self, key: &[u8]) -> u32;
    /// One row value from the live versions of `key` written by different
    /// writers, oldest first (at least two); `None` if one does not decode.
    fn merge(&self, key: &[u8], versions: &[&[u8]]) -> Option<Vec<u8>>;
}

/// Rows without structure: sharded by the whole key, newest version wins
/// (tests of the engine on its own).
#[cfg(test)]
pub(crate) struct OpaqueRows;

#[cfg(test)]
impl DataRows for OpaqueRows {
    fn place(&self, key: &[u8]) -> (Vec<u8>, u32) {
        (key.to_vec(), 0)
    }
    /// Every row of hour 0, long past: kept by the read cache, and every
    /// write of it announced (the cache's rules run in the engine's tests).
    fn hour(&self, _key: &[u8]) -> Option<(usize, u32)> {
        Some((0, 0))
    }
    fn rollup_base(&self, _key: &[u8]) -> u32 {
        0
    }
    fn merge(&self, _key: &[u8], versions: &[&[u8]]) -> Option<Vec<u8>> {
        versions.last().map(|v| v.to_vec())
    }
}

/// The settings every statement runs with. `load_balancing = in_order`
/// makes reads and writes of every TSD go to the first live replica of
/// each shard, so a row a TSD wrote is read back by any other TSD at once,
/// not after replication (docs/scale-out.md, "Freshness").
const COMMON: [(&str, &str); 1] = [("load_balancing", "in_order")];

/// The coordinator generation every delete or replace of data rows
/// moves, so that each TSD forgets the rows it holds to write again
/// (own_rows.rs).
const DELETES_GENERATION: &str = "data-deletes";

/// The store: cheap to clone (snapshots hold a clone).
#[derive(Clone)]
pub(crate) struct ClickHouseStore {
    inner: Arc<Inner>,
}

impl std::ops::Deref for ClickHouseStore {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.inner
    }
}

pub(crate) struct Inner {
    http: Http,
    config: ClickHouseConfig,
    coordinator: Arc<dyn Coordinator>,
    rows: Arc<dyn DataRows>,
    writer: String,
    /// The last version this process handed out or saw: versions are
    /// wall-clock nanoseconds, kept above everything seen (a hybrid
    /// clock), so a write after reading a version always outranks it.
    last_ver: AtomicU64,
    /// Serialises this process's read-modify-writes before the cluster
    /// lock, so threads queue here rather than in ZooKeeper.
    rmw: super::StripedLocks,
    /// What this process wrote of recent data rows ([`own_rows`]); its
    /// lock also orders this process's data-row writes and deletes.
    own_rows: Mutex<own_rows::OwnRows>,
    /// Data rows read lately, kept coherent through the coordinator's
    /// `rows-NN` change counters ([`read_cache`]).
    cache: read_cache::ReadCache,
    _schema: Mutex<()>,
    /// Which shard holds a key and which endpoints are its replicas, so
    /// key reads ask that shard alone; `None` when the cluster's shards
    /// could not be matched to the endpoints (reads go through the
    /// `Distributed` tables).
    shards: Option<Shards>,
    /// Whether the rollup table has a `base` column and is partitioned by
    /// week of it, as the data table: true for a database created since
    /// rollups were partitioned, false for an older one, which is used as
    /// it is (docs/format/clickhouse.md "Schema versions").
    rollups_by_time: bool,
}

fn table_name(t: Table) -> &'static str {
    match t {
        Table::Data => "data",
        Table::Uid => "uid",
        Table::Meta => "meta",
        Table::Index => "idx",
        Table::Tree => "tree",
        Table::Rollup => "rollup",
    }
}

fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    s
}

/// A name safe to put into SQL unquoted (database and cluster names come
/// from configuration).
fn check_ident(what: &str, name: &str) -> Result<()> {
    if name.is_empty()
        || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        || name.as_bytes()[0].is_ascii_digit()
    {
        return Err(StorageError::Engine(format!(
            "{what} '{name}' must be letters, digits and '_' (not starting with a digit)"
        )));
    }
    Ok(())
}

/// A version about to be inserted: a value, or a tombstone (`None`).
struct NewVersion<'a> {
    key: &'a [u8],
    value: Option<&'a [u8]>,
    ver: u64,
    /// Whose version of the key it is, when not this store's own (a
    /// tombstone over another writer's version, [`Versions::replace`]).
    writer: Option<&'a [u8]>,
}

/// One stored version of a key.
#[derive(Clone)]
struct Version {
    key: Vec<u8>,
    value: Vec<u8>,
    ver: u64,
    deleted: bool,
}

impl ClickHouseStore {
    /// Connects, creates the database and tables `ON CLUSTER` if absent,
    /// and checks every table answers. `writer` names this TSD among the
    /// writers of the data table: stable across its restarts.
    pub(crate) fn open(
        config: ClickHouseConfig,
        coordinator: Arc<dyn Coordinator>,
        rows: Arc<dyn DataRows>,
        writer: String,
    ) -> Result<ClickHouseStore> {
        check_ident("tsd.storage.clickhouse.database", &config.database)?;
        check_ident("tsd.storage.clickhouse.cluster", &config.cluster)?;
        if config.endpoints.is_empty() {
            return Err(StorageError::Engine(
                "tsd.storage.clickhouse.endpoints is empty".into(),
            ));
        }
        let endpoints = config
            .endpoints
            .iter()
            .map(|e| Endpoint::parse(e).map_err(StorageError::Engine))
            .collect::<Result<Vec<_>>>()?;
        let store = Inner {
            cache: read_cache::ReadCache::new(config.read_cache_bytes),
            http: Http::new(endpoints),
            config,
            coordinator,
            rows,
            writer,
            last_ver: AtomicU64::new(0),
            rmw: super::StripedLocks::new(64),
            own_rows: Mutex::new(own_rows::OwnRows::new()),
            _schema: Mutex::new(()),
            shards: None,
            rollups_by_time: false,
        };
        let mut store = store;
        store.rollups_by_time = store.create_schema()?;
        store.shards = Shards::discover(&store.http, &store.config.cluster);
        Ok(ClickHouseStore {
            inner: Arc::new(store),
        })
    }
}

impl Inner {
    /// The configuration the store was opened with.
    #[cfg(test)]
    pub(crate) fn config(&self) -> &ClickHouseConfig {
        &self.config
    }

    fn exec(&self, sql: &str) -> Result<Vec<u8>> {
        self.http.post("", &COMMON, sql.as_bytes())
    }

    /// Creates the database and tables when absent; returns whether the
    /// rollup table is partitioned by time ([`Inner::rollups_by_time`]).
    fn create_schema(&self) -> Result<bool> {
        let (db, cluster) = (&self.config.database, &self.config.cluster);
        // Distributed DDL takes a ZooKeeper round and every server's reply
        // per statement (~0.1 s each): skip it when the tables are there.
        let names: Vec<String> = Table::ALL
            .iter()
            .flat_map(|t| {
                [
                    table_name(*t).to_string(),
                    format!("{}_local", table_name(*t)),
                ]
            })
            .collect();
        let present = self.exec(&format!(
            "SELECT count() FROM system.tables WHERE database = '{db}' AND name IN ('{}')",
            names.join("','")
        ));
        if let Ok(n) = present
            && String::from_utf8_lossy(&n).trim() == names.len().to_string()
        {
            return self.rollup_table_has_base();
        }
        // The first statement also proves some endpoint answers; name them
        // all if none does.
        self.exec(&format!("CREATE DATABASE IF NOT EXISTS {db} ON CLUSTER {cluster}"))
            .map_err(|e| match e {
                StorageError::Engine(m) => StorageError::Engine(format!(
                    "cannot create the ClickHouse database '{db}' on cluster '{cluster}' through {}: {m}",
                    self.config.endpoints.join(", ")
                )),
                e => e,
            })?;
        for t in Table::ALL {
            let name = table_name(t);
            // Data and rollup rows are partitioned by week of their base
            // time, so retention can drop whole partitions; other tables
            // have no time and one partition.
            let (base, partition) = if matches!(t, Table::Data | Table::Rollup) {
                (
                    "base UInt32, ".to_string(),
                    format!("PARTITION BY intDiv(base, {PARTITION_SECONDS}) "),
                )
            } else {
                (String::new(), String::new())
            };
            self.exec(&format!(
                "CREATE TABLE IF NOT EXISTS {db}.{name}_local ON CLUSTER {cluster} \
                 (key String, series String, {base}writer String, ver UInt64, deleted UInt8, value String) \
                 ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{{shard}}/{db}/{name}', '{{replica}}', ver) \
                 {partition}ORDER BY (key, writer)"
            ))?;
            self.exec(&format!(
                "CREATE TABLE IF NOT EXISTS {db}.{name} ON CLUSTER {cluster} AS {db}.{name}_local \
                 ENGINE = Distributed({cluster}, {db}, {name}_local, sipHash64(series))"
            ))?;
        }
        // `IF NOT EXISTS` kept a rollup table an older rtsdb created.
        self.rollup_table_has_base()
    }

    /// Whether this database's rollup table has the `base` column (created
    /// by this version) or not (by a version before rollups were
    /// partitioned).
    fn rollup_table_has_base(&self) -> Result<bool> {
        let answer = self.exec(&format!(
            "SELECT count() FROM system.columns WHERE database = '{}' \
             AND table = '{}_local' AND name = 'base'",
            self.config.database,
            table_name(Table::Rollup)
        ))?;
        Ok(String::from_utf8_lossy(&answer).trim() == "1")
    }

    /// Whether `table` has the `base` column and weekly partitions.
    fn by_time(&self, table: Table) -> bool {
        match table {
            Table::Data => true,
            Table::Rollup => self.rollups_by_time,
            _ => false,
        }
    }

    /// A version above every one handed out or seen by this process.
    fn next_ver(&self) -> u64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let mut last = self.last_ver.load(Ordering::Relaxed);
        loop {
            let v = now.max(last + 1);
            match self
                .last_ver
                .compare_exchange_weak(last, v, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return v,
                Err(seen) => last = seen,
            }
        }
    }

    fn saw_ver(&self, ver: u64) {
        self.last_ver.fetch_max(ver, Ordering::Relaxed);
    }

    /// Newest version per (key, writer) of the keys `filter` selects, in
    /// key order then version order, through the `Distributed` table.
    fn select(&self, table: Table, filter: &str, limit: Option<usize>) -> Result<Vec<Version>> {
        let sql = self.select_sql(
            &format!("{}.{}", self.config.database, table_name(table)),
            filter,
            limit,
            false,
        );
        self.versions_of(&self.exec(&sql)?)
    }

    /// The newest version per (key, writer) of the keys `filter` selects
    /// from `from`, in key then version order: `key`, the writer's name if
    /// `with_writer`, then what [`version_rest`](Self::version_rest) reads.
    fn select_sql(
        &self,
        from: &str,
        filter: &str,
        limit: Option<usize>,
        with_writer: bool,
    ) -> String {
        let limit = limit.map(|n| format!(" LIMIT {n}")).unwrap_or_default();
        let writer = if with_writer { "writer, " } else { "" };
        format!(
            "SELECT key, {writer}argMax(value, ver), max(ver) AS v, argMax(deleted, ver) \
             FROM {from} WHERE {filter} GROUP BY key, writer ORDER BY key, v{limit} FORMAT RowBinary"
        )
    }

    /// The rest of a version [`select_sql`](Self::select_sql) answered,
    /// after its key (and writer).
    fn version_rest(&self, key: Vec<u8>, r: &mut Reader) -> Result<Version> {
        let value = r.string()?;
        let ver = r.u64()?;
        let deleted = r.u8()? != 0;
        self.saw_ver(ver);
        Ok(Version {
            key,
            value,
            ver,
            deleted,
        })
    }

    /// Decodes what [`select_sql`](Self::select_sql) answered without
    /// writers.
    fn versions_of(&self, body: &[u8]) -> Result<Vec<Version>> {
        let mut r = Reader::new(body);
        let mut out = Vec::new();
        while !r.done() {
            let key = r.string()?;
            out.push(self.version_rest(key, &mut r)?);
        }
        Ok(out)
    }

    /// The input of the sharding expression (the `series` column) for
    /// `key` of `table`.
    fn series_of(&self, table: Table, key: &[u8]) -> Vec<u8> {
        match table {
            Table::Data => self.rows.place(key).0,
            _ => key.to_vec(),
        }
    }

    /// [`select`](Self::select) of `keys` (at most [`KEYS_PER_READ`]),
    /// asking each shard that holds some of them its local table directly
    /// (shards.rs says why and which replica), the shards at once; keys of
    /// a shard that cannot be read so go through the `Distributed` table.
    /// Versions come grouped by key, each key's in version order.
    fn select_keys(&self, table: Table, keys: &[&[u8]]) -> Result<Vec<Version>> {
        let Some(shards) = &self.shards else {
            return self.select(table, &Self::key_list(keys), None);
        };
        let mut by_shard: std::collections::BTreeMap<usize, Vec<&[u8]>> = Default::default();
        for key in keys {
            by_shard
                .entry(shards.shard_of(&self.series_of(table, key)))
                .or_default()
                .push(key);
        }
        let preferred = self.http.preferred();
        let local = format!("{}.{}_local", self.config.database, table_name(table));
        let read_shard = |shard: usize, keys: &[&[u8]]| -> Result<Vec<Version>> {
            let filter = Self::key_list(keys);
            let Some(order) = shards.read_order(shard, preferred) else {
                return self.select(table, &filter, None);
            };
            let sql = self.select_sql(&local, &filter, None, false);
            match self.http.post_first(&order, "", &COMMON, sql.as_bytes()) {
                Ok((_, body)) => self.versions_of(&body),
                // No replica of the shard answers: the `Distributed`
                // table says so (or finds a way this TSD does not know).
                Err(http::Failure::Unreachable(_)) => self.select(table, &filter, None),
                Err(e) => Err(e.into()),
            }
        };
        let read_shard = &read_shard;
        let mut answers: Vec<Result<Vec<Version>>> =
            crate::parallel::run_all(by_shard.iter().map(|(s, k)| move || read_shard(*s, k)));
        let mut out = Vec::new();
        for answer in answers.drain(..) {
            out.extend(answer?);
        }
        // Each shard's answer is in key order; callers group by key.
        out.sort_by(|a, b| a.key.cmp(&b.key).then(a.ver.cmp(&b.ver)));
        Ok(out)
    }

    /// Folds the versions of one key (in version order) into its value.
    fn resolve(&self, table: Table, key: &[u8], versions: &[Version]) -> Option<Vec<u8>> {
        let live = &versions[Self::live_from(versions)..];
        match live {
            [] => None,
            [one] => Some(one.value.clone()),
            many if table == Table::Data => {
                let values: Vec<&[u8]> = many.iter().map(|v| v.value.as_slice()).collect();
                Some(self.rows.merge(key, &values).unwrap_or_else(|| {
                    // A version that does not decode is left for fsck to
                    // see: the newest one is returned as stored.
                    tracing::warn!(key = ?key, "a version of a data row does not decode; reading the newest as it is");
                    many.last().map(|v| v.value.clone()).unwrap_or_default()
                }))
            }
            many => many.last().map(|v| v.value.clone()),
        }
    }

    /// Where the live versions of one key (in version order) start: past
    /// the newest tombstone, which hides every older version.
    fn live_from(versions: &[Version]) -> usize {
        versions
            .iter()
            .rposition(|v| v.deleted)
            .map_or(0, |i| i + 1)
    }

    /// Groups `versions` (key order) per key and resolves each.
    fn resolve_all(&self, table: Table, versions: &[Version]) -> Vec<KeyValue> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < versions.len() {
            let key = &versions[i].key;
            let j = i + versions[i..].iter().take_while(|v| &v.key == key).count();
            if let Some(value) = self.resolve(table, key, &versions[i..j]) {
                out.push((key.clone(), value));
            }
            i = j;
        }
        out
    }

    fn key_list(keys: &[&[u8]]) -> String {
        let mut s = String::from("key IN (");
        for (i, k) in keys.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            s.push_str("unhex('");
            s.push_str(&hex(k));
            s.push_str("')");
        }
        s.push(')');
        s
    }

    /// Values of `keys` (any order, duplicates allowed), in one statement
    /// per [`KEYS_PER_READ`] keys.
    fn get_many_map(
        &self,
        table: Table,
        keys: &[&[u8]],
    ) -> Result<std::collections::HashMap<Vec<u8>, Vec<u8>>> {
        if table == Table::Data && self.cache.enabled() {
            return self.get_data_rows(keys);
        }
        let mut found = std::collections::HashMap::new();
        for chunk in keys.chunks(KEYS_PER_READ) {
            let versions = self.select_keys(table, chunk)?;
            found.extend(self.resolve_all(table, &versions));
        }
        Ok(found)
    }

    /// [`get_many_map`](Self::get_many_map) of data rows through the read
    /// cache: rows of hours safely past cached under their bucket's
    /// current stamp are answered from memory, once the coordinator's
    /// counters are fenced; the others are read, and those of hours past
    /// kept under the stamp taken before the read (read_cache.rs says why
    /// that order).
    fn get_data_rows(&self, keys: &[&[u8]]) -> Result<std::collections::HashMap<Vec<u8>, Vec<u8>>> {
        let started = std::time::Instant::now();
        let now = crate::model::time::now_s();
        let buckets: Vec<Option<usize>> = keys
            .iter()
            .map(|key| {
                let (at, base) = self.rows.hour(key)?;
                read_cache::cacheable(base, now).then(|| read_cache::bucket_of(&key[..at], base))
            })
            .collect();
        // Only a query that would use cached rows pays for the fence.
        let fenced = buckets.iter().any(Option::is_some) && self.coordinator.fence();
        let mut stamps: std::collections::HashMap<usize, Option<read_cache::Stamp>> =
            Default::default();
        let mut found = std::collections::HashMap::new();
        let mut missed: Vec<(&[u8], Option<read_cache::Stamp>)> = Vec::new();
        for (key, bucket) in keys.iter().zip(&buckets) {
            let stamp = match bucket {
                Some(b) if fenced => *stamps
                    .entry(*b)
                    .or_insert_with(|| self.cache.stamp(&*self.coordinator, *b)),
                _ => None,
            };
            match stamp.and_then(|s| self.cache.get(key, s)) {
                Some(Some(value)) => {
                    found.insert(key.to_vec(), value);
                }
                Some(None) => {}
                None => missed.push((key, stamp)),
            }
        }
        let hits = keys.len() - missed.len();
        for chunk in missed.chunks(KEYS_PER_READ) {
            let wanted: Vec<&[u8]> = chunk.iter().map(|(k, _)| *k).collect();
            let versions = self.select_keys(Table::Data, &wanted)?;
            let read: std::collections::HashMap<Vec<u8>, Vec<u8>> = self
                .resolve_all(Table::Data, &versions)
                .into_iter()
                .collect();
            for (key, stamp) in chunk {
                let value = read.get(*key).cloned();
                if let Some(stamp) = stamp {
                    self.cache.put(key, value.clone(), *stamp);
                }
                if let Some(value) = value {
                    found.insert(key.to_vec(), value);
                }
            }
        }
        tracing::debug!(
            keys = keys.len(),
            hits,
            fenced,
            micros = started.elapsed().as_micros() as u64,
            "data rows read through the read cache"
        );
        Ok(found)
    }

    /// The newest live version of one key and its `ver` (0 if none).
    fn get_with_ver(&self, table: Table, key: &[u8]) -> Result<(Option<Vec<u8>>, u64)> {
        let versions = self.select_keys(table, &[key])?;
        let top = versions.iter().map(|v| v.ver).max().unwrap_or(0);
        Ok((self.resolve(table, key, &versions), top))
    }

    /// The writers with a version (live or not) of each of `keys` in the
    /// data table, one statement per [`KEYS_PER_READ`] keys.
    fn writers_of(
        &self,
        keys: &[&[u8]],
    ) -> Result<std::collections::HashMap<Vec<u8>, Vec<Vec<u8>>>> {
        let db = &self.config.database;
        let mut out: std::collections::HashMap<Vec<u8>, Vec<Vec<u8>>> = Default::default();
        for chunk in keys.chunks(KEYS_PER_READ) {
            let body = self.exec(&format!(
                "SELECT DISTINCT key, writer FROM {db}.data WHERE {} FORMAT RowBinary",
                Self::key_list(chunk)
            ))?;
            let mut r = Reader::new(&body);
            while !r.done() {
                let key = r.string()?;
                out.entry(key).or_default().push(r.string()?);
            }
        }
        Ok(out)
    }

    /// Inserts rows into one table's `Distributed` table and returns once
    /// every shard's replica has them (`insert_distributed_sync`).
    fn insert(&self, table: Table, rows: &[NewVersion<'_>]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let own: &[u8] = if table == Table::Data {
            self.writer.as_bytes()
        } else {
            b""
        };
        let mut body = Vec::with_capacity(rows.len() * 64);
        for NewVersion {
            key,
            value,
            ver,
            writer,
        } in rows
        {
            let writer = writer.unwrap_or(own);
            put_string(&mut body, key);
            match table {
                Table::Data => {
                    let (series, base) = self.rows.place(key);
                    put_string(&mut body, &series);
                    body.extend_from_slice(&base.to_le_bytes());
                }
                // Rollup rows stay sharded by their whole key.
                Table::Rollup if self.rollups_by_time => {
                    put_string(&mut body, key);
                    body.extend_from_slice(&self.rows.rollup_base(key).to_le_bytes());
                }
                _ => put_string(&mut body, key),
            }
            put_string(&mut body, writer);
            body.extend_from_slice(&ver.to_le_bytes());
            body.push(u8::from(value.is_none()));
            put_string(&mut body, value.unwrap_or(b""));
        }
        let db = &self.config.database;
        let name = table_name(table);
        let columns = if self.by_time(table) {
            "key, series, base, writer, ver, deleted, value"
        } else {
            "key, series, writer, ver, deleted, value"
        };
        let query = format!("INSERT INTO {db}.{name} ({columns}) FORMAT RowBinary");
        let mut params = COMMON.to_vec();
        params.push(("insert_distributed_sync", "1"));
        let inserted = self.http.post(&query, &params, &body);
        if table == Table::Data {
            // Read once the insert returned: a later clock announces more.
            let now = crate::model::time::now_s();
            let mut buckets: Vec<usize> = rows
                .iter()
                .filter_map(|r| {
                    let (at, base) = self.rows.hour(r.key)?;
                    read_cache::late(base, now).then(|| read_cache::bucket_of(&r.key[..at], base))
                })
                .collect();
            buckets.sort_unstable();
            buckets.dedup();
            // Told only after the insert returned, so a TSD that reads
            // again on the news reads the new versions. A failed insert may
            // have landed all the same: told as well, its error returned.
            let told = if buckets.is_empty() {
                Ok(())
            } else {
                self.rows_changed(&buckets)
            };
            inserted?;
            told?;
            // Held until every TSD's next fence counts this flush's bumps
            // (these, and the series index's before the rows): a `sync`
            // put or a delete is acknowledged after this returns.
            self.coordinator.settle();
            return Ok(());
        }
        inserted?;
        Ok(())
    }

    /// Data rows of `buckets` changed: this process's cached rows of them
    /// go stale at once, every other TSD's once the coordinator's
    /// counters moved (read_cache.rs). An error means other TSDs may keep
    /// serving what they cached: the caller's write is reported failed
    /// (a flush keeps its points in the WAL and tries again).
    fn rows_changed(&self, buckets: &[usize]) -> Result<()> {
        self.cache.wrote(buckets);
        let names: Vec<String> = buckets
            .iter()
            .map(|b| read_cache::counter_name(*b))
            .collect();
        let started = std::time::Instant::now();
        self.coordinator.bump_all(&names)?;
        tracing::debug!(
            buckets = buckets.len(),
            micros = started.elapsed().as_micros() as u64,
            "told other TSDs of changed data rows"
        );
        Ok(())
    }
}

impl Inner {
    /// Forgets `keys` among this process's own rows and moves the
    /// cluster's delete generation, before a delete or a replace of data
    /// rows; the guard holds off this process's appends until the caller
    /// has written its tombstones.
    fn forget_own_rows(
        &self,
        keys: &[&[u8]],
    ) -> Result<parking_lot::MutexGuard<'_, own_rows::OwnRows>> {
        let mut own = self.own_rows.lock();
        for k in keys {
            own.forget(k);
        }
        self.coordinator.bump(DELETES_GENERATION)?;
        Ok(own)
    }
}

impl KvStore for ClickHouseStore {
    /// Every scan is a statement: one long scan beats many short ones.
    fn seeks_are_cheap(&self) -> bool {
        false
    }

    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.get_with_ver(table, key)?.0)
    }

    fn get_many(&self, table: Table, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let found = self.get_many_map(table, keys)?;
        Ok(keys.iter().map(|k| found.get(*k).cloned()).collect())
    }

    fn write(&self, batch: WriteBatch) -> Result<()> {
        // A data row deleted gets a tombstone under the name of each
        // writer that has a version of it, not only this store's: a merge
        // keeps each writer's newest version, so this store's tombstone
        // alone would be replaced by its next write of the row, and the
        // others' older versions would show again.
        let deleted: Vec<&[u8]> = batch
            .mutations
            .iter()
            .filter_map(|m| match m {
                Mutation::Delete {
                    table: Table::Data,
                    key,
                } => Some(key.as_slice()),
                _ => None,
            })
            .collect();
        // Rows this process holds may be among the deleted: it forgets
        // them, and the generation tells every other TSD to forget what
        // it holds (`append_rows`). Bumped before the tombstones go in,
        // so a TSD that writes after them has forgotten.
        let _own = if deleted.is_empty() {
            None
        } else {
            Some(self.forget_own_rows(&deleted)?)
        };
        let writers = self.writers_of(&deleted)?;
        let own = self.writer.as_bytes();
        // One insert per table; a key written twice in one batch keeps
        // its last mutation (a later version).
        for table in Table::ALL {
            let mut rows: Vec<NewVersion<'_>> = Vec::new();
            for m in &batch.mutations {
                match m {
                    Mutation::Put {
                        table: t,
                        key,
                        value,
                    } if *t == table => rows.push(NewVersion {
                        key,
                        value: Some(value),
                        ver: self.next_ver(),
                        writer: None,
                    }),
                    Mutation::Delete { table: t, key } if *t == table => {
                        rows.push(NewVersion {
                            key,
                            value: None,
                            ver: self.next_ver(),
                            writer: None,
                        });
                        let others = writers.get(key.as_slice()).into_iter().flatten();
                        for w in others.filter(|w| w.as_slice() != own) {
                            rows.push(NewVersion {
                                key,
                                value: None,
                                ver: self.next_ver(),
                                writer: Some(w.as_slice()),
                            });
                        }
                    }
                    _ => {}
                }
            }
            self.insert(table, &rows)?;
        }
        Ok(())
    }

    fn scan<'a>(&'a self, table: Table, range: &ScanRange) -> ScanIter<'a> {
        if table == Table::Data
            && range.limit.is_none()
            && let Some(hours) = self.scan_hours(range)
        {
            return Box::new(hour_scan::HourScan::new(self, hours, range));
        }
        Box::new(Scan::new(self, table, range.start.clone(), range.stop.clone()).limit(range.limit))
    }

    fn increment(&self, table: Table, key: &[u8], delta: i64, _: Durability) -> Result<i64> {
        let _local = self.rmw.lock(table as u64, key);
        let _cluster = self
            .coordinator
            .lock(&lock_name(&self.config.database, table, key))?;
        let (current, ver) = self.get_with_ver(table, key)?;
        let v = counter_value(table, key, current.as_deref())?.wrapping_add(delta);
        self.saw_ver(ver);
        let value = v.to_be_bytes();
        self.insert(
            table,
            &[NewVersion {
                key,
                value: Some(&value),
                ver: self.next_ver(),
                writer: None,
            }],
        )?;
        Ok(v)
    }

    fn compare_and_set(
        &self,
        table: Table,
        key: &[u8],
        expected: Option<&[u8]>,
        new: &[u8],
        _: Durability,
    ) -> Result<bool> {
        let _local = self.rmw.lock(table as u64, key);
        let _cluster = self
            .coordinator
            .lock(&lock_name(&self.config.database, table, key))?;
        let (current, ver) = self.get_with_ver(table, key)?;
        if current.as_deref() != expected {
            return Ok(false);
        }
        self.saw_ver(ver);
        self.insert(
            table,
            &[NewVersion {
                key,
                value: Some(new),
                ver: self.next_ver(),
                writer: None,
            }],
        )?;
        Ok(true)
    }

    /// Every write returned after its insert was acknowledged by a replica
    /// of each shard it touched: nothing is left to flush.
    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn snapshot(&self) -> Result<Box<dyn KvSnapshot>> {
        // ClickHouse has no snapshots: a view of the versions up to now.
        // Merges may replace a version the view needs by a newer one, so
        // it is consistent only while no merge runs over changed keys
        // (docs/scale-out.md, "Backups").
        Ok(Box::new(Snapshot {
            store: self.clone(),
            upto: self.next_ver(),
        }))
    }

    /// A read may come from a replica that lags (own_rows.rs): rows are
    /// written from what this process knows it wrote, never from a read.
    fn row_appends(&self) -> Option<&dyn RowAppends> {
        Some(self)
    }

    fn compaction(&self) -> Option<&dyn Compaction> {
        Some(self)
    }

    fn partitions(&self) -> Option<&dyn Partitions> {
        Some(self)
    }

    fn versions(&self) -> Option<&dyn Versions> {
        Some(self)
    }
}

impl RowAppends for ClickHouseStore {
    /// Each row goes in as a new version of the slot this process holds
    /// for it, merged with what it wrote there before, or as the first
    /// version of a new slot (one per call) when it holds none.
    fn append_rows(&self, rows: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
        let mut own = self.own_rows.lock();
        own.check_deletes(self.coordinator.generation(DELETES_GENERATION)?);
        let mut new_slot: Option<std::sync::Arc<str>> = None;
        let mut versions = Vec::with_capacity(rows.len());
        for (key, cells) in rows {
            let merged = own.get(key).and_then(|row| {
                let value = self.rows.merge(key, &[&row.value, cells])?;
                Some((row.slot.clone(), value))
            });
            let (slot, value) = merged.unwrap_or_else(|| {
                // Not held (or what is held does not merge, which only a
                // bug could cause): the cells start a slot of their own.
                let slot = new_slot.get_or_insert_with(|| {
                    std::sync::Arc::from(format!("{}@{:x}", self.writer, self.next_ver()))
                });
                (slot.clone(), cells.clone())
            });
            versions.push((key, slot, value));
        }
        let inserted: Vec<NewVersion<'_>> = versions
            .iter()
            .map(|(key, slot, value)| NewVersion {
                key,
                value: Some(value),
                ver: self.next_ver(),
                writer: Some(slot.as_bytes()),
            })
            .collect();
        // On failure nothing is kept: the caller writes the same cells
        // again, merged with what the slot held before.
        self.insert(Table::Data, &inserted)?;
        for (key, slot, value) in versions {
            own.keep(key.clone(), slot, value);
        }
        Ok(())
    }
}

impl Compaction for ClickHouseStore {
    fn compact(&self) -> Result<()> {
        // OPTIMIZE ... ON CLUSTER fails on 18.16; on a replicated table
        // one replica's OPTIMIZE merges for all replicas of its shard, so
        // each endpoint is asked (a replica that is down is skipped).
        let db = &self.config.database;
        let mut last_err = None;
        let mut done = 0;
        for ep in self.http.endpoints() {
            for t in Table::ALL {
                match self.http.post_to(
                    ep,
                    &format!("OPTIMIZE TABLE {db}.{}_local FINAL", table_name(t)),
                ) {
                    Ok(_) => done += 1,
                    Err(e) => last_err = Some(e),
                }
            }
        }
        match last_err {
            Some(e) if done == 0 => Err(e),
            _ => Ok(()),
        }
    }
}

impl Partitions for ClickHouseStore {
    /// Each server is asked for its partitions of the table's local table
    /// and drops those wholly below `floor` (nothing for a table without
    /// partitions by time: a rollup table an older rtsdb created). `ALTER ... ON CLUSTER` would wait for
    /// every server, failing while one is down; asking each replica instead
    /// drops on those up (a replicated drop also reaches the replica's
    /// peers through the replication log), and a shard whose replicas were
    /// all down keeps its partitions until the next run.
    fn drop_before(&self, table: Table, floor: u32) -> Result<u64> {
        if !self.by_time(table) {
            return Ok(0);
        }
        let db = &self.config.database;
        let local = format!("{}_local", table_name(table));
        let mut dropped = std::collections::BTreeSet::new();
        let mut errors = Vec::new();
        let mut answered = 0;
        for ep in self.http.endpoints() {
            let partitions = match self.http.post_to(
                ep,
                &format!(
                    "SELECT DISTINCT partition FROM system.parts \
                     WHERE active AND database = '{db}' AND table = '{local}'"
                ),
            ) {
                Ok(p) => p,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            answered += 1;
            for line in String::from_utf8_lossy(&partitions).lines() {
                let Ok(week) = line.trim().trim_matches('\'').parse::<u64>() else {
                    continue;
                };
                // Every row of partition `week` has a base hour below the
                // next week's first second.
                if (week + 1) * u64::from(PARTITION_SECONDS) > u64::from(floor) {
                    continue;
                }
                match self.http.post_to(
                    ep,
                    &format!("ALTER TABLE {db}.{local} DROP PARTITION {week}"),
                ) {
                    Ok(_) => {
                        tracing::info!(endpoint = %ep.url, table = %local, week, "dropped an expired partition");
                        dropped.insert(week);
                    }
                    Err(e) => errors.push(e),
                }
            }
        }
        if !dropped.is_empty() && table == Table::Data {
            // Rows went without a version saying so: every bucket.
            let all: Vec<usize> = (0..read_cache::BUCKETS).collect();
            match self.rows_changed(&all) {
                Ok(()) => self.coordinator.settle(),
                Err(e) => errors.push(e),
            }
        }
        if answered == 0
            && let Some(e) = errors.pop()
        {
            return Err(e);
        }
        for e in errors {
            tracing::warn!(error = %e, "dropping expired partitions failed on a server; the next run tries again");
        }
        Ok(dropped.len() as u64)
    }
}

impl Versions for ClickHouseStore {
    /// One statement per [`KEYS_PER_READ`] keys: each (key, writer)'s
    /// newest version, folded per key as [`Inner::resolve`] folds them.
    fn read_versions(&self, table: Table, keys: &[&[u8]]) -> Result<Vec<KeyRead>> {
        let from = format!("{}.{}", self.config.database, table_name(table));
        let mut found: std::collections::HashMap<Vec<u8>, Vec<(String, Version)>> =
            Default::default();
        for chunk in keys.chunks(KEYS_PER_READ) {
            let sql = self.select_sql(&from, &Inner::key_list(chunk), None, true);
            let body = self.exec(&sql)?;
            let mut r = Reader::new(&body);
            while !r.done() {
                let key = r.string()?;
                let writer = String::from_utf8_lossy(&r.string()?).into_owned();
                let version = self.version_rest(key.clone(), &mut r)?;
                found.entry(key).or_default().push((writer, version));
            }
        }
        Ok(keys
            .iter()
            .map(|key| {
                let versions = found.get(*key).map(Vec::as_slice).unwrap_or_default();
                let plain: Vec<Version> = versions.iter().map(|(_, v)| v.clone()).collect();
                KeyRead {
                    value: self.resolve(table, key, &plain),
                    // A tombstone hides every older version, of every writer.
                    versions: versions[Inner::live_from(&plain)..]
                        .iter()
                        .map(|(writer, v)| KeyVersion {
                            writer: writer.clone(),
                            value: v.value.clone(),
                        })
                        .collect(),
                }
            })
            .collect())
    }

    /// Tombstones over every other writer's version (theirs, under their
    /// names, so a merge that keeps each writer's newest keeps them), then
    /// the value as this store's newest. A tombstone of this store's own
    /// would be replaced by its next write to the key at the next merge,
    /// and the other writers' versions would show again.
    fn replace(&self, table: Table, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        if table != Table::Data {
            let mut b = WriteBatch::new();
            match value {
                Some(v) => b.put(table, key.to_vec(), v.to_vec()),
                None => b.delete(table, key.to_vec()),
            }
            return self.write(b);
        }
        let _own = self.forget_own_rows(&[key]);
        let by_key = self.writers_of(&[key])?;
        let writers = by_key.get(key).map(Vec::as_slice).unwrap_or_default();
        let own = self.writer.as_bytes();
        let mut rows: Vec<NewVersion<'_>> = writers
            .iter()
            .filter(|w| value.is_none() || w.as_slice() != own)
            .map(|w| NewVersion {
                key,
                value: None,
                ver: self.next_ver(),
                writer: Some(w.as_slice()),
            })
            .collect();
        if let Some(v) = value {
            rows.push(NewVersion {
                key,
                value: Some(v),
                ver: self.next_ver(),
                writer: None,
            });
        } else if rows.is_empty() {
            return Ok(());
        }
        self.insert(table, &rows)
    }
}

fn lock_name(db: &str, table: Table, key: &[u8]) -> String {
    format!("{db}.{}.{}", table_name(table), hex(key))
}

/// A scan: pages of versions, each page ending on a whole key.
struct Scan<'a> {
    store: &'a Inner,
    table: Table,
    /// Where the next page starts (inclusive); `None` once done.
    next_start: Option<Vec<u8>>,
    stop: Vec<u8>,
    left: usize,
    buffered: std::vec::IntoIter<KeyValue>,
}

impl<'a> Scan<'a> {
    /// The rows of `table` from `start` (inclusive) to `stop` (exclusive;
    /// empty: the end of the table).
    fn new(store: &'a Inner, table: Table, start: Vec<u8>, stop: Vec<u8>) -> Scan<'a> {
        Scan {
            store,
            table,
            next_start: Some(start),
            stop,
            left: usize::MAX,
            buffered: Vec::new().into_iter(),
        }
    }

    /// At most `limit` rows.
    fn limit(mut self, limit: Option<usize>) -> Scan<'a> {
        self.left = limit.unwrap_or(usize::MAX);
        self
    }

    fn fill(&mut self) -> Result<()> {
        let Some(start) = self.next_start.take() else {
            return Ok(());
        };
        let mut filter = format!("key >= unhex('{}')", hex(&start));
        if !self.stop.is_empty() {
            filter.push_str(&format!(" AND key < unhex('{}')", hex(&self.stop)));
        }
        let mut versions = self.store.select(self.table, &filter, Some(SCAN_PAGE))?;
        if versions.len() == SCAN_PAGE {
            // The page may end inside a key's versions: keep that key for
            // the next page, unless the page holds nothing else.
            let last = versions.last().map(|v| v.key.clone()).unwrap_or_default();
            let whole = versions.iter().take_while(|v| v.key != last).count();
            if whole > 0 {
                versions.truncate(whole);
                self.next_start = Some(last);
            } else {
                let mut after = last;
                after.push(0);
                self.next_start = Some(after);
            }
        }
        self.buffered = self.store.resolve_all(self.table, &versions).into_iter();
        Ok(())
    }
}

impl Iterator for Scan<'_> {
    type Item = Result<KeyValue>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.left == 0 {
                return None;
            }
            if let Some(kv) = self.buffered.next() {
                self.left -= 1;
                return Some(Ok(kv));
            }
            self.next_start.as_ref()?;
            if let Err(e) = self.fill() {
                self.next_start = None;
                return Some(Err(e));
            }
        }
    }
}

/// [`KvStore::snapshot`]: versions up to `upto`.
struct Snapshot {
    store: ClickHouseStore,
    upto: u64,
}

impl KvSnapshot for Snapshot {
    fn scan_all(&self, table: Table) -> ScanIter<'_> {
        // Small helper scan: versions at or before `upto`, all at once per
        // page as for a scan.
        let filter = format!("ver <= {}", self.upto);
        let result = self
            .store
            .select(table, &filter, None)
            .map(|versions| self.store.resolve_all(table, &versions));
        match result {
            Ok(kvs) => Box::new(kvs.into_iter().map(Ok)),
            Err(e) => Box::new(std::iter::once(Err(e))),
        }
    }
}

/// The test cluster named by `RTSDB_TEST_CLUSTER` (the conf file
/// `scripts/cluster up` prints), with a fresh database of its own.
#[cfg(test)]
pub(crate) mod test_cluster {
    use super::*;

    /// A config for a new database named after `test` and the process, or
    /// `None` (after saying so) when no cluster is set.
    pub(crate) fn config(test: &str) -> Option<ClickHouseConfig> {
        let Ok(path) = std::env::var("RTSDB_TEST_CLUSTER") else {
            println!("skipped: RTSDB_TEST_CLUSTER not set (run scripts/with-cluster cargo test)");
            return None;
        };
        let conf = crate::config::Config::load(Some(std::path::Path::new(&path)))
            .expect("the RTSDB_TEST_CLUSTER conf file loads");
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        Some(ClickHouseConfig {
            endpoints: conf
                .get_string("tsd.storage.clickhouse.endpoints")
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            cluster: conf
                .get_string("tsd.storage.clickhouse.cluster")
                .to_string(),
            database: format!("t_{test}_{}_{nanos}", std::process::id()),
            read_cache_bytes: 16 << 20,
        })
    }

    /// Drops the test's database everywhere.
    pub(crate) fn drop_database(store: &ClickHouseStore) {
        let c = store.config();
        store
            .exec(&format!(
                "DROP DATABASE IF EXISTS {} ON CLUSTER {}",
                c.database, c.cluster
            ))
            .unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::coordinator::LocalCoordinator;

    fn open(test: &str, writer: &str, coord: Arc<dyn Coordinator>) -> Option<ClickHouseStore> {
        let cfg = test_cluster::config(test)?;
        Some(ClickHouseStore::open(cfg, coord, Arc::new(OpaqueRows), writer.into()).unwrap())
    }

    /// A key is read from the local table of the shard [`Shards`] names
    /// (ClickHouse's `sipHash64` over the weights): it must be the shard
    /// the `Distributed` table put it in, or the read finds nothing.
    #[test]
    fn keys_are_read_from_the_shard_the_distributed_table_put_them_in() {
        let Some(store) = open("direct_shard", "a", Arc::new(LocalCoordinator::new())) else {
            return;
        };
        let shards = store
            .shards
            .as_ref()
            .expect("the test cluster's shards match its endpoints");
        let keys: Vec<Vec<u8>> = (0..40).map(|i| format!("key-{i}").into_bytes()).collect();
        let mut w = WriteBatch::new();
        for k in &keys {
            w.put(Table::Meta, k.clone(), k.clone());
        }
        store.write(w).unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for (i, ep) in store.http.endpoints().iter().enumerate() {
            let sql = format!(
                "SELECT key FROM {}.meta_local FORMAT TabSeparated",
                store.config.database
            );
            let body = store.http.post_to(ep, &sql).unwrap();
            for key in String::from_utf8(body).unwrap().lines() {
                assert_eq!(
                    shards.shard_of_endpoint(i),
                    Some(shards.shard_of(key.as_bytes())),
                    "{key} on {}",
                    ep.url
                );
                seen.insert(key.as_bytes().to_vec());
            }
        }
        // Inserts return once a replica of each shard has the rows.
        assert_eq!(seen, keys.iter().cloned().collect());
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let read = store.get_many(Table::Meta, &refs).unwrap();
        assert_eq!(
            read,
            keys.iter().map(|k| Some(k.clone())).collect::<Vec<_>>()
        );
        test_cluster::drop_database(&store);
    }

    #[test]
    fn conformance() {
        let Some(store) = open("conformance", "w1", Arc::new(LocalCoordinator::new())) else {
            return;
        };
        let store = Arc::new(store);
        crate::storage::conformance::run(store.clone());
        test_cluster::drop_database(&store);
    }

    /// Data rows whose versions merge by concatenation, oldest first: what
    /// a read merged is plain to see.
    struct Concat;
    impl DataRows for Concat {
        fn place(&self, key: &[u8]) -> (Vec<u8>, u32) {
            (key.to_vec(), 0)
        }
        fn hour(&self, _: &[u8]) -> Option<(usize, u32)> {
            Some((0, 0))
        }
        fn rollup_base(&self, _: &[u8]) -> u32 {
            0
        }
        fn merge(&self, _: &[u8], versions: &[&[u8]]) -> Option<Vec<u8>> {
            Some(versions.concat())
        }
    }

    /// Versions of one data row by two writers are merged; a tombstone
    /// hides every older version; scans page over many keys.
    #[test]
    fn versions_merge_and_tombstones_hide() {
        let Some(cfg) = test_cluster::config("versions") else {
            return;
        };
        let coord: Arc<dyn Coordinator> = Arc::new(LocalCoordinator::new());
        let a = ClickHouseStore::open(cfg.clone(), coord.clone(), Arc::new(Concat), "a".into())
            .unwrap();
        let b = ClickHouseStore::open(cfg, coord, Arc::new(Concat), "b".into()).unwrap();
        let put = |s: &ClickHouseStore, v: &[u8]| {
            let mut w = WriteBatch::new();
            w.put(Table::Data, b"row".to_vec(), v.to_vec());
            s.write(w).unwrap();
        };
        put(&a, b"1");
        put(&b, b"2");
        put(&a, b"3");
        assert_eq!(a.get(Table::Data, b"row").unwrap(), Some(b"23".to_vec()));
        let mut d = WriteBatch::new();
        d.delete(Table::Data, b"row".to_vec());
        b.write(d).unwrap();
        assert_eq!(a.get(Table::Data, b"row").unwrap(), None);
        put(&a, b"4");
        assert_eq!(b.get(Table::Data, b"row").unwrap(), Some(b"4".to_vec()));

        // Many rows' versions in one read (fsck): the tombstone hid b's
        // and a's older versions; a row by both writers has both, oldest
        // first, beside their merge; an absent row has none.
        let mut w = WriteBatch::new();
        w.put(Table::Data, b"two".to_vec(), b"x".to_vec());
        a.write(w).unwrap();
        let mut w = WriteBatch::new();
        w.put(Table::Data, b"two".to_vec(), b"y".to_vec());
        b.write(w).unwrap();
        let reads = b
            .read_versions(Table::Data, &[b"row", b"absent", b"two"])
            .unwrap();
        let version = |writer: &str, value: &[u8]| KeyVersion {
            writer: writer.into(),
            value: value.to_vec(),
        };
        assert_eq!(
            reads,
            vec![
                KeyRead {
                    versions: vec![version("a", b"4")],
                    value: Some(b"4".to_vec()),
                },
                KeyRead {
                    versions: vec![],
                    value: None,
                },
                KeyRead {
                    versions: vec![version("a", b"x"), version("b", b"y")],
                    value: Some(b"xy".to_vec()),
                },
            ]
        );

        let mut many = WriteBatch::new();
        for i in 0..(SCAN_PAGE as u32 + 10) {
            many.put(Table::Meta, i.to_be_bytes().to_vec(), b"v".to_vec());
        }
        a.write(many).unwrap();
        assert_eq!(
            b.scan(Table::Meta, &ScanRange::default())
                .filter(|r| r.is_ok())
                .count(),
            SCAN_PAGE + 10
        );
        let keys: Vec<Vec<u8>> = (0u32..3).map(|i| i.to_be_bytes().to_vec()).collect();
        let refs: Vec<&[u8]> = keys
            .iter()
            .map(|k| k.as_slice())
            .chain([&b"no"[..]])
            .collect();
        let got = b.get_many(Table::Meta, &refs).unwrap();
        assert_eq!(got.iter().filter(|v| v.is_some()).count(), 3);
        assert!(got[3].is_none());
        a.compact().unwrap();
        test_cluster::drop_database(&a);
    }

    /// Appended cells go into a slot of the process's own, written again
    /// from what it holds, never from a read: a restarted process starts
    /// another slot beside the old one, and a delete by another store is
    /// not undone by the next append.
    #[test]
    fn appends_fill_own_slots_and_respect_deletes_elsewhere() {
        let Some(cfg) = test_cluster::config("appends") else {
            return;
        };
        let coord: Arc<dyn Coordinator> = Arc::new(LocalCoordinator::new());
        let open = |writer: &str| {
            ClickHouseStore::open(cfg.clone(), coord.clone(), Arc::new(Concat), writer.into())
                .unwrap()
        };
        let append = |s: &ClickHouseStore, v: &[u8]| {
            s.append_rows(&[(b"row".to_vec(), v.to_vec())]).unwrap();
        };
        let a = open("a");
        assert!(a.row_appends().is_some());
        append(&a, b"1");
        append(&a, b"2");
        assert_eq!(a.get(Table::Data, b"row").unwrap(), Some(b"12".to_vec()));
        let versions = a
            .read_versions(Table::Data, &[b"row"])
            .unwrap()
            .remove(0)
            .versions;
        assert_eq!(versions.len(), 1, "one slot rewritten");
        assert!(
            versions[0].writer.starts_with("a@"),
            "{}",
            versions[0].writer
        );

        // The same TSD restarted: it holds nothing, so a slot of its own.
        let restarted = open("a");
        append(&restarted, b"3");
        assert_eq!(a.get(Table::Data, b"row").unwrap(), Some(b"123".to_vec()));
        let read = a.read_versions(Table::Data, &[b"row"]).unwrap();
        assert_eq!(read[0].versions.len(), 2);

        let b = open("b");
        let mut d = WriteBatch::new();
        d.delete(Table::Data, b"row".to_vec());
        b.write(d).unwrap();
        assert_eq!(a.get(Table::Data, b"row").unwrap(), None);
        // `a` still held "12": written again it would bring them back.
        append(&a, b"4");
        assert_eq!(b.get(Table::Data, b"row").unwrap(), Some(b"4".to_vec()));
        test_cluster::drop_database(&a);
    }
}
