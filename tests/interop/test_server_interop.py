# SPDX-License-Identifier: MIT
"""`muster server` (the device side) and `muster request`, driven by peers
written from spec/tvm-tracker.md: the registration a TVM tracker sees
(section 8), the session handshake a TVM client does (section 9), the
client's request loop (section 11), against both `muster tracker` and
tvmpeer.ReferenceTracker (TVM's Python tracker, quirks included).

The device's built-in session echoes every byte until the client closes,
so "the echo works" means the session reached that device.

Every socket has a timeout and every wait a deadline; timing windows are
wide enough for the ASan build on a loaded 2-CPU machine.
"""

import json
import os
import random
import re
import select
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tvmpeer
from conftest import HOST, MusterProcess, assert_closed, settle

TVMPEER = Path(__file__).resolve().parent / "tvmpeer.py"
MATCHKEY_RE = r"{}:0\.\d{{16}}"
# From the spec (8.1 step 4) and the contract: polls every 2 s, renewal on
# the 4th consecutive miss. A grant lands somewhere in a poll period, so the
# renewal comes 6-8 s after it; the window allows scheduling slack.
RENEW_MIN, RENEW_MAX = 5.5, 11.0


# --- helpers --------------------------------------------------------------

def grant_matchkey(tracker, key):
    """REQUEST one device of `key` and return its matchkey. Tests that
    check `free` afterwards take the matchkey this way rather than from
    the server's log: a matchkey used directly leaves its resource free on
    the tracker (a stale one, which a later client would get MISMATCH
    for), exactly as with TVM's servers."""
    with tvmpeer.TrackerSession(tracker.host, tracker.port) as client:
        return client.request(key, timeout=5)[2]


def summary_of(tracker):
    with tvmpeer.TrackerSession(tracker.host, tracker.port) as sess:
        return sess.summary()


def wait_summary(tracker, predicate, timeout=5.0, what="summary"):
    """Poll SUMMARY until predicate(summary) is true; return that summary.
    On timeout, fail with the last summary seen. Connection errors (a
    tracker being restarted) count as "not yet"."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = summary_of(tracker)
            if predicate(last):
                return last
        except (OSError, ValueError) as exc:
            last = f"<{exc!r}>"
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}; "
                        f"last summary: {last}")
        time.sleep(0.05)


def wait_queue(tracker, key, free, pending=0, timeout=5.0):
    want = {"free": free, "pending": pending}
    return wait_summary(
        tracker, lambda s: s["queue_info"].get(key) == want, timeout,
        f"queue {key} = {want}")


def server_entries(summary):
    """server_info as a sorted list of (key, addr...) tuples."""
    return sorted((e["key"], *e["addr"]) for e in summary["server_info"])


def assert_echo(sock, data, chunk=65536):
    """Send `data` in chunks and expect each chunk back (reading as we go,
    so neither side's buffers fill up)."""
    for i in range(0, len(data), chunk):
        part = data[i:i + chunk]
        sock.sendall(part)
        assert tvmpeer.recvall(sock, len(part)) == part


def assert_quiet(sock, seconds):
    """Fail if `sock` becomes readable (data or EOF) within `seconds`."""
    readable, _, _ = select.select([sock], [], [], seconds)
    assert not readable, "peer answered or closed when it should wait"


def time_to_eof(sock, timeout):
    """Seconds until the peer closes `sock` (EOF or reset); data that
    arrives meanwhile is discarded. Fails after `timeout`."""
    start = time.monotonic()
    sock.settimeout(0.1)
    while time.monotonic() - start < timeout:
        try:
            if sock.recv(65536) == b"":
                break
        except TimeoutError:
            continue
        except ConnectionResetError:
            break
    else:
        pytest.fail(f"still open after {timeout} s")
    return time.monotonic() - start


def rst_close(sock):
    """Close with a TCP reset, as a killed process's socket may be."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                    struct.pack("ii", 1, 0))
    sock.close()


def mismatch_reply(sock):
    """What the server sent before closing: the test expects exactly the
    MISMATCH code."""
    return assert_closed(sock)


MISMATCH_BYTES = tvmpeer.pack_i32(tvmpeer.RPC_CODE_MISMATCH)


def success_bytes(key):
    server_key = ("server:" + key).encode()
    return (tvmpeer.RPC_MAGIC_BYTES + tvmpeer.pack_i32(len(server_key))
            + server_key)


def frames_of(reference, key):
    """The recorded frames (Received tuples, handshake chunk first) of the
    tracker connection that sent UPDATE_INFO for server:KEY."""
    received = list(reference.received)
    peer = None
    for item in received:
        try:
            msg = json.loads(item.data)
        except ValueError:
            continue
        if (isinstance(msg, list) and msg[:1] == [tvmpeer.UPDATE_INFO]
                and msg[1].get("key") == "server:" + key):
            peer = item.peer
    assert peer is not None, f"no UPDATE_INFO for server:{key} recorded"
    return [item for item in received if item.peer == peer]


def decoded(frames):
    return [json.loads(item.data) for item in frames[1:]]


def read_to_eof(pipe, timeout):
    """Everything from a subprocess pipe until EOF, within `timeout`."""
    deadline = time.monotonic() + timeout
    out = bytearray()
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"no EOF within {timeout} s (got {bytes(out)!r})"
        if select.select([pipe], [], [], left)[0]:
            chunk = os.read(pipe.fileno(), 65536)
            if not chunk:
                return bytes(out)
            out += chunk


def run_request(muster_bin, *args, data=b"", timeout=30):
    return subprocess.run([str(muster_bin), "request", *map(str, args)],
                          input=data, capture_output=True, timeout=timeout)


@pytest.fixture(params=["muster", "reference"])
def any_tracker(request, muster_tracker):
    """`muster tracker`, and the TVM-like reference tracker (recording what
    it receives)."""
    if request.param == "muster":
        yield muster_tracker()
    else:
        reference = tvmpeer.ReferenceTracker(HOST, port=0, silent=True,
                                             record=True).start()
        yield reference
        reference.terminate()


@pytest.fixture
def recording():
    reference = tvmpeer.ReferenceTracker(HOST, port=0, silent=True,
                                         record=True).start()
    yield reference
    reference.terminate()


# --- registration (spec sections 4, 5, 8.1) --------------------------------

def test_registration_bytes_seen_by_a_python_tracker(recording, muster_server):
    server = muster_server(tracker=recording, key="rasp")
    # The reference tracker drops a connection whose first chunk is not
    # exactly the 4 magic bytes (3.1); getting this far proves muster waits.
    frames = frames_of(recording, "rasp")
    assert frames[0].data == b"\x71\xf2\x02\x00"
    update_info, put = decoded(frames)[:2]
    assert update_info == [5, {"key": "server:rasp",
                               "addr": [None, server.port]}]
    assert type(update_info[1]["addr"][1]) is int  # Python style, not "9090"
    assert put == [3, "rasp", [server.port, server.matchkey], None]
    assert type(put[2][0]) is int
    # Byte for byte what TVM's Python server sends (json.dumps defaults).
    assert frames[1].data == tvmpeer.encode_json(update_info)
    assert frames[2].data == tvmpeer.encode_json(put)
    assert re.fullmatch(MATCHKEY_RE.format("rasp"), server.matchkey)
    assert f"Registered with tracker {HOST}:{recording.port} as server:rasp" \
        in server.log_text()

    summary = summary_of(recording)
    assert summary == {"queue_info": {"rasp": {"free": 1, "pending": 0}},
                       "server_info": [{"key": "server:rasp",
                                        "addr": [HOST, server.port]}]}

    # Then [7] every 2 s while idle, and nothing else.
    deadline = time.monotonic() + 8.5
    while len(frames_of(recording, "rasp")) < 6:
        assert time.monotonic() < deadline, "fewer than 3 polls in 8.5 s"
        time.sleep(0.1)
    frames = frames_of(recording, "rasp")
    polls = frames[3:]
    assert [f.data for f in polls] == [b"[7]"] * len(polls)
    gaps = [b.time - a.time for a, b in zip(polls, polls[1:])]
    assert all(1.7 <= g <= 2.8 for g in gaps), gaps
    assert 1.5 <= polls[0].time - frames[2].time <= 2.8


def test_registration_with_muster_tracker(tracker, muster_server, muster_bin):
    server = muster_server(tracker=tracker, key="rasp")
    summary = summary_of(tracker)
    assert summary == {"queue_info": {"rasp": {"free": 1, "pending": 0}},
                       "server_info": [{"key": "server:rasp",
                                        "addr": [HOST, server.port]}]}
    assert f"Registered with tracker {HOST}:{tracker.port} as server:rasp" \
        in server.log_text()
    with tracker.session() as client:
        assert client.request("rasp", timeout=5) == (HOST, server.port,
                                                     server.matchkey)
    result = subprocess.run([str(muster_bin), "query", "--host", HOST,
                             "--port", str(tracker.port)],
                            capture_output=True, text=True, timeout=10)
    assert result.returncode == 0, result.stderr
    assert f"{HOST}:{server.port}".ljust(21) + "    server:rasp" \
        in result.stdout


def test_custom_addr_is_registered_and_granted(any_tracker, muster_server):
    server = muster_server("--custom-addr", "10.9.8.7", tracker=any_tracker,
                           key="nat")
    summary = summary_of(any_tracker)
    assert summary["server_info"] == [{"key": "server:nat",
                                       "addr": ["10.9.8.7", server.port]}]
    if isinstance(any_tracker, tvmpeer.ReferenceTracker):
        update_info, put = decoded(frames_of(any_tracker, "nat"))[:2]
        assert update_info == [5, {"key": "server:nat",
                                   "addr": ["10.9.8.7", server.port]}]
        assert put == [3, "nat", [server.port, server.matchkey], "10.9.8.7"]
    with tvmpeer.TrackerSession(any_tracker.host, any_tracker.port) as cl:
        # only the grant: nothing may connect off loopback
        assert cl.request("nat", timeout=5) == ("10.9.8.7", server.port,
                                                server.matchkey)


@pytest.mark.parametrize("key", ["10.0.0.9:5555", "d\u00e9v"])
def test_unusual_keys(any_tracker, muster_server, key):
    """An adb serial as the key (':' inside, spec section 6: the tracker
    splits matchkeys at the last colon) and a non-ASCII key (escaped like
    Python's json.dumps, so the bytes match a TVM Python server's)."""
    server = muster_server(tracker=any_tracker, key=key)
    assert re.fullmatch(MATCHKEY_RE.format(re.escape(key)), server.matchkey)
    if isinstance(any_tracker, tvmpeer.ReferenceTracker):
        frames = frames_of(any_tracker, key)
        assert frames[1].data == tvmpeer.encode_json(
            [5, {"key": "server:" + key, "addr": [None, server.port]}])
        assert frames[2].data == tvmpeer.encode_json(
            [3, key, [server.port, server.matchkey], None])
    sock, server_key, grant = tvmpeer.request_session(
        any_tracker.host, any_tracker.port, key)
    with sock:
        assert server_key == "server:" + key
        assert grant == (HOST, server.port, server.matchkeys()[0])
        assert_echo(sock, key.encode())
    server.wait_offers(2)
    wait_queue(any_tracker, key, free=1)


def test_port_search(muster_server, muster_bin):
    """The same port search as the tracker (spec section 10): a busy first
    port moves on; an exhausted range is an error."""
    with socket.socket() as held:
        held.bind((HOST, 0))
        held.listen(1)
        port = held.getsockname()[1]
        for candidate in range(port + 1, port + 4):
            with socket.socket() as probe:
                try:
                    probe.bind((HOST, candidate))
                    break
                except OSError:
                    continue
        else:
            pytest.fail("no free port after the held one")
        server = muster_server(port=port, port_end=candidate + 1)
        assert port < server.port <= candidate
        result = subprocess.run([str(muster_bin), "server", "--host", HOST,
                                 "--port", str(port), "--port-end",
                                 str(port + 1)],
                                stdin=subprocess.DEVNULL,
                                capture_output=True, text=True, timeout=10)
    assert result.returncode == 1
    assert f"cannot bind to any port in [{port}, {port + 1})" \
        in result.stderr


# --- sessions through a tracker (sections 9, 11) --------------------------

def test_session_through_tracker_then_fresh_matchkey(any_tracker,
                                                     muster_server):
    server = muster_server(tracker=any_tracker, key="rasp")
    first = server.matchkey
    with tvmpeer.TrackerSession(any_tracker.host, any_tracker.port) as cl:
        addr, port, matchkey = cl.request("rasp", timeout=5)
    assert (addr, port, matchkey) == (HOST, server.port, first)

    # The handshake, byte for byte.
    hello = tvmpeer.rpc_hello(matchkey)
    assert hello == (b"\x71\xf2\x0f\x00" + struct.pack("<i", 7 + len(first))
                     + b"client:" + first.encode())
    with tvmpeer.rpc_raw(addr, port, hello) as sock:
        assert tvmpeer.recvall(sock, 4 + 4 + 11) == success_bytes("rasp")
        assert_echo(sock, b"x")
        assert_echo(sock, bytes(range(256)))
        assert_echo(sock, random.randbytes(300_000))
        # busy: nothing to grant, nothing offered
        assert summary_of(any_tracker)["queue_info"]["rasp"] == {
            "free": 0, "pending": 0}
        client_port = sock.getsockname()[1]
    server.wait_log(rf"Session with {HOST}:{client_port} ended")
    assert f"Session with {HOST}:{client_port} started" in server.log_text()

    second = server.wait_offers(2)[1]
    assert second != first
    assert re.fullmatch(MATCHKEY_RE.format("rasp"), second)
    wait_queue(any_tracker, "rasp", free=1)
    assert server_entries(summary_of(any_tracker)) == [
        ("server:rasp", HOST, server.port)]

    # The used matchkey is stale now (9: verified MISMATCH).
    with pytest.raises(tvmpeer.RpcMismatch):
        tvmpeer.rpc_connect(HOST, server.port, first)
    # And a TVM-style client gets the device again with the fresh one.
    sock, server_key, grant = tvmpeer.request_session(
        any_tracker.host, any_tracker.port, "rasp")
    with sock:
        assert server_key == "server:rasp"
        assert grant == (HOST, server.port, second)
        assert_echo(sock, b"again")


def test_polls_but_no_offers_while_a_session_runs(recording, muster_server):
    """Unlike TVM's servers (spec 8.1 step 7), a busy server keeps polling,
    so a tracker that goes away is noticed during a session; but it offers
    nothing until the session ends."""
    server = muster_server(tracker=recording, key="rasp")
    sock, _, _ = tvmpeer.request_session(HOST, recording.port, "rasp")
    with sock:
        started = time.monotonic()
        while time.monotonic() - started < 5:
            assert_echo(sock, b"tick")
            time.sleep(0.25)
        ended = time.monotonic()
    during = [f for f in frames_of(recording, "rasp")
              if started + 0.1 < f.time < ended]
    assert [f.data for f in during] == [b"[7]"] * len(during)
    assert 2 <= len(during) <= 3, [f.time - started for f in during]
    # After the session: a PUT of a fresh matchkey, promptly, then polls.
    server.wait_offers(2)
    deadline = time.monotonic() + 5
    while True:
        after = [f for f in frames_of(recording, "rasp") if f.time >= ended]
        if len(after) >= 2:
            break
        assert time.monotonic() < deadline, [f.data for f in after]
        time.sleep(0.1)
    assert json.loads(after[0].data) == [3, "rasp",
                                         [server.port, server.matchkey], None]
    assert after[0].time - ended < 1.0
    assert after[1].data == b"[7]"


def test_hello_byte_by_byte_and_data_behind_it(tracker, muster_server):
    """The server reads the hello however TCP cuts it, and bytes the client
    sends right behind the hello belong to the session."""
    server = muster_server(tracker=tracker, key="rasp")
    hello = tvmpeer.rpc_hello(grant_matchkey(tracker, "rasp"))
    with tvmpeer.connect(HOST, server.port) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for byte in hello:
            sock.sendall(bytes([byte]))
            time.sleep(0.002)
        assert tvmpeer.rpc_read_reply(sock) == "server:rasp"
        assert_echo(sock, b"slowly")
    mk = server.wait_offers(2)[1]
    assert grant_matchkey(tracker, "rasp") == mk
    with tvmpeer.rpc_raw(HOST, server.port,
                         tvmpeer.rpc_hello(mk) + b"eager") as sock:
        assert tvmpeer.rpc_read_reply(sock) == "server:rasp"
        assert tvmpeer.recvall(sock, 5) == b"eager"


def test_bad_keys_get_mismatch(tracker, muster_server):
    server = muster_server(tracker=tracker, key="rasp")
    current = server.matchkey
    for key in ["client:rasp:0.1234567890123456",   # made up
                "client:" + current + "0",           # longer
                "client:" + current[:-1],            # shorter
                current,                              # no client: prefix
                "server:" + current,
                "client:",
                "client:rasp",                        # the bare key
                " client:" + current]:                # leading space
        data = key.encode()
        with tvmpeer.rpc_raw(HOST, server.port,
                             tvmpeer.RPC_MAGIC_BYTES
                             + tvmpeer.pack_i32(len(data)) + data) as sock:
            assert mismatch_reply(sock) == MISMATCH_BYTES, key
    assert server.log_count(r"Mismatch from") >= 1
    # Refusals do not use up the matchkey, and nothing was re-offered.
    with server.connect(current)[0] as sock:
        assert_echo(sock, b"still mine")
    assert server.matchkeys()[0] == current


def test_options_after_the_matchkey(tracker, muster_server):
    server = muster_server(tracker=tracker, key="rasp")
    # Unknown options are ignored (as TVM's servers do); the first token
    # alone is compared.
    sock, key = server.connect(server.matchkey,
                               session_timeout="5 -other=1")
    with sock:
        assert key == "server:rasp"
        assert_echo(sock, b"ok")
    server.wait_offers(2)
    # A -timeout that is not a number is refused (no SUCCESS), and the
    # server keeps going.
    mk = server.matchkey
    with tvmpeer.rpc_raw(HOST, server.port,
                         tvmpeer.rpc_hello(mk, "abc")) as sock:
        reply = assert_closed(sock)
        assert not reply.startswith(tvmpeer.RPC_MAGIC_BYTES), reply
    with server.connect(server.matchkey)[0] as sock:
        assert_echo(sock, b"ok")


@pytest.mark.parametrize("data", [
    pytest.param(tvmpeer.MAGIC_BYTES + struct.pack("<i", 12)
                 + b"client:muster", id="tracker-magic"),
    pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", id="http"),
    pytest.param(tvmpeer.RPC_MAGIC_BYTES + struct.pack("<i", 0),
                 id="length-0"),
    pytest.param(tvmpeer.RPC_MAGIC_BYTES + struct.pack("<i", -1),
                 id="length-negative"),
    pytest.param(tvmpeer.RPC_MAGIC_BYTES + struct.pack("<i", 1 << 30),
                 id="length-1GiB"),
])
def test_wrong_magic_or_length_closes_without_reply(tracker, muster_server,
                                                    data):
    server = muster_server(tracker=tracker, key="rasp")
    with tvmpeer.rpc_raw(HOST, server.port, data) as sock:
        assert assert_closed(sock) == b""
    assert "bad handshake" in server.log_text()
    # the matchkey was not touched: it still opens a session
    assert len(server.matchkeys()) == 1
    with server.connect(server.matchkey)[0] as sock:
        assert_echo(sock, b"unharmed")


def test_matchkey_is_single_use(tracker, muster_server):
    server = muster_server(tracker=tracker, key="rasp")
    with tracker.session() as cl:
        _, _, mk = cl.request("rasp", timeout=5)
    first, key = server.connect(mk)
    with first:
        assert key == "server:rasp"
        with pytest.raises(tvmpeer.RpcMismatch):
            server.connect(mk)
        assert_echo(first, b"first is unaffected")
    fresh = server.wait_offers(2)[1]
    with pytest.raises(tvmpeer.RpcMismatch):
        server.connect(mk)
    with server.connect(fresh)[0] as sock:
        assert_echo(sock, b"fresh one works")


@pytest.mark.parametrize("session_timeout", [1, 0.5])
def test_session_timeout_cuts_the_session(tracker, muster_server,
                                          session_timeout):
    server = muster_server(tracker=tracker, key="rasp")
    hello = tvmpeer.rpc_hello(grant_matchkey(tracker, "rasp"), session_timeout)
    assert hello.endswith(f" -timeout={session_timeout}".encode())
    with tvmpeer.rpc_raw(HOST, server.port, hello) as sock:
        assert tvmpeer.rpc_read_reply(sock) == "server:rasp"
        start = time.monotonic()
        assert_echo(sock, b"before the cut")
        time_to_eof(sock, session_timeout + 5)
        cut = time.monotonic() - start
    assert session_timeout - 0.2 <= cut <= session_timeout + 1.5, cut
    server.wait_log(r"reached its -timeout")
    server.wait_offers(2)
    wait_queue(tracker, "rasp", free=1)


# --- grants nobody uses (section 8.1 step 4) -------------------------------

def test_unused_grant_is_renewed(any_tracker, muster_server):
    server = muster_server(tracker=any_tracker, key="rasp")
    with tvmpeer.TrackerSession(any_tracker.host, any_tracker.port) as cl:
        _, _, granted = cl.request("rasp", timeout=5)
        granted_at = time.monotonic()
    assert granted == server.matchkey
    fresh = server.wait_offers(2, timeout=RENEW_MAX + 2)[1]
    renewed_after = time.monotonic() - granted_at
    assert RENEW_MIN <= renewed_after <= RENEW_MAX, renewed_after
    assert fresh != granted
    assert "no client came" in server.log_text()
    wait_queue(any_tracker, "rasp", free=1)
    if isinstance(any_tracker, tvmpeer.ReferenceTracker):
        puts = [m for m in decoded(frames_of(any_tracker, "rasp"))
                if m[0] == tvmpeer.PUT]
        assert puts == [[3, "rasp", [server.port, granted], None],
                        [3, "rasp", [server.port, fresh], None]]
    with pytest.raises(tvmpeer.RpcMismatch):
        server.connect(granted)
    sock, _, grant = tvmpeer.request_session(any_tracker.host,
                                             any_tracker.port, "rasp")
    with sock:
        assert grant[2] == fresh
        assert_echo(sock, b"renewed")


# --- clients that say nothing or die mid-handshake ------------------------

def test_silent_and_dying_clients_block_nobody(tracker, muster_server):
    server = muster_server(tracker=tracker, key="rasp")
    mk = server.matchkey
    silent = tvmpeer.rpc_raw(HOST, server.port)
    silent_since = time.monotonic()
    with silent:
        key = ("client:" + mk).encode()
        hello = tvmpeer.RPC_MAGIC_BYTES + tvmpeer.pack_i32(len(key)) + key
        for partial in [tvmpeer.RPC_MAGIC_BYTES,            # magic only
                        hello[:6],                          # half the length
                        hello[:8 + len(key) // 2]]:         # half the key
            tvmpeer.rpc_raw(HOST, server.port, partial).close()
            rst_close(tvmpeer.rpc_raw(HOST, server.port, partial))
        # Still registered with the same, unused matchkey; a real client
        # gets the device at once.
        wait_queue(tracker, "rasp", free=1)
        started = time.monotonic()
        sock, _, grant = tvmpeer.request_session(HOST, tracker.port, "rasp")
        with sock:
            assert time.monotonic() - started < 2
            assert grant[2] == mk
            assert_echo(sock, b"served while others dawdle")
        server.wait_offers(2)
        wait_queue(tracker, "rasp", free=1)
        # The silent client is closed after the default 10 s, not before.
        assert_quiet(silent, max(0.0, 8.5 - (time.monotonic()
                                              - silent_since)))
        closed_after = (time.monotonic() - silent_since
                        + time_to_eof(silent, 5))
    assert 9.0 <= closed_after <= 12.5, closed_after
    assert "no handshake within" in server.log_text()


def test_hundreds_of_silent_clients(tracker, muster_server, stack):
    server = muster_server(tracker=tracker, key="rasp")
    for _ in range(300):
        stack.enter_context(tvmpeer.rpc_raw(HOST, server.port))
    started = time.monotonic()
    sock, _, _ = tvmpeer.request_session(HOST, tracker.port, "rasp")
    with sock:
        assert_echo(sock, b"not starved")
    assert time.monotonic() - started < 2
    server.wait_offers(2)
    wait_queue(tracker, "rasp", free=1)


def test_handshake_timeout_option(tracker, muster_server):
    server = muster_server("--handshake-timeout", "0.5", tracker=tracker,
                           key="rasp")
    with tvmpeer.rpc_raw(HOST, server.port) as silent, \
            tvmpeer.rpc_raw(HOST, server.port,
                            tvmpeer.RPC_MAGIC_BYTES) as partial:
        start = time.monotonic()
        assert 0.3 <= time_to_eof(silent, 5) <= 3.0
        time_to_eof(partial, 5)
        assert time.monotonic() - start <= 3.0
    with server.connect(server.matchkey)[0] as sock:
        assert_echo(sock, b"fine")


@pytest.mark.parametrize("close", ["fin", "rst"])
def test_client_gone_right_after_its_hello(tracker, muster_server, close):
    """The client sends a complete hello with its granted matchkey and
    leaves. With a FIN, the server reads the hello, so the matchkey is used
    up and a fresh one is offered at once. With a reset, the connection may
    be dead before the server reads anything (Linux then fails accept's
    getpeername); the grant is then an unused one, renewed after ~8 s.
    Either way the device is offered again and serves the next client."""
    server = muster_server(tracker=tracker, key="rasp")
    mk = grant_matchkey(tracker, "rasp")
    sock = tvmpeer.rpc_raw(HOST, server.port, tvmpeer.rpc_hello(mk))
    if close == "fin":
        sock.close()
        server.wait_offers(2, timeout=5)
    else:
        rst_close(sock)
        server.wait_offers(2, timeout=RENEW_MAX + 2)
    wait_queue(tracker, "rasp", free=1)
    sock, _, granted = tvmpeer.request_session(HOST, tracker.port, "rasp")
    with sock:
        assert granted[2] != mk
        assert_echo(sock, b"next")


# --- tracker outages (section 8.1 step 6, which muster improves on) -------

@pytest.fixture
def reference_cli(tmp_path):
    """Factory: the reference tracker as a process (`tvmpeer.py tracker`),
    so it can be SIGKILLed and restarted on its port. Teardown: SIGTERM,
    exit status 0."""
    started = []

    def start(port=0):
        log_path = tmp_path / f"reference-{len(started)}.log"
        args = [sys.executable, str(TVMPEER), "tracker", "--host", HOST,
                "--port", str(port), "--port-end", str(port + 1)]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=log)
        process = MusterProcess(proc, log_path)
        process.name = "reference tracker"
        started.append(process)
        process.port = int(process.wait_log(r"bind to \S+:(\d+)")[0])
        return process

    yield start
    problems = [p.stop() for p in started]
    problems = [p for p in problems if p]
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.mark.parametrize("kind,downtime", [("muster", 0.0), ("muster", 3.0),
                                           ("reference", 0.0)])
def test_servers_come_back_after_tracker_restart(kind, downtime,
                                                 muster_tracker,
                                                 reference_cli,
                                                 muster_server):
    if kind == "muster":
        def start(port=0):
            return muster_tracker(port=port,
                                  port_end=port + 1 if port else None)
    else:
        start = reference_cli
    first = start()
    port = first.port
    servers = [muster_server(tracker=first, key=k) for k in ("a", "a", "b")]
    want = sorted(("server:" + s.key, HOST, s.port) for s in servers)
    wait_summary(first, lambda s: server_entries(s) == want)
    # One device is in a session while the tracker dies: sessions do not
    # go through the tracker.
    sock, _, grant = tvmpeer.request_session(HOST, port, "a")
    busy = next(s for s in servers if s.port == grant[1])
    idle = [s for s in servers if s is not busy]
    offers_before = [len(s.matchkeys()) for s in idle]

    first.kill()
    for server in idle:
        server.wait_log(r"Lost tracker|unreachable", timeout=5)
    time.sleep(downtime)
    restarted_at = time.monotonic()
    second = start(port=port)
    assert second.port == port
    # every server, the busy one too, is back; only the idle ones offer
    wait_summary(second, lambda s: (
        server_entries(s) == want
        and s["queue_info"].get("a") == {"free": 1, "pending": 0}
        and s["queue_info"].get("b") == {"free": 1, "pending": 0}),
        timeout=15, what="the servers registered again")
    back_after = time.monotonic() - restarted_at
    for server, before in zip(idle, offers_before):
        server.wait_log(rf"Tracker {HOST}:{port} is back")
        # a new registration offers a fresh matchkey
        assert len(server.matchkeys()) == before + 1
    # The busy device keeps polling during its session (TVM's servers fall
    # silent, 8.1 step 7), so the restarted tracker counted it at once, with
    # nothing offered; its offer follows when the session ends.
    busy.wait_log(rf"Tracker {HOST}:{port} is back")
    with sock:
        assert_echo(sock, b"the session survived")
    wait_summary(second, lambda s: (
        server_entries(s) == want
        and s["queue_info"].get("a") == {"free": 2, "pending": 0}),
        timeout=5, what="the busy server offered itself after its session")
    for key in ("a", "b"):
        s2, _, _ = tvmpeer.request_session(HOST, port, key)
        with s2:
            assert_echo(s2, key.encode())
    print(f"{kind}: back {back_after:.2f} s after the restart")


def test_backoff_doubles_while_the_tracker_refuses(muster_server):
    """A 'tracker' that accepts and hangs up at once: the server retries
    after 0.25, 0.5, 1, 2, 4 s (doubling, capped at 8 s)."""
    with socket.socket() as listener:
        listener.bind((HOST, 0))
        listener.listen(16)
        listener.settimeout(12)
        port = listener.getsockname()[1]
        server = muster_server(tracker=f"{HOST}:{port}", key="rasp",
                               wait_offer=False)
        stamps = []
        while len(stamps) < 6:
            conn, _ = listener.accept()
            stamps.append(time.monotonic())
            conn.close()
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    for gap, want in zip(gaps, [0.25, 0.5, 1, 2, 4]):
        assert want * 0.8 <= gap <= want * 1.25 + 0.3, gaps
    assert server.proc.poll() is None


def test_server_waits_for_a_tracker_that_is_not_there_yet(muster_tracker,
                                                          muster_server):
    with socket.socket() as hold:  # bound, not listening: refused
        hold.bind((HOST, 0))
        port = hold.getsockname()[1]
        server = muster_server(tracker=f"{HOST}:{port}", key="late",
                               wait_offer=False)
        server.wait_log(rf"Tracker {HOST}:{port} unreachable")
        time.sleep(2)
        assert server.proc.poll() is None
    tracker = muster_tracker(port=port, port_end=port + 1)
    server.wait_offers(1, timeout=15)
    wait_queue(tracker, "late", free=1)


# --- priorities (section 7) ------------------------------------------------

def test_priorities_decide_who_gets_the_device(tracker, muster_server,
                                               muster_bin, tmp_path):
    """The only device is busy; requesters queue with priorities
    2 (muster request), 5 (Python), 9 (muster request), 1 (Python),
    5 (muster request), in that order. Expected: 9, 5 (the earlier), 5, 2, 1."""
    server = muster_server(tracker=tracker, key="prio")
    holder, _, _ = tvmpeer.request_session(HOST, tracker.port, "prio")
    plan = [("cli", 2), ("py", 5), ("cli", 9), ("py", 1), ("cli", 5)]
    requesters = []
    try:
        for i, (kind, prio) in enumerate(plan):
            if kind == "py":
                client = tvmpeer.TrackerSession(HOST, tracker.port)
                client.send_request("prio", prio)
                requesters.append(("py", prio, client))
            else:
                err = tmp_path / f"request-{i}.err"
                with open(err, "wb") as err_file:
                    proc = subprocess.Popen(
                        [str(muster_bin), "request", "prio", "--tracker",
                         f"{HOST}:{tracker.port}", "--priority", str(prio),
                         "--timeout", "60"],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                        stderr=err_file)
                requesters.append(("cli", prio, (proc, err)))
            wait_queue(tracker, "prio", free=0, pending=i + 1)

        def granted(entry):
            kind, _, handle = entry
            if kind == "py":
                return bool(select.select([handle.sock], [], [], 0)[0])
            return b"session open" in handle[1].read_bytes()

        holder.close()
        order = []
        waiting = list(requesters)
        while waiting:
            deadline = time.monotonic() + 10
            while not any(granted(e) for e in waiting):
                assert time.monotonic() < deadline, f"stuck after {order}"
                time.sleep(0.02)
            time.sleep(0.1)  # would a second one be granted too? (never)
            now = [e for e in waiting if granted(e)]
            assert len(now) == 1, [(k, p) for k, p, _ in now]
            kind, prio, handle = entry = now[0]
            order.append((kind, prio))
            waiting.remove(entry)
            message = f"{kind}-{prio}".encode()
            if kind == "py":
                addr, port, mk = handle.recv_grant()
                with tvmpeer.rpc_connect(addr, port, mk)[0] as sock:
                    assert_echo(sock, message)
                handle.close()
            else:
                proc, err = handle
                out, _ = proc.communicate(message, timeout=15)
                assert proc.returncode == 0, err.read_text()
                assert out == message
    finally:
        holder.close()
        for kind, _, handle in requesters:
            if kind == "py":
                handle.close()
            elif handle[0].poll() is None:
                handle[0].kill()
                handle[0].wait()
    assert order == [("cli", 9), ("py", 5), ("cli", 5), ("cli", 2),
                     ("py", 1)]
    wait_queue(tracker, "prio", free=1, pending=0)


# --- muster request (section 11, with a timeout) ---------------------------

def test_muster_request_relays_stdin_and_stdout(tracker, muster_server,
                                                muster_bin):
    server = muster_server(tracker=tracker, key="rasp")
    data = random.randbytes(300_000)
    result = run_request(muster_bin, "rasp", "--tracker",
                         f"{HOST}:{tracker.port}", "--timeout", "10",
                         data=data)
    assert result.returncode == 0, result.stderr
    assert result.stdout == data
    assert (f"muster request: session open with {HOST}:{server.port} "
            f"(server:rasp)").encode() in result.stderr
    server.wait_offers(2)
    wait_queue(tracker, "rasp", free=1)


def test_muster_request_no_relay(tracker, muster_server, muster_bin):
    server = muster_server(tracker=tracker, key="rasp")
    result = run_request(muster_bin, "rasp", "--tracker",
                         f"{HOST}:{tracker.port}", "--no-relay")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b""
    assert f"session open with {HOST}:{server.port}".encode() \
        in result.stderr


def test_muster_request_session_timeout(tracker, muster_server, muster_bin):
    muster_server(tracker=tracker, key="rasp")
    proc = subprocess.Popen(
        [str(muster_bin), "request", "rasp", "--tracker",
         f"{HOST}:{tracker.port}", "--session-timeout", "1"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    try:
        started = time.monotonic()
        proc.stdin.write(b"abc")
        proc.stdin.flush()          # stdin stays open: only the cut ends it
        out = read_to_eof(proc.stdout, 10)  # until the device closes
        elapsed = time.monotonic() - started
        proc.wait(5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()
    assert out == b"abc"
    assert 0.9 <= elapsed <= 4.0, elapsed


def test_muster_request_unknown_key_times_out(tracker, muster_bin):
    started = time.monotonic()
    result = run_request(muster_bin, "nokey", "--tracker",
                         f"{HOST}:{tracker.port}", "--timeout", "1")
    elapsed = time.monotonic() - started
    assert result.returncode == 1
    assert 0.9 <= elapsed <= 6, elapsed
    err = result.stderr.decode()
    assert "nokey" in err and f"{HOST}:{tracker.port}" in err, err
    assert result.stdout == b""
    settle(tracker.port)
    # muster's tracker drops a queued request whose client left (14.6)
    assert summary_of(tracker)["queue_info"]["nokey"] == {"free": 0,
                                                          "pending": 0}


def test_muster_request_without_a_tracker(muster_bin):
    with socket.socket() as hold:
        hold.bind((HOST, 0))
        port = hold.getsockname()[1]
        started = time.monotonic()
        result = run_request(muster_bin, "rasp", "--tracker",
                             f"{HOST}:{port}", "--timeout", "1")
    assert result.returncode == 1
    assert time.monotonic() - started <= 6
    err = result.stderr.decode()
    assert "rasp" in err and f"{HOST}:{port}" in err, err


def test_muster_request_retries_past_an_unreachable_grant(tracker,
                                                          muster_server,
                                                          muster_bin):
    """Section 11 [verified]: the first grant points nowhere, so the client
    requests again and gets the real device."""
    with socket.socket() as hold, tracker.session() as fake:
        hold.bind((HOST, 0))
        dead_port = hold.getsockname()[1]
        # the fake resource is the oldest, so it is granted first
        fake.put("rasp", dead_port, "rasp:0.1", None)
        server = muster_server(tracker=tracker, key="rasp")
        wait_queue(tracker, "rasp", free=2)
        result = run_request(muster_bin, "rasp", "--tracker",
                             f"{HOST}:{tracker.port}", "--timeout", "10",
                             data=b"through")
        assert result.returncode == 0, result.stderr
        assert result.stdout == b"through"
        assert f"session open with {HOST}:{server.port}".encode() \
            in result.stderr


        # With one try only, an unreachable grant is the end, at once.
        fake.put("ghost", dead_port, "ghost:0.1", None)
        started = time.monotonic()
        result = run_request(muster_bin, "ghost", "--tracker",
                             f"{HOST}:{tracker.port}", "--timeout", "5",
                             "--retries", "1")
        assert result.returncode == 1
        assert time.monotonic() - started < 4
        assert b"ghost" in result.stderr


def test_muster_request_retries_past_a_mismatch(tracker, muster_server,
                                                muster_bin):
    """Spec section 11: a grant whose device answers MISMATCH (a stale or
    wrong matchkey) is given up and the client requests again. The first
    grant here is a fake resource naming a live `muster server` that does
    not know its matchkey; the second is a real registered device."""
    decoy = muster_server(key="rasp")  # standalone: takes only "rasp"
    with tracker.session() as fake:
        # the fake resource is the oldest, so it is granted first
        fake.put("rasp", decoy.port, "rasp:bogus", None)
        server = muster_server(tracker=tracker, key="rasp")
        wait_queue(tracker, "rasp", free=2)
        result = run_request(muster_bin, "rasp", "--tracker",
                             f"{HOST}:{tracker.port}", "--timeout", "10",
                             data=b"past the mismatch")
        assert result.returncode == 0, result.stderr
        assert result.stdout == b"past the mismatch"
        assert f"session open with {HOST}:{server.port}".encode() \
            in result.stderr
        # the first grant really reached the decoy and was refused there
        decoy.wait_log(r'Mismatch from .*"rasp:bogus"', timeout=5)
        assert decoy.log_count(r"Session with .* started") == 0
        # both grants were consumed: the fake one is gone for good
        assert "rasp:bogus" not in fake.pending_matchkeys()
        wait_queue(tracker, "rasp", free=1)  # the real device, re-offered

        # With one try only, the mismatch is the end, at once.
        fake.put("ghost", decoy.port, "ghost:bogus", None)
        started = time.monotonic()
        result = run_request(muster_bin, "ghost", "--tracker",
                             f"{HOST}:{tracker.port}", "--timeout", "5",
                             "--retries", "1")
        assert result.returncode == 1
        assert time.monotonic() - started < 4
        err = result.stderr.decode()
        assert "ghost" in err and "mismatch" in err, err
        decoy.wait_log(r'Mismatch from .*"ghost:bogus"', timeout=5)


# --- standalone (no tracker) ------------------------------------------------

def test_standalone_default_key(muster_server):
    """TVM's rpc_server defaults to the key "" and rpc.connect(host, port)
    sends "client:", so that is what a standalone server takes by default."""
    server = muster_server()
    assert "standalone" in server.log_text()
    for _ in range(2):  # the bare key is not single-use here
        sock, key = server.connect("")
        with sock:
            assert key == "server:"
            assert_echo(sock, b"standalone")
    for wrong in ["nope", "muster", ":0.1"]:
        with pytest.raises(tvmpeer.RpcMismatch):
            server.connect(wrong)
    with tvmpeer.rpc_raw(HOST, server.port, tvmpeer.rpc_hello("")) as sock:
        assert tvmpeer.recvall(sock, 4 + 4 + 7) == success_bytes("")


def test_standalone_custom_key(muster_server):
    server = muster_server(key="rasp")
    with pytest.raises(tvmpeer.RpcMismatch):
        server.connect("muster")
    sock, key = server.connect("rasp", session_timeout=30)
    with sock:
        assert key == "server:rasp"
        assert_echo(sock, b"k")


def test_standalone_sessions_take_turns(muster_server):
    # A short handshake timeout: a client waiting for its turn has finished
    # its handshake, so the timeout must not cut it.
    server = muster_server("--handshake-timeout", "0.5", key="rasp")
    first, _ = server.connect("rasp")
    with first:
        second = tvmpeer.rpc_raw(HOST, server.port, tvmpeer.rpc_hello("rasp"))
        with second:
            assert_quiet(second, 1.5)
            # wrong keys are still refused at once
            with pytest.raises(tvmpeer.RpcMismatch):
                server.connect("other", timeout=2)
            assert_echo(first, b"first")
            first.close()
            assert tvmpeer.rpc_read_reply(second) == "server:rasp"
            assert_echo(second, b"second")
    # A waiting client that gave up does not hold the line.
    first, _ = server.connect("rasp")
    with first:
        quitter = tvmpeer.rpc_raw(HOST, server.port,
                                  tvmpeer.rpc_hello("rasp"))
        assert_quiet(quitter, 0.3)
        quitter.close()
    started = time.monotonic()
    sock, _ = server.connect("rasp", timeout=5)
    with sock:
        assert_echo(sock, b"third")
    assert time.monotonic() - started < 3


def test_standalone_waiting_clients_are_served_in_order(muster_server):
    server = muster_server(key="rasp")
    active, _ = server.connect("rasp")
    hello = tvmpeer.rpc_hello("rasp")
    second = tvmpeer.rpc_raw(HOST, server.port, hello)
    time.sleep(0.1)
    third = tvmpeer.rpc_raw(HOST, server.port, hello)
    time.sleep(0.1)
    with second, third:
        active.close()
        readable, _, _ = select.select([second, third], [], [], 5)
        assert readable == [second]
        assert tvmpeer.rpc_read_reply(second) == "server:rasp"
        assert_echo(second, b"2")
        assert_quiet(third, 0.3)
        # SIGTERM ends the session and drops the client still waiting
        server.allow_exit = True
        assert server.stop() is None
        assert assert_closed(second) == b""
        assert assert_closed(third) == b""


# --- command line -----------------------------------------------------------

def test_tracker_without_key_is_a_usage_error(muster_bin):
    for args in (["--tracker", f"{HOST}:9190"],
                 ["--tracker", f"{HOST}:9190", "--key", ""],
                 ["--tracker", "no-port-here", "--key", "rasp"]):
        result = subprocess.run([str(muster_bin), "server", "--host", HOST,
                                 "--port", "0", *args],
                                stdin=subprocess.DEVNULL,
                                capture_output=True, text=True, timeout=10)
        assert result.returncode == 2, (args, result.stderr)
        assert "--tracker" in result.stderr or "--key" in result.stderr
        assert "Bind to" not in result.stderr


def ipv6_loopback():
    """True if ::1 can be bound here (the IPv6 test then must pass)."""
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_ipv6_tracker_literal(muster_tracker, muster_server):
    if not ipv6_loopback():
        # No IPv6 loopback: the literal must still parse; the server then
        # runs and keeps retrying an unreachable tracker.
        server = muster_server(tracker="[::1]:9", key="v6", wait_offer=False)
        server.wait_log(r"Tracker ::1:9 unreachable")
        return
    tracker = muster_tracker(host="::1")
    assert tracker.address == f"[::1]:{tracker.port}"
    server = muster_server(tracker=tracker, key="v6", host="::1")
    summary = wait_queue(tracker, "v6", free=1)
    assert summary["server_info"] == [{"key": "server:v6",
                                       "addr": ["::1", server.port]}]
    sock, key, grant = tvmpeer.request_session("::1", tracker.port, "v6")
    with sock:
        assert grant[:2] == ("::1", server.port)
        assert key == "server:v6"
        assert_echo(sock, b"six")


# --- stopping ---------------------------------------------------------------

def test_sigterm_with_clients_in_every_state(tracker, muster_server):
    server = muster_server(tracker=tracker, key="rasp")
    session, _ = server.connect(server.matchkey)
    silent = tvmpeer.rpc_raw(HOST, server.port)
    partial = tvmpeer.rpc_raw(HOST, server.port, tvmpeer.RPC_MAGIC_BYTES)
    with session, silent, partial:
        assert_echo(session, b"x")
        started = time.monotonic()
        server.allow_exit = True
        assert server.stop() is None
        assert time.monotonic() - started < 5
        for sock in (session, silent, partial):
            assert_closed(sock)
    assert server.proc.returncode == 0


def test_sigterm_while_the_tracker_is_gone(muster_tracker, muster_server):
    tracker = muster_tracker()
    server = muster_server(tracker=tracker, key="rasp")
    tracker.kill()
    server.wait_log(r"Lost tracker|unreachable")
    time.sleep(1.0)  # in the backoff sleep now
    started = time.monotonic()
    server.allow_exit = True
    assert server.stop() is None
    assert time.monotonic() - started < 3
