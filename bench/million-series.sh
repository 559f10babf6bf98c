#!/usr/bin/env bash
# rtsdb and VictoriaMetrics side by side on one million distinct series:
# metric x host x cpu (10 x 10,000 x 10), 3 points each at 10 s, sent as
# OpenTSDB telnet `put` lines by one loader (CONNS connections) to both,
# with auto-create on. For each database, in one run:
#   - server CPU per point (utime+stime from the load's start until the
#     loader is done, and until every point answers a count query);
#   - peak RSS (VmHWM) at that moment, and again AFTER seconds later, still
#     running, with RSS per series;
#   - bytes per point on disk (`du` of the data dir) at both moments, and
#     for rtsdb what its write-ahead log (`wal/`) takes of them;
#   - the median of RUNS runs of a one-series query (1-min avg of one
#     host's one cpu over the 30 s of data), uncached.
# Prints one markdown table.
#
#   bash bench/million-series.sh
#   HOSTS=1000 AFTER=30 bash bench/million-series.sh     # a smaller run
#   TSDB=/path/to/tsdb ...   # that rtsdb binary instead of this checkout's
set -euo pipefail

HOSTS=${HOSTS:-10000}
METRICS=10
CPUS=10
CONNS=${CONNS:-4}
RUNS=${RUNS:-20}
AFTER=${AFTER:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-$(mktemp -d /tmp/rtsdb-million.XXXXXX)}
mkdir -p "$WORK"
START=1451606400
SERIES=$((METRICS * HOSTS * CPUS))
POINTS=$((SERIES * 3))

cd "$ROOT"
cargo build --release --quiet --bin tsdb
TSDB=${TSDB:-$ROOT/target/release/tsdb}
. "$ROOT/bench/lib.sh"
need_package victoria-metrics victoria-metrics
kb() { awk -v k="$2" '$1 == k":" {print $2}' "/proc/$1/status"; }
bpp() { awk -v b="$1" -v p="$POINTS" 'BEGIN{printf "%.1f", b/p}'; }
wal_bpp() { if [ -d "$1/wal" ]; then bpp "$(disk_bytes "$1/wal")"; else echo "—"; fi; }
cleanup() {
  for p in ${TPID:-} ${VPID:-}; do stop_pid TERM "$p"; done
  [ -n "${KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

# The data: every series' first point, then every series' second, then
# third (as collectors send a round at a time).
if [ ! -s "$WORK/lines.txt" ]; then
python3 - "$WORK/lines.txt" "$HOSTS" "$METRICS" "$CPUS" "$START" <<'EOF'
import sys
path, hosts, metrics, cpus, start = sys.argv[1], *map(int, sys.argv[2:])
with open(path, "w") as out:
    for p in range(3):
        ts = start + p * 10
        for m in range(metrics):
            for h in range(hosts):
                out.write("".join("put sys.cpu.m%d %d %d.5 host=host%05d cpu=%d\n"
                                  % (m, ts, (h * c + p) % 97, h, c) for c in range(cpus)))
EOF
fi

# The loader: CONNS connections, each sending its share of the lines and
# then reading until the server closes the connection after `exit`.
cat > "$WORK/load.py" <<'EOF'
import socket, sys, threading
path, port, conns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lines = open(path, "rb").read().splitlines(keepends=True)
share = (len(lines) + conns - 1) // conns
def send(part):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"".join(part))
    s.shutdown(socket.SHUT_WR)
    while s.recv(65536):
        pass
    s.close()
ts = [threading.Thread(target=send, args=(lines[i * share:(i + 1) * share],)) for i in range(conns)]
[t.start() for t in ts]
[t.join() for t in ts]
EOF

declare -A R
metrics_re='sys[.]cpu[.]m.*'

rtsdb_count() {
  local q="/api/query?start=$START&end=$((START + 60))"
  for m in $(seq 0 $((METRICS - 1))); do q="$q&m=$(urlenc "zimsum:1h-count:sys.cpu.m$m")"; done
  curl -s "http://127.0.0.1:$1$q&nocache" | python3 -c 'import json,sys
try: print(int(sum(v for s in json.load(sys.stdin) for v in s["dps"].values())))
except Exception: print(0)'
}
vm_count() {
  local q; q=$(urlenc "sum(count_over_time({__name__=~\"$metrics_re\",dummy!=\"p$2\"}[1h]))")
  curl -s "http://127.0.0.1:$1/api/v1/query?query=$q&time=$((START + 60))&nocache=1" | python3 -c 'import json,sys
try:
  r=json.load(sys.stdin)["data"]["result"]; print(int(float(r[0]["value"][1])) if r else 0)
except Exception: print(0)'
}
wait_all_points() { # port kind
  local i=0 n
  while :; do
    n=$("${2}_count" "$1" "$i")
    [ "$n" -ge "$POINTS" ] && return 0
    i=$((i + 1)); [ "$i" -gt 1200 ] && { echo "only $n of $POINTS points became queryable" >&2; return 1; }
    sleep 0.5
  done
}
median_ms() { # url
  local url=$1
  for _ in $(seq 1 "$RUNS"); do curl -s -o /dev/null -w '%{time_total}\n' "$url"; done |
    sort -n | awk '{a[NR]=$1} END {printf "%.2f", a[int((NR+1)/2)]*1000}'
}

measure() { # name pid port-http data-dir load-port
  local name=$1 pid=$2 http=$3 dir=$4 port=$5 c0 t0 t1
  c0=$(cpu_seconds "$pid"); t0=$(now)
  python3 "$WORK/load.py" "$WORK/lines.txt" "$port" "$CONNS"
  R[${name}_drain]=$(awk -v a="$t0" -v b="$(now)" -v p="$POINTS" 'BEGIN{printf "%.2f", p/(b-a)/1e6}')
  R[${name}_cpu_drain]=$(awk -v a="$c0" -v b="$(cpu_seconds "$pid")" -v p="$POINTS" 'BEGIN{printf "%.2f", (b-a)*1e6/p}')
  wait_all_points "$http" "$name"
  t1=$(now)
  R[${name}_cpu]=$(awk -v a="$c0" -v b="$(cpu_seconds "$pid")" -v p="$POINTS" 'BEGIN{printf "%.2f", (b-a)*1e6/p}')
  R[${name}_hwm0]=$(kb "$pid" VmHWM)
  R[${name}_disk0]=$(bpp "$(disk_bytes "$dir")")
  R[${name}_wal0]=$(wal_bpp "$dir")
  sleep_until_after "$t1" "$AFTER"
  R[${name}_hwm1]=$(kb "$pid" VmHWM)
  R[${name}_rss1]=$(kb "$pid" VmRSS)
  R[${name}_disk1]=$(bpp "$(disk_bytes "$dir")")
  R[${name}_wal1]=$(wal_bpp "$dir")
}

# ------------------------------------------------------------------ rtsdb
TPORT=$(free_port)
printf 'tsd.core.auto_create_metrics=true\n' > "$WORK/opentsdb.conf"
"$TSDB" tsd --config "$WORK/opentsdb.conf" --data-dir "$WORK/rtsdb" --port "$TPORT" > "$WORK/tsd.log" 2>&1 &
TPID=$!
for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$TPORT/api/version" >/dev/null && break; sleep 0.1; done
measure rtsdb "$TPID" "$TPORT" "$WORK/rtsdb" "$TPORT"
R[rtsdb_q]=$(median_ms "http://127.0.0.1:$TPORT/api/query?start=$START&end=$((START + 60))&m=$(urlenc 'avg:1m-avg:sys.cpu.m3{host=host00042,cpu=7}')&nocache")
stop_pid TERM "$TPID"; TPID=

# -------------------------------------------------------- VictoriaMetrics
VHTTP=$(free_port); VTEL=$(free_port)
victoria-metrics -storageDataPath="$WORK/vm" -retentionPeriod=100y -loggerLevel=ERROR \
  -httpListenAddr="127.0.0.1:$VHTTP" -opentsdbListenAddr="127.0.0.1:$VTEL" \
  -search.maxUniqueTimeseries=10000000 > "$WORK/vm.log" 2>&1 &
VPID=$!
for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$VHTTP/health" >/dev/null && break; sleep 0.1; done
measure vm "$VPID" "$VHTTP" "$WORK/vm" "$VTEL"
R[vm_q]=$(median_ms "http://127.0.0.1:$VHTTP/api/v1/query_range?query=$(urlenc 'avg(avg_over_time({__name__="sys.cpu.m3",host="host00042",cpu="7"}[1m]))')&start=$((START + 50))&end=$((START + 60))&step=60&nocache=1")
stop_pid TERM "$VPID"; VPID=

perseries() { awk -v k="$1" -v s="$SERIES" 'BEGIN{printf "%.0f", k*1024/s}'; }
mb() { awk -v k="$1" 'BEGIN{printf "%.0f", k/1024}'; }
echo
echo "$SERIES series, $POINTS points, $CONNS telnet connections; $(nproc) cores; $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "| | rtsdb | VictoriaMetrics |"
echo "|---|---|---|"
echo "| drain, M points/s | ${R[rtsdb_drain]} | ${R[vm_drain]} |"
echo "| server CPU per point, µs, while the loader drains | ${R[rtsdb_cpu_drain]} | ${R[vm_cpu_drain]} |"
echo "| server CPU per point, µs, until all queryable (count queries included) | ${R[rtsdb_cpu]} | ${R[vm_cpu]} |"
echo "| peak RSS when all queryable, MB (bytes per series) | $(mb "${R[rtsdb_hwm0]}") ($(perseries "${R[rtsdb_hwm0]}")) | $(mb "${R[vm_hwm0]}") ($(perseries "${R[vm_hwm0]}")) |"
echo "| peak RSS ${AFTER} s later, MB (bytes per series) | $(mb "${R[rtsdb_hwm1]}") ($(perseries "${R[rtsdb_hwm1]}")) | $(mb "${R[vm_hwm1]}") ($(perseries "${R[vm_hwm1]}")) |"
echo "| RSS ${AFTER} s later, MB | $(mb "${R[rtsdb_rss1]}") | $(mb "${R[vm_rss1]}") |"
echo "| disk, bytes per point, all queryable | ${R[rtsdb_disk0]} | ${R[vm_disk0]} |"
echo "| … of which the write-ahead log | ${R[rtsdb_wal0]} | ${R[vm_wal0]} |"
echo "| disk, bytes per point, ${AFTER} s later | ${R[rtsdb_disk1]} | ${R[vm_disk1]} |"
echo "| … of which the write-ahead log | ${R[rtsdb_wal1]} | ${R[vm_wal1]} |"
echo "| one-series 1-min avg, median of $RUNS, ms (uncached) | ${R[rtsdb_q]} | ${R[vm_q]} |"
