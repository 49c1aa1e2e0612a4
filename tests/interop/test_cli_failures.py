# SPDX-License-Identifier: MIT
"""Every `muster` subcommand that exits non-zero says why on stderr.

Walks the failure paths of each subcommand a user can hit: bad flags and
values, missing and unreadable files, unreachable peers, peers that speak
something else, ports in use, and the P2P fetch answered by another agent.
Each case asserts a non-zero exit, nothing half-done on stdout where the
command prints its result there, and a stderr that names the problem (a
regex per case: the flag, value, path or peer at fault, or what is wrong).

A second sweep reads each subcommand's --help and, for every option it
lists, gives it no value or (for a numeric one) a word: each must be
refused at once with the option named.
"""

import os
import re
import shutil
import socket
import subprocess
import threading
import time

import pytest

from conftest import HOST, REPO
from mdpeer import NixlListener, nixl_blob
from storefix import muster_store  # noqa: F401

RUN_TIMEOUT = float(os.environ.get("CLI_RUN_TIMEOUT", "30"))

GGUF = REPO / "models" / "stories260K" / "stories260K.gguf"
TOK = REPO / "models" / "stories260K" / "tok512.bin"

# Each subcommand, as the words before its options: with what it requires,
# so that an option's value is what gets refused.
COMMANDS = [["tracker"], ["query"], ["server"], ["request", "k"], ["store"],
            ["store-cli", f"{HOST}:9", "get", "k"], ["md", "fetch", "A"],
            ["model", "gen"], ["model", "input"], ["plan"], ["stage"], ["run"],
            ["generate", "--model", GGUF, "--max-tokens", "1"],
            ["serve", "--model", GGUF, "--listen", f"{HOST}:0"],
            ["tokenize", "--llama2c", TOK, "--vocab", "512", "--text", "hi"],
            ["stage", "--model", GGUF, "--stage", "0", "--of", "1"],
            ["demo"], ["bench", "tracker"], ["bench", "store"], ["bench", "md"],
            ["bench", "pipeline"], ["bench", "kern"]]

# Metavars of options that take a number (or a size): a word is refused.
NUMERIC = {"PORT", "SECONDS", "BYTES", "N", "B", "S", "I", "R", "M", "P",
           "PID", "L", "W", "T", "K", "MiB", "SIZE"}


def run(muster_bin, args, env=None, timeout=RUN_TIMEOUT):
    full_env = dict(os.environ)
    for var in ("TVM_TRACKER_HOST", "TVM_TRACKER_PORT", "NIXL_ETCD_ENDPOINTS",
                "NIXL_TCPSTORE_ENDPOINT", "MUSTER_ETCD_ENDPOINTS",
                "MUSTER_TCPSTORE_ENDPOINT"):
        full_env.pop(var, None)
    full_env.update(env or {})
    try:
        return subprocess.run([str(muster_bin), *[str(a) for a in args]],
                              capture_output=True, text=True, timeout=timeout,
                              env=full_env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"muster {' '.join(map(str, args))} did not exit within "
                    f"{timeout} s (stderr: {exc.stderr!r})")


def assert_says_why(done, why, args, code=None):
    """Non-zero exit (code, when given), and stderr matches `why`."""
    what = f"muster {' '.join(map(str, args))}"
    assert done.returncode > 0, (f"{what}: exit {done.returncode}; "
                                 f"stderr {done.stderr!r}")
    if code is not None:
        assert done.returncode == code, (what, done.returncode, done.stderr)
    assert done.stderr.strip(), f"{what}: exit {done.returncode} and no word on stderr"
    # under the ASan build a failure path must not leak or touch bad memory
    assert "Sanitizer" not in done.stderr, f"{what}:\n{done.stderr}"
    # a name that was never set (printf's "(null)") names nothing
    assert "(null)" not in done.stderr, f"{what}:\n{done.stderr}"
    assert re.search(why, done.stderr), (f"{what}: stderr does not say /{why}/: "
                                         f"{done.stderr!r}")


class Garbage:
    """A TCP peer that answers every connection with bytes of no protocol
    and closes it."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind((HOST, 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n" + b"\xff" * 64)
                except OSError:
                    pass

    def close(self):
        self.stop = True
        self.sock.close()


@pytest.fixture(scope="module")
def ctx(muster_bin, tmp_path_factory):
    """What the cases refer to: {closed} a port that refuses connections,
    {busy} one with a listener (cannot be bound), {garbage} a peer speaking
    no protocol, {nixl} a NIXL P2P listener whose agent is "X", {model} and
    {input} a small model and its input, {junk} a file that is none of
    those, {tmp} a scratch directory, {missing} a path that does not
    exist, {unwritable} one that cannot be created, {gguf} and {tok} the
    project's small LLM and its llama2.c tokenizer."""
    tmp = tmp_path_factory.mktemp("clifail")
    closed = socket.socket()  # bound, never listening: connects are refused
    closed.bind((HOST, 0))
    busy = socket.socket()
    busy.bind((HOST, 0))
    busy.listen(1)
    garbage = Garbage()
    nixl = NixlListener(blob=nixl_blob("X"))
    model = tmp / "model"
    for args in (["model", "gen", "--out", model, "--widths", "8,8,8"],
                 ["model", "input", "--model", model, "--out", tmp / "in.safetensors"]):
        done = run(muster_bin, args)
        assert done.returncode == 0, done
    (tmp / "junk").write_bytes(b"\x00not a model, a plan or tensors\xff" * 8)
    (tmp / "meta.json").write_text('{"tokenizer.ggml.model": "frob", "tokenizer.ggml.tokens": '
                                   '["a", "b"]}')
    (tmp / "tok").mkdir()
    (tmp / "tok" / "tokenizer.json").write_text('{"model": {"type": "BPE", "vocab": {"a": 0}, '
                                                '"merges": []}, "normalizer": {"type": "Frob"}}')
    yield {"closed": closed.getsockname()[1], "busy": busy.getsockname()[1],
           "garbage": garbage.port, "nixl": nixl.port, "model": model,
           "input": tmp / "in.safetensors", "junk": tmp / "junk", "tmp": tmp,
           "missing": tmp / "does-not-exist",
           "unwritable": "/proc/muster-cannot-write-here/x", "gguf": GGUF, "tok": TOK,
           "gguf_meta": tmp / "meta.json"}
    nixl.close()
    garbage.close()
    busy.close()
    closed.close()


H = HOST
# (id, args, what stderr must say, exit code or None). {names} come from ctx.
CASES = [
    # the command itself
    ("no-command", [], r"usage: muster", 2),
    ("unknown-command", ["frobnicate"], r"unknown command 'frobnicate'", 2),
    # tracker
    ("tracker-extra-arg", ["tracker", "extra"], r"too many arguments", 2),
    ("tracker-max-frame", ["tracker", "--max-frame", "0"], r"--max-frame 0 is not a size", 2),
    ("tracker-io-timeout", ["tracker", "--io-timeout", "-1"], r"--io-timeout", 2),
    ("tracker-timeout-alias", ["tracker", "--timeout", "x"], r"--timeout wants a number", 2),
    ("tracker-port-in-use", ["tracker", "--host", H, "--port", "{busy}",
                             "--port-end", "{busy+1}"], r"cannot bind.*{busy}", 1),
    ("tracker-bad-host", ["tracker", "--host", "no.such.host.invalid", "--port", "0"],
     r"no\.such\.host\.invalid", 1),
    ("tracker-port-range", ["tracker", "--port", "70000"], r"70000", None),
    # query
    ("query-closed", ["query", "--host", H, "--port", "{closed}"],
     r"cannot reach a tracker at 127\.0\.0\.1:{closed}", 1),
    ("query-not-a-tracker", ["query", "--host", H, "--port", "{garbage}", "--timeout", "5"],
     r"127\.0\.0\.1:{garbage}.*it is an HTTP server \(it answered \"HTTP/1\.0 400 Bad "
     r"Request\"\), not a TVM RPC tracker", 1),
    ("query-bad-port", ["query", "--port", "70000"], r"--port 70000 is not a port", 2),
    ("query-bad-env-port", ["query"], r"TVM_TRACKER_PORT=abc", 2, {"TVM_TRACKER_PORT": "abc"}),
    ("query-unknown-host", ["query", "--host", "no.such.host.invalid", "--port", "9",
                            "--timeout", "5"], r"no\.such\.host\.invalid", 1),
    # server
    ("server-bad-tracker", ["server", "--tracker", "nocolon", "--key", "k"],
     r"--tracker nocolon is not HOST:PORT", 2),
    ("server-tracker-without-key", ["server", "--tracker", f"{H}:9"], r"needs --key", 2),
    ("server-bad-mem", ["server", "--mem", "lots"], r"--mem lots is not a size", 2),
    ("server-bad-threads", ["server", "--threads", "0"], r"--threads", 2),
    ("server-bad-md-port", ["server", "--md-port", "70000"], r"--md-port", 2),
    ("server-missing-model", ["server", "--host", H, "--port", "0", "--model", "{missing}"],
     r"does-not-exist", 1),
    ("server-port-in-use", ["server", "--host", H, "--port", "{busy}", "--port-end",
                            "{busy+1}"], r"cannot bind.*{busy}", 1),
    # request
    ("request-no-key", ["request"], r"missing arguments", 2),
    ("request-bad-tracker", ["request", "k", "--tracker", "nocolon"],
     r"--tracker nocolon is not HOST:PORT", 2),
    ("request-closed", ["request", "k", "--tracker", f"{H}:{{closed}}", "--timeout", "2"],
     r"no session for key k via tracker 127\.0\.0\.1:{closed}", 1),
    ("request-not-a-tracker", ["request", "k", "--tracker", f"{H}:{{garbage}}",
                               "--timeout", "3"], r"127\.0\.0\.1:{garbage}.*it is an HTTP server", 1),
    ("request-bad-env-port", ["request", "k"], r"TVM_TRACKER_PORT=abc is not a port", 2,
     {"TVM_TRACKER_PORT": "abc"}),
    # store
    ("store-bad-limit", ["store", "--max-keys", "0"], r"limits must be > 0", 2),
    ("store-port-in-use", ["store", "--host", H, "--port", "{busy}"],
     r"cannot listen on 127\.0\.0\.1 port {busy}", 1),
    # store-cli (against a store where one is needed: see test_store_cli_*)
    ("store-cli-no-op", ["store-cli", f"{H}:9"], r"missing arguments", 2),
    ("store-cli-bad-address", ["store-cli", "nocolon", "get", "k"], r"nocolon is not HOST:PORT", 2),
    ("store-cli-closed", ["store-cli", f"{H}:{{closed}}", "--timeout", "2", "get", "k"],
     r"cannot reach a store at 127\.0\.0\.1:{closed}", 1),
    ("store-cli-not-a-store", ["store-cli", f"{H}:{{garbage}}", "--timeout", "3", "get", "k"],
     r"127\.0\.0\.1:{garbage}.*it is an HTTP server", 1),
    ("store-cli-bad-dialect", ["store-cli", f"{H}:9", "--dialect", "v3", "get", "k"],
     r"--dialect v3 is not auto, v1 or v2", 2),
    # md
    ("md-unknown-use", ["md", "frobnicate"], r"unknown use 'frobnicate'", 2),
    ("md-publish-no-name", ["md", "publish", "--value", "v"], r"needs --name", 2),
    ("md-publish-missing-file", ["md", "publish", "--name", "A", "--file", "{missing}",
                                 "--peer", f"{H}:{{closed}}"],
     r"cannot read \S*does-not-exist: No such file", 1),
    ("md-publish-closed-peer", ["md", "publish", "--name", "A", "--value", "v", "--peer",
                                f"{H}:{{closed}}", "--timeout", "2"], r"127\.0\.0\.1:{closed}", 1),
    ("md-publish-no-store", ["md", "publish", "--name", "A", "--value", "v"],
     r"needs --peer IP:PORT or a store", 2),
    ("md-fetch-no-store", ["md", "fetch", "A"], r"needs --peer IP:PORT or a store", 2),
    ("md-invalidate-no-store", ["md", "invalidate", "--name", "A"],
     r"needs --peer IP:PORT or a store", 2),
    ("md-fetch-no-name", ["md", "fetch"], r"fetch: needs the agent's NAME", 2),
    ("md-list-extra-arg", ["md", "list", "extra"], r"not 'extra'", 2),
    ("md-fetch-peer-port-0", ["md", "fetch", "A", "--peer", f"{H}:0"], r"is not IP:PORT", 2),
    ("md-fetch-own-name", ["md", "fetch", "muster-md-cli", "--peer", f"{H}:{{nixl}}"],
     r"its own", 1),
    ("md-long-label", ["md", "fetch", "A", "--label", "l" * 256, "--peer", f"{H}:{{nixl}}"],
     r"--label is longer than 255 bytes", 2),
    ("md-fetch-bad-peer", ["md", "fetch", "A", "--peer", "nocolon"],
     r"--peer nocolon is not IP:PORT", 2),
    ("md-fetch-closed-peer", ["md", "fetch", "A", "--peer", f"{H}:{{closed}}",
                              "--timeout", "2"], r"127\.0\.0\.1:{closed}", 1),
    ("md-fetch-not-an-agent", ["md", "fetch", "A", "--peer", f"{H}:{{garbage}}",
                               "--timeout", "3"], r"127\.0\.0\.1:{garbage}", 1),
    ("md-fetch-other-agent", ["md", "fetch", "Y", "--peer", f"{H}:{{nixl}}", "--timeout", "5"],
     r"the agent at 127\.0\.0\.1:{nixl} is 'X', not 'Y'", 1),
    ("md-fetch-label-over-p2p", ["md", "fetch", "X", "--label", "part", "--peer",
                                 f"{H}:{{nixl}}", "--timeout", "5"], r"label 'part'", 1),
    ("md-fetch-closed-tcpstore", ["md", "fetch", "A", "--tcpstore", f"{H}:{{closed}}",
                                  "--timeout", "2"], r"127\.0\.0\.1:{closed}", 1),
    ("md-fetch-closed-etcd", ["md", "fetch", "A", "--etcd", f"http://{H}:{{closed}}",
                              "--timeout", "2"], r"127\.0\.0\.1:{closed}", 1),
    ("md-fetch-bad-tcpstore", ["md", "fetch", "A", "--tcpstore", "nocolon"], r"nocolon", None),
    ("md-invalidate-no-name", ["md", "invalidate"], r"needs --name", 2),
    ("md-list-no-store", ["md", "list"], r"needs a store", 2),
    ("md-list-closed-tcpstore", ["md", "list", "--tcpstore", f"{H}:{{closed}}",
                                 "--timeout", "2"], r"127\.0\.0\.1:{closed}", 1),
    # model
    ("model-no-use", ["model"], r"usage: muster model", 2),
    ("model-unknown-use", ["model", "frobnicate"], r"usage: muster model", 2),
    ("model-gen-no-out", ["model", "gen", "--widths", "2,2"], r"needs --out", 2),
    ("model-gen-bad-size", ["model", "gen", "--out", "{tmp}/g", "--size", "lots"],
     r"\"lots\" is not a size", 2),
    ("model-gen-bad-widths", ["model", "gen", "--out", "{tmp}/g", "--widths", "5"],
     r"--widths", 2),
    ("model-gen-bad-act", ["model", "gen", "--out", "{tmp}/g", "--widths", "2,2",
                           "--act", "frob"], r"frob", None),
    ("model-gen-unwritable", ["model", "gen", "--out", "{unwritable}", "--widths", "2,2"],
     r"muster-cannot-write-here", 1),
    ("model-input-no-args", ["model", "input"], r"needs --model DIR and --out FILE", 2),
    ("model-input-missing-model", ["model", "input", "--model", "{missing}", "--out",
                                   "{tmp}/i"], r"does-not-exist", 1),
    ("model-input-junk-model", ["model", "input", "--model", "{tmp}", "--out", "{tmp}/i"],
     r"model\.json", 1),
    ("model-input-unwritable", ["model", "input", "--model", "{model}", "--out",
                                "{unwritable}"], r"muster-cannot-write-here", 1),
    # plan
    ("plan-no-args", ["plan"], r"needs --model PATH and --of N", 2),
    ("plan-missing-model", ["plan", "--model", "{missing}", "--of", "2"],
     r"does-not-exist", 1),
    ("plan-bad-by", ["plan", "--model", "{model}", "--of", "2", "--by", "frob"],
     r"--by", 2),
    ("plan-bad-budget", ["plan", "--model", "{model}", "--budgets", "1K,lots"],
     r"\"lots\" is not a size", 2),
    ("plan-too-many-stages", ["plan", "--model", "{model}", "--of", "99"], r"stage", 1),
    ("plan-stages-alias", ["plan", "--model", "{model}", "--stages", "x"],
     r"--stages wants an integer", 2),
    ("plan-budgets-too-small", ["plan", "--model", "{model}", "--budgets", "1,1"],
     r"more than the largest budget", 1),
    # stage
    ("stage-no-args", ["stage"], r"needs --model PATH", 2),
    ("stage-missing-model", ["stage", "--model", "{missing}", "--stage", "0", "--of", "1"],
     r"does-not-exist", 1),
    ("stage-missing-plan", ["stage", "--model", "{model}", "--stage", "0", "--plan",
                            "{missing}"], r"cannot read --plan \S*does-not-exist", 2),
    ("stage-junk-plan", ["stage", "--model", "{model}", "--stage", "0", "--plan", "{junk}"],
     r"junk", 2),
    ("stage-out-of-range", ["stage", "--model", "{model}", "--stage", "5", "--of", "2"],
     r"stage 5", 1),
    ("stage-port-in-use", ["stage", "--model", "{model}", "--stage", "0", "--of", "1",
                           "--host", H, "--port", "{busy}"],
     r"cannot listen on 127\.0\.0\.1 port {busy}", 1),
    ("stage-bad-frame-size", ["stage", "--model", "{model}", "--stage", "0", "--of", "1",
                              "--max-frame", "lots"], r"--max-frame a size", 2),
    ("stage-bad-frame-size-alias", ["stage", "--model", "{model}", "--stage", "0", "--of", "1",
                                    "--max-frame-bytes", "lots"], r"--max-frame a size", 2),
    # run
    ("run-no-args", ["run"], r"needs --input FILE", 2),
    ("run-missing-input", ["run", "--input", "{missing}", "--model", "{model}"],
     r"does-not-exist", 1),
    ("run-junk-input", ["run", "--input", "{junk}", "--model", "{model}"], r"junk", 1),
    ("run-missing-model", ["run", "--input", "{input}", "--model", "{missing}"],
     r"does-not-exist", 1),
    ("run-closed-stage", ["run", "--input", "{input}", "--stages", f"{H}:{{closed}}",
                          "--connect-timeout", "1"], r"127\.0\.0\.1:{closed}", 1),
    ("run-not-a-stage", ["run", "--input", "{input}", "--stages", f"{H}:{{garbage}}",
                         "--connect-timeout", "1", "--io-timeout", "3"],
     r"127\.0\.0\.1:{garbage}", 1),
    ("run-bad-tracker", ["run", "--input", "{input}", "--tracker", "nocolon", "--key", "k",
                         "--model", "{model}"], r"--tracker nocolon is not HOST:PORT", 2),
    ("run-tracker-without-key", ["run", "--input", "{input}", "--tracker", f"{H}:9",
                                 "--model", "{model}"], r"needs --key", 2),
    ("run-bad-weights", ["run", "--input", "{input}", "--tracker", f"{H}:9", "--key", "k",
                         "--model", "{model}", "--weights", "frob"], r"--weights", 2),
    ("run-closed-tracker", ["run", "--input", "{input}", "--tracker", f"{H}:{{closed}}",
                            "--key", "k", "--model", "{model}", "--device-timeout", "2",
                            "--quiet"], r"cannot reach the tracker at 127\.0\.0\.1:{closed}: "
                                        r"connection refused", 1),
    ("run-unwritable-output", ["run", "--input", "{input}", "--model", "{model}",
                               "--output", "{unwritable}"], r"muster-cannot-write-here", 1),
    # generate, serve, tokenize (the LLM commands) and the LLM form of stage
    ("generate-no-model", ["generate"], r"--model PATH is required", 2),
    ("generate-missing-model", ["generate", "--model", "{missing}"], r"does-not-exist", 1),
    ("generate-junk-model", ["generate", "--model", "{junk}"], r"neither GGUF nor", 1),
    ("generate-missing-prompt-file", ["generate", "--model", "{gguf}", "--prompt-file",
                                      "{missing}"], r"does-not-exist", 1),
    ("generate-closed-stage", ["generate", "--model", "{gguf}", "--stages", f"{H}:{{closed}}"],
     r"127\.0\.0\.1:{closed}", 1),
    ("generate-not-a-stage", ["generate", "--model", "{gguf}", "--stages", f"{H}:{{garbage}}",
                              "--io-timeout", "3"], r"127\.0\.0\.1:{garbage}", 1),
    ("generate-bad-tracker", ["generate", "--model", "{gguf}", "--tracker", "nocolon", "--key",
                              "k"], r"--tracker nocolon is not HOST:PORT", 2),
    ("generate-tracker-without-key", ["generate", "--model", "{gguf}", "--tracker", f"{H}:9"],
     r"--tracker goes with --key", 2),
    ("generate-closed-tracker", ["generate", "--model", "{gguf}", "--tracker", f"{H}:{{closed}}",
                                 "--key", "k"], r"cannot reach the tracker at "
                                                r"127\.0\.0\.1:{closed}: connection refused", 1),
    ("generate-bad-device-timeout", ["generate", "--model", "{gguf}", "--device-timeout", "0"],
     r"--device-timeout must be 1 to 86400", 2),
    ("generate-ctx-too-large", ["generate", "--model", "{gguf}", "--ctx", "100000"],
     r"a context of 100000 positions: the model takes 1 to \d+", 1),
    ("generate-bad-prompt-ids", ["generate", "--model", "{gguf}", "--prompt-ids", "a,b"],
     r"--prompt-ids", 2),
    ("generate-parallel-without-file", ["generate", "--model", "{gguf}", "--parallel", "2"],
     r"--prompt-file", 2),
    ("generate-bad-replay-mem", ["generate", "--model", "{gguf}", "--replay-mem", "lots"],
     r"--replay-mem is not a size", 2),
    ("generate-unwritable-logits", ["generate", "--model", "{gguf}", "--max-tokens", "1",
                                    "--dump-logits", "{unwritable}"],
     r"muster-cannot-write-here", 1),
    ("serve-no-model", ["serve"], r"--model PATH is required", 2),
    ("serve-missing-model", ["serve", "--model", "{missing}", "--listen", f"{H}:0"],
     r"does-not-exist", 1),
    ("serve-bad-listen", ["serve", "--model", "{gguf}", "--listen", "nocolon"],
     r"--listen takes HOST:PORT", 2),
    ("serve-port-in-use", ["serve", "--model", "{gguf}", "--listen", f"{H}:{{busy}}"],
     r"cannot listen on 127\.0\.0\.1 port {busy}", 1),
    ("serve-bad-template", ["serve", "--model", "{gguf}", "--listen", f"{H}:0",
                            "--chat-template", "frob"], r"--chat-template is one of", 2),
    ("serve-not-a-stage", ["serve", "--model", "{gguf}", "--listen", f"{H}:0", "--stages",
                           f"{H}:{{garbage}}", "--io-timeout", "3"], r"127\.0\.0\.1:{garbage}", 1),
    ("tokenize-no-tokenizer", ["tokenize", "--text", "hi"], r"needs one of --tokenizer", 2),
    ("tokenize-missing-file", ["tokenize", "--tokenizer", "{missing}", "--text", "hi"],
     r"does-not-exist", 1),
    ("tokenize-junk-tokenizer", ["tokenize", "--tokenizer", "{junk}", "--text", "hi"],
     r"not valid JSON", 1),
    ("tokenize-llama2c-without-vocab", ["tokenize", "--llama2c", "{tok}", "--text", "hi"],
     r"--llama2c with --vocab", 2),
    ("tokenize-decode-not-ids", ["tokenize", "--llama2c", "{tok}", "--vocab", "512",
                                 "--decode", "--text", "abc"], r"not a list of ids", 2),
    ("tokenize-junk-gguf-meta", ["tokenize", "--gguf-meta", "{junk}", "--text", "hi"],
     r"^muster tokenize: \S*junk: not a JSON object", 1),
    ("tokenize-bad-gguf-meta", ["tokenize", "--gguf-meta", "{gguf_meta}", "--text", "hi"],
     r"^muster tokenize: \S*meta\.json: tokenizer\.ggml\.model \"frob\" is not supported", 1),
    ("tokenize-bad-hf", ["tokenize", "--tokenizer", "{tmp}/tok", "--text", "hi"],
     r"^muster tokenize: \S*tok: normalizer\.type \"Frob\" is not supported", 1),
    ("stage-llm-out-of-range", ["stage", "--model", "{gguf}", "--stage", "5", "--of", "2"],
     r"stage 5 of 2", 1),
    ("stage-llm-bad-layers", ["stage", "--model", "{gguf}", "--stage", "0", "--layers", "9:3"],
     r"--layers takes A:B", 2),
    ("stage-llm-port-in-use", ["stage", "--model", "{gguf}", "--stage", "0", "--of", "1",
                               "--host", H, "--port", "{busy}"],
     r"cannot listen on 127\.0\.0\.1 port {busy}", 1),
    # demo
    ("demo-extra-arg", ["demo", "extra"], r"too many arguments", 2),
    ("demo-missing-model", ["demo", "--model", "{missing}"],
     r"cannot copy the model \S*does-not-exist", 1),
    # bench
    ("bench-no-use", ["bench"], r"usage: muster bench", 2),
    ("bench-unknown-use", ["bench", "frobnicate"], r"usage: muster bench", 2),
    ("bench-tracker-no-target", ["bench", "tracker"], r"--target", 2),
    ("bench-tracker-closed", ["bench", "tracker", "--target", f"{H}:{{closed}}",
                              "--duration", "1"], r"127\.0\.0\.1:{closed}: Connection refused", 1),
    ("bench-store-no-target", ["bench", "store"], r"--target", 2),
    ("bench-store-closed", ["bench", "store", "--target", f"{H}:{{closed}}",
                            "--duration", "1"], r"127\.0\.0\.1:{closed}: Connection refused", 1),
    ("bench-md-bad-backend", ["bench", "md", "--backend", "frob"], r"frob|--backend", 2),
    ("bench-md-bad-endpoint", ["bench", "md", "--backend", "tcpstore", "--endpoint",
                               "nocolon"], r"\"nocolon\" is not host:port", 1),
    ("bench-store-bad-dialect", ["bench", "store", "--target", f"{H}:9", "--dialect", "v9"],
     r"--dialect v9", 2),
    ("bench-pipeline-too-deep", ["bench", "pipeline", "--of", "16",
                                 "--layers-per-stage", "20"], r"layers-per-stage", 2),
    ("bench-pipeline-bad-only", ["bench", "pipeline", "--only", "frob"], r"frob|--only", 2),
    ("bench-kern-bad-type", ["bench", "kern", "--types", "FROB"], r"--types", 2),
]


def expand(value, ctx):
    text = str(value)
    text = text.replace("{busy+1}", str(ctx["busy"] + 1))
    for key, v in ctx.items():
        text = text.replace("{" + key + "}", str(v))
    return text


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_failure_says_why(muster_bin, ctx, case):
    _, args, why, code, *rest = case
    env = rest[0] if rest else None
    args = [expand(a, ctx) for a in args]
    done = run(muster_bin, args, env=env)
    # a demo that fails keeps its directory for its log; not ours to keep
    for kept in re.findall(r"(/tmp/muster-demo-\w+)/demo\.log, kept", done.stderr):
        shutil.rmtree(kept, ignore_errors=True)
    assert_says_why(done, expand(why, ctx), args, code)


def test_store_cli_failures_against_a_store(muster_bin, muster_store):  # noqa: F811
    """Operations a store refuses or that cannot finish: each says why."""
    srv = muster_store()
    at = f"{H}:{srv.port}"
    cases = [
        (["frobnicate"], r"unknown operation 'frobnicate'", 2),
        (["get"], r"get takes 1 argument", 2),
        (["set", "k"], r"set takes 2 argument", 2),
        (["wait"], r"wait takes at least 1 key", 2),
        (["check"], r"check takes at least 1 key", 2),
        (["add", "k", "lots"], r"lots is not an integer", 2),
        (["--timeout", "1", "get", "never-set"], r"get never-set: timed out", 1),
        (["--timeout", "1", "wait", "never-set"], r"timed out", 1),
    ]
    for extra, why, code in cases:
        args = ["store-cli", at, *extra]
        assert_says_why(run(muster_bin, args), why, args, code)


def timed(muster_bin, args):
    t0 = time.monotonic()
    done = run(muster_bin, args)
    return done, time.monotonic() - t0


def test_device_wait_says_what_the_tracker_has(muster_bin, ctx, muster_tracker, muster_server):
    """A wrong key, or more devices than are registered: the wait is
    --device-timeout, and the error says what the tracker has (which keys,
    how many free), never "Connection timed out"; a tracker that is not
    running is said at once; a --ctx the model cannot take is refused
    before any device is asked for or any weight streamed."""
    tracker = muster_tracker()
    muster_server(tracker=tracker, key="k")
    at = f"{H}:{tracker.port}"
    gen = ["generate", "--model", GGUF, "--max-tokens", "1", "--tracker", at]
    run_ = ["run", "--input", ctx["input"], "--model", ctx["model"], "--tracker", at]
    cases = [
        ([*gen, "--key", "wrong", "--device-timeout", "2"],
         r'no device of key "wrong" came from the tracker at 127\.0\.0\.1:\d+ within 2 s '
         r'\(the wait is --device-timeout\): it has no device of key "wrong"; its keys: '
         r'"k" \(1 of 1 free\)'),
        ([*gen, "--key", "k", "--devices", "3", "--device-timeout", "2"],
         r'only 1 of 3 devices of key "k" came from the tracker at 127\.0\.0\.1:\d+ within '
         r'2 s \(the wait is --device-timeout\): it has 1 device of key "k" \(1 granted to '
         r'this job\), 0 free'),
        ([*run_, "--key", "wrong", "--device-timeout", "2", "--quiet"],
         r'no device of key "wrong" came .* its keys: "k" \(1 of 1 free\)'),
        ([*run_, "--key", "wrong", "--request-timeout", "2", "--quiet"],  # the old spelling
         r'no device of key "wrong" came .* within 2 s'),
    ]
    for args, why in cases:
        done, took = timed(muster_bin, args)
        assert_says_why(done, why, args, 1)
        assert "timed out" not in done.stderr, done.stderr
        assert took < 20, (args, took)
    # the narration says it before the wait, too
    done, _ = timed(muster_bin, [*gen, "--key", "wrong", "--device-timeout", "1"])
    assert re.search(r'it has no device of key "wrong".*waiting up to 1 s', done.stderr), \
        done.stderr
    # not running: at once, and not "within 30 s"
    done, took = timed(muster_bin, [*gen[:-1], f"{H}:{ctx['closed']}", "--key", "k"])
    assert_says_why(done, r"connection refused", gen, 1)
    assert "within" not in done.stderr and took < 5, (done.stderr, took)
    # a context the model cannot take: before the tracker is asked
    args = [*gen, "--key", "k", "--ctx", "100000"]
    done, _ = timed(muster_bin, args)
    assert_says_why(done, r"a context of 100000 positions: the model takes 1 to \d+", args, 1)
    assert "streamed" not in done.stderr and "asking the tracker" not in done.stderr, \
        done.stderr


def test_a_client_names_the_protocol_that_answered(muster_bin, ctx, muster_tracker,
                                                   muster_store, muster_server):  # noqa: F811
    """A client pointed at another muster server (or something else) says
    what answered, not only "connection closed by peer"."""
    tracker, store, server = muster_tracker(), muster_store(), muster_server()
    cases = [
        (["query", "--host", H, "--port", store.port, "--timeout", "5"],
         r"cannot reach a tracker at 127\.0\.0\.1:\d+: .*; it is a TCPStore \(muster store, "
         r"torch's\), not a TVM RPC tracker"),
        (["store-cli", f"{H}:{tracker.port}", "--timeout", "5", "get", "k"],
         r"; it is a TVM RPC tracker \(muster tracker, TVM's rpc_tracker\), not a TCPStore"),
        (["query", "--host", H, "--port", server.port, "--timeout", "5"],
         r"; it is a TVM RPC server \(muster server, TVM's rpc_server\), not a TVM RPC tracker"),
        (["store-cli", f"{H}:{server.port}", "--timeout", "5", "get", "k"],
         r"; it is a TVM RPC server .*, not a TCPStore"),
        (["request", "k", "--tracker", f"{H}:{store.port}", "--timeout", "5"],
         r"; it is a TCPStore .*, not a TVM RPC tracker"),
        (["generate", "--model", GGUF, "--tracker", f"{H}:{store.port}", "--key", "k"],
         r"cannot reach a tracker at 127\.0\.0\.1:\d+: .*; it is a TCPStore \(muster store, "
         r"torch's\), not a TVM RPC tracker"),
    ]
    for args, why in cases:
        done, took = timed(muster_bin, args)
        assert_says_why(done, why, args, 1)
        assert took < 15, (args, took)


def help_options(muster_bin, words):
    """(name, metavar) of each option a subcommand's --help lists."""
    done = run(muster_bin, [*words, "--help"])
    assert done.returncode == 0, (words, done)
    text = done.stdout.split("\noptions:\n", 1)
    if len(text) < 2:
        return []
    found = re.findall(r"^  --([a-z0-9-]+)(?: (\S+))?", text[1], re.M)
    return [(name, meta) for name, meta in found if name != "help"]


@pytest.mark.parametrize("words", COMMANDS,
                         ids=[" ".join(map(str, c[:2])) for c in COMMANDS])
def test_every_option_refuses_a_bad_value(muster_bin, words):
    """An unknown option, an option without its value, and a numeric one
    given a word are refused before anything starts, naming the option."""
    args = [*words, "--no-such-option"]
    assert_says_why(run(muster_bin, args), r"unknown option --no-such-option", args, 2)
    for name, meta in help_options(muster_bin, words):
        if not meta:
            args = [*words, f"--{name}=1"]
            assert_says_why(run(muster_bin, args), rf"--{name}=1 takes no value", args, 2)
            continue
        args = [*words, f"--{name}"]
        assert_says_why(run(muster_bin, args), rf"--{name} needs a value", args, 2)
        if meta in NUMERIC:
            args = [*words, f"--{name}", "lots"]
            assert_says_why(run(muster_bin, args), rf"--{name}|lots|sizes like", args, 2)
