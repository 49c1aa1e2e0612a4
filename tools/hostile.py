#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Hostile peers for muster's servers: what one client can make a server
hold (docs/internals/budgets.md).

Each flood opens its connection(s) to a running server, sends requests as
fast as the server takes them for a fixed time and never reads a reply,
while the server's resident memory (/proc/PID/status VmRSS) is sampled
and, every so often, a second client checks that it is still served
correctly. The result is one JSON object:

    {"flood": ..., "seconds": ..., "idle_kib": ..., "peak_kib": ...,
     "hwm_kib": ..., "sent_bytes": ..., "probes": N, "probe_failures": [...],
     "slowest_probe_s": ...}

    tools/hostile.py FLOOD --port P --pid PID [--seconds S] [--host H]

FLOOD is one of FLOODS below. bench/hostile.sh runs every flood against
a fresh server of each kind and prints the table; tests/interop/
test_hostile.py imports this module and asserts bounds.
"""

import argparse
import json
import os
import select
import socket
import struct
import sys
import threading
import time

HOST = "127.0.0.1"
TIMEOUT = 5.0

# ---- wire pieces (the protocols' specs under docs/protocols/) ----

TRACKER_MAGIC = struct.pack("<i", 0x2F271)
RPC_MAGIC = struct.pack("<i", 0xFF271)
STORE_V2_VALIDATE = b"\x00" + struct.pack("<I", 0x3C85F7CE)
STORE_V1 = {"SET": 0, "GET": 2, "WATCH_KEY": 7}
STORE_V2 = {"SET": 1, "GET": 3, "PING": 13}
STAGE_INFO, STAGE_FORWARD, STAGE_ERROR = 1, 2, 4


def u64(v):
    return struct.pack("<Q", v)


def store_str(b):
    return u64(len(b)) + b


def tracker_frame(text):
    data = text.encode()
    return struct.pack("<i", len(data)) + data


def stage_header(mtype, rid, length=0):
    return b"MUPL" + struct.pack("<HHiIQQQ", 1, mtype, 0, 0, rid, 0, length)


def md_frame(cmd, arg=b""):
    payload = b"NIXLCOMM:" + cmd + arg
    return u64(len(payload)) + payload


def recv_exact(sock, n):
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def connect(port, host=HOST, rcvbuf=None):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        # a small window: what the server cannot hand to the kernel stays
        # with the server, which is what a flood is after
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(TIMEOUT)
    sock.connect((host, port))
    return sock


def rss_kib(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} for pid {pid}")


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


# ---- floods: each opens its connections and yields chunks to send ----

class Flood:
    """A flood: each `open()` adds a flooding connection to `socks` (and
    sends any setup), `chunk()` is the next bytes to pipeline on any of
    them, `probe()` checks that another client is served correctly (True,
    or a description)."""

    def __init__(self, port, host=HOST):
        self.port, self.host = port, host
        self.socks = []
        self.rid = 0

    def close(self):
        for s in self.socks:
            try:
                s.close()
            except OSError:
                pass
        self.socks = []


class TrackerPing(Flood):
    name = "tracker-ping"

    def open(self):
        s = connect(self.port, self.host, rcvbuf=4096)
        s.sendall(TRACKER_MAGIC)
        assert recv_exact(s, 4) == TRACKER_MAGIC
        self.socks.append(s)
        self.data = tracker_frame("[1]") * 8192

    def chunk(self):
        return self.data

    def probe(self):
        with connect(self.port, self.host) as s:
            s.sendall(TRACKER_MAGIC + tracker_frame("[1]"))
            if recv_exact(s, 4) != TRACKER_MAGIC:
                return "bad magic echo"
            n = struct.unpack("<i", recv_exact(s, 4))[0]
            body = recv_exact(s, n)
            return True if body == b"0" else f"PING answered {body!r}"


class StorePing(Flood):
    name = "store-ping"

    def open(self):
        s = connect(self.port, self.host, rcvbuf=4096)
        s.sendall(STORE_V2_VALIDATE)
        self.socks.append(s)
        self.data = (bytes([STORE_V2["PING"]]) + struct.pack("<I", 7)) * 16384

    def chunk(self):
        return self.data

    def probe(self):
        self.rid += 1
        key, value = b"/hostile/probe", b"v%d" % self.rid
        with connect(self.port, self.host) as s:
            s.sendall(STORE_V2_VALIDATE
                      + bytes([STORE_V2["SET"]]) + store_str(key) + store_str(value)
                      + bytes([STORE_V2["GET"]]) + store_str(key))
            n = struct.unpack("<Q", recv_exact(s, 8))[0]
            got = recv_exact(s, n)
            return True if got == value else f"GET answered {got!r}, not {value!r}"


class StoreWatchFanout(Flood):
    """100 v1 watches on one key from a client that reads nothing, then
    another client SETs 256 KiB values on that key: each SET is an event
    of 512 KiB (old and new value) owed to each of the 100 watches."""
    name = "store-watch-fanout"
    WATCHES, VALUE = 100, 256 << 10

    def open(self):
        s = connect(self.port, self.host, rcvbuf=4096)
        self.key = b"/hostile/watched"
        s.sendall((bytes([STORE_V1["WATCH_KEY"]]) + store_str(self.key)) * self.WATCHES)
        self.socks.append(s)
        if not hasattr(self, "setter"):
            self.setter = connect(self.port, self.host)
            self.n = 0

    def chunk(self):
        return None  # the watcher sends nothing more; pump() drives the SETs

    def pump(self):
        """One SET from the other client (its requests have no reply)."""
        self.n += 1
        value = bytes([self.n % 251]) * self.VALUE
        self.setter.sendall(bytes([STORE_V1["SET"]]) + store_str(self.key) + store_str(value))

    def close(self):
        super().close()
        self.setter.close()

    def probe(self):
        return StorePing.probe(self)


class StoreWatchKeys(Flood):
    """One connection registers watches on many distinct 60 KB keys."""
    name = "store-watch-keys"
    KEY = 60000

    def open(self):
        self.socks.append(connect(self.port, self.host, rcvbuf=4096))
        self.n = getattr(self, "n", 0)

    def chunk(self):
        out = []
        for _ in range(16):
            self.n += 1
            key = (b"%08d" % self.n) * (self.KEY // 8)
            out.append(bytes([STORE_V1["WATCH_KEY"]]) + store_str(key))
        return b"".join(out)

    def probe(self):
        return StorePing.probe(self)


class StageInfo(Flood):
    name = "stage-info"

    def open(self):
        self.socks.append(connect(self.port, self.host, rcvbuf=4096))
        self.data = b"".join(stage_header(STAGE_INFO, i + 1) for i in range(4096))

    def chunk(self):
        return self.data

    def probe(self):
        self.rid += 1
        with connect(self.port, self.host) as s:
            s.sendall(stage_header(STAGE_INFO, self.rid))
            h = recv_exact(s, 40)
            mtype, rid, n = struct.unpack("<H", h[6:8])[0], *struct.unpack("<QQQ", h[16:40])[::2]
            body = recv_exact(s, n)
            if mtype != STAGE_INFO or rid != self.rid:
                return f"INFO answered type {mtype} id {rid}: {body[:200]!r}"
            json.loads(body)
            return True


class StageForward(StageInfo):
    """FORWARDs of a frame with no tensors: each one is answered with an
    ERROR (the inputs are missing) and the connection goes on."""
    name = "stage-forward"

    def open(self):
        self.socks.append(connect(self.port, self.host, rcvbuf=4096))
        empty = struct.pack("<I", 0)
        self.data = b"".join(stage_header(STAGE_FORWARD, i + 1, len(empty)) + empty
                             for i in range(4096))


class MdSend(Flood):
    name = "md-send"

    def open(self):
        self.socks.append(connect(self.port, self.host, rcvbuf=4096))
        self.data = md_frame(b"SEND") * 4096

    def chunk(self):
        return self.data

    def probe(self):
        with connect(self.port, self.host) as s:
            s.sendall(md_frame(b"SEND"))
            n = struct.unpack("<Q", recv_exact(s, 8))[0]
            body = recv_exact(s, n)
            return True if body.startswith(b"NIXLCOMM:LOAD") else f"SEND answered {body[:64]!r}"


class DeviceInfo(Flood):
    """A session on a device server (standalone, default key) that
    pipelines INFO and reads nothing."""
    name = "device-info"

    def hello(self, s):
        key = b"client:"
        s.sendall(RPC_MAGIC + struct.pack("<i", len(key)) + key)
        code = recv_exact(s, 4)
        if code != RPC_MAGIC:
            raise ConnectionError(f"device refused the session: {code!r}")
        n = struct.unpack("<i", recv_exact(s, 4))[0]
        recv_exact(s, n)

    def open(self):
        s = connect(self.port, self.host, rcvbuf=4096)
        self.hello(s)
        self.socks.append(s)
        self.data = b"".join(stage_header(STAGE_INFO, i + 1) for i in range(4096))

    def chunk(self):
        return self.data

    def probe(self):
        self.rid += 1
        with connect(self.port, self.host) as s:
            s.settimeout(2.0)
            self.hello(s)
            s.sendall(stage_header(STAGE_INFO, self.rid))
            h = recv_exact(s, 40)
            mtype = struct.unpack("<H", h[6:8])[0]
            return True if mtype == STAGE_INFO else f"INFO answered type {mtype}"


def http_post(port, host, path, body, timeout=TIMEOUT):
    """(status, JSON body) of one request on a fresh connection."""
    data = json.dumps(body).encode()
    with connect(port, host) as s:
        s.settimeout(timeout)
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    while got.startswith(b"HTTP/1.1 1"):
        got = got.split(b"\r\n\r\n", 1)[1]
    if not got:
        raise ConnectionError("closed without a reply")
    head, _, rest = got.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(rest)


class ServeIdleHolders(Flood):
    """`muster serve`: 32 idle connections (its --max-connections), each
    reconnected as soon as the server closes it; another client asks for
    a short completion."""
    name = "serve-idle-holders"
    HOLDERS = 32

    def open(self):
        # not in self.socks: the sender has nothing to send on them
        self.holders = [connect(self.port, self.host) for _ in range(self.HOLDERS)]
        self.reconnects = 0

    def chunk(self):
        return None  # holders send nothing; pump() reconnects them

    def pump(self):
        ready, _, _ = select.select(self.holders, [], [], 0)
        for s in ready:
            try:
                gone = s.recv(1) == b""
            except OSError:
                gone = True
            if gone:
                s.close()
                self.holders[self.holders.index(s)] = connect(self.port, self.host)
                self.reconnects += 1

    def close(self):
        super().close()
        for s in self.holders:
            s.close()

    def probe(self):
        st, r = http_post(self.port, self.host, "/v1/completions",
                          {"prompt": "Once", "max_tokens": 2})
        return True if st == 200 else f"answered {st}: {str(r)[:80]}"


class ServeBigBody(Flood):
    """`muster serve --max-body 64M`: one client pipelines 32 MB chats
    (far past the context) and reads nothing; another asks for a short
    completion."""
    name = "serve-big-body"

    def open(self):
        self.socks.append(connect(self.port, self.host, rcvbuf=4096))
        data = json.dumps({"messages": [{"role": "user",
                                         "content": "ab cd " * ((32 << 20) // 6)}]}).encode()
        self.data = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     f"application/json\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data

    def chunk(self):
        return self.data

    def probe(self):
        return ServeIdleHolders.probe(self)


# ---- holders: peers that take memory or slots and then say nothing ----

class StageDeclare(StageInfo):
    """A FORWARD header and a frame header that declare a 300 MiB tensor
    (under --max-frame 1G), and one byte of it: 70 bytes per connection
    (issue 22 item 4: it used to calloc the whole tensor at once)."""
    name = "stage-declare"
    DECLARED = 300 << 20

    def open(self):
        s = connect(self.port, self.host)
        name = b"x"
        head = (struct.pack("<II", 1, len(name)) + name + struct.pack("<I", 1)
                + struct.pack("<QQ", self.DECLARED // 4, self.DECLARED // 4))
        s.sendall(b"MUPL" + struct.pack("<HHiIQQQ", 1, STAGE_FORWARD, 0, 0, 1, 0,
                                        len(head) + self.DECLARED) + head + b"\0")
        self.socks.append(s)

    def chunk(self):
        return None


class StageIdle(StageInfo):
    """64 connections (the stage's --max-connections) that each send one
    INFO, read the reply, then idle (issue 22 item 5)."""
    name = "stage-idle"

    def open(self):
        for i in range(64):
            s = connect(self.port, self.host)
            s.sendall(stage_header(STAGE_INFO, i + 1))
            h = recv_exact(s, 40)
            recv_exact(s, struct.unpack("<Q", h[32:40])[0])
            self.socks.append(s)

    def chunk(self):
        return None


class StageSeqs(StageInfo):
    """One connection that opens as many sequences of an LLM stage as it
    is let (8, --max-sequences by default), then idles; the probe is
    another coordinator opening one."""
    name = "stage-seqs"

    def seq(self, s, mtype, rid, aux, body=b""):
        s.sendall(b"MUPL" + struct.pack("<HHiIQQQ", 1, mtype, 0, 0, rid, aux, len(body)) + body)
        h = recv_exact(s, 40)
        recv_exact(s, struct.unpack("<Q", h[32:40])[0])
        return struct.unpack("<H", h[6:8])[0]

    def open(self):
        s = connect(self.port, self.host)
        for i in range(8):
            self.seq(s, 10, i + 1, i + 1, b'{"ctx": 64}')
        self.socks.append(s)

    def chunk(self):
        return None

    def probe(self):
        self.rid += 1
        with connect(self.port, self.host) as s:
            t = self.seq(s, 10, 1, 1000 + self.rid, b'{"ctx": 64}')
            if t != 9:  # READY
                return f"SEQ_OPEN answered type {t}"
            self.seq(s, 12, 2, 1000 + self.rid)
            return True


class MetricsIdle(Flood):
    """16 connections to a --metrics port that send nothing."""
    name = "metrics-idle"

    def open(self):
        for _ in range(16):
            self.socks.append(connect(self.port, self.host))

    def chunk(self):
        return None

    def probe(self):
        with connect(self.port, self.host) as s:
            s.settimeout(2.0)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            got = s.recv(64)
            return True if got.startswith(b"HTTP/1.1 200") else f"scrape answered {got[:40]!r}"


class DeviceSession(DeviceInfo):
    """A session on a standalone device server whose client then says
    nothing (issue 22 item 8); the probe is a new handshake, which must
    be answered (SUCCESS, or MISMATCH saying the device is busy) within
    15 s."""
    name = "device-session"

    def open(self):
        s = connect(self.port, self.host)
        self.hello(s)
        self.socks.append(s)

    def chunk(self):
        return None

    def probe(self):
        with connect(self.port, self.host) as s:
            s.settimeout(15.0)
            key = b"client:"
            s.sendall(RPC_MAGIC + struct.pack("<i", len(key)) + key)
            code = recv_exact(s, 4)
            return True if code in (RPC_MAGIC, struct.pack("<i", 0xFF273)) else f"code {code!r}"


FLOODS = {f.name: f for f in (TrackerPing, StorePing, StoreWatchFanout, StoreWatchKeys,
                              StageInfo, StageForward, MdSend, DeviceInfo, ServeIdleHolders,
                              ServeBigBody, StageDeclare, StageIdle, StageSeqs, MetricsIdle,
                              DeviceSession)}


# ---- running one ----

def _sender(flood, deadline, sent, stop):
    """Pipeline flood.chunk() on every socket until the deadline (or the
    server closes them), never reading."""
    socks = list(flood.socks)
    pending = {s: b"" for s in socks}
    for s in socks:
        s.setblocking(False)
    pump_every, next_pump = 0.1, 0.0
    while not stop.is_set() and time.monotonic() < deadline:
        if hasattr(flood, "pump") and time.monotonic() >= next_pump:
            try:
                flood.pump()
            except OSError:
                pass
            next_pump = time.monotonic() + pump_every
        live = [s for s in socks if pending.get(s) is not None]
        if not live:
            if not hasattr(flood, "pump"):
                break
            time.sleep(0.01)
            continue
        _, writable, _ = select.select([], live, [], 0.05)
        for s in writable:
            if not pending[s]:
                pending[s] = flood.chunk()
                if pending[s] is None:
                    continue
            try:
                n = s.send(pending[s])
            except BlockingIOError:
                continue
            except OSError:
                pending[s] = None  # the server closed it: that is its right
                continue
            sent[0] += n
            pending[s] = pending[s][n:]
        if all(pending.get(s) is None for s in socks) and not hasattr(flood, "pump"):
            break
        if not writable:
            time.sleep(0.005)


def run(name, port, pid, seconds=3.0, host=HOST, probe_every=0.5, keep=False, conns=1):
    """Run flood `name` against the server (pid) on port, from `conns`
    connections at once. With keep, the flood's connections are returned
    open (result["flood_obj"]) for the caller to close, so it can look at
    the server with them still open."""
    flood = FLOODS[name](port, host)
    idle = rss_kib(pid)
    peak = idle
    for _ in range(conns):
        flood.open()
    sent, stop = [0], threading.Event()
    deadline = time.monotonic() + seconds
    t = threading.Thread(target=_sender, args=(flood, deadline, sent, stop), daemon=True)
    t.start()
    failures, probes, next_probe, slowest = [], 0, time.monotonic() + probe_every, 0.0
    try:
        while time.monotonic() < deadline:
            peak = max(peak, rss_kib(pid))
            if time.monotonic() >= next_probe:
                probes += 1
                t0 = time.monotonic()
                try:
                    ok = flood.probe()
                except (OSError, ConnectionError, ValueError, AssertionError) as exc:
                    ok = f"{type(exc).__name__}: {exc}"
                slowest = max(slowest, time.monotonic() - t0)
                if ok is not True:
                    failures.append(ok)
                next_probe = time.monotonic() + probe_every
            time.sleep(0.02)
    finally:
        stop.set()
        t.join(5)
    peak = max(peak, rss_kib(pid))
    result = {"flood": name, "seconds": seconds, "idle_kib": idle, "peak_kib": peak,
              "hwm_kib": rss_kib(pid, "VmHWM"), "sent_bytes": sent[0], "probes": probes,
              "probe_failures": failures, "slowest_probe_s": round(slowest, 3)}
    if keep:
        result["flood_obj"] = flood
    else:
        flood.close()
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("flood", choices=sorted(FLOODS))
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, required=True, help="the server's process id")
    ap.add_argument("--host", default=HOST)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--conns", type=int, default=1, help="flooding connections (default 1)")
    a = ap.parse_args()
    print(json.dumps(run(a.flood, a.port, a.pid, a.seconds, a.host, conns=a.conns)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
