# SPDX-License-Identifier: MIT
"""What a log shipper and logrotate rely on from muster's servers:

* every line carries a timestamp, a level and the component that logged it;
* `--log-format json` gives one JSON object per line (time, level,
  component, msg) and nothing else on that stream;
* `--log-file PATH` appends there, and SIGHUP reopens the path, so after
  logrotate renames the file the next lines go to a new one and none is
  lost; SIGHUP never stops a server, with or without a log file;
* the long-running commands all take the options;
* what a peer sends cannot forge a line: a request path holding %0a (or
  a control, or bytes that are not UTF-8) is logged escaped, on its own
  line, in text and in JSON.
"""

import json
import os
import re
import signal
import socket
import subprocess
import time

import pytest

from conftest import HOST, REPO, MusterProcess, wait_for
import tvmpeer

STORIES = REPO / "models" / "stories260K" / "stories260K.gguf"
FORGED = "2026-01-01 00:00:00.000 INFO serve: admin logged in"

TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (ERROR|WARNING|INFO|DEBUG) "
                       r"([a-z]+): \S")
JSON_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def start_tracker(muster_bin, tmp_path, *extra, log=None):
    out = tmp_path / "stdout.txt"
    if log is not None:
        log.touch()  # the tracker appends; the wait below reads it at once
    args = [str(muster_bin), "tracker", "--host", HOST, "--port", "0", *extra]
    with open(out, "wb") as f:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=f,
                                stderr=f if log is None else subprocess.DEVNULL)
    p = MusterProcess(proc, log if log is not None else out)
    p.name = "muster tracker"
    p.wait_bound()
    return p


def ping(port):
    with tvmpeer.TrackerSession(HOST, port) as s:
        s.ping()


def json_lines(path):
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines]


def stop(p):
    problem = p.stop()
    assert problem is None, problem


def test_text_lines_have_time_level_component(muster_bin, tmp_path):
    p = start_tracker(muster_bin, tmp_path)
    try:
        ping(p.port)
        p.wait_log(r"End session")
    finally:
        stop(p)
    lines = p.log_text().splitlines()
    assert len(lines) >= 4, lines
    for line in lines:
        m = TEXT_LINE.match(line)
        assert m, f"not TIME LEVEL component: message: {line!r}"
        assert m.group(2) == "tracker", line


def test_json_log_file_and_sighup_reopen(muster_bin, tmp_path):
    log = tmp_path / "tracker.log"
    p = start_tracker(muster_bin, tmp_path, "--log-format", "json", "--log-file", str(log),
                      log=log)
    try:
        ping(p.port)
        p.wait_log(r"End session")
        # logrotate: rename, then SIGHUP; the old file keeps what it had
        rotated = tmp_path / "tracker.log.1"
        os.rename(log, rotated)
        before = rotated.read_text()
        p.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: log.exists() and "reopened" in log.read_text(), timeout=10,
                 what="the reopened log file")
        ping(p.port)
        wait_for(lambda: "End session" in log.read_text(), timeout=10,
                 what="a session logged in the new file")
        assert rotated.read_text().startswith(before)
        assert p.proc.poll() is None, "SIGHUP stopped the tracker"
    finally:
        stop(p)
    old, new = json_lines(rotated), json_lines(log)
    for rec in old + new:
        assert set(rec) == {"time", "level", "component", "msg"}, rec
        assert JSON_TIME.match(rec["time"]), rec
        assert rec["level"] in ("error", "warning", "info", "debug"), rec
        assert rec["component"] in ("tracker", "log"), rec
    assert any(r["msg"].startswith("Bind to ") for r in old)
    assert any("New session" in r["msg"] for r in old)
    assert not any("New session" in r["msg"] for r in new[:1])
    assert any("New session" in r["msg"] for r in new)
    assert (tmp_path / "stdout.txt").read_text() == ""


def test_sighup_without_log_file_keeps_serving(muster_bin, tmp_path):
    p = start_tracker(muster_bin, tmp_path)
    try:
        p.proc.send_signal(signal.SIGHUP)
        p.wait_log(r"SIGHUP: logging to stderr")
        ping(p.port)
        assert p.proc.poll() is None
    finally:
        stop(p)


def test_bad_log_format_is_refused(muster_bin, tmp_path):
    out = subprocess.run([str(muster_bin), "tracker", "--port", "0", "--log-format", "xml"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert "--log-format is text or json" in out.stderr


@pytest.mark.parametrize("cmd", ["tracker", "store", "server", "stage", "serve"])
def test_servers_take_the_log_options(muster_bin, cmd):
    out = subprocess.run([str(muster_bin), cmd, "--help"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    for opt in ("--log-format", "--log-file"):
        assert opt in out.stdout, f"muster {cmd} --help lacks {opt}"


def raw_get(port, target):
    """One request with `target` sent as it is (no client re-encodes it)."""
    with socket.create_connection((HOST, port), timeout=30) as c:
        c.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        while c.recv(65536):
            pass


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_serve_request_path_cannot_forge_a_line(muster_bin, tmp_path, fmt):
    """An unauthenticated client's %0a, %0d, %1b and a byte that is not
    UTF-8 in the path: the log has one line per request, the path's bytes
    escaped in it, and no line the client wrote."""
    log, out = tmp_path / "serve.log", tmp_path / "stdout.txt"
    log.touch()
    with open(out, "wb") as f:
        proc = subprocess.Popen([str(muster_bin), "serve", "--model", str(STORIES), "--listen",
                                 f"{HOST}:0", "--log-format", fmt, "--log-file", str(log)],
                                stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.DEVNULL)
    p = MusterProcess(proc, log)
    p.name = "muster serve"
    try:
        wait_for(lambda: re.search(r"listening on http://\S+:(\d+)", out.read_text()) or
                 proc.poll() is not None, timeout=60, what="muster serve to listen")
        port = int(re.search(r"listening on http://\S+:(\d+)", out.read_text()).group(1))
        forged = FORGED.replace(" ", "%20").encode()
        raw_get(port, b"/x%0a" + forged + b"%0d%1b[2J%ff")
        raw_get(port, b"/v1/models%0aforged%0d%0aline")  # what does not fit is cut
        p.wait_log(r"no route", count=2)
    finally:
        stop(p)
    raw = log.read_bytes()
    text = raw.decode("utf-8")  # well-formed UTF-8 throughout, %ff included
    lines = text.splitlines()
    assert not any(line.startswith(FORGED[:10]) and FORGED in line[:len(FORGED)]
                   for line in lines), text
    assert b"\x1b" not in raw and b"\r" not in raw, raw
    if fmt == "text":
        for line in lines:
            assert TEXT_LINE.match(line), f"not TIME LEVEL component: message: {line!r}"
        assert "GET /x\\n" + FORGED + "\\r\\x1b[2J\\xff" in text, text
        assert "GET /v1/models\\nforged\\r\\nline" in text, text
    else:
        msgs = [json.loads(line)["msg"] for line in lines]
        assert any(m.startswith("GET /x\n" + FORGED + "\r\x1b[2J\\xff") for m in msgs), msgs
        assert any(m.startswith("GET /v1/models\nforged\r\nline") for m in msgs), msgs
