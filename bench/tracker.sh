#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Tracker benchmark, ours against TVM's Python tracker, in one run with the
# same load generator (`muster bench tracker`), printing the ratios.
#
# TVM cannot be installed here, so "TVM's Python tracker" is the reference
# tracker in tests/interop/tvmpeer.py: written from the protocol spec to
# behave as TVM's does (single-threaded selector loop, JSON per message,
# the same scheduler), which is what its performance depends on. Both run
# with per-message logging off (TVM's tracker logs none; ours --silent).
#
#   bench/tracker.sh [DURATION_S] [SCALE_CONNECTIONS]
set -eu
cd "$(dirname "$0")/.."
MUSTER=${MUSTER_BIN:-build/bin/muster}
PYTHON=${PYTHON:-/usr/bin/python3}
DURATION=${1:-10}
SCALE=${2:-10000}
out=$(mktemp -d)
mpid=; ppid=
trap 'kill $mpid $ppid 2>/dev/null; rm -rf "$out"' EXIT INT TERM

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

free_port() {
	$PYTHON -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_port() {
	for _ in $(seq 100); do
		$PYTHON -c "import socket,sys; socket.create_connection(('127.0.0.1',$1),1)" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "bench: nothing listens on $1" >&2
	exit 1
}

start_ref() { # $1 = extra flag for the reference tracker
	pport=$(free_port)
	$PYTHON tests/interop/tvmpeer.py tracker --host 127.0.0.1 --port "$pport" \
		--port-end $((pport + 1)) --silent $1 &
	ppid=$!
	wait_port "$pport"
}

mport=$(free_port)
$MUSTER tracker --host 127.0.0.1 --port "$mport" --port-end $((mport + 1)) --silent &
mpid=$!
wait_port "$mport"
ppid=

echo "== muster tracker (pid $mpid)"
$MUSTER bench tracker --target 127.0.0.1:"$mport" --pid "$mpid" --duration "$DURATION" --scale "$SCALE" --json | tee "$out/m"

# As TVM's tracker really runs: no TCP_NODELAY, and it sends each reply's
# length and body in two send() calls, so Nagle's algorithm holds the body
# until the client's delayed ACK (~40 ms). The scale phase would take
# SCALE x 2 x 44 ms at that pace, so this run measures the grant cycle only.
# (The bench runs the scale phase first, so each tracker's RSS is measured
# from a fresh start.)
start_ref ""
echo "== reference TVM Python tracker, as TVM runs it (pid $ppid)"
$MUSTER bench tracker --target 127.0.0.1:"$pport" --pid "$ppid" --duration "$DURATION" --scale 0 --json | tee "$out/p"
kill "$ppid"; wait "$ppid" 2>/dev/null || true

# The same Python event loop with TCP_NODELAY: what its design costs once the
# Nagle stall is taken out, for a like-for-like look at CPU and memory.
start_ref "--nodelay"
echo "== reference TVM Python tracker with TCP_NODELAY (pid $ppid)"
$MUSTER bench tracker --target 127.0.0.1:"$pport" --pid "$ppid" --duration "$DURATION" --scale "$SCALE" --json | tee "$out/q"

$PYTHON - "$out/m" "$out/p" "$out/q" <<'PY'
import json, sys
load = lambda f: {d["phase"]: d for d in map(json.loads, open(f))}
m, p, q = load(sys.argv[1]), load(sys.argv[2]), load(sys.argv[3])
def row(name, a, b, unit, better):
    ratio = a / b if b else float("inf")
    print(f"  {name:<30} muster {a:>11.3f} {unit:<4} python {b:>11.3f} {unit:<4} ratio {ratio:9.3f} ({better})")
for title, ref in (("TVM's Python tracker as it runs", p), ("Python tracker with TCP_NODELAY", q)):
    print(f"== ratios, muster / {title}")
    row("grants per second", m["cycle"]["grants_per_s"], ref["cycle"]["grants_per_s"], "/s", "higher is better")
    row("grant latency p50", m["cycle"]["p50_ms"], ref["cycle"]["p50_ms"], "ms", "lower is better")
    row("grant latency p99", m["cycle"]["p99_ms"], ref["cycle"]["p99_ms"], "ms", "lower is better")
    row("RSS after the cycle", m["cycle"]["rss_after_kib"] / 1024, ref["cycle"]["rss_after_kib"] / 1024, "MiB", "lower is better")
    if "scale" in m and "scale" in ref:
        ms, rs = m["scale"], ref["scale"]
        n = ms["connections"]
        kb = lambda d: (d["rss_after_kib"] - d["rss_before_kib"]) / n
        row(f"RSS per server ({n} conns)", kb(ms), kb(rs), "KiB", "lower is better")
        row("RSS total after", ms["rss_after_kib"] / 1024, rs["rss_after_kib"] / 1024, "MiB", "lower is better")
        row("register time", ms["register_s"], rs["register_s"], "s", "lower is better")
        row("SUMMARY latency", ms["summary_ms"], rs["summary_ms"], "ms", "lower is better")
PY
