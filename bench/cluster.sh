#!/usr/bin/env bash
# rtsdb on a ClickHouse cluster against rtsdb embedded, on the same
# TSBS-like devops data (examples/tsbs.rs) loaded the same way (telnet
# `put`), with the whole cluster on this machine (docs/scale-out.md).
#
#   bash bench/cluster.sh CONF            # CONF: what `scripts/cluster up` printed
#   HOSTS=100 bash bench/cluster.sh CONF  # a smaller load
#   TSDB=BIN TSBS=BIN bash bench/cluster.sh CONF  # given release builds
#
# Prints, for each: ingest points/s with one TSD; for the cluster also
# with two TSDs (each loads half the hosts' points into one database);
# bytes per point at rest per replica after OPTIMIZE ... FINAL (ClickHouse's
# system.parts, every table; embedded: everything under its data dir after
# `fsck --full-scan --compact`); the median latency of the four comparison
# queries; and the INSERT statements per second the cluster received
# during the one-TSD load (system.events InsertQuery, summed over servers:
# a Distributed insert counts once where it arrives and once per shard);
# the same four queries on a TSD with the read cache off (every query reads
# its rows from ClickHouse, as a first query does: the data is of 2016,
# hours long past, which the cache answers after the warm-up runs);
# and, with two TSDs running, the time from a point's acknowledgement by
# one TSD to its first appearance in a query on the other (p50/p99/max of
# FRESH_PUTS=600 points, one every FRESH_EVERY_MS=50 ms; `tsbs freshness`).
set -euo pipefail

CONF=${1:?usage: bench/cluster.sh CLUSTER_CONF}
HOSTS=${HOSTS:-1000}
HOURS=1
CONNS=${CONNS:-4}
RUNS=${RUNS:-20}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
WORK=${WORK:-$(mktemp -d /tmp/rtsdb-cluster-bench.XXXXXX)}
START=$TSBS_START
END=$((START + 3600))
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}

cd "$ROOT"
# TSDB=<tsdb> TSBS=<tsbs>: compare given builds (alternate them: a shared
# machine's load moves) instead of building this checkout.
if [[ -z ${TSDB:-} || -z ${TSBS:-} ]]; then
  cargo build --release --quiet --bin tsdb --example tsbs
  TSDB=$TARGET/release/tsdb
  TSBS=$TARGET/release/examples/tsbs
fi

rate() { echo "$1" | awk '{printf "%.0f", $6}'; }
POINTS=$((HOSTS * 10 * HOURS * 360))
ENDPOINTS=$(sed -n 's/^tsd.storage.clickhouse.endpoints *= *//p' "$CONF" | tr ',' ' ')
CLUSTER=$(sed -n 's/^tsd.storage.clickhouse.cluster *= *//p' "$CONF")
ch() { curl -sS "$1/" --data-binary "$2"; }
ch_sum() { local s=0 v; for e in $ENDPOINTS; do v=$(ch "$e" "$1"); s=$((s + ${v:-0})); done; echo $s; }
declare -A R
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill $p 2>/dev/null || true; done' EXIT

queries() {
  local port=$1 tag=$2
  # nocache: the cluster has no result cache, so both sides are uncached.
  rq() { echo "/api/query?start=$START&end=$END&nocache=true&m=$(urlenc "$1")"; }
  R[${tag}_q1]=$(median_of "$port" "$(rq "avg:1m-avg:cpu.usage_user")")
  R[${tag}_q2]=$(median_of "$port" "$(rq "avg:1m-avg:cpu.usage_user{hostname=host_42}")")
  R[${tag}_q3]=$(median_of "$port" "$(rq "avg:1m-avg:cpu.usage_user{region=*}")")
  R[${tag}_q4]=$(median_of "$port" "$(rq "sum:rate:cpu.usage_user")")
}

start_tsd() { # conf data_dir: sets PORT, appends the PID to PIDS
  PORT=$(free_port)
  "$TSDB" --config "$1" tsd --port "$PORT" --data-dir "$2" --auto-metric > "$2.log" 2>&1 &
  PIDS+=($!)
  wait_port "$PORT"
}

# ---------------------------------------------------------------- embedded
: > "$WORK/embedded.conf"
start_tsd "$WORK/embedded.conf" "$WORK/embedded"; port=$PORT
R[emb_load]=$("$TSBS" load "127.0.0.1:$port" telnet "$HOSTS" "$HOURS" "$CONNS")
sleep "${SETTLE:-15}"
queries "$port" emb
kill -TERM "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true
"$TSDB" --config "$WORK/embedded.conf" --data-dir "$WORK/embedded" fsck --full-scan --compact > /dev/null 2>&1 || true
R[emb_bpp]=$(awk -v b="$(disk_bytes "$WORK/embedded")" -v p="$POINTS" 'BEGIN{printf "%.2f", b/p}')

# ------------------------------------------------------------ one cluster TSD
DB=bench_$$
grep -v '^tsd.storage.clickhouse.database' "$CONF" > "$WORK/cluster.conf"
echo "tsd.storage.clickhouse.database = $DB" >> "$WORK/cluster.conf"
start_tsd "$WORK/cluster.conf" "$WORK/c1"; port=$PORT
i0=$(ch_sum "SELECT value FROM system.events WHERE event = 'InsertQuery'")
t0=$(date +%s.%N)
R[ch_load]=$("$TSBS" load "127.0.0.1:$port" telnet "$HOSTS" "$HOURS" "$CONNS")
# Until every point is in ClickHouse (the TSD writes every tick).
for _ in $(seq 1 600); do
  n=$(ch "${ENDPOINTS%% *}" "SELECT count() FROM $DB.data" )
  sleep 1
  [ "$(ch "${ENDPOINTS%% *}" "SELECT count() FROM $DB.data")" = "$n" ] && break
done
t1=$(date +%s.%N)
i1=$(ch_sum "SELECT value FROM system.events WHERE event = 'InsertQuery'")
R[ch_inserts]=$(awk -v a="$i0" -v b="$i1" -v s="$t0" -v e="$t1" 'BEGIN{printf "%.1f", (b-a)/(e-s)}')
sleep "${SETTLE:-15}"
queries "$port" ch
kill -TERM "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true
# The same queries with the read cache off: the data (of 2016) lies in
# hours long past, which the cache answers after the warm-up runs; here
# every query reads its rows from ClickHouse, as a first query does.
cp "$WORK/cluster.conf" "$WORK/cluster-nocache.conf"
echo "tsd.storage.clickhouse.read_cache_mb = 0" >> "$WORK/cluster-nocache.conf"
start_tsd "$WORK/cluster-nocache.conf" "$WORK/c1"; port=$PORT
queries "$port" chnc
kill -TERM "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true
for e in $ENDPOINTS; do
  for t in data uid meta idx tree; do ch "$e" "OPTIMIZE TABLE $DB.${t}_local FINAL" >/dev/null || true; done
done
sleep 5
bytes=$(ch_sum "SELECT sum(bytes_on_disk) FROM system.parts WHERE active AND database = '$DB'")
# Every shard has two replicas: per replica is half of the total.
R[ch_bpp]=$(awk -v b="$bytes" -v p="$POINTS" 'BEGIN{printf "%.2f", b/2/p}')
ch "${ENDPOINTS%% *}" "DROP DATABASE $DB ON CLUSTER $CLUSTER" >/dev/null

# ----------------------------------------------------------- two cluster TSDs
DB2=bench2_$$
grep -v '^tsd.storage.clickhouse.database' "$CONF" > "$WORK/cluster2.conf"
echo "tsd.storage.clickhouse.database = $DB2" >> "$WORK/cluster2.conf"
start_tsd "$WORK/cluster2.conf" "$WORK/c2a"; pa=$PORT
start_tsd "$WORK/cluster2.conf" "$WORK/c2b"; pb=$PORT
"$TSBS" lines "$HOSTS" "$HOURS" | sed 's/^/put /' > "$WORK/lines.txt"
split -n l/2 "$WORK/lines.txt" "$WORK/half."
t0=$(date +%s.%N)
send() { python3 - "$1" "$2" <<'PY'
import socket, sys, threading
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
answers = []
# Drained while sending: a TSD answering errors must never block on us.
t = threading.Thread(target=lambda: answers.extend(iter(lambda: s.recv(65536), b"")))
t.start()
with open(sys.argv[2], "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        s.sendall(chunk)
s.shutdown(socket.SHUT_WR)
t.join()
if answers:
    sys.exit("the TSD answered: " + b"".join(answers)[:200].decode(errors="replace"))
PY
}
send "$pa" "$WORK/half.aa" & sa=$!
send "$pb" "$WORK/half.ab" & sb=$!
wait $sa $sb
t1=$(date +%s.%N)
R[ch2_rate]=$(awk -v p="$POINTS" -v s="$t0" -v e="$t1" 'BEGIN{printf "%.0f", p/(e-s)}')
# Freshness: points acknowledged by A (plain /api/put), polled on B.
sleep "${SETTLE:-15}"
R[fresh]=$("$TSBS" freshness "127.0.0.1:$pa" "127.0.0.1:$pb" "${FRESH_PUTS:-600}" "${FRESH_EVERY_MS:-50}")
ch "${ENDPOINTS%% *}" "DROP DATABASE $DB2 ON CLUSTER $CLUSTER" >/dev/null || true

echo
echo "$(date -u +%Y-%m-%d), $(nproc) cores, $(uname -r); $HOSTS hosts x 10 metrics x 1 h at 10 s = $POINTS points, telnet, $CONNS connections"
echo
echo "| | embedded | ClickHouse cluster (2 shards x 2 replicas) | cluster, read cache off |"
echo "|---|---|---|---|"
echo "| ingest, points/s, one TSD | $(rate "${R[emb_load]}") | $(rate "${R[ch_load]}") |"
echo "| ingest, points/s, two TSDs (lines sent, each half) | | ${R[ch2_rate]} |"
echo "| bytes per point at rest (cluster: per replica, after OPTIMIZE FINAL) | ${R[emb_bpp]} | ${R[ch_bpp]} |"
echo "| avg 1m-avg, all hosts, ms | ${R[emb_q1]} | ${R[ch_q1]} | ${R[chnc_q1]} |"
echo "| avg 1m-avg, one host, ms | ${R[emb_q2]} | ${R[ch_q2]} | ${R[chnc_q2]} |"
echo "| avg 1m-avg by region, ms | ${R[emb_q3]} | ${R[ch_q3]} | ${R[chnc_q3]} |"
echo "| sum of rate, all hosts, ms | ${R[emb_q4]} | ${R[ch_q4]} | ${R[chnc_q4]} |"
echo "| ClickHouse INSERTs per second during the load | | ${R[ch_inserts]} |"
echo
echo "A point acknowledged by TSD A, returned by a query on TSD B: ${R[fresh]}"
echo
echo "work dir: $WORK"
