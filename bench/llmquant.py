#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The bytes of a GGUF file's tensors, from its header.

usage: llmquant.py bytes FILE.gguf

`bytes` prints one JSON object: every tensor's ggml type and size in bytes
(name -> [type, bytes]), from the GGUF header alone (header() in Python,
which also gives the scalar metadata).

llama.cpp's quantizer itself is tests/interop/ggmlref.py's quantize(),
which bench/llm_types.py calls.
"""

import argparse
import json
import struct
import sys

# ggml_type id -> (name, elements per block, bytes per block) (ggml.h,
# and the block structs of ggml-common.h).
GGML_TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
              6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34),
              10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
              13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 20: ("IQ4_NL", 32, 18),
              23: ("IQ4_XS", 256, 136), 30: ("BF16", 1, 2)}


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
    p = argparse.ArgumentParser(description="a GGUF's tensor bytes")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bytes")
    b.add_argument("file")
    a = p.parse_args(argv)
    print(json.dumps(header(a.file)[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
