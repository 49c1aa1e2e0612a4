# SPDX-License-Identifier: MIT
"""Fixtures for the TCPStore interop tests (tests/interop/test_store_*.py).
Kept out of conftest.py; a test module imports the ones it uses:

    from storefix import muster_store, store, stack, torch_dist, torch_server

Fixtures do not depend on each other through pytest (so importing only
the ones a module uses is enough), except `store`, which needs
`muster_store` imported too.

* `muster_store`: factory `muster_store(*extra_args, host=, port=)`
  starting `muster store --host 127.0.0.1 --port 0 EXTRA...` (host=None:
  no --host, the default "::"); teardown fails the
  test if a store died during it, or does not exit with status 0 within
  10 s of SIGTERM (leaks and memory errors under the ASan build).
* `store`: one default `muster store`.
* `torch_dist`: `torch.distributed`; fails (never skips) without torch.
* `torch_server`: factory starting torch 1.13's own TCPStore server
  (`TCPStore(is_master=True)`) in a subprocess; returns a `TorchServer`.
* `stack`: an ExitStack for sockets and clients.
* `run_python(code, *args)`: run a Python snippet with Debian's python3,
  bounded by a timeout, PYTHONPATH set for the muster binding.
"""

import contextlib
import os
import resource
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import storepeer  # noqa: E402
from storepeer import HOST, REPO, require_torch, start_store, store_binary  # noqa: E402

PYTHON = "/usr/bin/python3"
SUBPROCESS_TIMEOUT = 120.0

# 2,000 simultaneous connections need that many descriptors here and in the
# store (which inherits the limit).
_soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if _soft != resource.RLIM_INFINITY and _soft < 8192:
    _want = 8192 if _hard == resource.RLIM_INFINITY else min(8192, _hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (_want, _hard))


def python_env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "python"), str(Path(__file__).resolve().parent)]
        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    # gloo: loopback only
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    env.update(extra)
    return env


def run_python(code, *args, timeout=SUBPROCESS_TIMEOUT, env=None):
    """Run `python3 -c code args...`; fail the test unless it exits 0 in
    time. Returns the CompletedProcess (text)."""
    try:
        done = subprocess.run([PYTHON, "-c", code, *[str(a) for a in args]],
                              stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=timeout,
                              env=env or python_env())
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"subprocess did not finish within {timeout} s; "
                    f"stdout:\n{exc.stdout}\nstderr:\n{exc.stderr}")
    if done.returncode != 0:
        pytest.fail(f"subprocess exited with {done.returncode}; stdout:\n"
                    f"{done.stdout}\nstderr:\n{done.stderr}")
    return done


def start_python(code, *args, env=None):
    """Popen of `python3 -c code args...` with pipes (text)."""
    return subprocess.Popen([PYTHON, "-c", code, *[str(a) for a in args]],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=env or python_env())


def finish(procs, timeout=SUBPROCESS_TIMEOUT):
    """Wait for every Popen in `procs` (shared deadline); kill all and fail
    on timeout or non-zero exit. Returns their stdouts."""
    deadline = time.monotonic() + timeout
    outs, problems = [], []
    for proc in procs:
        try:
            out, err = proc.communicate(
                timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            out, err = proc.communicate()
            problems.append(f"pid {proc.pid} timed out; stderr:\n{err}")
            outs.append(out)
            continue
        if proc.returncode != 0:
            problems.append(f"pid {proc.pid} exited {proc.returncode}; "
                            f"stdout:\n{out}\nstderr:\n{err}")
        outs.append(out)
    if problems:
        pytest.fail("\n".join(problems))
    return outs


@pytest.fixture
def muster_store(tmp_path):
    store_bin = store_binary()
    started = []

    def start(*extra, host=HOST, port=0):
        log = tmp_path / f"muster-store-{len(started)}.log"
        st = start_store(log, *extra, host=host, port=port, binary=store_bin)
        started.append(st)
        return st

    yield start

    problems = []
    for st in started:
        if st.proc.poll() is not None:
            problems.append(f"muster store on port {st.port} died during the "
                            f"test (exit {st.proc.returncode}); log:\n"
                            f"{st.log_text()[-6000:]}")
            continue
        problem = st.stop()
        if problem:
            problems.append(f"port {st.port}: {problem}")
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture
def store(muster_store):
    return muster_store()


@pytest.fixture(scope="session")
def torch_dist():
    return require_torch()


TORCH_SERVER = r"""
import datetime, sys
import torch.distributed as dist
store = dist.TCPStore(sys.argv[1], 0, is_master=True, wait_for_workers=False,
                      timeout=datetime.timedelta(seconds=60))
print(store.port, flush=True)
sys.stdin.read()   # serve until the test closes our stdin
"""


class TorchServer:
    """torch 1.13's TCPStore server (the legacy backend) in a subprocess."""

    def __init__(self, log_path):
        self.host = HOST
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [PYTHON, "-c", TORCH_SERVER, HOST], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._log, env=python_env())
        ready, _, _ = select.select([self.proc.stdout], [], [], 60.0)
        line = self.proc.stdout.readline() if ready else b""
        if not line.strip().isdigit():
            self.stop()
            pytest.fail(f"torch TCPStore server did not start: {line!r}; "
                        f"log:\n{Path(log_path).read_text(errors='replace')}")
        self.port = int(line)

    @property
    def address(self):
        return f"{self.host}:{self.port}"

    def client(self, dialect="v1", **kw):
        return storepeer.Client(self.port, dialect, self.host, **kw)

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(10)
            except (subprocess.TimeoutExpired, BrokenPipeError):
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self._log.close()


@pytest.fixture
def torch_server(tmp_path):
    require_torch()
    started = []

    def start():
        srv = TorchServer(tmp_path / f"torch-server-{len(started)}.log")
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture
def stack():
    with contextlib.ExitStack() as exit_stack:
        yield exit_stack
