# SPDX-License-Identifier: MIT
"""`--metrics HOST:PORT`: what an operator's Prometheus reads.

A real Prometheus (Debian's 2.42) scrapes a running tracker, store and
stage every second; after a known workload its HTTP API must return the
series and the values that workload makes:

* tracker: 5 grants of key demo (muster_tracker_grants_total 5, 5 waits
  in muster_tracker_wait_seconds), 2 devices left free, 1 request
  waiting on another key, connections open;
* store: 3 SETs and 2 GETs (muster_store_op_seconds_count by op), 3 keys;
* stage: 4 forwards of a generated model, and the bytes they moved;
* every process: its RSS and open descriptors, and `up` for each target.

Each endpoint's text also passes `promtool check metrics` (the format's
own linter), is served as text/plain; version=0.0.4, and other paths get
404.
"""

import json
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest

from conftest import HOST, MusterProcess, wait_for
from promfix import PROMTOOL, Prometheus, http_get
import tvmpeer

GGUF = str(Path(__file__).resolve().parents[2] / "models" / "stories260K" / "stories260K.gguf")
METRICS_RE = re.compile(r"serving metrics on http://(\S+)/metrics")


def start(muster_bin, tmp_path, name, *args):
    log = tmp_path / f"{name}.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen([str(muster_bin), *args, "--metrics", f"{HOST}:0"],
                                stdin=subprocess.DEVNULL, stdout=f, stderr=f)
    p = MusterProcess(proc, log)
    p.name = f"muster {name}"
    p.metrics = p.wait_log(METRICS_RE, 1, timeout=60)[0]
    return p


@pytest.fixture
def procs(muster_bin, tmp_path):
    started = []
    yield started
    problems = [f"{p.name}: {why}" for p in started if (why := p.stop())]
    assert not problems, "\n".join(problems)


def tracker_workload(tracker_port):
    """5 grants of demo, then 2 devices left free there and one request
    left waiting on busy. Returns the sessions to keep open."""
    server = tvmpeer.TrackerSession(HOST, tracker_port)
    for i in range(7):
        assert server.put("demo", 9000 + i, f"demo:{i}") == tvmpeer.SUCCESS
    client = tvmpeer.TrackerSession(HOST, tracker_port)
    for _ in range(5):
        client.request("demo", timeout=10)
    waiter = tvmpeer.TrackerSession(HOST, tracker_port)
    waiter.send_request("busy")
    return [server, client, waiter]


def store_workload(muster_bin, addr):
    for k in ("a", "b", "c"):
        subprocess.run([str(muster_bin), "store-cli", addr, "set", k, "v" + k], check=True,
                       capture_output=True, timeout=30)
    for k in ("a", "b"):
        out = subprocess.run([str(muster_bin), "store-cli", addr, "get", k], check=True,
                             capture_output=True, text=True, timeout=30)
        assert out.stdout == f"v{k}\n"


def test_prometheus_scrapes_tracker_store_and_stage(muster_bin, tmp_path, procs):
    model, inp = tmp_path / "m", tmp_path / "in.safetensors"
    subprocess.run([str(muster_bin), "model", "gen", "--out", str(model), "--widths",
                    "64,64,64,8"], check=True, capture_output=True, timeout=60)
    subprocess.run([str(muster_bin), "model", "input", "--model", str(model), "--out",
                    str(inp)], check=True, capture_output=True, timeout=60)
    tracker = start(muster_bin, tmp_path, "tracker", "tracker", "--host", HOST, "--port", "0")
    procs.append(tracker)
    tracker.wait_bound()
    store = start(muster_bin, tmp_path, "store", "store", "--host", HOST, "--port", "0")
    procs.append(store)
    store.wait_bound()
    stage = start(muster_bin, tmp_path, "stage", "stage", "--model", str(model), "--stage",
                  "0", "--of", "1", "--host", HOST, "--port", "0")
    procs.append(stage)
    stage_addr = stage.wait_log(r"serving on (\S+:\d+)")[0]

    prom = Prometheus(tmp_path, [tracker.metrics, store.metrics, stage.metrics])
    try:
        sessions = tracker_workload(tracker.port)
        store_workload(muster_bin, f"{HOST}:{store.port}")
        subprocess.run([str(muster_bin), "run", "--stages", stage_addr, "--input", str(inp),
                        "--repeat", "4"], check=True, capture_output=True, timeout=120)

        wait_for(lambda: len(prom.query("up == 1")) == 3, timeout=30,
                 what="all three targets up in Prometheus")
        prom.wait_value('muster_tracker_grants_total{key="demo"}', 5)
        prom.wait_value('muster_tracker_wait_seconds_count{key="demo"}', 5)
        prom.wait_value('muster_tracker_free_devices{key="demo"}', 2)
        prom.wait_value('muster_tracker_queue_depth{key="busy"}', 1)
        prom.wait_value('muster_tracker_queue_depth{key="demo"}', 0)
        prom.wait_value("muster_tracker_connections_open", 3)
        prom.wait_value('muster_store_op_seconds_count{op="SET"}', 3)
        prom.wait_value('muster_store_op_seconds_count{op="GET"}', 2)
        prom.wait_value("muster_store_keys", 3)
        prom.wait_value("muster_stage_forwards_total", 4)
        prom.wait_value("muster_stage_compute_seconds_count", 4)
        sent = prom.query("muster_stage_sent_bytes_total")
        got = prom.query("muster_stage_received_bytes_total")
        assert list(sent.values())[0] > 4 * 8 * 4, sent  # 4 results of 8 floats at least
        assert list(got.values())[0] > 4 * 64 * 4, got
        rss = prom.query("process_resident_memory_bytes")
        fds = prom.query("process_open_fds")
        assert len(rss) == 3 and all(v > 1 << 20 for v in rss.values()), rss
        assert len(fds) == 3 and all(v >= 3 for v in fds.values()), fds
        for s in sessions:
            s.close()
        prom.wait_value("muster_tracker_connections_open", 0)
        prom.wait_value('muster_tracker_queue_depth{key="busy"}', 0)
    finally:
        prom.stop()


def test_endpoint_text_passes_promtool(muster_bin, tmp_path, procs):
    tracker = start(muster_bin, tmp_path, "tracker", "tracker", "--host", HOST, "--port", "0")
    procs.append(tracker)
    tracker.wait_bound()
    s = tvmpeer.TrackerSession(HOST, tracker.port)
    s.put('odd "key"\\with\nnewline', 9000, "m:1")
    status, ctype, text = http_get(f"http://{tracker.metrics}/metrics")
    s.close()
    assert status == 200
    assert ctype == "text/plain; version=0.0.4; charset=utf-8"
    assert 'muster_tracker_free_devices{key="odd \\"key\\"\\\\with\\nnewline"} 1' in text
    out = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr
    with pytest.raises(Exception) as e:
        http_get(f"http://{tracker.metrics}/other")
    assert "404" in str(e.value)


@pytest.mark.parametrize("cmd", ["tracker", "store", "server", "stage", "serve"])
def test_servers_take_metrics(muster_bin, cmd):
    out = subprocess.run([str(muster_bin), cmd, "--help"], capture_output=True, text=True,
                         timeout=30)
    assert "--metrics HOST:PORT" in out.stdout, f"muster {cmd} --help lacks --metrics"


def scrape(addr):
    """{(name, frozenset(labels)): value} of one /metrics text."""
    status, _, text = http_get(f"http://{addr}/metrics")
    assert status == 200
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$', line)
        assert m, line
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def value(addr, name, **labels):
    return scrape(addr).get((name, frozenset(labels.items())))


def test_server_counts_sessions_and_md_publishes(muster_bin, tmp_path, tracker, procs):
    server = start(muster_bin, tmp_path, "server", "server", "--host", HOST, "--port", "0",
                   "--tracker", f"{HOST}:{tracker.port}", "--key", "mdev")
    procs.append(server)
    server.wait_log(r"Offering matchkey|Bind to")
    wait_for(lambda: value(server.metrics, "muster_md_publishes_total", backend="P2P") == 1,
             timeout=20, what="the device's capabilities published once (md, P2P)")
    assert value(server.metrics, "muster_server_sessions_total") == 0
    out = subprocess.run([str(muster_bin), "request", "mdev", "--tracker",
                          f"{HOST}:{tracker.port}", "--timeout", "10"], input=b"hello",
                         capture_output=True, timeout=30)
    assert out.returncode == 0 and out.stdout == b"hello", out.stderr
    wait_for(lambda: value(server.metrics, "muster_server_session_seconds_count") == 1,
             timeout=20, what="one session counted")
    assert value(server.metrics, "muster_server_sessions_total") == 1
    assert value(server.metrics, "muster_server_session_active") == 0


def test_serve_counts_requests_and_tokens(muster_bin, tmp_path, procs):
    gguf = GGUF
    serve = start(muster_bin, tmp_path, "serve", "serve", "--model", gguf, "--listen",
                  f"{HOST}:0")
    procs.append(serve)
    listen = serve.wait_log(r"listening on http://(\S+) ", timeout=60)[0]
    assert value(serve.metrics, "muster_serve_completion_tokens_total") == 0
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://{listen}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        usage = json.loads(r.read())["usage"]
    assert usage["completion_tokens"] == 5
    wait_for(lambda: value(serve.metrics, "muster_serve_requests_total", status="200") == 1,
             timeout=10, what="the request counted")
    assert value(serve.metrics, "muster_serve_completion_tokens_total") == 5
    assert value(serve.metrics, "muster_serve_prompt_tokens_total") == usage["prompt_tokens"]
    assert value(serve.metrics, "muster_serve_request_seconds_count") == 1
    assert value(serve.metrics, "muster_serve_requests_running") == 0


def test_llm_stage_counts_tokens_and_kv(muster_bin, tmp_path, procs):
    gguf = GGUF
    stage = start(muster_bin, tmp_path, "stage", "stage", "--model", gguf, "--stage", "0",
                  "--of", "1", "--host", HOST, "--port", "0", "--kv-mem", "64M")
    procs.append(stage)
    addr = stage.wait_log(r"serving on (\S+:\d+)", timeout=60)[0]
    out = subprocess.run([str(muster_bin), "generate", "--model", gguf, "--stages", addr,
                          "--prompt", "Once upon a time", "--max-tokens", "6",
                          "--temperature", "0", "--json"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    tokens = value(stage.metrics, "muster_stage_tokens_total")
    # the prompt's positions, then one per generated token but the last
    assert tokens is not None and tokens >= 6, tokens
    assert value(stage.metrics, "muster_stage_forwards_total") >= 5
    wait_for(lambda: value(stage.metrics, "muster_stage_sequences_open") == 0, timeout=10,
             what="the sequence closed")
    assert value(stage.metrics, "muster_stage_kv_bytes") == 0
    assert value(stage.metrics, "muster_stage_messages_total", type="SEQ_OPEN") == 1


def test_top_once_shows_devices_queues_and_stage_load(muster_bin, tmp_path, procs):
    """`muster top --once`: one frame of the tracker's keys (devices,
    free, waiting) and each endpoint's role and load."""
    model, inp = tmp_path / "m", tmp_path / "in.safetensors"
    subprocess.run([str(muster_bin), "model", "gen", "--out", str(model), "--widths",
                    "32,32,8"], check=True, capture_output=True, timeout=60)
    subprocess.run([str(muster_bin), "model", "input", "--model", str(model), "--out",
                    str(inp)], check=True, capture_output=True, timeout=60)
    tracker = start(muster_bin, tmp_path, "tracker", "tracker", "--host", HOST, "--port", "0")
    procs.append(tracker)
    tracker.wait_bound()
    server = start(muster_bin, tmp_path, "server", "server", "--host", HOST, "--port", "0",
                   "--tracker", f"{HOST}:{tracker.port}", "--key", "tdev")
    procs.append(server)
    server.wait_log(r"Offering matchkey")
    stage = start(muster_bin, tmp_path, "stage", "stage", "--model", str(model), "--stage",
                  "0", "--of", "1", "--host", HOST, "--port", "0")
    procs.append(stage)
    stage_addr = stage.wait_log(r"serving on (\S+:\d+)")[0]
    subprocess.run([str(muster_bin), "run", "--stages", stage_addr, "--input", str(inp),
                    "--repeat", "3"], check=True, capture_output=True, timeout=120)
    waiter = tvmpeer.TrackerSession(HOST, tracker.port)
    waiter.send_request("busy")
    try:
        wait_for(lambda: value(tracker.metrics, "muster_tracker_queue_depth", key="busy") == 1,
                 timeout=10, what="the request queued")
        out = subprocess.run([str(muster_bin), "top", "--tracker", f"{HOST}:{tracker.port}",
                              "--metrics", f"{tracker.metrics},http://{stage.metrics}/metrics,"
                              f"{server.metrics}", "--once"], capture_output=True, text=True,
                             timeout=30)
    finally:
        waiter.close()
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "\033" not in text, "--once must not move the cursor"
    assert re.search(r"^\s+tdev\s+1\s+1\s+0$", text, re.M), text
    assert re.search(r"^\s+busy\s+0\s+0\s+1$", text, re.M), text
    assert "1 server registered" in text
    assert re.search(rf"^{re.escape(tracker.metrics)}\s+tracker\s+\d+\s+.*"
                     r"0 grants, 1 waiting$", text, re.M), text
    assert re.search(r"\sstage\s+\d+\s+\S+ \S+\s+\d+\s+3 fwd 0 tok", text), text
    assert re.search(r"\sserver\s+.*0 sessions$", text, re.M), text


def test_top_once_fails_on_a_dead_endpoint(muster_bin):
    import socket
    s = socket.socket()
    s.bind((HOST, 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    out = subprocess.run([str(muster_bin), "top", "--metrics", f"{HOST}:{port}", "--once"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert "down" in out.stdout
