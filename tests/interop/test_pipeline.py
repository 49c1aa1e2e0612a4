# SPDX-License-Identifier: MIT
"""`muster plan`, `muster stage` and `muster run`: one model split across
stage processes on loopback, against the command contract:

  muster plan --model DIR --stages N --json
      {"stages": [{"index", "first", "last", "inputs", "outputs", "params",
                   "param_bytes", "flops"}, ...]}, contiguous [first, last)
  muster stage --model DIR --stage I (--of N | --plan FILE) --host H --port 0
               [--requests K]
      loads stage I of the balanced N-way split (or of the split in FILE,
      `muster plan --json`'s format: {"stages": [{"first", "last"}, ...]}),
      then prints (flushed)
      "muster stage I/N: serving on HOST:PORT" once its weights are
      resident; serves until K requests (exit 0) or SIGTERM (exit 0)
  muster run --model DIR --input IN [--stages H:P,...] [--output OUT]
             [--micro-batches M] [--repeat R] [--json]
      in-process without --stages, else through the stage servers in
      order; writes the graph outputs (F32 safetensors); a per-stage table;
      on a stage error exits non-zero naming "stage i/N (HOST:PORT)"

What is checked:
* plans cover the graph, and each stage's boundary is what
  src/graph/plan.c's rule gives (mumodel.stage_io);
* the real hello_deepa model (converted from ONNX) and generated MLPs and
  transformer blocks (whose residuals skip stages), split the balanced way
  into 1..min(nodes, 4) stages with --stage/--of, give outputs
  bit-identical (bytes equal) to the in-process run, and within 1e-5 of
  numpy (mumodel's evaluator, and for hello_deepa the ONNX reference
  interpreter);
* every other split, through --plan files: a 6-node model with a residual
  and two outputs cut every possible way (all 32 compositions of its nodes
  into contiguous stages), a transformer block cut at every single node
  boundary, and a `muster plan --json` file as written, all bit-identical
  to the in-process run;
* a stage SIGKILLed while forwards are in flight, or down before a run,
  makes `muster run` fail naming that stage; stages left alive keep
  serving;
* a client that connects and never sends (or stalls mid-frame) does not
  stop a run from being served; nor do more silent clients than the
  connection limit (the oldest make room, each told why), and
  --silent-timeout / --max-conns close them sooner;
* a stage of a 1 GiB model split 4 ways has its weights resident when it
  announces itself, and a peak RSS (VmHWM) within its param_bytes plus
  64 MiB, far below the model size;
* bad bytes on a stage's port (garbage, an HTTP request, raw rlx frames
  with huge declared counts/lengths, a truncated frame, and messages in
  docs/protocols/pipeline.md's framing with a bad version, type, length or
  frame), and messages cut short by the end of the stream or a stall past
  --io-timeout, get one ERROR with the expected status (naming how much
  of a truncated message came) and that connection closed within
  seconds, and the stage still serves a correct run. (A well-formed
  FORWARD that fails inside the stage is answered and the connection
  kept: that is the protocol's own tests' business, not these.)

Every process is stopped at the end (SIGTERM, then SIGKILL): a stage that
died unexpectedly, or does not exit 0 on SIGTERM, fails the test. Every
wait and every socket has a deadline. Processes run with
OPENBLAS_NUM_THREADS=1 unless the environment says otherwise
(spec/pipeline-choices.md: bit-exact comparisons need single-threaded BLAS
on every side).
"""

import json
import os
import re
import signal
import socket
import struct
import subprocess
import time

import numpy as np
import pytest

import mumodel
import stagefix
import stagetable
from conftest import HOST, assert_closed
from modelfix import (big_model, hello_deepa, hello_deepa_model,  # noqa: F401
                      model_cache)
from test_onnx_convert import HELLO_INPUT, onnx_reference

TOL = 1e-5
MIB = 1 << 20
STOP_TIMEOUT = 10.0
RUN_TIMEOUT = 120.0
CLOSE_TIMEOUT = 5.0
RSS_SLACK = 64 * MIB
ENV = dict(os.environ)
ENV.setdefault("OPENBLAS_NUM_THREADS", "1")


# --------------------------------------------------------------------------
# processes
# --------------------------------------------------------------------------

@pytest.fixture
def stages(muster_bin, tmp_path):
    """Factory of graph-model stages (stagefix.stage_factory)."""
    start = stagefix.stage_factory(muster_bin, tmp_path, ENV)
    yield start
    start.teardown()


def muster(muster_bin, *args, timeout=RUN_TIMEOUT):
    """Run a muster command to completion (bounded); CompletedProcess."""
    try:
        return subprocess.run([str(muster_bin)] + [str(a) for a in args],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout, env=ENV)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"`muster {' '.join(map(str, args))}` did not finish within {timeout} s;"
                    f" stderr:\n{exc.stderr}", pytrace=False)


class Runner:
    """`muster run` on one model with files in a temp directory."""

    def __init__(self, muster_bin, tmp_path, model_dir):
        self.bin, self.dir, self.model = muster_bin, tmp_path, model_dir
        self.count = 0

    def args(self, inputs, group=None, *extra):
        self.count += 1
        src = self.dir / f"in-{self.count}.safetensors"
        self.out = self.dir / f"out-{self.count}.safetensors"
        mumodel.write_safetensors(src, inputs)
        args = ["run", "--model", self.model, "--input", src, "--output", self.out]
        if group is not None:
            args += ["--stages", ",".join(s.address for s in group)]
        return args + list(extra)

    def proc(self, inputs, group=None, *extra, timeout=RUN_TIMEOUT):
        return muster(self.bin, *self.args(inputs, group, *extra), timeout=timeout)

    def __call__(self, inputs, group=None, *extra):
        """Run; must succeed; returns {name: array} from --output."""
        proc = self.proc(inputs, group, *extra)
        where = "in-process" if group is None else f"through {len(group)} stages"
        assert proc.returncode == 0, (f"muster run ({where}) failed with {proc.returncode}:\n"
                                      f"{proc.stderr}{stage_logs(group)}")
        return read_outputs(self.out)


def stop_all(group):
    """Stop stages now (freeing their memory and ports); each must exit 0."""
    problems = [f"stage {s.index}/{s.of}: {p}\n{s.log()[-2000:]}"
                for s in group for p in [s.stop()] if p]
    assert not problems, "\n".join(problems)


def stage_logs(group):
    if not group:
        return ""
    return "".join(f"\n--- stage {s.index}/{s.of} log:\n{s.log()[-2000:]}" for s in group)


def read_outputs(path):
    header_dtypes = mumodel.SafetensorsFile(path)
    assert all(header_dtypes.dtype(n) == "F32" for n in header_dtypes), \
        "muster run must write F32"
    return mumodel.read_safetensors(path)


def assert_bit_identical(got, want, what):
    assert sorted(got) == sorted(want), f"{what}: outputs {list(got)} != {list(want)}"
    for name in want:
        assert got[name].shape == want[name].shape, f"{what}: {name} shape"
        if got[name].tobytes() != want[name].tobytes():
            diff = np.abs(got[name].astype(np.float64) - want[name]).max()
            pytest.fail(f"{what}: {name} is not bit-identical to the in-process run "
                        f"(max |diff| {diff:.3g})", pytrace=False)


def plan(muster_bin, model_dir, n):
    proc = muster(muster_bin, "plan", "--model", model_dir, "--stages", n, "--json")
    assert proc.returncode == 0, f"muster plan --stages {n} failed:\n{proc.stderr}"
    try:
        return json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"muster plan --json printed no JSON:\n{proc.stdout[:2000]}",
                    pytrace=False)


def check_close(got, want, what):
    assert set(got) == set(want), f"{what}: {sorted(got)} vs {sorted(want)}"
    for name in want:
        mumodel.assert_close(got[name], want[name], TOL, what=f"{what}: {name}")


# --------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------

GENERATED = {
    "mlp_gemm": lambda p: mumodel.write_mlp(p, widths=(24, 48, 48, 32, 8), seed=11),
    "mlp_mixed": lambda p: mumodel.write_mlp(
        p, widths=(16, 32, 32, 32, 4), style="mixed", in_shape=(3, 2, 8), seed=12,
        activations=["gelu", "silu", "gelu_erf", "sigmoid"]),
    "transformer": lambda p: mumodel.write_transformer(p, layers=2, seed=13),
    "transformer_ids": lambda p: mumodel.write_transformer(
        p, layers=2, vocab=64, act="relu", seed=14, batch=1, seq=7, dim=24, heads=2),
}


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """name -> mumodel.ModelInfo, written once per module."""
    root = tmp_path_factory.mktemp("generated")
    return {name: make(root / name) for name, make in GENERATED.items()}


@pytest.fixture(scope="module")
def small_mlp(tmp_path_factory):
    """A 4-layer MLP with batch 4 (micro-batches split it)."""
    return mumodel.write_mlp(tmp_path_factory.mktemp("small") / "mlp",
                             widths=(32, 64, 64, 64, 16), batch=4, seed=5,
                             activations=["relu", "tanh", "relu", "none"])


def hello_inputs(seed):
    return {HELLO_INPUT: np.random.default_rng(seed).standard_normal(
        (1, 25, 96)).astype(np.float32) * 2}


# --------------------------------------------------------------------------
# muster plan
# --------------------------------------------------------------------------

def check_plan(muster_bin, model_dir, graph, weights):
    nbytes = mumodel.param_bytes_of(weights)
    n_nodes = len(graph["nodes"])
    totals = []
    for n in range(1, min(n_nodes, 4) + 1):
        stages = plan(muster_bin, model_dir, n)["stages"]
        assert len(stages) == n
        assert [s["index"] for s in stages] == list(range(n))
        assert stages[0]["first"] == 0 and stages[-1]["last"] == n_nodes
        for a, b in zip(stages, stages[1:]):
            assert a["last"] == b["first"], f"{n} stages: gap or overlap {a} {b}"
        for s in stages:
            assert s["first"] < s["last"], f"{n} stages: empty stage {s['index']}"
            want = mumodel.stage_io(graph, s["first"], s["last"], nbytes)
            for key in ("inputs", "outputs", "params"):
                assert len(set(s[key])) == len(s[key]), f"duplicates in {key}"
                assert set(s[key]) == set(want[key]), \
                    f"{n} stages, stage {s['index']} {key}: {s[key]} != {want[key]}"
            assert s["param_bytes"] == want["param_bytes"]
            assert isinstance(s["flops"], (int, float)) and s["flops"] >= 0
        totals.append(sum(s["flops"] for s in stages))
        params = [p for s in stages for p in s["params"]]
        assert set(params) == set(mumodel.graph_params(graph))
    assert max(totals) - min(totals) <= 1e-9 * max(totals), \
        f"total flops differ between splits: {totals}"


def test_plan_hello_deepa(muster_bin, hello_deepa_model):
    check_plan(muster_bin, hello_deepa_model, mumodel.load_graph(hello_deepa_model),
               mumodel.load_weights(hello_deepa_model))


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_plan_generated(muster_bin, generated, name):
    info = generated[name]
    check_plan(muster_bin, info.path, info.graph, mumodel.load_weights(info.path))


def test_plan_human_readable(muster_bin, generated):
    proc = muster(muster_bin, "plan", "--model", generated["transformer"].path,
                  "--stages", 3)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()


# --------------------------------------------------------------------------
# split runs: bit-identical to the in-process run
# --------------------------------------------------------------------------

def test_hello_deepa_splits(muster_bin, tmp_path, stages, hello_deepa, hello_deepa_model):
    run = Runner(muster_bin, tmp_path, hello_deepa_model)
    inputs = [hello_inputs(seed) for seed in (0, 1)]
    whole = [run(x) for x in inputs]
    for x, out in zip(inputs, whole):
        check_close(out, onnx_reference(hello_deepa, x), "in-process vs ONNX reference")
        check_close(out, mumodel.evaluate_dir(hello_deepa_model, x), "in-process vs numpy")
    assert whole[0]["39"].tobytes() != whole[1]["39"].tobytes()
    for n in (1, 2, 3):
        group = stages(hello_deepa_model, n)
        for x, want in zip(inputs, whole):     # each stage serves two forwards
            assert_bit_identical(run(x, group), want, f"hello_deepa, {n} stages")
        stop_all(group)


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_splits(muster_bin, tmp_path, stages, generated, name):
    info = generated[name]
    run = Runner(muster_bin, tmp_path, info.path)
    x = info.inputs(seed=2)
    whole = run(x)
    check_close(whole, mumodel.evaluate_dir(info.path, x), "in-process vs numpy")
    for n in range(1, min(info.nnodes, 4) + 1):
        group = stages(info.path, n)
        assert_bit_identical(run(x, group), whole, f"{name}, {n} stages")
        stop_all(group)


def compositions(n):
    """Every split of nodes 0..n-1 into contiguous non-empty stages, as
    [(first, last), ...]: one per subset of the n-1 places to cut."""
    for mask in range(1 << (n - 1)):
        bounds = [0] + [i + 1 for i in range(n - 1) if mask >> i & 1] + [n]
        yield list(zip(bounds, bounds[1:]))


def write_skip_model(path):
    """6 nodes: h0 = gemm(x); r = relu(h0); h1 = gemm(r); s = h1 + h0
    (h0 skips a stage when cut after relu or the second gemm); z =
    gemm(s); y = softmax(z). Outputs y and h0 (an output of an early
    stage)."""
    b = mumodel._Builder(21)
    b.linear("fc0", "x", 8, 16, "gemm", out="h0")
    b.node("act", "relu", ["h0"], out="r")
    b.linear("fc1", "r", 16, 16, "gemm", out="h1")
    b.node("skip", "add", ["h1", "h0"], out="s")
    b.linear("fc2", "s", 16, 4, "gemm", out="z")
    b.node("sm", "softmax", ["z"], out="y")
    return b.write(path, [{"name": "x", "shape": [2, 8]}], ["y", "h0"], {"kind": "skip6"})


def run_planned(stages, run, info, ranges, plan_file, x, want):
    """Serve the split `ranges` through --plan and check the run."""
    plan_file.write_text(json.dumps(
        {"stages": [{"index": i, "first": a, "last": b} for i, (a, b) in enumerate(ranges)]}))
    group = stages.planned(info.path, plan_file, len(ranges))
    for s, (a, b) in zip(group, ranges):
        assert f"muster stage {s.index}/{len(ranges)}: nodes {a}..{b - 1}," in s.log(), \
            f"stage {s.index} of {ranges} does not serve nodes {a}..{b - 1}:\n{s.log()}"
    assert_bit_identical(run(x, group), want, f"split {ranges}")
    stop_all(group)


def test_every_split_via_plan_files(muster_bin, tmp_path, stages):
    """A small model with a residual, cut every possible way."""
    info = write_skip_model(tmp_path / "skip6")
    assert info.nnodes == 6
    run = Runner(muster_bin, tmp_path, info.path)
    x = info.inputs(seed=9)
    want = run(x)
    check_close(want, mumodel.evaluate_dir(info.path, x), "in-process vs numpy")
    splits = list(compositions(info.nnodes))
    assert len(splits) == 2 ** (info.nnodes - 1)
    for k, ranges in enumerate(splits):
        run_planned(stages, run, info, ranges, tmp_path / f"plan-{k}.json", x, want)


def test_transformer_every_single_cut(muster_bin, tmp_path, stages, generated):
    """The transformer block (residuals across most cuts) split in two at
    every node boundary, and split by `muster plan --json` as written."""
    info = generated["transformer"]
    run = Runner(muster_bin, tmp_path, info.path)
    x = info.inputs(seed=10)
    want = run(x)
    n = info.nnodes
    for cut in range(1, n):
        run_planned(stages, run, info, [(0, cut), (cut, n)], tmp_path / f"cut-{cut}.json", x,
                    want)
    proc = muster(muster_bin, "plan", "--model", info.path, "--stages", 3, "--json")
    assert proc.returncode == 0, proc.stderr
    plan_file = tmp_path / "plan3.json"
    plan_file.write_text(proc.stdout)
    group = stages.planned(info.path, plan_file, 3)
    assert_bit_identical(run(x, group), want, "the split of `muster plan --json`")


def test_run_table_and_json(muster_bin, tmp_path, stages, generated):
    """The per-stage table, column by column: each stage's row names its
    server, its resident bytes are its share of the plan, times and bytes
    moved are there and plausible; --json says the same exactly."""
    info = generated["transformer"]
    shares = plan(muster_bin, info.path, 3)["stages"]
    run = Runner(muster_bin, tmp_path, info.path)
    group = stages(info.path, 3)
    proc = run.proc(info.inputs(0), group, "--repeat", 2)
    assert proc.returncode == 0, proc.stderr
    rows = stagetable.parse(proc.stdout, stagetable.PIPE_COLUMNS, 3)
    for i, (row, s, share) in enumerate(zip(rows, group, shares)):
        what = f"stage {i}'s row {row}"
        assert int(row["stage"]) == i, what
        assert row["address"] == s.address, f"{what}: not {s.address}"
        assert share["param_bytes"] > 0
        assert stagetable.size_close(row["resident"], share["param_bytes"]), \
            f"{what}: resident is not its {share['param_bytes']} bytes of weights"
        assert float(row["load ms"]) >= 0, what
        forward, compute = float(row["forward ms"]), float(row["compute ms"])
        assert forward > 0 and 0 <= compute <= forward + 0.01, what
        assert stagetable.size_bytes(row["sent"]) > 0, what
        assert stagetable.size_bytes(row["received"]) > 0, what
    # the last stage's outputs are the model's: it sends at least those
    assert stagetable.size_bytes(rows[-1]["received"]) >= 2 * sum(
        v.nbytes for v in read_outputs(run.out).values()) * 0.95
    proc = run.proc(info.inputs(0), group, "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert [st["index"] for st in report["stages"]] == [0, 1, 2], report
    for st, s, share in zip(report["stages"], group, shares):
        assert st["address"] == s.address, st
        assert st["resident_bytes"] == share["param_bytes"], st
        assert st["forwards"] == 1 and st["forward_ms"] > 0 and st["load_ms"] >= 0, st
        assert st["bytes_in"] > 0 and st["bytes_out"] > 0, st
    assert report["forwards"] == 1


def test_micro_batches_and_repeat(muster_bin, tmp_path, stages, small_mlp):
    run = Runner(muster_bin, tmp_path, small_mlp.path)
    x = small_mlp.inputs(seed=3)
    want = mumodel.evaluate_dir(small_mlp.path, x)
    group = stages(small_mlp.path, 2)
    check_close(run(x, group, "--micro-batches", 2, "--repeat", 3), want,
                "2 stages, 2 micro-batches, 3 repeats")
    check_close(run(x, group, "--micro-batches", 4), want, "2 stages, 4 micro-batches")
    check_close(run(x, None, "--repeat", 2), want, "in-process, 2 repeats")


def test_requests_limit(muster_bin, tmp_path, stages, small_mlp):
    """--requests K: the stage exits 0 by itself after K forwards (the
    INFO exchange a run starts with is not a forward)."""
    run = Runner(muster_bin, tmp_path, small_mlp.path)
    x = small_mlp.inputs(seed=4)
    want = run(x)
    group = stages(small_mlp.path, 2, "--requests", 2)
    for s in group:
        s.allow_exit = True
    for _ in range(2):
        assert_bit_identical(run(x, group), want, "--requests 2")
    for s in group:
        try:
            code = s.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"stage {s.index} still running after serving its 2 requests")
        assert code == 0, f"stage {s.index} exited {code}:\n{s.log()}"


def test_sigterm_exits_zero_with_a_client_connected(stages, small_mlp):
    stage = stages.one(small_mlp.path, 0, 2)
    stage.allow_exit = True
    with socket.create_connection((HOST, stage.port), timeout=CLOSE_TIMEOUT):
        stage.proc.send_signal(signal.SIGTERM)
        try:
            code = stage.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail("stage ignored SIGTERM with a client connected")
    assert code == 0, stage.log()


# --------------------------------------------------------------------------
# failures name the stage
# --------------------------------------------------------------------------

def assert_names_stage(stderr, stage, n):
    """stderr has "stage i/N (HOST:PORT)" for this stage (i counted from 0
    or from 1)."""
    found = re.findall(rf"stage (\d+)/{n} \({re.escape(stage.host)}:(\d+)\)", stderr)
    assert any(int(port) == stage.port and int(i) in (stage.index, stage.index + 1)
               for i, port in found), \
        f"stderr does not name stage {stage.index}/{n} ({stage.address}):\n{stderr}"


def test_stage_killed_mid_run(muster_bin, tmp_path, stages, big_model):
    """SIGKILL the middle stage while forwards stream through it: the run
    fails naming that stage; the other stages keep serving."""
    run = Runner(muster_bin, tmp_path, big_model.path)
    group = stages(big_model.path, 3)
    args = [str(muster_bin)] + [str(a) for a in run.args(big_model.inputs(0), group,
                                                         "--repeat", 100000)]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        time.sleep(1.5)
        assert proc.poll() is None, (f"the run ended before the kill (exit {proc.returncode})"
                                     f"; the model is too small to keep forwards in flight")
        group[1].kill()
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("muster run kept going for 60 s after a stage was killed")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0, "muster run succeeded with a stage killed"
    assert_names_stage(err, group[1], 3)
    assert group[0].alive() and group[2].alive()


def test_stage_down_before_run(muster_bin, tmp_path, stages, small_mlp):
    run = Runner(muster_bin, tmp_path, small_mlp.path)
    group = stages(small_mlp.path, 3)
    group[2].kill()
    proc = run.proc(small_mlp.inputs(0), group, timeout=60)
    assert proc.returncode != 0
    assert_names_stage(proc.stderr, group[2], 3)


def test_stages_in_the_wrong_order(muster_bin, tmp_path, stages, small_mlp):
    """Stage servers given in the wrong order never give a wrong answer:
    the run fails naming a stage (or, should the coordinator put the
    servers back in order, gives the right output); the stages stay up
    and serve the right order afterwards."""
    run = Runner(muster_bin, tmp_path, small_mlp.path)
    x = small_mlp.inputs(1)
    want = run(x)
    group = stages(small_mlp.path, 2)
    proc = run.proc(x, [group[1], group[0]], timeout=60)
    if proc.returncode == 0:
        assert_bit_identical(read_outputs(run.out), want, "swapped stages")
    else:      # names a stage: its address and "stage i/2", in whatever words
        assert re.search(r"stage \d+/2\b", proc.stderr), proc.stderr
        assert any(s.address in proc.stderr for s in group), proc.stderr
    assert all(s.alive() for s in group)
    assert_bit_identical(run(x, group), want, "after a failed run")


# --------------------------------------------------------------------------
# clients that misbehave
# --------------------------------------------------------------------------

def test_idle_clients_do_not_block_runs(muster_bin, tmp_path, stages, generated):
    info = generated["transformer"]
    run = Runner(muster_bin, tmp_path, info.path)
    x = info.inputs(5)
    want = run(x)
    group = stages(info.path, 3)
    idle = []
    try:
        for s in group:
            quiet = socket.create_connection((HOST, s.port), timeout=CLOSE_TIMEOUT)
            stalled = socket.create_connection((HOST, s.port), timeout=CLOSE_TIMEOUT)
            stalled.sendall(struct.pack("<II", 1, 1))     # a frame begun, never finished
            idle += [quiet, stalled]
        start = time.monotonic()
        for _ in range(2):
            assert_bit_identical(run(x, group), want, "with idle clients connected")
        assert time.monotonic() - start < 60
    finally:
        for sock in idle:
            sock.close()
    assert all(s.alive() for s in group)


def silent_connections(port, n):
    socks = []
    for _ in range(n):
        socks.append(socket.create_connection((HOST, port), timeout=CLOSE_TIMEOUT))
    return socks


def still_open(sock):
    """Nothing to read and no close: the stage keeps the connection."""
    sock.setblocking(False)
    try:
        sock.recv(1)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.settimeout(CLOSE_TIMEOUT)
    return False


def test_silent_clients_cannot_lock_out_a_stage(muster_bin, tmp_path, stages, small_mlp):
    """More silent connections than the limit (64 by default) do not keep
    a coordinator out: the oldest that never sent a message make room,
    each told why; the run is bit-identical."""
    run = Runner(muster_bin, tmp_path, small_mlp.path)
    x = small_mlp.inputs(7)
    want = run(x)
    group = stages(small_mlp.path, 2)
    silent = {s.index: [] for s in group}
    try:
        for s in group:
            silent[s.index] = silent_connections(s.port, 70)
        assert_bit_identical(run(x, group), want, "with 70 silent clients on each stage")
        for s in group:
            socks = silent[s.index]
            # 70 silent + the run's connection over a limit of 64: the 7 oldest go
            for i, sock in enumerate(socks[:7]):
                status, text = error_before_close(sock, f"silent client {i}")
                assert status == MU_ETOOBIG and "make room" in text, (status, text)
            assert still_open(socks[-1]), "the newest silent client was closed"
    finally:
        for socks in silent.values():
            for sock in socks:
                sock.close()
    assert all(s.alive() for s in group)


def test_silent_timeout_and_limit_options(muster_bin, tmp_path, stages, small_mlp):
    """`--max-conns 4 --silent-timeout 1`: of 12 silent clients the 8
    oldest make room for newer ones and the last 4 are closed after about
    a second, each with an ERROR saying why; runs go on being served."""
    run = Runner(muster_bin, tmp_path, small_mlp.path)
    x = small_mlp.inputs(8)
    want = run(x)
    group = stages(small_mlp.path, 2, "--max-conns", 4, "--silent-timeout", 1)
    socks = []
    try:
        for s in group:
            socks += [(s, sock) for sock in silent_connections(s.port, 12)]
        start = time.monotonic()
        for s, sock in socks:
            status, text = error_before_close(sock, f"a silent client of stage {s.index}")
            assert (status, "make room" in text) == (MU_ETOOBIG, True) or \
                (status, "nothing received in 1 s" in text) == (ETIMEDOUT, True), (status, text)
        # the silent timeout, not the 5 s wait of error_before_close, closed them
        assert time.monotonic() - start < 4.0
        assert_bit_identical(run(x, group), want, "after silent clients")
        # and a run with 4 silent clients on each stage, at the limit
        for s in group:
            socks += [(s, sock) for sock in silent_connections(s.port, 4)]
        assert_bit_identical(run(x, group), want, "with the limit reached by silent clients")
    finally:
        for _, sock in socks:
            sock.close()
    assert all(s.alive() for s in group)


def rlx_tensor(name, array):
    data = np.asarray(array, "<f4")
    raw = name.encode()
    return (struct.pack("<I", len(raw)) + raw + struct.pack("<I", data.ndim)
            + b"".join(struct.pack("<Q", d) for d in data.shape)
            + struct.pack("<Q", data.size) + data.tobytes())


PAD = b"\0" * 64   # completes any fixed-size header a framing may put first
FORWARD, RESULT, ERROR = 2, 3, 4
MU_EPROTO, MU_EBADMAGIC, MU_ETOOBIG = -1000, -1001, -1002
ETIMEDOUT = -110
IO_TIMEOUT = 1      # `--io-timeout` of the stages that get bad input


def mupl(mtype, body=b"", length=None, version=1, magic=b"MUPL"):
    """A message as docs/protocols/pipeline.md frames it: a 40-byte header
    (magic, u16 version, u16 type, i32 status, u32 reserved, u64 id,
    u64 aux, u64 length) and the body."""
    length = len(body) if length is None else length
    return struct.pack("<4sHHiIQQQ", magic, version, mtype, 0, 0, 7, 0, length) + body


def bad_inputs(x_name, x):
    """Bytes no stage may accept: name -> (bytes, whether to half-close
    after them, the ERROR status the stage must answer with, and a text
    the ERROR must contain or None). Raw rlx frames (no header) are bad
    too: they fail the magic. A message cut short by the end of the stream
    or by a stall of IO_TIMEOUT seconds is answered with what came."""
    frame = struct.pack("<I", 1) + rlx_tensor(x_name, x)
    huge_numel = struct.pack("<II", 1, 1) + b"x" + struct.pack("<IQQ", 1, 1 << 40, 1 << 40)
    mismatch = struct.pack("<II", 1, 1) + b"x" + struct.pack("<IQQQ", 2, 2, 3, 7) + b"\0" * 28
    forward = mupl(FORWARD, frame)
    cut = 40 + len(frame) // 2
    return {
        "garbage": (b"\xff" * 256, False, MU_EBADMAGIC, None),
        "http": (b"GET / HTTP/1.1\r\nHost: muster\r\nX-Pad: " + b"a" * 200 + b"\r\n\r\n",
                 False, MU_EBADMAGIC, None),
        "rlx_huge_count": (struct.pack("<I", 0xFFFFFFFF) + PAD, False, MU_EBADMAGIC, None),
        "rlx_huge_name": (struct.pack("<II", 1, 0xFFFFFFF0) + PAD, False, MU_EBADMAGIC, None),
        "rlx_huge_numel": (huge_numel + PAD, False, MU_EBADMAGIC, None),
        "rlx_numel_mismatch": (mismatch + PAD, False, MU_EBADMAGIC, None),
        "rlx_huge_rank": (struct.pack("<II", 1, 1) + b"x" + struct.pack("<I", 1000) + PAD,
                          False, MU_EBADMAGIC, None),
        "rlx_truncated": (frame[:len(frame) // 2], True, MU_EBADMAGIC, None),
        "bad_version": (mupl(1, version=99) + PAD, False, MU_EPROTO, None),
        "bad_type": (mupl(77) + PAD, False, MU_EPROTO, None),
        "huge_length": (mupl(FORWARD, length=1 << 62) + PAD, False, MU_ETOOBIG, None),
        "forward_huge_numel": (mupl(FORWARD, huge_numel), False, MU_ETOOBIG, None),
        "forward_numel_mismatch": (mupl(FORWARD, mismatch), False, MU_EPROTO, None),
        "forward_trailing_bytes": (mupl(FORWARD, frame + b"\0" * 4), False, MU_EPROTO, None),
        "forward_frame_past_body": (mupl(FORWARD, frame, length=len(frame) - 4), False,
                                    MU_EPROTO, None),
        "header_truncated": (forward[:20], True, MU_EPROTO,
                             "truncated message: 20 of 40 header bytes, then the stream ended"),
        "forward_truncated": (forward[:cut], True, MU_EPROTO,
                              f"truncated message: {cut - 40} of {len(frame)} FORWARD body "
                              f"bytes, then the stream ended"),
        "header_stalled": (forward[:20], False, ETIMEDOUT,
                           f"truncated message: 20 of 40 header bytes, then nothing for "
                           f"{IO_TIMEOUT} s"),
        "forward_stalled": (forward[:cut], False, ETIMEDOUT,
                            f"truncated message: {cut - 40} of {len(frame)} FORWARD body bytes,"
                            f" then nothing for {IO_TIMEOUT} s"),
    }


def error_before_close(sock, what, timeout=CLOSE_TIMEOUT):
    """The stage closes sock within timeout after one ERROR message:
    returns its (status, text)."""
    data = assert_closed(sock, timeout)
    assert len(data) >= 40, f"{what}: closed without an ERROR first (received {data!r})"
    magic, version, mtype, status, _res, _mid, _aux, length = struct.unpack(
        "<4sHHiIQQQ", data[:40])
    assert (magic, version, mtype) == (b"MUPL", 1, ERROR), \
        f"{what}: the stage sent {data[:40]!r} before closing, not an ERROR"
    assert len(data) == 40 + length, f"{what}: {len(data) - 40} bytes after a {length}-byte ERROR"
    text = data[40:].decode("utf-8")
    assert status < 0 and text.strip(), f"{what}: ERROR {status} {text!r}"
    return status, text


@pytest.mark.parametrize("case", sorted(bad_inputs("x", np.zeros(1))))
def test_bad_input_closes_the_connection(muster_bin, tmp_path, stages, small_mlp, case):
    run = Runner(muster_bin, tmp_path, small_mlp.path)
    x = small_mlp.inputs(6)
    want = run(x)
    group = stages(small_mlp.path, 2, "--io-timeout", IO_TIMEOUT)
    payload, half_close, want_status, want_text = bad_inputs("x", x["x"])[case]
    for s in group:
        with socket.create_connection((HOST, s.port), timeout=CLOSE_TIMEOUT) as sock:
            try:
                sock.sendall(payload)
                if half_close:
                    sock.shutdown(socket.SHUT_WR)
            except (BrokenPipeError, ConnectionResetError):
                pass                       # closed while we were still sending
            status, text = error_before_close(sock, f"stage {s.index}, {case}")
        assert status == want_status, f"{case}: ERROR {status} ({text!r}), want {want_status}"
        if want_text is not None:
            assert want_text in text, f"{case}: ERROR {text!r} does not say {want_text!r}"
        assert s.alive(), f"stage {s.index} died on {case} input:\n{s.log()}"
    assert_bit_identical(run(x, group), want, f"after {case} input")


def test_half_close_after_whole_requests_gets_every_reply(muster_bin, tmp_path, stages):
    """A client may send its requests and shut its sending side at once (as
    `cat requests | nc` does): each request still gets its RESULT, in
    order, and then the stage closes in an orderly way. The RESULTs (4 MiB
    each) are far bigger than what the sockets buffer, and the client reads
    only after it has shut down, so the stage meets the end of the stream
    while most of its replies are still queued: they must not be dropped."""
    info = mumodel.write_mlp(tmp_path / "wide", widths=(16, 32768), batch=32, seed=1,
                             activations=["none"])
    x = info.inputs(seed=2)
    name = next(iter(x))
    group = stages(info.path, 1)
    frame = struct.pack("<I", 1) + rlx_tensor(name, x[name])
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(CLOSE_TIMEOUT)
    with sock:
        sock.connect((HOST, group[0].port))
        sock.sendall(b"".join(
            struct.pack("<4sHHiIQQQ", b"MUPL", 1, FORWARD, 0, 0, rid, 0, len(frame)) + frame
            for rid in (11, 12, 13)))
        sock.shutdown(socket.SHUT_WR)
        time.sleep(0.5)   # not needed for correctness: lets the stage reach the end first
        data = assert_closed(sock, CLOSE_TIMEOUT)
    replies = []
    while data:
        assert len(data) >= 40, f"a cut-off reply header: {data[:64]!r}"
        magic, version, mtype, status, _res, rid, _aux, length = struct.unpack(
            "<4sHHiIQQQ", data[:40])
        assert (magic, version) == (b"MUPL", 1), data[:40]
        assert len(data) >= 40 + length, \
            f"reply {rid} cut off: {len(data) - 40} of {length} bytes, after {replies}"
        replies.append((mtype, status, rid, length))
        data = data[40 + length:]
    assert [(t, st, rid) for t, st, rid, _ in replies] == [(RESULT, 0, r) for r in (11, 12, 13)], \
        replies
    assert all(n > 32 * 32768 * 4 for *_, n in replies), replies
    assert group[0].alive()


# --------------------------------------------------------------------------
# memory: a stage holds its own weights, not the model's
# --------------------------------------------------------------------------

def is_asan(path):
    with open(path, "rb") as f:
        return b"__asan_init" in f.read()


def test_stage_memory_is_its_share(muster_bin, tmp_path, stages, big_model):
    n = 4
    total = os.path.getsize(os.path.join(big_model.path, "model.safetensors"))
    shares = plan(muster_bin, big_model.path, n)["stages"]
    # an ASan build shadows what it touches (1/8) and keeps a quarantine
    asan = is_asan(muster_bin)
    slack = lambda share: RSS_SLACK + (share // 8 + 256 * MIB if asan else 0)  # noqa: E731
    group = stages(big_model.path, n)
    for s, share in zip(group, shares):
        rss = s.status("VmRSS")
        assert rss >= 0.9 * share["param_bytes"], (
            f"stage {s.index} announced itself with {rss >> 20} MiB resident, "
            f"less than its {share['param_bytes'] >> 20} MiB of weights")
    run = Runner(muster_bin, tmp_path, big_model.path)
    x = big_model.inputs(0)
    got = run(x, group)
    check_close(got, mumodel.evaluate_dir(big_model.path, x), f"{n} stages vs numpy")
    for s, share in zip(group, shares):
        peak = s.status("VmHWM")
        limit = share["param_bytes"] + slack(share["param_bytes"])
        assert peak <= limit, (f"stage {s.index}: peak RSS {peak / MIB:.0f} MiB is over its "
                               f"weights ({share['param_bytes'] / MIB:.0f} MiB) + "
                               f"{(limit - share['param_bytes']) / MIB:.0f} MiB")
        assert peak < 0.6 * total, f"stage {s.index}: peak RSS near the whole model"
