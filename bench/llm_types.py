# SPDX-License-Identifier: MIT
"""bench/llm.sh --types T,T,...: muster against llama.cpp per quantized type.

usage: bench/llm.sh --types q4_k_m,q5_k_m,q6_k,iq4_xs,q4_0,q8_0 [--pure]
                    [--repeat 3] [--threads 1,2] [--prompt-tokens 256]
                    [--decode-tokens 64] [shape options] [--toy] [--json]

One run, on this machine:
  * the model: a random-weight llama (default dim 2048, 16 layers, hidden
    5632, 32 heads, 4 KV heads, vocab 32000, untied: 0.84 B parameters)
    written once by tools/llm_convert.py `gen` as an F16 HF checkpoint and
    turned into an F16 GGUF by its `hf-to-gguf`; each type is then made
    from that F16 file by llama.cpp's own quantizer (tests/interop/ggmlref.py's
    quantize(): llama_model_quantize() of node-llama-cpp's libllama). Without --pure a
    type's file holds llama.cpp's usual mixture (a q4_0 file has a Q6_K
    output head, as llama-quantize makes it); with --pure every matrix is
    of the type itself. All of it is cached in <cache>/llm-bench (the
    cache is --cache, else $MUSTER_MODEL_CACHE, else build/model-cache);
  * the prompt: the same token ids for both engines (BOS, then ids drawn
    from the vocabulary with a fixed seed), --prompt-tokens in all, given
    as ids (generate.mjs --tokens, muster generate --prompt-ids), then
    --decode-tokens generated greedily one position at a time, past EOS;
  * each engine, type and thread count: one warm-up run (a short prompt:
    it maps the weights into the page cache; not counted), then --repeat
    runs, alternating the engines so that a change in the machine's load
    hits both; each figure is the median of the runs, with their range;
  * the bandwidth limit: this machine's memory read bandwidth, measured in
    the same run by bench/readbw.c (compiled with $CC or cc; a streaming
    read of a 512 MiB buffer with 32-byte loads, best of 3 passes)
    --repeat times per thread count before the runs, over the weight bytes
    one decode step reads (every tensor of the file but the token
    embedding, of which it reads one row; the KV cache is left out: about
    1% at these lengths), is the decode rate a step bound by memory could
    reach; the table gives it and each engine's decode as a fraction. The
    read is measured again at the end, to show how the machine's load
    moved it. (`muster bench kern`'s figure is not used: its one 8-byte
    sum chains every load on the last add, and on a Zen core it measured
    24.6 GB/s, less than muster's own Q8_0 decode read.)
A type muster refuses (its loader names the tensor type it cannot compute)
prints "muster cannot open this type: <its error>" and the run goes on.
"""

import hashlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import llm

ROOT = llm.ROOT
CONVERT = ROOT / "tools" / "llm_convert.py"
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "interop"))
import ggmlref  # noqa: E402
import llmquant  # noqa: E402

# The llama_ftype names --types takes (llama-quantize's, in lower case).
TYPES = ("f16", "q4_0", "q4_1", "q8_0", "q5_0", "q5_1", "q2_k", "q3_k_s", "q3_k_m", "q3_k_l",
         "q4_k_s", "q4_k_m", "q5_k_s", "q5_k_m", "q6_k", "iq4_nl", "iq4_xs", "bf16")

SHAPE = dict(dim=2048, layers=16, hidden=5632, heads=32, kv_heads=4, vocab=32000)
# K-quants need rows that are a multiple of 256 long.
TOY = dict(dim=256, layers=2, hidden=512, heads=4, kv_heads=2, vocab=512,
           prompt_tokens=16, decode_tokens=8)
WARMUP_TOKENS = 8


def model_stem(a):
    hd = f"-hd{a.head_dim}" if a.head_dim else ""
    return (f"{a.arch}-d{a.dim}-l{a.layers}-h{a.hidden}-a{a.heads}-kv{a.kv_heads}{hd}"
            f"-v{a.vocab}-s{a.seed}")


def run_tool(cmd, what):
    rc, out, err, _ = llm.run_measured(cmd, timeout=3600)
    if rc != 0:
        raise llm.BenchError(f"{what} failed (exit {rc}):\n{err[-2000:]}")
    return out


def ensure_base(a):
    """The F16 GGUF every type is quantized from; made once."""
    path = a.cache / f"{model_stem(a)}-f16.gguf"
    with open(a.cache / f".{path.name}.lock", "w") as lock:
        llm.fcntl.flock(lock, llm.fcntl.LOCK_EX)
        if path.is_file():
            return path
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(dir=a.cache) as tmp:
            hf = Path(tmp) / model_stem(a)
            run_tool([llm.PYTHON, CONVERT, "gen", hf, "--arch", a.arch, "--dim", a.dim,
                      "--layers", a.layers, "--hidden", a.hidden, "--heads", a.heads,
                      "--kv-heads", a.kv_heads, "--vocab", a.vocab, "--dtype", "F16",
                      "--seed", a.seed, *(["--head-dim", a.head_dim] if a.head_dim else [])],
                     "llm_convert.py gen")
            run_tool([llm.PYTHON, CONVERT, "hf-to-gguf", hf, path, "--type", "F16"],
                     "llm_convert.py hf-to-gguf")
        llm.log(f"  generated {path.name} in {time.monotonic() - t0:.0f} s")
        return path


def ensure_type(a, wtype):
    """The file of one type, quantized from the F16 one by llama.cpp."""
    base = ensure_base(a)
    path = a.cache / f"{model_stem(a)}-{wtype}{'-pure' if a.pure else ''}.gguf"
    with open(a.cache / f".{path.name}.lock", "w") as lock:
        llm.fcntl.flock(lock, llm.fcntl.LOCK_EX)
        if path.is_file():
            return path
        t0 = time.monotonic()
        # under a temporary name, so that a failed run leaves nothing
        tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
        try:
            ggmlref.quantize(base, tmp, wtype.upper(), pure=a.pure,
                             threads=os.cpu_count() or 1, bins=a.llama_lib)
            os.replace(tmp, path)
        except ggmlref.RefError as exc:
            raise llm.BenchError(f"llama.cpp's quantizer ({wtype}) failed: {exc}")
        finally:
            tmp.unlink(missing_ok=True)
        llm.log(f"  quantized {path.name} in {time.monotonic() - t0:.0f} s")
        return path


def weights_per_token(tensors):
    """Bytes one decode step reads: every tensor but the token embedding
    (one row of it), unless it is also the head (a tied model)."""
    tied = "output.weight" not in tensors
    return sum(b for n, (_, b) in tensors.items() if tied or n != "token_embd.weight")


def type_mix(tensors):
    mix = {}
    for n, (t, b) in tensors.items():
        if n != "token_embd.weight" or "output.weight" not in tensors:
            mix[t] = mix.get(t, 0) + b
    return ", ".join(f"{t} {b / 1e6:.1f}" for t, b in sorted(mix.items(), key=lambda x: -x[1]))


def prompt_ids(a, bos, count):
    rng = random.Random(a.seed)
    return [bos] + [rng.randrange(3, a.vocab) for _ in range(count - 1)]


# -- the engines ---------------------------------------------------------------

def ctx_for(ids, n):
    return max(len(ids) + n + 1, 64)


def run_llamacpp(a, model, threads, ids, n):
    cmd = [a.node, llm.GENERATE_MJS, "--modules", a.llamacpp_modules, "--model", model,
           "--threads", threads, "--tokens", ",".join(map(str, ids)), "--max-tokens", n,
           "--ctx", ctx_for(ids, n), "--ignore-eos", "--warmup"]
    rc, out, err, usage = llm.run_measured(cmd, a.timeout)
    if rc != 0:
        raise llm.BenchError(f"generate.mjs exited {rc}:\n{err[-2000:]}")
    r = llm.last_json(out, "generate.mjs")
    if r["prompt_tokens"] != len(ids) or r["n_generated"] != n:
        raise llm.BenchError(f"llama.cpp ran {r['prompt_tokens']} prompt tokens and generated "
                             f"{r['n_generated']}, expected {len(ids)} and {n}")
    return llm.row(r, usage)


def run_muster(a, model, threads, ids, n):
    """The run's figures, or a string: muster's error when it failed."""
    cmd = [a.muster, "generate", "--model", model, "--prompt-ids", ",".join(map(str, ids)),
           "--max-tokens", n, "--ctx", ctx_for(ids, n), "--threads", threads,
           "--temperature", 0, "--ignore-eos", "--json"]
    rc, out, err, usage = llm.run_measured(cmd, a.timeout)
    if rc != 0:
        lines = [line for line in err.strip().splitlines() if line.strip()]
        return lines[-1] if lines else f"exit {rc}"
    r = llm.row(llm.last_json(out, "muster generate"), usage, len(ids))
    if r.get("new_tokens", n) != n:
        raise llm.BenchError(f"muster generated {r['new_tokens']} tokens, expected {n}")
    return r


def readbw_binary(a):
    """bench/readbw.c compiled with the machine's cc, cached by its source."""
    src = ROOT / "bench" / "readbw.c"
    digest = hashlib.sha256(src.read_bytes()).hexdigest()[:12]
    binary = a.cache / f"readbw-{digest}"
    if not binary.is_file():
        cc = os.environ.get("CC", "cc")
        tmp = f"{binary}.tmp{os.getpid()}"
        run_tool([cc, "-std=c11", "-D_GNU_SOURCE", "-O2", "-pthread", src, "-o", tmp],
                 f"{cc} bench/readbw.c")
        os.replace(tmp, binary)
    return binary


def bandwidth(a, samples):
    """Appends to samples[threads] --repeat GB/s figures of bench/readbw.c
    (512 MiB, 16 times the largest L3 of these machines; best of 3 passes)."""
    cmd = [readbw_binary(a), 512, 3, *a.threads]
    for _ in range(a.repeat):
        text = run_tool(cmd, "bench/readbw.c")
        got = dict(line.split()[:2] for line in text.splitlines())
        for t in a.threads:
            samples.setdefault(t, []).append(float(got[str(t)]))
    return samples


# -- the table -----------------------------------------------------------------

def stats(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


def cell(s, width=22):
    if s is None:
        return f"{'-':>{width}}"
    return f"{s['median']:.2f} [{s['min']:.2f}-{s['max']:.2f}]".rjust(width)


def ratio(num, den):
    if num is None or den is None or den["median"] == 0:
        return None
    return num["median"] / den["median"]


def measure(a, model, ids, warm):
    """({threads: {engine: figures}}, muster's error when its warm-up run
    failed, else None) for one type's file."""
    result = {}
    refused = None
    for threads in a.threads:
        engines = [e for e in ("muster", "llamacpp") if e in a.engines]
        if refused is not None and "muster" in engines:
            engines.remove("muster")
        samples = {e: [] for e in engines}
        load = llm.load_average()
        for e in list(engines):
            if e == "llamacpp":
                run_llamacpp(a, model, threads, warm, 2)
                continue
            r = run_muster(a, model, threads, warm, 2)
            if isinstance(r, str):
                refused = r
                engines.remove(e)
                del samples[e]
        for _ in range(a.repeat):
            for e in engines:
                fn = run_llamacpp if e == "llamacpp" else run_muster
                r = fn(a, model, threads, ids, a.decode_tokens)
                if isinstance(r, str):
                    raise llm.BenchError(f"muster failed after its warm-up run: {r}")
                samples[e].append(r)
        result[threads] = {"load": load, "refused": refused}
        for e, rs in samples.items():
            result[threads][e] = {
                "decode": stats([r["decode_tok_s"] for r in rs]),
                "prefill": stats([r["prefill_tok_s"] for r in rs]),
                "cores": stats([r["cores"] for r in rs]),
                "peak_rss_kib": max(r["peak_rss_kib"] for r in rs),
                "runs": rs}
    return result, refused


def print_type(a, wtype, model, tensors, res, refused, bw):
    per_token = weights_per_token(tensors)
    mix = "llama.cpp's mixture" if not a.pure else "pure"
    llm.log(f"{wtype} ({mix}): {model.name}, {model.stat().st_size / 2**30:.2f} GiB; "
            f"weights read per token {per_token / 1e6:.1f} MB ({type_mix(tensors)} MB)")
    if refused is not None:
        what = "cannot open this type" if "cannot open the model" in refused else "failed"
        llm.log(f"  muster {what}: {refused}")
    llm.log(f"  {'thr':>3} {'decode muster':>22} {'decode llama.cpp':>22} {'ratio':>5} "
            f"{'prefill muster':>22} {'prefill llama.cpp':>22} {'ratio':>5} "
            f"{'BW limit':>8} {'mu/lim':>6} {'lc/lim':>6} {'load':>5}")
    rows = []
    for threads, r in res.items():
        mu, lc = r.get("muster", {}), r.get("llamacpp", {})
        limit = statistics.median(bw[threads]) * 1e9 / per_token
        frac = {k: None if e.get("decode") is None else e["decode"]["median"] / limit
                for k, e in (("muster", mu), ("llamacpp", lc))}
        llm.log(f"  {threads:>3} {cell(mu.get('decode'))} {cell(lc.get('decode'))} "
                f"{llm.fmt(ratio(mu.get('decode'), lc.get('decode')), '5.2f'):>5} "
                f"{cell(mu.get('prefill'))} {cell(lc.get('prefill'))} "
                f"{llm.fmt(ratio(mu.get('prefill'), lc.get('prefill')), '5.2f'):>5} "
                f"{limit:8.1f} {llm.fmt(frac['muster'], '6.2f'):>6} "
                f"{llm.fmt(frac['llamacpp'], '6.2f'):>6} {r['load']:5.2f}")
        for e, fig in (("muster", mu), ("llama.cpp", lc)):
            if fig:
                rows.append({"type": wtype, "pure": a.pure, "threads": threads, "engine": e,
                             "load": r["load"], "weights_per_token": per_token,
                             "bandwidth_limit_tok_s": limit,
                             "decode_tok_s": fig["decode"], "prefill_tok_s": fig["prefill"],
                             "cores": fig["cores"], "peak_rss_kib": fig["peak_rss_kib"],
                             "decode_fraction_of_limit": frac["muster" if e == "muster"
                                                              else "llamacpp"]})
        if refused is not None:
            rows.append({"type": wtype, "pure": a.pure, "threads": threads, "engine": "muster",
                         "refused": refused})
    return rows


def bench_types(a):
    params = llm.params(a) - a.vocab * a.dim    # the token embedding is not computed with
    llm.log(f"LLM per type: random-weight {a.arch}, dim {a.dim}, {a.layers} layers, hidden "
            f"{a.hidden}, {a.heads} heads ({a.kv_heads} KV), vocab {a.vocab}: "
            f"{llm.params(a):,} parameters ({params:,} but the embedding)")
    llm.log(f"prompt {a.prompt_tokens} tokens (the same ids for both), then {a.decode_tokens} "
            f"decoded one at a time; median [range] of {a.repeat} runs after a warm-up; "
            f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
            " at the start")
    models = [(w, ensure_type(a, w)) for w in a.types]
    bw = bandwidth(a, {})
    bw_start = {t: list(v) for t, v in bw.items()}
    llm.log("memory read bandwidth at the start (bench/readbw.c, GB/s): " + bw_text(bw))
    rows = []
    for wtype, model in models:
        meta, tensors = llmquant.header(model)
        bos = int(meta.get("tokenizer.ggml.bos_token_id", 1))
        ids = prompt_ids(a, bos, a.prompt_tokens)
        res, refused = measure(a, model, ids, ids[:WARMUP_TOKENS])
        rows += print_type(a, wtype, model, tensors, res, refused, bw_start)
    llm.log("  decode, prefill: tok/s, median [min-max]; ratio: muster/llama.cpp of the "
            "medians; BW limit: bandwidth / weights read per token (tok/s); mu/lim, lc/lim: "
            "each engine's decode over it")
    bandwidth(a, bw)
    llm.log("memory read bandwidth, the start's and the end's samples (GB/s; the limits use "
            "the start's): " + bw_text(bw))
    llm.log(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if a.json:
        llm.log(json.dumps({"model": {k: getattr(a, k) for k in SHAPE}, "params": llm.params(a),
                            "prompt_tokens": a.prompt_tokens, "decode_tokens": a.decode_tokens,
                            "repeat": a.repeat,
                            "bandwidth_gb_s": {str(t): v for t, v in bw_start.items()},
                            "bandwidth_gb_s_with_end": {str(t): v for t, v in bw.items()},
                            "rows": rows}))


def bw_text(bw):
    return "; ".join(f"{t} thread{'s' if t > 1 else ''} {cell(stats(v), 0).strip()}"
                     for t, v in bw.items())


def check_types(types):
    bad = [t for t in types if t not in TYPES]
    return f"unknown --types {','.join(bad)} (known: {','.join(TYPES)})" if bad else None
