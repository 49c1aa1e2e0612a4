#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The main job end to end: the demo's model (8 dense layers 1024x1024,
# batch 4, 32 MiB of weights) run through a tracker on 1, 2 and 3 devices,
# one forward in flight and three, with the weights streamed from the
# coordinator; plus the time from starting `muster run` to its first
# output (devices requested, metadata fetched, stages loaded, one forward).
#
#   bench/cluster.sh [FORWARDS]
set -eu
cd "$(dirname "$0")/.."
MUSTER=${MUSTER_BIN:-build/bin/muster}
PYTHON=${PYTHON:-/usr/bin/python3}
N=${1:-120}
out=$(mktemp -d)
pids=
trap 'kill $pids 2>/dev/null; wait 2>/dev/null; rm -rf "$out"' EXIT INT TERM

port=$($PYTHON -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$MUSTER" model gen --out "$out/model" --widths 1024,1024,1024,1024,1024,1024,1024,1024,1024 \
	--batch "${BATCH:-4}" --act gelu >/dev/null
"$MUSTER" model input --model "$out/model" --out "$out/in.safetensors" >/dev/null
"$MUSTER" tracker --host 127.0.0.1 --port "$port" --port-end $((port + 1)) --silent \
	2>"$out/tracker.log" &
pids="$pids $!"
for i in 1 2 3; do
	"$MUSTER" server --host 127.0.0.1 --port 0 --tracker "127.0.0.1:$port" --key bench \
		--mem 64M --silent 2>"$out/server$i.log" &
	pids="$pids $!"
done
for _ in $(seq 100); do
	"$MUSTER" query --port "$port" --json 2>/dev/null | grep -q '"bench": {"free": 3' && break
	sleep 0.1
done

echo "main job: $N forwards of the demo model (32 MiB, batch ${BATCH:-4}), weights streamed"
printf '  %-8s %-10s %12s %16s\n' devices "in flight" "forwards/s" "first output ms"
for d in 1 2 3; do
	for m in 1 3; do
		"$MUSTER" run --tracker "127.0.0.1:$port" --key bench --devices "$d" \
			--model "$out/model" --input "$out/in.safetensors" --weights stream \
			--repeat "$N" --micro-batches "$m" --json --quiet >"$out/run.json"
		$PYTHON - "$out/run.json" "$d" "$m" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("  %-8s %-10s %12.1f %16.1f" % (sys.argv[2], sys.argv[3], r["forwards_per_s"], r["first_output_ms"]))
PY
	done
done
"$MUSTER" run --model "$out/model" --input "$out/in.safetensors" --repeat "$N" >"$out/local.txt"
echo "  in one process (no network, no split): $(tail -1 "$out/local.txt")"
