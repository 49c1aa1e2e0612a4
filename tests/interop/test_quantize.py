"""`muster model quantize` against llama.cpp's own quantizer (the pinned
node-llama-cpp's prebuilt libraries, the llamacpp fixture's install).

* Every type's quantizer gives ggml_quantize_chunk's bytes (imatrix NULL,
  through ctypes on libggml-base.so) on random rows of several
  distributions, zero blocks and tiny blocks among them: a GGUF of such
  tensors, named so that no mix rule touches them, quantized by muster,
  its tensors compared byte for byte.
* A random-weight llama model (F32, F16 and Q8_0 GGUFs from
  tools/llm_convert.py; rows of 256s, and an odd one of 288s), and
  stories260K, for every file type: each tensor's type is the one
  llama_model_quantize gives the same input (ggmlref.quantize: libllama
  in a child process, its struct layout checked), and the whole file is llama.cpp's, byte for
  byte; llama.cpp loads muster's file and decodes with it.
* Bad input: an unknown type lists the valid ones, IQ2 types say they
  need an importance matrix, a missing or broken input says why, and
  nothing is left at OUT.
"""
import ctypes
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "tools"))
import ggmlref  # noqa: E402
import llmfix  # noqa: E402
import llm_io  # noqa: E402
from llamacppfix import llamacpp  # noqa: E402,F401

# the file type, and the ggml type (id) a tensor no rule touches gets
DEFAULT = {"Q2_K": 10, "Q3_K_S": 11, "Q4_K_S": 12, "Q5_K_S": 13, "Q6_K": 14,
           "IQ4_XS": 23, "IQ4_NL": 20, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7,
           "Q8_0": 8, "F16": 1, "BF16": 30}
FTYPES = ["Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M",
          "Q6_K", "IQ4_XS", "IQ4_NL", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "F16", "BF16",
          "F32"]
def read_gguf(path):
    """{name: (ggml type, dims innermost first, bytes)} and the metadata keys."""
    buf = Path(path).read_bytes()
    pos = 4

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return v

    def string():
        nonlocal pos
        (n,) = take("Q")
        s = buf[pos:pos + n]
        pos += n
        return s.decode()

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def value(t):
        nonlocal pos
        if t == 8:
            return string()
        if t == 9:
            et, n = take("IQ")
            return [value(et) for _ in range(n)]
        raw = buf[pos:pos + sizes[t]]
        pos += sizes[t]
        return raw

    _, nt, nkv = take("IQQ")
    kv = {}
    for _ in range(nkv):
        k = string()
        (t,) = take("I")
        kv[k] = value(t)
    infos = []
    for _ in range(nt):
        name = string()
        (nd,) = take("I")
        dims = take(f"{nd}Q")
        t, off = take("IQ")
        infos.append((name, t, dims, off))
    align = struct.unpack("<I", kv["general.alignment"])[0] if "general.alignment" in kv else 32
    start = pos + (-pos % align)
    offs = sorted(o for _, _, _, o in infos) + [len(buf) - start]
    out = {}
    for name, t, dims, off in infos:
        end = offs[offs.index(off) + 1]
        out[name] = (t, dims, buf[start + off:start + end])
    return out, kv, [i[0] for i in infos]


class Ggml:
    """ggml_quantize_chunk of libggml-base.so."""

    def __init__(self):
        self.lib = ctypes.CDLL(str(ggmlref.bins_dir() / "libggml-base.so"))
        self.lib.ggml_quantize_chunk.restype = ctypes.c_size_t
        self.lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                                 ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                                 ctypes.c_void_p]
        self.lib.ggml_row_size.restype = ctypes.c_size_t
        self.lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
        self.lib.ggml_quantize_init.argtypes = [ctypes.c_int]

    def quantize(self, t, x):
        x = np.ascontiguousarray(x, dtype=np.float32)
        rows, cols = x.shape
        self.lib.ggml_quantize_init(t)
        out = np.zeros(rows * self.lib.ggml_row_size(t, cols), np.uint8)
        n = self.lib.ggml_quantize_chunk(t, x.ctypes.data, out.ctypes.data, 0, rows, cols, None)
        assert n == out.size
        return out.tobytes()


def random_rows(rng, rows, cols):
    """Rows of several kinds: normal, uniform, heavy-tailed, mostly-zero
    with outliers, a row with a zero block and a block of tiny values,
    a constant row, a positive-only row."""
    x = np.empty((rows, cols), np.float32)
    for r in range(rows):
        k = r % 7
        if k == 0:
            x[r] = rng.standard_normal(cols)
        elif k == 1:
            x[r] = rng.uniform(-0.1, 0.1, cols)
        elif k == 2:
            x[r] = rng.standard_t(2, cols) * 0.02
        elif k == 3:
            x[r] = np.where(rng.random(cols) < 0.05, rng.standard_normal(cols) * 5, 0)
        elif k == 4:
            x[r] = rng.standard_normal(cols)
            x[r, :256] = 0
            x[r, 256:512] = rng.standard_normal(256) * 1e-20
        elif k == 5:
            x[r] = 0.375
        else:
            x[r] = rng.uniform(0, 3, cols)
    return x


@pytest.fixture(scope="module")
def rows_gguf(tmp_path_factory):
    root = tmp_path_factory.mktemp("qrows")
    rng = np.random.default_rng(23)
    tensors = {"blk.0.w_a.weight": random_rows(rng, 21, 1024),
               "blk.0.w_b.weight": random_rows(rng, 14, 768).astype(np.float32) * 30}
    path = root / "rows.gguf"
    gw = llm_io.GgufWriter(path)
    gw.add("general.architecture", llm_io.STRING, "test")
    for name, x in tensors.items():
        gw.add_tensor(name, x.shape, "F32")
    gw.begin_data()
    for name, x in tensors.items():
        gw.write_tensor(name, x)
    gw.close()
    return path, tensors


def quantize(muster_bin, src, out, ftype, *args, check=True):
    proc = subprocess.run([str(muster_bin), "model", "quantize", str(src), str(out), ftype,
                           *args],
                          capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        pytest.fail(f"muster model quantize {ftype}: {proc.stderr}", pytrace=False)
    return proc


@pytest.mark.parametrize("ftype", sorted(DEFAULT))
def test_quantizer_bytes_equal_ggml(muster_bin, rows_gguf, tmp_path, ftype):
    """muster's quantizer of each type writes ggml_quantize_chunk's bytes."""
    src, tensors = rows_gguf
    out = tmp_path / "q.gguf"
    quantize(muster_bin, src, out, ftype)
    got, _, _ = read_gguf(out)
    ggml = Ggml()
    for name, x in tensors.items():
        t, dims, data = got[name]
        assert t == DEFAULT[ftype], (name, t)
        want = ggml.quantize(t, x)
        data = data[:len(want)]
        if data != want:
            a, b = np.frombuffer(data, np.uint8), np.frombuffer(want, np.uint8)
            bad = np.nonzero(a != b)[0]
            pytest.fail(f"{ftype} {name}: {bad.size} of {a.size} bytes differ, first at "
                        f"{bad[0]}", pytrace=False)


@pytest.fixture(scope="module")
def nonfinite_gguf(tmp_path_factory):
    """Rows with a NaN, an inf, a -inf and a 1e30 among normal values."""
    x = np.random.default_rng(1).standard_normal((4, 512)).astype(np.float32)
    x[0, 5], x[1, 300], x[2, 40], x[3, 100] = np.nan, np.inf, -np.inf, 1e30
    path = tmp_path_factory.mktemp("qnan") / "nan.gguf"
    gw = llm_io.GgufWriter(path)
    gw.add("general.architecture", llm_io.STRING, "test")
    gw.add_tensor("blk.0.w.weight", x.shape, "F32")
    gw.begin_data()
    gw.write_tensor("blk.0.w.weight", x)
    gw.close()
    return path, x


@pytest.mark.parametrize("ftype", sorted(DEFAULT))
def test_nonfinite_rows_give_ggml_bytes_on_x86(muster_bin, nonfinite_gguf, tmp_path, ftype):
    """NaN and inf go through the same searches and the same casts (x86's
    truncation, which muster's quantizers spell out): ggml's bytes still."""
    src, x = nonfinite_gguf
    out = tmp_path / "q.gguf"
    quantize(muster_bin, src, out, ftype)
    t, _, data = read_gguf(out)[0]["blk.0.w.weight"]
    want = Ggml().quantize(t, x)
    assert data[:len(want)] == want


# ---- a whole model, against llama_model_quantize ----

def llama_quantize(src, out, ftype, requantize=False):
    try:
        ggmlref.quantize(src, out, ftype, requantize=requantize)
    except ggmlref.RefError as exc:
        pytest.fail(f"llama_model_quantize {ftype}: {exc}", pytrace=False)


@pytest.fixture(scope="module")
def f32_model(tmp_path_factory):
    """A random llama (GQA 4, 8 layers, so the by-layer rules bite) in F32,
    with an odd-shaped hidden width (288: 32s, not 256s) for the
    fallbacks."""
    root = tmp_path_factory.mktemp("qmodel")
    out = {}
    even = ["--dim", "256", "--heads", "8", "--kv-heads", "2", "--hidden", "512", "--layers", "8"]
    for name, args, gtype in (("even", even, "F32"), ("even-f16", even, "F16"),
                              ("even-q8", even, "Q8_0"),
                              ("odd", ["--dim", "256", "--heads", "8", "--kv-heads", "2",
                                       "--hidden", "288", "--layers", "3"], "F32")):
        out[name] = llmfix.random_gguf(root / name, root / f"{name}.gguf",
                                       ["--arch", "llama", *args, "--vocab", "512", "--seed", "5"],
                                       gtype)
    return out


PROMPT = [1, 37, 5, 222, 90, 14]


def logprobs(llamacpp, model):
    lp = llamacpp.run(model, "--tokens", ",".join(map(str, PROMPT)), "--logits",
                      "--threads", 1)["logprobs"]
    return np.array([v if v is not None else -np.inf for v in lp])


@pytest.mark.parametrize("shape", ["even", "odd"])
@pytest.mark.parametrize("ftype", FTYPES)
def test_model_matches_llama_model_quantize(muster_bin, llamacpp, f32_model, tmp_path, ftype,
                                            shape):
    """Each tensor gets llama_model_quantize's type and its bytes; the
    metadata is kept; llama.cpp loads muster's file and its logits are
    those of llama.cpp's own file."""
    src = f32_model[shape]
    ours, theirs = tmp_path / "muster.gguf", tmp_path / "llama.gguf"
    proc = quantize(muster_bin, src, ours, ftype)
    assert "bits per weight" in proc.stdout
    llama_quantize(src, theirs, ftype)
    a, akv, aorder = read_gguf(ours)
    b, bkv, border = read_gguf(theirs)
    assert aorder == border
    for name in border:
        assert a[name][0] == b[name][0], (name, a[name][0], b[name][0])
        assert a[name][1] == b[name][1], name
        assert a[name][2] == b[name][2], f"{name}: tensor data differ"
    inkv = read_gguf(src)[1]
    for k, v in inkv.items():
        if k != "general.file_type":
            assert akv[k] == v, k
    assert akv["general.file_type"] == bkv["general.file_type"]
    assert akv["general.quantization_version"] == bkv["general.quantization_version"]
    # and so the whole file is llama.cpp's, byte for byte (metadata order too)
    assert ours.read_bytes() == theirs.read_bytes()
    if ftype in ("Q4_K_M", "Q2_K", "IQ4_NL", "Q8_0", "Q5_0"):
        lq, lf = logprobs(llamacpp, ours), logprobs(llamacpp, theirs)
        assert np.isfinite(lq).all() and np.allclose(lq, lf, atol=1e-5), ftype


@pytest.mark.parametrize("ftype", ["Q4_K_M", "Q3_K_M", "IQ4_XS", "Q5_1"])
@pytest.mark.parametrize("source", ["even-f16", "even-q8"])
def test_f16_and_quantized_inputs_match_llama(muster_bin, f32_model, tmp_path, ftype, source):
    """An F16 input, and a Q8_0 one quantized again (llama.cpp with
    allow_requantize): read to f32 exactly, the same file as llama.cpp's."""
    src = f32_model[source]
    ours, theirs = tmp_path / "muster.gguf", tmp_path / "llama.gguf"
    quantize(muster_bin, src, ours, ftype)
    llama_quantize(src, theirs, ftype, requantize=True)
    a, _, aorder = read_gguf(ours)
    b, _, border = read_gguf(theirs)
    assert aorder == border
    for name in border:
        assert a[name][:2] == b[name][:2], (name, a[name][:2], b[name][:2])
        assert a[name][2] == b[name][2], f"{name}: tensor data differ"


STORIES = HERE.parents[1] / "models" / "stories260K" / "stories260K.gguf"


@pytest.mark.parametrize("ftype", ["Q8_0", "Q4_K_M", "Q5_K_M", "Q2_K"])
def test_stories260k_matches_llama(muster_bin, tmp_path, ftype):
    """A real checkpoint (stories260K, its SentencePiece vocabulary in the
    metadata, rows of 64 and 48 that take the fallbacks): llama.cpp's file,
    every key kept; muster's own decoder reads the Q8_0 one and tells the
    story."""
    ours, theirs = tmp_path / "muster.gguf", tmp_path / "llama.gguf"
    quantize(muster_bin, STORIES, ours, ftype)
    llama_quantize(STORIES, theirs, ftype)
    a, akv, aorder = read_gguf(ours)
    b, bkv, border = read_gguf(theirs)
    assert aorder == border and list(akv.items()) == list(bkv.items())
    for name in border:
        assert a[name] == b[name], name
    assert ours.read_bytes() == theirs.read_bytes()
    if ftype == "Q8_0":
        proc = subprocess.run([str(muster_bin), "generate", "--model", str(ours),
                               "--temperature", "0", "--max-tokens", "12"],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and proc.stdout.startswith("Once upon a time"), proc.stderr


def test_quantized_logits_near_f32(muster_bin, llamacpp, f32_model, tmp_path):
    """A short decode of muster's Q8_0 and Q4_K_M files in llama.cpp stays
    near the F32 model's (the error is llama.cpp's own quantization's:
    the bytes are the same, see above)."""
    src = f32_model["even"]
    ref = logprobs(llamacpp, src)
    errs = {}
    for ftype in ("Q8_0", "Q4_K_M"):
        out = tmp_path / f"{ftype}.gguf"
        quantize(muster_bin, src, out, ftype)
        errs[ftype] = float(np.max(np.abs(logprobs(llamacpp, out) - ref)))
        r = llamacpp.run(out, "--tokens", ",".join(map(str, PROMPT)), "--max-tokens", 4,
                         "--ignore-eos", "--threads", 1)
        assert len(r["tokens"]) == 4
    assert errs["Q8_0"] < errs["Q4_K_M"] < 2.0, errs


def test_threads_write_the_same_file(muster_bin, f32_model, tmp_path):
    """Rows are quantized on a pool; 1 thread or 3, the same bytes."""
    one, three = tmp_path / "1.gguf", tmp_path / "3.gguf"
    quantize(muster_bin, f32_model["even"], one, "Q4_K_M", "--threads", "1")
    quantize(muster_bin, f32_model["even"], three, "Q4_K_M", "--threads", "3")
    assert one.read_bytes() == three.read_bytes()


# ---- bad input ----

def test_unknown_type_lists_the_types(muster_bin, rows_gguf, tmp_path):
    out = tmp_path / "o.gguf"
    proc = quantize(muster_bin, rows_gguf[0], out, "Q4_K_X", check=False)
    assert proc.returncode == 2
    assert "unknown type \"Q4_K_X\"" in proc.stderr and "Q4_K_M" in proc.stderr
    assert "IQ4_XS" in proc.stderr and not out.exists()


@pytest.mark.parametrize("ftype", ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ1_S", "IQ3_XXS"])
def test_imatrix_types_refused(muster_bin, rows_gguf, tmp_path, ftype):
    out = tmp_path / "o.gguf"
    proc = quantize(muster_bin, rows_gguf[0], out, ftype, check=False)
    assert proc.returncode == 2 and "importance matrix" in proc.stderr
    assert not out.exists()


def test_bad_inputs_say_why_and_leave_nothing(muster_bin, tmp_path):
    out = tmp_path / "o.gguf"
    proc = quantize(muster_bin, tmp_path / "missing.gguf", out, "Q8_0", check=False)
    assert proc.returncode == 1 and "cannot open" in proc.stderr
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 1 << 40, 0))
    proc = quantize(muster_bin, bad, out, "Q8_0", check=False)
    assert proc.returncode == 1 and "tensors and 0 keys: over the limits" in proc.stderr
    # a directory is read as an HF checkpoint (test_quantize_hf.py)
    proc = quantize(muster_bin, tmp_path, out, "Q8_0", check=False)
    assert proc.returncode == 1 and "no config.json" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.gguf"]


def test_failed_write_leaves_nothing(muster_bin, rows_gguf, tmp_path):
    """OUT in a directory that cannot be written: the error names it and
    neither OUT nor a temporary is left."""
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        proc = quantize(muster_bin, rows_gguf[0], d / "o.gguf", "Q8_0", check=False)
        if os.geteuid() != 0:
            assert proc.returncode == 1 and "cannot create" in proc.stderr
        assert [p.name for p in d.iterdir() if p.name != "o.gguf" or proc.returncode] == []
    finally:
        d.chmod(0o700)


def test_help(muster_bin):
    proc = subprocess.run([str(muster_bin), "model", "quantize", "--help"], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0 and "Q4_K_M" in proc.stdout and "IN OUT TYPE" in proc.stdout
