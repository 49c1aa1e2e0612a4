#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""LLM generation benchmark: llama.cpp against muster on the same GGUF.

usage: bench/llm.sh [--toy] [--dim D --layers L --hidden H --heads N
                    --kv-heads K --vocab V] [--threads 1,2]
                    [--prompt-tokens 256] [--decode-tokens 64]
                    [--stages 2,3] [--engines llamacpp,muster] [--cache DIR]
                    [--llamacpp-modules DIR] [--muster BIN] [--json]
       bench/llm.sh --types q4_k_m,q5_k_m,q6_k,iq4_xs,q4_0,q8_0 [--pure]
                    [--repeat 3] [same options but --stages]

With --types, the comparison per quantized type of bench/llm_types.py
runs instead (files made by llama.cpp's own quantizer, medians and ranges
of --repeat runs, the memory-bandwidth limit of decode; its docstring has
the details). Without, one run, on this machine, for F32 and Q8_0 and each
thread count:
  * the model: a random-weight llama GGUF of the given shape (default
    TinyLlama-1.1B's: dim 2048, 22 layers, hidden 5632, 32 heads, 4 KV
    heads, vocab 32000, untied), written by bench/llmgen.py into the cache
    (default $MUSTER_BENCH_CACHE or /var/tmp/muster-bench; 4.4 GB at F32,
    1.2 GB at Q8_0) once and reused;
  * the prompt: BOS then "a a a ..." (one token per "a" in the generated
    vocabulary), --prompt-tokens in all; then --decode-tokens generated
    greedily, one position at a time (batch 1);
  * llama.cpp: npm node-llama-cpp@3.21.1 (prebuilt CPU build) through
    tests/interop/llamacpp/generate.mjs, after one warm-up token so the
    timings do not include first-touch faults of the mapped weights; EOS
    does not stop it;
  * muster in one process: `muster generate --model FILE --threads T
    --prompt TEXT --max-tokens N --json`;
  * muster split over S `muster stage` processes on loopback:
    `muster stage --model FILE --stage I --of S --threads T` each, then
    `muster generate --model FILE --stages H:P,... --prompt ... --json`.
The muster rows read prefill_tok_s, decode_tok_s and ttft_ms from the JSON
object `--json` prints (the field names generate.mjs uses). Until `muster
generate` exists (its --help fails) those rows print n/a; THE MUSTER SLOTS
are run_muster() and run_muster_split() below, written against the command
lines above, to be adjusted when the commands land.

Peak RSS is each process's ru_maxrss from wait4 (the node process includes
Node.js itself, about 45 MB); for a split run, the largest of the stages and
the coordinator. "cores" is the CPU time a run got over its wall time (load
and warm-up included), which says how much of the machine it really had. prefill tok/s = prompt tokens / time to first token; decode
tok/s = (generated - 1) / time from the first token to the last. The machine
may be shared: each row shows the 1-minute load average when it started.
Then the goals of issue 13, as ratios from this run: muster's decode >= 0.8x
llama.cpp's, prefill >= 0.5x, the 3-stage split's decode >= 0.9x muster's
own single-process decode. --toy runs a tiny model (a smoke test).
"""

import argparse
import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GENERATOR = ROOT / "bench" / "llmgen.py"
GENERATE_MJS = ROOT / "tests" / "interop" / "llamacpp" / "generate.mjs"
PYTHON = os.environ.get("PYTHON", "/usr/bin/python3")
TINYLLAMA = dict(dim=2048, layers=22, hidden=5632, heads=32, kv_heads=4, vocab=32000)
TOY = dict(dim=64, layers=3, hidden=128, heads=4, kv_heads=2, vocab=512,
           prompt_tokens=16, decode_tokens=8)
STAGE_READY_TIMEOUT = 600.0


class BenchError(Exception):
    pass


def load_average():
    return float(Path("/proc/loadavg").read_text().split()[0])


def run_measured(cmd, timeout, stdin=subprocess.DEVNULL):
    """Run cmd to completion; (exit status, stdout, stderr, usage) where
    usage holds the child's own peak RSS in KiB (ru_maxrss, from wait4) and
    `cores`, the CPU time it got over its wall time: on a shared machine,
    how much of the asked-for threads' time it really had. A timer kills it
    at `timeout`."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        proc = subprocess.Popen([str(c) for c in cmd], stdin=stdin, stdout=out, stderr=err)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        wall = max(time.monotonic() - t0, 1e-9)
        return (proc.returncode, out.read().decode("utf-8", "replace"),
                err.read().decode("utf-8", "replace"),
                {"peak_rss_kib": usage.ru_maxrss,
                 "cores": (usage.ru_utime + usage.ru_stime) / wall})


def last_json(text, what):
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    raise BenchError(f"{what} printed no JSON object:\n{text[-2000:]}")


# -- models ------------------------------------------------------------------

def ensure_model(a, wtype):
    """The cached GGUF for this shape, seed and type; generated when absent."""
    name = (f"llama-d{a.dim}-l{a.layers}-h{a.hidden}-a{a.heads}-kv{a.kv_heads}"
            f"-v{a.vocab}-s{a.seed}-{wtype}.gguf")
    path = a.cache / name
    a.cache.mkdir(parents=True, exist_ok=True)
    with open(a.cache / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            return path
        # The project's generator (tools/llm_convert.py `gen`, branch
        # llmtools) is to replace bench/llmgen.py here once it lands.
        t0 = time.monotonic()
        cmd = [PYTHON, GENERATOR, "--out", path, "--type", wtype, "--seed", a.seed,
               "--dim", a.dim, "--layers", a.layers, "--hidden", a.hidden, "--heads", a.heads,
               "--kv-heads", a.kv_heads, "--vocab", a.vocab]
        rc, out, err, _ = run_measured(cmd, timeout=3600)
        if rc != 0:
            raise BenchError(f"llmgen failed (exit {rc}):\n{err[-2000:]}")
        log(f"  generated {out.strip()} in {time.monotonic() - t0:.0f} s")
        return path


def params(a):
    hd = getattr(a, "head_dim", None) or a.dim // a.heads
    q, kv = hd * a.heads, hd * a.kv_heads
    layer = 2 * a.dim * q + 2 * a.dim * kv + 3 * a.dim * a.hidden + 2 * a.dim
    return a.layers * layer + 2 * a.vocab * a.dim + a.dim


def prompt_text(a):
    return " ".join(["a"] * (a.prompt_tokens - 1))     # + BOS = prompt_tokens


# -- engines -----------------------------------------------------------------

def run_llamacpp(a, model, threads):
    cmd = [a.node, GENERATE_MJS, "--modules", a.llamacpp_modules, "--model", model,
           "--threads", threads, "--prompt", prompt_text(a), "--max-tokens", a.decode_tokens,
           "--ignore-eos", "--warmup"]
    rc, out, err, usage = run_measured(cmd, a.timeout)
    if rc != 0:
        raise BenchError(f"generate.mjs exited {rc}:\n{err[-2000:]}")
    r = last_json(out, "generate.mjs")
    if r["prompt_tokens"] != a.prompt_tokens or r["n_generated"] != a.decode_tokens:
        raise BenchError(f"llama.cpp ran {r['prompt_tokens']} prompt tokens and generated "
                         f"{r['n_generated']}, expected {a.prompt_tokens} and {a.decode_tokens}")
    return row(r, usage)


def row(r, usage, prompt_tokens=None):
    """The figures of one run from its JSON; the prompt must have had the
    length asked for, or the engines ran different prompts."""
    if prompt_tokens is not None and r.get("prompt_tokens", prompt_tokens) != prompt_tokens:
        raise BenchError(f"the prompt was {r['prompt_tokens']} tokens, not {prompt_tokens}: "
                         "the tokenizers disagree")

    def pick(*names):
        for n in names:
            if isinstance(r.get(n), (int, float)):
                return float(r[n])
        return None
    return {"prefill_tok_s": pick("prefill_tok_s", "prefill_tokens_per_s"),
            "decode_tok_s": pick("decode_tok_s", "decode_tokens_per_s"),
            "ttft_ms": pick("ttft_ms", "time_to_first_token_ms"),
            "prefill_cpu_ms": pick("prefill_cpu_ms"), "decode_cpu_ms": pick("decode_cpu_ms"),
            "prompt_tokens": r.get("prompt_tokens"), **usage}


def muster_help(a, command):
    """`muster COMMAND --help` text, or None when muster lacks the command."""
    if not (a.muster.is_file() and os.access(a.muster, os.X_OK)):
        return None
    rc, out, err, _ = run_measured([a.muster, command, "--help"], 30)
    return out + err if rc == 0 else None


def generate_args(a, model, threads, help_text):
    args = ["generate", "--model", model, "--prompt", prompt_text(a),
            "--max-tokens", a.decode_tokens, "--json"]
    if threads is not None:
        args += ["--threads", threads]
    if "--ignore-eos" in help_text:
        args.append("--ignore-eos")
    return args


def run_muster(a, model, threads):
    """MUSTER SLOT: single-process generation, or None (n/a) until it exists."""
    help_text = muster_help(a, "generate")
    if help_text is None:
        return None
    rc, out, err, usage = run_measured([a.muster, *generate_args(a, model, threads, help_text)],
                                       a.timeout)
    if rc != 0:
        raise BenchError(f"muster generate exited {rc}:\n{err[-2000:]}")
    return row(last_json(out, "muster generate"), usage, a.prompt_tokens)


def start_stage(a, model, index, of, threads, stage_help):
    cmd = [a.muster, "stage", "--model", model, "--stage", index, "--of", of,
           "--host", "127.0.0.1", "--port", 0]
    if "--threads" in stage_help:
        cmd += ["--threads", threads]
    proc = subprocess.Popen([str(c) for c in cmd], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + STAGE_READY_TIMEOUT
    buf = b""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
            proc.kill()
            raise BenchError(f"muster stage {index}/{of} not ready in {STAGE_READY_TIMEOUT} s")
        chunk = os.read(proc.stdout.fileno(), 4096)
        if not chunk:
            raise BenchError(f"muster stage {index}/{of} exited {proc.wait()} before serving")
        buf += chunk
    line = buf.decode().splitlines()[0]
    if "serving on " not in line:
        proc.kill()
        raise BenchError(f"muster stage {index}/{of} said {line!r}")
    return proc, line.rsplit("serving on ", 1)[1].strip()


def run_muster_split(a, model, threads, nstages):
    """MUSTER SLOT: generation over `nstages` stage processes, or None."""
    help_text = muster_help(a, "generate")
    stage_help = muster_help(a, "stage")
    if help_text is None or stage_help is None or "--stages" not in help_text:
        return None
    stages = []
    try:
        for i in range(nstages):
            stages.append(start_stage(a, model, i, nstages, threads, stage_help))
        args = generate_args(a, model, None, help_text)
        args += ["--stages", ",".join(addr for _, addr in stages)]
        t0 = time.monotonic()
        rc, out, err, usage = run_measured([a.muster, *args], a.timeout)
        wall = time.monotonic() - t0
        if rc != 0:
            raise BenchError(f"muster generate --stages exited {rc}:\n{err[-2000:]}")
        r = row(last_json(out, "muster generate --stages"), usage, a.prompt_tokens)
    finally:
        stage_rss, stage_cpu = [], 0.0
        for proc, _ in stages:
            proc.send_signal(signal.SIGTERM)
            timer = threading.Timer(30, proc.kill)
            timer.start()
            _, status, ru = os.wait4(proc.pid, 0)
            timer.cancel()
            proc.returncode = os.waitstatus_to_exitcode(status)
            stage_rss.append(ru.ru_maxrss)
            stage_cpu += ru.ru_utime + ru.ru_stime
    # The largest process; cores counts the stages' CPU time (their loading
    # included) with the coordinator's, over the coordinator's wall time.
    r["peak_rss_kib"] = max(stage_rss + [usage["peak_rss_kib"]])
    r["stage_rss_kib"] = stage_rss
    r["cores"] = usage["cores"] + stage_cpu / max(wall, 1e-9)
    return r


# -- the table ---------------------------------------------------------------

def log(msg):
    print(msg, flush=True)


def fmt(v, spec):
    return "n/a" if v is None else format(v, spec)


def print_row(a, wtype, threads, engine, r, load):
    r = r or {}
    rss = r.get("peak_rss_kib")
    log(f"  {wtype:<6} {threads:>3}  {engine:<18} {fmt(r.get('prefill_tok_s'), '13.1f'):>13} "
        f"{fmt(r.get('decode_tok_s'), '12.2f'):>12} {fmt(r.get('ttft_ms'), '9.0f'):>9} "
        f"{fmt(None if rss is None else rss / 1024, '12.0f'):>12} {load:5.2f} "
        f"{fmt(r.get('cores'), '5.2f'):>5}")
    a.rows.append({"type": wtype, "threads": threads, "engine": engine, "load": load, **r})


def ratio(num, den):
    return None if num is None or den is None or den == 0 else num / den


def print_ratios(a, results):
    log("ratios from this run (issue 13's goals in brackets):")
    for (wtype, threads), eng in results.items():
        llama, mu = eng.get("llama.cpp") or {}, eng.get("muster") or {}
        split = {k: v or {} for k, v in eng.items() if k.startswith("muster ")}
        parts = [f"decode muster/llama.cpp {fmt(ratio(mu.get('decode_tok_s'), llama.get('decode_tok_s')), '.2f')} [>= 0.8]",
                 f"prefill muster/llama.cpp {fmt(ratio(mu.get('prefill_tok_s'), llama.get('prefill_tok_s')), '.2f')} [>= 0.5]"]
        for name, r in split.items():
            goal = " [>= 0.9]" if name.startswith("muster 3 ") else ""
            parts.append(f"decode {name.split()[1]}-stage/1-process "
                         f"{fmt(ratio(r.get('decode_tok_s'), mu.get('decode_tok_s')), '.2f')}{goal}")
        log(f"  {wtype:<6} {threads} thread{'s' if threads > 1 else ' '}: " + "; ".join(parts))
    if a.json:
        log(json.dumps({"model": {k: getattr(a, k) for k in TINYLLAMA}, "params": params(a),
                        "prompt_tokens": a.prompt_tokens, "decode_tokens": a.decode_tokens,
                        "rows": a.rows}))


def bench(a):
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = "unknown CPU"
    log(f"LLM generation: random-weight llama, dim {a.dim}, {a.layers} layers, hidden "
        f"{a.hidden}, {a.heads} heads ({a.kv_heads} KV), vocab {a.vocab}: "
        f"{params(a):,} parameters")
    log(f"prompt {a.prompt_tokens} tokens, then {a.decode_tokens} decoded one at a time; "
        f"{os.cpu_count()} CPUs ({cpu}), load average {load_average():.2f} at the start")
    results = {}
    a.rows = []
    for wtype in a.types:
        model = ensure_model(a, wtype)
        log(f"{wtype}: {model} ({model.stat().st_size / 2**30:.2f} GiB)")
        log(f"  {'type':<6} {'thr':>3}  {'engine':<18} {'prefill tok/s':>13} "
            f"{'decode tok/s':>12} {'TTFT ms':>9} {'peak RSS MiB':>12} {'load':>5} "
            f"{'cores':>5}")
        for threads in a.threads:
            eng = results.setdefault((wtype, threads), {})
            runs = []
            if "llamacpp" in a.engines:
                runs.append(("llama.cpp", lambda: run_llamacpp(a, model, threads)))
            if "muster" in a.engines:
                runs.append(("muster", lambda: run_muster(a, model, threads)))
                for s in a.stages:
                    runs.append((f"muster {s} stages",
                                 lambda s=s: run_muster_split(a, model, threads, s)))
            for engine, fn in runs:
                load = load_average()
                eng[engine] = fn()
                print_row(a, wtype, threads, engine, eng[engine], load)
            if "muster" not in a.engines:
                for engine in ["muster"] + [f"muster {s} stages" for s in a.stages]:
                    print_row(a, wtype, threads, engine, None, load_average())
    if any(r.get("decode_tok_s") is None for r in a.rows):
        log("  n/a: `muster generate` is not there yet, or --engines left muster out")
    log("  load: the 1-minute load average when the row started (this machine has "
        f"{os.cpu_count()} CPUs); cores: CPU time the run got / its wall time")
    log("  llama.cpp's RSS includes Node.js (about 45 MB); a split row's is its largest process")
    print_ratios(a, results)


def parse(argv):
    p = argparse.ArgumentParser(description="llama.cpp against muster on one GGUF")
    p.add_argument("--toy", action="store_true", help="a tiny model: a smoke test")
    for k in TINYLLAMA:
        p.add_argument("--" + k.replace("_", "-"), type=int)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--types", help="run the per-type comparison of bench/llm_types.py on "
                   "these llama.cpp-quantized types (without: F32 and Q8_0 as above)")
    p.add_argument("--arch", default="llama", choices=["llama", "qwen3", "phi3"],
                   help="with --types: the architecture of the random model (qwen3: "
                   "Qwen3-1.7B's layer, 16 heads of 128, 8 KV heads, hidden 6144, "
                   "16 layers; the shape options change it)")
    p.add_argument("--head-dim", type=int)
    p.add_argument("--pure", action="store_true",
                   help="with --types: every matrix of the type (llama-quantize --pure)")
    p.add_argument("--repeat", type=int, default=3, help="with --types: runs per figure")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--prompt-tokens", type=int)
    p.add_argument("--decode-tokens", type=int)
    p.add_argument("--stages", default="2,3")
    p.add_argument("--engines", default="llamacpp,muster")
    p.add_argument("--cache")
    p.add_argument("--llamacpp-modules")
    p.add_argument("--muster", default=os.environ.get("MUSTER_BIN", ROOT / "build/bin/muster"))
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    p.add_argument("--json", action="store_true",
                   help="end with one JSON object holding every row")
    a = p.parse_args(argv)
    a.by_type = a.types is not None
    if a.by_type:
        import llm_types
        base = dict(llm_types.SHAPE, prompt_tokens=256, decode_tokens=64)
        if a.arch == "qwen3":  # Qwen3-1.7B's layer (heads of 128), 16 layers: 0.94 B
            base.update(heads=16, kv_heads=8, hidden=6144)
        if a.toy:
            base.update(llm_types.TOY)
    else:
        base = dict(TINYLLAMA, prompt_tokens=256, decode_tokens=64)
        if a.toy:
            base.update(TOY)
        a.types = "f32,q8_0"
    for k, v in base.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.arch == "qwen3" and a.head_dim is None:
        a.head_dim = 128
    a.types = [t for t in a.types.split(",") if t]
    a.threads = [int(t) for t in a.threads.split(",") if t]
    a.stages = [int(s) for s in a.stages.split(",") if s]
    a.engines = [e for e in a.engines.split(",") if e]
    if a.by_type:
        bad = llm_types.check_types(a.types)
        if bad or not a.types or a.repeat < 1:
            p.error(bad or "--types needs a type, --repeat at least 1")
    if (set(a.engines) - {"llamacpp", "muster"} or a.prompt_tokens < 2 or a.decode_tokens < 2
            or min(a.threads + a.stages) < 1):
        p.error("bad --engines, --threads, --stages, or token counts (>= 2)")
    if a.cache is None:
        if a.by_type:
            sys.path.insert(0, str(ROOT / "tests" / "interop"))
            from modelfix import cache_dir
            a.cache = cache_dir() / "llm-bench"
        else:
            a.cache = os.environ.get("MUSTER_BENCH_CACHE", "/var/tmp/muster-bench")
    a.cache = Path(a.cache)
    a.cache.mkdir(parents=True, exist_ok=True)
    a.muster = Path(a.muster)
    return a


def main(argv):
    sys.modules.setdefault("llm", sys.modules[__name__])    # for bench/llm_types.py
    sys.path.insert(0, str(ROOT / "bench"))
    a = parse(argv)
    try:
        if "llamacpp" in a.engines or a.by_type:
            # node-llama-cpp needs Node.js >= 20 (Debian 12 has 18): the
            # machine's node when it is new enough, else the pinned build
            # the tests fetch from the npm registry. --types needs its
            # libllama (the quantizer) even without llama.cpp's rows.
            sys.path.insert(0, str(ROOT / "tests" / "interop"))
            import llamacppfix
            a.node = llamacppfix.node_binary()
            if a.llamacpp_modules is None:
                a.llamacpp_modules = llamacppfix.ensure_llamacpp()
            a.llama_lib = (Path(a.llamacpp_modules) / "@node-llama-cpp" / "linux-x64" / "bins"
                           / "linux-x64")
        if a.by_type:
            import llm_types
            llm_types.bench_types(a)
        else:
            bench(a)
    except Exception as exc:
        if type(exc).__name__ not in ("BenchError", "Unavailable"):
            raise
        print(f"bench llm: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
