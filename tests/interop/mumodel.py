# SPDX-License-Identifier: MIT
"""muster models in numpy: safetensors files, a reference evaluator for
muster-graph JSON, and generators of model directories. No dependency
beyond numpy, so any test (or a shell) can use it:

    import mumodel
    info = mumodel.write_transformer(tmp / "tfm", layers=2, seed=3)
    inputs = info.inputs(seed=1)
    outputs = mumodel.evaluate_dir(info.path, inputs)

Safetensors
    `read_safetensors` / `write_safetensors` (F32, F16, BF16 and F64 both
    ways; integer dtypes are read as they are), `SafetensorsFile` (lazy,
    memory-mapped access by name), `SafetensorsWriter` (streams tensors
    whose shapes are known up front, so a model bigger than memory can be
    written). Written headers are padded with spaces to a multiple of 8,
    so the data area (and every F32 tensor) is aligned, as muster's writer
    does.

Evaluator
    `evaluate(graph, weights, inputs, first, last, want)` runs nodes
    [first, last) of a graph the way src/model/ops_*.c define each op
    (ops.c holds the table). Arithmetic is float32 throughout; the loops
    that the C code runs in a fixed order (the sums of layernorm, rmsnorm,
    softmax and the reductions) are accumulated in that same order with
    `np.add.accumulate`, which is strictly sequential. Where the C code
    calls a library (OpenBLAS sgemm, expf, tanhf, erff, powf) numpy's own
    kernels are used, so results agree with muster to rounding, not to
    the bit: compare with `assert_close` (|a - b| <= tol * (1 + |b|)).
    Attributes are checked as the ops' check functions do: one of the
    wrong type (a lone number where a list is due, a fraction where an
    integer is) is an error, never a silent default. Values have dtypes
    as in muster: graph inputs their declared one, weights their file's
    (F16 and BF16 widened to F32, as muster loads them); the typed ops
    (cast, gather, where, comparisons, logic, and arithmetic and data
    movement on non-F32 tensors) keep them, the rest compute in F32.
    `stage_io` computes a node range's boundary the way src/graph/plan.c
    does.

Generators
    `write_mlp`, `write_transformer` and `write_big_mlp` write model.json
    and model.safetensors with seeded random weights and return a
    `ModelInfo` (path, graph, input specs; `.inputs(seed)` makes inputs).
    The transformer block is built from primitive ops (matmul, slice,
    reshape, transpose, softmax, div, layernorm, gelu/relu, residual adds)
    so that its residuals are boundary tensors that skip stages.
    `write_big_mlp` streams a model of a requested size to disk without
    holding more than one chunk of it.
"""

import json
import math
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

F32 = np.float32
MAX_HEADER = 100 << 20          # muster's cap (MU_ST_MAX_HEADER)
MAX_RANK = 8                    # MU_TENSOR_MAX_RANK

# safetensors dtype -> (numpy dtype of the stored bytes, item size)
DTYPES = {
    "F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2),
    "F64": ("<f8", 8), "I64": ("<i8", 8), "I32": ("<i4", 4),
    "I16": ("<i2", 2), "I8": ("i1", 1), "U8": ("u1", 1), "BOOL": ("?", 1),
    "U16": ("<u2", 2), "U32": ("<u4", 4), "U64": ("<u8", 8),
}
FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")


class SafetensorsError(ValueError):
    """A file that is not valid safetensors."""


# --------------------------------------------------------------------------
# safetensors
# --------------------------------------------------------------------------

def _bf16_to_f32(raw):
    """u16 BF16 bit patterns -> float32 (exact: BF16 is f32's top half)."""
    return (raw.astype(np.uint32) << 16).view(F32)


def _f32_to_bf16(x):
    """float32 -> u16 BF16 bit patterns, rounded to nearest even (NaN
    stays NaN)."""
    bits = np.array(x, dtype="<f4", order="C").view(np.uint32)
    rounded = (bits + (np.uint32(0x7FFF) + ((bits >> 16) & 1))) >> 16
    nan = np.isnan(np.asarray(x, dtype=F32))
    return np.where(nan, (bits >> 16) | 0x40, rounded).astype("<u2")


def _encode(array, dtype):
    """An array as the little-endian bytes of `dtype` (a numpy array)."""
    if dtype == "BF16":
        return _f32_to_bf16(np.asarray(array, dtype=F32))
    if dtype not in DTYPES:
        raise ValueError(f"cannot write dtype {dtype}")
    # np.array, not ascontiguousarray, which would make a scalar rank 1
    return np.array(array, dtype=DTYPES[dtype][0], order="C")


def _header_bytes(entries, metadata):
    """The JSON header for entries [(name, dtype, shape, nbytes)], padded
    with spaces to a multiple of 8 bytes."""
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, dtype, shape, nbytes in entries:
        if name == "__metadata__":
            raise ValueError("a tensor cannot be called __metadata__")
        if name in header:
            raise ValueError(f"tensor {name!r} given twice")
        header[name] = {"dtype": dtype, "shape": [int(d) for d in shape],
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    return text + b" " * (-len(text) % 8)


def dtype_of(array):
    """The safetensors dtype that holds a numpy array as it is."""
    kind = np.asarray(array).dtype
    for name, (code, _) in DTYPES.items():
        if name != "BF16" and np.dtype(code) == kind.newbyteorder("<"):
            return name
    raise ValueError(f"no safetensors dtype holds {kind}")


def write_safetensors(path, tensors, metadata=None, dtype="F32"):
    """Write `tensors` (a mapping or a list of (name, array)) to `path`,
    every tensor as `dtype` (F32 by default; "auto": each in the dtype
    that holds it as it is, int64 as I64 ...), in the given order."""
    items = list(tensors.items()) if isinstance(tensors, Mapping) else list(tensors)
    dts = [dtype_of(arr) if dtype == "auto" else dtype for _, arr in items]
    encoded = [(name, _encode(np.asarray(arr), dt)) for (name, arr), dt in zip(items, dts)]
    header = _header_bytes([(n, dt, np.shape(a), a.nbytes) for (n, a), dt in zip(encoded, dts)],
                           metadata)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        for _, arr in encoded:
            f.write(arr.tobytes())


class SafetensorsWriter:
    """Stream tensors whose names and shapes are known up front:

        with SafetensorsWriter(path, [("w", (4096, 4096)), ...]) as w:
            for chunk in chunks:
                w.write(chunk)          # in declaration order, any split

    Each `write` appends elements (flattened, row-major) to the current
    tensor and moves on to the next one when it is full. Closing checks
    that every byte was written. F32 unless `dtype` says otherwise."""

    def __init__(self, path, specs, metadata=None, dtype="F32"):
        self.path = path
        self.dtype = dtype
        size = DTYPES[dtype][1]
        self.specs = [(name, tuple(int(d) for d in shape)) for name, shape in specs]
        self.remaining = [int(np.prod(s, dtype=np.int64)) for _, s in self.specs]
        header = _header_bytes([(n, dtype, s, r * size) for (n, s), r
                                in zip(self.specs, self.remaining)], metadata)
        self.index = 0
        self.file = open(path, "wb")
        self.file.write(struct.pack("<Q", len(header)))
        self.file.write(header)

    def write(self, values):
        values = np.asarray(values).reshape(-1)
        while values.size:
            if self.index >= len(self.specs):
                raise ValueError("more data than the declared tensors hold")
            take = min(values.size, self.remaining[self.index])
            self.file.write(_encode(values[:take], self.dtype).tobytes())
            self.remaining[self.index] -= take
            values = values[take:]
            while self.index < len(self.specs) and self.remaining[self.index] == 0:
                self.index += 1

    def current(self):
        """(name, shape) of the tensor the next write goes to, or None."""
        while self.index < len(self.specs) and self.remaining[self.index] == 0:
            self.index += 1
        return self.specs[self.index] if self.index < len(self.specs) else None

    def close(self):
        if self.file is None:
            return
        self.file.close()
        self.file = None
        if self.current() is not None:
            raise ValueError(f"{self.path}: tensor {self.current()[0]!r} "
                             "and those after it were not written")

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is None:
            self.close()
        elif self.file is not None:
            self.file.close()
            self.file = None


class SafetensorsFile(Mapping):
    """A safetensors file opened for reading: validated header, tensors
    mapped on demand. `f[name]` is a float32 array (F32 data is a
    read-only view of the map; F16/BF16/F64 are converted); `f.raw(name)`
    is the stored array in its own dtype."""

    def __init__(self, path):
        self.path = str(path)
        size = os.path.getsize(self.path)
        with open(self.path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise SafetensorsError(f"{path}: too short to be safetensors")
            (hlen,) = struct.unpack("<Q", head)
            if hlen > MAX_HEADER or hlen > size - 8:
                raise SafetensorsError(f"{path}: header length {hlen} is over "
                                       "the cap or past the end")
            text = f.read(hlen)
        try:
            header = json.loads(text)
        except ValueError as exc:
            raise SafetensorsError(f"{path}: header is not JSON: {exc}") from None
        if not isinstance(header, dict):
            raise SafetensorsError(f"{path}: header is not a JSON object")
        self.metadata = header.pop("__metadata__", {}) or {}
        self.data_start = 8 + hlen
        self.data_len = size - self.data_start
        self.entries = {}
        spans = []
        for name, e in header.items():
            dtype, shape = e.get("dtype"), e.get("shape")
            begin, end = e.get("data_offsets", (None, None))
            if dtype not in DTYPES:
                raise SafetensorsError(f"{path}: tensor {name!r}: unknown dtype {dtype!r}")
            numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
            if not (0 <= begin <= end <= self.data_len) or \
                    end - begin != numel * DTYPES[dtype][1]:
                raise SafetensorsError(f"{path}: tensor {name!r}: bad data_offsets")
            self.entries[name] = (dtype, tuple(shape), begin, end)
            spans.append((begin, end, name))
        spans.sort()
        for (_, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
            if b1 < e0 and b1 != e1:
                raise SafetensorsError(f"{path}: tensors {n0!r} and {n1!r} overlap")
        self._map = None

    def _bytes(self):
        if self._map is None:
            if self.data_len == 0:
                self._map = np.zeros(0, dtype=np.uint8)
            else:
                self._map = np.memmap(self.path, dtype=np.uint8, mode="r",
                                      offset=self.data_start, shape=(self.data_len,))
        return self._map

    def dtype(self, name):
        return self.entries[name][0]

    def shape(self, name):
        return self.entries[name][1]

    def nbytes(self, name):
        e = self.entries[name]
        return e[3] - e[2]

    def raw(self, name):
        dtype, shape, begin, end = self.entries[name]
        data = self._bytes()[begin:end]
        return data.view(DTYPES[dtype][0]).reshape(shape)

    def __getitem__(self, name):
        dtype = self.entries[name][0]
        raw = self.raw(name)
        if dtype == "BF16":
            return _bf16_to_f32(raw)
        if dtype == "F32":
            return raw.view(F32) if raw.dtype != F32 else raw
        return raw.astype(F32)

    def __iter__(self):
        return iter(self.entries)

    def __len__(self):
        return len(self.entries)


def read_safetensors(path, as_f32=True):
    """Every tensor of a file, in header order, as in-memory arrays:
    float32 when `as_f32` (float dtypes are converted; integer ones are
    returned as stored), else each in its stored dtype."""
    f = SafetensorsFile(path)
    out = {}
    for name in f:
        if as_f32 and f.dtype(name) in FLOAT_DTYPES:
            out[name] = np.array(f[name], dtype=F32)
        else:
            out[name] = np.array(f.raw(name))
    return out


# --------------------------------------------------------------------------
# graphs
# --------------------------------------------------------------------------

def load_graph(model_dir):
    with open(os.path.join(model_dir, "model.json")) as f:
        return json.load(f)


def load_weights(model_dir):
    """The model's weights, lazily (a SafetensorsFile)."""
    return SafetensorsFile(os.path.join(model_dir, "model.safetensors"))


def write_model(model_dir, graph, weights, metadata=None):
    """Write model.json (one node per line) and model.safetensors (F32)."""
    os.makedirs(model_dir, exist_ok=True)
    write_safetensors(os.path.join(model_dir, "model.safetensors"), weights, metadata)
    with open(os.path.join(model_dir, "model.json"), "w") as f:
        f.write(graph_json(graph))


def graph_json(graph):
    """A graph as JSON text with one node per line."""
    head = {k: v for k, v in graph.items() if k != "nodes"}
    lines = [json.dumps(n, allow_nan=False) for n in graph["nodes"]]
    text = json.dumps(head, allow_nan=False)[:-1]
    return text + ', "nodes": [\n' + ",\n".join(lines) + "\n]}\n"


def graph_params(graph):
    """Names the nodes read that neither a graph input nor an earlier node
    defines: the weights (graph.c's resolve())."""
    defined = {i["name"] for i in graph["inputs"]}
    params = []
    for n in graph["nodes"]:
        for x in n["inputs"]:
            if x not in defined and x not in params:
                params.append(x)
        defined.update(n["outputs"])
    return params


def stage_io(graph, first, last, param_bytes=None):
    """The boundary of nodes [first, last), as plan.c's stage_io computes
    it: `inputs` (sorted) are values read here that are not params and not
    made here; `outputs` (in the order they are made) are values made here
    that a model output names or a later node reads; `params` (sorted)
    the weights read; `param_bytes` their f32 bytes (from `param_bytes`,
    a name -> bytes mapping, when given)."""
    nodes = graph["nodes"]
    params = set(graph_params(graph))
    made, inputs, used = set(), [], []
    for n in nodes[first:last]:
        for x in n["inputs"]:
            if x in params:
                if x not in used:
                    used.append(x)
            elif x not in made and x not in inputs:
                inputs.append(x)
        made.update(n["outputs"])
    later = {x for n in nodes[last:] for x in n["inputs"]}
    outputs = []
    for n in nodes[first:last]:
        for x in n["outputs"]:
            if (x in graph["outputs"] or x in later) and x not in outputs:
                outputs.append(x)
    io = {"first": first, "last": last, "inputs": sorted(inputs),
          "outputs": outputs, "params": sorted(used)}
    if param_bytes is not None:
        io["param_bytes"] = sum(int(param_bytes[p]) for p in used)
    return io


def param_bytes_of(weights):
    """name -> f32 bytes for every tensor of a SafetensorsFile / dict."""
    if isinstance(weights, SafetensorsFile):
        return {n: 4 * int(np.prod(weights.shape(n), dtype=np.int64)) for n in weights}
    return {n: 4 * int(np.asarray(a).size) for n, a in weights.items()}


# --------------------------------------------------------------------------
# the evaluator: each op as src/model/ops_*.c computes it
# --------------------------------------------------------------------------

class EvalError(ValueError):
    """An op given shapes or values muster would reject."""


INT_ATTR_MAX = 2 ** 53          # ops.c: integer attributes are exact doubles


def _is_int(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and \
        math.isfinite(v) and v == int(v) and abs(v) <= INT_ATTR_MAX


def _num(attrs, key, default):
    """A number attribute (want_num): absent -> default, else finite."""
    v = attrs.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise EvalError(f"attribute {key} must be a number")
    return v


def _int(attrs, key, default):
    """An integer attribute (want_int, list = 0): absent -> default."""
    v = attrs.get(key)
    if v is None:
        return default
    if not _is_int(v):
        raise EvalError(f"attribute {key} must be an integer")
    return int(v)


def _ints(attrs, key):
    """An integer-list attribute (want_int, list = 1): None when absent."""
    v = attrs.get(key)
    if v is None:
        return None
    if not isinstance(v, list) or len(v) > MAX_RANK or not all(_is_int(x) for x in v):
        raise EvalError(f"attribute {key} must be a list of at most 8 integers")
    return [int(x) for x in v]


def _axis(axis, rank):
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < rank:
        raise EvalError(f"axis {axis} out of range for rank {rank}")
    return a


def _seqsum(x, axis=-1):
    """Sum along `axis` in index order, in float32 (the C loops)."""
    x = np.moveaxis(np.asarray(x, dtype=F32), axis, -1)
    if x.shape[-1] == 0:
        return np.zeros(x.shape[:-1], dtype=F32)
    return np.add.accumulate(x, axis=-1, dtype=F32)[..., -1]


def _binary(fn):
    def run(node, a, b):
        try:
            np.broadcast_shapes(a.shape, b.shape)
        except ValueError:
            raise EvalError(f"shapes {a.shape} and {b.shape} do not broadcast") from None
        return fn(a, b).astype(F32, copy=False)
    return run


def _pow(a, b):
    # ops_math.c: b == 2 ? a * a : powf(a, b)
    return np.where(b == F32(2), a * a, np.power(a, b))


def _sigmoid(x):
    return F32(1) / (F32(1) + np.exp(-x))


_erf_vec = np.frompyfunc(math.erf, 1, 1)


def _erf(x):
    """erff: math.erf in double, rounded to float32 (erff is within an ulp
    of that)."""
    x = np.asarray(x, dtype=F32)
    y = np.asarray(_erf_vec(x.astype(np.float64)), dtype=np.float64)
    return y.astype(F32).reshape(x.shape)


def _gelu(node, x):
    approx = node.get("attrs", {}).get("approximate", "none")
    if approx == "tanh":
        inner = F32(0.7978845608028654) * (x + F32(0.044715) * x * x * x)
        return F32(0.5) * x * (F32(1) + np.tanh(inner))
    if approx != "none":
        raise EvalError(f"gelu approximate must be none or tanh, not {approx!r}")
    return F32(0.5) * x * (F32(1) + _erf(x * F32(0.7071067811865476)))


UNARY = {
    "relu": lambda n, x: np.where(x > 0, x, F32(0)).astype(F32),
    "sigmoid": lambda n, x: _sigmoid(x),
    "tanh": lambda n, x: np.tanh(x),
    "sqrt": lambda n, x: np.sqrt(x),
    "exp": lambda n, x: np.exp(x),
    "neg": lambda n, x: -x,
    "erf": lambda n, x: _erf(x),
    "gelu": _gelu,
    "silu": lambda n, x: x * _sigmoid(x),
}


def _matmul(node, a, b):
    if a.ndim == 0 or b.ndim == 0:
        raise EvalError("matmul of a scalar")
    ka = a.shape[-1]
    kb = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if ka != kb:
        raise EvalError(f"matmul inner dimensions {ka} and {kb} differ")
    try:
        np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise EvalError("matmul batch dimensions do not broadcast") from None
    return np.matmul(a, b).astype(F32, copy=False)


def _gemm(node, a, b, c=None):
    attrs = node.get("attrs", {})
    ta, tb = _int(attrs, "transA", 0) != 0, _int(attrs, "transB", 0) != 0
    alpha, beta = F32(_num(attrs, "alpha", 1.0)), F32(_num(attrs, "beta", 1.0))
    if a.ndim != 2 or b.ndim != 2:
        raise EvalError("gemm needs 2-D A and B")
    A, B = (a.T if ta else a), (b.T if tb else b)
    if A.shape[1] != B.shape[0]:
        raise EvalError("gemm inner dimensions differ")
    y = np.matmul(A, B).astype(F32, copy=False)
    if alpha != 1:
        y = alpha * y
    if c is not None:
        mn = (A.shape[0], B.shape[1])
        try:
            if np.broadcast_shapes(c.shape, mn) != mn:
                raise ValueError
        except ValueError:
            raise EvalError(f"gemm C {c.shape} does not broadcast to {mn}") from None
        y = y + beta * c
    return y.astype(F32, copy=False)


def _rows(node, x, dflt_axis=-1):
    """x as [outer, inner] split at the node's axis (dims from axis on)."""
    axis = _axis(_int(node.get("attrs", {}), "axis", dflt_axis), x.ndim)
    inner = int(np.prod(x.shape[axis:], dtype=np.int64))
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    return x.reshape(outer, inner), inner


def _per_elem(p, inner, name):
    """A scale or bias: numel == inner (used elementwise) or 1 (broadcast)."""
    if p.size != inner and p.size != 1:
        raise EvalError(f"{name} has {p.size} elements, the normalized size is {inner}")
    return p.reshape(-1) if p.size > 1 else p.reshape(-1)[0]


def _layernorm(node, x, g, b=None):
    eps = F32(_num(node.get("attrs", {}), "epsilon", 1e-5))
    x2, inner = _rows(node, x)
    mean = _seqsum(x2) / F32(inner)
    d = x2 - mean[:, None]
    var = _seqsum(d * d) / F32(inner)
    y = d / np.sqrt(var + eps)[:, None] * _per_elem(g, inner, "scale")
    if b is not None:
        y = y + _per_elem(b, inner, "bias")
    return y.astype(F32, copy=False).reshape(x.shape)


def _rmsnorm(node, x, g):
    eps = F32(_num(node.get("attrs", {}), "epsilon", 1e-6))
    x2, inner = _rows(node, x)
    scale = F32(1) / np.sqrt(_seqsum(x2 * x2) / F32(inner) + eps)
    y = x2 * scale[:, None] * _per_elem(g, inner, "scale")
    return y.astype(F32, copy=False).reshape(x.shape)


def _softmax(node, x):
    axis = _axis(_int(node.get("attrs", {}), "axis", -1), x.ndim)
    m = np.moveaxis(x, axis, -1)
    # mx = p > mx ? p : mx from -inf: a max that skips NaN
    mx = np.fmax.reduce(m, axis=-1, initial=-np.inf, keepdims=True).astype(F32)
    e = np.exp(m - mx)
    y = e / _seqsum(e)[..., None]
    return np.moveaxis(y.astype(F32, copy=False), -1, axis)


def _reduce(kind):
    def run(node, x):
        attrs = node.get("attrs", {})
        axes = _ints(attrs, "axes")
        keep = _int(attrs, "keepdims", 1) != 0
        red = sorted({_axis(a, x.ndim) for a in axes}) if axes is not None \
            else list(range(x.ndim))
        kept = [i for i in range(x.ndim) if i not in red]
        out_shape = [x.shape[i] if i in kept else 1 for i in range(x.ndim)] if keep \
            else [x.shape[i] for i in kept]
        m = np.transpose(x, kept + red).reshape([x.shape[i] for i in kept] + [-1]) \
            if x.size else np.zeros([x.shape[i] for i in kept] + [0], F32)
        if kind == "max":
            y = np.fmax.reduce(m, axis=-1, initial=-np.inf).astype(F32)
        else:
            y = _seqsum(m)
            if kind == "mean":
                count = x.size // max(1, int(np.prod(out_shape, dtype=np.int64)))
                y = y / F32(count)
        return np.asarray(y, dtype=F32).reshape(out_shape)
    return run


def _reshape(node, x):
    shape = _ints(node.get("attrs", {}), "shape")
    if shape is None or any(s < -1 for s in shape) or shape.count(-1) > 1:
        raise EvalError("reshape needs a \"shape\" of at most 8 integers >= -1")
    dims, infer, known = [], None, 1
    for i, s in enumerate(shape):
        if s == 0:
            if i >= x.ndim:
                raise EvalError("a 0 in reshape's shape has no dim to keep")
            dims.append(x.shape[i])
        elif s == -1:
            dims.append(1)
            infer = i
            continue
        else:
            dims.append(s)
        known *= dims[-1]
    if infer is not None and known > 0 and x.size % known == 0:
        dims[infer] = x.size // known
    if int(np.prod(dims, dtype=np.int64)) != x.size:
        raise EvalError(f"cannot reshape {x.shape} to {shape}")
    return x.reshape(dims)


def _flatten(node, x):
    axis = _int(node.get("attrs", {}), "axis", 1)
    if axis < 0:
        axis += x.ndim
    if not 0 <= axis <= x.ndim:
        raise EvalError("flatten axis out of range")
    return x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)),
                     int(np.prod(x.shape[axis:], dtype=np.int64)))


def _transpose(node, x):
    perm = _ints(node.get("attrs", {}), "perm")
    if perm is None:
        perm = list(range(x.ndim))[::-1]
    if sorted(perm) != list(range(x.ndim)):
        raise EvalError(f"perm {perm} is not a permutation of {x.ndim} dims")
    return np.transpose(x, perm).copy()


def _concat(node, *xs):
    axis = _axis(_int(node.get("attrs", {}), "axis", 0), xs[0].ndim)
    for x in xs[1:]:
        if x.ndim != xs[0].ndim or any(x.shape[i] != xs[0].shape[i]
                                       for i in range(x.ndim) if i != axis):
            raise EvalError("concat inputs differ off the concat axis")
    return np.concatenate(xs, axis=axis)


def _slice(node, x):
    attrs = node.get("attrs", {})
    st, en = _ints(attrs, "starts"), _ints(attrs, "ends")
    ax, sp = _ints(attrs, "axes"), _ints(attrs, "steps")
    if st is None or en is None or len(en) != len(st) or \
            (ax is not None and len(ax) != len(st)) or (sp is not None and len(sp) != len(st)):
        raise EvalError("bad starts/ends/axes/steps")
    index = [slice(None)] * x.ndim
    for i in range(len(st)):
        a = _axis(ax[i] if ax is not None else i, x.ndim)
        d, b, e, s = x.shape[a], st[i], en[i], (sp[i] if sp is not None else 1)
        if s < 1:
            raise EvalError("slice steps must be >= 1")
        b = b + d if b < 0 else b
        e = e + d if e < 0 else e
        b, e = min(max(b, 0), d), min(max(e, 0), d)
        index[a] = slice(b, max(e, b), s)
    return x[tuple(index)].copy()


def _embedding(node, table, ids):
    if table.ndim != 2 or ids.ndim >= MAX_RANK:
        raise EvalError("embedding needs a 2-D table")
    if ids.size and not (np.all(ids >= 0) and np.all(ids == np.floor(ids))
                         and np.all(ids < table.shape[0])):
        raise EvalError("an id outside the table")
    return np.asarray(table)[ids.astype(np.int64)]


OPS = {
    "add": _binary(lambda a, b: a + b),
    "sub": _binary(lambda a, b: a - b),
    "mul": _binary(lambda a, b: a * b),
    "div": _binary(lambda a, b: a / b),
    "pow": _binary(_pow),
    "matmul": _matmul, "gemm": _gemm,
    "layernorm": _layernorm, "rmsnorm": _rmsnorm, "softmax": _softmax,
    "reduce_mean": _reduce("mean"), "reduce_sum": _reduce("sum"),
    "reduce_max": _reduce("max"),
    "reshape": _reshape, "flatten": _flatten, "transpose": _transpose,
    "concat": _concat, "slice": _slice, "embedding": _embedding,
}
OPS.update({name: fn for name, fn in UNARY.items()})
# (min inputs, max inputs), as the op table in ops_*.c declares
ARITY = {op: (2, 2) for op in ("add", "sub", "mul", "div", "pow", "matmul", "embedding")}
ARITY.update({op: (1, 1) for op in UNARY})
ARITY.update({op: (1, 1) for op in ("softmax", "reduce_mean", "reduce_sum", "reduce_max",
                                    "reshape", "flatten", "transpose", "slice")})
ARITY.update({"gemm": (2, 3), "layernorm": (2, 3), "rmsnorm": (2, 2), "concat": (1, 64)})


# ---- typed ops: on any dtype, as ops_math.c, ops_index.c, ops_unary.c ----

MU_NP = {"F32": F32, "F16": np.float16, "F64": np.float64, "I8": np.int8, "I16": np.int16,
         "I32": np.int32, "I64": np.int64, "U8": np.uint8, "U16": np.uint16, "U32": np.uint32,
         "U64": np.uint64, "BOOL": np.bool_}


def _int_div(a, b):
    q = np.where(b == 0, 0, np.abs(a) // np.where(b == 0, 1, np.abs(b)))
    return (q * np.sign(a) * np.sign(b)).astype(a.dtype)


def _typed_binary(name):
    fns = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": _int_div,
           "pow": np.power, "min": np.minimum, "max": np.maximum}

    def run(node, a, b):
        if a.dtype != b.dtype:
            raise EvalError(f"{name} of {a.dtype} and {b.dtype}")
        return fns[name](a, b).astype(a.dtype)
    return run


def _compare(fn):
    def run(node, a, b):
        if a.dtype != b.dtype:
            raise EvalError(f"comparing {a.dtype} and {b.dtype}")
        return fn(a, b)
    return run


def _cast(node, x):
    to = node.get("attrs", {}).get("to")
    if to not in MU_NP:
        raise EvalError(f"cast to {to!r}")
    if to in ("I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64") and x.dtype.kind == "f":
        x = np.trunc(x)
    return x.astype(MU_NP[to])


def _gather(node, x, idx):
    axis = _axis(_int(node.get("attrs", {}), "axis", 0), x.ndim)
    if idx.dtype not in (np.int64, np.int32):
        raise EvalError("gather indices must be I64 or I32")
    d = x.shape[axis]
    idx = np.where(idx < 0, idx + d, idx)
    if idx.size and (idx.min() < 0 or idx.max() >= d):
        raise EvalError("an index outside the dim")
    return np.take(x, idx, axis=axis)


def _where(node, c, x, y):
    if c.dtype != np.bool_ or x.dtype != y.dtype:
        raise EvalError("where needs a BOOL condition and choices of one dtype")
    return np.where(c, x, y)


def _expand(node, x):
    shape = _ints(node.get("attrs", {}), "shape")
    return np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(shape))).copy()


def _trilu(node, x):
    attrs = node.get("attrs", {})
    fn = np.triu if _int(attrs, "upper", 1) else np.tril
    return fn(x, _int(attrs, "k", 0))


TYPED = {
    "cast": _cast, "gather": _gather, "where": _where, "expand": _expand, "trilu": _trilu,
    "equal": _compare(np.equal), "less": _compare(np.less), "greater": _compare(np.greater),
    "less_equal": _compare(np.less_equal), "greater_equal": _compare(np.greater_equal),
    "and": _compare(np.logical_and), "or": _compare(np.logical_or),
    "xor": _compare(np.logical_xor), "not": lambda n, x: np.logical_not(x),
}
# ops that move elements: any dtype, kept
MOVES = {"reshape", "flatten", "transpose", "concat", "slice"}
ARITY.update({op: (2, 2) for op in ("gather", "equal", "less", "greater", "less_equal",
                                    "greater_equal", "and", "or", "xor")})
ARITY.update({op: (1, 1) for op in ("cast", "expand", "trilu", "not")})
ARITY["where"] = (3, 3)


def run_node(node, args):
    """One node; returns its (single) output array. F32-only ops take and
    give float32; typed ones keep their operands' dtypes."""
    op = node["op"]
    if op not in OPS and op not in TYPED:
        raise EvalError(f"node {node.get('name')}: unknown op {op}")
    lo, hi = ARITY[op]
    if not lo <= len(args) <= hi:
        raise EvalError(f"node {node.get('name')}: {len(args)} inputs for {op}")
    try:
        with np.errstate(all="ignore"):
            if op in TYPED:
                return np.asarray(TYPED[op](node, *args))
            if op in MOVES:
                return np.asarray(OPS[op](node, *args))
            if any(a.dtype != F32 for a in args):
                if op in ("add", "sub", "mul", "div", "pow") or (op in ("relu", "neg")
                                                                 and args[0].dtype != F32):
                    return np.asarray(_typed_binary(op)(node, *args) if len(args) == 2
                                      else (np.maximum(args[0], 0) if op == "relu"
                                            else -args[0]))
                raise EvalError(f"{op} computes in F32; got "
                                + ", ".join(str(a.dtype) for a in args))
            return np.asarray(OPS[op](node, *args), dtype=F32)
    except EvalError as exc:
        raise EvalError(f"node {node.get('name')} ({op}): {exc}") from None


def _weight(weights, x):
    """A weight as muster loads it: float dtypes as F32, others as stored."""
    if isinstance(weights, SafetensorsFile):
        if weights.dtype(x) in FLOAT_DTYPES:
            return np.asarray(weights[x], dtype=F32)
        return np.asarray(weights.raw(x))
    a = np.asarray(weights[x])
    return a.astype(F32) if a.dtype.kind == "f" else a


def evaluate(graph, weights, inputs, first=0, last=None, want=None):
    """Run nodes [first, last) (default: all). `weights` maps param names
    to arrays (a SafetensorsFile will do); `inputs` maps what the range
    reads from outside (model inputs, boundary tensors) to arrays: a graph
    input is taken in its declared dtype (F32 by default), anything else
    as given. Returns {name: array} for `want` (default: the model's
    outputs)."""
    nodes = graph["nodes"]
    last = len(nodes) if last is None else last
    want = list(graph["outputs"]) if want is None else list(want)
    declared = {spec["name"]: spec.get("dtype", "F32") for spec in graph["inputs"]}
    env = {k: np.asarray(v, dtype=MU_NP[declared[k]]) if k in declared else np.asarray(v)
           for k, v in inputs.items()}
    if first == 0:
        for spec in graph["inputs"]:
            if spec["name"] in env and list(env[spec["name"]].shape) != list(spec["shape"]):
                raise EvalError(f"input {spec['name']} has shape "
                                f"{list(env[spec['name']].shape)}, not {spec['shape']}")
    for node in nodes[first:last]:
        args = []
        for x in node["inputs"]:
            if x in env:
                args.append(env[x])
            elif x in weights:
                args.append(_weight(weights, x))
            else:
                raise EvalError(f"node {node.get('name')}: {x} is missing")
        out = node["outputs"]
        env[out[0]] = run_node(node, args)
    missing = [w for w in want if w not in env]
    if missing:
        raise EvalError(f"{missing} not produced by nodes {first}..{last - 1}")
    return {w: env[w] for w in want}


def evaluate_dir(model_dir, inputs, **kw):
    """evaluate() on a model directory."""
    return evaluate(load_graph(model_dir), load_weights(model_dir), inputs, **kw)


def assert_close(actual, expected, tol=1e-5, what="value"):
    """|actual - expected| <= tol * (1 + |expected|) everywhere, with the
    shapes equal; raises AssertionError naming the worst element."""
    a, e = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if a.shape != e.shape:
        raise AssertionError(f"{what}: shape {a.shape} != expected {e.shape}")
    if a.size == 0:
        return
    err = np.abs(a - e) / (1.0 + np.abs(e))
    bad = ~(err <= tol)
    if bad.any():
        i = np.unravel_index(int(np.argmax(np.where(np.isnan(err), np.inf, err))), a.shape)
        raise AssertionError(f"{what}: {int(bad.sum())} of {a.size} elements differ by more "
                             f"than {tol} (relative to 1 + |expected|); worst at {i}: "
                             f"{a[i]!r} vs {e[i]!r}")


# --------------------------------------------------------------------------
# generators
# --------------------------------------------------------------------------

@dataclass
class ModelInfo:
    """A generated model: its directory, graph, configuration, and which
    inputs are token ids (name -> vocabulary size)."""
    path: str
    graph: dict
    config: dict = field(default_factory=dict)
    ids: dict = field(default_factory=dict)

    def inputs(self, seed=0):
        """Seeded random inputs: N(0, 1) floats, or ids in [0, vocab)."""
        return make_inputs(self.graph, seed, self.ids)

    @property
    def nnodes(self):
        return len(self.graph["nodes"])


def make_inputs(graph, seed=0, ids=None):
    rng = np.random.default_rng(seed)
    out = {}
    for spec in graph["inputs"]:
        shape = tuple(spec["shape"])
        if ids and spec["name"] in ids:
            out[spec["name"]] = rng.integers(0, ids[spec["name"]], size=shape).astype(F32)
        else:
            out[spec["name"]] = rng.standard_normal(shape).astype(F32)
    return out


class _Builder:
    """Collects nodes and weights for a generated graph."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.weights = [], {}

    def node(self, name, op, inputs, attrs=None, out=None):
        out = out or name
        n = {"name": name, "op": op, "inputs": list(inputs), "outputs": [out]}
        if attrs:
            n["attrs"] = attrs
        self.nodes.append(n)
        return out

    def weight(self, name, shape, scale=1.0):
        self.weights[name] = (self.rng.standard_normal(shape) * scale).astype(F32)
        return name

    def const(self, name, value):
        self.weights[name] = np.asarray(value, dtype=F32)
        return name

    def linear(self, name, x, din, dout, style="matmul", out=None):
        """x @ W + b as gemm (transB=1, W [dout, din]) or matmul + add
        (W [din, dout]), weights scaled by 1/sqrt(din)."""
        if style == "gemm":
            w = self.weight(f"{name}.weight", (dout, din), din ** -0.5)
            b = self.weight(f"{name}.bias", (dout,), 0.1)
            return self.node(name, "gemm", [x, w, b], {"transB": 1}, out)
        w = self.weight(f"{name}.weight", (din, dout), din ** -0.5)
        b = self.weight(f"{name}.bias", (dout,), 0.1)
        h = self.node(f"{name}.matmul", "matmul", [x, w])
        return self.node(name, "add", [h, b], out=out)

    def act(self, name, kind, x, out=None):
        if kind in (None, "none"):
            return x
        if kind == "gelu_tanh":
            return self.node(name, "gelu", [x], {"approximate": "tanh"}, out)
        if kind == "gelu_erf":  # 0.5 * x * (1 + erf(x / sqrt 2)) from primitives
            s = self.const(f"{name}.rsqrt2", 0.7071067811865476)
            one = self.const(f"{name}.one", 1.0)
            half = self.const(f"{name}.half", 0.5)
            e = self.node(f"{name}.erf", "erf", [self.node(f"{name}.scale", "mul", [x, s])])
            g = self.node(f"{name}.mul", "mul", [x, self.node(f"{name}.plus1", "add", [e, one])])
            return self.node(name, "mul", [g, half], out=out)
        return self.node(name, kind, [x], out=out)

    def write(self, path, graph_inputs, outputs, config, ids=None):
        graph = {"format": "muster-graph", "version": 1, "inputs": graph_inputs,
                 "outputs": outputs, "nodes": self.nodes}
        write_model(path, graph, self.weights, {"generator": "mumodel"})
        return ModelInfo(str(path), graph, config, ids or {})


def write_mlp(path, widths=(24, 32, 32, 8), activations=None, batch=2, seed=0,
              style="gemm", in_shape=None):
    """An MLP: len(widths) - 1 linear layers (gemm with transB, or matmul +
    add when style="matmul"; style="mixed" alternates), each followed by
    its activation (muster unary op names, "gelu_tanh", "gelu_erf" for
    GELU built from erf/mul/add, or "none"; default relu between layers,
    none after the last). Input "x" is [batch, widths[0]], or `in_shape`
    (flattened first when it has more than 2 dims); output "y"."""
    n = len(widths) - 1
    if activations is None:
        activations = ["relu"] * (n - 1) + ["none"]
    if len(activations) != n:
        raise ValueError("one activation per layer")
    in_shape = list(in_shape or (batch, widths[0]))
    b = _Builder(seed)
    h = "x"
    if len(in_shape) > 2:
        h = b.node("flatten", "flatten", [h], {"axis": 1})
    for i, (din, dout, act) in enumerate(zip(widths, widths[1:], activations)):
        last = i == n - 1
        st = style if style != "mixed" else ("gemm", "matmul")[i % 2]
        h = b.linear(f"fc{i}", h, din, dout, st,
                     out="y" if last and act in (None, "none") else None)
        h = b.act(f"act{i}", act, h, out="y" if last else None)
    config = {"kind": "mlp", "widths": list(widths), "activations": list(activations),
              "style": style, "in_shape": in_shape, "seed": seed}
    return b.write(path, [{"name": "x", "shape": in_shape}], ["y"], config)


def write_transformer(path, batch=2, seq=6, dim=32, heads=4, ff=64, layers=1,
                      act="gelu", vocab=None, classes=5, pooled=True, seed=0,
                      eps=1e-5):
    """Transformer encoder blocks (pre-norm) from primitive ops:

        h = x                       (or embedding(ids) + positions, vocab=V)
        per layer:  a = layernorm(h); qkv = a @ Wqkv + b; q, k, v = slices
                    heads by reshape + transpose; softmax(q k^T / sqrt(dh)) v
                    h = h + (merged heads) @ Wo + bo          (residual)
                    h = h + act(layernorm(h) @ W1 + b1) @ W2 + b2
        outputs "y" = h [B, S, D]; with `pooled`, also "logits" =
        gemm(concat(mean over S, max over S), Wc) [B, classes]

    act: "gelu" (erf form), "gelu_tanh", "gelu_erf" (from erf ops), "relu".
    """
    if dim % heads:
        raise ValueError("dim must be a multiple of heads")
    dh = dim // heads
    b = _Builder(seed)
    if vocab:
        tok = b.weight("embed.tokens", (vocab, dim), 1.0)
        pos = b.weight("embed.positions", (seq, dim), 0.1)
        e = b.node("embed", "embedding", [tok, "ids"])
        h = b.node("embed.add_pos", "add", [e, pos])
        graph_inputs = [{"name": "ids", "shape": [batch, seq]}]
        ids = {"ids": vocab}
    else:
        h = "x"
        graph_inputs = [{"name": "x", "shape": [batch, seq, dim]}]
        ids = {}
    for layer in range(layers):
        p = f"l{layer}."
        g1 = b.const(p + "ln1.weight", 1 + 0.1 * b.rng.standard_normal(dim))
        b1 = b.weight(p + "ln1.bias", (dim,), 0.1)
        a = b.node(p + "ln1", "layernorm", [h, g1, b1], {"axis": -1, "epsilon": eps})
        qkv = b.linear(p + "qkv", a, dim, 3 * dim)
        q = b.node(p + "q", "slice", [qkv], {"starts": [0], "ends": [dim], "axes": [-1]})
        k = b.node(p + "k", "slice", [qkv], {"starts": [dim], "ends": [2 * dim],
                                             "axes": [2], "steps": [1]})
        v = b.node(p + "v", "slice", [qkv], {"starts": [-dim], "ends": [1 << 40],
                                             "axes": [-1]})
        qh = b.node(p + "q.heads", "reshape", [q], {"shape": [batch, seq, heads, dh]})
        kh = b.node(p + "k.heads", "reshape", [k], {"shape": [0, 0, heads, dh]})
        vh = b.node(p + "v.heads", "reshape", [v], {"shape": [batch, seq, heads, -1]})
        qt = b.node(p + "q.t", "transpose", [qh], {"perm": [0, 2, 1, 3]})
        kt = b.node(p + "k.t", "transpose", [kh], {"perm": [0, 2, 3, 1]})
        vt = b.node(p + "v.t", "transpose", [vh], {"perm": [0, 2, 1, 3]})
        s = b.node(p + "scores", "matmul", [qt, kt])
        scale = b.const(p + "attn.scale", math.sqrt(dh))
        s = b.node(p + "scores.scaled", "div", [s, scale])
        pr = b.node(p + "probs", "softmax", [s], {"axis": -1})
        ctx = b.node(p + "ctx", "matmul", [pr, vt])
        ctx = b.node(p + "ctx.t", "transpose", [ctx], {"perm": [0, 2, 1, 3]})
        ctx = b.node(p + "ctx.merged", "reshape", [ctx], {"shape": [batch, seq, dim]})
        o = b.linear(p + "attn.out", ctx, dim, dim)
        h = b.node(p + "resid1", "add", [h, o])
        g2 = b.const(p + "ln2.weight", 1 + 0.1 * b.rng.standard_normal(dim))
        b2 = b.weight(p + "ln2.bias", (dim,), 0.1)
        a = b.node(p + "ln2", "layernorm", [h, g2, b2], {"epsilon": eps})
        f = b.linear(p + "ff1", a, dim, ff)
        f = b.act(p + "ff.act", act, f)
        f = b.linear(p + "ff2", f, ff, dim)
        h = b.node(p + "resid2", "add", [h, f], out="y" if layer == layers - 1 else None)
    outputs = ["y"]
    if pooled:
        mean = b.node("pool.mean", "reduce_mean", [h], {"axes": [1], "keepdims": 0})
        mx = b.node("pool.max", "reduce_max", [h], {"axes": [-2], "keepdims": 0})
        cat = b.node("pool.cat", "concat", [mean, mx], {"axis": -1})
        b.linear("head", cat, 2 * dim, classes, style="gemm", out="logits")
        outputs.append("logits")
    config = {"kind": "transformer", "batch": batch, "seq": seq, "dim": dim,
              "heads": heads, "ff": ff, "layers": layers, "act": act, "vocab": vocab,
              "classes": classes, "pooled": pooled, "seed": seed, "eps": eps}
    return b.write(path, graph_inputs, outputs, config, ids)


def big_mlp_layers(total_bytes, width):
    """How many width x width layers (weight + bias) make about total_bytes."""
    return max(1, round(total_bytes / (4 * (width * width + width))))


def write_big_mlp(path, total_bytes=1 << 30, width=4096, batch=1, seed=0,
                  chunk_elems=1 << 22):
    """An MLP of about `total_bytes` of F32 weights: L layers of
    gemm(h, W [width, width], b, transB=1) then tanh (bounded activations
    however deep), L = big_mlp_layers(total_bytes, width). Weights are
    uniform with variance 1/width, generated and written `chunk_elems` at
    a time (seeded per tensor), so memory use stays at one chunk. Input
    "x" [batch, width], output "y"."""
    layers = big_mlp_layers(total_bytes, width)
    os.makedirs(path, exist_ok=True)
    nodes, specs = [], []
    h = "x"
    for i in range(layers):
        w, bias = f"fc{i}.weight", f"fc{i}.bias"
        specs += [(w, (width, width)), (bias, (width,))]
        h = _node(nodes, f"fc{i}", "gemm", [h, w, bias], {"transB": 1})
        h = _node(nodes, f"act{i}", "tanh", [h], out="y" if i == layers - 1 else None)
    limit = math.sqrt(3.0 / width)
    with SafetensorsWriter(os.path.join(path, "model.safetensors"), specs,
                           {"generator": "mumodel.write_big_mlp"}) as w:
        for t, (name, shape) in enumerate(specs):
            rng = np.random.default_rng([seed, t])
            left = int(np.prod(shape))
            scale = limit if name.endswith("weight") else 0.1
            while left:
                n = min(left, chunk_elems)
                w.write((rng.random(n, dtype=F32) * F32(2) - F32(1)) * F32(scale))
                left -= n
    graph = {"format": "muster-graph", "version": 1,
             "inputs": [{"name": "x", "shape": [batch, width]}], "outputs": ["y"],
             "nodes": nodes}
    with open(os.path.join(path, "model.json"), "w") as f:
        f.write(graph_json(graph))
    config = {"kind": "big_mlp", "total_bytes": total_bytes, "width": width,
              "layers": layers, "batch": batch, "seed": seed}
    return ModelInfo(str(path), graph, config)


def _node(nodes, name, op, inputs, attrs=None, out=None):
    n = {"name": name, "op": op, "inputs": list(inputs), "outputs": [out or name]}
    if attrs:
        n["attrs"] = attrs
    nodes.append(n)
    return out or name
