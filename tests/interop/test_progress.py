# SPDX-License-Identifier: MIT
"""Progress a person sees (issue 17): long steps draw a status line on
stderr when stderr is a terminal, and write nothing of it otherwise.

`muster run --tracker` asks for 2 devices while only one is registered:
on a pseudo-terminal (python's pty module as stderr) it shows "1 of 2
devices; waiting for key K, N s" until the second server comes, then each
device's weight stream ("weights -> ADDR: X of Y MiB (100%) ..."), each
line redrawn in place ("\\r" + erase to the end of the line);
`muster generate --tracker` over a GGUF shows the checkpoint's hashing
and its stream the same way. The same
run with stderr on a pipe has none of it: no status text, no "\\r", no
escape sequence -- only the narration lines. `--quiet` silences both.
"""

import os
import pty
import re
import shutil
import subprocess
import threading
import time

from pathlib import Path

import pytest

from conftest import wait_for

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT = 60.0
KEY = "progress"


@pytest.fixture(autouse=True)
def _one_blas_thread(monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")


def must(argv):
    done = subprocess.run([str(a) for a in argv], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert done.returncode == 0, f"{argv}: {done.returncode}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture
def model(muster_bin, tmp_path):
    path = tmp_path / "mlp"
    must([muster_bin, "model", "gen", "--out", path, "--size", "24M", "--layers", "4"])
    inp = tmp_path / "in.safetensors"
    must([muster_bin, "model", "input", "--model", path, "--out", inp])
    return path, inp


def run_argv(muster_bin, tracker, model, tmp_path, *extra):
    path, inp = model
    return [str(muster_bin), "run", "--tracker", tracker.address, "--key", KEY,
            "--devices", "2", "--model", str(path), "--input", str(inp),
            "--output", str(tmp_path / "out.safetensors"), "--weights", "stream",
            "--request-timeout", "40", *extra]


class PtyRun:
    """A process whose stderr is a pseudo-terminal (stdout a pipe); what
    it writes there accumulates in `self.out`."""

    def __init__(self, argv):
        master, slave = pty.openpty()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=slave)
        os.close(slave)
        self.master = master
        self.buf = bytearray()
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: every slave end is closed
                return
            if not chunk:
                return
            with self.lock:
                self.buf += chunk

    @property
    def out(self):
        with self.lock:
            return self.buf.decode(errors="replace")

    def finish(self):
        try:
            self.proc.wait(RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"run did not finish; terminal:\n{self.out[-3000:]}")
        self.reader.join(5.0)
        os.close(self.master)
        return self.proc.returncode


def test_progress_on_a_terminal(muster_bin, tracker, muster_server, model, tmp_path):
    muster_server("--mem", "256M", tracker=tracker, key=KEY)
    run = PtyRun(run_argv(muster_bin, tracker, model, tmp_path))
    try:
        wait_for(lambda: f"1 of 2 devices; waiting for key {KEY}," in run.out,
                 timeout=20.0, what=f"the waiting line; terminal so far:\n{run.out}")
        # it counts the seconds while it waits
        wait_for(lambda: re.search(rf"1 of 2 devices; waiting for key {KEY}, [1-9]\d* s",
                                   run.out), timeout=10.0, what="a redraw after a second")
        muster_server("--mem", "256M", tracker=tracker, key=KEY)
    finally:
        code = run.finish()
    out = run.out
    assert code == 0, out[-3000:]
    assert f"\r\x1b[Kdevices: 1 of 2 devices; waiting for key {KEY}," in out
    streams = re.findall(r"\r\x1b\[Kweights -> 127\.0\.0\.1:(\d+): "
                         r"([\d.]+) MiB of ([\d.]+) MiB \(100%\)", out)
    assert len({port for port, _, _ in streams}) == 2, f"one stream line per device:\n{out}"
    assert all(done == total for _, done, total in streams)
    # a status line is erased before a narration line, never ended by it
    # (the terminal turns "\n" into "\r\n")
    assert re.search(r"\x1b\[K(?:devices: |weights -> )[^\r\n\x1b]*\r?\n", out) is None, \
        f"a status line ran into a narration line:\n{out!r}"


def test_no_progress_when_piped(muster_bin, tracker, muster_server, model, tmp_path):
    muster_server("--mem", "256M", tracker=tracker, key=KEY)
    argv = run_argv(muster_bin, tracker, model, tmp_path)
    run = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    time.sleep(1.5)  # waiting for the second device, long enough for a redraw
    muster_server("--mem", "256M", tracker=tracker, key=KEY)
    out, err = run.communicate(timeout=RUN_TIMEOUT)
    assert run.returncode == 0, err.decode(errors="replace")[-3000:]
    err = err.decode(errors="replace")
    assert "stage" in err, "the narration still goes to a pipe"
    for marker in ("\r", "\x1b", "waiting for key", "weights ->", "MiB/s"):
        assert marker not in err, f"{marker!r} written to a pipe:\n{err}"


def test_quiet_silences_progress_on_a_terminal(muster_bin, tracker, muster_server, model,
                                               tmp_path):
    muster_server("--mem", "256M", tracker=tracker, key=KEY)
    muster_server("--mem", "256M", tracker=tracker, key=KEY)
    run = PtyRun(run_argv(muster_bin, tracker, model, tmp_path, "--quiet"))
    assert run.finish() == 0, run.out[-3000:]
    assert "\x1b[K" not in run.out and "weights ->" not in run.out, run.out


def test_gguf_hashing_and_streaming_on_a_terminal(muster_bin, tracker, muster_server,
                                                  tmp_path):
    """`muster generate --tracker` over a GGUF: hashing the checkpoint (the
    slow read of a large file) and the stream to the device both show."""
    gguf = tmp_path / "stories260K.gguf"
    shutil.copy(REPO / "models" / "stories260K" / "stories260K.gguf", gguf)
    muster_server("--mem", "64M", tracker=tracker, key=KEY)
    run = PtyRun([str(muster_bin), "generate", "--model", str(gguf), "--tracker",
                  tracker.address, "--key", KEY, "--devices", "1", "--temperature", "0",
                  "--max-tokens", "8"])
    code = run.finish()
    out = run.out
    assert code == 0, out[-3000:]
    hashed = re.findall(r"\r\x1b\[Khashing stories260K\.gguf: ([\d.]+) MiB of ([\d.]+) MiB "
                        r"\(100%\)", out)
    assert hashed and hashed[-1][0] == hashed[-1][1], f"no hashing line:\n{out!r}"
    assert re.search(r"\r\x1b\[Kweights -> 127\.0\.0\.1:\d+: [\d.]+ MiB of [\d.]+ MiB \(100%\)",
                     out), f"no streaming line:\n{out!r}"
