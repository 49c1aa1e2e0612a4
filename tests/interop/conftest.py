# SPDX-License-Identifier: MIT
"""Fixtures shared by the TVM tracker interop tests.

* `muster_bin`: the muster executable, `$MUSTER_BIN` or
  `<repo>/build/bin/muster`. A missing binary fails every test that needs it
  (STYLE.md rule 12: a missing peer is never a silent skip).
* `muster_tracker`: a factory that starts `muster tracker` on 127.0.0.1 and
  returns a `MusterTracker` once its `Bind to HOST:PORT` log line appears;
  teardown fails the test if a tracker died while the test ran, then stops
  every tracker (SIGTERM, 5 s, SIGKILL).
* `tracker`: one `muster tracker` on a kernel-chosen port.
* `reference`: a tvmpeer.ReferenceTracker served from a thread.
* `stack`: an ExitStack for sockets, sessions and servers a test opens.

Helpers the tests import: `wait_for`, `assert_closed`, `settle`,
`busy_port`, `queue_requests`.

Everything is bounded in time: sockets get tvmpeer.DEFAULT_TIMEOUT, startup
waits at most STARTUP_TIMEOUT, and `wait_for` polls with a deadline.
"""

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tvmpeer  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
STARTUP_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0
BIND_RE = re.compile(r"Bind to (\S+):(\d+)")


def wait_for(predicate, timeout=5.0, interval=0.02, what="condition"):
    """Poll `predicate` until it returns a truthy value (returned) or fail
    the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class MusterTracker:
    """A running `muster tracker` subprocess. stdout and stderr both go to
    `log_path`. Set `allow_exit` when the test expects the process to end
    before teardown."""

    host = HOST

    def __init__(self, proc, log_path):
        self.proc = proc
        self.log_path = log_path
        self.port = None
        self.allow_exit = False

    def log_text(self):
        return self.log_path.read_text(errors="replace")

    def session(self, timeout=tvmpeer.DEFAULT_TIMEOUT):
        return tvmpeer.TrackerSession(HOST, self.port, timeout)

    def wait_bound(self):
        """Wait for the bind log line; fail with the log if it never comes
        or the process exits first."""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            match = BIND_RE.search(self.log_text())
            if match:
                self.port = int(match.group(2))
                return
            if self.proc.poll() is not None:
                pytest.fail(f"muster tracker exited with "
                            f"{self.proc.returncode} before binding; "
                            f"log:\n{self.log_text()}")
            time.sleep(0.02)
        pytest.fail(f"no 'Bind to HOST:PORT' line within {STARTUP_TIMEOUT} s;"
                    f" log:\n{self.log_text()}")

    def stop(self):
        """SIGTERM, then SIGKILL after STOP_TIMEOUT. Returns a problem
        description, or None if the process ended on SIGTERM."""
        if self.proc.poll() is not None:
            return None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_TIMEOUT)
            return None
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return (f"did not exit within {STOP_TIMEOUT} s of SIGTERM; "
                    f"log tail:\n{self.log_text()[-2000:]}")


@pytest.fixture(scope="session")
def muster_bin():
    default = REPO / "build" / "bin" / "muster"
    path = Path(os.environ.get("MUSTER_BIN", default))
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"muster binary not found at {path}: build it with "
                    "`cmake -S . -B build && cmake --build build` or set "
                    "MUSTER_BIN", pytrace=False)
    return path


@pytest.fixture
def muster_tracker(muster_bin, tmp_path):
    """Factory: `muster_tracker(*extra_args, port=0, port_end=None)` starts
    `muster tracker --host 127.0.0.1 --port PORT [--port-end E] EXTRA...`
    and returns a bound MusterTracker."""
    started = []

    def start(*extra, port=0, port_end=None):
        args = [str(muster_bin), "tracker", "--host", HOST,
                "--port", str(port)]
        if port_end is not None:
            args += ["--port-end", str(port_end)]
        args += [str(a) for a in extra]
        log_path = tmp_path / f"muster-tracker-{len(started)}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=log)
        tracker = MusterTracker(proc, log_path)
        started.append(tracker)
        tracker.wait_bound()
        return tracker

    yield start

    problems = []
    for tracker in started:
        if tracker.proc.poll() is not None and not tracker.allow_exit:
            problems.append(f"muster tracker on port {tracker.port} died "
                            f"during the test (exit {tracker.proc.returncode})"
                            f"; log:\n{tracker.log_text()}")
    for tracker in started:
        problem = tracker.stop()
        if problem:
            problems.append(f"muster tracker on port {tracker.port}: "
                            f"{problem}")
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture
def tracker(muster_tracker):
    return muster_tracker()


@pytest.fixture
def reference():
    """A tvmpeer.ReferenceTracker (TVM Python tracker behaviour) on a
    kernel-chosen port, served from a thread."""
    reference = tvmpeer.ReferenceTracker(HOST, port=0, silent=True).start()
    yield reference
    reference.terminate()


@pytest.fixture
def stack():
    with contextlib.ExitStack() as exit_stack:
        yield exit_stack


def assert_closed(sock, timeout=5.0):
    """Fail unless the peer closes `sock` (EOF or reset) within `timeout`
    seconds. Returns whatever bytes arrived before the close."""
    sock.settimeout(timeout)
    received = bytearray()
    deadline = time.monotonic() + timeout
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return bytes(received)
        except TimeoutError:
            chunk = None
        if chunk == b"":
            return bytes(received)
        if chunk:
            received += chunk
        if chunk is None or time.monotonic() > deadline:
            pytest.fail(f"connection still open after {timeout} s "
                        f"(received {bytes(received)[:64]!r})")


def settle(port):
    """Make sure the tracker on `port` has processed every close that
    happened before this call. On loopback a close() delivers its FIN before
    it returns, so the poll iteration that serves this PING also sees those
    EOFs; the short sleep covers loops that read EOF one iteration later."""
    time.sleep(0.05)
    with tvmpeer.TrackerSession(HOST, port) as sess:
        assert sess.ping() == tvmpeer.SUCCESS


def busy_port(free_after=1):
    """A listening socket on a kernel-chosen port P such that the ports
    P+1 .. P+free_after could be bound at the time of the call: port-search
    tests hold P and expect the searcher to land on P+1."""
    for _ in range(50):
        held = socket.socket()
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind((HOST, 0))
        held.listen(1)
        port = held.getsockname()[1]
        if port + free_after < 65536 and all(
                _bindable(p) for p in range(port + 1, port + free_after + 1)):
            return held
        held.close()
    pytest.fail("no port with free successors found")


def _bindable(port):
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
        return True


def queue_requests(port, stack, key, priorities):
    """Open one client per priority and queue `[4, key, "", prio]` on each,
    in order. Each REQUEST is known to be queued before the next is sent: a
    PING sent after it on the same connection is answered first (spec
    section 3). The sessions close with `stack`."""
    clients = []
    for prio in priorities:
        client = stack.enter_context(tvmpeer.TrackerSession(HOST, port))
        client.send_request(key, prio)
        assert client.ping() == tvmpeer.SUCCESS
        clients.append(client)
    return clients
