# SPDX-License-Identifier: MIT
"""The Python binding (`import muster`, ctypes over libmuster) used the way
TVM's own tests use `tvm.rpc.tracker.Tracker` and `rpc.connect_tracker`:
start a tracker on a port range, point servers at (tracker.host,
tracker.port), read summary()/text_summary(), request a session, terminate.
The servers are `muster server` processes (which really serve sessions)
and tvmpeer.PythonServer emulations (registration only, spec section 8.1).

The binding loads build/lib/libmuster.so (or $MUSTER_LIB); the servers are
$MUSTER_BIN, so under `make check-sanitize` only the servers run sanitized.
"""

import errno
import logging
import re
import socket
import sys
import time
from pathlib import Path

import pytest

import tvmpeer
from conftest import HOST, REPO, time_wait_port, wait_for

sys.path.insert(0, str(REPO / "python"))
import muster  # noqa: E402


# --- helpers --------------------------------------------------------------

def free_range(count, host="0.0.0.0"):
    """A port P such that P .. P+count-1 can all be bound on `host` now
    (with SO_REUSEADDR, as the tracker binds). TVM's tests hard-code 9000;
    a kernel-chosen start avoids collisions with whatever else runs."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind((host, 0))
            base = probe.getsockname()[1]
        if base + count >= 65536:
            continue
        if all(_bindable(host, p) for p in range(base, base + count)):
            return base
    pytest.fail(f"no {count} consecutive free ports")


def _bindable(host, port):
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def refused(port):
    """True if nothing listens on 127.0.0.1:port."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def exists_address(summary, key, host, port):
    return any(e["key"] == "server:" + key and e["addr"][0] == host
               and e["addr"][1] == port for e in summary["server_info"])


def free_of(summary, key):
    return summary["queue_info"].get(key, {}).get("free", 0)


def echo(sess, data):
    """The device echoes: what goes through the session's stream comes back."""
    sess.send(data, timeout=10)
    got = b""
    while len(got) < len(data):
        chunk = sess.recv(len(data) - len(got), timeout=10)
        assert chunk, "the session closed mid-echo"
        got += chunk
    assert got == data


@pytest.fixture
def trackers():
    """Trackers a test makes; teardown terminates any still running."""
    made = []

    def make(**kwargs):
        tracker = muster.Tracker(**kwargs)
        made.append(tracker)
        return tracker

    yield make
    for tracker in made:
        tracker.terminate()


def local_tracker(trackers):
    """A quiet tracker on 127.0.0.1, in a range of 5 free ports."""
    base = free_range(5, HOST)
    return trackers(host=HOST, port=base, port_end=base + 5, silent=True)


# --- TVM's test flow --------------------------------------------------------

def test_tvm_style_register_request_terminate(trackers, muster_server,
                                              stack):
    base = free_range(20)
    tracker = trackers(port=base, port_end=base + 20)
    assert tracker.host == "0.0.0.0"
    assert base <= tracker.port < base + 20
    assert tracker.stop_key.startswith("tracker:")
    addr = ("127.0.0.1", tracker.port)

    key = "test_device"
    server1 = muster_server(tracker=f"{addr[0]}:{addr[1]}", key=key)
    server2 = muster_server(tracker=f"{addr[0]}:{addr[1]}", key=key)
    emulated = stack.enter_context(
        tvmpeer.PythonServer(addr[0], addr[1], "emulated", rpc_port=9191))
    emulated.register()

    client = muster.connect_tracker(*addr)
    summary = client.summary()
    assert free_of(summary, key) == 2
    assert free_of(summary, "emulated") == 1
    assert exists_address(summary, key, "127.0.0.1", server1.port)
    assert exists_address(summary, key, "127.0.0.1", server2.port)
    assert exists_address(summary, "emulated", "127.0.0.1", 9191)
    assert client.text_summary() == tvmpeer.text_summary(client.summary())
    assert f"{key}   2      2     0" in client.text_summary()

    remote = client.request(key)
    assert remote.server_key == "server:" + key
    assert remote.peer in (f"127.0.0.1:{server1.port}",
                           f"127.0.0.1:{server2.port}")
    echo(remote, b"through the binding")
    assert free_of(client.summary(), key) == 1
    remote.close()
    remote.close()  # harmless
    wait_for(lambda: free_of(client.summary(), key) == 2, 5,
             what="the device offered again")

    # A server that stops is withdrawn at once.
    server1.allow_exit = True
    assert server1.stop() is None
    wait_for(lambda: free_of(client.summary(), key) == 1, 5,
             what="server1 withdrawn")
    summary = client.summary()
    assert not exists_address(summary, key, "127.0.0.1", server1.port)
    assert exists_address(summary, key, "127.0.0.1", server2.port)
    client.close()

    port = tracker.port
    tracker.terminate()
    assert refused(port)
    tracker.terminate()  # a second call is harmless
    server2.wait_log(r"Lost tracker|unreachable")


def test_priorities_through_the_binding(trackers, muster_server):
    """Python requesters on threads while the only device is busy: the
    higher priority is served first (spec section 7)."""
    import threading

    tracker = local_tracker(trackers)
    muster_server(tracker=f"{HOST}:{tracker.port}", key="p")
    client = muster.connect_tracker(HOST, tracker.port)
    holder = client.request("p")
    order, errors = [], []

    def want(priority):
        try:
            sess = muster.connect_tracker(HOST, tracker.port).request(
                "p", priority=priority, timeout=20)
            order.append(priority)
            echo(sess, b"%d" % priority)
            sess.close()
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = []
    for i, priority in enumerate([1, 7, 3]):
        thread = threading.Thread(target=want, args=(priority,))
        thread.start()
        threads.append(thread)
        wait_for(lambda: client.summary()["queue_info"]["p"]["pending"]
                 == i + 1, 5, what=f"{i + 1} requests queued")
    holder.close()
    for thread in threads:
        thread.join(30)
        assert not thread.is_alive()
    assert errors == []
    assert order == [7, 3, 1]


def test_request_session_timeout_and_direct_connect(trackers, muster_server):
    tracker = local_tracker(trackers)
    server = muster_server(tracker=f"{HOST}:{tracker.port}", key="t")
    client = muster.connect_tracker(HOST, tracker.port)
    sess = client.request("t", session_timeout=1)
    started = time.monotonic()
    assert sess.recv(1, timeout=5) == b""  # the device ends it after 1 s
    assert 0.8 <= time.monotonic() - started <= 3
    sess.close()

    # connect() is the direct handshake: the current matchkey works once.
    matchkey = server.wait_offers(2)[1]
    direct = muster.connect(HOST, server.port, matchkey)
    echo(direct, b"direct")
    with pytest.raises(muster.MusterError):
        muster.connect(HOST, server.port, matchkey)
    direct.close()


def test_request_without_a_device_times_out(trackers):
    tracker = local_tracker(trackers)
    client = muster.connect_tracker(HOST, tracker.port)
    started = time.monotonic()
    # TVM's RuntimeError with TVM's words, and a TimeoutError too (issue 16)
    with pytest.raises(muster.MusterTimeoutError, match="Cannot request nokey") as info:
        client.request("nokey", timeout=1)
    assert isinstance(info.value, RuntimeError)
    assert isinstance(info.value, TimeoutError)
    assert info.value.errno == errno.ETIMEDOUT
    assert time.monotonic() - started < 5


def test_connect_to_a_standalone_server(muster_server):
    server = muster_server(key="muster")
    with muster.connect(HOST, server.port, "muster") as sess:
        assert sess.server_key == "server:muster"
        assert sess.peer == f"{HOST}:{server.port}"
        echo(sess, b"standalone")
    with pytest.raises(muster.MusterError):
        muster.connect(HOST, server.port, "wrong")


# --- Tracker construction (spec section 10) ---------------------------------

def test_exhausted_or_empty_range_is_a_value_error(trackers):
    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind((HOST, 0))
        held.listen(1)
        port = held.getsockname()[1]
        with pytest.raises(ValueError,
                           match=rf"cannot bind to any port in "
                                 rf"\[{port}, {port + 1}\)"):
            trackers(host=HOST, port=port, port_end=port + 1)
    port = free_range(1, HOST)
    with pytest.raises(ValueError,
                       match=rf"cannot bind to any port in \[{port}, {port}\)"):
        trackers(host=HOST, port=port, port_end=port)


def test_two_trackers_on_one_range_get_consecutive_ports(trackers):
    base = free_range(4, HOST)
    first = trackers(host=HOST, port=base, port_end=base + 4, silent=True)
    second = trackers(host=HOST, port=base, port_end=base + 4, silent=True)
    assert (first.port, second.port) == (base, base + 1)
    for tracker in (first, second):
        with tvmpeer.TrackerSession(HOST, tracker.port) as probe:
            assert probe.ping() == tvmpeer.SUCCESS


def test_reuse_addr_false_skips_a_time_wait_port(trackers):
    """reuse_addr=False reaches the bind: a port with a connection in
    TIME_WAIT is skipped, while the default (True) takes it."""
    port = time_wait_port(free_after=2)
    plain = trackers(host=HOST, port=port, port_end=port + 3, silent=True,
                     reuse_addr=False)
    assert plain.port == port + 1
    reusing = trackers(host=HOST, port=port, port_end=port + 3, silent=True)
    assert reusing.port == port


def test_stop_key(trackers):
    tracker = local_tracker(trackers)
    assert tracker.stop_key.startswith("tracker:")
    assert len(tracker.stop_key) > len("tracker:")
    with tvmpeer.TrackerSession(HOST, tracker.port) as sess:
        assert sess.stop("tracker:guess") == tvmpeer.FAIL
        assert sess.ping() == tvmpeer.SUCCESS
    # STOP with the right key from outside: terminate() afterwards is a
    # harmless no-op, as in TVM.
    with tvmpeer.TrackerSession(HOST, tracker.port) as sess:
        assert sess.stop(tracker.stop_key) == tvmpeer.SUCCESS
    wait_for(lambda: refused(tracker.port), 5, what="tracker stopped")
    tracker.terminate()
    tracker.terminate()


def _stop_warnings(caplog):
    return [r for r in caplog.records
            if r.name == "muster.tracker" and r.levelno >= logging.WARNING
            and r.getMessage().startswith("STOP to the tracker")]


def _tracker_lines(caplog):
    """What the tracker itself logged (through Python's logging)."""
    return "\n".join(f"{r.levelname} {r.getMessage()}" for r in caplog.records
                     if r.name == "muster.tracker")


def test_terminate_stops_with_stop(trackers, capfd, caplog):
    """terminate() stops the tracker through STOP with its key (the
    tracker logs the request), not only through the library's own stop.
    The tracker's lines go to the "muster.tracker" logger, not stderr."""
    base = free_range(5, HOST)
    tracker = trackers(host=HOST, port=base, port_end=base + 5)
    port = tracker.port
    with tvmpeer.TrackerSession(HOST, port) as sess:
        assert sess.ping() == tvmpeer.SUCCESS
    capfd.readouterr()
    with caplog.at_level(logging.INFO, logger="muster.tracker"):
        tracker.terminate()
    lines = _tracker_lines(caplog)
    assert re.search(r"INFO Stop requested by 127\.0\.0\.1:\d+", lines), lines
    assert "wrong key" not in lines
    assert _stop_warnings(caplog) == []
    assert "Stop requested" not in capfd.readouterr().err
    assert refused(port)


def test_terminate_reports_a_refused_stop(trackers, caplog):
    """A STOP the tracker refuses is not hidden: terminate() logs a warning
    (it never raises, as TVM's callers expect) and still stops the
    tracker."""
    base = free_range(5, HOST)
    tracker = trackers(host=HOST, port=base, port_end=base + 5)
    port = tracker.port
    tracker.stop_key = "tracker:not-the-key"
    with caplog.at_level(logging.INFO, logger="muster.tracker"):
        tracker.terminate()
    lines = _tracker_lines(caplog)
    assert "STOP with a wrong key, ignored" in lines, lines
    assert "Stop requested" not in lines
    warnings = _stop_warnings(caplog)
    assert len(warnings) == 1, caplog.records
    assert f"port {port}" in warnings[0].getMessage()
    assert "-1" in warnings[0].getMessage()
    assert refused(port)
    tracker.terminate()  # still harmless, and silent
    assert len(_stop_warnings(caplog)) == 1


def test_terminate_after_outside_stop_is_quiet(trackers, caplog):
    """A tracker already stopped by someone else's STOP: terminate() has
    nothing to report."""
    tracker = local_tracker(trackers)
    with tvmpeer.TrackerSession(HOST, tracker.port) as sess:
        assert sess.stop(tracker.stop_key) == tvmpeer.SUCCESS
    wait_for(lambda: refused(tracker.port), 5, what="tracker stopped")
    with caplog.at_level(logging.WARNING, logger="muster.tracker"):
        tracker.terminate()
    assert _stop_warnings(caplog) == []
