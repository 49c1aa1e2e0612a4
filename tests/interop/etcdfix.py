# SPDX-License-Identifier: MIT
"""Real etcd 3.4 members for the md interop tests (tests/interop/test_md_*).
Kept out of conftest.py; a test module imports what it uses:

    from etcdfix import etcd, etcd_cluster, etcd_factory, etcdctl

* `etcd_factory`: factory `etcd_factory(size=1, client_ports=None)`
  returning an `EtcdCluster`
  of `size` members on free loopback ports with temporary data dirs, each
  started with --heartbeat-interval 100 --election-timeout 1000 (fast
  elections) and waited for (bounded) until `GET /health` says true.
* `etcd`: one member (an EtcdCluster of size 1).
* `etcd_cluster`: three members.
* Teardown SIGKILLs every member still running and removes the data dirs.
* `EtcdCluster.leader()` asks each live member `POST /v3/maintenance/status`
  and returns the member whose header.member_id equals its "leader";
  `kill_leader()` SIGKILLs it; `restart(member)` starts a member again on
  its old data dir with --initial-cluster-state existing;
  `move_leader(member)` makes a member the leader (etcdctl move-leader).
* `etcdctl(endpoints, *args, stdin=None)`: run etcdctl (API v3) bounded
  by a timeout; `get_all(endpoints, prefix)` returns {key: value} as bytes
  (from `-w json`, so binary keys and values are exact); `put_bytes()`
  writes a binary value through etcdctl's stdin.

A missing etcd or etcdctl binary FAILS the test (STYLE.md rule 12).
Everything here speaks loopback only.
"""

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

HOST = "127.0.0.1"
ETCD = os.environ.get("ETCD_BIN", "/usr/bin/etcd")
ETCDCTL = os.environ.get("ETCDCTL_BIN", "/usr/bin/etcdctl")
STARTUP_TIMEOUT = 20.0   # a member (or the whole cluster) becomes healthy
HTTP_TIMEOUT = 2.0       # each /health or /v3 call this module makes
ETCDCTL_TIMEOUT = 15.0   # each etcdctl run


def require_etcd():
    for path in (ETCD, ETCDCTL):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            pytest.fail(f"{path} not found: install Debian's etcd-server and "
                        "etcd-client (etcd 3.4)", pytrace=False)


def free_ports(n):
    """n distinct loopback ports that were free a moment ago (held open
    together while choosing, so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def http_json(url, body=None, timeout=HTTP_TIMEOUT):
    """(status, parsed JSON or None). POST when `body` is given. Network
    errors give (0, None)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST" if data else "GET",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as err:
        raw, status = err.read(), err.code
    except (OSError, urllib.error.URLError):
        return 0, None
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, None


class EtcdMember:
    def __init__(self, cluster, index, client_port, peer_port):
        self.cluster = cluster
        self.index = index
        self.name = f"m{index}"
        self.client_port = client_port
        self.peer_port = peer_port
        self.data_dir = cluster.root / f"{self.name}.etcd"
        self.log_path = cluster.root / f"{self.name}.log"
        self.proc = None
        self.starts = 0

    @property
    def url(self):
        return f"http://{HOST}:{self.client_port}"

    @property
    def peer_url(self):
        return f"http://{HOST}:{self.peer_port}"

    @property
    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log_text(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def start(self, state="new"):
        args = [ETCD, "--name", self.name, "--data-dir", str(self.data_dir),
                "--listen-client-urls", self.url,
                "--advertise-client-urls", self.url,
                "--listen-peer-urls", self.peer_url,
                "--initial-advertise-peer-urls", self.peer_url,
                "--initial-cluster", self.cluster.initial_cluster,
                "--initial-cluster-state", state,
                "--initial-cluster-token", self.cluster.token,
                "--heartbeat-interval", "100", "--election-timeout", "1000",
                "--logger", "zap", "--log-level", "warn"]
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log,
                                         start_new_session=True)
        finally:
            log.close()
        self.starts += 1

    def healthy(self):
        status, body = http_json(self.url + "/health")
        return status == 200 and isinstance(body, dict) and body.get("health") == "true"

    def status(self):
        """maintenance/status: (member_id, leader_id) as ints, or None."""
        code, body = http_json(self.url + "/v3/maintenance/status", {})
        if code != 200 or not isinstance(body, dict):
            return None
        try:
            return int(body["header"]["member_id"]), int(body["leader"])
        except (KeyError, TypeError, ValueError):
            return None

    def member_id(self):
        st = self.status()
        return None if st is None else st[0]

    def kill(self):
        """SIGKILL (a crash); waits for the process to be gone."""
        if self.alive:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(10)


class EtcdCluster:
    """`size` etcd members on loopback, started together."""

    def __init__(self, size, root, client_ports=None):
        self.root = Path(root)
        self.token = f"muster-{os.getpid()}-{int(time.monotonic() * 1000)}"
        ports = free_ports(2 * size)
        while client_ports is not None and set(ports) & set(client_ports):
            ports = free_ports(2 * size)
        if client_ports is not None:
            ports[0::2] = client_ports
        self.members = [EtcdMember(self, i, ports[2 * i], ports[2 * i + 1])
                        for i in range(size)]
        self.initial_cluster = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        self._ids = {}

    @property
    def endpoints(self):
        """Every member, comma-separated (how the agents take them)."""
        return ",".join(m.url for m in self.members)

    @property
    def url(self):
        return self.members[0].url

    @property
    def port(self):
        return self.members[0].client_port

    def live(self):
        return [m for m in self.members if m.alive]

    def start(self):
        for m in self.members:
            m.start("new")
        self.wait_healthy()
        for m in self.members:
            self._ids[m.index] = m.member_id()

    def wait_healthy(self, members=None, timeout=STARTUP_TIMEOUT):
        """Every given (default: live) member answers /health true."""
        members = self.live() if members is None else members
        deadline = time.monotonic() + timeout
        while True:
            dead = [m for m in members if not m.alive]
            if dead:
                pytest.fail(f"etcd {dead[0].name} exited with "
                            f"{dead[0].proc.returncode}; log:\n{dead[0].log_text()[-4000:]}")
            if all(m.healthy() for m in members):
                return
            if time.monotonic() > deadline:
                pytest.fail(f"etcd members not healthy within {timeout} s; logs:\n"
                            + "\n".join(f"--- {m.name}\n{m.log_text()[-2000:]}"
                                        for m in members))
            time.sleep(0.05)

    def leader(self, timeout=10.0):
        """The member that is leader now (asked of every live member until
        one of them is it); fails after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            for m in self.live():
                st = m.status()
                if st is not None and st[0] == st[1]:
                    return m
            if time.monotonic() > deadline:
                pytest.fail(f"no etcd leader found within {timeout} s")
            time.sleep(0.05)

    def kill_leader(self):
        m = self.leader()
        m.kill()
        return m

    def move_leader(self, member, timeout=10.0):
        """Make `member` the leader (no-op if it is already)."""
        deadline = time.monotonic() + timeout
        while self.leader() is not member:
            target = self._ids.get(member.index) or member.member_id()
            etcdctl(self.leader().url, "move-leader", f"{target:x}", check=False)
            if time.monotonic() > deadline:
                pytest.fail(f"could not move the etcd leadership to {member.name}")
            time.sleep(0.1)

    def restart(self, member):
        """Start a killed member again on its data dir; it rejoins."""
        assert not member.alive, f"{member.name} is still running"
        member.start("existing")
        self.wait_healthy([member])

    def teardown(self):
        for m in self.members:
            if m.proc is not None and m.proc.poll() is None:
                m.proc.send_signal(signal.SIGKILL)
        for m in self.members:
            if m.proc is not None:
                try:
                    m.proc.wait(10)
                except subprocess.TimeoutExpired:
                    pass
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def etcd_factory():
    require_etcd()
    started = []

    def start(size=1, client_ports=None):
        root = tempfile.mkdtemp(prefix="muster-etcd-")
        cluster = EtcdCluster(size, root, client_ports)
        started.append(cluster)
        cluster.start()
        return cluster

    yield start
    for cluster in started:
        cluster.teardown()


@pytest.fixture
def etcd(etcd_factory):
    return etcd_factory(1)


@pytest.fixture
def etcd_cluster(etcd_factory):
    return etcd_factory(3)


# ---- etcdctl ----

def _eps(endpoints):
    if not isinstance(endpoints, str):
        endpoints = endpoints.endpoints
    return endpoints


def etcdctl(endpoints, *args, stdin=None, check=True, timeout=ETCDCTL_TIMEOUT):
    """Run `etcdctl --endpoints=... ARGS` (API v3); the CompletedProcess
    (bytes). `endpoints`: a string or an EtcdCluster. Fails the test on a
    non-zero exit when `check`."""
    require_etcd()
    env = dict(os.environ, ETCDCTL_API="3")
    cmd = [ETCDCTL, f"--endpoints={_eps(endpoints)}", "--dial-timeout=3s",
           "--command-timeout=5s", *[str(a) for a in args]]
    try:
        done = subprocess.run(cmd, input=stdin, capture_output=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(cmd)} did not finish within {timeout} s")
    if check and done.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {done.returncode}: "
                    f"{done.stderr.decode(errors='replace')}")
    return done


def keys_only(endpoints, prefix=""):
    """The keys `etcdctl get --prefix PREFIX --keys-only` prints (text
    output: one key per line, blank lines between)."""
    out = etcdctl(endpoints, "get", "--prefix", prefix, "--keys-only").stdout
    return [line for line in out.decode(errors="surrogateescape").split("\n") if line]


def get_all(endpoints, prefix=""):
    """{key: value} (bytes) of every key under prefix, exactly (JSON output
    carries base64)."""
    out = etcdctl(endpoints, "get", "--prefix", prefix, "-w", "json").stdout
    doc = json.loads(out)
    return {base64.b64decode(kv["key"]): base64.b64decode(kv.get("value", ""))
            for kv in doc.get("kvs", [])}


def get_kvs(endpoints, key):
    """The raw kv objects (with lease, versions) under exactly `key`."""
    out = etcdctl(endpoints, "get", key, "-w", "json").stdout
    doc = json.loads(out)
    for kv in doc.get("kvs", []):
        kv["key"] = base64.b64decode(kv["key"])
        kv["value"] = base64.b64decode(kv.get("value", ""))
    return doc.get("kvs", [])


def put_bytes(endpoints, key, value):
    """Put a binary value (through etcdctl's stdin, which it reads whole)."""
    if not value:
        etcdctl(endpoints, "put", key, "")
    else:
        etcdctl(endpoints, "put", key, stdin=bytes(value))
