#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Convert an ONNX model to a muster model directory.

usage: onnx2muster.py MODEL.onnx OUTDIR [--dim NAME=VALUE ...]

Writes OUTDIR/model.json (a "muster-graph" version 1, see the top of
src/model/model_int.h) and OUTDIR/model.safetensors (every weight as F32).
Needs python3-onnx and numpy, nothing else.

What it does
  * Initializers and Constant nodes become weights, converted to F32 from
    whatever float type they have (F16, BF16, F64); integer constants that
    feed arithmetic are converted too when F32 holds them exactly.
  * Shapes are static: every graph input must have a concrete shape once
    dynamic dims are fixed (--dim NAME=VALUE names a dim by its dim_param,
    or INPUT:AXIS; an unnamed or unset dim 0 defaults to 1 as the batch
    dim; any other dynamic dim is an error). Knowing every shape, the tool
    folds whatever is computed from constants and shapes alone (Shape,
    Gather, Unsqueeze, Concat, Cast ... chains that build Reshape targets)
    and writes explicit shapes into reshape nodes.
  * Nodes whose outputs no graph output needs are dropped; Identity and
    Dropout (inference) are elided.
  * Names are kept: values, weights and nodes are named as in the ONNX
    file. A name is changed only where muster cannot take it (empty, over
    4096 bytes, "__metadata__", or clashing), with a note on stderr.

ONNX ops and what they become
  Add Sub Mul Div Pow                    add sub mul div pow (broadcasting)
  Relu Sigmoid Tanh Sqrt Exp Neg Erf     the unary op of the same name
  Gelu (opset 20)                        gelu (approximate "none"/"tanh")
  MatMul / Gemm                          matmul / gemm (transA/B, alpha, beta)
  LayerNormalization                     layernorm (axis, epsilon)
  Softmax                                softmax; before opset 13, when the
                                         axis is not the last, reshape to
                                         2-D, softmax, reshape back
  ReduceMean ReduceSum ReduceMax         reduce_mean / reduce_sum / reduce_max
  Flatten                                flatten
  Reshape Unsqueeze Squeeze              reshape to the explicit shape
  Transpose Concat                       transpose concat
  Slice                                  slice (constant starts/ends/axes/
                                         steps; steps >= 1; clamped ends)
  Split                                  one slice per output
  Gather, constant data (a weight)       embedding (a row lookup; axis 0)
  Gather, constant indices               slices (+ concat, reshape)
  Identity Dropout, Cast to float        elided
  Constant ConstantOfShape Shape Size    folded into constants
  Range Equal Where Expand               folded (constant inputs only)

Anything else, a shape input computed at run time, or an integer tensor
used in arithmetic at run time is an error naming the node and its op;
the tool then exits with status 1 and writes nothing (outputs are written
to temporary files and renamed into place only when all succeeded).
Token ids (integer graph inputs) are declared as muster inputs, which
carry them as F32; a negative id is an error at run time in muster,
where ONNX would count from the end.
"""

import argparse
import hashlib
import json
import math
import os
import struct
import sys

try:
    import numpy as np
    import onnx
    from onnx import helper, mapping, numpy_helper
except ImportError as exc:  # pragma: no cover - depends on the machine
    sys.stderr.write(f"onnx2muster: error: {exc} (install python3-onnx and python3-numpy)\n")
    sys.exit(1)

F32 = np.float32
MAX_NAME = 4096          # bytes, as graph.c caps a name
MAX_RANK = 8             # MU_TENSOR_MAX_RANK
MAX_IO = 64              # MU_NODE_MAX_IO
FLOAT_TYPES = {1, 10, 11, 16}            # FLOAT FLOAT16 DOUBLE BFLOAT16
INT_TYPES = {2, 3, 4, 5, 6, 7, 12, 13}   # (U)INT8..64
BOOL_TYPE = 9


class ConvertError(Exception):
    """A model this tool cannot convert; the message names what and why."""


class Value:
    """A value of the graph as the converter sees it: its muster name, its
    static shape, its kind ("float", "int" or "bool"), and its contents
    when it is a constant (None when computed at run time)."""

    __slots__ = ("name", "shape", "kind", "const", "node")

    def __init__(self, name, shape, kind="float", const=None, node=None):
        self.name = name
        self.shape = tuple(int(d) for d in shape)
        self.kind = kind
        self.const = const
        self.node = node    # the muster node dict that makes it, if any

    @property
    def rank(self):
        return len(self.shape)


def kind_of_dtype(dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return "float"
    if dtype.kind in "iu":
        return "int"
    if dtype.kind == "b":
        return "bool"
    return None


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


def onnx_dtype(elem):
    return np.dtype(mapping.TENSOR_TYPE_TO_NP_TYPE[elem])


# ---------------------------------------------------------------------------
# constant folding: ONNX semantics in numpy, for nodes whose inputs are all
# known (and Shape/Size, which need only shapes)
# ---------------------------------------------------------------------------

def _erf(x):
    f = np.frompyfunc(math.erf, 1, 1)
    return np.asarray(f(np.asarray(x, np.float64)), np.float64).astype(x.dtype)


def _div(a, b):
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        q = np.abs(a) // np.abs(b)               # ONNX integer Div truncates
        return (q * np.sign(a) * np.sign(b)).astype(np.result_type(a, b))
    return a / b


def fold_node(c, op, vals, attrs, nout):
    """Outputs (arrays) of a node whose inputs `vals` are all constants."""
    x = vals[0] if vals else None
    if op == "Identity":
        return [x]
    if op == "Dropout":                          # inference: x, and an all-true mask
        return [x, np.ones(x.shape, bool)][:nout]
    if op == "Cast":
        return [x.astype(onnx_dtype(attrs["to"]))]
    if op == "Reshape":
        shape = vals[1] if c.opset >= 5 else attrs["shape"]
        return [x.reshape(reshape_target(x.shape, list(shape), attrs.get("allowzero", 0)))]
    if op == "Unsqueeze":
        return [x.reshape(unsqueeze_shape(x.shape, c.axes_arg(vals, attrs, 13)))]
    if op == "Squeeze":
        return [x.reshape(squeeze_shape(x.shape, c.axes_arg(vals, attrs, 13)))]
    if op == "Concat":
        return [np.concatenate(vals, axis=attrs["axis"])]
    if op == "Gather":
        axis = norm_axis(attrs.get("axis", 0), x.ndim)
        idx = np.asarray(vals[1], np.int64)
        return [np.take(x, np.where(idx < 0, idx + x.shape[axis], idx), axis=axis)]
    if op == "Slice":
        plan = slice_plan(x.shape, *c.slice_args(vals, attrs))
        for a, b, e, s in plan:
            x = np.take(x, np.arange(b, e, s, dtype=np.int64), axis=a)
        return [x]
    if op == "Transpose":
        return [np.transpose(x, attrs.get("perm"))]
    if op == "Flatten":
        a = norm_axis(attrs.get("axis", 1), x.ndim, allow_end=True)
        return [x.reshape(numel(x.shape[:a]), numel(x.shape[a:]))]
    if op == "Split":
        sizes = c.split_sizes(x.shape, vals, attrs, nout)
        axis = norm_axis(attrs.get("axis", 0), x.ndim)
        return np.split(x, np.cumsum(sizes)[:-1], axis=axis)
    binary = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": _div,
              "Pow": np.power, "Equal": np.equal, "MatMul": np.matmul}
    if op in binary:
        out = binary[op](vals[0], vals[1])
        if op in ("Add", "Sub", "Mul", "MatMul") and out.dtype != vals[0].dtype:
            out = out.astype(vals[0].dtype)
        if op == "Pow":
            out = out.astype(vals[0].dtype)
        return [out]
    unary = {"Neg": np.negative, "Sqrt": np.sqrt, "Exp": np.exp, "Tanh": np.tanh,
             "Relu": lambda v: np.maximum(v, 0).astype(v.dtype),
             "Sigmoid": lambda v: (1 / (1 + np.exp(-v))).astype(v.dtype), "Erf": _erf}
    if op in unary:
        return [np.asarray(unary[op](x))]
    if op == "Where":
        return [np.where(vals[0], vals[1], vals[2])]
    if op == "Expand":
        shape = broadcast(x.shape, tuple(int(d) for d in vals[1]))
        return [np.broadcast_to(x, shape).copy()]
    if op == "Range":
        return [np.arange(vals[0], vals[1], vals[2]).astype(vals[0].dtype)]
    if op == "ConstantOfShape":
        value = attrs.get("value")
        fill = numpy_helper.to_array(value).reshape(-1) if value is not None \
            else np.zeros(1, F32)
        return [np.full(tuple(int(d) for d in x), fill[0], dtype=fill.dtype)]
    raise ConvertError(f"cannot fold {op}")   # not reached: FOLDABLE lists the above


FOLDABLE = {"Identity", "Dropout", "Cast", "Reshape", "Unsqueeze", "Squeeze", "Concat",
            "Gather", "Slice", "Transpose", "Flatten", "Split", "Add", "Sub", "Mul",
            "Div", "Pow", "Equal", "MatMul", "Neg", "Sqrt", "Exp", "Tanh", "Relu",
            "Sigmoid", "Erf", "Where", "Expand", "Range", "ConstantOfShape"}
# ops handled only as constants: an input computed at run time is an error
CONST_ONLY = {"Equal", "Where", "Expand", "Range", "ConstantOfShape"}


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


# ---------------------------------------------------------------------------
# the converter
# ---------------------------------------------------------------------------

class Converter:
    """One conversion: walks the ONNX graph in order, folding constants
    and emitting muster nodes; `graph()` and `weights` are the result."""

    def __init__(self, model, dims, log=None):
        self.model = model
        self.g = model.graph
        self.opset = next((o.version for o in model.opset_import
                           if o.domain in ("", "ai.onnx")), 1)
        self.dims = dict(dims)
        self.dims_used = set()
        self.log = log or (lambda msg: None)
        self.env = {}          # ONNX value name -> Value
        self.nodes = []        # muster nodes
        self.inputs = []       # muster graph inputs
        self.weights = {}      # muster name -> f32 array, in first-use order
        self.onnx_names = {v for n in self.g.node for v in list(n.input) + list(n.output)}
        self.onnx_names.update(v.name for v in self.g.input)
        self.onnx_names.update(t.name for t in self.g.initializer)
        self.taken = set()     # muster value names handed out
        self.node_names = set()

    # ---- names ----

    def value_name(self, onnx_name):
        """The muster name for an ONNX value: the same unless muster cannot
        take it."""
        ok = (onnx_name and len(onnx_name.encode()) <= MAX_NAME
              and onnx_name != "__metadata__" and onnx_name not in self.taken)
        name = onnx_name if ok else self.fresh(self.shorten(onnx_name or "value"))
        if not ok:
            self.log(f"note: value {onnx_name[:80]!r} is named {name!r} in muster")
        self.taken.add(name)
        return name

    @staticmethod
    def shorten(name):
        if len(name.encode()) <= MAX_NAME - 64:
            return name
        digest = hashlib.sha256(name.encode()).hexdigest()[:16]
        return name.encode()[:MAX_NAME - 128].decode(errors="ignore") + "~" + digest

    def fresh(self, base):
        """A value name no ONNX value and no muster value has."""
        name, i = base, 1
        while name in self.taken or name in self.onnx_names or name == "__metadata__":
            name, i = f"{base}~{i}", i + 1
        self.taken.add(name)
        return name

    def node_name(self, base):
        base = self.shorten(base)
        name, i = base, 1
        while name in self.node_names:
            name, i = f"{base}~{i}", i + 1
        self.node_names.add(name)
        return name

    # ---- graph inputs ----

    def add_inputs(self):
        for t in self.g.initializer:
            self.env[t.name] = self.constant(t.name, numpy_helper.to_array(t))
        if len(self.g.sparse_initializer):
            raise ConvertError("sparse initializers are not supported")
        for inp in self.g.input:
            if inp.name in self.env:    # an initializer: a constant
                continue
            tt = inp.type.tensor_type
            if not inp.type.HasField("tensor_type"):
                raise ConvertError(f"input {inp.name!r} is not a tensor")
            if tt.elem_type in FLOAT_TYPES:
                kind = "float"
            elif tt.elem_type in INT_TYPES:
                kind = "int"
            else:
                raise ConvertError(f"input {inp.name!r} has element type "
                                   f"{onnx.TensorProto.DataType.Name(tt.elem_type)}, "
                                   "which muster cannot carry")
            if not tt.HasField("shape"):
                raise ConvertError(f"input {inp.name!r} has no declared shape")
            shape = [self.input_dim(inp.name, axis, d) for axis, d in enumerate(tt.shape.dim)]
            if len(shape) > MAX_RANK:
                raise ConvertError(f"input {inp.name!r} has rank {len(shape)} (muster: at most 8)")
            v = Value(self.value_name(inp.name), shape, kind)
            self.env[inp.name] = v
            self.inputs.append({"name": v.name, "shape": list(v.shape)})
        unused = set(self.dims) - self.dims_used
        if unused:
            raise ConvertError("--dim " + ", ".join(sorted(unused))
                               + ": no dynamic input dimension has that name")

    def input_dim(self, name, axis, d):
        """A dim of a graph input: its value, else --dim by dim_param or
        INPUT:AXIS, else 1 for dim 0 (the batch). A dim_value of 0 counts as
        unknown (exporters write it for dynamic dims)."""
        if d.HasField("dim_value") and d.dim_value > 0:
            return int(d.dim_value)
        keys = ([d.dim_param] if d.dim_param else []) + [f"{name}:{axis}"]
        for key in keys:
            if key in self.dims:
                self.dims_used.add(key)
                return self.dims[key]
        label = f"{d.dim_param!r}" if d.dim_param else "unnamed"
        if axis == 0:
            self.log(f"note: input {name!r} dim 0 ({label}) is dynamic; taking it as the "
                     f"batch dim, 1 (--dim {keys[0]}=N to change)")
            return 1
        raise ConvertError(f"input {name!r} dim {axis} ({label}) is dynamic: give its "
                           f"size with --dim {keys[0]}=N")

    # ---- values ----

    def constant(self, onnx_name, array, name=None):
        array = np.asarray(array)
        kind = kind_of_dtype(array.dtype)
        if kind is None:
            raise ConvertError(f"constant {onnx_name!r} has dtype {array.dtype}, "
                               "which muster cannot carry")
        return Value(name or self.value_name(onnx_name), array.shape, kind, const=array)

    def weight(self, v, where):
        """The weight name for constant v (written as F32 on first use)."""
        if v.name in self.weights:
            return v.name
        a = v.const
        if a.dtype.kind == "b":
            raise ConvertError(f"{where}: boolean constant {v.name!r} used at run time")
        if a.dtype.kind in "iu" and a.size and np.abs(a.astype(np.float64)).max() > 2 ** 24:
            raise ConvertError(f"{where}: integer constant {v.name!r} has values F32 "
                               "cannot hold exactly")
        if v.rank > MAX_RANK:
            raise ConvertError(f"{where}: constant {v.name!r} has rank {v.rank} (at most 8)")
        # np.array, not ascontiguousarray, which would make a scalar rank 1
        self.weights[v.name] = np.array(a, dtype="<f4", order="C")
        return v.name

    def emit(self, where, op, inputs, shape, attrs=None, name=None, out=None, kind="float"):
        """Append a muster node; returns the Value it makes. inputs are
        Values (constants become weights); out is the output's muster name
        (default: a fresh one derived from the node name)."""
        if len(shape) > MAX_RANK:
            raise ConvertError(f"{where}: {op} would make a tensor of rank {len(shape)} "
                               "(muster: at most 8)")
        names = [self.weight(v, where) if v.const is not None else v.name for v in inputs]
        node = {"name": self.node_name(name or where.name), "op": op, "inputs": names,
                "outputs": [out or self.fresh(f"{where.name}::{op}")]}
        if attrs:
            node["attrs"] = attrs
        self.nodes.append(node)
        return Value(node["outputs"][0], shape, kind, node=node)

    # ---- helpers for handlers and folding ----

    def axes_arg(self, vals, attrs, since):
        """axes from the attribute (before opset `since`) or input 1."""
        if self.opset < since:
            return attrs.get("axes")
        return None if len(vals) < 2 or vals[1] is None else [int(a) for a in vals[1]]

    def slice_args(self, vals, attrs):
        if self.opset < 10:
            return attrs["starts"], attrs["ends"], attrs.get("axes"), None
        get = lambda i: None if len(vals) <= i or vals[i] is None else [int(a) for a in vals[i]]
        return get(1), get(2), get(3), get(4)

    def split_sizes(self, shape, vals, attrs, nout):
        axis = norm_axis(attrs.get("axis", 0), len(shape))
        d = shape[axis]
        if self.opset < 13:
            sizes = attrs.get("split")
        else:
            sizes = None if len(vals) < 2 or vals[1] is None else [int(s) for s in vals[1]]
        if sizes:
            if sum(sizes) != d or len(sizes) != nout:
                raise ValueError(f"split sizes {list(sizes)} do not cut dim {d} into {nout}")
            return list(sizes)
        n = attrs.get("num_outputs", nout)
        if self.opset >= 18 and "num_outputs" in attrs:
            step = -(-d // n)
            return [min(step, d - i * step) for i in range(n)]
        if d % n:
            raise ValueError(f"dim {d} does not split evenly into {n}")
        return [d // n] * n

    # ---- the walk ----

    def live_nodes(self):
        """Indices of the nodes some graph output depends on."""
        need = {o.name for o in self.g.output}
        live = set()
        for i in range(len(self.g.node) - 1, -1, -1):
            n = self.g.node[i]
            if any(o in need for o in n.output if o):
                live.add(i)
                need.update(x for x in n.input if x)
        self.needed = need
        return live

    def run(self):
        self.add_inputs()
        live = self.live_nodes()
        made_later = {}
        for i, n in enumerate(self.g.node):
            for o in n.output:
                made_later.setdefault(o, i)
        for i, n in enumerate(self.g.node):
            if i not in live:
                continue
            where = Where(self, n, i)
            for x in n.input:
                if x and x not in self.env:
                    if made_later.get(x, -1) > i:
                        raise ConvertError(f"{where}: input {x!r} is computed later "
                                           "(the graph is not in topological order)")
                    raise ConvertError(f"{where}: input {x!r} is not defined anywhere")
            try:
                outs = self.convert_node(where, n)
            except KeyError as exc:       # a required attribute is missing
                raise ConvertError(f"{where}: missing attribute {exc}") from None
            except (ValueError, TypeError, IndexError) as exc:  # shapes, attributes
                raise ConvertError(f"{where}: {exc}") from None
            for k, o in enumerate(n.output):
                if o and k < len(outs) and outs[k] is not None:
                    self.env[o] = outs[k]
                elif o and o in self.needed:
                    raise ConvertError(f"{where}: output {k} ({o!r}) is used, and muster "
                                       f"does not compute it for {n.op_type}")
        self.finish_outputs()

    def convert_node(self, where, n):
        op = n.op_type
        if n.domain not in ("", "ai.onnx"):
            raise ConvertError(f"{where}: unsupported op {n.domain}:{op}")
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        ins = [self.env[x] if x else None for x in n.input]
        nout = len(n.output)
        if op == "Constant":
            return [self.constant(n.output[0], constant_value(where, attrs))]
        if op in ("Shape", "Size"):
            shape = ins[0].shape
            if op == "Size":
                return [self.constant(n.output[0], np.array(numel(shape), np.int64))]
            start, end = attrs.get("start", 0), attrs.get("end", None)
            return [self.constant(n.output[0], np.array(shape[start:end], np.int64))]
        if op in FOLDABLE and all(v is None or v.const is not None for v in ins) \
                and any(v is not None for v in ins):
            vals = [None if v is None else v.const for v in ins]
            outs = fold_node(self, op, vals, attrs, nout)
            return [self.constant(o, a) if o else None for o, a in zip(n.output, outs)]
        handler = HANDLERS.get(op)
        if handler is None:
            if op in CONST_ONLY:
                runtime = [x for x, v in zip(n.input, ins) if v is not None and v.const is None]
                raise ConvertError(f"{where}: {op} is supported only on constants, and "
                                   f"input {runtime[:1]} is computed at run time")
            raise ConvertError(f"{where}: unsupported op {op} (supported: "
                               + ", ".join(sorted(SUPPORTED)) + ")")
        return handler(where, ins, attrs)

    def finish_outputs(self):
        """Every ONNX graph output becomes a muster output of the same name.
        Usually its value already has that name. An output an elided
        Identity made gets it by renaming the value it forwards (when no
        other output uses that value's name); an output that is a graph
        input, a constant or a value shared with another output gets a copy
        node (a reshape to the same shape)."""
        self.outputs = []
        onnx_outputs = [o.name for o in self.g.output]
        for o in onnx_outputs:
            v = self.env.get(o)
            if v is None:
                raise ConvertError(f"output {o!r} is never computed")
            made = v.const is None and v.node is not None
            if made and v.name == o and o not in self.outputs:
                self.outputs.append(o)
                continue
            if made and v.name not in self.outputs and v.name not in onnx_outputs \
                    and o not in self.names_in_use():
                self.rename(v.name, o)
                self.outputs.append(o)
                continue
            taken = o in self.names_in_use() or o == v.name   # (v.name: a weight's)
            target = self.fresh(o + "~out") if taken else o
            where = Where(self, None, None, name=f"{o}/copy")
            copy = self.emit(where, "reshape", [v], v.shape, {"shape": list(v.shape)},
                             out=target, kind=v.kind)
            self.outputs.append(copy.name)
            if copy.name != o:
                self.log(f"note: output {o!r} is named {copy.name!r} in muster")

    def names_in_use(self):
        used = {i["name"] for i in self.inputs} | set(self.weights)
        for n in self.nodes:
            used.update(n["outputs"])
        return used

    def rename(self, old, new):
        for n in self.nodes:
            n["inputs"] = [new if x == old else x for x in n["inputs"]]
            n["outputs"] = [new if x == old else x for x in n["outputs"]]
        for v in self.env.values():
            if v.name == old and v.const is None:
                v.name = new
        self.taken.add(new)

    def graph(self):
        return {"format": "muster-graph", "version": 1, "inputs": self.inputs,
                "outputs": self.outputs, "nodes": self.nodes}


class Where:
    """The node being converted: what error messages name, what generated
    node names start from, and the converter (`c`) handlers work with."""

    def __init__(self, conv, node, index, name=None):
        self.c = conv
        self.node = node
        self.op = node.op_type if node is not None else None
        self.name = name or node.name or f"{node.op_type}_{index}"

    def __str__(self):
        return f"node {self.name!r} ({self.op})" if self.op else f"node {self.name!r}"


def constant_value(where, attrs):
    if "value" in attrs:
        return numpy_helper.to_array(attrs["value"])
    if "value_float" in attrs:
        return np.array(attrs["value_float"], F32)
    if "value_floats" in attrs:
        return np.array(attrs["value_floats"], F32)
    if "value_int" in attrs:
        return np.array(attrs["value_int"], np.int64)
    if "value_ints" in attrs:
        return np.array(attrs["value_ints"], np.int64)
    raise ConvertError(f"{where}: only tensor, float(s) and int(s) constants are "
                       f"supported, not {', '.join(attrs) or 'none'}")


# ---------------------------------------------------------------------------
# handlers: one ONNX op at run time -> muster nodes
# ---------------------------------------------------------------------------

def _runtime_float(where, v, what="input"):
    if v.const is None and v.kind != "float":
        raise ConvertError(f"{where}: {what} {v.name!r} is an {v.kind} tensor computed at run "
                           "time; muster computes in F32, so only float tensors may feed "
                           "arithmetic")
    return v


def _const_ints(where, v, what):
    if v is None:
        return None
    if v.const is None:
        raise ConvertError(f"{where}: {what} ({v.name!r}) must be a constant, and it is "
                           "computed at run time")
    return [int(a) for a in np.asarray(v.const).reshape(-1)]




def h_binary(op):
    def handler(where, ins, attrs):
        a, b = (_runtime_float(where, v) for v in ins[:2])
        return [where.c.emit(where, op, [a, b], broadcast(a.shape, b.shape),
                             out=where.c.value_name(where.node.output[0]))]
    return handler


def h_unary(op):
    def handler(where, ins, attrs):
        x = _runtime_float(where, ins[0])
        extra = None
        if op == "gelu":
            approx = attrs.get("approximate", b"none")
            approx = approx.decode() if isinstance(approx, bytes) else approx
            if approx not in ("none", "tanh"):
                raise ConvertError(f"{where}: Gelu approximate={approx!r} is not supported")
            extra = {"approximate": approx} if approx != "none" else None
        return [where.c.emit(where, op, [x], x.shape, extra,
                             out=where.c.value_name(where.node.output[0]))]
    return handler


def h_gemm(where, ins, attrs):
    a, b = (_runtime_float(where, v) for v in ins[:2])
    c = ins[2] if len(ins) > 2 else None
    if a.rank != 2 or b.rank != 2:
        raise ConvertError(f"{where}: Gemm needs 2-D A and B, got {list(a.shape)} and "
                           f"{list(b.shape)}")
    ta, tb = int(attrs.get("transA", 0)), int(attrs.get("transB", 0))
    m, k = (a.shape[1], a.shape[0]) if ta else a.shape
    kb, n = (b.shape[1], b.shape[0]) if tb else b.shape
    if k != kb:
        raise ConvertError(f"{where}: inner dimensions {k} and {kb} differ")
    out = {}
    if ta:
        out["transA"] = 1
    if tb:
        out["transB"] = 1
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    if alpha != 1.0:
        out["alpha"] = alpha
    args = [a, b]
    if c is not None:
        _runtime_float(where, c)
        if broadcast(c.shape, (m, n)) != (m, n):
            raise ConvertError(f"{where}: C {list(c.shape)} does not broadcast to [{m}, {n}]")
        if beta != 1.0:
            out["beta"] = beta
        args.append(c)
    return [where.c.emit(where, "gemm", args, (m, n), out or None,
                         out=where.c.value_name(where.node.output[0]))]


def h_matmul(where, ins, attrs):
    a, b = (_runtime_float(where, v) for v in ins[:2])
    return [where.c.emit(where, "matmul", [a, b], matmul_shape(a.shape, b.shape),
                         out=where.c.value_name(where.node.output[0]))]


def _norm_param(where, p, inner, norm_shape, what):
    """A layernorm scale/bias as muster takes it: numel inner or 1."""
    if p is None:
        return None
    _runtime_float(where, p, what)
    if numel(p.shape) in (inner, 1):
        return p
    if p.const is None:
        raise ConvertError(f"{where}: {what} {list(p.shape)} computed at run time must have "
                           f"{inner} elements (the normalized size) or 1")
    try:
        full = np.broadcast_to(p.const, norm_shape)
    except ValueError:
        raise ConvertError(f"{where}: {what} {list(p.shape)} does not broadcast to the "
                           f"normalized shape {list(norm_shape)}") from None
    return where.c.constant(None, full.copy(), name=where.c.fresh(f"{p.name}::broadcast"))


def h_layernorm(where, ins, attrs):
    x = _runtime_float(where, ins[0])
    axis = norm_axis(int(attrs.get("axis", -1)), x.rank)
    eps = float(attrs.get("epsilon", 1e-5))
    norm_shape = x.shape[axis:]
    inner = numel(norm_shape)
    g = _norm_param(where, ins[1], inner, norm_shape, "scale")
    b = _norm_param(where, ins[2] if len(ins) > 2 else None, inner, norm_shape, "bias")
    args = [g] if b is None else [g, b]
    return [where.c.emit(where, "layernorm", [x] + args, x.shape,
                         {"axis": axis, "epsilon": eps},
                         out=where.c.value_name(where.node.output[0]))]


def h_softmax(where, ins, attrs):
    x = _runtime_float(where, ins[0])
    axis = norm_axis(int(attrs.get("axis", -1 if where.c.opset >= 13 else 1)), x.rank)
    out = where.c.value_name(where.node.output[0])
    if where.c.opset >= 13 or axis == x.rank - 1:
        return [where.c.emit(where, "softmax", [x], x.shape, {"axis": axis}, out=out)]
    # opset < 13: softmax over the 2-D coercion [prod(:axis), prod(axis:)]
    flat = (numel(x.shape[:axis]), numel(x.shape[axis:]))
    h = where.c.emit(where, "reshape", [x], flat, {"shape": list(flat)},
                     name=f"{where.name}/to2d")
    h = where.c.emit(where, "softmax", [h], flat, {"axis": 1})
    return [where.c.emit(where, "reshape", [h], x.shape, {"shape": list(x.shape)},
                         name=f"{where.name}/back", out=out)]


def _reshape_to(where, x, shape, out):
    for i, d in enumerate(shape):   # muster reads a 0 as "keep the input dim"
        if d == 0 and (i >= x.rank or x.shape[i] != 0):
            raise ConvertError(f"{where}: reshape to {list(shape)} has a zero-size dim muster "
                               "cannot express")
    return where.c.emit(where, "reshape", [x], shape, {"shape": list(shape)}, out=out,
                        kind=x.kind)


def h_reshape(where, ins, attrs):
    x = ins[0]
    shape = _const_ints(where, ins[1], "the target shape") if where.c.opset >= 5 \
        else list(attrs["shape"])
    target = reshape_target(x.shape, shape, bool(attrs.get("allowzero", 0)))
    return [_reshape_to(where, x, target, where.c.value_name(where.node.output[0]))]


def h_unsqueeze(where, ins, attrs):
    axes = attrs.get("axes") if where.c.opset < 13 else _const_ints(where, ins[1], "axes")
    return [_reshape_to(where, ins[0], unsqueeze_shape(ins[0].shape, axes),
                        where.c.value_name(where.node.output[0]))]


def h_squeeze(where, ins, attrs):
    if where.c.opset < 13:
        axes = attrs.get("axes")
    else:
        axes = _const_ints(where, ins[1], "axes") if len(ins) > 1 and ins[1] else None
    return [_reshape_to(where, ins[0], squeeze_shape(ins[0].shape, axes),
                        where.c.value_name(where.node.output[0]))]


def h_flatten(where, ins, attrs):
    x = ins[0]
    axis = norm_axis(int(attrs.get("axis", 1)), x.rank, "flatten axis", allow_end=True)
    shape = (numel(x.shape[:axis]), numel(x.shape[axis:]))
    return [where.c.emit(where, "flatten", [x], shape, {"axis": axis},
                         out=where.c.value_name(where.node.output[0]), kind=x.kind)]


def h_transpose(where, ins, attrs):
    x = ins[0]
    perm = [int(p) for p in attrs.get("perm", range(x.rank - 1, -1, -1))]
    if sorted(perm) != list(range(x.rank)):
        raise ConvertError(f"{where}: perm {perm} is not a permutation of {x.rank} dims")
    return [where.c.emit(where, "transpose", [x], tuple(x.shape[p] for p in perm),
                         {"perm": perm}, out=where.c.value_name(where.node.output[0]),
                         kind=x.kind)]


def _concat(where, parts, axis, out, name=None):
    """concat of Values along axis, chained when over MAX_IO inputs."""
    while len(parts) > MAX_IO:
        head = parts[:MAX_IO]
        shape = list(head[0].shape)
        shape[axis] = sum(p.shape[axis] for p in head)
        parts = [where.c.emit(where, "concat", head, shape, {"axis": axis},
                              name=f"{where.name}/part", kind=head[0].kind)] + parts[MAX_IO:]
    shape = list(parts[0].shape)
    shape[axis] = sum(p.shape[axis] for p in parts)
    return where.c.emit(where, "concat", parts, shape, {"axis": axis}, out=out, name=name,
                        kind=parts[0].kind)


def h_concat(where, ins, attrs):
    parts = [v for v in ins if v is not None]
    axis = norm_axis(int(attrs["axis"]), parts[0].rank, "concat axis")
    for p in parts[1:]:
        if p.rank != parts[0].rank or any(p.shape[i] != parts[0].shape[i]
                                          for i in range(p.rank) if i != axis):
            raise ConvertError(f"{where}: {p.name!r} {list(p.shape)} does not match "
                               f"{list(parts[0].shape)} off axis {axis}")
    if len({p.kind for p in parts}) > 1 and any(p.const is None and p.kind != "float"
                                                for p in parts):
        raise ConvertError(f"{where}: mixes integer and float tensors")
    return [_concat(where, parts, axis, where.c.value_name(where.node.output[0]))]


def _slice_node(where, x, plan, out=None, name=None):
    """A muster slice for a plan of positive-step ranges."""
    shape = list(x.shape)
    starts, ends, axes, steps = [], [], [], []
    for a, b, e, s in plan:
        if s < 1:
            raise ConvertError(f"{where}: slice step {s}: muster slices with steps >= 1 only")
        shape[a] = slice_len(b, e, s)
        starts.append(b)
        ends.append(max(e, b))
        axes.append(a)
        steps.append(s)
    attrs = {"starts": starts, "ends": ends, "axes": axes}
    if any(s != 1 for s in steps):
        attrs["steps"] = steps
    return where.c.emit(where, "slice", [x], shape, attrs, out=out, name=name, kind=x.kind)


def h_slice(where, ins, attrs):
    x = ins[0]
    if where.c.opset < 10:
        args = attrs["starts"], attrs["ends"], attrs.get("axes"), None
    else:
        names = ("starts", "ends", "axes", "steps")
        args = [_const_ints(where, ins[i] if len(ins) > i else None, names[i - 1])
                for i in range(1, 5)]
    return [_slice_node(where, x, slice_plan(x.shape, *args),
                        out=where.c.value_name(where.node.output[0]))]


def h_split(where, ins, attrs):
    x = ins[0]
    n = where.node
    if where.c.opset >= 13 and len(ins) > 1 and ins[1] is not None:
        _const_ints(where, ins[1], "split sizes")
    vals = [None, None if len(ins) < 2 or ins[1] is None else ins[1].const]
    sizes = where.c.split_sizes(x.shape, vals, attrs, len(n.output))
    axis = norm_axis(attrs.get("axis", 0), x.rank)
    outs, begin = [], 0
    for k, (o, size) in enumerate(zip(n.output, sizes)):
        if o and o in where.c.needed:
            outs.append(_slice_node(where, x, [(axis, begin, begin + size, 1)],
                                    out=where.c.value_name(o), name=f"{where.name}/{k}"))
        else:
            outs.append(None)
        begin += size
    return outs


def h_reduce(op, axes_input_since):
    def handler(where, ins, attrs):
        x = _runtime_float(where, ins[0])
        keep = int(attrs.get("keepdims", 1))
        if where.c.opset < axes_input_since:
            axes = attrs.get("axes")
        else:
            axes = _const_ints(where, ins[1], "axes") if len(ins) > 1 and ins[1] else None
        out = where.c.value_name(where.node.output[0])
        if not axes:
            if attrs.get("noop_with_empty_axes", 0):
                return [_reshape_to(where, x, x.shape, out)]
            axes = list(range(x.rank))
        axes = sorted({norm_axis(int(a), x.rank, "reduce axis") for a in axes})
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)) if keep \
            else tuple(d for i, d in enumerate(x.shape) if i not in axes)
        return [where.c.emit(where, op, [x], shape, {"axes": axes, "keepdims": keep}, out=out)]
    return handler


def h_gather(where, ins, attrs):
    data, idx = ins[0], ins[1]
    axis = norm_axis(int(attrs.get("axis", 0)), data.rank, "gather axis")
    out = where.c.value_name(where.node.output[0])
    out_shape = data.shape[:axis] + idx.shape + data.shape[axis + 1:]
    if idx.const is None and data.const is not None:
        # a row lookup in a weight: embedding(table [V, D], ids)
        if idx.kind != "int":
            raise ConvertError(f"{where}: indices {idx.name!r} are not integers")
        if axis != 0:
            raise ConvertError(f"{where}: Gather with indices computed at run time is "
                               "supported only as a row lookup (axis 0) in a weight")
        if idx.rank >= MAX_RANK:
            raise ConvertError(f"{where}: indices of rank {idx.rank} (muster: at most 7)")
        table = data
        if data.rank != 2:
            rows = data.const.reshape(data.shape[0] if data.rank else 1, -1)
            table = where.c.constant(None, rows, name=where.c.fresh(f"{data.name}::rows"))
        emb_shape = idx.shape + (table.shape[1],)
        if emb_shape == out_shape:
            return [where.c.emit(where, "embedding", [table, idx], emb_shape, out=out)]
        h = where.c.emit(where, "embedding", [table, idx], emb_shape)
        return [_reshape_to(where, h, out_shape, out)]
    if idx.const is not None and data.const is None:
        # constant indices: runs of consecutive indices are slices
        d = data.shape[axis]
        flat = [int(i) for i in np.asarray(idx.const).reshape(-1)]
        flat = [i + d if i < 0 else i for i in flat]
        if not flat or any(not 0 <= i < d for i in flat):
            raise ConvertError(f"{where}: constant indices {flat[:8]} out of range for dim {d}")
        runs, start = [], 0
        for j in range(1, len(flat) + 1):
            if j == len(flat) or flat[j] != flat[j - 1] + 1:
                runs.append((flat[start], flat[j - 1] + 1))
                start = j
        cat_shape = data.shape[:axis] + (len(flat),) + data.shape[axis + 1:]
        final = out if cat_shape == out_shape else None
        if len(runs) == 1:
            h = _slice_node(where, data, [(axis, runs[0][0], runs[0][1], 1)], out=final)
        else:
            parts = [_slice_node(where, data, [(axis, b, e, 1)], name=f"{where.name}/{k}")
                     for k, (b, e) in enumerate(runs)]
            h = _concat(where, parts, axis, final)
        return [h if final else _reshape_to(where, h, out_shape, out)]
    raise ConvertError(f"{where}: Gather is supported with constant data (an embedding "
                       "lookup) or constant indices, not with both computed at run time")


def h_identity(where, ins, attrs):
    return [ins[0]]


def h_dropout(where, ins, attrs):
    if len(ins) > 2 and ins[2] is not None:
        mode = _const_ints(where, ins[2], "training_mode")
        if any(mode):
            raise ConvertError(f"{where}: Dropout in training mode is not supported")
    return [ins[0], None]


def h_cast(where, ins, attrs):
    x, to = ins[0], int(attrs["to"])
    if to in (1, 11):                     # FLOAT, DOUBLE: muster's F32
        if x.kind == "bool":
            raise ConvertError(f"{where}: Cast from bool at run time is not supported")
        if x.kind == "float":
            return [x]
        return [Value(x.name, x.shape, "float", node=x.node)]
    if to in INT_TYPES and x.kind == "int":
        return [x]
    raise ConvertError(f"{where}: Cast to {onnx.TensorProto.DataType.Name(to)} of a "
                       f"{x.kind} tensor at run time is not supported (muster computes in F32)")


HANDLERS = {
    "Add": h_binary("add"), "Sub": h_binary("sub"), "Mul": h_binary("mul"),
    "Div": h_binary("div"), "Pow": h_binary("pow"),
    "Relu": h_unary("relu"), "Sigmoid": h_unary("sigmoid"), "Tanh": h_unary("tanh"),
    "Sqrt": h_unary("sqrt"), "Exp": h_unary("exp"), "Neg": h_unary("neg"),
    "Erf": h_unary("erf"), "Gelu": h_unary("gelu"),
    "Gemm": h_gemm, "MatMul": h_matmul, "LayerNormalization": h_layernorm,
    "Softmax": h_softmax,
    "ReduceMean": h_reduce("reduce_mean", 18), "ReduceSum": h_reduce("reduce_sum", 13),
    "ReduceMax": h_reduce("reduce_max", 18),
    "Reshape": h_reshape, "Unsqueeze": h_unsqueeze, "Squeeze": h_squeeze,
    "Flatten": h_flatten, "Transpose": h_transpose, "Concat": h_concat,
    "Slice": h_slice, "Split": h_split, "Gather": h_gather,
    "Identity": h_identity, "Dropout": h_dropout, "Cast": h_cast,
}
SUPPORTED = set(HANDLERS) | FOLDABLE | {"Constant", "Shape", "Size"}


# ---------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------

def graph_text(graph):
    """JSON with one node per line (readable, diffable)."""
    head = {k: v for k, v in graph.items() if k != "nodes"}
    nodes = ",\n".join(json.dumps(n, allow_nan=False) for n in graph["nodes"])
    return json.dumps(head, allow_nan=False)[:-1] + ', "nodes": [\n' + nodes + "\n]}\n"


def write_safetensors(path, weights, metadata):
    header, offset = {"__metadata__": metadata}, 0
    for name, a in weights.items():
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)          # the data area starts 8-aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for a in weights.values():
            f.write(a.tobytes())
        f.flush()
        os.fsync(f.fileno())


def write_outputs(outdir, graph, weights, source):
    """Write both files next to their final names, then rename them into
    place; on any failure remove what was written."""
    created = not os.path.isdir(outdir)
    os.makedirs(outdir, exist_ok=True)
    tag = f".tmp.{os.getpid()}"
    st, js = os.path.join(outdir, "model.safetensors"), os.path.join(outdir, "model.json")
    try:
        write_safetensors(st + tag, weights, {"generator": "onnx2muster",
                                              "source": os.path.basename(source)})
        with open(js + tag, "w") as f:
            f.write(graph_text(graph))
        os.replace(st + tag, st)
        os.replace(js + tag, js)
    except BaseException:
        for p in (st + tag, js + tag):
            if os.path.exists(p):
                os.unlink(p)
        if created:
            try:
                os.rmdir(outdir)
            except OSError:
                pass
        raise


def parse_dims(items):
    dims = {}
    for item in items or []:
        name, sep, value = item.rpartition("=")
        if not sep or not name:
            raise ConvertError(f"--dim {item!r}: expected NAME=VALUE")
        try:
            v = int(value)
        except ValueError:
            v = 0
        if v < 1:
            raise ConvertError(f"--dim {item!r}: the value must be a positive integer")
        dims[name] = v
    return dims


def convert(model_path, outdir, dims=None, log=None):
    """Convert; returns (graph, weights). Raises ConvertError."""
    try:
        model = onnx.load(model_path)
    except Exception as exc:  # protobuf decode errors, missing files ...
        raise ConvertError(f"cannot load {model_path}: {exc}") from None
    conv = Converter(model, dims or {}, log)
    conv.run()
    graph = conv.graph()
    write_outputs(outdir, graph, conv.weights, model_path)
    return graph, conv.weights


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="onnx2muster.py",
        description="Convert an ONNX model to a muster model directory "
                    "(OUTDIR/model.json and OUTDIR/model.safetensors, F32).",
        epilog="Supported ops: " + ", ".join(sorted(SUPPORTED)) + ". Anything else is an "
               "error naming the node; the exit status is then 1 and nothing is written.")
    p.add_argument("model", metavar="MODEL.onnx", help="the ONNX model")
    p.add_argument("outdir", metavar="OUTDIR", help="directory to write (created if needed)")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE",
                   help="size of a dynamic input dim, by its dim_param name or as "
                        "INPUT:AXIS (repeatable); an unset dim 0 is taken as the batch, 1")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    args = p.parse_args(argv)
    log = (lambda m: None) if args.quiet else (lambda m: print("onnx2muster: " + m,
                                                               file=sys.stderr))
    try:
        graph, weights = convert(args.model, args.outdir, parse_dims(args.dim), log)
    except ConvertError as exc:
        print(f"onnx2muster: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"onnx2muster: error: writing {args.outdir}: {exc}", file=sys.stderr)
        return 1
    if not args.quiet:
        total = sum(a.nbytes for a in weights.values())
        print(f"onnx2muster: wrote {args.outdir}: {len(graph['nodes'])} nodes, "
              f"{len(weights)} weights ({total} bytes), inputs "
              + ", ".join(f"{i['name']}{i['shape']}" for i in graph["inputs"])
              + ", outputs " + ", ".join(graph["outputs"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
