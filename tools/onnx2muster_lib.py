# SPDX-License-Identifier: MIT
"""What tools/onnx2muster.py and its op handlers share: the errors, the
Value the converter tracks for every ONNX value, dtypes in ONNX, muster and
numpy terms, shape arithmetic with ONNX's rules, and constant folding
(numpy implementations of the ops a graph uses to compute shapes from
constants)."""

import math

import numpy as np
from onnx import TensorProto, numpy_helper

MAX_NAME = 4096          # bytes, as graph.c caps a name
MAX_RANK = 8             # MU_TENSOR_MAX_RANK
MAX_IO = 64              # MU_NODE_MAX_IO


class ConvertError(Exception):
    """A model this tool cannot convert; the message names what and why."""


class Unsupported(ConvertError):
    """A model that uses something muster does not claim to support: an op
    outside the list, a tensor type muster cannot carry (strings,
    sequences, complex numbers), or a documented limit of an op."""


class ConstRequired(ConvertError):
    """A value muster needs as a constant (a shape, axes, pads ...) is
    computed at run time from the graph inputs in `inputs`. Fixing those
    inputs (convert(..., consts=)) makes it one."""

    def __init__(self, message, inputs):
        super().__init__(message)
        self.inputs = frozenset(inputs)


# --------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------

# ONNX element type -> muster dtype (the safetensors spelling)
ONNX_TO_MU = {
    TensorProto.FLOAT: "F32", TensorProto.UINT8: "U8", TensorProto.INT8: "I8",
    TensorProto.UINT16: "U16", TensorProto.INT16: "I16", TensorProto.INT32: "I32",
    TensorProto.INT64: "I64", TensorProto.BOOL: "BOOL", TensorProto.FLOAT16: "F16",
    TensorProto.DOUBLE: "F64", TensorProto.UINT32: "U32", TensorProto.UINT64: "U64",
    TensorProto.BFLOAT16: "BF16",
}
MU_TO_ONNX = {v: k for k, v in ONNX_TO_MU.items()}
# muster dtype -> the numpy dtype a constant of it is held in (BF16 values
# are held exactly in float32, as onnx.numpy_helper gives them)
MU_NP = {
    "F32": np.float32, "F16": np.float16, "BF16": np.float32, "F64": np.float64,
    "I8": np.int8, "I16": np.int16, "I32": np.int32, "I64": np.int64, "U8": np.uint8,
    "U16": np.uint16, "U32": np.uint32, "U64": np.uint64, "BOOL": np.bool_,
}
FLOATS = {"F32", "F16", "BF16", "F64"}
INTS = {"I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64"}


def mu_dtype(elem, what):
    """The muster dtype of an ONNX element type, or Unsupported."""
    if elem in ONNX_TO_MU:
        return ONNX_TO_MU[elem]
    raise Unsupported(f"{what} has element type {TensorProto.DataType.Name(elem)}, which "
                      "muster does not carry")


def dtype_of_array(a):
    """The muster dtype of a numpy array (float32 is F32, not BF16)."""
    kind = np.dtype(a.dtype)
    for name, t in MU_NP.items():
        if name != "BF16" and np.dtype(t) == kind:
            return name
    raise Unsupported(f"a constant of numpy dtype {kind}, which muster does not carry")


def round_bf16(a):
    """float32 values rounded to the nearest BF16 (ties to even), as
    float32; NaN stays NaN."""
    a = np.asarray(a, np.float32)
    bits = a.view(np.uint32).astype(np.uint64)
    r = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(np.uint32)
    return np.where(np.isnan(a), a, r.view(np.float32))


def cast_array(a, to):
    """A constant cast to muster dtype `to` the way muster's cast op does
    it (numpy's astype; BF16 rounded to nearest even)."""
    a = np.asarray(a)
    if to == "BF16":
        return round_bf16(a.astype(np.float32))
    if to in INTS and a.dtype.kind == "f":
        # truncation toward zero; NaN and out-of-range saturate as muster's
        a = np.nan_to_num(np.trunc(a.astype(np.float64)), nan=0.0,
                          posinf=2.0 ** 63 - 1024, neginf=-(2.0 ** 63))
        a = np.clip(a, -(2.0 ** 63), 2.0 ** 63 - 1024).astype(np.int64)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(a).astype(MU_NP[to])


class Value:
    """A value of the graph as the converter sees it: its muster name, its
    static shape, its ONNX dtype (`dt`, a muster dtype name), the dtype the
    muster tensor really has (`actual`: F32 where an op that computes in
    F32 made an F16, BF16 or F64 value), its contents when it is a
    constant (None when computed at run time), the muster node that makes
    it, and the graph inputs it is computed from (`deps`)."""

    __slots__ = ("name", "shape", "dt", "actual", "const", "node", "deps")

    def __init__(self, name, shape, dt, const=None, node=None, actual=None, deps=()):
        self.name = name
        self.shape = tuple(int(d) for d in shape)
        self.dt = dt
        self.actual = actual or dt
        self.const = const
        self.node = node
        self.deps = frozenset(deps)

    @property
    def rank(self):
        return len(self.shape)


# --------------------------------------------------------------------------
# shapes, with ONNX's rules
# --------------------------------------------------------------------------

def numel(shape):
    n = 1
    for d in shape:
        n *= int(d)
    return n


def norm_axis(axis, rank, what="axis", allow_end=False):
    """axis in [-rank, rank) (or [-rank, rank] with allow_end) -> >= 0."""
    hi = rank + 1 if allow_end else rank
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < hi:
        raise ValueError(f"{what} {axis} is out of range for rank {rank}")
    return a


def broadcast(*shapes):
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError("shapes " + " and ".join(str(list(s)) for s in shapes)
                         + " do not broadcast") from None


def matmul_shape(a, b):
    if not a or not b:
        raise ValueError("MatMul of a scalar")
    ka, kb = a[-1], (b[0] if len(b) == 1 else b[-2])
    if ka != kb:
        raise ValueError(f"inner dimensions {ka} and {kb} differ")
    batch = broadcast(a[:-2], b[:-2])
    return batch + (a[-2],) * (len(a) > 1) + (b[-1],) * (len(b) > 1)


def reshape_target(in_shape, shape, allowzero=False):
    """ONNX Reshape's output shape: 0 copies the input dim (unless
    allowzero), -1 is inferred."""
    out, infer = [], None
    for i, s in enumerate(shape):
        s = int(s)
        if s == 0 and not allowzero:
            if i >= len(in_shape):
                raise ValueError("a 0 in the target shape has no input dim to copy")
            s = in_shape[i]
        elif s == -1:
            if infer is not None:
                raise ValueError("more than one -1 in the target shape")
            infer = len(out)
            s = 1
        elif s < -1:
            raise ValueError(f"bad target dim {s}")
        out.append(s)
    total = numel(in_shape)
    if infer is not None:
        known = numel(out)
        if known == 0 or total % known:
            raise ValueError(f"cannot infer -1 reshaping {list(in_shape)} to {list(shape)}")
        out[infer] = total // known
    if numel(out) != total:
        raise ValueError(f"cannot reshape {list(in_shape)} ({total} elements) to {list(shape)}")
    return tuple(out)


def slice_plan(shape, starts, ends, axes, steps):
    """ONNX Slice on static dims -> [(axis, start, end, step)] with start
    and end clamped as ONNX does; step may be negative."""
    if len(ends) != len(starts):
        raise ValueError("starts and ends differ in length")
    axes = list(range(len(starts))) if axes is None else list(axes)
    steps = [1] * len(starts) if steps is None else list(steps)
    if len(axes) != len(starts) or len(steps) != len(starts):
        raise ValueError("axes/steps differ in length from starts")
    plan, seen = [], set()
    for b, e, a, s in zip(starts, ends, axes, steps):
        a = norm_axis(int(a), len(shape), "slice axis")
        if a in seen:
            raise ValueError(f"axis {a} is sliced twice")
        seen.add(a)
        d, b, e, s = shape[a], int(b), int(e), int(s)
        if s == 0:
            raise ValueError("a slice step of 0")
        b = b + d if b < 0 else b
        e = e + d if e < 0 else e
        if s > 0:
            b, e = min(max(b, 0), d), min(max(e, 0), d)
        else:
            b, e = min(max(b, 0), d - 1), min(max(e, -1), d - 1)
        plan.append((a, b, e, s))
    return plan


def slice_len(b, e, s):
    return max(0, (e - b + s - (1 if s > 0 else -1)) // s)


def unsqueeze_shape(shape, axes):
    rank = len(shape) + len(axes)
    axes = sorted(norm_axis(int(a), rank, "unsqueeze axis") for a in axes)
    if len(set(axes)) != len(axes):
        raise ValueError("an unsqueeze axis is repeated")
    out, it = [], iter(shape)
    for i in range(rank):
        out.append(1 if i in axes else next(it))
    return tuple(out)


def squeeze_shape(shape, axes):
    if axes is None:
        return tuple(d for d in shape if d != 1)
    axes = {norm_axis(int(a), len(shape), "squeeze axis") for a in axes}
    for a in axes:
        if shape[a] != 1:
            raise ValueError(f"cannot squeeze dim {a} of size {shape[a]}")
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def split_sizes(opset, shape, sizes_input, attrs, nout):
    """The sizes a Split cuts its axis into."""
    axis = norm_axis(attrs.get("axis", 0), len(shape))
    d = shape[axis]
    sizes = attrs.get("split") if opset < 13 else sizes_input
    if sizes is not None and len(sizes):
        sizes = [int(s) for s in sizes]
        if sum(sizes) != d or len(sizes) != nout:
            raise ValueError(f"split sizes {sizes} do not cut dim {d} into {nout}")
        return sizes
    n = attrs.get("num_outputs", nout)
    if opset >= 18 and "num_outputs" in attrs:
        step = -(-d // n)
        return [min(step, d - i * step) for i in range(n)]
    if d % n:
        raise ValueError(f"dim {d} does not split evenly into {n}")
    return [d // n] * n


# --------------------------------------------------------------------------
# constant folding: ONNX semantics in numpy, for nodes whose inputs are all
# known (what graphs use to build shapes, axes and masks)
# --------------------------------------------------------------------------

def _erf(x):
    f = np.frompyfunc(math.erf, 1, 1)
    return np.asarray(f(np.asarray(x, np.float64)), np.float64).astype(x.dtype)


def _div(a, b):
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.abs(a) // np.where(b == 0, 1, np.abs(b))   # integer Div truncates
        return np.where(b == 0, 0, q * np.sign(a) * np.sign(b)).astype(np.result_type(a, b))
    return a / b


def _same(fn):
    """A binary numpy function whose result keeps the first operand's dtype."""
    return lambda a, b: np.asarray(fn(a, b)).astype(a.dtype)


BINARY_FOLD = {
    "Add": _same(np.add), "Sub": _same(np.subtract), "Mul": _same(np.multiply),
    "Div": _div, "Pow": _same(np.power), "MatMul": _same(np.matmul),
    "Equal": np.equal, "Less": np.less, "Greater": np.greater,
    "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal,
    "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor,
}
UNARY_FOLD = {
    "Neg": np.negative, "Sqrt": np.sqrt, "Exp": np.exp, "Tanh": np.tanh, "Abs": np.abs,
    "Relu": lambda v: np.maximum(v, 0).astype(v.dtype), "Not": np.logical_not,
    "Sigmoid": lambda v: (1 / (1 + np.exp(-v))).astype(v.dtype), "Erf": _erf,
    "Floor": np.floor, "Ceil": np.ceil, "Reciprocal": lambda v: (1 / v).astype(v.dtype),
}


def fold_node(c, op, vals, attrs, nout, dts):
    """Outputs (arrays, muster dtypes) of a node whose inputs `vals` (of
    muster dtypes `dts`) are all constants."""
    x = vals[0] if vals else None
    dt0 = dts[0] if dts else None
    if op == "Identity":
        return [x], [dt0]
    if op == "Dropout":                          # inference: x, and an all-true mask
        return [x, np.ones(x.shape, bool)][:nout], [dt0, "BOOL"][:nout]
    if op in ("Cast", "CastLike"):
        to = c.cast_target(attrs, dts)
        return [cast_array(x, to)], [to]
    if op == "Reshape":
        shape = vals[1] if c.opset >= 5 else attrs["shape"]
        return [x.reshape(reshape_target(x.shape, list(shape), attrs.get("allowzero", 0)))], [dt0]
    if op == "Unsqueeze":
        return [x.reshape(unsqueeze_shape(x.shape, c.axes_arg(vals, attrs, 13)))], [dt0]
    if op == "Squeeze":
        return [x.reshape(squeeze_shape(x.shape, c.axes_arg(vals, attrs, 13)))], [dt0]
    if op == "Concat":
        return [np.concatenate(vals, axis=attrs["axis"])], [dt0]
    if op == "Gather":
        axis = norm_axis(attrs.get("axis", 0), x.ndim)
        idx = np.asarray(vals[1], np.int64)
        return [np.take(x, np.where(idx < 0, idx + x.shape[axis], idx), axis=axis)], [dt0]
    if op == "Slice":
        plan = slice_plan(x.shape, *c.slice_args(vals, attrs))
        for a, b, e, s in plan:
            x = np.take(x, np.arange(b, e, s, dtype=np.int64), axis=a)
        return [x], [dt0]
    if op == "Transpose":
        return [np.transpose(x, attrs.get("perm"))], [dt0]
    if op == "Flatten":
        a = norm_axis(attrs.get("axis", 1), x.ndim, allow_end=True)
        return [x.reshape(numel(x.shape[:a]), numel(x.shape[a:]))], [dt0]
    if op == "Split":
        sizes = split_sizes(c.opset, x.shape, None if len(vals) < 2 else vals[1], attrs, nout)
        axis = norm_axis(attrs.get("axis", 0), x.ndim)
        return np.split(x, np.cumsum(sizes)[:-1], axis=axis), [dt0] * nout
    if op in BINARY_FOLD:
        with np.errstate(all="ignore"):
            out = np.asarray(BINARY_FOLD[op](vals[0], vals[1]))
        return [out], ["BOOL" if out.dtype == bool else dt0]
    if op in ("Min", "Max", "Sum", "Mean"):
        fn = {"Min": np.minimum, "Max": np.maximum, "Sum": np.add, "Mean": np.add}[op]
        out = vals[0]
        for v in vals[1:]:
            out = fn(out, v)
        if op == "Mean":
            out = out / len(vals)
        return [np.asarray(out).astype(vals[0].dtype)], [dt0]
    if op in UNARY_FOLD:
        with np.errstate(all="ignore"):
            return [np.asarray(UNARY_FOLD[op](x))], [dt0]
    if op == "Where":
        return [np.where(vals[0], vals[1], vals[2])], [dts[1]]
    if op == "Expand":
        shape = broadcast(x.shape, tuple(int(d) for d in vals[1]))
        return [np.broadcast_to(x, shape).copy()], [dt0]
    if op == "Range":
        return [np.arange(vals[0], vals[1], vals[2]).astype(vals[0].dtype)], [dt0]
    if op == "ConstantOfShape":
        value = attrs.get("value")
        fill = numpy_helper.to_array(value).reshape(-1) if value is not None \
            else np.zeros(1, np.float32)
        fdt = mu_dtype(value.data_type, "ConstantOfShape's value") if value is not None else "F32"
        return [np.full(tuple(int(d) for d in x), fill[0], dtype=fill.dtype)], [fdt]
    if op == "Trilu":
        k = int(np.asarray(vals[1]).reshape(-1)[0]) if len(vals) > 1 and vals[1] is not None else 0
        fn = np.triu if attrs.get("upper", 1) else np.tril
        return [fn(x, k)], [dt0]
    if op == "Tile":
        return [np.tile(x, [int(r) for r in vals[1]])], [dt0]
    raise ConvertError(f"cannot fold {op}")   # not reached: FOLDABLE lists the above


FOLDABLE = ({"Identity", "Dropout", "Cast", "CastLike", "Reshape", "Unsqueeze", "Squeeze",
             "Concat", "Gather", "Slice", "Transpose", "Flatten", "Split", "Where", "Expand",
             "Range", "ConstantOfShape", "Trilu", "Tile", "Min", "Max", "Sum", "Mean"}
            | set(BINARY_FOLD) | set(UNARY_FOLD))
# ops handled only as constants: an input computed at run time is an error
CONST_ONLY = {"Range", "ConstantOfShape"}
