# SPDX-License-Identifier: MIT
"""`muster bench store` against `muster store`, briefly: it must end on
time and print its figures (the benchmark itself is bench/store.sh, not
run by the test suite)."""

import json
import subprocess

import pytest

from storefix import muster_store, store  # noqa: F401 (fixtures)
from storepeer import store_binary

BENCH_TIMEOUT = 60.0


def bench(store, *args):
    cmd = [str(store_binary()), "bench", "store", "--target", store.address,
           "--json", *[str(a) for a in args]]
    try:
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True,
                              timeout=BENCH_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{cmd} did not end within {BENCH_TIMEOUT} s")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("dialect", ["v1", "v2"])
@pytest.mark.parametrize("mix,ops", [("set", ["set"]),
                                     ("set,set,add", ["set", "add"])])
def test_mix_ends_and_reports(store, dialect, mix, ops):
    """A mix of sets only (no reply to wait for) used to recurse forever."""
    out = bench(store, "--mix", mix, "--duration", 0.5, "--clients", 3,
                "--dialect", dialect)
    assert out["ops_per_s"] > 0
    for op in ops:
        assert out[f"{op}_p50_ms"] <= out[f"{op}_p99_ms"]
    assert "get_p50_ms" not in out


@pytest.mark.parametrize("dialect", ["v1", "v2"])
def test_rendezvous_releases_everyone(store, dialect):
    """More clients than the connect window (256): all ADD, the last one
    sets the barrier, all are released."""
    out = bench(store, "--rendezvous", 600, "--dialect", dialect)
    assert out["clients"] == 600
    assert 0 < out["join_s"] <= out["total_s"]
    with store.client("v2", raw_keys=True) as c:
        keys = c.list_keys()
        counts = [k for k in keys if k.endswith(b"/count")]
        assert len(counts) == 1, keys
        assert c.get_only(counts[0]) == b"600"   # each client ADDed once
        assert c.get_only(counts[0][:-len(b"count")] + b"go") == b"1"
