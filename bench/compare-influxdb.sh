#!/usr/bin/env bash
# Side-by-side comparison of rtsdb and InfluxDB 1.6 on the same TSBS-like
# devops data, loaded by the same loader over the same OpenTSDB protocol.
#
#   bash bench/compare-influxdb.sh            # 1,000 hosts x 10 metrics, 1 h at 10 s
#   HOURS=6 PROTO=http bash bench/compare-influxdb.sh
#
# Prints, for each database: points/s, server CPU seconds during the load,
# peak RSS, bytes per point on disk after both have settled, and the median
# latency of four queries (avg 1m-avg over all hosts; the same for one host;
# the same grouped by region; sum of rate over all hosts), run SETTLE
# seconds (default 15) after the load.
# Needs root (or sudo) the first time, to `apt-get install influxdb`.
set -euo pipefail

HOSTS=${HOSTS:-1000}
HOURS=${HOURS:-1}
PROTO=${PROTO:-telnet}
CONNS=${CONNS:-4}
RUNS=${RUNS:-20}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
WORK=${WORK:-$(mktemp -d /tmp/rtsdb-compare.XXXXXX)}
START=$TSBS_START
END=$((START + 3600))

cd "$ROOT"
cargo build --release --quiet --bin tsdb --example tsbs
TSDB=$ROOT/target/release/tsdb
TSBS=$ROOT/target/release/examples/tsbs

need_package influxd influxdb

peak_rss_mb() { awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$1/status"; }

POINTS=$((HOSTS * 10 * HOURS * 360))
declare -A R

# ---------------------------------------------------------------- InfluxDB
IHTTP=$(free_port); IOTSDB=$(free_port)
mkdir -p "$WORK/influx"
cat > "$WORK/influx.conf" <<CONF
reporting-disabled = true
bind-address = "127.0.0.1:$(free_port)"
[meta]
  dir = "$WORK/influx/meta"
[data]
  dir = "$WORK/influx/data"
  wal-dir = "$WORK/influx/wal"
  cache-snapshot-write-cold-duration = "5s"
  compact-full-write-cold-duration = "10s"
  query-log-enabled = false
[http]
  bind-address = "127.0.0.1:$IHTTP"
  log-enabled = false
[[opentsdb]]
  enabled = true
  bind-address = "127.0.0.1:$IOTSDB"
  database = "tsbs"
  batch-size = 5000
  batch-timeout = "1s"
CONF
influxd -config "$WORK/influx.conf" > "$WORK/influx.log" 2>&1 &
IPID=$!
trap 'kill $IPID ${RPID:-} 2>/dev/null || true' EXIT
wait_port "$IHTTP"; wait_port "$IOTSDB"
curl -s -XPOST "http://127.0.0.1:$IHTTP/query" --data-urlencode "q=CREATE DATABASE tsbs" >/dev/null
c0=$(cpu_seconds $IPID)
R[influx_load]=$("$TSBS" load "127.0.0.1:$IOTSDB" "$PROTO" "$HOSTS" "$HOURS" "$CONNS")
# The OpenTSDB input batches asynchronously: wait until every point landed.
for _ in $(seq 1 600); do
  n=$(curl -s "http://127.0.0.1:$IHTTP/query?db=tsbs" --data-urlencode 'q=SELECT count("value") FROM /cpu\..*/' | python3 -c 'import json,sys; r=json.load(sys.stdin)["results"][0]; print(sum(s["values"][0][1] for s in r.get("series",[])))' 2>/dev/null || echo 0)
  [ "$n" -ge "$POINTS" ] && break; sleep 1
done
R[influx_cpu]=$(awk -v a="$c0" -v b="$(cpu_seconds $IPID)" 'BEGIN{printf "%.1f", b-a}')
R[influx_rss]=$(peak_rss_mb $IPID)
# Queries run once background work after the load (InfluxDB's cache
# snapshots, rtsdb's sealing of finished hours) has had time to end.
sleep "${SETTLE:-15}"
range="time >= ${START}s AND time < ${END}s"
iq() { echo "/query?db=tsbs&epoch=ms&q=$(urlenc "$1")"; }
R[influx_q1]=$(median_of "$IHTTP" "$(iq "SELECT mean(\"value\") FROM \"cpu.usage_user\" WHERE $range GROUP BY time(1m)")")
R[influx_q2]=$(median_of "$IHTTP" "$(iq "SELECT mean(\"value\") FROM \"cpu.usage_user\" WHERE $range AND \"hostname\"='host_42' GROUP BY time(1m)")")
R[influx_q3]=$(median_of "$IHTTP" "$(iq "SELECT mean(\"value\") FROM \"cpu.usage_user\" WHERE $range GROUP BY time(1m), \"region\"")")
R[influx_q4]=$(median_of "$IHTTP" "$(iq "SELECT sum(\"d\") FROM (SELECT derivative(\"value\", 1s) AS d FROM \"cpu.usage_user\" WHERE $range GROUP BY \"hostname\") WHERE $range GROUP BY time(10s)")")
# Settle: cold shards are snapshotted and fully compacted after these delays.
sleep 30
kill $IPID; wait $IPID 2>/dev/null || true
R[influx_bytes]=$(disk_bytes "$WORK/influx")

# ------------------------------------------------------------------ rtsdb
# Twice: rtsdb's compressed rows (the default) and OpenTSDB's classic
# compacted columns (tsd.storage.row_encoding=classic).
run_rtsdb() {
  local tag=$1 encoding=$2
  local dir="$WORK/rtsdb-$tag" conf="$WORK/rtsdb-$tag.conf"
  printf 'tsd.storage.row_encoding = %s\n' "$encoding" > "$conf"
  local port; port=$(free_port)
  "$TSDB" tsd --config "$conf" --port "$port" --data-dir "$dir" --auto-metric > "$WORK/rtsdb-$tag.log" 2>&1 &
  RPID=$!
  wait_port "$port"
  local c0; c0=$(cpu_seconds $RPID)
  R[${tag}_load]=$("$TSBS" load "127.0.0.1:$port" "$PROTO" "$HOSTS" "$HOURS" "$CONNS")
  R[${tag}_cpu]=$(awk -v a="$c0" -v b="$(cpu_seconds $RPID)" 'BEGIN{printf "%.1f", b-a}')
  R[${tag}_rss]=$(peak_rss_mb $RPID)
  sleep "${SETTLE:-15}"
  rq() { echo "/api/query?start=$START&end=$END&m=$(urlenc "$1")"; }
  R[${tag}_q1]=$(median_of "$port" "$(rq "avg:1m-avg:cpu.usage_user")")
  R[${tag}_q2]=$(median_of "$port" "$(rq "avg:1m-avg:cpu.usage_user{hostname=host_42}")")
  R[${tag}_q3]=$(median_of "$port" "$(rq "avg:1m-avg:cpu.usage_user{region=*}")")
  R[${tag}_q4]=$(median_of "$port" "$(rq "sum:rate:cpu.usage_user")")
  # Settle: a graceful stop writes every buffered row; then the engine's
  # own compaction runs and its journal is released.
  kill -TERM $RPID; wait $RPID 2>/dev/null || true
  "$TSDB" --config "$conf" --data-dir "$dir" fsck --full-scan --compact > "$WORK/rtsdb-$tag-fsck.log" 2>&1 || true
  R[${tag}_bytes]=$(disk_bytes "$dir")
}
run_rtsdb rtsdb compressed
run_rtsdb classic classic

rate() { echo "$1" | awk '{printf "%.0f", $6}'; }
bpp() { awk -v b="$1" -v p="$POINTS" 'BEGIN{printf "%.2f", b/p}'; }
echo
echo "$(date -u +%Y-%m-%d), $(nproc) cores, $(uname -r); $HOSTS hosts x 10 metrics x ${HOURS} h at 10 s = $POINTS points, $PROTO, $CONNS connections"
echo
echo "| | rtsdb | rtsdb, classic rows | InfluxDB 1.6 |"
echo "|---|---|---|---|"
row() { echo "| $1 | ${R[rtsdb_$2]} | ${R[classic_$2]} | ${R[influx_$2]} |"; }
echo "| ingest, points/s | $(rate "${R[rtsdb_load]}") | $(rate "${R[classic_load]}") | $(rate "${R[influx_load]}") |"
row "server CPU seconds for the load" cpu
row "peak RSS, MB" rss
echo "| bytes per point on disk (everything) | $(bpp "${R[rtsdb_bytes]}") | $(bpp "${R[classic_bytes]}") | $(bpp "${R[influx_bytes]}") |"
row "avg 1m-avg, all hosts, ms" q1
row "avg 1m-avg, one host, ms" q2
row "avg 1m-avg by region, ms" q3
row "sum of rate, all hosts, ms" q4
echo
echo "work dir: $WORK"
