#!/usr/bin/env bash
# How fast `tsdb import` takes a dump of OpenTSDB's `tsdb scan --import`
# (docs/migrating.md): generates a file in that format and that order
# (metric by metric, hour by hour, every series' points of the hour in
# time order: the row-key order scan walks), imports it into a fresh
# store with --auto-metric, and prints the time, points per second, the
# server-less process's CPU and what a billion points would take at
# that rate.
#
#   bash bench/import-rate.sh                   # 100 hosts x 10 metrics x 28 h at 10 s: 10.08 M points
#   HOURS=3 bash bench/import-rate.sh           # a smaller file
#   TSDB=path/to/tsdb bash bench/import-rate.sh # another build
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
HOSTS=${HOSTS:-100}
METRICS=${METRICS:-10}
HOURS=${HOURS:-28}
WORK=$(mktemp -d /tmp/rtsdb-import-rate.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cd "$ROOT"
if [ -z "${TSDB:-}" ]; then
  cargo build --release --quiet --bin tsdb
  TSDB=$ROOT/target/release/tsdb
fi

# `metric timestamp value tagk=tagv ...`, as scan --import prints rows:
# gauges with one decimal for even metrics, growing integer counters for
# odd ones; three tags per series.
awk -v hosts="$HOSTS" -v metrics="$METRICS" -v hours="$HOURS" -v start="$TSBS_START" 'BEGIN {
  srand(7)
  for (m = 0; m < metrics; m++) {
    name = sprintf("sys.import.m%02d", m)
    for (h = 0; h < hours; h++) {
      base = start + h * 3600
      for (s = 0; s < hosts; s++) {
        tags = sprintf("host=host%04d dc=dc%d rack=r%02d", s, s % 3, s % 20)
        for (t = 0; t < 3600; t += 10) {
          if (m % 2) { v = (h * 360 + t / 10) * (s + 1) } else { v = sprintf("%.1f", 50 + 40 * sin((base + t) / 600 + s)) }
          print name, base + t, v, tags
        }
      }
    }
  }
}' > "$WORK/dump.txt"
points=$(wc -l < "$WORK/dump.txt")
bytes=$(stat -c %s "$WORK/dump.txt")
echo "file: $points points, $bytes bytes ($HOSTS hosts x $METRICS metrics x $HOURS h at 10 s)"

t0=$(now)
/usr/bin/time -f "%U %S %M" -o "$WORK/time" "$TSDB" import --auto-metric --data-dir "$WORK/data" "$WORK/dump.txt" > "$WORK/out" 2>&1
t1=$(now)
tail -n 1 "$WORK/out"
read -r user sys rss < "$WORK/time"
awk -v n="$points" -v a="$t0" -v b="$t1" -v u="$user" -v s="$sys" -v r="$rss" -v d="$(disk_bytes "$WORK/data")" 'BEGIN {
  secs = b - a
  printf "import: %.1f s wall, %.0f points/s, CPU %.1f s (%.2f us/point), peak RSS %.0f MB, store %.2f bytes/point\n", secs, n / secs, u + s, (u + s) * 1e6 / n, r / 1024, d / n
  printf "a billion points at this rate: %.1f h\n", 1e9 / (n / secs) / 3600
}'
