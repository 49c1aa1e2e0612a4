# SPDX-License-Identifier: MIT
"""muster's decoder against an independent reference (llmref.py: numpy,
float64, written from HF transformers' modeling semantics), on
random-weight checkpoints of several shapes written by
tools/llm_convert.py gen:

* MHA and GQA, tied and untied, a head_dim other than dim/heads;
* Qwen2's q/k/v biases, Mistral, llama3 and linear RoPE scaling;
* F32, F16 and BF16 weights, one file and sharded;
* the same weights as GGUF (F32 and F16; llama rows un-permuted, so a
  decoder rotating the wrong pairs fails) next to llmref.from_gguf.

muster generates greedily from a fixed prompt and dumps each step's
logits; the reference is run teacher-forced on the same tokens, and every
step's logits agree within 1e-4 of the step's largest logit. The
reference keeps K and V as computed, so muster runs with `--kv-type f32`
there; its default f16 cache (rounded to nearest even) stays within 5e-3.
A 3-stage split and a 1-position chunking dump the same bytes as one
process, for an f32 and an f16 cache.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import llmref
import stagefix
from test_llm import ENV, addrs, generate

REPO = Path(__file__).resolve().parents[2]
CONVERT = [sys.executable, str(REPO / "tools" / "llm_convert.py")]
PROMPT = [1, 17, 200, 3, 45, 99, 12]
STEPS = 6
TOL = 1e-4
TOL_F16 = 5e-3  # the default f16 KV cache against the float64 reference
F32_KV = ("--kv-type", "f32")  # the reference's K and V are not rounded

SHAPES = {
    "llama-mha-tied": ["--arch", "llama", "--dim", "64", "--layers", "3", "--heads", "4",
                       "--hidden", "96", "--tie"],
    "llama-gqa-bf16-sharded": ["--arch", "llama", "--dim", "96", "--layers", "4", "--heads",
                               "6", "--kv-heads", "2", "--hidden", "160", "--dtype", "BF16",
                               "--shards", "3"],
    "qwen2-bias-f16": ["--arch", "qwen2", "--dim", "64", "--layers", "3", "--heads", "4",
                       "--kv-heads", "2", "--hidden", "128", "--dtype", "F16",
                       "--rope-theta", "1000000"],
    "llama3-scaling": ["--arch", "llama", "--dim", "64", "--layers", "2", "--heads", "8",
                       "--kv-heads", "2", "--hidden", "96", "--rope-scaling", "llama3",
                       "--rope-factor", "8", "--low-freq-factor", "1", "--high-freq-factor",
                       "4", "--original-max-pos", "64", "--rope-theta", "500000"],
    "qwen3-qknorm-bf16": ["--arch", "qwen3", "--dim", "64", "--layers", "2", "--heads", "4",
                          "--kv-heads", "2", "--head-dim", "32", "--hidden", "96", "--dtype",
                          "BF16", "--rope-theta", "1000000"],
    "phi3-fused-f16": ["--arch", "phi3", "--dim", "64", "--layers", "2", "--heads", "4",
                       "--kv-heads", "2", "--hidden", "96", "--dtype", "F16", "--shards", "2"],
    "mistral-headdim-linear": ["--arch", "mistral", "--dim", "64", "--layers", "2", "--heads",
                               "4", "--kv-heads", "2", "--head-dim", "24", "--hidden", "96",
                               "--rope-scaling", "linear", "--rope-factor", "2"],
}


def convert(*args):
    proc = subprocess.run(CONVERT + [str(a) for a in args], capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0:
        pytest.fail(f"llm_convert.py {' '.join(map(str, args))}: {proc.stderr}", pytrace=False)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("llm")
    out = {}
    for seed, (name, args) in enumerate(sorted(SHAPES.items())):
        convert("gen", *args, "--vocab", 400, "--max-pos", 256, "--seed", seed + 3,
                root / name)
        out[name] = root / name
    return out


def muster_logits(muster_bin, model, tmp_path, *extra):
    dump = tmp_path / "logits.f32"
    proc = generate(muster_bin, "--model", model, "--prompt-ids", ",".join(map(str, PROMPT)),
                    "--temperature", 0, "--max-tokens", STEPS, "--ignore-eos", "--json",
                    "--dump-logits", dump, *extra)
    tokens = json.loads(proc.stdout)["tokens"]
    got = np.fromfile(dump, dtype="<f4").reshape(-1, 400)
    assert len(tokens) == STEPS and got.shape[0] == STEPS
    return tokens, got, dump.read_bytes()


def check(ref, tokens, got, tol=TOL):
    ids = PROMPT + tokens[:-1]
    want = ref.logits(ids)[len(PROMPT) - 1:]
    for step in range(STEPS):
        scale = np.abs(want[step]).max()
        err = np.abs(got[step] - want[step]).max()
        assert err <= tol * scale, f"step {step}: max error {err:.3g}, largest logit {scale:.3g}"
        assert tokens[step] == int(np.argmax(got[step]))


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_hf_matches_reference(muster_bin, models, tmp_path, name):
    tokens, got, _ = muster_logits(muster_bin, models[name], tmp_path, *F32_KV)
    check(llmref.Model(models[name]), tokens, got)


@pytest.mark.parametrize("name", ["llama-mha-tied", "qwen2-bias-f16"])
def test_f16_cache_near_reference(muster_bin, models, tmp_path, name):
    """The default cache rounds K and V to f16: close to the reference, and
    not the f32 cache's bytes (the type is used)."""
    tokens, got, dump = muster_logits(muster_bin, models[name], tmp_path)
    check(llmref.Model(models[name]), tokens, got, TOL_F16)
    assert dump != muster_logits(muster_bin, models[name], tmp_path, *F32_KV)[2]


@pytest.mark.parametrize("name,gtype", [("llama-gqa-bf16-sharded", "F32"),
                                        ("qwen2-bias-f16", "F16"),
                                        ("llama3-scaling", "F32"),
                                        ("qwen3-qknorm-bf16", "F32"),
                                        ("phi3-fused-f16", "F16")])
def test_gguf_matches_reference(muster_bin, models, tmp_path, name, gtype):
    gguf = tmp_path / "m.gguf"
    convert("hf-to-gguf", "--type", gtype, models[name], gguf)
    tokens, got, _ = muster_logits(muster_bin, gguf, tmp_path, *F32_KV)
    check(llmref.from_gguf(gguf), tokens, got)


@pytest.mark.parametrize("kv", ["f32", "f16"])
def test_split_and_chunks_are_bit_identical(muster_bin, models, tmp_path, kv):
    model = models["llama-gqa-bf16-sharded"]
    start = stagefix.stage_factory(muster_bin, tmp_path, ENV)
    t = ("--kv-type", kv)
    try:
        group = start(model, 3, "--threads", 1)
        _, _, one = muster_logits(muster_bin, model, tmp_path, *t)
        _, _, split = muster_logits(muster_bin, model, tmp_path, "--stages", addrs(group), *t)
        _, _, chunked = muster_logits(muster_bin, model, tmp_path, "--chunk", 1, "--threads", 3,
                                      *t)
    finally:
        start.teardown()
    assert one == split == chunked


def test_shapes_that_disagree_with_the_config(muster_bin, models, tmp_path):
    """A config.json that says one thing and tensors that hold another: the
    error names the tensor, its shape and what the configuration implies."""
    bad = tmp_path / "bad"
    shutil.copytree(models["llama-mha-tied"], bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["intermediate_size"] = 100
    (bad / "config.json").write_text(json.dumps(cfg))
    proc = generate(muster_bin, "--model", bad, "--max-tokens", 1, check=False)
    err = proc.stderr.decode()
    assert proc.returncode != 0
    assert "tensor blk.0.ffn_gate.weight is [96, 64]; the configuration implies [100, 64]" in err
