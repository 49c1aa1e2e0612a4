# SPDX-License-Identifier: MIT
"""muster's K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and IQ4_XS against ggml's own code.

ggml is llama.cpp's libggml-base.so from the pinned node-llama-cpp
(llamacppfix installs it): its exported dequantize_row_<type>,
quantize_row_q8_K_ref and dequantize_row_q8_K, called with ctypes, as is
muster's libmuster (python/muster/_lib.py finds it).

- mu_wtype_to_f32 equals dequantize_row_<type> bit for bit, on random
  blocks (any bytes are a block) with random finite f16 scales, and with d
  and dmin NaN, +-inf, subnormal, zero and -0.
- mu_matmul of one row of x is the dot product of ggml's dequantized row of W
  with ggml's Q8_K-quantized x read back (dequantize_row_q8_K), computed here
  in double: within 2e-6 of the sum of |w x|, the float lanes' worst-case
  rounding for rows of up to 22 superblocks (seen: about 2e-8). One quant of
  x off by one from ggml's reference moves the sum by d_x |w_k|, 5e-6 to
  1e-4 of it for these rows, so a quantizer of x that rounds otherwise than
  ggml's fails (checked in the test), and one row of x is all ties (halves
  rounded to even). The worst error seen is printed; the products run on
  the CPU's best kernels, or on those MUSTER_KERNELS names.
"""

import ctypes
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llamacppfix import Unavailable, ensure_llamacpp  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
from muster import _lib  # noqa: E402

# name: (bytes per block of 256, offsets of the f16 d and dmin (None: none))
TYPES = {
    "Q2_K": (84, 80, 82),
    "Q3_K": (110, 108, None),
    "Q4_K": (144, 0, 2),
    "Q5_K": (176, 0, 2),
    "Q6_K": (210, 208, None),
    "IQ4_XS": (136, 0, None),
}
QK = 256
Q8K_BYTES = 4 + QK + 2 * 16  # block_q8_K: f32 d, int8 qs[256], int16 bsums[16]
SPECIAL_F16 = [0x7E00, 0xFE01, 0x7C00, 0xFC00, 0x0001, 0x83FF, 0x0000, 0x8000, 0x7BFF]
BOUND = 2e-6


class MuWmat(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("data", ctypes.c_void_p),
                ("rows", ctypes.c_int64), ("cols", ctypes.c_int64)]


@pytest.fixture(scope="module")
def ggml():
    try:
        modules = ensure_llamacpp()
    except Unavailable as exc:
        pytest.fail(f"llama.cpp's libraries unavailable: {exc}", pytrace=False)
    path = modules / "@node-llama-cpp" / "linux-x64" / "bins" / "linux-x64" / "libggml-base.so"
    lib = ctypes.CDLL(str(path))
    for name in ["dequantize_row_" + t.lower().replace("_k", "_K") for t in TYPES] + [
            "dequantize_row_q8_K", "quantize_row_q8_K_ref"]:
        getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        getattr(lib, name).restype = None
    return lib


@pytest.fixture(scope="module")
def mu():
    lib = _lib.lib
    lib.mu_wtype_from_name.argtypes = [ctypes.c_char_p]
    lib.mu_wtype_from_name.restype = ctypes.c_int
    lib.mu_wtype_to_f32.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    lib.mu_wtype_to_f32.restype = ctypes.c_int
    lib.mu_matmul.argtypes = [ctypes.c_void_p, ctypes.POINTER(MuWmat), ctypes.c_void_p,
                              ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p]
    lib.mu_matmul.restype = ctypes.c_int
    return lib


def _ggml_name(t):
    return "dequantize_row_" + t.lower().replace("_k", "_K")


def _blocks(rng, t, nb, special=None):
    """nb random blocks of type t; scales random finite f16 (|x| < 2), or
    special = (d, dmin) for the first blocks."""
    bb, d_at, m_at = TYPES[t]
    raw = rng.integers(0, 256, size=nb * bb, dtype=np.uint8)
    for b in range(nb):
        for at in (d_at, m_at):
            if at is not None:
                h = int(rng.integers(0, 0x4000)) | (int(rng.integers(0, 2)) << 15)
                raw[b * bb + at:b * bb + at + 2] = np.frombuffer(np.uint16(h).tobytes(), np.uint8)
    for b, (d, m) in enumerate(special or []):
        for at, h in ((d_at, d), (m_at, m)):
            if at is not None:
                raw[b * bb + at:b * bb + at + 2] = np.frombuffer(np.uint16(h).tobytes(), np.uint8)
    return raw


def _mu_deq(mu, t, raw, cols):
    out = np.zeros(cols, dtype=np.float32)
    code = mu.mu_wtype_from_name(t.encode())
    assert code >= 0, f"muster does not know {t}"
    assert mu.mu_wtype_to_f32(code, raw.ctypes.data, cols, out.ctypes.data) == 0
    return out


def _ggml_deq(ggml, t, raw, cols):
    out = np.zeros(cols, dtype=np.float32)
    getattr(ggml, _ggml_name(t))(raw.ctypes.data, out.ctypes.data, cols)
    return out


@pytest.mark.parametrize("t", list(TYPES))
def test_to_f32_bit_for_bit(ggml, mu, t):
    rng = np.random.default_rng(23)
    nb = 64
    special = [(d, m) for d in SPECIAL_F16 for m in SPECIAL_F16[::-1]][:nb]
    for raw in (_blocks(rng, t, nb), _blocks(rng, t, nb, special)):
        cols = nb * QK
        got, want = _mu_deq(mu, t, raw, cols), _ggml_deq(ggml, t, raw, cols)
        gb, wb = got.view(np.uint32), want.view(np.uint32)
        bad = np.nonzero(gb != wb)[0]
        assert bad.size == 0, (f"{t}: {bad.size} of {cols} elements differ from ggml's, first "
                               f"at {bad[0]}: {gb[bad[0]]:08x} vs {wb[bad[0]]:08x}")


@pytest.mark.parametrize("t", list(TYPES))
def test_matmul_row_against_ggml(ggml, mu, t):
    rng = np.random.default_rng(12)
    code = mu.mu_wtype_from_name(t.encode())
    worst = 0.0
    for trial in range(8):
        nb = 1 + trial * 3
        cols = nb * QK
        raw = _blocks(rng, t, nb)
        x = (rng.standard_normal(cols) * (1 + trial)).astype(np.float32)
        if trial % 2:
            x[rng.integers(0, cols, size=cols // 8)] = 0.0
        if trial == 7:  # ties: -127 / max = 1 and every other x a half, rounded to even
            x = (rng.integers(-127, 126, size=cols) + 0.5).astype(np.float32)
            x[::QK] = -127.0
        xq = np.zeros(nb * Q8K_BYTES, dtype=np.uint8)
        ggml.quantize_row_q8_K_ref(x.ctypes.data, xq.ctypes.data, cols)
        xe = np.zeros(cols, dtype=np.float32)
        ggml.dequantize_row_q8_K(xq.ctypes.data, xe.ctypes.data, cols)
        we = _ggml_deq(ggml, t, raw, cols).astype(np.float64)
        prod = we * xe.astype(np.float64)
        ref, mag = prod.sum(), np.abs(prod).sum()
        y = np.zeros(1, dtype=np.float32)
        w = MuWmat(code, raw.ctypes.data, 1, cols)
        assert mu.mu_matmul(None, ctypes.byref(w), x.ctypes.data, 1, y.ctypes.data, None) == 0
        err = abs(float(y[0]) - ref) / mag
        worst = max(worst, err)
        # the bound is tight enough to see one quant of x off by one
        k = int(np.argmax(np.abs(we)))
        dx = float(np.frombuffer(xq[(k // QK) * Q8K_BYTES:][:4].tobytes(), np.float32)[0])
        assert abs(we[k] * dx) > 2 * BOUND * mag
        assert err <= BOUND, (f"{t} cols {cols}: {y[0]!r}, ggml's {ref!r} "
                              f"(error {err:.3g} of sum |w x|)")
    print(f"{t}: worst |y - ggml| / sum |w x| = {worst:.3g} (bound {BOUND})")
