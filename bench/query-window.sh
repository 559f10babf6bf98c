#!/usr/bin/env bash
# Does a query cost follow its window, and not the data stored outside it?
# (issue 13, goal 3). Starts two TSDs on fresh data directories and loads
# HOSTS (default 100: 1,000 series) hosts with the tsbs loader over telnet
# (10 s steps from 2016-01-01): SHORT (default 24) hours into one and
# HOURS (default 168, a week) into the other. Then, with both running and
# idle (their seals and compactions done), times uncached (`nocache`)
# queries of one metric (HOSTS series, and one host) at 1h-avg over
# windows of 1 day and of 7 days, medians of RUNS (default 50) keep-alive
# requests, and prints one table: median milliseconds, the TSD's CPU
# milliseconds per query (from /proc, less noisy on a shared machine, in
# clock ticks: 10 ms over RUNS + 2 queries is its resolution),
# points read, and CPU milliseconds per million points read.
#
# Cost proportional to the points read means: the 7-day window costs about
# 7x the 1-day one, and the first day costs the same whether a day or a
# week is stored.
#
#   bash bench/query-window.sh                   # builds the release binaries
#   TSDB=/path/to/tsdb HOURS=336 bash bench/query-window.sh
set -euo pipefail

HOSTS=${HOSTS:-100}
SHORT=${SHORT:-24}
HOURS=${HOURS:-168}
RUNS=${RUNS:-50}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
cd "$ROOT"
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
cargo build --release --quiet --bin tsdb --example tsbs
TSDB=${TSDB:-$TARGET/release/tsdb}
TSBS=$TARGET/release/examples/tsbs
START=$TSBS_START
DAY=86400
[ "$HOURS" -ge 168 ] || { echo "HOURS must cover the 7-day window (>= 168)" >&2; exit 2; }
[ "$SHORT" -ge 24 ] || { echo "SHORT must cover the first day (>= 24)" >&2; exit 2; }

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

declare -A PID_OF
start_tsd() { # name, port
  "$TSDB" tsd --port "$2" --data-dir "$WORK/$1" --auto-metric >"$WORK/$1.log" 2>&1 &
  PIDS+=($!)
  PID_OF[$2]=$!
  for _ in $(seq 600); do curl -sf "127.0.0.1:$2/api/version" >/dev/null && break; sleep 0.1; done
}
path() { # metric expression, first s, last s
  echo "/api/query?start=$2&end=$3&m=$(urlenc "$1")&nocache"
}
points() { # port, metric expression, first s, last s -> raw points in the window
  # Hourly counts: a bucket wider than the window may start before it,
  # and OpenTSDB leaves out buckets whose timestamp is before the start.
  local m=${2/1h-avg/1h-count}
  curl -s "127.0.0.1:$1/api/query?start=$3&end=$4&m=$(urlenc "${m/avg:/zimsum:}")&nocache" |
    python3 -c 'import json,sys; print(int(sum(v for s in json.load(sys.stdin) for v in s["dps"].values())))'
}
median() { "$TSBS" query "127.0.0.1:$1" "$2" "$RUNS" | awk '{print $2}'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# Until the TSD has used under 5 % of a core for 2 s (its seal and the
# engine's compactions are done), at most 10 minutes.
settle() {
  local hz; hz=$(getconf CLK_TCK)
  for _ in $(seq 300); do
    local a; a=$(cpu_ticks "$1"); sleep 2
    [ $(( $(cpu_ticks "$1") - a )) -lt $(( hz / 10 )) ] && return 0
  done
}

SHORT_PORT=$(free_port)
start_tsd short "$SHORT_PORT"
LONG_PORT=$(free_port)
start_tsd long "$LONG_PORT"
echo "loading $HOSTS hosts x 10 metrics: $SHORT h into one TSD, $HOURS h into the other"
"$TSBS" load "127.0.0.1:$SHORT_PORT" telnet "$HOSTS" "$SHORT" 4 >/dev/null
"$TSBS" load "127.0.0.1:$LONG_PORT" telnet "$HOSTS" "$HOURS" 4 >/dev/null

ALL='avg:1h-avg:cpu.usage_user'
ONE='avg:1h-avg:cpu.usage_user{hostname=host_42}'
# Every window's points must be queryable before it is timed, and the TSDs
# idle: a seal or compaction still running is not the query's cost.
for pid in "${PIDS[@]}"; do settle "$pid"; done
for port in "$SHORT_PORT" "$LONG_PORT"; do
  want=$((HOSTS * 360 * 24))
  for _ in $(seq 600); do
    [ "$(points "$port" "$ALL" "$START" $((START + DAY - 1)))" -ge "$want" ] && break
    sleep 0.5
  done
done

echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg); $TSDB"
printf '%-24s %-8s %10s %10s %12s %14s\n' query stored "median ms" "CPU ms" "points read" "CPU ms per M pt"
row() { # label, port, stored, expression, first, last
  local ms pts t0 cpu
  t0=$(cpu_ticks "${PID_OF[$2]}")
  ms=$(median "$2" "$(path "$4" "$5" "$6")")
  # The timer sends RUNS + 2 requests (two warm-up).
  cpu=$(awk -v t="$(( $(cpu_ticks "${PID_OF[$2]}") - t0 ))" -v hz="$(getconf CLK_TCK)" -v n="$((RUNS + 2))" \
    'BEGIN{printf "%.2f", t * 1000 / hz / n}')
  pts=$(points "$2" "$4" "$5" "$6")
  printf '%-24s %-8s %10s %10s %12s %14s\n' "$1" "$3" "$ms" "$cpu" "$pts" \
    "$(awk -v c="$cpu" -v p="$pts" 'BEGIN{printf "%.2f", c * 1e6 / p}')"
}
for q in ALL ONE; do
  label=$([ $q = ALL ] && echo "$HOSTS hosts" || echo "one host")
  row "$label, day 1" "$SHORT_PORT" "${SHORT} h" "${!q}" "$START" $((START + DAY - 1))
  row "$label, day 1" "$LONG_PORT" "${HOURS} h" "${!q}" "$START" $((START + DAY - 1))
  row "$label, day 4" "$LONG_PORT" "${HOURS} h" "${!q}" $((START + 3 * DAY)) $((START + 4 * DAY - 1))
  row "$label, days 1-7" "$LONG_PORT" "${HOURS} h" "${!q}" "$START" $((START + 7 * DAY - 1))
done
