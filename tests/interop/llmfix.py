# SPDX-License-Identifier: MIT
"""Decoder checkpoints for the LLM tests, written here with numpy.

`write_llama2c(path, ...)` writes a llama2.c checkpoint (the legacy layout
karpathy's run.c reads: seven int32 then F32 arrays) with seeded random
weights, sized as asked: a model of any size in the simplest format, to
measure what a stage holds. Its tokenizer can be models/stories260K's
tok512.bin when vocab is 512.

`random_gguf(hf, gguf, gen_args, gtype)` has tools/llm_convert.py write a
random-weight HF checkpoint (`gen` with gen_args) at hf and convert it to
a GGUF of type gtype (`hf-to-gguf --type`) at gguf.
"""

import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

CONVERT = [sys.executable, str(Path(__file__).resolve().parents[2] / "tools" / "llm_convert.py")]
CONVERT_TIMEOUT = 300


def write_llama2c(path, dim, hidden, layers, heads, kv_heads, vocab, seq_len, seed=1,
                  shared=True, scale=0.02):
    """Write the checkpoint array by array (never the whole model in
    memory); returns the bytes of weights written."""
    rng = np.random.default_rng(seed)
    head = dim // heads
    kvd = kv_heads * head
    written = 0
    with open(path, "wb") as f:
        f.write(struct.pack("<7i", dim, hidden, layers, heads, kv_heads,
                            vocab if shared else -vocab, seq_len))

        def put(*shape, ones=False):
            nonlocal written
            a = np.ones(shape, np.float32) if ones else \
                (rng.standard_normal(shape, dtype=np.float32) * scale)
            f.write(a.astype("<f4").tobytes())
            written += a.nbytes

        put(vocab, dim)
        put(layers, dim, ones=True)
        for shape in ((dim, dim), (kvd, dim), (kvd, dim), (dim, dim)):
            for _ in range(layers):
                put(*shape)
        put(layers, dim, ones=True)
        for shape in ((hidden, dim), (dim, hidden), (hidden, dim)):
            for _ in range(layers):
                put(*shape)
        put(dim, ones=True)
        put(seq_len, head)       # the two legacy freq_cis tables
        if not shared:
            put(vocab, dim)
    return written


def random_gguf(hf, gguf, gen_args, gtype):
    """llm_convert.py gen, then hf-to-gguf; the test fails with the
    converter's stderr if either does. Returns gguf."""
    for cmd in (["gen", *gen_args, hf], ["hf-to-gguf", "--type", gtype, hf, gguf]):
        proc = subprocess.run(CONVERT + [str(c) for c in cmd], capture_output=True, text=True,
                              timeout=CONVERT_TIMEOUT)
        if proc.returncode != 0:
            pytest.fail(f"llm_convert.py {cmd[0]}: {proc.stderr}", pytrace=False)
    return gguf
