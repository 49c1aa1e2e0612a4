# SPDX-License-Identifier: MIT
"""Fixtures shared by the TVM tracker interop tests.

* `muster_bin`: the muster executable, `$MUSTER_BIN` or
  `<repo>/build/bin/muster`. A missing binary fails every test that needs it
  (STYLE.md rule 12: a missing peer is never a silent skip).
* `muster_tracker`: a factory that starts `muster tracker` on 127.0.0.1 and
  returns a `MusterTracker` once its `Bind to HOST:PORT` log line appears.
* `muster_server`: a factory that starts `muster server` (standalone, or
  registering with a tracker) and returns a `MusterServer` once it is bound
  (and, with a tracker, once it offers its first matchkey).
* Teardown of both factories fails the test if a process died while the
  test ran (unless the test killed it itself), then stops every process
  with SIGTERM and fails the test unless each one exits within STOP_TIMEOUT
  with status 0. Under the ASan build (`make check-sanitize`), a leak or a
  memory error makes that status non-zero, so it fails the test.
* `tracker`: one `muster tracker` on a kernel-chosen port.
* `reference`: a tvmpeer.ReferenceTracker served from a thread.
* `stack`: an ExitStack for sockets, sessions and servers a test opens.

Helpers the tests import: `wait_for`, `assert_closed`, `settle`,
`busy_port`, `queue_requests`; `MusterProcess` (log waits, fd counts,
SIGKILL) for other processes a test runs.

Everything is bounded in time: sockets get tvmpeer.DEFAULT_TIMEOUT, startup
waits at most STARTUP_TIMEOUT, and `wait_for` polls with a deadline. As a
last resort a watchdog ends the whole run, with every thread's stack, if one
test takes longer than TEST_LIMIT (a hang in a library we do not control,
such as torch's client, must fail the run, not stall it).
"""

import contextlib
import errno
import faulthandler
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
STOP_TIMEOUT = 10.0
TEST_LIMIT = 300.0
BIND_RE = re.compile(r"Bind to (\S+):(\d+)")
OFFER_RE = re.compile(r"Offering matchkey (\S+)")


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


class MusterProcess:
    """A running muster subprocess. stdout and stderr both go to `log_path`.
    Set `allow_exit` when the test expects the process to end before
    teardown (`kill()` sets it)."""

    name = "muster"

    def __init__(self, proc, log_path, host=HOST):
        self.proc = proc
        self.log_path = log_path
        self.host = host
        self.port = None
        self.allow_exit = False

    @property
    def pid(self):
        return self.proc.pid

    def log_text(self):
        return self.log_path.read_text(errors="replace")

    def log_count(self, pattern):
        return len(re.findall(pattern, self.log_text()))

    def wait_log(self, pattern, count=1, timeout=STARTUP_TIMEOUT):
        """Wait until the log matches the regex `pattern` at least `count`
        times; return all matches (re.findall). Fails the test, with the
        log, on timeout or if the process exits meanwhile."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            found = regex.findall(self.log_text())
            if len(found) >= count:
                return found
            if self.proc.poll() is not None:
                pytest.fail(f"{self.name} exited with {self.proc.returncode}"
                            f" while waiting for {count} x {pattern!r}; "
                            f"log:\n{self.log_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"{self.name}: fewer than {count} x {pattern!r} "
                            f"after {timeout} s (found {len(found)}); "
                            f"log:\n{self.log_text()}")
            time.sleep(0.02)

    def wait_bound(self):
        """Wait for the bind log line; fail with the log if it never comes
        or the process exits first."""
        match = self.wait_log(BIND_RE, 1)[0]
        self.port = int(match[1])

    def fd_count(self):
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def kill(self):
        """SIGKILL, as a crash or power loss would; teardown then leaves the
        process alone."""
        self.allow_exit = True
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(STOP_TIMEOUT)

    def stop(self):
        """SIGTERM and wait STOP_TIMEOUT (then SIGKILL). Returns a problem
        description, or None if the process exited with status 0 (or had
        already ended)."""
        if self.proc.poll() is not None:
            return None
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return (f"did not exit within {STOP_TIMEOUT} s of SIGTERM; "
                    f"log tail:\n{self.log_text()[-3000:]}")
        if code != 0:
            return (f"exited with status {code} on SIGTERM (a sanitizer "
                    f"report, if any, is in the log); log tail:\n"
                    f"{self.log_text()[-6000:]}")
        return None


class MusterTracker(MusterProcess):
    """A running `muster tracker`."""

    name = "muster tracker"

    def session(self, timeout=tvmpeer.DEFAULT_TIMEOUT):
        return tvmpeer.TrackerSession(self.host, self.port, timeout)

    @property
    def address(self):
        """HOST:PORT as `--tracker` takes it ([v6]:port for IPv6)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


class MusterServer(MusterProcess):
    """A running `muster server`. `key` is its device key."""

    name = "muster server"

    def __init__(self, proc, log_path, host=HOST, key=None):
        super().__init__(proc, log_path, host)
        self.key = key

    def matchkeys(self):
        """Every matchkey the server has offered so far, oldest first."""
        return OFFER_RE.findall(self.log_text())

    @property
    def matchkey(self):
        """The matchkey offered last (per the log)."""
        offered = self.matchkeys()
        return offered[-1] if offered else None

    def wait_offers(self, count, timeout=STARTUP_TIMEOUT):
        """Wait until the server has offered `count` matchkeys in all;
        return the list."""
        return self.wait_log(OFFER_RE, count, timeout)

    def connect(self, matchkey, session_timeout=None,
                timeout=tvmpeer.DEFAULT_TIMEOUT):
        """rpc_connect to this server directly."""
        return tvmpeer.rpc_connect(self.host, self.port, matchkey,
                                   session_timeout, timeout)


def _stop_all(started, what):
    """Teardown shared by the factories: problems as text, or []."""
    problems = []
    for process in started:
        if process.proc.poll() is not None and not process.allow_exit:
            problems.append(f"{what} on port {process.port} died during the "
                            f"test (exit {process.proc.returncode}); log:\n"
                            f"{process.log_text()}")
    for process in started:
        problem = process.stop()
        if problem:
            problems.append(f"{what} on port {process.port}: {problem}")
    return problems


@pytest.fixture(autouse=True)
def _watchdog():
    faulthandler.dump_traceback_later(TEST_LIMIT, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


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
    """Factory: `muster_tracker(*extra_args, port=0, port_end=None,
    host=HOST)` starts `muster tracker --host HOST --port PORT
    [--port-end E] EXTRA...` and returns a bound MusterTracker."""
    started = []

    def start(*extra, port=0, port_end=None, host=HOST):
        args = [str(muster_bin), "tracker", "--host", host,
                "--port", str(port)]
        if port_end is not None:
            args += ["--port-end", str(port_end)]
        args += [str(a) for a in extra]
        log_path = tmp_path / f"muster-tracker-{len(started)}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=log)
        tracker = MusterTracker(proc, log_path, host)
        started.append(tracker)
        tracker.wait_bound()
        return tracker

    yield start

    problems = _stop_all(started, "muster tracker")
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture
def muster_server(muster_bin, tmp_path):
    """Factory: `muster_server(*extra_args, tracker=None, key=None, port=0,
    port_end=None, host=HOST, wait_offer=True)` starts
    `muster server --host HOST --port PORT [--port-end E]
    [--tracker T] [--key K] EXTRA...` and returns a bound MusterServer.
    `tracker` is a MusterTracker / ReferenceTracker (anything with host and
    port) or a "HOST:PORT" string. With a tracker and `wait_offer`, it also
    waits for the first "Offering matchkey" line (registered and offered).
    host=None leaves --host out (the server's default, the wildcard); the
    test then reaches it at HOST."""
    started = []

    def start(*extra, tracker=None, key=None, port=0, port_end=None,
              host=HOST, wait_offer=True):
        args = [str(muster_bin), "server"]
        if host is not None:
            args += ["--host", host]
        args += ["--port", str(port)]
        if port_end is not None:
            args += ["--port-end", str(port_end)]
        if tracker is not None:
            if not isinstance(tracker, str):
                thost = (f"[{tracker.host}]" if ":" in tracker.host
                         else tracker.host)
                tracker = f"{thost}:{tracker.port}"
            args += ["--tracker", tracker]
        if key is not None:
            args += ["--key", key]
        args += [str(a) for a in extra]
        log_path = tmp_path / f"muster-server-{len(started)}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=log)
        server = MusterServer(proc, log_path, host if host is not None else HOST,
                              key if key is not None else "")  # TVM's default key
        started.append(server)
        server.wait_bound()
        if tracker is not None and wait_offer:
            server.wait_offers(1)
        return server

    yield start

    problems = _stop_all(started, "muster server")
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


def time_wait_port(free_after=1):
    """A port P left with a connection in TIME_WAIT on our side (we closed
    first) and nothing listening, P+1 .. P+free_after bindable. On Linux a
    bind to P then fails with EADDRINUSE without SO_REUSEADDR and succeeds
    with it (both the listener and its connections set it)."""
    with busy_port(free_after) as listener:
        port = listener.getsockname()[1]
        with socket.create_connection((HOST, port), timeout=5) as client:
            accepted, _ = listener.accept()
            accepted.close()              # active close: TIME_WAIT is ours
            client.settimeout(5)
            assert client.recv(1) == b""
    # the precondition the test relies on, checked rather than assumed
    with socket.socket() as probe:
        with pytest.raises(OSError) as err:
            probe.bind((HOST, port))
        assert err.value.errno == errno.EADDRINUSE
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((HOST, port))
    return port


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
