# SPDX-License-Identifier: MIT
"""`muster stage` processes for the tests: start them on kernel-chosen
ports, wait for "muster stage I/N: serving on HOST:PORT", read their
/proc figures, kill or stop them, and at teardown fail the test if one
died when nobody asked it to or did not exit cleanly on SIGTERM.

The stage protocol's frames at their simplest, for tests that speak it
themselves: HDR (the frame header), recv_exact, ask_info (a stage's INFO
reply), and FakeStage (a listener that answers INFO with a given body).
"""

import re
import signal
import socket
import struct
import subprocess
import threading
import time

import pytest

from conftest import HOST

STARTUP_TIMEOUT = 60.0       # a stage of a big model maps and faults its weights first
STOP_TIMEOUT = 10.0


class Stage:
    """A running `muster stage`; stdout and stderr go to `log_path`."""

    def __init__(self, proc, log_path, index, of):
        self.proc, self.log_path = proc, log_path
        self.index, self.of = index, of
        self.host, self.port = None, None
        self.allow_exit = False     # it may end before teardown (killed, --requests)
        self.stopped = False

    @property
    def pid(self):
        return self.proc.pid

    @property
    def address(self):
        return f"{self.host}:{self.port}"

    def log(self):
        return self.log_path.read_text(errors="replace")

    def wait_serving(self, timeout=STARTUP_TIMEOUT):
        regex = re.compile(rf"muster stage {self.index}/{self.of}: serving on (\S+):(\d+)")
        deadline = time.monotonic() + timeout
        while True:
            m = regex.search(self.log())
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                return
            if self.proc.poll() is not None:
                pytest.fail(f"stage {self.index}/{self.of} exited with {self.proc.returncode} "
                            f"before serving; log:\n{self.log()}", pytrace=False)
            if time.monotonic() > deadline:
                pytest.fail(f"stage {self.index}/{self.of} not serving after {timeout} s; "
                            f"log:\n{self.log()}", pytrace=False)
            time.sleep(0.02)

    def alive(self):
        return self.proc.poll() is None

    def kill(self):
        """SIGKILL, as a crash would; teardown leaves it alone."""
        self.allow_exit = True
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(STOP_TIMEOUT)

    def stop(self):
        """SIGTERM, wait, SIGKILL: a problem description or None."""
        if self.proc.poll() is not None:
            return None
        self.stopped = True
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return f"did not exit within {STOP_TIMEOUT} s of SIGTERM"
        return None if code == 0 else f"exited with {code} on SIGTERM"

    def status(self, field):
        """A /proc/PID/status field in bytes (VmHWM, VmRSS ...)."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    value, unit = line.split()[1:3]
                    assert unit == "kB"
                    return int(value) * 1024
        raise AssertionError(f"no {field} in /proc/{self.pid}/status")


def stage_factory(muster_bin, tmp_path, env):
    """Factory: `start(model, n, *extra)` starts stages 0..n-1 of the
    n-way split (all at once, so they load in parallel) and returns them
    once each is serving. `start.one(model, i, n, *extra)` starts one;
    `start.teardown()` fails the test if one died unasked, then stops them
    all (SIGTERM, and a non-zero exit fails the test)."""
    started = []

    def start_one(model_dir, index, of, *extra, plan_file=None):
        log_path = tmp_path / f"stage-{len(started)}-{index}of{of}.log"
        split = ["--plan", str(plan_file)] if plan_file else ["--of", str(of)]
        args = [str(muster_bin), "stage", "--model", str(model_dir), "--stage", str(index)] + \
            split + ["--host", HOST, "--port", "0"] + [str(a) for a in extra]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    env=env)
        stage = Stage(proc, log_path, index, of)
        started.append(stage)
        return stage

    def start(model_dir, n, *extra):
        group = [start_one(model_dir, i, n, *extra) for i in range(n)]
        for stage in group:
            stage.wait_serving()
        return group

    def one(model_dir, index, of, *extra):
        stage = start_one(model_dir, index, of, *extra)
        stage.wait_serving()
        return stage

    def planned(model_dir, plan_file, n):
        """Stages 0..n-1 of the split in plan_file (`--plan`)."""
        group = [start_one(model_dir, i, n, plan_file=plan_file) for i in range(n)]
        for stage in group:
            stage.wait_serving()
        return group

    def teardown():
        _teardown(started)

    start.one = one
    start.planned = planned
    start.teardown = teardown
    return start


def _teardown(started):
    problems = []
    for s in started:
        if s.proc.poll() is not None and not (s.allow_exit or s.stopped):
            problems.append(f"stage {s.index}/{s.of} ({s.address}) died during the test "
                            f"(exit {s.proc.returncode}); log:\n{s.log()[-3000:]}")
    for s in started:
        problem = s.stop()
        if problem and not s.allow_exit:
            problems.append(f"stage {s.index}/{s.of} ({s.address}): {problem}; log:\n"
                            f"{s.log()[-3000:]}")
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


HDR = struct.Struct("<4sHHiIQQQ")
INFO, ERROR, CLOSE = 1, 4, 5      # frame types (docs/protocols/pipeline.md)


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        part = s.recv(n - len(buf))
        if not part:
            raise EOFError
        buf += part
    return buf


def ask_info(addr):
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(HDR.pack(b"MUPL", 1, INFO, 0, 0, 1, 0, 0))
        head = recv_exact(s, HDR.size)
        return recv_exact(s, HDR.unpack(head)[7])


class FakeStage:
    """A stage on a kernel-chosen port that answers INFO with `body` (an
    INFO reply's JSON, as bytes), ends a connection on CLOSE and refuses
    every other request with an error; `seen` lists (type, payload) of
    every frame received, on every connection."""

    def __init__(self, body):
        self.body, self.seen = body, []
        self.sock = socket.socket()
        self.sock.bind((HOST, 0))
        self.sock.listen(4)
        self.address = f"{HOST}:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def types(self):
        return {m for m, _ in self.seen}

    def close(self):
        self.sock.close()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                self._answer(conn)

    def _answer(self, conn):
        while True:
            try:
                _, _, mtype, _, _, mid, _, length = HDR.unpack(recv_exact(conn, HDR.size))
                self.seen.append((mtype, recv_exact(conn, length)))
            except (EOFError, OSError):
                return
            if mtype == CLOSE:
                return
            if mtype == INFO:
                conn.sendall(HDR.pack(b"MUPL", 1, INFO, 0, 0, mid, 0, len(self.body)) +
                             self.body)
            else:
                text = b"a fake stage"
                conn.sendall(HDR.pack(b"MUPL", 1, ERROR, -1000, 0, mid, 0, len(text)) + text)
