# SPDX-License-Identifier: MIT
"""Debian's real Prometheus (package prometheus, 2.42) for the tests:
`Prometheus(tmp, targets)` writes a scrape configuration with a short
interval, starts `prometheus` on a loopback port the kernel picks (read
back from /proc, since Prometheus does not print it), with its storage in
a temporary directory, and `query()` asks its HTTP API. `stop()` ends it
with SIGTERM. A missing binary fails the test: scripts/deps.sh test
installs it."""

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"


def listening_ports(pid):
    """TCP ports process pid listens on (IPv4 and IPv6 loopback or any)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # LISTEN
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read().decode()


class Prometheus:
    def __init__(self, tmp_path, targets, job="muster", interval="1s"):
        if not os.access(PROMETHEUS, os.X_OK):
            pytest.fail(f"{PROMETHEUS} is missing: run scripts/deps.sh test "
                        "(Debian package prometheus)", pytrace=False)
        self.dir = tmp_path / "prometheus"
        self.dir.mkdir()
        conf = self.dir / "prometheus.yml"
        lines = ["global:", f"  scrape_interval: {interval}", f"  evaluation_interval: {interval}",
                 "scrape_configs:", f"  - job_name: {job}", "    static_configs:",
                 "      - targets:"]
        lines += [f"          - '{t}'" for t in targets]
        conf.write_text("\n".join(lines) + "\n")
        self.log_path = self.dir / "prometheus.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [PROMETHEUS, f"--config.file={conf}", f"--storage.tsdb.path={self.dir / 'data'}",
                 "--web.listen-address=127.0.0.1:0", "--storage.tsdb.retention.time=1h",
                 "--log.level=warn"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        self.port = None
        deadline = time.monotonic() + 60
        while self.port is None:
            if self.proc.poll() is not None:
                pytest.fail(f"prometheus exited with {self.proc.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"prometheus did not listen within 60 s:\n{self.log()}")
            ports = listening_ports(self.proc.pid)
            for port in ports:
                try:
                    if http_get(f"http://127.0.0.1:{port}/-/ready", 2)[0] == 200:
                        self.port = port
                except OSError:
                    pass
            time.sleep(0.2)

    def log(self):
        return self.log_path.read_text(errors="replace")

    def api(self, path, **params):
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        status, _, body = http_get(url)
        data = json.loads(body)
        assert status == 200 and data["status"] == "success", body
        return data["data"]

    def query(self, expr):
        """{labels (but __name__ and job) as a frozenset: float value}."""
        out = {}
        for r in self.api("query", query=expr)["result"]:
            labels = frozenset((k, v) for k, v in r["metric"].items()
                               if k not in ("__name__", "job"))
            out[labels] = float(r["value"][1])
        return out

    def wait_value(self, expr, want, timeout=30, what=None):
        """Wait until the query's single result equals want."""
        deadline = time.monotonic() + timeout
        got = None
        while time.monotonic() < deadline:
            got = self.query(expr)
            if len(got) == 1 and list(got.values())[0] == want:
                return
            time.sleep(0.3)
        pytest.fail(f"{what or expr}: Prometheus has {got}, want {want}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir / "data", ignore_errors=True)
