# SPDX-License-Identifier: MIT
"""md agents exchanging NIXL metadata through a TCPStore (spec
nixl-metadata.md section 8): `muster store` and torch 1.13's own server
(`TCPStore(is_master=True)` in a subprocess). Agents run in separate
processes (mdpeer.AgentProc); a torch 1.13 client checks the keys.

NIXL's layout: /nixl/agents/<label>/<agent>/NULL_AGENT, the leading "/"
being the one torch's client adds, so torch's get("nixl/agents/...")
reads the blob.
"""

import datetime
import time

import pytest

from mdpeer import md_agent, muster_blob  # noqa: F401
from storefix import muster_store, torch_dist, torch_server  # noqa: F401
from storepeer import HOST, Client, start_store

MU_EPROTO = -1000
ETIMEDOUT = -110


def torch_client(dist, port, timeout=10.0):
    return dist.TCPStore(HOST, port, is_master=False,
                         timeout=datetime.timedelta(seconds=timeout))


def nixl_key(agent, label="metadata"):
    """The key as torch clients name it (torch adds the leading "/")."""
    return f"nixl/agents/{label}/{agent}/NULL_AGENT"


@pytest.fixture(params=["muster", "torch"])
def tcpstore(request, muster_store, torch_server):  # noqa: F811
    """A running TCPStore server: `muster store`, or torch 1.13's."""
    srv = muster_store() if request.param == "muster" else torch_server()
    srv.kind = request.param
    return srv


def agent_for(md_agent, srv, name, **kw):  # noqa: F811
    kw.setdefault("tcpstore_endpoint", f"{HOST}:{srv.port}")
    kw.setdefault("store_timeout", 5.0)
    kw.setdefault("op_timeout", 3.0)
    return md_agent(name, **kw)


def test_exchange_and_keys_seen_by_torch(tcpstore, md_agent, torch_dist):  # noqa: F811
    a = agent_for(md_agent, tcpstore, "A")
    b = agent_for(md_agent, tcpstore, "B", store_timeout=1.5)
    assert a.backend == "TCPStore"
    a.set(b"full \x00 metadata")
    a.set(b"partial", label="part")
    a.ok("publish")
    a.ok("publish", label="part")

    r = b.ok("fetch", name="A")
    assert r["event"]["kind"] == "fetched" and r["event"]["name"] == "A"
    assert b.remote("A") == muster_blob("A", b"full \x00 metadata")
    b.ok("fetch", name="A", label="part")
    assert b.remote("A", "part") == muster_blob("A", b"partial", "part")

    # a torch 1.13 client reads NIXL's keys (it adds the leading "/")
    tc = torch_client(torch_dist, tcpstore.port)
    assert tc.get(nixl_key("A")) == a.blob()
    assert tc.get(nixl_key("A", "part")) == a.blob("part")
    # ... and so does a raw client sending the exact key bytes
    dialect = "v1" if tcpstore.kind == "torch" else "v2"
    with Client(tcpstore.port, dialect, raw_keys=True) as raw:
        assert raw.check(["/nixl/agents/metadata/A/NULL_AGENT",
                          "/nixl/agents/part/A/NULL_AGENT"]) is True
        assert raw.check(["nixl/agents/metadata/A/NULL_AGENT"]) is False

    # invalidate deletes A's keys; B is not told (no watches, as NIXL)
    a.ok("invalidate")
    with Client(tcpstore.port, dialect, raw_keys=True) as raw:
        assert raw.check(["/nixl/agents/metadata/A/NULL_AGENT"]) is False
        assert raw.check(["/nixl/agents/part/A/NULL_AGENT"]) is False
    time.sleep(0.3)
    assert b.loaded("A")
    assert [e["kind"] for e in b.ok("events")["events"]] == ["fetched", "fetched"]
    # a fresh fetch finds nothing now and times out after store_timeout
    b.ok("drop", name="A")
    r = b.call("fetch", name="A", timeout=10)
    assert r["status"] == ETIMEDOUT and "1.5" in r["event"]["detail"], r
    # publishing again brings it back
    a.ok("publish")
    b.ok("fetch", name="A")


def test_blob_set_by_torch_client_is_fetched(tcpstore, md_agent, torch_dist):  # noqa: F811
    """NIXL's side played by a torch client writing a NIXL-shaped blob."""
    from mdpeer import nixl_blob
    blob = nixl_blob("X")
    tc = torch_client(torch_dist, tcpstore.port)
    tc.set(nixl_key("X"), blob)
    tc.set(nixl_key("Z"), nixl_blob("Y"))                 # misfiled
    b = agent_for(md_agent, tcpstore, "B")
    r = b.ok("fetch", name="X")
    assert r["event"]["name"] == "X" and b.remote("X") == blob
    r = b.call("fetch", name="Z", timeout=10)
    assert r["status"] == MU_EPROTO and "of Y, not of Z" in r["event"]["detail"], r


def test_fetch_waits_for_a_later_publish(tcpstore, md_agent):  # noqa: F811
    b = agent_for(md_agent, tcpstore, "B", store_timeout=10.0)
    a = agent_for(md_agent, tcpstore, "A")
    op = b.ok("fetch", name="A", nowait=True)["op"]
    op2 = b.ok("fetch", name="A", label="p", nowait=True)["op"]
    time.sleep(1.0)
    assert b.ok("events")["events"] == []
    a.set("late")
    a.set("late p", label="p")
    t0 = time.monotonic()
    a.ok("publish")
    a.ok("publish", label="p")
    b.ok("wait", op=op, timeout=10)
    b.ok("wait", op=op2, timeout=10)
    assert time.monotonic() - t0 < 2.0
    assert b.remote("A") == a.blob() and b.remote("A", "p") == a.blob("p")
    # a fetch of a never-published agent ends after store_timeout
    c = agent_for(md_agent, tcpstore, "C", store_timeout=1.0)
    t0 = time.monotonic()
    r = c.call("fetch", name="ghost", timeout=10)
    assert r["status"] == ETIMEDOUT and "ghost" in r["event"]["detail"], r
    assert 0.9 < time.monotonic() - t0 < 4.0


def test_store_down_at_first_use(md_agent):  # noqa: F811
    """The first connect waits store_timeout for the store (not op_timeout)
    and then fails with the address in the cause."""
    from etcdfix import free_ports
    port = free_ports(1)[0]
    a = md_agent("A", tcpstore_endpoint=f"{HOST}:{port}", op_timeout=0.5,
                 store_timeout=2.0)
    a.set("x")
    t0 = time.monotonic()
    r = a.call("publish", timeout=15)
    elapsed = time.monotonic() - t0
    assert r["status"] not in (0, None), r
    assert f"{HOST}:{port}" in r["event"]["detail"], r
    assert 1.5 < elapsed < 6.0, elapsed


@pytest.mark.parametrize("how", ["option", "NIXL_TCPSTORE_TIMEOUT_MS"])
def test_store_that_starts_late_is_waited_for(tmp_path, md_agent, how):  # noqa: F811
    """NIXL's bring-up budget: a store that comes up within store_timeout
    (set as the option, or by NIXL's variable in milliseconds) is reached
    by the first publish, although each operation is bounded by a much
    shorter op_timeout."""
    from etcdfix import free_ports
    port = free_ports(1)[0]
    if how == "option":
        a = md_agent("A", tcpstore_endpoint=f"{HOST}:{port}", op_timeout=0.5,
                     store_timeout=15.0)
    else:
        a = md_agent("A", env={"NIXL_TCPSTORE_ENDPOINT": f"{HOST}:{port}",
                               "NIXL_TCPSTORE_TIMEOUT_MS": "15000",
                               "NIXL_TCPSTORE_OP_TIMEOUT_MS": "500"})
    a.set("x")
    op = a.ok("publish", nowait=True)["op"]
    time.sleep(2.0)
    st = start_store(tmp_path / "late.log", port=port)
    try:
        r = a.call("wait", op=op, timeout=20)
        assert r["status"] == 0, r
        with Client(port, "v2", raw_keys=True) as raw:
            assert raw.check(["/nixl/agents/metadata/A/NULL_AGENT"])
    finally:
        assert not st.stop()


def test_store_gone_mid_fetch_then_back(tmp_path, md_agent):  # noqa: F811
    st = start_store(tmp_path / "store-0.log")
    port = st.port
    stores = [st]
    try:
        a = md_agent("A", tcpstore_endpoint=f"{HOST}:{port}", op_timeout=2.0,
                     store_timeout=20.0)
        b = md_agent("B", tcpstore_endpoint=f"{HOST}:{port}", op_timeout=2.0,
                     store_timeout=5.0)
        a.set("before")
        a.ok("publish")
        b.ok("fetch", name="A")
        op = b.ok("fetch", name="late", nowait=True)["op"]
        time.sleep(0.5)
        st.proc.kill()
        st.proc.wait(10)
        t0 = time.monotonic()
        r = b.call("wait", op=op, timeout=20)
        waited = time.monotonic() - t0
        assert r["status"] not in (0, None), r
        assert r["event"]["detail"], r
        assert waited < 8.0, f"the fetch noticed the store was gone after {waited:.1f} s"
        print(f"\nfetch ended {waited:.2f} s after the kill: {r['status']} "
              f"{r['event']['detail']!r}")

        # the store comes back on the same port (empty): both agents work
        st2 = start_store(tmp_path / "store-1.log", port=port)
        stores.append(st2)
        a.set("after", label="again")
        tries = []
        for _ in range(3):
            r = a.call("publish", label="again", timeout=15)
            tries.append((r["status"], r["event"]["detail"] if r.get("event") else None))
            if r["status"] == 0:
                break
        print(f"publish after the restart: {tries}")
        assert tries[-1][0] == 0, tries
        # a publish reported done must be in the store (a SET has no reply:
        # one written into the connection the old store left must not
        # count as done)
        with Client(port, "v2", raw_keys=True) as raw:
            there = raw.check(["/nixl/agents/again/A/NULL_AGENT"])
        r = b.call("fetch", name="A", label="again", timeout=30)
        print(f"fetch after the restart: {r['status']} {r.get('event')}")
        assert there, f"publish reported {tries} but the key is not in the store"
        assert r["status"] == 0, r
        assert b.remote("A", "again") == a.blob("again")
    finally:
        problems = [s.stop() for s in stores if s.proc.poll() is None]
        assert not [p for p in problems if p], problems


def test_torch_server_gone_mid_fetch(torch_server, md_agent):  # noqa: F811
    srv = torch_server()
    a = agent_for(md_agent, srv, "A", op_timeout=2.0, store_timeout=20.0)
    a.set("x")
    a.ok("publish")
    op = a.ok("fetch", name="late", nowait=True)["op"]
    time.sleep(0.5)
    srv.proc.kill()
    srv.proc.wait(10)
    t0 = time.monotonic()
    r = a.call("wait", op=op, timeout=20)
    assert r["status"] not in (0, None) and r["event"]["detail"], r
    assert time.monotonic() - t0 < 8.0


@pytest.mark.parametrize("endpoint", ["127.0.0.1:0", "127.0.0.1", "127.0.0.1:abc",
                                      "127.0.0.1:29500x", ":29500", ""])
def test_bad_tcpstore_endpoint_is_a_creation_error(md_agent, endpoint):  # noqa: F811
    res = md_agent("A", env={"NIXL_TCPSTORE_ENDPOINT": endpoint}, expect_fail=True)
    assert res["code"] == -1009, res
    assert res["log"].strip(), res
    # the exception says what is wrong, not only "bad argument"
    why = "NIXL_TCPSTORE_ENDPOINT is set but empty" if not endpoint else "not host:port"
    assert why in res["error"], res


def test_muster_tcpstore_variable_wins(md_agent, muster_store):  # noqa: F811
    srv = muster_store()
    from etcdfix import free_ports
    dead = free_ports(1)[0]
    env = {"NIXL_TCPSTORE_ENDPOINT": f"{HOST}:{dead}",
           "MUSTER_TCPSTORE_ENDPOINT": f"{HOST}:{srv.port}"}
    a = md_agent("A", env=env, op_timeout=2.0)
    assert a.backend == "TCPStore"
    a.set("x")
    a.ok("publish")
    b = md_agent("B", env={"NIXL_TCPSTORE_ENDPOINT": f"{HOST}:{srv.port}"})
    b.ok("fetch", name="A")
