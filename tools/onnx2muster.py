#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Convert an ONNX model to a muster model directory.

usage: onnx2muster.py MODEL.onnx OUTDIR [--dim NAME=VALUE ...] [--const NAME=FILE.npy ...]

Writes OUTDIR/model.json (a "muster-graph" version 1, see
docs/model-format.md) and OUTDIR/model.safetensors (the weights). Needs
python3-onnx and numpy, nothing else. The op handlers are in
onnx2muster_ops.py (elementwise, linear algebra, normalization, data
movement), onnx2muster_nn.py (convolution, pooling, resize, index ops) and
onnx2muster_more.py (ops that become several muster nodes); dtypes, shapes
and constant folding in onnx2muster_lib.py.

What it does
  * Every value keeps its ONNX dtype: F32, F16, BF16, F64, (U)INT8..64 and
    BOOL tensors are muster tensors of that dtype (graph inputs declare
    it). Ops muster computes in F32 only (matmul, conv, the activations
    ...) get F32 operands: F16, BF16 and F64 values are cast to F32 for
    them (the result stays F32 until a Cast or a graph output, where it is
    cast to the ONNX dtype: computing in F32 is at least as precise), and
    an integer result is cast back at once, so integer semantics never
    change. Initializers and Constant nodes become weights in the dtype
    their use needs.
  * Shapes are static: every graph input must have a concrete shape once
    dynamic dims are fixed (--dim NAME=VALUE names a dim by its dim_param,
    or INPUT:AXIS; an unnamed or unset dim 0 defaults to 1 as the batch
    dim; any other dynamic dim is an error). Knowing every shape, the tool
    folds whatever is computed from constants and shapes alone (Shape,
    Gather, Unsqueeze, Concat, Cast ... chains that build Reshape targets)
    and writes explicit shapes, axes, pads and sizes into the nodes. A
    graph input that such a value is computed from (a Reshape target fed
    as an input) can be fixed with --const NAME=FILE.npy; it is then a
    constant, not an input.
  * Nodes whose outputs no graph output needs are dropped; Identity and
    Dropout (inference) are elided.
  * Names are kept: values, weights and nodes are named as in the ONNX
    file. A name is changed only where muster cannot take it (empty, over
    4096 bytes, "__metadata__", or clashing), with a note on stderr.

`onnx2muster.py --help` lists the ONNX ops it converts; docs/model-format.md
says what each becomes. Anything else (an op not listed, string,
sequence or complex tensors, a shape computed at run time) is an error
naming the node and its op; the tool then exits with status 1 and writes
nothing (outputs are written to temporary files and renamed into place
only when all succeeded).
"""

import argparse
import hashlib
import json
import os
import struct
import sys

try:
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper
except ImportError as exc:  # pragma: no cover - depends on the machine
    sys.stderr.write(f"onnx2muster: error: {exc} (install python3-onnx and python3-numpy)\n")
    sys.exit(1)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx2muster_lib import (FLOATS, FOLDABLE, CONST_ONLY, MAX_NAME, MAX_RANK,  # noqa: E402
                             MU_NP, ConstRequired, ConvertError, Unsupported, Value, cast_array,
                             dtype_of_array, fold_node, mu_dtype, numel, round_bf16, split_sizes)
import onnx2muster_more  # noqa: E402
import onnx2muster_nn  # noqa: E402
import onnx2muster_ops  # noqa: E402

# every handler, by ONNX op (see onnx2muster_ops.py for the contract)
HANDLERS = {**onnx2muster_ops.HANDLERS, **onnx2muster_nn.HANDLERS, **onnx2muster_more.HANDLERS}


class Converter:
    """One conversion: walks the ONNX graph in order, folding constants
    and emitting muster nodes; `graph()` and `weights` are the result."""

    def __init__(self, model, dims, log=None, consts=None):
        self.model = model
        self.g = model.graph
        self.opset = next((o.version for o in model.opset_import
                           if o.domain in ("", "ai.onnx")), 1)
        self.dims = dict(dims)
        self.dims_used = set()
        self.consts = dict(consts or {})
        self.log = log or (lambda msg: None)
        self.env = {}          # ONNX value name -> Value
        self.nodes = []        # muster nodes
        self.inputs = []       # muster graph inputs
        self.weights = {}      # muster name -> (array, muster dtype), in first-use order
        self.cast_cache = {}   # (value name, dtype) -> Value, casts made once
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
            self.env[t.name] = self.constant(t.name, numpy_helper.to_array(t),
                                             mu_dtype(t.data_type, f"initializer {t.name!r}"))
        if len(self.g.sparse_initializer):
            raise Unsupported("sparse initializers are not supported")
        for inp in self.g.input:
            if inp.name in self.env:    # an initializer: a constant
                continue
            if not inp.type.HasField("tensor_type"):
                raise Unsupported(f"input {inp.name!r} is not a tensor (muster carries tensors "
                                  "only, not sequences, maps or optionals)")
            tt = inp.type.tensor_type
            dt = mu_dtype(tt.elem_type, f"input {inp.name!r}")
            if inp.name in self.consts:
                a = np.asarray(self.consts.pop(inp.name))
                self.env[inp.name] = self.constant(inp.name, cast_array(a, dt), dt)
                self.log(f"note: input {inp.name!r} is fixed to the given constant")
                continue
            if not tt.HasField("shape"):
                raise ConvertError(f"input {inp.name!r} has no declared shape")
            shape = [self.input_dim(inp.name, axis, d) for axis, d in enumerate(tt.shape.dim)]
            if len(shape) > MAX_RANK:
                raise ConvertError(f"input {inp.name!r} has rank {len(shape)} (muster: at most 8)")
            v = Value(self.value_name(inp.name), shape, dt, deps={inp.name})
            self.env[inp.name] = v
            decl = {"name": v.name, "shape": list(v.shape)}
            if dt != "F32":
                decl["dtype"] = dt
            self.inputs.append(decl)
        unused = set(self.dims) - self.dims_used
        if unused:
            raise ConvertError("--dim " + ", ".join(sorted(unused))
                               + ": no dynamic input dimension has that name")
        if self.consts:
            raise ConvertError("--const " + ", ".join(sorted(self.consts))
                               + ": no graph input has that name")

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

    def constant(self, onnx_name, array, dt=None, name=None):
        array = np.asarray(array)
        dt = dt or dtype_of_array(array)
        return Value(name or self.value_name(onnx_name), array.shape, dt, const=array)

    def weight(self, v, where, dt):
        """The weight name for constant v as muster dtype dt (written on
        first use; the same constant in another dtype is another weight)."""
        if v.rank > MAX_RANK:
            raise ConvertError(f"{where}: constant {v.name!r} has rank {v.rank} (at most 8)")
        a = cast_array(v.const, dt)
        name = v.name
        if name in self.weights and self.weights[name][1] != dt:
            name = f"{v.name}~{dt}"
            if name not in self.weights:
                name = self.fresh(name)
        if name not in self.weights:
            # np.array, not ascontiguousarray, which would make a scalar rank 1
            self.weights[name] = (np.array(a, order="C"), dt)
        return name

    def arg(self, where, v, dt):
        """The muster name of v as a tensor of dtype dt: a weight for a
        constant, v itself, or a cast of v (made once per value and dtype).
        muster loads F16 and BF16 weights as F32, so such a constant is an
        F32 weight (its values rounded to dt) and a cast."""
        if v.const is not None and dt in ("F16", "BF16"):
            rounded = Value(v.name, v.shape, v.dt, const=cast_array(v.const, dt))
            v = Value(self.weight(rounded, where, "F32"), v.shape, dt, actual="F32")
        elif v.const is not None:
            return self.weight(v, where, dt)
        if v.actual == dt:
            return v.name
        key = (v.name, dt)
        if key not in self.cast_cache:
            self.cast_cache[key] = self.emit(where, "cast", [v.name], v.shape, dt, {"to": dt},
                                             name=f"{where.name}/to_{dt}", deps=v.deps)
        return self.cast_cache[key].name

    def emit(self, where, op, args, shape, dt, attrs=None, name=None, out=None, logical=None,
             deps=()):
        """Append a muster node over `args` (muster names, see arg()) whose
        output has dtype dt (ONNX dtype `logical`, dt by default); returns
        the Value it makes. out is the output's muster name (default: a
        fresh one derived from the node name)."""
        if len(shape) > MAX_RANK:
            raise ConvertError(f"{where}: {op} would make a tensor of rank {len(shape)} "
                               "(muster: at most 8)")
        node = {"name": self.node_name(name or where.name), "op": op, "inputs": list(args),
                "outputs": [out or self.fresh(f"{where.name}::{op}")]}
        if attrs:
            node["attrs"] = attrs
        self.nodes.append(node)
        return Value(node["outputs"][0], shape, logical or dt, node=node, actual=dt, deps=deps)

    def float_op(self, where, op, ins, shape, attrs=None, out=None, logical="F32", name=None):
        """An op that computes in F32: operands as F32, the result F32
        (an integer or BOOL result is cast back to its ONNX dtype at once)."""
        deps = frozenset().union(*(v.deps for v in ins if v is not None))
        args = [self.arg(where, v, "F32") for v in ins if v is not None]
        if logical in FLOATS:
            return self.emit(where, op, args, shape, "F32", attrs, out=out, logical=logical,
                             name=name, deps=deps)
        v = self.emit(where, op, args, shape, "F32", attrs, name=name, deps=deps)
        return self.emit(where, "cast", [v.name], shape, logical, {"to": logical},
                         name=f"{where.name}/to_{logical}", out=out, deps=deps)

    def common_dtype(self, vals):
        """The dtype typed operands meet in: their shared actual dtype, F32
        when float operands differ (one made by an F32-only op), else the
        first runtime operand's (constants follow it)."""
        rt = [v.actual for v in vals if v is not None and v.const is None]
        if not rt:
            return vals[0].dt
        if len(set(rt)) == 1:
            return rt[0]
        if all(d in FLOATS for d in rt):
            return "F32"
        raise ConvertError(f"operands of dtypes {sorted(set(rt))} meet in one op")

    def typed_op(self, where, op, ins, shape, dt=None, attrs=None, out=None, out_dt=None,
                 logical=None, name=None):
        """An op that takes any dtype: operands in dt (default their
        common dtype); the result out_dt (default dt)."""
        dt = dt or self.common_dtype(ins)
        deps = frozenset().union(*(v.deps for v in ins if v is not None))
        args = [self.arg(where, v, dt) for v in ins if v is not None]
        return self.emit(where, op, args, shape, out_dt or dt, attrs, out=out, name=name,
                         logical=logical, deps=deps)

    def cast_target(self, attrs, dts):
        """Cast's or CastLike's target, as a muster dtype."""
        if "to" in attrs:
            return mu_dtype(int(attrs["to"]), "Cast's target")
        return dts[1]

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
        return split_sizes(self.opset, shape, None if len(vals) < 2 else vals[1], attrs, nout)

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
                    raise Unsupported(f"{where}: output {k} ({o!r}) is used, and muster "
                                      f"does not compute it for {n.op_type}")
        self.finish_outputs()

    def convert_node(self, where, n):
        op = n.op_type
        if n.domain not in ("", "ai.onnx"):
            raise Unsupported(f"{where}: unsupported op {n.domain}:{op}")
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        ins = [self.env[x] if x else None for x in n.input]
        nout = len(n.output)
        if op == "Constant":
            a, dt = constant_value(where, attrs, n.attribute)
            return [self.constant(n.output[0], a, dt)]
        if op in ("Shape", "Size"):
            shape = ins[0].shape
            if op == "Size":
                return [self.constant(n.output[0], np.array(numel(shape), np.int64))]
            start, end = attrs.get("start", 0), attrs.get("end", None)
            return [self.constant(n.output[0], np.array(shape[start:end], np.int64))]
        if op in FOLDABLE and all(v is None or v.const is not None for v in ins) \
                and any(v is not None for v in ins):
            vals = [None if v is None else v.const for v in ins]
            dts = [None if v is None else v.dt for v in ins]
            outs, odts = fold_node(self, op, vals, attrs, nout, dts)
            return [self.constant(o, a, d) if o else None for o, a, d in zip(n.output, outs, odts)]
        handler = HANDLERS.get(op)
        if handler is None:
            if op in CONST_ONLY:
                runtime = [x for x, v in zip(n.input, ins) if v is not None and v.const is None]
                deps = frozenset().union(*(v.deps for v in ins if v is not None))
                msg = (f"{where}: {op} is supported only on constants, and input "
                       f"{runtime[:1]} is computed at run time")
                raise ConstRequired(msg, deps) if deps else ConvertError(msg)
            raise Unsupported(f"{where}: unsupported op {op} (supported: "
                              + ", ".join(sorted(SUPPORTED)) + ")")
        return handler(where, ins, attrs)

    def finish_outputs(self):
        """Every ONNX graph output becomes a muster output of the same name
        and ONNX dtype. Usually its value already has that name. An output
        an elided Identity made gets it by renaming the value it forwards
        (when no other output uses that value's name); an output that is a
        graph input, a constant or a value shared with another output gets
        a copy node (a reshape to the same shape); one whose muster tensor
        has another dtype (an F16 output computed in F32) a cast."""
        self.outputs = []
        onnx_outputs = [o.name for o in self.g.output]
        for o in onnx_outputs:
            v = self.env.get(o)
            if v is None:
                raise ConvertError(f"output {o!r} is never computed")
            made = v.const is None and v.node is not None
            if made and v.actual == v.dt and v.name == o and o not in self.outputs:
                self.outputs.append(o)
                continue
            if made and v.actual == v.dt and v.name not in self.outputs \
                    and v.name not in onnx_outputs and o not in self.names_in_use():
                self.rename(v.name, o)
                self.outputs.append(o)
                continue
            where = Where(self, None, None, name=f"{o}/copy")
            if v.const is not None and v.name == o:
                v = Value(self.fresh(o + "~value"), v.shape, v.dt, const=v.const)
            elif made and v.actual != v.dt and v.name == o:   # the cast takes the name
                self.rename(o, self.fresh(o + "~" + v.actual))
            taken = o in self.names_in_use() or o == v.name
            target = self.fresh(o + "~out") if taken else o
            if v.const is None and v.actual != v.dt:
                copy = self.emit(where, "cast", [v.name], v.shape, v.dt, {"to": v.dt},
                                 out=target)
            else:
                copy = self.emit(where, "reshape", [self.arg(where, v, v.dt)], v.shape, v.dt,
                                 {"shape": list(v.shape)}, out=target)
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
        for v in self.cast_cache.values():
            if v.name == old:
                v.name = new
        self.taken.add(new)

    def drop_unused_inputs(self):
        """Graph inputs no node reads are not declared (a CastLike's
        pattern input, say): muster would insist on being given them."""
        used = {x for n in self.nodes for x in n["inputs"]} | set(self.outputs)
        for decl in list(self.inputs):
            if decl["name"] not in used:
                self.inputs.remove(decl)
                self.log(f"note: input {decl['name']!r} is not used; muster does not take it")

    def graph(self):
        self.drop_unused_inputs()
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

    def out(self, k=0):
        """The muster name for this node's output k."""
        return self.c.value_name(self.node.output[k])


def constant_value(where, attrs, protos):
    """A Constant node's value and muster dtype."""
    if "value" in attrs:
        t = next(a.t for a in protos if a.name == "value")
        return numpy_helper.to_array(attrs["value"]), mu_dtype(t.data_type, f"{where}'s value")
    if "value_float" in attrs:
        return np.array(attrs["value_float"], np.float32), "F32"
    if "value_floats" in attrs:
        return np.array(attrs["value_floats"], np.float32), "F32"
    if "value_int" in attrs:
        return np.array(attrs["value_int"], np.int64), "I64"
    if "value_ints" in attrs:
        return np.array(attrs["value_ints"], np.int64), "I64"
    raise Unsupported(f"{where}: only tensor, float(s) and int(s) constants are "
                      f"supported, not {', '.join(attrs) or 'none'}")


SUPPORTED = set(HANDLERS) | FOLDABLE | {"Constant", "Shape", "Size"}


# ---------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------

def graph_text(graph):
    """JSON with one node per line (readable, diffable)."""
    head = {k: v for k, v in graph.items() if k != "nodes"}
    nodes = ",\n".join(json.dumps(n, allow_nan=False) for n in graph["nodes"])
    return json.dumps(head, allow_nan=False)[:-1] + ', "nodes": [\n' + nodes + "\n]}\n"


def tensor_bytes(a, dt):
    """A weight's little-endian bytes in muster dtype dt."""
    if dt == "BF16":
        bits = np.asarray(round_bf16(a), "<f4").view(np.uint32) >> 16
        return bits.astype("<u2").tobytes()
    return np.asarray(a, np.dtype(MU_NP[dt]).newbyteorder("<")).tobytes()


def write_safetensors(path, weights, metadata):
    header, offset, blobs = {"__metadata__": metadata}, 0, []
    for name, (a, dt) in weights.items():
        b = tensor_bytes(a, dt)
        header[name] = {"dtype": dt, "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(b)]}
        b += b"\0" * (-len(b) % 8)            # each tensor 8-aligned: used in place
        offset += len(b)
        blobs.append(b)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)          # the data area starts 8-aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
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


def parse_consts(items):
    consts = {}
    for item in items or []:
        name, sep, path = item.partition("=")
        if not sep or not name:
            raise ConvertError(f"--const {item!r}: expected NAME=FILE.npy")
        try:
            consts[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise ConvertError(f"--const {item!r}: {exc}") from None
    return consts


def convert(model_path, outdir, dims=None, log=None, consts=None):
    """Convert; returns (graph, weights). Raises ConvertError (Unsupported
    for what muster does not claim, ConstRequired when a graph input has
    to be fixed by `consts`, {name: array})."""
    try:
        model = onnx.load(model_path)
    except Exception as exc:  # protobuf decode errors, missing files ...
        raise ConvertError(f"cannot load {model_path}: {exc}") from None
    conv = Converter(model, dims or {}, log, consts)
    conv.run()
    graph = conv.graph()
    write_outputs(outdir, graph, conv.weights, model_path)
    return graph, conv.weights


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="onnx2muster.py",
        description="Convert an ONNX model to a muster model directory "
                    "(OUTDIR/model.json and OUTDIR/model.safetensors).",
        epilog="Supported ops: " + ", ".join(sorted(SUPPORTED)) + ". Anything else is an "
               "error naming the node; the exit status is then 1 and nothing is written.")
    p.add_argument("model", metavar="MODEL.onnx", help="the ONNX model")
    p.add_argument("outdir", metavar="OUTDIR", help="directory to write (created if needed)")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE",
                   help="size of a dynamic input dim, by its dim_param name or as "
                        "INPUT:AXIS (repeatable); an unset dim 0 is taken as the batch, 1")
    p.add_argument("--const", action="append", metavar="NAME=FILE.npy",
                   help="fix graph input NAME to the array in FILE.npy: it becomes a "
                        "constant (for inputs that shapes are computed from)")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    args = p.parse_args(argv)
    log = (lambda m: None) if args.quiet else (lambda m: print("onnx2muster: " + m,
                                                               file=sys.stderr))
    try:
        graph, weights = convert(args.model, args.outdir, parse_dims(args.dim), log,
                                 parse_consts(args.const))
    except ConvertError as exc:
        print(f"onnx2muster: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"onnx2muster: error: writing {args.outdir}: {exc}", file=sys.stderr)
        return 1
    if not args.quiet:
        total = sum(a.nbytes for a, _ in weights.values())
        print(f"onnx2muster: wrote {args.outdir}: {len(graph['nodes'])} nodes, "
              f"{len(weights)} weights ({total} bytes), inputs "
              + ", ".join(f"{i['name']}{i['shape']}" for i in graph["inputs"])
              + ", outputs " + ", ".join(graph["outputs"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
