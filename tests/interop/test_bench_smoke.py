"""The benchmarks run, at toy sizes, and print what they promise.

Figures are never asserted here (speed is measured by `make bench`, not in
tests); what is asserted is that each benchmark completes against the real
thing and reports every figure, so a broken benchmark is found by
`make check` rather than the next time someone wants numbers. The store's
benchmark has its own tests (test_store_bench.py)."""

import json
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "interop"))
from llamacppfix import llamacpp  # noqa: E402,F401


def run(cmd, timeout=120, env=None):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert proc.returncode == 0, (cmd, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc.stdout


def figure(text, label):
    """The first number after `label` on its line."""
    m = re.search(re.escape(label) + r"\s+([0-9.]+)", text)
    assert m, f"no figure for {label!r} in:\n{text}"
    return float(m.group(1))


def test_bench_pipeline(muster_bin):
    out = run([muster_bin, "bench", "pipeline", "--frame-mib", 2, "--rounds", 2,
               "--stages", 2, "--width", 64, "--layers-per-stage", 1, "--batch", 2,
               "--forwards", 8, "--exec-width", 512, "--exec-layers", 2,
               "--exec-batch", 16])
    for label in ("rlx frame (muster)", "raw send/recv", "raw into new memory",
                  "ratio frame/raw", "ratio frame/raw-new", "muster executor",
                  "OpenBLAS directly", "ratio executor/direct"):
        assert figure(out, label) > 0, label
    rows = re.findall(r"^\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+(\d+)%", out, re.M)
    in_flight = [int(r[0]) for r in rows]
    assert in_flight[0] == 1 and len(in_flight) >= 2 and in_flight == sorted(in_flight), out
    assert all(float(r[1]) > 0 and float(r[2]) > 0 for r in rows), out


def test_bench_tracker(muster_bin, muster_tracker):
    tracker = muster_tracker()
    out = run([muster_bin, "bench", "tracker", "--target", f"127.0.0.1:{tracker.port}",
               "--duration", 1, "--servers", 2, "--clients", 2, "--scale", 50,
               "--pid", tracker.proc.pid, "--json"])
    phases = {p["phase"]: p for p in map(json.loads, out.splitlines())}
    assert phases["scale"]["connections"] == 50, phases
    assert phases["scale"]["rss_after_kib"] > 0, phases
    cycle = phases["cycle"]
    assert cycle["grants"] > 0 and cycle["p50_ms"] > 0, cycle
    assert cycle["p99_ms"] >= cycle["p50_ms"], cycle


def test_bench_md_p2p(muster_bin):
    out = run([muster_bin, "bench", "md", "--backend", "p2p", "--blob-bytes", 4096,
               "--fetches", 50, "--json"])
    r = json.loads(out.splitlines()[-1])
    assert (r["backend"], r["blob_bytes"], r["fetches"]) == ("p2p", 4096, 50), r
    assert r["fetches_per_s"] > 0 and 0 < r["p50_ms"] <= r["p99_ms"], r


def test_bench_cluster_script(muster_bin):
    """bench/cluster.sh end to end: a tracker, three servers and a table of
    forwards/s for 1-3 devices, then the one-process yardstick."""
    env = dict(os.environ, MUSTER_BIN=str(muster_bin))
    out = run([ROOT / "bench" / "cluster.sh", 3], timeout=300, env=env)
    rows = re.findall(r"^\s+([123])\s+([13])\s+([0-9.]+)\s+([0-9.]+)$", out, re.M)
    assert sorted((d, m) for d, m, _, _ in rows) == [
        (d, m) for d in "123" for m in "13"], out
    assert all(float(fps) > 0 for _, _, fps, _ in rows), out
    assert "in one process" in out and "forwards in" in out, out



def test_bench_llm_script_llamacpp_side(llamacpp, tmp_path):
    """bench/llm.sh at toy size (a 140k-parameter random llama at F32 and
    Q8_0, a 16-token prompt, 8 decoded): llama.cpp's rows for 1 and 2
    threads with every figure, the muster rows as n/a. Only llama.cpp's side
    runs here until `muster generate` lands."""
    out = run([ROOT / "bench" / "llm.sh", "--toy", "--engines", "llamacpp", "--json",
               "--cache", tmp_path, "--llamacpp-modules", llamacpp.modules], timeout=300)
    result = json.loads(out.splitlines()[-1])
    assert result["prompt_tokens"] == 16 and result["decode_tokens"] == 8, result
    rows = [r for r in result["rows"] if r["engine"] == "llama.cpp"]
    assert sorted((r["type"], r["threads"]) for r in rows) == [
        ("f32", 1), ("f32", 2), ("q8_0", 1), ("q8_0", 2)], rows
    for r in rows:
        assert r["prompt_tokens"] == 16, r
        assert min(r["prefill_tok_s"], r["decode_tok_s"], r["ttft_ms"], r["peak_rss_kib"]) > 0, r
    table = re.findall(r"^\s+(f32|q8_0)\s+([12])\s+(llama\.cpp|muster(?: [23] stages)?)\s+(\S+)"
                       r"\s+(\S+)\s+(\S+)\s+(\S+)", out, re.M)
    assert len(table) == 16, out
    for wtype, threads, engine, *figures in table:
        if engine == "llama.cpp":
            assert all(float(f) >= 0 for f in figures), (wtype, threads, figures)
        else:
            assert figures == ["n/a"] * 4, (wtype, threads, engine, figures)
    assert "ratios from this run" in out, out


def test_bench_llm_script_types(muster_bin, llamacpp, tmp_path):
    """bench/llm.sh --types at toy size: the F16 model made by
    tools/llm_convert.py, q4_0 and q8_0 made from it by llama.cpp's own
    quantizer, both engines at 1 and 2 threads, 3 runs each after a
    warm-up. Every type gets its row per thread count with llama.cpp's
    median and range and the bandwidth limit; muster either has figures
    too or says it cannot open the type, and it must open Q8_0 (a
    llama.cpp-made q4_0 file has a Q6_K output head)."""
    env = dict(os.environ, MUSTER_BIN=str(muster_bin))
    out = run([ROOT / "bench" / "llm.sh", "--toy", "--types", "q4_0,q8_0", "--json",
               "--cache", tmp_path, "--llamacpp-modules", llamacpp.modules], timeout=120,
              env=env)
    bw = re.search(r"^memory read bandwidth at the start \(bench/readbw.c, GB/s\): 1 thread "
                   r"([0-9.]+) \[[0-9.]+-[0-9.]+\]; 2 threads ([0-9.]+) ", out, re.M)
    assert bw and float(bw.group(1)) > 0 and float(bw.group(2)) > 0, out
    result = json.loads(out.splitlines()[-1])
    assert result["repeat"] == 3 and result["prompt_tokens"] == 16, result
    rows = {(r["type"], r["threads"], r["engine"]): r for r in result["rows"]}
    for wtype in ("q4_0", "q8_0"):
        m = re.search(rf"^{wtype} \(llama.cpp's mixture\): .*weights read per token "
                      rf"([0-9.]+) MB", out, re.M)
        assert m and float(m.group(1)) > 0, out
        refused = re.search(rf"^{wtype} .*\n  muster cannot open this type: (.+)$", out, re.M)
        for threads in (1, 2):
            lc = rows[(wtype, threads, "llama.cpp")]
            for fig in ("decode_tok_s", "prefill_tok_s"):
                s = lc[fig]
                assert s["n"] == 3 and 0 < s["min"] <= s["median"] <= s["max"], (wtype, lc)
            assert lc["bandwidth_limit_tok_s"] > 0 and lc["decode_fraction_of_limit"] > 0, lc
            mu = rows[(wtype, threads, "muster")]
            if refused:
                assert mu["refused"] == refused.group(1) and "cannot open" in mu["refused"], mu
            else:
                assert mu["decode_tok_s"]["n"] == 3 and mu["decode_tok_s"]["min"] > 0, mu
                assert mu["prefill_tok_s"]["min"] > 0, mu
    assert "refused" not in rows[("q8_0", 1, "muster")], out
    table = re.findall(r"^\s+([12]) +(\S+(?: \[\S+\])?) +([0-9.]+ \[\S+\]) +(\S+) ", out,
                       re.M)
    assert len(table) == 4, out


def test_bench_kern(muster_bin):
    out = run([muster_bin, "bench", "kern", "--shape", "256x256", "--prefill", 5,
               "--reps", 1, "--set-mib", 1])
    assert re.search(r"^kern: (avx2|avx2-vnni|portable) kernels", out, re.M), out
    assert figure(out, "1 thread") > 0 and figure(out, "2 threads") > 0, out
    for mode in ("decode", "prefill"):
        for th in (1, 2):
            blas = "sgemv" if mode == "decode" else "sgemm"
            assert re.search(rf"^\s+{mode}\s+256x256\s+custom\s+{th} BLAS {blas}\s+[0-9.]+", out,
                             re.M), (mode, th, out)
            for t in ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q6_K", "IQ4_XS"):
                m = re.search(rf"^\s+{mode}\s+256x256\s+custom\s+{th} {t}\s+(.*)$", out, re.M)
                assert m, (mode, th, t, out)
                figs = [float(v) for v in m.group(1).split()]
                # ms, GFLOP/s, GB/s, ratio to OpenBLAS (+ cpu ms and its ratio on one
                # thread); at this toy size the rates may round to 0.0
                assert len(figs) == (6 if th == 1 else 4) and figs[0] > 0, m.group(0)


def test_bench_hostile_script(muster_bin):
    """bench/hostile.sh end to end at 1 s per flood: a row per server and
    flood with its idle and peak RSS, and whether another client was
    served meanwhile."""
    env = dict(os.environ, MUSTER_BIN=str(muster_bin))
    out = run([ROOT / "bench" / "hostile.sh", 1], timeout=300, env=env)
    rows = re.findall(r"^\s+(\S+(?: \S+)?)\s+([a-z-]+)\s+([0-9.]+) MiB\s+([0-9.]+) MiB\s+"
                      r"(-?[0-9.]+) MiB\s+(served \d+/\d+)", out, re.M)
    assert sorted((s, f) for s, f, *_ in rows) == sorted([
        ("tracker", "tracker-ping"), ("store", "store-ping"),
        ("store", "store-watch-fanout"), ("store", "store-watch-keys"),
        ("stage", "stage-info"), ("stage", "stage-forward"), ("md P2P", "md-send"),
        ("device", "device-info"), ("device md", "md-send"),
        ("stage", "stage-declare"), ("stage", "stage-idle"), ("llm stage", "stage-seqs"),
        ("metrics", "metrics-idle"), ("device", "device-session"),
            ("serve", "serve-idle-holders"), ("serve", "serve-big-body")]), out
    assert all(float(idle) > 0 and float(peak) > 0 for _, _, idle, peak, *_ in rows), out
