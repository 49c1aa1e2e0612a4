# SPDX-License-Identifier: MIT
"""TVM RPC tracker peers written from spec/tvm-tracker.md, for tests.

TVM cannot be installed here, so this module stands in for every TVM program
that talks to a tracker (STYLE.md rule 12). It owns:

* the wire format (section 2-3 of the spec): magic numbers, LE int32 length
  plus UTF-8 JSON framing, a `recvall` that loops;
* `TrackerSession`, the client side (`TrackerSession` / `query_rpc_tracker`),
  including `text_summary()` reproduced character for character (section 11);
* `PythonServer`, `CppServer` and `JavaServer`, the three registration styles
  of section 8, each driven step by step (register, poll, re-put) by a test;
  they never accept RPC sessions;
* the RPC session handshake of section 9, client side: `rpc_hello` (the
  exact bytes), `rpc_connect` (TVM's `rpc.connect` up to the point where
  RPC traffic would start), `rpc_raw` (arbitrary bytes, for malformed
  hellos) and `request_session` (`TrackerSession.request`'s retry loop);
* `ReferenceTracker`, a tracker that behaves like TVM's Python tracker,
  quirks included (sections 3, 4, 7 and 10), runnable in a thread or as
  `python3 tvmpeer.py tracker --host H --port P --port-end E [--silent]
  [--nodelay]`.

It uses only the standard library. Every socket it creates has a timeout
(DEFAULT_TIMEOUT unless the caller passes one), so a silent peer turns into
an exception instead of a hung test. Nothing here is TVM's code: the spec
describes behaviour and this file implements it independently.
"""

import argparse
import collections
import errno
import heapq
import json
import random
import selectors
import signal
import socket
import struct
import sys
import threading
import time

# --- wire constants (spec section 2) -------------------------------------

RPC_TRACKER_MAGIC = 0x2F271
RPC_MAGIC = 0xFF271
RPC_CODE_SUCCESS = RPC_MAGIC + 0
RPC_CODE_DUPLICATE = RPC_MAGIC + 1
RPC_CODE_MISMATCH = RPC_MAGIC + 2

FAIL = -1
SUCCESS = 0
PING = 1
STOP = 2
PUT = 3
REQUEST = 4
UPDATE_INFO = 5
SUMMARY = 6
GET_PENDING_MATCHKEYS = 7

# Largest frame body TVM's tracker accepts since PR #19586 (spec section 3).
MAX_TRACKER_MSG_BYTES = 1 << 20

# Seconds any socket in this module may block before the operation fails.
DEFAULT_TIMEOUT = 10.0

_I32 = struct.Struct("<i")
MAGIC_BYTES = _I32.pack(RPC_TRACKER_MAGIC)


# --- framing (spec section 3) --------------------------------------------

def pack_i32(value):
    """Signed 32-bit little-endian bytes of `value`."""
    return _I32.pack(value)


def encode_json(obj):
    """UTF-8 JSON the way Python's TVM peers write it: json.dumps defaults,
    so ", " and ": " separators and non-ASCII escaped as \\uXXXX."""
    return json.dumps(obj).encode("utf-8")


def frame(body):
    """A tracker frame: int32 byte length, then the body bytes."""
    return pack_i32(len(body)) + body


def recvall(sock, nbytes):
    """Exactly `nbytes` from `sock`, looping over short reads (the Python
    tracker writes length and body in two sends). Raises ConnectionError if
    the peer closes first and socket.timeout if it stalls."""
    buf = bytearray()
    while len(buf) < nbytes:
        chunk = sock.recv(nbytes - len(buf))
        if not chunk:
            raise ConnectionError(
                f"peer closed after {len(buf)} of {nbytes} bytes")
        buf += chunk
    return bytes(buf)


def send_frame(sock, body):
    sock.sendall(frame(body))


def recv_frame(sock, max_len=MAX_TRACKER_MSG_BYTES):
    """One frame body. Lengths outside [0, max_len] raise ValueError."""
    (length,) = _I32.unpack(recvall(sock, 4))
    if not 0 <= length <= max_len:
        raise ValueError(f"bad frame length {length}")
    return recvall(sock, length)


def connect(host, port, timeout=DEFAULT_TIMEOUT):
    """A TCP connection with `timeout` set on it, magic not yet exchanged."""
    return socket.create_connection((host, port), timeout=timeout)


def handshake(sock):
    """Send the tracker magic and wait for its echo before anything else,
    as every TVM client does (spec section 3.1)."""
    sock.sendall(MAGIC_BYTES)
    echo = recvall(sock, 4)
    if echo != MAGIC_BYTES:
        raise ConnectionError(f"tracker answered magic {echo.hex()}")


# --- client side (spec section 11) ---------------------------------------

def text_summary(summary):
    """The text `query_rpc_tracker` prints for a SUMMARY payload (the dict
    that is element 1 of the reply), reproduced exactly (spec section 11).

    Server rows are sorted by info key (stable, so ties keep server_info
    order); the address column is str() of each addr item joined by ':',
    left-aligned in 21 columns as TVM's f"{addr:21s}" pads it (TVM v0.9 to
    v0.23 wrote "%21s", which right-aligns). `total` counts server_info
    entries by field 1 of their key split on ':' (so `server:a:b` counts
    under `a`; a key with no ':' raises IndexError). Queue rows appear only when total or pending
    is non-zero. The queue dash lines are as long as the title line
    including its newline."""
    dashes = "-" * 30 + "\n"
    out = ["Server List\n", dashes,
           "{:21s}    {}\n".format("server-address", "key"), dashes]
    total = collections.Counter()
    for item in sorted(summary["server_info"], key=lambda e: e["key"]):
        addr = ":".join(str(x) for x in item["addr"])
        out.append(f"{addr:21s}    " + item["key"] + "\n")
        total[item["key"].split(":")[1]] += 1
    out += [dashes, "\n", "Queue Status\n"]

    queue_info = summary["queue_info"]
    width = max((len(k) for k in queue_info), default=0)
    title = "key".ljust(width) + "   total  free  pending\n"
    qdashes = "-" * len(title) + "\n"
    out += [qdashes, title, qdashes]
    for key in sorted(queue_info):
        free = queue_info[key]["free"]
        pending = queue_info[key]["pending"]
        if total[key] or pending:
            out.append("{}   {:<5d}  {:<4d}  {:<7d}\n".format(
                key.ljust(width), total[key], free, pending))
    out.append(qdashes)
    return "".join(out)


class TrackerSession:
    """One control connection to a tracker, used the way TVM's clients and
    servers use theirs. The constructor connects and exchanges the magic.
    Methods send one request and read its reply; `send_request` and
    `recv_grant` split REQUEST in two so a test can queue several before
    any is granted. Not thread-safe."""

    def __init__(self, host, port, timeout=DEFAULT_TIMEOUT):
        self.timeout = timeout
        self.sock = connect(host, port, timeout)
        try:
            handshake(self.sock)
        except BaseException:
            self.sock.close()
            raise

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # raw frames, for tests that need exact bytes
    def send_frame(self, body):
        send_frame(self.sock, body)

    def recv_frame(self):
        return recv_frame(self.sock)

    def send(self, obj):
        self.send_frame(encode_json(obj))

    def recv(self):
        return json.loads(self.recv_frame())

    def call(self, obj):
        self.send(obj)
        return self.recv()

    def ping(self):
        return self.call([PING])

    def stop(self, stop_key):
        return self.call([STOP, stop_key])

    def summary(self):
        """Element 1 of the SUMMARY reply (RuntimeError unless element 0
        is 0)."""
        reply = self.call([SUMMARY])
        if reply[0] != SUCCESS:
            raise RuntimeError(f"SUMMARY failed: {reply!r}")
        return reply[1]

    def text_summary(self):
        return text_summary(self.summary())

    def update_info(self, info):
        return self.call([UPDATE_INFO, info])

    def put(self, key, port, matchkey, custom_addr=None, three_elements=False):
        """PUT one resource. `three_elements` sends the short form without
        the custom address (accepted by the tracker, spec section 4)."""
        msg = [PUT, key, [port, matchkey]]
        if not three_elements:
            msg.append(custom_addr)
        return self.call(msg)

    def pending_matchkeys(self):
        return self.call([GET_PENDING_MATCHKEYS])

    def send_request(self, key, priority=1, user=""):
        self.send([REQUEST, key, user, priority])

    def recv_grant(self, timeout=None):
        """Wait for a REQUEST reply and return (addr, port, matchkey).
        `timeout` overrides the session timeout for this wait only;
        socket.timeout means no grant arrived in time."""
        if timeout is not None:
            self.sock.settimeout(timeout)
        try:
            reply = self.recv()
        finally:
            self.sock.settimeout(self.timeout)
        if (not isinstance(reply, list) or len(reply) != 2
                or reply[0] != SUCCESS or len(reply[1]) != 3):
            raise RuntimeError(f"bad REQUEST reply {reply!r}")
        addr, port, matchkey = reply[1]
        return addr, port, matchkey

    def request(self, key, priority=1, timeout=None):
        """REQUEST and wait for the grant, like TrackerSession.request up to
        the point where it would connect to the server."""
        self.send_request(key, priority)
        return self.recv_grant(timeout)


# --- RPC session handshake, client side (spec section 9) -----------------

RPC_MAGIC_BYTES = _I32.pack(RPC_MAGIC)


class RpcMismatch(RuntimeError):
    """The server answered RPC_CODE_MISMATCH: the matchkey is not (or no
    longer) the one it offers. TVM's client raises a RuntimeError here,
    which makes TrackerSession.request ask the tracker again."""


def rpc_key(matchkey, session_timeout=None):
    """The key string a Python client sends: `client:MATCHKEY`, plus
    ` -timeout=<value>` when `session_timeout` is given and non-zero. The
    value is written with str(), i.e. as the caller typed it (1 -> "1",
    0.5 -> "0.5"); a str is sent verbatim."""
    key = "client:" + matchkey
    if session_timeout:
        key += " -timeout=" + str(session_timeout)
    return key


def rpc_hello(matchkey, session_timeout=None):
    """The bytes a client sends to open a session: int32 RPC_MAGIC, int32
    byte length of the key string, the UTF-8 key string."""
    key = rpc_key(matchkey, session_timeout).encode("utf-8")
    return RPC_MAGIC_BYTES + pack_i32(len(key)) + key


def rpc_raw(host, port, data=b"", timeout=DEFAULT_TIMEOUT):
    """A connected socket (with `timeout`) that has sent `data`, for hellos
    that are wrong, partial or absent. The caller owns the socket."""
    sock = connect(host, port, timeout)
    try:
        if data:
            sock.sendall(data)
    except BaseException:
        sock.close()
        raise
    return sock


def rpc_read_reply(sock):
    """Read the server's answer to a hello. SUCCESS: return the key string
    that follows ("server:KEY"). MISMATCH: raise RpcMismatch. Anything else
    (including EOF, which is how a server rejects a bad magic) raises
    ConnectionError."""
    (code,) = _I32.unpack(recvall(sock, 4))
    if code == RPC_CODE_MISMATCH:
        raise RpcMismatch("server answered RPC_CODE_MISMATCH")
    if code != RPC_CODE_SUCCESS:
        raise ConnectionError(f"server answered code {code:#x}")
    (length,) = _I32.unpack(recvall(sock, 4))
    if not 0 <= length <= MAX_TRACKER_MSG_BYTES:
        raise ConnectionError(f"bad server key length {length}")
    return recvall(sock, length).decode("utf-8")


def rpc_connect(host, port, matchkey, session_timeout=None,
                timeout=DEFAULT_TIMEOUT):
    """Open a session the way TVM's Python `rpc.connect` does (section 9):
    send the hello for `matchkey` (plus ` -timeout=N`), read the answer.
    Returns (socket, server key string); the socket keeps `timeout` and is
    the caller's. On MISMATCH the socket is closed and RpcMismatch raised."""
    sock = rpc_raw(host, port, rpc_hello(matchkey, session_timeout), timeout)
    try:
        server_key = rpc_read_reply(sock)
    except BaseException:
        sock.close()
        raise
    return sock, server_key


def request_session(tracker_host, tracker_port, key, priority=1,
                    session_timeout=None, max_retry=5, grant_timeout=None,
                    timeout=DEFAULT_TIMEOUT):
    """TrackerSession.request (section 11): up to `max_retry` times, send
    REQUEST and wait for the grant, then rpc_connect to it. An OSError
    (tracker or device unreachable) reconnects to the tracker; a MISMATCH
    or other RuntimeError asks again on the same connection, and that grant
    is lost. Unlike TVM, waiting for a grant is bounded by `grant_timeout`
    (default: `timeout`). Returns (socket, server key, (addr, port,
    matchkey)); raises RuntimeError after the last try."""
    tracker = None
    last_error = None
    try:
        for _ in range(max_retry):
            try:
                if tracker is None:
                    tracker = TrackerSession(tracker_host, tracker_port,
                                             timeout)
                grant = tracker.request(
                    key, priority,
                    timeout=timeout if grant_timeout is None
                    else grant_timeout)
                sock, server_key = rpc_connect(grant[0], grant[1], grant[2],
                                               session_timeout, timeout)
                return sock, server_key, grant
            except RuntimeError as exc:
                last_error = exc
            except OSError as exc:
                last_error = exc
                if tracker is not None:
                    tracker.close()
                    tracker = None
    finally:
        if tracker is not None:
            tracker.close()
    raise RuntimeError(f"Cannot request {key} after {max_retry} retry, "
                       f"last_error:{last_error!r}")


# --- server registration styles (spec section 8) -------------------------

class _EmulatedServer:
    """The tracker side of one RPC server process. `register()` connects,
    sends UPDATE_INFO and the first PUT; `still_pending()` sends `[7]`;
    `idle_tick()` is one 2 s idle period of the server's loop (poll, and
    re-PUT by the style's rule). Subclasses fix the bytes and the rules.
    `matchkey` is the one currently offered; `used` lists the matchkey of
    every PUT, in order (a Java server repeats its one matchkey)."""

    PING_PERIOD = 2.0       # seconds between [7] polls while idle
    REGEN_TIMEOUT = 4.0     # the "4 s" in the regeneration rule

    def __init__(self, host, port, key, rpc_port=9090, custom_addr=None,
                 timeout=DEFAULT_TIMEOUT):
        self.host, self.port, self.key = host, port, key
        self.rpc_port = rpc_port
        self.custom_addr = custom_addr
        self.timeout = timeout
        self.session = None
        self.matchkey = None
        self.used = []
        self.misses = 0

    def register(self):
        self.session = TrackerSession(self.host, self.port, self.timeout)
        self._expect_zero(self._update_info_body())
        self.put()

    def put(self):
        """PUT the next matchkey (fresh or reused, by style)."""
        self.matchkey = self._next_matchkey()
        self.used.append(self.matchkey)
        self._expect_zero(self._put_body())

    def still_pending(self):
        self.session.send_frame(b"[7]")
        return self._is_listed(self.session.recv_frame())

    def idle_tick(self):
        """One idle period: poll and re-PUT after 4 misses in a row
        (count x 2 s > 4 s + 2 s). Returns True if it re-PUT."""
        if self.still_pending():
            self.misses = 0
            return False
        self.misses += 1
        waited = self.misses * self.PING_PERIOD
        if waited > self.REGEN_TIMEOUT + self.PING_PERIOD:
            self.misses = 0
            self.put()
            return True
        return False

    def close(self):
        if self.session is not None:
            self.session.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _expect_zero(self, body):
        self.session.send_frame(body)
        reply = self.session.recv_frame()
        if json.loads(reply) != SUCCESS:
            raise RuntimeError(f"tracker answered {reply!r} to {body!r}")

    def _fresh(self, make):
        while True:
            matchkey = make()
            if matchkey not in self.used:
                return matchkey


class PythonServer(_EmulatedServer):
    """`python -m tvm.exec.rpc_server --tracker ...` (spec section 8.1):
    json.dumps bytes, int port, matchkey `KEY:` + str(random.random()),
    custom address or null, pending list parsed as JSON."""

    def _update_info_body(self):
        return encode_json([UPDATE_INFO, {
            "key": "server:" + self.key,
            "addr": [self.custom_addr, self.rpc_port]}])

    def _put_body(self):
        return encode_json([PUT, self.key, [self.rpc_port, self.matchkey],
                            self.custom_addr])

    def _next_matchkey(self):
        return self._fresh(lambda: self.key + ":" + str(random.random()))

    def _is_listed(self, reply):
        return self.matchkey in json.loads(reply)


def _quoted_or_null(text):
    return "null" if text is None else '"' + text + '"'


def _spliced_update_info(key, rpc_port, custom_addr, colon):
    """UPDATE_INFO as the C++ and Java servers build it: strings spliced in
    without escaping, the port as a JSON string, `colon` between names and
    values (": " for C++, " : " for Java)."""
    return ('[5, {"key"' + colon + '"server:' + key + '", "addr"' + colon
            + '[' + _quoted_or_null(custom_addr) + ', "' + str(rpc_port)
            + '"]}]').encode("utf-8")


def _spliced_put(key, rpc_port, matchkey, custom_addr):
    """PUT as the C++ and Java servers build it (int port)."""
    return ('[3, "' + key + '", [' + str(rpc_port) + ', "' + matchkey
            + '"], ' + _quoted_or_null(custom_addr) + ']').encode("utf-8")


class CppServer(_EmulatedServer):
    """`tvm_rpc server --tracker=...` (spec section 8.2): hand-built JSON,
    port as a JSON string in UPDATE_INFO, matchkey with 6 decimals (unique
    only among this server's own keys), pending checked by substring search
    of the raw reply, same 2 s / ~8 s regeneration rule as Python."""

    def _update_info_body(self):
        return _spliced_update_info(self.key, self.rpc_port,
                                    self.custom_addr, ": ")

    def _put_body(self):
        return _spliced_put(self.key, self.rpc_port, self.matchkey,
                            self.custom_addr)

    def _next_matchkey(self):
        return self._fresh(lambda: "%s:%.6f" % (self.key, random.random()))

    def _is_listed(self, reply):
        return self.matchkey.encode("utf-8") in reply


class JavaServer(_EmulatedServer):
    """The Android/Java server (spec section 8.3): `"key" : ...` with a space
    before the colon, string port, one matchkey per process re-PUT unchanged
    as soon as a poll no longer lists it (indexOf on the raw reply)."""

    def _update_info_body(self):
        return _spliced_update_info(self.key, self.rpc_port,
                                    self.custom_addr, " : ")

    def _put_body(self):
        return _spliced_put(self.key, self.rpc_port, self.matchkey,
                            self.custom_addr)

    def _next_matchkey(self):
        if self.matchkey is None:
            return self.key + ":" + repr(random.random())
        return self.matchkey

    def _is_listed(self, reply):
        return self.matchkey.encode("utf-8") in reply

    def idle_tick(self):
        """Java re-PUTs its one matchkey on the first poll that misses it."""
        if self.still_pending():
            return False
        self.put()
        return True


# --- reference tracker (spec sections 3, 4, 7, 10) -----------------------

def _log_line(stream, level, message):
    """`YYYY-mm-dd HH:MM:SS.mmm LEVEL message`, the Python tracker's format."""
    now = time.time()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
    stream.write("%s.%03d %s %s\n" % (stamp, int(now * 1000) % 1000,
                                      level, message))
    stream.flush()


Received = collections.namedtuple("Received", "time peer data")


class _Resource(collections.namedtuple(
        "_Resource", "conn addr port matchkey")):
    """One free resource. Equality includes the owning connection object,
    so remove() withdraws exactly what that connection put."""


class _PriorityScheduler:
    """One key's queue (spec section 7). Invariants: `values` is FIFO (the
    oldest PUT first); `requests` is a heap of (-priority, arrival, deliver)
    where `arrival` is unique per key, so `deliver` is never compared."""

    def __init__(self):
        self.values = []
        self.requests = []
        self.arrivals = 0

    def put(self, resource):
        self.values.append(resource)
        self.schedule()

    def request(self, priority, deliver):
        # A priority that is not a number raises here (e.g. TypeError on a
        # string), which closes the requesting connection.
        heapq.heappush(self.requests, (-priority, self.arrivals, deliver))
        self.arrivals += 1
        self.schedule()

    def remove(self, resource):
        if resource in self.values:
            self.values.remove(resource)

    def schedule(self):
        """Match the oldest free resource with the best request until one
        side is empty. A failed delivery (requester gone) drops the request
        and re-queues the resource at the tail. A delivered grant removes the
        matchkey from its server's pending set; a matchkey PUT twice is no
        longer there on its second grant, and the KeyError closes whichever
        connection's message triggered the matching (spec section 7.6)."""
        while self.requests and self.values:
            resource = self.values.pop(0)
            deliver = heapq.heappop(self.requests)[2]
            if deliver([resource.addr, resource.port, resource.matchkey]):
                resource.conn.pending.remove(resource.matchkey)
            else:
                self.values.append(resource)

    def summary(self):
        return {"free": len(self.values), "pending": len(self.requests)}


class _Conn:
    """One accepted tracker connection. `out` holds chunks not yet sent;
    each chunk goes out in its own send() (length and body separately, as the
    Python tracker does). `info` is what UPDATE_INFO merged; `puts` is every
    resource ever PUT here; `pending` the matchkeys PUT here and not yet
    delivered to a client."""

    def __init__(self, sock, peer):
        self.sock = sock
        self.peer = peer
        self.peer_ip = peer[0]
        self.handshaken = False
        self.closed = False
        self.inbuf = bytearray()
        self.out = collections.deque()
        self.info = {}
        self.puts = []
        self.pending = set()


class ReferenceTracker:
    """A tracker that behaves like TVM's Python tracker, quirks included:

    * the first recv() chunk must be exactly the 4 magic bytes, else close;
    * a frame length <= 0 or > 1 MiB, bad JSON, a handler error or an unknown
      code closes the connection without a reply;
    * REQUEST is answered only when matched; a requester that disconnects
      stays queued (counted in `pending`) until a resource skips it;
    * a closing connection's free resources are withdrawn only if it sent
      UPDATE_INFO with a `key`; queues are never deleted;
    * STOP with `stop_key` (`tracker:<random>`) answers 0 and shuts down,
      any other key gets -1.

    One deliberate extension: `port=0` lets the kernel pick a port (TVM
    treats port 0 as "not bound"); tests use it to avoid collisions.

    Performance follows from the same choices, which matters when it stands
    in for TVM in a benchmark: listen(1) (spec section 10), and each reply
    is two send() calls. Without TCP_NODELAY, Nagle plus the client's
    delayed ACK hold each reply's body back ~40 ms on Linux; the spec does
    not say whether TVM's tracker sets TCP_NODELAY, so `nodelay` chooses
    (off by default: nothing in the spec sets it). In a thread it shares
    the GIL with whatever drives it, so benchmarks should run the CLI in its
    own process.

    The constructor binds (so `port` is known at once); `serve_forever()`
    runs the single-threaded selector loop until STOP or `terminate()`;
    `start()` runs it on a daemon thread. Only the loop thread touches
    connection state.

    With `record=True` it appends `Received(time, peer, data)` to
    `received` for every handshake chunk (data is the raw chunk) and every
    frame (data is the body bytes, without the length), in arrival order,
    so a test can check the exact bytes a peer sent. `peer` is the
    connection's (ip, port). The list only grows (list.append is atomic, so
    another thread may read a snapshot with list(tracker.received))."""

    def __init__(self, host="127.0.0.1", port=9190, port_end=9199,
                 silent=False, log_stream=None, nodelay=False, record=False):
        self.host = host
        self.silent = silent
        self.nodelay = nodelay
        self.record = record
        self.received = []
        self.log_stream = log_stream if log_stream is not None else sys.stderr
        self.stop_key = "tracker:" + str(random.random())
        self.listener = self._bind(host, port, port_end)
        self.port = self.listener.getsockname()[1]
        self._log("INFO", f"bind to {host}:{self.port}")
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.listener, selectors.EVENT_READ)
        self._conns = {}
        self._scheds = {}
        self._running = True
        self._thread = None

    @staticmethod
    def _bind(host, port, port_end):
        """Try port, port+1, ..., port_end-1 with SO_REUSEADDR; only
        EADDRINUSE moves on (spec section 10). listen(1) like TVM."""
        ports = [0] if port == 0 else range(port, port_end)
        for candidate in ports:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, candidate))
            except OSError as exc:
                sock.close()
                if exc.errno == errno.EADDRINUSE:
                    continue
                raise
            sock.listen(1)
            sock.setblocking(False)
            return sock
        raise ValueError(f"cannot bind to any port in [{port}, {port_end})")

    # -- lifecycle --

    def start(self):
        self._thread = threading.Thread(target=self.serve_forever,
                                        name="reference-tracker", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self):
        try:
            while self._running:
                for sel_key, mask in self._sel.select(timeout=0.5):
                    if sel_key.fileobj is self.listener:
                        self._accept()
                    else:
                        self._on_event(sel_key.data, mask)
                    if not self._running:
                        break
        finally:
            for conn in list(self._conns.values()):
                self._close(conn, "tracker stopping")
            self._sel.close()
            self.listener.close()

    def terminate(self):
        """Stop the way TVM's Tracker.terminate() does: STOP with the key
        over 127.0.0.1. If that fails, fall back to the loop's flag."""
        if self._thread is None or not self._thread.is_alive():
            return
        try:
            with TrackerSession("127.0.0.1", self.port, timeout=5) as sess:
                sess.stop(self.stop_key)
        except OSError:
            self._running = False
        self._thread.join(timeout=5)

    def join(self, timeout=None):
        """Wait for the loop thread to end; True if it has."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.terminate()

    def _log(self, level, message):
        if self.silent and level == "INFO":
            return
        _log_line(self.log_stream, level, message)

    # -- socket events --

    def _accept(self):
        while True:
            try:
                sock, peer = self.listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                self._log("WARNING", f"accept failed: {exc}")
                return
            sock.setblocking(False)
            if self.nodelay:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(sock, peer[:2])
            self._conns[sock.fileno()] = conn
            self._sel.register(sock, selectors.EVENT_READ, conn)

    def _on_event(self, conn, mask):
        if mask & selectors.EVENT_WRITE:
            self._flush(conn)
        if mask & selectors.EVENT_READ and not conn.closed:
            try:
                data = conn.sock.recv(65536)
            except BlockingIOError:
                return
            except OSError as exc:
                self._close(conn, str(exc))
                return
            if not data:
                self._close(conn, "peer closed")
            elif not conn.handshaken:
                self._on_handshake(conn, data)
            else:
                conn.inbuf += data
                self._on_frames(conn)

    def _on_handshake(self, conn, data):
        self._record(conn, data)
        # The quirk: the whole first chunk is the handshake.
        if data != MAGIC_BYTES:
            self._close(conn, f"bad handshake chunk {data[:8].hex()}")
            return
        conn.handshaken = True
        conn.out.append(MAGIC_BYTES)
        self._flush(conn)

    def _on_frames(self, conn):
        while self._running and not conn.closed and len(conn.inbuf) >= 4:
            (length,) = _I32.unpack_from(conn.inbuf)
            if length <= 0 or length > MAX_TRACKER_MSG_BYTES:
                self._close(conn, f"bad frame length {length}")
                return
            if len(conn.inbuf) < 4 + length:
                return
            body = bytes(conn.inbuf[4:4 + length])
            del conn.inbuf[:4 + length]
            self._record(conn, body)
            try:
                self._handle(conn, json.loads(body.decode("utf-8")))
            except Exception as exc:  # any handler error closes, like TVM
                self._close(conn, f"{type(exc).__name__}: {exc}")

    def _record(self, conn, data):
        if self.record:
            self.received.append(Received(time.monotonic(), conn.peer, data))

    def _write(self, conn, obj):
        body = encode_json(obj)
        conn.out.append(pack_i32(len(body)))
        conn.out.append(body)
        self._flush(conn)

    def _flush(self, conn):
        while conn.out and not conn.closed:
            chunk = conn.out[0]
            try:
                sent = conn.sock.send(chunk)
            except BlockingIOError:
                break
            except OSError as exc:
                # Like the Python tracker: the write error is swallowed and
                # the connection closed; a grant written here is lost.
                self._close(conn, str(exc))
                return
            if sent < len(chunk):
                conn.out[0] = chunk[sent:]
                break
            conn.out.popleft()
        if not conn.closed:
            events = selectors.EVENT_READ
            if conn.out:
                events |= selectors.EVENT_WRITE
            self._sel.modify(conn.sock, events, conn)

    def _close(self, conn, reason):
        if conn.closed:
            return
        conn.closed = True
        self._log("INFO", f"close {conn.peer_ip}: {reason}")
        self._sel.unregister(conn.sock)
        del self._conns[conn.sock.fileno()]
        conn.sock.close()
        if "key" not in conn.info:
            return  # the quirk: puts of a connection without info stay free
        for resource in conn.puts:
            if not isinstance(resource.matchkey, str):
                continue
            # The queue is found from the matchkey, not the PUT's key.
            sched = self._scheds.get(resource.matchkey.rsplit(":", 1)[0])
            if sched is not None:
                sched.remove(resource)

    # -- messages (spec section 4) --

    def _sched(self, key):
        if key not in self._scheds:
            self._scheds[key] = _PriorityScheduler()
        return self._scheds[key]

    def _handle(self, conn, args):
        code = args[0]
        if code == PING:
            self._write(conn, SUCCESS)
        elif code == PUT:
            key = args[1]
            port, matchkey = args[2]
            custom_addr = args[3] if len(args) > 3 else None
            addr = conn.peer_ip if custom_addr is None else custom_addr
            resource = _Resource(conn, addr, port, matchkey)
            conn.pending.add(matchkey)
            conn.puts.append(resource)
            self._sched(key).put(resource)
            self._write(conn, SUCCESS)
        elif code == REQUEST:
            key, priority = args[1], args[3]
            self._sched(key).request(priority, self._deliverer(conn))
        elif code == UPDATE_INFO:
            info = args[1]
            if not isinstance(info, dict):
                raise TypeError("info is not an object")
            addr = info["addr"]
            if not isinstance(addr, list) or len(addr) != 2:
                raise ValueError("addr is not a 2-element array")
            if addr[0] is None:
                addr[0] = conn.peer_ip
            conn.info.update(info)
            self._write(conn, SUCCESS)
        elif code == SUMMARY:
            self._write(conn, [SUCCESS, self._summary()])
        elif code == GET_PENDING_MATCHKEYS:
            self._write(conn, list(conn.pending))
        elif code == STOP:
            if args[1] == self.stop_key:
                self._write(conn, SUCCESS)
                self._running = False
            else:
                self._write(conn, FAIL)
        else:
            raise ValueError(f"unknown code {code!r}")

    def _deliverer(self, conn):
        """The REQUEST callback: fails only once the tracker has seen the
        requester close; a write to a peer that closed unnoticed 'succeeds'."""
        def deliver(value):
            if conn.closed:
                return False
            self._write(conn, [SUCCESS, value])
            return True
        return deliver

    def _summary(self):
        servers = []
        for conn in self._conns.values():
            key = conn.info.get("key")
            if isinstance(key, str) and key.startswith("server"):
                servers.append(conn.info)
        queues = {key: sched.summary() for key, sched in self._scheds.items()}
        return {"queue_info": queues, "server_info": servers}


# --- command line ---------------------------------------------------------

def _main(argv=None):
    parser = argparse.ArgumentParser(prog="tvmpeer.py")
    sub = parser.add_subparsers(dest="command", required=True)
    trk = sub.add_parser("tracker",
                         help="run the reference (TVM Python-like) tracker")
    trk.add_argument("--host", default="127.0.0.1")
    trk.add_argument("--port", type=int, default=9190)
    trk.add_argument("--port-end", type=int, default=9199)
    trk.add_argument("--silent", action="store_true")
    trk.add_argument("--nodelay", action="store_true",
                     help="set TCP_NODELAY on accepted connections")
    args = parser.parse_args(argv)

    try:
        tracker = ReferenceTracker(args.host, args.port, args.port_end,
                                   silent=args.silent, nodelay=args.nodelay)
    except (OSError, ValueError) as exc:
        print(f"tvmpeer.py tracker: {exc}", file=sys.stderr)
        return 1

    def on_signal(signum, frame_):
        tracker._running = False  # the loop notices within 0.5 s

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    tracker.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(_main())
