# SPDX-License-Identifier: MIT
"""The reference tracker (tvmpeer.ReferenceTracker) has the behaviours the
spec marks [verified] on TVM's real Python tracker, quirks included, and
tvmpeer's client helpers produce the spec's exact text. These tests need no
muster binary: they check the yardstick the interop tests and the benchmark
compare muster against."""

import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import tvmpeer
from conftest import HOST, assert_closed, busy_port, queue_requests, settle

TVMPEER = Path(__file__).resolve().parent / "tvmpeer.py"


def session(tracker):
    return tvmpeer.TrackerSession(HOST, tracker.port)


def test_priorities_1_5_5_3_granted_5_5_3_1(reference, stack):
    clients = queue_requests(reference.port, stack, "rasp", [1, 5, 5, 3])
    server = stack.enter_context(session(reference))
    for i in range(4):
        assert server.put("rasp", 9090, f"rasp:{i}") == tvmpeer.SUCCESS
    got = [c.recv_grant()[2] for c in clients]
    assert got == ["rasp:3", "rasp:0", "rasp:1", "rasp:2"]


def test_disconnected_priority_100_request_is_skipped(reference, stack):
    dead = session(reference)
    dead.send_request("rasp", 100)
    assert dead.ping() == tvmpeer.SUCCESS
    alive = queue_requests(reference.port, stack, "rasp", [1])[0]
    dead.close()
    settle(reference.port)
    server = stack.enter_context(session(reference))
    server.put("rasp", 9090, "rasp:0.5")
    assert alive.recv_grant() == (HOST, 9090, "rasp:0.5")
    assert server.summary()["queue_info"]["rasp"] == {"free": 0, "pending": 0}


def test_pending_counts_dead_requesters(reference, stack):
    for _ in range(2):
        with session(reference) as client:
            client.send_request("rasp", 1)
            assert client.ping() == tvmpeer.SUCCESS
    settle(reference.port)
    probe = stack.enter_context(session(reference))
    assert probe.summary()["queue_info"] == {"rasp": {"free": 0, "pending": 2}}
    # A resource skips both dead requests and goes back to the free list.
    probe.put("rasp", 9090, "rasp:0.1")
    assert probe.summary()["queue_info"] == {"rasp": {"free": 1, "pending": 0}}


def test_puts_without_update_info_stay_free(reference, stack):
    with session(reference) as anonymous:
        anonymous.put("rasp", 9090, "rasp:0.1")
    with tvmpeer.PythonServer(HOST, reference.port, "rk") as registered:
        registered.register()
    settle(reference.port)
    client = stack.enter_context(session(reference))
    summary = client.summary()
    assert summary["queue_info"] == {"rasp": {"free": 1, "pending": 0},
                                     "rk": {"free": 0, "pending": 0}}
    assert summary["server_info"] == []
    # The dead endpoint is still handed out.
    assert client.request("rasp") == (HOST, 9090, "rasp:0.1")


def test_stop_key(reference, stack):
    client = stack.enter_context(session(reference))
    assert client.stop("tracker:wrong") == tvmpeer.FAIL
    assert client.ping() == tvmpeer.SUCCESS
    assert client.stop(reference.stop_key) == tvmpeer.SUCCESS
    assert_closed(client.sock)
    assert reference.join(timeout=5)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((HOST, reference.port), timeout=1).close()


def test_empty_summary_exact_bytes(reference, stack):
    client = stack.enter_context(session(reference))
    client.send_frame(b"[6]")
    assert client.recv_frame() == b'[0, {"queue_info": {}, "server_info": []}]'


def test_three_registration_styles(reference, stack):
    py = stack.enter_context(tvmpeer.PythonServer(HOST, reference.port, "a"))
    cpp = stack.enter_context(tvmpeer.CppServer(HOST, reference.port, "b",
                                                rpc_port=9091))
    java = stack.enter_context(tvmpeer.JavaServer(HOST, reference.port, "c",
                                                  rpc_port=9092,
                                                  custom_addr="10.0.0.7"))
    for server in (py, cpp, java):
        server.register()
    assert re.fullmatch(r"b:0\.\d{6}", cpp.matchkey)
    client = stack.enter_context(session(reference))
    info = sorted(client.summary()["server_info"], key=lambda e: e["key"])
    assert info == [{"key": "server:a", "addr": [HOST, 9090]},
                    {"key": "server:b", "addr": [HOST, "9091"]},
                    {"key": "server:c", "addr": ["10.0.0.7", "9092"]}]
    assert client.request("c") == ("10.0.0.7", 9092, java.matchkey)


def test_regeneration_rules(reference, stack):
    py = stack.enter_context(tvmpeer.PythonServer(HOST, reference.port, "a"))
    java = stack.enter_context(tvmpeer.JavaServer(HOST, reference.port, "a"))
    py.register()
    java.register()
    client = stack.enter_context(session(reference))
    client.request("a")
    client.request("a")
    first_py, first_java = py.matchkey, java.matchkey
    # Python regenerates on the 4th consecutive miss, with a fresh key.
    assert [py.idle_tick() for _ in range(4)] == [False, False, False, True]
    assert py.matchkey != first_py and py.still_pending()
    # Java re-PUTs the same matchkey on its first miss.
    assert java.idle_tick() is True
    assert java.matchkey == first_java and java.still_pending()


def test_same_matchkey_put_twice_closes_trigger(reference, stack):
    server = stack.enter_context(session(reference))
    server.put("rasp", 9090, "rasp:0.5")
    server.put("rasp", 9090, "rasp:0.5")
    first = stack.enter_context(session(reference))
    assert first.request("rasp") == (HOST, 9090, "rasp:0.5")
    second = stack.enter_context(session(reference))
    assert second.request("rasp") == (HOST, 9090, "rasp:0.5")
    assert_closed(second.sock)


def test_magic_with_frame_in_one_segment_is_dropped(reference):
    with tvmpeer.connect(HOST, reference.port) as sock:
        sock.sendall(tvmpeer.MAGIC_BYTES + tvmpeer.frame(b"[1]"))
        assert assert_closed(sock) == b""


def test_text_summary_exact():
    summary = {"queue_info": {"rasp": {"free": 1, "pending": 0},
                              "idle": {"free": 2, "pending": 0},
                              "q": {"free": 0, "pending": 3}},
               "server_info": [
                   {"key": "server:rasp", "addr": ["10.0.0.7", "9091"]},
                   {"key": "server:rasp", "addr": ["127.0.0.1", 9090]}]}
    assert tvmpeer.text_summary(summary) == (
        "Server List\n"
        "------------------------------\n"
        "server-address           key\n"
        "------------------------------\n"
        "10.0.0.7:9091            server:rasp\n"
        "127.0.0.1:9090           server:rasp\n"
        "------------------------------\n"
        "\n"
        "Queue Status\n"
        "----------------------------\n"
        "key    total  free  pending\n"
        "----------------------------\n"
        "q      0      0     3      \n"
        "rasp   2      1     0      \n"
        "----------------------------\n")
    empty = tvmpeer.text_summary({"queue_info": {}, "server_info": []})
    assert empty.splitlines()[-1] == "-" * 27


def test_port_search():
    with busy_port(free_after=1) as held:
        port = held.getsockname()[1]
        with pytest.raises(ValueError, match=r"cannot bind to any port in \["):
            tvmpeer.ReferenceTracker(HOST, port, port + 1, silent=True)
        second = tvmpeer.ReferenceTracker(HOST, port, port + 2, silent=True)
        second.listener.close()
        assert second.port == port + 1


def test_cli_logs_bind_line_and_stops_on_sigterm():
    with busy_port(free_after=1) as held:
        port = held.getsockname()[1]
        proc = subprocess.Popen(
            [sys.executable, str(TVMPEER), "tracker", "--host", HOST,
             "--port", str(port), "--port-end", str(port + 2)],
            stderr=subprocess.PIPE, text=True)
        try:
            line = proc.stderr.readline()
            assert re.fullmatch(
                r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} INFO bind to "
                + re.escape(f"{HOST}:{port + 1}") + "\n", line), line
            with tvmpeer.TrackerSession(HOST, port + 1) as client:
                assert client.ping() == tvmpeer.SUCCESS
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=5) == 0
        finally:
            proc.kill()
            proc.wait()
            proc.stderr.close()
