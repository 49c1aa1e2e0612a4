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

ROOT = pathlib.Path(__file__).resolve().parents[2]


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
        ("device", "device-info"), ("device md", "md-send")]), out
    assert all(float(idle) > 0 and float(peak) > 0 for _, _, idle, peak, *_ in rows), out
