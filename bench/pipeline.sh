#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Pipeline benchmark: a 64 MiB tensor frame between two processes against
# raw loopback sockets, N equal stages with M forwards in flight against
# the ideal their compute allows, and the executor against the same
# OpenBLAS calls made directly. Every yardstick is measured in the same run.
#
#   bench/pipeline.sh [extra `muster bench pipeline` options]
set -eu
cd "$(dirname "$0")/.."
MUSTER=${MUSTER_BIN:-build/bin/muster}
exec "$MUSTER" bench pipeline "$@"
