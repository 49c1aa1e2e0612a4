# SPDX-License-Identifier: MIT
"""`muster generate` and LLM stages, against the command contract:

  muster generate --model CHECKPOINT [--stages H:P,...] [--prompt TEXT]
                  [--temperature T --top-k K --top-p P --seed S]
                  [--max-tokens N --ctx N --chunk N --json --dump-logits F]
      streams the new text to stdout, byte for byte what the model made,
      and one line of figures to stderr (prefill and decode tok/s, time to
      the first token); --json prints one object instead.
  muster stage --model CHECKPOINT --stage I --of N [--max-sequences N
               --kv-mem SIZE]
      serves layers of the checkpoint to generate --stages.

What is checked:
* stories260K (a really trained model: models/stories260K) prints its
  known 200-token greedy story exactly, from the llama2.c checkpoint and
  from the GGUF, in one process and over 2 and 3 stages;
* a split run's logits equal the single-process run's bit for bit, and so
  do a prompt prefilled in one chunk and one position at a time (the
  kernels are batch-invariant);
* sampling is reproducible from its seed;
* bad input gets a clear error naming the cause: a prompt past --ctx,
  truncated or foreign model files, unsupported configurations;
* a stage keeps its limits (--max-sequences, --kv-mem) with an ERROR, a
  coordinator that goes away frees its sequences, and malformed SEQ
  messages are answered without taking the stage down;
* a stage killed mid-generation makes generate fail promptly, naming it.
"""

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

import llmfix
import stagefix
from conftest import HOST, wait_for

REPO = Path(__file__).resolve().parents[2]
STORIES = REPO / "models" / "stories260K"
EXPECTED = (STORIES / "expected_t0_200.txt").read_text(encoding="utf-8")
RUN_TIMEOUT = 120.0
ENV = dict(os.environ)

FORMATS = {"bin": STORIES / "stories260K.bin", "gguf": STORIES / "stories260K.gguf"}
KINDS = ["bin", "gguf", "hf"]


@pytest.fixture(scope="module")
def stories_hf(tmp_path_factory):
    """stories260K as an HF checkpoint, exported by our own converter (Q/K
    rows permuted for rotate-half RoPE, K with the KV head count)."""
    out = tmp_path_factory.mktemp("hf") / "stories260K-hf"
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "llm_convert.py"),
                           "llama2c-to-hf", str(FORMATS["bin"]), str(STORIES / "tok512.bin"),
                           str(out)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        pytest.fail(f"llm_convert.py llama2c-to-hf failed: {proc.stderr}", pytrace=False)
    return out


def stories(kind, stories_hf):
    return stories_hf if kind == "hf" else FORMATS[kind]


def generate(muster_bin, *args, timeout=RUN_TIMEOUT, check=True):
    """`muster generate ARGS` to completion; the CompletedProcess (text)."""
    proc = subprocess.run([str(muster_bin), "generate", *map(str, args)], capture_output=True,
                          timeout=timeout, env=ENV)
    if check and proc.returncode != 0:
        pytest.fail(f"muster generate {' '.join(map(str, args))} exited {proc.returncode}:\n"
                    f"{proc.stderr.decode(errors='replace')}", pytrace=False)
    return proc


@pytest.fixture
def llm_stages(muster_bin, tmp_path):
    start = stagefix.stage_factory(muster_bin, tmp_path, ENV)
    yield start
    start.teardown()


def addrs(group):
    return ",".join(s.address for s in group)


# --------------------------------------------------------------------------
# the known story
# --------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", KINDS)
def test_stories_one_process(muster_bin, stories_hf, fmt):
    proc = generate(muster_bin, "--model", stories(fmt, stories_hf), "--temperature", 0,
                    "--max-tokens", 200, "--threads", 1)
    assert proc.stdout.decode("utf-8") == EXPECTED
    err = proc.stderr.decode()
    assert "prefill 1 tokens" in err and "decode 199 tokens" in err, err
    assert "first token after" in err and "stop: length" in err, err


@pytest.mark.parametrize("fmt", KINDS)
@pytest.mark.parametrize("n", [2, 3])
def test_stories_split(muster_bin, llm_stages, stories_hf, tmp_path, fmt, n):
    model = stories(fmt, stories_hf)
    group = llm_stages(model, n, "--threads", 1)
    one, split = tmp_path / "one.f32", tmp_path / "split.f32"
    generate(muster_bin, "--model", model, "--temperature", 0, "--max-tokens", 200,
             "--dump-logits", one)
    proc = generate(muster_bin, "--model", model, "--stages", addrs(group), "--temperature", 0,
                    "--max-tokens", 200, "--dump-logits", split)
    assert proc.stdout.decode("utf-8") == EXPECTED
    assert f"{n} stages" in proc.stderr.decode()
    a, b = one.read_bytes(), split.read_bytes()
    assert len(a) == 200 * 512 * 4
    assert a == b, "the split run's logits differ from the single-process run's"


def test_json_report(muster_bin):
    proc = generate(muster_bin, "--model", FORMATS["bin"], "--temperature", 0,
                    "--max-tokens", 200, "--json")
    r = json.loads(proc.stdout)
    assert r["text"] == EXPECTED
    assert len(r["tokens"]) == 200 and all(isinstance(t, int) for t in r["tokens"])
    assert r["prompt_tokens"] == 1 and r["new_tokens"] == 200 and r["stop"] == "length"
    assert r["decode_steps"] == 199 and r["decode_tok_s"] > 0 and r["ttft_ms"] > 0
    assert r["model"] == {"arch": "llama", "format": "llama2.c", "layers": 5, "dim": 64,
                          "vocab": 512, "weight_bytes": r["model"]["weight_bytes"]}
    assert 900_000 < r["model"]["weight_bytes"] < 1_100_000
    assert r["peak_rss_kib"] > 0


def test_formats_agree_on_tokens(muster_bin, stories_hf):
    """The GGUF and the HF export hold the same weights as the llama2.c
    checkpoint: the same greedy token ids from a prompt, encoded by each
    format's own tokenizer."""
    ids = []
    for fmt in KINDS:
        proc = generate(muster_bin, "--model", stories(fmt, stories_hf), "--prompt",
                        "Lily and her mom went to the park. They saw", "--temperature", 0,
                        "--max-tokens", 64, "--json")
        ids.append(json.loads(proc.stdout)["tokens"])
    assert ids[0] == ids[1] == ids[2]


# --------------------------------------------------------------------------
# determinism
# --------------------------------------------------------------------------

def test_chunked_prefill_is_bit_identical(muster_bin, tmp_path):
    prompt = "Once upon a time, there was a little dog named Max. He liked to"
    logits = []
    for chunk in (256, 7, 1):
        out = tmp_path / f"chunk{chunk}.f32"
        generate(muster_bin, "--model", FORMATS["gguf"], "--prompt", prompt, "--temperature", 0,
                 "--max-tokens", 8, "--chunk", chunk, "--dump-logits", out)
        logits.append(out.read_bytes())
    assert len(logits[0]) == 8 * 512 * 4  # the prompt's last position, then 7 fed back
    assert logits[0] == logits[1] == logits[2]


def test_threads_do_not_change_bits(muster_bin, tmp_path):
    outs = []
    for threads in (1, 2, 3):
        out = tmp_path / f"t{threads}.f32"
        generate(muster_bin, "--model", FORMATS["bin"], "--temperature", 0, "--max-tokens", 20,
                 "--threads", threads, "--dump-logits", out)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2]


def test_sampling_follows_the_seed(muster_bin):
    def run(seed):
        return generate(muster_bin, "--model", FORMATS["bin"], "--temperature", 1.0,
                        "--top-p", 0.9, "--seed", seed, "--max-tokens", 60, "--json").stdout

    a, b, c = json.loads(run(7)), json.loads(run(7)), json.loads(run(8))
    assert a["tokens"] == b["tokens"] and a["seed"] == 7
    assert a["tokens"] != c["tokens"]
    greedy = json.loads(generate(muster_bin, "--model", FORMATS["bin"], "--temperature", 0,
                                 "--max-tokens", 60, "--json").stdout)
    assert a["tokens"] != greedy["tokens"], "temperature 1 sampled exactly the greedy text"


# --------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------

def fails(proc, *words):
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode != 0, f"exit 0; stderr: {err}"
    for w in words:
        assert w in err, f"{w!r} not in stderr: {err}"
    return err


def test_prompt_longer_than_ctx(muster_bin):
    proc = generate(muster_bin, "--model", FORMATS["bin"], "--ctx", 4, "--prompt",
                    "Once upon a time there was a girl", check=False)
    fails(proc, "the prompt is", "the context is 4")


def test_truncated_and_foreign_files(muster_bin, tmp_path):
    gguf = FORMATS["gguf"].read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(gguf[:len(gguf) // 2])
    fails(generate(muster_bin, "--model", cut, check=False), "past the end")
    head = tmp_path / "head.gguf"
    head.write_bytes(gguf[:100])
    fails(generate(muster_bin, "--model", head, check=False), "cannot open the model")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(os.urandom(5000))
    fails(generate(muster_bin, "--model", junk, check=False), "neither GGUF nor a llama2.c")
    short = tmp_path / "short.bin"
    short.write_bytes(FORMATS["bin"].read_bytes()[:-4])
    fails(generate(muster_bin, "--model", short, check=False), "bytes of weights")
    fails(generate(muster_bin, "--model", tmp_path / "nothing", check=False), "No such file")


HF_CONFIG = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 172,
             "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4,
             "vocab_size": 512, "rms_norm_eps": 1e-5, "hidden_act": "silu"}


@pytest.mark.parametrize("change,words", [
    ({"architectures": ["GPTNeoXForCausalLM"]}, ["architectures", "GPTNeoXForCausalLM"]),
    ({"hidden_size": None}, ["hidden_size is missing"]),
    ({"hidden_act": "gelu"}, ["hidden_act", "gelu"]),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, ["rope_type", "yarn"]),
    ({"num_key_value_heads": 3}, ["not a multiple"]),
    ({"vocab_size": -5}, ["vocab_size"]),
    # Phi-4-mini rotates 3/4 of each head; Phi-3.5's LongRoPE
    ({"partial_rotary_factor": 0.75}, ["partial_rotary_factor 0.75", "part of each head"]),
    ({"architectures": ["Phi3ForCausalLM"],
      "rope_scaling": {"rope_type": "longrope", "long_factor": [1.0] * 4,
                       "short_factor": [1.0] * 4}}, ["rope_type", "longrope"]),
])
def test_bad_hf_config(muster_bin, tmp_path, change, words):
    cfg = dict(HF_CONFIG)
    for k, v in change.items():
        if v is None:
            cfg.pop(k)
        else:
            cfg[k] = v
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    fails(generate(muster_bin, "--model", tmp_path, check=False), *words)


def test_hf_config_not_json(muster_bin, tmp_path):
    (tmp_path / "config.json").write_text("{\"architectures\": [")
    fails(generate(muster_bin, "--model", tmp_path, check=False), "config.json is not valid JSON")


def test_bad_options(muster_bin):
    for args, word in ((["--model", FORMATS["bin"], "--top-p", "0"], "--top-p"),
                       (["--model", FORMATS["bin"], "--threads", "0"], "--threads"),
                       ([], "--model")):
        fails(generate(muster_bin, *args, check=False), word)


# --------------------------------------------------------------------------
# the stage protocol, spoken directly
# --------------------------------------------------------------------------

HDR = struct.Struct("<4sHHiIQQQ")
INFO, FORWARD, RESULT, ERROR, CLOSE, READY = 1, 2, 3, 4, 5, 9
SEQ_OPEN, SEQ_FORWARD, SEQ_CLOSE, SEQ_BATCH = 10, 11, 12, 13


class Peer:
    """A raw pipeline-protocol client (docs/protocols/pipeline.md)."""

    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.next_id = 0

    def send(self, mtype, body=b"", aux=0, arg=0):
        self.next_id += 1
        self.sock.sendall(HDR.pack(b"MUPL", 1, mtype, 0, arg, self.next_id, aux, len(body)) + body)
        return self.next_id

    def recv_exact(self, n):
        buf = b""
        while len(buf) < n:
            part = self.sock.recv(n - len(buf))
            if not part:
                raise EOFError(f"closed after {len(buf)} of {n} bytes")
            buf += part
        return buf

    def recv(self):
        magic, _ver, mtype, status, arg, mid, aux, length = HDR.unpack(self.recv_exact(HDR.size))
        assert magic == b"MUPL"
        return mtype, status, mid, aux, self.recv_exact(length)

    def ask(self, mtype, body=b"", aux=0, arg=0):
        mid = self.send(mtype, body, aux, arg)
        rtype, status, rid, raux, rbody = self.recv()
        assert rid == mid
        return rtype, status, raux, rbody

    def info(self):
        rtype, _, _, body = self.ask(INFO)
        assert rtype == INFO
        return json.loads(body)

    def close(self):
        self.sock.close()


def frame(name, dims, values):
    out = struct.pack("<I", 1) + struct.pack("<I", len(name)) + name.encode()
    out += struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
    out += struct.pack("<Q", len(values)) + struct.pack(f"<{len(values)}f", *values)
    return out


def test_stage_protocol(muster_bin, llm_stages):
    (stage,) = llm_stages(FORMATS["bin"], 1, "--max-sequences", 2, "--max-sequences-per-connection", 2,
                          "--threads", 1)
    p = Peer(stage.address)
    d = p.info()
    assert d["kind"] == "llm" and d["first"] == 0 and d["last"] == 5 and d["layers"] == 5
    assert d["embeds"] and d["head"] and d["vocab"] == 512 and d["sequences_open"] == 0
    assert p.ask(SEQ_OPEN, b'{"ctx": 64}', aux=1)[0] == READY
    assert p.ask(SEQ_OPEN, b'{"ctx": 64}', aux=2)[0] == READY
    rtype, status, _, text = p.ask(SEQ_OPEN, b'{"ctx": 64}', aux=3)
    assert rtype == ERROR and b"--max-sequences" in text and status == -1002
    rtype, _, _, text = p.ask(SEQ_OPEN, b'{"ctx": 64}', aux=1)
    assert rtype == ERROR and b"already open" in text
    rtype, _, _, text = p.ask(SEQ_OPEN, b'{"ctx": 100000}', aux=9)
    assert rtype == ERROR and b"the model takes 1 to 512" in text
    rtype, _, _, text = p.ask(SEQ_OPEN, b'[1, 2', aux=9)
    assert rtype == ERROR and b"not a JSON object" in text
    # a forward: BOS at position 0 gives the logits of the vocabulary
    rtype, _, aux, body = p.ask(SEQ_FORWARD, frame("tokens", [1], [1.0]), aux=1, arg=0)
    assert rtype == RESULT and aux > 0
    count, nlen = struct.unpack_from("<II", body)
    assert count == 1 and body[8:8 + nlen] == b"logits"
    # wrong inputs are answered and the connection stays
    for body, aux, arg, word in ((frame("tokens", [1], [512.0]), 1, 1, b"not an id"),
                                 (frame("tokens", [1], [3.5]), 1, 1, b"not an id"),
                                 (frame("x", [1, 64], [0.0] * 64), 1, 1, b"\"tokens\" [n]"),
                                 (frame("tokens", [1], [5.0]), 7, 0, b"not open"),
                                 (frame("tokens", [1], [5.0]), 1, 9, b"holds 1 so far")):
        rtype, _, _, text = p.ask(SEQ_FORWARD, body, aux=aux, arg=arg)
        assert rtype == ERROR and word in text, text
    rtype, _, _, text = p.ask(FORWARD, frame("x", [1], [0.0]))
    assert rtype == ERROR and b"SEQ_FORWARD" in text
    assert p.ask(SEQ_CLOSE, aux=2)[0] == READY
    rtype, _, _, text = p.ask(SEQ_CLOSE, aux=2)
    assert rtype == ERROR and b"not open" in text
    assert p.info()["sequences_open"] == 1
    # the connection goes: its sequences go with it
    p.close()
    q = Peer(stage.address)
    wait_for(lambda: q.info()["sequences_open"] == 0, timeout=5, what="the sequences freed")
    assert q.info()["kv_reserved"] == 0
    q.close()


def test_stage_kv_budget(muster_bin, llm_stages):
    (stage,) = llm_stages(FORMATS["bin"], 1, "--kv-mem", "300K", "--threads", 1)
    p = Peer(stage.address)
    info = p.info()
    assert info["kv_type"] == "f16" and info["kv_types"] == ["f32", "f16"]  # head dim 8: no q8_0
    # f32: 5 layers x 2 x 256 positions x 32 floats x 4 bytes = 320 KiB > 300K
    rtype, status, _, text = p.ask(SEQ_OPEN, b'{"ctx": 256, "kv_type": "f32"}', aux=1)
    assert rtype == ERROR and b"--kv-mem" in text and status == -1002
    assert p.ask(SEQ_OPEN, b'{"ctx": 128, "kv_type": "f32"}', aux=1)[0] == READY
    assert p.info()["kv_reserved"] == 5 * 2 * 128 * 32 * 4
    # a SEQ_OPEN naming no type gets the stage's --kv-type, f16: 2 bytes an element
    rtype, _, _, text = p.ask(SEQ_OPEN, b'{"ctx": 64}', aux=2)
    assert rtype == READY and json.loads(text)["kv_type"] == "f16"
    assert p.info()["kv_reserved"] == 5 * 2 * 128 * 32 * 4 + 5 * 2 * 64 * 32 * 2
    rtype, _, _, text = p.ask(SEQ_OPEN, b'{"ctx": 8, "kv_type": "f8"}', aux=3)
    assert rtype == ERROR and b"f32, f16 or q8_0, not 'f8'" in text
    rtype, _, _, text = p.ask(SEQ_OPEN, b'{"ctx": 8, "kv_type": "q8_0"}', aux=3)
    assert rtype == ERROR and b"head dim 8 is not a multiple of 32" in text
    p.close()


def test_stage_killed_mid_generation(muster_bin, llm_stages):
    """A stage that does not come back: generate waits --io-timeout for it,
    then fails saying which stage is down."""
    group = llm_stages(FORMATS["bin"], 3, "--threads", 1)
    proc = subprocess.Popen([str(muster_bin), "generate", "--model", str(FORMATS["bin"]),
                             "--stages", addrs(group), "--temperature", "0", "--max-tokens",
                             "500", "--ignore-eos", "--io-timeout", "2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=ENV)
    first = proc.stdout.read(20)  # tokens are coming
    assert first
    group[1].kill()
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("generate did not end within 30 s of a stage's death")
    assert proc.returncode != 0
    assert f"stage 1/3 ({group[1].address}) is down since" in err.decode(), err.decode()


@pytest.mark.parametrize("k", [0, 2])
def test_stage_restarted_mid_generation(muster_bin, llm_stages, tmp_path, k):
    """A stage SIGKILLed mid-generation and started again on its port: the
    handle reconnects, rebuilds its KV cache from what it kept, and the
    text is the one process's."""
    model = FORMATS["bin"]
    want = generate(muster_bin, "--model", model, "--temperature", 0, "--max-tokens", 400,
                    "--ignore-eos").stdout
    group = llm_stages(model, 3, "--threads", 1)
    proc = subprocess.Popen([str(muster_bin), "generate", "--model", str(model), "--stages",
                             addrs(group), "--temperature", "0", "--max-tokens", "400",
                             "--ignore-eos"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=ENV)
    first = os.read(proc.stdout.fileno(), 20)  # unbuffered: communicate reads the rest
    assert first
    os.kill(group[k].pid, signal.SIGSTOP)  # mid-generation for sure: it waits on the stage
    port = group[k].port
    group[k].kill()
    again = llm_stages.one(model, k, 3, "--threads", 1, "--port", port)
    assert again.port == port, again.log()
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("generate did not end within 60 s of a stage's restart")
    assert proc.returncode == 0, err.decode()
    assert first + out == want
    assert "reconnected to 1 lost stage" in err.decode(), err.decode()


def test_stage_stopped_mid_generation(muster_bin, llm_stages):
    group = llm_stages(FORMATS["bin"], 3, "--threads", 1)
    proc = subprocess.Popen([str(muster_bin), "generate", "--model", str(FORMATS["bin"]),
                             "--stages", addrs(group), "--temperature", "0", "--max-tokens",
                             "500", "--ignore-eos", "--io-timeout", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    assert proc.stdout.read(20)
    os.kill(group[2].pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("generate did not end within 30 s of a stage's stop")
    finally:
        os.kill(group[2].pid, signal.SIGCONT)
    assert proc.returncode != 0
    assert f"stage 2/3 ({group[2].address})" in err.decode(), err.decode()
    assert took < 15, f"took {took:.1f} s with --io-timeout 2"


def mapping_rss(pid, path):
    """Resident bytes of the mappings of path in process pid (smaps)."""
    total, inside = 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5:
                inside = len(fields) >= 6 and fields[5] == str(path)
            elif inside and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


def test_stage_holds_only_its_layers(muster_bin, llm_stages, tmp_path):
    """Each stage of a 3-way split reads only its own layers' bytes of the
    mapped checkpoint (the mapping's resident pages), and its RSS is about
    its weights plus a small constant; the coordinator holds no weights."""
    model = tmp_path / "m.bin"
    total = llmfix.write_llama2c(model, dim=512, hidden=1408, layers=9, heads=8, kv_heads=4,
                                 vocab=512, seq_len=256)
    shutil.copy(STORIES / "tok512.bin", tmp_path / "tok512.bin")
    group = llm_stages(model, 3, "--threads", 1)
    for s in group:
        d = Peer(s.address)
        desc = d.info()
        d.close()
        own = desc["resident_bytes"]
        assert total / 5 < own < total / 2, (own, total)
        mapped = mapping_rss(s.pid, model.resolve())
        # The kernel maps up to 64 KiB around a fault from the page cache
        # (fault-around), so each of the stage's ~30 regions may bring in
        # a little of its neighbours; another stage's layers are 30+ MiB.
        assert own - 64 * 1024 <= mapped <= own + 4 * 1024 * 1024, \
            f"stage {s.index}: {mapped} bytes of the file resident, its weights are {own}"
        rss = s.status("VmRSS")
        # the process itself is ~12 MiB; a sanitizer build adds its runtime and shadow
        slack = (96 if "ASAN_OPTIONS" in os.environ else 32) * 1024 * 1024
        assert rss < own + slack, f"stage {s.index}: RSS {rss} for {own} of weights"
    proc = generate(muster_bin, "--model", model, "--stages", addrs(group), "--temperature", 0,
                    "--max-tokens", 40, "--json", "--ignore-eos")
    r = json.loads(proc.stdout)
    assert r["new_tokens"] == 40
    # the weights are 100 MB, each stage's third 30+ MiB; the process alone
    # is ~12 MiB, and ~44 MiB under ASan (its runtime and shadow), so the
    # bound is the same binary's own peak plus what is not weights
    base = idle_peak_rss(muster_bin)
    assert r["peak_rss_kib"] * 1024 < base + 36 * 1024 * 1024, \
        f"the coordinator held weights: peak {r['peak_rss_kib']} KiB, `muster version` {base >> 10}"


def idle_peak_rss(muster_bin):
    """Peak RSS in bytes of `muster version`: what the binary costs before
    it holds anything (its own rusage, not that of every child so far)."""
    proc = subprocess.Popen([str(muster_bin), "version"], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0
    return usage.ru_maxrss * 1024


def frames(*tensors):
    """A frame of several (name, dims, values) tensors."""
    out = struct.pack("<I", len(tensors))
    for name, dims, values in tensors:
        out += struct.pack("<I", len(name)) + name.encode()
        out += struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<Q", len(values)) + struct.pack(f"<{len(values)}f", *values)
    return out


def logits_of(body, vocab=512):
    """The rows of a RESULT's one "logits" tensor, as bytes each."""
    count, nlen = struct.unpack_from("<II", body)
    off = 8 + nlen
    assert count == 1 and body[8:off] == b"logits"
    rank, = struct.unpack_from("<I", body, off)
    dims = struct.unpack_from(f"<{rank}Q", body, off + 4)
    data = body[off + 4 + 8 * rank + 8:]
    return [data[i * vocab * 4:(i + 1) * vocab * 4] for i in range(dims[0])]


def test_stage_batch(muster_bin, llm_stages):
    """SEQ_BATCH runs several sequences in one call; each row's logits are
    the bits the sequence gets alone."""
    (stage,) = llm_stages(FORMATS["bin"], 1, "--threads", 2)
    p = Peer(stage.address)
    for seq in (1, 2, 3):
        assert p.ask(SEQ_OPEN, b'{"ctx": 64}', aux=seq)[0] == READY
    rtype, _, _, body = p.ask(SEQ_FORWARD, frame("tokens", [3], [1.0, 7.0, 9.0]), aux=1,
                              arg=0x80000000)
    assert rtype == RESULT
    alone = logits_of(body)
    assert len(alone) == 3
    items = [2, 0, 1, 0, 3, 0, 2, 1]
    rtype, _, _, body = p.ask(SEQ_BATCH, frames(("items", [2, 4], items),
                                                ("tokens", [3], [1.0, 1.0, 7.0])))
    assert rtype == RESULT, body
    got = logits_of(body)
    assert got == [alone[0], alone[0], alone[1]]
    rtype, _, _, body = p.ask(SEQ_BATCH, frames(("items", [2, 4], [2, 1, 2, 0, 3, 2, 1, 0]),
                                                ("tokens", [3], [7.0, 9.0, 9.0])))
    assert rtype == RESULT and logits_of(body) == [alone[2], alone[2]]
    for bad, word in (([2, 0, 1, 0, 2, 1, 1, 0], b"twice"),
                      ([9, 0, 1, 0, 1, 3, 1, 0], b"not open"),
                      ([1, 3, 1.5, 0, 2, 3, 1, 0], b"not an integer"),
                      ([1, 3, 1, 0, 2, 3, 2, 0], b"the items hold 3 positions, the input 2")):
        rtype, _, _, text = p.ask(SEQ_BATCH, frames(("items", [2, 4], bad),
                                                    ("tokens", [2], [5.0, 5.0])))
        assert rtype == ERROR and word in text, text
    p.close()


PROMPTS = ["Once upon a time", "The dog", "Lily and Tom", "A big red", "The sun was",
           "Max liked to", "One day, a little bird"]


@pytest.mark.parametrize("where", ["local", "stages"])
def test_parallel_matches_one_at_a_time(muster_bin, llm_stages, tmp_path, where):
    """Sequences generated together (batched on a stage, pipelined over the
    stages) give exactly the tokens each gets alone."""
    model = FORMATS["gguf"]
    extra = ["--stages", addrs(llm_stages(model, 3, "--threads", 1))] if where == "stages" else []
    pf = tmp_path / "prompts.txt"
    pf.write_text("\n".join(PROMPTS) + "\n")
    alone = [json.loads(generate(muster_bin, "--model", model, "--prompt", p, "--temperature", 0,
                                 "--max-tokens", 30, "--json", *extra).stdout)["tokens"]
             for p in PROMPTS]
    for s in (1, 3, 7):
        proc = generate(muster_bin, "--model", model, "--prompt-file", pf, "--parallel", s,
                        "--temperature", 0, "--max-tokens", 30, "--json", *extra)
        got = json.loads(proc.stdout)
        assert [g["tokens"] for g in got] == alone, f"--parallel {s}"
        assert all(g["stop"] in ("length", "eos") for g in got)
        assert f"{len(PROMPTS)} sequences ({s} in flight)" in proc.stderr.decode()
