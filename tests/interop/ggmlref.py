# SPDX-License-Identifier: MIT
"""llama.cpp's own libraries as a reference, driven through ctypes.

The libraries are node-llama-cpp@3.21.1's prebuilt CPU builds (llamacppfix's
ensure_llamacpp installs or finds them). The caller's side never loads them:
each call runs this file as a program in a child process, so a crash or an
abort inside llama.cpp is a clear failure (RefError with the child's exit
status and the end of its stderr), not a dead test run.

    quantize(src, dst, ftype, **opts)  llama_model_quantize; ftype is a name of
                                       FTYPES (Q4_K_M, IQ4_XS, Q8_0, ...); opts:
                                       output_type / embd_type (ggml type names
                                       forced on output.weight / token_embd),
                                       pure (every tensor the ftype's own type),
                                       requantize (allow_requantize: a quantized
                                       source), bins (the libraries' folder, if
                                       not bins_dir()'s)
    logits(gguf, tokens, threads, repack=True)
                                       the logits of every position of `tokens`
                                       (one batch, teacher forcing), as a list
                                       of array('f') rows; the KV cache is F32,
                                       so only the weights' types differ from an
                                       all-F32 run; repack=False turns off the
                                       CPU backend's repacked weight layouts
                                       (use_extra_bufts), whose kernels add in
                                       another order than ggml's vec_dot_*
    dequantize(type, raw)              dequantize_row_<type> over whole blocks
    quantize_chunk(type, floats)       ggml_quantize_chunk, one row, no imatrix
    tensor_types(gguf)                 {tensor name: ggml type name}, read here
                                       (no library; any ggml type id)

The structs passed by value (llama_model_quantize_params, llama_model_params,
llama_context_params, llama_batch) are declared below from include/llama.h of
the llama.cpp source the package was built from (its git bundle
node-llama-cpp/llama/gitRelease.bundle). Before any use the child checks each
declaration against the library: it calls the *_default_params() function with
a sentinel-filled buffer for the returned struct, and fails unless the library
wrote nothing past the declared size nor into the padding between the
declared fields, wrote the last field, and every field holds the default
that the source's *_default_params() gives.
"""

import array
import ctypes
import json
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHILD_TIMEOUT = 300.0

# llama.h: enum llama_ftype
FTYPES = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9,
          "Q2_K": 10, "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15,
          "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18, "IQ4_NL": 25, "IQ3_S": 26, "IQ4_XS": 30,
          "BF16": 32, "TQ1_0": 36, "TQ2_0": 37}

# ggml.h: enum ggml_type
GGML_TYPES = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8,
              "Q8_1": 9, "Q2_K": 10, "Q3_K": 11, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14,
              "Q8_K": 15, "IQ2_XXS": 16, "IQ2_XS": 17, "IQ3_XXS": 18, "IQ1_S": 19,
              "IQ4_NL": 20, "IQ3_S": 21, "IQ2_S": 22, "IQ4_XS": 23, "I8": 24, "I16": 25,
              "I32": 26, "I64": 27, "F64": 28, "IQ1_M": 29, "BF16": 30, "TQ1_0": 34,
              "TQ2_0": 35, "MXFP4": 39, "NVFP4": 40, "Q1_0": 41, "Q2_0": 42}
GGML_NAMES = {v: k for k, v in GGML_TYPES.items()}
GGML_TYPE_COUNT = 43


class RefError(RuntimeError):
    """llama.cpp could not do what was asked; the message says why."""


# ---------------------------------------------------------------------------
# the caller's side: one child process per call
# ---------------------------------------------------------------------------

def bins_dir(cache=None):
    """The folder of the prebuilt libraries (installed on first use)."""
    from llamacppfix import ensure_llamacpp
    mods = ensure_llamacpp(cache)
    return mods / "@node-llama-cpp" / "linux-x64" / "bins" / "linux-x64"


def _child(op, request, timeout=CHILD_TIMEOUT, bins=None):
    request = dict(request, op=op, bins=str(bins or bins_dir()))
    try:
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "child"],
                              input=json.dumps(request).encode(), capture_output=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RefError(f"ggmlref {op}: llama.cpp did not finish within {timeout:.0f} s")
    err = proc.stderr.decode(errors="replace")
    if proc.returncode != 0:
        raise RefError(f"ggmlref {op} failed (exit status {proc.returncode}):\n{err[-3000:]}")
    try:
        return json.loads(proc.stdout.decode().strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise RefError(f"ggmlref {op}: the child printed no result:\n{err[-3000:]}")


def quantize(src, dst, ftype, output_type=None, embd_type=None, pure=False, threads=1,
             requantize=False, bins=None):
    if ftype not in FTYPES:
        raise RefError(f"unknown ftype {ftype}; known: {', '.join(FTYPES)}")
    _child("quantize", {"src": str(src), "dst": str(dst), "ftype": FTYPES[ftype],
                        "output_type": GGML_TYPES[output_type] if output_type else None,
                        "embd_type": GGML_TYPES[embd_type] if embd_type else None,
                        "pure": bool(pure), "requantize": bool(requantize),
                        "threads": int(threads)}, bins=bins)


def logits(gguf, tokens, threads=1, repack=True):
    with tempfile.NamedTemporaryFile(suffix=".f32") as out:
        r = _child("logits", {"model": str(gguf), "tokens": [int(t) for t in tokens],
                              "threads": int(threads), "out": out.name,
                              "repack": bool(repack)})
        flat = array.array("f")
        flat.frombytes(Path(out.name).read_bytes())
    vocab = r["vocab"]
    if len(flat) != vocab * len(tokens):
        raise RefError(f"ggmlref logits: {len(flat)} floats for {len(tokens)} x {vocab}")
    return [flat[i * vocab:(i + 1) * vocab] for i in range(len(tokens))]


def _raw_call(op, gtype, data, **extra):
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "in", Path(tmp) / "out"
        src.write_bytes(bytes(data))
        _child(op, {"type": GGML_TYPES[gtype], "in": str(src), "out": str(dst), **extra})
        return dst.read_bytes()


def dequantize(gtype, raw):
    """ggml's dequantize_row_<type> of `raw` (whole blocks): array('f')."""
    out = array.array("f")
    out.frombytes(_raw_call("dequantize", gtype, raw))
    return out


def quantize_chunk(gtype, floats):
    """ggml_quantize_chunk of one row of float32 values: the bytes."""
    return _raw_call("quantize_chunk", gtype, array.array("f", floats).tobytes())


def layout_error(struct_name, damage=None):
    """What the layout check says of a declared struct ("quantize", "model",
    "context"), as declared (None: it passes) or damaged ("drop_last",
    "widen_first"): proves that the check can fail."""
    return _child("layout", {"struct": struct_name, "damage": damage})["error"]


def tensor_types(path):
    """{name: ggml type name (or 'type N')} of a GGUF file's tensors."""
    with open(path, "rb") as f:
        head = f.read(16 << 20)
    pos = 0

    def take(fmt):
        nonlocal pos
        vals = struct.unpack_from(fmt, head, pos)
        pos += struct.calcsize(fmt)
        return vals[0] if len(vals) == 1 else vals

    def string():
        nonlocal pos
        n = take("<Q")
        s = head[pos:pos + n].decode("utf-8", errors="replace")
        pos += n
        return s

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip(vtype):
        nonlocal pos
        if vtype == 8:
            string()
        elif vtype == 9:
            etype, count = take("<IQ")
            for _ in range(count):
                skip(etype)
        else:
            pos += sizes[vtype]

    if head[:4] != b"GGUF":
        raise RefError(f"{path}: not GGUF")
    pos = 4
    _, n_tensors, n_kv = take("<IQQ")
    for _ in range(n_kv):
        string()
        skip(take("<I"))
    out = {}
    for _ in range(n_tensors):
        name = string()
        ndim = take("<I")
        pos += 8 * ndim
        gid, _ = take("<IQ")
        out[name] = GGML_NAMES.get(gid, f"type {gid}")
    return out


# ---------------------------------------------------------------------------
# the child: the libraries, the structs and their checks
# ---------------------------------------------------------------------------

c_i32, c_u32, c_f32, c_ptr, c_bool = (ctypes.c_int32, ctypes.c_uint32, ctypes.c_float,
                                      ctypes.c_void_p, ctypes.c_bool)


class QuantizeParams(ctypes.Structure):
    _fields_ = [("nthread", c_i32), ("ftype", c_i32), ("output_tensor_type", c_i32),
                ("token_embedding_type", c_i32), ("allow_requantize", c_bool),
                ("quantize_output_tensor", c_bool), ("only_copy", c_bool), ("pure", c_bool),
                ("keep_split", c_bool), ("dry_run", c_bool), ("imatrix", c_ptr),
                ("kv_overrides", c_ptr), ("tt_overrides", c_ptr), ("prune_layers", c_ptr),
                ("max_buf_size", ctypes.c_size_t)]


QUANTIZE_DEFAULTS = {"nthread": 0, "ftype": 7, "output_tensor_type": GGML_TYPE_COUNT,
                     "token_embedding_type": GGML_TYPE_COUNT, "allow_requantize": False,
                     "quantize_output_tensor": True, "only_copy": False, "pure": False,
                     "keep_split": False, "dry_run": False, "imatrix": None,
                     "kv_overrides": None, "tt_overrides": None, "prune_layers": None,
                     "max_buf_size": 8 << 30}


class ModelParams(ctypes.Structure):
    _fields_ = [("devices", c_ptr), ("tensor_buft_overrides", c_ptr), ("n_gpu_layers", c_i32),
                ("split_mode", c_i32), ("load_mode", c_i32), ("lazy_mode", c_i32),
                ("main_gpu", c_i32), ("tensor_split", c_ptr), ("progress_callback", c_ptr),
                ("progress_callback_user_data", c_ptr), ("kv_overrides", c_ptr),
                ("vocab_only", c_bool), ("check_tensors", c_bool), ("use_extra_bufts", c_bool),
                ("no_host", c_bool), ("no_alloc", c_bool), ("load_mtp", c_bool)]


MODEL_DEFAULTS = {"devices": None, "tensor_buft_overrides": None, "n_gpu_layers": -1,
                  "split_mode": 1, "load_mode": -1, "lazy_mode": 1, "main_gpu": 0,
                  "tensor_split": None, "progress_callback": None,
                  "progress_callback_user_data": None, "kv_overrides": None,
                  "vocab_only": False, "check_tensors": False, "use_extra_bufts": True,
                  "no_host": False, "no_alloc": False, "load_mtp": False}


class ContextParams(ctypes.Structure):
    _fields_ = [("n_ctx", c_u32), ("n_batch", c_u32), ("n_ubatch", c_u32), ("n_seq_max", c_u32),
                ("n_rs_seq", c_u32), ("n_outputs_max", c_u32), ("n_outputs_max_per_seq", c_u32),
                ("n_threads", c_i32), ("n_threads_batch", c_i32), ("ctx_type", c_i32),
                ("rope_scaling_type", c_i32), ("pooling_type", c_i32),
                ("attention_type", c_i32), ("flash_attn_type", c_i32),
                ("rope_freq_base", c_f32), ("rope_freq_scale", c_f32),
                ("yarn_ext_factor", c_f32), ("yarn_attn_factor", c_f32),
                ("yarn_beta_fast", c_f32), ("yarn_beta_slow", c_f32), ("yarn_orig_ctx", c_u32),
                ("defrag_thold", c_f32), ("cb_eval", c_ptr), ("cb_eval_user_data", c_ptr),
                ("type_k", c_i32), ("type_v", c_i32), ("abort_callback", c_ptr),
                ("abort_callback_data", c_ptr), ("embeddings", c_bool), ("offload_kqv", c_bool),
                ("no_perf", c_bool), ("op_offload", c_bool), ("swa_full", c_bool),
                ("kv_unified", c_bool), ("samplers", c_ptr), ("n_samplers", ctypes.c_size_t),
                ("ctx_other", c_ptr)]


CONTEXT_DEFAULTS = {"n_ctx": 512, "n_batch": 2048, "n_ubatch": 512, "n_seq_max": 1,
                    "n_rs_seq": 0, "n_outputs_max": 0, "n_outputs_max_per_seq": 1,
                    "n_threads": 4, "n_threads_batch": 4, "ctx_type": 0,
                    "rope_scaling_type": -1, "pooling_type": -1, "attention_type": -1,
                    "flash_attn_type": -1, "rope_freq_base": 0.0, "rope_freq_scale": 0.0,
                    "yarn_ext_factor": -1.0, "yarn_attn_factor": -1.0,
                    "yarn_beta_fast": -1.0, "yarn_beta_slow": -1.0, "yarn_orig_ctx": 0,
                    "defrag_thold": -1.0, "cb_eval": None, "cb_eval_user_data": None,
                    "type_k": 1, "type_v": 1, "abort_callback": None,
                    "abort_callback_data": None, "embeddings": False, "offload_kqv": True,
                    "no_perf": True, "op_offload": True, "swa_full": True, "kv_unified": False,
                    "samplers": None, "n_samplers": 0, "ctx_other": None}


class Batch(ctypes.Structure):
    _fields_ = [("n_tokens", c_i32), ("token", ctypes.POINTER(c_i32)),
                ("embd", ctypes.POINTER(c_f32)), ("pos", ctypes.POINTER(c_i32)),
                ("n_seq_id", ctypes.POINTER(c_i32)),
                ("seq_id", ctypes.POINTER(ctypes.POINTER(c_i32))),
                ("logits", ctypes.POINTER(ctypes.c_int8))]


SENTINEL = 0xA5
SLACK = 512


def checked_defaults(lib, fname, cls, defaults):
    """cls's instance holding the library's defaults, after the checks of
    the module's header (a struct of more than 16 bytes comes back through a
    hidden pointer, so calling the function as void f(void *) is the same
    call with a buffer that this side can inspect)."""
    size = ctypes.sizeof(cls)
    buf = (ctypes.c_uint8 * (size + SLACK))(*([SENTINEL] * (size + SLACK)))
    fn = getattr(lib, fname)
    fn.restype, fn.argtypes = None, [c_ptr]
    fn(ctypes.addressof(buf))
    past = [i for i in range(size, size + SLACK) if buf[i] != SENTINEL]
    if past:
        raise RefError(f"{fname}() wrote byte {past[-1]} past the {size} bytes this harness "
                       f"declares for its struct: the struct layout does not match the "
                       f"library (update ggmlref.py from include/llama.h)")
    declared = set()
    for name, _ in cls._fields_:
        f = getattr(cls, name)
        declared.update(range(f.offset, f.offset + f.size))
    stray = [i for i in range(size) if i not in declared and buf[i] != SENTINEL]
    if stray:
        raise RefError(f"{fname}() wrote bytes {stray} that no declared field holds: the "
                       f"struct layout does not match the library")
    last = cls._fields_[-1][0]
    end = getattr(cls, last).offset + getattr(cls, last).size
    if any(buf[i] == SENTINEL for i in range(end - getattr(cls, last).size, end)):
        raise RefError(f"{fname}() did not write the declared last field {last}: the struct "
                       f"layout does not match the library")
    got = cls.from_buffer_copy(bytes(buf[:size]))
    wrong = [f"{k}={getattr(got, k)!r} (source: {v!r})" for k, v in defaults.items()
             if getattr(got, k) != v]
    if wrong or set(defaults) != {f[0] for f in cls._fields_}:
        raise RefError(f"{fname}(): the defaults differ from llama.cpp's source, so the "
                       f"declared layout does not match the library: {', '.join(wrong)}")
    return got


class Lib:
    def __init__(self, bins):
        bins = Path(bins)
        self.base = ctypes.CDLL(str(bins / "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
        self.ggml = ctypes.CDLL(str(bins / "libggml.v0.4.0.so"), mode=ctypes.RTLD_GLOBAL)
        self.ggml.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
        self.ggml.ggml_backend_load_all_from_path(str(bins).encode())
        self.ggml.ggml_backend_dev_count.restype = ctypes.c_size_t
        if self.ggml.ggml_backend_dev_count() < 1:
            raise RefError(f"no ggml backend loaded from {bins}")
        self.llama = ctypes.CDLL(str(bins / "libllama.v0.4.0.so"))
        self.llama.llama_backend_init()


def op_quantize(lib, req):
    p = checked_defaults(lib.llama, "llama_model_quantize_default_params", QuantizeParams,
                         QUANTIZE_DEFAULTS)
    p.nthread, p.ftype, p.pure = req["threads"], req["ftype"], req["pure"]
    p.allow_requantize = req.get("requantize", False)
    if req["output_type"] is not None:
        p.output_tensor_type = req["output_type"]
    if req["embd_type"] is not None:
        p.token_embedding_type = req["embd_type"]
    f = lib.llama.llama_model_quantize
    f.restype, f.argtypes = c_u32, [ctypes.c_char_p, ctypes.c_char_p,
                                    ctypes.POINTER(QuantizeParams)]
    rc = f(req["src"].encode(), req["dst"].encode(), ctypes.byref(p))
    if rc != 0:
        raise RefError(f"llama_model_quantize returned {rc}")
    return {}


def op_logits(lib, req):
    L, toks = lib.llama, req["tokens"]
    n = len(toks)
    mp = checked_defaults(L, "llama_model_default_params", ModelParams, MODEL_DEFAULTS)
    cp = checked_defaults(L, "llama_context_default_params", ContextParams, CONTEXT_DEFAULTS)
    mp.n_gpu_layers, mp.load_mode = 0, 0
    mp.use_extra_bufts = req.get("repack", True)
    L.llama_model_load_from_file.restype = c_ptr
    L.llama_model_load_from_file.argtypes = [ctypes.c_char_p, ModelParams]
    model = L.llama_model_load_from_file(req["model"].encode(), mp)
    if not model:
        raise RefError(f"llama_model_load_from_file({req['model']}) failed")
    cp.n_ctx = max(64, -(-n // 64) * 64)
    cp.n_batch = cp.n_ubatch = cp.n_ctx
    cp.n_outputs_max = cp.n_outputs_max_per_seq = 0
    cp.n_threads = cp.n_threads_batch = req["threads"]
    cp.type_k = cp.type_v = GGML_TYPES["F32"]
    cp.flash_attn_type = 0
    L.llama_init_from_model.restype = c_ptr
    L.llama_init_from_model.argtypes = [c_ptr, ContextParams]
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        raise RefError("llama_init_from_model failed (F32 KV cache refused?)")
    L.llama_batch_init.restype, L.llama_batch_init.argtypes = Batch, [c_i32, c_i32, c_i32]
    batch = L.llama_batch_init(n, 0, 1)
    if not (batch.token and batch.pos and batch.n_seq_id and batch.seq_id and batch.logits) \
            or batch.embd:
        raise RefError("llama_batch_init: the llama_batch layout does not match the library")
    for i, t in enumerate(toks):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, i, 1
        batch.seq_id[i][0], batch.logits[i] = 0, 1
    batch.n_tokens = n
    L.llama_decode.restype, L.llama_decode.argtypes = c_i32, [c_ptr, Batch]
    rc = L.llama_decode(ctx, batch)
    if rc != 0:
        raise RefError(f"llama_decode returned {rc}")
    L.llama_model_get_vocab.restype, L.llama_model_get_vocab.argtypes = c_ptr, [c_ptr]
    L.llama_vocab_n_tokens.restype, L.llama_vocab_n_tokens.argtypes = c_i32, [c_ptr]
    vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    L.llama_get_logits_ith.restype = ctypes.POINTER(c_f32)
    L.llama_get_logits_ith.argtypes = [c_ptr, c_i32]
    with open(req["out"], "wb") as out:
        for i in range(n):
            row = L.llama_get_logits_ith(ctx, i)
            if not row:
                raise RefError(f"llama_get_logits_ith({i}) gave no row")
            out.write(ctypes.string_at(row, 4 * vocab))
    L.llama_batch_free.argtypes = [Batch]
    L.llama_batch_free(batch)
    L.llama_free.argtypes = L.llama_model_free.argtypes = [c_ptr]
    L.llama_free(ctx)
    L.llama_model_free(model)
    return {"vocab": vocab}


def _type_shape(lib, gtype):
    b = lib.base
    b.ggml_blck_size.restype, b.ggml_type_size.restype = ctypes.c_int64, ctypes.c_size_t
    b.ggml_blck_size.argtypes = b.ggml_type_size.argtypes = [ctypes.c_int]
    return b.ggml_blck_size(gtype), b.ggml_type_size(gtype)


def op_dequantize(lib, req):
    block, size = _type_shape(lib, req["type"])
    raw = Path(req["in"]).read_bytes()
    if len(raw) % size:
        raise RefError(f"{len(raw)} bytes are not whole blocks of {size}")
    n = len(raw) // size * block
    name = GGML_NAMES[req["type"]].lower()
    fn = getattr(lib.base, "ggml_fp16_to_fp32_row" if name == "f16" else
                 "ggml_bf16_to_fp32_row" if name == "bf16" else f"dequantize_row_{name}")
    fn.restype, fn.argtypes = None, [c_ptr, c_ptr, ctypes.c_int64]
    src = ctypes.create_string_buffer(raw, len(raw))
    dst = (c_f32 * n)()
    fn(src, dst, n)
    Path(req["out"]).write_bytes(bytes(dst))
    return {}


def op_quantize_chunk(lib, req):
    block, size = _type_shape(lib, req["type"])
    raw = Path(req["in"]).read_bytes()
    n = len(raw) // 4
    if n % block:
        raise RefError(f"{n} values are not whole blocks of {block}")
    b = lib.base
    b.ggml_quantize_init.argtypes = [ctypes.c_int]
    b.ggml_quantize_init(req["type"])
    b.ggml_quantize_chunk.restype = ctypes.c_size_t
    b.ggml_quantize_chunk.argtypes = [ctypes.c_int, c_ptr, c_ptr, ctypes.c_int64,
                                      ctypes.c_int64, ctypes.c_int64, c_ptr]
    src = ctypes.create_string_buffer(raw, len(raw))
    dst = ctypes.create_string_buffer(n // block * size)
    got = b.ggml_quantize_chunk(req["type"], src, dst, 0, 1, n, None)
    if got != n // block * size:
        raise RefError(f"ggml_quantize_chunk wrote {got} bytes, expected {n // block * size}")
    Path(req["out"]).write_bytes(dst.raw)
    return {}


STRUCTS = {"quantize": ("llama_model_quantize_default_params", QuantizeParams,
                        QUANTIZE_DEFAULTS),
           "model": ("llama_model_default_params", ModelParams, MODEL_DEFAULTS),
           "context": ("llama_context_default_params", ContextParams, CONTEXT_DEFAULTS)}


def op_layout(lib, req):
    """The check of one declared struct, or of a wrong one (its last field
    dropped, or a field's type changed): the error it raised, if any."""
    fname, cls, defaults = STRUCTS[req["struct"]]
    fields = list(cls._fields_)
    if req["damage"] == "drop_last":
        fields = fields[:-1]
        defaults = {k: v for k, v in defaults.items() if k != cls._fields_[-1][0]}
    elif req["damage"] == "widen_first":
        fields[0] = (fields[0][0], ctypes.c_int64)
    wrong = type(cls.__name__, (ctypes.Structure,), {"_fields_": fields})
    try:
        checked_defaults(lib.llama, fname, wrong, defaults)
    except RefError as exc:
        return {"error": str(exc)}
    return {"error": None}


OPS = {"layout": op_layout, "quantize": op_quantize, "logits": op_logits, "dequantize": op_dequantize,
       "quantize_chunk": op_quantize_chunk}


def child_main():
    req = json.loads(sys.stdin.buffer.read())
    try:
        result = OPS[req["op"]](Lib(req["bins"]), req)
    except RefError as exc:
        print(f"ggmlref: {exc}", file=sys.stderr)
        return 1
    sys.stdout.flush()
    os.write(1, (json.dumps(result) + "\n").encode())
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["child"]:
        print("usage: ggmlref.py child  (a request as JSON on stdin; see the header)",
              file=sys.stderr)
        sys.exit(2)
    sys.exit(child_main())
