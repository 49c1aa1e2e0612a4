# SPDX-License-Identifier: MIT
"""TVM's tracker API, backed by libmuster.

`Tracker` has the signature and behaviour of `tvm.rpc.tracker.Tracker`: it
starts a tracker (here on a thread of this process, in C, instead of a
Python subprocess), exposes `host`, `port` and `stop_key`, and `terminate()`
stops it with a STOP message carrying the key, as TVM's does. Code written
against TVM's class works with this one.

`connect_tracker(url, port)` gives a client with TVM's `TrackerSession`
methods (`summary`, `text_summary`, `request`), so Python users need not
speak the protocol themselves.
"""

import ctypes
import json
import logging
import socket

from . import _lib
from ._lib import MusterError, check

_STOP_TIMEOUT_MS = 5000

logger = logging.getLogger("muster.tracker")


class Tracker:
    """Start an RPC tracker (TVM protocol) in the background.

    Parameters are TVM's: host, port (first port tried), port_end (the
    search stops before it), silent (warnings only), reuse_addr
    (SO_REUSEADDR), timeout (seconds a peer may take to finish its handshake
    or a message; None keeps muster's default of 60). The tracker logs to
    the "muster.tracker" logger, as TVM's logs to "RPCTracker".
    """

    def __init__(self, host="0.0.0.0", port=9190, port_end=9199, silent=False,
                 reuse_addr=True, timeout=None):
        opts = _lib.TrackerOpts()
        _lib.tracker_opts_init(opts)
        self._host_bytes = host.encode()  # kept alive while C reads it
        opts.host = self._host_bytes
        opts.port = port
        opts.port_end = port_end
        opts.silent = 1 if silent else 0
        opts.reuse_addr = 1 if reuse_addr else 0
        if timeout is not None:
            opts.timeout = float(timeout)
        handle = ctypes.c_void_p()
        rc = _lib.tracker_start(ctypes.byref(opts), ctypes.byref(handle))
        if rc == _lib.MU_EBIND:
            raise ValueError(f"cannot bind to any port in [{port}, {port_end})")
        check(f"cannot start a tracker on {host}:{port}", rc)
        self._handle = handle
        self.host = host
        self.port = _lib.tracker_port(handle)
        self.stop_key = _lib.tracker_stop_key(handle).decode()

    def _stop_host(self):
        """Where STOP goes: loopback for a wildcard bind (as TVM's does),
        else the address the tracker was bound to."""
        if self.host in ("", "0.0.0.0"):
            return "127.0.0.1"
        if self.host == "::":
            return "::1"
        return self.host

    def _stop_tracker(self):
        """STOP with the key over the protocol, as TVM's terminate() does
        (mu_tracker_client_stop)."""
        client = ctypes.c_void_p()
        check(f"cannot reach the tracker on port {self.port}",
              _lib.client_connect(self._stop_host().encode(), self.port, _STOP_TIMEOUT_MS,
                                  ctypes.byref(client)))
        try:
            rc = _lib.client_stop(client, self.stop_key.encode(), _STOP_TIMEOUT_MS)
        finally:
            _lib.client_close(client)
        if rc == _lib.MU_EFAIL:
            raise MusterError("the tracker refused STOP (it answered -1: not its key)", rc)
        check("STOP", rc)

    def terminate(self):
        """Stop the tracker; safe to call more than once, never raises.

        A STOP the tracker refuses or that fails midway is logged as a
        warning on the "muster.tracker" logger; the tracker is then stopped
        directly. Nothing listening (someone else already stopped it) is
        not a failure, as in TVM."""
        handle, self._handle = getattr(self, "_handle", None), None
        if not handle:
            return
        try:
            self._stop_tracker()
        except ConnectionRefusedError:
            pass  # already stopped by a STOP from elsewhere
        except MusterError as exc:
            logger.warning("STOP to the tracker on port %d failed (%s); "
                           "stopping it directly", self.port, exc)
        _lib.tracker_free(handle)  # stops it if STOP did not, and joins

    def __del__(self):
        self.terminate()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.terminate()


def _ms(timeout):
    return -1 if timeout is None else max(0, int(timeout * 1000))


class Session:
    """An open session with a device, past the handshake. Its bytes move
    through the library's stream (TLS and the shared secret included, when
    configured), never through a descriptor of ours."""

    def __init__(self, handle):
        self._handle = handle
        self.peer = _lib.session_peer(handle).decode()
        self.server_key = _lib.session_server_key(handle).decode()

    def _live(self):
        if not self._handle:
            raise MusterError("the session is closed", -9)  # EBADF
        return self._handle

    def send(self, data, timeout=None):
        """Send all of data (bytes); timeout in seconds (None: no limit)."""
        data = bytes(data)
        check(f"send to {self.peer}",
              _lib.session_send(self._live(), data, len(data), _ms(timeout)))

    def recv(self, n, timeout=None):
        """Up to n bytes; b"" when the device closed the session. Raises
        MusterError (-ETIMEDOUT) when nothing came within timeout."""
        buf = ctypes.create_string_buffer(max(1, n))
        got = ctypes.c_size_t(0)
        check(f"receive from {self.peer}",
              _lib.session_recv(self._live(), buf, n, ctypes.byref(got), _ms(timeout)))
        return buf.raw[:got.value]

    def shutdown(self):
        """End the sending side: the device reads EOF."""
        check(f"shut down the session with {self.peer}",
              _lib.session_shutdown(self._live()))

    def close(self):
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            _lib.session_close(handle)

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def connect(url, port, key="", session_timeout=0, timeout=10.0):
    """Handshake with a device at url:port using matchkey `key` (TVM's
    rpc.connect, without the RPC layer). Raises MusterError on a refusal."""
    handle = ctypes.c_void_p()
    check(f"cannot open a session on {url}:{port}",
          _lib.session_connect(url.encode(), port, key.encode(),
                               float(session_timeout), None, int(timeout * 1000),
                               ctypes.byref(handle)))
    return Session(handle)


class TrackerSession:
    """A tracker client with TVM's TrackerSession methods."""

    def __init__(self, addr, timeout=10.0):
        self._addr = addr
        self._timeout_ms = int(timeout * 1000)
        handle = ctypes.c_void_p()
        check(f"cannot reach a tracker at {addr[0]}:{addr[1]}",
              _lib.client_connect(addr[0].encode(), addr[1], self._timeout_ms,
                                  ctypes.byref(handle)))
        self._handle = handle

    def close(self):
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            _lib.client_close(handle)

    def __del__(self):
        self.close()

    def _summary_json(self):
        if not self._handle:  # reconnect after an earlier failure
            self.__init__(self._addr, self._timeout_ms / 1000)
        out = ctypes.c_void_p()
        rc = _lib.client_summary(self._handle, self._timeout_ms, ctypes.byref(out))
        if rc != 0:
            self.close()
            raise MusterError("tracker summary failed", rc)
        return _lib.take_string(out.value)

    def summary(self):
        """The summary dict: {"queue_info": ..., "server_info": [...]}."""
        return json.loads(self._summary_json())

    def text_summary(self):
        """What `query_rpc_tracker` prints, byte for byte."""
        out = ctypes.c_void_p()
        check("cannot format the summary",
              _lib.summary_text(self._summary_json().encode(), ctypes.byref(out)))
        return _lib.take_string(out.value)

    def request(self, key, priority=1, session_timeout=0, max_retry=5,
                timeout=None):
        """Get a device of `key` and open a session on it (TVM's request,
        with an optional timeout in seconds instead of waiting forever)."""
        handle = ctypes.c_void_p()
        rc = _lib.session_request(
            self._addr[0].encode(), self._addr[1], key.encode(), float(priority),
            float(session_timeout), max_retry, None,
            -1 if timeout is None else int(timeout * 1000), ctypes.byref(handle))
        # TVM's words, in a MusterError (a RuntimeError, as TVM raises),
        # of the class that says why: TimeoutError when no device came in
        # time, ConnectionError when the tracker is unreachable
        check(f"Cannot request {key} after {max_retry} retry", rc)
        return Session(handle)


def connect_tracker(url, port, timeout=10.0):
    """Connect to a tracker (TVM's rpc.connect_tracker)."""
    return TrackerSession((url, port), timeout)
