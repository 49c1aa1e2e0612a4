# SPDX-License-Identifier: MIT
"""`muster store` and muster's store client against the real peer, Debian's
torch 1.13 (`torch.distributed.TCPStore`, the v1 dialect of
../shared/spec/tcpstore.md).

* torch clients (`is_master=False`) run every operation of their 1.13 API
  against `muster store`, alone and concurrently (threads, processes), with
  NUL bytes, empty and 64 MiB values and 10,000 keys;
* two processes rendezvous through it with gloo (`init_process_group(
  store=...)`), all_reduce and barrier;
* muster's client (Python binding `muster.StoreClient` and `muster
  store-cli`) runs one operation list against torch's own server and against
  `muster store`; the results must be equal. torch's client does the same
  against both servers.

Everything is bounded: clients have explicit timeouts, subprocesses 120 s."""

import datetime
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from storefix import (finish, muster_store, start_python,  # noqa: F401
                      store, torch_dist, torch_server)
from storepeer import HOST, WaitTimeout, store_binary

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from muster import MusterError, StoreClient, StoreServer  # noqa: E402

TIMEOUT = 30.0                         # torch client timeouts, seconds
MIB = 1 << 20


def td(seconds):
    return datetime.timedelta(seconds=seconds)


def tcpstore(dist, port, timeout=TIMEOUT, **kw):
    """torch's client; never the master (that would start torch's server)."""
    return dist.TCPStore(HOST, port, is_master=False, timeout=td(timeout),
                         **kw)


def join_all(threads, timeout=60.0):
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    hung = [t.name for t in threads if t.is_alive()]
    assert not hung, f"threads still running after {timeout} s: {hung}"


# ---- torch 1.13 clients against muster store ----

def test_torch_client_every_operation(store, torch_dist):
    st = tcpstore(torch_dist, store.port)
    assert st.num_keys() == 0

    st.set("a", b"1")
    assert st.get("a") == b"1"
    st.set("a", "text")                        # str values are UTF-8
    assert st.get("a") == b"text"
    nul = b"\x00v\x00w\x00"
    st.set("nul\x00key", nul)                  # NUL in keys and values
    assert st.get("nul\x00key") == nul

    assert st.add("cnt", 5) == 5
    assert st.add("cnt", -7) == -2
    assert st.add("cnt", 0) == -2
    assert st.get("cnt") == b"-2"
    st.set("num", b"12abc")
    assert st.add("num", 1) == 13

    assert st.compare_set("cs_missing", "x", "y") == b"x"
    assert st.compare_set("cs_new", "", "y") == b"y"
    assert st.compare_set("cs_new", "y", "z") == b"z"
    assert st.compare_set("cs_new", "nope", "w") == b"z"
    assert st.get("cs_new") == b"z"
    st.set("cs_empty", b"")
    assert st.compare_set("cs_empty", "", "full") == b"full"

    st.wait(["a", "cnt"])
    st.wait(["a", "nul\x00key"], td(5))
    # a, nul\0key, cnt, num, cs_new, cs_empty (cs_missing was not created)
    assert st.num_keys() == 6

    assert st.delete_key("a") is True
    assert st.delete_key("a") is False
    assert st.num_keys() == 5
    st.set("a", b"back")
    assert st.get("a") == b"back"

    # wait with a timeout on a missing key: 1.13 raises and its connection
    # is then out of sync (spec section 6), so it is dropped afterwards
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="[Tt]imeout"):
        st.wait(["never"], td(0.5))
    assert time.monotonic() - t0 < 10
    del st

    st = tcpstore(torch_dist, store.port)
    st.set("never", b"late")
    assert st.get("never") == b"late"
    assert st.num_keys() == 7


def test_torch_set_timeout(store, torch_dist):
    st = tcpstore(torch_dist, store.port)
    st.set_timeout(td(0.5))
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="[Tt]imeout"):
        st.get("missing")                       # WAIT with the store timeout
    assert time.monotonic() - t0 < 10
    del st
    st = tcpstore(torch_dist, store.port, timeout=1)   # whole seconds only
    with pytest.raises(RuntimeError, match="[Tt]imeout"):
        st.wait(["missing"])
    del st
    st = tcpstore(torch_dist, store.port)
    st.set_timeout(td(20))
    st.set("missing", b"now")
    assert st.get("missing") == b"now"


def test_torch_empty_value(store, torch_server, torch_dist):
    """Recorded, not asserted: torch 1.13's server corks an empty GET reply
    (~200 ms, spec section 8); muster's should answer at once."""
    timings = {}
    for name, port in (("muster", store.port), ("torch", torch_server().port)):
        st = tcpstore(torch_dist, port)
        st.set("empty", b"")
        st.get("empty")
        t0 = time.monotonic()
        for _ in range(5):
            assert st.get("empty") == b""
        timings[name] = (time.monotonic() - t0) / 5
        assert st.compare_set("empty", "", "x") == b"x"
        assert st.num_keys() == 1
    print(f"\nGET of an empty value: muster store {timings['muster']*1e3:.2f} "
          f"ms, torch 1.13 server {timings['torch']*1e3:.2f} ms")


def test_torch_world_size_counts_workers_like_torch(store, torch_server,
                                                    torch_dist):
    """world_size makes clients ADD the unprefixed "init/" (spec section 7);
    it is a real key, counted by num_keys. Same result on both servers."""
    results = {}
    for name, port in (("muster", store.port), ("torch", torch_server().port)):
        clients = [tcpstore(torch_dist, port, world_size=3)
                   for _ in range(3)]
        clients.append(tcpstore(torch_dist, port, world_size=3,
                                wait_for_workers=False))
        clients.append(tcpstore(torch_dist, port))
        with StoreClient(HOST, port, raw_keys=True, timeout=10) as raw:
            results[name] = (clients[0].num_keys(), raw.get("init/"),
                             raw.check(["/init/"]))
        del clients
    assert results["muster"] == results["torch"] == (1, b"3", False)


def test_torch_waits_released_by_other_clients(store, torch_dist):
    waiters = [tcpstore(torch_dist, store.port) for _ in range(6)]
    got, errors = {}, []

    def waiter(i):
        try:
            if i % 2:
                waiters[i].wait(["go", f"go{i}"], td(30))
                got[i] = waiters[i].get(f"go{i}")
            else:
                got[i] = waiters[i].get("go")    # WAIT then GET
        except Exception as exc:
            errors.append((i, exc))

    threads = [threading.Thread(target=waiter, args=(i,), name=f"waiter{i}")
               for i in range(6)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    assert not got and not errors, "released before anything was set"
    setter = tcpstore(torch_dist, store.port)
    for i in range(1, 6, 2):
        setter.set(f"go{i}", f"v{i}")
    time.sleep(0.2)
    assert not got, "released before every awaited key was set"
    setter.set("go", b"now")
    join_all(threads)
    assert not errors, errors
    assert got == {0: b"now", 1: b"v1", 2: b"now", 3: b"v3", 4: b"now",
                   5: b"v5"}


def test_torch_concurrent_threads(store, torch_dist):
    """One torch client per thread. compare_set stays out of the threads:
    torch 1.13's own client mixes up compare_set results between
    TCPStore objects used from several threads, against torch's own server
    too (seen here); the processes test covers it."""
    n_threads, rounds = 8, 150
    errors = []

    def work(i):
        try:
            st = tcpstore(torch_dist, store.port)
            for r in range(rounds):
                value = f"{i}:{r}".encode() + b"\x00" * (r % 3)
                st.set(f"t{i}", value)
                assert st.get(f"t{i}") == value
                st.add("shared", 1)
                if r % 50 == 0:
                    assert st.num_keys() >= 2
            assert st.delete_key(f"t{i}")
            st.set(f"done{i}", b"")
        except Exception as exc:
            errors.append((i, exc))

    threads = [threading.Thread(target=work, args=(i,), name=f"t{i}")
               for i in range(n_threads)]
    for t in threads:
        t.start()
    join_all(threads, 120)
    assert not errors, errors
    st = tcpstore(torch_dist, store.port)
    st.wait([f"done{i}" for i in range(n_threads)], td(10))
    assert st.add("shared", 0) == n_threads * rounds
    assert st.num_keys() == n_threads + 1


PROCESS_WORKER = r"""
import datetime, sys
import torch.distributed as dist
host, port, rank, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
st = dist.TCPStore(host, port, is_master=False, timeout=datetime.timedelta(seconds=60))
st.set(f"proc/{rank}", f"hello from {rank}".encode() + b"\0")
st.add("ready", 1)
st.wait(["go"])                       # released by the test process
won = st.compare_set("owner", "", f"rank{rank}") == f"rank{rank}".encode()
if won:
    st.add("winners", 1)
for i in range(200):
    st.add("total", 1)
    st.set(f"proc/{rank}/last", str(i))
    last = str(i - 1) if i else ""
    assert st.compare_set(f"proc/{rank}/cs", last, str(i)) == str(i).encode()
peer = (rank + 1) % n
print(repr(st.get(f"proc/{peer}")), st.get(f"proc/{rank}/last").decode(), flush=True)
"""


def test_torch_concurrent_processes(store, torch_dist):
    n = 4
    procs = [start_python(PROCESS_WORKER, HOST, store.port, r, n)
             for r in range(n)]
    try:
        st = tcpstore(torch_dist, store.port)
        deadline = time.monotonic() + 60
        while st.add("ready", 0) < n:
            assert time.monotonic() < deadline, "workers never got ready"
            assert all(p.poll() is None for p in procs), "a worker died"
            time.sleep(0.05)
        time.sleep(0.2)
        assert st.add("total", 0) == 0, "a worker passed WAIT early"
        st.set("go", b"")
    finally:
        outs = finish(procs)
    for r, out in enumerate(outs):
        assert out.rsplit(" ", 1) == [
            repr(f"hello from {(r + 1) % n}".encode() + b"\0"), "199\n"]
    assert st.add("total", 0) == 200 * n
    assert st.add("winners", 0) == 1          # one compare_set won the race
    assert st.get("owner") in [f"rank{r}".encode() for r in range(n)]
    # proc/<r>, proc/<r>/last, proc/<r>/cs, ready, go, owner, winners, total
    assert st.num_keys() == 3 * n + 5


def test_torch_64mib_value(store, torch_dist):
    big = bytes(range(256)) * (64 * MIB // 256)
    big = big[:-3] + b"\x00\xff\x00"
    writer = tcpstore(torch_dist, store.port, timeout=60)
    reader = tcpstore(torch_dist, store.port, timeout=60)
    t0 = time.monotonic()
    writer.set("big", big)
    assert reader.get("big") == big
    print(f"\n64 MiB set+get through muster store: "
          f"{time.monotonic() - t0:.2f} s")
    assert writer.compare_set("big", big, b"small") == b"small"
    assert reader.get("big") == b"small"


def test_torch_many_keys(store, torch_dist):
    n = 10_000
    st = tcpstore(torch_dist, store.port)
    for i in range(n):
        st.set(f"key/{i}", str(i * 7))
    assert st.num_keys() == n
    for i in range(0, n, 97):
        assert st.get(f"key/{i}") == str(i * 7).encode()
    with StoreClient(HOST, store.port, timeout=30) as c:
        assert c.dialect == "v2"
        keys = [f"key/{i}" for i in range(n)]
        assert c.multi_get(keys) == [str(i * 7).encode() for i in range(n)]
        assert c.check(keys)
    st.wait([f"key/{i}" for i in range(n)], td(10))
    for i in range(0, n, 2):
        assert st.delete_key(f"key/{i}")
    assert st.num_keys() == n // 2


# ---- a real job: gloo rendezvous through muster store ----

GLOO_WORKER = r"""
import datetime, sys
import torch
import torch.distributed as dist
host, port, rank = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
timeout = datetime.timedelta(seconds=60)
store = dist.TCPStore(host, port, is_master=False, timeout=timeout)
dist.init_process_group(backend="gloo", store=store, rank=rank, world_size=2,
                        timeout=timeout)
t = torch.tensor([float(rank + 1), 10.0 * (rank + 1)])
dist.all_reduce(t)
dist.barrier()
objs = [None, None]
dist.all_gather_object(objs, {"rank": rank})
dist.barrier()
print("RESULT", t.tolist(), objs, flush=True)
dist.destroy_process_group()
"""


def test_gloo_all_reduce_and_barrier(store, torch_dist):
    procs = [start_python(GLOO_WORKER, HOST, store.port, r) for r in (0, 1)]
    outs = finish(procs)
    for out in outs:
        assert "RESULT [3.0, 30.0] [{'rank': 0}, {'rank': 1}]" in out, out
    log = store.log_text()
    # 2 connections per rank; the callback one never sends a byte
    assert log.count("New connection from") >= 4
    assert log.count("speaks v1 (torch 1.x)") >= 2
    # the store-based barrier counter of spec section 7
    with StoreClient(HOST, store.port, timeout=10) as c:
        assert c.add("store_based_barrier_key:1", 0) == 2


# ---- muster's client: same results against torch's server and muster's ----

SHARED_OPS = [
    ("num_keys",),
    ("set", "a", b"1"),
    ("get", "a"),
    ("set", "a", b"2"),
    ("get", "a"),
    ("set", "nul", b"v\x00w\x00"),
    ("get", "nul"),
    ("set", "empty", b""),
    ("get", "empty"),
    ("check", ["a", "nul", "empty"]),
    ("check", ["a", "missing"]),
    ("check", []),
    ("add", "cnt", 5),
    ("add", "cnt", -7),
    ("add", "cnt", 0),
    ("get", "cnt"),
    ("add", "fresh", 0),
    ("add", "a", 40),
    ("get", "a"),
    ("set", "txt", b"12abc"),
    ("add", "txt", 1),
    ("add", "big", 2**63 - 1),
    ("add", "big", 1),
    ("compare_set", "cs1", b"x", b"y"),
    ("check", ["cs1"]),
    ("compare_set", "cs2", b"", b"y"),
    ("get", "cs2"),
    ("compare_set", "cs2", b"y", b"z"),
    ("compare_set", "cs2", b"nope", b"w"),
    ("compare_set", "cs2", b"", b"w"),
    ("get", "cs2"),
    ("compare_set", "empty", b"", b"filled"),
    ("get", "empty"),
    ("wait", ["a", "cnt"]),
    ("wait", ["a"], 2.0),
    ("num_keys",),
    ("delete_key", "a"),
    ("delete_key", "a"),
    ("check", ["a"]),
    ("num_keys",),
    ("set", "a", b"again"),
    ("get", "a"),
    ("multi_set", ["m1", "m2"], [b"x", b""]),
    ("multi_get", ["m1", "m2", "a"]),
    ("num_keys",),
    ("wait", ["never"], 0.3),
    ("num_keys",),
    ("set", "never", b"late"),
    ("get", "never"),
    ("add", "cnt", 1),
    ("num_keys",),
]


def run_ops(client, ops, reconnect=None):
    """Each op's result, or "timeout" / an error marker. A torch 1.13
    client is replaced (`reconnect`) after a wait timeout, as spec
    section 6 says it must be."""
    results = []
    for name, *args in ops:
        try:
            if name == "wait" and len(args) == 2:
                wait_arg = args[1] if reconnect is None else td(args[1])
                client.wait(args[0], wait_arg)
                results.append(None)
            else:
                value = getattr(client, name)(*args)
                results.append(bool(value) if name == "delete_key" else value)
        except (TimeoutError, WaitTimeout):
            results.append("timeout")
        except RuntimeError as exc:
            results.append("timeout" if "imeout" in str(exc)
                           else f"error {exc}")
            if reconnect is not None:
                client = reconnect()
        except MusterError as exc:
            results.append(f"error {exc}")
    return results


EXPECTED_SHARED = [
    0, None, b"1", None, b"2", None, b"v\x00w\x00", None, b"", True, False,
    True, 5, -2, -2, b"-2", 0, 42, b"42", None, 13, 2**63 - 1, -2**63,
    b"x", False, b"y", b"y", b"z", b"z", b"z", b"z", b"filled", b"filled",
    None, None, 8, True, False, False, 7, None, b"again", None,
    [b"x", b"", b"again"], 10, "timeout", 10, None, b"late", -1, 11,
]


@pytest.mark.parametrize("dialect", ["auto", "v1", "v2"])
def test_muster_client_same_results_on_both_servers(muster_store,
                                                    torch_server, dialect):
    torch_srv = torch_server()
    with StoreClient(HOST, torch_srv.port, timeout=10) as c:
        assert c.dialect == "v1"
        on_torch = run_ops(c, SHARED_OPS)
    mst = muster_store()
    with StoreClient(HOST, mst.port, dialect=dialect, timeout=10) as c:
        assert c.dialect == ("v2" if dialect == "auto" else dialect)
        on_muster = run_ops(c, SHARED_OPS)
    for op, a, b in zip(SHARED_OPS, on_torch, on_muster):
        assert a == b, f"{op}: torch server {a!r}, muster store {b!r}"
    assert on_torch == EXPECTED_SHARED


TORCH_OPS = [op for op in SHARED_OPS
             if op[0] not in ("check", "multi_set", "multi_get")]


def test_torch_client_same_results_on_both_servers(store, torch_server,
                                                   torch_dist):
    results = {}
    for name, port in (("torch", torch_server().port), ("muster", store.port)):
        def connect(port=port):
            return tcpstore(torch_dist, port, timeout=10)
        results[name] = run_ops(connect(), TORCH_OPS, reconnect=connect)
    for op, a, b in zip(TORCH_OPS, results["torch"], results["muster"]):
        assert a == b, f"{op}: torch server {a!r}, muster store {b!r}"
    assert "timeout" in results["torch"]


def store_cli(address, *args, timeout=10):
    done = subprocess.run([str(store_binary()), "store-cli", address,
                           "--timeout", "5", *[str(a) for a in args]],
                          stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=timeout)
    return done.returncode, done.stdout


CLI_OPS = [
    ("keys",),
    ("set", "a", "hello"),
    ("get", "a"),
    ("add", "n", "5"),
    ("add", "n", "-8"),
    ("get", "n"),
    ("compare-set", "c", "", "new"),
    ("compare-set", "c", "new", "newer"),
    ("compare-set", "c", "wrong", "x"),
    ("compare-set", "absent", "x", "y"),
    ("check", "a", "n"),
    ("check", "a", "absent"),
    ("wait", "a", "c"),
    ("keys",),
    ("delete", "a"),
    ("delete", "a"),
    ("keys",),
    ("--raw-keys", "add", "init/", "1"),
    ("--raw-keys", "get", "/n"),
    ("keys",),
]


def test_store_cli_same_results_on_both_servers(store, torch_server):
    torch_srv = torch_server()
    on_torch = [store_cli(torch_srv.address, *op) for op in CLI_OPS]
    on_muster = [store_cli(store.address, *op) for op in CLI_OPS]
    for op, a, b in zip(CLI_OPS, on_torch, on_muster):
        assert a == b, f"store-cli {op}: torch server {a!r}, muster {b!r}"
    assert all(rc == 0 for rc, _ in on_muster), on_muster
    assert on_muster[2] == (0, b"hello\n")
    assert on_muster[5] == (0, b"-3\n")
    # a wait that times out fails on both
    for address in (torch_srv.address, store.address):
        t0 = time.monotonic()
        rc, _ = store_cli(address, "--timeout", "0.5", "wait", "never")
        assert rc != 0
        assert time.monotonic() - t0 < 8


def test_store_cli_v1_and_v2_against_muster(store):
    assert store_cli(store.address, "--dialect", "v1", "set", "x", "1")[0] == 0
    assert store_cli(store.address, "--dialect", "v2", "append", "x",
                     "2") == (0, b"")
    assert store_cli(store.address, "--dialect", "v1", "get", "x") == \
        (0, b"12\n")


# ---- dialect detection ----

def test_auto_dialect_is_v2_on_muster_and_v1_on_torch(store, torch_server,
                                                      torch_dist):
    with StoreClient(HOST, store.port, timeout=10) as c:
        assert c.dialect == "v2"
        c.set("from-muster-client", b"1")
        c.append("from-muster-client", b"2")
    srv = torch_server()
    t0 = time.monotonic()
    with StoreClient(HOST, srv.port, timeout=10) as c:
        assert c.dialect == "v1"
        elapsed = time.monotonic() - t0
        c.set("k", b"v\x00")
        st = tcpstore(torch_dist, srv.port)
        assert st.get("k") == b"v\x00"        # what torch sees
        st.set("back", b"from torch")
        assert c.get("back") == b"from torch"
        with pytest.raises(MusterError):
            c.append("k", b"x")              # v2 only
    print(f"\nAUTO fell back to v1 against torch 1.13 in {elapsed * 1e3:.2f} ms")
    muster_log = store.log_text()
    assert "speaks v2 (torch 2.x)" in muster_log


def test_forced_v2_against_torch_1_13_fails_in_bounded_time(torch_server):
    srv = torch_server()
    t0 = time.monotonic()
    with pytest.raises(MusterError):
        StoreClient(HOST, srv.port, dialect="v2", timeout=2)
    assert time.monotonic() - t0 < 10
    # torch's server survived the attempt
    with StoreClient(HOST, srv.port, timeout=5) as c:
        assert c.num_keys() == 0


def test_in_process_store_server_serves_torch(torch_dist):
    server = StoreServer(host=HOST, port=0)
    try:
        assert server.port > 0
        st = tcpstore(torch_dist, server.port)
        st.set("k", b"v")
        assert st.add("n", 2) == 2
        with StoreClient(HOST, server.port, timeout=5) as c:
            assert c.get("k") == b"v"
            assert c.num_keys() == 2
        del st
    finally:
        server.stop()

