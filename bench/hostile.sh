#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Hostile peers against every server (docs/internals/budgets.md): a fresh
# server of each kind, its idle RSS, then one flood (tools/hostile.py: a
# client that pipelines requests and never reads a reply) for DURATION
# seconds while another client checks twice a second that it is still
# served; the server's peak RSS next to its idle RSS, and whether the
# other client was served.
#
#   bench/hostile.sh [DURATION_S]
set -eu
cd "$(dirname "$0")/.."
MUSTER=${MUSTER_BIN:-build/bin/muster}
PYTHON=${PYTHON:-/usr/bin/python3}
DURATION=${1:-5}
out=$(mktemp -d)
pid=
trap 'if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi; rm -rf "$out"' EXIT INT TERM

free_port() {
	$PYTHON -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# wait_log FILE REGEX: the first match's port (REGEX ends in "PORT")
wait_port() {
	for _ in $(seq 300); do
		p=$(grep -oE "$2" "$1" 2>/dev/null | head -1 | sed 's/.*://')
		[ -n "$p" ] && { echo "$p"; return 0; }
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	echo "bench: the server did not start; log:" >&2
	cat "$1" >&2
	exit 1
}

# run NAME FLOOD PORT [ARGS]: the flood against the running server ($pid)
run() {
	name=$1 flood=$2 port=$3
	shift 3
	$PYTHON tools/hostile.py "$flood" --port "$port" --pid "$pid" --seconds "$DURATION" "$@" |
		$PYTHON -c 'import json,sys; r=json.load(sys.stdin); r["server"]=sys.argv[1]; print(json.dumps(r))' "$name" \
		>>"$out/results"
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=
}

"$MUSTER" model gen --out "$out/model" --widths 16,16 >/dev/null

for flood in tracker-ping; do
	"$MUSTER" tracker --host 127.0.0.1 --port 0 2>"$out/log" &
	pid=$!
	run tracker $flood "$(wait_port "$out/log" 'Bind to [0-9.]+:[0-9]+')"
done
for flood in store-ping store-watch-fanout store-watch-keys; do
	"$MUSTER" store --host 127.0.0.1 --port 0 2>"$out/log" &
	pid=$!
	run store $flood "$(wait_port "$out/log" 'Bind to [0-9.]+:[0-9]+')"
done
for flood in stage-info stage-forward; do
	"$MUSTER" stage --model "$out/model" --stage 0 --of 1 --port 0 >"$out/log" 2>&1 &
	pid=$!
	run stage $flood "$(wait_port "$out/log" 'serving on [0-9.]+:[0-9]+')"
done
# holders (issue 22): 3 connections of 70 bytes declaring 300 MiB each; 64
# connections that idle after one INFO; one connection that opens every
# sequence of an LLM stage; 16 idle holders of a --metrics port
"$MUSTER" stage --model "$out/model" --stage 0 --of 1 --port 0 >"$out/log" 2>&1 &
pid=$!
run stage stage-declare "$(wait_port "$out/log" 'serving on [0-9.]+:[0-9]+')" --conns 3
"$MUSTER" stage --model "$out/model" --stage 0 --of 1 --port 0 >"$out/log" 2>&1 &
pid=$!
run stage stage-idle "$(wait_port "$out/log" 'serving on [0-9.]+:[0-9]+')"
"$MUSTER" stage --model models/stories260K/stories260K.bin --stage 0 --of 1 --port 0 \
	--threads 1 >"$out/log" 2>&1 &
pid=$!
run "llm stage" stage-seqs "$(wait_port "$out/log" 'serving on [0-9.]+:[0-9]+')"
"$MUSTER" stage --model "$out/model" --stage 0 --of 1 --port 0 --metrics 127.0.0.1:0 \
	>"$out/log" 2>&1 &
pid=$!
run metrics metrics-idle "$(wait_port "$out/log" 'metrics on http://[0-9.]+:[0-9]+')"
# an md agent's P2P listener: it publishes to itself, then holds
mport=$(free_port)
"$MUSTER" md publish --name hostile --value metadata --listen-port "$mport" \
	--peer "127.0.0.1:$mport" --hold 2>"$out/log" &
pid=$!
wait_port "$out/log" 'holding it' >/dev/null 2>&1 || true
run "md P2P" md-send "$mport"
# the device server: a session that pipelines INFO and reads nothing, and
# the md listener it publishes itself through
"$MUSTER" server --host 127.0.0.1 --port 0 >"$out/log" 2>&1 &
pid=$!
dport=$(wait_port "$out/log" 'Bind to [0-9.]+:[0-9]+')
run device device-info "$dport"
"$MUSTER" server --host 127.0.0.1 --port 0 >"$out/log" 2>&1 &
pid=$!
run device device-session "$(wait_port "$out/log" 'Bind to [0-9.]+:[0-9]+')"
"$MUSTER" server --host 127.0.0.1 --port 0 >"$out/log" 2>&1 &
pid=$!
run "device md" md-send "$(wait_port "$out/log" 'P2P listener on [0-9.]+:[0-9]+')"

# muster serve: idle connections that reconnect when closed, and 32 MB
# chat bodies pipelined by a client that reads nothing
for flood in serve-idle-holders serve-big-body; do
	"$MUSTER" serve --model models/stories260K/stories260K.gguf --listen 127.0.0.1:0 \
		--chat-template chatml --max-body 64M --threads 1 >"$out/log" 2>&1 &
	pid=$!
	run serve $flood "$(wait_port "$out/log" 'listening on http://[0-9.]+:[0-9]+')"
done

$PYTHON - "$out/results" "$DURATION" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
mib = lambda kib: f"{kib / 1024:.1f} MiB"
print(f"== hostile peers for {sys.argv[2]} s: one client pipelining requests and reading nothing,"
      " or holders that take memory or slots and say nothing (the -declare, -idle, -seqs and"
      " -session floods)")
print(f"  {'server':<11} {'flood':<20} {'idle RSS':>10} {'peak RSS':>10} {'grown':>10}  other client")
for r in rows:
    served = r["probes"] - len(r["probe_failures"])
    other = (f"served {served}/{r['probes']}, slowest {r['slowest_probe_s']:.2f} s"
             + ("" if not r["probe_failures"] else f"; failed: {r['probe_failures'][0][:60]}"))
    print(f"  {r['server']:<11} {r['flood']:<20} {mib(r['idle_kib']):>10} {mib(r['peak_kib']):>10} "
          f"{mib(r['peak_kib'] - r['idle_kib']):>10}  {other}")
PY
