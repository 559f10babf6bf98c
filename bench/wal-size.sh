#!/usr/bin/env bash
# What points waiting in the write-ahead log cost on disk: the TSBS-like
# devops load of bench/compare-victoriametrics.sh (1,000 hosts x 10
# metrics x 1 h at 10 s, 3.6 M points), shifted into the current hour so
# that no hour is sealed for being idle, sent as telnet `put`s on one
# connection. Prints the log's bytes per point (`tsd.wal.bytes_written`),
# and `du` of the data directory per point once every point was accepted,
# 60 s later (the hour still open) and after a clean stop.
#
#   bash bench/wal-size.sh            # run it well before the hour ends
#   TSDB=path/to/tsdb TSBS=path/to/tsbs bash bench/wal-size.sh   # other builds
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
WORK=$(mktemp -d /tmp/rtsdb-wal-size.XXXXXX)
cd "$ROOT"
if [ -z "${TSDB:-}" ]; then
  cargo build --release --quiet --bin tsdb --example tsbs
  TSDB=$ROOT/target/release/tsdb
  TSBS=$ROOT/target/release/examples/tsbs
fi
POINTS=3600000
BASE=$(( $(date +%s) / 3600 * 3600 ))
"$TSBS" lines 1000 1 |
  awk -v d=$((BASE - TSBS_START)) '{ $2 = $2 + d; print "put " $0 }' > "$WORK/lines.txt"
PORT=$(free_port)
"$TSDB" tsd --port "$PORT" --data-dir "$WORK/data" --auto-metric > "$WORK/tsd.log" 2>&1 &
PID=$!
trap 'kill "$PID" 2>/dev/null || true' EXIT
wait_port "$PORT"
python3 - "$PORT" "$WORK/lines.txt" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
with open(sys.argv[2], "rb") as f:
    while (b := f.read(1 << 20)):
        s.sendall(b)
s.shutdown(socket.SHUT_WR)
while s.recv(65536):
    pass
PY
stat() {
  curl -s "http://127.0.0.1:$PORT/api/stats" |
    python3 -c "import json, sys; print([s['value'] for s in json.load(sys.stdin) if s['metric'] == 'tsd.$1'][0])"
}
for _ in $(seq 600); do [ "$(stat datapoints.added)" = "$POINTS" ] && break; sleep 0.2; done
per_point() { awk -v b="$1" -v p="$POINTS" 'BEGIN{printf "%.2f", b/p}'; }
disk() { du -s --block-size=1 "$WORK/data" | awk '{print $1}'; }
echo "$(date -u '+%Y-%m-%d %H:%M') UTC, $(nproc) cores, load average $(cut -d' ' -f1 /proc/loadavg), $TSDB"
echo "WAL bytes per point: $(per_point "$(stat wal.bytes_written)")"
echo "data dir bytes per point, every point accepted: $(per_point "$(disk)") (points stored as rows meanwhile: $(stat datapoints.stored))"
sleep 60
echo "… 60 s later, hour still open: $(per_point "$(disk)")"
kill -TERM "$PID"
wait "$PID" || true
echo "… after a clean stop: $(per_point "$(disk)")"
rm -rf "$WORK"
