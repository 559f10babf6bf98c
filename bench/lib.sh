# Helpers the bench scripts share; sourced, not run:
#   . "$ROOT/bench/lib.sh"

# Where examples/tsbs's data begins (its START): 2016-01-01T00:00Z.
TSBS_START=1451606400
# A free TCP port on loopback.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Waits up to 60 s for a listener on loopback port $1.
wait_port() { for _ in $(seq 1 600); do (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 never opened" >&2; return 1; }
# $1 percent-encoded for a query string (every reserved character).
urlenc() { python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"; }
# Sends signal $1 to pid $2 and waits up to 60 s for it to end.
stop_pid() { kill "-$1" "$2" 2>/dev/null || true; for _ in $(seq 1 600); do kill -0 "$2" 2>/dev/null || return 0; sleep 0.1; done; }
# Seconds since the epoch, with nanoseconds.
now() { date +%s.%N; }
# utime+stime of pid $1, in seconds.
cpu_seconds() { awk -v t="$(getconf CLK_TCK)" '{printf "%.3f", ($14+$15)/t}' "/proc/$1/stat"; }
# Bytes on disk under the paths given (`du`), summed.
disk_bytes() { du -s --block-size=1 "$@" | awk '{s+=$1} END {print s}'; }
# Sleeps until $2 seconds after moment $1 (a `now`), if that is still ahead.
sleep_until_after() { sleep "$(awk -v a="$1" -v b="$(now)" -v w="$2" 'BEGIN{d=w-(b-a); print (d>0?d:0)}')"; }
# Median of $RUNS answers to GET $2 on loopback port $1, in ms ($TSBS query).
median_of() { "$TSBS" query "127.0.0.1:$1" "$2" "$RUNS" | awk '{print $2}'; }
# Installs Debian package $2 unless command $1 is there (root, or sudo).
need_package() {
  command -v "$1" >/dev/null && return 0
  if [ "$(id -u)" = 0 ]; then apt-get install -y "$2" >/dev/null; else sudo apt-get install -y "$2" >/dev/null; fi
}
