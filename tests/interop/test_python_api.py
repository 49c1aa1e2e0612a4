# SPDX-License-Identifier: MIT
"""The Python binding as a library user depends on it beyond TVM's API
(issue 16):
- it refuses, when imported, a library whose structs are laid out
  differently from what it mirrors, with a message naming the field, and
  keeps working with a library whose options structs have grown (each
  such case imports a copy of python/muster, edited the way a stale
  binding would differ, in a fresh interpreter against
  build/lib/libmuster.so or $MUSTER_LIB);
- failures are raised as the Python classes that say why (TimeoutError,
  ConnectionError) from the code's errno;
- the library's log lines go to Python's logging from import on, and no
  object of the binding replaces the process-wide sink;
- blobs are read through buffers of the binding's own."""

import errno
import logging
import os
import shutil
import socket
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO


def binding_copy(tmp_path, edit=None):
    """python/muster copied under tmp_path, with edit(text) applied to
    _lib.py; returns the directory to put on sys.path."""
    dest = tmp_path / "pkg"
    shutil.copytree(REPO / "python" / "muster", dest / "muster",
                    ignore=shutil.ignore_patterns("__pycache__"))
    lib = dest / "muster" / "_lib.py"
    if edit is not None:
        text = lib.read_text()
        changed = edit(text)
        assert changed != text, "the edit must change the binding"
        lib.write_text(changed)
    return dest


def run_python(path, code):
    env = dict(os.environ, PYTHONPATH=str(path))
    if "MUSTER_LIB" not in env:
        env["MUSTER_LIB"] = str(REPO / "build" / "lib" / "libmuster.so")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=60)


def test_the_binding_matches_the_library(tmp_path):
    out = run_python(binding_copy(tmp_path), """
        import muster, muster._lib as l
        l.check_layouts()
        print(len(l.MIRRORED))
    """)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) >= 8


def test_a_moved_field_fails_the_import(tmp_path):
    # a binding whose tracker options have port and port_end swapped: the
    # same sizes, so only the offsets tell
    def swap(text):
        return text.replace('("port", c_int), ("port_end", c_int)',
                            '("port_end", c_int), ("port", c_int)', 1)
    out = run_python(binding_copy(tmp_path, swap), "import muster")
    assert out.returncode != 0
    assert "ImportError" in out.stderr
    assert "mu_tracker_opts_t.port_end is at offset" in out.stderr, out.stderr
    assert "use the binding that came with the library" in out.stderr


def test_a_field_the_library_lacks_fails_the_import(tmp_path):
    # a binding newer than the library: a field appended to mu_md_opts_t
    def add(text):
        return text.replace('("metrics", c_void_p)]\n\n\nclass MdPeer',
                            '("metrics", c_void_p), ("from_the_future", c_int)]\n\n\n'
                            'class MdPeer', 1)
    out = run_python(binding_copy(tmp_path, add), "import muster")
    assert out.returncode != 0
    assert "mu_md_opts_t.from_the_future, which libmuster" in out.stderr, out.stderr


def test_a_resized_data_struct_fails_the_import(tmp_path):
    # events are written by the library: their size must match exactly
    def shrink(text):
        return text.replace('("detail", ctypes.c_char * 256)]',
                            '("detail", ctypes.c_char * 128)]', 1)
    out = run_python(binding_copy(tmp_path, shrink), "import muster")
    assert out.returncode != 0
    assert "mu_md_event_t.detail is at offset" in out.stderr, out.stderr


def test_an_older_binding_works_with_grown_options(tmp_path):
    # a binding from before a field was added: its options struct is
    # shorter than the library's, and the library gives the field it
    # does not set its default
    def drop(text):
        return text.replace(', ("metrics", c_void_p)]\n\n\nclass MdPeer',
                            ']\n\n\nclass MdPeer', 1)

    path = binding_copy(tmp_path, drop)
    out = run_python(path, """
        import ctypes, muster, muster._lib as l
        from muster import md
        assert ctypes.sizeof(l.MdOpts) < l.layout_size(b"mu_md_opts_t")
        with md.Agent("old-binding", use_env=False) as a:
            a.set_local(b"payload")
            blob = a.get_local()
        with md.Agent("reader", use_env=False) as b:
            print(b.load_remote(blob), b.remote_bytes > 0)
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["old-binding", "True"]


# --- errors, logs and buffers (in this interpreter) ------------------------

sys.path.insert(0, str(REPO / "python"))
import muster  # noqa: E402
from muster import md  # noqa: E402


def test_a_timeout_is_a_timeout_error():
    with muster.StoreServer(host="127.0.0.1", port=0) as server:
        client = muster.StoreClient("127.0.0.1", server.port, timeout=5)
        with pytest.raises(TimeoutError) as info:
            client.wait(["never"], timeout=0.2)
        client.close()
    assert isinstance(info.value, muster.MusterTimeoutError)
    assert isinstance(info.value, muster.MusterError)
    assert info.value.errno == errno.ETIMEDOUT
    assert info.value.code == -errno.ETIMEDOUT
    # a peer that accepts and never answers: the fetch is still running
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        with md.Agent("waiter", use_env=False, op_timeout=3) as agent:
            op = agent.fetch_remote("nobody", peer=silent.getsockname())
            with pytest.raises(muster.MusterTimeoutError):
                agent.wait(op, timeout=0.2)


def test_a_refused_connection_is_a_connection_error():
    port = closed_port()
    with pytest.raises(ConnectionRefusedError) as info:
        muster.connect_tracker("127.0.0.1", port, timeout=2)
    assert isinstance(info.value, muster.MusterConnectionError)
    assert isinstance(info.value, ConnectionError)
    assert info.value.errno == errno.ECONNREFUSED
    assert f"127.0.0.1:{port}" in str(info.value)


def test_library_logs_reach_python_logging_without_a_tracker(caplog):
    # routed at import: an object that is not a Tracker logs to
    # "muster.<module>", and nothing is written to stderr on its own
    with caplog.at_level(logging.INFO, logger="muster"):
        with muster.StoreServer(host="127.0.0.1", port=0, silent=False) as server:
            port = server.port
    lines = [r.getMessage() for r in caplog.records if r.name == "muster.store"]
    assert any(str(port) in line for line in lines), caplog.records


def test_tracker_leaves_the_sink_alone(capfd, caplog):
    # an application's own sink (here the library's stderr one) stays
    # when a Tracker starts: Tracker() no longer installs one
    from muster import _lib
    _lib.log_set_sink(_lib.log_stderr_sink, None, _lib.LOG_INFO)
    try:
        with caplog.at_level(logging.INFO, logger="muster"):
            tracker = muster.Tracker(host="127.0.0.1", port=0, port_end=0)
            tracker.terminate()
        err = capfd.readouterr().err
        assert f"Bind to 127.0.0.1:{tracker.port}" in err
        assert not [r for r in caplog.records if "Bind to" in r.getMessage()]
    finally:
        _lib.route_logs()


def test_blob_payload_from_any_bytes_like():
    blob = md.blob_make("agent-x", b"\x00payload\xff" * 100)
    assert md.blob_name(blob) == "agent-x"
    for form in (blob, bytearray(blob), memoryview(blob)):
        assert md.blob_payload(form) == b"\x00payload\xff" * 100
    assert md.blob_payload(md.blob_make("agent-y", b"")) == b""


def closed_port():
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
