#!/usr/bin/env bash
# What authentication costs a request (issue 36: a token check must not
# show beyond noise). Starts two TSDs on fresh data directories, one with
# tsd.core.authentication.enable and a read user, one without, and sends
# each REQUESTS (default 20000) keep-alive `GET /api/version` requests
# (the cheapest endpoint, so the check's share is the largest it can be)
# from CLIENTS (default 4) Python connections, in turns, ROUNDS (default
# 3) times. Prints, per round and TSD, the TSD's CPU microseconds per
# request (from /proc: the server's cost, not the client's) and the
# client's wall time per request. The first request of each connection
# with auth on pays one argon2 hash; every later one a cache lookup.
#
#   bash bench/auth-cost.sh            # builds the release binary
#   TSDB=/path/to/tsdb REQUESTS=50000 bash bench/auth-cost.sh
set -euo pipefail

REQUESTS=${REQUESTS:-20000}
CLIENTS=${CLIENTS:-4}
ROUNDS=${ROUNDS:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
cd "$ROOT"
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
if [ -z "${TSDB:-}" ]; then
  cargo build --release --quiet --bin tsdb
  TSDB=$TARGET/release/tsdb
fi

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

TOKEN=$("$TSDB" --data-dir "$WORK/on" auth add bench --roles read 2>/dev/null)
declare -A PORT PID
for name in off on; do
  PORT[$name]=$(free_port)
  args=(tsd --port "${PORT[$name]}" --data-dir "$WORK/$name")
  conf="$WORK/$name.conf"
  if [ "$name" = on ]; then
    echo "tsd.core.authentication.enable = true" >"$conf"
  else
    : >"$conf"
  fi
  RUST_LOG=warn "$TSDB" --config "$conf" "${args[@]}" >"$WORK/$name.log" 2>&1 &
  PID[$name]=$!
  PIDS+=($!)
  wait_port "${PORT[$name]}"
done

# CLIENTS threads, each one keep-alive connection, REQUESTS in all;
# prints the wall seconds.
load() { # port, token ("" for none)
  python3 - "$1" "$2" "$REQUESTS" "$CLIENTS" <<'PY'
import http.client, sys, threading, time
port, token, total, clients = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
headers = {"Authorization": "Bearer " + token} if token else {}
def run(n):
    c = http.client.HTTPConnection("127.0.0.1", port)
    for _ in range(n):
        c.request("GET", "/api/version", headers=headers)
        r = c.getresponse(); r.read()
        assert r.status == 200, r.status
    c.close()
threads = [threading.Thread(target=run, args=(total // clients,)) for _ in range(clients)]
t = time.time()
for th in threads: th.start()
for th in threads: th.join()
print(f"{time.time() - t:.3f}")
PY
}

printf '%-6s %-5s %14s %14s\n' round auth 'tsd_cpu_us/req' 'wall_us/req'
for round in $(seq 1 "$ROUNDS"); do
  for name in off on; do
    token=""
    [ "$name" = on ] && token=$TOKEN
    before=$(cpu_seconds "${PID[$name]}")
    wall=$(load "${PORT[$name]}" "$token")
    after=$(cpu_seconds "${PID[$name]}")
    awk -v r="$round" -v n="$name" -v b="$before" -v a="$after" -v w="$wall" -v q="$REQUESTS" \
      'BEGIN{printf "%-6s %-5s %14.2f %14.2f\n", r, n, (a-b)*1e6/q, w*1e6/q}'
  done
done
