#!/bin/sh
# SPDX-License-Identifier: MIT
#
# TCPStore benchmark: torch 1.13's own server (Debian's python3-torch, the
# real peer) against `muster store`, in one run, with the same load
# generator (`muster bench store`, v1 dialect: what torch 1.13's server
# speaks), at 1, 64 and 1,024 clients, plus a 10,000-client rendezvous;
# then the ratios.
#
#   bench/store.sh [DURATION_S] [RENDEZVOUS_CLIENTS]
set -eu
cd "$(dirname "$0")/.."
MUSTER=${MUSTER_BIN:-build/bin/muster}
PYTHON=${PYTHON:-/usr/bin/python3}
DURATION=${1:-10}
RDV=${2:-10000}
out=$(mktemp -d)
mpid=; tpid=
trap 'kill $mpid $tpid 2>/dev/null; rm -rf "$out"' EXIT INT TERM
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

free_port() {
	$PYTHON -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_port() {
	for _ in $(seq 300); do
		$PYTHON -c "import socket; socket.create_connection(('127.0.0.1',$1),1)" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "bench: nothing listens on $1" >&2
	exit 1
}

# Fresh servers for every measurement, so keys and connections of one run
# never weigh on the next.
start_servers() {
	kill $mpid $tpid 2>/dev/null || true
	wait $mpid $tpid 2>/dev/null || true
	mport=$(free_port)
	$MUSTER store --host 127.0.0.1 --port "$mport" --silent &
	mpid=$!
	tport=$(free_port)
	$PYTHON -c "
import datetime, signal, torch.distributed as dist
s = dist.TCPStore('127.0.0.1', $tport, is_master=True, timeout=datetime.timedelta(seconds=3600))
signal.pause()" &
	tpid=$!
	wait_port "$mport"
	wait_port "$tport"
}

for c in 1 64 1024; do
	start_servers
	echo "== $c clients: torch 1.13 server"
	$MUSTER bench store --target 127.0.0.1:"$tport" --clients "$c" --duration "$DURATION" --json | tee "$out/t$c"
	echo "== $c clients: muster store"
	$MUSTER bench store --target 127.0.0.1:"$mport" --clients "$c" --duration "$DURATION" --json | tee "$out/m$c"
done
start_servers
echo "== rendezvous of $RDV clients: torch 1.13 server"
$MUSTER bench store --target 127.0.0.1:"$tport" --rendezvous "$RDV" --json | tee "$out/trdv"
echo "== rendezvous of $RDV clients: muster store"
$MUSTER bench store --target 127.0.0.1:"$mport" --rendezvous "$RDV" --json | tee "$out/mrdv"

$PYTHON - "$out" <<'PY'
import json, os, sys
d = sys.argv[1]
load = lambda f: json.load(open(os.path.join(d, f)))
def row(name, m, t, unit, better):
    print(f"  {name:<24} muster {m:>12.3f} {unit:<4} torch {t:>12.3f} {unit:<4} ratio {m / t if t else float('inf'):7.2f} ({better})")
print("== ratios, muster store / torch 1.13 TCPStore server")
for c in (1, 64, 1024):
    m, t = load(f"m{c}"), load(f"t{c}")
    print(f"{c} clients:")
    row("ops per second", m["ops_per_s"], t["ops_per_s"], "/s", "higher is better")
    for op in ("set", "get", "add"):
        for p in ("p50", "p99"):
            k = f"{op}_{p}_ms"
            row(f"{op} {p}", m[k], t[k], "ms", "lower is better")
m, t = load("mrdv"), load("trdv")
print(f"rendezvous of {m['clients']} clients:")
row("all released after", m["total_s"], t["total_s"], "s", "lower is better")
PY
