#!/usr/bin/env bash
# Memory of a TSD as days of data go in for a fixed set of series: starts
# a TSD on a fresh data directory, loads HOURS (default 168, a week) of
# HOSTS (default 100: 1,000 series) hosts with the tsbs loader over telnet
# (10 s steps, every series from the first step on, so the set of series
# stops growing at once), and prints the TSD's resident set (VmRSS) as the
# load goes, at each seventh of the load's time (the loader drains at an
# even pace, so about each seventh of the data), and after IDLE (default
# 60) seconds of quiet. If memory follows the data and not the series,
# the figures keep rising.
#
#   bash bench/rss-days.sh                      # builds target/release/tsdb
#   TSDB=/path/to/tsdb HOURS=336 bash bench/rss-days.sh
set -euo pipefail

HOSTS=${HOSTS:-100}
HOURS=${HOURS:-168}
IDLE=${IDLE:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
cd "$ROOT"
cargo build --release --quiet --bin tsdb --example tsbs
TSDB=${TSDB:-$ROOT/target/release/tsdb}
TSBS=$ROOT/target/release/examples/tsbs

WORK=$(mktemp -d)
PID=
cleanup() {
  if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

PORT=$(free_port)
"$TSDB" tsd --port "$PORT" --data-dir "$WORK/data" --auto-metric >"$WORK/tsd.log" 2>&1 &
PID=$!
for _ in $(seq 100); do
  curl -sf "127.0.0.1:$PORT/api/version" >/dev/null && break
  sleep 0.1
done
rss() { awk '/VmRSS/ {print $2}' "/proc/$PID/status"; }

"$TSBS" load "127.0.0.1:$PORT" telnet "$HOSTS" "$HOURS" 4 >"$WORK/load.out" &
LOADER=$!
T0=$(date +%s.%N)
: >"$WORK/samples"
while kill -0 "$LOADER" 2>/dev/null; do
  echo "$(python3 -c "import time; print(round(time.time() - $T0, 1))") $(rss)" >>"$WORK/samples"
  sleep 1
done
wait "$LOADER"
cat "$WORK/load.out"
python3 - "$WORK/samples" "$HOURS" <<'PY'
import sys
rows = [tuple(map(float, l.split())) for l in open(sys.argv[1]) if len(l.split()) == 2]
hours = int(sys.argv[2])
end = rows[-1][0]
print("loaded (h)  RSS (MB)")
for i in range(1, 8):
    t = end * i / 7
    near = min(rows, key=lambda r: abs(r[0] - t))
    print(f"{hours * i / 7:10.0f}  {near[1] / 1024:8.0f}")
PY
sleep "$IDLE"
echo "after ${IDLE} s idle: RSS $(( $(rss) / 1024 )) MB, data dir $(du -sm "$WORK/data" | cut -f1) MB"
