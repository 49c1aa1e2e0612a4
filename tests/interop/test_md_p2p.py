# SPDX-License-Identifier: MIT
"""md agents over NIXL's P2P metadata sockets (spec nixl-metadata.md
section 6): between muster agents in separate processes, and against a
raw NIXL peer written from the spec (mdpeer.NixlClient / NixlListener),
with the frames checked byte for byte. Then bad input against a muster
listener: each bad connection is closed alone and the agent keeps serving
the next peer.
"""

import socket
import struct
import time

import pytest

from conftest import assert_closed
from mdpeer import (HOST, NixlClient, NixlListener, frame, md_agent,  # noqa: F401
                    muster_blob, nixl_blob, u64)

MU_EPROTO = -1000
MU_EARG = -1009
ETIMEDOUT = -110


def listener(md_agent, name, **kw):  # noqa: F811
    kw.setdefault("listen", True)
    kw.setdefault("listen_host", HOST)
    kw.setdefault("listen_port", 0)
    a = md_agent(name, **kw)
    assert a.listen_port and a.listen_port > 0
    return a


def addr(agent):
    return [HOST, agent.listen_port]


def assert_serving(agent):
    """A fresh raw NIXL peer pulls `agent`'s blob over a new connection."""
    with NixlClient(agent.listen_port) as c:
        assert c.fetch(timeout=5) == agent.blob()


# ---- muster <-> muster ----

def test_push_pull_partial_invalidate_between_processes(md_agent):  # noqa: F811
    a = listener(md_agent, "A")
    b = listener(md_agent, "B")
    c = md_agent("C")                        # no listener: can push, not pull
    assert a.backend == "P2P"
    a.set(b"A's conn info \x00\xff")
    b.set(b"B's conn info")
    b.set(b"B partial", label="part")
    c.set(b"C pushes")

    # push: B sends LOAD to A's listener
    ev = b.ok("publish", peer=addr(a))["event"]
    assert ev["kind"] == "sent" and ev["status"] == 0
    ev = a.wait_event("remote_loaded", "B", timeout=5)
    assert ev is not None and ev["status"] == 0 and ev["op"] == 0
    assert a.remote("B") == b.blob()
    # a partial blob lands under its label (the blob says which)
    b.ok("publish", peer=addr(a), label="part")
    assert a.wait_event("remote_loaded", "B", timeout=5)["status"] == 0
    assert a.remote("B", "part") == muster_blob("B", b"B partial", "part")

    # pull: B sends SEND, A answers LOAD + its full blob on that connection
    r = b.ok("fetch", name="A", peer=addr(a))
    assert r["event"]["name"] == "A"
    assert b.remote("A") == a.blob()
    # a listener-less agent pushes too
    c.ok("publish", peer=addr(a))
    assert a.wait_event("remote_loaded", "C", timeout=5)["status"] == 0
    assert a.ok("list")["names"] == ["B", "C"]

    # invalidate: INVL B makes A drop B (both labels)
    b.ok("invalidate", peer=addr(a))
    ev = a.wait_event("remote_dropped", "B", timeout=5)
    assert ev is not None and ev["status"] == 0
    assert not a.loaded("B") and a.remote("B", "part") is None
    assert a.ok("list")["names"] == ["C"]
    # pushing again after the drop is accepted
    b.set(b"B's new conn info")
    b.ok("publish", peer=addr(a))
    assert a.wait_event("remote_loaded", "B", timeout=5)["status"] == 0
    assert a.remote("B") == b.blob()


def test_fetch_loads_whoever_answers(md_agent):  # noqa: F811
    """As NIXL: the name is not checked over P2P; the completion names
    who answered."""
    a = listener(md_agent, "A")
    b = md_agent("B")
    a.set("A")
    r = b.ok("fetch", name="someone-else", peer=addr(a))
    assert r["event"]["name"] == "A"
    assert b.loaded("A") and not b.loaded("someone-else")


def test_p2p_errors_reach_the_caller(md_agent):  # noqa: F811
    from etcdfix import free_ports
    b = md_agent("B", op_timeout=2.0)
    b.set("x")
    dead = free_ports(1)[0]
    r = b.call("publish", peer=[HOST, dead], timeout=10)
    assert r["status"] not in (0, None) and f"{HOST}:{dead}" in r["event"]["detail"], r
    r = b.call("fetch", name="A", peer=[HOST, dead], timeout=10)
    assert r["status"] not in (0, None) and f"{HOST}:{dead}" in r["event"]["detail"], r
    # a peer with nothing published answers SEND with an empty LOAD
    a = listener(md_agent, "A")
    r = b.call("fetch", name="A", peer=addr(a), timeout=10)
    assert r["status"] == MU_EPROTO and "not a metadata blob" in r["event"]["detail"], r
    # no blob under a label: refused at once
    r = b.call("publish", peer=addr(a), label="nothing")
    assert not r["ok"] and r["code"] == -2, r


# ---- interop with a raw NIXL peer ----

def test_muster_fetches_from_a_nixl_listener(md_agent):  # noqa: F811
    blob = nixl_blob("X")
    with NixlListener(blob=blob) as nixl:
        b = md_agent("B")
        r = b.ok("fetch", name="X", peer=nixl.address)
        assert r["event"]["name"] == "X"
        assert b.remote("X") == blob
        assert nixl.wait_frames(1)[0] == u64(13) + b"NIXLCOMM:SEND"
        # pushes and invalidation, byte for byte
        b.set(b"B \x00 data")
        b.ok("publish", peer=nixl.address)
        b.ok("invalidate", peer=nixl.address)
        frames = nixl.wait_frames(3)
        bb = muster_blob("B", b"B \x00 data")
        assert frames[1] == struct.pack("<Q", 13 + len(bb)) + b"NIXLCOMM:LOAD" + bb
        assert frames[2] == u64(14) + b"NIXLCOMM:INVLB"
        assert nixl.dropped == ["B"] and "B" not in nixl.loaded
        assert nixl.errors == []
        # one long-lived connection carried all three
        assert nixl.accepted == 1


def test_nixl_listener_answering_garbage(md_agent):  # noqa: F811
    b = md_agent("B", op_timeout=2.0)
    replies = {
        "not LOAD": frame(b"INVL", b"X"),
        "not NIXLCOMM": u64(8) + b"HTTP/1.1",
        "not a blob": frame(b"LOAD", b"junk"),
        "huge length": u64(1 << 62),
        "cut short": u64(100) + b"NIXLCOMM:LOAD",
    }
    for what, reply in replies.items():
        with NixlListener(reply=reply) as nixl:
            t0 = time.monotonic()
            r = b.call("fetch", name="X", peer=nixl.address, timeout=10)
            assert r["status"] not in (0, None), (what, r)
            assert r["event"]["detail"], (what, r)
            assert time.monotonic() - t0 < 4.0, what
            print(f"\n{what}: {r['status']} {r['event']['detail']!r}", end="")
    assert b.ok("list")["names"] == []


def test_nixl_client_pushes_invalidates_and_pulls(md_agent):  # noqa: F811
    a = listener(md_agent, "A")
    a.set(b"A's metadata \x00 NIXLCOMM: inside")
    blob = nixl_blob("X")
    with NixlClient(a.listen_port) as c:
        c.load(blob)
        ev = a.wait_event("remote_loaded", "X", timeout=5)
        assert ev["status"] == 0 and "pushed by" in ev["detail"]
        assert a.remote("X") == blob
        # the same bytes again: a no-op success; other bytes: refused
        c.load(blob)
        assert a.wait_event("remote_loaded", "X", timeout=5)["status"] == 0
        c.load(nixl_blob("X", conns={"UCX": b"other"}))
        ev = a.wait_event("remote_loaded", "X", timeout=5)
        assert ev["status"] == -17, ev
        assert a.remote("X") == blob
        # SEND: the reply is LOAD + A's full blob, on this connection
        c.send()
        raw, _ = c.read_frame(5)
        ab = a.blob()
        assert raw == struct.pack("<Q", 13 + len(ab)) + b"NIXLCOMM:LOAD" + ab
        # one frame is one command: "NIXLCOMM:" inside the blob is data
        assert b"NIXLCOMM:" in ab
        # INVL X drops it
        c.invl("X")
        assert a.wait_event("remote_dropped", "X", timeout=5)["status"] == 0
        assert not a.loaded("X")
        # INVL of an unknown name is ignored, and the connection stays
        c.invl("nobody")
        c.send()
        assert c.read_frame(5)[1] == b"NIXLCOMM:LOAD" + ab
    # INVL of the agent's own name does not drop anything or crash
    with NixlClient(a.listen_port) as c:
        c.invl("A")
        assert c.fetch(5) == a.blob()
    assert a.ok("events")["events"] == []


def test_frames_pipelined_and_fragmented(md_agent):  # noqa: F811
    a = listener(md_agent, "A")
    a.set("A")
    x, y = nixl_blob("X"), nixl_blob("Y")
    with NixlClient(a.listen_port) as c:
        # three commands in one write, handled in order
        c.send_raw(frame(b"LOAD", x) + frame(b"LOAD", y) + frame(b"INVL", b"X") + frame(b"SEND"))
        assert c.read_frame(5)[1] == b"NIXLCOMM:LOAD" + a.blob()
        assert a.loaded("Y") and not a.loaded("X")
        # one frame a byte at a time (well inside the 5 s frame deadline)
        data = frame(b"LOAD", x)
        for i in range(0, len(data), 7):
            c.send_raw(data[i:i + 7])
            time.sleep(0.002)
        assert a.wait_event("remote_dropped", "X", timeout=5) is not None
        loads = [a.wait_event("remote_loaded", timeout=5) for _ in range(3)]
        assert [e["name"] for e in loads] == ["X", "Y", "X"], loads
        assert a.remote("X") == x


def test_many_peers_at_once(md_agent):  # noqa: F811
    a = listener(md_agent, "A")
    a.set(b"A" * 100000)
    blob = a.blob()
    clients = [NixlClient(a.listen_port) for _ in range(200)]
    try:
        for c in clients:
            c.send()
        for c in clients:
            assert c.read_frame(10)[1] == b"NIXLCOMM:LOAD" + blob
        for i, c in enumerate(clients[:50]):
            c.load(nixl_blob(f"P{i}"))
        deadline = time.monotonic() + 10
        while len(a.ok("list")["names"]) < 50 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(a.ok("list")["names"]) == 50
    finally:
        for c in clients:
            c.close()
    assert_serving(a)


# ---- bad input against a muster listener ----

def _served_listener(md_agent):  # noqa: F811
    a = listener(md_agent, "A", op_timeout=2.0)
    a.set(b"A serves")
    return a


def _check_next_peer(a, md_agent):  # noqa: F811
    """After the bad peer: a raw NIXL peer and a muster agent (another
    process) still fetch from A."""
    assert_serving(a)
    if not hasattr(a, "_checker"):
        a._checker = md_agent(f"check{a.listen_port}", op_timeout=3.0)
    r = a._checker.call("fetch", name="A", peer=addr(a), timeout=10)
    assert r["status"] == 0, r


BAD_FRAMES = {
    "unknown command": frame(b"HELO", b"hello"),
    "not NIXLCOMM": u64(17) + b"HTTP/1.1 200 OK\r\n",
    "http request": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "length 2^63": u64(1 << 63) + b"NIXLCOMM:LOAD",
    "length 2^64-1": b"\xff" * 8,
    "length 0": u64(0),
    "length shorter than a command": u64(3) + b"NIX",
    "NIXLCOMM without command": u64(9) + b"NIXLCOMM:",
}


@pytest.mark.parametrize("what", list(BAD_FRAMES))
def test_bad_frame_closes_only_that_connection(md_agent, what):  # noqa: F811
    a = _served_listener(md_agent)
    with NixlClient(a.listen_port) as good, NixlClient(a.listen_port) as bad:
        # a connection open before, and idle, is not disturbed
        assert good.fetch(5) == a.blob()
        bad.send_raw(BAD_FRAMES[what])
        t0 = time.monotonic()
        got = assert_closed(bad.sock, timeout=3.0)
        assert got == b"", got
        assert time.monotonic() - t0 < 2.0
        assert good.fetch(5) == a.blob()
    _check_next_peer(a, md_agent)
    assert not a.loaded("X")


def test_frame_cut_off_then_closed(md_agent):  # noqa: F811
    a = _served_listener(md_agent)
    blob = nixl_blob("X")
    full = frame(b"LOAD", blob)
    for cut in (3, 8, 12, len(full) - 1):
        with NixlClient(a.listen_port) as c:
            c.send_raw(full[:cut])
        _check_next_peer(a, md_agent)
    assert not a.loaded("X")                 # no half blob was loaded
    assert a.ok("events")["events"] == []


def test_frame_started_and_stalled_is_closed_after_5s(md_agent):  # noqa: F811
    a = _served_listener(md_agent)
    with NixlClient(a.listen_port) as stall, NixlClient(a.listen_port) as head_only:
        stall.send_raw(frame(b"LOAD", nixl_blob("X"))[:40])
        head_only.send_raw(u64(200)[:5])    # not even the whole length
        t0 = time.monotonic()
        # meanwhile other peers are served
        _check_next_peer(a, md_agent)
        assert assert_closed(stall.sock, timeout=9.0) == b""
        took = time.monotonic() - t0
        assert 3.5 < took < 7.5, f"closed after {took:.1f} s (expected ~5 s)"
        assert assert_closed(head_only.sock, timeout=3.0) == b""
    # an idle connection with no frame started stays open
    with NixlClient(a.listen_port) as idle:
        time.sleep(6.0)
        assert idle.fetch(5) == a.blob()


def test_load_with_garbage_blob(md_agent):  # noqa: F811
    a = _served_listener(md_agent)
    garbage = [b"", b"junk", b"nixlSerDes|", b"nixlSerDes|Agent" + u64(1 << 40) + b"X|",
               b"nixlSerDes|Agent" + u64(0) + b"|", b"nixlSerDes|Agent" + u64(3) + b"X\x00Y|",
               b"nixlSerDes|Agent" + u64(1) + b"A|"]           # A's own name
    with NixlClient(a.listen_port) as c:
        for g in garbage:
            c.load(g)
            ev = a.wait_event("remote_loaded", timeout=5)
            assert ev is not None, g
            assert ev["status"] in (MU_EPROTO, MU_EARG), (g, ev)
            assert ev["detail"], ev
        # the connection is still usable afterwards
        assert c.fetch(5) == a.blob()
    assert a.ok("list")["names"] == []
    _check_next_peer(a, md_agent)


def test_send_to_a_peer_that_never_reads(md_agent):  # noqa: F811
    a = _served_listener(md_agent)
    b = md_agent("B", op_timeout=2.0)
    res = b.ok("set", size=16 << 20, echo_max=0)
    with NixlListener(read=False) as sink:
        t0 = time.monotonic()
        r = b.call("publish", peer=sink.address, timeout=15)
        took = time.monotonic() - t0
        assert r["status"] not in (0, None), r
        assert r["event"]["detail"], r
        assert 1.5 < took < 4.0, f"send ended after {took:.1f} s (op_timeout 2 s)"
        print(f"\nnever-reading peer: {r['status']} {r['event']['detail']!r} after {took:.2f} s")
        # the agent keeps working: push the same 16 MiB blob to a muster listener
        r = b.ok("publish", peer=addr(a), timeout=15)
        ev = a.wait_event("remote_loaded", "B", timeout=10)
        assert ev["status"] == 0
        assert a.ok("get", name="B", digest=True)["sha"] == res["sha"]
        # and it fetches
        b.ok("fetch", name="A", peer=addr(a))


def test_listener_that_never_reads_a_send_reply(md_agent):  # noqa: F811
    """The other direction: a peer sends SEND and never reads A's
    (16 MiB) reply; A's listener keeps serving everyone else."""
    a = listener(md_agent, "A", op_timeout=2.0)
    a.ok("set", size=16 << 20, echo_max=0)
    s = socket.create_connection((HOST, a.listen_port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        for _ in range(4):
            s.sendall(frame(b"SEND"))
        time.sleep(0.5)
        b = md_agent("B", op_timeout=5.0)
        r = b.call("fetch", name="A", peer=addr(a), timeout=15)
        assert r["status"] == 0, r
        assert b.ok("get", name="A", digest=True)["sha"] == a.ok("get_local", digest=True)["sha"]
    finally:
        s.close()


# ---- peers that go away ----

def test_peer_restarted_on_the_same_port(md_agent):  # noqa: F811
    """B keeps a connection to A. A dies and a new A listens on the same
    port: B's next push, invalidate and pull must reach the new A (or
    fail), never report success for bytes written into the old, dead
    connection (which the dead peer's kernel answers with a reset)."""
    a = listener(md_agent, "A")
    port = a.listen_port
    a.set("A v1")
    b = md_agent("B", op_timeout=2.0)
    b.set("B pushes")
    b.ok("publish", peer=addr(a))
    assert a.wait_event("remote_loaded", "B", timeout=5)["status"] == 0
    b.ok("fetch", name="A", peer=addr(a))

    def restart(old):
        old.kill()
        new = listener(md_agent, "A", listen_port=port)
        new.set(f"A after {old.listen_port}")
        return new

    results = {}
    # push
    a = restart(a)
    r = b.call("publish", peer=addr(a), timeout=5)
    results["push"] = r["status"]
    results["push arrived"] = a.wait_event("remote_loaded", "B", timeout=2) is not None
    b.ok("publish", peer=addr(a))            # B's connection is a fresh one now
    # invalidate (the new A got B's blob from someone else)
    a = restart(a)
    with NixlClient(port) as other:
        other.load(b.blob())
        assert a.wait_event("remote_loaded", "B", timeout=5)["status"] == 0
    r = b.call("invalidate", peer=addr(a), timeout=5)
    results["invalidate"] = r["status"]
    results["invalidate arrived"] = a.wait_event("remote_dropped", "B", timeout=2) is not None
    b.call("invalidate", peer=addr(a), timeout=5)
    # pull (it has a reply, so a dead connection shows)
    a = restart(a)
    b.ok("drop", name="A")
    r = b.call("fetch", name="A", peer=addr(a), timeout=5)
    results["fetch"] = r["status"]
    print(f"\n{results}")
    assert results["fetch"] == 0 and b.remote("A") == a.blob(), results
    assert results["push"] != 0 or results["push arrived"], results
    assert results["invalidate"] != 0 or results["invalidate arrived"], results


def test_listen_port_in_use_is_a_creation_error(md_agent):  # noqa: F811
    busy = socket.socket()
    busy.bind((HOST, 0))
    busy.listen(1)
    try:
        res = md_agent("A", listen=True, listen_host=HOST,
                       listen_port=busy.getsockname()[1], expect_fail=True)
        assert res["code"] == -1008, res
    finally:
        busy.close()
