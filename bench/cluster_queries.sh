#!/usr/bin/env bash
# The four comparison queries of bench/cluster.sh, one build against
# another on the same machine state, without a release build:
#
#   cargo build --bin tsdb --example tsbs
#   bash bench/cluster_queries.sh CONF BIN TAG      # CONF from `scripts/cluster up`
#   bash bench/cluster_queries.sh embedded BIN TAG  # the embedded store
#
# BIN's TSD loads HOSTS (200) hosts x 10 metrics x 1 h over telnet into a
# database of its own, then each query runs RUNS (20) times with
# `nocache`; prints the medians in ms and, on a cluster, the ClickHouse
# statements one one-host query costs (system.events Query, every server).
# Alternate the builds compared: a shared machine's load moves.
set -euo pipefail
CONF=$1 BIN=$2 TAG=$3
HOSTS=${HOSTS:-200} RUNS=${RUNS:-20}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TSBS=${TSBS:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/examples/tsbs}
WORK=$(mktemp -d /tmp/qb.XXXXXX)
. "$ROOT/bench/lib.sh"
START=$TSBS_START; END=$((START + 3600))
PORT=$(free_port)
if [[ $CONF == embedded ]]; then : > "$WORK/c.conf"; ENDPOINTS=""; else
  DB=qb_${TAG}_$$
  grep -v '^tsd.storage.clickhouse.database' "$CONF" > "$WORK/c.conf"
  echo "tsd.storage.clickhouse.database = $DB" >> "$WORK/c.conf"
  ENDPOINTS=$(sed -n 's/^tsd.storage.clickhouse.endpoints *= *//p' "$CONF" | tr ',' ' ')
fi
"$BIN" --config "$WORK/c.conf" tsd --port "$PORT" --data-dir "$WORK/d" --auto-metric > "$WORK/log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
wait_port "$PORT"
"$TSBS" load "127.0.0.1:$PORT" telnet "$HOSTS" 1 4 > "$WORK/load"
ch() { curl -sS "$1/" --data-binary "$2"; }
if [[ -n $ENDPOINTS ]]; then
  for _ in $(seq 1 600); do
    n=$(ch "${ENDPOINTS%% *}" "SELECT count() FROM $DB.data"); sleep 1
    [[ "$(ch "${ENDPOINTS%% *}" "SELECT count() FROM $DB.data")" == "$n" ]] && break
  done
fi
sleep 10
rq() { echo "/api/query?nocache&start=$START&end=$END&m=$(urlenc "$1")"; }
line="$TAG hosts=$HOSTS"
for m in "avg:1m-avg:cpu.usage_user" "avg:1m-avg:cpu.usage_user{hostname=host_42}" "avg:1m-avg:cpu.usage_user{region=*}" "sum:rate:cpu.usage_user"; do
  med=$("$TSBS" query "127.0.0.1:$PORT" "$(rq "$m")" "$RUNS" | awk '{print $2}')
  line="$line | $med"
done
if [[ -n $ENDPOINTS ]]; then
  qsum() { local s=0 v; for e in $ENDPOINTS; do v=$(ch "$e" "SELECT value FROM system.events WHERE event = 'Query'"); s=$((s + ${v:-0})); done; echo $s; }
  a=$(qsum); "$TSBS" query "127.0.0.1:$PORT" "$(rq "avg:1m-avg:cpu.usage_user{hostname=host_42}")" 50 > /dev/null; b=$(qsum)
  # 4 counting statements (one per server) run between the reads.
  line="$line | statements per one-host query: $(awk -v a=$a -v b=$b 'BEGIN{printf "%.1f", (b-a-4)/50}')"
  ch "${ENDPOINTS%% *}" "DROP DATABASE $DB ON CLUSTER $(sed -n "s/^tsd.storage.clickhouse.cluster *= *//p" "$CONF")" > /dev/null
fi
kill $PID; wait $PID 2>/dev/null || true
rm -rf "$WORK"
echo "$line"
