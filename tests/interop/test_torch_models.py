# SPDX-License-Identifier: MIT
"""The models people export from torch, through tools/onnx2muster.py and
muster: a GPT-2-style causal decoder (its mask as a buffer and as
torch.tril in forward), a BERT-style encoder with an attention mask, and
torchvision's resnet18, mobilenet_v2 and squeezenet1_1, each built here
with seeded random weights (torchmodels.py) and exported by Debian's
torch 1.13 at opset 14.

For each: the converter takes the exported file as it is; `muster run
--model` in one process matches torch's own forward within 1e-4 of the
logits' scale (max |muster - torch| <= 1e-4 * max |torch|); and the model
split over 2 and over 3 `muster stage` processes gives outputs that are
bit-identical to the one-process run.

The CNNs take 224x224 images, as they are trained on, one at a time;
MUSTER_CHECK_FULL=1 (`make check-full`) runs batches of 4 images and
sequences of 32 tokens instead.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mumodel  # noqa: E402
import torchmodels as tm  # noqa: E402
from modelfix import PYTHON, CONVERTER, CONVERT_TIMEOUT  # noqa: E402
from test_cluster import Cluster  # noqa: E402
from test_pipeline import Runner, assert_bit_identical, stages, stop_all  # noqa: E402,F401

TORCH_TOL = 1e-4
FULL = os.environ.get("MUSTER_CHECK_FULL") == "1"


def converted(spec, tmp_path, **kw):
    """Build, export and convert a model: (model dir, feeds, torch's
    logits)."""
    model, feeds = spec.build(0, **kw)
    src = tmp_path / f"{spec.name}.onnx"
    tm.export(model, feeds, spec, src)
    out = tmp_path / f"{spec.name}.mu"
    proc = subprocess.run([PYTHON, str(CONVERTER), str(src), str(out)], capture_output=True,
                          text=True, timeout=CONVERT_TIMEOUT)
    assert proc.returncode == 0, f"onnx2muster failed on {spec.name}:\n{proc.stderr}"
    return out, feeds, tm.reference(model, feeds, spec)


def run_everywhere(muster_bin, tmp_path, stages, spec, model_dir, feeds, want):
    """One process against torch, then 2 and 3 stages against the one
    process; returns the one-process logits."""
    run = Runner(muster_bin, tmp_path, model_dir)
    inputs = {k: v for k, v in feeds.items()}
    whole = run_typed(run, inputs)
    got = whole[spec.output]
    assert got.shape == want.shape, (got.shape, want.shape)
    err = tm.rel_err(got, want)
    assert err <= TORCH_TOL, f"{spec.name}: muster vs torch, max error {err:.3g} of the scale"
    for n in (2, 3):
        group = stages(model_dir, n)
        split = run_typed(run, inputs, group)
        assert_bit_identical(split, whole, f"{spec.name} over {n} stages")
        stop_all(group)
    return got


def run_typed(run, inputs, group=None):
    """Runner with inputs in their own dtypes (int64 ids stay I64)."""
    args = run.args({}, group)
    mumodel.write_safetensors(args[args.index("--input") + 1], inputs, dtype="auto")
    proc = subprocess.run([str(run.bin)] + [str(a) for a in args], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"muster run failed:\n{proc.stderr}"
    return mumodel.read_safetensors(run.out)


@pytest.mark.parametrize("name", ["gpt2", "gpt2_tril", "bert"])
def test_transformers(muster_bin, tmp_path, stages, name):
    spec = tm.MODELS[name]
    kw = {"batch": 2, "seq": 32} if FULL else {}
    model_dir, feeds, want = converted(spec, tmp_path, **kw)
    graph = mumodel.load_graph(model_dir)
    ops = {n["op"] for n in graph["nodes"]}
    # the mask is applied where the exporter put it: Where on the scores,
    # or the cast attention mask added to them
    assert ("where" in ops) if name.startswith("gpt2") else ("cast" in ops)
    assert all(i["dtype"] == "I64" for i in graph["inputs"])
    run_everywhere(muster_bin, tmp_path, stages, spec, model_dir, feeds, want)
    # `muster model input` writes inputs of the declared dtypes (ids of 0)
    made = tmp_path / "made.safetensors"
    for args in (["model", "input", "--model", model_dir, "--out", made],
                 ["run", "--model", model_dir, "--input", made]):
        proc = subprocess.run([str(muster_bin)] + [str(a) for a in args], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
    made_in = mumodel.SafetensorsFile(made)
    assert {made_in.dtype(n) for n in made_in} == {"I64"}
    assert all(not made_in.raw(n).any() for n in made_in)


def test_recurrent(muster_bin, tmp_path, stages):
    """torch's LSTM (two layers, bidirectional, batch first), GRU and RNN,
    unrolled by the converter over the sequence."""
    spec = tm.MODELS["recurrent"]
    model_dir, feeds, want = converted(spec, tmp_path, **({"batch": 4, "seq": 16} if FULL else {}))
    run_everywhere(muster_bin, tmp_path, stages, spec, model_dir, feeds, want)


def test_typed_tensors_cross_stages(muster_bin, tmp_path, stages):
    """A model whose BOOL padding mask and I64 ids are read again after a
    stack of layers: split, those cross stage boundaries (typed frames,
    version-2 messages, both ways through the coordinator), and the
    outputs stay bit-identical."""
    spec = tm.MODELS["padded"]
    model_dir, feeds, want = converted(spec, tmp_path)
    graph = mumodel.load_graph(model_dir)
    dtypes = {i["name"]: i.get("dtype", "F32") for i in graph["inputs"]}
    for n in graph["nodes"]:
        dtypes[n["outputs"][0]] = {"equal": "BOOL", "cast": n.get("attrs", {}).get("to")}.get(
            n["op"], dtypes.get(n["outputs"][0], "F32"))
    for n in (2, 3):
        plan = json.loads(subprocess.run([str(muster_bin), "plan", "--model", str(model_dir),
                                          "--stages", str(n), "--json"], capture_output=True,
                                         text=True, check=True).stdout)
        later = {x for s in plan["stages"][1:] for x in s["inputs"]}
        assert {dtypes.get(x, "F32") for x in later} >= {"BOOL", "I64"}, (n, later)
    run_everywhere(muster_bin, tmp_path, stages, spec, model_dir, feeds, want)


def test_typed_weights_streamed(muster_bin, tmp_path, tracker, muster_server):
    """The main job on a converted model: the GPT-2-style decoder (its mask
    a BOOL weight, its ids I64) over two devices found through the
    tracker, each too small for the whole model, the weights streamed to
    them in WEIGHTS frames: bit-identical to the in-process run."""
    spec = tm.MODELS["gpt2"]
    model_dir, feeds, want = converted(spec, tmp_path)
    weights = mumodel.SafetensorsFile(model_dir / "model.safetensors")
    assert "BOOL" in {weights.dtype(n) for n in weights}
    total = sum(weights.nbytes(n) for n in weights)
    model = type("M", (), {})()
    model.path, model.input = model_dir, tmp_path / "in.safetensors"
    mumodel.write_safetensors(model.input, feeds, dtype="auto")
    whole = tmp_path / "whole.safetensors"
    proc = subprocess.run([str(muster_bin), "run", "--model", str(model_dir), "--input",
                           str(model.input), "--output", str(whole)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    cluster = Cluster(muster_bin, tmp_path, tracker, muster_server, "typed")
    for _ in range(2):
        cluster.server(str(int(total * 0.7)))
    rep = cluster.ok(model, 2, "--weights", "stream")
    assert len(rep["stages"]) == 2 and all(s["weights"] == "streamed" for s in rep["stages"])
    got, ref = mumodel.read_safetensors(cluster.out), mumodel.read_safetensors(whole)
    assert got[spec.output].tobytes() == ref[spec.output].tobytes()
    assert tm.rel_err(got[spec.output], want) <= TORCH_TOL


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "squeezenet1_1"])
def test_cnns(muster_bin, tmp_path, stages, name):
    spec = tm.MODELS[name]
    batch = 4 if FULL else 1
    model_dir, feeds, want = converted(spec, tmp_path, batch=batch)
    ops = {n["op"] for n in mumodel.load_graph(model_dir)["nodes"]}
    assert "conv" in ops and ops & {"maxpool", "clip"}
    got = run_everywhere(muster_bin, tmp_path, stages, spec, model_dir, feeds, want)
    assert got.shape == (batch, 1000) and np.isfinite(got).all()
