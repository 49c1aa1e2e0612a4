# SPDX-License-Identifier: MIT
"""muster's 32-element weight types after Q4_0 (Q4_1, Q5_0, Q5_1, IQ4_NL,
issue 23) against ggml itself: libggml-base.so of the pinned
node-llama-cpp (llamacppfix, installed by the first run), through ctypes.

* to_f32: muster's mu_wtype_to_f32 gives ggml's dequantize_row_<type> bit
  for bit, on random blocks with finite f16 scales (and mins) and on blocks
  whose scales are NaNs (quiet and signalling payloads), infinities,
  subnormals and zeros.
* from_f32: mu_wtype_from_f32 writes ggml_quantize_chunk's bytes (no
  importance matrix: ggml's reference quantizers) for Q4_1, Q5_0, Q5_1
  and IQ4_NL on random rows of several magnitudes.
* the product: mu_matmul of one row of x by ggml-quantized weights against
  two references in double: ggml's definition of the dot product
  (d_w * d_x * sum q_w q_x, plus m_w * s_x for the types with mins, with x
  quantized by ggml's run-time quantize_row_q8_0 / _q8_1 for x86), within REL_DEF of
  the sum of the terms' magnitudes; and the float sum of dequantized W by
  dequantized x, within REL_DEQ (the f16 rounding of Q8_1's s is the
  difference). The largest errors measured are printed.
* a model: a random llama checkpoint (tools/llm_convert.py) as F32 GGUF,
  quantized by llama.cpp itself (ggmlref.quantize: libllama's
  llama_model_quantize, every matrix in the type), generates with muster the tokens llama.cpp's
  logits pick, as test_llamacpp.py's Q8_0 test asks.

The library is build/lib/libmuster.so or $MUSTER_LIB."""

import ctypes
import json
import math
import os
import subprocess

import numpy as np
import pytest

from conftest import REPO
import ggmlref
import llmfix
from llamacppfix import llamacpp  # noqa: F401 - the fixture

LIB = os.environ.get("MUSTER_LIB") or str(REPO / "build" / "lib" / "libmuster.so")
mu = ctypes.CDLL(LIB)
BINS = ggmlref.bins_dir()
ggml = ctypes.CDLL(str(BINS / "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)

# name: (ggml id, bytes per block of 32, byte offsets of its f16 fields,
# activation format ("q8_0" or "q8_1"))
TYPES = {
    "Q4_1": (3, 20, (0, 2), "q8_1"),
    "Q5_0": (6, 22, (0,), "q8_0"),
    "Q5_1": (7, 24, (0, 2), "q8_1"),
    "IQ4_NL": (20, 18, (0,), "q8_0"),
}
QUANTIZED = ("Q4_1", "Q5_0", "Q5_1", "IQ4_NL")
# Bounds of the product's relative error (of sum |terms|), a few times the
# largest measured on this machine (printed by the test).
REL_DEF = 2e-6
REL_DEQ = 2e-3


class WMat(ctypes.Structure):
    """mu_wmat_t (include/muster/kern.h)."""
    _fields_ = [("type", ctypes.c_int), ("data", ctypes.c_void_p),
                ("rows", ctypes.c_int64), ("cols", ctypes.c_int64)]


mu.mu_wtype_from_name.argtypes = [ctypes.c_char_p]
mu.mu_wtype_row_bytes.restype = ctypes.c_size_t
mu.mu_wtype_row_bytes.argtypes = [ctypes.c_int, ctypes.c_int64]
mu.mu_wtype_to_f32.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
mu.mu_wtype_from_f32.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
mu.mu_matmul.argtypes = [ctypes.c_void_p, ctypes.POINTER(WMat), ctypes.c_void_p, ctypes.c_int64,
                         ctypes.c_void_p, ctypes.c_void_p]
ggml.ggml_quantize_init.argtypes = [ctypes.c_int]
ggml.ggml_quantize_chunk.restype = ctypes.c_size_t
ggml.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                     ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
# ggml's CPU backend for AVX2 (haswell): how llama.cpp quantizes x at run
# time on x86, which muster's activation quantizer follows
ggml_cpu = ctypes.CDLL(str(BINS / "libggml-cpu-haswell.so"))
ggml.quantize_row_q8_0_ref.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
for _n in ("quantize_row_q8_0", "quantize_row_q8_1"):
    getattr(ggml_cpu, _n).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
ggml.dequantize_row_q8_0.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
for _t in TYPES:
    getattr(ggml, f"dequantize_row_{_t.lower()}").argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                                              ctypes.c_int64]

# f16 scales a file may hold besides sane ones: NaNs (quiet, signalling,
# with payloads, negative), infinities, subnormals, zeros, the largest
SPECIAL_F16 = [0x7e00, 0x7c01, 0x7dff, 0xfe55, 0x7fff, 0x7c00, 0xfc00, 0x0001, 0x03ff, 0x8200,
               0x0000, 0x8000, 0x7bff, 0xfbff, 0x0400]


def p(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def code(name):
    t = mu.mu_wtype_from_name(name.encode())
    assert t >= 0, f"muster does not compute {name}"
    return t


def random_blocks(rng, name, nblocks, special):
    """nblocks random blocks of type name; each f16 field a random sane
    value, or (special) one of SPECIAL_F16 in about a third of them."""
    _, bb, f16s, _ = TYPES[name]
    raw = rng.integers(0, 256, size=(nblocks, bb), dtype=np.uint8)
    for off in f16s:
        h = np.float16(rng.uniform(-1, 1, nblocks) * 2.0 ** rng.integers(-12, 4, nblocks))
        h = h.view(np.uint16).copy()
        if special:
            pick = rng.random(nblocks) < 0.35
            h[pick] = rng.choice(SPECIAL_F16, size=int(pick.sum()))
        raw[:, off:off + 2] = h.view(np.uint8).reshape(nblocks, 2)
    return np.ascontiguousarray(raw.reshape(-1))


def mu_to_f32(name, raw, cols):
    out = np.full(cols, np.nan, dtype=np.float32)
    assert mu.mu_wtype_to_f32(code(name), p(raw), cols, p(out)) == 0
    return out


def ggml_to_f32(name, raw, cols):
    out = np.full(cols, np.nan, dtype=np.float32)
    getattr(ggml, f"dequantize_row_{name.lower()}")(p(raw), p(out), cols)
    return out


@pytest.mark.parametrize("name", list(TYPES))
def test_to_f32_is_ggmls(name):
    rng = np.random.default_rng(TYPES[name][0])
    nb = 4096
    for special in (False, True):
        raw = random_blocks(rng, name, nb, special)
        ours, theirs = mu_to_f32(name, raw, nb * 32), ggml_to_f32(name, raw, nb * 32)
        diff = np.nonzero(ours.view(np.uint32) != theirs.view(np.uint32))[0]
        assert diff.size == 0, (
            f"{name}: {diff.size} elements differ, first at {diff[0]}: "
            f"{ours[diff[0]]!r} ({ours.view(np.uint32)[diff[0]]:#x}) vs ggml's "
            f"{theirs[diff[0]]!r} ({theirs.view(np.uint32)[diff[0]]:#x})")
        if special:
            assert np.isnan(theirs).any() and np.isinf(theirs).any()


def random_rows(rng, rows, cols):
    """Rows of several magnitudes and shapes: uniform, normal, offset
    (all one sign: Q4_1's min is then far from 0), with zeros and ties."""
    x = np.empty((rows, cols), dtype=np.float32)
    for r in range(rows):
        scale = 2.0 ** rng.integers(-20, 12)
        kind = r % 4
        if kind == 0:
            v = rng.uniform(-1, 1, cols)
        elif kind == 1:
            v = rng.standard_normal(cols)
        elif kind == 2:
            v = rng.uniform(0.5, 1, cols) + 3
        else:
            v = np.round(rng.uniform(-8, 8, cols) * 2) / 2  # halves: ties in the rounding
            v[::7] = 0
        x[r] = v * scale
    return x


@pytest.mark.parametrize("name", QUANTIZED)
def test_from_f32_is_ggmls(name):
    rng = np.random.default_rng(100 + TYPES[name][0])
    gid = TYPES[name][0]
    rows, cols = 64, 32 * 40
    x = random_rows(rng, rows, cols)
    rb = mu.mu_wtype_row_bytes(code(name), cols)
    assert rb == cols // 32 * TYPES[name][1]
    theirs = np.zeros(rows * rb, dtype=np.uint8)
    ggml.ggml_quantize_init(gid)
    assert ggml.ggml_quantize_chunk(gid, p(x), p(theirs), 0, rows, cols, None) == rows * rb
    for r in range(rows):
        ours = np.zeros(rb, dtype=np.uint8)
        assert mu.mu_wtype_from_f32(code(name), p(x[r]), cols, p(ours)) == 0
        want = theirs[r * rb:(r + 1) * rb]
        if not np.array_equal(ours, want):
            i = int(np.nonzero(ours != want)[0][0])
            pytest.fail(f"{name} row {r}: byte {i} (block {i // TYPES[name][1]}) is "
                        f"{ours[i]:#x}, ggml's {want[i]:#x}")


def ggml_act(fmt, x):
    """x (one row) through ggml's run-time activation quantizer on x86:
    per block of 32, (d, s or None, the 32 quants)."""
    nb = x.size // 32
    bb = 34 if fmt == "q8_0" else 36
    raw = np.zeros(nb * bb, dtype=np.uint8)
    getattr(ggml_cpu, f"quantize_row_{fmt}")(p(x), p(raw), x.size)
    raw = raw.reshape(nb, bb)
    d = raw[:, 0:2].copy().view(np.float16).astype(np.float64).reshape(nb)
    s = raw[:, 2:4].copy().view(np.float16).astype(np.float64).reshape(nb) if fmt == "q8_1" else None
    q = raw[:, bb - 32:].copy().view(np.int8).astype(np.float64)
    return d, s, q


@pytest.mark.parametrize("name", list(TYPES))
def test_matmul_against_ggml_definition(name):
    gid, bb, f16s, fmt = TYPES[name]
    rng = np.random.default_rng(200 + gid)
    rows, cols = 48, 32 * 96
    nb = cols // 32
    if name in QUANTIZED:
        wf = rng.standard_normal((rows, cols)).astype(np.float32)
        w = np.zeros(rows * nb * bb, dtype=np.uint8)
        ggml.ggml_quantize_init(gid)
        ggml.ggml_quantize_chunk(gid, p(wf), p(w), 0, rows, cols, None)
    else:
        w = random_blocks(rng, name, rows * nb, False)
    wdeq = ggml_to_f32(name, w, rows * cols).astype(np.float64).reshape(rows, cols)
    blocks = w.reshape(rows, nb, bb)
    wd = blocks[:, :, 0:2].copy().view(np.float16).astype(np.float64).reshape(rows, nb)
    wm = (blocks[:, :, 2:4].copy().view(np.float16).astype(np.float64).reshape(rows, nb)
          if len(f16s) == 2 else None)
    wmat = WMat(code(name), w.ctypes.data, rows, cols)
    worst_def = worst_deq = 0.0
    for trial in range(6):
        x = (rng.standard_normal(cols) * 2.0 ** rng.integers(-6, 6)).astype(np.float32)
        y = np.full(rows, np.nan, dtype=np.float32)
        assert mu.mu_matmul(None, ctypes.byref(wmat), p(x), 1, p(y), None) == 0
        d, s, q = ggml_act(fmt, x)
        xdeq = (d[:, None] * q).reshape(cols)
        # W's integer part: what multiplies d_w (Q4_1/Q5_1: q; the others:
        # the signed value), from the dequantized W and its d and m
        m = wm if wm is not None else np.zeros_like(wd)
        with np.errstate(invalid="ignore", divide="ignore"):
            wq = np.round((wdeq.reshape(rows, nb, 32) - m[:, :, None]) / wd[:, :, None])
        terms = wd[:, :, None] * d[None, :, None] * wq * q[None, :, :]
        ref_def = terms.sum(axis=(1, 2))
        mag = np.abs(terms).sum(axis=(1, 2))
        if wm is not None:
            ref_def = ref_def + (wm * s[None, :]).sum(axis=1)
            mag = mag + np.abs(wm * s[None, :]).sum(axis=1)
        ref_deq = wdeq @ xdeq
        mag_deq = np.abs(wdeq) @ np.abs(xdeq)
        err_def = np.abs(y - ref_def) / mag
        err_deq = np.abs(y - ref_deq) / mag_deq
        assert np.all(err_def <= REL_DEF), f"{name} trial {trial}: {err_def.max():.3g} > {REL_DEF}"
        assert np.all(err_deq <= REL_DEQ), f"{name} trial {trial}: {err_deq.max():.3g} > {REL_DEQ}"
        worst_def = max(worst_def, float(err_def.max()))
        worst_deq = max(worst_deq, float(err_deq.max()))
    print(f"{name}: largest relative error {worst_def:.3g} against ggml's definition, "
          f"{worst_deq:.3g} against dequantized W . dequantized x")


def test_activations_are_ggmls():
    """muster quantizes x as ggml's CPU backend does on x86 at run time
    (q = x * (127 / max|x|), halves to even), not as its reference
    quantizer: seen through mu_matmul by a Q8_0 matrix whose row k picks
    element k (d = 1, one quant 1), which gives d_x * q_x, the dequantized
    activation, bit for bit as ggml's dequantize_row_q8_0 of ggml's
    quantize_row_q8_0. Halves are forced in: a block scaled so max|x| =
    127 holds x.5 values, which the reference rule rounds away from 0."""
    rng = np.random.default_rng(7)
    cols = 32 * 16
    w = np.zeros((cols, cols // 32, 34), dtype=np.uint8)
    for k in range(cols):
        w[k, k // 32, 0:2] = np.frombuffer(np.float16(1.0).tobytes(), dtype=np.uint8)
        w[k, k // 32, 2 + k % 32] = 1
    wmat = WMat(code("Q8_0"), w.ctypes.data, cols, cols)
    ties = 0
    for trial in range(40):
        x = (rng.standard_normal(cols) * 2.0 ** rng.integers(-20, 20)).astype(np.float32)
        x[0:32] = rng.integers(-126, 126, 32) + 0.5
        x[0] = 127.0
        y = np.full(cols, np.nan, dtype=np.float32)
        assert mu.mu_matmul(None, ctypes.byref(wmat), p(x), 1, p(y), None) == 0
        raw = np.zeros(cols // 32 * 34, dtype=np.uint8)
        ggml_cpu.quantize_row_q8_0(p(x), p(raw), cols)
        want = np.zeros(cols, dtype=np.float32)
        ggml.dequantize_row_q8_0(p(raw), p(want), cols)
        ref = np.zeros(cols // 32 * 34, dtype=np.uint8)
        ggml.quantize_row_q8_0_ref(p(x), p(ref), cols)
        ties += int(np.count_nonzero(raw != ref))
        bad = np.flatnonzero(y.view(np.uint32) != want.view(np.uint32))
        assert bad.size == 0, (f"trial {trial}: element {bad[0]}: muster {y[bad[0]]!r}, "
                               f"ggml {want[bad[0]]!r} (x = {x[bad[0]]!r})")
    # the two ggml rules differ here, so the test tells them apart
    assert ties > 0


# ---- a model quantized by llama.cpp ----



def llama_quantize(src, dst, name):
    """src (a GGUF) to dst with every matrix in type name, by libllama."""
    ggmlref.quantize(src, dst, name, output_type=name, embd_type=name, pure=True)


@pytest.fixture(scope="module")
def f32_gguf(tmp_path_factory):
    root = tmp_path_factory.mktemp("k32")
    return llmfix.random_gguf(root / "hf", root / "llama-f32.gguf",
                              ["--arch", "llama", "--dim", "256", "--layers", "3", "--heads", "8",
                               "--kv-heads", "4", "--hidden", "512", "--vocab", "600", "--seed",
                               "11"], "F32")


@pytest.mark.parametrize("name", list(TYPES))
def test_llamacpp_quantized_model_greedy(muster_bin, llamacpp, f32_gguf, tmp_path, name):
    model = tmp_path / f"llama-{name}.gguf"
    llama_quantize(f32_gguf, model, name)
    # every matrix in the type: the file is its bytes per weight of F32's
    ratio = model.stat().st_size / f32_gguf.stat().st_size
    assert abs(ratio - TYPES[name][1] / 128) < 0.006, ratio
    prompt = [1, 37, 5, 222, 90, 14]
    proc = subprocess.run([str(muster_bin), "generate", "--model", str(model), "--prompt-ids",
                           ",".join(map(str, prompt)), "--temperature", "0", "--max-tokens", "12",
                           "--ignore-eos", "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    ours = json.loads(proc.stdout)["tokens"]
    clear = 0
    for step, tok in enumerate(ours):
        lp = llamacpp.run(model, "--tokens", ",".join(map(str, prompt + ours[:step])), "--logits",
                          "--threads", 1)["logprobs"]
        lp = [v if v is not None else -math.inf for v in lp]
        best = max(range(len(lp)), key=lambda i: lp[i])
        clear += best == tok
        # llama.cpp keeps its KV cache in F16: a near-tie may break either way
        assert best == tok or lp[best] - lp[tok] < 0.05, (step, best, tok, lp[best], lp[tok])
    print(f"{name}: llama.cpp picks muster's token outright at {clear} of 12 steps")
    assert clear >= 9, f"only {clear} of 12 steps agreed outright"
