# SPDX-License-Identifier: MIT
"""SIGTERM drains `muster tracker` and `muster store` (issue 17).

What a client relies on: a request the server has read before SIGTERM
gets its whole reply even when the client reads it later (a grant, a
summary, a GET's value, an ADD's result, a PING's echo), the connection
then closes cleanly at a reply boundary, a new connection is refused while
the drain runs, and the process exits 0 -- as soon as everything is
delivered, or at --drain-timeout with a warning when a client never reads.

The replies are made bigger than what the two kernels' socket buffers hold
on loopback (tens of MB), so most of them are still queued inside the
server at SIGTERM: a server that closed at once, as before the drain,
drops them and these tests fail. The tests know the server has read every
request when the client's send queue is empty and the server's socket has
nothing left to read (/proc/net/tcp), so no request is left unread.
"""

import errno
import fcntl
import json
import signal
import socket
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import storepeer  # noqa: E402
import tvmpeer  # noqa: E402
from conftest import HOST, wait_for  # noqa: E402
from storepeer import i64, s, start_store, store_binary  # noqa: E402

BIG = 8 << 20          # one store value
GETS = 4               # GETs of it queued at SIGTERM: 32 MiB of replies
SUMMARIES = 1500       # tracker SUMMARY replies queued at SIGTERM
BUDGET = ("--conn-budget", "256M", "--total-budget", "1G")
EXIT_SLACK = 15.0      # the machine is shared and busy


def outq(sock):
    """Bytes this socket sent that the peer's kernel has not acknowledged
    (SIOCOUTQ, which is TIOCOUTQ's number on Linux)."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ,
                                          b"\0\0\0\0"))[0]


def server_rx_queue(server_port, client_port):
    """Unread bytes in the server's end of this loopback connection, from
    /proc/net/tcp (None if the socket is not listed)."""
    local = f"0100007F:{server_port:04X}"
    remote = f"0100007F:{client_port:04X}"
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if f[1] == local and f[2] == remote:
            return int(f[4].split(":")[1], 16)
    return None


def wait_read_all(sock, server_port, what):
    """Wait until the server process has read everything sent on sock."""
    client_port = sock.getsockname()[1]
    wait_for(lambda: outq(sock) == 0
             and server_rx_queue(server_port, client_port) == 0,
             timeout=20.0, what=f"the server to read {what}")
    time.sleep(0.2)  # and finished the read callback that took the last bytes


def assert_refused(port):
    """A new connection to port is refused (the listener is closed)."""
    try:
        sock = socket.create_connection((HOST, port), timeout=5.0)
    except ConnectionRefusedError:
        return
    sock.close()
    pytest.fail(f"a new connection to {port} was accepted during the drain")


def recv_exact(sock, n, timeout=30.0):
    out = bytearray()
    sock.settimeout(timeout)
    while len(out) < n:
        chunk = sock.recv(min(n - len(out), 1 << 20))
        if not chunk:
            raise storepeer.Closed(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def assert_eof(sock, timeout=10.0):
    """The server closes cleanly now: EOF, no more bytes, no reset."""
    sock.settimeout(timeout)
    try:
        rest = sock.recv(65536)
    except ConnectionResetError:
        pytest.fail("connection reset after the last reply")
    assert rest == b"", f"unexpected bytes after the last reply: {rest[:64]!r}"


def exited(proc, timeout):
    """The exit status within timeout, or fail."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running {timeout} s after the drain should end")


# ---- store ----

@pytest.fixture
def muster_store(tmp_path):
    """Factory: `muster store --host 127.0.0.1 --port 0 EXTRA...`. These
    tests stop it themselves; teardown kills one that is still running."""
    started = []

    def start(*extra):
        log = tmp_path / f"muster-store-{len(started)}.log"
        started.append(start_store(log, *extra, binary=store_binary()))
        return started[-1]

    yield start
    for st in started:
        if st.proc.poll() is None:
            st.proc.kill()
            st.proc.wait()


def store_pipeline(store):
    """A v2 client with the big value set, then GETS GETs of it, an ADD and
    a PING sent and read by the store, none of their replies read yet."""
    c = store.client("v2", timeout=30.0)
    value = bytes(range(256)) * (BIG // 256)
    c.set("big", value)
    c.sync()
    pipeline = b"".join(c.encode("GET", s(c.k("big"))) for _ in range(GETS))
    pipeline += c.encode("ADD", s(c.k("counter")), i64(5))
    pipeline += c.encode("PING", struct.pack("<I", 0xD2A1D2A1))
    c.send(pipeline)
    wait_read_all(c.sock, store.port, "the pipelined requests")
    return c, value


def test_store_sigterm_delivers_every_reply_read(muster_store):
    store = muster_store(*BUDGET, "--drain-timeout", "60")
    c, value = store_pipeline(store)
    store.proc.send_signal(signal.SIGTERM)
    store.wait_log(r"drain: stopped accepting")
    assert store.proc.poll() is None, "exited before its replies were read"
    assert_refused(store.port)

    for i in range(GETS):
        n = struct.unpack("<Q", recv_exact(c.sock, 8))[0]
        assert n == BIG, f"GET {i}: length {n}"
        assert recv_exact(c.sock, n) == value, f"GET {i}: value differs"
    assert struct.unpack("<q", recv_exact(c.sock, 8))[0] == 5
    assert struct.unpack("<I", recv_exact(c.sock, 4))[0] == 0xD2A1D2A1
    assert_eof(c.sock)
    c.close()
    # everything delivered: it stops long before the 60 s deadline
    assert exited(store.proc, EXIT_SLACK) == 0, store.log_text()[-3000:]
    assert "drain: every reply delivered" in store.log_text()


def test_store_drain_deadline_bounds_a_client_that_never_reads(muster_store):
    store = muster_store(*BUDGET, "--drain-timeout", "1")
    c, _ = store_pipeline(store)
    start = time.monotonic()
    store.proc.send_signal(signal.SIGTERM)
    assert exited(store.proc, 1 + EXIT_SLACK) == 0, store.log_text()[-3000:]
    assert time.monotonic() - start >= 0.9
    assert "drain: deadline reached" in store.log_text()
    c.close()


def test_store_second_signal_stops_at_once(muster_store):
    store = muster_store(*BUDGET, "--drain-timeout", "600")
    c, _ = store_pipeline(store)
    store.proc.send_signal(signal.SIGTERM)
    store.wait_log(r"drain: stopped accepting")
    store.proc.send_signal(signal.SIGTERM)
    assert exited(store.proc, EXIT_SLACK) == 0, store.log_text()[-3000:]
    assert "second signal" in store.log_text()
    c.close()


# ---- tracker ----

def test_tracker_sigterm_delivers_replies_and_grants(muster_tracker, stack):
    tracker = muster_tracker(*BUDGET, "--drain-timeout", "60")
    # registered servers whose keys make each summary ~20 KB
    keys = [f"drain-{i:03d}-" + "x" * 300 for i in range(60)]
    reg = stack.enter_context(tracker.session())
    assert reg.update_info({"key": "server:drain", "addr": [None, 9000]}) == 0
    for i, key in enumerate(keys):
        assert reg.put(key, 9000 + i, f"{key}:0.1", None) == 0
    one = json.dumps([tvmpeer.SUMMARY]).encode()
    size = len(json.dumps(reg.call([tvmpeer.SUMMARY])))

    c = stack.enter_context(tracker.session(timeout=30.0))
    frames = tvmpeer.frame(one) * SUMMARIES
    frames += tvmpeer.frame(json.dumps([tvmpeer.REQUEST, keys[7], "", 1]).encode())
    c.sock.sendall(frames)
    wait_read_all(c.sock, tracker.port, "the pipelined requests")
    assert size * SUMMARIES > 16 << 20, "summaries too small to be queued"

    tracker.proc.send_signal(signal.SIGTERM)
    tracker.wait_log(r"drain: stopped accepting")
    assert tracker.proc.poll() is None, "exited before its replies were read"
    assert_refused(tracker.port)

    for i in range(SUMMARIES):
        reply = c.recv()
        assert reply[0] == tvmpeer.SUCCESS and len(reply[1]["queue_info"]) == 60, \
            f"summary {i}: {str(reply)[:200]}"
    addr, port, matchkey = c.recv_grant()
    assert (port, matchkey) == (9007, f"{keys[7]}:0.1")
    assert_eof(c.sock)
    tracker.allow_exit = True
    assert exited(tracker.proc, EXIT_SLACK) == 0, tracker.log_text()[-3000:]
    assert "drain: every reply delivered" in tracker.log_text()


def test_tracker_drain_with_idle_peers_ends_at_once(muster_tracker, stack):
    tracker = muster_tracker("--drain-timeout", "60")
    reg = stack.enter_context(tracker.session())
    assert reg.update_info({"key": "server:idle", "addr": [None, 9000]}) == 0
    assert reg.put("idle", 9000, "idle:0.1", None) == 0
    start = time.monotonic()
    tracker.proc.send_signal(signal.SIGTERM)
    # the idle peer's connection is shut and closed; nothing waits 60 s
    assert reg.sock.recv(1) == b""
    tracker.allow_exit = True
    assert exited(tracker.proc, EXIT_SLACK) == 0, tracker.log_text()[-3000:]
    assert time.monotonic() - start < EXIT_SLACK
    try:
        socket.create_connection((HOST, tracker.port), timeout=5.0).close()
        pytest.fail("connected to a stopped tracker")
    except OSError as exc:
        assert exc.errno == errno.ECONNREFUSED
