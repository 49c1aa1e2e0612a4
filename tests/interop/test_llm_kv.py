# SPDX-License-Identifier: MIT
"""KV cache types (`--kv-type f32|f16|q8_0`, include/muster/llm.h):

* stories260K's known greedy story with an f32 cache and with the default
  f16 one (llama.cpp makes it with an f16 cache), from the command and
  from muster.LLM(kv_type=...); the two caches' logits differ (the type
  is used);
* for each type, on a random model with heads of 32 (what q8_0 takes), a
  run over 2 `muster stage` servers dumps the same logits as one process,
  and a one-position prefill the same as a whole one;
* the coordinator's --kv-type rules: stages started with another type
  keep its sequences in the coordinator's;
* q8_0 on stories260K (heads of 8) is refused naming the head dim, by
  generate, stage, serve and plan; a wrong --kv-type is refused listing the
  choices, by every command that takes it;
* `muster plan`'s KV figure is the type's bytes;
* a stage of before kv types (INFO without "kv_types": f32 only) is
  refused by a coordinator of another type, and used by an f32 one.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import stagefix
from stagefix import ask_info
from test_llm import ENV, Peer, addrs, generate, llm_stages  # noqa: F401 - the fixture

REPO = Path(__file__).resolve().parents[2]
STORIES = REPO / "models" / "stories260K"
L2C = STORIES / "stories260K.bin"
EXPECTED = (STORIES / "expected_t0_200.txt").read_text(encoding="utf-8")
TYPES = ["f32", "f16", "q8_0"]
PROMPT = "1,17,200,3,45,99,12,5,8"

sys.path.insert(0, str(REPO / "python"))
import muster  # noqa: E402


@pytest.fixture(scope="module")
def model32(tmp_path_factory):
    """A random llama (dim 64, 2 heads of 32, 1 KV head, 3 layers)."""
    out = tmp_path_factory.mktemp("kv") / "m"
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "llm_convert.py"), "gen",
                           "--arch", "llama", "--dim", "64", "--layers", "3", "--heads", "2",
                           "--kv-heads", "1", "--hidden", "96", "--vocab", "400",
                           "--max-pos", "256", "--seed", "5", str(out)],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        pytest.fail(f"llm_convert.py gen: {proc.stderr}", pytrace=False)
    return out


def logits(muster_bin, model, out, *extra):
    generate(muster_bin, "--model", model, "--prompt-ids", PROMPT, "--temperature", 0,
             "--max-tokens", 12, "--ignore-eos", "--dump-logits", out, *extra)
    return out.read_bytes()


@pytest.mark.parametrize("kv", ["f32", "f16"])
def test_known_story(muster_bin, tmp_path, kv):
    dump = tmp_path / "l.f32"
    proc = generate(muster_bin, "--model", L2C, "--temperature", 0, "--max-tokens", 200,
                    "--threads", 1, "--kv-type", kv, "--dump-logits", dump)
    assert proc.stdout.decode("utf-8") == EXPECTED
    other = tmp_path / "o.f32"
    generate(muster_bin, "--model", L2C, "--temperature", 0, "--max-tokens", 200,
             "--threads", 1, "--kv-type", "f16" if kv == "f32" else "f32", "--dump-logits", other)
    assert dump.read_bytes() != other.read_bytes(), "the cache's type changed nothing"


def test_python_kv_type():
    with muster.LLM(str(L2C), threads=1, kv_type="f32") as llm:
        assert llm.generate('', max_tokens=200, temperature=0) == EXPECTED
    with pytest.raises(ValueError, match=r"f32, f16 or q8_0, not 'f64'"):
        muster.LLM(str(L2C), kv_type="f64")
    with pytest.raises(muster.MusterError, match="head dim 8 is not a multiple of 32"):
        muster.LLM(str(L2C), kv_type="q8_0")


@pytest.mark.parametrize("kv", TYPES)
def test_split_and_prefill_are_bit_identical(muster_bin, model32, llm_stages, tmp_path, kv):
    t = ("--kv-type", kv)
    one = logits(muster_bin, model32, tmp_path / "one", "--threads", 1, *t)
    assert len(one) == 12 * 400 * 4
    decode = logits(muster_bin, model32, tmp_path / "dec", "--chunk", 1, "--threads", 2, *t)
    group = llm_stages(model32, 2, "--threads", 1)
    split = logits(muster_bin, model32, tmp_path / "split", "--stages", addrs(group), *t)
    assert one == decode == split
    for s in group:
        p = Peer(s.address)
        assert kv in p.info()["kv_types"]
        p.close()


def test_coordinator_type_rules(muster_bin, model32, llm_stages, tmp_path):
    """Stages whose own --kv-type is f32 keep a q8_0 coordinator's
    sequences in q8_0: the same bits as q8_0 in one process."""
    group = llm_stages(model32, 2, "--threads", 1, "--kv-type", "f32")
    for s in group:
        p = Peer(s.address)
        assert p.info()["kv_type"] == "f32"
        p.close()
    here = logits(muster_bin, model32, tmp_path / "here", "--kv-type", "q8_0")
    f32 = logits(muster_bin, model32, tmp_path / "f32", "--kv-type", "f32")
    split = logits(muster_bin, model32, tmp_path / "split", "--stages", addrs(group),
                   "--kv-type", "q8_0")
    assert split == here != f32


def test_q8_0_needs_whole_blocks(muster_bin, tmp_path):
    proc = generate(muster_bin, "--model", L2C, "--max-tokens", 1, "--kv-type", "q8_0",
                    check=False)
    assert proc.returncode == 1
    assert b"head dim 8 is not a multiple of 32" in proc.stderr, proc.stderr
    for cmd in (["stage", "--stage", "0", "--of", "1", "--kv-type", "q8_0"],
                ["serve", "--listen", "127.0.0.1:0", "--kv-type", "q8_0"],
                ["plan", "--of", "1", "--kv-type", "q8_0"]):
        proc = subprocess.run([str(muster_bin), cmd[0], "--model", str(L2C), *cmd[1:]],
                              capture_output=True, timeout=60, env=ENV)
        assert proc.returncode != 0
        assert b"head dim 8 is not a multiple of 32" in proc.stderr, proc.stderr


@pytest.mark.parametrize("cmd", [["generate"], ["serve", "--listen", "127.0.0.1:0"],
                                 ["stage", "--stage", "0", "--of", "1"], ["plan", "--of", "1"]])
def test_bad_kv_type_lists_the_choices(muster_bin, cmd):
    proc = subprocess.run([str(muster_bin), cmd[0], "--model", str(L2C), *cmd[1:],
                           "--kv-type", "bf16"], capture_output=True, timeout=60, env=ENV)
    assert proc.returncode == 2
    assert b"--kv-type: a KV cache type is f32, f16 or q8_0, not 'bf16'" in proc.stderr, \
        proc.stderr
    # `muster stage` is an LLM's stage with an LLM's --model
    help_text = subprocess.run([str(muster_bin), cmd[0], "--model", str(L2C), "--help"],
                               capture_output=True, timeout=60, env=ENV).stdout
    assert b"--kv-type f32|f16|q8_0" in help_text


def test_plan_counts_the_type(muster_bin):
    """stories260K: 5 layers, 4 KV heads of 8 = 32 elements a position."""
    kv = {}
    for t in ("f32", "f16"):
        proc = subprocess.run([str(muster_bin), "plan", "--model", str(L2C), "--of", "2",
                               "--ctx", "256", "--max-sequences", "3", "--kv-type", t,
                               "--json"], capture_output=True, timeout=60, env=ENV)
        assert proc.returncode == 0, proc.stderr
        plan = json.loads(proc.stdout)
        assert plan["kv_type"] == t
        kv[t] = sum(s["kv_bytes"] for s in plan["stages"])
    assert kv["f32"] == 5 * 2 * 256 * 3 * 32 * 4
    assert kv["f16"] == kv["f32"] // 2
    default = subprocess.run([str(muster_bin), "plan", "--model", str(L2C), "--of", "1",
                              "--json"], capture_output=True, timeout=60, env=ENV)
    assert json.loads(default.stdout)["kv_type"] == "f16"


def test_stage_of_before_kv_types(muster_bin, llm_stages):
    """A stage whose INFO lists no "kv_types" (a muster of before them,
    which keeps f32) is refused by a coordinator of another type, before
    any sequence; one of --kv-type f32 opens its sequences there, with no
    "kv_type" in SEQ_OPEN."""
    (real,) = llm_stages(L2C, 1, "--threads", 1)
    desc = json.loads(ask_info(real.address))
    del desc["kv_types"], desc["kv_type"]
    fake = stagefix.FakeStage(json.dumps(desc).encode())
    addr = fake.address
    proc = generate(muster_bin, "--model", L2C, "--stages", addr, "--max-tokens", 2,
                    check=False)
    err = proc.stderr.decode()
    assert proc.returncode != 0 and "cannot keep a KV cache in f16" in err, err
    assert "keeps f32 only" in err and "--kv-type f32" in err, err
    assert fake.types() <= {stagefix.INFO, stagefix.CLOSE}, fake.seen
    fake.seen.clear()
    proc = generate(muster_bin, "--model", L2C, "--stages", addr, "--max-tokens", 2,
                    "--kv-type", "f32", "--io-timeout", "2", check=False)
    fake.close()
    opens = [b for m, b in fake.seen if m == 10]
    assert opens and all(json.loads(b) == {"ctx": json.loads(b)["ctx"]} for b in opens), fake.seen
