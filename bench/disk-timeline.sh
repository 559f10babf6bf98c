#!/usr/bin/env bash
# What the data directory holds at every moment of a load, and of what:
# the devops load of bench/compare-victoriametrics.sh (1,000 hosts x 10
# metrics x 1 h at 10 s = 3.6 M points, telnet, 4 connections) into a
# TSD started here, with `du` of the data directory and of its parts
# (WAL segments, the engine's journal, the row table, the other tables,
# the rest) every STEP seconds, from the load's start until FOR seconds
# after every point answers a count query; then after a kill -9 and a
# restart, and after a clean stop. Prints one line per sample, in bytes
# per point, marking the loader's return and the queryable moment.
#
#   bash bench/disk-timeline.sh                      # this checkout's release build
#   TSDB=path/to/tsdb bash bench/disk-timeline.sh    # another build
#   STEP=0.3 FOR=15 ...
#   PROTO=http bash bench/disk-timeline.sh           # /api/put JSON (or http-gzip), as the loader sends it
#   COPY=/tmp/at-return bash bench/disk-timeline.sh  # also keep a copy of the data directory as the loader returned
set -euo pipefail
HOSTS=${HOSTS:-1000}
PROTO=${PROTO:-telnet}
COPY=${COPY:-}
STEP=${STEP:-0.3}
FOR=${FOR:-15}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
WORK=$(mktemp -d /tmp/rtsdb-disk.XXXXXX)
cd "$ROOT"
if [ -z "${TSDB:-}" ]; then
  cargo build --release --quiet --bin tsdb --example tsbs
  TSDB=$ROOT/target/release/tsdb
fi
TSBS=${TSBS:-$ROOT/target/release/examples/tsbs}
POINTS=$((HOSTS * 10 * 360))
START=$TSBS_START
DATA=$WORK/data

PORT=$(free_port)
start() {
  "$TSDB" tsd --port "$PORT" --data-dir "$DATA" --auto-metric >> "$WORK/tsd.log" 2>&1 &
  PID=$!
  wait_port "$PORT"
}
stop() { kill "-$1" "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; }
trap 'kill "${PID:-}" "${SAMPLER:-}" 2>/dev/null || true; rm -rf "$WORK"' EXIT

# bytes on disk of the files under $1 matching find's remaining arguments
bytes() { find "$1" "${@:2}" -printf '%b\n' 2>/dev/null | awk '{s += $1 * 512} END {print s + 0}'; }
# points accepted and stored (M), rows written (k), journal moves: one request
stats() {
  curl -s -m 2 "http://127.0.0.1:$PORT/api/stats" | python3 -c 'import json, sys
try:
  s = {x["metric"]: x["value"] for x in json.load(sys.stdin)}
  print("%5.2f %5.2f %5.1f %3d" % (float(s["tsd.datapoints.added"]) / 1e6, float(s["tsd.datapoints.stored"]) / 1e6, float(s["tsd.storage.rows_written"]) / 1e3, int(s["tsd.storage.checkpoints"])))
except Exception: print("    -     -     -   -")'
}
sample() { # label -> one line: seconds since T0, total, wal, journal, rows, other tables, rest, stats
  local total wal jnl rows tables st
  st=$(stats)
  total=$(du -s --block-size=1 "$DATA" 2>/dev/null | cut -f1)
  wal=$(bytes "$DATA/wal")
  jnl=$(bytes "$DATA/fjall" -maxdepth 1 -name '*.jnl')
  rows=$(bytes "$DATA/fjall/keyspaces/1")
  tables=$(bytes "$DATA/fjall/keyspaces")
  awk -v t="$(date +%s.%N)" -v t0="$T0" -v p="$POINTS" -v l="$1" \
    -v a="$total" -v w="$wal" -v j="$jnl" -v r="$rows" -v k="$tables" -v st="$st" \
    'BEGIN { printf "%6.1f  %5.2f  %5.2f  %5.2f  %5.2f  %5.2f  %5.2f  %s  %s\n", t - t0, a/p, w/p, j/p, r/p, (k-r)/p, (a-w-j-k)/p, st, l }'
}
# CPU seconds (user + system) the TSD's WAL writer thread used so far
writer_cpu() {
  local t
  for t in /proc/"$PID"/task/*; do
    [ "$(cat "$t/comm" 2>/dev/null)" = wal-writer ] &&
      awk -v k="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / k }' "$t/stat"
  done
}
count() {
  local q="/api/query?start=$START&end=$((START + 3599))" m
  for m in usage_user usage_system usage_idle usage_nice usage_iowait usage_irq usage_softirq usage_steal interrupts context_switches; do
    q="$q&m=zimsum:1h-count:cpu.$m"
  done
  curl -s "http://127.0.0.1:$PORT$q" | python3 -c 'import json,sys
try: print(int(sum(v for s in json.load(sys.stdin) for v in s["dps"].values())))
except Exception: print(0)'
}

start
echo "$(date -u '+%Y-%m-%d %H:%M:%S') UTC, $(nproc) cores, load average $(cut -d' ' -f1 /proc/loadavg), $PROTO, $TSDB"
echo "bytes per point ($POINTS points) under the data directory:"
echo "(rows: the row table; other: the other tables; rest: header, directories; then M points accepted, M stored, k rows written, journal moves)"
echo "     s  total    wal   jrnl   rows  other   rest  added stored  rows  ck"
T0=$(date +%s.%N)
(while :; do sample ""; sleep "$STEP"; done) &
SAMPLER=$!
"$TSBS" load "127.0.0.1:$PORT" "$PROTO" "$HOSTS" 1 4 > "$WORK/load.out"
sample "<- the loader returned ($(awk '{print $6/1e6}' "$WORK/load.out") M points/s)"
if [ -n "$COPY" ]; then
  # Taken while the TSD runs: a copy of files being written, for looking
  # at what they hold, not a backup.
  rm -rf "$COPY" && cp -a "$DATA" "$COPY"
  sample "<- copied to $COPY"
fi
until [ "$(count)" -ge "$POINTS" ]; do sleep 0.1; done
sample "<- every point queryable"
echo "WAL writer thread: $(writer_cpu) CPU seconds so far, $(awk -v s="$(writer_cpu)" -v p="$POINTS" 'BEGIN { printf "%.0f", s * 1e9 / p }') ns per point"
sleep "$FOR"
kill "$SAMPLER"; wait "$SAMPLER" 2>/dev/null || true
stop KILL
start
sample "<- after kill -9 and a restart"
stop TERM
sample "<- after a clean stop"
