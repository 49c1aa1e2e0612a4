# SPDX-License-Identifier: MIT
"""Generation as the cluster's main job: `muster generate --tracker H:P
--key K --devices N --model CHECKPOINT` over `muster server` devices.

* the layers are cut to fit each device's --mem counting the KV cache
  (--ctx x --max-sequences), and a model that cannot fit is refused with
  the numbers;
* stories260K prints its known story with weights streamed (SHA-256 per
  tensor) and with each device's own copy;
* a second run streams 0 weight bytes (the devices' --cache-dir), and a
  cached tensor truncated or flipped on disk is detected and fetched again,
  the output still bit-identical;
* a device SIGKILLed or SIGSTOPped mid-generation is replaced by another
  from the tracker, only its stage's positions are replayed, and the text
  is identical to an uninterrupted run; with no device to replace it the
  run fails, naming the cause.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

import llmfix

REPO = Path(__file__).resolve().parents[2]
STORIES = REPO / "models" / "stories260K"
EXPECTED = (STORIES / "expected_t0_200.txt").read_text(encoding="utf-8")
KEY = "llm"


@pytest.fixture
def model(tmp_path):
    """A copy of the GGUF, so the hashes kept beside it stay in tmp."""
    path = tmp_path / "stories260K.gguf"
    shutil.copy(STORIES / "stories260K.gguf", path)
    return path


def start_devices(muster_server, tracker, n, *extra, mem="64M"):
    return [muster_server("--mem", mem, *extra, tracker=tracker, key=KEY) for _ in range(n)]


def generate(muster_bin, tracker, model, *args, timeout=120, check=True):
    proc = subprocess.run([str(muster_bin), "generate", "--model", str(model), "--tracker",
                           tracker.address, "--key", KEY, *map(str, args)],
                          capture_output=True, timeout=timeout)
    if check and proc.returncode != 0:
        pytest.fail(f"muster generate exited {proc.returncode}:\n"
                    f"{proc.stderr.decode(errors='replace')}", pytrace=False)
    return proc


def streamed(err):
    """Bytes streamed per stage, from the narration."""
    return [int(b) for b in re.findall(r"streamed (\d+) bytes", err)] + \
        [0] * err.count("(0 bytes streamed)")


def test_story_streamed_then_cached(muster_bin, muster_tracker, muster_server, model, tmp_path):
    tracker = muster_tracker()
    cache = tmp_path / "cache"
    start_devices(muster_server, tracker, 3, "--cache-dir", cache)
    cold = generate(muster_bin, tracker, model, "--devices", 3, "--temperature", 0,
                    "--max-tokens", 200)
    assert cold.stdout.decode() == EXPECTED
    err = cold.stderr.decode()
    assert "cut into 3 stages" in err and "hashed the checkpoint's 48 tensors" in err, err
    sent = streamed(err)
    assert len(sent) == 3 and sum(sent) > 900_000, err
    assert (model.parent / "stories260K.gguf.muster-sha256.json").is_file()
    warm = generate(muster_bin, tracker, model, "--devices", 3, "--temperature", 0,
                    "--max-tokens", 200)
    assert warm.stdout.decode() == EXPECTED
    err = warm.stderr.decode()
    assert err.count("(0 bytes streamed)") == 3, err
    assert "hashed the checkpoint" not in err, "the hashes were not kept beside the checkpoint"


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_cache_is_fetched_again(muster_bin, muster_tracker, muster_server, model,
                                        tmp_path, damage):
    tracker = muster_tracker()
    cache = tmp_path / "cache"
    (dev,) = start_devices(muster_server, tracker, 1, "--cache-dir", cache)
    generate(muster_bin, tracker, model, "--temperature", 0, "--max-tokens", 200)
    files = sorted(cache.glob("*.tensor"), key=lambda p: p.stat().st_size)
    hashes = json.loads((model.parent / "stories260K.gguf.muster-sha256.json").read_text())
    # content-addressed: the GGUF's output.weight repeats token_embd.weight
    assert len(files) == len(set(hashes["tensors"].values())) == 47
    victim = files[-1]
    data = bytearray(victim.read_bytes())
    if damage == "truncate":
        victim.write_bytes(data[:len(data) // 2])
    else:
        data[len(data) // 3] ^= 0x20
        victim.write_bytes(bytes(data))
    again = generate(muster_bin, tracker, model, "--temperature", 0, "--max-tokens", 200)
    assert again.stdout.decode() == EXPECTED
    uses = list(hashes["tensors"].values()).count(victim.name.split(".")[0])
    assert streamed(again.stderr.decode()) == [len(data) * uses], again.stderr.decode()
    assert "is damaged" in dev.log_text()


def test_own_copies(muster_bin, muster_tracker, muster_server, model):
    tracker = muster_tracker()
    start_devices(muster_server, tracker, 2, "--model", model)
    proc = generate(muster_bin, tracker, model, "--devices", 2, "--weights", "local",
                    "--temperature", 0, "--max-tokens", 200)
    assert proc.stdout.decode() == EXPECTED
    assert proc.stderr.decode().count("weights from its own copy") == 2


F32_KV = ("--kv-type", "f32")  # 4 bytes an element: the sizes below


def test_placement_counts_the_kv_cache(muster_bin, muster_tracker, muster_server, model):
    """The weights (1.1 MiB) fit one 3 MiB device, but not with the f32 KV
    cache of 4 sequences of 512 positions (2.5 MiB): that needs two, and
    16 sequences fit no two. The default f16 cache (1.25 MiB) fits one."""
    tracker = muster_tracker()
    start_devices(muster_server, tracker, 2, mem="3M")
    proc = generate(muster_bin, tracker, model, "--devices", 1, "--ctx", 128, "--temperature", 0,
                    "--max-tokens", 20, *F32_KV)
    assert "cut into 1 stage" in proc.stderr.decode()
    proc = generate(muster_bin, tracker, model, "--devices", 1, "--ctx", 512,
                    "--max-sequences", 4, "--max-tokens", 5, *F32_KV, check=False)
    err = proc.stderr.decode()
    assert proc.returncode != 0 and "does not fit the 1 device granted" in err, err
    assert "with an f32 KV cache" in err, err
    proc = generate(muster_bin, tracker, model, "--devices", 1, "--ctx", 512,
                    "--max-sequences", 4, "--temperature", 0, "--max-tokens", 200)
    assert "cut into 1 stage" in proc.stderr.decode(), proc.stderr.decode()
    assert proc.stdout.decode() == EXPECTED
    proc = generate(muster_bin, tracker, model, "--devices", 2, "--ctx", 512,
                    "--max-sequences", 4, "--temperature", 0, "--max-tokens", 200, *F32_KV)
    assert "cut into 2 stages" in proc.stderr.decode(), proc.stderr.decode()
    assert proc.stdout.decode() == EXPECTED
    for kv in re.findall(r"\+ ([\d.]+) MiB KV\)", proc.stderr.decode()):
        assert float(kv) > 0.5
    proc = generate(muster_bin, tracker, model, "--devices", 2, "--ctx", 512,
                    "--max-sequences", 16, "--max-tokens", 5, *F32_KV, check=False)
    err = proc.stderr.decode()
    assert proc.returncode != 0 and "does not fit the 2 devices granted" in err, err
    assert "KV cache for 16 sequences of 512 positions" in err


@pytest.fixture
def slow_model(tmp_path):
    """A random llama2.c checkpoint big enough (100 MB) that 480 tokens
    take seconds, so a device can be lost mid-way on any machine."""
    path = tmp_path / "big.bin"
    llmfix.write_llama2c(path, dim=512, hidden=1408, layers=9, heads=8, kv_heads=4, vocab=512,
                         seq_len=512)
    shutil.copy(STORIES / "tok512.bin", tmp_path / "tok512.bin")
    return path


@pytest.mark.parametrize("how", ["SIGKILL", "SIGSTOP"])
def test_device_lost_mid_generation(muster_bin, muster_tracker, muster_server, slow_model, how):
    tracker = muster_tracker()
    devs = start_devices(muster_server, tracker, 4, mem="128M")
    want = subprocess.run([str(muster_bin), "generate", "--model", str(slow_model),
                           "--temperature", "0", "--max-tokens", "480", "--ignore-eos",
                           "--threads", "1"], capture_output=True, timeout=120).stdout
    proc = subprocess.Popen([str(muster_bin), "generate", "--model", str(slow_model),
                             "--tracker", tracker.address, "--key", KEY, "--devices", "3",
                             "--temperature", "0", "--max-tokens", "480", "--ignore-eos",
                             "--io-timeout", "2", "--ctx", "512"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.read(40)
    busy = [d for d in devs if "LLM stage" in d.log_text()]
    assert len(busy) == 3, "three devices should hold a stage by now"
    victim = busy[1]
    if how == "SIGKILL":
        victim.kill()
    else:
        os.kill(victim.proc.pid, signal.SIGSTOP)
    try:
        rest, err = proc.communicate(timeout=120)
    finally:
        if how == "SIGSTOP":
            os.kill(victim.proc.pid, signal.SIGCONT)
            victim.allow_exit = True
    err = err.decode()
    assert proc.returncode == 0, err
    assert first + rest == want
    m = re.search(r"recovered 1 lost device in (\d+) ms, replaying (\d+) positions", err)
    assert m, err
    assert 0 < int(m.group(2)) <= 480


def test_no_replacement_fails_clearly(muster_bin, muster_tracker, muster_server, model):
    tracker = muster_tracker()
    devs = start_devices(muster_server, tracker, 2)
    proc = subprocess.Popen([str(muster_bin), "generate", "--model", str(model), "--tracker",
                             tracker.address, "--key", KEY, "--devices", "2", "--temperature",
                             "0", "--max-tokens", "480", "--ignore-eos", "--device-timeout", "5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.read(20)
    devs[0].kill()
    t0 = time.monotonic()
    _, err = proc.communicate(timeout=90)
    err = err.decode()
    assert proc.returncode != 0
    assert "no replacement" in err and 'no device of key "llm"' in err, err
    assert "within 5 s (the wait is --device-timeout)" in err, err
    assert time.monotonic() - t0 < 30
    # the healthy device is free again: its session ended, it offers anew
    devs[1].wait_offers(2, timeout=20)


def test_plan_shows_the_placement(muster_bin, muster_tracker, muster_server, model):
    """`muster plan --budgets` shows the layers, weights and KV of each
    device as `muster generate --tracker` then places them."""
    proc = subprocess.run([str(muster_bin), "plan", "--model", str(model), "--budgets",
                           "3M,2M,3M", "--ctx", "512", "--max-sequences", "4", "--json",
                           *F32_KV], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    rows = plan["stages"]
    assert [r["first"] for r in rows][0] == 0 and rows[-1]["last"] == 5 and rows[-1]["head"]
    for r in rows:
        assert r["kv_bytes"] == (r["last"] - r["first"]) * 2 * 4 * 8 * 4 * 512 * 4
        assert r["weight_bytes"] + r["kv_bytes"] <= [3, 2, 3][r["device"]] << 20
    tracker = muster_tracker()
    start_devices(muster_server, tracker, 3, mem="3M")
    out = generate(muster_bin, tracker, model, "--devices", 3, "--ctx", 512, "--max-sequences",
                   4, "--temperature", 0, "--max-tokens", 10, *F32_KV).stderr.decode()
    placed = [(int(a), int(b) + 1) for a, b in re.findall(r"layers (\d+)\.\.(\d+)", out)]
    plan3 = json.loads(subprocess.run([str(muster_bin), "plan", "--model", str(model),
                                       "--budgets", "3M,3M,3M", "--ctx", "512",
                                       "--max-sequences", "4", "--json", *F32_KV],
                                      capture_output=True,
                                      text=True, timeout=30).stdout)
    assert placed == [(r["first"], r["last"]) for r in plan3["stages"]]
    bad = subprocess.run([str(muster_bin), "plan", "--model", str(model), "--budgets", "1M",
                          "--ctx", "512", "--max-sequences", "4", *F32_KV], capture_output=True,
                         text=True,
                         timeout=30)
    assert bad.returncode == 1 and "does not fit" in bad.stderr
