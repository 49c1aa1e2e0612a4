#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Kernel benchmark: the decoder's matrix products for each weight type
# (F32, F16, BF16, Q8_0, Q4_0) at a 1B llama's shapes, one token (decode)
# and a 256-token prompt (prefill), on 1 and 2 threads, against OpenBLAS
# sgemv/sgemm on the same F32 weights and the memory read bandwidth, all in
# the same run.
#
#   bench/kern.sh [extra `muster bench kern` options]
set -eu
cd "$(dirname "$0")/.."
MUSTER=${MUSTER_BIN:-build/bin/muster}
exec "$MUSTER" bench kern "$@"
