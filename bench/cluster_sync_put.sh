#!/usr/bin/env bash
# Latency of sequential `sync` puts on one cluster TSD (docs/scale-out.md
# "The read cache": what announcing writes into past hours costs a `sync` put):
#
#   bash bench/cluster_sync_put.sh CONF BIN TAG    # CONF from `scripts/cluster up`
#   HOURS=old bash bench/cluster_sync_put.sh ...   # late points, into 2016
#
# BIN's TSD takes N+20 (N=200) `sync` puts over 50 series, one at a time on one
# kept-alive connection, into a database of its own; prints p50 and p90 in ms of
# the last N. The points are of the last minutes (HOURS=now, the default) or of
# 2016-01-01 (HOURS=old: each flush announces its rows to the other TSDs).
# Alternate the builds compared: a shared machine's load moves.
set -euo pipefail
CONF=$1 BIN=$2 TAG=$3 N=${N:-200} HOURS=${HOURS:-now}
. "$(cd "$(dirname "$0")/.." && pwd)/bench/lib.sh"
WORK=$(mktemp -d /tmp/syncput.XXXXXX)
PORT=$(free_port)
DB=sp_${TAG}_$$
grep -v '^tsd.storage.clickhouse.database' "$CONF" > "$WORK/c.conf"
echo "tsd.storage.clickhouse.database = $DB" >> "$WORK/c.conf"
EP=$(sed -n 's/^tsd.storage.clickhouse.endpoints *= *//p' "$CONF" | cut -d, -f1)
"$BIN" --config "$WORK/c.conf" tsd --port "$PORT" --data-dir "$WORK/d" --auto-metric > "$WORK/log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
wait_port "$PORT"
python3 - "$PORT" "$N" "$TAG" "$HOURS" <<'PY'
import http.client, json, sys, time
port, n, tag, hours = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
first = int(time.time()) - n - 60 if hours == "now" else 1451606400
c = http.client.HTTPConnection("127.0.0.1", port)
lat = []
for i in range(n + 20):
    body = json.dumps({"metric": "sp.m", "timestamp": first + i, "value": i, "tags": {"host": "h%d" % (i % 50)}})
    t = time.perf_counter()
    c.request("POST", "/api/put?sync", body, {"Content-Type": "application/json"})
    r = c.getresponse(); r.read()
    assert r.status == 204, r.status
    if i >= 20: lat.append((time.perf_counter() - t) * 1000)
lat.sort()
print(f"{tag} sync put ms ({hours} hours): p50 {lat[len(lat)//2]:.1f} p90 {lat[int(len(lat)*0.9)]:.1f} ({n + 20} puts over 50 series, the first 20 not counted)")
PY
kill $PID; wait $PID 2>/dev/null || true
curl -sS "$EP/" --data-binary "DROP DATABASE $DB ON CLUSTER $(sed -n 's/^tsd.storage.clickhouse.cluster *= *//p' "$CONF")" > /dev/null
rm -rf "$WORK"
