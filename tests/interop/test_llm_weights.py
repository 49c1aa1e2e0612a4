# SPDX-License-Identifier: MIT
"""A stage serves only the weights the coordinator was given.

Two checkpoints of the same shape (same configuration, tensor names,
types and shapes; other random weights) agree on the stage digest, which
covers shapes only. The coordinator and each stage must also agree on the
weights digest (SHA-256 over the stage's tensors' SHA-256s,
docs/protocols/pipeline.md "weights_sha256") before the first forward:

* `generate --model B --stages S` where S serves A fails, naming the
  stage, its digest and model and ours, and exits non-zero (it printed
  A's text and exited 0 before);
* so does a tracker device using its own copy of A for `--model B`;
* and a replacement device with its own copy of A, after a device of B
  is lost mid-generation;
* a stage that does not say which weights it holds (a muster of before
  weights digests) is refused, not trusted.
"""

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import llmfix
import stagefix
from stagefix import ask_info

REPO = Path(__file__).resolve().parents[2]
STORIES = REPO / "models" / "stories260K"
KEY = "llmw"
ENV = dict(os.environ)
SMALL = dict(dim=64, hidden=172, layers=4, heads=4, kv_heads=4, vocab=512, seq_len=512)
# big enough (100 MB) that 480 tokens take seconds, so a device is lost mid-way
BIG = dict(dim=512, hidden=1408, layers=9, heads=8, kv_heads=4, vocab=512, seq_len=512)


def twins(tmp_path, shape, name="m"):
    """Checkpoints a.bin and b.bin of one shape, other weights."""
    d = tmp_path / name
    d.mkdir()
    shutil.copy(STORIES / "tok512.bin", d / "tok512.bin")
    llmfix.write_llama2c(d / "a.bin", seed=1, **shape)
    llmfix.write_llama2c(d / "b.bin", seed=2, **shape)
    return d / "a.bin", d / "b.bin"


@pytest.fixture
def llm_stages(muster_bin, tmp_path):
    start = stagefix.stage_factory(muster_bin, tmp_path, ENV)
    yield start
    start.teardown()


def generate(muster_bin, model, *args, timeout=120):
    return subprocess.run([str(muster_bin), "generate", "--model", str(model),
                           "--temperature", "0", *map(str, args)],
                          capture_output=True, timeout=timeout, env=ENV)


def refused(proc, *words):
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode != 0, f"exited 0 with other weights:\n{err}"
    for w in words:
        assert w in err, err
    return err


def test_stages_with_other_weights(muster_bin, llm_stages, tmp_path):
    a, b = twins(tmp_path, SMALL)
    group = llm_stages(a, 2, "--threads", 1)
    addrs = ",".join(s.address for s in group)
    right = generate(muster_bin, a, "--stages", addrs, "--max-tokens", 20)
    assert right.returncode == 0, right.stderr.decode()
    wrong = generate(muster_bin, b, "--stages", addrs, "--max-tokens", 20)
    err = refused(wrong, "stage 0/2", group[0].address, "serves other weights than b.bin",
                  "(of a.bin)", "weights digest")
    assert wrong.stdout == b"", "no text may come from other weights"
    info = json.loads(ask_info(group[0].address))
    assert info["weights_sha256"][:16] in err
    # the stage's log says it too, for the operator comparing the two
    assert f"weights digest {info['weights_sha256'][:16]}" in group[0].log()


def test_one_stage_of_other_weights(muster_bin, llm_stages, tmp_path):
    """Stage 0 serves our weights, stage 1 another checkpoint's: the error
    names stage 1."""
    a, b = twins(tmp_path, SMALL)
    s0 = llm_stages.one(b, 0, 2, "--threads", 1)
    s1 = llm_stages.one(a, 1, 2, "--threads", 1)
    proc = generate(muster_bin, b, "--stages", f"{s0.address},{s1.address}", "--max-tokens", 5)
    err = refused(proc, f"stage 1/2 ({s1.address}) serves other weights than b.bin")
    assert "stage 0/2" not in err


def test_device_own_copy_of_other_weights(muster_bin, muster_tracker, muster_server, tmp_path):
    a, b = twins(tmp_path, SMALL)
    tracker = muster_tracker()
    for _ in range(2):
        muster_server("--mem", "64M", "--model", a, tracker=tracker, key=KEY)
    args = ["--tracker", tracker.address, "--key", KEY, "--devices", 2, "--max-tokens", 20]
    proc = generate(muster_bin, b, *args)
    refused(proc, "serves other weights than b.bin", "(of a.bin)")
    # the same devices serve the checkpoint they hold
    proc = generate(muster_bin, a, *args)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stderr.decode().count("weights from its own copy") == 2


def test_replacement_with_other_weights(muster_bin, muster_tracker, muster_server, tmp_path):
    a, b = twins(tmp_path, BIG)
    tracker = muster_tracker()
    devs = [muster_server("--mem", "128M", "--model", b, tracker=tracker, key=KEY)
            for _ in range(2)]
    proc = subprocess.Popen([str(muster_bin), "generate", "--model", str(b), "--tracker",
                             tracker.address, "--key", KEY, "--devices", "2", "--temperature",
                             "0", "--max-tokens", "480", "--ignore-eos", "--io-timeout", "2",
                             "--ctx", "512", "--device-timeout", "10"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    assert proc.stdout.read(20)
    # placed on the two devices of b: the only one left holds a
    other = muster_server("--mem", "128M", "--model", a, tracker=tracker, key=KEY)
    busy = [d for d in devs if "LLM stage" in d.log_text()]
    assert len(busy) == 2
    busy[1].kill()
    _, err = proc.communicate(timeout=120)
    err = err.decode(errors="replace")
    assert proc.returncode != 0, f"a replacement with other weights was used:\n{err}"
    assert "is lost" in err and "serves other weights than b.bin" in err, err
    assert "(of a.bin)" in err
    assert other.log_count("LLM stage") >= 1


def test_stage_without_weights_digest(muster_bin, llm_stages, tmp_path):
    """A stage that says nothing of its weights (INFO without
    "weights_sha256", as muster before weights digests) is refused with
    the reason, before any sequence is opened on it."""
    a, _ = twins(tmp_path, SMALL)
    (real,) = llm_stages(a, 1, "--threads", 1)
    desc = json.loads(ask_info(real.address))
    # the digest as docs/protocols/pipeline.md defines it, from the
    # per-tensor hashes the stage kept beside its checkpoint
    kept = json.loads(Path(f"{a}.muster-sha256.json").read_text())["tensors"]
    want = hashlib.sha256(b"".join(name.encode() + b"\0" + kept[name].encode() + b"\n"
                                   for name in sorted(kept, key=str.encode))).hexdigest()
    assert desc["weights_sha256"] == want and desc["model"] == "a.bin"
    del desc["weights_sha256"], desc["model"]
    fake = stagefix.FakeStage(json.dumps(desc).encode())
    proc = generate(muster_bin, a, "--stages", fake.address, "--max-tokens", 5)
    fake.close()
    refused(proc, "does not say which weights it holds", "weights_sha256")
    assert fake.seen and fake.types() <= {stagefix.INFO, stagefix.CLOSE}, fake.seen
