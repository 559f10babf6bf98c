#!/usr/bin/env bash
# What a seal costs a query in the seconds after a load (issue 13).
#
# Loads the comparison's data (HOSTS hosts x 10 metrics x HOURS h at
# 10 s, telnet, 4 connections) into a fresh rtsdb, then asks one query
# (QUERY, default the 1-min avg over all hosts) back to back for SECS
# seconds while a poller samples `tsd.datapoints.stored` every 100 ms.
# Prints, per half-second slice from the load's end: the median and
# worst latency of the answers in it and how many points the flusher
# stored in it, so a slow slice can be matched with the seal.
# Run on a quiet machine; prints one table.
set -euo pipefail

HOSTS=${HOSTS:-1000}
HOURS=${HOURS:-1}
SECS=${SECS:-20}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
WORK=${WORK:-$(mktemp -d /tmp/rtsdb-seal.XXXXXX)}
mkdir -p "$WORK"
START=$TSBS_START
END=$((START + 3600 * HOURS))
QUERY=${QUERY:-avg:1m-avg:cpu.usage_user}

cd "$ROOT"
cargo build --release --quiet --bin tsdb --example tsbs
TSDB=${TSDB:-$ROOT/target/release/tsdb}
TSBS=$ROOT/target/release/examples/tsbs


PORT=$(free_port)
rm -rf "$WORK/rtsdb"
"$TSDB" tsd --port "$PORT" --data-dir "$WORK/rtsdb" --auto-metric > "$WORK/rtsdb.log" 2>&1 &
PID=$!
trap 'kill $PID ${POLL:-} 2>/dev/null || true' EXIT
wait_port "$PORT"

"$TSBS" load "127.0.0.1:$PORT" telnet "$HOSTS" "$HOURS" 4 > "$WORK/load.txt"
T0=$(date +%s%3N); echo "$T0" > "$WORK/t0"
( while kill -0 $PID 2>/dev/null; do
    n=$(curl -s "http://127.0.0.1:$PORT/api/stats" | python3 -c 'import json,sys
print(next((int(s["value"]) for s in json.load(sys.stdin) if s["metric"]=="tsd.datapoints.stored"), 0))' 2>/dev/null || echo 0)
    echo "$(( $(date +%s%3N) - T0 )) $n"
    sleep 0.1
  done ) > "$WORK/stored.txt" &
POLL=$!
"$TSBS" trace "127.0.0.1:$PORT" "/api/query?start=$START&end=$((END - 1))&m=$(urlenc "$QUERY")&nocache" "$SECS" > "$WORK/trace.txt"
kill $POLL 2>/dev/null || true
kill $PID; wait $PID 2>/dev/null || true

echo "$(date -u '+%Y-%m-%d %H:%M'), $(nproc) cores; $QUERY after a load of $(cat "$WORK/load.txt")"
python3 - "$WORK/trace.txt" "$WORK/stored.txt" <<'PY'
import sys
trace = [tuple(map(float, l.split())) for l in open(sys.argv[1])]
stored = [tuple(map(float, l.split())) for l in open(sys.argv[2]) if len(l.split()) == 2]
def stored_at(t):
    n = 0
    for ts, v in stored:
        if ts <= t: n = v
    return n
print("| from load end, s | answers | median ms | worst ms | points stored in slice |")
print("|---|---|---|---|---|")
slices = {}
for t, ms in trace:
    slices.setdefault(int(t // 500), []).append(ms)
for k in sorted(slices):
    v = sorted(slices[k])
    print(f"| {k*0.5:.1f} | {len(v)} | {v[len(v)//2]:.2f} | {v[-1]:.2f} | {stored_at((k+1)*500) - stored_at(k*500):.0f} |")
PY
