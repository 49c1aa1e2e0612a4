# SPDX-License-Identifier: MIT
"""The md agent's remote metadata cache keeps to its byte limit
(issue 12, finding 7).

A raw NIXL peer (written from spec nixl-metadata.md section 6) pushes
LOADs for many distinct agents of 1 MiB each at a listening agent in its
own process. Before, every one was kept (+413 MB for 400 agents, still
held after the pusher left). Now the agent holds at most
remote_cache_max bytes, evicting pushed-only agents first, so metadata it
fetched itself survives the flood, and each eviction is a REMOTE_DROPPED
event. Resident memory is read from /proc and compared with a loose
bound (a loaded machine, glibc's allocator keeping some freed memory).
"""

import os
import time

from mdpeer import HOST, NixlClient, md_agent, muster_blob  # noqa: F401

MIB = 1 << 20
LIMIT = 16 * MIB
PUSHES = 200


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_flood_of_pushed_agents_stays_under_the_limit(md_agent):  # noqa: F811
    # Should the library be an ASan build, freed blobs would sit in its
    # quarantine (256 MiB by default) and count as resident: keep it small.
    asan = os.environ.get("ASAN_OPTIONS", "")
    env = {"ASAN_OPTIONS": (asan + ":" if asan else "") + "quarantine_size_mb=4"}
    a = md_agent("A", env=env, listen=True, listen_host=HOST, listen_port=0,
                 remote_cache_max=LIMIT)
    b = md_agent("B", listen=True, listen_host=HOST, listen_port=0)
    b.ok("set", payload="B's own metadata, fetched by A")
    a.ok("fetch", name="B", peer=[HOST, b.listen_port])
    idle = rss(a.proc.pid)
    payload = b"\xab" * MIB
    with NixlClient(a.listen_port, timeout=30) as pusher:
        for i in range(PUSHES):
            pusher.load(muster_blob(f"evil-{i}", payload))
    # the pusher is gone; the last push was loaded once it shows in the list
    deadline = time.monotonic() + 30
    while "evil-%d" % (PUSHES - 1) not in a.ok("list")["names"]:
        assert time.monotonic() < deadline, "the pushes were not all loaded"
        time.sleep(0.05)
    held = a.ok("remote_bytes")["bytes"]
    names = a.ok("list")["names"]
    grown = rss(a.proc.pid) - idle
    assert held <= LIMIT, held
    assert len(names) <= LIMIT // MIB, names
    # B was fetched: the pushes evicted each other, not B
    assert "B" in names
    assert "evil-0" not in names
    events = a.ok("events")["events"]
    evicted = [e for e in events
               if e["kind"] == "remote_dropped" and "evicted" in e["detail"]]
    assert len(evicted) == PUSHES + 1 - len(names)
    # 200 MiB were pushed: what stays resident is the limit plus slack
    assert grown <= LIMIT + 48 * MIB, grown
