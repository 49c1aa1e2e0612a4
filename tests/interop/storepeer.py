# SPDX-License-Identifier: MIT
"""A TCPStore peer written from ../shared/spec/tcpstore.md, for the store
interop tests. Nothing here comes from torch's sources.

* Encoders for the wire primitives (spec section 3) and both opcode tables
  (section 4): `V1`, `V2`, `request(dialect, op, *fields)`.
* `Raw`: a socket with a timeout on every operation, exact reads, "nothing
  arrives" and "the peer closed" checks.
* `Client`: speaks v1 (torch 1.13) or v2 (torch 2.x) and sends exactly the
  bytes torch sends (sections 2, 5, 6, 11): v2 opens with
  `00 CE F7 85 3C 0D <nonce>` in one segment and checks the 4-byte echo;
  keys get the "/" prefix; `get` is WAIT then GET; a v2 wait that times out
  sends CANCEL_WAIT and reads WAIT_CANCELED (after a raced STOP_WAITING);
  a v1 request goes out as the opcode byte in its own send, then the fields
  (as 1.13 does), so the server sees it fragmented.
* `MusterStore` / `start_store`: `muster store` as a subprocess on a free
  port, stopped with SIGTERM; `stop()` reports a non-zero exit (a sanitizer
  report under `make check-sanitize`).
* `store_binary()` and `require_torch()`: a missing peer fails the test
  (STYLE.md rule 12), it is never skipped.
"""

import os
import re
import select
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
DEFAULT_TIMEOUT = 10.0      # every socket operation
STARTUP_TIMEOUT = 10.0      # `Bind to` log line
STOP_TIMEOUT = 10.0         # exit after SIGTERM
SILENCE = 0.3               # "no reply" window
BIND_RE = re.compile(r"Bind to (\S+):(\d+)")

MAGIC = 0x3C85F7CE
V2_PREFIX = b"\x00\xce\xf7\x85\x3c"   # VALIDATE + magic: what makes a v2 conn

V1 = {"SET": 0, "COMPARE_SET": 1, "GET": 2, "ADD": 3, "CHECK": 4, "WAIT": 5,
      "GETNUMKEYS": 6, "WATCH_KEY": 7, "DELETE_KEY": 8}
V2 = {"VALIDATE": 0, "SET": 1, "COMPARE_SET": 2, "GET": 3, "ADD": 4,
      "CHECK": 5, "WAIT": 6, "GETNUMKEYS": 7, "DELETE_KEY": 8, "APPEND": 9,
      "MULTI_GET": 10, "MULTI_SET": 11, "CANCEL_WAIT": 12, "PING": 13,
      "QUEUE_PUSH": 14, "QUEUE_POP": 15, "QUEUE_LEN": 16, "LIST": 17}
TABLES = {"v1": V1, "v2": V2}

READY, NOT_READY = 0, 1
STOP_WAITING, WAIT_CANCELED = 0, 1
KEY_UPDATED, KEY_CREATED, KEY_DELETED, KEY_CALLBACK_REGISTERED = 0, 1, 2, 3

INT64_MAX = 2**63 - 1
INT64_MIN = -2**63


# ---- encoding (spec section 3) ----

def b(x):
    """str -> UTF-8 bytes; bytes-like -> bytes."""
    return x.encode() if isinstance(x, str) else bytes(x)


def u8(v):
    return struct.pack("<B", v)


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v)


def i64(v):
    return struct.pack("<q", v)


def s(x):
    """A `str`/`bytes` field: u64 length then the raw bytes."""
    data = b(x)
    return u64(len(data)) + data


def keylist(keys):
    return u64(len(keys)) + b"".join(s(k) for k in keys)


def request(dialect, op, *fields):
    """One request: the opcode of `op` in `dialect`, then the fields."""
    return bytes([TABLES[dialect][op]]) + b"".join(fields)


def hello(nonce):
    """What a torch 2.x client sends first, in one segment: VALIDATE+magic
    then PING+nonce (spec section 2)."""
    return u8(V2["VALIDATE"]) + u32(MAGIC) + u8(V2["PING"]) + u32(nonce)


class Closed(Exception):
    """The peer closed the connection (EOF or reset)."""


class WaitTimeout(TimeoutError):
    """A WAIT was not released in time. For v2, `cancel_reply` is what
    CANCEL_WAIT got back: b"\\x01", or b"\\x00\\x01" when raced."""

    def __init__(self, msg, cancel_reply=None):
        super().__init__(msg)
        self.cancel_reply = cancel_reply


# ---- sockets ----

def connect(port, host=HOST, timeout=DEFAULT_TIMEOUT):
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(timeout)
    return sock


class Raw:
    """A connected socket; every operation is bounded by `timeout`."""

    def __init__(self, port, host=HOST, timeout=DEFAULT_TIMEOUT):
        self.port = port
        self.host = host
        self.timeout = timeout
        self.sock = connect(port, host, timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def fileno(self):
        return self.sock.fileno()

    # -- sending --

    def send(self, data):
        self.sock.settimeout(self.timeout)
        self.sock.sendall(data)

    def send_pieces(self, pieces, more=False):
        """Each piece in its own send; with `more`, all but the last carry
        MSG_MORE (1.13 corks its length fields that way)."""
        self.sock.settimeout(self.timeout)
        for i, piece in enumerate(pieces):
            flags = socket.MSG_MORE if more and i < len(pieces) - 1 else 0
            view = memoryview(piece)
            while view:
                sent = self.sock.send(view, flags)
                view = view[sent:]

    def send_bytewise(self, data, pause=0.001):
        """One byte per send (TCP_NODELAY is on: one segment each)."""
        self.sock.settimeout(self.timeout)
        for i in range(len(data)):
            self.sock.sendall(data[i:i + 1])
            if pause:
                time.sleep(pause)

    def send_tolerant(self, data):
        """sendall that treats a reset/broken pipe as the peer closing
        (the server may close as soon as it read a bad length)."""
        try:
            self.send(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False

    # -- receiving --

    def recv_exact(self, n, timeout=None):
        """Exactly n bytes; Closed on EOF/reset, TimeoutError when they do
        not all arrive within `timeout` (default self.timeout) in total."""
        deadline = time.monotonic() + (self.timeout if timeout is None
                                       else timeout)
        out = bytearray()
        while len(out) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"got {len(out)} of {n} bytes: "
                                   f"{bytes(out[:64])!r}")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(min(n - len(out), 1 << 20))
            except socket.timeout:
                continue
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise Closed(f"closed after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def recv_u8(self, timeout=None):
        return self.recv_exact(1, timeout)[0]

    def recv_u32(self, timeout=None):
        return struct.unpack("<I", self.recv_exact(4, timeout))[0]

    def recv_u64(self, timeout=None):
        return struct.unpack("<Q", self.recv_exact(8, timeout))[0]

    def recv_i64(self, timeout=None):
        return struct.unpack("<q", self.recv_exact(8, timeout))[0]

    def recv_bytes(self, timeout=None):
        n = self.recv_u64(timeout)
        return self.recv_exact(n, timeout)

    def readable(self, timeout):
        """True when bytes (or EOF) are waiting within `timeout`."""
        ready, _, _ = select.select([self.sock], [], [], timeout)
        return bool(ready)

    def assert_silent(self, timeout=SILENCE):
        """Nothing arrives within `timeout` and the connection is still
        open."""
        if self.readable(timeout):
            self.sock.settimeout(0.5)
            try:
                data = self.sock.recv(64)
            except ConnectionResetError:
                data = b""
            if data:
                raise AssertionError(f"unexpected bytes {data!r}")
            raise AssertionError("connection closed, expected it open")

    def wait_closed(self, timeout=5.0):
        """Bytes received until the peer closes (EOF or reset); fails if
        it is still open after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        got = bytearray()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"connection still open after {timeout}"
                                     f" s (received {bytes(got[:64])!r})")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 20)
            except socket.timeout:
                continue
            except ConnectionResetError:
                return bytes(got)
            if not chunk:
                return bytes(got)
            got += chunk


# ---- a torch-like client ----

class Client(Raw):
    """A TCPStore client for `dialect` "v1" or "v2" that behaves like
    torch's (1.13 resp. 2.x) on the wire. Keys get the "/" prefix unless
    `raw_keys`; keys and values may be str or bytes.

    Return values follow torch where it has the call, except
    `delete_key`, which returns the i64 reply (1 or 0)."""

    def __init__(self, port, dialect="v2", host=HOST, timeout=DEFAULT_TIMEOUT,
                 raw_keys=False, nonce=None, handshake=True):
        super().__init__(port, host, timeout)
        self.dialect = dialect
        self.table = TABLES[dialect]
        self.prefix = b"" if raw_keys else b"/"
        self.poisoned = False
        self.nonce = os.getpid() & 0xFFFFFFFF if nonce is None else nonce
        if dialect == "v2" and handshake:
            self.send(hello(self.nonce))
            echo = self.recv_u32()
            assert echo == self.nonce, f"PING echo {echo:#x} != {self.nonce:#x}"

    def k(self, key):
        return self.prefix + b(key)

    def encode(self, op, *fields):
        return request(self.dialect, op, *fields)

    def send_request(self, op, *fields):
        """v2: the whole request in one send (2.x builds a buffer first).
        v1: the opcode byte alone, then each field in its own send with
        MSG_MORE on all but the last (1.13)."""
        assert not self.poisoned, "v1 connection poisoned by a wait timeout"
        if self.dialect == "v2":
            self.send(self.encode(op, *fields))
        else:
            self.send_pieces([self.encode(op)])
            if fields:
                self.send_pieces(list(fields), more=True)

    def sync(self):
        """A round trip (v2 PING, v1 GETNUMKEYS): every request sent on
        this connection before it has been executed when it returns. SET
        has no reply, so another connection relying on it needs this."""
        if self.dialect == "v2":
            assert self.ping(0x5C5C5C5C) == 0x5C5C5C5C
        else:
            self.num_keys()

    # -- operations (spec section 5) --

    def set(self, key, value):
        self.send_request("SET", s(self.k(key)), s(value))

    def get(self, key, timeout=None):
        """As torch: WAIT([key]) with the timeout, then GET."""
        self.wait([key], timeout)
        return self.get_only(key)

    def get_only(self, key):
        """GET without the WAIT torch sends first."""
        self.send_request("GET", s(self.k(key)))
        return self.recv_bytes()

    def add(self, key, delta):
        self.send_request("ADD", s(self.k(key)), i64(delta))
        return self.recv_i64()

    def compare_set(self, key, expected, desired):
        self.send_request("COMPARE_SET", s(self.k(key)), s(expected),
                          s(desired))
        return self.recv_bytes()

    def check(self, keys):
        self.send_request("CHECK", keylist([self.k(x) for x in keys]))
        code = self.recv_u8()
        assert code in (READY, NOT_READY), f"CHECK reply {code}"
        return code == READY

    def send_wait(self, keys):
        self.send_request("WAIT", keylist([self.k(x) for x in keys]))

    def recv_wait(self, timeout=None):
        """Finish a WAIT: STOP_WAITING within `timeout` (default
        self.timeout), else the client side of a timeout (spec section 6):
        v1 gives up silently and the connection is poisoned; v2 sends
        CANCEL_WAIT and reads WAIT_CANCELED, possibly after a raced
        STOP_WAITING. Raises WaitTimeout."""
        timeout = self.timeout if timeout is None else timeout
        if self.readable(timeout):
            code = self.recv_u8()
            assert code == STOP_WAITING, f"WAIT reply {code}"
            return
        if self.dialect == "v1":
            self.poisoned = True
            raise WaitTimeout(f"wait timeout after {timeout} s")
        reply = self.cancel_wait()
        raise WaitTimeout(f"wait timeout after {timeout} s", reply)

    def wait(self, keys, timeout=None):
        self.send_wait(keys)
        self.recv_wait(timeout)

    def cancel_wait(self):
        """CANCEL_WAIT; returns b"\\x01" or b"\\x00\\x01" (raced)."""
        self.send_request("CANCEL_WAIT")
        first = self.recv_u8()
        if first == WAIT_CANCELED:
            return bytes([first])
        assert first == STOP_WAITING, f"CANCEL_WAIT reply {first}"
        second = self.recv_u8()
        assert second == WAIT_CANCELED, f"after STOP_WAITING: {second}"
        return bytes([first, second])

    def num_keys(self):
        self.send_request("GETNUMKEYS")
        return self.recv_i64()

    def delete_key(self, key):
        self.send_request("DELETE_KEY", s(self.k(key)))
        return self.recv_i64()

    def append(self, key, value):
        self.send_request("APPEND", s(self.k(key)), s(value))

    def multi_get(self, keys, wait=True, timeout=None):
        """As torch: WAIT for all keys, then MULTI_GET (no count prefix in
        the reply)."""
        if wait:
            self.wait(keys, timeout)
        self.send_request("MULTI_GET", keylist([self.k(x) for x in keys]))
        return [self.recv_bytes() for _ in keys]

    def multi_set(self, keys, values):
        pairs = b"".join(s(self.k(x)) + s(v) for x, v in zip(keys, values))
        self.send_request("MULTI_SET", u64(len(keys)) + pairs)

    def ping(self, nonce):
        self.send_request("PING", u32(nonce))
        return self.recv_u32()

    def queue_push(self, key, value):
        self.send_request("QUEUE_PUSH", s(self.k(key)), s(value))

    def queue_pop(self, key):
        """(length before the pop, value or None when it was empty)."""
        self.send_request("QUEUE_POP", s(self.k(key)))
        n = self.recv_i64()
        return n, (self.recv_bytes() if n > 0 else None)

    def queue_len(self, key):
        self.send_request("QUEUE_LEN", s(self.k(key)))
        return self.recv_i64()

    def list_keys(self):
        """LIST: every key of the map, raw (with its "/")."""
        self.send_request("LIST")
        n = self.recv_i64()
        return [self.recv_bytes() for _ in range(n)]

    def watch_key(self, key):
        """v1 WATCH_KEY; returns the registration reply code."""
        self.send_request("WATCH_KEY", s(self.k(key)))
        return self.recv_u8()

    def recv_event(self, timeout=None):
        """One pushed watch event: (kind, key, old, new)."""
        kind = self.recv_u8(timeout)
        return (kind, self.recv_bytes(timeout), self.recv_bytes(timeout),
                self.recv_bytes(timeout))


# ---- muster store as a subprocess ----

def store_binary():
    """$MUSTER_BIN or <repo>/build/bin/muster; fails the test if absent."""
    path = Path(os.environ.get("MUSTER_BIN", REPO / "build" / "bin" / "muster"))
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"muster binary not found at {path}: build it "
                    "(`make build`) or set MUSTER_BIN", pytrace=False)
    return path


def require_torch():
    """torch.distributed (Debian python3-torch 1.13); fails if missing."""
    try:
        import torch.distributed as dist
    except ImportError as exc:
        pytest.fail(f"torch.distributed is not importable ({exc}): install "
                    "Debian's python3-torch", pytrace=False)
    if not dist.is_available():
        pytest.fail("torch.distributed is not available in this torch build",
                    pytrace=False)
    return dist


class MusterStore:
    """A running `muster store`; stderr and stdout go to `log_path`."""

    def __init__(self, proc, log_path, host=HOST):
        self.proc = proc
        self.log_path = log_path
        self.host = host
        self.port = None

    @property
    def address(self):
        return f"{self.host}:{self.port}"

    def log_text(self):
        return Path(self.log_path).read_text(errors="replace")

    def wait_log(self, pattern, count=1, timeout=STARTUP_TIMEOUT):
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            found = regex.findall(self.log_text())
            if len(found) >= count:
                return found
            if self.proc.poll() is not None:
                pytest.fail(f"muster store exited with {self.proc.returncode}"
                            f" waiting for {pattern!r}; log:\n"
                            f"{self.log_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"muster store: {pattern!r} x{count} not logged "
                            f"within {timeout} s; log:\n{self.log_text()}")
            time.sleep(0.02)

    def fd_count(self):
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def client(self, dialect="v2", **kw):
        return Client(self.port, dialect, self.host, **kw)

    def raw(self, **kw):
        return Raw(self.port, self.host, **kw)

    def stop(self):
        """SIGTERM, then wait STOP_TIMEOUT. A problem description, or None
        when it exited with status 0."""
        if self.proc.poll() is not None:
            return (f"muster store had already exited with "
                    f"{self.proc.returncode}; log:\n{self.log_text()[-6000:]}")
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return (f"muster store did not exit within {STOP_TIMEOUT} s of "
                    f"SIGTERM; log tail:\n{self.log_text()[-3000:]}")
        if code != 0:
            return (f"muster store exited with {code} on SIGTERM (a sanitizer "
                    f"report, if any, is in the log); log tail:\n"
                    f"{self.log_text()[-6000:]}")
        return None


def start_store(log_path, *extra, host=HOST, port=0, binary=None):
    """Start `muster store --host HOST --port PORT EXTRA...` and return it
    once `Bind to` is logged. host=None leaves --host out (the default,
    "::"); clients then dial 127.0.0.1 unless told otherwise."""
    binary = binary or store_binary()
    args = [str(binary), "store"]
    if host is not None:
        args += ["--host", host]
    args += ["--port", str(port)] + [str(a) for a in extra]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=log)
    store = MusterStore(proc, log_path, HOST if host is None else host)
    try:
        store.port = int(store.wait_log(BIND_RE)[0][1])
    except BaseException:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        raise
    return store
