# SPDX-License-Identifier: MIT
"""What a lying, idle or greedy peer can take from a stage, a metrics port
or a device server (issue 22, items 4, 5 and 8; docs/internals/budgets.md).

* A frame's declared tensors are charged against --conn-budget and
  --total-budget before anything is allocated, and their storage grows
  as the bytes come: 69 bytes that declare 300 MiB get an ERROR naming
  the budget, not 300 MiB of zeroed memory. A message has --body-timeout
  to arrive whole, however it trickles.
* Connections idle between messages are closed after --idle-timeout, and
  at --max-connections the longest idle makes room for a newcomer: idle
  holders never lock a coordinator out.
* One connection gets a share of --max-sequences
  (--max-sequences-per-connection, half by default), and a sequence
  unused for --sequence-idle-timeout is closed when another is opened.
* 16 idle holders of a metrics port do not stop a scrape.
* A device server holding one silent session answers a new handshake at
  once: it queues for --queue-timeout, then is told the device is busy.
"""

import json
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

import stagefix
from conftest import HOST, MusterProcess, assert_closed, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import hostile  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
STORIES = REPO / "models" / "stories260K" / "stories260K.bin"
HDR = struct.Struct("<4sHHiIQQQ")
INFO, FORWARD, ERROR, READY, SEQ_OPEN = 1, 2, 4, 9, 10
MIB = 1024  # /proc figures are KiB


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
        s.port = int(s.wait_log(r"serving on \S+:(\d+)", timeout=30)[0])
        return s

    yield start
    problems = [f"stage: {p}" for s in started for p in [s.stop()] if p]
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture
def llm_stage(muster_bin, tmp_path):
    start = stagefix.stage_factory(muster_bin, tmp_path, None)

    def one(*extra):
        (s,) = start(STORIES, 1, "--threads", 1, *extra)
        return s
    yield one
    start.teardown()


def recv_msg(sock):
    magic, _ver, mtype, status, _arg, mid, aux, n = HDR.unpack(hostile.recv_exact(sock, HDR.size))
    assert magic == b"MUPL"
    return mtype, status, mid, hostile.recv_exact(sock, n)


def ask(sock, mtype, body=b"", rid=1, aux=0):
    sock.sendall(HDR.pack(b"MUPL", 1, mtype, 0, 0, rid, aux, len(body)) + body)
    return recv_msg(sock)


def frame_head(name, dims):
    """A one-tensor frame up to its data: count, name, rank, dims, numel."""
    numel = 1
    for d in dims:
        numel *= d
    return (struct.pack("<I", 1) + struct.pack("<I", len(name)) + name.encode()
            + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
            + struct.pack("<Q", numel))


def declare(sock, nbytes, rid=1):
    """A FORWARD header and frame header declaring nbytes of f32 data, and
    one byte of it: 69 + 1 bytes on the wire."""
    head = frame_head("x", [nbytes // 4])
    sock.sendall(HDR.pack(b"MUPL", 1, FORWARD, 0, 0, rid, 0, len(head) + nbytes) + head + b"\0")


def rss(pid):
    return hostile.rss_kib(pid)


# ---- item 4: declared sizes are charged before anything is allocated ----

def test_declared_tensor_is_refused_before_it_is_allocated(stage):
    """69 bytes declaring a 300 MiB tensor (under --max-frame 1G) used to
    calloc all of it at once: three such connections took a stage from
    14 MB to 936 MB. Now a declaration is charged against the budgets
    first: the first one (a message the stage takes) is held as its bytes
    come, the next ones do not fit --total-budget (512M) beside it and are
    refused with an ERROR that names it, and closed."""
    s = stage()
    idle = rss(s.pid)
    socks = []
    for i in range(3):
        c = socket.create_connection((HOST, s.port), timeout=10)
        declare(c, 300 << 20, rid=i + 1)
        socks.append(c)
    peak = idle
    for c in socks[1:]:
        reply = assert_closed(c, timeout=10)
        peak = max(peak, rss(s.pid))
        assert reply[:4] == b"MUPL" and struct.unpack("<H", reply[6:8])[0] == ERROR, reply[:80]
        assert b"--total-budget 512.0 MiB" in reply and b"300.0 MiB" in reply, reply
        c.close()
    socks[0].settimeout(0.5)
    with pytest.raises(socket.timeout):
        socks[0].recv(1)  # still waiting for its bytes
    socks[0].close()
    peak = max(peak, rss(s.pid))
    assert peak - idle < 64 * MIB, f"three 69-byte headers grew the stage by {(peak - idle) // MIB} MiB"
    s.wait_log(r"the FORWARD frame declares tensors of 300.0 MiB, more than fits the server's "
               r"total budget \(--total-budget 512.0 MiB")


def test_message_past_the_conn_budget_is_taken(stage):
    """--conn-budget bounds what a peer makes the stage hold in replies;
    a message the stage takes (up to --max-frame) is let in past it: 4 MiB
    of activations at --conn-budget 1M are read, not refused for size."""
    s = stage("--conn-budget", "1M")
    c = socket.create_connection((HOST, s.port), timeout=10)
    n = 4 << 20
    head = frame_head("x", [n // 4])
    c.sendall(HDR.pack(b"MUPL", 1, FORWARD, 0, 0, 1, 0, len(head) + n) + head + bytes(n))
    mtype, _status, _mid, body = recv_msg(c)
    assert b"budget" not in body and b"MiB, more than" not in body, body[:200]
    c.close()


def test_declared_tensors_within_budget_hold_only_what_came(stage):
    """Declarations within the budget are held as their bytes come: six
    connections that each declare 15 MiB and send one byte of it do not
    make the stage hold 90 MiB; past --total-budget (100M) the next one
    is refused with an ERROR naming it; the stage still answers."""
    s = stage("--total-budget", "100M")
    idle = rss(s.pid)
    socks = []
    for i in range(6):
        c = socket.create_connection((HOST, s.port), timeout=10)
        declare(c, 15 << 20, rid=i + 1)
        socks.append(c)
    time.sleep(0.5)
    grown = rss(s.pid) - idle
    assert grown < 24 * MIB, f"6 x 15 MiB declared, 6 bytes sent: the stage grew {grown // MIB} MiB"
    c = socket.create_connection((HOST, s.port), timeout=10)
    declare(c, 15 << 20, rid=7)
    reply = assert_closed(c, timeout=10)
    assert b"--total-budget 100.0 MiB" in reply, reply
    info = socket.create_connection((HOST, s.port), timeout=10)
    assert ask(info, INFO)[0] == INFO
    for c in socks + [info]:
        c.close()


def test_trickled_body_is_closed_at_its_deadline(stage):
    """A byte every half second keeps the stall clock (--io-timeout) from
    ever firing; --body-timeout bounds the message as a whole."""
    s = stage("--body-timeout", "2")
    c = socket.create_connection((HOST, s.port), timeout=10)
    declare(c, 1 << 20)
    t0 = time.monotonic()
    c.settimeout(0.5)
    got = b""
    while time.monotonic() - t0 < 15:
        try:
            c.sendall(b"\0")
        except OSError:
            break
        try:
            part = c.recv(4096)
        except TimeoutError:
            continue
        except OSError:
            break
        if not part:
            break
        got += part
    assert b"--body-timeout" in got, got
    assert b"a message body was cut short" in got, got
    c.close()


# ---- item 5: idle connections ----

def test_idle_holders_do_not_lock_out_a_coordinator(stage):
    """64 peers that each sent one INFO and then idle used to refuse every
    coordinator ("too many connections"). The one idle longest makes
    room."""
    s = stage()
    holders = []
    for i in range(64):
        c = socket.create_connection((HOST, s.port), timeout=10)
        assert ask(c, INFO, rid=i + 1)[0] == INFO
        holders.append(c)
    ok = 0
    for i in range(10):
        good = socket.create_connection((HOST, s.port), timeout=10)
        try:
            if ask(good, INFO, rid=100 + i)[0] == INFO:
                ok += 1
        except (OSError, ConnectionError):
            pass
        good.close()
    assert ok == 10, f"a coordinator was served {ok} of 10 times with 64 idle holders"
    s.wait_log(r"closed to make room for a new connection: this one was idle for")
    for c in holders:
        c.close()


def test_idle_timeout_closes_a_holder(stage):
    s = stage("--idle-timeout", "1")
    c = socket.create_connection((HOST, s.port), timeout=10)
    assert ask(c, INFO)[0] == INFO
    reply = assert_closed(c, timeout=10)
    assert b"idle for 1 s since the last message (--idle-timeout)" in reply, reply
    c.close()


# ---- item 5: sequences ----

def open_seqs(addr, n, first_id=1):
    """SEQ_OPEN n sequences on a new connection: it and the replies."""
    host, port = addr.rsplit(":", 1)
    c = socket.create_connection((host, int(port)), timeout=10)
    out = [ask(c, SEQ_OPEN, b'{"ctx": 64}', rid=i + 1, aux=first_id + i) for i in range(n)]
    return c, out


def test_one_connection_gets_a_share_of_the_sequences(llm_stage):
    """One connection opening all --max-sequences used to make every other
    coordinator fail. It gets half by default (INFO says how many)."""
    s = llm_stage("--max-sequences", 4)
    a, replies_a = open_seqs(s.address, 4)
    b, replies = open_seqs(s.address, 2, first_id=10)
    assert [r[0] for r in replies] == [READY, READY], replies
    assert [r[0] for r in replies_a] == [READY, READY, ERROR, ERROR], replies_a
    assert b"--max-sequences-per-connection" in replies_a[2][3], replies_a[2]
    info = json.loads(ask(a, INFO, rid=99)[3])
    assert info["max_sequences_per_connection"] == 2, info
    a.close()
    b.close()


def test_idle_sequences_are_closed(llm_stage):
    """Sequences no forward ran for --sequence-idle-timeout are closed when
    another is opened, so a coordinator that went quiet does not keep
    them."""
    s = llm_stage("--max-sequences", 2, "--max-sequences-per-connection", 2,
                  "--sequence-idle-timeout", 1)
    a, replies = open_seqs(s.address, 2)
    assert [r[0] for r in replies] == [READY, READY]
    b, replies = open_seqs(s.address, 1, first_id=10)
    assert replies[0][0] == ERROR and b"--max-sequences" in replies[0][3]
    time.sleep(1.5)
    assert ask(b, SEQ_OPEN, b'{"ctx": 64}', rid=5, aux=11)[0] == READY
    wait_for(lambda: "closed 2 sequences unused for 1 s (--sequence-idle-timeout)"
             in s.log(), timeout=5, what="the log line")
    a.close()
    b.close()


# ---- item 5: metrics ports ----

def scrape(port):
    with socket.create_connection((HOST, port), timeout=5) as c:
        c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while True:
            part = c.recv(65536)
            if not part:
                return got
            got += part


def test_idle_holders_do_not_stop_a_scrape(stage):
    """16 connections that send nothing used to stop every scrape of a
    --metrics port. Now a scrape displaces the oldest one still waiting
    for its request."""
    s = stage("--metrics", f"{HOST}:0")
    port = int(s.wait_log(r"serving metrics on http://[0-9.]+:(\d+)/metrics", timeout=10)[0])
    holders = [socket.create_connection((HOST, port), timeout=5) for _ in range(16)]
    time.sleep(0.2)
    ok = 0
    for _ in range(10):
        try:
            reply = scrape(port)
        except OSError:
            continue
        ok += reply.startswith(b"HTTP/1.1 200") and b"muster_stage_connections_open" in reply
        holders.append(socket.create_connection((HOST, port), timeout=5))  # and another holder
    assert ok == 10, f"{ok} of 10 scrapes answered with 16 idle holders"
    s.wait_log(r"closed to make room for a scrape: it sent no request in")
    for c in holders:
        c.close()


# ---- item 8: a device server with a session open ----

RPC_MAGIC, RPC_MISMATCH = 0xFF271, 0xFF273


def hello(port, key=b"client:"):
    c = socket.create_connection((HOST, port), timeout=30)
    c.sendall(struct.pack("<ii", RPC_MAGIC, len(key)) + key)
    return c


def test_silent_session_does_not_block_a_new_handshake(muster_server):
    """A standalone `muster server` holding one silent session used to
    answer no new handshake for 60 s and more. Now the newcomer waits in
    line for --queue-timeout (10 s by default), then is answered: TVM's
    MISMATCH (so TVM clients retry or fail) and muster's reason."""
    srv = muster_server()
    a = hello(srv.port)
    assert struct.unpack("<i", hostile.recv_exact(a, 4))[0] == RPC_MAGIC  # SUCCESS
    n = struct.unpack("<i", hostile.recv_exact(a, 4))[0]
    hostile.recv_exact(a, n)
    b = hello(srv.port)
    b.settimeout(20)
    code = struct.unpack("<i", hostile.recv_exact(b, 4))[0]
    assert code == RPC_MISMATCH, hex(code)
    reason = assert_closed(b, timeout=5)
    assert b"busy: this device serves one session at a time" in reason, reason
    assert b"--queue-timeout" in reason, reason
    srv.wait_log(r"told the device is busy")
    a.close()
    b.close()


def test_queued_handshake_gets_the_device_when_the_session_ends(muster_server):
    s = muster_server("--queue-timeout", 30)
    a = hello(s.port)
    assert struct.unpack("<i", hostile.recv_exact(a, 4))[0] == RPC_MAGIC
    b = hello(s.port)
    s.wait_log(r"waits for the session of \S+ to end \(at most 30 s\)")
    a.close()
    b.settimeout(20)
    assert struct.unpack("<i", hostile.recv_exact(b, 4))[0] == RPC_MAGIC
    b.close()
