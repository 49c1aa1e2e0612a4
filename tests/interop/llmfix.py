# SPDX-License-Identifier: MIT
"""Decoder checkpoints for the LLM tests, written here with numpy.

`write_llama2c(path, ...)` writes a llama2.c checkpoint (the legacy layout
karpathy's run.c reads: seven int32 then F32 arrays) with seeded random
weights, sized as asked: a model of any size in the simplest format, to
measure what a stage holds. Its tokenizer can be models/stories260K's
tok512.bin when vocab is 512.
"""

import struct

import numpy as np


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
