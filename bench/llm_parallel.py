#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Sequences in flight against stages: aggregate decode tok/s of
`muster generate --parallel S` in one process and over 2 and 3 `muster
stage` processes on loopback, for S = 1, 2, 3, 6.

usage: bench/llm_parallel.sh [--model FILE.gguf] [--toy] [--tokens N]
                             [--stages 1,2,3] [--parallel 1,2,3,6]
                             [--threads T] [--muster BIN] [--json]

The model defaults to bench/llm.sh's random-weight 1B llama at Q8_0
(generated into its cache when missing); --toy uses a tiny one. Each run
generates N tokens (default 32) after a short prompt for each of S prompts,
EOS ignored; the figure is all new tokens over the run's wall time, which
includes each sequence's prefill. In one process the engine batches the S
sequences' decode steps into one product per weight; over stages it also
pipelines them (stage 0 takes about S/N of them at a time). Each stage
process gets --threads T (default 1); one process gets the machine's CPUs.
The line to read is S = 3 against S = 1 over 3 stages (issue 14 asks for
1.5x or more on a 2-CPU machine) and what limits it: the "cores" column is
the CPU time all processes got over the run's wall time.
"""

import argparse
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import llm  # noqa: E402  (the model generator and cache of bench/llm.sh)

PROMPTS = ["a a a", "a a a a a", "a a", "a a a a", "a a a a a a", "a"]


def start_stage(muster, model, i, n, threads):
    proc = subprocess.Popen([str(muster), "stage", "--model", str(model), "--stage", str(i),
                             "--of", str(n), "--threads", str(threads), "--port", "0",
                             "--max-sequences", "16"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    line = b""
    while not line.endswith(b"\n"):
        if not select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
            proc.kill()
            raise SystemExit(f"muster stage {i}/{n} not ready in 600 s")
        chunk = os.read(proc.stdout.fileno(), 1)
        if not chunk:
            raise SystemExit(f"muster stage {i}/{n} exited {proc.wait()}")
        line += chunk
    return proc, line.decode().rsplit("serving on ", 1)[1].strip()


def cpu_of(pids):
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            pass
    return total


def one_run(a, model, stages, s, addrs, stage_pids):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join((PROMPTS * s)[:s]) + "\n")
    cmd = [str(a.muster), "generate", "--model", str(model), "--prompt-file", f.name,
           "--parallel", str(s), "--max-tokens", str(a.tokens), "--ignore-eos",
           "--temperature", "0", "--json"]
    if addrs:
        cmd += ["--stages", ",".join(addrs)]
    cpu0 = cpu_of(stage_pids)
    ru = os.times()
    a.child_cpu = ru.children_user + ru.children_system  # stages reaped earlier count not
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    wall = time.monotonic() - t0
    os.unlink(f.name)
    if proc.returncode != 0:
        raise SystemExit(f"muster generate --parallel {s}: {proc.stderr[-2000:]}")
    m = re.search(r"(\d+) new tokens in ([\d.]+) ms: ([\d.]+) tok/s in all", proc.stderr)
    toks = int(m.group(1))
    if toks != s * a.tokens:
        raise SystemExit(f"{toks} tokens, wanted {s * a.tokens}: {proc.stderr[-1000:]}")
    batches = [float(b) for b in re.findall(r"batches, ([\d.]+) rows each", proc.stderr)]
    ru = os.times()
    cores = (cpu_of(stage_pids) - cpu0 + ru.children_user + ru.children_system - a.child_cpu) / wall
    a.child_cpu = ru.children_user + ru.children_system
    return float(m.group(3)), batches, cores


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model")
    p.add_argument("--toy", action="store_true")
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--stages", default="1,2,3")
    p.add_argument("--parallel", default="1,2,3,6")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--muster", default=str(ROOT / "build" / "bin" / "muster"))
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    a.child_cpu = 0.0
    if a.model is None:
        shape = dict(llm.TOY if a.toy else llm.TINYLLAMA)
        ns = argparse.Namespace(cache=Path(os.environ.get("MUSTER_BENCH_CACHE",
                                                          "/var/tmp/muster-bench")), seed=0,
                                **{k: v for k, v in shape.items()
                                   if k not in ("prompt_tokens", "decode_tokens")})
        ns.cache.mkdir(parents=True, exist_ok=True)
        a.model = llm.ensure_model(ns, "q8_0")
    rows = []
    print(f"sequences in flight: {a.model}, {a.tokens} tokens each, stage threads {a.threads}, "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"  {'stages':>6} {'S':>3} {'tok/s in all':>13} {'x S=1':>6} {'rows/batch':>22} "
          f"{'cores':>5}")
    for n in [int(x) for x in a.stages.split(",")]:
        procs = [start_stage(a.muster, a.model, i, n, a.threads) for i in range(n)] \
            if n > 1 else []
        try:
            base = None
            for s in [int(x) for x in a.parallel.split(",")]:
                rate, batches, cores = one_run(a, a.model, n, s, [ad for _, ad in procs],
                                               [pr.pid for pr, _ in procs])
                base = base or rate
                rows.append({"stages": n, "parallel": s, "tok_s": rate, "vs_s1": rate / base,
                             "rows_per_batch": batches, "cores": cores})
                print(f"  {n:>6} {s:>3} {rate:13.2f} {rate / base:6.2f} "
                      f"{' '.join(f'{b:.2f}' for b in batches):>22} {cores:5.2f}", flush=True)
        finally:
            for pr, _ in procs:
                pr.send_signal(signal.SIGTERM)
                pr.wait(30)
    if a.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main(sys.argv[1:])
