# SPDX-License-Identifier: MIT
"""`muster server --session-timeout`: a session whose client goes silent
after its hello, or stops reading what the device sends, ends at the
deadline, and the next client then gets the device (issue 12, finding 5).

A device serves one session at a time, as TVM's servers do, so without
this deadline one such client held the device for good: the echo's
blocking send() never looked at its deadline, and a silent session was
waited on forever. Peers are the spec's TVM client (tvmpeer), timing
windows are wide (a loaded 2-CPU machine, the ASan build), and every
socket has a timeout.
"""

import subprocess
import time

import tvmpeer
from conftest import HOST

DEADLINE = 1.0


def fill_until_stuck(sock, seconds=0.3):
    """Send without ever reading until the server stops taking bytes: its
    echo is then blocked on us. Returns the number of bytes sent."""
    sock.setblocking(False)
    junk = b"x" * 65536
    sent, stuck_since = 0, None
    end = time.monotonic() + 10
    while time.monotonic() < end:
        try:
            sent += sock.send(junk)
            stuck_since = None
        except BlockingIOError:
            stuck_since = stuck_since or time.monotonic()
            if time.monotonic() - stuck_since >= seconds:
                return sent
            time.sleep(0.01)
        except (ConnectionResetError, BrokenPipeError):
            return sent  # stuck long enough that the server gave up already
    raise AssertionError("the server kept reading from a client that never reads")


def time_to_eof(sock, timeout):
    """Seconds until the server closes `sock` (reading and dropping what it
    still sends); fails after `timeout`."""
    sock.setblocking(True)
    sock.settimeout(timeout)
    start = time.monotonic()
    try:
        while sock.recv(65536):
            if time.monotonic() - start > timeout:
                raise AssertionError("still open")
    except ConnectionResetError:
        pass
    return time.monotonic() - start


def test_help_documents_the_default(muster_bin):
    out = subprocess.run([str(muster_bin), "server", "--help"], capture_output=True,
                         text=True, timeout=30).stdout
    line = next(l for l in out.splitlines() if "--session-timeout" in l)
    assert "default 300" in line


def test_non_reading_client_ends_at_the_deadline(muster_server):
    """Standalone (key ""): the next client's hello waits for the slot, and
    is answered SUCCESS once the stuck session has ended."""
    server = muster_server("--session-timeout", DEADLINE)
    stuck, key = server.connect("")
    with stuck:
        assert key == "server:"
        fill_until_stuck(stuck)
        start = time.monotonic()
        with tvmpeer.rpc_raw(HOST, server.port, tvmpeer.rpc_hello(""),
                             timeout=15) as nxt:
            assert tvmpeer.rpc_read_reply(nxt) == "server:"
            waited = time.monotonic() - start
            nxt.sendall(b"my turn")
            assert tvmpeer.recvall(nxt, 7) == b"my turn"
        # the stuck one is closed under it
        time_to_eof(stuck, 10)
    assert waited <= DEADLINE + 5, waited
    server.wait_log(r"took nothing for 1\.0 s \(session timeout\); ending the session")


def test_silent_session_ends_at_the_deadline(tracker, muster_server):
    """Through a tracker: a client that completes its hello and says
    nothing holds the device until the deadline; then the device offers a
    fresh matchkey and a waiting TVM client gets it."""
    server = muster_server("--session-timeout", DEADLINE, tracker=tracker,
                           key="rasp")
    with tvmpeer.TrackerSession(tracker.host, tracker.port) as cl:
        mk = cl.request("rasp", timeout=5)[2]
    silent, key = server.connect(mk)
    with silent:
        assert key == "server:rasp"
        start = time.monotonic()
        sock, _, grant = tvmpeer.request_session(HOST, tracker.port, "rasp",
                                                 grant_timeout=15, timeout=15)
        with sock:
            waited = time.monotonic() - start
            assert grant[2] != mk
            sock.sendall(b"served")
            assert tvmpeer.recvall(sock, 6) == b"served"
        assert time_to_eof(silent, 5) < 5
    assert DEADLINE - 0.2 <= waited <= DEADLINE + 5, waited
    server.wait_log(r"sent nothing for 1\.0 s \(session timeout\); ending the session")


def test_a_busy_session_is_not_cut(muster_server):
    """The deadline is on waits for the client, not on the session's
    length: a client that keeps talking stays served past it."""
    server = muster_server("--session-timeout", DEADLINE)
    sock, _ = server.connect("")
    with sock:
        sock.settimeout(5)
        end = time.monotonic() + 3 * DEADLINE
        while time.monotonic() < end:
            sock.sendall(b"ping")
            assert tvmpeer.recvall(sock, 4) == b"ping"
            time.sleep(DEADLINE / 3)
    assert "session timeout" not in server.log_text()
