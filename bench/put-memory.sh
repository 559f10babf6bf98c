#!/usr/bin/env bash
# Memory of the TSD under concurrent large /api/put bodies: starts a TSD
# on a fresh data directory, sends CONC (default 8) concurrent bodies of
# about SIZE_MB (default 60) MB of JSON points each, and prints the peak
# RSS of the TSD process during the load and its RSS after IDLE seconds
# (default 10) of quiet, with the answers the requests got.
#
#   bash bench/put-memory.sh                       # builds target/release/tsdb
#   TSDB=/path/to/tsdb CONC=4 SIZE_MB=30 bash bench/put-memory.sh
#   GZIP=1 bash bench/put-memory.sh                # Content-Encoding: gzip
#   CONFIG='tsd.http.request.max_inflight_bytes=0' bash bench/put-memory.sh
#
# CONFIG holds `key=value` words written to the TSD's opentsdb.conf.
set -euo pipefail

CONC=${CONC:-8}
SIZE_MB=${SIZE_MB:-60}
IDLE=${IDLE:-10}
GZIP=${GZIP:-0}
CONFIG=${CONFIG:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d /tmp/rtsdb-put-memory.XXXXXX)
TSD_PID=
cleanup() {
    if [ -n "$TSD_PID" ] && kill -0 "$TSD_PID" 2>/dev/null; then
        kill "$TSD_PID" 2>/dev/null || true
        wait "$TSD_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

if [ -z "${TSDB:-}" ]; then
    (cd "$ROOT" && cargo build --release --quiet --bin tsdb)
    TSDB=${CARGO_TARGET_DIR:-$ROOT/target}/release/tsdb
fi

# One body per request, each its own series (tag req=N).
python3 - "$WORK" "$CONC" "$SIZE_MB" "$GZIP" <<'EOF'
import gzip, sys
work, conc, size_mb, gz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
for r in range(conc):
    parts, total, n = [], 0, 0
    while total < size_mb * 1000 * 1000:
        p = ('{"metric":"bench.put","timestamp":%d,"value":%d.5,'
             '"tags":{"host":"web%03d","dc":"lga","req":"%d"}}') % (1356998400 + n // 100, n, n % 100, r)
        parts.append(p)
        total += len(p) + 1
        n += 1
    body = ("[" + ",".join(parts) + "]").encode()
    if gz:
        body = gzip.compress(body, 1)
    with open("%s/body%d.json" % (work, r), "wb") as f:
        f.write(body)
EOF

{
    echo "tsd.core.auto_create_metrics=true"
    for kv in $CONFIG; do echo "$kv"; done
} > "$WORK/opentsdb.conf"
"$TSDB" tsd --config "$WORK/opentsdb.conf" --data-dir "$WORK/data" --port 0 \
    > "$WORK/tsd.log" 2>&1 &
TSD_PID=$!
PORT=
for _ in $(seq 1 200); do
    PORT=$(grep -oE 'Ready to serve on [0-9.]+:[0-9]+' "$WORK/tsd.log" | head -1 | cut -d: -f2 || true)
    [ -n "$PORT" ] && break
    sleep 0.05
done
[ -n "$PORT" ] || { cat "$WORK/tsd.log"; echo "the TSD did not start" >&2; exit 1; }

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$TSD_PID/status"; }
hwm_kb() { awk '/^VmHWM:/ {print $2}' "/proc/$TSD_PID/status"; }
start_kb=$(rss_kb)

headers=(-H 'Content-Type: application/json')
[ "$GZIP" = 1 ] && headers+=(-H 'Content-Encoding: gzip')
t0=$(date +%s.%N)
pids=()
for r in $(seq 0 $((CONC - 1))); do
    curl -s -o "$WORK/out$r" -w '%{http_code} %{time_total}s\n' "${headers[@]}" \
        --data-binary "@$WORK/body$r.json" \
        "http://127.0.0.1:$PORT/api/put?summary" > "$WORK/code$r" &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || true; done
t1=$(date +%s.%N)
peak_kb=$(hwm_kb)
sleep "$IDLE"
idle_kb=$(rss_kb)

body_mb=$(du -cm "$WORK"/body*.json | tail -1 | cut -f1)
echo "bodies:          $CONC x ${SIZE_MB} MB of JSON (${body_mb} MB on the wire$([ "$GZIP" = 1 ] && echo ', gzip'))"
for r in $(seq 0 $((CONC - 1))); do
    echo "request $r:       $(cat "$WORK/code$r") $(head -c 200 "$WORK/out$r")"
done
printf 'load took:       %.1f s\n' "$(echo "$t1 - $t0" | bc)"
echo "RSS at start:    $((start_kb / 1024)) MB"
echo "peak RSS:        $((peak_kb / 1024)) MB"
echo "RSS after ${IDLE} s:  $((idle_kb / 1024)) MB"
