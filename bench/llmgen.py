#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Write a random-weight llama-architecture GGUF for benchmarks.

usage: llmgen.py --out FILE.gguf --dim D --layers L --hidden H --heads N
                 --kv-heads K --vocab V [--type f32|q8_0] [--seed S]
                 [--ctx C] [--untied | --tied]

A stand-in until the project's model generator (tools/llm_convert.py `gen`)
lands: bench/llm.py calls this to make the model it runs in llama.cpp and in
muster. Only what a benchmark needs: the `llama` architecture, F32 or Q8_0
matrices (norms stay F32, as llama.cpp's quantizer leaves them), and an
embedded SentencePiece-style vocabulary that llama.cpp accepts.

The weights are N(0, 0.02) from numpy's PCG64 seeded per tensor (seed and
tensor index), norms are 1, so the same seed gives the same F32 weights, and
the Q8_0 file holds those weights quantized (per block of 32: d = max|x|/127
stored as F16, q = round(x/d); numpy rounds ties to even, llama.cpp's own
quantizer away from zero, so the files need not be byte-identical to
`llama-quantize` output; both engines read the same file, which is what the
benchmark needs). Tensors are generated and written a chunk of rows at a
time, so memory stays at a few hundred MB whatever the model's size.

The vocabulary: <unk>, <s>, </s>, the 256 byte pieces <0x00>..<0xFF>, then
"▁", the printable ASCII characters, and "▁x", "xy", "▁xy", "xyz", "▁xyz"
over lowercase letters, in that order, until V pieces (score -rank, so
earlier pieces merge first). "a a a" therefore tokenizes to one "▁a" per
word, which is how bench/llm.py builds a prompt of an exact length.

No Debian package writes GGUF (Debian 12 has no python3-gguf), and the
format is a short header of typed key/values, tensor infos and aligned data
(../shared/spec/llm-formats.md), so it is written here directly.
"""

import argparse
import itertools
import os
import string
import struct
import sys

import numpy as np

ALIGN = 32
GGUF_VERSION = 3
T_UINT32, T_INT32, T_FLOAT32, T_STRING, T_ARRAY = 4, 5, 6, 8, 9
GGML_F32, GGML_Q8_0 = 0, 8
FILE_TYPE = {"f32": 0, "q8_0": 7}       # llama_ftype: ALL_F32, MOSTLY_Q8_0
QK8_0 = 32
ROWS_PER_CHUNK_BYTES = 64 << 20         # generate about this many F32 bytes at a time
WEIGHT_STD = 0.02


def vocabulary(size):
    """(pieces, scores, token types) for `size` tokens, as described above."""
    if size < 3 + 256 + 1:
        raise ValueError(f"--vocab must be at least {3 + 256 + 1}")
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256          # unknown, control, control, byte
    scores = [0.0] * len(pieces)
    low = string.ascii_lowercase

    def words():
        yield "\u2581"
        for c in string.printable[:94]:    # digits, letters, punctuation
            yield c
        for n in itertools.count(1):
            for combo in itertools.product(low, repeat=n):
                w = "".join(combo)
                if n > 1:
                    yield w
                yield "\u2581" + w

    for rank, w in enumerate(words()):
        if len(pieces) == size:
            break
        pieces.append(w)
        types.append(1)                    # normal
        scores.append(-float(rank))
    return pieces, scores, types


def tensors(a):
    """(name, shape as GGUF dims innermost first, is_norm) in llama.cpp's order."""
    kv_dim = a.dim // a.heads * a.kv_heads
    out = [("token_embd.weight", (a.dim, a.vocab), False),
           ("output_norm.weight", (a.dim,), True)]
    if not a.tied:
        out.append(("output.weight", (a.dim, a.vocab), False))
    for i in range(a.layers):
        p = f"blk.{i}."
        out += [(p + "attn_norm.weight", (a.dim,), True),
                (p + "attn_q.weight", (a.dim, a.dim), False),
                (p + "attn_k.weight", (a.dim, kv_dim), False),
                (p + "attn_v.weight", (a.dim, kv_dim), False),
                (p + "attn_output.weight", (a.dim, a.dim), False),
                (p + "ffn_norm.weight", (a.dim,), True),
                (p + "ffn_gate.weight", (a.dim, a.hidden), False),
                (p + "ffn_up.weight", (a.dim, a.hidden), False),
                (p + "ffn_down.weight", (a.hidden, a.dim), False)]
    return out


def ggml_type(a, is_norm):
    return GGML_F32 if is_norm or a.type == "f32" else GGML_Q8_0


def nbytes(dims, gtype):
    n = 1
    for d in dims:
        n *= d
    return n * 4 if gtype == GGML_F32 else n // QK8_0 * (2 + QK8_0)


def pad(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


class Writer:
    def __init__(self, f):
        self.f = f

    def raw(self, fmt, *v):
        self.f.write(struct.pack("<" + fmt, *v))

    def string(self, s):
        b = s.encode("utf-8")
        self.raw("Q", len(b))
        self.f.write(b)

    def kv(self, key, vtype, value):
        self.string(key)
        self.raw("I", vtype)
        if vtype == T_STRING:
            self.string(value)
        elif vtype == T_ARRAY:
            etype, items = value
            self.raw("IQ", etype, len(items))
            if etype == T_STRING:
                for s in items:
                    self.string(s)
            else:
                fmt = {T_INT32: "i", T_FLOAT32: "f"}[etype]
                self.f.write(struct.pack(f"<{len(items)}{fmt}", *items))
        else:
            self.raw({T_UINT32: "I", T_INT32: "i", T_FLOAT32: "f"}[vtype], value)


def metadata(a):
    pieces, scores, types = vocabulary(a.vocab)
    head_dim = a.dim // a.heads
    return [
        ("general.architecture", T_STRING, "llama"),
        ("general.name", T_STRING, f"muster-bench random llama d{a.dim} l{a.layers}"),
        ("general.file_type", T_UINT32, FILE_TYPE[a.type]),
        ("llama.context_length", T_UINT32, a.ctx),
        ("llama.embedding_length", T_UINT32, a.dim),
        ("llama.block_count", T_UINT32, a.layers),
        ("llama.feed_forward_length", T_UINT32, a.hidden),
        ("llama.attention.head_count", T_UINT32, a.heads),
        ("llama.attention.head_count_kv", T_UINT32, a.kv_heads),
        ("llama.attention.layer_norm_rms_epsilon", T_FLOAT32, 1e-5),
        ("llama.rope.dimension_count", T_UINT32, head_dim),
        ("llama.rope.freq_base", T_FLOAT32, 10000.0),
        ("tokenizer.ggml.model", T_STRING, "llama"),
        ("tokenizer.ggml.tokens", T_ARRAY, (T_STRING, pieces)),
        ("tokenizer.ggml.scores", T_ARRAY, (T_FLOAT32, scores)),
        ("tokenizer.ggml.token_type", T_ARRAY, (T_INT32, types)),
        ("tokenizer.ggml.unknown_token_id", T_UINT32, 0),
        ("tokenizer.ggml.bos_token_id", T_UINT32, 1),
        ("tokenizer.ggml.eos_token_id", T_UINT32, 2),
    ]


def quantize_q8_0(x):
    """Q8_0 blocks (2-byte F16 scale + 32 int8) of a float32 array whose
    size is a multiple of 32, as a flat uint8 array."""
    blocks = x.reshape(-1, QK8_0)
    d = np.abs(blocks).max(axis=1) / 127.0
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d > 0)
    q = np.rint(blocks * inv[:, None]).astype(np.int8)
    out = np.empty((blocks.shape[0], 2 + QK8_0), dtype=np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.reshape(-1)


def write_tensor(f, a, index, dims, is_norm):
    gtype = ggml_type(a, is_norm)
    if is_norm:
        f.write(np.ones(dims[0], dtype="<f4").tobytes())
        return
    cols, rows = dims
    rng = np.random.default_rng([a.seed, index])
    step = max(1, ROWS_PER_CHUNK_BYTES // (cols * 4))
    for r0 in range(0, rows, step):
        n = min(step, rows - r0)
        x = rng.standard_normal((n, cols), dtype=np.float32)
        x *= np.float32(WEIGHT_STD)
        f.write(x.astype("<f4").tobytes() if gtype == GGML_F32 else quantize_q8_0(x).tobytes())


def write(a):
    specs = tensors(a)
    if a.type == "q8_0":
        bad = [n for n, d, norm in specs if not norm and d[0] % QK8_0]
        if bad:
            raise ValueError(f"Q8_0 needs rows that are a multiple of {QK8_0}: {bad[0]}")
    tmp = f"{a.out}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        w = Writer(f)
        meta = metadata(a)
        w.raw("4sIQQ", b"GGUF", GGUF_VERSION, len(specs), len(meta))
        for key, vtype, value in meta:
            w.kv(key, vtype, value)
        offset = 0
        for name, dims, is_norm in specs:
            gtype = ggml_type(a, is_norm)
            w.string(name)
            w.raw("I", len(dims))
            for d in dims:
                w.raw("Q", d)
            w.raw("IQ", gtype, offset)
            offset = pad(offset + nbytes(dims, gtype))
        f.write(b"\0" * (pad(f.tell()) - f.tell()))
        start = f.tell()
        for index, (name, dims, is_norm) in enumerate(specs):
            write_tensor(f, a, index, dims, is_norm)
            f.write(b"\0" * (pad(f.tell() - start) - (f.tell() - start)))
    os.replace(tmp, a.out)
    params = sum(int(np.prod(d)) for _, d, _ in specs)
    return params, os.path.getsize(a.out)


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    for name in ("dim", "layers", "hidden", "heads", "kv-heads", "vocab"):
        p.add_argument(f"--{name}", type=int, required=True)
    p.add_argument("--type", choices=("f32", "q8_0"), default="f32")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--tied", action="store_true",
                   help="no output.weight: the classifier is the token embedding")
    a = p.parse_args(argv)
    if min(a.dim, a.layers, a.hidden, a.heads, a.kv_heads, a.ctx) < 1 or a.seed < 0:
        p.error("sizes must be positive and the seed non-negative")
    if a.dim % a.heads or a.heads % a.kv_heads or (a.dim // a.heads) % 2:
        p.error("--dim must split into --heads even-sized heads, shared by --kv-heads")
    return a


def main(argv):
    a = parse(argv)
    try:
        params, size = write(a)
    except (ValueError, OSError) as exc:
        print(f"llmgen: {exc}", file=sys.stderr)
        return 1
    print(f"{a.out}: {params} parameters, {a.type}, {size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
