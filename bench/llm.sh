#!/bin/sh
# SPDX-License-Identifier: MIT
#
# LLM generation benchmark: llama.cpp (npm node-llama-cpp 3.21.1) against
# muster on the same random-weight ~1.1B llama GGUF, F32 and Q8_0, 1 and 2
# threads: prefill tok/s for a 256-token prompt, decode tok/s at batch 1,
# time to first token, peak RSS; then muster split over 2 and 3 stages, and
# the ratios. The models are cached in $MUSTER_BENCH_CACHE
# (/var/tmp/muster-bench): 4.4 GB at F32, 1.2 GB at Q8_0. Options and the
# details are in bench/llm.py; --toy runs a tiny model.
#
# With --types (e.g. q4_k_m,q5_k_m,q6_k,iq4_xs,q4_0,q8_0) it compares the two
# per quantized type instead, on files llama.cpp's own quantizer makes from
# one random 0.84B llama, with medians and ranges of --repeat runs and the
# machine's memory-bandwidth limit of decode (bench/llm_types.py).
#
#   bench/llm.sh [--toy] [options of bench/llm.py]
set -eu
cd "$(dirname "$0")/.."
exec "${PYTHON:-/usr/bin/python3}" bench/llm.py "$@"
