#!/usr/bin/env bash
# Side-by-side comparison of rtsdb and VictoriaMetrics on the same
# TSBS-like devops data, sent by the same loader as OpenTSDB telnet `put`
# lines (or /api/put JSON, plain or gzipped) to both.
#
#   bash bench/compare-victoriametrics.sh                 # 1,000 hosts x 10 metrics, 1 h at 10 s
#   ROUNDS=3 PROTO=http bash bench/compare-victoriametrics.sh
#   PROTO=http-gzip ...      # /api/put JSON with Content-Encoding: gzip
#   PROTO=remote-write ...   # Prometheus remote write 1.0 to /api/v1/write of both;
#   PROTO=influx ...         # InfluxDB line protocol (a line per host and step) to
#                            # /write of both, VictoriaMetrics told to join measurement
#                            # and field with "." as rtsdb does (cpu.usage_user);
#                            # the queries are then PromQL on both (QUERIES=promql)
#   QUERIES=promql ...       # rtsdb is asked the same PromQL as VictoriaMetrics,
#                            # at /prometheus/api/v1/query_range (default: OpenTSDB's
#                            # /api/query for rtsdb; promql with PROTO=remote-write)
#   INGEST_ONLY=1 ...        # only the ingest rows (no queries, no disk after the load)
#   TSDB=/path/to/tsdb ...   # that rtsdb binary instead of this checkout's
#
# ROUNDS times: VictoriaMetrics is loaded, then rtsdb (VictoriaMetrics
# idles meanwhile: about 1 % of a core in its first 10 s, then nothing),
# then both are queried, then both are stopped. For each database:
#   - ingest: points/s while the loader drains, and the time from the
#     load's start until every point answers a count query;
#   - server CPU per point (utime+stime of the server over the load, until
#     every point is queryable);
#   - bytes per point on disk (`du` of everything under the data dir) at
#     four moments: right after all points are queryable, AFTER (60) s
#     later with the server still running, after kill -9 and a restart
#     (once the restarted server answers), and after a clean stop
#     (SIGTERM) that follows the restart;
#   - the median of RUNS runs of four queries over the hour: 1-min avg of
#     one metric over all hosts, the same for one host, the same grouped
#     by region, and the sum of the rate of a counter over all hosts;
#     uncached (`nocache`) and from each one's result cache. The two
#     databases are asked in turns of 5 back-to-back requests (`tsbs
#     alternate`): this machine's speed drifts by half from one minute to
#     the next, so medians taken a minute apart compared the minutes as
#     much as the databases. rtsdb is asked right after its load (its last
#     points still in its write buffer), VictoriaMetrics a load later.
#     VictoriaMetrics' windows are aligned to OpenTSDB's buckets
#     (shared/docs/victoriametrics.md) and its answers to the 1-min avg
#     queries are checked against rtsdb's (largest relative difference).
# Prints one markdown table with the range over rounds. Needs root the
# first time, to `apt-get install victoria-metrics`.
set -euo pipefail

HOSTS=${HOSTS:-1000}
HOURS=${HOURS:-1}
PROTO=${PROTO:-telnet}
QUERIES=${QUERIES:-$([ "$PROTO" = remote-write ] && echo promql || echo opentsdb)}
CONNS=${CONNS:-4}
RUNS=${RUNS:-20}
ROUNDS=${ROUNDS:-1}
INGEST_ONLY=${INGEST_ONLY:-}
AFTER=${AFTER:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
WORK=${WORK:-$(mktemp -d /tmp/rtsdb-vm.XXXXXX)}
mkdir -p "$WORK"
START=$TSBS_START
END=$((START + 3600 * HOURS))
POINTS=$((HOSTS * 10 * HOURS * 360))

cd "$ROOT"
cargo build --release --quiet --bin tsdb --example tsbs
TSDB=${TSDB:-$ROOT/target/release/tsdb}
TSBS=$ROOT/target/release/examples/tsbs

need_package victoria-metrics victoria-metrics
# The package may start its own service; ours is started by hand below.

# Each database's median of RUNS answers, asked in turns of 5:
# "$VHTTP" path "$RPORT" path -> two lines, VictoriaMetrics' then rtsdb's.
medians() { "$TSBS" alternate "$RUNS" 5 "127.0.0.1:$1" "$2" "127.0.0.1:$3" "$4" | awk '{print $2}'; }
bpp() { awk -v b="$1" -v p="$POINTS" 'BEGIN{printf "%.2f", b/p}'; }
# Bytes per point under dir $2, AFTER s after moment $1, written to file $3;
# run in the background so each database is sampled on time.
disk_later() {
  sleep_until_after "$1" "$AFTER"
  bpp "$(disk_bytes "$2")" > "$3"
}

declare -A R
add() { R[$1]="${R[$1]:-} $2"; }

# The loader's metric names: remote write sends Prometheus names, so
# `cpu.usage_user` arrives as `cpu_usage_user` (examples/tsbs.rs).
SEP=.; [ "$PROTO" = remote-write ] && SEP=_

# Every point answers a count query: the sum over the ten metrics of the
# points in the hour.
# The query is built once: ten `urlenc` runs (a Python start each) per poll
# made a poll take half a second and the time to queryable that coarse.
RT_COUNT_Q="/api/query?start=$START&end=$((END - 1))"
for m in cpu.usage_user cpu.usage_system cpu.usage_idle cpu.usage_nice cpu.usage_iowait \
         cpu.usage_irq cpu.usage_softirq cpu.usage_steal cpu.interrupts cpu.context_switches; do
  RT_COUNT_Q="$RT_COUNT_Q&m=$(urlenc "zimsum:${HOURS}h-count:${m/./$SEP}")"
done
rtsdb_count() {
  curl -s "http://127.0.0.1:$1$RT_COUNT_Q" | python3 -c 'import json,sys
try: print(int(sum(v for s in json.load(sys.stdin) for v in s["dps"].values())))
except Exception: print(0)'
}
# VictoriaMetrics caches tag filters for a few seconds: each poll asks with
# a different dummy matcher so it never answers from that cache.
vm_count() {
  local q; q=$(urlenc "sum(count_over_time({__name__=~\"cpu[._].*\",dummy!=\"p$2\"}[${HOURS}h]))")
  curl -s "http://127.0.0.1:$1/api/v1/query?query=$q&time=$((END - 1))&nocache=1" | python3 -c 'import json,sys
try:
  r=json.load(sys.stdin)["data"]["result"]; print(int(float(r[0]["value"][1])) if r else 0)
except Exception: print(0)'
}
wait_all_points() { # port kind -> seconds waited
  local i=0
  while :; do
    local n; n=$("${2}_count" "$1" "$i")
    [ "$n" -ge "$POINTS" ] && return 0
    i=$((i + 1)); [ "$i" -gt 3000 ] && { echo "only $n of $POINTS points became queryable" >&2; return 1; }
    sleep 0.1
  done
}

# ----------------------------------------------------------- VictoriaMetrics
vm_start() {
  VHTTP=$(free_port); VTEL=$(free_port); VPUT=$(free_port)
  victoria-metrics -storageDataPath="$WORK/vm" -retentionPeriod=100y -loggerLevel=ERROR \
    -httpListenAddr="127.0.0.1:$VHTTP" -opentsdbListenAddr="127.0.0.1:$VTEL" \
    -opentsdbHTTPListenAddr="127.0.0.1:$VPUT" -search.maxUniqueTimeseries=10000000 \
    -influxMeasurementFieldSeparator=. \
    >> "$WORK/vm.log" 2>&1 &
  VPID=$!
  for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$VHTTP/health" >/dev/null && return 0; sleep 0.1; done
  echo "VictoriaMetrics never became healthy" >&2; return 1
}
vq() { # PromQL, first bucket end offset -> /api/v1/query_range path
  echo "/api/v1/query_range?query=$(urlenc "$1")&start=$((START + $2))&end=$((END + 1 - 10))&step=$3"
}
VM_Q1='avg(avg_over_time({__name__="cpu'$SEP'usage_user"}[1m]))'
VM_Q2='avg(avg_over_time({__name__="cpu'$SEP'usage_user",hostname="host_42"}[1m]))'
VM_Q3='avg(avg_over_time({__name__="cpu'$SEP'usage_user"}[1m])) by (region)'
VM_Q4='sum(rate({__name__="cpu'$SEP'interrupts"}[10s]))'
run_vm() {
  rm -rf "$WORK/vm"; vm_start
  local c0 t0; c0=$(cpu_seconds $VPID); t0=$(now)
  local port=$VTEL; [ "$PROTO" != telnet ] && port=$VPUT
  [ "$PROTO" = remote-write ] && port=$VHTTP
  [ "$PROTO" = influx ] && port=$VHTTP
  add vm_load "$("$TSBS" load "127.0.0.1:$port" "$PROTO" "$HOSTS" "$HOURS" "$CONNS" | awk '{printf "%.2f", $6/1e6}')"
  wait_all_points "$VHTTP" vm
  local t1; t1=$(now)
  add vm_queryable "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')"
  add vm_cpu "$(awk -v a="$c0" -v b="$(cpu_seconds $VPID)" -v p="$POINTS" 'BEGIN{printf "%.2f", (b-a)*1e6/p}')"
  add vm_disk0 "$(bpp "$(disk_bytes "$WORK/vm")")"
  if [ -n "$INGEST_ONLY" ]; then stop_pid TERM $VPID; return 0; fi
  disk_later "$t1" "$WORK/vm" "$WORK/vm-disk60" & VLATER=$!
}
restart_vm() {
  stop_pid KILL $VPID; vm_start
  add vm_diskkill "$(bpp "$(disk_bytes "$WORK/vm")")"
  stop_pid TERM $VPID
  add vm_diskstop "$(bpp "$(disk_bytes "$WORK/vm")")"
}

# ------------------------------------------------------------------ rtsdb
rtsdb_start() {
  RPORT=$(free_port)
  "$TSDB" tsd --port "$RPORT" --data-dir "$WORK/rtsdb" --auto-metric >> "$WORK/rtsdb.log" 2>&1 &
  RPID=$!
  wait_port "$RPORT"
}
if [ "$QUERIES" = promql ]; then
  # The same PromQL and the same window as VictoriaMetrics is asked.
  rq() { local i; for i in 1 2 3 4; do local v="VM_Q$i"; [ "$1" = "${!v}" ] && break; done
         local off=50 step=60; [ "$i" = 4 ] && off=10 && step=10
         echo "/prometheus$(vq "$1" $off $step)"; }
  RT_Q1=$VM_Q1; RT_Q2=$VM_Q2; RT_Q3=$VM_Q3; RT_Q4=$VM_Q4
else
  rq() { echo "/api/query?start=$START&end=$((END - 1))&m=$(urlenc "$1")"; }
  RT_Q1="avg:1m-avg:cpu${SEP}usage_user"
  RT_Q2="avg:1m-avg:cpu${SEP}usage_user{hostname=host_42}"
  RT_Q3="avg:1m-avg:cpu${SEP}usage_user{region=*}"
  RT_Q4="sum:rate:cpu${SEP}interrupts"
fi
run_rtsdb() {
  rm -rf "$WORK/rtsdb"; rtsdb_start
  local c0 t0; c0=$(cpu_seconds $RPID); t0=$(now)
  add rt_load "$("$TSBS" load "127.0.0.1:$RPORT" "$PROTO" "$HOSTS" "$HOURS" "$CONNS" | awk '{printf "%.2f", $6/1e6}')"
  wait_all_points "$RPORT" rtsdb
  local t1; t1=$(now)
  add rt_queryable "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')"
  add rt_cpu "$(awk -v a="$c0" -v b="$(cpu_seconds $RPID)" -v p="$POINTS" 'BEGIN{printf "%.2f", (b-a)*1e6/p}')"
  add rt_disk0 "$(bpp "$(disk_bytes "$WORK/rtsdb")")"
  if [ -n "$INGEST_ONLY" ]; then stop_pid TERM $RPID; return 0; fi
  disk_later "$t1" "$WORK/rtsdb" "$WORK/rt-disk60" & RLATER=$!
}
restart_rtsdb() {
  stop_pid KILL $RPID; rtsdb_start
  add rt_diskkill "$(bpp "$(disk_bytes "$WORK/rtsdb")")"
  stop_pid TERM $RPID
  add rt_diskstop "$(bpp "$(disk_bytes "$WORK/rtsdb")")"
}

# The four queries, each database's uncached then cached form asked in
# turn with the other's; then the answers kept for the check below.
query_both() {
  for i in 1 2 3 4; do
    local vq_="VM_Q$i" rq_="RT_Q$i" off=50 step=60; [ "$i" = 4 ] && off=10 && step=10
    local m
    mapfile -t m < <(medians "$VHTTP" "$(vq "${!vq_}" $off $step)&nocache=1" "$RPORT" "$(rq "${!rq_}")&nocache")
    add "vm_q$i" "${m[0]}"; add "rt_q$i" "${m[1]}"
    mapfile -t m < <(medians "$VHTTP" "$(vq "${!vq_}" $off $step)" "$RPORT" "$(rq "${!rq_}")")
    add "vm_c$i" "${m[0]}"; add "rt_c$i" "${m[1]}"
  done
  curl -s "http://127.0.0.1:$VHTTP$(vq "$VM_Q1" 50 60)&nocache=1" > "$WORK/vm-q1.json"
  curl -s "http://127.0.0.1:$VHTTP$(vq "$VM_Q3" 50 60)&nocache=1" > "$WORK/vm-q3.json"
  curl -s "http://127.0.0.1:$RPORT$(rq "$RT_Q1")" > "$WORK/rt-q1.json"
  curl -s "http://127.0.0.1:$RPORT$(rq "$RT_Q3")" > "$WORK/rt-q3.json"
}

trap 'kill ${VPID:-} ${RPID:-} 2>/dev/null || true' EXIT
for _ in $(seq 1 "$ROUNDS"); do
  run_vm
  run_rtsdb
  [ -n "$INGEST_ONLY" ] && continue
  query_both
  wait "$VLATER" "$RLATER"
  add vm_disk60 "$(cat "$WORK/vm-disk60")"; add rt_disk60 "$(cat "$WORK/rt-disk60")"
  restart_vm
  restart_rtsdb
done

# The two answers to the 1-min avg queries, bucket by bucket: rtsdb's
# bucket [b, b+60) is VictoriaMetrics' window ending at b+50.
# With QUERIES=promql both answers are Prometheus' shape, compared step by step.
check() {
  python3 - "$WORK/rt-$1.json" "$WORK/vm-$1.json" <<'PY'
import json, sys
rt = json.load(open(sys.argv[1])); vm = json.load(open(sys.argv[2]))["data"]["result"]
key = lambda tags: tags.get("region", "")
worst, n = 0.0, 0
vms = {key(s["metric"]): {int(t) - 50: float(v) for t, v in s["values"]} for s in vm}
if isinstance(rt, dict):  # PromQL: the same steps on both sides
    rt = [{"tags": s["metric"], "dps": {int(t) - 50: float(v) for t, v in s["values"]}}
          for s in rt["data"]["result"]]
for s in rt:
    other = vms.get(key(s["tags"]), {})
    for t, v in s["dps"].items():
        w = other.get(int(t))
        if w is None: continue
        n += 1
        worst = max(worst, abs(v - w) / max(abs(v), 1e-9))
print(f"{n} buckets, largest relative difference {worst:.1e}")
PY
}

span() { tr ' ' '\n' <<<"${R[$1]}" | grep -v '^$' | sort -g | awk 'NR==1{a=$1} {b=$1} END{if (a==b) print a; else print a "–" b}'; }
echo
echo "$(date -u +%Y-%m-%d), $(nproc) cores, $(uname -r); $HOSTS hosts x 10 metrics x ${HOURS} h at 10 s = $POINTS points, $PROTO, $QUERIES queries, $CONNS connections, $ROUNDS round(s); VictoriaMetrics $(dpkg-query -W -f='${Version}' victoria-metrics 2>/dev/null)"
echo
echo "| | rtsdb | VictoriaMetrics |"
echo "|---|---|---|"
row() { echo "| $1 | $(span "rt_$2") | $(span "vm_$2") |"; }
row "ingest, M points/s, loader drained" load
row "all points queryable after the load began, s" queryable
row "server CPU per point, µs" cpu
row "bytes/point on disk: all points just queryable" disk0
if [ -n "$INGEST_ONLY" ]; then echo; echo "work dir: $WORK"; exit 0; fi
row "… ${AFTER} s later, still running" disk60
row "… after kill -9 and restart" diskkill
row "… after a clean stop" diskstop
row "1-min avg, 1 metric, all hosts, ms (uncached: nocache)" q1
row "same, one host, ms" q2
row "same, grouped by region, ms" q3
row "sum of rate of a counter, all hosts, ms" q4
row "1-min avg, all hosts, repeated, ms (result caches on)" c1
row "one host, repeated, ms" c2
row "by region, repeated, ms" c3
row "sum of rate, repeated, ms" c4
echo
echo "answers, 1-min avg all hosts: $(check q1)"
echo "answers, 1-min avg by region: $(check q3)"
echo "work dir: $WORK"
