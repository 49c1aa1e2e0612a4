# SPDX-License-Identifier: MIT
"""tools/onnx2muster.py and the numpy model helpers (mumodel.py), each
checked against an implementation that shares no code with it:

* the converter's output, run by mumodel's evaluator, against
  `onnx_reference`, an interpreter of the ONNX nodes written here from
  the ONNX operator specs (initializers read with onnx.numpy_helper, not
  from the converter's safetensors): on the real hello_deepa.onnx, on
  models built with onnx.helper that use every supported op across opsets
  11 to 20, and on models torch.onnx.export writes (also against torch);
* the converter's error path: an unsupported op, a shape computed at run
  time, a dynamic dim nobody sized; exit status 1, the node named, and
  nothing written;
* mumodel's evaluator against torch (torch.nn.functional), op by op and
  on the MLP and transformer generators' models with the same weights;
* mumodel's safetensors reader and writers against a header parsed here
  and torch's BF16 rounding.

Agreement is |a - b| <= 1e-5 * (1 + |b|) (mumodel.assert_close).
"""

import json
import math
import struct
import subprocess

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

import mumodel
from modelfix import (CONVERTER, HELLO_SHA256, PYTHON, convert, ensure_hello_deepa,  # noqa: F401
                      hello_deepa, hello_deepa_model, model_cache, sha256)

TOL = 1e-5
INT64_MAX = 2 ** 63 - 1
HELLO_INPUT = "onnx::Flatten_0"


# --------------------------------------------------------------------------
# an ONNX interpreter, from the operator specs
# --------------------------------------------------------------------------

def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _reduce(fn):
    def run(ins, a, opset, since):
        x = ins[0]
        if opset >= since:
            axes = None if len(ins) < 2 or ins[1] is None else ins[1]
        else:
            axes = a.get("axes")
        if axes is None or len(axes) == 0:
            if a.get("noop_with_empty_axes", 0):
                return [x]
            axes = range(x.ndim)
        return [fn(x, axis=tuple(int(i) for i in axes), keepdims=bool(a.get("keepdims", 1)))
                .astype(x.dtype)]
    return run


def _reshape(ins, a, opset):
    x, shape = ins[0], [int(s) for s in (ins[1] if opset >= 5 else a["shape"])]
    if not a.get("allowzero", 0):
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return [x.reshape(shape)]


def _slice(ins, a, opset):
    x = ins[0]
    if opset < 10:
        starts, ends, axes, steps = a["starts"], a["ends"], a.get("axes"), None
    else:
        starts, ends = ins[1], ins[2]
        axes = ins[3] if len(ins) > 3 and ins[3] is not None else None
        steps = ins[4] if len(ins) > 4 and ins[4] is not None else None
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * x.ndim
    for b, e, ax, s in zip(starts, ends, axes, steps):   # numpy slicing = ONNX clamping
        index[int(ax)] = slice(int(b), int(e), int(s))
    return [x[tuple(index)]]


def _split(ins, a, opset, nout):
    x, axis = ins[0], a.get("axis", 0)
    sizes = a.get("split") if opset < 13 else (
        list(ins[1]) if len(ins) > 1 and ins[1] is not None else None)
    if sizes is None:
        n = a.get("num_outputs", nout)
        step = -(-x.shape[axis] // n)
        sizes = [min(step, x.shape[axis] - i * step) for i in range(n)]
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


def _layernorm(ins, a, opset):
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    axis = a.get("axis", -1) % x.ndim
    axes = tuple(range(axis, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + np.float32(a.get("epsilon", 1e-5))) * scale
    return [y + bias if bias is not None else y]


def _gemm(ins, a, opset):
    A = ins[0].T if a.get("transA", 0) else ins[0]
    B = ins[1].T if a.get("transB", 0) else ins[1]
    y = np.float32(a.get("alpha", 1.0)) * (A @ B)
    if len(ins) > 2 and ins[2] is not None:
        y = y + np.float32(a.get("beta", 1.0)) * ins[2]
    return [y]


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)


def _gelu(ins, a, opset):
    x = ins[0]
    approx = a.get("approximate", b"none")
    if approx in (b"tanh", "tanh"):
        return [0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))]
    return [0.5 * x * (1 + _erf(x / np.sqrt(np.float32(2))))]


def _constant(a):
    if "value" in a:
        return numpy_helper.to_array(a["value"])
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in a:
            return np.array(a[key], dtype)
    raise NotImplementedError(a)


ONNX_OPS = {
    "Identity": lambda i, a, o: [i[0]],
    "Dropout": lambda i, a, o: [i[0], np.ones(i[0].shape, bool)],
    "Add": lambda i, a, o: [i[0] + i[1]], "Sub": lambda i, a, o: [i[0] - i[1]],
    "Mul": lambda i, a, o: [i[0] * i[1]],
    "Div": lambda i, a, o: [i[0] // i[1] if i[0].dtype.kind == "i" else i[0] / i[1]],
    "Pow": lambda i, a, o: [np.power(i[0], i[1]).astype(i[0].dtype)],
    "Relu": lambda i, a, o: [np.maximum(i[0], 0)],
    "Sigmoid": lambda i, a, o: [1 / (1 + np.exp(-i[0]))],
    "Tanh": lambda i, a, o: [np.tanh(i[0])], "Sqrt": lambda i, a, o: [np.sqrt(i[0])],
    "Exp": lambda i, a, o: [np.exp(i[0])], "Neg": lambda i, a, o: [-i[0]],
    "Erf": lambda i, a, o: [_erf(i[0])], "Gelu": _gelu,
    "MatMul": lambda i, a, o: [np.matmul(i[0], i[1])], "Gemm": _gemm,
    "LayerNormalization": _layernorm,
    "Softmax": lambda i, a, o: [
        _softmax(i[0], a.get("axis", -1)) if o >= 13 else
        _softmax(i[0].reshape(int(np.prod(i[0].shape[:a.get("axis", 1) % i[0].ndim])), -1),
                 1).reshape(i[0].shape)],
    "ReduceMean": lambda i, a, o: _reduce(np.mean)(i, a, o, 18),
    "ReduceSum": lambda i, a, o: _reduce(np.sum)(i, a, o, 13),
    "ReduceMax": lambda i, a, o: _reduce(np.max)(i, a, o, 18),
    "Reshape": _reshape, "Slice": _slice,
    "Flatten": lambda i, a, o: [i[0].reshape(
        int(np.prod(i[0].shape[:a.get("axis", 1) % (i[0].ndim + 1)])), -1)],
    "Transpose": lambda i, a, o: [np.transpose(i[0], a.get("perm"))],
    "Concat": lambda i, a, o: [np.concatenate(i, axis=a["axis"])],
    "Gather": lambda i, a, o: [np.take(i[0], i[1], axis=a.get("axis", 0))],
    "Unsqueeze": lambda i, a, o: [np.expand_dims(
        i[0], tuple(int(x) for x in (a["axes"] if o < 13 else i[1])))],
    "Squeeze": lambda i, a, o: [np.squeeze(
        i[0], None if (a.get("axes") if o < 13 else (i[1] if len(i) > 1 else None)) is None
        else tuple(int(x) for x in (a["axes"] if o < 13 else i[1])))],
    "Shape": lambda i, a, o: [np.array(i[0].shape[a.get("start", 0):a.get("end")], np.int64)],
    "Cast": lambda i, a, o: [i[0].astype(helper.tensor_dtype_to_np_dtype(a["to"])
                                         if hasattr(helper, "tensor_dtype_to_np_dtype") else
                                         onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[a["to"]])],
    "Constant": lambda i, a, o: [_constant(a)],
    "ConstantOfShape": lambda i, a, o: [np.full(
        [int(d) for d in i[0]], numpy_helper.to_array(a["value"]).reshape(-1)[0]
        if "value" in a else np.float32(0))],
    "Range": lambda i, a, o: [np.arange(i[0], i[1], i[2]).astype(i[0].dtype)],
    "Equal": lambda i, a, o: [np.equal(i[0], i[1])],
    "Where": lambda i, a, o: [np.where(i[0], i[1], i[2])],
    "Expand": lambda i, a, o: [i[0] * np.ones([int(d) for d in i[1]], i[0].dtype)],
}


def onnx_reference(model, feeds):
    """Run an ONNX model (a ModelProto or a path) on `feeds` (name ->
    array); returns {graph output name: array}."""
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model))
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    env = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    env.update(feeds)
    for node in model.graph.node:
        a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
        ins = [env[x] if x else None for x in node.input]
        if node.op_type == "Split":
            outs = _split(ins, a, opset, len(node.output))
        else:
            outs = ONNX_OPS[node.op_type](ins, a, opset)
        for name, value in zip(node.output, outs):
            if name:
                env[name] = np.asarray(value)
    return {o.name: env[o.name] for o in model.graph.output}


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

def st_header(path):
    """A safetensors header, parsed here (not by mumodel): (header dict,
    data start offset)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)), 8 + n


def st_read_f32(path):
    """Every F32 tensor of a safetensors file, parsed here."""
    header, start = st_header(path)
    raw = open(path, "rb").read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", (name, e["dtype"])
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(raw[start + b:start + end], "<f4").reshape(e["shape"])
    return out


def convert_ok(onnx_path, outdir, *args):
    proc = convert(onnx_path, outdir, *args)
    assert proc.returncode == 0, f"onnx2muster failed:\n{proc.stderr}"
    return mumodel.load_graph(outdir)


def convert_fails(onnx_path, outdir, *args):
    proc = convert(onnx_path, outdir, *args)
    assert proc.returncode == 1, (f"expected exit 1, got {proc.returncode}\n"
                                  f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr


class OnnxBuilder:
    """Small ONNX graphs with onnx.helper: `op()` adds a node and returns
    its output name(s)."""

    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []

    def init(self, name, array):
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def rand(self, name, *shape, scale=0.5):
        return self.init(name, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def ints(self, name, values):
        return self.init(name, np.asarray(values, np.int64))

    def op(self, op_type, inputs, name=None, nout=1, outs=None, **attrs):
        name = name or f"{op_type.lower()}{len(self.nodes)}"
        outs = outs or [f"{name}:{k}" for k in range(nout)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs[0] if nout == 1 else outs

    def model(self, inputs, outputs, opset):
        vi = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
        outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
        graph = helper.make_graph(self.nodes, "test", vi, outs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        return model

    def save(self, path, inputs, outputs, opset):
        model = self.model(inputs, outputs, opset)
        onnx.save(model, str(path))
        return model


def check_converted(tmp_path, model, feeds, *args):
    """Convert `model`; the muster graph on mumodel must match
    onnx_reference on the ONNX model. Returns the muster graph."""
    src = tmp_path / "model.onnx"
    onnx.save(model, str(src))
    out = tmp_path / "mu"
    graph = convert_ok(src, out, *args)
    want = onnx_reference(model, feeds)
    got = mumodel.evaluate_dir(out, feeds)
    assert set(got) == set(want), (sorted(got), sorted(want))
    for name in want:
        mumodel.assert_close(got[name], want[name], TOL, what=name)
    return graph


# --------------------------------------------------------------------------
# hello_deepa: a real model
# --------------------------------------------------------------------------

HELLO_OPS = (["flatten", "gemm"]
             + ["reduce_mean", "sub", "pow", "reduce_mean", "add", "sqrt", "div", "mul", "add"]
             + ["relu", "gemm"]
             + ["reduce_mean", "sub", "pow", "reduce_mean", "add", "sqrt", "div", "mul", "add"]
             + ["relu", "gemm", "sigmoid"])


def test_hello_deepa_fixture_is_cached(hello_deepa, model_cache):
    """The fixture's file is the pinned one, and a second lookup is served
    from the cache without npm."""
    assert sha256(hello_deepa) == HELLO_SHA256
    assert ensure_hello_deepa(model_cache, npm=None) == hello_deepa


def test_converter_help():
    proc = subprocess.run([PYTHON, str(CONVERTER), "--help"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "usage" in proc.stdout and "--dim" in proc.stdout and "Gemm" in proc.stdout


def test_hello_deepa_structure(hello_deepa, hello_deepa_model):
    onnx_model = onnx.load(str(hello_deepa))
    graph = mumodel.load_graph(hello_deepa_model)
    assert graph["format"] == "muster-graph" and graph["version"] == 1
    assert graph["inputs"] == [{"name": HELLO_INPUT, "shape": [1, 25, 96]}]
    assert graph["outputs"] == ["39"]
    assert [n["op"] for n in graph["nodes"]] == HELLO_OPS
    # names kept: every non-Constant ONNX node, its inputs and outputs
    kept = [n for n in onnx_model.graph.node if n.op_type != "Constant"]
    assert [n["name"] for n in graph["nodes"]] == [n.name for n in kept]
    for mine, theirs in zip(graph["nodes"], kept):
        assert mine["inputs"] == list(theirs.input)
        assert mine["outputs"] == list(theirs.output)
    gemms = [n for n in graph["nodes"] if n["op"] == "gemm"]
    assert all(n["attrs"] == {"transB": 1} for n in gemms)
    # weights: the 10 initializers, bit for bit, and the 4 Constant nodes
    header, start = st_header(hello_deepa_model / "model.safetensors")
    assert start % 8 == 0, "data area not 8-aligned"
    header.pop("__metadata__", None)
    weights = st_read_f32(hello_deepa_model / "model.safetensors")
    expect = {t.name: numpy_helper.to_array(t) for t in onnx_model.graph.initializer}
    for n in onnx_model.graph.node:
        if n.op_type == "Constant":
            expect[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    assert set(weights) == set(expect) and len(weights) == 14
    for name, value in expect.items():
        assert weights[name].shape == value.shape, name
        assert weights[name].tobytes() == value.astype("<f4").tobytes(), name
    assert set(mumodel.graph_params(graph)) == set(weights)
    assert weights["/layernorm1/Constant_output_0"].shape == ()    # rank 0 kept
    assert float(weights["/layernorm1/Constant_output_0"]) == 2.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hello_deepa_matches_onnx_reference(hello_deepa, hello_deepa_model, seed):
    x = np.random.default_rng(seed).standard_normal((1, 25, 96)).astype(np.float32) * 2
    want = onnx_reference(hello_deepa, {HELLO_INPUT: x})["39"]
    got = mumodel.evaluate_dir(hello_deepa_model, {HELLO_INPUT: x})["39"]
    assert got.shape == (1, 1) and 0 < float(got[0, 0]) < 1
    mumodel.assert_close(got, want, TOL, what="hello_deepa output")


def test_hello_deepa_reference_is_sane(hello_deepa):
    """The reference interpreter gives different outputs for different
    inputs (so agreeing with it means something)."""
    rng = np.random.default_rng(7)
    outs = {float(onnx_reference(hello_deepa, {HELLO_INPUT: rng.standard_normal(
        (1, 25, 96)).astype(np.float32) * 3})["39"][0, 0]) for _ in range(4)}
    assert len(outs) == 4


# --------------------------------------------------------------------------
# op coverage, models built with onnx.helper
# --------------------------------------------------------------------------

FLT, INT = TensorProto.FLOAT, TensorProto.INT64


def zoo13():
    b = OnnxBuilder(1)
    e = b.op("Gather", [b.rand("E", 10, 8), "ids"], name="embed")
    h = b.op("Add", ["x", e])
    t = b.op("Transpose", [h], perm=[0, 2, 1])                       # [2, 8, 3]
    s1 = b.op("Slice", [t, b.ints("s1b", [1]), b.ints("s1e", [7]), b.ints("s1a", [1]),
                        b.ints("s1s", [2])])                         # [2, 3, 3]
    s2 = b.op("Slice", [t, b.ints("s2b", [-2]), b.ints("s2e", [INT64_MAX]),
                        b.ints("s2a", [-2])])                        # [2, 2, 3]
    c = b.op("Concat", [s1, s2], axis=1)                             # [2, 5, 3]
    batch = b.op("Gather", [b.op("Shape", [c]), b.ints("zero", 0)])
    target = b.op("Concat", [b.op("Unsqueeze", [batch, b.ints("ax0", [0])]),
                             b.ints("minus1", [-1])], axis=0)
    r = b.op("Reshape", [c, target], name="dyn_reshape")             # [2, 15]
    g1 = b.op("Gemm", [r, b.rand("W1", 15, 6), b.rand("C1", 6)], alpha=0.5, beta=2.0)
    g2 = b.op("Gemm", [g1, b.rand("W2", 4, 6)], transB=1)
    g3 = b.op("Gemm", [b.op("Transpose", [g1]), b.rand("W3", 6, 4), b.rand("C3", 1, 4)],
              transA=1)
    u = b.op("Unsqueeze", [b.op("Add", [g2, g3]), b.ints("ax1", [1])])
    sq = b.op("Squeeze", [b.op("MatMul", [u, b.rand("W4", 4, 4)]), b.ints("ax1b", [1])])
    sig, tnh = b.op("Sigmoid", [sq]), b.op("Tanh", [sq])
    ex = b.op("Exp", [b.op("Neg", [b.op("Mul", [sq, sq])])])
    f = b.op("Sqrt", [b.op("Add", [b.op("Pow", [sq, b.init("two", np.float32(2))]),
                                   b.init("one", np.float32(1))])])
    dv = b.op("Div", [b.op("Sub", [sig, tnh]), f])
    pw = b.op("Pow", [f, b.init("p15", np.array([1.5], np.float32))], name="pow15")
    cat = b.op("Concat", [sig, tnh, b.op("Relu", [sq]), b.op("Erf", [sq]), ex, dv], axis=-1)
    sm = b.op("Softmax", [b.op("Mul", [cat, b.init("three", np.float32(3))])], axis=-1)
    r3 = b.op("Reshape", [sm, b.ints("shape3", [2, 4, 6])])
    rm = b.op("ReduceMean", [r3], axes=[1], keepdims=0)
    rs = b.op("ReduceSum", [r3, b.ints("rsax", [2])])
    rx = b.op("ReduceMax", [r3], axes=[-1, 0], keepdims=1)
    sp = b.op("Split", [sm, b.ints("sizes", [8, 16])], axis=1, nout=2)
    gq = b.op("Gather", [h, b.ints("perm3", [2, 0, 1])], axis=1)
    gq2 = b.op("Gather", [h, b.ints("last", -1)], axis=1)
    gq3 = b.op("Flatten", [b.op("Gather", [h, b.ints("pairs", [[0, 1], [1, 2]])], axis=1)],
               axis=2)
    # graph outputs behind elided nodes: renamed, or copied when shared
    # (out_same) or a graph input (out_x)
    b.op("Identity", [rm], name="id_mean", outs=["out_mean"])
    b.op("Identity", [rm], name="id_same", outs=["out_same"])
    b.op("Dropout", [sp[0]], name="drop", outs=["out_split0"])
    b.op("Identity", ["x"], name="id_x", outs=["out_x"])
    outputs = ["out_mean", "out_same", "out_split0", "out_x", sp[1], rs, rx, pw, gq, gq2, gq3]
    return b.model([("x", FLT, [2, 3, 8]), ("ids", INT, [2, 3])], outputs, 13)


def test_ops_opset13(tmp_path):
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((2, 3, 8)).astype(np.float32),
             "ids": rng.integers(0, 10, (2, 3)).astype(np.int64)}
    graph = check_converted(tmp_path, zoo13(), feeds)
    ops = {n["op"] for n in graph["nodes"]}
    assert ops >= {"gather", "add", "transpose", "slice", "concat", "reshape", "gemm",
                   "matmul", "sigmoid", "tanh", "exp", "neg", "mul", "sqrt", "pow", "div",
                   "sub", "relu", "erf", "softmax", "reduce_mean", "reduce_sum", "reduce_max"}
    assert "out_mean" in graph["outputs"] and "out_x" in graph["outputs"]
    # Shape/Gather/Unsqueeze/Concat were folded: the reshape target is explicit
    dyn = next(n for n in graph["nodes"] if n["name"] == "dyn_reshape")
    assert dyn["op"] == "reshape" and dyn["attrs"]["shape"] == [2, 15]
    # elided Identity/Dropout: no such nodes, names carried over
    assert not any(n["name"] in ("id_mean", "drop") for n in graph["nodes"])


def test_ops_opset11(tmp_path):
    """Older forms: Softmax over a 2-D coercion, Split/Unsqueeze/Squeeze/
    Reduce axes as attributes."""
    b = OnnxBuilder(2)
    sm = b.op("Softmax", ["x"], axis=1)                          # over dims 1..2
    sm2 = b.op("Softmax", ["x"], axis=-1)
    parts = b.op("Split", [b.op("Add", [sm, sm2])], axis=2, split=[1, 3], nout=2)
    u = b.op("Unsqueeze", [parts[0]], axes=[0, -1])              # [1, 2, 3, 1, 1]
    s = b.op("Squeeze", [u])                                     # [2, 3]
    rm = b.op("ReduceMean", [parts[1]], axes=[1])                # [2, 1, 3]
    fl = b.op("Flatten", [rm], axis=0)
    sl = b.op("Slice", [b.op("Mul", ["x", b.rand("w", 4)]), b.ints("b", [0, -1]),
                        b.ints("e", [-1, -100]), b.ints("a", [2, 1]), b.ints("s", [2, -1])])
    model = b.model([("x", FLT, [2, 3, 4])], [s, fl], 11)
    feeds = {"x": np.random.default_rng(4).standard_normal((2, 3, 4)).astype(np.float32) * 2}
    graph = check_converted(tmp_path, model, feeds)
    assert sum(n["op"] == "softmax" for n in graph["nodes"]) == 2
    assert any(n["name"].endswith("/to2d") for n in graph["nodes"])
    del sl  # a dead branch (negative step): dropped, not an error


def test_ops_opset17_layernorm(tmp_path):
    b = OnnxBuilder(5)
    y1 = b.op("LayerNormalization", ["x", b.rand("g", 8), b.rand("bb", 8)], epsilon=1e-3)
    y2 = b.op("LayerNormalization", ["x", b.rand("g2", 8)], axis=-2)     # scale broadcast
    y3 = b.op("Softmax", [b.op("Add", [y1, y2])], axis=1)
    model = b.model([("x", FLT, [2, 3, 8])], [y1, y2, y3], 17)
    feeds = {"x": np.random.default_rng(6).standard_normal((2, 3, 8)).astype(np.float32)}
    graph = check_converted(tmp_path, model, feeds)
    lns = [n for n in graph["nodes"] if n["op"] == "layernorm"]
    assert [n["attrs"]["axis"] for n in lns] == [2, 1]
    assert abs(lns[0]["attrs"]["epsilon"] - 1e-3) < 1e-9


def test_ops_opset20(tmp_path):
    """ReduceMean with an axes input (18), Split into num_outputs (18),
    Gelu (20)."""
    b = OnnxBuilder(7)
    g = b.op("Gelu", ["x"], approximate="tanh")
    g2 = b.op("Gelu", ["x"])
    rm = b.op("ReduceMean", [b.op("Add", [g, g2]), b.ints("axes", [-1])], keepdims=0)
    parts = b.op("Split", ["x"], axis=2, num_outputs=3, nout=3)     # 3, 3, 1
    model = b.model([("x", FLT, [2, 3, 7])], [rm] + parts, 20)
    feeds = {"x": np.random.default_rng(8).standard_normal((2, 3, 7)).astype(np.float32)}
    graph = check_converted(tmp_path, model, feeds)
    assert [n.get("attrs", {}).get("approximate") for n in graph["nodes"] if n["op"] == "gelu"] \
        == ["tanh", None]


def test_float_initializers_converted(tmp_path):
    """F16, BF16 and F64 initializers become F32 weights (directly or
    through a folded Cast)."""
    rng = np.random.default_rng(9)
    b = OnnxBuilder()
    w16 = rng.standard_normal((4, 3)).astype(np.float16)
    w64 = rng.standard_normal(3)
    bf = rng.standard_normal(3).astype(np.float32)
    bf_bits = (bf.view(np.uint32) >> 16).astype("<u2")
    b.init("w16", w16)
    b.init("w64", w64)
    b.inits.append(helper.make_tensor("wbf", TensorProto.BFLOAT16, [3], bf_bits.tobytes(),
                                      raw=True))
    h = b.op("MatMul", ["x", b.op("Cast", ["w16"], to=TensorProto.FLOAT)])
    h = b.op("Add", [h, "w64"])
    y = b.op("Mul", [h, "wbf"], name="scale_bf16")
    model = b.model([("x", FLT, [2, 4])], [y], 13)
    feeds = {"x": rng.standard_normal((2, 4)).astype(np.float32)}
    check_converted(tmp_path, model, feeds)
    header, _ = st_header(tmp_path / "mu" / "model.safetensors")
    assert {e["dtype"] for k, e in header.items() if k != "__metadata__"} == {"F32"}
    weights = st_read_f32(tmp_path / "mu" / "model.safetensors")
    assert np.array_equal(weights["w64"], w64.astype(np.float32))
    assert np.array_equal(weights["wbf"], (bf_bits.astype(np.uint32) << 16).view(np.float32))
    folded = [k for k in weights if k not in ("w64", "wbf")]
    assert len(folded) == 1 and np.array_equal(weights[folded[0]], w16.astype(np.float32))


def test_dynamic_dims(tmp_path):
    b = OnnxBuilder()
    y = b.op("MatMul", ["x", b.rand("W", 8, 3)])
    model = b.model([("x", FLT, ["N", "T", 8])], [y], 13)
    src = tmp_path / "dyn.onnx"
    onnx.save(model, str(src))
    err = convert_fails(src, tmp_path / "a")
    assert "'T'" in err and "--dim T=" in err
    assert not (tmp_path / "a").exists()
    g = convert_ok(src, tmp_path / "b", "--dim", "T=5")
    assert g["inputs"][0]["shape"] == [1, 5, 8]              # the batch dim defaults to 1
    g = convert_ok(src, tmp_path / "c", "--dim", "T=5", "--dim", "N=3")
    assert g["inputs"][0]["shape"] == [3, 5, 8]
    g = convert_ok(src, tmp_path / "d", "--dim", "x:1=2")
    assert g["inputs"][0]["shape"] == [1, 2, 8]
    assert "nosuch" in convert_fails(src, tmp_path / "e", "--dim", "T=5", "--dim", "nosuch=2")
    assert "positive" in convert_fails(src, tmp_path / "f", "--dim", "T=0")


# --------------------------------------------------------------------------
# the error path: exit 1, the node named, nothing written
# --------------------------------------------------------------------------

def test_unsupported_op_fails_and_writes_nothing(tmp_path):
    b = OnnxBuilder()
    h = b.op("Relu", ["x"])
    y = b.op("Unique", [h], name="my unique node")
    src = tmp_path / "bad.onnx"
    b.save(src, [("x", FLT, [4, 4])], [y], 13)
    out = tmp_path / "out"
    err = convert_fails(src, out)
    assert "'my unique node'" in err and "Unique" in err
    assert not out.exists(), "the output directory was created"
    # an existing output directory is left exactly as it was
    out.mkdir()
    (out / "model.json").write_text("OLD")
    convert_fails(src, out)
    assert sorted(p.name for p in out.iterdir()) == ["model.json"]
    assert (out / "model.json").read_text() == "OLD"


def test_runtime_shape_input_fails(tmp_path):
    b = OnnxBuilder()
    y = b.op("Reshape", ["x", "shape"], name="reshape_by_input")
    src = tmp_path / "bad.onnx"
    b.save(src, [("x", FLT, [2, 6]), ("shape", INT, [2])], [y], 13)
    err = convert_fails(src, tmp_path / "out")
    assert "'reshape_by_input'" in err and "Reshape" in err and "constant" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", ["string_input", "training_dropout", "sequence_input",
                                  "foreign_domain"])
def test_other_unsupported_forms_fail(tmp_path, case):
    b = OnnxBuilder()
    inputs = [("x", FLT, [1, 1, 3, 4])]
    if case == "string_input":
        inputs.append(("s", TensorProto.STRING, [2]))
        y = b.op("Identity", ["s"], name="bad")
    elif case == "training_dropout":
        y = b.op("Dropout", ["x", b.init("r", np.float32(0.5)), b.init("t", np.array(True))],
                 name="bad")
    elif case == "sequence_input":
        y = b.op("SequenceLength", ["s"], name="bad")
    else:
        y = b.op("Relu", ["x"], name="bad")
        b.nodes[-1].domain = "com.example"
    src = tmp_path / "bad.onnx"
    model = b.model(inputs, [y], 13)
    if case == "sequence_input":
        model.graph.input.append(helper.make_tensor_sequence_value_info("s", FLT, [2]))
    onnx.save(model, str(src))
    err = convert_fails(src, tmp_path / "out")
    assert "'bad'" in err or "'s'" in err
    assert not (tmp_path / "out").exists()


def test_outputs_that_are_weights_or_inputs(tmp_path):
    """A graph output naming a weight or a graph input gets a copy node.
    The weight's copy keeps the output's name (the weight is renamed); the
    input's cannot (muster names each value once), and is noted."""
    b = OnnxBuilder()
    b.rand("W", 2, 3)
    y = b.op("Relu", ["x"])
    src = tmp_path / "m.onnx"
    b.save(src, [("x", FLT, [2, 3])], ["W", "x", y], 13)
    proc = convert(src, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    graph = mumodel.load_graph(tmp_path / "out")
    assert graph["outputs"][2] == y
    copies = {n["outputs"][0]: n for n in graph["nodes"] if n["op"] == "reshape"}
    assert set(graph["outputs"][:2]) == set(copies)
    assert graph["outputs"][0] == "W"
    assert "'W'" not in proc.stderr and "'x'" in proc.stderr   # the rename is noted
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    got = mumodel.evaluate_dir(tmp_path / "out", {"x": x})
    want = onnx_reference(src, {"x": x})
    for onnx_name, mu_name in zip(["W", "x", y], graph["outputs"]):
        assert got[mu_name].tobytes() == want[onnx_name].astype(np.float32).tobytes()


def test_dead_branch_is_dropped(tmp_path):
    """Nodes no output needs are not converted (an unsupported op there is
    no error)."""
    b = OnnxBuilder()
    y = b.op("Relu", ["x"])
    b.op("Unique", ["x"], name="unused")
    src = tmp_path / "m.onnx"
    b.save(src, [("x", FLT, [1, 4])], [y], 13)
    graph = convert_ok(src, tmp_path / "out")
    assert [n["op"] for n in graph["nodes"]] == ["relu"]


# --------------------------------------------------------------------------
# models written by torch.onnx.export
# --------------------------------------------------------------------------

class TorchBlock(torch.nn.Module):
    """An encoder block the way people write one in torch (fused qkv,
    split, views, dropout, GELU, a CLS head), and optional embeddings."""

    def __init__(self, d=32, heads=4, ff=64, vocab=None, seq=6):
        super().__init__()
        self.heads, self.vocab = heads, vocab
        if vocab:
            self.emb = torch.nn.Embedding(vocab, d)
            self.pos = torch.nn.Parameter(torch.randn(seq, d) * 0.1)
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.o = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.f1, self.f2 = torch.nn.Linear(d, ff), torch.nn.Linear(ff, d)
        self.drop = torch.nn.Dropout(0.1)
        self.head = torch.nn.Linear(d, 3)

    def forward(self, x):
        if self.vocab:
            x = self.emb(x) + self.pos
        B, S, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (t.reshape(B, S, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D // self.heads), dim=-1)
        x = x + self.drop(self.o((a @ v).transpose(1, 2).reshape(B, S, D)))
        x = x + self.f2(F.gelu(self.f1(self.ln2(x))))
        return x, torch.sigmoid(self.head(x[:, 0])), x[:, 1:3].mean(dim=1)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("opset", [11, 13, 17])
@pytest.mark.parametrize("vocab", [None, 40])
def test_torch_export(tmp_path, opset, vocab):
    torch.manual_seed(opset)
    model = TorchBlock(vocab=vocab).eval()
    x = torch.randint(0, vocab, (2, 6)) if vocab else torch.randn(2, 6, 32)
    name = "ids" if vocab else "x"
    with torch.no_grad():
        want = model(x)
    src = tmp_path / "block.onnx"
    torch.onnx.export(model, (x,), str(src), opset_version=opset, input_names=[name],
                      output_names=["h", "cls", "pooled"],
                      dynamic_axes={name: {0: "batch", 1: "seq"}})
    graph = convert_ok(src, tmp_path / "mu", "--dim", "batch=2", "--dim", "seq=6")
    decl = {"name": name, "shape": list(x.shape)}
    if vocab:
        decl["dtype"] = "I64"                  # token ids stay integers
    assert graph["inputs"] == [decl]
    feeds = {name: x.numpy()}
    got = mumodel.evaluate_dir(tmp_path / "mu", feeds)
    ref = onnx_reference(src, feeds)
    for out, w in zip(["h", "cls", "pooled"], want):
        mumodel.assert_close(got[out], w.numpy(), TOL, what=f"{out} vs torch")
        mumodel.assert_close(ref[out], w.numpy(), TOL, what=f"{out}: reference vs torch")


# --------------------------------------------------------------------------
# mumodel's evaluator against torch, op by op
# --------------------------------------------------------------------------

def _r(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _t(x):
    return torch.from_numpy(np.asarray(x, np.float32).copy())


def op_cases():
    rng = np.random.default_rng(11)
    r = lambda *s, scale=1.0: _r(rng, *s, scale=scale)  # noqa: E731
    ids = np.array([[3, 0, 9], [9, 3, 1]], np.float32)
    return [
        ("add", [r(3, 1, 5), r(4, 1)], {}, lambda a, b: a + b),
        ("sub", [r(3, 5), r(1)], {}, lambda a, b: a - b),
        ("mul", [r(3, 5), np.float32(2.5).reshape(())], {}, lambda a, b: a * b),
        ("div", [r(2, 3, 4), r(3, 1) + 3], {}, lambda a, b: a / b),
        ("pow", [r(3, 4), np.array([2.0], np.float32)], {}, torch.pow),
        ("pow", [np.abs(r(3, 4)) + 0.1, np.array([1.7], np.float32)], {}, torch.pow),
        ("relu", [r(5, 7)], {}, F.relu), ("sigmoid", [r(5, 7, scale=4)], {}, torch.sigmoid),
        ("tanh", [r(5, 7)], {}, torch.tanh), ("sqrt", [np.abs(r(5, 7))], {}, torch.sqrt),
        ("exp", [r(5, 7)], {}, torch.exp), ("neg", [r(5, 7)], {}, torch.neg),
        ("erf", [r(5, 7)], {}, torch.erf), ("gelu", [r(5, 7, scale=3)], {}, F.gelu),
        ("gelu", [r(5, 7, scale=3)], {"approximate": "tanh"},
         lambda x: F.gelu(x, approximate="tanh")),
        ("silu", [r(5, 7, scale=3)], {}, F.silu),
        ("matmul", [r(2, 1, 3, 4), r(5, 4, 6)], {}, torch.matmul),
        ("matmul", [r(4), r(3, 4, 2)], {}, torch.matmul),
        ("matmul", [r(2, 3, 4), r(4)], {}, torch.matmul),
        ("gemm", [r(4, 3), r(5, 4), r(5)], {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0},
         lambda a, b, c: 0.5 * (a.T @ b.T) + 2.0 * c),
        ("gemm", [r(3, 4), r(4, 5), r(3, 1)], {}, lambda a, b, c: a @ b + c),
        ("gemm", [r(3, 4), r(4, 5)], {"alpha": 1.5}, lambda a, b: 1.5 * (a @ b)),
        ("layernorm", [r(2, 3, 8), r(24), r(1)], {"axis": 1, "epsilon": 1e-3},
         lambda x, g, b: F.layer_norm(x, (3, 8), g.reshape(3, 8), b.expand(24).reshape(3, 8),
                                      1e-3)),
        ("layernorm", [r(4, 16), r(1)], {},
         lambda x, g: F.layer_norm(x, (16,), g.expand(16), None, 1e-5)),
        ("rmsnorm", [r(4, 16), r(16)], {},
         lambda x, g: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * g),
        ("softmax", [r(2, 5, 3, scale=3)], {"axis": 1}, lambda x: torch.softmax(x, 1)),
        ("softmax", [r(4, 9, scale=5)], {}, lambda x: torch.softmax(x, -1)),
        ("reduce_mean", [r(3, 4, 5)], {}, lambda x: x.mean().reshape(1, 1, 1)),
        ("reduce_mean", [r(3, 4, 5)], {"axes": [0, -1], "keepdims": 0},
         lambda x: x.mean(dim=(0, 2))),
        ("reduce_sum", [r(3, 4, 5)], {"axes": [1]}, lambda x: x.sum(1, keepdim=True)),
        ("reduce_max", [r(3, 4, 5)], {"axes": [2, 1], "keepdims": 0}, lambda x: x.amax((1, 2))),
        ("reshape", [r(2, 3, 4)], {"shape": [0, -1, 2]}, lambda x: x.reshape(2, 6, 2)),
        ("flatten", [r(2, 3, 4)], {"axis": 0}, lambda x: x.reshape(1, 24)),
        ("flatten", [r(2, 3, 4)], {"axis": -1}, lambda x: x.reshape(6, 4)),
        ("flatten", [r(2, 3, 4)], {}, lambda x: torch.flatten(x, 1)),
        ("transpose", [r(2, 3, 4)], {}, lambda x: x.permute(2, 1, 0)),
        ("transpose", [r(2, 3, 4, 5)], {"perm": [2, 0, 3, 1]}, lambda x: x.permute(2, 0, 3, 1)),
        ("concat", [r(2, 3), r(2, 5), r(2, 1)], {"axis": -1}, lambda *x: torch.cat(x, -1)),
        ("concat", [r(2, 3), r(4, 3)], {}, lambda *x: torch.cat(x, 0)),
        ("slice", [r(7, 9)], {"starts": [1, -8], "ends": [100, 8], "axes": [0, 1],
                              "steps": [2, 3]}, lambda x: x[1::2, 1:8:3]),
        ("slice", [r(7, 9)], {"starts": [-3], "ends": [-1]}, lambda x: x[-3:-1]),
        ("slice", [r(7, 9)], {"starts": [5], "ends": [2], "axes": [1]}, lambda x: x[:, 5:2]),
        ("embedding", [r(10, 4), ids], {}, lambda t, i: F.embedding(i.long(), t)),
    ]


@pytest.mark.parametrize("case", op_cases(), ids=lambda c: c[0])
def test_evaluator_op_vs_torch(case):
    op, args, attrs, fn = case
    node = {"name": "n", "op": op, "inputs": [f"i{k}" for k in range(len(args))],
            "outputs": ["y"], "attrs": attrs}
    got = mumodel.run_node(node, [np.asarray(a, np.float32) for a in args])
    want = fn(*[_t(a) for a in args]).numpy()
    mumodel.assert_close(got, want, TOL, what=op)


@pytest.mark.parametrize("attrs", [{"axes": 1}, {"axes": [0.5]}, {"keepdims": True},
                                   {"axes": [0, 1, 2, 3, 4, 5, 6, 7, 8]}])
def test_evaluator_rejects_bad_attributes(attrs):
    node = {"name": "n", "op": "reduce_mean", "inputs": ["x"], "outputs": ["y"],
            "attrs": attrs}
    with pytest.raises(mumodel.EvalError):
        mumodel.run_node(node, [np.zeros((2, 3), np.float32)])


# --------------------------------------------------------------------------
# the generators' models: numpy evaluator vs torch on the same weights
# --------------------------------------------------------------------------

TORCH_ACT = {"relu": F.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "gelu": F.gelu,
             "gelu_erf": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
             "silu": F.silu, "erf": torch.erf, "none": lambda x: x}


def torch_mlp(w, cfg, x):
    h = x.reshape(x.shape[0], -1)
    n = len(cfg["widths"]) - 1
    for i, act in enumerate(cfg["activations"]):
        style = cfg["style"] if cfg["style"] != "mixed" else ("gemm", "matmul")[i % 2]
        W, b = w[f"fc{i}.weight"], w[f"fc{i}.bias"]
        h = F.linear(h, W, b) if style == "gemm" else h @ W + b
        h = TORCH_ACT[act](h)
    assert i == n - 1
    return {"y": h}


def torch_transformer(w, cfg, x):
    B, S, D, H = cfg["batch"], cfg["seq"], cfg["dim"], cfg["heads"]
    if cfg["vocab"]:
        h = F.embedding(x.long(), w["embed.tokens"]) + w["embed.positions"]
    else:
        h = x
    for layer in range(cfg["layers"]):
        p = f"l{layer}."
        a = F.layer_norm(h, (D,), w[p + "ln1.weight"], w[p + "ln1.bias"], cfg["eps"])
        q, k, v = (a @ w[p + "qkv.weight"] + w[p + "qkv.bias"]).split(D, dim=-1)
        q, k, v = (t.reshape(B, S, H, D // H).permute(0, 2, 1, 3) for t in (q, k, v))
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D // H), dim=-1)
        ctx = (att @ v).permute(0, 2, 1, 3).reshape(B, S, D)
        h = h + ctx @ w[p + "attn.out.weight"] + w[p + "attn.out.bias"]
        a = F.layer_norm(h, (D,), w[p + "ln2.weight"], w[p + "ln2.bias"], cfg["eps"])
        f = TORCH_ACT[cfg["act"]](a @ w[p + "ff1.weight"] + w[p + "ff1.bias"])
        h = h + f @ w[p + "ff2.weight"] + w[p + "ff2.bias"]
    out = {"y": h}
    if cfg["pooled"]:
        cat = torch.cat([h.mean(dim=1), h.amax(dim=1)], dim=-1)
        out["logits"] = F.linear(cat, w["head.weight"], w["head.bias"])
    return out


GENERATED = [
    ("mlp", dict()),
    ("mlp", dict(style="matmul", activations=["sigmoid", "tanh", "none"])),
    ("mlp", dict(style="mixed", widths=(12, 20, 20, 20, 20, 6),
                 activations=["gelu", "gelu_tanh", "silu", "gelu_erf", "erf"])),
    ("mlp", dict(in_shape=(3, 4, 6), widths=(24, 16, 4))),
    ("transformer", dict()),
    ("transformer", dict(act="relu", layers=2)),
    ("transformer", dict(vocab=50, act="gelu_tanh", layers=2)),
    ("transformer", dict(act="gelu_erf", seq=5, dim=48, heads=3, pooled=False)),
]


@pytest.mark.parametrize("kind,kw", GENERATED,
                         ids=[f"{k}-{i}" for i, (k, _) in enumerate(GENERATED)])
def test_generator_vs_torch(tmp_path, kind, kw):
    write = mumodel.write_mlp if kind == "mlp" else mumodel.write_transformer
    info = write(tmp_path / "m", seed=21, **kw)
    weights = {k: _t(v) for k, v in st_read_f32(tmp_path / "m" / "model.safetensors").items()}
    assert set(weights) == set(mumodel.graph_params(info.graph))
    for seed in (0, 1):
        inputs = info.inputs(seed)
        got = mumodel.evaluate_dir(info.path, inputs)
        torch_fn = torch_mlp if kind == "mlp" else torch_transformer
        want = torch_fn(weights, info.config, _t(next(iter(inputs.values()))))
        assert set(got) == set(want) == set(info.graph["outputs"])
        for name in want:
            mumodel.assert_close(got[name], want[name].numpy(), TOL, what=name)


def test_transformer_residuals_skip_stages(tmp_path):
    """The block's residual input is read again far from where it was
    first read, so any cut in between makes it a boundary tensor of the
    later stage that skips the stages between."""
    info = mumodel.write_transformer(tmp_path / "t", layers=2)
    nodes = info.graph["nodes"]
    first_read = next(i for i, n in enumerate(nodes) if "x" in n["inputs"])
    resid = next(i for i, n in enumerate(nodes) if n["name"] == "l0.resid1")
    assert resid - first_read > 10
    for cut in range(first_read + 1, resid + 1):
        assert "x" in mumodel.stage_io(info.graph, cut, len(nodes))["inputs"]
    # three stages cut inside the attention: the last still reads x
    stages = [mumodel.stage_io(info.graph, a, b)
              for a, b in ((0, 5), (5, resid - 3), (resid - 3, len(nodes)))]
    assert "x" in stages[0]["inputs"] and "x" not in stages[1]["inputs"]
    assert "x" in stages[2]["inputs"]


def test_stage_io_covers_the_graph(tmp_path):
    """Evaluating any split stage by stage, feeding each stage its inputs
    from what earlier stages output, gives the whole run's values."""
    info = mumodel.write_transformer(tmp_path / "t", layers=2, vocab=30)
    graph, weights = info.graph, mumodel.load_weights(info.path)
    inputs = info.inputs(3)
    whole = mumodel.evaluate(graph, weights, inputs)
    n = len(graph["nodes"])
    for cuts in ([0, n], [0, 1, n], [0, 7, 8, 30, n], [0, n // 3, 2 * n // 3, n - 1, n]):
        pool = dict(inputs)
        for first, last in zip(cuts, cuts[1:]):
            io = mumodel.stage_io(graph, first, last)
            out = mumodel.evaluate(graph, weights, {k: pool[k] for k in io["inputs"]},
                                   first, last, io["outputs"])
            pool.update(out)
        for name in graph["outputs"]:
            assert pool[name].tobytes() == whole[name].tobytes(), (cuts, name)


def test_big_mlp_generator(tmp_path):
    info = mumodel.write_big_mlp(tmp_path / "big", total_bytes=3 << 20, width=256,
                                 chunk_elems=10000)
    layers = info.config["layers"]
    assert layers == mumodel.big_mlp_layers(3 << 20, 256) == 12
    size = (tmp_path / "big" / "model.safetensors").stat().st_size
    header, start = st_header(tmp_path / "big" / "model.safetensors")
    assert size == start + layers * 4 * (256 * 256 + 256)
    w = {k: _t(v) for k, v in st_read_f32(tmp_path / "big" / "model.safetensors").items()}
    x = info.inputs(0)["x"]
    h = _t(x)
    for i in range(layers):
        h = torch.tanh(F.linear(h, w[f"fc{i}.weight"], w[f"fc{i}.bias"]))
    got = mumodel.evaluate_dir(info.path, {"x": x})["y"]
    mumodel.assert_close(got, h.numpy(), TOL)
    assert np.abs(got).max() > 0.01          # activations did not die out
    # the same seed writes the same bytes, whatever the chunking
    again = mumodel.write_big_mlp(tmp_path / "again", total_bytes=3 << 20, width=256,
                                  chunk_elems=1 << 20)
    assert (tmp_path / "again" / "model.safetensors").read_bytes() == \
        (tmp_path / "big" / "model.safetensors").read_bytes()
    assert again.graph == info.graph


# --------------------------------------------------------------------------
# safetensors
# --------------------------------------------------------------------------

def test_safetensors_roundtrip(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {"a": rng.standard_normal((3, 5)).astype(np.float32),
               "scalar": np.float32(1.5).reshape(()), "empty": np.zeros((0, 4), np.float32),
               "w.0/odd name": rng.standard_normal(7).astype(np.float32)}
    path = tmp_path / "t.safetensors"
    mumodel.write_safetensors(path, tensors, {"k": "v"})
    header, start = st_header(path)
    assert start % 8 == 0
    assert header["__metadata__"] == {"k": "v"}
    assert header["scalar"]["shape"] == [] and header["empty"]["shape"] == [0, 4]
    assert path.stat().st_size == start + 4 * (15 + 1 + 0 + 7)
    back = mumodel.read_safetensors(path)
    assert list(back) == list(tensors)
    for k in tensors:
        assert back[k].dtype == np.float32 and back[k].shape == np.shape(tensors[k])
        assert back[k].tobytes() == np.asarray(tensors[k]).tobytes()
    assert st_read_f32(path)["a"].tobytes() == tensors["a"].tobytes()


def test_safetensors_streaming_writer_matches(tmp_path):
    rng = np.random.default_rng(1)
    tensors = {"a": rng.standard_normal((6, 7)).astype(np.float32),
               "b": rng.standard_normal(5).astype(np.float32)}
    mumodel.write_safetensors(tmp_path / "whole", tensors)
    flat = np.concatenate([t.reshape(-1) for t in tensors.values()])
    with mumodel.SafetensorsWriter(tmp_path / "stream",
                                   [(k, v.shape) for k, v in tensors.items()]) as w:
        for i in range(0, flat.size, 4):
            w.write(flat[i:i + 4])
    assert (tmp_path / "stream").read_bytes() == (tmp_path / "whole").read_bytes()
    with pytest.raises(ValueError):
        with mumodel.SafetensorsWriter(tmp_path / "short", [("a", (4,))]) as w:
            w.write(np.zeros(3, np.float32))


@pytest.mark.parametrize("dtype", ["F16", "BF16", "F64"])
def test_safetensors_other_float_dtypes(tmp_path, dtype):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((4, 9)) * 100).astype(np.float32)
    x[0, :4] = [0.0, -0.0, np.inf, 1e-7]
    path = tmp_path / "t"
    mumodel.write_safetensors(path, {"x": x}, dtype=dtype)
    header, start = st_header(path)
    assert header["x"]["dtype"] == dtype
    back = mumodel.read_safetensors(path)["x"]
    want = {"F16": lambda: torch.from_numpy(x).half().float(),
            "BF16": lambda: torch.from_numpy(x).bfloat16().float(),
            "F64": lambda: torch.from_numpy(x).double().float()}[dtype]().numpy()
    assert back.dtype == np.float32
    assert back.tobytes() == want.tobytes()          # same rounding as torch
    raw = open(path, "rb").read()[start:]
    if dtype == "BF16":
        bits = torch.from_numpy(x).bfloat16().view(torch.int16).numpy().astype("<i2")
        assert raw == bits.tobytes()


@pytest.mark.parametrize("mutate", ["overlap", "past_end", "bad_count", "header_len"])
def test_safetensors_reader_rejects_bad_files(tmp_path, mutate):
    path = tmp_path / "t"
    mumodel.write_safetensors(path, {"a": np.zeros(4, np.float32), "b": np.zeros(4, np.float32)})
    header, start = st_header(path)
    data = open(path, "rb").read()[start:]
    if mutate == "overlap":
        header["b"]["data_offsets"] = [8, 24]
    elif mutate == "past_end":
        header["b"]["data_offsets"] = [16, 40]
    elif mutate == "bad_count":
        header["b"]["shape"] = [5]
    text = json.dumps(header).encode()
    hlen = len(text) if mutate != "header_len" else 1 << 40
    path.write_bytes(struct.pack("<Q", hlen) + text + data)
    with pytest.raises(mumodel.SafetensorsError):
        mumodel.read_safetensors(path)


# --------------------------------------------------------------------------
# Einsum: diagonals, lone sums and pairwise matmuls, against numpy.einsum
# --------------------------------------------------------------------------

EINSUMS = [("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
           ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),
           ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]), ("ii->", [(4, 4)]),
           ("bij,bjk->bi", [(2, 3, 4), (2, 4, 5)]), ("i,j->ij", [(3,), (4,)]),
           ("abc->cba", [(2, 3, 4)]), ("iij->j", [(3, 3, 2)])]


@pytest.mark.parametrize("eq,shapes", EINSUMS)
def test_einsum_forms(muster_bin, tmp_path, eq, shapes):
    names = [f"x{i}" for i in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], equation=eq)
    graph = helper.make_graph([node], "e", [helper.make_tensor_value_info(n, FLT, s)
                                            for n, s in zip(names, shapes)],
                              [helper.make_tensor_value_info("y", FLT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    src = tmp_path / "e.onnx"
    onnx.save(model, str(src))
    convert_ok(src, tmp_path / "mu")
    rng = np.random.default_rng(1)
    xs = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes)}
    mumodel.write_safetensors(tmp_path / "in.safetensors", xs)
    proc = subprocess.run([str(muster_bin), "run", "--model", str(tmp_path / "mu"), "--input",
                           str(tmp_path / "in.safetensors"), "--output",
                           str(tmp_path / "out.safetensors")], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = mumodel.read_safetensors(tmp_path / "out.safetensors")["y"]
    mumodel.assert_close(got, np.einsum(eq, *[xs[n] for n in names]), TOL, what=eq)
