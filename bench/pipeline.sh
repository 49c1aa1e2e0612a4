#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Pipeline benchmark: a 64 MiB tensor frame between two processes against
# raw loopback sockets, N equal stages with M forwards in flight against
# the ideal their compute allows, the executor against the same OpenBLAS
# calls made directly, and torchvision's resnet18 (seeded random weights,
# exported and converted once into build/bench-resnet18) against torch's
# own forward on the same thread count. Every yardstick is measured in the
# same run.
#
#   bench/pipeline.sh [extra `muster bench pipeline` options]
set -eu
cd "$(dirname "$0")/.."
MUSTER=${MUSTER_BIN:-build/bin/muster}
RESNET=${MUSTER_RESNET18_DIR:-build/bench-resnet18}
if [ ! -f "$RESNET/model.json" ] || [ ! -f "$RESNET/input.safetensors" ]; then
	/usr/bin/python3 tools/torchbench.py export "$RESNET"
fi
exec "$MUSTER" bench pipeline --resnet18 "$RESNET" --torch-bench tools/torchbench.py "$@"
