# SPDX-License-Identifier: MIT
"""The file formats of LLM checkpoints, read and written with numpy alone.

Used by tools/llm_convert.py (and by the tests that check its output).
Written from the formats' public descriptions; see
../shared/spec/llm-formats.md for the facts and traps.

* safetensors: `SafetensorsWriter` streams tensors whose names, dtypes and
  shapes are declared up front (so a model bigger than memory can be
  written one tensor, or one slice of rows, at a time);
  `SafetensorsReader` validates a header and maps tensors on demand.
  `HfCheckpoint` opens an HF directory (config.json plus one
  model.safetensors or shards named by model.safetensors.index.json).
* GGUF v3: `GgufWriter` (metadata with explicit value types, tensor infos,
  then the data, each tensor aligned) and `GgufReader`, which returns
  tensors as float32 in numpy order (outermost dim first; GGUF lists dims
  innermost first) from F32, F16, BF16, Q8_0 and Q4_0 data.
  `quantize_q8_0` quantizes as llama.cpp's reference quantize_row_q8_0.
* llama2.c: `read_llama2c` (the 7 x int32 header and F32 arrays) and
  `read_llama2c_tokenizer`.

Dtype names are safetensors' ("F32", "F16", "BF16"). BF16 is written by
rounding F32 to nearest even, as torch does; NaN stays NaN.
"""

import json
import mmap
import os
import struct

import numpy as np

F32 = np.float32

# ---------------------------------------------------------------------------
# float formats
# ---------------------------------------------------------------------------

# safetensors dtype -> numpy dtype of the stored elements
ST_DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "F64": "<f8",
             "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1", "U8": "u1",
             "BOOL": "?"}
FLOAT_DTYPES = ("F32", "F16", "BF16")


def bf16_bits(x):
    """float32 values -> BF16 bit patterns (uint16), rounded to nearest
    even; NaN stays a (quiet) NaN."""
    bits = np.ascontiguousarray(x, dtype="<f4").view(np.uint32)
    out = (bits >> 16) & 1
    out += np.uint32(0x7FFF)
    out += bits
    out >>= 16
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    if nan.any():
        out[nan] = (bits[nan] >> 16) | 0x40
    return out.astype("<u2")


def bf16_to_f32(bits):
    """BF16 bit patterns -> float32 (exact)."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(F32)


def encode(x, dtype):
    """Array `x` as an array of `dtype`'s stored elements (little-endian)."""
    if dtype == "BF16":
        return bf16_bits(np.asarray(x, dtype=F32))
    if dtype not in ST_DTYPES:
        raise ValueError(f"cannot write dtype {dtype}")
    return np.ascontiguousarray(x, dtype=ST_DTYPES[dtype])


def decode(raw, dtype):
    """Stored elements of `dtype` -> float32."""
    if dtype == "BF16":
        return bf16_to_f32(raw)
    if dtype in ("F32", "F16", "F64"):
        return np.asarray(raw).astype(F32)
    raise ValueError(f"dtype {dtype} is not a float type")


def round_to(x, dtype):
    """float32 `x` as it reads back after being stored as `dtype`."""
    return decode(encode(x, dtype), dtype)


# ---------------------------------------------------------------------------
# safetensors
# ---------------------------------------------------------------------------

ST_MAX_HEADER = 100 << 20


class FormatError(ValueError):
    """A file that is not what it claims to be; the message names it."""


class SafetensorsWriter:
    """Write a safetensors file whose tensors are declared up front:

        w = SafetensorsWriter(path, [(name, dtype, shape), ...], metadata)
        w.write(name, array)          # in declaration order; or in slices
        w.close()                     # checks every byte was written

    `write` accepts the whole tensor or consecutive slices of its outermost
    dimension (so a large tensor can be produced a block of rows at a time).
    The header is padded with spaces to a multiple of 8 bytes."""

    def __init__(self, path, specs, metadata=None):
        self.path = str(path)
        self.specs = [(n, d, tuple(int(s) for s in shape)) for n, d, shape in specs]
        header, offset = {}, 0
        if metadata:
            header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
        for name, dtype, shape in self.specs:
            if name in header:
                raise ValueError(f"tensor {name!r} declared twice")
            nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(ST_DTYPES[dtype]).itemsize
            header[name] = {"dtype": dtype, "shape": list(shape),
                            "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
        text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
        text += b" " * (-len(text) % 8)
        self.index, self.rows_done = 0, 0
        self.file = open(self.path, "wb")
        self.file.write(struct.pack("<Q", len(text)) + text)

    def write(self, name, array):
        if self.index >= len(self.specs):
            raise ValueError(f"{name}: every declared tensor is written")
        want, dtype, shape = self.specs[self.index]
        if name != want:
            raise ValueError(f"wrote {name!r} where {want!r} was due")
        array = np.asarray(array)
        if shape == () or array.shape == shape:
            if self.rows_done:
                raise ValueError(f"{name}: whole tensor after a slice")
            rows = shape[0] if shape else 1
        elif array.shape[1:] == shape[1:] and self.rows_done + array.shape[0] <= shape[0]:
            rows = array.shape[0]
        else:
            raise ValueError(f"{name}: shape {array.shape} does not fit {shape}")
        self.file.write(encode(array, dtype).tobytes())
        self.rows_done += rows
        if not shape or self.rows_done == shape[0]:
            self.index, self.rows_done = self.index + 1, 0

    def close(self):
        if self.file is None:
            return
        self.file.close()
        self.file = None
        if self.index < len(self.specs):
            raise ValueError(f"{self.path}: tensor {self.specs[self.index][0]!r} "
                             "and those after it were not written")

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is None:
            self.close()
        elif self.file is not None:
            self.file.close()
            self.file = None


class SafetensorsReader:
    """A safetensors file opened for reading. `names()` in file order,
    `dtype(n)`, `shape(n)`, `raw(n)` (stored elements, a read-only view
    of the file) and `tensor(n)` (float32)."""

    def __init__(self, path):
        self.path = str(path)
        size = os.path.getsize(self.path)
        with open(self.path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise FormatError(f"{path}: too short for safetensors")
            (hlen,) = struct.unpack("<Q", head)
            if hlen > ST_MAX_HEADER or hlen > size - 8:
                raise FormatError(f"{path}: header length {hlen} is too large")
            try:
                header = json.loads(f.read(hlen))
            except ValueError as exc:
                raise FormatError(f"{path}: header is not JSON: {exc}") from None
        if not isinstance(header, dict):
            raise FormatError(f"{path}: header is not an object")
        self.metadata = header.pop("__metadata__", None) or {}
        self.start, self.size = 8 + hlen, size - 8 - hlen
        self.entries = {}
        for name, e in header.items():
            dtype, shape, offs = e.get("dtype"), e.get("shape"), e.get("data_offsets")
            if dtype not in ST_DTYPES:
                raise FormatError(f"{path}: {name}: unsupported dtype {dtype!r}")
            n = int(np.prod(shape, dtype=np.int64))
            if (not isinstance(offs, list) or len(offs) != 2
                    or not 0 <= offs[0] <= offs[1] <= self.size
                    or offs[1] - offs[0] != n * np.dtype(ST_DTYPES[dtype]).itemsize):
                raise FormatError(f"{path}: {name}: bad data_offsets {offs}")
            self.entries[name] = (dtype, tuple(shape), offs[0], offs[1])
        self._map = None

    def names(self):
        return list(self.entries)

    def dtype(self, name):
        return self.entries[name][0]

    def shape(self, name):
        return self.entries[name][1]

    def raw(self, name):
        dtype, shape, begin, end = self.entries[name]
        if self._map is None:
            with open(self.path, "rb") as f:
                self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            self._map = np.frombuffer(self._mm, np.uint8)[self.start:]
        return self._map[begin:end].view(ST_DTYPES[dtype]).reshape(shape)

    def release(self, name):
        """Drop the pages of tensor `name` from this process's memory (they
        stay in the page cache), so converting a big model tensor by tensor
        does not grow the RSS by the whole file."""
        _, _, begin, end = self.entries[name]
        if self._map is None or end == begin:
            return
        page = mmap.PAGESIZE
        first = (self.start + begin) // page * page
        self._mm.madvise(mmap.MADV_DONTNEED, first, self.start + end - first)

    def tensor(self, name):
        return decode(self.raw(name), self.dtype(name))


class HfCheckpoint:
    """An HF model directory: `config` (config.json as a dict), `names()`,
    `dtype(n)`, `shape(n)`, `raw(n)`, `tensor(n)` (float32), over one
    model.safetensors or the shards its index names."""

    def __init__(self, path):
        self.path = str(path)
        with open(os.path.join(self.path, "config.json"), encoding="utf-8") as f:
            self.config = json.load(f)
        index = os.path.join(self.path, "model.safetensors.index.json")
        self.where, self.files = {}, {}
        if os.path.exists(index):
            with open(index, encoding="utf-8") as f:
                weight_map = json.load(f)["weight_map"]
            for name, fname in weight_map.items():
                if fname not in self.files:
                    self.files[fname] = SafetensorsReader(os.path.join(self.path, fname))
                if name not in self.files[fname].entries:
                    raise FormatError(f"{index}: {name} is not in {fname}")
                self.where[name] = self.files[fname]
        else:
            st = SafetensorsReader(os.path.join(self.path, "model.safetensors"))
            self.files["model.safetensors"] = st
            self.where = {n: st for n in st.names()}

    def names(self):
        return list(self.where)

    def __contains__(self, name):
        return name in self.where

    def dtype(self, name):
        return self.where[name].dtype(name)

    def shape(self, name):
        return self.where[name].shape(name)

    def raw(self, name):
        return self.where[name].raw(name)

    def release(self, name):
        self.where[name].release(name)

    def tensor(self, name):
        if name not in self.where:
            raise KeyError(f"{self.path}: no tensor {name}")
        return self.where[name].tensor(name)


# ---------------------------------------------------------------------------
# GGUF
# ---------------------------------------------------------------------------

GGUF_MAGIC = b"GGUF"
GGUF_ALIGNMENT = 32
GGUF_MAX_STRING = 1 << 24
# metadata value types
(U8, I8, U16, I16, U32, I32, F32T, BOOL, STRING, ARRAY, U64, I64, F64T) = range(13)
_SCALAR = {U8: "<u1", I8: "<i1", U16: "<u2", I16: "<i2", U32: "<u4", I32: "<i4",
           F32T: "<f4", BOOL: "<u1", U64: "<u8", I64: "<i8", F64T: "<f8"}
_STRUCT = {"<u1": "<B", "<i1": "<b", "<u2": "<H", "<i2": "<h", "<u4": "<I", "<i4": "<i",
           "<f4": "<f", "<u8": "<Q", "<i8": "<q", "<f8": "<d"}
# ggml tensor types: name -> (id, elements per block, bytes per block)
GGML_TYPES = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18),
              "Q8_0": (8, 32, 34), "BF16": (30, 1, 2)}
GGML_NAMES = {v[0]: k for k, v in GGML_TYPES.items()}
QK = 32


def ggml_nbytes(gtype, shape):
    _, block, size = GGML_TYPES[gtype]
    n = int(np.prod(shape, dtype=np.int64))
    if shape and shape[-1] % block:
        raise ValueError(f"{gtype} needs the innermost dim to be a multiple of {block}")
    return n // block * size


def quantize_q8_0(x):
    """float32 rows (innermost dim a multiple of 32) -> Q8_0 bytes, as
    llama.cpp's quantize_row_q8_0_ref: per block of 32, d = amax/127 in
    float32, q = roundf(x * (1/d)) (half away from zero), d stored F16."""
    blocks = np.asarray(x, dtype=F32).reshape(-1, QK)
    d = (np.abs(blocks).max(axis=1, keepdims=True) / F32(127)).astype(F32)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, F32(0), F32(1) / d).astype(F32)
    scaled = (blocks * inv).astype(np.float64)     # float32 product, exact in f64
    q = np.trunc(scaled + np.copysign(0.5, scaled)).astype(np.int8)
    out = np.empty((blocks.shape[0], 34), np.uint8)
    out[:, :2] = d.astype("<f2").view(np.uint8)
    out[:, 2:] = q.view(np.uint8)
    return out.reshape(-1)


def dequantize(raw, gtype, shape):
    """Stored bytes of a ggml type -> float32 array of `shape` (numpy order)."""
    raw = np.asarray(raw, np.uint8)
    if gtype == "F32":
        out = raw.view("<f4").astype(F32)
    elif gtype == "F16":
        out = raw.view("<f2").astype(F32)
    elif gtype == "BF16":
        out = bf16_to_f32(raw.view("<u2"))
    elif gtype == "Q8_0":
        b = raw.reshape(-1, 34)
        d = b[:, :2].copy().view("<f2").astype(F32)
        out = (d * b[:, 2:].view(np.int8).astype(F32)).astype(F32)
    elif gtype == "Q4_0":
        b = raw.reshape(-1, 18)
        d = b[:, :2].copy().view("<f2").astype(F32)
        q = np.concatenate([b[:, 2:] & 15, b[:, 2:] >> 4], axis=1).astype(F32) - 8
        out = (d * q).astype(F32)
    else:
        raise ValueError(f"cannot read ggml type {gtype}")
    return out.reshape(shape)


class GgufWriter:
    """Write a GGUF v3 file in two phases: declare metadata and tensor infos,
    then `begin_data()` and `write_tensor(name, bytes_or_array)` in the
    declared order. Metadata values carry explicit types:
    `add(key, U32, 5)`, `add(key, STRING, "x")`,
    `add_array(key, F32T, [...])`. Shapes are given in numpy order and
    written innermost first, as GGUF lists them."""

    def __init__(self, path, alignment=GGUF_ALIGNMENT):
        self.path = str(path)
        self.alignment = alignment
        self.kv, self.tensors, self.file = [], [], None

    def add(self, key, vtype, value):
        self.kv.append((key, vtype, None, value))

    def add_array(self, key, etype, values):
        self.kv.append((key, ARRAY, etype, values))

    def add_tensor(self, name, shape, gtype):
        self.tensors.append((name, tuple(int(s) for s in shape), gtype,
                             ggml_nbytes(gtype, shape)))

    @staticmethod
    def _str(s):
        b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
        return struct.pack("<Q", len(b)) + b

    def _value(self, vtype, value):
        if vtype == STRING:
            return self._str(value)
        return np.array(value, dtype=_SCALAR[vtype]).tobytes()

    def _array(self, etype, values):
        head = struct.pack("<IQ", etype, len(values))
        if etype == STRING:
            return head + b"".join(self._str(v) for v in values)
        return head + np.asarray(values, dtype=_SCALAR[etype]).tobytes()

    def begin_data(self):
        out = [GGUF_MAGIC, struct.pack("<IQQ", 3, len(self.tensors), len(self.kv))]
        for key, vtype, etype, value in self.kv:
            out.append(self._str(key) + struct.pack("<I", vtype))
            out.append(self._array(etype, value) if vtype == ARRAY
                       else self._value(vtype, value))
        offset = 0
        for name, shape, gtype, nbytes in self.tensors:
            dims = shape[::-1] or (1,)
            out.append(self._str(name) + struct.pack("<I", len(dims)))
            out.append(struct.pack(f"<{len(dims)}Q", *dims))
            out.append(struct.pack("<IQ", GGML_TYPES[gtype][0], offset))
            offset += nbytes + (-nbytes % self.alignment)
        head = b"".join(out)
        self.file = open(self.path, "wb")
        self.file.write(head + b"\0" * (-len(head) % self.alignment))
        self.next, self.done = 0, 0

    def write_tensor(self, name, data):
        """Append `data` (an array whose bytes are the stored form) to
        tensor `name`: the whole tensor, or consecutive pieces of it."""
        if self.next >= len(self.tensors):
            raise ValueError(f"{name}: every declared tensor is written")
        want, _, _, nbytes = self.tensors[self.next]
        if name != want:
            raise ValueError(f"wrote {name!r} where {want!r} was due")
        data = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        if self.done + data.size > nbytes:
            raise ValueError(f"{name}: more than its {nbytes} bytes")
        self.file.write(data.tobytes())
        self.done += data.size
        if self.done == nbytes:
            self.file.write(b"\0" * (-nbytes % self.alignment))
            self.next, self.done = self.next + 1, 0

    def abort(self):
        """Close the file after a failure, without the completeness check."""
        if self.file is not None:
            self.file.close()
            self.file = None

    def close(self):
        self.abort()
        if self.next != len(self.tensors):
            raise ValueError(f"{self.path}: only {self.next} of "
                             f"{len(self.tensors)} tensors written")


class GgufReader:
    """A GGUF v2/v3 file: `metadata` (key -> value: Python scalars, str, or
    lists), `types` (key -> (type, element type)), `tensors` (name ->
    (numpy-order shape, ggml type name, absolute offset, bytes)) in file
    order; `tensor(name)` is float32 in numpy order, `raw(name)` the bytes."""

    def __init__(self, path):
        self.path = str(path)
        with open(self.path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                raise FormatError(f"{path}: empty file")
            self.map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.data = np.frombuffer(self.map, np.uint8)
        self.pos = 0
        if self._take(4) != GGUF_MAGIC:
            raise FormatError(f"{path}: not GGUF (bad magic)")
        self.version = self._scalar(U32)
        if self.version not in (2, 3):
            raise FormatError(f"{path}: GGUF version {self.version} unsupported")
        n_tensors, n_kv = self._scalar(U64), self._scalar(U64)
        self.metadata, self.types = {}, {}
        for _ in range(n_kv):
            key = self._string()
            vtype = self._scalar(U32)
            if vtype == ARRAY:
                etype, count = self._scalar(U32), self._scalar(U64)
                self.types[key] = (ARRAY, etype)
                self.metadata[key] = self._array(etype, count)
            else:
                self.types[key] = (vtype, None)
                self.metadata[key] = self._read(vtype)
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            ndim = self._scalar(U32)
            if ndim > 4:
                raise FormatError(f"{path}: {name}: {ndim} dims")
            dims = [self._scalar(U64) for _ in range(ndim)]
            gid, offset = self._scalar(U32), self._scalar(U64)
            if gid not in GGML_NAMES:
                raise FormatError(f"{path}: {name}: ggml type {gid} unsupported")
            infos.append((name, tuple(dims[::-1]), GGML_NAMES[gid], offset))
        self.alignment = int(self.metadata.get("general.alignment", GGUF_ALIGNMENT))
        start = self.pos + (-self.pos % self.alignment)
        self.tensors = {}
        for name, shape, gtype, offset in infos:
            nbytes = ggml_nbytes(gtype, shape)
            if offset % self.alignment or start + offset + nbytes > len(self.map):
                raise FormatError(f"{path}: {name}: bad offset {offset}")
            self.tensors[name] = (shape, gtype, start + offset, nbytes)
        self.data_start = start

    def _take(self, n):
        if self.pos + n > len(self.map):
            raise FormatError(f"{self.path}: truncated at byte {self.pos}")
        out = self.map[self.pos:self.pos + n]
        self.pos += n
        return out

    def _scalar(self, vtype):
        fmt = _SCALAR[vtype]
        size = struct.calcsize(_STRUCT[fmt])
        if self.pos + size > len(self.map):
            raise FormatError(f"{self.path}: truncated at byte {self.pos}")
        (value,) = struct.unpack_from(_STRUCT[fmt], self.map, self.pos)
        self.pos += size
        return value

    def _string(self):
        n = self._scalar(U64)
        if n > GGUF_MAX_STRING:
            raise FormatError(f"{self.path}: string of {n} bytes at {self.pos}")
        return self._take(n).decode("utf-8", errors="surrogateescape")

    def _read(self, vtype):
        if vtype == STRING:
            return self._string()
        if vtype == BOOL:
            return bool(self._scalar(vtype))
        if vtype in _SCALAR:
            return self._scalar(vtype)
        raise FormatError(f"{self.path}: metadata type {vtype} at {self.pos}")

    def _array(self, etype, count):
        if etype == STRING:
            if count > len(self.map) // 8:
                raise FormatError(f"{self.path}: array of {count} strings")
            return [self._string() for _ in range(count)]
        if etype == ARRAY or etype not in _SCALAR:
            raise FormatError(f"{self.path}: array of type {etype}")
        dt = np.dtype(_SCALAR[etype])
        if count > len(self.map) // dt.itemsize:
            raise FormatError(f"{self.path}: array of {count} elements")
        values = np.frombuffer(self._take(dt.itemsize * count), dt).tolist()
        return [bool(v) for v in values] if etype == BOOL else values

    def raw(self, name):
        _, _, offset, nbytes = self.tensors[name]
        return self.data[offset:offset + nbytes]

    def tensor(self, name):
        shape, gtype, _, _ = self.tensors[name]
        return dequantize(self.raw(name), gtype, shape)


# ---------------------------------------------------------------------------
# llama2.c
# ---------------------------------------------------------------------------

LLAMA2C_HEADER = ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads",
                  "vocab_size", "seq_len")


def read_llama2c(path):
    """A llama2.c checkpoint -> (config dict, tensors dict) where tensors are
    float32 arrays named after llama2.c's fields (token_embedding, rms_att,
    wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final and, when untied, wcls),
    the per-layer ones stacked on a leading layer axis. Config gains
    `shared_classifier` (vocab_size > 0 in the header; vocab_size is then
    stored positive)."""
    raw = np.memmap(str(path), np.uint8, "r")
    if raw.size < 28:
        raise FormatError(f"{path}: too short for a llama2.c header")
    cfg = dict(zip(LLAMA2C_HEADER, (int(v) for v in raw[:28].view("<i4"))))
    cfg["shared_classifier"] = cfg["vocab_size"] > 0
    cfg["vocab_size"] = abs(cfg["vocab_size"])
    dim, hid, n_l, n_h, n_kv, vocab, seq = (cfg[k] for k in LLAMA2C_HEADER)
    if min(dim, hid, n_l, n_h, n_kv, vocab, seq) <= 0 or dim % n_h or n_h % n_kv:
        raise FormatError(f"{path}: bad header {cfg}")
    head = dim // n_h
    kv_dim = n_kv * head
    layout = [("token_embedding", (vocab, dim)), ("rms_att", (n_l, dim)),
              ("wq", (n_l, dim, dim)), ("wk", (n_l, kv_dim, dim)),
              ("wv", (n_l, kv_dim, dim)), ("wo", (n_l, dim, dim)),
              ("rms_ffn", (n_l, dim)), ("w1", (n_l, hid, dim)),
              ("w2", (n_l, dim, hid)), ("w3", (n_l, hid, dim)),
              ("rms_final", (dim,)), ("freq_cis_real", (seq, head // 2)),
              ("freq_cis_imag", (seq, head // 2))]
    if not cfg["shared_classifier"]:
        layout.append(("wcls", (vocab, dim)))
    floats = raw[28:]
    need = sum(int(np.prod(s)) for _, s in layout) * 4
    if floats.size != need:
        raise FormatError(f"{path}: {floats.size} bytes of weights, "
                          f"the header implies {need}")
    values, pos, tensors = floats.view("<f4"), 0, {}
    for name, shape in layout:
        n = int(np.prod(shape))
        if not name.startswith("freq_cis"):
            tensors[name] = values[pos:pos + n].reshape(shape)
        pos += n
    return cfg, tensors


def read_llama2c_tokenizer(path, vocab_size):
    """A llama2.c tokenizer .bin -> (max_token_length, [(bytes, score)])."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 4:
        raise FormatError(f"{path}: too short")
    (max_len,), pos, out = struct.unpack_from("<i", data, 0), 4, []
    for i in range(vocab_size):
        if pos + 8 > len(data):
            raise FormatError(f"{path}: truncated at token {i}")
        score, n = struct.unpack_from("<fi", data, pos)
        if n < 0 or pos + 8 + n > len(data):
            raise FormatError(f"{path}: token {i}: bad length {n}")
        out.append((data[pos + 8:pos + 8 + n], score))
        pos += 8 + n
    if pos != len(data):
        raise FormatError(f"{path}: {len(data) - pos} bytes after {vocab_size} tokens")
    return max_len, out
