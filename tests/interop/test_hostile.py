# SPDX-License-Identifier: MIT
"""Hostile peers: what one client can make a server hold (issue 12,
docs/internals/budgets.md).

Each flood (tools/hostile.py) pipelines requests for FLOOD_SECONDS and
never reads a reply, while the server's resident memory is sampled and
another client checks, twice a second, that it is still served correctly.
Before the budget rule the servers grew without bound (measured on this
machine, 4 s floods: stage INFO +500 MB, store watch fan-out +1.7 GB, 60 KB
watched keys +517 MB, md SEND +240 MB; the small-reply floods, store and
tracker PING, +120-240 MB within 6-8 s, slower on a loaded machine). Now
each stays within its per-connection budget (16 MiB by default) plus what
the allocator and the kernel add: GROWTH_BOUND.

Also: the stage server releases a descriptor as soon as its peer closes
or half-closes (once the replies are out), the memory a flood took comes
back after it ends, a peer over its budget for --budget-grace is closed
with a log line naming it, watches are limited, and every server shows its
limits in --help.
"""

import os
import re
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import HOST, MusterProcess, assert_closed, wait_for
from mdpeer import md_agent  # noqa: F401
from storefix import muster_store  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import hostile  # noqa: E402

MIB = 1024  # hostile reports KiB
FLOOD_SECONDS = 4.0
# Replies of 4-8 bytes fill the kernel's socket buffers (4 MiB) first:
# before the budget rule the server's own growth started only after a
# million replies or so, seconds into the flood on a loaded machine.
SMALL_REPLY_SECONDS = 8.0
# A flood may make a server hold its 16 MiB budget, plus the partial
# request, the allocator's slack and, under ASan, redzones and shadow.
GROWTH_BOUND = 64 * MIB
# After a flood ends, memory comes back to within this of idle.
RETURN_SLACK = 12 * MIB


@pytest.fixture(autouse=True)
def small_quarantine(monkeypatch):
    """Under the ASan build (make check-sanitize) freed memory waits in a
    256 MiB quarantine by default, which any flood fills whatever the
    server holds; keep it small so RSS measures what the server holds.
    (Ignored by the normal build.)"""
    opts = os.environ.get("ASAN_OPTIONS", "")
    monkeypatch.setenv("ASAN_OPTIONS", ":".join(
        o for o in (opts, "quarantine_size_mb=2", "thread_local_quarantine_size_kb=256") if o))


def rss_kib(pid, field="VmRSS"):
    return hostile.rss_kib(pid, field)


def flood(name, port, pid, seconds=FLOOD_SECONDS, **kw):
    r = hostile.run(name, port, pid, seconds, **kw)
    grown = r["peak_kib"] - r["idle_kib"]
    assert grown < GROWTH_BOUND, (
        f"{name}: the server grew by {grown // MIB} MiB under one non-reading client "
        f"(bound {GROWTH_BOUND // MIB} MiB): {r}")
    assert r["probes"] >= 2 and not r["probe_failures"], (
        f"{name}: another client was not served correctly during the flood: {r}")
    return r


def assert_memory_returns(pid, idle_kib, what):
    """Once the flood's connections are gone, the server gives the memory
    back (to within RETURN_SLACK of what it used when idle)."""
    wait_for(lambda: rss_kib(pid) < idle_kib + RETURN_SLACK, timeout=10,
             what=f"{what}: RSS back near idle ({idle_kib // MIB} MiB; now "
                  f"{rss_kib(pid) // MIB} MiB)")


# ---- the stage server (findings 1 and 4) ----

class StageProc(MusterProcess):
    name = "muster stage"


@pytest.fixture
def stage(muster_bin, tmp_path):
    """Factory: stage(*extra) starts stage 0/1 of a tiny generated model."""
    model = tmp_path / "model"
    subprocess.run([str(muster_bin), "model", "gen", "--out", str(model), "--widths", "16,16"],
                   check=True, capture_output=True, timeout=60)
    started = []

    def start(*extra):
        log = tmp_path / f"stage-{len(started)}.log"
        with open(log, "wb") as f:
            proc = subprocess.Popen(
                [str(muster_bin), "stage", "--model", str(model), "--stage", "0", "--of", "1",
                 "--host", HOST, "--port", "0"] + [str(a) for a in extra],
                stdin=subprocess.DEVNULL, stdout=f, stderr=f)
        s = StageProc(proc, log)
        started.append(s)
        s.port = int(s.wait_log(r"serving on \S+:(\d+)")[0])
        return s

    yield start
    problems = [f"stage: {p}" for s in started for p in [s.stop()] if p]
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def stage_info(port, rid=1, sock=None):
    """One INFO round trip; returns the reply's JSON text."""
    own = sock is None
    s = sock or socket.create_connection((HOST, port), timeout=5)
    try:
        s.sendall(hostile.stage_header(hostile.STAGE_INFO, rid))
        h = hostile.recv_exact(s, 40)
        mtype = struct.unpack("<H", h[6:8])[0]
        rid_got, _, n = struct.unpack("<QQQ", h[16:40])
        body = hostile.recv_exact(s, n)
        assert (mtype, rid_got) == (hostile.STAGE_INFO, rid), (mtype, rid_got, body[:200])
        return body
    finally:
        if own:
            s.close()


@pytest.mark.parametrize("name", ["stage-info", "stage-forward"])
def test_stage_non_reader_is_bounded(stage, name):
    """Finding 1: pipelined INFO (or FORWARD, answered with an ERROR) from
    a client that never reads. The stage stops reading it at its budget,
    serves everyone else meanwhile, and gives the memory back after."""
    s = stage()
    r = flood(name, s.port, s.pid, keep=True)
    r["flood_obj"].close()
    assert_memory_returns(s.pid, r["idle_kib"], name)
    assert b'"stage"' in stage_info(s.port)


def test_stage_releases_descriptors_at_eof(stage):
    """Finding 4: connect/close cycles, and clients that half-close after
    a request, leave no descriptor behind once their replies are out (it
    used to take the 30 s I/O timeout: 4,000 cycles filled ulimit -n 1024
    and `muster run` failed)."""
    s = stage()
    stage_info(s.port)  # the listener and the loop are up: idle count
    idle = s.fd_count()
    for _ in range(300):
        socket.create_connection((HOST, s.port), timeout=5).close()
    half = []
    for i in range(20):
        c = socket.create_connection((HOST, s.port), timeout=5)
        c.sendall(hostile.stage_header(hostile.STAGE_INFO, i + 1))
        c.shutdown(socket.SHUT_WR)
        half.append(c)
    # the replies go out, then the server closes: well before any timeout
    wait_for(lambda: s.fd_count() <= idle, timeout=3,
             what=f"the stage's descriptors back to {idle} (now {s.fd_count()})")
    for i, c in enumerate(half):
        reply = assert_closed(c)
        assert reply[:4] == b"MUPL" and struct.unpack("<Q", reply[16:24])[0] == i + 1
        c.close()
    assert b'"stage"' in stage_info(s.port)


def test_stage_budget_grace_closes_non_reader(stage):
    """A client past its budget that reads nothing for --budget-grace is
    closed, with a log line that names it and says why."""
    s = stage("--conn-budget", "1M", "--budget-grace", "1")
    c = hostile.connect(s.port, rcvbuf=4096)
    me = "%s:%d" % c.getsockname()
    c.setblocking(False)
    batch = b"".join(hostile.stage_header(hostile.STAGE_INFO, i + 1) for i in range(4096))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and f"{me}: closing" not in s.log_text():
        try:
            c.send(batch)
        except BlockingIOError:
            time.sleep(0.05)
        except OSError:
            break
    s.wait_log(rf"{re.escape(me)}: closing: it holds [0-9.]+ MiB \(budget 1.0 MiB.*read nothing "
               rf"for 1 s", timeout=5)
    c.close()
    assert b'"stage"' in stage_info(s.port)


# ---- tracker, store, md P2P (finding 2) ----

def test_tracker_ping_non_reader_is_bounded(muster_tracker):
    t = muster_tracker()
    r = flood("tracker-ping", t.port, t.pid, SMALL_REPLY_SECONDS, keep=True)
    r["flood_obj"].close()
    assert_memory_returns(t.pid, r["idle_kib"], "tracker-ping")


def test_store_ping_non_reader_is_bounded(muster_store):  # noqa: F811
    st = muster_store()
    r = flood("store-ping", st.port, st.proc.pid, SMALL_REPLY_SECONDS, keep=True)
    r["flood_obj"].close()
    assert_memory_returns(st.proc.pid, r["idle_kib"], "store-ping")


def test_md_send_non_reader_is_bounded(md_agent):  # noqa: F811
    a = md_agent("A", listen=True, listen_host=HOST, listen_port=0)
    a.set(b"A's metadata")
    r = flood("md-send", a.listen_port, a.proc.pid, keep=True)
    r["flood_obj"].close()
    assert_memory_returns(a.proc.pid, r["idle_kib"], "md-send")


def test_store_total_budget_caps_several_non_readers(muster_store):  # noqa: F811
    """Six connections each watching a key 100 times and reading nothing,
    while another client SETs 256 KiB values there: after 4 s each watcher
    is owed ~20 MiB of events (counted against each of them, though the
    events themselves are shared), which its own budget would let grow to
    32 MiB; the server's total of 24 MiB cuts them off first, with the
    reason in the log. Others are still served meanwhile."""
    st = muster_store("--total-budget", "24M")
    r = hostile.run("store-watch-fanout", st.port, st.proc.pid, FLOOD_SECONDS, conns=6)
    grown = r["peak_kib"] - r["idle_kib"]
    assert grown < 56 * MIB, f"six non-readers grew the store by {grown // MIB} MiB: {r}"
    assert r["probes"] >= 2 and not r["probe_failures"], r
    st.wait_log(r"closing: it reads too slowly: .* for all peers \(budget 24.0 MiB\)")


# ---- store watches (finding 3) ----

def test_store_watch_fanout_is_bounded(muster_store):  # noqa: F811
    """100 v1 watches on one key from a client that stops reading, then
    256 KiB SETs from another: each SET used to cost 100 copies of the
    event (+51 MB per SET); now one shared copy, counted against the
    watcher, which is cut off at twice its budget."""
    st = muster_store()
    flood("store-watch-fanout", st.port, st.proc.pid)


def test_store_watched_keys_are_bounded(muster_store):  # noqa: F811
    """Watches on distinct 60 KB keys from one connection (5,000 used to
    take +590 MB): they count against its budget, it stops being read, and
    after --budget-grace it is closed with a log line naming it."""
    st = muster_store("--budget-grace", "2")
    r = flood("store-watch-keys", st.port, st.proc.pid, keep=True)
    me = "%s:%d" % r["flood_obj"].socks[0].getsockname()
    st.wait_log(rf"{re.escape(me)}: closing: it holds [0-9.]+ MiB \(budget 16.0 MiB",
                timeout=10)
    r["flood_obj"].close()
    assert_memory_returns(st.proc.pid, r["idle_kib"], "store-watch-keys")


def watch(sock, key):
    sock.sendall(bytes([hostile.STORE_V1["WATCH_KEY"]]) + hostile.store_str(key))


def test_store_watch_limits(muster_store):  # noqa: F811
    """--max-watches per connection and --max-watches-total: one watch
    more closes the connection that asked, with the reason in the log;
    the others keep theirs and still hear about their keys."""
    st = muster_store("--max-watches", 3, "--max-watches-total", 5)
    a = socket.create_connection((HOST, st.port), timeout=5)
    for i in range(3):
        watch(a, b"k%d" % i)
    assert hostile.recv_exact(a, 3) == b"\x03\x03\x03"  # KEY_CALLBACK_REGISTERED
    watch(a, b"k3")
    assert assert_closed(a) == b""
    st.wait_log(r"too many watches \(limit 3 per connection, 5 in all")
    b = socket.create_connection((HOST, st.port), timeout=5)
    c = socket.create_connection((HOST, st.port), timeout=5)
    for i in range(3):
        watch(b, b"k%d" % i)
    assert hostile.recv_exact(b, 3) == b"\x03\x03\x03"
    watch(c, b"k0")
    watch(c, b"k0")
    assert hostile.recv_exact(c, 2) == b"\x03\x03"
    watch(c, b"k1")  # the sixth in all
    assert assert_closed(c) == b""
    # b's watches live on: a SET of k1 reaches it (u8 kind, key, old, new)
    setter = socket.create_connection((HOST, st.port), timeout=5)
    setter.sendall(bytes([hostile.STORE_V1["SET"]]) + hostile.store_str(b"k1")
                   + hostile.store_str(b"v"))
    ev = hostile.recv_exact(b, 1 + 8 + 2 + 8 + 8 + 1)
    assert ev == b"\x01" + hostile.store_str(b"k1") + hostile.store_str(b"") \
        + hostile.store_str(b"v")
    for s in (b, setter):
        s.close()


def test_store_watch_event_shared_by_repeated_watches(muster_store):  # noqa: F811
    """A connection that watches a key three times hears of each SET three
    times (torch 1.13's server does the same), all from one shared copy."""
    st = muster_store()
    w = socket.create_connection((HOST, st.port), timeout=5)
    for _ in range(3):
        watch(w, b"big")
    assert hostile.recv_exact(w, 3) == b"\x03" * 3
    value = bytes(range(256)) * 1024
    setter = socket.create_connection((HOST, st.port), timeout=5)
    setter.sendall(bytes([hostile.STORE_V1["SET"]]) + hostile.store_str(b"big")
                   + hostile.store_str(value))
    want = b"\x01" + hostile.store_str(b"big") + hostile.store_str(b"") + hostile.store_str(value)
    for _ in range(3):
        assert hostile.recv_exact(w, len(want)) == want
    w.close()
    setter.close()


# ---- every server shows its limits ----

@pytest.mark.parametrize("command", ["tracker", "store", "stage", "md"])
def test_help_shows_the_budget(muster_bin, command):
    out = subprocess.run([str(muster_bin), command, "--help"], capture_output=True,
                         text=True, timeout=30).stdout
    for want in ("--conn-budget SIZE", "(default 16M)", "--total-budget SIZE",
                 "(default 512M)", "--budget-grace SECONDS", "(default 30)"):
        assert want in out, f"muster {command} --help lacks {want!r}:\n{out}"
