# SPDX-License-Identifier: MIT
"""`muster serve` against clients that are idle, greedy, gone or half-closed,
and requests that ask for what the server does not do.

* Idle sockets that reconnect whenever they are closed never lock a good
  client out: a newcomer displaces the longest-idle connection, and one
  address holds at most --max-connections-per-address.
* A client that closed while its request computes (even with bytes past
  the request) gets its generation cancelled; one that only shut its
  sending side (SHUT_WR, legal) gets its whole reply.
* A field that is not implemented is refused with a 400 naming it.
* A NUL (\\u0000) in a prompt is kept, not a cut.
* A big body is parsed, rendered and tokenized off the HTTP loop:
  /health is answered while it is, and /apply-template is linear.
"""

import json
import re
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import HOST, wait_for  # noqa: E402
from test_serve import (STORIES, bad, chat_model, get, log_lines, post,  # noqa: E402,F401
                        running, serve)


def raw_request(body, path="/v1/completions"):
    data = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


def read_reply(sock):
    """(status, body) of the final reply on sock, read to EOF; interim 1xx
    replies are skipped, as HTTP/1.1 clients must."""
    data = b""
    while True:
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    while data.startswith(b"HTTP/1.1 1"):
        data = data.split(b"\r\n\r\n", 1)[1]
    head, _, body = data.partition(b"\r\n\r\n")
    assert head, "no reply at all"
    return int(head.split()[1]), body


def tokens_done(s, status):
    line = log_lines(s, rf"POST /v1/completions {status} ")
    assert len(line) == 1, s.log()
    return int(re.search(r" \d+\+(\d+) tokens", line[0]).group(1)), line[0]


# ---------------------------------------------------------------------------
# clients that are gone, or only half-closed
# ---------------------------------------------------------------------------

LONG = {"prompt": "Once", "max_tokens": 1900, "temperature": 0}


def test_client_gone_after_one_more_byte_is_cancelled(serve):
    """A request, one byte more, and a close: the byte must not hide the
    close; the generation stops early (its log line and the counter)."""
    s = serve(STORIES, "--parallel", 1, "--ignore-eos")
    with socket.create_connection((HOST, s.port), timeout=30) as c:
        c.sendall(raw_request(LONG))
        wait_for(lambda: running(s) == 1, timeout=10, what="the request to start")
        # after the server took the request: the byte waits in its socket
        c.sendall(b"x")
    wait_for(lambda: log_lines(s, r"POST /v1/completions \d+ "), timeout=60,
             what="the request to end")
    done, line = tokens_done(s, 499)
    assert done < 1900 and "client went away" in line, line


def test_half_closed_client_gets_its_whole_reply(serve):
    """SHUT_WR after a whole request is legal HTTP: the client still
    waits for its reply, and gets all of it."""
    s = serve(STORIES, "--parallel", 1, "--ignore-eos")
    with socket.create_connection((HOST, s.port), timeout=60) as c:
        c.sendall(raw_request(dict(LONG, max_tokens=1500)))
        c.shutdown(socket.SHUT_WR)
        status, body = read_reply(c)
    assert status == 200, body[:300]
    assert json.loads(body)["usage"]["completion_tokens"] == 1500
    assert tokens_done(s, 200)[0] == 1500


# ---------------------------------------------------------------------------
# idle holders
# ---------------------------------------------------------------------------

class Holders:
    """n idle sockets (from source address src) that reconnect as soon as
    the server closes one, until stopped."""

    def __init__(self, port, n, src=HOST):
        self.port, self.src, self.stop = port, src, threading.Event()
        self.socks = [self.connect() for _ in range(n)]
        self.reconnects = 0
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def connect(self):
        s = socket.socket()
        s.bind((self.src, 0))
        s.connect((HOST, self.port))
        return s

    def run(self):
        while not self.stop.is_set():
            r, _, _ = select.select(self.socks, [], [], 0.05)
            for s in r:
                try:
                    gone = s.recv(1) == b""
                except OSError:
                    gone = True
                if gone:
                    s.close()
                    self.socks[self.socks.index(s)] = self.connect()
                    self.reconnects += 1

    def close(self):
        self.stop.set()
        self.t.join(5)
        for s in self.socks:
            s.close()


def test_idle_holders_do_not_lock_a_client_out(serve):
    """As many idle sockets as --max-connections (the default, 32), each
    reconnecting when closed: a good client is still served every time."""
    s = serve(STORIES, "--max-connections-per-address", 32)
    holders = Holders(s.port, 32)
    try:
        time.sleep(0.5)
        ok = 0
        for _ in range(30):
            try:
                st, r = post(s, "/v1/completions", {"prompt": "Once", "max_tokens": 2})
                ok += st == 200 and r["usage"]["completion_tokens"] == 2
            except OSError:
                pass
        assert ok == 30, f"served {ok} of 30"
    finally:
        holders.close()
    assert "to make room for a new one" in s.log()


def test_connections_per_address_are_bounded(serve):
    """An address past --max-connections-per-address displaces its own
    idle connections, not another address's."""
    s = serve(STORIES, "--max-connections", 8, "--max-connections-per-address", 2)
    mine = [socket.create_connection((HOST, s.port), timeout=10) for _ in range(2)]
    other = socket.socket()
    other.bind(("127.0.0.2", 0))
    other.settimeout(10)
    other.connect((HOST, s.port))
    try:
        time.sleep(0.3)
        third = socket.create_connection((HOST, s.port), timeout=10)
        mine.append(third)
        # the oldest of this address is closed; the other address keeps its
        assert mine[0].recv(1) == b"", "the first connection was not displaced"
        other.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert other.recv(4096).startswith(b"HTTP/1.1 200")
        third.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        data = third.recv(4096)
        assert json.loads(data.split(b"\r\n\r\n", 1)[1])["connections"] == 3
    finally:
        for c in mine + [other]:
            c.close()


# ---------------------------------------------------------------------------
# fields that are not implemented
# ---------------------------------------------------------------------------

REFUSED = {"grammar": "root ::= \"a\"", "json_schema": {"type": "object"}, "min_p": 0.1,
           "repetition_penalty": 1.3, "mirostat": 2, "min_tokens": 5, "ignore_eos": True,
           "stop_token_ids": [13], "typical_p": 0.5, "guided_json": {"type": "object"},
           "whatever": 1}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_fields_not_implemented_are_refused(serve, chat_model, name):
    s = serve(chat_model("qwen3"))
    for path, body in (("/v1/completions", {"prompt": "x", "max_tokens": 2}),
                       ("/v1/chat/completions", {"messages": [{"role": "user",
                                                               "content": "x"}],
                                                 "max_tokens": 2})):
        e = bad(s, path, dict(body, **{name: REFUSED[name]}), 400, name)
        assert name in e["message"] and e["type"] == "invalid_request_error", e
        # the neutral value of a known one asks for nothing: served
        neutral = {"min_p": 0, "repetition_penalty": 1, "mirostat": 0, "min_tokens": 0,
                   "ignore_eos": False, "stop_token_ids": [], "grammar": ""}
        if name in neutral:
            st, r = post(s, path, dict(body, **{name: neutral[name]}))
            assert st == 200, r
    e = bad(s, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                        "stream": True, "stream_options": {"x": 1}},
            400, "stream_options")
    e = bad(s, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x",
                                                      "weight": 2}]}, 400, "messages")
    assert "weight" in e["message"]


# ---------------------------------------------------------------------------
# a NUL in a prompt
# ---------------------------------------------------------------------------

def test_nul_in_a_prompt_is_kept(serve):
    """\\u0000 is a character of the prompt like any other: completions and
    chat contents keep what follows it; a stop string cannot hold one."""
    s = serve(STORIES, "--chat-template", "chatml")

    def prompt_tokens(path, body):
        st, r = post(s, path, dict(body, max_tokens=1))
        assert st == 200, r
        return r["usage"]["prompt_tokens"]
    cut = prompt_tokens("/v1/completions", {"prompt": "Once"})
    assert prompt_tokens("/v1/completions", {"prompt": "Once\0 upon a time"}) > cut + 3
    assert prompt_tokens("/v1/completions", {"prompt": ["Once\0 upon a time"]}) > cut + 3
    msgs = lambda c: {"messages": [{"role": "user", "content": c}]}  # noqa: E731
    assert (prompt_tokens("/v1/chat/completions", msgs("a\0 upon a time")) >
            prompt_tokens("/v1/chat/completions", msgs("a")) + 3)
    parts = [{"type": "text", "text": "a\0b"}, {"type": "text", "text": "c"}]
    st, r = post(s, "/apply-template", msgs(parts))
    assert st == 200 and r["prompt"] == ("<|im_start|>user\na\0b\nc<|im_end|>\n"
                                         "<|im_start|>assistant\n"), r
    bad(s, "/v1/completions", {"prompt": "x", "stop": "a\0"}, 400, "stop", needle="NUL")


def test_generate_prompt_file_keeps_a_nul(muster_bin, tmp_path):
    """`muster generate --prompt-file` tokenizes the file by its length,
    as the public mu_tokenizer_encode does: a NUL does not end it."""
    counts = []
    for text in (b"Once", b"Once\0 upon a time"):
        f = tmp_path / "prompt"
        f.write_bytes(text)
        proc = subprocess.run([str(muster_bin), "generate", "--model", str(STORIES),
                               "--prompt-file", str(f), "--max-tokens", "1", "--json",
                               "--threads", "1"], capture_output=True, timeout=60)
        assert proc.returncode == 0, proc.stderr.decode()
        counts.append(json.loads(proc.stdout)["prompt_tokens"])
    assert counts[1] > counts[0] + 3, counts


# ---------------------------------------------------------------------------
# big bodies
# ---------------------------------------------------------------------------

def test_health_is_answered_while_a_big_body_is_prepared(serve):
    """A 48 MB chat is parsed, rendered and tokenized off the HTTP loop:
    /health answers, saying one request is being prepared, before the big
    request's own answer comes."""
    s = serve(STORIES, "--chat-template", "chatml", "--max-body", "64M")
    body = raw_request({"messages": [{"role": "user", "content": "ab cd " * (8 << 20)}]},
                       "/v1/chat/completions")
    sent, done, reply = threading.Event(), threading.Event(), []

    def big():
        with socket.create_connection((HOST, s.port), timeout=120) as c:
            c.sendall(body)
            sent.set()
            c.shutdown(socket.SHUT_WR)
            reply.append(read_reply(c))
        done.set()
    t = threading.Thread(target=big, daemon=True)
    t.start()
    assert sent.wait(60)
    seen = []
    with socket.create_connection((HOST, s.port), timeout=120) as h:
        while not done.is_set():
            h.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while not data.endswith(b"}"):
                data += h.recv(4096)
            health = json.loads(data.split(b"\r\n\r\n", 1)[1])
            if not done.is_set():
                seen.append(health.get("preparing", 0))
    t.join(60)
    assert reply and reply[0][0] == 400, reply
    assert b"context_length_exceeded" in reply[0][1]
    assert max(seen, default=0) == 1, f"/health never answered during the preparation: {seen}"


def test_apply_template_of_a_big_body(serve):
    """A 40 MB chat renders whole, every byte where it belongs."""
    s = serve(STORIES, "--chat-template", "chatml", "--max-body", "64M")
    content = "ab \u00e9\"\\\n" * (4 << 20)
    st, r = post(s, "/apply-template", {"messages": [{"role": "user", "content": content}]})
    assert st == 200
    assert r["prompt"] == f"<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n"


def test_a_body_of_many_values_is_refused_cheaply(serve):
    """cJSON spends 64 bytes on each value: a body of millions is refused
    before it is parsed (its memory is measured in bench/hostile.sh)."""
    s = serve(STORIES, "--chat-template", "chatml", "--max-body", "64M")
    raw = (b'{"messages": [{"role": "user", "content": "x"}], "metadata": [' +
           b"0," * (4 << 20) + b"0]}")
    st, r = post(s, "/v1/chat/completions", None, raw=raw)
    assert st == 400 and "JSON values" in r["error"]["message"], r
