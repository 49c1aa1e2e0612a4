#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Metadata exchange benchmark: fetch latency and fetches/s for 1 KiB and
# 1 MiB blobs through etcd (a real etcd 3.4 member), muster's TCPStore and
# P2P; then 256 agents publishing and all fetching each other through etcd
# and through the store.
#
#   bench/md.sh [FETCHES] [AGENTS]
set -eu
cd "$(dirname "$0")/.."
MUSTER=${MUSTER_BIN:-build/bin/muster}
PYTHON=${PYTHON:-/usr/bin/python3}
FETCHES=${1:-1000}
AGENTS=${2:-256}
dir=$(mktemp -d)
epid=; spid=
trap 'kill $epid $spid 2>/dev/null; rm -rf "$dir"' EXIT INT TERM
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

free_port() {
	$PYTHON -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_port() {
	for _ in $(seq 100); do
		$PYTHON -c "import socket; socket.create_connection(('127.0.0.1',$1),1)" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "bench: nothing listens on $1" >&2
	exit 1
}

cport=$(free_port); pport=$(free_port); sport=$(free_port)
/usr/bin/etcd --name bench --data-dir "$dir/etcd" \
	--listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
	--listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
	--initial-cluster "bench=http://127.0.0.1:$pport" >"$dir/etcd.log" 2>&1 &
epid=$!
$MUSTER store --host 127.0.0.1 --port "$sport" --silent &
spid=$!
wait_port "$cport"
wait_port "$sport"
sleep 1 # a leader

etcd="--backend etcd --endpoint http://127.0.0.1:$cport"
store="--backend tcpstore --endpoint 127.0.0.1:$sport"
for b in "$etcd" "$store" "--backend p2p"; do
	# shellcheck disable=SC2086
	$MUSTER bench md $b --blob-bytes 1024 --fetches "$FETCHES"
	# shellcheck disable=SC2086
	$MUSTER bench md $b --blob-bytes 1024 --fetches "$((FETCHES / 4))" --fetchers 4
	# shellcheck disable=SC2086
	$MUSTER bench md $b --blob-bytes 1048576 --fetches "$((FETCHES / 10))"
done
# shellcheck disable=SC2086
$MUSTER bench md $etcd --agents "$AGENTS"
# shellcheck disable=SC2086
$MUSTER bench md $store --agents "$AGENTS"
