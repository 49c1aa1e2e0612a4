#!/bin/sh
# SPDX-License-Identifier: MIT
# Sequences in flight against stages (bench/llm_parallel.py --help).
exec /usr/bin/python3 "$(dirname "$0")/llm_parallel.py" "$@"
