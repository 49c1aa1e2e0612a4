#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Install the Debian packages that muster's build, demo and tests need, but
# only the ones that are missing: when everything is there this is a few
# dpkg queries and no network traffic.
#
#   scripts/deps.sh build    compiler, C library headers, CMake and the
#                            libraries libmuster links (all `make demo` needs)
#   scripts/deps.sh test     build + cmocka, pytest, torch, torchvision, etcd,
#                            numpy, onnx and its backend test data, npm,
#                            clang's fuzzer runtime, prometheus (a real
#                            scraper for the metrics tests), debootstrap (for
#                            scripts/fresh-check.sh), systemd (systemd-analyze
#                            verify of the units), openssl (test certificates),
#                            man-db (the man page test renders each page)
#   scripts/deps.sh packaging  build + what `make check-packaging` needs:
#                            dpkg-buildpackage, debhelper, dh-python,
#                            lintian, debootstrap (only that target uses it)
#
# Runs apt-get as root, or through sudo when we are not root.
set -eu

build_pkgs="gcc libc6-dev make cmake pkg-config libuv1-dev libcjson-dev libcurl4-openssl-dev libopenblas-dev libpcre2-dev libutf8proc-dev libssl-dev libh2o-dev libsystemd-dev"
test_pkgs="$build_pkgs curl libcmocka-dev python3 python3-pytest python3-torch python3-numpy python3-onnx etcd-server etcd-client clang libclang-rt-14-dev prometheus debootstrap systemd openssl"
# ONNX's backend test suite (tests/interop/test_onnx_suite.py) and the
# torchvision CNNs the model tests export
test_pkgs="$test_pkgs libonnx-testdata python3-torchvision man-db"
# debian/: building the .debs, checking them, installing them in a fresh root
packaging_pkgs="$build_pkgs dpkg-dev debhelper dh-python python3 lintian debootstrap util-linux"

case "${1:-test}" in
build) want=$build_pkgs ;;
test) want=$test_pkgs ;;
packaging) want=$packaging_pkgs ;;
*)
	echo "usage: $0 [build|test|packaging]" >&2
	exit 2
	;;
esac

missing=""
for p in $want; do
	# "install ok installed" is the only state in which the files are there.
	st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	[ "$st" = "install ok installed" ] || missing="$missing $p"
done
# The tests fetch a real ONNX model from the npm registry with `npm pack`:
# any npm will do (Debian's, or one that came with another Node.js).
if [ "${1:-test}" = test ] && ! command -v npm >/dev/null 2>&1; then
	missing="$missing npm"
fi
[ -z "$missing" ] && exit 0

echo "deps: installing missing Debian packages:$missing" >&2
if [ "$(id -u)" -eq 0 ]; then
	sudo=""
elif command -v sudo >/dev/null 2>&1; then
	sudo="sudo"
else
	echo "deps: need root (or sudo) to install:$missing" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# apt's own words go to a file; what a person wants from them (how many
# packages, how much to download) is printed after.
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# Refresh the package lists only when an install fails on stale ones; a fresh
# container often has none at all, so try the cheap path first.
# shellcheck disable=SC2086
if ! $sudo apt-get install -y -q --no-install-recommends $missing >"$out" 2>&1; then
	$sudo apt-get update -q >/dev/null
	if ! $sudo apt-get install -y -q --no-install-recommends $missing >"$out" 2>&1; then
		cat "$out" >&2
		echo "deps: apt-get install failed (its output is above)" >&2
		exit 1
	fi
fi
grep -E 'newly installed|^Need to get' "$out" | sed 's/^/deps: /' >&2 || true
echo "deps: done" >&2
