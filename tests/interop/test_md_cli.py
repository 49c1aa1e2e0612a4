# SPDX-License-Identifier: MIT
"""`muster md publish|fetch|list|invalidate` against a real etcd member,
a TCPStore, a muster agent in another process and a raw NIXL listener."""

import signal
import subprocess
import time

import pytest

from etcdfix import etcd, etcd_factory, keys_only  # noqa: F401
from mdpeer import NixlListener, agent_env, md_agent, muster_blob, nixl_blob  # noqa: F401
from storefix import muster_store, torch_server  # noqa: F401

CLI_TIMEOUT = 30.0


def md(muster_bin, *args, env=None, timeout=CLI_TIMEOUT, stdin=None):
    """Run `muster md ARGS`; the CompletedProcess (bytes)."""
    try:
        return subprocess.run([str(muster_bin), "md", *[str(a) for a in args]],
                              capture_output=True, timeout=timeout, input=stdin,
                              env=agent_env(env))
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"muster md {args} did not finish within {timeout} s; "
                    f"stderr: {exc.stderr}")


def ok(done):
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    return done


def test_publish_fetch_list_invalidate_through_etcd(muster_bin, etcd, tmp_path):  # noqa: F811
    ep = ["--etcd", etcd.url]
    done = ok(md(muster_bin, "publish", "--name", "A", "--value", "hello A", *ep))
    assert b"published A" in done.stderr
    payload = bytes(range(256)) * 3
    f = tmp_path / "part.bin"
    f.write_bytes(payload)
    ok(md(muster_bin, "publish", "--name", "A", "--file", f, "--label", "part", *ep))
    ok(md(muster_bin, "publish", "--name", "B", "--value", "hello B", *ep))
    assert keys_only(etcd) == ["/nixl/agents//A/", "/nixl/agents//A/metadata",
                               "/nixl/agents//A/part", "/nixl/agents//B/",
                               "/nixl/agents//B/metadata"]

    assert ok(md(muster_bin, "fetch", "A", *ep)).stdout == b"hello A"
    assert ok(md(muster_bin, "fetch", "A", "--label", "part", *ep)).stdout == payload
    assert ok(md(muster_bin, "fetch", "A", "--raw", *ep)).stdout == muster_blob("A", b"hello A")
    assert ok(md(muster_bin, "list", *ep)).stdout.split() == [b"A", b"B"]

    ok(md(muster_bin, "invalidate", "--name", "A", *ep))
    assert keys_only(etcd, "/nixl/agents//A/") == []
    assert ok(md(muster_bin, "list", *ep)).stdout.split() == [b"B"]
    # the environment works as well as --etcd
    done = ok(md(muster_bin, "fetch", "B", env={"NIXL_ETCD_ENDPOINTS": etcd.url}))
    assert done.stdout == b"hello B"


def test_fetch_of_a_missing_agent_exits_1(muster_bin, etcd):  # noqa: F811
    t0 = time.monotonic()
    done = md(muster_bin, "fetch", "nobody", "--etcd", etcd.url, "--timeout", "1")
    assert done.returncode == 1, done
    assert done.stdout == b""
    assert b"nobody" in done.stderr and b"fetch failed" in done.stderr, done.stderr
    assert time.monotonic() - t0 < 6.0
    # etcd down: exits 1 too, naming the endpoint
    from etcdfix import free_ports
    dead = free_ports(1)[0]
    done = md(muster_bin, "fetch", "nobody", "--etcd", f"127.0.0.1:{dead}", "--timeout", "1")
    assert done.returncode == 1 and f"127.0.0.1:{dead}".encode() in done.stderr, done
    # usage errors exit 2
    assert md(muster_bin, "publish", "--value", "x", "--etcd", etcd.url).returncode == 2
    assert md(muster_bin, "frobnicate").returncode == 2


def test_cli_and_agent_processes_interoperate(muster_bin, etcd, md_agent):  # noqa: F811
    a = md_agent("A", etcd_endpoints=etcd.url)
    a.set("from an agent process")
    a.ok("publish")
    assert ok(md(muster_bin, "fetch", "A", "--etcd", etcd.url)).stdout == b"from an agent process"
    b = md_agent("B", etcd_endpoints=etcd.url)
    ok(md(muster_bin, "publish", "--name", "C", "--value", "from the CLI",
          "--etcd", etcd.url))
    b.ok("fetch", name="C")
    assert b.remote("C") == muster_blob("C", b"from the CLI")
    # invalidating from the CLI reaches B (its marker watch)
    ok(md(muster_bin, "invalidate", "--name", "C", "--etcd", etcd.url))
    assert b.wait_event("remote_dropped", "C", timeout=5) is not None


def test_publish_hold_keeps_the_lease_until_sigint(muster_bin, etcd):  # noqa: F811
    proc = subprocess.Popen([str(muster_bin), "md", "publish", "--name", "H", "--value",
                             "held", "--etcd", etcd.url, "--lease-ttl", "2", "--hold"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=agent_env())
    try:
        deadline = time.monotonic() + 10
        while keys_only(etcd, "/nixl/agents//H/") == [] and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(3.0)                           # longer than the TTL
        assert keys_only(etcd, "/nixl/agents//H/") == ["/nixl/agents//H/",
                                                       "/nixl/agents//H/metadata"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    # no invalidate on exit: the keys go with the lease
    deadline = time.monotonic() + 8
    while keys_only(etcd, "/nixl/agents//H/") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert keys_only(etcd, "/nixl/agents//H/") == []


def test_cli_over_tcpstore_and_p2p(muster_bin, muster_store, md_agent):  # noqa: F811
    srv = muster_store()
    ts = ["--tcpstore", f"127.0.0.1:{srv.port}"]
    ok(md(muster_bin, "publish", "--name", "T", "--value", "via tcpstore", *ts))
    assert ok(md(muster_bin, "fetch", "T", *ts)).stdout == b"via tcpstore"
    done = md(muster_bin, "fetch", "nobody", *ts, "--timeout", "1")
    assert done.returncode == 1 and b"nobody" in done.stderr, done
    # P2P: fetch from a NIXL listener prints the raw blob (not muster's)
    blob = nixl_blob("X")
    with NixlListener(blob=blob) as nixl:
        done = ok(md(muster_bin, "fetch", "X", "--peer", f"127.0.0.1:{nixl.port}"))
        assert done.stdout == blob
        # publish --peer pushes a LOAD; invalidate --peer an INVL
        ok(md(muster_bin, "publish", "--name", "P", "--value", "pushed",
              "--peer", f"127.0.0.1:{nixl.port}"))
        ok(md(muster_bin, "invalidate", "--name", "P", "--peer", f"127.0.0.1:{nixl.port}"))
        nixl.wait_frames(3)
        assert nixl.dropped == ["P"]
    # and to a muster agent's listener
    a = md_agent("A", listen=True, listen_host="127.0.0.1", listen_port=0)
    a.set("A over p2p")
    ok(md(muster_bin, "publish", "--name", "P", "--value", "pushed", "--peer",
          f"127.0.0.1:{a.listen_port}"))
    assert a.wait_event("remote_loaded", "P", timeout=5)["status"] == 0
    assert a.remote("P") == muster_blob("P", b"pushed")
    assert ok(md(muster_bin, "fetch", "A", "--peer",
                 f"127.0.0.1:{a.listen_port}")).stdout == b"A over p2p"


def test_list_through_a_tcpstore(muster_bin, muster_store, md_agent):  # noqa: F811
    """`md list --tcpstore` reads the store's keys with LIST (a v2 request)
    and prints each agent with NIXL keys once, sorted; the environment
    selects the store as it does for an agent."""
    srv = muster_store()
    ts = ["--tcpstore", f"127.0.0.1:{srv.port}"]
    assert ok(md(muster_bin, "list", *ts)).stdout == b""
    ok(md(muster_bin, "publish", "--name", "B", "--value", "b", *ts))
    ok(md(muster_bin, "publish", "--name", "A", "--value", "a", *ts))
    ok(md(muster_bin, "publish", "--name", "A", "--value", "a part", "--label", "p", *ts))
    # an agent process publishing under a label only is listed too
    c = md_agent("C", tcpstore_endpoint=f"127.0.0.1:{srv.port}")
    c.set("c", label="conn")
    c.ok("publish", label="conn")
    assert ok(md(muster_bin, "list", *ts)).stdout.split() == [b"A", b"B", b"C"]
    done = ok(md(muster_bin, "list", env={"MUSTER_TCPSTORE_ENDPOINT": f"127.0.0.1:{srv.port}",
                                          "NIXL_ETCD_ENDPOINTS": "http://127.0.0.1:1"}))
    assert done.stdout.split() == [b"A", b"B", b"C"]
    # no store at all: a usage error that says what is needed
    done = md(muster_bin, "list")
    assert done.returncode == 2 and b"needs a store" in done.stderr, done


def test_list_through_torch_113_store_says_it_cannot(muster_bin, torch_server):  # noqa: F811
    srv = torch_server()
    done = md(muster_bin, "list", "--tcpstore", f"127.0.0.1:{srv.port}", "--timeout", "10")
    assert done.returncode == 1, done
    assert b"cannot list its keys" in done.stderr and b"v1" in done.stderr, done
    assert done.stdout == b""


def test_invalidate_with_label_through_a_tcpstore(muster_bin, muster_store):  # noqa: F811
    """A TCPStore has no prefix delete: `invalidate --label L` removes the
    full blob's key and L's, so neither can be fetched and the agent is
    no longer listed."""
    srv = muster_store()
    ts = ["--tcpstore", f"127.0.0.1:{srv.port}"]
    ok(md(muster_bin, "publish", "--name", "T", "--value", "full", *ts))
    ok(md(muster_bin, "publish", "--name", "T", "--value", "part", "--label", "p", *ts))
    ok(md(muster_bin, "publish", "--name", "U", "--value", "u", "--label", "p", *ts))
    assert ok(md(muster_bin, "fetch", "T", "--label", "p", *ts)).stdout == b"part"
    ok(md(muster_bin, "invalidate", "--name", "T", "--label", "p", *ts))
    for extra in ([], ["--label", "p"]):
        done = md(muster_bin, "fetch", "T", *extra, *ts, "--timeout", "1")
        assert done.returncode == 1 and done.stdout == b"", (extra, done)
    assert ok(md(muster_bin, "list", *ts)).stdout.split() == [b"U"]
    # another agent's key under the same label stays
    assert ok(md(muster_bin, "fetch", "U", "--label", "p", *ts)).stdout == b"u"
