#!/usr/bin/env bash
# A/B of two rtsdb builds on the devops PromQL queries, on one data set:
# the inner loop of PromQL speed work, without loading VictoriaMetrics.
#
#   bash bench/promql-ab.sh OLD_TSDB NEW_TSDB DATA_DIR
#
# DATA_DIR is an rtsdb data dir holding the devops set (the `rtsdb` dir
# that bench/compare-victoriametrics.sh leaves in its work dir). Each
# build is started on its own copy of it; the four queries of
# compare-victoriametrics.sh (QUERIES=promql) are asked of both, their
# answers compared byte for byte (a speed change must not change an
# answer), then timed in turns of 5 back-to-back requests (`tsbs
# alternate`, RUNS runs each): this machine's speed drifts, so only
# interleaved times compare the builds.
set -euo pipefail

OLD=${1:?old tsdb binary}
NEW=${2:?new tsdb binary}
DATA=${3:?devops data dir}
RUNS=${RUNS:-10}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
TSBS=${TSBS:-$ROOT/target/release/examples/tsbs}
WORK=$(mktemp -d /tmp/rtsdb-promql-ab.XXXXXX)
S=$TSBS_START
E=$((S + 3600))

cp -r "$DATA" "$WORK/old"
cp -r "$DATA" "$WORK/new"
PO=$(free_port)
"$OLD" tsd --port "$PO" --data-dir "$WORK/old" --auto-metric > "$WORK/old.log" 2>&1 &
OPID=$!
PN=$(free_port)
"$NEW" tsd --port "$PN" --data-dir "$WORK/new" --auto-metric > "$WORK/new.log" 2>&1 &
NPID=$!
trap 'kill $OPID $NPID 2>/dev/null || true; rm -rf "$WORK"' EXIT
wait_port "$PO"
wait_port "$PN"

# The query, the first step's offset from the hour's start, the step.
QUERIES=(
  'avg(avg_over_time({__name__="cpu.usage_user"}[1m]))|50|60'
  'avg(avg_over_time({__name__="cpu.usage_user",hostname="host_42"}[1m]))|50|60'
  'avg(avg_over_time({__name__="cpu.usage_user"}[1m])) by (region)|50|60'
  'sum(rate({__name__="cpu.interrupts"}[10s]))|10|10'
)
echo "| query | old, ms | new, ms | same answer |"
echo "|---|---|---|---|"
for spec in "${QUERIES[@]}"; do
  IFS='|' read -r q off step <<<"$spec"
  path="/prometheus/api/v1/query_range?query=$(urlenc "$q")&start=$((S + off))&end=$((E + 1 - 10))&step=$step"
  a=$(curl -s "http://127.0.0.1:$PO$path" | md5sum)
  b=$(curl -s "http://127.0.0.1:$PN$path" | md5sum)
  same=$([ "$a" = "$b" ] && echo yes || echo NO)
  mapfile -t m < <("$TSBS" alternate "$RUNS" 5 "127.0.0.1:$PO" "$path" "127.0.0.1:$PN" "$path" | awk '{print $2}')
  echo "| \`$q\` | ${m[0]} | ${m[1]} | $same |"
done
