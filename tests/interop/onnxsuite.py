#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""ONNX's own backend test suite through tools/onnx2muster.py and
`muster run --model`, judged as onnx.backend.test judges a runtime.

The suite is Debian's libonnx-testdata: /usr/share/libonnx-testdata/data/
{node,pytorch-converted,pytorch-operator,simple}/test_*/ each hold a
model.onnx and test_data_set_*/input_*.pb, output_*.pb (TensorProtos).
For every case and data set:

  * the model is converted (in this process, by the converter's Python
    API) with its dynamic dims fixed to the input data's. A graph input
    that a shape, axes, pads or sizes are computed from (a Reshape target
    fed as an input, as many node tests do) is fixed to its data
    (convert(..., consts=)): muster takes static shapes, the same rule as
    --dim;
  * the other inputs are written to a safetensors file in their own dtype
    (a rank-0 tensor stays rank 0) and `muster run --model DIR --input F
    --output O` runs the model;
  * every output must come back under the graph's output name, with the
    declared dtype and the expected shape, and match the expected values
    as onnx.backend.test's runner checks them: numpy.testing.assert_allclose
    with rtol 1e-3 and atol 1e-7 (NaN matches NaN), exactly for integers
    and BOOL. BFLOAT16 tensors, which numpy cannot hold, are compared as
    their uint16 bit patterns, as the runner and these .pb files hold them.

A case is `unsupported` only when the converter says muster does not claim
what it uses (onnx2muster_lib.Unsupported: an op not on the list, a
string, sequence or optional tensor, a documented limit of an op); the
reason is printed for each one. Anything else that goes wrong is a
failure.

usage: onnxsuite.py [--muster BIN] [--quick] [-k SUBSTRING] [-v]
"""

import argparse
import contextlib
import io
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import onnx2muster  # noqa: E402
from onnx2muster_lib import ConstRequired, ConvertError, Unsupported  # noqa: E402

SUITE = Path("/usr/share/libonnx-testdata/data")
GROUPS = ("node", "pytorch-converted", "pytorch-operator", "simple")
RTOL, ATOL = 1e-3, 1e-7
RUN_TIMEOUT = 120.0

# ONNX element type -> (safetensors dtype, numpy dtype of its bytes)
ST = {
    TensorProto.FLOAT: ("F32", "<f4"), TensorProto.FLOAT16: ("F16", "<f2"),
    TensorProto.BFLOAT16: ("BF16", "<u2"), TensorProto.DOUBLE: ("F64", "<f8"),
    TensorProto.INT8: ("I8", "i1"), TensorProto.INT16: ("I16", "<i2"),
    TensorProto.INT32: ("I32", "<i4"), TensorProto.INT64: ("I64", "<i8"),
    TensorProto.UINT8: ("U8", "u1"), TensorProto.UINT16: ("U16", "<u2"),
    TensorProto.UINT32: ("U32", "<u4"), TensorProto.UINT64: ("U64", "<u8"),
    TensorProto.BOOL: ("BOOL", "?"),
}
ST_NP = {dt: np.dtype(code) for dt, code in ST.values()}

# The quick subset `make check` runs: the node tests of the ops the three
# model families of issue 15 convert to (transformer decoders and
# encoders, CNNs) and the typed tensors they carry. The whole suite runs
# in `make check-full`.
QUICK = re.compile(
    r"^test_(add|sub|mul|div|matmul|gemm|relu|sigmoid|tanh|erf|sqrt|pow|exp|softmax|"
    r"layer_normalization|reduce_mean|reduce_sum|transpose|reshape|unsqueeze|squeeze|concat|"
    r"slice|split|gather|where|equal|less|greater|trilu|cast|castlike|conv|batchnorm|"
    r"maxpool|averagepool|globalaveragepool|clip|hardsigmoid|flatten|expand|not|and|"
    r"constant|shape|size|dropout|identity|resize_.*nearest|Conv2d|Linear|Softmax|"
    r"operator_(add|mm|view|concat|chunk|flatten|basic))")


def load_tensor(path, elem):
    """A .pb TensorProto as a numpy array; BFLOAT16 (elem) as uint16 bits,
    however the file stores them."""
    t = TensorProto()
    t.ParseFromString(Path(path).read_bytes())
    if elem == TensorProto.BFLOAT16:
        if t.data_type == TensorProto.BFLOAT16:
            a = numpy_helper.to_array(t).astype(np.float32)
            return (a.view(np.uint32) >> 16).astype(np.uint16)
        return numpy_helper.to_array(t).astype(np.uint16)
    return numpy_helper.to_array(t)


def write_st(path, tensors):
    """{name: (array, onnx elem type)} as a safetensors file, each tensor in
    its own dtype (BF16 given as uint16 bits)."""
    header, blobs, off = {}, [], 0
    for name, (a, elem) in tensors.items():
        dt, code = ST[elem]
        b = np.array(a, dtype=code, order="C").tobytes()
        header[name] = {"dtype": dt, "shape": list(np.shape(a)), "data_offsets": [off, off + len(b)]}
        b += b"\0" * (-len(b) % 8)
        off += len(b)
        blobs.append(b)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_st(path):
    """{name: (array, safetensors dtype)} of a safetensors file (BF16 as
    uint16 bits)."""
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        a = np.frombuffer(raw[8 + n + b:8 + n + end], ST_NP[e["dtype"]]).reshape(e["shape"])
        out[name] = (a, e["dtype"])
    return out


def cases(quick=False, pattern=None):
    found = []
    for group in GROUPS:
        for d in sorted((SUITE / group).glob("test_*")):
            if quick and not QUICK.match(d.name):
                continue
            if pattern and pattern not in d.name:
                continue
            found.append(d)
    return found


def data_sets(case):
    return sorted(d for d in case.iterdir() if d.name.startswith("test_data_set_"))


def elem_of(vi):
    return vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else None


def feeds_of(model, ds):
    """The data set's inputs by graph input name: {name: (array, elem)}."""
    inits = {t.name for t in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in inits]
    files = sorted(ds.glob("input_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
    feeds = {}
    for vi, f in zip(graph_inputs, files):
        feeds[vi.name] = (load_tensor(f, elem_of(vi)), elem_of(vi))
    return feeds


def expected_of(model, ds):
    files = sorted(ds.glob("output_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
    return [(vi.name, load_tensor(f, elem_of(vi)), elem_of(vi))
            for vi, f in zip(model.graph.output, files)]


def dynamic_dims(model, feeds):
    """--dim values that fix every dynamic input dim to the data's."""
    dims = {}
    for vi in model.graph.input:
        if vi.name not in feeds or not vi.type.HasField("tensor_type"):
            continue
        shape = np.shape(feeds[vi.name][0])
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            if not (d.HasField("dim_value") and d.dim_value > 0) and axis < len(shape):
                dims[f"{vi.name}:{axis}"] = int(shape[axis])
    return dims


def convert(model_path, outdir, model, feeds):
    """Convert, fixing the graph inputs the converter needs as constants.
    Returns the names of the fixed inputs."""
    consts = {}
    for _ in range(len(model.graph.input) + 1):
        dims = {k: v for k, v in dynamic_dims(model, feeds).items()
                if k.split(":")[0] not in consts}
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                onnx2muster.convert(str(model_path), str(outdir), dims, None, consts)
            return set(consts)
        except ConstRequired as exc:
            new = {n for n in exc.inputs if n in feeds and n not in consts}
            if not new:
                raise
            consts.update({n: feeds[n][0] for n in new})
    raise ConvertError("too many inputs to fix")


def compare(name, got, want, elem):
    """None when got (array, dtype) matches want as the backend runner
    checks it, else why not."""
    if got is None:
        return f"output {name!r} is missing"
    a, dt = got
    if dt != ST[elem][0]:
        return f"output {name!r} is {dt}, the model says {ST[elem][0]}"
    if a.shape != np.shape(want):
        return f"output {name!r} has shape {list(a.shape)}, want {list(np.shape(want))}"
    try:
        if a.dtype.kind in "biu" and elem != TensorProto.BFLOAT16:
            np.testing.assert_array_equal(a, want)
        else:
            np.testing.assert_allclose(a, np.asarray(want), rtol=RTOL, atol=ATOL)
    except AssertionError as exc:
        lines = [ln for ln in str(exc).splitlines() if ln.strip()]
        return f"output {name!r}: " + "; ".join(lines[1:4])
    return None


def run_case(case, muster, work):
    """('pass' | 'fail' | 'unsupported', reason)."""
    model_path = case / "model.onnx"
    model = onnx.load(str(model_path))
    for vi in list(model.graph.input) + list(model.graph.output):
        if elem_of(vi) is None:
            return "unsupported", (f"{vi.name!r} is not a tensor (muster carries tensors only, "
                                   "not sequences, maps or optionals)")
        if elem_of(vi) not in ST:
            return "unsupported", (f"{vi.name!r} has element type "
                                   f"{TensorProto.DataType.Name(elem_of(vi))}, which muster "
                                   "does not carry")
    sets = data_sets(case)
    if not sets:
        return "fail", "no test data sets"
    for k, ds in enumerate(sets):
        feeds = feeds_of(model, ds)
        out = work / f"{case.name}.{k}"
        try:
            fixed = convert(model_path, out / "model", model, feeds)
        except Unsupported as exc:
            return "unsupported", str(exc).split(" (supported: ")[0]
        except ConvertError as exc:
            return "fail", f"converter: {exc}"
        write_st(out / "in.safetensors", {n: v for n, v in feeds.items() if n not in fixed})
        try:
            proc = subprocess.run([str(muster), "run", "--model", str(out / "model"), "--input",
                                   str(out / "in.safetensors"), "--output",
                                   str(out / "out.safetensors")], capture_output=True,
                                  text=True, timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            return "fail", f"muster run took over {RUN_TIMEOUT:.0f} s"
        if proc.returncode != 0:
            return "fail", f"muster run: {proc.stderr.strip()[-300:]}"
        got = read_st(out / "out.safetensors")
        for name, want, elem in expected_of(model, ds):
            why = compare(name, got.get(name), want, elem)
            if why:
                return "fail", why
    return "pass", ""


def run_suite(muster, quick=False, pattern=None, verbose=False, say=print):
    """Run the suite; returns {status: [(case, reason)]} and prints as it
    goes when verbose, then the unsupported cases with their reasons and
    the counts."""
    results = {"pass": [], "fail": [], "unsupported": []}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="onnxsuite.") as tmp:
        for case in cases(quick, pattern):
            label = f"{case.parent.name}/{case.name}"
            status, why = run_case(case, muster, Path(tmp))
            results[status].append((label, why))
            if verbose or status == "fail":
                say(f"{status:11s} {label}" + (f": {why}" if why else ""))
    for label, why in results["unsupported"]:
        say(f"unsupported {label}: {why}")
    say(f"{len(results['pass'])} passed, {len(results['fail'])} failed, "
        f"{len(results['unsupported'])} unsupported ({time.monotonic() - t0:.0f} s)")
    return results


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--muster", default=os.environ.get("MUSTER_BIN", str(REPO / "build/bin/muster")))
    p.add_argument("--quick", action="store_true", help="only the subset `make check` runs")
    p.add_argument("-k", dest="pattern", help="only cases whose name contains this")
    p.add_argument("-v", "--verbose", action="store_true", help="print every case")
    args = p.parse_args(argv)
    res = run_suite(args.muster, args.quick, args.pattern, args.verbose)
    return 1 if res["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
