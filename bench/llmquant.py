#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""llama.cpp's own quantizer on a GGUF file, and the bytes of its tensors.

usage: llmquant.py quantize --lib DIR SRC.gguf DST.gguf TYPE [--pure] [--threads N]
       llmquant.py bytes FILE.gguf

`quantize` calls llama_model_quantize() of the libllama in DIR (the
prebuilt one node-llama-cpp ships, which has no llama-quantize program)
through ctypes: what `llama-quantize SRC DST TYPE` does. TYPE is a
llama_ftype name in lower case (q4_0, q8_0, q4_k_m, q5_k_m, q6_k, iq4_xs,
...). Without --pure the file holds llama.cpp's usual mixture for TYPE
(for q4_0 the output head is Q6_K, for q4_k_m some layers' V and down
projections are Q6_K, ...), which is what a user of llama-quantize gets;
--pure puts every matrix in TYPE's own tensor type (llama-quantize
--pure). The file is written under a temporary name and renamed into
place, so a failed run leaves nothing. It runs in its own process
(bench/llm.py starts it) because libllama logs on stderr and aborts on
some errors.

`bytes` prints one JSON object: every tensor's ggml type and size in bytes
(name -> [type, bytes]), from the GGUF header alone (header() in Python,
which also gives the scalar metadata).

A stand-in for tests/interop/ggmlref.py's quantize(), which is to replace
the `quantize` half once it lands on main.
"""

import argparse
import ctypes
import json
import os
import struct
import sys

# llama_ftype (llama.h) by the names llama-quantize takes, in lower case.
FTYPES = {"f16": 1, "q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9, "q2_k": 10,
          "q3_k_s": 11, "q3_k_m": 12, "q3_k_l": 13, "q4_k_s": 14, "q4_k_m": 15,
          "q5_k_s": 16, "q5_k_m": 17, "q6_k": 18, "iq4_nl": 25, "iq4_xs": 30, "bf16": 32}

# ggml_type id -> (name, elements per block, bytes per block) (ggml.h,
# and the block structs of ggml-common.h).
GGML_TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
              6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34),
              10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
              13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 20: ("IQ4_NL", 32, 18),
              23: ("IQ4_XS", 256, 136), 30: ("BF16", 1, 2)}


class QuantizeParams(ctypes.Structure):
    """llama_model_quantize_params of node-llama-cpp 3.21.1's llama.cpp."""
    _fields_ = [("nthread", ctypes.c_int32), ("ftype", ctypes.c_int),
                ("output_tensor_type", ctypes.c_int), ("token_embedding_type", ctypes.c_int),
                ("allow_requantize", ctypes.c_bool), ("quantize_output_tensor", ctypes.c_bool),
                ("only_copy", ctypes.c_bool), ("pure", ctypes.c_bool),
                ("keep_split", ctypes.c_bool), ("dry_run", ctypes.c_bool),
                ("imatrix", ctypes.c_void_p), ("kv_overrides", ctypes.c_void_p),
                ("tt_overrides", ctypes.c_void_p), ("prune_layers", ctypes.c_void_p),
                ("max_buf_size", ctypes.c_size_t)]


def libllama(libdir):
    names = sorted(n for n in os.listdir(libdir) if n.startswith("libllama.") and ".so" in n)
    if not names:
        raise OSError(f"no libllama.*.so in {libdir}")
    lib = ctypes.CDLL(os.path.join(libdir, names[0]))
    lib.llama_model_quantize_default_params.restype = QuantizeParams
    lib.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p,
                                         ctypes.POINTER(QuantizeParams)]
    lib.llama_model_quantize.restype = ctypes.c_uint32
    return lib


def quantize(libdir, src, dst, wtype, pure=False, threads=0):
    if wtype not in FTYPES:
        raise ValueError(f"unknown type {wtype} (known: {', '.join(FTYPES)})")
    lib = libllama(libdir)
    lib.llama_backend_init()
    p = lib.llama_model_quantize_default_params()
    p.ftype = FTYPES[wtype]
    p.pure = pure
    p.nthread = threads
    tmp = f"{dst}.tmp{os.getpid()}"
    try:
        rc = lib.llama_model_quantize(str(src).encode(), tmp.encode(), ctypes.byref(p))
        if rc != 0:
            raise RuntimeError(f"llama_model_quantize({src}, {wtype}) returned {rc}")
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def header(path):
    """(scalar metadata: key -> value, tensors: name -> (ggml type name,
    bytes)) of a GGUF file; arrays are skipped."""
    with open(path, "rb") as f:
        def take(fmt):
            size = struct.calcsize(fmt)
            data = f.read(size)
            if len(data) != size:
                raise ValueError(f"{path}: truncated header")
            return struct.unpack(fmt, data)

        def string():
            (n,) = take("<Q")
            return f.read(n).decode("utf-8", "replace")

        scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B",
                  10: "<Q", 11: "<q", 12: "<d"}

        def value(vtype):
            if vtype == 8:
                return string()
            if vtype == 9:
                etype, count = take("<IQ")
                for _ in range(count):
                    value(etype)
                return None
            return take(scalar[vtype])[0]

        magic, version, n_tensors, n_kv = take("<4sIQQ")
        if magic != b"GGUF" or version not in (2, 3):
            raise ValueError(f"{path}: not a GGUF v2/v3 file")
        meta, out = {}, {}
        for _ in range(n_kv):
            key = string()
            (vtype,) = take("<I")
            v = value(vtype)
            if v is not None:
                meta[key] = v
        for _ in range(n_tensors):
            name = string()
            (ndim,) = take("<I")
            dims = take(f"<{ndim}Q")
            gid, _ = take("<IQ")
            if gid not in GGML_TYPES:
                raise ValueError(f"{path}: {name}: ggml type {gid} is not in the table")
            tname, block, size = GGML_TYPES[gid]
            n = 1
            for d in dims:
                n *= d
            out[name] = (tname, n // block * size)
        return meta, out


def main(argv):
    p = argparse.ArgumentParser(description="llama.cpp's quantizer; a GGUF's tensor bytes")
    sub = p.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("quantize")
    q.add_argument("--lib", required=True, help="the directory holding libllama.*.so")
    q.add_argument("src")
    q.add_argument("dst")
    q.add_argument("type", choices=sorted(FTYPES))
    q.add_argument("--pure", action="store_true")
    q.add_argument("--threads", type=int, default=0)
    b = sub.add_parser("bytes")
    b.add_argument("file")
    a = p.parse_args(argv)
    if a.cmd == "quantize":
        quantize(a.lib, a.src, a.dst, a.type, a.pure, a.threads)
    else:
        print(json.dumps(header(a.file)[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
