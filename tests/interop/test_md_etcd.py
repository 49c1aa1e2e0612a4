# SPDX-License-Identifier: MIT
"""md agents exchanging NIXL metadata through real etcd 3.4 members
(spec nixl-metadata.md sections 7, 9, 11; etcd-v3.md). Every agent runs
in its own process (mdpeer.AgentProc); etcd keys are checked with etcdctl,
and NIXL's side is played by etcdctl and blobs built from spec section 4.
"""

import http.server
import json
import threading
import time

import pytest

from etcdfix import (etcd, etcd_cluster, etcd_factory, etcdctl, free_ports,  # noqa: F401
                     get_all, get_kvs, keys_only, put_bytes)
from mdpeer import blob_agent, md_agent, muster_blob, nixl_blob  # noqa: F401
from relay import Relay

NS = "/nixl/agents/"          # NIXL's default namespace, joined verbatim
MU_EARG = -1009
MU_EPROTO = -1000
ETIMEDOUT = -110
ENOENT = -2


def key(agent, label="", ns=NS):
    return f"{ns}/{agent}/{label}"


def agent_for(md_agent, etcd, name, **kw):
    kw.setdefault("etcd_endpoints", etcd.endpoints)
    kw.setdefault("etcd_watch_timeout", 3.0)
    return md_agent(name, **kw)


# ---- exchange ----

def test_full_and_partial_metadata_exchange(etcd, md_agent):
    a = agent_for(md_agent, etcd, "A")
    b = agent_for(md_agent, etcd, "B")
    assert a.backend == b.backend == "ETCD"
    a.set("conn-info of A")
    a.set(b"\x00partial\xff|NIXLCOMM:", label="part")
    assert a.blob() == muster_blob("A", b"conn-info of A")
    assert a.blob("part") == muster_blob("A", b"\x00partial\xff|NIXLCOMM:", "part")
    ev = a.ok("publish")["event"]
    assert ev["kind"] == "sent" and ev["status"] == 0
    a.ok("publish", label="part")

    r = b.ok("fetch", name="A")
    assert r["event"]["kind"] == "fetched" and r["event"]["name"] == "A"
    assert r["event"]["status"] == 0 and r["event"]["detail"] == ""
    assert b.remote("A") == a.blob()
    assert b.remote("A", "part") is None          # not fetched yet
    b.ok("fetch", name="A", label="part")
    assert b.remote("A", "part") == a.blob("part")
    assert b.ok("list")["names"] == ["A"]
    # fetching the same bytes again is a no-op success
    b.ok("fetch", name="A")
    # A publishes different bytes under a label B has loaded: B refuses
    # them (NIXL's rule) until A is invalidated
    a.set("conn-info of A, v2")
    a.ok("publish")
    r = b.call("fetch", name="A", timeout=10)
    assert r["status"] == -17, r
    assert "invalidate it first" in r["event"]["detail"]
    assert b.remote("A") == muster_blob("A", b"conn-info of A")
    b.ok("drop", name="A")
    b.ok("fetch", name="A")
    assert b.remote("A") == muster_blob("A", b"conn-info of A, v2")


def test_invalidate_reaches_every_peer_that_fetched(etcd, md_agent):
    a = agent_for(md_agent, etcd, "A")
    b = agent_for(md_agent, etcd, "B")
    c = agent_for(md_agent, etcd, "C")
    a.set("A full")
    a.set("A part", label="part")
    a.ok("publish")
    a.ok("publish", label="part")
    b.ok("fetch", name="A")
    c.ok("fetch", name="A", label="part")
    assert b.loaded("A") and c.loaded("A")

    ev = a.ok("invalidate")["event"]
    assert ev["kind"] == "invalidated" and ev["status"] == 0
    assert get_all(etcd, key("A")) == {}          # every label and the marker
    for peer in (b, c):
        ev = peer.wait_event("remote_dropped", "A", timeout=5)
        assert ev is not None, f"{peer.name} was not told: {peer.ok('events')}"
        assert ev["status"] == 0 and ev["op"] == 0
        assert not peer.loaded("A")
    # invalidating twice is not an error (nothing announced, as NIXL)
    a.ok("invalidate")
    # A comes back; B fetches again and is told again on the next invalidate
    a.ok("publish")
    assert keys_only(etcd, key("A")) == [key("A"), key("A", "metadata")]
    b.ok("fetch", name="A")
    a.ok("invalidate")
    assert b.wait_event("remote_dropped", "A", timeout=5) is not None


def test_crashed_agent_expires_with_its_lease(etcd, md_agent):
    a = agent_for(md_agent, etcd, "A", lease_ttl=2.0)
    b = agent_for(md_agent, etcd, "B")
    a.set("soon gone")
    a.set("part", label="part")
    a.ok("publish")
    a.ok("publish", label="part")
    marker, = get_kvs(etcd, key("A"))
    full, = get_kvs(etcd, key("A", "metadata"))
    assert int(marker.get("lease", 0)) != 0, marker
    assert marker.get("lease") == full.get("lease")   # one lease for all keys
    b.ok("fetch", name="A")
    # the live agent keeps its lease alive well past the TTL
    time.sleep(3.0)
    assert len(keys_only(etcd, key("A"))) == 3
    assert b.loaded("A")

    t0 = time.monotonic()
    a.kill()
    ev = b.wait_event("remote_dropped", "A", timeout=10)
    elapsed = time.monotonic() - t0
    assert ev is not None, b.ok("events")
    assert "expired" in ev["detail"] or "deleted" in ev["detail"], ev
    assert 1.0 < elapsed < 7.0, f"dropped {elapsed:.1f} s after the kill (TTL 2 s)"
    assert get_all(etcd, key("A")) == {}
    assert not b.loaded("A")


def test_lost_lease_is_regranted_and_keys_put_again(etcd, md_agent):
    a = agent_for(md_agent, etcd, "A", lease_ttl=3.0)
    b = agent_for(md_agent, etcd, "B")
    a.set("full")
    a.set("part", label="part")
    a.ok("publish")
    a.ok("publish", label="part")
    b.ok("fetch", name="A")
    lease = int(get_kvs(etcd, key("A"))[0]["lease"])
    etcdctl(etcd, "lease", "revoke", f"{lease:x}")
    assert get_all(etcd, key("A")) == {}
    # peers see the deletion as an invalidation ...
    assert b.wait_event("remote_dropped", "A", timeout=5) is not None
    # ... and A notices at its next keep-alive (TTL/3) and puts it all back
    deadline = time.monotonic() + 6.0
    while len(keys_only(etcd, key("A"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    kv = get_all(etcd, key("A"))
    assert kv == {key("A").encode(): b"", key("A", "metadata").encode(): a.blob(),
                  key("A", "part").encode(): a.blob("part")}, kv
    new_lease = int(get_kvs(etcd, key("A", "metadata"))[0]["lease"])
    assert new_lease not in (0, lease)
    b.ok("fetch", name="A")


def test_closed_agent_keys_outlive_it_by_one_ttl(etcd, md_agent):
    """No implicit invalidate on close (as NIXL), but the lease is not
    kept alive any more: the keys go one TTL later and peers drop it."""
    a = agent_for(md_agent, etcd, "A", lease_ttl=2.0)
    b = agent_for(md_agent, etcd, "B")
    a.set("bye")
    a.ok("publish")
    b.ok("fetch", name="A")
    assert a.close() is None
    assert len(keys_only(etcd, key("A"))) == 2
    assert b.wait_event("remote_dropped", "A", timeout=8) is not None
    assert keys_only(etcd, key("A")) == []


def test_lease_ttl_zero_keeps_keys_forever(etcd, md_agent):
    a = agent_for(md_agent, etcd, "A", lease_ttl=0)
    a.set("forever")
    a.ok("publish")
    assert all(int(kv.get("lease", 0)) == 0 for kv in get_kvs(etcd, key("A", "metadata")))
    a.kill()
    assert keys_only(etcd, key("A")) == [key("A"), key("A", "metadata")]


def test_keys_are_exactly_nixls_layout(etcd, md_agent):
    a = agent_for(md_agent, etcd, "A")
    b = agent_for(md_agent, etcd, "B")
    a.set(b"payload\x00\x01")
    a.set(b"partial", label="part")
    a.ok("publish")
    a.ok("publish", label="part")
    b.ok("fetch", name="A")               # a fetcher writes nothing
    assert keys_only(etcd) == ["/nixl/agents//A/", "/nixl/agents//A/metadata",
                               "/nixl/agents//A/part"]
    kv = get_all(etcd)
    assert kv == {b"/nixl/agents//A/": b"",
                  b"/nixl/agents//A/metadata": muster_blob("A", b"payload\x00\x01"),
                  b"/nixl/agents//A/part": muster_blob("A", b"partial", "part")}


@pytest.mark.parametrize("ns", ["/job7", "jobs/", "/nixl/agents"])
def test_namespace_is_joined_verbatim(etcd, md_agent, ns):
    a = agent_for(md_agent, etcd, "A", etcd_namespace=ns)
    b = agent_for(md_agent, etcd, "B", etcd_namespace=ns)
    a.set("x")
    a.ok("publish")
    assert keys_only(etcd) == [f"{ns}/A/", f"{ns}/A/metadata"]
    b.ok("fetch", name="A")
    # an agent in the default namespace does not see it
    c = agent_for(md_agent, etcd, "C", etcd_watch_timeout=0.5)
    assert c.call("fetch", name="A")["status"] == ETIMEDOUT


def test_nixl_blob_written_by_etcdctl_is_fetched(etcd, md_agent):
    """NIXL's side, from the spec: an empty marker and a nixlSerDes blob
    (Agent, Conns, t/c, MemSection, ...) under NS/X/metadata."""
    blob = nixl_blob("X")
    assert blob_agent(blob) == "X"
    etcdctl(etcd, "put", key("X"), "")
    put_bytes(etcd, key("X", "metadata"), blob)
    partial = nixl_blob("X", conns={}, sections=[("UCX", 0, [(0x1000, 64, 0, b"rk")])])
    put_bytes(etcd, key("X", "descs"), partial)
    assert get_all(etcd, key("X", "metadata"))[key("X", "metadata").encode()] == blob

    b = agent_for(md_agent, etcd, "B")
    r = b.ok("fetch", name="X")
    assert r["event"]["name"] == "X"
    assert b.remote("X") == blob
    b.ok("fetch", name="X", label="descs")
    assert b.remote("X", "descs") == partial
    # NIXL invalidates by deleting the prefix: B drops X
    etcdctl(etcd, "del", "--prefix", key("X"))
    ev = b.wait_event("remote_dropped", "X", timeout=5)
    assert ev is not None, b.ok("events")
    assert not b.loaded("X")


def test_misfiled_or_garbage_blob_fails_the_fetch(etcd, md_agent):
    put_bytes(etcd, key("Z", "metadata"), nixl_blob("Y"))     # Y's blob under Z
    put_bytes(etcd, key("G", "metadata"), b"not a nixlSerDes blob")
    # chunk manifests (muster's layout for big blobs) that do not add up
    man = b"\x00muster-chunks\x00"
    put_bytes(etcd, key("M1", "metadata"), man + b"deadbeef 2 1500000")    # chunks missing
    put_bytes(etcd, key("M2", "metadata"), man + b"deadbeef 99 99999999999")  # too big
    put_bytes(etcd, key("M3", "metadata"), man + b"garbage")
    put_bytes(etcd, key("M4", "metadata"), man + b"deadbeef 1 1048577")    # count is wrong
    b = agent_for(md_agent, etcd, "B")
    for name in ("M1", "M2", "M3", "M4"):
        r = b.call("fetch", name=name, timeout=10)
        assert r["status"] not in (0, None), (name, r)
        assert key(name, "metadata") in r["event"]["detail"], r
        assert not b.loaded(name)
    r = b.call("fetch", name="Z", timeout=10)
    assert r["status"] == MU_EPROTO, r
    assert "of Y, not of Z" in r["event"]["detail"], r
    r = b.call("fetch", name="G", timeout=10)
    assert r["status"] == MU_EPROTO, r
    assert "not a metadata blob" in r["event"]["detail"], r
    assert not b.loaded("G")


def test_nixl_reader_reads_muster_keys(etcd, md_agent):
    """A NIXL reader (from the spec): get NS/A/metadata, treat an empty
    value as absent, parse nixlSerDes| and the Agent record."""
    a = agent_for(md_agent, etcd, "A")
    a.set(b"ucx address bytes \x00\xff")
    a.ok("publish")
    a.set(b"p", label="p")
    a.ok("publish", label="p")
    kv = get_all(etcd, key("A"))
    assert kv[key("A").encode()] == b""                       # the marker
    value = kv[key("A", "metadata").encode()]
    assert value.startswith(b"nixlSerDes|Agent\x01\x00\x00\x00\x00\x00\x00\x00A|")
    assert blob_agent(value) == "A"
    assert blob_agent(kv[key("A", "p").encode()]) == "A"
    # etcdctl's plain text output shows the same bytes
    out = etcdctl(etcd, "get", key("A", "metadata"), "--print-value-only").stdout
    assert out.rstrip(b"\n") == value


# ---- waiting fetches ----

def test_fetch_waits_for_a_later_publish(etcd, md_agent):
    b = agent_for(md_agent, etcd, "B", etcd_watch_timeout=10.0)
    a = agent_for(md_agent, etcd, "A")
    op_full = b.ok("fetch", name="A", nowait=True)["op"]
    op_part = b.ok("fetch", name="A", label="late", nowait=True)["op"]
    time.sleep(1.0)
    assert b.ok("events")["events"] == []           # both still waiting
    a.set("published late")
    a.set("late partial", label="late")
    t0 = time.monotonic()
    a.ok("publish")
    a.ok("publish", label="late")
    r = b.ok("wait", op=op_full, timeout=10)
    assert r["event"]["name"] == "A"
    b.ok("wait", op=op_part, timeout=10)
    assert time.monotonic() - t0 < 3.0
    assert b.remote("A") == a.blob()
    assert b.remote("A", "late") == a.blob("late")


def test_fetch_of_never_published_agent_times_out(etcd, md_agent):
    b = agent_for(md_agent, etcd, "B", etcd_watch_timeout=1.5)
    t0 = time.monotonic()
    ops = [b.ok("fetch", name=n, nowait=True)["op"] for n in ("ghost1", "ghost2", "ghost3")]
    for op, n in zip(ops, ("ghost1", "ghost2", "ghost3")):
        r = b.call("wait", op=op, timeout=10)
        assert r["status"] == ETIMEDOUT, r
        assert r["event"]["kind"] == "fetched" and r["event"]["name"] == n
        detail = r["event"]["detail"]
        assert n in detail and "1.5" in detail, detail
    elapsed = time.monotonic() - t0
    # the waits run together, not one after another (NIXL: N x timeout)
    assert 1.4 < elapsed < 3.5, elapsed
    assert not b.loaded("ghost1")


def test_fetch_fails_when_the_key_is_deleted_while_waiting(etcd, md_agent):
    b = agent_for(md_agent, etcd, "B", etcd_watch_timeout=8.0)
    op = b.ok("fetch", name="A", nowait=True)["op"]
    time.sleep(0.5)
    etcdctl(etcd, "put", key("A", "metadata"), "")    # an empty value is absent
    time.sleep(0.3)
    etcdctl(etcd, "del", key("A", "metadata"))
    r = b.call("wait", op=op, timeout=10)
    assert r["status"] == ENOENT, r
    assert "deleted" in r["event"]["detail"]


# ---- a cluster losing its leader ----

@pytest.mark.parametrize("leader", [0, 1], ids=["leader-first", "leader-second"])
def test_leader_killed_while_agents_publish_and_fetch(etcd_cluster, md_agent, leader):
    cluster = etcd_cluster
    # the agents start on the first endpoint. With the leader there, the
    # kill takes both the leader and the member the agents talk to; with
    # it second, the agents' member loses its leader under them
    cluster.move_leader(cluster.members[leader])
    eps = cluster.endpoints
    a = md_agent("A", etcd_endpoints=eps, lease_ttl=4.0, etcd_watch_timeout=10.0)
    b = md_agent("B", etcd_endpoints=eps, etcd_watch_timeout=10.0)
    a.set("base")
    a.ok("publish")
    b.ok("fetch", name="A")                 # B now watches A's marker

    killed, problems = [], []

    def kill_later():
        try:
            time.sleep(1.0)
            killed.append((time.monotonic(), cluster.kill_leader()))
        except BaseException as exc:  # noqa: BLE001
            problems.append(repr(exc))

    killer = threading.Thread(target=kill_later)
    t0 = time.monotonic()
    killer.start()
    failures, rounds, slowest, slowest_pub = [], 0, (0.0, -1), (0.0, -1)
    while time.monotonic() - t0 < 7.0 or (not killed and not problems):
        label = f"l{rounds}"
        a.set(f"value {rounds}", label=label)
        r = a.call("publish", label=label, timeout=20)
        if r.get("status") != 0:
            failures.append(("publish", rounds, time.monotonic() - t0, r))
            rounds += 1
            continue
        slowest_pub = max(slowest_pub, (r["elapsed"], rounds))
        if r["elapsed"] > 0.5:
            print(f"slow publish: round {rounds} at {time.monotonic() - t0:.2f} s took "
                  f"{r['elapsed']:.2f} s")
        r = b.call("fetch", name="A", label=label, timeout=20)
        if r.get("status") != 0:
            failures.append(("fetch", rounds, time.monotonic() - t0, r))
        else:
            slowest = max(slowest, (r["elapsed"], rounds))
            if b.remote("A", label) != muster_blob("A", f"value {rounds}".encode(), label):
                failures.append(("content", rounds, time.monotonic() - t0, None))
        rounds += 1
        if time.monotonic() - t0 > 60:
            break
    killer.join(15)
    assert not problems, problems
    assert killed, "the leader was not killed"
    kill_at, victim = killed[0]
    assert victim is cluster.members[leader]
    assert rounds > 20, rounds
    assert not failures, (f"{len(failures)} of {rounds} rounds failed (leader "
                          f"killed at {kill_at - t0:.1f} s): {failures[:5]}")
    # the survivors elected a new leader; B's marker watch moved with it
    assert cluster.leader() is not victim
    # the keys are still there and live (A's lease kept alive elsewhere)
    time.sleep(4.5)
    assert b.loaded("A")
    assert len(keys_only(cluster.members[2].url, key("A"))) == rounds + 2
    a.ok("invalidate")
    assert b.wait_event("remote_dropped", "A", timeout=10) is not None
    # the killed member comes back and serves the latest state
    cluster.restart(victim)
    assert keys_only(victim.url, key("A")) == []
    a.ok("publish")
    assert keys_only(victim.url, key("A")) == [key("A"), key("A", "metadata")]
    print(f"\n{rounds} rounds, leader killed at {kill_at - t0:.1f} s, slowest "
          f"fetch {slowest[0]:.2f} s (round {slowest[1]}), slowest publish "
          f"{slowest_pub[0]:.2f} s (round {slowest_pub[1]})")


# ---- big blobs ----

def test_3mib_blob_is_chunked_and_invalidated_whole(etcd, md_agent):
    a = agent_for(md_agent, etcd, "A", op_timeout=10.0)
    b = agent_for(md_agent, etcd, "B", op_timeout=10.0)
    c = agent_for(md_agent, etcd, "C", op_timeout=10.0)
    size = 3 << 20
    res = a.ok("set", size=size, seed=1)
    blob_len, sha = res["len"], res["sha"]
    assert blob_len > size
    a.ok("publish", timeout=30)
    keys = keys_only(etcd)
    chunks = [k for k in keys if "/.chunk/" in k]
    nchunks = -(-blob_len // (1 << 20))
    assert len(chunks) == nchunks == 4, keys
    assert all(k.startswith("/nixl/agents//A/metadata/.chunk/") for k in chunks)
    assert sorted(set(keys) - set(chunks)) == ["/nixl/agents//A/", "/nixl/agents//A/metadata"]
    manifest = get_all(etcd, key("A", "metadata"))[key("A", "metadata").encode()]
    assert manifest.startswith(b"\x00muster-chunks\x00"), manifest[:40]
    assert blob_agent(manifest) is None     # not a blob a NIXL reader could load

    r = b.ok("fetch", name="A", timeout=30)
    assert r["event"]["name"] == "A"
    got = b.ok("get", name="A", digest=True)
    assert (got["len"], got["sha"]) == (blob_len, sha)

    # a new big blob replaces the old chunks (no garbage left behind)
    a.ok("set", size=size + 12345, seed=2)
    a.ok("publish", timeout=30)
    keys2 = keys_only(etcd)
    chunks2 = [k for k in keys2 if "/.chunk/" in k]
    assert len(chunks2) == 4 and not set(chunks2) & set(chunks), keys2
    c.ok("fetch", name="A", timeout=30)
    assert c.ok("get", name="A", digest=True)["sha"] == a.ok("get_local", digest=True)["sha"]

    # invalidate removes the chunks with everything else; B is told
    a.ok("invalidate")
    assert keys_only(etcd) == []
    assert b.wait_event("remote_dropped", "A", timeout=5) is not None


# ---- a delete watch that etcd ends ----

@pytest.fixture
def link():
    links = []

    def start(port):
        links.append(Relay(port))
        return links[-1]

    yield start
    for ln in links:
        ln.close()


def test_invalidation_is_not_missed_when_etcd_ends_the_delete_watch(etcd, md_agent, link):
    """B reaches etcd through a link that is cut. Meanwhile A invalidates,
    C invalidates and publishes again, and etcd is compacted past both.
    When the link is back, B's delete watch resumes from a compacted
    revision and etcd cancels it (etcd 3.4's gateway: "canceled": true
    with compact_revision). B must then read the markers afresh: A's is
    gone and C's is newer than B's copy, so both are dropped, and the new
    watch sees later invalidations."""
    ln = link(etcd.port)
    a = agent_for(md_agent, etcd, "A")
    c = agent_for(md_agent, etcd, "C")
    b = agent_for(md_agent, etcd, "B", etcd_endpoints=f"http://127.0.0.1:{ln.port}",
                  op_timeout=2.0)
    for x in (a, c):
        x.set(f"{x.name} v1")
        x.ok("publish")
        b.ok("fetch", name=x.name)
    ln.cut()
    a.ok("invalidate")
    c.ok("invalidate")
    c.ok("publish")
    out = etcdctl(etcd, "put", "/elsewhere", "x", "-w", "json").stdout
    rev = int(json.loads(out)["header"]["revision"])
    etcdctl(etcd, "compact", rev)
    time.sleep(0.5)            # B's watch is retrying against the cut link
    assert b.loaded("A") and b.loaded("C")
    ln.restore()
    for name in ("A", "C"):
        ev = b.wait_event("remote_dropped", name, timeout=10)
        assert ev is not None, (name, b.ok("events"), b.log_text())
        assert "deleted" in ev["detail"], ev
        assert not b.loaded(name)
    assert "etcd ended the watch" in b.log_text()
    # the re-armed watch: C's next invalidation reaches B as usual
    b.ok("fetch", name="C")
    c.ok("invalidate")
    assert b.wait_event("remote_dropped", "C", timeout=5) is not None, b.log_text()



def test_waiting_fetch_survives_etcd_ending_its_watch(etcd, md_agent, link):
    """B waits for A's blob on a watch through a link that is cut. A
    publishes meanwhile and etcd is compacted past it, so the watch, when
    it resumes, is canceled by etcd. B must read the key again (and find
    it), not report it deleted."""
    ln = link(etcd.port)
    b = agent_for(md_agent, etcd, "B", etcd_endpoints=f"http://127.0.0.1:{ln.port}",
                  etcd_watch_timeout=20.0, op_timeout=2.0)
    op = b.ok("fetch", name="A", nowait=True)["op"]
    time.sleep(0.5)            # its read is done: it waits on a watch now
    ln.cut()
    a = agent_for(md_agent, etcd, "A")
    a.set("A, published while B could not hear")
    a.ok("publish")
    out = etcdctl(etcd, "put", "/elsewhere", "x", "-w", "json").stdout
    etcdctl(etcd, "compact", int(json.loads(out)["header"]["revision"]))
    time.sleep(0.5)
    ln.restore()
    r = b.call("wait", op=op, timeout=20)
    assert r["status"] == 0, (r, b.log_text())
    assert b.remote("A") == a.blob()

# ---- configuration from the environment ----

def test_muster_namespace_overrides_nixls(etcd, md_agent):
    env = {"NIXL_ETCD_ENDPOINTS": etcd.endpoints, "NIXL_ETCD_NAMESPACE": "/from-nixl",
           "MUSTER_ETCD_NAMESPACE": "/from-muster"}
    a = md_agent("A", env=env)
    assert a.backend == "ETCD"
    a.set("x")
    a.ok("publish")
    assert keys_only(etcd) == ["/from-muster/A/", "/from-muster/A/metadata"]
    # a peer configured the NIXL way, with that namespace, finds it
    b = md_agent("B", env={"NIXL_ETCD_ENDPOINTS": etcd.endpoints,
                           "NIXL_ETCD_NAMESPACE": "/from-muster"})
    b.ok("fetch", name="A")
    # an explicit namespace beats both variables
    c = md_agent("C", env=env, etcd_namespace="/explicit")
    c.set("y")
    c.ok("publish")
    assert "/explicit/C/metadata" in keys_only(etcd)


def test_nixl_etcd_endpoints_alone(etcd, md_agent):
    a = md_agent("A", env={"NIXL_ETCD_ENDPOINTS": etcd.url})
    assert a.backend == "ETCD"
    a.set("via NIXL_ETCD_ENDPOINTS")
    a.ok("publish")
    assert keys_only(etcd) == ["/nixl/agents//A/", "/nixl/agents//A/metadata"]
    # no scheme, ';' as separator, a dead member first (as NIXL splits them)
    dead = free_ports(1)[0]
    d = md_agent("D", env={"NIXL_ETCD_ENDPOINTS": f"127.0.0.1:{dead};127.0.0.1:{etcd.port}"})
    d.ok("fetch", name="A")
    # MUSTER_ETCD_ENDPOINTS wins over NIXL_ETCD_ENDPOINTS (here: a dead one)
    dead = free_ports(1)[0]
    b = md_agent("B", env={"NIXL_ETCD_ENDPOINTS": f"http://127.0.0.1:{dead}",
                           "MUSTER_ETCD_ENDPOINTS": etcd.url})
    b.ok("fetch", name="A")
    # no store at all: a fetch without a peer is refused at once
    c = md_agent("C")
    assert c.backend == "P2P"
    r = c.call("fetch", name="A")
    assert not r["ok"] and r["code"] == MU_EARG, r


@pytest.mark.parametrize("env", [
    {"NIXL_ETCD_ENDPOINTS": "http://127.0.0.1:2379", "NIXL_TCPSTORE_ENDPOINT": "127.0.0.1:29500"},
    {"MUSTER_ETCD_ENDPOINTS": "http://127.0.0.1:2379",
     "MUSTER_TCPSTORE_ENDPOINT": "127.0.0.1:29500"},
    {"MUSTER_ETCD_ENDPOINTS": "", "MUSTER_TCPSTORE_ENDPOINT": "127.0.0.1:29500"},
], ids=["nixl+nixl", "muster+muster", "empty-etcd+ts"])
def test_etcd_and_tcpstore_together_is_a_creation_error(md_agent, env):
    """Both stores from the same source (MUSTER_* or NIXL_*)."""
    res = md_agent("A", env=env, expect_fail=True)
    assert res["ready"] is False and res["exit"] == 3
    assert res["code"] == MU_EARG, res
    assert "mutually exclusive" in res["log"], res["log"]
    # the caller (Python's exception) is told why, naming both variables
    assert "mutually exclusive" in res["error"], res
    assert all(var in res["error"] for var in env), res


@pytest.mark.parametrize("env,kw,backend", [
    ({"MUSTER_ETCD_ENDPOINTS": "http://127.0.0.1:2379",
      "NIXL_TCPSTORE_ENDPOINT": "127.0.0.1:29500"}, {}, "ETCD"),
    ({"NIXL_ETCD_ENDPOINTS": "http://127.0.0.1:2379",
      "MUSTER_TCPSTORE_ENDPOINT": "127.0.0.1:29500"}, {}, "TCPStore"),
    ({"NIXL_ETCD_ENDPOINTS": "http://127.0.0.1:2379"},
     {"tcpstore_endpoint": "127.0.0.1:29500"}, "TCPStore"),
    ({"MUSTER_TCPSTORE_ENDPOINT": "127.0.0.1:29500", "NIXL_ETCD_ENDPOINTS": "x"},
     {"etcd_endpoints": "http://127.0.0.1:2379"}, "ETCD"),
], ids=["muster-etcd>nixl-ts", "muster-ts>nixl-etcd", "api-ts>nixl-etcd",
        "api-etcd>muster-ts"])
def test_store_source_precedence(md_agent, env, kw, backend):
    """The store comes from one source taken whole: the API's options, else
    the MUSTER_* variables, else NIXL_*'s; a lower source's store is not
    looked at, so it cannot clash (no I/O happens at creation)."""
    a = md_agent("A", env=env, **kw)
    assert a.backend == backend


def test_both_stores_given_as_arguments_is_a_creation_error(md_agent):
    res = md_agent("A", expect_fail=True, etcd_endpoints="http://127.0.0.1:2379",
                   tcpstore_endpoint="127.0.0.1:29500")
    assert res["code"] == MU_EARG and "mutually exclusive" in res["log"], res
    assert "mutually exclusive" in res["error"] and "etcd_endpoints" in res["error"], res


def test_empty_etcd_endpoints_is_a_creation_error(md_agent):
    res = md_agent("A", env={"NIXL_ETCD_ENDPOINTS": ""}, expect_fail=True)
    assert res["code"] == MU_EARG and "empty" in res["log"], res
    assert "NIXL_ETCD_ENDPOINTS is set but empty" in res["error"], res


# ---- bad etcd endpoints ----

def test_endpoint_down_then_up(etcd_factory, md_agent):
    port = free_ports(1)[0]
    a = md_agent("A", etcd_endpoints=f"http://127.0.0.1:{port}", op_timeout=2.0,
                 etcd_watch_timeout=2.0)
    a.set("x")
    t0 = time.monotonic()
    r = a.call("publish", timeout=15)
    assert r["status"] not in (0, None), r
    assert f"127.0.0.1:{port}" in r["event"]["detail"], r
    r = a.call("fetch", name="Q", timeout=15)
    assert r["status"] not in (0, None), r
    assert f"127.0.0.1:{port}" in r["event"]["detail"], r
    assert time.monotonic() - t0 < 8.0
    # etcd comes up on that endpoint: the same agent works
    cluster = etcd_factory(1, client_ports=[port])
    a.ok("publish")
    assert keys_only(cluster) == [key("A"), key("A", "metadata")]
    # a dead endpoint ahead of a live one: failover
    dead = free_ports(1)[0]
    b = md_agent("B", etcd_endpoints=f"http://127.0.0.1:{dead},{cluster.url}")
    b.ok("fetch", name="A")
    b.set("y")
    b.ok("publish")
    b.ok("invalidate")


class _Garbage(http.server.BaseHTTPRequestHandler):
    mode = "text"

    def do_POST(self):  # noqa: N802 - http.server's name
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        if self.mode == "hang":
            time.sleep(6)
            return
        body = b"<html>definitely not etcd</html>" if self.mode == "text" else b"oops"
        self.send_response(200 if self.mode == "text" else 500)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def garbage_http():
    servers = []

    def start(mode):
        handler = type(f"Garbage_{mode}", (_Garbage,), {"mode": mode})
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return srv.server_address[1]

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("mode", ["text", "error500", "hang"])
def test_endpoint_answering_garbage(garbage_http, etcd, md_agent, mode):
    port = garbage_http(mode)
    a = md_agent("A", etcd_endpoints=f"http://127.0.0.1:{port}", op_timeout=2.0,
                 etcd_watch_timeout=2.0)
    a.set("x")
    t0 = time.monotonic()
    r = a.call("publish", timeout=15)
    assert r["status"] not in (0, None), r
    assert r["event"]["detail"], r
    r = a.call("fetch", name="Q", timeout=15)
    assert r["status"] not in (0, None), r
    assert r["event"]["detail"], r
    assert time.monotonic() - t0 < 9.0, "the agent waited longer than its op_timeout"
    print(f"\n{mode}: {r['status']} {r['event']['detail']!r}")


@pytest.mark.parametrize("mode", ["refused", "text", "error500", "hang"])
def test_failover_past_a_bad_first_endpoint(garbage_http, etcd, md_agent, mode):
    """A bad member first in the list, a live one next. The publish's lease
    grant is retried on the live member (a grant repeated after a lost
    answer only leaves an unused lease to expire), so the first publish
    works; and the client stays on the live member: what follows does not
    wait on the bad one again."""
    port = free_ports(1)[0] if mode == "refused" else garbage_http(mode)
    b = md_agent("B", etcd_endpoints=f"http://127.0.0.1:{port},{etcd.url}",
                 op_timeout=2.0)
    b.set("y")
    tries = []
    for _ in range(3):
        r = b.call("publish", timeout=20)
        tries.append((r["status"], r["event"]["detail"], round(r["elapsed"], 2)))
        if r["status"] == 0:
            break
    print(f"\n{mode}: {tries}")
    assert tries[-1][0] == 0 and len(tries) == 1, tries
    assert keys_only(etcd) == [key("B"), key("B", "metadata")]
    # later exchanges go straight to the live member (the bad one would
    # cost op_timeout, or fail)
    c = md_agent("C", etcd_endpoints=etcd.url)
    c.set("z")
    c.ok("publish")
    b.set("y2", label="more")
    for cmd, kw in (("publish", {"label": "more"}), ("fetch", {"name": "C"}),
                    ("invalidate", {})):
        r = b.ok(cmd, **kw)
        assert r["elapsed"] < 1.0, (cmd, r)


def test_etcd_restart_keeps_watches_and_waits(etcd, md_agent):
    """The single member restarts (same data dir): a marker watch and a
    waiting fetch both carry on, and the lease is still kept alive."""
    a = agent_for(md_agent, etcd, "A", lease_ttl=3.0)
    b = agent_for(md_agent, etcd, "B", etcd_watch_timeout=15.0)
    a.set("A")
    a.ok("publish")
    b.ok("fetch", name="A")
    op = b.ok("fetch", name="C", nowait=True)["op"]
    time.sleep(0.5)            # its read is done: it waits on a watch now
    member = etcd.members[0]
    member.kill()
    time.sleep(1.5)
    etcd.restart(member)
    # the waiting fetch completes when C publishes now
    c = agent_for(md_agent, etcd, "C")
    c.set("C")
    c.ok("publish")
    r = b.call("wait", op=op, timeout=15)
    assert r["status"] == 0, r
    # A's keys outlive the outage and a TTL more
    time.sleep(3.5)
    assert keys_only(etcd, key("A")) == [key("A"), key("A", "metadata")]
    assert b.loaded("A")
    # and B's marker watch still sees A's invalidation
    a.ok("invalidate")
    assert b.wait_event("remote_dropped", "A", timeout=8) is not None
