# SPDX-License-Identifier: MIT
"""`muster tracker` and `muster query` driven the way TVM's peers drive a
tracker (spec/tvm-tracker.md). Every assertion is user-visible behaviour:
bytes on the wire, grants, SUMMARY contents, CLI output. Section numbers
refer to the spec. Where muster deliberately differs from TVM's Python
tracker (section 14.6), the test says so and
test_known_differences_from_python_tracker pins each difference against the
reference tracker."""

import contextlib
import json
import os
import re
import socket
import subprocess

import pytest

import tvmpeer
from conftest import (HOST, busy_port, queue_requests, settle,
                      time_wait_port, wait_for)

# How long "no grant arrives" is given before the test accepts it.
NO_GRANT_WAIT = 0.5


def session(tracker, stack):
    return stack.enter_context(tvmpeer.TrackerSession(HOST, tracker.port))


def queue(summary, key):
    return summary["queue_info"].get(key, {"free": 0, "pending": 0})


def assert_no_grant(client, wait=NO_GRANT_WAIT):
    with pytest.raises(TimeoutError):
        client.recv_grant(timeout=wait)


def by_key_and_addr(server_info):
    """server_info in a canonical order: the tracker's order is arbitrary."""
    return sorted(server_info, key=lambda e: json.dumps(e, sort_keys=True))


# --- handshake and framing (sections 3, 4) -------------------------------

def test_magic_is_echoed(tracker):
    with tvmpeer.connect(HOST, tracker.port) as sock:
        sock.sendall(tvmpeer.MAGIC_BYTES)
        assert tvmpeer.recvall(sock, 4) == b"\x71\xf2\x02\x00"


def test_frame_in_the_magic_segment_is_accepted(tracker):
    # The Python tracker drops this connection; section 14.1 asks muster to
    # read exactly 4 bytes and keep what follows.
    with tvmpeer.connect(HOST, tracker.port) as sock:
        sock.sendall(tvmpeer.MAGIC_BYTES + tvmpeer.frame(b"[1]"))
        assert tvmpeer.recvall(sock, 4) == tvmpeer.MAGIC_BYTES
        assert tvmpeer.recv_frame(sock) == b"0"


def test_ping_reply_bytes(tracker, stack):
    client = session(tracker, stack)
    client.send_frame(b"[1]")
    assert tvmpeer.recvall(client.sock, 5) == b"\x01\x00\x00\x000"


def test_empty_summary_bytes(tracker, stack):
    client = session(tracker, stack)
    client.send_frame(b"[6]")
    assert client.recv_frame() == b'[0, {"queue_info": {}, "server_info": []}]'


def test_grant_bytes_use_python_separators(tracker, stack):
    server = session(tracker, stack)
    assert server.put("rasp", 9090, "rasp:0.5") == tvmpeer.SUCCESS
    client = session(tracker, stack)
    client.send_frame(b'[4,"rasp","",1]')
    assert client.recv_frame() == b'[0, ["127.0.0.1", 9090, "rasp:0.5"]]'


# --- registration styles (sections 4, 8) ---------------------------------

def test_python_server_registration(tracker, stack):
    server = stack.enter_context(
        tvmpeer.PythonServer(HOST, tracker.port, "rasp"))
    server.register()
    client = session(tracker, stack)
    assert client.summary() == {
        "queue_info": {"rasp": {"free": 1, "pending": 0}},
        "server_info": [{"key": "server:rasp", "addr": [HOST, 9090]}]}
    assert client.request("rasp") == (HOST, 9090, server.matchkey)


def test_cpp_server_string_port_is_echoed_as_string(tracker, stack):
    server = stack.enter_context(
        tvmpeer.CppServer(HOST, tracker.port, "rk3399"))
    server.register()
    client = session(tracker, stack)
    assert client.summary()["server_info"] == [
        {"key": "server:rk3399", "addr": [HOST, "9090"]}]
    # The PUT carried an int port, and the grant carries it unchanged.
    assert client.request("rk3399") == (HOST, 9090, server.matchkey)


def test_java_server_space_before_colon_is_parsed(tracker, stack):
    server = stack.enter_context(
        tvmpeer.JavaServer(HOST, tracker.port, "android"))
    server.register()
    client = session(tracker, stack)
    assert client.summary()["server_info"] == [
        {"key": "server:android", "addr": [HOST, "9090"]}]
    assert client.request("android") == (HOST, 9090, server.matchkey)


def test_put_forms_and_addresses(tracker, stack):
    server = session(tracker, stack)
    assert server.put("k3", 9090, "k3:1", three_elements=True) == 0
    assert server.put("k4", 9091, "k4:1", None) == 0
    assert server.put("kc", 9092, "kc:1", "rasp-01.lan") == 0
    client = session(tracker, stack)
    assert client.request("k3") == (HOST, 9090, "k3:1")
    assert client.request("k4") == (HOST, 9091, "k4:1")
    assert client.request("kc") == ("rasp-01.lan", 9092, "kc:1")


def test_custom_addr_in_update_info(tracker, stack):
    server = stack.enter_context(tvmpeer.PythonServer(
        HOST, tracker.port, "rasp", custom_addr="10.1.2.3"))
    server.register()
    client = session(tracker, stack)
    assert client.summary()["server_info"] == [
        {"key": "server:rasp", "addr": ["10.1.2.3", 9090]}]
    assert client.request("rasp") == ("10.1.2.3", 9090, server.matchkey)


# --- scheduling (section 7) ----------------------------------------------

def test_request_is_deferred_until_a_put(tracker, stack):
    client = session(tracker, stack)
    client.send_request("rasp", 1)
    assert_no_grant(client)
    server = session(tracker, stack)
    server.put("rasp", 9090, "rasp:0.5")
    assert client.recv_grant() == (HOST, 9090, "rasp:0.5")


def test_priorities_1_5_5_3_are_granted_5_5_3_1(tracker, stack):
    clients = queue_requests(tracker.port, stack, "rasp", [1, 5, 5, 3])
    server = session(tracker, stack)
    for i in range(4):
        assert server.put("rasp", 9090, f"rasp:{i}") == tvmpeer.SUCCESS
    # PUT i was granted to the i-th best request.
    assert [c.recv_grant()[2] for c in clients] == [
        "rasp:3", "rasp:0", "rasp:1", "rasp:2"]


def test_equal_priorities_are_fifo(tracker, stack):
    clients = queue_requests(tracker.port, stack, "rasp", [2, 2, 2])
    server = session(tracker, stack)
    for i in range(3):
        server.put("rasp", 9090, f"rasp:{i}")
    assert [c.recv_grant()[2] for c in clients] == [
        "rasp:0", "rasp:1", "rasp:2"]


def test_free_resources_are_granted_oldest_first(tracker, stack):
    first, second = session(tracker, stack), session(tracker, stack)
    first.put("rasp", 9090, "rasp:0")
    second.put("rasp", 9091, "rasp:1")
    first.put("rasp", 9090, "rasp:2")
    client = session(tracker, stack)
    assert [client.request("rasp") for _ in range(3)] == [
        (HOST, 9090, "rasp:0"), (HOST, 9091, "rasp:1"), (HOST, 9090, "rasp:2")]


def test_ping_reply_overtakes_a_deferred_request(tracker, stack):
    client = session(tracker, stack)
    client.send_frame(b'[4, "nokey", "", 1]')
    client.send_frame(b"[1]")
    assert client.recv_frame() == b"0"
    assert_no_grant(client)


# --- GET_PENDING_MATCHKEYS (section 4) -----------------------------------

def test_pending_matchkeys_are_per_connection(tracker, stack):
    a, b, c = (session(tracker, stack) for _ in range(3))
    a.put("rasp", 9090, "rasp:a1")
    a.put("rasp", 9090, "rasp:a2")
    b.put("rasp", 9091, "rasp:b1")
    assert sorted(a.pending_matchkeys()) == ["rasp:a1", "rasp:a2"]
    assert b.pending_matchkeys() == ["rasp:b1"]
    c.send_frame(b"[7]")
    assert c.recv_frame() == b"[]"
    assert c.request("rasp") == (HOST, 9090, "rasp:a1")
    assert a.pending_matchkeys() == ["rasp:a2"]
    assert b.pending_matchkeys() == ["rasp:b1"]


# --- muster's fixes (section 14.6) ---------------------------------------

def test_close_without_update_info_withdraws_puts(tracker, stack):
    with tvmpeer.TrackerSession(HOST, tracker.port) as anonymous:
        anonymous.put("rasp", 9090, "rasp:dead")
    probe = session(tracker, stack)
    wait_for(lambda: queue(probe.summary(), "rasp")["free"] == 0,
             what="the closed connection's resource to be withdrawn")
    probe.send_request("rasp", 1)
    assert_no_grant(probe)


def test_client_disconnect_drops_its_queued_request(tracker, stack):
    client = tvmpeer.TrackerSession(HOST, tracker.port)
    client.send_request("rasp", 1)
    assert client.ping() == tvmpeer.SUCCESS
    probe = session(tracker, stack)
    assert queue(probe.summary(), "rasp") == {"free": 0, "pending": 1}
    client.close()
    wait_for(lambda: queue(probe.summary(), "rasp")["pending"] == 0,
             what="the closed client's request to leave `pending`")


def test_key_with_colons(tracker, stack):
    key = "192.168.0.143:5555"
    server = tvmpeer.PythonServer(HOST, tracker.port, key)
    server.register()
    client = session(tracker, stack)
    summary = client.summary()
    assert summary["server_info"] == [
        {"key": "server:" + key, "addr": [HOST, 9090]}]
    assert summary["queue_info"][key] == {"free": 1, "pending": 0}
    assert client.request(key) == (HOST, 9090, server.matchkey)
    server.put()
    assert queue(client.summary(), key)["free"] == 1
    server.close()
    wait_for(lambda: client.summary()["server_info"] == []
             and queue(client.summary(), key)["free"] == 0,
             what="the closed server to be withdrawn")
    client.send_request(key, 1)
    assert_no_grant(client)


def test_dead_requester_never_blocks_a_key(tracker, stack):
    dead = tvmpeer.TrackerSession(HOST, tracker.port)
    dead.send_request("rasp", 100)
    assert dead.ping() == tvmpeer.SUCCESS
    alive = queue_requests(tracker.port, stack, "rasp", [1])[0]
    dead.close()
    settle(tracker.port)
    server = session(tracker, stack)
    server.put("rasp", 9090, "rasp:0.5")
    assert alive.recv_grant() == (HOST, 9090, "rasp:0.5")
    assert queue(server.summary(), "rasp") == {"free": 0, "pending": 0}


# --- server_info (section 4, SUMMARY) ------------------------------------

def test_server_info_lists_server_connections_only(tracker, stack):
    first = tvmpeer.PythonServer(HOST, tracker.port, "rasp")
    second = stack.enter_context(
        tvmpeer.PythonServer(HOST, tracker.port, "rasp", rpc_port=9091))
    first.register()
    second.register()
    not_server = session(tracker, stack)
    assert not_server.update_info({"key": "client:x", "addr": [None, 1]}) == 0
    anonymous = session(tracker, stack)
    anonymous.put("rasp", 9092, "rasp:anonymous")
    probe = session(tracker, stack)
    assert by_key_and_addr(probe.summary()["server_info"]) == [
        {"key": "server:rasp", "addr": [HOST, 9090]},
        {"key": "server:rasp", "addr": [HOST, 9091]}]
    first.close()
    wait_for(lambda: probe.summary()["server_info"] == [
        {"key": "server:rasp", "addr": [HOST, 9091]}],
        what="the closed server to leave server_info")


# --- STOP, UTF-8 ----------------------------------------------------------

def test_stop_with_a_wrong_key_is_refused(tracker, stack):
    client = session(tracker, stack)
    client.send_frame(b'[2, "nope"]')
    assert client.recv_frame() == b"-1"
    assert client.ping() == tvmpeer.SUCCESS
    assert session(tracker, stack).ping() == tvmpeer.SUCCESS


def test_utf8_key_round_trips(tracker, stack):
    key = "dév-ü-日本"
    server = stack.enter_context(tvmpeer.PythonServer(
        HOST, tracker.port, key, rpc_port=9091))
    server.register()       # \u-escaped JSON, as Python peers send it
    raw = session(tracker, stack)
    body = json.dumps([tvmpeer.PUT, key, [9092, key + ":raw"], None],
                      ensure_ascii=False).encode("utf-8")
    assert len(body) > len(body.decode("utf-8"))  # length counts bytes
    raw.send_frame(body)
    assert raw.recv() == tvmpeer.SUCCESS
    client = session(tracker, stack)
    summary = client.summary()
    assert summary["queue_info"] == {key: {"free": 2, "pending": 0}}
    assert summary["server_info"] == [
        {"key": "server:" + key, "addr": [HOST, 9091]}]
    assert client.request(key) == (HOST, 9091, server.matchkey)
    assert client.request(key) == (HOST, 9092, key + ":raw")


# --- muster query (section 11) -------------------------------------------

def run_query(muster_bin, *args, env=None):
    return subprocess.run([str(muster_bin), "query", *args], env=env,
                          capture_output=True, text=True, timeout=10)


def populate(port, stack):
    """A non-trivial tracker state: two keys with servers of every style, a
    granted resource, pending requests (one on a key no server has), and an
    anonymous resource whose row query must hide (total 0, pending 0)."""
    servers = [tvmpeer.PythonServer(HOST, port, "rasp"),
               tvmpeer.PythonServer(HOST, port, "rasp", rpc_port=9091),
               tvmpeer.CppServer(HOST, port, "rasp", rpc_port=9092,
                                 custom_addr="10.0.0.7"),
               tvmpeer.JavaServer(HOST, port, "android-arm64")]
    for server in servers:
        stack.enter_context(server).register()
    client = stack.enter_context(tvmpeer.TrackerSession(HOST, port))
    client.request("android-arm64")
    queue_requests(port, stack, "android-arm64", [1])
    queue_requests(port, stack, "nokey", [1, 2])
    anonymous = stack.enter_context(tvmpeer.TrackerSession(HOST, port))
    anonymous.put("lonely", 9093, "lonely:0.1")
    return client


def test_query_prints_text_summary(tracker, muster_bin, stack):
    probe = populate(tracker.port, stack)
    result = run_query(muster_bin, "--host", HOST, "--port", str(tracker.port))
    assert result.returncode == 0, result.stderr
    text = probe.text_summary()
    assert "android-arm64   1      0     1" in text  # the state is as meant
    assert result.stdout == (f"Tracker address {HOST}:{tracker.port}\n\n"
                             + text + "\n")


def test_query_counts_servers_by_key_field_1(tracker, muster_bin, stack):
    # TVM splits `server:a:b` on ':' and counts it under `a` (section 6), so
    # a key with ':' has total 0 under its own name; query shows the same.
    server = stack.enter_context(
        tvmpeer.PythonServer(HOST, tracker.port, "10.0.0.9:5555"))
    server.register()
    queue_requests(tracker.port, stack, "10.0.0.9", [1])
    probe = session(tracker, stack)
    result = run_query(muster_bin, "--host", HOST, "--port", str(tracker.port))
    assert result.returncode == 0, result.stderr
    assert result.stdout == (f"Tracker address {HOST}:{tracker.port}\n\n"
                             + probe.text_summary() + "\n")


def test_query_json_is_the_summary(tracker, muster_bin, stack):
    probe = populate(tracker.port, stack)
    result = run_query(muster_bin, "--json", "--host", HOST,
                       "--port", str(tracker.port))
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    summary = probe.summary()
    assert printed["queue_info"] == summary["queue_info"]
    assert (by_key_and_addr(printed["server_info"])
            == by_key_and_addr(summary["server_info"]))


def test_query_uses_tvm_tracker_env(tracker, muster_bin, stack):
    env = dict(os.environ, TVM_TRACKER_HOST=HOST,
               TVM_TRACKER_PORT=str(tracker.port))
    result = run_query(muster_bin, env=env)
    assert result.returncode == 0, result.stderr
    text = session(tracker, stack).text_summary()
    assert result.stdout == (f"Tracker address {HOST}:{tracker.port}\n\n"
                             + text + "\n")


def test_query_against_a_closed_port_fails(muster_bin):
    # A bound socket that does not listen: connecting to it is refused, and
    # nobody else can take the port meanwhile.
    with socket.socket() as unused:
        unused.bind((HOST, 0))
        port = unused.getsockname()[1]
        result = run_query(muster_bin, "--host", HOST, "--port", str(port))
    assert result.returncode != 0
    assert f"{HOST}:{port}" in result.stderr
    assert result.stdout == ""


# --- same behaviour as the Python tracker ---------------------------------

def scenario(port):
    """Register servers of the three styles, queue requests, grant, poll,
    re-put, and return everything a TVM peer can observe, with random
    matchkeys replaced by "<server>#<n>" (the n-th key that server made)."""
    with contextlib.ExitStack() as stack:
        clients = queue_requests(port, stack, "rasp", [1, 5, 5, 3])
        clients += queue_requests(port, stack, "android", [2])
        py = tvmpeer.PythonServer(HOST, port, "rasp")
        cpp = tvmpeer.CppServer(HOST, port, "rasp", rpc_port=9091)
        java = tvmpeer.JavaServer(HOST, port, "android", rpc_port=9092,
                                  custom_addr="10.0.0.7")
        named = {"py": py, "cpp": cpp, "java": java}
        for server in named.values():
            stack.enter_context(server).register()
        observed = {"after_register": clients[0].summary()}
        py.put()
        observed["py_pending"] = py.still_pending()
        observed["java_retick"] = [java.idle_tick(), java.still_pending()]
        observed["cpp_ticks"] = [cpp.idle_tick() for _ in range(4)]
        observed["grants"] = [c.recv_grant() for c in clients]
        queue_requests(port, stack, "nokey", [1])
        observed["final"] = clients[0].summary()

    def label(matchkey):
        for name, server in named.items():
            if matchkey in server.used:
                return f"{name}#{server.used.index(matchkey)}"
        return matchkey

    observed["grants"] = [(a, p, label(m)) for a, p, m in observed["grants"]]
    for snap in ("after_register", "final"):
        observed[snap]["server_info"] = by_key_and_addr(
            observed[snap]["server_info"])
    return observed


def test_same_observations_as_python_tracker(tracker, reference):
    ours, theirs = scenario(tracker.port), scenario(reference.port)
    assert ours == theirs
    # And the scenario is the one intended:
    assert ours["grants"] == [(HOST, 9091, "cpp#1"), (HOST, 9090, "py#0"),
                              (HOST, 9091, "cpp#0"), (HOST, 9090, "py#1"),
                              ("10.0.0.7", 9092, "java#0")]


def test_known_differences_from_python_tracker(tracker, reference, stack):
    """Each quirk of the Python tracker that muster fixes (sections 3.1,
    7.4, 7.5, 14.1, 14.6), observed on both: reference first, muster second."""
    def anonymous_put_then_close(port):
        with tvmpeer.TrackerSession(HOST, port) as anonymous:
            anonymous.put("anon", 9090, "anon:0.1")
        settle(port)
        with tvmpeer.TrackerSession(HOST, port) as probe:
            return queue(probe.summary(), "anon")["free"]

    def queued_client_closes(port):
        with tvmpeer.TrackerSession(HOST, port) as client:
            client.send_request("gone", 1)
            client.ping()
        settle(port)
        with tvmpeer.TrackerSession(HOST, port) as probe:
            return queue(probe.summary(), "gone")["pending"]

    def split_magic(port):
        with tvmpeer.connect(HOST, port) as sock:
            sock.sendall(tvmpeer.MAGIC_BYTES[:2])
            settle(port)
            try:
                sock.sendall(tvmpeer.MAGIC_BYTES[2:])
                return tvmpeer.recvall(sock, 4) == tvmpeer.MAGIC_BYTES
            except OSError:
                return False

    def magic_with_frame(port):
        with tvmpeer.connect(HOST, port) as sock:
            sock.sendall(tvmpeer.MAGIC_BYTES + tvmpeer.frame(b"[1]"))
            try:
                tvmpeer.recvall(sock, 4)
                return tvmpeer.recv_frame(sock) == b"0"
            except OSError:
                return False

    for probe, python_result, muster_result in [
            (anonymous_put_then_close, 1, 0),   # 7.4: stays free forever
            (queued_client_closes, 1, 0),       # 7.5: dead request pending
            (split_magic, False, True),         # 3.1: first chunk != 4 bytes
            (magic_with_frame, False, True)]:   # 3.1: same quirk
        assert probe(reference.port) == python_result, probe.__name__
        assert probe(tracker.port) == muster_result, probe.__name__


# --- port search (sections 10, 14.9) -------------------------------------

def test_port_search_skips_a_busy_port(muster_tracker):
    with busy_port(free_after=2) as held:
        port = held.getsockname()[1]
        tracker = muster_tracker(port=port, port_end=port + 3)
        assert tracker.port == port + 1
        assert f"Bind to {HOST}:{port + 1}" in tracker.log_text()
        with tracker.session() as client:
            assert client.ping() == tvmpeer.SUCCESS


def test_no_reuse_addr_skips_a_time_wait_port(muster_tracker):
    """--no-reuse-addr (TVM's reuse_addr=False): no SO_REUSEADDR, so a port
    whose old connection is in TIME_WAIT counts as in use and the search
    moves on; by default (SO_REUSEADDR, as TVM) that port is taken."""
    port = time_wait_port(free_after=2)
    plain = muster_tracker("--no-reuse-addr", port=port, port_end=port + 3)
    assert plain.port == port + 1
    assert f"Bind to {HOST}:{port + 1}" in plain.log_text()
    reusing = muster_tracker(port=port, port_end=port + 3)
    assert reusing.port == port
    for tracker in (plain, reusing):
        with tracker.session() as client:
            assert client.ping() == tvmpeer.SUCCESS
            assert client.put("k", 9090, "k:1") == tvmpeer.SUCCESS
            assert client.summary()["queue_info"]["k"] == {"free": 1,
                                                           "pending": 0}


def test_no_reuse_addr_binds_a_free_port(muster_tracker):
    with busy_port(free_after=2) as held:
        port = held.getsockname()[1] + 1
    tracker = muster_tracker("--no-reuse-addr", port=port, port_end=port + 2)
    assert tracker.port == port
    with tracker.session() as client:
        assert client.ping() == tvmpeer.SUCCESS


def test_port_search_exhausted_fails(muster_bin):
    with tvmpeer.ReferenceTracker(HOST, port=0, silent=True) as busy:
        result = subprocess.run(
            [str(muster_bin), "tracker", "--host", HOST,
             "--port", str(busy.port), "--port-end", str(busy.port + 1)],
            stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=10)
    assert result.returncode != 0
    assert result.stderr.strip(), "no error message"
    assert "Bind to" not in result.stderr


# --- log lines (issue: "logs like the seed's", silent mode quiet) ----------

LOG_LINE_RE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (INFO|WARNING|ERROR|DEBUG) tracker: (.*)$")

# Every info line a PUT / REQUEST / session cycle makes the tracker print.
INFO_PHRASES = ["Bind to", "New session from", "Handshake with",
                "Received key", "Update info of", "Request using key",
                "Offering matchkey", "End session"]


def request_session(muster_bin, key, tracker_addr, data):
    """`muster request KEY` through the tracker, relaying `data` to the
    device's echo session; asserts it worked."""
    result = subprocess.run(
        [str(muster_bin), "request", key, "--tracker", tracker_addr,
         "--timeout", "10"], input=data, capture_output=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout == data


def info_messages(text):
    """The INFO messages of a muster log, in order; every line must be a
    well-formed "DATE TIME.ms LEVEL tracker: message" line."""
    messages = []
    for raw in text.splitlines():
        match = LOG_LINE_RE.match(raw)
        assert match, f"not a log line: {raw!r}"
        if match[1] == "INFO":
            messages.append(match[2])
    return messages


def test_log_lines_of_a_session_cycle(tracker, muster_server, muster_bin):
    """A server registers (UPDATE_INFO, PUT), a client requests and gets a
    session: the tracker logs each step, per connection, in order."""
    server = muster_server(tracker=tracker, key="logdev")
    first_mk = server.matchkey
    request_session(muster_bin, "logdev", tracker.address, b"logged")
    wait_for(lambda: re.search(r"Request using key logdev from (\S+)",
                               tracker.log_text()), 5,
             what="the request logged")
    requester = re.search(r"Request using key logdev from (\S+), priority 1",
                          tracker.log_text())[1]
    wait_for(lambda: f"End session {requester}" in tracker.log_text(), 5,
             what="End session of the requester")
    # after the session the server offers a fresh matchkey, logged on both
    wait_for(lambda: len(server.matchkeys()) >= 2, 10,
             what="a fresh matchkey after the session")
    second_mk = server.matchkeys()[1]
    assert second_mk != first_mk
    wait_for(lambda: f": {second_mk} at" in tracker.log_text(), 5,
             what="the re-PUT logged")

    text = tracker.log_text()
    messages = info_messages(text)
    assert messages[0] == f"Bind to {HOST}:{tracker.port}"
    assert " WARNING " not in text and " ERROR " not in text, text

    # the requester's connection, from accept to close, and nothing else
    named = re.compile(re.escape(requester) + r"(?!\d)")
    assert [m for m in messages if named.search(m)] == [
        f"New session from {requester}",
        f"Handshake with {requester} successful",
        f"Request using key logdev from {requester}, priority 1",
        f"Offering matchkey {first_mk} at {HOST}:{server.port} "
        f"to {requester}",
        f"End session {requester}"], messages

    # the server's registration connection, in protocol order
    srv = re.search(rf"Received key logdev from (\S+): {re.escape(first_mk)}"
                    rf" at {HOST}:{server.port}", text)[1]
    order = [messages.index(f"New session from {srv}"),
             messages.index(f"Handshake with {srv} successful"),
             messages.index(f"Update info of {srv}: key server:logdev"),
             messages.index(f"Received key logdev from {srv}: {first_mk} "
                            f"at {HOST}:{server.port}"),
             messages.index(f"Offering matchkey {first_mk} at "
                            f"{HOST}:{server.port} to {requester}"),
             messages.index(f"Received key logdev from {srv}: {second_mk} "
                            f"at {HOST}:{server.port}")]
    assert order == sorted(order), messages
    # and the server's own side of it
    assert server.log_count(rf"Offering matchkey {re.escape(first_mk)}") == 1
    assert server.log_count(rf"Offering matchkey {re.escape(second_mk)}") == 1


def test_silent_tracker_prints_no_info_lines(muster_bin, muster_server):
    """`muster tracker --silent` prints none of the info lines through the
    same cycle, while warnings still come out (TVM: silent means WARN)."""
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [str(muster_bin), "tracker", "--silent", "--host", HOST,
         "--port", str(port), "--port-end", str(port + 1)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT)
    try:
        def up():
            try:
                socket.create_connection((HOST, port), timeout=1).close()
                return True
            except OSError:
                assert proc.poll() is None, proc.stdout.read()
                return False

        wait_for(up, 10, what="the silent tracker listening")
        server = muster_server(tracker=f"{HOST}:{port}", key="quiet")
        request_session(muster_bin, "quiet", f"{HOST}:{port}", b"hush")
        wait_for(lambda: len(server.matchkeys()) >= 2, 10,
                 what="the server re-offered after its session")
        with tvmpeer.TrackerSession(HOST, port) as sess:
            assert sess.stop("tracker:wrong") == tvmpeer.FAIL
            assert sess.ping() == tvmpeer.SUCCESS
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    text = out.decode(errors="replace")
    for phrase in INFO_PHRASES:
        assert phrase not in text, text
    assert " INFO " not in text, text
    # the sink is live: a warning still reaches it
    assert re.search(r" WARNING .*STOP with a wrong key, ignored", text), text
