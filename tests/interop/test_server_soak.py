# SPDX-License-Identifier: MIT
"""Soak: one `muster tracker` and five `muster server`s under a minute of
mixed traffic, with a tracker crash in the middle ("done when" of the
device-side issue).

Load (LOAD_SECONDS): client threads request sessions at random priorities
and echo through them; some clients vanish in the queue, mid-handshake or
mid-session (socket closed with FIN or RST, or a `muster request` process
SIGKILLed); at RESTART_AT the tracker is SIGKILLed and restarted on its
port. Afterwards, within DRAIN_TIMEOUT:

* `muster query` (the binary) shows the five servers, free 5, pending 0;
* no server (and not the new tracker) holds more fds than at startup, plus
  FD_TOLERANCE;
* every process exits 0 on SIGTERM (fixture teardown; under the ASan build
  this means no leak and no memory error).

Failed requests are tolerated only when they were under way around the
tracker restart (RESTART_WINDOW).
"""

import collections
import json
import random
import signal
import socket
import struct
import subprocess
import threading
import time

import pytest

import tvmpeer
from conftest import HOST

KEY = "soak"
SERVERS = 5
LOAD_SECONDS = 60
RESTART_AT = 25
# Requests may fail from the kill until the new tracker is up and the
# servers are back: the restart takes well under a second here and the
# servers retry after 0.25 s, but allow for a slow sanitizer build.
RESTART_WINDOW = (-0.5, 10.0)
# A grant given to a client that then vanished before its handshake is
# renewed by its server ~8 s later (spec 8.1 step 4), so draining can take
# that long after the load stops.
DRAIN_TIMEOUT = 15
# The fds of an idle, registered server are fixed: std streams, listener,
# epoll, async/eventfd handles, the tracker connection. After the drain the
# server is in exactly that state, so the count should equal the startup
# count; one fd of slack covers a registrar caught between closing a
# tracker connection and opening the next one. A per-session or
# per-handshake leak would show as hundreds (see the stats printed).
FD_TOLERANCE = 1


def query(muster_bin, port, *extra):
    return subprocess.run([str(muster_bin), "query", "--host", HOST,
                           "--port", str(port), *extra],
                          capture_output=True, text=True, timeout=10)


def rst_close(sock):
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                    struct.pack("ii", 1, 0))
    sock.close()


class Load:
    """Shared state of the load threads."""

    def __init__(self, port, muster_bin, tmp_path):
        self.port = port
        self.muster_bin = muster_bin
        self.tmp_path = tmp_path
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.stats = collections.Counter()
        # (monotonic time the action began, time it failed, what, repr(exc))
        self.failures = []
        self.restart_time = None
        self.grant_waits = []   # seconds each dies_mid_handshake waited

    def count(self, what):
        with self.lock:
            self.stats[what] += 1

    def fail(self, what, exc, began):
        with self.lock:
            self.failures.append((began, time.monotonic(), what, repr(exc)))

    # -- Python clients --

    def session(self, rng):
        sock, _, _ = tvmpeer.request_session(
            HOST, self.port, KEY, priority=rng.randint(1, 5),
            grant_timeout=12)
        with sock:
            for _ in range(rng.randint(1, 3)):
                data = rng.randbytes(rng.randint(1, 65536))
                sock.sendall(data)
                assert tvmpeer.recvall(sock, len(data)) == data
            # Holding the device a little keeps a queue in front of the
            # servers, so clients leave it while still waiting.
            time.sleep(rng.uniform(0, 0.1))
        self.count("session")

    def dies_mid_session(self, rng):
        sock, _, _ = tvmpeer.request_session(
            HOST, self.port, KEY, priority=rng.randint(1, 5),
            grant_timeout=12)
        sock.sendall(b"x" * 1000)
        tvmpeer.recvall(sock, 1000)
        sock.sendall(rng.randbytes(60_000 if rng.random() < 0.5 else 10))
        if rng.random() < 0.5:
            rst_close(sock)
        else:
            sock.close()
        self.count("died mid-session")

    def leaves_the_queue(self, rng):
        """A client that asks and hangs up while it is still queued. When a
        server is free, the grant is the first reply, before PING's: then
        this client is served like any other. (Closing on a grant already
        delivered would put that server out for ~8 s, as a dead handshake
        does; done ~50 times a minute, that kept the servers out most of
        the time and made every wait a lottery.)"""
        with tvmpeer.TrackerSession(HOST, self.port) as client:
            client.send_request(KEY, rng.randint(1, 5))
            client.send([tvmpeer.PING])
            reply = client.recv()
            if isinstance(reply, list):     # the grant; PING's is a number
                addr, port, matchkey = reply[1]
                sock, _ = tvmpeer.rpc_connect(addr, port, matchkey)
                with sock:
                    sock.sendall(b"q" * 100)
                    assert tvmpeer.recvall(sock, 100) == b"q" * 100
                self.count("granted before it could leave")
                return
        self.count("left the queue")

    def client_thread(self, seed):
        rng = random.Random(seed)
        while not self.stop.is_set():
            action = rng.choices(
                [self.session, self.dies_mid_session, self.leaves_the_queue],
                weights=[70, 20, 10])[0]
            began = time.monotonic()
            try:
                action(rng)
            except Exception as exc:  # judged at the end, by time
                self.fail(action.__name__, exc, began)
                time.sleep(0.2)

    def dies_mid_handshake(self, rng):
        """A client that got a grant and vanishes during its hello. Its
        grant is lost, so the device is out for ~8 s: done sparingly.

        It asks above every other client's priority (1..5). The tracker
        serves strictly by priority, so while servers are out a
        low-priority request can lose every free one to a higher request,
        for longer than its timeout: that is the scheduler TVM specifies,
        not a fault (it failed one CI run, 12 s after the restart). What
        this client exercises is the dead grant, not the queue."""
        asked = time.monotonic()
        with tvmpeer.TrackerSession(HOST, self.port) as client:
            addr, port, matchkey = client.request(KEY, 6, timeout=12)
        with self.lock:
            self.grant_waits.append(time.monotonic() - asked)
        hello = tvmpeer.rpc_hello(matchkey)
        cut = rng.choice([4, 6, 8 + (len(hello) - 8) // 2, len(hello)])
        sock = tvmpeer.rpc_raw(addr, port, hello[:cut])
        if rng.random() < 0.5:
            rst_close(sock)
        else:
            sock.close()
        self.count("died mid-handshake")

    def killer_thread(self, seed):
        rng = random.Random(seed)
        while not self.stop.wait(4.0):
            began = time.monotonic()
            try:
                self.dies_mid_handshake(rng)
            except Exception as exc:
                self.fail("dies_mid_handshake", exc, began)

    # -- muster request processes --

    def cli_thread(self, seed):
        rng = random.Random(seed)
        n = 0
        while not self.stop.is_set():
            n += 1
            mode = rng.choices(["relay", "kill-in-session", "kill-early"],
                               weights=[60, 25, 15])[0]
            err_path = self.tmp_path / f"request-{n}.err"
            began = time.monotonic()
            with open(err_path, "wb") as err:
                proc = subprocess.Popen(
                    [str(self.muster_bin), "request", KEY, "--tracker",
                     f"{HOST}:{self.port}", "--priority",
                     str(rng.randint(1, 5)), "--timeout", "20"],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=err)
            try:
                self.run_cli(proc, mode, rng, err_path)
            except Exception as exc:
                self.fail(f"muster request ({mode})", exc, began)
                time.sleep(0.2)
            finally:
                if proc.poll() is None:
                    proc.kill()
                proc.wait(10)
                proc.stdin.close()
                proc.stdout.close()

    def run_cli(self, proc, mode, rng, err_path):
        if mode == "relay":
            data = rng.randbytes(rng.randint(1, 100_000))
            out, _ = proc.communicate(data, timeout=30)
            assert proc.returncode == 0, err_path.read_text()
            assert out == data
            self.count("muster request")
        elif mode == "kill-in-session":
            deadline = time.monotonic() + 25
            while b"session open" not in err_path.read_bytes():
                assert proc.poll() is None, err_path.read_text()
                assert time.monotonic() < deadline, "no session in 25 s"
                time.sleep(0.02)
            proc.stdin.write(b"y" * 5000)
            proc.stdin.flush()
            time.sleep(rng.uniform(0, 0.2))
            proc.send_signal(signal.SIGKILL)
            self.count("muster request killed in session")
        else:
            time.sleep(rng.uniform(0, 0.3))
            proc.send_signal(signal.SIGKILL)
            self.count("muster request killed early")


def test_soak(muster_tracker, muster_server, muster_bin, tmp_path):
    began = time.monotonic()
    tracker = muster_tracker()
    port = tracker.port
    servers = [muster_server(tracker=tracker, key=KEY)
               for _ in range(SERVERS)]

    def idle_everywhere(t):
        result = query(muster_bin, t.port, "--json")
        if result.returncode != 0:
            return None
        summary = json.loads(result.stdout)
        ready = (summary["queue_info"].get(KEY) == {"free": SERVERS,
                                                    "pending": 0}
                 and sorted(e["addr"][1] for e in summary["server_info"])
                 == sorted(s.port for s in servers))
        return summary if ready else None

    deadline = time.monotonic() + 10
    while not idle_everywhere(tracker):
        assert time.monotonic() < deadline, "servers did not register"
        time.sleep(0.1)
    fds_start = {s.pid: s.fd_count() for s in servers}
    tracker_fds_start = tracker.fd_count()

    load = Load(port, muster_bin, tmp_path)
    threads = [threading.Thread(target=load.client_thread, args=(i,))
               for i in range(4)]
    threads.append(threading.Thread(target=load.killer_thread, args=(100,)))
    threads.append(threading.Thread(target=load.cli_thread, args=(200,)))
    load_start = time.monotonic()
    for thread in threads:
        thread.start()
    try:
        load.stop.wait(RESTART_AT)
        load.restart_time = time.monotonic()
        tracker.kill()
        tracker = muster_tracker(port=port, port_end=port + 1)
        restarted_in = time.monotonic() - load.restart_time
        load.stop.wait(max(0.0, LOAD_SECONDS
                           - (time.monotonic() - load_start)))
    finally:
        load.stop.set()
        for thread in threads:
            thread.join(40)
    assert not any(t.is_alive() for t in threads), "a load thread hung"
    load_end = time.monotonic()

    deadline = time.monotonic() + DRAIN_TIMEOUT
    while not idle_everywhere(tracker):
        if time.monotonic() > deadline:
            pytest.fail(f"not back to free={SERVERS} pending=0 within "
                        f"{DRAIN_TIMEOUT} s; muster query:\n"
                        f"{query(muster_bin, port).stdout}")
        time.sleep(0.2)
    drained_in = time.monotonic() - load_end

    # The text `muster query` prints agrees.
    text = query(muster_bin, port)
    assert text.returncode == 0, text.stderr
    assert f"{KEY}   {SERVERS}      {SERVERS}     0      " in text.stdout, \
        text.stdout
    for server in servers:
        assert f"{HOST}:{server.port}".ljust(21) + f"    server:{KEY}" \
            in text.stdout

    fds_end = {s.pid: min(s.fd_count() for _ in range(3)) for s in servers}
    tracker_fds_end = tracker.fd_count()
    served = {s.pid: s.log_count(r"Session with \S+ ended") for s in servers}

    # A failure is the restart's when the action was under way at some
    # time in the window: a request made while the tracker was down or
    # just back can wait its whole timeout behind the queue the restart
    # rebuilt, and fail after the window has closed.
    low, high = RESTART_WINDOW
    stray = [f for f in load.failures
             if f[1] - load.restart_time < low
             or f[0] - load.restart_time > high]
    report = (f"\nsoak: {load_end - load_start:.1f} s load, tracker back "
              f"in {restarted_in:.2f} s, drained in {drained_in:.1f} s, "
              f"total {time.monotonic() - began:.1f} s\n"
              f"  actions: {dict(load.stats)}\n"
              f"  sessions per server: {list(served.values())}\n"
              f"  server fds start/end: {list(fds_start.values())} / "
              f"{list(fds_end.values())}; tracker {tracker_fds_start} / "
              f"{tracker_fds_end}\n"
              f"  grant waits of the mid-handshake killer: "
              f"{' '.join(f'{w:.1f}' for w in load.grant_waits)} s\n"
              f"  failures near the restart: "
              f"{len(load.failures) - len(stray)}, elsewhere: {len(stray)}")
    for began_at, when, what, exc in load.failures:
        report += (f"\n    {began_at - load.restart_time:+.2f} s to "
                   f"{when - load.restart_time:+.2f} s from the "
                   f"restart: {what}: {exc[:160]}")
    print(report)
    assert stray == [], report + "\n" + "\n".join(map(repr, stray))
    assert sum(served.values()) >= 100, report
    assert all(n > 0 for n in served.values()), report
    for pid, start in fds_start.items():
        assert fds_end[pid] <= start + FD_TOLERANCE, report
    assert tracker_fds_end <= tracker_fds_start + FD_TOLERANCE, report
    for server in servers:
        assert server.proc.poll() is None, server.log_text()[-3000:]
