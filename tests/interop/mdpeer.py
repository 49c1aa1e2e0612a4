# SPDX-License-Identifier: MIT
"""Peers for the md (NIXL metadata exchange) interop tests, written from
../shared/spec/nixl-metadata.md. Nothing here comes from NIXL's sources.

Two parts:

1. Agents in separate processes. `python3 mdpeer.py agent CONFIG_JSON`
   creates a muster.md.Agent(**CONFIG) and then follows one JSON command
   per line on stdin, answering each with one JSON line on stdout (the
   first line is {"ready": true, ...} or {"ready": false, "error": ...}).
   Commands (binary data travels as base64; "peer" is [ip, port]):

     info                              name, listen_port, backend
     set       payload|payload_b64|size [label] [blob_b64]
     get_local [label] [digest]
     publish   [label] [peer] [timeout] [nowait]   -> status, event, elapsed
     fetch     name [label] [peer] [timeout] [nowait]
     invalidate [peer] [timeout] [nowait]
     wait      op [timeout]                          -> status, event
     get       name [label] [digest]                 -> blob_b64 | code
     check     name                                  -> loaded
     list                                            -> names
     remote_bytes                                    -> bytes (the cache's count)
     load      blob_b64 [label]                      -> name | code
     drop      name                                  (invalidate_remote)
     events                                          every event seen, cleared
     wait_event kind [name] [timeout]                the first such event
     exit

   Every answer has "ok"; a MusterError gives ok false with its "code".
   `AgentProc` drives one such process from a test; the `md_agent` fixture
   starts them and checks at teardown that none died unexpectedly.

2. A raw NIXL P2P peer (spec section 6): `frame()`, `nixl_blob()` (spec
   section 4, full schema), `muster_blob()` (the muster layout), a
   `NixlClient` that sends LOAD/SEND/INVL frames byte for byte and reads
   replies, and a `NixlListener` (a thread) that records every frame it
   gets, loads LOAD blobs, drops on INVL and answers SEND on the same
   connection with LOAD + its blob, as NIXL's listener does; with
   read=False it accepts and never reads (a peer whose buffers fill).
"""

import base64
import hashlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
HOST = "127.0.0.1"
PYTHON = "/usr/bin/python3"
READY_TIMEOUT = 20.0
CALL_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0

STORE_VARS = ("MUSTER_ETCD_ENDPOINTS", "MUSTER_ETCD_NAMESPACE",
              "MUSTER_TCPSTORE_ENDPOINT", "NIXL_ETCD_ENDPOINTS",
              "NIXL_ETCD_NAMESPACE", "NIXL_TCPSTORE_ENDPOINT")


def pattern(n, seed=0):
    """n deterministic bytes (cheap to make on both sides)."""
    base = bytes((i * 31 + seed) & 0xFF for i in range(4096))
    return (base * (n // 4096 + 1))[:n]


def digest(data):
    return hashlib.sha256(data).hexdigest()


def u64(v):
    return struct.pack("<Q", v)


# ======================================================================
# 1a. the agent process
# ======================================================================

def _agent_main(config):
    from muster import md, _lib

    if config.pop("log", True):
        _lib.log_set_sink(_lib.log_stderr_sink, None, 2)
    out = sys.stdout
    try:
        agent = md.Agent(**config)
    except Exception as exc:  # noqa: BLE001 - reported to the test
        out.write(json.dumps({"ready": False, "error": str(exc),
                              "code": getattr(exc, "code", None)}) + "\n")
        out.flush()
        return 3
    out.write(json.dumps({"ready": True, "name": agent.name,
                          "listen_port": agent.listen_port,
                          "backend": agent.backend, "pid": os.getpid()}) + "\n")
    out.flush()

    seen = []   # events taken from the queue, oldest first

    def pump():
        while True:
            ev = agent.next_event()
            if ev is None:
                return
            ev["t"] = time.monotonic()
            seen.append(ev)

    def op_event(op):
        # mu_md_wait returns only once the completion's event is queued
        pump()
        for ev in seen:
            if ev["op"] == op:
                return ev
        return None

    def finish(op, timeout, t0):
        try:
            status = agent.wait(op, timeout)
        except TimeoutError:
            return {"ok": True, "op": op, "status": None, "timed_out": True,
                    "elapsed": time.monotonic() - t0}
        return {"ok": True, "op": op, "status": status, "event": op_event(op),
                "elapsed": time.monotonic() - t0}

    def peer(cmd):
        p = cmd.get("peer")
        return None if p is None else (p[0], int(p[1]))

    def run(cmd):
        c = cmd["cmd"]
        t0 = time.monotonic()
        timeout = cmd.get("timeout", 20.0)
        if c == "info":
            return {"ok": True, "name": agent.name, "listen_port": agent.listen_port,
                    "backend": agent.backend}
        if c == "set":
            if "blob_b64" in cmd:
                agent.set_local_blob(base64.b64decode(cmd["blob_b64"]), cmd.get("label"))
            else:
                if "payload_b64" in cmd:
                    payload = base64.b64decode(cmd["payload_b64"])
                elif "size" in cmd:
                    payload = pattern(cmd["size"], cmd.get("seed", 0))
                else:
                    payload = cmd["payload"].encode()
                agent.set_local(payload, cmd.get("label"))
            blob = agent.get_local(cmd.get("label"))
            return {"ok": True, "len": len(blob), "sha": digest(blob),
                    "blob_b64": base64.b64encode(blob).decode()
                    if len(blob) <= cmd.get("echo_max", 65536) else None}
        if c == "get_local":
            blob = agent.get_local(cmd.get("label"))
            res = {"ok": True, "len": len(blob), "sha": digest(blob)}
            if not cmd.get("digest"):
                res["blob_b64"] = base64.b64encode(blob).decode()
            return res
        if c in ("publish", "fetch", "invalidate"):
            if c == "publish":
                op = agent.send_local(peer(cmd), cmd.get("label"))
            elif c == "fetch":
                op = agent.fetch_remote(cmd["name"], peer(cmd), cmd.get("label"))
            else:
                op = agent.invalidate_local(peer(cmd))
            if cmd.get("nowait"):
                return {"ok": True, "op": op}
            return finish(op, timeout, t0)
        if c == "wait":
            return finish(cmd["op"], timeout, t0)
        if c == "get":
            blob = agent.get_remote(cmd["name"], cmd.get("label"))
            res = {"ok": True, "len": len(blob), "sha": digest(blob)}
            if not cmd.get("digest"):
                res["blob_b64"] = base64.b64encode(blob).decode()
            return res
        if c == "check":
            return {"ok": True, "loaded": agent.check_remote(cmd["name"])}
        if c == "list":
            return {"ok": True, "names": agent.list_remote()}
        if c == "remote_bytes":
            return {"ok": True, "bytes": agent.remote_bytes}
        if c == "load":
            return {"ok": True, "name": agent.load_remote(
                base64.b64decode(cmd["blob_b64"]), cmd.get("label"))}
        if c == "drop":
            agent.invalidate_remote(cmd["name"])
            return {"ok": True}
        if c == "events":
            pump()
            evs = list(seen)
            seen.clear()
            return {"ok": True, "events": evs}
        if c == "wait_event":
            deadline = time.monotonic() + timeout
            while True:
                pump()
                for i, ev in enumerate(seen):
                    if ev["kind"] == cmd["kind"] and cmd.get("name") in (None, ev["name"]):
                        del seen[i]
                        return {"ok": True, "event": ev, "elapsed": time.monotonic() - t0}
                left = deadline - time.monotonic()
                if left <= 0:
                    return {"ok": True, "event": None, "events": list(seen),
                            "elapsed": time.monotonic() - t0}
                select.select([agent.event_fd], [], [], min(left, 0.1))
        raise ValueError(f"unknown command {c!r}")

    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        if cmd["cmd"] == "exit":
            agent.close()
            out.write(json.dumps({"ok": True}) + "\n")
            out.flush()
            return 0
        try:
            res = run(cmd)
        except Exception as exc:  # noqa: BLE001 - reported to the test
            res = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                   "code": getattr(exc, "code", None)}
        out.write(json.dumps(res) + "\n")
        out.flush()
    agent.close()
    return 0


# ======================================================================
# 1b. driving agent processes from a test
# ======================================================================

def agent_env(env=None):
    """The environment of an agent process: ours without any store
    variable (so nothing leaks in), PYTHONPATH for the binding, then `env`."""
    e = {k: v for k, v in os.environ.items() if k not in STORE_VARS}
    e["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), str(HERE)])
    e.update(env or {})
    return e


class AgentError(AssertionError):
    pass


class AgentProc:
    """One agent in its own process. Start with `AgentProc.start`."""

    def __init__(self, name, config, env, log_path):
        self.name = name
        self.log_path = Path(log_path)
        self.killed = False
        self.exited = False
        self._log = open(self.log_path, "wb")
        cfg = dict(config, name=name)
        self.proc = subprocess.Popen(
            [PYTHON, str(HERE / "mdpeer.py"), "agent", json.dumps(cfg)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
            env=agent_env(env), start_new_session=True)
        self._buf = b""
        self.ready = self._read_line(READY_TIMEOUT)
        self.listen_port = self.ready.get("listen_port")
        self.backend = self.ready.get("backend")

    def log_text(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def _read_line(self, timeout):
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AgentError(f"agent {self.name}: no answer within {timeout} s; "
                                 f"log:\n{self.log_text()[-4000:]}")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise AgentError(f"agent {self.name}: process ended (exit "
                                 f"{self.proc.wait(5)}); log:\n{self.log_text()[-4000:]}")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def call(self, cmd, limit=None, **kw):
        """Send one command and return its answer (a dict). The answer must
        come within `limit` seconds (default: the command's own `timeout`,
        20 s unless given, + 10 s)."""
        kw["cmd"] = cmd
        limit = limit if limit is not None else kw.get("timeout", 20.0) + 10.0
        try:
            self.proc.stdin.write((json.dumps(kw) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise AgentError(f"agent {self.name}: process is gone; log:\n"
                             f"{self.log_text()[-4000:]}") from None
        return self._read_line(limit)

    def ok(self, cmd, **kw):
        """call(), failing unless ok (and, for exchanges, status 0)."""
        res = self.call(cmd, **kw)
        if not res.get("ok"):
            raise AgentError(f"agent {self.name}: {cmd} {kw}: {res}")
        if cmd in ("publish", "fetch", "invalidate", "wait") and not kw.get("nowait") \
                and res.get("status") != 0:
            raise AgentError(f"agent {self.name}: {cmd} {kw} failed: {res}; log:\n"
                             f"{self.log_text()[-3000:]}")
        return res

    # conveniences
    def set(self, payload=None, label=None, **kw):
        if isinstance(payload, (bytes, bytearray)):
            kw["payload_b64"] = base64.b64encode(payload).decode()
        elif payload is not None:
            kw["payload"] = payload
        return self.ok("set", label=label, **kw)

    def blob(self, label=None):
        return base64.b64decode(self.ok("get_local", label=label)["blob_b64"])

    def remote(self, name, label=None):
        """name's blob as loaded here, or None (-ENOENT)."""
        res = self.call("get", name=name, label=label)
        if not res["ok"]:
            return None
        return base64.b64decode(res["blob_b64"])

    def loaded(self, name):
        return self.ok("check", name=name)["loaded"]

    def wait_event(self, kind, name=None, timeout=10.0):
        return self.ok("wait_event", kind=kind, name=name, timeout=timeout)["event"]

    def kill(self):
        """SIGKILL: a crash."""
        self.killed = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(STOP_TIMEOUT)

    def close(self):
        """exit, and the process's status; a problem text or None."""
        if self.exited:
            return None
        self.exited = True
        problem = None
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b'{"cmd": "exit"}\n')
                self.proc.stdin.flush()
                self.proc.stdin.close()
            except (BrokenPipeError, ValueError):
                pass
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                problem = f"agent {self.name} did not exit within {STOP_TIMEOUT} s"
        if problem is None and not self.killed and self.proc.returncode != 0:
            problem = (f"agent {self.name} exited with {self.proc.returncode}; "
                       f"log:\n{self.log_text()[-4000:]}")
        self.proc.stdout.close()
        self._log.close()
        return problem


def start_agent(name, log_path, env=None, expect_fail=False, **config):
    """An AgentProc, or with expect_fail the creation error dict."""
    config.setdefault("listen", False)
    a = AgentProc(name, config, env, log_path)
    if expect_fail:
        if a.ready.get("ready"):
            a.close()
            raise AgentError(f"agent {name} was created; expected a failure")
        a.proc.wait(STOP_TIMEOUT)
        a.exited = True
        a.proc.stdout.close()
        a._log.close()
        res = dict(a.ready, exit=a.proc.returncode, log=a.log_text())
        return res
    if not a.ready.get("ready"):
        a.close()
        raise AgentError(f"agent {name} could not be created: {a.ready}; log:\n"
                         f"{a.log_text()}")
    return a


try:
    import pytest
except ImportError:  # the agent process does not need it
    pytest = None

if pytest is not None:
    @pytest.fixture
    def md_agent(tmp_path):
        """Factory: md_agent(name, env=None, expect_fail=False, **Agent
        kwargs) -> AgentProc (log in tmp_path). Teardown exits every agent
        and fails the test if one died unexpectedly or exited non-zero."""
        started = []

        def start(name, env=None, expect_fail=False, **config):
            log = tmp_path / f"agent-{name}-{len(started)}.log"
            a = start_agent(name, log, env=env, expect_fail=expect_fail, **config)
            if not expect_fail:
                started.append(a)
            return a

        yield start
        problems = []
        for a in started:
            if a.proc.poll() is not None and not a.killed and not a.exited:
                problems.append(f"agent {a.name} died during the test (exit "
                                f"{a.proc.returncode}); log:\n{a.log_text()[-4000:]}")
        for a in started:
            p = a.close()
            if p:
                problems.append(p)
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)


# ======================================================================
# 2. the raw NIXL P2P peer (spec sections 4 and 6)
# ======================================================================

HEADER = b"NIXLCOMM:"


def frame(cmd, arg=b""):
    """One frame: u64 LE length, then "NIXLCOMM:" CMD ARG."""
    payload = HEADER + cmd + bytes(arg)
    return u64(len(payload)) + payload


def record(tag, value):
    """nixlSerDes record: TAG, 8-byte LE length, value, '|'."""
    value = value.encode() if isinstance(value, str) else bytes(value)
    return tag + u64(len(value)) + value + b"|"


def nixl_blob(name, conns=None, sections=None):
    """A full NIXL blob (spec section 4). conns: {backend: conn bytes};
    sections: [(backend, memtype, [(addr, len, dev, metainfo), ...])]."""
    conns = {"UCX": b"\x01ucx-worker-address\x00\x7f" * 3} if conns is None else conns
    if sections is None:
        sections = [("UCX", 0, [(0x7F0000001000, 4096, 0, b"rkey-\x00\x01\x02"),
                                (0x7F0000100000, 1 << 20, 0, b"rkey-two")])]
    out = b"nixlSerDes|" + record(b"Agent", name) + record(b"Conns", u64(len(conns)))
    for backend, conn in conns.items():
        out += record(b"t", backend) + record(b"c", conn)
    out += record(b"", b"MemSection") + record(b"nixlSecElms", u64(len(sections)))
    for backend, memtype, descs in sections:
        out += record(b"bknd", backend) + record(b"nixlDList", b"nixlSDList")
        out += record(b"t", struct.pack("<I", memtype)) + record(b"n", u64(len(descs)))
        for addr, length, dev, meta in descs:
            out += record(b"", struct.pack("<QQQ", addr, length, dev) + meta)
    return out


def muster_blob(name, payload, label=None):
    """muster's blob layout (include/muster/md.h)."""
    out = b"nixlSerDes|" + record(b"Agent", name) + record(b"MusterData", payload)
    if label is not None:
        out += record(b"MusterLabel", label)
    return out


def blob_agent(blob):
    """The Agent record's name, read as a NIXL reader would (or None)."""
    if not blob.startswith(b"nixlSerDes|") or blob[11:16] != b"Agent":
        return None
    n = struct.unpack_from("<Q", blob, 16)[0]
    if len(blob) < 24 + n + 1 or blob[24 + n:25 + n] != b"|":
        return None
    return blob[24:24 + n].decode()


def recv_exact(sock, n, deadline):
    out = bytearray()
    while len(out) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"got {len(out)} of {n} bytes")
        sock.settimeout(left)
        try:
            chunk = sock.recv(min(n - len(out), 1 << 20))
        except socket.timeout:
            continue
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


class NixlClient:
    """The connecting side of NIXL's P2P exchange, on one socket."""

    def __init__(self, port, host=HOST, timeout=10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def send_raw(self, data):
        self.sock.settimeout(self.timeout)
        self.sock.sendall(data)

    def load(self, blob):
        self.send_raw(frame(b"LOAD", blob))

    def invl(self, name):
        self.send_raw(frame(b"INVL", name.encode() if isinstance(name, str) else name))

    def send(self):
        self.send_raw(frame(b"SEND"))

    def read_frame(self, timeout=None):
        """(raw frame bytes, payload)."""
        deadline = time.monotonic() + (timeout or self.timeout)
        head = recv_exact(self.sock, 8, deadline)
        n = struct.unpack("<Q", head)[0]
        payload = recv_exact(self.sock, n, deadline)
        return head + payload, payload

    def fetch(self, timeout=None):
        """SEND, then the LOAD reply's blob."""
        self.send()
        _, payload = self.read_frame(timeout)
        assert payload.startswith(HEADER + b"LOAD"), payload[:32]
        return payload[len(HEADER) + 4:]


class NixlListener:
    """NIXL's listener side, in a thread. `blob` answers SEND (an empty
    LOAD when None, as NIXL does when serialization fails); `reply`
    overrides the whole answer with raw bytes. `frames` records every
    frame received (raw bytes, length prefix included) in order; `loaded`
    is {name: blob} from LOAD, `dropped` the INVL names. With read=False
    it accepts and never reads (small receive buffer)."""

    def __init__(self, blob=None, reply=None, read=True, host=HOST):
        self.blob = blob
        self.reply = reply
        self.read = read
        self.frames = []
        self.loaded = {}
        self.dropped = []
        self.accepted = 0
        self.errors = []
        self.cond = threading.Condition()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if not read:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.bind((host, 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self._stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def address(self):
        return [HOST, self.port]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._stop = True
        try:
            self.sock.close()
        except OSError:
            pass
        self.thread.join(5)
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass

    def wait_frames(self, n, timeout=10.0):
        with self.cond:
            if not self.cond.wait_for(lambda: len(self.frames) >= n, timeout):
                raise AssertionError(f"{len(self.frames)} of {n} frames within {timeout} s")
            return list(self.frames)

    def _serve(self):
        conns = {}
        while not self._stop:
            fds = [self.sock] + (list(conns) if self.read else [])
            try:
                ready, _, _ = select.select(fds, [], [], 0.05)
            except (OSError, ValueError):
                return
            for s in ready:
                if s is self.sock:
                    try:
                        c, _ = self.sock.accept()
                    except OSError:
                        return
                    self.conns.append(c)
                    with self.cond:
                        self.accepted += 1
                        self.cond.notify_all()
                    if self.read:
                        conns[c] = b""
                    continue
                try:
                    data = s.recv(1 << 20)
                except OSError:
                    data = b""
                if not data:
                    del conns[s]
                    s.close()
                    continue
                conns[s] += data
                while len(conns[s]) >= 8:
                    n = struct.unpack_from("<Q", conns[s])[0]
                    if len(conns[s]) < 8 + n:
                        break
                    raw, conns[s] = conns[s][:8 + n], conns[s][8 + n:]
                    self._handle(s, raw)

    def _handle(self, s, raw):
        with self.cond:
            self.frames.append(raw)
            self.cond.notify_all()
        # NIXL's receiver splits the payload on every "NIXLCOMM:" and
        # dispatches each piece of at least 4 bytes (spec section 6)
        for piece in raw[8:].split(HEADER):
            if len(piece) < 4:
                continue
            cmd, arg = piece[:4], piece[4:]
            if cmd == b"LOAD":
                name = blob_agent(arg)
                with self.cond:
                    if name:
                        self.loaded[name] = arg
                    else:
                        self.errors.append(("LOAD", arg[:64]))
            elif cmd == b"INVL":
                with self.cond:
                    self.dropped.append(arg.decode(errors="replace"))
                    self.loaded.pop(arg.decode(errors="replace"), None)
            elif cmd == b"SEND":
                out = self.reply if self.reply is not None else frame(b"LOAD", self.blob or b"")
                try:
                    s.sendall(out)
                except OSError as exc:
                    self.errors.append(("SEND", str(exc)))
            else:
                self.errors.append(("unknown", piece[:32]))
            with self.cond:
                self.cond.notify_all()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "agent":
        sys.exit(_agent_main(json.loads(sys.argv[2])))
    sys.stderr.write("usage: mdpeer.py agent CONFIG_JSON\n")
    sys.exit(2)
